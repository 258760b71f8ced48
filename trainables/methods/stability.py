"""Stability training (Li et al. 2019), as the SmoothMix paper ran it (jh-jeong's
smoothmix/smoothing-consistency `code/train_stab.py`):
  loss = CE(F(x), y) + λ · R,  δ ~ N(0, σ² I),
with R, per `stability_loss`:
- "cross_entropy" (the default, train_stab.py's `_cross_entropy(logits_n, logits)`):
  −Σ softmax(F(x))·log softmax(F(x + δ)) = KL + H(softmax(F(x))), the clean prediction not
  detached, so the term also sharpens it;
- "kl" (the paper's regularizer): KL(softmax(F(x)) ‖ softmax(F(x + δ))).
The clean and the noisy batch go through the model separately (batch-norm statistics of each).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables.kernel.config import required
from trainables.methods.base import StepContext, StepOutput, draw_noise


def stability_kl(clean_logits: torch.Tensor, noisy_logits: torch.Tensor) -> torch.Tensor:
    """Per input: KL(softmax(clean) ‖ softmax(noisy))."""
    log_p = F.log_softmax(clean_logits, dim=1)
    log_q = F.log_softmax(noisy_logits, dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=1)


def stability_cross_entropy(clean_logits: torch.Tensor, noisy_logits: torch.Tensor) -> torch.Tensor:
    """Per input: −Σ softmax(clean)·log softmax(noisy), gradients into both."""
    return -(F.softmax(clean_logits, dim=1) * F.log_softmax(noisy_logits, dim=1)).sum(dim=1)


REGULARIZERS = {"cross_entropy": stability_cross_entropy, "kl": stability_kl}


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    noise = draw_noise(x, 1, ctx.sigma, ctx.generator)[:, 0]
    clean = model(x)
    noisy = model(x + noise)
    lam = required(ctx.cfg.lam, "lam")
    regularizer = REGULARIZERS[required(ctx.cfg.stability_loss, "stability_loss")]
    total = F.cross_entropy(clean, y) + lam * regularizer(clean, noisy).mean()
    return StepOutput(total, clean, y)
