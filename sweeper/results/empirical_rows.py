"""The rows of the empirical attack stage: their schema, their checks, and reading them.

One row per point per setting per model: the trial's identity columns (as in certification
rows), the attack (epsilon_attack, m_test, steps_attack, estimator) and PREDICT (n, alpha)
settings, and idx, label, predict (−1 = abstain), correct, perturbation_norm, time_s.
ε = 0 is run once, without an attack (m_test, steps_attack and estimator null): the clean
smoothed accuracy of the same points. The rows are written by `sweeper.run.empirical_stage`.

The envelope overlay (`empirical_envelope`) takes, for each model (trial_id, n, α) at each ε,
its accuracy under the STRONGEST attack run (the lowest accuracy over m_test, steps and
estimator), then the best model at each ε: the empirical counterpart of the certified upper
envelope, the dashed curves of the paper's Fig. 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from sweeper.results.certify_rows import ResultsError, identity_fields
from sweeper.results.reader import read_stage
from sweeper.results.stage_table import StageTable
from sweeper.results.storage import Experiment
from sweeper.results.validation import float_column, prediction_checks
from trainables.kernel import fileio

EMPIRICAL_COLUMNS = [
    ("epsilon_attack", pa.float64()),  # ℓ2 radius of the attack; 0: no attack (clean)
    ("m_test", pa.int64()),  # noise draws of the attack's estimator (null when ε = 0)
    ("steps_attack", pa.int64()),  # attack steps T (null when ε = 0)
    ("estimator", pa.string()),  # plugin (6) or stein (7) (null when ε = 0)
    ("n", pa.int64()),  # PREDICT's samples
    ("alpha", pa.float64()),  # PREDICT's level
    ("idx", pa.int64()),
    ("label", pa.int64()),
    ("predict", pa.int64()),  # −1 = abstain
    ("correct", pa.bool_()),  # never for an abstention
    ("perturbation_norm", pa.float64()),  # ‖x_adv − x‖₂ in pixel units
    ("time_s", pa.float64()),  # attack + PREDICT wall time per point
]
EMPIRICAL_SCHEMA = pa.schema(
    [pa.field(k, pa.string()) for k in ("trial_id", "experiment", "emp_id")]
    + identity_fields()
    + [pa.field(name, typ) for name, typ in EMPIRICAL_COLUMNS]
)
MODEL = ["trial_id", "n", "alpha"]  # a smoothed classifier as PREDICT evaluates it
ATTACK = ["m_test", "steps_attack", "estimator"]  # one attack on it


def check(table: pa.Table) -> list[tuple[np.ndarray, str]]:
    """Rows no attack could have written (the reader names and drops their file)."""
    eps, norm = float_column(table, "epsilon_attack"), float_column(table, "perturbation_norm")
    return [
        *prediction_checks(table),
        (~np.isfinite(eps) | (eps < 0), "an attack radius that is negative, NaN or infinite"),
        (
            ~np.isfinite(norm) | (norm < 0) | (norm > eps * (1 + 1e-6) + 1e-6),
            "a perturbation outside the attack's ball",
        ),
    ]


CHECKED = ("dataset", "label", "predict", "correct", "epsilon_attack", "perturbation_norm")
EMPIRICAL_ROWS = StageTable("empirical", "emp_id", EMPIRICAL_SCHEMA, check, CHECKED)


@dataclass
class EmpiricalResults:
    frame: pd.DataFrame  # every valid row (EMPIRICAL_SCHEMA columns)
    files: list[str]
    # (trial_id, emp_id) -> shard numbers missing from a setting that has some shards
    missing_shards: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)  # "path: what is wrong", left out


def load_empirical(exp: Experiment) -> EmpiricalResults:
    """Every valid empirical row of an experiment (an empty frame if none was written).
    Raises ResultsError naming the experiment if it does not exist."""
    if not fileio.exists(exp.root):
        raise ResultsError(f"no experiment at {exp.root}: check --storage and --experiment")
    rows = read_stage(exp, EMPIRICAL_ROWS)
    return EmpiricalResults(rows.table.to_pandas(), rows.files, rows.missing, rows.invalid)


def model_accuracy(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model (trial_id, n, α) and ε: the accuracy under the strongest attack run (the
    lowest over m_test, steps and estimator), that attack's m_test, and the points."""
    keys = [*MODEL, "epsilon_attack"]
    per_attack = (
        frame.groupby([*keys, *ATTACK], dropna=False)["correct"]
        .agg(accuracy="mean", points="size")
        .reset_index()
        .sort_values([*keys, "accuracy", "m_test"], ascending=[True] * len(keys) + [True, False])
    )
    return per_attack.drop_duplicates(keys, keep="first").reset_index(drop=True)


def empirical_envelope(frame: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Per ε (and value of `by`, if `frame` has that column): the best model's accuracy under
    its strongest attack. Columns: [by], radius (= ε), empirical_accuracy, empirical_winner
    (trial_id; ties: the smaller), empirical_m_test (the winner's strongest m_test)."""
    if frame.empty:
        return pd.DataFrame(columns=["radius", "empirical_accuracy", "empirical_winner"])
    acc = model_accuracy(frame)
    groups = [by] if by is not None and by in frame else []
    if groups:
        acc = acc.merge(frame.drop_duplicates("trial_id")[["trial_id", by]], on="trial_id")
    best = acc.sort_values(
        [*groups, "epsilon_attack", "accuracy", "trial_id"],
        ascending=[True] * len(groups) + [True, False, True],
    )
    best = best.drop_duplicates([*groups, "epsilon_attack"], keep="first")
    renamed = {
        "epsilon_attack": "radius",
        "accuracy": "empirical_accuracy",
        "trial_id": "empirical_winner",
        "m_test": "empirical_m_test",
    }
    return best[[*groups, *renamed]].rename(columns=renamed).reset_index(drop=True)


def overlay(table: pd.DataFrame, frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """The envelope `table` with an `empirical_accuracy` column: the empirical envelope at
    radii that were attacked (ε equal to the radius up to 1e-9), NaN elsewhere. With `by`,
    per group when the empirical rows have that column (`smoothing`: the attacks are on the
    fixed-σ classifiers), else the same value for every group."""
    frame = frame.assign(smoothing="fixed") if "smoothing" not in frame else frame
    curve = empirical_envelope(frame, by if by in frame else None)
    keys = [by] if by is not None and by in curve else []
    right = curve[[*keys, "radius", "empirical_accuracy"]].assign(
        _r=np.round(curve["radius"].to_numpy(dtype=float), 9)
    )
    left = table.assign(_r=np.round(table["radius"].to_numpy(dtype=float), 9))
    merged = left.merge(right.drop(columns="radius"), on=[*keys, "_r"], how="left")
    return merged.drop(columns="_r")
