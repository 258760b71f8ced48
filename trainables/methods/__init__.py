"""Training methods, one small module each, keyed by `TrialConfig.method`.

`splits_batch`: as their reference code does, SmoothAdv, SmoothMix and consistency training
split each loader batch of B inputs into m_train chunks of B/m inputs, each becoming m noisy
copies, one optimizer step per chunk; MACER and stability training take one step per batch
on all B·k copies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainables.config import METHODS
from trainables.methods import (
    consistency,
    gaussian,
    macer,
    smoothadv,
    smoothmix,
    stability,
    vanilla_pgd,
)
from trainables.methods.base import StepContext, StepOutput


@dataclass(frozen=True)
class Method:
    loss: Callable[..., StepOutput]
    splits_batch: bool


REGISTRY: dict[str, Method] = {
    "gaussian": Method(gaussian.loss, splits_batch=True),
    "smoothadv": Method(smoothadv.loss, splits_batch=True),
    "vanilla_pgd": Method(vanilla_pgd.loss_vanilla, splits_batch=True),
    "pgd_noise": Method(vanilla_pgd.loss_with_noise, splits_batch=True),
    "smoothmix": Method(smoothmix.loss, splits_batch=True),
    "macer": Method(macer.loss, splits_batch=False),
    "consistency": Method(consistency.loss, splits_batch=True),
    "stability": Method(stability.loss, splits_batch=False),
}
assert tuple(REGISTRY) == METHODS, "method registry and config.METHODS disagree"

__all__ = ["REGISTRY", "Method", "StepContext", "StepOutput"]
