"""CERTIFY over a list of test points of one model: rows for the results table.

Pure apart from reading the data set: no Ray, no file writing. Several points share each
forward batch (`points_per_batch`), each still getting its own n0 and n samples.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainables.smoothing import ABSTAIN, Smooth


@dataclass(frozen=True)
class CertifySettings:
    n0: int
    n: int
    alpha: float
    sigma: float  # σ_cert
    batch_size: int  # noisy samples per forward pass
    points_per_batch: int | None = None  # None: batch_size // n0, so the n0 stage fills a batch

    def points(self, available: int) -> int:
        p = self.points_per_batch or max(1, self.batch_size // self.n0)
        return max(1, min(p, available))


def seed_for(*parts: object) -> int:
    """A stable 63-bit seed from strings and numbers (same on every machine and run)."""
    return zlib.crc32("/".join(map(str, parts)).encode()) * 2654435761 % (2**63 - 1)


def certify_points(
    model: torch.nn.Module,
    dataset,
    indices: Sequence[int],
    num_classes: int,
    settings: CertifySettings,
    seed: int,
    device: torch.device,
) -> dict[str, list]:
    """CERTIFY each `dataset[i]` for i in `indices`.

    Returns columns: idx, label, predict (−1 = abstain), count (nA: votes for the predicted
    class among n; for an abstention, votes for the selected class), p_lower, radius (0 on
    abstention), correct, time_s (wall time per point; shared batches split evenly).
    """
    model.eval()
    smooth = Smooth(model, num_classes, settings.sigma)
    generator = torch.Generator(device=device).manual_seed(seed)
    cols: dict[str, list] = {
        k: []
        for k in ("idx", "label", "predict", "count", "p_lower", "radius", "correct", "time_s")
    }
    P = settings.points(len(indices))
    for start in range(0, len(indices), P):
        chunk = list(indices[start : start + P])
        items = [dataset[i] for i in chunk]
        xs = torch.stack([it[0] for it in items]).to(device)
        t0 = time.perf_counter()
        certs = smooth.certify_batch(
            xs, settings.n0, settings.n, settings.alpha, settings.batch_size, generator
        )
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        per_point = (time.perf_counter() - t0) / len(chunk)
        for (_, label, idx), c in zip(items, certs, strict=True):
            cols["idx"].append(int(idx))
            cols["label"].append(int(label))
            cols["predict"].append(c.prediction)
            cols["count"].append(c.nA)
            cols["p_lower"].append(c.p_lower)
            cols["radius"].append(c.radius)
            cols["correct"].append(c.prediction != ABSTAIN and c.prediction == int(label))
            cols["time_s"].append(per_point)
    return cols
