"""CERTIFY over a list of test points of one model: rows for the results table. The math
(CERTIFY, PREDICT, the confidence bounds) is `trainables.smoothing`; this module loads the
points, batches them and runs it (with DDRS's per-point σ when asked).

Pure apart from reading the data set: no Ray, no file writing. Several points share each
forward batch (`points_per_batch`), each still getting its own n0 and n samples, drawn from its
own streams (`point_generators`: seeded by the run's seed, the role, "select" or "estimate",
and the point's index), so a point's certificate does not depend on which points share its
batches or shard: the `envelope` strategy, which certifies some points of a model, draws
what the `full` strategy draws for them. The model is
run as the settings say (`trainables.runtime`: precision, channels_last, compile); the
defaults are fp32, NCHW, eager. The settings
are the space's own `CertifySpec` (`trainables.kernel.stage_settings`), σ resolved for the
model (`CertifySpec.resolved`).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence

import torch

from trainables import runtime
from trainables.ddrs import optimize_sigma
from trainables.kernel.certificates import ABSTAIN
from trainables.kernel.stage_settings import CertifySpec
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


def seed_for(*parts: object) -> int:
    """A stable 63-bit seed from strings and numbers (same on every machine and run)."""
    return zlib.crc32("/".join(map(str, parts)).encode()) * 2654435761 % (2**63 - 1)


def point_generators(
    seed: int, role: str, indices: Sequence[int], device: torch.device
) -> list[torch.Generator]:
    """One generator per test point, seeded by (seed, role, index): the point's own stream of
    noise for one role (CERTIFY's "select" and "estimate", a pilot's "pilot-<stage>")."""
    return [
        torch.Generator(device=device).manual_seed(seed_for(seed, role, int(i))) for i in indices
    ]


def run_mode(settings: CertifySpec, device: torch.device) -> dict[str, str]:
    """How `certify_points` runs the model under `settings` on `device`, for the records:
    precision, channels_last and compile ("compiled", "eager" or "eager (compile
    unavailable)" where torch.compile cannot run)."""
    return {
        "precision": settings.precision,
        "channels_last": str(settings.channels_last).lower(),
        "compile": runtime.compile_mode(settings.compile, device),
    }


def _certify_batch(
    model,
    smooth: Smooth,
    xs: torch.Tensor,
    settings: CertifySpec,
    sigma: float,
    seed: int,
    indices: list[int],
):
    """(CERTIFY of each input of `xs` (the test points `indices`), the σ each was certified
    at, the wall time per input: the batch's, σ optimization included, shared evenly);
    `sigma`: the settings' σ."""
    t0 = time.perf_counter()
    sigmas = None
    if settings.ddrs is not None:
        d = settings.ddrs  # OptimizeSigma's draws: the batch's own stream, from its first point
        ddrs = torch.Generator(device=xs.device).manual_seed(seed_for(seed, "ddrs", indices[0]))
        sigmas = optimize_sigma(model, xs, sigma, d.iterations, d.lr, d.samples, d.min_sigma, ddrs)
    select = point_generators(seed, "select", indices, xs.device)
    estimate = point_generators(seed, "estimate", indices, xs.device)
    with runtime.autocast(settings.precision, xs.device):
        certs = smooth.certify_batch(
            xs,
            settings.n0,
            settings.n,
            settings.alpha,
            settings.batch_size,
            select,
            sigmas,
            estimate,
        )
    if xs.device.type == "cuda":
        torch.cuda.synchronize(xs.device)
    per_point = (time.perf_counter() - t0) / len(xs)
    point_sigmas = [sigma] * len(xs) if sigmas is None else sigmas.tolist()
    return certs, point_sigmas, per_point


def certify_points(
    model: torch.nn.Module,
    dataset,
    indices: Sequence[int],
    num_classes: int,
    settings: CertifySpec,
    seed: int,
    device: torch.device,
) -> dict[str, list]:
    """CERTIFY each `dataset[i]` for i in `indices`, point i's draws from its own streams
    seeded by (`seed`, role, i) (`point_generators`).

    Returns columns: idx, label, sigma_cert (σ of the point: `settings.sigma`, or σ_x from
    OptimizeSigma under DDRS), predict (−1 = abstain), count (nA: votes for the predicted
    class among n; for an abstention, votes for the selected class), p_lower, radius (0 on
    abstention), correct, time_s (wall time per point, σ optimization included; shared
    batches split evenly). `settings.sigma` must be set (`CertifySpec.resolved`: a ValueError
    otherwise). The model is first converted in place as `settings` say (channels last,
    compile); a precision the device cannot run raises `runtime.RuntimeSettingError`.
    """
    if settings.sigma is None:
        raise ValueError("certify_points needs σ set: settings.resolved(the model's training σ)")
    sigma = settings.sigma
    runtime.check_precision(settings.precision, device)
    runtime.prepare(model.eval(), device, settings.channels_last, settings.compile)
    smooth = Smooth(model, num_classes, sigma, runtime.noise_dtype(settings.precision))
    cols: dict[str, list] = {k: [] for k in COLUMNS}
    P = settings.points(len(indices))
    for start in range(0, len(indices), P):
        batch = [int(i) for i in indices[start : start + P]]
        items = [dataset[i] for i in batch]
        xs = torch.stack([it[0] for it in items]).to(device)
        certs, point_sigmas, per_point = _certify_batch(
            model, smooth, xs, settings, sigma, seed, batch
        )
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
