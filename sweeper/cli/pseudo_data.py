"""`sweeper pseudo-data PATH --dataset NAME`: check pseudo-labelled data for self-training and
print the `pseudo_fingerprint` a space must give for it."""

from __future__ import annotations

from typing import Annotated

import typer

from sweeper.api.surface import data_credentials_problem
from sweeper.cli.common import app, fail
from sweeper.cli.display import echo
from trainables.kernel.catalog import DATASETS


@app.command("pseudo-data")
def pseudo_data(
    path: Annotated[str, typer.Argument(help="An .npz file or a <label>/<image> directory.")],
    dataset: Annotated[
        str, typer.Option("--dataset", help=f"The data set it is for: {', '.join(DATASETS)}.")
    ],
) -> None:
    """Check pseudo-labelled data (self-training) and print its pseudo_fingerprint, the value a
    space's `pseudo_fingerprint` must have for `pseudo_data: PATH`."""
    if secret := data_credentials_problem("PATH", path):
        fail([secret])
    if dataset not in DATASETS:
        fail([f"unknown --dataset {dataset!r} (valid: {', '.join(DATASETS)})"])
    from trainables.datasets import DataError
    from trainables.pseudo import summarize

    try:
        summary = summarize(path, dataset)
    except DataError as e:
        fail([str(e)])
    echo(f"pseudo_fingerprint: {summary.fingerprint}")
    echo(f"images: {summary.images} of shape {summary.shape}")
    echo(f"labels per class: {summary.per_class}")
