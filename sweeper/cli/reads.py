"""Commands that read certification results: `envelope` and `table` (`sweeper status` is
cli/status.py). Each parses its options, reads the rows through the front door
(`sweeper.api`: the selection, the envelope, the coverage) and renders them. pandas, pyarrow
and matplotlib are imported inside the commands, so listing them (`--help`) stays fast; none
imports torch or Ray (tests/test_cli_speed.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sweeper.api import selection
from sweeper.api.sweep import DEFAULT_STORAGE
from sweeper.cli import display
from sweeper.cli.common import (
    Digits,
    LatestExperiment,
    Only,
    Storage,
    Wide,
    app,
    fail,
    resolve_experiment,
    warn_left_out,
)
from sweeper.cli.options import AttestedOnly, Strict
from sweeper.cli.read_notes import (
    attestation_note,
    attested_texts,
    beyond_note,
    covered_note,
    covered_texts,
    exit_if_left_out,
    partial_note,
    print_coverage,
    print_settings,
)
from sweeper.cli.uncertainty_view import (
    CI_HEADER,
    model_interval_note,
    model_interval_texts,
    radii_that_matter,
    uncertainty_note,
    uncertainty_texts,
)
from sweeper.report.formats import DIGITS, ENVELOPE_PRIORITY, FORMATS, SCREEN_LABELS
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    from sweeper.api.reading import Reading

WithEmpirical = Annotated[
    bool,
    typer.Option(
        "--empirical",
        help="Add the best empirical accuracy under SmoothAdv-PGD (each model's strongest "
        "attack over m_test) at the attacked radii; dashed on --plot (`sweeper empirical`).",
    ),
]


@app.command()
def envelope(
    storage: Storage = DEFAULT_STORAGE,
    experiment: LatestExperiment = None,
    radius: Annotated[float | None, typer.Option("--radius", help="One ℓ2 radius.")] = None,
    radii: Annotated[
        str | None,
        typer.Option("--radii", help="start:stop:step (stop included) or a list 0,0.5,1."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="A column to group by (sigma, method, attack, m_train, ...)."),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"Output: {', '.join(FORMATS)}.")] = "table",
    plot: Annotated[
        str | None, typer.Option("--plot", help="Write a figure (.png/.pdf/.svg) of the envelope.")
    ] = None,
    only: Only = None,
    empirical: WithEmpirical = False,
    strict: Strict = False,
    attested_only: AttestedOnly = False,
    wide: Wide = False,
    digits: Digits = DIGITS,
) -> None:
    """Upper-envelope certified accuracy over every model of an experiment, and who got it."""
    from sweeper.api.sweep import read_columns

    grid, problems = _envelope_options(fmt, radius, radii, plot)
    read = load_selected(
        storage, experiment, only, problems, read_columns(by), attested_only=attested_only
    )
    table = read.envelope(grid, by)
    by = read.group(by)
    curve = None
    if empirical:
        table, curve = _empirical_overlay(read, table, by)
    _print_table(table, fmt, f"upper envelope of {read.exp.name}", wide, digits)
    _print_notes(read, grid)
    attestation_note(read.results, table, attested_only)
    if plot:
        _plot(read, plot, by, curve, grid)
    exit_if_left_out(read, strict)


def _print_notes(read: Reading, grid: list[float]) -> None:
    """On stderr: the settings, the envelope strategy's soundness (one line per `_envelope`
    setting: `Reading.guarantee_notes`), what was read."""
    print_settings(read)
    for line in read.guarantee_notes(grid):
        display.echo(f"envelope strategy, {line}", err=True)
    print_coverage(read)


def _plot(read: Reading, plot: str, by: str | None, curve, grid: list[float]) -> None:
    """`--plot`: the envelope (per `by` group, the empirical curve) from 0 to the largest radius."""
    from sweeper.report.render import plot_envelope

    plot_envelope(
        read.frame,
        plot,
        by,
        title=f"{read.exp.name}: {read.models()} models",
        empirical=curve,
        radii=grid,
        cover=read.plot_cover(by),
    )
    display.echo(f"figure written to {plot}", err=True)


@app.command()
def table(
    storage: Storage = DEFAULT_STORAGE,
    experiment: LatestExperiment = None,
    radii: Annotated[
        str | None,
        typer.Option(
            "--radii",
            help="start:stop:step or a list 0,0.5,1 (default 0:2.25:0.25; on the terminal up to "
            "the largest radius some model certifies a point at).",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"Output: {', '.join(FORMATS)}.")] = "table",
    only: Only = None,
    strict: Strict = False,
    attested_only: AttestedOnly = False,
    wide: Wide = False,
    digits: Digits = DIGITS,
) -> None:
    """Per-model table: certified accuracy per radius and ACR, the best of each column marked
    (like the papers' tables); models sorted by ACR. On the terminal the radii come first,
    then the other hyperparameters and each radius's 95% CI, as many as fit (--wide: all);
    without --radii, the radii past the last one any model certifies a point at are left out
    (csv, json and markdown hold them all)."""
    problems = _format_problems(fmt)
    grid = radii_option(radii, problems)
    read = load_selected(
        storage, experiment, only, problems, pruned_ok=True, attested_only=attested_only
    )
    rows, beyond = radii_that_matter(read.table(grid), fmt == "table" and radii is None)
    _print_model_table(rows, fmt, read.exp.name, wide, digits)
    beyond_note(beyond)
    model_interval_note(rows)
    partial_note(rows)
    print_settings(read)
    print_coverage(read)
    attestation_note(read.results, rows, attested_only)
    exit_if_left_out(read, strict)


def _print_model_table(rows, fmt: str, name: str, wide: bool, digits: int) -> None:
    """The per-model table in `fmt`, the best of each column marked (* or bold)."""
    from sweeper.report.pruned import partial_texts, pruned_texts
    from sweeper.report.render import best_rows, render, texts, to_markdown

    best = best_rows(rows)
    text = partial_texts(rows, pruned_texts(rows, texts(rows, digits), digits))
    text = attested_texts(rows, text, "trial_id")
    for col, index in best.items():
        text.loc[list(index), col] = text.loc[list(index), col].map(
            (lambda v: f"**{v}**") if fmt == "markdown" else (lambda v: f"{v}*")
        )
    text = model_interval_texts(text)
    if fmt == "markdown":
        display.echo(to_markdown(text))
    elif fmt == "table":
        columns = [
            display.Column(
                c if c == "trial_id" else SCREEN_LABELS.get(c, c),
                text[c].tolist(),
                c not in rows or rows[c].dtype.kind in "fiu",
                frozenset(best.get(c, ())),
            )
            for c in text.columns
        ]
        display.print_table(
            f"certified accuracy per model of {name} (best per column *)",
            columns,
            _model_table_priority([c.header for c in columns]),
            wide,
        )
    else:
        display.echo(render(rows, fmt).rstrip("\n"))


def _model_table_priority(headers: list[str]) -> list[str]:
    """The columns to keep first when the table is too wide: what tells the models apart and
    how they do, the radii, then the other hyperparameters, then each radius's interval."""
    radii = [h for h in headers if h.startswith("r=")]
    points = [h for h in radii if not h.endswith(CI_HEADER)]
    keys = [h for h in headers if h not in (*radii, "points", "max r")]
    order = ["trial_id", "status", "strategy", "method", "σ", "ACR", *points, *keys, *radii]
    order += ["points", "max r"]
    return list(dict.fromkeys(order))


def _envelope_options(
    fmt: str, radius: float | None, radii: str | None, plot: str | None
) -> tuple[list[float], list[str]]:
    """(the radii `sweeper envelope` was asked for, every problem with its options)."""
    problems = _format_problems(fmt)
    if radius is not None and radii is not None:
        problems.append("pass --radius or --radii, not both")
    if radius is not None and radius < 0:
        problems.append(f"--radius must be >= 0 (got {radius})")
    if plot is not None and plot.rsplit(".", 1)[-1].lower() not in ("png", "pdf", "svg"):
        problems.append(f"--plot {plot!r}: the file name must end in .png, .pdf or .svg")
    return ([radius] if radius is not None else radii_option(radii, problems)), problems


def _empirical_overlay(read: Reading, table, by: str | None):
    """(the envelope table with `empirical_accuracy`, the empirical envelope curve), what was
    attacked said on stderr."""
    got = read.empirical(table, by)
    warn_left_out(got.left_out)
    display.echo(
        f"empirical: {display.plural(got.models, 'model')}, {got.points} attacked points; "
        "accuracy under each model's "
        "strongest attack (lowest over m_test), best model per radius",
        err=True,
    )
    if got.missing_shards:
        display.echo(f"{got.missing_shards} empirical settings are missing shards", err=True)
    return got.table, got.curve


def _format_problems(fmt: str) -> list[str]:
    return [] if fmt in FORMATS else [f"--format {fmt!r} is not one of {', '.join(FORMATS)}"]


def radii_option(text: str | None, problems: list[str]) -> list[float]:
    from sweeper.api.sweep import parse_radii

    try:
        return parse_radii(text or "0:2.25:0.25")
    except ProblemsError as e:
        problems.extend(e.problems)
        return []


def load_selected(
    storage: str,
    experiment: str | None,
    only: str | None,
    problems: list[str],
    columns: list[str] | None = None,
    pruned_ok: bool = False,
    attested_only: bool = False,
) -> Reading:
    """The experiment's results read through the front door (`Sweep.read`); exits 2 on any
    problem so far, with those of --only (`pruned_ok`: an --only that keeps only pruned models
    is none, and selects no row); the results files left out (failing validation) named, and
    the data-dependent models awaiting their memory pass counted, on stderr. `columns`: read
    only these (and the --only columns), not every results column."""
    from sweeper.api.sweep import Sweep

    problems = [*problems, *selection.only_problems(only)]
    if problems:
        fail(problems)
    exp = resolve_experiment(storage, experiment)
    read = Sweep(storage=exp.storage, experiment=exp.name, only=only).read(
        columns, pruned_ok, attested_only
    )
    warn_left_out(read.left_out)
    if unsound := read.unsound:
        display.echo(
            f"{display.plural(unsound, 'data-dependent model')} "
            f"{'awaits its' if unsound == 1 else 'await their'} memory pass and "
            f"{'is' if unsound == 1 else 'are'} left out: "
            "re-run `sweeper certify <space> --ddrs` to finish them",
            err=True,
        )
    return read


def _print_table(table, fmt: str, title: str, wide: bool = False, digits: int = DIGITS) -> None:
    """The envelope in `fmt`: no winner where nothing is certified (null in csv/json, - else).
    csv/json carry the interval and the runner-up comparison as numbers; the table and
    markdown show the interval in one column and mark with ≈ a winner the test points do not
    tell apart from its runner-up (`envelope_uncertainty`), and say so below."""
    from sweeper.report.render import no_winner, render, texts, to_markdown

    if table.columns[0] != "radius":  # --by: a group without the setting (attack) is `none`
        key = table.columns[0]
        table = table.assign(
            **{key: table[key].astype(object).where(table[key].notna(), selection.NONE)}
        )
    if fmt in ("csv", "json"):
        display.echo(render(no_winner(table), fmt).rstrip("\n"))
        return
    text = covered_texts(table, uncertainty_texts(table, texts(table, digits)))
    text = attested_texts(table, text)
    if fmt == "markdown":
        display.echo(to_markdown(text))
    else:
        group = [] if table.columns[0] == "radius" else [table.columns[0]]
        cols = [
            c
            for c in text.columns
            if (c in ENVELOPE_PRIORITY or c in group) and not text[c].isin(["", "-"]).all()
        ]
        numeric = {c: c in table and table[c].dtype.kind in "fiu" for c in cols}
        heading = {c: SCREEN_LABELS.get(c, str(c)) for c in cols}
        columns = [display.Column(heading[c], text[c].tolist(), numeric[c]) for c in cols]
        priority = [heading[c] for c in [*group, *ENVELOPE_PRIORITY] if c in heading]
        display.print_table(title, columns, list(dict.fromkeys(priority)), wide)
    uncertainty_note(table)
    covered_note(table)
