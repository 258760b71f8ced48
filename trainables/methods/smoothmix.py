"""SmoothMix (Jeong et al. 2021): mixup between an input and its adversary along the smoothed
classifier's ascent direction, with a target mixed towards the uniform distribution.

Per chunk of b inputs, with m noises δ_1..δ_m per input drawn once and used everywhere:
- adversary: T steps x_{t+1} = clip_[0,1](x_t + α·∇J/‖∇J‖₂) of the smoothed soft NLL
  J(x') = −log mean_i softmax(F(x' + δ_i))_y, no ε-ball unless `mix_maxnorm` is set;
- λ ~ U[0, ½] per input; x_mix = (1−λ)·x + λ·x_adv;
  target = (1−λ)·mean_k softmax(F(x + δ_k)) + λ·uniform;
- loss = mean_k CE(F(x + δ_k), y)
         + η·w·mean_k[ 1{argmax mean_k softmax(F(x + δ_k)) = y}
                       · KL(target ‖ softmax(F(x_mix + δ_k))) ],
  w = min(1, (epoch + 1) / warmup_epochs) the warm-up factor, as in the official code (unlike
  SmoothAdv's ε warm-up it is not 0 in the first epoch);
- `mix_step = 1`, the "one-step adversary": the first ascent iterate, projected to radius
  α·w, replaces the clean x everywhere above (noisy cross-entropy, gate, target and mixup);
  it needs steps >= 2 (with one step the official code never takes it: x stays clean).

The mixed target is NOT detached by default (`mix_detach = False`), as in the official code:
the KL term then also pulls the clean smoothed prediction towards the mixed one, i.e. it
regularizes both ends of the mixup. Detaching (`mix_detach = True`) trains only the mixed
prediction towards a fixed target; it is a flag because the paper does not say which it meant.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainables import attacks
from trainables.kernel.config import required
from trainables.methods.base import StepContext, StepOutput, draw_noise, noisy_copies

UNIFORM_WEIGHT_MAX = 0.5  # λ ~ U[0, ½]
REFERENCE_EPS = 1e-8  # added to the gradient's norm in the attack step, as the authors' code


def adversary(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    alpha: float,
    steps: int,
    mix_step: int,
    maxnorm: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_{mix_step}, x_T): the iterate at `mix_step` and the last one, shapes (b, C, H, W).
    As the reference (SmoothMix_PGD.attack), the anchor is taken at the start of step
    `mix_step`, so it stays x when mix_step >= steps (the config refuses mix_step 1, steps 1)."""
    x = x.detach()
    delta = torch.zeros_like(x)
    anchor = delta
    with attacks.frozen_eval(model) as model:
        for t in range(steps):
            if t == mix_step:
                anchor = delta
            grad, _ = attacks.input_grad(model, x, delta, noise, y, attacks.smoothed_nll_sum)
            delta = delta + alpha * reference_step(grad)
            if maxnorm is not None:
                delta = attacks.project_l2(delta, maxnorm)
            delta = (x + delta).clamp(0, 1) - x
    return (x + anchor).detach(), (x + delta).detach()


def reference_step(grad: torch.Tensor) -> torch.Tensor:
    """Each row of grad over its ℓ2 norm + 1e-8, as SmoothMix_PGD.attack (code/train.py:
    `grad / (grad_norm + 1e-8)`): a row whose gradient is small against 1e-8 (a confident
    input: the smoothed NLL saturates) moves less than a full step, as the published models'
    adversary did."""
    norms = grad.flatten(1).norm(dim=1).view(-1, *([1] * (grad.dim() - 1)))
    return grad / (norms + REFERENCE_EPS)


def warmup(epoch: int, warmup_epochs: int) -> float:
    """SmoothMix's warm-up factor: min(1, (epoch + 1) / warmup_epochs); 1 without warm-up."""
    return 1.0 if warmup_epochs <= 0 else min(1.0, (epoch + 1) / warmup_epochs)


def mixed_kl(target: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
    """KL(target ‖ p) per row: Σ_c target_c·(log target_c − log p_c), with 0·log 0 = 0."""
    return (torch.special.xlogy(target, target) - target * log_probs).sum(dim=-1)


def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: StepContext) -> StepOutput:
    cfg = ctx.cfg
    b, m = x.shape[0], required(cfg.m_train, "m_train")
    alpha, mix_step = required(cfg.mix_alpha, "mix_alpha"), required(cfg.mix_step, "mix_step")
    w = warmup(ctx.epoch, required(cfg.warmup_epochs, "warmup_epochs"))
    noise = draw_noise(x, m, ctx.sigma, ctx.generator)
    anchor, x_adv = adversary(
        model, x, y, noise, alpha, required(cfg.steps, "steps"), mix_step, cfg.mix_maxnorm
    )
    if mix_step == 1:  # the one-step adversary replaces x, within radius α·w
        x = x + attacks.project_l2(anchor - x, alpha * w)
    inputs, targets = noisy_copies(x, noise, y)
    logits = model(inputs)
    xent = F.cross_entropy(logits, targets)
    clean_avg = F.softmax(logits, dim=1).view(b, m, -1).mean(dim=1)
    lam = (
        torch.rand(b, generator=ctx.generator, device=x.device, dtype=x.dtype) * UNIFORM_WEIGHT_MAX
    )
    x_mix = (1 - lam).view(-1, 1, 1, 1) * x + lam.view(-1, 1, 1, 1) * x_adv
    uniform = torch.full_like(clean_avg, 1.0 / clean_avg.shape[1])
    target = (1 - lam).view(-1, 1) * clean_avg + lam.view(-1, 1) * uniform
    if cfg.mix_detach:
        target = target.detach()
    log_p_mix = F.log_softmax(model(noisy_copies(x_mix, noise, y)[0]), dim=1).view(b, m, -1)
    gate = (clean_avg.argmax(dim=1) == y).to(x.dtype)
    mix = (gate.view(-1, 1) * mixed_kl(target.unsqueeze(1), log_p_mix)).mean()
    return StepOutput(xent + required(cfg.eta, "eta") * w * mix, logits, targets)
