"""SmoothAdv-ersarial training (Salman et al. 2019, Pseudocode 1, batched).

Per chunk of inputs: draw m_train noises δ_1..δ_m per input once; find x̂ by SmoothAdv-PGD or
SmoothAdv-DDN on the plug-in smoothed loss using exactly those noises in every step; train
with cross-entropy on the m noisy adversarial copies x̂ + δ_i, reusing the same noises.
The attack's ε is the epoch's warmed-up ε (`ctx.epsilon`); DDN starts from that ε too unless
`ddn_init_norm` is set (train_pgd.py sets DDN's initial norm to the warmed-up ε every epoch).
"""

from __future__ import annotations

import torch

from trainables import attacks
from trainables.config import setting
from trainables.methods.base import (
    StepContext,
    StepOutput,
    cross_entropy_on,
    draw_noise,
    noisy_copies,
)


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    cfg = ctx.cfg
    noise = draw_noise(x, setting(cfg.m_train, "m_train"), ctx.sigma, ctx.generator)
    steps = setting(cfg.steps, "steps")
    if cfg.attack == "pgd":
        x_adv = attacks.pgd(model, x, y, noise, ctx.epsilon, steps, generator=ctx.generator)
    else:
        x_adv = attacks.ddn(
            model, x, y, noise, ctx.epsilon, steps, cfg.ddn_init_norm,
            setting(cfg.ddn_gamma, "ddn_gamma"), generator=ctx.generator,
        )  # fmt: skip
    return cross_entropy_on(model, *noisy_copies(x_adv, noise, y))
