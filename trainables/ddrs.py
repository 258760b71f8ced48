"""Data-dependent randomized smoothing (Alfarra et al. 2022): a smoothing σ_x per input, and
the memory that keeps certification with per-input σ sound.

`optimize_sigma` (Algorithm 1) runs K steps of gradient ascent on σ for the proxy radius
    R(x, σ) = σ/2 · (Φ⁻¹(p̂_1) − Φ⁻¹(p̂_2)),   p̂ = mean_i softmax(F(x + σ·ε_i)), ε_i ~ N(0, I),
p̂_1 ≥ p̂_2 its two largest entries clamped to [0.02, 0.98], fresh ε every iteration
(reparameterization: the gradient flows through σ·ε). σ starts at σ0 (the model's training σ)
and is kept ≥ `min_sigma`.

`memory_certify` (Algorithm 3) is the sound certificate: with per-input σ the smoothed
classifier is a different function at every x, so two certified balls of different classes
could overlap. Points are processed in one fixed order against a memory of earlier
(x, prediction, radius) balls: a ball overlapping an earlier ball of another class is shrunk
to the largest ball outside it (LargestOutSubset, radius d − r_j); if x lies inside such a
ball, the prediction switches to that ball's class and the radius becomes the largest ball
around x inside it (LargestInSubset, r_j − d). The result depends on the order: results are
only comparable for the same order (here: ascending test index).

Abstentions, by default, are what the authors' post_processing_memory_based.py makes of them
(l. 32-76: every line of the certification log, abstentions included, enters `saved_*`):
radius-0 balls of class −1. So a later ball covering an abstained point is shrunk to leave it
out (d − 0), and an abstained point inside an earlier ball takes that ball's class and the
ball r_j − d. `abstentions_in_memory=False` is sweeper's reading before issue 26: abstentions
stay as they are and never enter the memory.

Both readings are sound: no two balls of different classes intersect, and each ball's class
is backed by one CERTIFY at its own σ_x (Cohen's guarantee, probability ≥ 1 − α), the memory
classifier answering that class inside it. An abstention turned into a class gets exactly the
certificate a point of another class gets at the same place (a ball inside the earlier ball).
The script's rule also keeps every abstention the memory classifier has answered true (no
later ball claims a class at an abstained point); the other reading treats an abstention as
no claim, as Cohen's CERTIFY does (it may abstain inside another point's certified ball).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from trainables.kernel.certificates import ABSTAIN

PROB_CLAMP = (0.02, 0.98)


def proxy_radius(model, x: torch.Tensor, sigma: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """R(x, σ) per input (B,) for x (B,C,H,W), σ (B,), standard-normal ε (B,n,C,H,W)."""
    B, n = eps.shape[:2]
    scale = sigma.view(B, 1, *([1] * (x.dim() - 1)))
    logits = model((x.unsqueeze(1) + scale * eps).flatten(0, 1))
    p = F.softmax(logits.float(), dim=1).view(B, n, -1).mean(dim=1).clamp(*PROB_CLAMP)
    top2 = p.topk(2, dim=1).values
    return sigma / 2 * (torch.special.ndtri(top2[:, 0]) - torch.special.ndtri(top2[:, 1]))


def optimize_sigma(
    model,
    x: torch.Tensor,
    sigma0: float | torch.Tensor,
    iterations: int = 100,
    lr: float = 1e-4,
    samples: int = 1,
    min_sigma: float = 1e-3,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """σ_x for each input of x (B,C,H,W): `iterations` ascent steps on R from σ0 (a float or
    a (B,) tensor); returns a (B,) tensor ≥ min_sigma. The model's parameters get no gradient
    and its mode is left as it is (the caller puts it in eval mode)."""
    sigma = torch.as_tensor(sigma0, dtype=x.dtype, device=x.device).expand(x.shape[0]).clone()
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        with torch.enable_grad():
            for _ in range(iterations):
                sigma.requires_grad_(True)
                shape = (x.shape[0], samples, *x.shape[1:])
                eps = torch.randn(shape, generator=generator, device=x.device, dtype=x.dtype)
                (grad,) = torch.autograd.grad(proxy_radius(model, x, sigma, eps).sum(), sigma)
                sigma = (sigma.detach() + lr * torch.nan_to_num(grad)).clamp_min(min_sigma)
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)
    return sigma.detach()


@dataclass(frozen=True)
class MemoryResult:
    prediction: np.ndarray  # (N,) int, ABSTAIN = −1
    radius: np.ndarray  # (N,) float
    changed: np.ndarray  # (N,) bool: prediction or radius differs from the raw certificate


def memory_certify(
    points: np.ndarray,
    predictions: np.ndarray,
    radii: np.ndarray,
    abstentions_in_memory: bool = True,
) -> MemoryResult:
    """Adjust raw certificates (prediction_i, radius_i) at points (N, D), processed in the
    given order, so that no two balls of different predictions intersect (the module
    docstring). Abstentions (−1) must have radius 0 (CERTIFY's); with `abstentions_in_memory`
    (the default, the authors' script) they are balls of class −1 and radius 0, without it
    they are kept as they are and never enter the memory. Balls of the same class may
    overlap. Touching balls (d = r_i + r_j) count as disjoint: the certificate is for the
    open ball ‖δ‖ < R.
    """
    points = np.asarray(points, dtype=np.float64).reshape(len(points), -1)
    pred = np.asarray(predictions, dtype=np.int64).copy()
    rad = np.asarray(radii, dtype=np.float64).copy()
    if abstentions_in_memory and (rad[pred == ABSTAIN] != 0).any():
        raise ValueError("an abstention with a radius: CERTIFY gives abstentions radius 0")
    kept: list[int] = []
    for i in range(len(points)):
        if not abstentions_in_memory and pred[i] == ABSTAIN:
            continue
        if kept:
            _settle(points, pred, rad, i, np.asarray(kept))
        kept.append(i)
    changed = (pred != np.asarray(predictions)) | ~np.isclose(rad, radii, rtol=0, atol=0)
    return MemoryResult(pred, rad, changed)


def _settle(points, pred, rad, i: int, memory: np.ndarray) -> None:
    """Make ball i consistent with the memory (in place): the script's l. 44-71, with
    torch.min(..., dim=0) for its `rad, rad_idx = torch.min(...)` (which raises as written:
    a 1-D tensor's torch.min is one 0-d value). After a switch the ball lies inside ball j,
    which no ball of another class meets, so the overlap test below finds nothing then."""
    dist = np.linalg.norm(points[memory] - points[i], axis=1)
    other = pred[memory] != pred[i]
    inside = other & (dist < rad[memory])
    if inside.any():
        # x_i lies in an earlier ball of another class: take that class (the ball that
        # contains it most deeply, first in order on ties) and the largest ball inside it.
        depth = np.where(inside, rad[memory] - dist, -np.inf)
        j = int(np.argmax(depth))
        pred[i] = pred[memory[j]]
        rad[i] = depth[j]
        other = pred[memory] != pred[i]
    overlap = other & (dist < rad[memory] + rad[i])
    if overlap.any():
        rad[i] = max(0.0, float(np.min(dist[overlap] - rad[memory][overlap])))
