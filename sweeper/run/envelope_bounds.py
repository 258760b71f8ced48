"""Upper bounds on what a full CERTIFY could certify, from a pilot (issue 28; DESIGN.md §6).

Pure math (numpy, scipy): the `envelope` certification strategy's per-point and per-model
bounds, the δ split behind them and the counts CERTIFY needs per radius. The planner
(`envelope_planner`) decides with them; the benchmark (`benchmarks/envelope_certify.py`) calls
these functions, not a copy.

Setting. For one input x of label y, CERTIFY(n0, n, α) picks ĉ from n0 selection draws, then
counts nA ~ Bin(n, p) votes for ĉ among n fresh draws, p = P(f(x + ε) = ĉ), and certifies
radius σ·Φ⁻¹(pABar), pABar = the one-sided (1 − α) Clopper–Pearson lower bound on p (ABSTAIN
when pABar < 1/2). The point counts at radius r iff ĉ = y and it certifies a radius ≥ r, i.e. iff
nA reaches `certified_counts(...)[r]` (the radius is non-decreasing in nA). The envelope strategy
reuses the n0 selection draws (ĉ is fixed) and draws a pilot of N fresh draws, k votes for ĉ.

Guarantee (`point_levels`). With δ1 + δ2 = δ_point and independent pilot and full draws,
  p_U = Clopper–Pearson upper(k, N, δ1)   (P(p > p_U) ≤ δ1 over the pilot),
  k_U = the least k' with P(Bin(n, p_U) > k') ≤ δ2,
then P(full CERTIFY's radius > radius(k_U)) ≤ δ1 + δ2: if p ≤ p_U, nA ~ Bin(n, p) is
stochastically below Bin(n, p_U), so P(nA > k_U | pilot) ≤ δ2, and the radius is monotone in nA.
A point whose ĉ ≠ y counts at no radius, whatever its draws: it needs no pilot and no δ.

Levels. A radius grid r_0 < … < r_{T−1} turns a count into a *level*, the number of grid radii
it certifies (0: none, not even r_0). Models are compared by integer counts of points per level,
so ties and comparisons are exact.
"""

from __future__ import annotations

from functools import lru_cache
from math import pi

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trainables.kernel.certificates import lower_confidence_bound, radius_from_counts

IntArray = NDArray[np.int64]


def upper_confidence_bound(k: ArrayLike, N: ArrayLike, delta: float) -> NDArray[np.float64]:
    """One-sided (1 − δ) Clopper–Pearson upper bound on p from k successes of N: 1 − the lower
    bound of the N − k failures (`beta.ppf(1 − δ, k + 1, N − k)`; 1 when k = N)."""
    failures = np.asarray(N, dtype=np.float64) - np.asarray(k, dtype=np.float64)
    return np.asarray(1.0 - np.asarray(lower_confidence_bound(failures, N, delta)))


def count_upper_quantile(p_up: ArrayLike, n: int, delta: float) -> IntArray:
    """k_U = the least k with P(Bin(n, p_U) > k) ≤ δ, elementwise; checked against scipy's tail
    and moved up where rounding left it short, so the tail bound holds as computed."""
    from scipy.stats import binom

    p = np.clip(np.asarray(p_up, dtype=np.float64), 0.0, 1.0)
    k = np.nan_to_num(binom.isf(delta, n, p), nan=float(n)).astype(np.int64)
    k = np.clip(k, 0, n)
    short = binom.sf(k, n, p) > delta
    while short.any():
        k = np.where(short, np.minimum(k + 1, n), k)
        short = (binom.sf(k, n, p) > delta) & (k < n)
    return k


def count_upper_bound(k: ArrayLike, N: ArrayLike, n: int, delta_point: float) -> IntArray:
    """k_U: with probability ≥ 1 − δ_point the full count nA is at most k_U (module docstring:
    δ1 = δ2 = δ_point/2). N = 0 (no pilot) gives k_U = n."""
    N_arr = np.asarray(N, dtype=np.int64)
    half = delta_point / 2
    p_up = np.where(N_arr > 0, upper_confidence_bound(k, np.maximum(N_arr, 1), half), 1.0)
    return count_upper_quantile(p_up, n, half)


@lru_cache(maxsize=64)
def certified_counts(sigma: float, n: int, alpha: float, radii: tuple[float, ...]) -> IntArray:
    """Per grid radius r, the least nA of n with which CERTIFY certifies a radius ≥ r (not
    abstaining), by the kernel's own `radius_from_counts`; n + 1 when no count does."""
    counts = np.arange(n + 1)
    p_lower, radius = radius_from_counts(counts, n, alpha, sigma)
    ok = np.asarray(p_lower) >= 0.5
    certified = np.where(ok, np.asarray(radius), -np.inf)
    best = np.maximum.accumulate(certified)  # non-decreasing already; guards rounding
    out = np.searchsorted(best, np.asarray(radii, dtype=np.float64), side="left").astype(np.int64)
    out.setflags(write=False)  # cached: shared by every caller
    return out


def levels(nA: ArrayLike, thresholds: IntArray) -> IntArray:
    """The number of grid radii a count nA certifies (thresholds from `certified_counts`)."""
    return np.searchsorted(thresholds, np.asarray(nA, dtype=np.int64), side="right").astype(
        np.int64
    )


def point_levels(
    k: ArrayLike, N: ArrayLike, n: int, thresholds: IntArray, delta_point: float
) -> IntArray:
    """Upper bound, with probability ≥ 1 − δ_point, on the level of a full CERTIFY with n fresh
    draws, from a pilot of k votes for ĉ among N draws (δ split evenly: δ1 = δ2 = δ_point/2).
    N = 0 gives no information: the level of nA = n (everything the grid allows)."""
    return levels(count_upper_bound(k, N, n, delta_point), thresholds)


def radius_upper_bound(
    k: ArrayLike, N: ArrayLike, n: int, alpha: float, sigma: float, delta_point: float
) -> NDArray[np.float64]:
    """Upper bound, with probability ≥ 1 − δ_point, on the radius σ·Φ⁻¹(pABar) that a full
    CERTIFY(n0, n, α) of this point could certify (−inf: it abstains whatever its count)."""
    k_up = count_upper_bound(k, N, n, delta_point)
    p_lower, radius = radius_from_counts(k_up, n, alpha, sigma)
    return np.where(np.asarray(p_lower) >= 0.5, np.asarray(radius, dtype=np.float64), -np.inf)


def curve(point_level: ArrayLike, T: int) -> IntArray:
    """Points per grid radius from per-point levels: entry t counts the levels > t."""
    lv = np.asarray(point_level, dtype=np.int64)
    return np.asarray((lv[:, None] > np.arange(T)[None, :]).sum(axis=0), dtype=np.int64)


DECLARED_SHARE = 0.9  # of δ, split evenly over the M models declared up front (`model_delta`)


def model_delta(arrival: int, delta: float, declared: int = 0) -> float:
    """δ_j of the j-th model to arrive (j ≥ 1), Σ_j δ_j ≤ δ however many come and whichever
    model takes which number.

    Without `declared` models: δ·6/(π² j²). With M = `declared` (the models a run knows it
    will certify: `certify`'s finished trials, `run grid`'s plan): the first M numbers share
    `DECLARED_SHARE`·δ evenly (δ_j = 0.9·δ/M) and any later one the rest as above,
    0.1·δ·6/(π² (j − M)²). For M = 440 models, the even shares from the 18th model on are
    larger than the arrival split's, so their bounds are tighter (issue 39 §2)."""
    if arrival < 1:
        raise ValueError(f"arrival order counts from 1, got {arrival}")
    if declared <= 0:
        return delta * 6.0 / (pi**2 * arrival**2)
    if arrival <= declared:
        return DECLARED_SHARE * delta / declared
    return (1 - DECLARED_SHARE) * delta * 6.0 / (pi**2 * (arrival - declared) ** 2)


def point_delta(arrival: int, delta: float, stages: int, points: int, declared: int = 0) -> float:
    """δ of one point's bound at one pilot stage: δ_j (`model_delta`) split evenly over the
    declared number of pilot stages and the model's points (a union bound over models, stages
    and points)."""
    return model_delta(arrival, delta, declared) / (stages * max(points, 1))


def plug_in_levels(k: ArrayLike, N: ArrayLike, n: int, thresholds: IntArray) -> IntArray:
    """The level a full count would have at the pilot's rate (k/N·n): an estimate for ordering
    models by promise, never for a decision that needs a guarantee."""
    N_arr = np.maximum(np.asarray(N, dtype=np.int64), 1)
    guess = np.rint(np.asarray(k, dtype=np.float64) / N_arr * n).astype(np.int64)
    return levels(guess, thresholds)
