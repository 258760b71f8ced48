"""Certified-accuracy curves and their upper envelope over a sweep.

A *model* is one (trial_id, cert_id) pair: a trained classifier under one certification
setting. Its approximate certified accuracy at radius r is the share of its test points with
`correct and radius >= r` (abstentions count as wrong). The upper envelope at r is the best
model's accuracy; ties go to the higher clean accuracy (r = 0), then the smaller trial_id, as
the SmoothAdv analysis picked its winners. Every curve is non-increasing in r, so is the
envelope.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sweeper.results.certify_rows import MODEL_KEY, SCHEMA
from sweeper.results.columns import SUMMARY_COLUMNS
from sweeper.results.envelope_uncertainty import LEVEL, PointReach, clopper_pearson
from trainables.kernel.certificates import max_radius
from trainables.kernel.final_points import is_final
from trainables.kernel.settings import parse_list

IDENTITY_COLUMNS = [f.name for f in SCHEMA if f.name not in MODEL_KEY]
# What `sweeper envelope` reads of each row (with the --by and --only columns): a projection
# of the 80-odd results columns, most of a 6,440-model read's time otherwise. n0, n and alpha:
# the certification settings it states and the largest radius they allow (`max_radii`); idx:
# the points on which the winner and the runner-up are compared (`envelope_uncertainty`).
READ_COLUMNS = [
    "idx",
    *MODEL_KEY,
    "radius",
    "correct",
    "predict",
    *SUMMARY_COLUMNS,
    "lam",
    "eta",
    "n0",
    "n",
    "alpha",
]
# (group value, radius, best model, runner-up (-1: none), size, reach)
Pick = tuple[object, float, int, int, int, float]


class EnvelopeError(ValueError):
    pass


def read_columns(*extra: str | None) -> list[str]:
    """The columns an envelope needs, with those of `extra` that are results columns (an
    unknown one is left for `envelope` or --only to name)."""
    return list(dict.fromkeys([*READ_COLUMNS, *(c for c in extra if c and c in SCHEMA.names)]))


def parse_radii(text: str) -> list[float]:
    """`0:2.25:0.25` (start:stop:step, stop included) or `0,0.5,1`: the syntax of every
    `--radii` (`trainables.kernel.settings.parse_list`), each radius >= 0."""
    try:
        radii = list(parse_list(text))
        if any(r < 0 for r in radii):
            raise ValueError(text)
        return radii
    except ValueError:
        raise EnvelopeError(
            f"--radii {text!r}: expected start:stop:step (e.g. 0:2.25:0.25) or a list 0,0.5,1"
        ) from None


class _LastFrame:
    """What was computed from the last frame seen (a report asks for the same frame's models
    a dozen times; factorizing 10^5-10^6 string keys each time is most of its work). Frames
    are not modified in place once loaded, so the object and its length identify it."""

    def __init__(self) -> None:
        self.ref: weakref.ref[pd.DataFrame] | None = None
        self.rows = -1
        self.values: dict[str, object] = {}

    def get(self, frame: pd.DataFrame, what: str, compute: Callable[[pd.DataFrame], Any]) -> Any:
        if self.ref is None or self.ref() is not frame or self.rows != len(frame):
            self.ref, self.rows, self.values = weakref.ref(frame), len(frame), {}
        if what not in self.values:
            self.values[what] = compute(frame)
        return self.values[what]


_LAST = _LastFrame()
_SPLIT = _LastFrame()  # apart from _LAST: the selection frame it returns is _LAST's next frame


def _models(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame, np.ndarray]:
    """Per row, the number of its model; the models (sorted by trial_id, cert_id); and each
    model's first row. Hash-based factorization: no sort of the rows."""
    codes, models, first = _LAST.get(frame, "models", _factorize_models)
    return codes, models.copy(), first


def _factorize_models(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame, np.ndarray]:
    """`_models` from the runs of equal (trial_id, cert_id): a model's rows are adjacent as
    read (one file, or one cache span), so only the runs' first rows (one per model, a few
    if a model's rows are apart) are factorized, not every row's strings."""
    starts = _run_starts(frame)
    keys = [pd.factorize(frame[k].take(starts), sort=True) for k in MODEL_KEY]
    (tcodes, _), (ccodes, cuniques) = keys
    combined = tcodes.astype(np.int64) * len(cuniques) + ccodes
    seen, uniques = pd.factorize(combined)  # numbered in order of first appearance
    first = np.flatnonzero(np.diff(np.maximum.accumulate(seen), prepend=-1))
    order = np.argsort(uniques)
    rank = np.empty(len(uniques), dtype=np.int64)
    rank[order] = np.arange(len(uniques))
    first = starts[first[order]]
    models = frame[MODEL_KEY].iloc[first].reset_index(drop=True)
    return np.repeat(rank[seen], np.diff(starts, append=len(frame))), models, first


def _run_starts(frame: pd.DataFrame) -> np.ndarray:
    """The rows whose (trial_id, cert_id) differs from the row before (row 0 included)."""
    change = np.zeros(len(frame), dtype=bool)
    change[:1] = True
    for k in MODEL_KEY:
        values = pa.chunked_array(pa.array(frame[k]))  # Arrow-backed strings: no copy
        # Never null: the reader drops rows whose ids are not their path's.
        change[1:] |= ~pc.equal(values[1:], values[:-1]).to_numpy()
    return np.flatnonzero(change)


def model_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per model: its identity, points, clean accuracy, ACR and abstention rate."""
    table: pd.DataFrame = _LAST.get(frame, "table", lambda f: _summarize(f, *_models(f)))
    return table.copy()


def _summarize(
    frame: pd.DataFrame, codes: np.ndarray, models: pd.DataFrame, first: np.ndarray
) -> pd.DataFrame:
    """`models` plus points, clean accuracy, ACR, abstention rate and the identity columns
    (from each model's first row)."""
    k = len(models)
    points = np.bincount(codes, minlength=k)
    correct = frame["correct"].to_numpy(dtype=bool)
    # a point the envelope strategy did not estimate has no radius: certified at none (0)
    radius = np.nan_to_num(frame["radius"].to_numpy(dtype=np.float64), nan=0.0)
    stats = {
        "points": points,
        "clean_acc": np.bincount(codes, weights=correct, minlength=k) / points,
        "acr": np.bincount(codes, weights=radius * correct, minlength=k) / points,
        "abstain_rate": np.bincount(codes, weights=frame["predict"].to_numpy() == -1, minlength=k)
        / points,
    }
    identity = [c for c in IDENTITY_COLUMNS if c in frame and c not in models and c not in stats]
    # One take of each model's first row, not one column assignment per identity column.
    firsts = frame.take(first)[identity].reset_index(drop=True)
    return pd.concat([models, pd.DataFrame(stats), firsts], axis=1)


def _accuracy(
    frame: pd.DataFrame, codes: np.ndarray, k: int, radii: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    """(models × unique sorted radii) certified accuracy, counting each row once: a row is
    certified at every radius up to its own (if correct)."""
    levels = np.unique(np.asarray(radii, dtype=np.float64))
    correct = frame["correct"].to_numpy(dtype=bool)
    radius = frame["radius"].to_numpy(dtype=np.float64)
    reach = np.where(correct & ~np.isnan(radius), radius, -np.inf)
    bins = np.searchsorted(levels, reach, side="right")  # radii <= the row's radius
    counts = np.bincount(codes * (len(levels) + 1) + bins, minlength=k * (len(levels) + 1))
    counts = counts.reshape(k, len(levels) + 1)[:, ::-1].cumsum(axis=1)[:, ::-1]
    return counts[:, 1:] / np.bincount(codes, minlength=k)[:, None], levels


def certified_accuracy(frame: pd.DataFrame, radii: list[float]) -> pd.DataFrame:
    """(models × radii) certified accuracy; rows in `model_table` order."""
    codes, models, _ = _models(frame)
    acc, levels = _accuracy(frame, codes, len(models), radii)
    return pd.DataFrame({r: acc[:, np.searchsorted(levels, r)] for r in radii})


def split_final(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(the selection rows, the final step's rows or None): a final step's rows (its cert_id
    `..._final-...`, `final_points`) never compete in an envelope; `final_numbers` sets its
    numbers beside the selection's. The same frame gives the same objects (cached)."""
    split: tuple[pd.DataFrame, pd.DataFrame | None] = _SPLIT.get(frame, "split", _split)
    return split


def _split(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    if "cert_id" not in frame or frame.empty:
        return frame, None
    finals = [c for c in frame["cert_id"].unique() if is_final(str(c))]
    if not finals:
        return frame, None
    mask = frame["cert_id"].isin(finals).to_numpy()
    return frame[~mask].reset_index(drop=True), frame[mask].reset_index(drop=True)


def envelope(frame: pd.DataFrame, radii: list[float], by: str | None = None) -> pd.DataFrame:
    """Per radius (and per value of column `by`): the best certified accuracy and its model,
    among the selection's models (a final step's rows never compete: `split_final`; the views
    set its numbers beside: `final_numbers.envelope_with_final`)."""
    frame = split_final(frame)[0]
    if frame.empty:
        raise EnvelopeError(
            "no certification results yet: run `sweeper run grid <space>` or "
            "`sweeper certify <space>`"
        )
    if by is not None and by not in frame.columns:
        raise EnvelopeError(
            f"--by {by!r} is not a results column (e.g. sigma, method, attack, m_train, epsilon)"
        )
    codes, models = _models(frame)[0], model_table(frame)
    acc, levels = _accuracy(frame, codes, len(models), radii)
    groups = (
        [(None, models.index)]
        if by is None
        else list(models.groupby(by, dropna=False).groups.items())
    )
    # Best model per (group, radius): highest accuracy, then clean accuracy, then the first
    # in model order (sorted by trial_id, cert_id).
    clean, reach = models["clean_acc"].to_numpy(), max_radii(frame)
    picks: list[Pick] = []
    for value, index in groups:
        members = np.sort(np.asarray(index))
        for r in radii:
            col = acc[members, np.searchsorted(levels, r)]
            ranked = members[np.lexsort((members, -clean[members], -col))]
            second = int(ranked[1]) if len(ranked) > 1 else -1
            picks.append((value, r, ranked[0], second, len(members), float(reach[members].max())))
    table = _envelope_rows(models, acc, levels, picks, by)
    return _with_uncertainty(table, frame, codes, len(models), picks)


def _with_uncertainty(
    table: pd.DataFrame, frame: pd.DataFrame, codes: np.ndarray, k: int, picks: list[Pick]
) -> pd.DataFrame:
    """The envelope with the winner's 95% Clopper–Pearson interval (`ci_low`, `ci_high`) over
    its points, the runner-up, McNemar's p of the two on their common points (`paired_p`;
    `envelope_uncertainty`) and whether it is below 0.05 (`distinguishable`). Null where there
    is no runner-up or no point index."""
    points = table["points"].to_numpy(dtype=np.float64)
    count = np.rint(table["certified_accuracy"].to_numpy() * points)
    low, high = clopper_pearson(count, points)
    after = list(table.columns).index("certified_accuracy") + 1
    table.insert(after, "ci_high", high)
    table.insert(after, "ci_low", low)
    trial_ids = _models(frame)[1]["trial_id"].to_numpy()
    table["runner_up"] = [trial_ids[p[3]] if p[3] >= 0 else None for p in picks]
    if "idx" not in frame:
        table["paired_p"] = np.nan
        return table
    correct = frame["correct"].to_numpy(dtype=bool)
    radius = frame["radius"].to_numpy(dtype=np.float64)
    reach = np.where(correct & ~np.isnan(radius), radius, -np.inf)
    points_of = PointReach(codes, frame["idx"].to_numpy(), reach, k)
    table["paired_p"] = [
        points_of.paired_p(p[2], p[3], p[1]) if p[3] >= 0 else np.nan for p in picks
    ]
    table["distinguishable"] = [
        None if np.isnan(q) else bool(q < 1 - LEVEL) for q in table["paired_p"]
    ]
    return table


def _envelope_rows(
    models: pd.DataFrame, acc: np.ndarray, levels: np.ndarray, picks: list[Pick], by: str | None
) -> pd.DataFrame:
    values, radii, picked, _, sizes, reach = (list(p) for p in zip(*picks, strict=True))
    best = np.asarray(picked)
    columns = {by: values} if by is not None else {}
    columns["radius"] = radii
    columns["certified_accuracy"] = acc[best, np.searchsorted(levels, radii)]
    # Lists of scalars, not arrays: dtypes are inferred from the picked values (an
    # all-null `attack` column is float64), as for a frame built row by row.
    for col in ["trial_id", "cert_id", "clean_acc", "acr", "points", *SUMMARY_COLUMNS]:
        if col in models:
            columns[col] = list(models[col].to_numpy()[best])
    columns["models"] = sizes
    columns["max_radius"] = reach
    return pd.DataFrame(columns)


def max_radii(frame: pd.DataFrame) -> np.ndarray:
    """Per model (`model_table` order), the largest radius its certification can give at all
    (`kernel.certificates.max_radius`: σ·Φ⁻¹(α^(1/n)), every vote for one class; under DDRS,
    at its largest per-point σ): certified accuracy beyond it is 0 by construction, not by the
    model."""
    reach: np.ndarray = _LAST.get(frame, "reach", _max_radii)
    return reach.copy()


def _max_radii(frame: pd.DataFrame) -> np.ndarray:
    codes, models, first = _models(frame)
    if not {"sigma_cert", "n", "alpha"} <= set(frame.columns):
        return np.full(len(models), np.inf)  # settings unknown: no bound to mark
    # n and α are one model's setting; the bound grows with σ, so a model's largest σ gives it.
    sigma = np.full(len(models), -np.inf)
    np.maximum.at(sigma, codes, frame["sigma_cert"].to_numpy(dtype=np.float64))
    n, alpha = (frame[c].to_numpy(dtype=np.float64)[first] for c in ("n", "alpha"))
    return np.asarray(max_radius(sigma, n, alpha), dtype=np.float64)


def envelope_curve(frame: pd.DataFrame, radii: np.ndarray) -> np.ndarray:
    """The envelope's accuracy at many radii (for plots), over the selection's models."""
    return certified_accuracy(split_final(frame)[0], list(radii)).max(axis=0).to_numpy()
