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
   `pilots` are drawn, its full certification (`FULL`) draws the points that can reach t_min:
   its curve is `full`'s from t_min on (`exact_from`), below it a lower bound of `full`'s at
   radii it cannot win (U < E there);
4. ambiguous-first: a live model whose pilots are all drawn and whose plug-in curve is below E
   at every radius (it may yet be pruned) first gets its probe (`PROBE`): CERTIFY's n
   estimation draws on its ambiguous points only (`ambiguous`: counted at a contested radius
   by their bound, not by their plug-in level). Their exact counts replace their bounds; the
   model is pruned if its upper curve is now below E, else certified (`FULL`) on the
   points the probe did not draw, the probe's counts kept for the others;
5. tie completion: once no live model has a step to take and none runs, a certified model
   that ties the envelope at a radius from its `exact_from` on, where the tie rule could go
   its way (its clean accuracy, at most its count at r = 0 plus the points it skipped that
   could count there, not below each tied rival's count at r = 0), draws the points it
   skipped that could count at some radius (`COMPLETE`: CERTIFY's estimation draws, stored
   as the stage after the probe). Its curve is then `full`'s at every radius, so the tie is
   broken on its true clean accuracy, as `full` breaks it; a tie it surely loses needs no
   draws (its clean accuracy in any view is at most its bound, below the rival's).

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
from dataclasses import dataclass

import numpy as np

from sweeper.run.envelope_ledger import (
    SKIPPED,
    Ledger,
    Model,
    Settings,
    bar,
    could_win_from,
    skipped,
)

SELECT, PILOT, PROBE, FULL, COMPLETE = "select", "pilot", "probe", "full", "complete"


@dataclass(frozen=True)
class Step:
    kind: str  # SELECT, PILOT, PROBE, FULL or COMPLETE
    model: str
    stage: int  # the pilot stage it draws (SELECT: 1; PROBE, FULL: S + 1; COMPLETE: S + 2)
    idx: tuple[int, ...]  # the points to draw (FULL: the others are probed or SKIPPED)
    draws: int  # per point: n0 + pilots[0], the stage's new pilot draws, or n
    from_level: int = 0  # PILOT/PROBE/FULL: t_min, the first grid radius the model could win at


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
    certification of the points that can reach t_min, but those the probe drew (module
    docstring, steps 3 and 4)."""
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
    todo = reach if m.probe is None else reach & (m.probe == SKIPPED)
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


def completions(ledger: Ledger) -> list[Model]:
    """The certified models whose tie at some radius could go their way but rests on a clean
    accuracy they did not draw in full (module docstring, step 5), in arrival order: at a
    radius t from the model's `exact_from` on where it has the envelope's count (> 0), beside
    another certified model with that count, and its clean accuracy may be no lower than
    each such rival's (at most its count at r = 0 plus its `skipped` points; the rival's is
    at least its count at r = 0). None when the grid does not start at 0 (no clean
    accuracy breaks a tie there: the first count does, and it is exact wherever counted)."""
    if ledger.settings.radii[0] != 0:
        return []
    envelope = ledger.envelope()
    done = sorted(
        (m for m in ledger.models.values() if m.certified is not None), key=lambda m: m.arrival
    )
    curves = {m.name: m.certified for m in done if m.certified is not None}
    out = []
    for m in done:
        mine, gap = curves[m.name], int(skipped(m).sum())
        for t in range(m.exact_from, ledger.T) if gap else ():
            if envelope[t] == 0 or mine[t] != envelope[t]:
                continue
            rivals = [c[0] for r, c in curves.items() if r != m.name and c[t] == envelope[t]]
            if rivals and mine[0] + gap >= max(rivals):
                out.append(m)
                break
    return out


def decide(ledger: Ledger, busy: Mapping[str, str] | None = None, slots: int = 1) -> list[Step]:
    """The steps to run now, a deterministic function of the records and of what is running:
    SELECT for every model without its first pilot (they can run in parallel), then the next
    step of the most promising live models (PILOT, PROBE or FULL) while fewer than `slots`
    steps run; once there is none, the tie completions (`completions`, COMPLETE); none when
    every model is certified or pruned and no tie needs completing.

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
    running = sum(kind in (PILOT, PROBE, FULL, COMPLETE) for kind in busy.values())  # not failed
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
    deciding = any(kind in (SELECT, PILOT, PROBE, FULL) for kind in busy.values())
    if not steps and not live and not deciding:
        steps = _completions(ledger, busy, slots - running)
    return steps


def _completions(ledger: Ledger, busy: Mapping[str, str], slots: int) -> list[Step]:
    """The completions to start once no live model has a step to take and none runs: they
    move no model's count at a radius it could win, so they wait until no certification can
    still break the tie they would settle."""
    s = ledger.settings
    return [
        Step(COMPLETE, m.name, len(s.pilots) + 2, tuple(m.idx[skipped(m)].tolist()), s.n)
        for m in completions(ledger)
        if m.name not in busy
    ][:slots]


def _speculative(ledger: Ledger, busy: Mapping[str, str], envelope: np.ndarray) -> np.ndarray:
    """The envelope once the running FULLs come out at their pilots' plug-in curves."""
    hoped = envelope.copy()
    for name, kind in busy.items():
        plug_in = ledger.models[name].plug_in if name in ledger.models else None
        if kind == FULL and plug_in is not None:
            hoped = np.maximum(hoped, plug_in)
    return hoped
