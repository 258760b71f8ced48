"""What the `envelope` certification strategy can expect to save, before any pilot is drawn
(issue 39 §3): the dry run's estimate, from the planner's own bounds (`envelope_bounds`).

A pilot prunes a model only when its points' upper bounds put the model's curve below the
envelope. How tight those bounds can be is known before any draw: for a point whose full count
nA would reach a level ℓ (grid radii certified), a pilot of N draws at the matching rate
(k = nA·N/n) bounds the level at `point_levels(k, N, ...)` ≥ ℓ. The `inflation` of a σ is how
many levels that bound overstates on average, over counts spread evenly from n/2 to n, with
the last pilot stage and the δ of a model in the middle of the arrivals:

- on `cifar10-published` (n = 100,000, 468 models) it is 0.03, 0.07, 0.17 and 0.33 level at
  σ = 0.12, 0.25, 0.5 and 1, where the SmoothAdv benchmark's forward passes amount to
  certifying 2% of the models fully (`plan.cost.ENVELOPE_FULL_SHARE`);
- on `digits` (n = 1,000, 34 models) it is 0.69 at σ = 0.25 and 1.45 at σ = 0.5: the demo
  pruned 0 of its 34 models (524 s against full's 556 s) where the dry run promised 4.7x.

A bound that overstates every point by a whole level sees each model a radius step better than
it is: only models far below the envelope are pruned. The expected share of a σ's models
certified fully is therefore the benchmark's 3% up to `RESOLVED`, every model from
`UNRESOLVED` on (the pilots then cost more than they save), linear between. A heuristic
calibrated on those two measurements, not a bound: it says when pilots cannot prune, and
prices the strategy accordingly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sweeper.plan.cost import ENVELOPE_FULL_SHARE, certified_points
from sweeper.plan.spec import CertifySpec
from sweeper.run import envelope_bounds as eb
from trainables.kernel.config import TrialConfig

RESOLVED, UNRESOLVED = 0.5, 1.0  # inflation (levels): pilots prune as measured / not at all
SPREAD = 401  # counts from n/2 to n at which a pilot's bound is taken


def inflation(sigma: float, spec: CertifySpec, arrival: int, points: int) -> float:
    """Levels by which the last pilot's bound overstates a point's level, on average over
    full counts spread evenly over [n/2, n] (the pilot's votes at the same rate)."""
    thresholds = eb.certified_counts(sigma, spec.n, spec.alpha, tuple(spec.decision_radii))
    stages = spec.pilot_stages
    delta = eb.point_delta(arrival, spec.delta, len(stages), points)
    counts = np.rint(np.linspace(spec.n / 2, spec.n, SPREAD)).astype(np.int64)
    votes = np.rint(counts / spec.n * stages[-1]).astype(np.int64)
    bound = eb.point_levels(votes, stages[-1], spec.n, thresholds, delta)
    return float((bound - eb.levels(counts, thresholds)).mean())


def full_share(inflated: float) -> float:
    """The expected share of models certified fully at an `inflation`."""
    over = min(max((inflated - RESOLVED) / (UNRESOLVED - RESOLVED), 0.0), 1.0)
    return ENVELOPE_FULL_SHARE + (1 - ENVELOPE_FULL_SHARE) * over


@dataclass(frozen=True)
class Outlook:
    """Per certification σ: the pilots' `inflation` and the expected share of its models
    certified fully (`shares`, as `plan.cost.certify_work` takes them); `n`: the draws."""

    n: int
    inflation: dict[float, float]
    shares: dict[float, float]

    @property
    def cannot_prune(self) -> list[float]:
        """The σ at which pilots cannot tell a point's level (every model certified fully)."""
        return sorted(s for s, v in self.inflation.items() if v >= UNRESOLVED)


def outlook(trials: list[TrialConfig], spec: CertifySpec) -> Outlook:
    """The envelope strategy's outlook on `trials` certified as `spec` says (its strategy
    aside): δ of the model arriving halfway through the trials, each σ's points."""
    arrival = max(1, (len(trials) + 1) // 2)
    found: dict[float, float] = {}
    for cfg in trials:
        sigma = spec.sigma if spec.sigma is not None else cfg.sigma
        if sigma is not None and sigma not in found:
            points = certified_points(cfg.dataset, spec)
            found[sigma] = inflation(sigma, spec, arrival, points)
    return Outlook(spec.n, found, {s: full_share(v) for s, v in found.items()})
