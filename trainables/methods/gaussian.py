"""Gaussian data augmentation (Cohen et al. 2019): cross-entropy on x + δ, δ ~ N(0, σ² I)."""

from __future__ import annotations

import torch

from trainables.kernel.config import required
from trainables.methods.base import (
    StepContext,
    StepOutput,
    cross_entropy_on,
    draw_noise,
    noisy_copies,
)


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    """Cross-entropy on m_train noisy copies of each input (m_train = 1 is Cohen's training)."""
    noise = draw_noise(x, required(ctx.cfg.m_train, "m_train"), ctx.sigma, ctx.generator)
    return cross_entropy_on(model, *noisy_copies(x, noise, y))
