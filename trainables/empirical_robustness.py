"""Empirical robustness of a smoothed classifier (SmoothAdv, Salman et al. 2019, section 4).

The attack is SmoothAdv-PGD on the smoothed soft classifier: T steps of ℓ2-normalized ascent
of size 2ε/T (no random start) on the plug-in loss (6), −log((1/m) Σ_i softmax(F(x' + δ_i))_y),
with m = m_test noise draws δ_i ~ N(0, σ² I) per input, drawn once and reused in every step;
or, with `estimator="stein"`, descent on G(x')_y with the gradient-free estimator (7). The
attacked input is then classified by PREDICT (Cohen et al.) with n samples and level α.
The paper evaluates with T = 20 and m_test ∈ {1, 4, 8, 16, 64, 128}.

Units: inputs, σ, ε and the reported perturbation norms are in [0, 1] pixel space (the model
standardizes its input in its first layer). Pure: no Ray, no I/O; tensors stay on x's device
and every random draw comes from `generator` (which must live on that device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from trainables import attacks
from trainables.kernel.certificates import ABSTAIN
from trainables.kernel.run_modes import ESTIMATORS
from trainables.methods.base import draw_noise
from trainables.smoothing import Smooth


@dataclass(frozen=True)
class EmpiricalResult:
    """PREDICT on one attacked input."""

    label: int
    prediction: int  # the smoothed prediction at x_adv, or ABSTAIN (-1)
    correct: bool  # prediction == label (an abstention is never correct)
    perturbation_norm: float  # ‖x_adv − x‖₂ in pixel units, ≤ ε up to rounding

    @property
    def abstained(self) -> bool:
        return self.prediction == ABSTAIN


def smoothadv_attack(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    sigma: float,
    epsilon: float,
    steps: int,
    m_test: int,
    estimator: str = "plugin",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The attacked inputs x_adv (B, C, H, W) for inputs x (B, C, H, W) in [0, 1], labels y (B,).

    Draws m_test noises per input, shape (B, m_test, C, H, W), once; the attack runs on all B
    inputs at once (B·m_test forward samples per step). ε = 0 returns x and draws no noise.
    The model is put in eval mode with frozen parameters during the attack and restored after.
    """
    _check(x, y, sigma, epsilon, steps, m_test, estimator)
    if epsilon == 0:
        return x.detach().clone()
    noise = draw_noise(x, m_test, sigma, generator)
    if estimator == "stein":
        return attacks.stein_pgd(model, x, y, noise, epsilon, steps, sigma, generator)
    with torch.enable_grad():  # input gradients, even when called under torch.no_grad()
        return attacks.pgd(model, x, y, noise, epsilon, steps, generator)


def attack_and_predict(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    sigma: float,
    epsilon: float,
    steps: int,
    m_test: int,
    n: int,
    alpha: float,
    batch_size: int,
    estimator: str = "plugin",
    generator: torch.Generator | None = None,
    num_classes: int | None = None,
) -> list[EmpiricalResult]:
    """SmoothAdv-attack the B inputs x (B, C, H, W) with labels y (B,), then PREDICT each.

    One `EmpiricalResult` per input, in order. `batch_size` bounds PREDICT's forward batches;
    `num_classes` defaults to the width of the model's output. With ε = 0 no attack noise is
    drawn, so the predictions equal `Smooth.predict` on the clean inputs, one after the other,
    with a generator in the same state: the clean smoothed accuracy of the same points.
    """
    x_adv = smoothadv_attack(model, x, y, sigma, epsilon, steps, m_test, estimator, generator)
    with attacks.frozen_eval(model):
        if num_classes is None:
            with torch.no_grad():
                num_classes = int(model(x_adv[:1]).shape[1])
        smooth = Smooth(model, num_classes, sigma)
        predictions = [smooth.predict(xa, n, alpha, batch_size, generator) for xa in x_adv]
    norms = (x_adv - x).flatten(1).norm(dim=1).tolist()
    return [
        EmpiricalResult(int(label), pred, pred == int(label), norm)
        for label, pred, norm in zip(y.tolist(), predictions, norms, strict=True)
    ]


def accuracy(results: list[EmpiricalResult]) -> float:
    """Share of inputs classified correctly without abstaining (the paper's empirical accuracy)."""
    return sum(r.correct for r in results) / max(len(results), 1)


def _check(x, y, sigma, epsilon, steps, m_test, estimator) -> None:
    if x.dim() != 4 or y.shape != (x.shape[0],):
        raise ValueError(
            f"x must be (B, C, H, W) and y (B,) (got {tuple(x.shape)}, {tuple(y.shape)})"
        )
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r} (valid: {', '.join(ESTIMATORS)})")
    if not sigma > 0 or epsilon < 0 or steps < 1 or m_test < 1:
        raise ValueError(
            f"need sigma > 0, epsilon >= 0, steps >= 1, m_test >= 1 "
            f"(got {sigma}, {epsilon}, {steps}, {m_test})"
        )
