"""Which models the final step re-certifies (issue 40 item 1; docs/guide/final-step.md).

At each radius r of the grid, the selection's envelope has a winner with a 95% Clopper–Pearson
interval over its selection points (`envelope_uncertainty`). The rule: a model is a candidate
at r when its certified accuracy at r on the selection points is at least the winner's
interval's lower end (and above 0): the selection points do not tell it from the winner at the
interval's level, so choosing among them is left to the report points. The winner is always a
candidate where its accuracy is above 0. The final step re-certifies every model that is a
candidate at some radius of the grid.

The frame is one selection setting's rows (the caller keeps final rows and other settings out).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sweeper.results import envelope as env

CANDIDATE_COLUMNS = ["radius", "trial_id", "cert_id", "certified_accuracy", "winner", "ci_low"]


def final_candidates(frame: pd.DataFrame, radii: list[float]) -> pd.DataFrame:
    """One row per (radius of `radii`, candidate model) of the selection rows `frame`: its
    accuracy at the radius, whether it is the envelope's winner there and the winner's
    interval's lower end (`CANDIDATE_COLUMNS`); sorted by radius, winner first, then accuracy
    down and trial_id. No rows for an empty frame."""
    if frame.empty:
        return pd.DataFrame(columns=CANDIDATE_COLUMNS)
    table = env.envelope(frame, list(radii))
    models = env.model_table(frame)
    accuracy = env.certified_accuracy(frame, list(radii))
    rows = []
    for _, row in table.iterrows():
        r, low = row["radius"], float(row["ci_low"])
        if not row["certified_accuracy"] > 0:
            continue
        acc = accuracy[r].to_numpy()
        chosen = np.flatnonzero((acc >= low - 1e-12) & (acc > 0))
        for m in chosen:
            trial_id, cert_id = models["trial_id"].iloc[m], models["cert_id"].iloc[m]
            winner = trial_id == row["trial_id"] and cert_id == row["cert_id"]
            rows.append((r, trial_id, cert_id, float(acc[m]), bool(winner), low))
    out = pd.DataFrame(rows, columns=CANDIDATE_COLUMNS)
    keys = ["radius", "loser", "certified_accuracy", "trial_id", "cert_id"]
    ordered = out.assign(loser=~out["winner"].astype(bool)).sort_values(
        keys, ascending=[True, True, False, True, True], kind="stable"
    )
    return ordered[CANDIDATE_COLUMNS].reset_index(drop=True)


def to_recertify(candidates: pd.DataFrame) -> list[tuple[str, str]]:
    """The (trial_id, cert_id) models a candidate at some radius, sorted."""
    pairs = zip(candidates["trial_id"], candidates["cert_id"], strict=True)
    return sorted({(str(t), str(c)) for t, c in pairs})
