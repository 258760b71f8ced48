"""The two retry budgets (`sweeper.run.retries`): a failure's exception classified as a lost
node, a crashed worker or an exception of the work's code, charged to its budget, counted in
failures.json; and Ray Tune's decision for a trial taken from them. The exceptions are Ray's
own classes, built as Ray builds them; no Ray is started. The runner's resubmission is in
tests/test_shards.py, a node really killed in tests/test_preemption.py."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from ray import exceptions as rx

from sweeper.results.failures import FailureLog
from sweeper.results.storage import Experiment
from sweeper.run.launch_options import LaunchOptions
from sweeper.run.retries import (
    CRASHED,
    NODE_LOST,
    RAISED,
    Budget,
    Retries,
    classify,
    guard_trial,
    run_budgets,
    task_budget,
    trial_budget,
)

NODE_DIED = "Task failed because the node it was running on is dead or unavailable. Node IP: 192.0.2.2"  # measured: a task of max_retries=0 on a node killed by Cluster.remove_node


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (rx.NodeDiedError(NODE_DIED), NODE_LOST),
        (rx.LocalRayletDiedError(), NODE_LOST),
        (rx.ActorUnavailableError("RpcError: Socket closed", None), NODE_LOST),  # Tune's actor
        (rx.ObjectLostError("ab" * 14, None, ""), NODE_LOST),
        (rx.RayActorError(error_msg="The actor died because its node has died."), NODE_LOST),
        (rx.RayActorError(preempted=True), NODE_LOST),  # drained by the autoscaler
        (rx.RayActorError(), CRASHED),
        (rx.RayActorError(actor_init_failed=True), RAISED),  # its constructor raised
        (rx.WorkerCrashedError(), CRASHED),  # measured: os._exit in a task
        (rx.OutOfMemoryError("killed by the memory monitor"), CRASHED),
        (rx.RayTaskError("f", "tb", ValueError("boom")), RAISED),  # measured: a task raised
        (rx.RayTaskError("f", "tb", ValueError("boom")).as_instanceof_cause(), RAISED),
        (rx.RayTaskError("train", "tb", rx.ActorUnavailableError("gone", None)), NODE_LOST),
        (ValueError("a stand-in task raised"), RAISED),
        (None, RAISED),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else v,
)
def test_failures_are_classified_by_their_exception(error, kind):
    assert classify(error) == kind


@pytest.fixture
def log(tmp_path) -> FailureLog:
    return FailureLog(Experiment(str(tmp_path), "exp"))


def test_node_losses_are_charged_apart_from_errors_and_beyond_their_budget_to_errors(log):
    retries = Retries(Budget(errors=1, node_losses=2), log)
    assert [retries.charge("k", "t", "train", NODE_LOST) for _ in range(2)] == [True, True]
    assert retries.errors("k") == 0  # the error budget is whole
    assert retries.charge("k", "t", "train", RAISED)  # the one error allowed
    assert not retries.charge("k", "t", "train", NODE_LOST)  # a third loss: an error, spent
    assert retries.charge("other", "t", "train", CRASHED)  # budgets are per piece of work
    doc = json.loads(Path(log.exp.failures_json).read_text())
    assert doc["failures"] == []  # what ended work is the caller's to add
    assert doc["retried"] == {"node_losses": {"t": {"train": 2}}, "errors": {"t": {"train": 3}}}


def test_a_task_whose_code_raised_is_not_retried_but_a_crashed_one_is(log):
    retries = Retries(task_budget(LaunchOptions(task_retries=1, node_losses=0)), log)
    assert not retries.charge("shard 0", "t", "certify", RAISED)
    assert retries.charge("shard 1", "t", "certify", CRASHED)
    assert not retries.charge("shard 1", "t", "certify", CRASHED)
    assert retries.charge("shard 2", "t", "certify", NODE_LOST)  # no node budget: an error
    assert log.retried == {"errors": {"t": {"certify": 4}}}


def test_the_budgets_are_the_launch_settings():
    options = LaunchOptions(max_failures=0, node_losses=7, task_retries=3)
    assert trial_budget(options) == Budget(0, 7, retry_raised=True)
    assert task_budget(options) == Budget(3, 7, retry_raised=False)
    assert task_budget() == Budget(2, 5, retry_raised=False)  # the defaults

    class Runner:  # the shard engine's interface: a failure log and its retries
        def __init__(self, log):
            self.failure_log, self.retries = log, Retries(task_budget(), log)

    runner = Runner(FailureLog(Experiment("/nowhere", "exp")))
    trials = run_budgets(options, runner)
    assert (trials.budget, runner.retries.budget) == (trial_budget(options), task_budget(options))
    assert trials.failure_log is runner.failure_log is runner.retries.failure_log


class Trial:
    """What the guard reads of Ray Tune's Trial: where `handle_error` pickled the failure."""

    def __init__(self, path: Path):
        self.pickled_error_file = str(path)

    def should_recover(self) -> bool:  # Tune's own: replaced by the guard
        raise AssertionError("Tune's count decided")

    def fail(self, error: BaseException) -> bool:
        """As Tune's controller: the error pickled (Ray's only), then the decision."""
        if isinstance(error, (rx.RayTaskError, rx.RayActorError)):
            Path(self.pickled_error_file).write_bytes(pickle.dumps(error))
        return self.should_recover()


def test_tune_asks_the_trials_budget_and_a_node_loss_spares_its_errors(log, tmp_path):
    trial = Trial(tmp_path / "error.pkl")
    retries = Retries(Budget(errors=0, node_losses=1), log)
    guard_trial(trial, retries, "t")
    guard = trial.should_recover
    guard_trial(trial, retries, "t")
    assert trial.should_recover is guard  # once per trial, however often it starts
    assert trial.fail(rx.ActorUnavailableError("Socket closed", None))  # max_failures 0 yet
    assert not trial.fail(rx.RayTaskError("train", "tb", ValueError("boom")))
    assert log.retried == {"node_losses": {"t": {"train": 1}}, "errors": {"t": {"train": 1}}}
    assert pickle.loads(pickle.dumps(guard))() is False  # Tune's saved state keeps no budget


def test_a_failure_tune_pickled_nothing_for_is_an_error_not_the_last_pickled_one(log, tmp_path):
    trial = Trial(tmp_path / "error.pkl")
    retries = Retries(Budget(errors=0, node_losses=5), log)
    guard_trial(trial, retries, "t")
    assert trial.fail(rx.ActorUnavailableError("Socket closed", None))
    assert not trial.fail(RuntimeError("a TuneError: not pickled"))  # not the stale loss again
