"""The attack over a list of test points of one model (SmoothAdv, Salman et al. 2019, section
4.2): SmoothAdv-PGD at the setting's (ε, m_test), then PREDICT of each attacked input; rows for
the attack's results table. The attack and PREDICT are `trainables.empirical_robustness`; this
module batches the points and runs it, as `trainables.certify_points` does CERTIFY. The setting
is the stage's own `EmpiricalSetting` (`trainables.kernel.stage_settings`).

Pure apart from reading the data set: no Ray, no file writing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from trainables.empirical_robustness import attack_and_predict
from trainables.kernel.stage_settings import EmpiricalSetting


def empirical_points(
    model,
    dataset,
    indices: Sequence[int],
    setting: EmpiricalSetting,
    sigma: float,
    num_classes: int,
    generator,
    device,
) -> dict[str, list]:
    """Attack and PREDICT each `dataset[i]` for i in `indices`: columns idx, label, predict,
    correct, perturbation_norm, time_s (wall time per point; shared batches split evenly).
    Points are attacked together, at most batch_size // m_test at a time, so that every
    forward pass of the attack holds at most `batch_size` noisy samples."""
    m = setting.m_test or 1
    group = max(1, setting.batch_size // m)
    cols: dict[str, list] = {
        k: [] for k in ("idx", "label", "predict", "correct", "perturbation_norm", "time_s")
    }
    for start in range(0, len(indices), group):
        items = [dataset[i] for i in indices[start : start + group]]
        x = torch.stack([it[0] for it in items]).to(device)
        y = torch.tensor([int(it[1]) for it in items], device=device)
        t0 = _now(device)
        results = attack_and_predict(
            model,
            x,
            y,
            sigma,
            setting.epsilon,
            setting.steps or 1,
            m,
            setting.n,
            setting.alpha,
            setting.batch_size,
            setting.estimator or "plugin",
            generator,
            num_classes,
        )
        per_point = (_now(device) - t0) / len(items)
        for it, r in zip(items, results, strict=True):
            row = [int(it[2]), r.label, r.prediction, r.correct, r.perturbation_norm, per_point]
            for k, v in zip(cols, row, strict=True):
                cols[k].append(v)
    return cols


def _now(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
