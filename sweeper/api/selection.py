"""An experiment's certification rows as `sweeper envelope`, `sweeper table` and
`sweeper.Sweep` read them: validated (`load_results`), the `--only` slice (the one matcher of
`plan.grid`), without the data-dependent models that await their memory pass; and what was
read (`coverage`). pandas is imported inside the functions: importing this stays cheap."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeper.plan.grid import NONE, only_value, parse_only, value_matches
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import read_sweep
from trainables.kernel.cert_ids import ENVELOPE_MARK, strategy_of
from trainables.kernel.errors import ProblemsError

__all__ = ["NONE"]  # how --only and the views spell a missing value

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.results.certify_rows import Results
    from sweeper.results.search_records import SearchAccount


def only_selection(only: str | None) -> dict[str, Any]:
    """`--only`'s key=value pairs; `ProblemsError` naming each malformed one."""
    selection, problems = parse_only(only)
    if problems:
        raise ProblemsError(problems)
    return selection


def only_problems(only: str | None) -> list[str]:
    """What is wrong with `--only`'s text (none: it parses)."""
    return parse_only(only)[1]


def load(exp: Experiment, selection: dict[str, Any], columns: list[str] | None = None) -> Results:
    """The experiment's validated rows (a file that fails validation is in `invalid`, its rows
    left out); `columns`: only these (and the selection's), not every results column.
    `ResultsError` if they cannot be read."""
    from sweeper.results.certify_rows import SCHEMA, load_results

    if columns is not None:
        columns = [*columns, *(k for k in selection if k in SCHEMA.names)]
    return load_results(exp, columns)


def filter_rows(frame: pd.DataFrame, selection: dict[str, Any]) -> pd.DataFrame:
    """The rows matching every key=value of `--only` (`plan.grid.value_matches`); a key that
    is no column, or a value no row has (naming the values there are), is a `ProblemsError`."""
    for key, wanted in selection.items():
        if key == "strategy":  # not a column: the cert_id says it
            frame = _of_strategy(frame, wanted)
            continue
        if key not in frame:
            raise ProblemsError([f"--only: {key!r} is not a results column"])
        # Matched once per distinct value, not per row (millions at thousands of models).
        keep = [v for v in frame[key].unique() if value_matches(key, v, wanted)]
        chosen = frame[frame[key].isin(keep)]
        if chosen.empty and not frame.empty:
            values = sorted({_spelled(v) for v in frame[key].unique()})
            raise ProblemsError(
                [
                    f"--only {key}={wanted} matches no model ({key} values: "
                    f"{', '.join(values) or 'none'})"
                ]
            )
        frame = chosen
    return frame


def _of_strategy(frame: pd.DataFrame, strategy: str) -> pd.DataFrame:
    """The rows certified under a setting of `strategy` (`--only strategy=envelope`), and the
    final step's rows of those settings (issue 40: certified `full`, they report on them)."""
    from sweeper.results.final_numbers import selection_base
    from trainables.kernel.final_points import final_of

    settings = frame["cert_id"].unique()
    keep = [c for c in settings if strategy_of(c) == strategy and final_of(c) is None]
    bases = {selection_base(c) for c in keep}
    keep += [c for c in settings if (f := final_of(c)) is not None and f[0] in bases]
    if not keep and not frame.empty:
        there = sorted({strategy_of(c) for c in settings})
        raise ProblemsError(
            [f"--only strategy={strategy} matches no model (strategies: {', '.join(there)})"]
        )
    return frame[frame["cert_id"].isin(keep)]


def only_rows(
    exp: Experiment, frame: pd.DataFrame, selection: dict[str, Any], pruned_ok: bool = False
) -> pd.DataFrame:
    """`filter_rows`, filtered once; when `--only` keeps no row but some models the `envelope`
    strategy pruned (they have no rows): no row if `pruned_ok` (`sweeper table` shows them
    with their upper bounds), else an error saying where to look."""
    try:
        return filter_rows(frame, selection)
    except ProblemsError:
        if not selection or pruned(exp, frame.iloc[0:0], selection, [0.0]).empty:
            raise
    if pruned_ok:
        return frame.iloc[0:0]
    raise ProblemsError(
        [
            "--only keeps only models the envelope strategy pruned (they have no certified "
            "rows): `sweeper table` with the same --only shows their upper bounds"
        ]
    )


def _spelled(value: Any) -> str:
    """A column's value as `--only` takes it back: `none` for a missing one, 0.25, pgd."""
    import pandas as pd

    if value is None or (isinstance(value, float) and pd.isna(value)):
        return only_value(None)
    return f"{value:g}" if isinstance(value, float) else str(value)


def corrupt_files(exp: Experiment, invalid: list[str]) -> list[str]:
    """The results files left out (`invalid`, "path: why") that are no readable Parquet, one
    problem each: bad input, not a file to leave out quietly (a damaged cache is none: its
    models are read from their files)."""
    caches = tuple(f"{exp.cache_path(stage)}: " for stage in ("certify", "empirical"))
    return [
        f"corrupt results file {line}: move it away (`sweeper certify` or `sweeper "
        "empirical` recomputes what is missing)"
        for line in invalid
        if ": not a readable " in line and not line.startswith(caches)
    ]


def sound_rows(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the rows of sound models, how many data-dependent models await their memory pass and
    were left out)."""
    unsound = int(frame.loc[~frame["sound"], "trial_id"].nunique())
    # Filtering copies every row (3.2M at 6,440 models): only when some are left out.
    return (frame[frame["sound"]] if unsound else frame), unsound


@dataclass(frozen=True)
class Coverage:
    """What a read covered: models (a trial under one certification setting), trials and
    points; the sweep's planned trials without results; the data-dependent models and the
    certificates their memory pass adjusted; the models missing shards (first ten)."""

    models: int
    trials: int
    points: int
    planned: int
    absent: int
    dependent_models: int
    dependent_points: int
    memory_changed: int
    missing_shards: int
    missing_listed: list[tuple[str, int]]
    unlisted: list[str] = field(default_factory=list)  # declared by the space, not listed


def models_of(frame: pd.DataFrame) -> int:
    """How many models (trial, certification setting) have rows in `frame`."""
    return int(frame.groupby(["trial_id", "cert_id"]).ngroups) if len(frame) else 0


def search_account(exp: Experiment, frame: pd.DataFrame) -> SearchAccount | None:
    """The envelope search's account of `exp` (None: no search ran), its models those with
    rows in `frame`."""
    from sweeper.results.search_records import account

    return account(exp, set(frame["trial_id"]) if len(frame) else set())


def coverage(exp: Experiment, results: Results, frame: pd.DataFrame) -> Coverage:
    """What `frame` (the rows selected from `results`) covers of the experiment."""
    listed, unlisted = planned_trials(exp)
    planned = listed | unlisted
    dependent = frame[frame["smoothing"] == "data-dependent"]
    missing = sorted(results.missing_shards.items())
    return Coverage(
        models=models_of(frame),
        trials=int(frame["trial_id"].nunique()) if len(frame) else 0,
        points=len(frame),
        planned=len(planned),
        absent=len(planned - set(results.frame["trial_id"])),
        dependent_models=models_of(dependent),
        dependent_points=len(dependent),
        memory_changed=int(dependent["memory_changed"].fillna(False).astype(bool).sum())
        if len(dependent)
        else 0,
        missing_shards=len(missing),
        missing_listed=[(tid, len(v)) for (tid, _), v in missing[:10]],
        unlisted=sorted(unlisted),
    )


def planned_trials(exp: Experiment) -> tuple[set[str], set[str]]:
    """(the trials sweep.json lists, those its space's grids declare that the list lacks: a
    list cut short does not hide a trial without results). Both empty without a readable
    sweep.json (e.g. imported results): nothing to compare."""
    from sweeper.plan.grid import space_trials
    from sweeper.results.sweep_file import declared

    try:
        listed = set(declared(exp).trials or ())
        space = space_trials((read_sweep(exp) or {}).get("space"))
    except (OSError, ProblemsError):
        return set(), set()
    return listed, (space or set()) - listed


def pruned(
    exp: Experiment, frame: pd.DataFrame, selection: dict[str, Any], radii: list[float]
) -> pd.DataFrame:
    """The models the `envelope` strategy pruned that `--only` keeps (a key their configs
    lack keeps none), with their upper bounds per radius (`report.pruned.pruned_frame`);
    none whose rows are in `frame` (certified after all)."""
    from sweeper.report.pruned import pruned_frame
    from sweeper.results.envelope_records import pruned_models

    table = pruned_frame(pruned_models(exp), radii)
    if table.empty:
        return table
    try:
        table = filter_rows(table, selection)
    except ProblemsError:
        return table.iloc[0:0]
    seen = set(zip(frame["trial_id"], frame["cert_id"], strict=True)) if len(frame) else set()
    kept = [(t, c) not in seen for t, c in zip(table["trial_id"], table["cert_id"], strict=True)]
    return table[kept].reset_index(drop=True)


def with_exact_from(exp: Experiment, table: pd.DataFrame) -> pd.DataFrame:
    """`table` with `exact_from` for the models the envelope strategy certified only from a
    radius on (`envelope_records`): below it their accuracies (and ACR) are lower bounds of
    what `full` would report; the column only if some model has one."""
    import pandas as pd

    from sweeper.results.envelope_records import vouched

    if "cert_id" not in table or not table["cert_id"].str.contains(ENVELOPE_MARK).any():
        return table
    records = vouched(exp).records
    keys = zip(table["trial_id"], table["cert_id"], strict=True)
    exact = [records.get(k, {}).get("exact_from") or None for k in keys]
    if all(e is None for e in exact):
        return table
    return table.assign(exact_from=pd.Series(exact, index=table.index, dtype=object))


def model_table(
    exp: Experiment, frame: pd.DataFrame, selection: dict[str, Any], radii: list[float]
) -> pd.DataFrame:
    """`sweeper table`'s rows: one per certified model (`report.render.per_model_table`) and,
    if the envelope strategy pruned any, one per pruned model with a `status` column and the
    upper bounds (`report.pruned.with_pruned`); `ProblemsError` if there is no model."""
    from sweeper.report.pruned import with_pruned
    from sweeper.report.render import per_model_table

    table = per_model_table(frame, radii) if not frame.empty else None
    if table is not None:
        table = with_step(with_exact_from(exp, table))
    rows = with_pruned(table, pruned(exp, frame, selection, radii), radii)
    if rows is None:
        raise ProblemsError(
            ["no certification results to tabulate (check --only, or run `sweeper certify`)"]
        )
    return rows


def with_step(table: pd.DataFrame) -> pd.DataFrame:
    """`sweeper table`'s rows with `step` (selection or final: the final step's models on the
    report points, issue 40) when the read holds a final step's rows; as they are otherwise."""
    from trainables.kernel.final_points import is_final

    final = [is_final(str(c)) for c in table["cert_id"]]
    if not any(final):
        return table
    step = ["final" if f else "selection" for f in final]
    return table.assign(step=step)


def attested_rows(results: Results, frame: pd.DataFrame, attested_only: bool) -> pd.DataFrame:
    """`--attested-only`: `frame` without the models resting on unattested files (a file that
    failed its attestation is never in it: `load_results`); ProblemsError when there is no
    key to check attestations with."""
    if not attested_only:
        return frame
    if results.attestations is None:
        raise ProblemsError(
            [
                "--attested-only: no key to check attestations with: set SWEEPER_PUBLIC_KEY to "
                "the public key file, or make this machine's with `sweeper key init`"
            ]
        )
    unattested = results.attestations.unattested
    keys = zip(frame["trial_id"], frame["cert_id"], strict=True)
    return frame[[k not in unattested for k in keys]].reset_index(drop=True)


def mark_attested(table: pd.DataFrame, results: Results) -> pd.DataFrame:
    """`table` (the envelope's winners or per-model rows, with trial_id and cert_id) with an
    `attested` column: whether the row's model rests on attested files only (None where no
    model won; no column when there was no key to check with)."""
    import pandas as pd

    if results.attestations is None or "trial_id" not in table:
        return table
    unattested = results.attestations.unattested
    marks = [
        None if pd.isna(t) else (t, c) not in unattested
        for t, c in zip(table["trial_id"], table["cert_id"], strict=True)
    ]
    return table.assign(attested=pd.Series(marks, index=table.index, dtype=object))
