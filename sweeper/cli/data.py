"""`sweeper data put DATASET --from DIR --to s3://bucket/prefix`: put a local copy of a data set
on an object store, with the manifest from which every node of a cluster without a shared disk
fetches and verifies it (`--data-dir s3://bucket/prefix`, `trainables.data_cache`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from sweeper.api.surface import data_credentials_problem
from sweeper.cli.common import app, fail, sweeper_command
from sweeper.cli.display import echo
from trainables.data_cache import PSEUDO
from trainables.kernel.catalog import DATASETS

data_app = typer.Typer(
    help="Data sets on an object store, for clusters without a shared disk.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


@data_app.command("put")
def put(
    dataset: Annotated[
        str,
        typer.Argument(
            help=f"The data set: {', '.join(DATASETS)}; or pseudo (self-training's "
            "pseudo-labelled data, then pseudo_data: the --to URI)."
        ),
    ],
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="The local directory holding it, as --data-dir would name it (pseudo: the "
            ".npz file or <label>/ directory pseudo_data would name).",
        ),
    ],
    target: Annotated[
        str,
        typer.Option("--to", help="Where to put it: s3://bucket/prefix or gs://bucket/prefix."),
    ],
) -> None:
    """Upload the files a data set's loader reads, then their manifest (sizes and sha256).

    Every node given `--data-dir` of that URI fetches the data set once into its cache
    ($SWEEPER_DATA_CACHE, else ~/.cache/sweeper/data), checks each file's hash and reads it
    there. Files already on the bucket with the same hash are not sent again; other data sets
    put at the same URI are kept."""
    from trainables import data_put

    if problems := _put_problems(dataset, source, target):
        fail(problems)
    root = Path(source).expanduser()
    root, files = pseudo_files(root) if dataset == PSEUDO else (root, _dataset_files(dataset, root))
    summary = data_put.put(root, files, target, dataset)  # RemoteDataError (a link too): exit 2
    sent = f"{summary.uploaded} sent ({summary.bytes:,} bytes)"
    echo(f"put {dataset}: {summary.files} files, {sent}, the others unchanged on the bucket")
    echo(f"manifest: {summary.manifest}")
    if dataset == PSEUDO:
        echo(f"Next: in the space, pseudo_data: {target.rstrip('/')}")
        return
    echo(f"Next: {sweeper_command()} run grid SPACE --data-dir {target.rstrip('/')}")


def _put_problems(dataset: str, source: str, target: str) -> list[str]:
    """What is wrong with `data put`'s arguments, one line each: credentials in --from or --to
    alone (no other line may echo them, `data_credentials_problem`), else the data set's name,
    --from and the data URI."""
    from trainables import data_cache

    secrets = [data_credentials_problem(f, v) for f, v in (("--from", source), ("--to", target))]
    if any(secrets):
        return list(filter(None, secrets))
    problems = []
    if dataset not in (*DATASETS, PSEUDO):
        problems.append(f"unknown data set {dataset!r} (valid: {', '.join(DATASETS)}, {PSEUDO})")
    root = Path(source).expanduser()
    if dataset == PSEUDO and not root.exists():
        problems.append(f"--from {source}: no such file or directory (an .npz or <label>/ folders)")
    elif dataset != PSEUDO and not root.is_dir():
        problems.append(f"--from {source}: no such directory (give the data set's directory)")
    if problem := data_cache.uri_problem(target):
        problems.append(f"--to {problem}")
    return problems


def _dataset_files(dataset: str, root: Path) -> list[str]:
    """The files `dataset`'s loader reads under `root` (exit 2 if they are not there)."""
    from trainables.datasets import DataError, dataset_files  # torch: only to put

    try:
        return dataset_files(dataset, root)
    except DataError as e:  # worded for --data-dir: say the flag of this command
        what = str(e).split("; pass --data-dir")[0]
        fail([f"{what}{'; give --from the directory that holds it' if what != str(e) else ''}"])


def pseudo_files(path: Path) -> tuple[Path, list[str]]:
    """(the directory to put from, its files): an .npz file alone, or every file below a
    <label>/ folder (hidden ones left out), as `trainables.pseudo.load_pseudo` reads them.
    A symlink there (the file given, or anything below the folder) is refused, exit 2: its
    target is never uploaded (`trainables.data_put.put` opens no link either)."""
    if path.is_symlink() or (links := _links_below(path)):
        fail([f"--from {path}: {_LINK}" if path.is_symlink() else f"--from {links[0]}: {_LINK}"])
    if path.is_file():
        return path.parent, [path.name]
    files = [
        p.relative_to(path).as_posix()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    ]
    if not files:
        fail([f"--from {path}: no files (an .npz file, or <label>/<image> folders)"])
    return path, files


_LINK = "is a symlink: `sweeper data put` follows no link; put the file itself there"


def _links_below(path: Path) -> list[Path]:
    """The symlinks below the directory `path` (none are followed while looking)."""
    found = []
    for folder, dirs, names in os.walk(path):  # followlinks=False: a linked folder is a name
        found += [Path(folder, n) for n in sorted(dirs + names) if Path(folder, n).is_symlink()]
    return found
