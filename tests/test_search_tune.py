"""The envelope search as Ray Tune's `Searcher` (`sweeper.run.search_tune`): what it proposes,
how it waits for curves, its record on storage, its audit, and a killed driver's resume with
the same next proposals. Tune itself is not started: these are the calls Tune makes (the e2e
test in test_search_e2e.py runs it under Tune)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
from ray.tune.search import Searcher

from sweeper.plan.search_spec import SearchSpec
from sweeper.plan.spec import Resources
from sweeper.results.search_records import account, read_search, write_search
from sweeper.results.storage import Experiment
from sweeper.run import search_tune
from sweeper.run.capacity import room_beside_groups
from sweeper.run.search_room import (
    PENDING_ENV,
    Slots,
    one_pending,
    search_slots,
    tune_catches_signals,
)
from sweeper.run.search_tune import EnvelopeSearcher, SearchPlan, search_rounds
from sweeper.run.tune_names import TuneTrials
from tests.test_envelope_search import RADII, cost, grid, landscape


class Certified:
    """Certification as the searcher sees it (`search_curves.Curves`): curves on storage from
    earlier runs (`stored`) and those certified since (`ready`), here the landscape's."""

    def __init__(self, truth: dict[str, np.ndarray]):
        self.truth, self.certified = truth, set()

    def stored(self, trial_ids):
        return {t: self.truth[t] for t in trial_ids if t in self.certified}

    def ready(self, awaiting):
        return {t: self.truth[t] for t in awaiting if t in self.certified}


SEARCH = SearchSpec(mode="envelope")


def make(tmp_path, trials, finished=(), spec=SEARCH, curves=None):
    truth = {t.trial_id: landscape(t) for t in trials}
    curves = curves or Certified(truth)
    plan = SearchPlan(spec, trials, {t.trial_id: cost(t) for t in trials}, "core-hours", RADII, 0.1)
    done = [t for t in trials if t.trial_id in set(finished)]
    todo = [t for t in trials if t.trial_id not in set(finished)]
    exp = Experiment(str(tmp_path), "e")
    Path(exp.root).mkdir(parents=True, exist_ok=True)
    return EnvelopeSearcher(exp, plan, todo, done, curves, TuneTrials({"c": 1})), curves, exp


def trained(searcher, curves, tune_id) -> None:
    """Tune reports a trial finished; then certification gives its curve."""
    ours = searcher.running[tune_id]
    searcher.on_trial_complete(tune_id)
    curves.certified.add(ours)


def test_search_slots_keep_a_quarter_for_certification_only_while_curves_are_awaited():
    assert search_slots(1, None) == Slots(1, 1, 0)  # one slot: certification between trials
    assert search_slots(2, None) == Slots(2, 2, 1)
    assert search_slots(8, None) == Slots(8, 8, 2)
    assert search_slots(8, 3) == Slots(8, 3, 2)
    two, eight = search_slots(2, None), search_slots(8, None)
    assert two.open(1, 0) and not two.open(2, 0)  # nothing awaited: both slots train
    assert not two.open(1, 1) and two.open(0, 1)  # a curve awaited: one slot is certification's
    assert eight.open(6, 1) and not eight.open(7, 1)  # one awaited: one slot kept
    assert eight.open(5, 5) and not eight.open(6, 5)  # the reserve is at most a quarter
    assert search_slots(1, None).open(0, 3)  # a single slot is never held back
    capped = search_slots(8, 3)
    assert capped.open(2, 4) and not capped.open(3, 0)  # --max-concurrent bounds the trials
    # an actor Tune keeps idle takes a reserved slot: reuse where one is left beside it
    assert [search_slots(n, None).reuse for n in (1, 2, 7, 8, 16)] == [False] * 3 + [True] * 2


def test_it_proposes_configs_waits_for_curves_and_records_each_proposal(tmp_path):
    trials = grid()
    searcher, _curves, exp = make(tmp_path, trials)
    config = searcher.suggest("t1")
    assert config["c"] == 1 and config["trial"]["dataset"] == "digits"
    ours = config["trial"]
    first = next(t.trial_id for t in trials if t.to_dict() == ours)
    searcher.on_trial_complete("t1")  # trained, not certified yet
    doc = read_search(exp)
    assert [p["trial_id"] for p in doc["proposals"]] == [first]
    assert doc["proposals"][0]["why"] == "initial design" and doc["stopped"] is None
    assert searcher.pending == {first}


def test_it_holds_a_trial_back_while_a_curve_is_awaited_on_its_slots(tmp_path):
    """On 2 slots both train while no curve is due; once a trial has finished and its curve
    is awaited, the next waits for it (certification has the freed slot)."""
    searcher, curves, _exp = make(tmp_path, grid())
    searcher.slots = search_slots(2, None)
    assert searcher.suggest("a") is not None and searcher.suggest("b") is not None
    assert searcher.suggest("c") is None  # both slots train
    searcher.on_trial_complete("a")  # trained; its curve is due
    assert searcher.suggest("c") is None  # the freed slot is certification's
    curves.certified.add(next(iter(searcher.awaiting)))
    assert searcher.suggest("c") is not None  # the curve arrived: the slot trains again
    # what the search waited: one curve, from its trial's end to now (this test's seconds)
    assert searcher.curve_wait["curves"] == 1 and 0 < searcher.curve_wait["seconds"] < 60
    searcher.write()
    assert read_search(searcher.exp)["curve_wait"]["curves"] == 1


def test_a_failed_trial_is_never_proposed_again(tmp_path):
    trials = grid(sigmas=(0.25,), eps=(0.5,), steps=(1,), m=(1, 2))
    searcher, _curves, _exp = make(tmp_path, trials)
    searcher.suggest("a")
    failed = searcher.running["a"]
    searcher.on_trial_complete("a", error=True)
    assert searcher.suggest("b") is not None and searcher.running["b"] != failed
    assert failed in searcher.search.failed and searcher.search.spent(set()) > 0


def drive(searcher, curves, limit=200) -> list[str]:
    """Tune's calls until the searcher says FINISHED: each suggestion trained and certified."""
    order = []
    for k in range(limit):
        got = searcher.suggest(f"t{k}")
        if got == Searcher.FINISHED:
            return order
        assert got is not None, "nothing running and nothing proposed: Tune would wait forever"
        order.append(searcher.running[f"t{k}"])
        trained(searcher, curves, f"t{k}")
    raise AssertionError("did not finish")


def test_it_stops_audits_and_records_what_the_audit_raised(tmp_path):
    trials = grid()
    searcher, curves, exp = make(tmp_path, trials, spec=SearchSpec(mode="envelope", audit=0.2))
    order = drive(searcher, curves)
    searcher.finish()
    doc = read_search(exp)
    phases = [p["phase"] for p in doc["proposals"]]
    audited = [p["trial_id"] for p in doc["proposals"] if p["phase"] == "audit"]
    assert doc["stopped"]["reason"] == "tolerance" and audited
    assert phases == sorted(phases, key=["search", "audit"].index)  # the audit comes last
    assert [p["trial_id"] for p in doc["proposals"]] == order
    truth = {t.trial_id: landscape(t) for t in trials}
    searched = [t for t in order if t not in audited]
    before = np.max([truth[t] for t in searched], axis=0)
    after = np.max([truth[t] for t in order], axis=0)
    assert np.allclose(doc["audit"]["raised"], after - before, atol=1e-6)
    got = account(exp, set(order))
    assert (got.trained, got.audited, got.skipped) == (
        len(order),
        len(audited),
        len(trials) - len(order),
    )


def test_a_killed_driver_resumes_its_proposals_then_proposes_the_same(tmp_path):
    trials = grid()
    first, curves, exp = make(tmp_path, trials)
    order = []
    for k in range(8):  # eight proposals, the first six trained and certified
        first.suggest(f"t{k}")
        order.append(first.running[f"t{k}"])
        if k < 6:
            trained(first, curves, f"t{k}")
    first.collect()
    # killed here: t6 and t7 were training. What the next decision would have been:
    expected = first.search.decide(set(order[6:]))
    # A new driver: the six finished trials are read back, the two unfinished ones resumed.
    second, _, _ = make(tmp_path, trials, finished=order[:6], curves=curves)
    resumed = [second.suggest("r0"), second.suggest("r1")]
    assert [second.running[k] for k in ("r0", "r1")] == order[6:8]
    assert all(r is not None for r in resumed)
    nxt = second.suggest("r2")
    assert nxt is not None and second.running["r2"] == expected.trial_id
    record = json.loads(Path(exp.search_json).read_text())
    ids = [p["trial_id"] for p in record["proposals"]]
    assert ids == [*order, expected.trial_id]  # nothing proposed twice


def test_other_settings_continue_a_stopped_search(tmp_path):
    trials = grid()
    searcher, curves, exp = make(tmp_path, trials, spec=SearchSpec(mode="envelope", audit=0.0))
    order = drive(searcher, curves)
    assert read_search(exp)["stopped"] is not None
    # The same settings again: stopped, nothing to train.
    again, _, _ = make(tmp_path, trials, finished=order, curves=curves, spec=searcher.plan.spec)
    assert again.suggest("x") == Searcher.FINISHED
    # A lower tolerance: the search goes on from the same observations.
    lower = SearchSpec(mode="envelope", audit=0.0, tolerance=1e-6)
    on, _, _ = make(tmp_path, trials, finished=order, curves=curves, spec=lower)
    got = on.suggest("y")
    assert got not in (None, Searcher.FINISHED) and on.running["y"] not in order


def test_a_stopped_search_stays_stopped_whatever_else_its_record_s_settings_hold(tmp_path):
    """A record written by a version with a setting this one lacks (or without one this one
    has) says the same search when the settings its decisions read are equal: run again, it
    neither searches nor audits again (searching again, its audit would pick more points: it
    has spent more)."""
    trials = grid()
    searcher, curves, exp = make(tmp_path, trials, spec=SearchSpec(mode="envelope"))
    order = drive(searcher, curves)
    doc = read_search(exp)
    assert doc["stopped"] is not None and any(p["phase"] == "audit" for p in doc["proposals"])
    plain = SearchSpec(mode="envelope")
    for settings in ({**doc["settings"], "halving": None}, {"mode": "envelope", "audit": 0.05}):
        write_search(exp, {**doc, "settings": {**settings, "tolerance": 0.002, "budget": None}})
        assert (
            make(tmp_path, trials, order, curves=curves, spec=plain)[0].suggest("o") == "FINISHED"
        )
    write_search(exp, {**doc, "settings": {**doc["settings"], "tolerance": 0.01}})
    assert make(tmp_path, trials, order, curves=curves, spec=plain)[0].suggest("t") != "FINISHED"


def test_under_the_search_tune_reuses_actors_only_beside_a_reserve_of_two(tmp_path, monkeypatch):
    """While the search waits with trials running, Tune keeps one ended trial's actor idle
    for the next, on a slot of certification's reserve: the search's Tuner reuses actors only
    where the reserve has two slots (8 and more); every other run's does (a trial starts
    warm)."""
    from ray import tune

    from sweeper.run import launch
    from sweeper.run.launch_options import LaunchOptions
    from sweeper.run.stage_searcher import stage_searcher
    from trainables.kernel.config import TrialConfig

    class Callback(tune.Callback):
        handed = TuneTrials({"c": 1})
        certifier = None
        retries = None

    made: list[tune.TuneConfig] = []
    real = tune.TuneConfig
    monkeypatch.setattr(launch.tune, "TuneConfig", lambda **kw: made.append(real(**kw)) or made[-1])
    monkeypatch.setattr(launch.ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(launch, "run_budgets", lambda options, certifier: None)
    searcher, _, exp = make(tmp_path, grid())
    plain = stage_searcher(exp, [TrialConfig(dataset="digits", epochs=1)], [], Callback.handed)
    for s, slots in (
        (searcher, search_slots(7, None)),
        (searcher, search_slots(8, None)),
        (plain, None),
    ):
        s.slots = slots
        launch._tuner(exp, s, 1, launch.Resources(), LaunchOptions(), Callback(), None)
    reused = [(c.search_alg, c.reuse_actors) for c in made]
    assert reused == [(searcher, False), (searcher, True), (plain, True)]


class Certifying:
    """Certification seen from between Tune's rounds: each poll certifies one awaited model
    (`alive`), or nothing is left certifying; `stop` makes a poll a Ctrl-C."""

    def __init__(self, searcher, curves, alive=True, stop=False):
        self.searcher, self.curves, self.alive, self.stop = searcher, curves, alive, stop

    def due(self) -> list[str]:
        return sorted(self.searcher.awaiting - self.curves.certified)

    def poll(self, timeout=0):
        if self.stop:
            raise KeyboardInterrupt
        if self.alive and self.due():
            self.curves.certified.add(self.due()[0])

    @property
    def in_flight(self) -> bool:
        return self.alive and bool(self.due())


def tune_round(searcher, rounds: list) -> None:
    """One of Tune's rounds: what the searcher proposes trains, the oldest trial ending each
    time the searcher has nothing to propose, until it says FINISHED."""
    rounds.append([])
    while (got := searcher.suggest(f"r{len(rounds)}-{len(rounds[-1])}")) != Searcher.FINISHED:
        if got is not None:
            rounds[-1].append(f"r{len(rounds)}-{len(rounds[-1])}")
        else:
            searcher.on_trial_complete(next(iter(searcher.running)))


TWO = {"sigmas": (0.25,), "eps": (0.5,), "steps": (1,), "m": (1, 2)}  # the initial design


def test_with_no_trial_of_its_own_in_tune_a_wait_ends_the_round_and_the_curves_start_the_next(
    tmp_path,
):
    """Tune would block up to 600 s on a searcher returning None with no trial running, its
    ended trials' room still held, which their certification needs: the search ends Tune's
    round instead, awaits the curves, and a new round goes on from them."""
    searcher, curves, exp = make(tmp_path, grid(**TWO), spec=SearchSpec("envelope", audit=0.0))
    rounds: list[list[str]] = []
    search_rounds(lambda k: tune_round(searcher, rounds), searcher, Certifying(searcher, curves))
    assert [len(r) for r in rounds] == [2, 0]  # both trained, then the stop in a round of its own
    assert searcher.done and not searcher.paused and not searcher.awaiting
    assert read_search(exp)["stopped"]["reason"] == "exhausted"
    assert set(searcher.search.curves) == set(searcher.started)


def test_a_curve_that_cannot_come_counts_failed_and_ctrl_c_between_rounds_ends_the_run(tmp_path):
    spec = SearchSpec("envelope", audit=0.0)
    searcher, curves, _ = make(tmp_path, grid(**TWO), spec=spec)
    rounds: list[list[str]] = []
    search_rounds(
        lambda k: tune_round(searcher, rounds), searcher, Certifying(searcher, curves, False)
    )
    assert len(rounds) == 2 and searcher.done
    assert searcher.search.failed == searcher.started and not searcher.search.curves
    searcher, curves, _ = make(tmp_path / "2", grid(**TWO), spec=spec)
    rounds = []
    stop = Certifying(searcher, curves, stop=True)
    search_rounds(lambda k: tune_round(searcher, rounds), searcher, stop)
    assert len(rounds) == 1 and searcher.paused and not searcher.done  # the run is interrupted


def ended_in_tune(searcher, room=True):
    """The initial design of `TWO` proposed and ended in Tune, its curves awaited: the search
    has nothing to propose and no trial in Tune; `room`: certification's beside Tune's."""
    searcher.room = lambda: room
    assert searcher.suggest("a") is not None and searcher.suggest("b") is not None
    searcher.on_trial_complete("a")
    searcher.on_trial_complete("b")
    assert not searcher.running and len(searcher.awaiting) == 2


def test_tune_waits_in_its_own_loop_while_certification_has_room_beside_it(tmp_path, monkeypatch):
    """No round ends (a restart of every trial actor): Tune's loop asks again every second and
    the curves, certified meanwhile, decide; the record counts the wait."""
    monkeypatch.setattr(search_tune, "tune_catches_signals", lambda: True)
    searcher, curves, exp = make(tmp_path, grid(**TWO), spec=SearchSpec("envelope", audit=0.0))
    ended_in_tune(searcher)
    assert searcher.suggest("c") is None and searcher.suggest("c") is None  # Tune waits
    curves.certified |= searcher.awaiting
    assert searcher.suggest("c") == Searcher.FINISHED and searcher.done  # from the curves
    assert not searcher.paused and searcher.waits == {"in_tune": 1, "rounds": 0}
    searcher.finish()  # the run's last record
    assert read_search(exp)["waits"] == {"in_tune": 1, "rounds": 0}


class Polled(Certifying):
    """`Certifying`, each poll's timeout recorded; `slow`: its tasks run on, no curve comes;
    `after`: called with the number of polls after each."""

    def __init__(self, searcher, curves, alive=True, slow=False, after=None):
        super().__init__(searcher, curves, alive)
        self.timeouts: list[float] = []
        self.slow, self.after = slow, after

    def poll(self, timeout=0):
        self.timeouts.append(timeout)
        if not self.slow:
            super().poll(timeout)
        if self.after is not None:
            self.after(len(self.timeouts))


def test_while_tune_waits_in_its_loop_one_call_polls_certification_until_the_curves_decide(
    tmp_path, monkeypatch
):
    """Tune asks every second and certification goes on only when polled: the call Tune waits
    on polls it, each poll back when a task ends (`IN_TUNE_POLL_S` at most), until a curve
    lets the search go on, not one poll a second."""
    monkeypatch.setattr(search_tune, "tune_catches_signals", lambda: True)
    spec = SearchSpec("envelope", audit=0.0)
    searcher, curves, _ = make(tmp_path / "1", grid(**TWO), spec=spec)
    ended_in_tune(searcher)
    searcher.certifier = certifier = Polled(searcher, curves)  # a curve a poll
    assert searcher.suggest("c") == Searcher.FINISHED and searcher.done  # in one call
    assert certifier.timeouts == [0, search_tune.IN_TUNE_POLL_S]
    assert searcher.waits == {"in_tune": 1, "rounds": 0} and not searcher.awaiting
    assert searcher.deciding["calls"] == 3  # Tune's calls ("a", "b", "c"), not the polls
    # nothing certifying: back to Tune at once (it asks again in a second)
    idle, curves, _ = make(tmp_path / "2", grid(**TWO), spec=spec)
    ended_in_tune(idle)
    idle.certifier = Polled(idle, curves, alive=False)
    assert idle.suggest("c") is None and idle.certifier.timeouts == [0]
    # a Ctrl-C Tune caught while the call polls ends the round and the run
    catching = [True]
    monkeypatch.setattr(search_tune, "tune_catches_signals", lambda: catching[0])
    stopped, curves, _ = make(tmp_path / "3", grid(**TWO), spec=spec)
    ended_in_tune(stopped)

    def ctrl_c_at_the_third(polls: int) -> None:
        catching[0] = polls < 3

    stopped.certifier = Polled(stopped, curves, slow=True, after=ctrl_c_at_the_third)
    assert stopped.suggest("c") == Searcher.FINISHED and stopped.interrupted
    assert stopped.certifier.timeouts == [0] + [search_tune.IN_TUNE_POLL_S] * 2


def test_the_round_ends_without_room_after_tune_wait_s_or_once_tune_caught_a_ctrl_c(
    tmp_path, monkeypatch
):
    """Tune's loop holds the room of the trials that just ended and does not look at signals:
    the search ends the round when certification has no room beside it, when the wait passes
    `TUNE_WAIT_S`, or where Tune catches no Ctrl-C; one Tune caught during the wait ends the
    run (no round after it)."""
    monkeypatch.setattr(search_tune, "tune_catches_signals", lambda: True)
    spec = SearchSpec("envelope", audit=0.0)
    cramped, _, _ = make(tmp_path / "1", grid(**TWO), spec=spec)
    ended_in_tune(cramped, room=False)
    assert cramped.suggest("c") == Searcher.FINISHED and cramped.paused and not cramped.done
    assert cramped.waits == {"in_tune": 0, "rounds": 1}
    monkeypatch.setattr(search_tune, "TUNE_WAIT_S", 0.2)
    slow, _, _ = make(tmp_path / "2", grid(**TWO), spec=spec)
    ended_in_tune(slow)
    assert slow.suggest("c") is None
    time.sleep(0.25)
    assert slow.suggest("c") == Searcher.FINISHED and slow.paused
    catching = [True]  # Tune's handler, there at the round's start, gone on a Ctrl-C
    monkeypatch.setattr(search_tune, "tune_catches_signals", lambda: catching[0])
    stopped, curves, _ = make(tmp_path / "3", grid(**TWO), spec=spec)
    rounds: list[list[str]] = []

    def interrupted_round(k):
        ended_in_tune(stopped)
        assert stopped.suggest("c") is None  # Tune waits in its loop
        catching[0] = False  # a Ctrl-C: Tune's handler caught it and put the one before back
        assert stopped.suggest("c") == Searcher.FINISHED and stopped.interrupted
        rounds.append([])

    search_rounds(interrupted_round, stopped, Certifying(stopped, curves))
    assert len(rounds) == 1 and not stopped.done  # no round after it: the run is interrupted
    assert stopped.waits == {"in_tune": 0, "rounds": 0}  # a Ctrl-C, not a wait, ended it
    catching[0] = False  # no handler of Tune's (a driver off the main thread): no wait in Tune
    threaded, _, _ = make(tmp_path / "4", grid(**TWO), spec=spec)
    ended_in_tune(threaded)
    assert threaded.suggest("c") == Searcher.FINISHED and not threaded.interrupted


def test_tune_catches_signals_reads_tune_s_own_sigint_handler():
    """Ray Tune catches SIGINT with a handler of its own while it runs (ray.tune.tune's
    `_setup_signal_catching`) and puts the one before back when a signal comes: how the search,
    called from Tune's loop, knows a Ctrl-C came (the loop itself does not look)."""
    from ray.tune.tune import _setup_signal_catching

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1)}
    caught = []
    signal.signal(signal.SIGINT, lambda *_: caught.append(1))  # the driver's, before Tune's
    try:
        assert not tune_catches_signals()  # no Tune running
        event = _setup_signal_catching()
        assert tune_catches_signals()
        signal.raise_signal(signal.SIGINT)
        assert event.is_set() and not tune_catches_signals() and not caught
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_certification_has_room_beside_placement_groups_only_where_a_node_has_it():
    """Tune holds its trials' room in placement groups (ended trials' too, until it processes
    their stops): a task fits only in what a node has beside the groups placed on it."""
    nodes = [
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}},
        {"NodeID": "b", "Alive": False, "Resources": {"CPU": 8.0}},
    ]

    def group(cpu, gpu=0.0, node="a", state="CREATED"):
        asked = {"CPU": cpu, **({"GPU": gpu} if gpu else {})}
        return {"state": state, "bundles": {"0": asked}, "bundles_to_node_id": {"0": node}}

    task = Resources(cpu=2, gpu=0.25)
    assert room_beside_groups(nodes, [], task)
    assert room_beside_groups(nodes, [group(2, 0.75)], task)  # 2 CPUs, 0.25 GPU left
    assert not room_beside_groups(nodes, [group(2, 0.75), group(1)], task)  # 1 CPU left
    assert not room_beside_groups(nodes, [group(2, 1.0)], task)  # no GPU left
    assert room_beside_groups(nodes, [group(4, 1.0, state="REMOVED")], task)
    assert room_beside_groups(nodes, [group(2, 0.5), group(0.5, 0.25)], Resources(cpu=1.5))
    assert not room_beside_groups(nodes[1:], [], Resources(cpu=1))  # a dead node hosts nothing


def test_under_the_search_tune_keeps_one_trial_pending_unless_the_user_set_it(monkeypatch):
    """Tune's "auto" keeps as many trials pending as the concurrency limit, each with an actor
    requested and dropped when a cached actor takes the trial: under the search it keeps one
    (`one_pending`), read by Tune itself; a user's setting is left as it is."""
    from ray.tune.execution.tune_controller import _get_max_pending_trials
    from ray.tune.search import ConcurrencyLimiter, SearchGenerator

    from sweeper.run import launch

    limited = SearchGenerator(ConcurrencyLimiter(Searcher(), max_concurrent=8))
    monkeypatch.delenv(PENDING_ENV, raising=False)
    assert _get_max_pending_trials(limited) == 8  # Tune's "auto"
    with one_pending():
        assert _get_max_pending_trials(limited) == 1
    assert PENDING_ENV not in os.environ
    monkeypatch.setenv(PENDING_ENV, "3")
    with one_pending():
        assert _get_max_pending_trials(limited) == 3
    monkeypatch.delenv(PENDING_ENV)
    seen = []
    monkeypatch.setattr(
        launch, "search_rounds", lambda *a: seen.append(_get_max_pending_trials(limited))
    )
    searcher = EnvelopeSearcher.__new__(EnvelopeSearcher)
    launch._fit(lambda k=0: None, searcher, None)
    assert seen == [1]
