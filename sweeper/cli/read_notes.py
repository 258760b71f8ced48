"""What the read commands (`envelope`, `table`, `report`) say on stderr about what they
read: the certification settings and each σ's reach, the radii `table` left out, the models
and points read, the planned trials without results and those the envelope strategy pruned,
the data-dependent models, the missing shards, what rests on unattested files (and the †
marking it); and `--strict`'s exit when files or models were left out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from sweeper.cli import display

if TYPE_CHECKING:
    from sweeper.api.reading import Reading
    from sweeper.api.selection import Coverage


def exit_if_left_out(read: Reading, strict: bool) -> None:
    """--strict: exit 1, after the output, when any file or model was left out (each named
    on stderr already)."""
    files, models = len(read.left_out), read.unsound_models
    if strict and (files or models):
        left = f"{files} files and {models} models were left out"
        display.echo(f"error: --strict: {left} (named above)", err=True)
        raise typer.Exit(1)


def print_settings(read: Reading) -> None:
    """The certification settings and each σ's largest certifiable radius, on stderr."""
    for line in read.settings_lines():
        display.echo(f"certified with {line} (n/a: beyond it)", err=True)


def beyond_note(beyond: list[str]) -> None:
    """The radii `table` left out on the terminal (none: nothing said), on stderr."""
    if beyond:
        display.echo(
            f"{beyond[0]} to {beyond[-1]} left out: no model certifies a point there (--radii "
            "chooses the radii; csv and json hold 0:2.25:0.25)",
            err=True,
        )


def print_coverage(read: Reading) -> None:
    """What was read (`Reading.coverage`), on stderr."""
    c = read.coverage()
    per = (
        ""
        if c.models == c.trials
        else (
            " (a model is a trial certified under one setting: "
            f"{c.trials} trial{'s' * (c.trials != 1)} here)"
        )
    )
    display.echo(f"{display.plural(c.models, 'model')}{per}, {c.points} certified points", err=True)
    if c.unlisted:
        listed = ", ".join(c.unlisted[:10]) + (", …" if len(c.unlisted) > 10 else "")
        display.echo(
            f"sweep.json's space declares {display.plural(len(c.unlisted), 'trial')} its "
            f"trials list lacks ({listed}): their results, if any, are left out",
            err=True,
        )
    _without_rows(read, c)
    if c.dependent_points:
        display.echo(
            f"data-dependent smoothing: {display.plural(c.dependent_models, 'model')}; the memory "
            f"pass adjusted {c.memory_changed} of {c.dependent_points} certificates",
            err=True,
        )
    if c.missing_shards:
        listed = ", ".join(f"{tid} ({display.plural(n, 'shard')})" for tid, n in c.missing_listed)
        verb = "is" if c.missing_shards == 1 else "are"
        display.echo(
            f"{display.plural(c.missing_shards, 'model')} {verb} missing shards (partial "
            f"results): {listed}",
            err=True,
        )


def _without_rows(read: Reading, c: Coverage) -> None:
    """The planned trials without rows, and why: not yet, skipped by the envelope search,
    pruned by the envelope strategy."""
    pruned = read.pruned_without_rows()
    searched = read.search()
    skipped = searched.skipped if searched is not None and searched.stopped else 0
    if c.absent > pruned + skipped:
        absent = c.absent - pruned - skipped
        display.echo(f"{absent} of the sweep's {c.planned} trials have no results yet", err=True)
    for line in searched.lines() if searched is not None else []:
        display.echo(line, err=True)
    if pruned:
        display.echo(
            f"{display.plural(pruned, 'trial')} pruned by the envelope strategy (never "
            "certified: no rows; `sweeper table` shows their upper bounds)",
            err=True,
        )


def partial_note(rows) -> None:
    """What a `≥` cell of the per-model table means (`report.pruned.partial_texts`)."""
    if "exact_from" not in rows or rows["exact_from"].isna().all():
        return
    display.echo(
        "≥: the envelope strategy certified that model only on the points that could reach "
        "its exact_from radius (csv/json: exact_from); below it, and its ACR, are lower "
        "bounds of what full certification would report",
        err=True,
    )


def covered_texts(table, text, column: str = "certified_accuracy"):
    """`text` with `≥` before `column` where the envelope strategy's guarantee does not cover
    the row's number (`api.envelope_view`; csv/json: the `covered` column)."""
    if "covered" not in table:
        return text
    marked = ~table["covered"].to_numpy(dtype=bool)
    text = text.copy()
    text.loc[marked, column] = [v if v in ("", "-") else f"≥{v}" for v in text.loc[marked, column]]
    return text


def covered_note(table) -> None:
    """What a `≥` envelope number means, when one is shown."""
    if "covered" not in table or table["covered"].all():
        return
    display.echo(
        f"≥: {int((~table['covered']).sum())} of {len(table)} numbers are outside the envelope "
        "strategy's guarantee (a pruned model, or one certified only from a larger radius, "
        "of that group could be higher there): lower bounds of what full certification "
        "would report (csv/json: covered); certify with --strategy full, or with the groups "
        "and radii you read as the decision grid, to have them exact",
        err=True,
    )


UNATTESTED = "†"


def attested_texts(table, text, column: str = "certified_accuracy"):
    """`text` with † after `column` where the row's model rests on unattested files
    (`selection.mark_attested`; csv/json: the `attested` column)."""
    if "attested" not in table:
        return text
    marked = (table["attested"] == False).to_numpy()  # noqa: E712 (None: no winner)
    text = text.copy()
    text.loc[marked, column] = [f"{v} {UNATTESTED}" for v in text.loc[marked, column]]
    return text


def attestation_note(results, table, attested_only: bool) -> None:
    """On stderr, when a key checked the files: how many are attested, how many models rest
    on unattested ones (counted and marked †, or left out with --attested-only)."""
    a = results.attestations
    if a is None:
        return
    models = display.plural(len(a.unattested), "model")
    if attested_only:
        rest = f"{models} resting on unattested files left out (--attested-only)"
    elif a.unattested:
        shown = "attested" in table and (table["attested"] == False).any()  # noqa: E712
        mark = f"; {UNATTESTED} marks the numbers that rest on them" if shown else ""
        rest = (
            f"{models} rest on unattested files (made without a key, or planted): counted{mark}; "
            "--attested-only leaves them out"
        )
    else:
        rest = "every model's files are attested"
    failed = f", {len(a.failed)} failed (named above, left out)" if a.failed else ""
    display.echo(
        f"attestations (key {a.key_id}): {a.attested} files verified{failed}; {rest}", err=True
    )
    for line in a.inventory[:5]:
        display.echo(f"warning: {line}", err=True)
    if a.inventory:
        more = f" ({len(a.inventory) - 5} more)" if len(a.inventory) > 5 else ""
        display.echo(
            f"warning: results the signed inventory lists are missing{more}: the envelope is "
            "of what is left; `sweeper verify` checks every file",
            err=True,
        )
