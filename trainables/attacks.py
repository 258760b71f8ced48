"""ℓ2 attacks on smoothed soft classifiers (SmoothAdv, Salman et al. 2019) and on base models.

Shapes: x is (B, C, H, W) in [0, 1]; y is (B,); `noise` is (B, m, C, H, W), already scaled by σ
(δ_i ~ N(0, σ² I)). The same m noise draws are used in every attack step: Pseudocode 1 reuses
them, which stabilizes the attack, and the caller reuses them again for the augmentation.

The attack objective is the plug-in estimate (6) of the smoothed soft classifier's loss,
    J(x') = −log( (1/m) Σ_i softmax(F(x' + δ_i))_y ),
maximized over ‖x' − x‖₂ ≤ ε and x' ∈ [0, 1]. PGD and DDN follow the authors' code
(Hadisalman/smoothing-adversarial, code/attacks.py) operation for operation: with m = 1 the
objective is the cross-entropy of F(x' + δ) summed over the batch (its single-noise `_attack`),
with m > 1 the batch mean of J with the probability clamped at 1e-20 inside the log (its
`_attack_mutlinoise`); each step moves along the ℓ2-normalized gradient, and a row whose
gradient is exactly zero moves along a standard normal draw instead (from `generator`, so runs
stay reproducible). One difference: a nonzero gradient too small for fp32's sum of squares
keeps its direction, where the reference draws at random (`unit_or_random`; docs/deviations.md,
Deviations 19). With zero noise and m = 1 the objective is the base classifier's cross-entropy
("vanilla PGD" of appendix C.1).

The objective is computed in fp32 from the logits whatever the autocast dtype; under autocast
the gradient is sent back through the network scaled per input by a power of two (its largest
logit gradient brought into [1, 2)), so an fp16 backward pass cannot flush it to zero. Only the
direction of each input's gradient is used, which that scale leaves unchanged.

Attacks run with the model in eval mode and its parameters frozen (`frozen_eval`); only the
input gets gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

PROB_FLOOR = 1e-20  # clamp inside the log, as the reference code does
DDN_LR_END = 0.01  # DDN's cosine-annealed step size ends here (eta_min of the reference)

Objective = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


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


def plugin_nll(logits: torch.Tensor, y: torch.Tensor, m: int) -> torch.Tensor:
    """J per input (B,) from the (B·m, K) logits of the m noisy copies of each input, in fp32
    (or wider): −log of the mean softmax probability of y, clamped at PROB_FLOOR in the log."""
    probs = F.softmax(_wide(logits), dim=1).view(len(y), m, -1).mean(dim=1)
    return -torch.log(probs.gather(1, y.unsqueeze(1)).squeeze(1).clamp_min(PROB_FLOOR))


def _wide(logits: torch.Tensor) -> torch.Tensor:
    """The logits in fp32, or as they are if wider (fp64)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def smoothadv_loss(logits: torch.Tensor, y: torch.Tensor, m: int) -> torch.Tensor:
    """The loss the reference's PGD and DDN descend (−J): for m = 1 the cross-entropy summed
    over the batch, for m > 1 the batch mean of the plug-in J."""
    if m == 1:
        return -F.cross_entropy(_wide(logits), y, reduction="sum")
    return -plugin_nll(logits, y, m).mean()


def smoothed_nll_sum(logits: torch.Tensor, y: torch.Tensor, m: int) -> torch.Tensor:
    """Σ_b J(x_b) (SmoothMix's ascent objective, the plug-in J for every m)."""
    return plugin_nll(logits, y, m).sum()


def input_grad(
    model, x, delta, noise, y, objective: Objective = smoothadv_loss
) -> tuple[torch.Tensor, torch.Tensor]:
    """(∇_δ objective at x + δ with the m noises, the (B·m, K) fp32 logits, detached)."""
    delta = delta.detach().requires_grad_(True)
    m = noise.shape[1]
    logits = model(((x + delta).unsqueeze(1) + noise).flatten(0, 1))
    wide = _wide(logits)
    loss = objective(wide, y, m)
    if wide.dtype == logits.dtype:
        (grad,) = torch.autograd.grad(loss, delta)
    else:  # autocast: keep the gradient in range on its way back through the network
        # The first pass stops at `wide`; the second runs wide's own graph, which the first
        # never executes, so nothing needs retaining.
        (g,) = torch.autograd.grad(loss, wide)
        (grad,) = torch.autograd.grad(wide, delta, grad_outputs=g * _pow2_scale(g, m))
    return grad, wide.detach()


def _pow2_scale(g: torch.Tensor, m: int) -> torch.Tensor:
    """(B·m, 1): per input, the power of two that brings its largest |g| into [1, 2) (exact
    in floating point, so each input's gradient direction is unchanged)."""
    top = g.detach().view(-1, m * g.shape[1]).abs().amax(dim=1)
    _, exponent = torch.frexp(top)
    scale = torch.ldexp(torch.ones_like(top), 1 - exponent)
    return scale.repeat_interleave(m).view(-1, 1)


def pow2_rows(v: torch.Tensor) -> torch.Tensor:
    """Each row of v times the power of two that brings its largest |entry| into [0.5, 1) (a
    zero row stays zero). Exact: every entry is rounded once, as a single multiplication by that
    power would round it (a power fp32 may not hold: 2^146 for a subnormal row), so a row keeps
    its direction however small or large it is."""
    rows = v.flatten(1)
    _, shift = torch.frexp(rows.abs().amax(dim=1, keepdim=True))
    mantissa, exponent = torch.frexp(rows)
    return torch.ldexp(mantissa, exponent - shift).view_as(v)


def unit_or_random(grad: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Each row of grad divided by its ℓ2 norm; a row that is exactly zero becomes a standard
    normal draw from `generator` (not normalized), as the reference code's randn_like.

    The norm is taken after `pow2_rows`, so a nonzero row keeps its direction however small:
    the plain sum of squares underflows to 0 in fp32 once every entry is below ~1e-23, and the
    reference code then draws at random (docs/deviations.md, 19). For every other row the
    result is the plain division's, bit for bit (scaling by a power of two is exact)."""
    scaled = pow2_rows(grad)
    norms = scaled.flatten(1).norm(p=2, dim=1)
    unit = scaled / norms.view(-1, *([1] * (grad.dim() - 1)))
    zero = norms == 0
    if bool(zero.any()):
        shape = (int(zero.sum()), *grad.shape[1:])
        unit[zero] = torch.randn(shape, generator=generator, device=grad.device, dtype=grad.dtype)
    return unit


def l2_normalize(v: torch.Tensor) -> torch.Tensor:
    """Each row of v scaled to unit ℓ2 norm; zero rows stay zero."""
    norms = v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))
    return v / norms.clamp_min(1e-12)


def project_l2(delta: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Rows of delta scaled down (never up) to ℓ2 norm at most epsilon."""
    norms = delta.flatten(1).norm(dim=1).view(-1, *([1] * (delta.dim() - 1)))
    return delta * torch.clamp(epsilon / norms.clamp_min(1e-12), max=1.0)


def pgd(model, x, y, noise, epsilon: float, steps: int, generator=None) -> torch.Tensor:
    """SmoothAdv-PGD: T steps of normalized gradient ascent of size 2ε/T from x (no random
    start); after each step clamp to [0, 1] and project onto the ε-ball around x (torch's
    renorm, as the reference). Zero-gradient rows step along a draw from `generator`."""
    if epsilon == 0:
        return x.detach()
    lr = epsilon / steps * 2
    x = x.detach()
    delta = torch.zeros_like(x)
    with frozen_eval(model) as model:
        for _ in range(steps):
            grad, _ = input_grad(model, x, delta, noise, y)
            delta = delta.add(unit_or_random(grad, generator), alpha=-lr)
            delta = (x + delta).clamp(0, 1) - x
            delta = torch.renorm(delta, p=2, dim=0, maxnorm=epsilon)
    return (x + delta).detach()


def ddn_step_sizes(steps: int, start: float = 1.0, end: float = DDN_LR_END) -> list[float]:
    """The reference's step sizes: CosineAnnealingLR(lr `start`, T_max = steps, eta_min `end`)
    stepped before every step, i.e. its values at k = 1..T (T = 2: 0.505, 0.01)."""
    return [
        end + (start - end) * (1 + math.cos(math.pi * k / steps)) / 2 for k in range(1, steps + 1)
    ]


def majority(logits: torch.Tensor, m: int) -> torch.Tensor:
    """(B,) the mode of the m hard predictions of each input (torch.mode: the smallest class
    on a tie), as the reference decides whether a DDN iterate is adversarial."""
    return logits.argmax(dim=1).view(-1, m).mode(dim=1).values


def quantize(v: torch.Tensor, levels: int | None) -> torch.Tensor:
    return v if levels is None else torch.round(v * (levels - 1)) / (levels - 1)


def ddn(
    model,
    x,
    y,
    noise,
    epsilon: float,
    steps: int,
    init_norm: float | None = None,
    gamma: float = 0.05,
    levels: int | None = 256,
    generator=None,
) -> torch.Tensor:
    """SmoothAdv-DDN (Rony et al. 2019) on the smoothed objective, as the reference runs it.

    Each step: an iterate whose majority vote is wrong and whose norm is the smallest so far is
    kept; a normalized ascent step of size α_k (`ddn_step_sizes`); the perturbation put on the
    sphere of radius `norm`, which starts at `init_norm` (None: ε, as train_pgd.py sets it
    every epoch) and shrinks by (1 − γ) if the iterate was adversarial, grows by (1 + γ)
    otherwise (at most the distance to the farthest corner of the box); x + δ quantized to
    `levels` and clamped to [0, 1]. The kept δ is renormed into the ε-ball and quantized
    again (so it may exceed ε by half a level per pixel); none kept: x itself.
    """
    if epsilon == 0:
        return x.detach()
    x = x.detach()
    shape = (x.shape[0], *([1] * (x.dim() - 1)))
    delta = torch.zeros_like(x)
    start = epsilon if init_norm is None else init_norm
    norm = torch.full((x.shape[0],), float(start), device=x.device)
    worst_norm = torch.maximum(x, 1 - x).flatten(1).norm(p=2, dim=1)
    best_l2, best_delta = worst_norm.clone(), torch.zeros_like(x)
    with frozen_eval(model) as model:
        for lr in ddn_step_sizes(steps):
            l2 = delta.flatten(1).norm(p=2, dim=1)
            grad, logits = input_grad(model, x, delta, noise, y)
            is_adv = majority(logits, noise.shape[1]) != y
            better = is_adv & (l2 < best_l2)
            best_l2 = torch.where(better, l2, best_l2)
            best_delta = torch.where(better.view(shape), delta, best_delta)
            delta = delta.add(unit_or_random(grad, generator), alpha=-lr)
            norm = torch.minimum(norm * (1 - (2 * is_adv.float() - 1) * gamma), worst_norm)
            delta = delta * (norm / delta.flatten(1).norm(p=2, dim=1).clamp_min(1e-12)).view(shape)
            delta = quantize(x + delta, levels).clamp(0, 1) - x
    best = quantize(torch.renorm(best_delta, p=2, dim=0, maxnorm=epsilon), levels)
    return (x + best).detach()


def stein_pgd(
    model, x, y, noise, epsilon: float, steps: int, sigma: float, generator=None
) -> torch.Tensor:
    """PGD with the gradient-free estimator (7) (Stein's lemma):
    ∇ G(x')_y ≈ (1/m) Σ_i δ_i / σ² · softmax(F(x' + δ_i))_y; steps descend G_y (a zero estimate
    steps along a draw from `generator`). No network gradients are computed.

    The probabilities are fp32 (as the reference code's); the estimate is summed in fp64, where
    the product of an fp32 probability and fp32 noise is exact and every sum of such products a
    multiple of 2^-298: a nonzero estimate, however confident the model, stays nonzero and keeps
    its direction, whatever positive factor (1/σ²) it carries. `pow2_rows` brings it back into
    fp32's range (docs/deviations.md, 19).

    With one noise (m = 1) this is the one-sample estimate (7), the paper's reading; the
    reference's `PGD_L2.attack` runs its gradient attack there whatever `no_grad` says (it
    tests `num_noise_vectors == 1` first), i.e. `pgd` with m = 1 (docs/deviations.md: the
    no-gradient attack with m_test = 1)."""
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
            weights = p_y.double().view(B, m, *([1] * (x.dim() - 1)))
            grad = (noise.double() * weights).mean(dim=1) / sigma**2
            delta = delta + step_size * unit_or_random(-pow2_rows(grad).to(x.dtype), generator)
            delta = project_l2((x + delta).clamp(0, 1) - x, epsilon)
    return (x + delta).detach()
