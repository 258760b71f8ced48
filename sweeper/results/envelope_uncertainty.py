"""How sure the envelope is of its numbers over the test set (issue 30 item 9).

A model's certified accuracy at radius r is a share of its P test points; the points are a
sample, so the share is an estimate of the model's certified accuracy on the whole test
distribution. Per envelope row this module gives the 95% Clopper–Pearson interval of the
winner's share (exact, two-sided: beta quantiles at 2.5% and 97.5%), and compares the winner
with the runner-up (the best other model there) on the points both certified, pairwise: the
exact McNemar test of the points one certifies at r and the other does not. A p-value of 0.05
or more marks a winner that the test set does not tell apart from the runner-up.
"""

from __future__ import annotations

import numpy as np

LEVEL = 0.95  # of the interval; the runner-up comparison's threshold is 1 − LEVEL


def clopper_pearson(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the two-sided LEVEL Clopper–Pearson interval of k successes in n
    (elementwise; low 0 at k = 0, high 1 at k = n)."""
    from scipy.stats import beta

    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    tail = (1 - LEVEL) / 2
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, beta.ppf(tail, np.maximum(k, 1), n - k + 1), 0.0)
        high = np.where(k < n, beta.ppf(1 - tail, k + 1, np.maximum(n - k, 1)), 1.0)
    return low, high


def mcnemar_p(first: np.ndarray, second: np.ndarray) -> float:
    """Exact two-sided McNemar p-value of two paired boolean outcomes (the same points): the
    binomial test of the discordant pairs against 1/2; 1.0 when there is none."""
    from scipy.stats import binomtest

    only_first = int(np.sum(first & ~second))
    only_second = int(np.sum(~first & second))
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    return float(binomtest(min(only_first, only_second), discordant, 0.5).pvalue)


class PointReach:
    """Each model's test points and the radius each is certified to (−inf where it is not
    certified-correct), grouped once per frame so that two models are compared cheaply."""

    def __init__(self, codes: np.ndarray, idx: np.ndarray, reach: np.ndarray, k: int) -> None:
        self.order = np.argsort(codes, kind="stable")
        self.offsets = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=k))])
        self.idx, self.reach = idx, reach

    def _model(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.order[self.offsets[m] : self.offsets[m + 1]]
        return self.idx[rows], self.reach[rows]

    def paired_p(self, winner: int, runner_up: int, radius: float) -> float:
        """McNemar's p of the two models' certificates at `radius` on their common points."""
        idx_w, reach_w = self._model(winner)
        idx_u, reach_u = self._model(runner_up)
        _, at_w, at_u = np.intersect1d(idx_w, idx_u, assume_unique=True, return_indices=True)
        return mcnemar_p(reach_w[at_w] >= radius, reach_u[at_u] >= radius)
