"""Certified-accuracy curves and their upper envelope over a sweep.

A *model* is one (trial_id, cert_id) pair: a trained classifier under one certification
setting. Its approximate certified accuracy at radius r is the share of its test points with
`correct and radius >= r` (abstentions count as wrong). The upper envelope at r is the best
model's accuracy; ties go to the higher clean accuracy (r = 0), then the smaller trial_id, as
the SmoothAdv analysis picked its winners. Every curve is non-increasing in r, so is the
envelope.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sweeper.results import MODEL_KEY, SCHEMA

IDENTITY_COLUMNS = [f.name for f in SCHEMA if f.name not in MODEL_KEY]
SUMMARY_COLUMNS = ["method", "attack", "sigma", "epsilon", "steps", "m_train", "sigma_cert"]


class EnvelopeError(ValueError):
    pass


def parse_radii(text: str) -> list[float]:
    """`0:2.25:0.25` (start:stop:step, stop included) or `0,0.5,1`."""
    try:
        if ":" in text:
            start, stop, step = (float(p) for p in text.split(":"))
            if not (np.isfinite([start, stop, step]).all() and step > 0 and start <= stop):
                raise ValueError
            count = int(np.floor((stop - start) / step + 1e-9)) + 1
            radii = [round(start + k * step, 10) for k in range(count)]
        else:
            radii = [float(p) for p in text.split(",") if p.strip()]
        if not radii or not all(np.isfinite(r) and r >= 0 for r in radii):
            raise ValueError
        return radii
    except ValueError:
        raise EnvelopeError(
            f"--radii {text!r}: expected start:stop:step (e.g. 0:2.25:0.25) or a list 0,0.5,1"
        ) from None


def _codes(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row, the number of its model; and the models (sorted by trial_id, cert_id)."""
    groups = frame.groupby(MODEL_KEY, sort=True)
    return groups.ngroup().to_numpy(), groups.size().index.to_frame(index=False)


def model_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per model: its identity, points, clean accuracy, ACR and abstention rate."""
    codes, models = _codes(frame)
    k = len(models)
    points = np.bincount(codes, minlength=k)
    correct = frame["correct"].to_numpy(dtype=bool)
    radius = frame["radius"].to_numpy(dtype=np.float64)
    models["points"] = points
    models["clean_acc"] = np.bincount(codes, weights=correct, minlength=k) / points
    models["acr"] = np.bincount(codes, weights=radius * correct, minlength=k) / points
    models["abstain_rate"] = (
        np.bincount(codes, weights=frame["predict"].to_numpy() == -1, minlength=k) / points
    )
    first = pd.Series(np.arange(len(frame))).groupby(codes).first().to_numpy()
    for col in IDENTITY_COLUMNS:
        if col in frame and col not in models:
            models[col] = frame[col].to_numpy()[first]
    return models


def certified_accuracy(frame: pd.DataFrame, radii: list[float]) -> pd.DataFrame:
    """(models × radii) certified accuracy; rows in `model_table` order."""
    codes, models = _codes(frame)
    points = np.bincount(codes, minlength=len(models))
    correct = frame["correct"].to_numpy(dtype=bool)
    radius = frame["radius"].to_numpy(dtype=np.float64)
    return pd.DataFrame(
        {
            r: np.bincount(codes, weights=correct & (radius >= r), minlength=len(models)) / points
            for r in radii
        }
    )


def envelope(frame: pd.DataFrame, radii: list[float], by: str | None = None) -> pd.DataFrame:
    """Per radius (and per value of column `by`): the best certified accuracy and its model."""
    if frame.empty:
        raise EnvelopeError(
            "no certification results yet: run `sweeper run grid <space>` or `sweeper certify <space>`"
        )
    if by is not None and by not in frame.columns:
        raise EnvelopeError(
            f"--by {by!r} is not a results column (e.g. sigma, method, attack, m_train, epsilon)"
        )
    models = model_table(frame)
    acc = certified_accuracy(frame, radii)
    groups = (
        [(None, models.index)]
        if by is None
        else list(models.groupby(by, dropna=False).groups.items())
    )
    rows = []
    for value, index in groups:
        for r in radii:
            cand = pd.DataFrame(
                {
                    "acc": acc.loc[index, r],
                    "clean": models.loc[index, "clean_acc"],
                    "tid": models.loc[index, "trial_id"],
                }
            )
            best = cand.sort_values(["acc", "clean", "tid"], ascending=[False, False, True]).index[
                0
            ]
            row = {by: value} if by is not None else {}
            row.update({"radius": r, "certified_accuracy": float(acc.loc[best, r])})
            row.update(
                models.loc[best, ["trial_id", "cert_id", "clean_acc", "acr", "points"]].to_dict()
            )
            row.update({c: models.loc[best, c] for c in SUMMARY_COLUMNS if c in models})
            row["models"] = len(index)
            rows.append(row)
    return pd.DataFrame(rows)


def envelope_curve(frame: pd.DataFrame, radii: np.ndarray) -> np.ndarray:
    """The envelope's accuracy at many radii (for plots)."""
    return certified_accuracy(frame, list(radii)).max(axis=0).to_numpy()
