"""`sweeper data put DATASET --from DIR --to s3://bucket/prefix`: put a local copy of a data set
on an object store, with the manifest from which every node of a cluster without a shared disk
fetches and verifies it (`--data-dir s3://bucket/prefix`, `trainables.data_cache`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sweeper.cli.common import app, fail, sweeper_command
from sweeper.cli.display import echo
from trainables.kernel.catalog import DATASETS

data_app = typer.Typer(
    help="Data sets on an object store, for clusters without a shared disk.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


@data_app.command("put")
def put(
    dataset: Annotated[str, typer.Argument(help=f"The data set: {', '.join(DATASETS)}.")],
    source: Annotated[
        str,
        typer.Option("--from", help="The local directory holding it, as --data-dir would name it."),
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
    from trainables import data_cache

    problems = []
    if dataset not in DATASETS:
        problems.append(f"unknown data set {dataset!r} (valid: {', '.join(DATASETS)})")
    root = Path(source).expanduser()
    if not root.is_dir():
        problems.append(f"--from {source}: no such directory (give the data set's directory)")
    if problem := data_cache.uri_problem(target):
        problems.append(f"--to {problem}")
    if problems:
        fail(problems)
    from trainables.datasets import DataError, dataset_files  # torch: only to put

    try:
        files = dataset_files(dataset, root)
    except DataError as e:  # worded for --data-dir: say the flag of this command
        what = str(e).split("; pass --data-dir")[0]
        fail([f"{what}{'; give --from the directory that holds it' if what != str(e) else ''}"])
    summary = data_cache.put(root, files, target, dataset)  # RemoteDataError: exit 2
    sent = f"{summary.uploaded} sent ({summary.bytes:,} bytes)"
    echo(f"put {dataset}: {summary.files} files, {sent}, the others unchanged on the bucket")
    echo(f"manifest: {summary.manifest}")
    echo(f"Next: {sweeper_command()} run grid SPACE --data-dir {target.rstrip('/')}")
