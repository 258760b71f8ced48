"""The baselines of SmoothAdv's appendix C.1: adversarial training of the *base* classifier.

- `vanilla_pgd`: PGD (step 2ε/T, ℓ2 ball, [0, 1]) on the base classifier's cross-entropy,
  no noise anywhere; train on x̂.
- `pgd_noise`: the same attack, then train on x̂ + δ_i for m_train noise draws.
"""

from __future__ import annotations

import torch

from trainables import attacks
from trainables.kernel.config import required
from trainables.methods.base import (
    StepContext,
    StepOutput,
    cross_entropy_on,
    draw_noise,
    noisy_copies,
)


def _base_attack(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext
) -> torch.Tensor:
    no_noise = torch.zeros((x.shape[0], 1, *x.shape[1:]), device=x.device, dtype=x.dtype)
    steps = required(ctx.cfg.steps, "steps")
    return attacks.pgd(model, x, y, no_noise, ctx.epsilon, steps, generator=ctx.generator)


def loss_vanilla(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext
) -> StepOutput:
    return cross_entropy_on(model, _base_attack(model, x, y, ctx), y)


def loss_with_noise(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext
) -> StepOutput:
    x_adv = _base_attack(model, x, y, ctx)
    noise = draw_noise(x, required(ctx.cfg.m_train, "m_train"), ctx.sigma, ctx.generator)
    return cross_entropy_on(model, *noisy_copies(x_adv, noise, y))
