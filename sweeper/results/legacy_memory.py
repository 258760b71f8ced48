"""Legacy DDRS memory files (`memory.parquet`, written before compaction existed), checked like
shards before they change any certificate.

A memory file holds the memory pass's certificates of one data-dependent model: the model whose
directory holds it (`certify/<trial_id>/<cert_id>/`). It is applied to that model only, and only
if every row could be the memory pass's over that model's rows: the columns exactly
`MEMORY_SCHEMA`'s, rows naming the model of its directory, one row per point of the model
(no more, no fewer), predictions within the data set's classes (−1 abstains, radius 0), finite
radii ≥ 0, `correct_memory` true exactly when the prediction is the label, a certificate
unchanged where `memory_changed` is false, no ball of CERTIFY's class made larger (an
abstention may take a class with a ball: the authors' rule, which
`trainables.ddrs.memory_certify` follows), no radius beyond what CERTIFY can give at the
row's σ_x, n and α, and a class taken with a ball no larger than one CERTIFY gave that class
(the pass gives r_j − d ≤ r_j). A file that fails is named with why and left out
(its model's rows are then not sound yet).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.storage import StageFile
from trainables.kernel import fileio
from trainables.kernel.catalog import NUM_CLASSES
from trainables.kernel.certificates import max_radius

OTHER_MODEL = "rows of another model than the one whose directory holds it"
# What a memory file is checked against: its model's rows as CERTIFY wrote them.
MODEL_COLUMNS = ["trial_id", "cert_id", "idx", "dataset", "label", "predict", "radius"]
MODEL_COLUMNS += ["smoothing", "sigma_cert", "n", "alpha"]


def read_memory(files: list[StageFile], schema: pa.Schema) -> tuple[pd.DataFrame, list[str]]:
    """(the rows of each memory file that reads with exactly `schema`'s columns, their
    trial_id and cert_id those of its directory; ["path: problem"] of the others)."""
    tables, invalid = [], []
    for f in files:
        fs, local = fileio.filesystem(f.path)
        try:
            have = pq.read_schema(local, filesystem=fs)
            if sorted(have.names) != sorted(schema.names):
                invalid.append(f"{f.path}: columns {have.names}, not {schema.names}")
                continue
            table = pq.read_table(local, filesystem=fs, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
            invalid.append(f"{f.path}: not a readable memory file ({str(e).splitlines()[0]})")
            continue
        frame = table.to_pandas()
        frame["path"] = f.path
        frame["own"] = (frame["trial_id"] == f.trial_id) & (frame["cert_id"] == f.setting_id)
        frame["trial_id"], frame["cert_id"] = f.trial_id, f.setting_id
        tables.append(frame)
    empty = (
        schema.empty_table()
        .to_pandas()
        .assign(path=pd.Series(dtype=str), own=pd.Series(dtype=bool))
    )
    return (pd.concat(tables, ignore_index=True) if tables else empty), invalid


def valid_memory(frame: pd.DataFrame, memory: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the memory rows of files whose every row the memory pass could have written over its
    model's rows in `frame`, ["path: problem"] of the others). A file naming another model
    is named whatever its directory holds; files of models without rows (their shards were
    named) are left aside (nothing to apply them to)."""
    if memory.empty:
        return memory, []
    model = frame[MODEL_COLUMNS]
    merged = memory.merge(model, on=["trial_id", "cert_id", "idx"], how="left", indicator=True)
    problems = {}
    for path, rows in merged.groupby("path", sort=True):
        points = frame.loc[
            (frame["trial_id"] == rows["trial_id"].iloc[0])
            & (frame["cert_id"] == rows["cert_id"].iloc[0]),
            "idx",
        ]
        if not rows["own"].all():  # wrong whatever its model holds
            problems[path] = OTHER_MODEL
        elif len(points) and (problem := memory_problem(rows, points)):
            problems[path] = problem
    usable = memory["path"].isin(merged.loc[merged["_merge"] == "both", "path"])
    keep = usable & ~memory["path"].isin(problems)
    return memory[keep], [f"{path}: {problem}" for path, problem in problems.items()]


def memory_problem(rows: pd.DataFrame, points: pd.Series) -> str | None:
    """The first thing wrong with one memory file's `rows` (merged with its model's rows:
    `MODEL_COLUMNS`, as CERTIFY gave them) given all the points `points` of its model; None
    if the memory pass could have written them."""
    predict, radius = rows["predict_memory"].to_numpy(), rows["radius_memory"].to_numpy(dtype=float)
    classes = rows["dataset"].map(NUM_CLASSES).fillna(-1).to_numpy()
    right = (predict == rows["label"].to_numpy()) & (predict != -1)
    unchanged = rows["memory_changed"].eq(False).to_numpy()
    same = (predict == rows["predict"].to_numpy()) & (predict != -1)
    checks = [
        ((rows["smoothing"] != "data-dependent").to_numpy(), "its model is not data-dependent"),
        (rows["idx"].duplicated().to_numpy(), "a test point twice"),
        (np.array([set(rows["idx"]) != set(points)]), "not the points of its model"),
        ((predict < -1) | (predict >= classes), "a prediction outside the data set's classes"),
        (~np.isfinite(radius) | (radius < 0), "a radius that is negative, NaN or infinite"),
        ((predict == -1) & (radius != 0), "an abstention with a radius"),
        (
            rows["correct_memory"].ne(right).to_numpy(),
            "correct_memory disagrees with its prediction",
        ),
        (
            unchanged
            & ((predict != rows["predict"].to_numpy()) | (radius != rows["radius"].to_numpy())),
            "memory_changed is false but the certificate is not CERTIFY's",
        ),
        (same & (radius > rows["radius"].to_numpy()), "a ball of CERTIFY's class made larger"),
        *_radius_checks(rows, predict, radius, same),
        (rows["memory_changed"].isna().to_numpy(), "memory_changed is missing"),
    ]
    return next((what for bad, what in checks if bad.any()), None)


def _radius_checks(rows: pd.DataFrame, predict, radius, same) -> list[tuple[np.ndarray, str]]:
    """Radii no memory pass gives: beyond what CERTIFY can give at the row's σ (σ_x), n and
    α, or, for a class the pass gave a point (not CERTIFY's), beyond every ball CERTIFY gave
    that class (`same`: the rows that kept CERTIFY's class). The pass gives such a point
    r_j − d ≤ r_j for a ball j of that class containing it, and j's class was taken in turn
    from a ball no smaller, back to one of CERTIFY's class."""
    largest = max_radius(*(rows[c].to_numpy(dtype=float) for c in ("sigma_cert", "n", "alpha")))
    with np.errstate(invalid="ignore"):
        beyond = ~(radius <= largest + largest * 1e-9 + 1e-12)
    own = pd.Series(radius[same]).groupby(predict[same]).max()
    taken = (predict != -1) & ~same & (predict != rows["predict"].to_numpy())
    bound = pd.Series(predict).map(own).fillna(-np.inf).to_numpy()
    return [
        (beyond, "a radius larger than n and alpha allow for its sigma"),
        (
            taken & (radius > bound),
            "a class taken with a ball larger than any CERTIFY gave that class",
        ),
    ]
