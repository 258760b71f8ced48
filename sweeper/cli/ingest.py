"""`sweeper import DIR`: published certification logs into an experiment's results."""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer

from sweeper.api.surface import DEFAULT_MAX_ROWS, DEFAULT_STORAGE
from sweeper.api.sweep import Sweep
from sweeper.cli.common import Storage, app, fail
from sweeper.cli.display import echo, plural, terminal_width

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

Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="List each log: the model it was imported as, or why it was skipped (by default, "
        "the models are counted per method and the skipped logs per reason).",
    ),
]
REASONS_SHOWN = 10  # the most frequent reasons a summary names; --verbose lists every log


@app.command("import")
def import_(
    directory: LogDirectory,
    storage: Storage = DEFAULT_STORAGE,
    experiment: ImportExperiment = None,
    sets: Sets = None,
    max_rows: MaxRows = DEFAULT_MAX_ROWS,
    verbose: Verbose = False,
) -> None:
    """Import certification logs of the reference code (Cohen et al., SmoothAdv) as models of an
    experiment: hyperparameters from the directory names (noise_0.25/, PGD_10steps/, eps_255/,
    4-multitrain/, ...) and --set; `sweeper envelope` then shows them beside your own.
    Prints the models imported per method and the logs skipped per reason (--verbose: each
    log)."""
    if experiment is None:
        fail(
            [
                "--experiment is required: the experiment to import into (one of yours, to "
                "put the logs beside it, or a new name)"
            ]
        )
    report = Sweep(storage=storage, experiment=experiment).import_logs(
        directory, sets or [], max_rows
    )
    exp = report.experiment
    _print_report(report, verbose)
    if not report.imported and not report.already:
        echo(
            f"error: nothing imported from {directory}: every log was skipped (reasons above); "
            f"no experiment written at {exp.root}",
            err=True,
        )
        raise typer.Exit(1)


def _print_report(report: ImportReport, verbose: bool) -> None:
    exp = report.experiment
    echo(f"imported {len(report.imported)} logs ({report.rows} rows) into {exp.name}")
    if verbose:
        _print_each(report)
    else:
        _print_counts(report)
    if report.ignored:
        echo(f"{report.ignored} other files (not certification logs) ignored")
    if report.wrote_sweep:
        echo(f"new experiment {exp.name}: wrote {exp.sweep_json}")
    if report.imported or report.already:
        echo(f"next: sweeper envelope --storage {exp.storage} --experiment {exp.name}")


def _print_each(report: ImportReport) -> None:
    """--verbose: a line per log."""
    for m in report.imported:
        echo(f"  {m.rel} -> {m.cfg.trial_id} {m.cert_id}: {_summary(m)}, {m.rows} rows")
    for m in report.already:
        echo(f"skipped {m.rel}: already imported ({m.cfg.trial_id} {m.cert_id})")
    for rel, why in report.skipped:
        echo(f"skipped {rel}: {why}")


def _print_counts(report: ImportReport) -> None:
    """The models per kind, the logs skipped per reason (a log alone with its reason named),
    each line wrapped at the terminal's width."""
    kinds = Counter(_kind(m) for m in report.imported)
    for kind, count in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        _counted(count, kind, len(str(max(kinds.values()))))
    already = [(m.rel, "already imported (the same rows)") for m in report.already]
    skipped = [*already, *report.skipped]
    if not skipped:
        return
    echo(f"skipped {plural(len(skipped), 'log')} (per reason; --verbose lists each):")
    by_reason: dict[str, list[str]] = {}
    for rel, why in skipped:
        by_reason.setdefault(why, []).append(rel)
    ranked = sorted(by_reason.items(), key=lambda kv: -len(kv[1]))  # stable: first seen first
    digits = len(str(len(ranked[0][1])))
    for why, rels in ranked[:REASONS_SHOWN]:
        _counted(len(rels), f"{rels[0]}: {why}" if len(rels) == 1 else why, digits)
    rest = ranked[REASONS_SHOWN:]
    if rest:
        logs = sum(len(rels) for _, rels in rest)
        echo(f"  and {plural(logs, 'log')} for {plural(len(rest), 'other reason')}: --verbose")


def _counted(count: int, text: str, digits: int) -> None:
    """`  640 text`, the text wrapped under itself at the terminal's width."""
    lead = f"  {count:>{digits}} "
    width = max(terminal_width(), len(lead) + 20)
    lines = textwrap.wrap(
        text,
        width,
        initial_indent=lead,
        subsequent_indent=" " * len(lead),
        break_long_words=False,
        break_on_hyphens=False,
    )
    for line in lines:
        echo(line)


def _kind(m: Model) -> str:
    """What the summary counts imported models by: data set, architecture, method, attack."""
    cfg = m.cfg
    return " ".join([cfg.dataset, str(cfg.arch), cfg.method, *([cfg.attack] if cfg.attack else [])])


def _summary(m: Model) -> str:
    cfg = m.cfg
    parts = [cfg.dataset, str(cfg.arch), cfg.method, f"σ={cfg.sigma:g}"]
    if cfg.attack:
        parts += [cfg.attack, f"ε={cfg.epsilon:.10g}", f"T={cfg.steps}"]
    if cfg.m_train is not None:
        parts.append(f"m={cfg.m_train}")
    return " ".join(parts) + f", epochs {cfg.epochs}, σ_cert={m.sigma_cert:g}"
