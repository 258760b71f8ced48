"""The envelope as every view reads it (`Sweep.envelope`, `sweeper envelope`, its plot): one
code path, and which of its numbers the `envelope` strategy's guarantee covers (issue 39 §1).

Under the envelope strategy some models have no exact count at some radii: a pruned model has
none at all, a model certified only from a radius on (`exact_from`) none below it. Each has an
upper bound on its certified accuracy at every radius from the first of its decision grid on
(`envelope_records.upper_accuracy`: the bound at the largest grid radius ≤ r, since a count
only falls as the radius grows). An envelope number (per `by` group, at radius r) is *covered*
when every such model of its group has a bound at r no higher than it: then, whenever the
bounds hold (probability ≥ 1 − δ, the strategy's guarantee), full certification would report
the same number. This covers the decision grid's radii of the global envelope (the strategy
prunes against it) and, where the bounds allow, radii between them and groups of `--by`;
anything else is a lower bound of full's number and is marked (`covered` false: `≥` on the
screen, dashed in the plot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sweeper.report.figures import Cover
from sweeper.results.storage import Experiment
from trainables.kernel.stage_settings import strategy_of

if TYPE_CHECKING:
    import pandas as pd

    from sweeper.results.certify_rows import Results

COVERED = "covered"  # the column: whether the guarantee covers the row's number


def envelope_of(frame: pd.DataFrame, radii: Sequence[float], by: str | None) -> pd.DataFrame:
    """The envelope of `frame`'s models at `radii` per `by` (a mixed `smoothing` when None),
    with no winner where its accuracy is 0 (`report.render.no_winner`: the same in `Sweep` and
    every format alike); EnvelopeError for a `by` that is no column."""
    from sweeper.report.render import no_winner
    from sweeper.results.final_numbers import envelope_with_final

    return no_winner(envelope_with_final(frame, list(radii), group_of(frame, by)))


def envelope_read(
    exp: Experiment,
    results: Results,
    frame: pd.DataFrame,
    radii: Sequence[float],
    by: str | None,
    selection: dict[str, Any],
) -> pd.DataFrame:
    """The envelope every view shows (`Sweep.envelope`, `sweeper envelope`): `envelope_of`
    the read rows `frame`, with `covered` under the envelope strategy (`with_covered`) and,
    with a key, whether each winner is attested (`selection.mark_attested`)."""
    from sweeper.api.selection import mark_attested

    table = with_covered(exp, frame, envelope_of(frame, radii, by), selection, by)
    return mark_attested(table, results)


def plot_cover(
    exp: Experiment, frame: pd.DataFrame, selection: dict[str, Any], by: str | None
) -> Cover | None:
    """For `--plot`: whether each point of a curve (a `by` group's, or with None the envelope
    over all models) is covered, as `covered` says of the table; None when no model of the
    read is the envelope strategy's (every point exact)."""
    import pandas as pd

    if inexact_models(exp, frame, selection, [0.0]) is None:
        return None
    group = group_of(frame, by)
    known: dict[tuple[float, ...], pd.DataFrame | None] = {}

    def cover(value: Any, radii: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
        grid = tuple(float(r) for r in radii)
        if grid not in known:  # the curves of one figure share their radii
            known[grid] = inexact_models(exp, frame, selection, list(grid))
        bounds = known[grid]
        if bounds is None:
            return np.ones(len(grid), dtype=bool)
        table = pd.DataFrame({"radius": grid, "certified_accuracy": accuracy})
        if value is None or group is None:
            return covered(table, bounds, None)
        return covered(table.assign(**{group: value}), bounds, group)

    return cover


def group_of(frame: pd.DataFrame, by: str | None) -> str | None:
    """The column the envelope is grouped by: `by`, else `smoothing` when it is mixed."""
    if by is not None or "smoothing" not in frame:
        return by
    return "smoothing" if frame["smoothing"].nunique() > 1 else None


def with_covered(
    exp: Experiment,
    frame: pd.DataFrame,
    table: pd.DataFrame,
    selection: dict[str, Any],
    by: str | None,
) -> pd.DataFrame:
    """`table` (the envelope of `frame`) with the `covered` column when some model of the read
    is the envelope strategy's (certified under an `_envelope` setting or pruned by it); as it
    is otherwise (full certification: every number is exact). A `by` group whose every model
    was pruned has no certified row: it is shown with no winner (accuracy 0), a lower bound."""
    import pandas as pd

    radii = sorted(set(table["radius"].tolist()))
    bounds = inexact_models(exp, frame, selection, radii)
    if bounds is None:
        return table
    group = group_of(frame, by)
    if group is not None and group in bounds and len(bounds):
        shown = set(table[group].dropna().tolist())
        pruned_only = [v for v in bounds[group].dropna().unique() if v not in shown]
        rows = [
            {group: v, "radius": r, "certified_accuracy": 0.0} for v in pruned_only for r in radii
        ]
        if rows:
            table = pd.concat([table, pd.DataFrame(rows)], ignore_index=True)
    return table.assign(**{COVERED: covered(table, bounds, group)})


def inexact_models(
    exp: Experiment, frame: pd.DataFrame, selection: dict[str, Any], radii: list[float]
) -> pd.DataFrame | None:
    """One row per model of the read without an exact count at some radius: the pruned ones
    `--only` keeps (`exact_from` inf) and the certified ones with an `exact_from`; their columns
    and `upper` (a list: the bound per radius of `radii`, None below the grid). None when no
    model of the read is the envelope strategy's."""
    import pandas as pd

    from sweeper.api.selection import pruned
    from sweeper.results.envelope_records import upper_accuracy, vouched

    pruned_rows = pruned(exp, frame, selection, radii)
    envelope_ids = [c for c in frame["cert_id"].unique() if strategy_of(c) == "envelope"]
    if pruned_rows.empty and not envelope_ids:
        return None
    records = vouched(exp).records
    upper = [f"r={r:g}_upper" for r in radii]
    rows = []
    for _, p in pruned_rows.iterrows():
        rows.append({**p.drop(upper).to_dict(), "exact_from": np.inf, "upper": list(p[upper])})
    models = frame[frame["cert_id"].isin(envelope_ids)].drop_duplicates(["trial_id", "cert_id"])
    for _, m in models.iterrows():
        record = records.get((m["trial_id"], m["cert_id"]), {})
        if record.get("exact_from") is not None:
            bound = upper_accuracy(record, radii)
            rows.append({**m.to_dict(), "exact_from": record["exact_from"], "upper": bound})
    return pd.DataFrame(rows, columns=[*frame.columns, "exact_from", "upper"])


def covered(table: pd.DataFrame, bounds: pd.DataFrame, by: str | None) -> np.ndarray:
    """Per envelope row: whether every model of its group without an exact count at its radius
    has an upper bound there no higher than the row's accuracy (a model without the `by`
    column counts in every group; a bound missing, below the grid, covers nothing)."""
    radii = sorted(set(table["radius"].tolist()))
    upper = np.array([[np.nan if u is None else u for u in b] for b in bounds["upper"]])
    upper = upper.reshape(len(bounds), len(radii))
    exact_from = bounds["exact_from"].to_numpy(dtype=np.float64)
    out = np.ones(len(table), dtype=bool)
    for i, (r, value) in enumerate(zip(table["radius"], table["certified_accuracy"], strict=True)):
        inexact = exact_from > float(r) + 1e-9
        if by is not None and by in bounds:
            inexact &= _members(bounds[by], table[by].iloc[i])
        u = upper[inexact, radii.index(r)]
        out[i] = not (np.isnan(u).any() or (u > float(value) + 1e-12).any())
    return out


def _members(column: pd.Series, value: Any) -> np.ndarray:
    """The rows of `column` equal to a group's `value` (null equal to null: a group without
    the setting)."""
    import pandas as pd

    if pd.isna(value):
        return column.isna().to_numpy()
    return (column == value).to_numpy()
