"""Consistency regularization (Jeong & Shin 2020) on Gaussian augmentation.

With m noisy copies per input, p_i = softmax(F(x + δ_i)) and p̄ = mean_i p_i:
  loss = mean_i CE(F(x + δ_i), y) + mean_x[ λ · mean_i KL(p̄ ‖ p_i) + η · H(p̄) ].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables.kernel.config import required
from trainables.methods.base import StepContext, StepOutput, draw_noise, noisy_copies


def regularizer(logits: torch.Tensor, m: int, lam: float, eta: float) -> torch.Tensor:
    """Per input (b,): λ·mean_i KL(p̄ ‖ p_i) + η·H(p̄), from logits (b·m, K) grouped by input."""
    log_p = F.log_softmax(logits, dim=1).view(-1, m, logits.shape[1])
    avg = log_p.exp().mean(dim=1)
    avg_log_avg = torch.special.xlogy(avg, avg)
    kl = (avg_log_avg.unsqueeze(1) - avg.unsqueeze(1) * log_p).sum(dim=-1).mean(dim=1)
    entropy = -avg_log_avg.sum(dim=-1)
    return lam * kl + eta * entropy


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    cfg = ctx.cfg
    m = required(cfg.m_train, "m_train")
    noise = draw_noise(x, m, ctx.sigma, ctx.generator)
    inputs, targets = noisy_copies(x, noise, y)
    logits = model(inputs)
    reg = regularizer(logits, m, required(cfg.lam, "lam"), required(cfg.eta, "eta")).mean()
    return StepOutput(F.cross_entropy(logits, targets) + reg, logits, targets)
