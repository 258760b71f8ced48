"""CERTIFY's and PREDICT's decisions from vote counts (Cohen et al. 2019, Algorithms 1-2),
the torch-free half of the smoothing math: `trainables.smoothing` draws the votes, this module
turns counts into certificates, and the driver re-checks stored rows with the same functions.

Guarantee (CERTIFY): with probability at least 1 − α over the n estimation draws, a returned
class ĉ_A is the smoothed classifier's prediction everywhere in the ℓ2 ball of radius
σ·Φ⁻¹(pABar) around the input, where pABar is the one-sided (1 − α) Clopper–Pearson lower bound
on P(f(x + ε) = ĉ_A) from nA of n votes; CERTIFY abstains (ABSTAIN) when pABar < 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

# scipy is imported inside the functions: importing the kernel stays cheap for the commands
# that never compute a bound (`sweeper --help`, dry runs).

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
    Computed as `scipy.special.betaincinv(nA, n - nA + 1, alpha)`, the same numbers bit for
    bit since scipy 1.12 (both Boost's; tests/test_smoothing.py): importing `scipy.stats` cost
    each new Ray worker 0.5 s of CPU before its first shard, `scipy.special` is loaded anyway.
    """
    from scipy.special import betaincinv

    a = np.asarray(nA, dtype=np.float64)
    total = np.asarray(n, dtype=np.float64)
    safe = np.where(a > 0, a, 1.0)
    bound: NDArray[np.float64] = np.where(a > 0, betaincinv(safe, total - a + 1, alpha), 0.0)
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
    radius = radius_of_bound(p_lower, sigma)
    return p_lower, (float(radius) if radius.ndim == 0 else radius)


def radius_of_bound(p_lower: ArrayLike, sigma: ArrayLike) -> NDArray[np.float64]:
    """CERTIFY's radius σ·Φ⁻¹(pABar) of a lower bound pABar, 0 where it abstains (pABar < 1/2);
    elementwise. Null bounds (NaN) give NaN."""
    from scipy.special import ndtri

    p = np.asarray(p_lower, dtype=np.float64)
    scale = np.asarray(sigma, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.where(p < 0.5, 0.0, scale * ndtri(p)), dtype=np.float64)


def certificate_from_counts(cAHat: int, nA: int, n: int, alpha: float, sigma: float) -> Certificate:
    """CERTIFY's decision given the selected class ĉ_A and its vote count nA among n."""
    p_lower, radius = radius_from_counts(nA, n, alpha, sigma)
    if p_lower < 0.5:
        return Certificate(ABSTAIN, 0.0, int(nA), int(n), float(p_lower))
    return Certificate(int(cAHat), float(radius), int(nA), int(n), float(p_lower))


def predict_from_counts(counts: ArrayLike, alpha: float) -> int:
    """PREDICT's decision: the top class unless the two-sided binomial test of the top two
    counts n1, n2 against 1/2 has p-value > α (then ABSTAIN)."""
    from scipy.stats import binomtest

    votes = np.asarray(counts)
    top2 = np.argsort(votes, kind="stable")[::-1][:2]
    n1, n2 = int(votes[top2[0]]), int(votes[top2[1]])
    if n1 + n2 == 0 or binomtest(n1, n1 + n2, 0.5).pvalue > alpha:
        return ABSTAIN
    return int(top2[0])


def max_radius(sigma: Any, n: Any, alpha: Any) -> Any:
    """The largest radius CERTIFY can give with n samples (all votes agree: nA = n, pABar =
    α^(1/n)): σ·Φ⁻¹(α^(1/n)). Elementwise on arrays: the bound every stored radius is checked
    against (rows, legacy DDRS memory files, imported logs)."""
    from scipy.special import ndtri

    return sigma * ndtri(np.power(alpha, 1.0 / np.asarray(n, dtype=np.float64)))
