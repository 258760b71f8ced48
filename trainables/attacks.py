"""ℓ2 attacks on smoothed soft classifiers (SmoothAdv, Salman et al. 2019) and on base models.

Shapes: x is (B, C, H, W) in [0, 1]; y is (B,); `noise` is (B, m, C, H, W), already scaled by σ
(δ_i ~ N(0, σ² I)). The same m noise draws are used in every attack step: Pseudocode 1 reuses
them, which stabilizes the attack, and the caller reuses them again for the augmentation.

The attack objective is the plug-in estimate (6) of the smoothed soft classifier's loss,
    J(x') = −log( (1/m) Σ_i softmax(F(x' + δ_i))_y ),
maximized over ‖x' − x‖₂ ≤ ε and x' ∈ [0, 1]. With zero noise and m = 1 it is the ordinary
cross-entropy of the base classifier ("vanilla PGD" of appendix C.1).

Attacks run with the model in eval mode and its parameters frozen (`frozen_eval`); only the
input gets gradients. A zero gradient leaves that input where it is (no random restart).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

PROB_FLOOR = 1e-20  # clamp inside the log, as the reference code does


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside DistributedDataParallel (attacks need no gradient synchronization)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


@contextmanager
def frozen_eval(model: nn.Module):
    """Eval mode, parameters without gradients; restores both afterwards. Yields the module
    to run (unwrapped from DistributedDataParallel: an attack's forward passes must not
    take part in the gradient reduction of data-parallel training)."""
    model = unwrap(model)
    was_training = model.training
    flags = [p.requires_grad for p in model.parameters()]
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)


def smoothed_probs(model: nn.Module, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Plug-in estimate of the smoothed soft classifier: (B, K) = mean_i softmax(F(x + δ_i))."""
    B, m = noise.shape[:2]
    logits = model((x.unsqueeze(1) + noise).flatten(0, 1))
    return F.softmax(logits.float(), dim=1).view(B, m, -1).mean(dim=1)


def smoothed_nll(model: nn.Module, x: torch.Tensor, noise: torch.Tensor, y: torch.Tensor):
    """Per-input attack objective (B,): −log of the smoothed soft probability of y."""
    p = smoothed_probs(model, x, noise).gather(1, y.unsqueeze(1)).squeeze(1)
    return -torch.log(p.clamp_min(PROB_FLOOR))


def l2_normalize(v: torch.Tensor) -> torch.Tensor:
    """Each row of v scaled to unit ℓ2 norm; zero rows stay zero."""
    norms = v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))
    return v / norms.clamp_min(1e-12)


def project_l2(delta: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Rows of delta scaled down (never up) to ℓ2 norm at most epsilon."""
    norms = delta.flatten(1).norm(dim=1).view(-1, *([1] * (delta.dim() - 1)))
    return delta * torch.clamp(epsilon / norms.clamp_min(1e-12), max=1.0)


def _objective_grad(model, x, delta, noise, y) -> tuple[torch.Tensor, torch.Tensor]:
    """(∇_δ Σ J(x + δ), smoothed probabilities at x + δ)."""
    delta = delta.detach().requires_grad_(True)
    probs = smoothed_probs(model, x + delta, noise)
    p_y = probs.gather(1, y.unsqueeze(1)).squeeze(1)
    loss = -torch.log(p_y.clamp_min(PROB_FLOOR)).sum()
    (grad,) = torch.autograd.grad(loss, delta)
    return grad, probs.detach()


def pgd(model, x, y, noise, epsilon: float, steps: int) -> torch.Tensor:
    """SmoothAdv-PGD: T steps of normalized gradient ascent of size 2ε/T from x (no random
    start); after each step clamp to [0, 1] and project onto the ε-ball around x."""
    if epsilon == 0:
        return x.detach()
    step_size = 2 * epsilon / steps
    x = x.detach()
    delta = torch.zeros_like(x)
    with frozen_eval(model) as model:
        for _ in range(steps):
            grad, _ = _objective_grad(model, x, delta, noise, y)
            delta = delta + step_size * l2_normalize(grad)
            delta = (x + delta).clamp(0, 1) - x
            delta = project_l2(delta, epsilon)
    return (x + delta).detach()


def ddn_step_sizes(steps: int, start: float = 1.0, end: float = 0.01) -> list[float]:
    """Cosine annealing from `start` (first step) to `end` (last step)."""
    if steps == 1:
        return [start]
    return [
        end + (start - end) * (1 + math.cos(math.pi * k / (steps - 1))) / 2 for k in range(steps)
    ]


def ddn(
    model, x, y, noise, epsilon: float, steps: int,
    init_norm: float = 1.0, gamma: float = 0.05, levels: int | None = 256,
) -> torch.Tensor:  # fmt: skip
    """SmoothAdv-DDN (Rony et al. 2019) on the smoothed objective.

    Decoupled direction and norm: a normalized ascent step of size α_k (cosine-annealed
    1 → 0.01), then the perturbation is put on the sphere of radius ‖·‖ = norm, where norm
    starts at ε0 = `init_norm` and shrinks by (1 − γ) while the smoothed prediction is wrong,
    grows by (1 + γ) otherwise. The smallest perturbation seen that fooled the smoothed
    prediction is kept and finally scaled into the ε-ball; if none fooled it, x is returned.
    `levels` quantizes x + δ as the reference code does (None: no quantization).
    """
    if epsilon == 0:
        return x.detach()
    x = x.detach()
    B = x.shape[0]
    shape = (B, *([1] * (x.dim() - 1)))
    delta = torch.zeros_like(x)
    norm = torch.full((B,), float(init_norm), device=x.device)
    worst_norm = torch.maximum(x, 1 - x).flatten(1).norm(dim=1)
    best_l2 = worst_norm.clone()
    best_delta = torch.zeros_like(x)
    with frozen_eval(model) as model:
        for alpha in ddn_step_sizes(steps):
            grad, probs = _objective_grad(model, x, delta, noise, y)
            l2 = delta.flatten(1).norm(dim=1)
            is_adv = probs.argmax(dim=1) != y
            better = is_adv & (l2 < best_l2)
            best_l2 = torch.where(better, l2, best_l2)
            best_delta = torch.where(better.view(shape), delta, best_delta)
            delta = delta + alpha * l2_normalize(grad)
            norm = torch.minimum(norm * (1 - (2 * is_adv.float() - 1) * gamma), worst_norm)
            delta = delta * (norm / delta.flatten(1).norm(dim=1).clamp_min(1e-12)).view(shape)
            x_new = x + delta
            if levels is not None:
                x_new = torch.round(x_new * (levels - 1)) / (levels - 1)
            delta = x_new.clamp(0, 1) - x
    return (x + project_l2(best_delta, epsilon)).detach()


def stein_pgd(model, x, y, noise, epsilon: float, steps: int, sigma: float) -> torch.Tensor:
    """PGD with the gradient-free estimator (7) (Stein's lemma):
    ∇ G(x')_y ≈ (1/m) Σ_i δ_i / σ² · softmax(F(x' + δ_i))_y; steps descend G_y. No network
    gradients are computed."""
    if epsilon == 0:
        return x.detach()
    step_size = 2 * epsilon / steps
    x = x.detach()
    delta = torch.zeros_like(x)
    B, m = noise.shape[:2]
    with frozen_eval(model) as model, torch.no_grad():
        for _ in range(steps):
            logits = model((x + delta).unsqueeze(1).add(noise).flatten(0, 1))
            p_y = F.softmax(logits.float(), dim=1).view(B, m, -1)[torch.arange(B), :, y]  # (B, m)
            grad = (noise * p_y.view(B, m, *([1] * (x.dim() - 1)))).mean(dim=1) / sigma**2
            delta = delta - step_size * l2_normalize(grad)
            delta = project_l2((x + delta).clamp(0, 1) - x, epsilon)
    return (x + delta).detach()
