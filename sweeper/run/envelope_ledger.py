"""The `envelope` certification strategy's state (issue 28): its settings, the records the
driver keeps of every step (`PilotRow`, `FullRow`), and the `Ledger` rebuilt from them, per
model its bounds and curves (`Model`), the envelope and the tie rule's clean accuracies, and
whether a model could still win (`bar`, `could_win_from`). Pure (numpy, scipy through
`envelope_bounds`); no Ray, no I/O. What is decided from it, and why it is sound, is
`envelope_planner`'s."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sweeper.run import envelope_bounds as eb

SKIPPED = -1  # FullRow.nA of a point the full certification did not draw


@dataclass(frozen=True)
class Settings:
    n0: int
    n: int
    alpha: float
    radii: tuple[float, ...]
    delta: float = 0.01
    pilots: tuple[int, ...] = (1_000, 3_000, 10_000, 30_000)  # cumulative draws per stage
    declared: int = 0  # M, the models known up front (δ split as `envelope_bounds.model_delta`)

    def __post_init__(self) -> None:
        if list(self.pilots) != sorted(set(self.pilots)) or not self.pilots or self.pilots[0] < 1:
            raise ValueError(f"pilots must be increasing cumulative sizes, got {self.pilots}")
        if self.pilots[-1] >= self.n:
            raise ValueError(f"pilots {self.pilots} must stay below n = {self.n}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")


@dataclass(frozen=True)
class PilotRow:
    model: str
    stage: int  # 1 = with the selection
    idx: int
    cAHat: int
    draws: int  # this stage's draws (0: not drawn at this stage)
    votes: int  # of them, votes for cAHat


@dataclass(frozen=True)
class FullRow:
    model: str
    idx: int
    nA: int  # votes for cAHat among n, or SKIPPED


@dataclass
class Model:
    name: str
    arrival: int
    sigma: float
    idx: np.ndarray  # the test points, in order
    labels: np.ndarray
    cAHat: np.ndarray | None = None
    draws: np.ndarray | None = None  # cumulative pilot draws per point
    votes: np.ndarray | None = None
    upper: np.ndarray | None = None  # per point: min over stages of the upper level bound
    stage: int = 0
    upper_curve: np.ndarray | None = None  # points per grid radius under `upper`
    plug_in: np.ndarray | None = None  # points per grid radius at the pilot's rates
    guess: np.ndarray | None = None  # per point: the level at the pilot's rate (plug-in)
    probe: np.ndarray | None = None  # per point: nA of the probe's estimation draws, or SKIPPED
    counts: np.ndarray | None = None  # per point: nA of the full step (probe's, completion's)
    certified: np.ndarray | None = None  # the full certification's curve (points per radius)
    from_level: int = 0
    exact_from: int = 0  # the first grid radius from which `certified` is `full`'s count

    def classes(self) -> dict[int, int]:
        """idx -> ĉ, the class the selection picked at each point."""
        assert self.cAHat is not None
        return dict(zip(self.idx.tolist(), self.cAHat.tolist(), strict=True))

    def label_of(self) -> dict[int, int]:
        """idx -> the data set's label at each point."""
        return dict(zip(self.idx.tolist(), self.labels.tolist(), strict=True))

    def known(self, counts: np.ndarray | None) -> dict[int, int]:
        """idx -> nA of the points `counts` (the probe's or the full step's) drew."""
        if counts is None:
            return {}
        drawn = counts != SKIPPED
        return dict(zip(self.idx[drawn].tolist(), counts[drawn].tolist(), strict=True))


@dataclass
class Ledger:
    """The planner's state, rebuilt from the records (`arrive`, `record_pilot`, `record_full`);
    the bounds are computed once per record (a cache of a function of the records)."""

    settings: Settings
    models: dict[str, Model] = field(default_factory=dict)

    @property
    def T(self) -> int:
        return len(self.settings.radii)

    def thresholds(self, sigma: float) -> eb.IntArray:
        s = self.settings
        return eb.certified_counts(float(sigma), s.n, s.alpha, tuple(s.radii))

    def arrive(self, model: str, arrival: int, sigma: float, idx, labels) -> None:
        if model in self.models or arrival in {m.arrival for m in self.models.values()}:
            raise ValueError(f"model {model!r} or arrival {arrival} recorded twice")
        self.models[model] = Model(
            model, arrival, sigma, np.asarray(idx, np.int64), np.asarray(labels, np.int64)
        )

    def record_pilot(self, model: str, stage: int, rows: list[PilotRow]) -> None:
        m = self.models[model]
        if stage != m.stage + 1:
            raise ValueError(f"{model}: pilot stage {stage} after stage {m.stage}")
        by_idx = {r.idx: r for r in rows}
        pos = np.arange(len(m.idx))
        new_draws = np.array([by_idx[i].draws if i in by_idx else 0 for i in m.idx.tolist()])
        new_votes = np.array([by_idx[i].votes if i in by_idx else 0 for i in m.idx.tolist()])
        if stage == 1:
            m.cAHat = np.array([by_idx[i].cAHat for i in m.idx.tolist()], np.int64)
            m.draws, m.votes = np.zeros(len(pos), np.int64), np.zeros(len(pos), np.int64)
            m.upper = np.full(len(pos), self.T, np.int64)
        assert m.draws is not None and m.votes is not None and m.upper is not None
        m.draws, m.votes, m.stage = m.draws + new_draws, m.votes + new_votes, stage
        self._bound(m, new_draws > 0)

    def _bound(self, m: Model, drawn: np.ndarray) -> None:
        """Tighten the upper levels of the points drawn at this stage (the union bound covers
        every stage's bound, so the least one holds); a point whose ĉ is not its label has
        level 0 and needs no draws."""
        s = self.settings
        assert m.cAHat is not None and m.upper is not None
        assert m.votes is not None and m.draws is not None
        m.upper[m.cAHat != m.labels] = 0
        todo = drawn & (m.cAHat == m.labels)
        if todo.any():
            d = eb.point_delta(m.arrival, s.delta, len(s.pilots), len(m.idx), s.declared)
            lv = eb.point_levels(m.votes[todo], m.draws[todo], s.n, self.thresholds(m.sigma), d)
            m.upper[todo] = np.minimum(m.upper[todo], lv)
        m.upper_curve = eb.curve(m.upper, self.T)
        guess = eb.plug_in_levels(m.votes, m.draws, s.n, self.thresholds(m.sigma))
        guess[m.cAHat != m.labels] = 0
        m.guess, m.plug_in = guess, eb.curve(guess, self.T)

    def record_probe(self, model: str, rows: list[FullRow]) -> None:
        """The probe's counts: CERTIFY's estimation draws (n per point, the very draws the
        full certification takes) on the points asked. Each is the point's exact count, so
        its level replaces the point's upper bound and its plug-in level (a fact, not a
        bound: no δ is spent on it)."""
        m = self.models[model]
        if m.stage < len(self.settings.pilots) or m.probe is not None:
            raise ValueError(f"{model}: probed before its last pilot stage, or twice")
        assert m.cAHat is not None and m.upper is not None and m.guess is not None
        nA = {r.idx: r.nA for r in rows}
        m.probe = np.array([nA.get(i, SKIPPED) for i in m.idx.tolist()], np.int64)
        probed = (m.probe != SKIPPED) & (m.cAHat == m.labels)
        exact = eb.levels(m.probe[probed], self.thresholds(m.sigma))
        m.upper[probed], m.guess[probed] = exact, exact
        m.upper_curve, m.plug_in = eb.curve(m.upper, self.T), eb.curve(m.guess, self.T)

    def record_full(self, model: str, rows: list[FullRow], from_level: int) -> None:
        """The full certification's counts (a probed point not among `rows` keeps the
        probe's: the full step does not draw it again)."""
        m = self.models[model]
        if m.stage < len(self.settings.pilots) or m.cAHat is None:
            raise ValueError(f"{model}: certified before its last pilot stage")
        nA = dict((r.idx, r.nA) for r in rows)
        probe = m.probe if m.probe is not None else np.full(len(m.idx), SKIPPED)
        m.counts = np.array(
            [nA.get(i, int(p)) for i, p in zip(m.idx.tolist(), probe, strict=True)], np.int64
        )
        m.from_level = from_level
        self._certified(m)

    def record_complete(self, model: str, rows: list[FullRow]) -> None:
        """The tie completion's counts (`COMPLETE`: the estimation draws of points the full
        step skipped); the model's curve is recomputed from every count it has."""
        m = self.models[model]
        if m.counts is None:
            raise ValueError(f"{model}: completed before its full certification")
        nA = {r.idx: r.nA for r in rows if r.nA != SKIPPED}
        m.counts = np.array(
            [nA.get(i, int(c)) for i, c in zip(m.idx.tolist(), m.counts, strict=True)], np.int64
        )
        self._certified(m)

    def _certified(self, m: Model) -> None:
        assert m.counts is not None and m.cAHat is not None and m.upper is not None
        lv = eb.levels(m.counts, self.thresholds(m.sigma))
        lv[(m.counts == SKIPPED) | (m.cAHat != m.labels)] = 0
        m.certified = eb.curve(lv, self.T)
        # a skipped point counts at no grid radius ≥ its upper level
        skipped = (m.counts == SKIPPED) & (m.cAHat == m.labels)
        m.exact_from = int(m.upper[skipped].max()) if skipped.any() else 0

    def estimate(self, m: Model) -> np.ndarray:
        """A certified model's likeliest count per grid radius: its certified count where
        exact, below its `exact_from` with each point left out at its pilot's plug-in level
        (what the envelope search learns from; never a certificate)."""
        assert m.certified is not None and m.counts is not None
        assert m.guess is not None and m.upper is not None
        if not m.exact_from:
            return m.certified
        lv = eb.levels(m.counts, self.thresholds(m.sigma))
        left = m.counts == SKIPPED
        lv[left] = np.minimum(m.guess[left], m.upper[left])
        lv[m.cAHat != m.labels] = 0
        return np.concatenate([eb.curve(lv, self.T)[: m.exact_from], m.certified[m.exact_from :]])

    # ----------------------------------------------------------------- derived state
    def envelope(self) -> np.ndarray:
        """Best certified count per grid radius over fully certified models (0 if none)."""
        curves = [m.certified for m in self.models.values() if m.certified is not None]
        return np.max(curves, axis=0) if curves else np.zeros(self.T, np.int64)

    def clean(self) -> np.ndarray | None:
        """Per grid radius, the largest clean accuracy (the count at r = 0) among the certified
        models with the envelope's count there (0 where none certifies anything): what a
        model tied with them must beat. A model certified from a radius on counts at r = 0
        only the points it drew: a lower bound of its clean accuracy, so the bar it sets is
        never too high. None when the grid does not start at 0 (its first count is then no
        clean accuracy)."""
        if self.settings.radii[0] != 0:
            return None
        envelope = self.envelope()
        best = np.zeros(self.T, np.int64)
        for m in self.models.values():
            if m.certified is not None:
                tied = (m.certified == envelope) & (envelope > 0)
                best[tied] = np.maximum(best[tied], m.certified[0])
        return best

    def pruned(self, m: Model, envelope: np.ndarray, clean: np.ndarray | None = None) -> bool:
        if m.certified is not None or m.upper_curve is None:
            return False
        clean = self.clean() if clean is None else clean  # (None again: no tie rule used)
        return could_win_from(m.upper_curve, bar(m.upper_curve, envelope, clean)) == len(envelope)

    def status(self, model: str) -> str:
        """'waiting' (no pilot yet), 'piloted', 'pruned' or 'certified'."""
        m = self.models[model]
        if m.certified is not None:
            return "certified"
        if m.stage == 0:
            return "waiting"
        return "pruned" if self.pruned(m, self.envelope()) else "piloted"


# ----------------------------------------------------------------- could a model still win
def bar(upper: np.ndarray, envelope: np.ndarray, clean: np.ndarray | None) -> np.ndarray:
    """What a model's count must reach at each grid radius to win there: the envelope, or
    one more where a tie would lose the tie rule (its clean accuracy, at most `upper[0]`,
    below a tied certified model's there, `Ledger.clean`: at most that model's true one).
    Sound whenever the bounds hold, and it only rises as models are certified or completed:
    a larger count, or the same count with a larger clean accuracy."""
    if clean is None:
        return envelope
    return envelope + ((upper[0] < clean) & (envelope > 0))


def could_win_from(upper: np.ndarray, envelope: np.ndarray) -> int:
    """t_min: the first grid radius at which the upper bound reaches the envelope (a tie could
    win on the tie rule) with at least one point (no point certified is no win);
    len(upper) when there is none (the model is pruned)."""
    reach = np.flatnonzero((upper >= envelope) & (upper > 0))
    return int(reach[0]) if reach.size else len(upper)


def skipped(m: Model) -> np.ndarray:
    """Per point, whether the model's full step skipped it though it could count at some grid
    radius (its bound above 0): what a completion draws."""
    assert m.counts is not None and m.upper is not None and m.cAHat is not None
    return (m.counts == SKIPPED) & (m.cAHat == m.labels) & (m.upper > 0)
