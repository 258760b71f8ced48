"""The final step's numbers beside the selection's (issue 40 item 1; docs/guide/final-step.md).

The selection envelope is computed on the selection rows only (a final step's rows, cert_id
`..._final-...`, never compete: `envelope.split_final`). Each envelope row then gets, where the
final step certified its winner:

- `final_accuracy`: the winner's certified accuracy at the radius on the report points (the
  papers' number: SmoothAdv's Table 1 is each 500-point winner's on all 10,000);
- `final_points`: how many report points it counts (under `disjoint`, those the winner's
  selection did not certify) and `final_cert_id`, the setting that names them;
- without `by`: `final_best` and `final_best_trial_id`, the best report-point accuracy among
  the radius's candidates that have final rows (`final_selection`: the winner and the models
  within its interval), the choice left to the report points rather than the selection's noise.

Null where the final step has not certified the model.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from trainables.kernel.final_points import final_of

FINAL_COLUMNS = [
    "final_accuracy",
    "final_points",
    "final_cert_id",
    "final_best",
    "final_best_trial_id",
]
_STRATEGY = re.compile(r"_envelope[^_]*")  # `CertifySpec.strategy_tag`: no underscore inside


def selection_base(cert_id: str) -> str:
    """A selection cert_id without its strategy tag: what its final step's cert_id begins with."""
    return _STRATEGY.sub("", cert_id, count=1)


class FinalRows:
    """The final rows of a read, per (trial_id, selection base): each model's report points and
    the radius each is certified to (−inf where not certified-correct)."""

    def __init__(self, finals: pd.DataFrame, selection: pd.DataFrame) -> None:
        self.models: dict[tuple[str, str], tuple[str, np.ndarray, np.ndarray]] = {}
        self.selection = selection
        for (trial_id, cert_id), rows in finals.groupby(["trial_id", "cert_id"], sort=True):
            parsed = final_of(str(cert_id))
            if parsed is None or (str(trial_id), parsed[0]) in self.models:
                continue  # one final setting per selection base: the first by name
            idx = rows["idx"].to_numpy()
            radius = np.nan_to_num(rows["radius"].to_numpy(dtype=np.float64), nan=-np.inf)
            reach = np.where(rows["correct"].to_numpy(dtype=bool), radius, -np.inf)
            if parsed[1].disjoint:
                keep = ~np.isin(idx, self._selection_points(str(trial_id), parsed[0]))
                idx, reach = idx[keep], reach[keep]
            self.models[(str(trial_id), parsed[0])] = (str(cert_id), idx, reach)

    def _selection_points(self, trial_id: str, base: str) -> np.ndarray:
        rows = self.selection[self.selection["trial_id"] == trial_id]
        ids = rows["cert_id"].astype(str).map(selection_base)
        return rows.loc[(ids == base).to_numpy(), "idx"].to_numpy()

    def accuracy(self, trial_id: str, cert_id: str, radius: float) -> tuple[float, int, str]:
        """(certified accuracy at `radius` on the report points, their count, the final
        cert_id) of the selection model (trial_id, cert_id); (nan, 0, None) if uncertified."""
        found = self.models.get((trial_id, selection_base(cert_id)))
        if found is None or not len(found[1]):
            return np.nan, 0, None  # type: ignore[return-value]
        final_id, idx, reach = found
        return float(np.mean(reach >= radius)), len(idx), final_id


def envelope_with_final(
    frame: pd.DataFrame, radii: list[float], by: str | None = None
) -> pd.DataFrame:
    """`envelope.envelope` of the selection rows of `frame`, with the final step's columns
    where `frame` holds a final step's rows (what every view shows)."""
    from sweeper.results.envelope import envelope, split_final

    selection, finals = split_final(frame)
    table = envelope(selection, radii, by)
    return table if finals is None else with_final(table, selection, finals, by)


def with_final(
    table: pd.DataFrame, selection: pd.DataFrame, finals: pd.DataFrame, by: str | None
) -> pd.DataFrame:
    """The envelope `table` of the `selection` rows with the final step's columns
    (`FINAL_COLUMNS`; the best among candidates only without `by`)."""
    from sweeper.results.final_selection import final_candidates

    rows = FinalRows(finals, selection)
    numbers = [
        rows.accuracy(str(t), str(c), float(r)) if isinstance(t, str) else (np.nan, 0, None)
        for t, c, r in zip(table["trial_id"], table["cert_id"], table["radius"], strict=True)
    ]
    out = table.assign(
        final_accuracy=[n[0] for n in numbers],
        final_points=[n[1] for n in numbers],
        final_cert_id=pd.Series([n[2] for n in numbers], index=table.index, dtype=object),
    )
    if by is not None:
        return out
    best: list[float] = []
    who: list[str | None] = []
    # The candidates of the envelope as shown: its winner's interval over every selection model
    radii = sorted(set(table["radius"].tolist()))
    candidates = final_candidates(selection.reset_index(drop=True), radii)
    for t, r in zip(table["trial_id"], table["radius"], strict=True):
        here = candidates[candidates["radius"] == r]
        pairs = zip(here["trial_id"], here["cert_id"], strict=True)
        scored = [(rows.accuracy(m, c, float(r))[0], m) for m, c in pairs]
        scored = [(a, m) for a, m in scored if not np.isnan(a)]
        top = max(scored, key=lambda s: (s[0], s[1] == t), default=(np.nan, None))
        best.append(top[0])
        who.append(top[1])
    return out.assign(
        final_best=best, final_best_trial_id=pd.Series(who, index=table.index, dtype=object)
    )
