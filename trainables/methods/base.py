"""What every training method shares: the per-step context, the ε warm-up and the noise.

A method is a function `loss(model, x, y, ctx) -> StepOutput`: given one chunk of a loader
batch (x in [0, 1], shape (b, C, H, W)), it returns the loss to back-propagate and the logits
and targets it was computed on (for the running training accuracy). The shared epoch loop in
`trainables.train` owns the optimizer, AMP and the chunking of each batch into m_train parts.
The model is in train mode when a method is called; attacks switch to eval themselves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

if TYPE_CHECKING:  # annotations only: the config imports the method table (this package)
    from trainables.kernel.config import TrialConfig
    from trainables.methods import Method

    LossFunction = Callable[
        [torch.nn.Module, torch.Tensor, torch.Tensor, "StepContext"], "StepOutput"
    ]


def loss_of(method: Method) -> LossFunction:
    """A method's loss function, `trainables.methods.<module>.<function>` of its row (imports
    its module, and torch; looked up at each call, as the row's name says)."""
    module = importlib.import_module(f"trainables.methods.{method.module}")
    return cast("LossFunction", getattr(module, method.function))


@dataclass(frozen=True)
class StepContext:
    """What a method's loss sees besides the model and the chunk.

    `sigma` is the noise level to train the chunk with: cfg.sigma (a float, the default), or
    under DDRS training `sigma_x`, a (b,) tensor with one σ_x per input of the chunk. Methods
    read ctx.sigma, never cfg.sigma, and `draw_noise` broadcasts either form."""

    cfg: TrialConfig
    epoch: int  # 0-based
    epsilon: float  # the attack radius after warm-up for this epoch (0 without an attack)
    generator: torch.Generator  # on the training device; every noise draw comes from it
    sigma_x: torch.Tensor | None = None  # DDRS training: σ_x per input; None: cfg.sigma

    @property
    def sigma(self) -> float | torch.Tensor:
        return self.cfg.sigma if self.sigma_x is None else self.sigma_x


@dataclass(frozen=True)
class StepOutput:
    loss: torch.Tensor  # scalar
    logits: torch.Tensor  # (N, K)
    targets: torch.Tensor  # (N,)


def warmup_factor(epoch: int, warmup_epochs: int, schedule: str = "reference") -> float:
    """The share of ε the attack uses in `epoch` (0-based), W = `warmup_epochs`:
    - "reference" (the default; train_pgd.py of the SmoothAdv code, whose runs are the
      paper's numbers): min(1, (epoch + 1) / W), i.e. ε/W in the first epoch, ε from epoch
      W − 1 on;
    - "paper" (appendix D: "during the first epoch, it is set to zero, then we linearly
      increase it over the first ten epochs"): min(1, epoch / (W − 1)), 0 in the first epoch.
    W <= 1: no warm-up (1 in every epoch)."""
    if warmup_epochs <= 1:
        return 1.0
    if schedule == "paper":
        return min(1.0, epoch / (warmup_epochs - 1))
    return min(1.0, (epoch + 1) / warmup_epochs)


def epoch_epsilon(cfg: TrialConfig, epoch: int) -> float:
    """The attack radius used in `epoch` (0 for methods without an attack). The reference
    schedule is computed as train_pgd.py does, min(ε, (epoch + 1)·ε / W), bit for bit."""
    if cfg.epsilon is None:
        return 0.0
    warmup = cfg.warmup_epochs or 0
    if warmup > 1 and cfg.warmup_schedule != "paper":
        return min(cfg.epsilon, (epoch + 1) * cfg.epsilon / warmup)
    return cfg.epsilon * warmup_factor(epoch, warmup, cfg.warmup_schedule or "reference")


def draw_noise(
    x: torch.Tensor, m: int, sigma: float | torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """m Gaussian draws per input: (b, m, C, H, W) with entries N(0, σ²); σ a float, a (b,)
    tensor (one σ per input, the same for its m draws) or a (b, m) tensor (one per draw)."""
    shape = (x.shape[0], m, *x.shape[1:])
    noise = torch.randn(shape, generator=generator, device=x.device, dtype=x.dtype)
    if isinstance(sigma, torch.Tensor) and sigma.dim() == 2:
        if sigma.shape != noise.shape[:2]:
            raise ValueError(f"per-draw sigma of shape {tuple(sigma.shape)} for {shape[:2]}")
        return noise * sigma.to(noise.dtype).view(*shape[:2], *([1] * (noise.dim() - 2)))
    return noise * per_input(sigma, noise)


def per_input(sigma: float | torch.Tensor, like: torch.Tensor) -> float | torch.Tensor:
    """σ ready to multiply `like` (b, ...): a float as it is, a (b,) tensor as (b, 1, ..., 1)."""
    if not isinstance(sigma, torch.Tensor) or sigma.dim() == 0:
        return sigma
    if sigma.shape != like.shape[:1]:
        raise ValueError(f"per-input sigma of shape {tuple(sigma.shape)} for {len(like)} inputs")
    return sigma.to(like.dtype).view(-1, *([1] * (like.dim() - 1)))


def noisy_copies(
    x: torch.Tensor, noise: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The m noisy copies x + δ_i of every input, flattened to (b·m, C, H, W), with labels."""
    m = noise.shape[1]
    return (x.unsqueeze(1) + noise).flatten(0, 1), y.repeat_interleave(m)


def cross_entropy_on(
    model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> StepOutput:
    logits = model(inputs)
    return StepOutput(torch.nn.functional.cross_entropy(logits, targets), logits, targets)
