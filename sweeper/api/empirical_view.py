"""The empirical robustness beside the envelope (`sweeper envelope --empirical`,
`Reading.empirical`): each model's accuracy under its strongest SmoothAdv-PGD attack (the
lowest over m_test), the best model per attacked radius, in the `--only` slice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeper.api.selection import corrupt_files, filter_rows
from sweeper.results.storage import Experiment
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Empirical:
    """The envelope `table` with `empirical_accuracy` at the attacked radii, the empirical
    envelope `curve` (for a figure), the `models` and `points` attacked, the attack settings
    missing shards, and the empirical files left out ("path: why")."""

    table: pd.DataFrame
    curve: pd.DataFrame
    models: int
    points: int
    missing_shards: int
    left_out: list[str] = field(default_factory=list)


def empirical_overlay(
    exp: Experiment, table: pd.DataFrame, by: str | None, selection: dict[str, Any]
) -> Empirical:
    """`table` (an envelope) with the empirical accuracy of the slice `selection`;
    ProblemsError when the empirical results cannot be read, a file is corrupt, or the slice
    has none."""
    from sweeper.results import empirical_rows as emp
    from sweeper.results.certify_rows import ResultsError

    try:
        loaded = emp.load_empirical(exp)
    except ResultsError as e:
        raise ProblemsError([str(e)]) from None
    if corrupt := corrupt_files(exp, loaded.invalid):
        raise ProblemsError(corrupt)
    frame = filter_rows(loaded.frame, selection)
    if frame.empty:
        raise ProblemsError(
            [
                f"no empirical robustness results in {exp.name} (check --only, or run "
                "`sweeper empirical <space>`)"
            ]
        )
    return Empirical(
        emp.overlay(table, frame, by),
        emp.empirical_envelope(frame),
        int(frame["trial_id"].nunique()),
        len(frame),
        len(loaded.missing_shards),
        list(loaded.invalid),
    )
