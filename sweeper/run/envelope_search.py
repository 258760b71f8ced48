"""The envelope search's policy (issue 37; docs/guide/envelope-search.md): which untrained grid
point to train next, from the certified curves of the models trained so far. Pure: no Ray, no
storage; `sweeper.run.search_tune.EnvelopeSearcher` drives it as a Ray Tune `Searcher`, and the
replay on the published logs (`benchmarks/envelope_search.py`) drives that same searcher.

A point's expected gain is the expected improvement of the envelope at any grid radius:
max over r of E[max(0, Y_r − E_r)], Y_r its certified accuracy at r under the surrogate (a
Gaussian process per radius over every σ, `search_surrogate`) and E_r the envelope of the
trained models at r. Models still training or being certified count at their predicted
curves (a kriging believer): the envelope is raised to them and the surrogate conditioned on
them, so points proposed together are not the same bet. The search trains the point
of largest gain per unit of cost (the dry run's device-hours) while that gain exceeds
`tolerance` and the `budget` allows, after an initial design of `MIN_FIT` points per σ
(cheapest first, then spread out). The gain uses the std of the model's accuracy itself, not
of its noisy measurement: with the noise in, every point near the envelope keeps a gain above
any useful tolerance.

There is no guarantee: a model the surrogate underrates is never trained. The audit
(`audit_picks`) trains a few untrained points afterwards to show what was missed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from sweeper.run.search_surrogate import (
    Features,
    Surrogate,
    Tuned,
    expected_improvement,
    group_of,
)
from trainables.kernel.config import TrialConfig

MIN_FIT = 2  # models per σ before the surrogate decides (the initial design; σ shares a process)
DIVERGED_MARGIN = 0.1  # clean accuracy within this of chance (diverged): observed, not fitted


@dataclass(frozen=True)
class Decision:
    """What to do next: `train` trial_id (its `gain`, None in the initial design), `wait` for
    curves still coming, or `stop` (`reason`: tolerance, budget or exhausted; `gain`: the
    largest expected gain left)."""

    kind: str
    trial_id: str | None = None
    gain: float | None = None
    reason: str = ""


class EnvelopeSearch:
    """The search over `universe` (the grid: every point, trained or not), each point's
    `costs` (device-hours), certified accuracy observed at `radii` over `points` test points;
    `chance`: a classifier's accuracy at random (1/classes)."""

    def __init__(
        self,
        universe: list[TrialConfig],
        costs: dict[str, float],
        radii: list[float],
        tolerance: float,
        budget: float | None = None,
        chance: float = 0.1,
        points: int = 500,
    ):
        self.universe = {t.trial_id: t for t in universe}
        self.order = [t.trial_id for t in universe]
        self.position = {t: i for i, t in enumerate(self.order)}  # ties go to the grid's order
        self.costs, self.radii = costs, list(radii)
        self.tolerance, self.budget, self.chance = tolerance, budget, chance
        self.points = points  # test points per certified curve: the noise of an accuracy
        self.features = Features(universe)
        self.x = {tid: self.features.vector(t) for tid, t in self.universe.items()}
        self.curves: dict[str, np.ndarray] = {}  # observed certified accuracy per radius
        self.failed: set[str] = set()
        self._fit: tuple[tuple[str, ...], Surrogate | None] | None = None
        self._tuned = Tuned()
        self._seen = 0  # observations and failures so far: what a remembered decision is of
        self._decided: tuple[tuple[int, frozenset[str]], Decision] | None = None

    # ------------------------------------------------------------------ what is known
    def observe(self, trial_id: str, curve: np.ndarray | list[float]) -> None:
        if trial_id in self.universe:
            self.curves[trial_id] = np.asarray(curve, dtype=np.float64)
            self._seen += 1

    def fail(self, trial_id: str) -> None:
        """A trial that failed for good: never proposed again, never fitted."""
        self.failed.add(trial_id)
        self._seen += 1

    def envelope(self, among: set[str] | None = None) -> np.ndarray:
        """The envelope at each radius of the observed models (of `among`, if given)."""
        rows = [c for t, c in self.curves.items() if among is None or t in among]
        return np.max(rows, axis=0) if rows else np.zeros(len(self.radii))

    def diverged(self, trial_id: str) -> bool:
        return bool(self.curves[trial_id].max(initial=0.0) <= self.chance + DIVERGED_MARGIN)

    def spent(self, pending: set[str]) -> float:
        """Device-hours of the points trained, failed or under way."""
        return sum(self.costs[t] for t in {*self.curves, *self.failed, *pending})

    def untrained(self, pending: set[str]) -> list[str]:
        taken = {*self.curves, *self.failed, *pending}
        return [t for t in self.order if t not in taken]

    # ------------------------------------------------------------------ deciding
    def decide(self, pending: set[str]) -> Decision:
        """The next step, a pure function of the observations and `pending` (trials proposed
        whose curves have not arrived); remembered until either changes, since Tune asks again
        and again while the search waits."""
        key = (self._seen, frozenset(pending))
        if self._decided is None or self._decided[0] != key:
            self._decided = (key, self._decide(pending))
        return self._decided[1]

    def _decide(self, pending: set[str]) -> Decision:
        left = self.untrained(pending)
        affordable = [t for t in left if self._fits_budget(t, pending)]
        if not left:
            return Decision("wait") if pending else Decision("stop", reason="exhausted")
        if (first := self._initial(affordable, pending)) is not None:
            return Decision("train", first, reason="initial design")
        gains = self.gains(affordable, pending)
        worth = [t for t in affordable if gains[t] > self.tolerance]
        if worth:
            best = max(
                worth, key=lambda t: (gains[t] / max(self.costs[t], 1e-12), -self.position[t])
            )
            return Decision("train", best, gains[best], "expected gain per cost")
        if pending:
            return Decision("wait")
        largest = max(self.gains(left, pending).values(), default=0.0)
        reason = "budget" if largest > self.tolerance else "tolerance"
        return Decision("stop", gain=largest, reason=reason)

    def _fits_budget(self, trial_id: str, pending: set[str]) -> bool:
        if self.budget is None:
            return True
        return self.spent(pending) + self.costs[trial_id] <= self.budget * (1 + 1e-9)

    def _initial(self, candidates: list[str], pending: set[str]) -> str | None:
        """The initial design: in the σ with fewest models (under MIN_FIT), its cheapest point
        first, then the cheapest of those far from the points it has."""
        groups: dict[object, list[str]] = {}
        candidates_set = set(candidates)
        for t in self.order:
            groups.setdefault(group_of(self.universe[t]), []).append(t)
        have = {*self.curves, *self.failed, *pending}
        open_groups = []
        for g, members in groups.items():
            chosen = [t for t in members if t in have]
            free = [t for t in members if t in candidates_set]
            if len(chosen) < MIN_FIT and free:
                open_groups.append((len(chosen), list(groups).index(g), chosen, free))
        if not open_groups:
            return None
        _, _, chosen, free = min(open_groups, key=lambda o: (o[0], o[1]))
        if not chosen:
            return min(free, key=lambda t: (self.costs[t], self.position[t]))
        far = {t: min(float(np.linalg.norm(self.x[t] - self.x[c])) for c in chosen) for t in free}
        spread = [t for t in free if far[t] >= 0.5 * max(far.values())]
        return min(spread, key=lambda t: (self.costs[t], self.position[t]))

    # ------------------------------------------------------------------ the surrogate
    def predict(self, trial_ids: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray] | None]:
        """Per point, (mean, std) of its curve under the surrogate (None: no surrogate yet)."""
        both = self._predicted(trial_ids)
        if both is None:
            return dict.fromkeys(trial_ids)
        mean, std = both
        return {t: (mean[i], std[i]) for i, t in enumerate(trial_ids)}

    def _predicted(self, trial_ids: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """(mean, std) of the points' curves, a row per point (None: no surrogate yet)."""
        surrogate = self._surrogate()
        if surrogate is None or not trial_ids:
            return None
        return surrogate.predict(*self._inputs(trial_ids))

    def _inputs(self, trial_ids: list[str]) -> tuple[np.ndarray, list[object]]:
        """A surrogate's inputs for these points: their features and their σ."""
        return np.stack([self.x[t] for t in trial_ids]), [
            group_of(self.universe[t]) for t in trial_ids
        ]

    def _surrogate(self) -> Surrogate | None:
        """The surrogate of the models that did not diverge, refitted only when they change;
        None with fewer than two (nothing to learn a shape from)."""
        fitted = tuple(sorted(t for t in self.curves if not self.diverged(t)))
        if self._fit is not None and self._fit[0] == fitted:
            return self._fit[1]
        surrogate = None
        if len(fitted) >= 2:
            x = np.stack([self.x[t] for t in fitted])
            groups = [group_of(self.universe[t]) for t in fitted]
            curves = np.stack([self.curves[t] for t in fitted])
            surrogate = Surrogate(x, curves, groups, self.points, list(fitted), self._tuned)
        self._fit = (fitted, surrogate)
        return surrogate

    def _believed(self, pending: set[str]) -> tuple[Surrogate, np.ndarray] | None:
        """A kriging believer: the surrogate conditioned also on every pending model at its
        predicted curve, and the envelope raised to those curves (None: no surrogate yet)."""
        surrogate = self._surrogate()
        if surrogate is None:
            return None
        under_way = sorted(pending - set(self.curves))
        if not under_way:
            return surrogate, self.envelope()
        guessed = surrogate.predict(*self._inputs(under_way))[0]
        fitted = self._fit[0] if self._fit is not None else ()
        ids = [*fitted, *under_way]
        believer = Surrogate(
            np.stack([self.x[t] for t in ids]),
            np.concatenate([np.stack([self.curves[t] for t in fitted]), guessed]),
            [group_of(self.universe[t]) for t in ids],
            self.points,
            ids,
            self._tuned,
            believed=len(under_way),
        )
        return believer, np.maximum(self.envelope(), guessed.max(axis=0))

    def gains(self, trial_ids: list[str], pending: set[str]) -> dict[str, float]:
        """Each point's expected gain of the envelope at any radius (0 without a process),
        under the kriging believer of the `pending` models (`_believed`)."""
        believed = self._believed(pending) if trial_ids else None
        if believed is None:
            return dict.fromkeys(trial_ids, 0.0)
        surrogate, best = believed
        both = surrogate.predict(*self._inputs(trial_ids))
        gain = expected_improvement(*both, best).max(axis=1)  # every point at once
        return dict(zip(trial_ids, gain.tolist(), strict=True))

    # ------------------------------------------------------------------ the audit
    def audit_picks(self, allowance: float, seed_text: str) -> list[tuple[str, str]]:
        """Untrained points to train after the search: alternately the highest upper bound
        (mean + 2·std above the envelope at any radius) and a uniformly random one, while
        their cost stays within `allowance` (the first always: an audit is never empty).
        Returns (trial_id, "upper bound" | "random"); seeded by `seed_text` (deterministic)."""
        left = self.untrained(set())
        if not left:
            return []
        best = self.envelope()
        upper = {
            t: (-np.inf if g is None else float((g[0] + 2 * g[1] - best).max()))
            for t, g in self.predict(left).items()
        }
        by_upper = sorted(left, key=lambda t: (-upper[t], self.position[t]))
        seed = int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "little")
        shuffled = [left[i] for i in np.random.default_rng(seed).permutation(len(left))]
        picks: list[tuple[str, str]] = []
        spent, queues = 0.0, [(by_upper, "upper bound"), (shuffled, "random")]
        for turn in range(2 * len(left)):
            queue, why = queues[turn % 2]
            chosen = {p for p, _ in picks}
            t = next((u for u in queue if u not in chosen), None)
            if t is None:
                break
            if picks and spent + self.costs[t] > allowance:
                break
            picks.append((t, why))
            spent += self.costs[t]
        return picks
