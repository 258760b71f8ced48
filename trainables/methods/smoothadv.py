"""SmoothAdv-ersarial training (Salman et al. 2019, Pseudocode 1, batched).

Per chunk of inputs: draw m_train noises δ_1..δ_m per input once; find x̂ by SmoothAdv-PGD or
SmoothAdv-DDN on the plug-in smoothed loss using exactly those noises in every step; train
with cross-entropy on the m noisy adversarial copies x̂ + δ_i, reusing the same noises.
The attack's ε is the epoch's warmed-up ε (`ctx.epsilon`); DDN starts from that ε too unless
`ddn_init_norm` is set (train_pgd.py sets DDN's initial norm to the warmed-up ε every epoch).

With `train_multi_noise` false (train_pgd.py without --train-multi-noise) the loss gets the
whole batch (`Method.chunks`: one optimizer step), attacks it in m chunks as above and trains
on one noisy copy of each input, x̂ + δ_1.
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


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    m = required(ctx.cfg.m_train, "m_train")
    if ctx.cfg.train_multi_noise is False:
        return _one_noise_each(model, x, y, ctx, m)
    noise = draw_noise(x, m, ctx.sigma, ctx.generator)
    x_adv = _attack(model, x, y, noise, ctx)
    return cross_entropy_on(model, *noisy_copies(x_adv, noise, y))


def _attack(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor, ctx: StepContext
) -> torch.Tensor:
    """x̂ for the chunk x with its noises (b, m, C, H, W), by the configured attack."""
    cfg = ctx.cfg
    steps = required(cfg.steps, "steps")
    if cfg.attack == "pgd":
        return attacks.pgd(model, x, y, noise, ctx.epsilon, steps, generator=ctx.generator)
    return attacks.ddn(
        model,
        x,
        y,
        noise,
        ctx.epsilon,
        steps,
        cfg.ddn_init_norm,
        required(cfg.ddn_gamma, "ddn_gamma"),
        generator=ctx.generator,
    )


def _one_noise_each(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext, m: int
) -> StepOutput:
    """train_pgd.py without --train-multi-noise (l. 228-294): the batch split into m chunks
    of about B/m inputs (as `trainables.train` splits batches), each chunk's m noises drawn and
    its x̂ found with them (the model unchanged between chunks), then the cross-entropy on
    x̂ + δ_1 of every input (the code's `inputs[::m] + noise[::m]`), in the batch's order."""
    sigmas = _per_chunk(ctx.sigma, m)
    noisy = []
    for xc, yc, sigma in zip(x.tensor_split(m), y.tensor_split(m), sigmas, strict=True):
        if len(xc) == 0:
            continue
        noise = draw_noise(xc, m, sigma, ctx.generator)
        noisy.append(_attack(model, xc, yc, noise, ctx) + noise[:, 0])
    return cross_entropy_on(model, torch.cat(noisy), y)


def _per_chunk(sigma: float | torch.Tensor, m: int) -> list[float | torch.Tensor]:
    """σ for each of the m chunks: the float, or the chunk's share of a per-input (b,) σ_x."""
    if isinstance(sigma, torch.Tensor) and sigma.dim() > 0:
        return list(sigma.tensor_split(m))
    return [sigma] * m
