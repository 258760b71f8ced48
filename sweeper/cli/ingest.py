"""`sweeper import DIR`: published certification logs into an experiment's results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sweeper.cli.common import Storage, app, fail
from sweeper.cli.display import echo
from sweeper.ingest.log_reader import DEFAULT_MAX_ROWS
from sweeper.ingest.sets import IngestError
from sweeper.results.storage import DEFAULT_STORAGE, Experiment

if TYPE_CHECKING:
    from sweeper.ingest.importer import ImportReport, Model


LogDirectory = Annotated[
    str,
    typer.Argument(help="A directory of certify.py logs (searched recursively), or one log."),
]
ImportExperiment = Annotated[
    str | None,
    typer.Option(
        "--experiment",
        help="The experiment to import into (required): one of yours, to put "
        "the logs beside its models, or a new name.",
    ),
]
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="key=value (repeatable): a hyperparameter the directory names do not give, or "
        "n0/n/alpha/sigma_cert (defaults: 100, 100000, 0.001, the σ in the file name).",
    ),
]
MaxRows = Annotated[
    int,
    typer.Option(
        "--max-rows", min=1, help="At most this many rows per log (a longer log is skipped)."
    ),
]


@app.command("import")
def import_(
    directory: LogDirectory,
    storage: Storage = DEFAULT_STORAGE,
    experiment: ImportExperiment = None,
    sets: Sets = None,
    max_rows: MaxRows = DEFAULT_MAX_ROWS,
) -> None:
    """Import certification logs of the reference code (Cohen et al., SmoothAdv) as models of an
    experiment: hyperparameters from the directory names (noise_0.25/, PGD_10steps/, eps_255/,
    4-multitrain/, ...) and --set; `sweeper envelope` then shows them beside your own."""
    if experiment is None:
        fail(
            [
                "--experiment is required: the experiment to import into (one of yours, to "
                "put the logs beside it, or a new name)"
            ]
        )
    from sweeper.ingest.importer import import_logs  # pyarrow: only when importing

    exp = Experiment(storage, experiment)
    try:
        report = import_logs(directory, exp, sets or [], max_rows)
    except IngestError as e:
        fail(e.problems)
    _print_report(report)
    if not report.imported and not report.already:
        echo(
            f"error: nothing imported from {directory}: every log was skipped (reasons above); "
            f"no experiment written at {exp.root}",
            err=True,
        )
        raise typer.Exit(1)


def _print_report(report: ImportReport) -> None:
    exp = report.experiment
    echo(f"imported {len(report.imported)} logs ({report.rows} rows) into {exp.name} at {exp.root}")
    for m in report.imported:
        echo(f"  {m.rel} -> {m.cfg.trial_id} {m.cert_id}: {_summary(m)}, {m.rows} rows")
    for m in report.already:
        echo(f"skipped {m.rel}: already imported ({m.cfg.trial_id} {m.cert_id})")
    for rel, why in report.skipped:
        echo(f"skipped {rel}: {why}")
    if report.ignored:
        echo(f"{report.ignored} other files (not certification logs) ignored")
    if report.wrote_sweep:
        echo(f"new experiment {exp.name}: wrote {exp.sweep_json}")
    if report.imported or report.already:
        echo(f"next: sweeper envelope --storage {exp.storage} --experiment {exp.name}")


def _summary(m: Model) -> str:
    cfg = m.cfg
    parts = [cfg.dataset, str(cfg.arch), cfg.method, f"σ={cfg.sigma:g}"]
    if cfg.attack:
        parts += [cfg.attack, f"ε={cfg.epsilon:.10g}", f"T={cfg.steps}"]
    if cfg.m_train is not None:
        parts.append(f"m={cfg.m_train}")
    return " ".join(parts) + f", epochs {cfg.epochs}, σ_cert={m.sigma_cert:g}"
