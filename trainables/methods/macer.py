"""MACER (Zhai et al. 2020): maximize the certified radius directly.

With k = m_train noises per input and F the logits:
  loss = mean_x −log mean_i softmax(F(x + δ_i))_y
         + λ · (1/b) Σ_{x correct} σ/2 · max(0, γ − [Φ⁻¹(p̂_y) − Φ⁻¹(p̂_2)]),
where p̂ = mean_i softmax(β·F(x + δ_i)) (inverse temperature β), "correct" means argmax p̂ = y,
p̂_2 is the largest other class and the gap must be finite (p̂_y = 1 gives Φ⁻¹ = ∞ and no
term), as in the authors' code. The hinge is zero once the gap exceeds the margin γ.
With `macer_deferred`, λ = 0 before the first LR drop (`lam_in_epoch`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables.config import TrialConfig, setting
from trainables.methods.base import StepContext, StepOutput, draw_noise, noisy_copies

LOG_FLOOR = 1e-10
PROB_MIN, PROB_MAX = 1e-20, 1 - 1e-7


def radius_hinge(
    logits: torch.Tensor,
    y: torch.Tensor,
    k: int,
    sigma: float | torch.Tensor,
    beta: float,
    gamma: float,
) -> torch.Tensor:
    """Per input (b,): σ/2·max(0, γ − gap) for correctly classified inputs with a finite gap,
    else 0. Logits (b·k, K) are grouped by input; σ is a float or a (b,) tensor (DDRS)."""
    p = F.softmax(beta * logits, dim=1).view(-1, k, logits.shape[1]).mean(dim=1)
    top2, idx = p.topk(2, dim=1)
    with torch.no_grad():
        finite = torch.isfinite(torch.special.ndtri(top2[:, 0]) - torch.special.ndtri(top2[:, 1]))
    keep = ((idx[:, 0] == y) & finite).to(logits.dtype)
    # Φ⁻¹ on clamped values: its derivative grows like exp(Φ⁻¹(p)²/2) and would overflow to
    # inf (and 0·inf = NaN) for p near 0 or 1. Clamping at 1e-20 moves a hinge by < 0.02·σ/2.
    safe = top2.clamp(PROB_MIN, PROB_MAX)
    gap = torch.special.ndtri(safe[:, 0]) - torch.special.ndtri(safe[:, 1])
    return sigma / 2 * torch.relu(gamma - gap) * keep


def lam_in_epoch(cfg: TrialConfig, epoch: int) -> float:
    """λ in 0-based `epoch`: 0 before the first epoch trained at the dropped LR when
    macer_deferred (jh-jeong's train_macer.py: `if args.deferred and epoch <=
    args.lr_step_size: lbd = 0`, its LR dropping entering lr_step_size + 1; the SmoothMix
    appendix C.2: "λ is initially set to 0, and changed to λ = 12.0 after the first learning
    rate decay"), else `lam`."""
    first_drop = cfg.lr_step_size + (cfg.lr_step_offset or 0)
    if setting(cfg.macer_deferred, "macer_deferred") and epoch < first_drop:
        return 0.0
    return setting(cfg.lam, "lam")


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    cfg = ctx.cfg
    k = setting(cfg.m_train, "m_train")
    beta, gamma = setting(cfg.macer_beta, "macer_beta"), setting(cfg.macer_gamma, "macer_gamma")
    noise = draw_noise(x, k, ctx.sigma, ctx.generator)
    inputs, targets = noisy_copies(x, noise, y)
    logits = model(inputs)
    p = F.softmax(logits, dim=1).view(x.shape[0], k, -1).mean(dim=1)
    classification = -torch.log(p.gather(1, y.unsqueeze(1)).squeeze(1) + LOG_FLOOR).mean()
    robustness = radius_hinge(logits, y, k, ctx.sigma, beta, gamma).mean()
    return StepOutput(classification + lam_in_epoch(cfg, ctx.epoch) * robustness, logits, targets)
