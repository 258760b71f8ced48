"""Shared pieces of the command line: the Typer apps, the console, common options, errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from sweeper.storage import Experiment
from trainables import fileio

app = typer.Typer(
    help="Sweeps of randomized-smoothing classifiers on Ray: train a grid, CERTIFY every model, read the envelope.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
run_app = typer.Typer(
    help="Train a sweep and certify every model as it finishes.", no_args_is_help=True
)
app.add_typer(run_app, name="run")
# Piped output keeps whole rows instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 160)
DISPLAY = {
    "radius": "radius", "certified_accuracy": "cert. acc", "clean_acc": "clean acc", "trial_id": "winner",
    "method": "method", "attack": "attack", "sigma": "σ", "epsilon": "ε", "steps": "T", "m_train": "m",
    "acr": "ACR", "models": "models", "lam": "λ", "eta": "η",
}  # fmt: skip

Storage = Annotated[
    str, typer.Option("--storage", help="Results location: a path or a URI (s3://...).")
]
ExperimentOpt = Annotated[
    str | None, typer.Option("--experiment", help="Experiment name (default: the space's name).")
]
Address = Annotated[
    str | None,
    typer.Option(
        "--address", help="Ray cluster: auto, host:port or ray://host:port (default: a local Ray)."
    ),
]
DataDir = Annotated[
    str | None,
    typer.Option("--data-dir", help="Directory holding the data set (cifar10, mnist, imagenet)."),
]
Only = Annotated[
    str | None, typer.Option("--only", help="A slice of the grid: key=value[,key=value...].")
]


SkipInvalid = Annotated[
    bool,
    typer.Option(
        "--skip-invalid",
        help="Leave out result files that fail validation (named on stderr) instead of stopping.",
    ),
]


def refuse_invalid(invalid: list[str], skip: bool) -> None:
    """Result files that failed validation: exit 2 naming each, or (--skip-invalid) warn."""
    if skip:
        for line in invalid:
            typer.echo(f"warning: left out {line}", err=True)
        return
    if invalid:
        fail([f"invalid results file {line}: move it away (`sweeper certify` or `sweeper "
              "empirical` recomputes what is missing), or pass --skip-invalid" for line in invalid])  # fmt: skip


def fail(problems: list[str], code: int = 2) -> NoReturn:
    for p in problems:
        typer.echo(f"error: {p}", err=True)
    raise typer.Exit(code)


def resolve_experiment(storage: str, experiment: str | None) -> Experiment:
    """The named experiment, or the most recently written one under `storage`."""
    if experiment:
        return Experiment(storage, experiment)
    sweeps = [
        f
        for f in fileio.list_files(storage, "sweep.json")
        if f.count("/") - storage.count("/") <= 2
    ]
    if not sweeps:
        fail([f"no experiments under --storage {storage}: run `sweeper run grid <space>` first"])
    root = fileio.local_path(storage) if not fileio.is_uri(storage) else None
    if root is not None:
        sweeps.sort(key=lambda f: Path(f).stat().st_mtime)
    name = Path(sweeps[-1]).parent.name
    typer.echo(f"experiment: {name} (pass --experiment to choose another)", err=True)
    return Experiment(storage, name)


def filter_rows(frame, selection: dict):
    for key, value in selection.items():
        if key not in frame:
            fail([f"--only: {key!r} is not a results column"])
        frame = (
            frame[frame[key].astype(object) == value]
            if not isinstance(value, float)
            else frame[(frame[key] - value).abs() < 1e-9]
        )
    return frame
