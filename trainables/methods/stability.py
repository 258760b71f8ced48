"""Stability training (Li et al. 2019), as the SmoothMix paper ran it:
  loss = CE(F(x), y) + λ · KL(softmax(F(x)) ‖ softmax(F(x + δ))),  δ ~ N(0, σ² I).
The clean and the noisy batch go through the model separately (batch-norm statistics of each).
The public re-implementation (jh-jeong/smoothing-consistency, train_stab.py) uses the
cross-entropy −Σ softmax(F(x))·log softmax(F(x + δ)) = KL + H(softmax(F(x))) instead; this
module follows the paper and the issue: KL only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables.config import setting
from trainables.methods.base import StepContext, StepOutput, draw_noise


def stability_kl(clean_logits: torch.Tensor, noisy_logits: torch.Tensor) -> torch.Tensor:
    """Per input: KL(softmax(clean) ‖ softmax(noisy))."""
    log_p = F.log_softmax(clean_logits, dim=1)
    log_q = F.log_softmax(noisy_logits, dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=1)


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    noise = draw_noise(x, 1, ctx.sigma, ctx.generator)[:, 0]
    clean = model(x)
    noisy = model(x + noise)
    lam = setting(ctx.cfg.lam, "lam")
    total = F.cross_entropy(clean, y) + lam * stability_kl(clean, noisy).mean()
    return StepOutput(total, clean, y)
