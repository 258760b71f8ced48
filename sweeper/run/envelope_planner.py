"""The `envelope` certification strategy's planner: which model to pilot, certify or prune next
(issue 28). Pure (numpy, scipy through `envelope_bounds`); no Ray, no I/O.

The sweep's state is a `Ledger` of small records: per model its arrival (`arrive`: order j,
σ, points and labels), per point and pilot stage the selected class ĉ and the pilot's draws and
votes (`PilotRow`; stage 1 carries CERTIFY's n0 selection), per point of a full certification
its count nA or −1 when skipped (`FullRow`). `decide(ledger)` is a deterministic function of
those records, so a run resumed from the persisted rows decides the same. Steps:

1. every arrived model gets the selection and the first pilot (`SELECT`): n0 draws per point,
   then `pilots[0]` draws on the points whose ĉ is their label (the others count at no radius);
2. the envelope E so far is the best count per grid radius over fully certified models; a
   model whose upper bound U (`envelope_bounds.point_levels`, summed per radius) is below E at
   every radius is pruned (strictly: a tie could win on the tie rule, unless the model's
   clean accuracy, at most U at r = 0, is below the tied winner's, exact: `bar`; a radius
   where U is 0 is no win: the envelope's value there is 0 whoever reports it);
3. of the live models, the most promising (largest plug-in gain over E, then largest upper
   gain, then arrival) gets its next pilot stage (`PILOT`) only on the points that can reach
   the smallest grid radius t_min at which the model could still win (U(t) ≥ E(t)), leaving
   out the points whose bound is already at their plug-in level (resolved: more draws would
   hardly lower it); which points a pilot draws changes no bound's validity. Once all
   `pilots` are drawn, its full certification (`FULL`) draws every point that could count at
   some grid radius (U > 0): a certified model's curve is `full`'s at every radius, so a tie
   at a radius is broken on its true clean accuracy, as `full` breaks it;
4. ambiguous-first: a live model whose pilots are all drawn and whose plug-in curve is below E
   at every radius (it may yet be pruned) first gets its probe (`PROBE`): CERTIFY's n
   estimation draws on its ambiguous points only (`ambiguous`: counted at a contested radius
   by their bound, not by their plug-in level). Their exact counts replace their bounds; the
   model is pruned if its upper curve is now below E, else certified (`FULL`) on the
   points the probe did not draw, the probe's counts kept for the others.

Soundness. Every counted certificate is an exact CERTIFY(n0, n, α) from fresh draws: the pilots
never enter one. A point a full certification skips has an upper level of 0 (it certifies no
grid radius whenever the bounds hold); it counts as not certified (−1), which changes no
count at a grid radius then. The bounds of model j (j-th to arrive) at each pilot stage and
point hold with probability ≥ 1 − δ_j/(S·P) (`envelope_bounds.point_delta`; S = len(pilots)):
δ_j = δ·6/(π² j²), or, when the run declares its M models up front (`Settings.declared`),
0.9·δ/M for j ≤ M and 0.1·δ·6/(π² (j − M)²) after; by the union bound, the chance that a
pruned model, or a skipped point, would have changed the envelope at some radius is at most
Σ_j δ_j ≤ δ, however many models arrive and whichever number each takes. Which points a pilot
draws, and in which order models are piloted or certified, moves no bound: each is a
function of that point's own draws and its δ share. A probe spends no δ: its counts are the
very estimation draws `full` takes at those points (each point draws from its own streams), so
a probed point's level is the one `full` finds, not a bound, and a model certified after a
probe has the certificate `full` would give it on every point either step drew.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from sweeper.run import envelope_bounds as eb

SELECT, PILOT, PROBE, FULL = "select", "pilot", "probe", "full"
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


@dataclass(frozen=True)
class Step:
    kind: str  # SELECT, PILOT, PROBE or FULL
    model: str
    stage: int  # the pilot stage it draws (SELECT: 1; PROBE and FULL: len(pilots) + 1)
    idx: tuple[int, ...]  # the points to draw (FULL: the others are probed or SKIPPED)
    draws: int  # per point: n0 + pilots[0], the stage's new pilot draws, or n
    from_level: int = 0  # PILOT/PROBE/FULL: t_min, the first grid radius the model could win at


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
    certified: np.ndarray | None = None  # the full certification's curve (points per radius)
    from_level: int = 0
    exact_from: int = 0  # the first grid radius from which `certified` is `full`'s count


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
        counts = np.array(
            [nA.get(i, int(p)) for i, p in zip(m.idx.tolist(), probe, strict=True)], np.int64
        )
        lv = eb.levels(counts, self.thresholds(m.sigma))
        lv[(counts == SKIPPED) | (m.cAHat != m.labels)] = 0
        m.certified, m.from_level = eb.curve(lv, self.T), from_level
        assert m.upper is not None  # a skipped point counts at no grid radius ≥ its upper level
        skipped = (counts == SKIPPED) & (m.cAHat == m.labels)
        m.exact_from = int(m.upper[skipped].max()) if skipped.any() else 0

    # ----------------------------------------------------------------- derived state
    def envelope(self) -> np.ndarray:
        """Best certified count per grid radius over fully certified models (0 if none)."""
        curves = [m.certified for m in self.models.values() if m.certified is not None]
        return np.max(curves, axis=0) if curves else np.zeros(self.T, np.int64)

    def clean(self) -> np.ndarray | None:
        """Per grid radius, the clean accuracy (the count at r = 0) of the model that wins it
        by the tie rule among the certified ones with the envelope's count there (0 where
        none certifies anything): what a model tied with it must beat. None when the grid
        does not start at 0 (its first count is then no clean accuracy)."""
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


# --------------------------------------------------------------------------- decisions
def bar(upper: np.ndarray, envelope: np.ndarray, clean: np.ndarray | None) -> np.ndarray:
    """What a model's count must reach at each grid radius to win there: the envelope, or
    one more where a tie would lose the tie rule (its clean accuracy, at most `upper[0]`,
    below the winner's there, `Ledger.clean`: exact, a certified model's curve is `full`'s).
    Sound whenever the bounds hold, and it only rises as models are certified: a larger
    count, or the same count with a larger clean accuracy."""
    if clean is None:
        return envelope
    return envelope + ((upper[0] < clean) & (envelope > 0))


def could_win_from(upper: np.ndarray, envelope: np.ndarray) -> int:
    """t_min: the first grid radius at which the upper bound reaches the envelope (a tie could
    win on the tie rule) with at least one point (no point certified is no win);
    len(upper) when there is none (the model is pruned)."""
    reach = np.flatnonzero((upper >= envelope) & (upper > 0))
    return int(reach[0]) if reach.size else len(upper)


def promise(m: Model, envelope: np.ndarray) -> tuple[int, int, int]:
    """Sort key, most promising first: the plug-in gain over the envelope (what certifying the
    model would likely add), then the upper bound's gain, then arrival order."""
    assert m.plug_in is not None and m.upper_curve is not None
    gain = int(np.maximum(m.plug_in - envelope, 0).sum())
    upper_gain = int(np.maximum(m.upper_curve - envelope, 0).sum())
    return (-gain, -upper_gain, m.arrival)


def next_step(m: Model, envelope: np.ndarray, s: Settings, clean=None) -> Step:
    """The live model's next step: its next pilot stage on the points that can reach t_min;
    once every pilot is drawn, the probe of its ambiguous points (`ambiguous`) if its
    pilot's plug-in curve is below the envelope (it may yet be pruned); then its full
    certification of every point that could count at some grid radius, but those the probe
    drew (module docstring, step 3)."""
    assert m.upper is not None and m.upper_curve is not None and m.guess is not None
    envelope = bar(m.upper_curve, envelope, clean)  # `clean`: ties it would lose left out
    t_min = could_win_from(m.upper_curve, envelope)
    reach = m.upper > t_min
    if m.stage < len(s.pilots):
        # a point whose bound is already at its pilot's level is resolved: more pilot draws
        # would hardly lower its bound, so they are spent on the others only
        points = tuple(m.idx[reach & (m.upper > m.guess)].tolist())
        draws = s.pilots[m.stage] - s.pilots[m.stage - 1]
        return Step(PILOT, m.name, m.stage + 1, points, draws, t_min)
    if m.probe is None:
        assert m.plug_in is not None
        probe = ambiguous(m, envelope, t_min)
        if could_win_from(m.plug_in, envelope) == len(envelope) and 0 < probe.sum() < reach.sum():
            return Step(PROBE, m.name, m.stage + 1, tuple(m.idx[probe].tolist()), s.n, t_min)
    todo = m.upper > 0 if m.probe is None else (m.upper > 0) & (m.probe == SKIPPED)
    return Step(FULL, m.name, m.stage + 1, tuple(m.idx[todo].tolist()), s.n, t_min)


def ambiguous(m: Model, envelope: np.ndarray, t_min: int) -> np.ndarray:
    """Per point, whether its level is ambiguous at a contested radius: a grid radius t ≥ t_min
    where the upper curve reaches the envelope, which the point counts for under its upper
    bound but not at its pilot's rate (guess ≤ t < upper). Their exact counts are what
    could bring the upper curve below the envelope."""
    assert m.upper is not None and m.upper_curve is not None and m.guess is not None
    T = len(envelope)
    contested = (m.upper_curve >= envelope) & (m.upper_curve > 0) & (np.arange(T) >= t_min)
    before = np.concatenate([[0], np.cumsum(contested)])  # contested radii below each level
    return before[m.upper] - before[np.minimum(m.guess, m.upper)] > 0


def decide(ledger: Ledger, busy: Mapping[str, str] | None = None, slots: int = 1) -> list[Step]:
    """The steps to run now, a deterministic function of the records and of what is running:
    SELECT for every model without its first pilot (they can run in parallel), then the next
    step of the most promising live models (PILOT or FULL) while fewer than `slots` steps run,
    or none when every model is certified or pruned.

    `busy`: model -> the kind of its step running, or another word (a failed model's): those
    models are skipped. A FULL beside
    another one is started only if its pilot's plug-in curve would still add to the envelope
    once the running FULLs come out at theirs (a speculative envelope): certifying in parallel
    what the other certification would likely prune wastes the draws the strategy saves. With
    `busy` empty and `slots` 1 this is the sequential strategy the benchmark measures."""
    s, busy = ledger.settings, dict(busy or {})
    models = sorted(ledger.models.values(), key=lambda m: m.arrival)
    steps = [
        Step(SELECT, m.name, 1, tuple(m.idx.tolist()), s.n0 + s.pilots[0])
        for m in models
        if m.stage == 0 and m.name not in busy
    ]
    envelope, clean = ledger.envelope(), ledger.clean()
    live = [m for m in models if m.stage > 0 and m.certified is None and m.name not in busy]
    live = [m for m in live if not ledger.pruned(m, envelope, clean)]
    hoped = _speculative(ledger, busy, envelope)
    running = sum(kind in (PILOT, PROBE, FULL) for kind in busy.values())  # not a failed one
    for m in sorted(live, key=lambda m: promise(m, envelope)):
        if running >= slots:
            break
        step = next_step(m, envelope, s, clean)
        if step.kind == FULL and running:
            assert m.plug_in is not None
            if not (m.plug_in > hoped).any():
                continue
            hoped = np.maximum(hoped, m.plug_in)
        steps.append(step)
        running += 1
    return steps


def _speculative(ledger: Ledger, busy: Mapping[str, str], envelope: np.ndarray) -> np.ndarray:
    """The envelope once the running FULLs come out at their pilots' plug-in curves."""
    hoped = envelope.copy()
    for name, kind in busy.items():
        plug_in = ledger.models[name].plug_in if name in ledger.models else None
        if kind == FULL and plug_in is not None:
            hoped = np.maximum(hoped, plug_in)
    return hoped
