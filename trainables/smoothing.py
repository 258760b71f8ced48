"""Randomized smoothing: CERTIFY and PREDICT of Cohen, Rosenfeld & Kolter (2019), the math
of the smoothed classifier (running it over a model's test points: `trainables.certify_points`).

The smoothed classifier is g(x) = argmax_c P(f(x + ε) = c), ε ~ N(0, σ² I), with noise added
in [0, 1] pixel space (the base classifier standardizes its input in its first layer), so
radii are ℓ2 distances in pixel units.

Guarantees (for a base classifier f that is a fixed function):
- `certify` returns (ĉ, R). With probability at least 1 − α over its sampling, if ĉ ≠ ABSTAIN
  then g(x + δ) = ĉ for every ‖δ‖₂ < R.
- `predict` returns a class that, with probability at least 1 − α, is g(x) (or ABSTAIN).

This module is pure: no Ray, no I/O; the device is that of the input. Sampling draws batches
of noise on the device, counts votes with `bincount` there, and never loops over samples in
Python; the only transfer to the host is the counts. Several test points can share one forward
batch (`certify_batch`). The base classifier is evaluated in eval mode (its modes are restored
afterwards). Precision is the caller's: `Smooth(dtype=...)` draws and adds the noise in that
dtype, and the caller runs it under the matching autocast (`trainables.runtime`, which
`certify_points` applies): the certificate is then one of the base classifier as run at that
precision.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import overload

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from scipy.stats import beta, binomtest, norm

ABSTAIN = -1


@dataclass(frozen=True)
class Certificate:
    """The outcome of CERTIFY for one input, with the counts it came from."""

    prediction: int  # ĉ_A, or ABSTAIN (-1)
    radius: float  # σ·Φ⁻¹(pABar); 0.0 when abstaining
    nA: int  # votes for ĉ_A among the n selection-independent samples
    n: int
    p_lower: float  # pABar: one-sided (1 − α) Clopper–Pearson lower bound on P(f(x+ε) = ĉ_A)


@overload
def lower_confidence_bound(nA: float, n: float, alpha: float) -> float: ...
@overload
def lower_confidence_bound(
    nA: ArrayLike, n: ArrayLike, alpha: float
) -> float | NDArray[np.float64]: ...
def lower_confidence_bound(
    nA: ArrayLike, n: ArrayLike, alpha: float
) -> float | NDArray[np.float64]:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial proportion.

    Equals statsmodels' `proportion_confint(nA, n, alpha=2*alpha, method="beta")[0]`,
    i.e. `beta.ppf(alpha, nA, n - nA + 1)`, and 0 when nA = 0. Works elementwise on arrays.
    """
    a = np.asarray(nA, dtype=np.float64)
    total = np.asarray(n, dtype=np.float64)
    safe = np.where(a > 0, a, 1.0)
    bound: NDArray[np.float64] = np.where(a > 0, beta.ppf(alpha, safe, total - a + 1), 0.0)
    return float(bound) if bound.ndim == 0 else bound


@overload
def radius_from_counts(nA: float, n: float, alpha: float, sigma: float) -> tuple[float, float]: ...
@overload
def radius_from_counts(
    nA: ArrayLike, n: ArrayLike, alpha: float, sigma: ArrayLike
) -> tuple[float | NDArray[np.float64], float | NDArray[np.float64]]: ...
def radius_from_counts(
    nA: ArrayLike, n: ArrayLike, alpha: float, sigma: ArrayLike
) -> tuple[float | NDArray[np.float64], float | NDArray[np.float64]]:
    """(p_lower, radius) of CERTIFY's second stage; radius 0 where p_lower < 1/2 (abstain).

    Vectorised, so stored counts can be re-certified for another α or σ without a model.
    """
    p_lower = lower_confidence_bound(nA, n, alpha)
    p = np.asarray(p_lower, dtype=np.float64)
    scale = np.asarray(sigma, dtype=np.float64)
    radius: NDArray[np.float64] = np.where(p >= 0.5, scale * norm.ppf(p), 0.0)
    return p_lower, (float(radius) if radius.ndim == 0 else radius)


def certificate_from_counts(cAHat: int, nA: int, n: int, alpha: float, sigma: float) -> Certificate:
    """CERTIFY's decision given the selected class ĉ_A and its vote count nA among n."""
    p_lower, radius = radius_from_counts(nA, n, alpha, sigma)
    if p_lower < 0.5:
        return Certificate(ABSTAIN, 0.0, int(nA), int(n), float(p_lower))
    return Certificate(int(cAHat), float(radius), int(nA), int(n), float(p_lower))


def predict_from_counts(counts: ArrayLike, alpha: float) -> int:
    """PREDICT's decision: the top class unless the two-sided binomial test of the top two
    counts n1, n2 against 1/2 has p-value > α (then ABSTAIN)."""
    votes = np.asarray(counts)
    top2 = np.argsort(votes, kind="stable")[::-1][:2]
    n1, n2 = int(votes[top2[0]]), int(votes[top2[1]])
    if n1 + n2 == 0 or binomtest(n1, n1 + n2, 0.5).pvalue > alpha:
        return ABSTAIN
    return int(top2[0])


class Smooth:
    """A smoothed classifier around `base_classifier` (a module mapping (B,C,H,W) -> logits).
    Its noisy batches have `dtype` (None: the inputs' own); for a reduced precision, call it
    under the matching autocast (`trainables.runtime.autocast`), as `certify_points` does."""

    ABSTAIN = ABSTAIN

    def __init__(
        self,
        base_classifier: torch.nn.Module,
        num_classes: int,
        sigma: float,
        dtype: torch.dtype | None = None,
    ) -> None:
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0 (got {sigma})")
        self.base_classifier = base_classifier
        self.num_classes = num_classes
        self.sigma = float(sigma)
        self.dtype = dtype

    def certify(
        self,
        x: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
    ) -> tuple[int, float]:
        """CERTIFY for one input x of shape (C,H,W): (prediction, radius)."""
        cert = self.certify_batch(x.unsqueeze(0), n0, n, alpha, batch_size, generator)[0]
        return cert.prediction, cert.radius

    def certificate(
        self,
        x: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
    ) -> Certificate:
        """CERTIFY for one input, with nA, n and p_lower kept."""
        return self.certify_batch(x.unsqueeze(0), n0, n, alpha, batch_size, generator)[0]

    def certify_batch(
        self,
        xs: torch.Tensor,
        n0: int,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
        sigmas: torch.Tensor | None = None,
    ) -> list[Certificate]:
        """CERTIFY for each of the P inputs in `xs` (P,C,H,W), sharing forward batches.

        Each input gets its own n0 selection samples and n fresh estimation samples, so the
        guarantee holds per input exactly as in the one-at-a-time algorithm. `sigmas` (P,)
        smooths each input with its own σ (data-dependent smoothing) instead of self.sigma.
        """
        counts0 = self.sample_counts(xs, n0, batch_size, generator, sigmas)
        cAHat = counts0.argmax(dim=1)
        counts = self.sample_counts(xs, n, batch_size, generator, sigmas)
        nA = counts.gather(1, cAHat.unsqueeze(1)).squeeze(1)
        per_point: list[float] = [self.sigma] * len(xs) if sigmas is None else sigmas.tolist()
        return [
            certificate_from_counts(c, a, n, alpha, s)
            for c, a, s in zip(cAHat.tolist(), nA.tolist(), per_point, strict=True)
        ]

    def predict(
        self,
        x: torch.Tensor,
        n: int,
        alpha: float,
        batch_size: int,
        generator: torch.Generator | None = None,
    ) -> int:
        """PREDICT for one input x (C,H,W): the smoothed prediction or ABSTAIN."""
        counts = self.sample_counts(x.unsqueeze(0), n, batch_size, generator)[0]
        return predict_from_counts(counts.cpu().numpy(), alpha)

    def sample_counts(
        self,
        xs: torch.Tensor,
        num: int,
        batch_size: int,
        generator: torch.Generator | None = None,
        sigmas: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Votes of the base classifier under noise: (P, num_classes) int64 counts, each row
        summing to `num`; noise N(0, σ²) with σ = self.sigma or, per point, `sigmas` (P,).
        Every forward batch holds at most max(batch_size, 1) noisy samples: up to `batch_size`
        points at a time, each with batch_size // (those points) draws.

        The base classifier runs in eval mode (each submodule's mode is restored afterwards),
        so batch-norm uses its running statistics and no point's votes depend on another's.
        """
        P = xs.shape[0]
        counts = torch.zeros(P, self.num_classes, dtype=torch.long, device=xs.device)
        group = max(1, min(P, batch_size))
        per_point = max(1, batch_size // group)
        with _eval_mode(self.base_classifier), torch.inference_mode():
            for start in range(0, P, group):
                chunk = xs[start : start + group]
                scale = None if sigmas is None else sigmas[start : start + group]
                counts[start : start + group] = self._chunk_counts(
                    chunk, num, per_point, generator, scale
                )
        return counts

    def _chunk_counts(
        self,
        xs: torch.Tensor,
        num: int,
        per_point: int,
        generator: torch.Generator | None,
        sigmas: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`sample_counts` for the g points of xs, `per_point` draws each per forward batch.

        The noisy batch is one preallocated buffer: noise is drawn into it in place (scaled by
        σ on the fly) and xs is added by broadcasting, so nothing is repeated or reallocated.
        The buffer has the compute dtype: `self.dtype`, else xs's own."""
        g, shape, K = xs.shape[0], xs.shape[1:], self.num_classes
        k = min(per_point, num)
        buffer = torch.empty((g * k, *shape), dtype=self.dtype or xs.dtype, device=xs.device)
        offsets = torch.arange(g, device=xs.device).unsqueeze(1) * K
        counts = torch.zeros(g * K, dtype=torch.long, device=xs.device)
        remaining = num
        while remaining > 0:
            k = min(k, remaining)
            noisy = buffer[: g * k].view(g, k, *shape)
            if sigmas is None:
                noisy.normal_(0.0, self.sigma, generator=generator)
            else:
                noisy.normal_(0.0, 1.0, generator=generator).mul_(
                    sigmas.view(g, *[1] * (noisy.dim() - 1))
                )
            noisy.add_(xs.unsqueeze(1))
            preds = self.base_classifier(noisy.view(g * k, *shape)).argmax(dim=1)
            counts += torch.bincount((preds.view(g, k) + offsets).view(-1), minlength=g * K)
            remaining -= k
        return counts.view(g, K)


@contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Put every submodule in eval mode; restore each one's own mode afterwards."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, training in modes:
            m.training = training


def max_radius(n: int, alpha: float, sigma: float) -> float:
    """Largest radius CERTIFY can return with n samples (all votes agree): σ·Φ⁻¹(α^(1/n))."""
    return sigma * float(norm.ppf(math.pow(alpha, 1.0 / n)))
