"""The envelope search as a Ray Tune `Searcher` (issue 37; docs/guide/envelope-search.md):
`EnvelopeSearcher` proposes, one trial at a time, what `envelope_search.EnvelopeSearch` decides
from the curves certification has produced (`search_curves`); it holds back a trial while the
slots certification needs are taken (`Slots`), Tune's `ConcurrencyLimiter` bounds the rest.

When the search waits for curves with none of its trials left in Tune, Tune waits in its
searcher loop (asking every second; the call it waits on polls certification until a curve lets
the search go on) without processing its actors' stops: the room of the trials that just ended
stays held. So Tune waits there only while certification has room beside that (`room`), for at
most `TUNE_WAIT_S`, and only where Tune's own SIGINT handler is there; otherwise the search
ends Tune's round, the driver polls certification until the search has something to do, and a
new round goes on (`search_rounds`): a round costs a restart of every trial actor, each a new
process. Tune's loop does not look at signals: a Ctrl-C (or SIGTERM) it caught meanwhile ends
the round and the run (`interrupted`).

Its state is on storage: the models trained and their certification rows (the observations,
read back), and `search.json` (`results.search_records`: every proposal, the stop, the audit).
A killed driver resumes: the trials it had proposed and not finished continue first from their
checkpoints, nothing finished is trained again, and the next proposals are the same (a
deterministic function of the observations). Re-running with other search settings (a lower
`--tolerance`, a larger `--budget`) continues a search that had stopped."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray.tune.search import Searcher

from sweeper.plan.search_spec import SearchSpec
from sweeper.results.search_records import read_search, write_search
from sweeper.results.storage import Experiment
from sweeper.run.envelope_search import Decision, EnvelopeSearch
from sweeper.run.search_curves import Curves
from sweeper.run.search_room import IN_TUNE_POLL_S, TUNE_WAIT_S, Slots, tune_catches_signals
from sweeper.run.tune_names import TuneTrials
from trainables.kernel.config import TrialConfig

log = logging.getLogger(__name__)

# The settings a search's stop and audit follow from: a stopped search stays stopped under them.
STOP_SETTINGS = ("mode", "tolerance", "budget", "audit")


@dataclass(frozen=True)
class SearchPlan:
    """What a run's search needs: its settings, the universe (the plan's selected trials),
    each trial's training cost in device-hours as the dry run prices it (`unit` names the
    device), the radii its curves are read at, chance accuracy and the test
    points a curve is measured on."""

    spec: SearchSpec
    universe: list[TrialConfig]
    costs: dict[str, float]
    unit: str
    radii: list[float]
    chance: float
    points: int = 500  # test points a model is certified on (the noise of its accuracy)


class EnvelopeSearcher(Searcher):
    """The search over `plan.universe`; `to_train`: the trials this run may train (the
    unfinished ones), `finished`: those trained already (their curves read back or awaited
    from this run's certification); `handed`: what Tune is handed of a trial (its
    `TrialConfig`, and what every trial carries besides). `certifier` (set by the launcher)
    is certification, polled in the calls Tune makes."""

    def __init__(
        self,
        exp: Experiment,
        plan: SearchPlan,
        to_train: list[TrialConfig],
        finished: list[TrialConfig],
        curves: Curves,
        handed: TuneTrials,
    ):
        super().__init__()
        self.exp, self.plan, self.curves, self.handed = exp, plan, curves, handed
        spec = plan.spec
        self.search = EnvelopeSearch(
            plan.universe,
            plan.costs,
            plan.radii,
            spec.tolerance,
            spec.budget,
            plan.chance,
            plan.points,
        )
        ids = [t.trial_id for t in finished]
        for tid, curve in curves.stored(ids).items():
            self.search.observe(tid, curve)
        self.awaiting = {tid for tid in ids if tid not in self.search.curves}
        self.trainable = {t.trial_id: t for t in to_train}
        self.running: dict[str, str] = {}  # Tune's trial id -> ours
        self.started: set[str] = set()
        self.done = False  # FINISHED returned: nothing more to train
        self.paused = False  # FINISHED returned to end Tune's round: curves awaited
        self.certifier: Any = None  # certification, polled while Tune waits (the launcher's)
        self.slots: Slots | None = None  # the cluster's room for trials (the launcher's)
        # whether certification has room beside Tune's (the launcher's); None: Tune never waits
        self.room: Callable[[], bool] | None = None
        self._tune_waits: float | None = None  # since when Tune waits in its loop (monotonic)
        self._catching: bool | None = None  # Tune's SIGINT handler there at its round's start
        self.interrupted = False  # Tune caught a Ctrl-C while it waited in its loop
        self.waits = {"in_tune": 0, "rounds": 0}  # waits for curves: in Tune's loop, or rounds
        self.deciding = {"calls": 0, "cpu_s": 0.0}  # this driver's suggest calls, their CPU
        # what the search waits on: seconds from a trial's end in Tune to its curve, summed
        self.curve_wait = {"curves": 0, "seconds": 0.0}
        self._ended: dict[str, float] = {}  # trial_id -> when Tune ended it (monotonic)
        self._resume_record(read_search(exp))

    def _resume_record(self, doc: dict[str, Any] | None) -> None:
        """Continue the record on storage: its unfinished proposals first; a search that had
        stopped under the same settings goes on to its audit, otherwise it searches again."""
        doc = doc or {}
        self.proposals: list[dict] = [p for p in doc.get("proposals", []) if isinstance(p, dict)]
        self.stopped = doc.get("stopped") if self._same_settings(doc.get("settings")) else None
        self.audit: dict | None = doc.get("audit") if self.stopped else None
        self.resume = list(dict.fromkeys(p.get("trial_id") for p in self.proposals))
        self.resume = [t for t in self.resume if t in self.trainable]
        self.phase = "audit" if self.stopped else "search"
        self.audit_queue: list[str] = []
        if self.resume:
            log.info("search: resuming %d trials it had proposed", len(self.resume))

    def _same_settings(self, recorded: Any) -> bool:
        """Whether the record's search had this one's settings: those its stop and audit
        follow from (`STOP_SETTINGS`), whatever other settings either version has."""
        if not isinstance(recorded, dict):
            return False
        now = dataclasses.asdict(self.plan.spec)
        return all(recorded.get(k) == now[k] for k in STOP_SETTINGS)

    # ------------------------------------------------------------------ Tune's interface
    @property
    def slots_reuse(self) -> bool:
        """Whether Tune may reuse trial actors on this search's slots (`Slots.reuse`)."""
        return self.slots is not None and self.slots.reuse

    @property
    def pending(self) -> set[str]:
        """Proposed or trained models whose curves have not arrived."""
        return set(self.running.values()) | self.awaiting

    def collect(self) -> None:
        """The curves certification has produced since (the launcher polls it before)."""
        for tid, curve in self.curves.ready(self.awaiting).items():
            self.awaiting.discard(tid)
            if curve is None:
                log.warning("search: trial %s has no curve (its certification failed)", tid)
                self.search.fail(tid)
            else:
                self.search.observe(tid, curve)
            ended = self._ended.pop(tid, None)
            if curve is not None and ended is not None:  # a curve, not a failure, came
                self.curve_wait["curves"] += 1
                self.curve_wait["seconds"] += time.monotonic() - ended

    # Ray's annotation leaves out Searcher.FINISHED, which its own searchers return too.
    def suggest(self, trial_id: str) -> dict | str | None:  # type: ignore[override]
        if self._catching is None:  # a round's first call: Tune's handler is there or not
            self._catching = tune_catches_signals()
        if self.certifier is not None:  # Tune may block in this call: certification goes on
            self.certifier.poll()
        self.deciding["calls"] += 1
        ours = self._collect_next()
        if ours is None and not self.running:  # nothing of ours in Tune: Tune waits on this call
            ours = self._wait_in_tune()
        if ours is None and not self.running:
            if self._tune_may_wait():
                return None
            self.paused, self._tune_waits, self._catching = True, None, None
            if not self.interrupted:  # a wait that ended the round, not a Ctrl-C that ends all
                self.waits["rounds"] += 1
            return Searcher.FINISHED
        if self._tune_waits is not None:  # Tune's loop waited, and goes on with this
            self.waits["in_tune"] += 1
            self._tune_waits = None
        if ours is None or ours == Searcher.FINISHED:
            return ours
        self.running[trial_id] = ours
        self.started.add(ours)
        return self.handed.hand(trial_id, self.trainable[ours])

    def _collect_next(self) -> str | None:
        """The curves come since, then what to train next (None: nothing now)."""
        start = time.thread_time()  # this thread's: Ray's own threads in the driver left out
        self.collect()
        # While curves are due, certification's slots are held back: asked again as one ends.
        room = self.slots is None or self.slots.open(len(self.running), len(self.awaiting))
        ours = self._next() if room else None
        self.deciding["cpu_s"] += time.thread_time() - start
        return ours

    def _wait_in_tune(self) -> str | None:
        """While Tune may wait in its loop (`_tune_may_wait`), certification polled in this
        call until a task of it ends, and the search asked again as each curve comes: Tune
        asks only every second, and certification goes on only when polled (a model's shards,
        then its compaction), so a wait took seconds more than its curves (module docstring).
        Returns what to train, or None once Tune may no longer wait or nothing certifies."""
        while self.certifier is not None and self.certifier.in_flight and self._tune_may_wait():
            self.certifier.poll(IN_TUNE_POLL_S)
            if (ours := self._collect_next()) is not None:  # a decision remembered: no new curve
                return ours
        return None

    def _tune_may_wait(self) -> bool:
        """Whether Tune may wait in its searcher loop for the curves awaited rather than end
        its round (module docstring): while certification has room beside Tune's, for at
        most `TUNE_WAIT_S`, and only while Tune's own SIGINT handler is there to catch a
        Ctrl-C; one it caught meanwhile ends the run (`interrupted`, `search_rounds`)."""
        now = time.monotonic()
        if self._tune_waits is None:
            self._tune_waits = now
        if self._catching and not tune_catches_signals():
            self.interrupted = True
        if self.room is None or not self._catching or self.interrupted:
            return False
        return now - self._tune_waits < TUNE_WAIT_S and self.room()

    def await_curves(self, certifier: Any, poll_every: float = 0.5) -> bool:
        """Between Tune's rounds: poll `certifier` until the search no longer waits (True), or
        False if interrupted (Ctrl-C). A curve that cannot come (nothing left certifying) counts
        as a failed certification, as `collect` counts one."""
        log.info("search: waiting for %d curves, no trial to train meanwhile", len(self.awaiting))
        try:
            while self._decide().kind == "wait":
                certifier.poll(poll_every)
                self.collect()
                if self.awaiting and not certifier.in_flight:
                    log.warning("search: no certification left for %s", sorted(self.awaiting))
                    for tid in self.awaiting:
                        self.search.fail(tid)
                    self.awaiting.clear()
        except KeyboardInterrupt:
            return False
        self.paused = False
        return True

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        ours = self.running.pop(trial_id, None)
        if ours is None:
            return
        if error:
            self.search.fail(ours)
        else:
            self.awaiting.add(ours)
            self._ended[ours] = time.monotonic()

    def __getstate__(self) -> dict:
        # Tune pickles its searcher into the experiment state; this one holds the live
        # certifier, and resuming reads the storage, not Tune's state.
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the state is on storage (module docstring)."""

    def restore(self, checkpoint_path: str) -> None:
        """See `save`."""

    # ------------------------------------------------------------------ deciding
    def _next(self) -> str | None:
        while self.resume:
            tid = self.resume.pop(0)
            if tid not in self.started and tid not in self.search.curves:
                return tid
        while self.phase == "search":
            decision = self._decide()
            if decision.kind == "wait":
                return None
            if decision.kind == "stop":
                self._stop(decision)
            elif decision.trial_id in self.trainable:
                self._propose(decision.trial_id, "search", decision)
                return decision.trial_id
            else:  # trained outside this run's reach (another slice): nothing to learn here
                self.search.fail(str(decision.trial_id))
        while self.audit_queue:
            tid = self.audit_queue.pop(0)
            if tid not in self.started:
                return tid
        self.done = True
        return Searcher.FINISHED

    def _decide(self) -> Decision:
        """The search's decision, its pending models those whose curves have not arrived (a
        resumed proposal may have its curve already)."""
        return self.search.decide(self.pending - set(self.search.curves))

    def _propose(self, tid: str, phase: str, decision: Decision) -> None:
        gain = None if decision.gain is None else round(decision.gain, 6)
        cost = round(self.plan.costs[tid], 6)
        entry = {"trial_id": tid, "phase": phase, "why": decision.reason, "gain": gain}
        self.proposals.append({**entry, "cost": cost})
        log.info(
            "search: train %s (%s, expected gain %s, %.3g %s)",
            tid,
            decision.reason,
            gain,
            cost,
            self.plan.unit,
        )
        self.write()

    def _stop(self, decision: Decision) -> None:
        """The search is over: record why, then pick the audit's points."""
        spent = self.search.spent(set())
        self.stopped = {
            "reason": decision.reason,
            "gain": None if decision.gain is None else round(decision.gain, 6),
            "spent": round(spent, 6),
            "models": len(self.search.curves),
        }
        self.phase = "audit"
        log.info("search: stopped (%s) after %d models", decision.reason, len(self.search.curves))
        allowance = self.plan.spec.audit * spent
        picks = self.search.audit_picks(allowance, self.exp.name) if self.plan.spec.audit else []
        for tid, why in picks:
            if tid in self.trainable:
                self._propose(tid, "audit", Decision("train", tid, None, why))
                self.audit_queue.append(tid)
        self.write()

    # ------------------------------------------------------------------ the record
    def finish(self) -> None:
        """After the run: how much the audit's models raised the envelope, per radius."""
        self.collect()
        audited = {p["trial_id"] for p in self.proposals if p.get("phase") == "audit"}
        seen = audited & set(self.search.curves)
        if self.stopped and seen:
            before = self.search.envelope(set(self.search.curves) - audited)
            after = self.search.envelope()
            self.audit = {
                "trials": sorted(seen),
                "before": before.round(6).tolist(),
                "after": after.round(6).tolist(),
                "raised": (after - before).round(6).tolist(),
            }
        self.write()

    def write(self) -> None:
        write_search(
            self.exp,
            {
                "settings": dataclasses.asdict(self.plan.spec),
                "radii": self.plan.radii,
                "unit": self.plan.unit,
                "universe": len(self.plan.universe),
                "proposals": self.proposals,
                "stopped": self.stopped,
                "audit": self.audit,
                "deciding": {**self.deciding, "cpu_s": round(self.deciding["cpu_s"], 3)},
                "curve_wait": {**self.curve_wait, "seconds": round(self.curve_wait["seconds"], 3)},
                "waits": self.waits,
            },
        )


def search_rounds(fit: Callable[[int], object], searcher: EnvelopeSearcher, certifier: Any) -> None:
    """Tune's rounds under the search: `fit(k)` runs round k; another starts once the curves
    a round ended on have come (`EnvelopeSearcher.await_curves`), none after the search is
    done or a round was interrupted (a trial of it still unfinished, a Ctrl-C Tune caught while
    it waited in its loop, or one meanwhile)."""
    rounds = 0
    while True:
        fit(rounds)
        if not searcher.paused or searcher.running or searcher.interrupted:
            return
        if not searcher.await_curves(certifier):
            return
        rounds += 1


def search_plan(
    spec: SearchSpec, universe: list[TrialConfig], certify: Any, gpu: bool
) -> SearchPlan:
    """The search of `universe` under `spec`, its costs priced as the dry run prices them
    (`gpu`: a trial holds a GPU), its curves read at certify's decision radii."""
    from sweeper.plan.cost import certified_points, train_hours
    from trainables.kernel.catalog import NUM_CLASSES

    costs, unit = train_hours(universe, certify, "gpu" if gpu else "cpu")
    classes = max((NUM_CLASSES[t.dataset] for t in universe), default=10)
    points = min((certified_points(t.dataset, certify) for t in universe), default=500)
    radii = list(certify.decision_radii)
    return SearchPlan(spec, universe, costs, unit, radii, 1 / classes, points)
