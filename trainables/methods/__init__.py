"""Training methods, one small module each, keyed by `TrialConfig.method`."""

from __future__ import annotations

from collections.abc import Callable

from trainables.config import METHODS
from trainables.methods import gaussian, smoothadv, vanilla_pgd
from trainables.methods.base import StepContext, StepOutput

Method = Callable[..., StepOutput]

REGISTRY: dict[str, Method] = {
    "gaussian": gaussian.loss,
    "smoothadv": smoothadv.loss,
    "vanilla_pgd": vanilla_pgd.loss_vanilla,
    "pgd_noise": vanilla_pgd.loss_with_noise,
}
assert tuple(REGISTRY) == METHODS, "method registry and config.METHODS disagree"

__all__ = ["REGISTRY", "Method", "StepContext", "StepOutput"]
