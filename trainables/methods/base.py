"""What every training method shares: the per-step context, the ε warm-up and the noise.

A method is a function `loss(model, x, y, ctx) -> StepOutput`: given one chunk of a loader
batch (x in [0, 1], shape (b, C, H, W)), it returns the loss to back-propagate and the logits
and targets it was computed on (for the running training accuracy). The shared epoch loop in
`trainables.train` owns the optimizer, AMP and the chunking of each batch into m_train parts.
The model is in train mode when a method is called; attacks switch to eval themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.config import TrialConfig


@dataclass(frozen=True)
class StepContext:
    cfg: TrialConfig
    epoch: int  # 0-based
    epsilon: float  # the attack radius after warm-up for this epoch (0 without an attack)
    generator: torch.Generator  # on the training device; every noise draw comes from it


@dataclass(frozen=True)
class StepOutput:
    loss: torch.Tensor  # scalar
    logits: torch.Tensor  # (N, K)
    targets: torch.Tensor  # (N,)


def warmup_factor(epoch: int, warmup_epochs: int) -> float:
    """SmoothAdv's ε warm-up: 0 in the first epoch (epoch 0), rising linearly to 1 at epoch
    `warmup_epochs − 1` ("set to zero [in the first epoch], then we linearly increase it over
    the first ten epochs", appendix D), 1 afterwards. warmup_epochs <= 1: no warm-up."""
    if warmup_epochs <= 1:
        return 1.0
    return min(1.0, epoch / (warmup_epochs - 1))


def epoch_epsilon(cfg: TrialConfig, epoch: int) -> float:
    """The attack radius used in `epoch` (0 for methods without an attack)."""
    if cfg.epsilon is None:
        return 0.0
    return cfg.epsilon * warmup_factor(epoch, cfg.warmup_epochs or 0)


def draw_noise(
    x: torch.Tensor, m: int, sigma: float, generator: torch.Generator | None
) -> torch.Tensor:
    """m Gaussian draws per input: (b, m, C, H, W) with entries N(0, σ²)."""
    shape = (x.shape[0], m, *x.shape[1:])
    return torch.randn(shape, generator=generator, device=x.device, dtype=x.dtype) * sigma


def noisy_copies(x: torch.Tensor, noise: torch.Tensor, y: torch.Tensor):
    """The m noisy copies x + δ_i of every input, flattened to (b·m, C, H, W), with labels."""
    m = noise.shape[1]
    return (x.unsqueeze(1) + noise).flatten(0, 1), y.repeat_interleave(m)


def cross_entropy_on(model, inputs: torch.Tensor, targets: torch.Tensor) -> StepOutput:
    logits = model(inputs)
    return StepOutput(torch.nn.functional.cross_entropy(logits, targets), logits, targets)
