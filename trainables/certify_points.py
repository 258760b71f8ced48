"""CERTIFY over a list of test points of one model: rows for the results table. The math
(CERTIFY, PREDICT, the confidence bounds) is `trainables.smoothing`; this module loads the
points, batches them and runs it (with DDRS's per-point σ when asked).

Pure apart from reading the data set: no Ray, no file writing. Several points share each
forward batch (`points_per_batch`), each still getting its own n0 and n samples. The model is
run as the settings say (`trainables.runtime`: precision, channels_last, compile); the
defaults (fp32, NCHW, eager) are the bit-for-bit behaviour of earlier versions.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainables import runtime
from trainables.ddrs import optimize_sigma
from trainables.kernel.certificates import ABSTAIN
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.smoothing import Smooth

COLUMNS = (
    "idx",
    "label",
    "sigma_cert",
    "predict",
    "count",
    "p_lower",
    "radius",
    "correct",
    "time_s",
)


@dataclass(frozen=True)
class CertifySettings:
    n0: int
    n: int
    alpha: float
    sigma: float  # σ_cert
    batch_size: int  # noisy samples per forward pass
    points_per_batch: int | None = None  # None: batch_size // n0, so the n0 stage fills a batch
    ddrs: DDRSSettings | None = None  # data-dependent σ_x per point, optimized from σ0 = sigma
    precision: str = "fp32"  # fp32 | bf16 | fp16: autocast of the forward passes, noise dtype
    channels_last: bool = False  # NHWC weights and activations
    compile: bool = False  # torch.compile the forward (eager, with a warning, where it cannot)

    def points(self, available: int) -> int:
        p = self.points_per_batch or max(1, self.batch_size // self.n0)
        return max(1, min(p, available))


def seed_for(*parts: object) -> int:
    """A stable 63-bit seed from strings and numbers (same on every machine and run)."""
    return zlib.crc32("/".join(map(str, parts)).encode()) * 2654435761 % (2**63 - 1)


def run_mode(settings: CertifySettings, device: torch.device) -> dict[str, str]:
    """How `certify_points` runs the model under `settings` on `device`, for the records:
    precision, channels_last and compile ("compiled", "eager" or "eager (compile
    unavailable)" where torch.compile cannot run)."""
    return {
        "precision": settings.precision,
        "channels_last": str(settings.channels_last).lower(),
        "compile": runtime.compile_mode(settings.compile, device),
    }


def _certify_batch(model, smooth: Smooth, xs: torch.Tensor, settings: CertifySettings, generator):
    """(CERTIFY of each input of `xs`, the σ each was certified at, the wall time per input:
    the batch's, σ optimization included, shared evenly)."""
    t0 = time.perf_counter()
    sigmas = None
    if settings.ddrs is not None:
        d = settings.ddrs
        sigmas = optimize_sigma(
            model, xs, settings.sigma, d.iterations, d.lr, d.samples, d.min_sigma, generator
        )
    with runtime.autocast(settings.precision, xs.device):
        certs = smooth.certify_batch(
            xs, settings.n0, settings.n, settings.alpha, settings.batch_size, generator, sigmas
        )
    if xs.device.type == "cuda":
        torch.cuda.synchronize(xs.device)
    per_point = (time.perf_counter() - t0) / len(xs)
    point_sigmas = [settings.sigma] * len(xs) if sigmas is None else sigmas.tolist()
    return certs, point_sigmas, per_point


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

    Returns columns: idx, label, sigma_cert (σ of the point: `settings.sigma`, or σ_x from
    OptimizeSigma under DDRS), predict (−1 = abstain), count (nA: votes for the predicted
    class among n; for an abstention, votes for the selected class), p_lower, radius (0 on
    abstention), correct, time_s (wall time per point, σ optimization included; shared
    batches split evenly). The model is first converted in place as `settings` say (channels
    last, compile); a precision the device cannot run raises `runtime.RuntimeSettingError`.
    """
    runtime.check_precision(settings.precision, device)
    runtime.prepare(model.eval(), device, settings.channels_last, settings.compile)
    smooth = Smooth(model, num_classes, settings.sigma, runtime.noise_dtype(settings.precision))
    generator = torch.Generator(device=device).manual_seed(seed)
    cols: dict[str, list] = {k: [] for k in COLUMNS}
    P = settings.points(len(indices))
    for start in range(0, len(indices), P):
        items = [dataset[i] for i in indices[start : start + P]]
        xs = torch.stack([it[0] for it in items]).to(device)
        certs, point_sigmas, per_point = _certify_batch(model, smooth, xs, settings, generator)
        for (_, label, idx), c, s in zip(items, certs, point_sigmas, strict=True):
            row = {
                "idx": int(idx),
                "label": int(label),
                "sigma_cert": s,
                "predict": c.prediction,
                "count": c.nA,
                "p_lower": c.p_lower,
                "radius": c.radius,
                "time_s": per_point,
                "correct": c.prediction != ABSTAIN and c.prediction == int(label),
            }
            for k in COLUMNS:
                cols[k].append(row[k])
    return cols
