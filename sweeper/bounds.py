"""What a certification result can hold at all: the largest radius CERTIFY gives for n, α and
σ, the classes and the test points of each data set. Results outside these bounds are forged
or damaged, whatever file they come from (`sweeper import` checks every row against them).
No torch, and scipy only when a bound is computed: every command must start fast.
"""

from __future__ import annotations

from sweeper.cost import TEST_SIZE
from trainables.config import DATASETS

# Classes per data set, as trainables.datasets.INFO has them (a test keeps the two equal).
NUM_CLASSES = {"cifar10": 10, "imagenet": 1000, "mnist": 10, "digits": 10, "imagenet32": 1000}
assert set(NUM_CLASSES) == set(DATASETS), "a data set without its class count"
__all__ = ["NUM_CLASSES", "TEST_SIZE", "max_printed_radius", "max_radius"]


def max_radius(n: int, alpha: float, sigma: float) -> float:
    """The largest radius CERTIFY (Cohen et al. 2019) can certify with n samples at level α
    and noise σ: every sample votes for the top class (nA = n), so the one-sided
    Clopper-Pearson bound is pA = α^(1/n) = beta.ppf(α, n, 1) and the radius σ·Φ⁻¹(pA),
    computed as trainables.smoothing does it. n=100,000, α=0.001: 3.8σ."""
    from scipy.stats import beta, norm  # here: scipy.stats takes 60 MB and a second to import

    if n < 1 or not 0 < alpha < 1 or not sigma > 0:
        raise ValueError(f"need n >= 1, 0 < alpha < 1, sigma > 0 (got {n}, {alpha}, {sigma})")
    return float(sigma * norm.ppf(beta.ppf(alpha, n, 1)))


def max_printed_radius(n: int, alpha: float, sigma: float) -> float:
    """`max_radius` as the reference code may print it: rounded to 3 significant digits
    (`{:.3}`) or 4 decimals, so up to half a unit of the last digit above the exact bound;
    never below 0 (an abstention's radius) when n is too small to certify anything."""
    bound = max(max_radius(n, alpha, sigma), 0.0)
    return bound + max(5e-3 * bound, 5e-5)
