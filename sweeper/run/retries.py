"""Running work again after it failed, with two budgets: one for its own errors, one for the
loss of the node it ran on (a preempted spot instance, a dead machine).

Ray counts a node's death against a task's `max_retries` and Ray Tune against a trial's
`max_failures`, so a sweep on spot instances would spend on preemptions the retries meant for
real errors. Here each failure is classified by its exception (`classify`) and charged to its
own budget (`Budget`, `Retries.charge`); the runner of shard tasks (`sweeper.run.shards`,
tasks submitted with `max_retries=0`) and the Tune callback (`guard_trial`) then run the work
again or give up. What was charged is counted per trial and stage in the run's failures.json
(`FailureLog.charge`), so a run shows how many node losses it survived.

No Ray imported at module level: the exceptions are named inside `classify`.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sweeper.results.failures import FailureLog
from sweeper.run.launch_options import LaunchOptions

log = logging.getLogger(__name__)

# What a failure was: the node the work ran on died (or its raylet, or the object it needed
# was lost with it); the work's process died on a node that lives (a segfault, the kernel's OOM
# killer); or the work's own code raised.
NODE_LOST, CRASHED, RAISED = "node_lost", "crashed", "raised"

# ActorDiedError's text when the GCS saw the node die before the actor (Ray's gcs_server).
_NODE_DIED_TEXT = "because its node has died"


def classify(exc: BaseException | None) -> str:
    """NODE_LOST, CRASHED or RAISED for the exception a failed task or trial ended with (None,
    or an exception that is not Ray's: RAISED). Measured on Ray 2.60 (`Cluster.remove_node`,
    SIGKILL): a task on the node gets NodeDiedError, a Tune trial's actor ActorUnavailableError
    (its RPC socket closed) or ActorDiedError naming the node's death."""
    if exc is None or not any(c.__module__.startswith("ray.") for c in type(exc).__mro__):
        return RAISED  # not Ray's (and Ray need not be imported: the tests' own tasks)
    from ray import exceptions as rx

    if isinstance(exc, rx.RayTaskError):  # the task's code raised (Tune wraps actor deaths)
        cause = getattr(exc, "cause", None)
        return classify(cause) if isinstance(cause, rx.RayError) else RAISED
    lost = (rx.NodeDiedError, rx.LocalRayletDiedError, rx.ActorUnavailableError, rx.ObjectLostError)
    if isinstance(exc, lost):
        return NODE_LOST
    if isinstance(exc, rx.RayActorError):
        if exc.preempted or _NODE_DIED_TEXT in str(exc):
            return NODE_LOST
        return RAISED if exc.actor_init_failed else CRASHED
    if isinstance(exc, (rx.WorkerCrashedError, rx.OutOfMemoryError)):
        return CRASHED
    return RAISED


@dataclass(frozen=True)
class Budget:
    """How many times one piece of work (a trial, a shard task) runs again after failures:
    `errors` after crashes (and, if `retry_raised`, exceptions its code raised), `node_losses`
    after the death of its node. A node loss beyond `node_losses` is charged to `errors`."""

    errors: int
    node_losses: int
    retry_raised: bool = True


def trial_budget(options: LaunchOptions) -> Budget:
    """A trial's: --max-failures after errors (raised or crashed), --node-losses."""
    return Budget(options.max_failures, options.node_losses)


def task_budget(options: LaunchOptions | None = None) -> Budget:
    """A shard or compaction task's: --task-retries after crashes, --node-losses; an exception
    its code raised ends it (as Ray's own retries did)."""
    options = options or LaunchOptions()
    return Budget(options.task_retries, options.node_losses, retry_raised=False)


def run_budgets(options: LaunchOptions, certifier: Any) -> Retries:
    """A run's budgets from its options: the trials' (returned, for the Tune callback), and
    the certification tasks' set on `certifier` (the shard engine's `StageRunner`, or the
    envelope strategy's `EnvelopeCertifier`, whose pilots and runners share them). Both count
    in its failure log."""
    if isinstance(getattr(certifier, "retries", None), Retries):
        budget_tasks(certifier, task_budget(options))
    return Retries(trial_budget(options), certifier.failure_log)


def budget_tasks(runner: Any, budget: Budget | None) -> None:
    """Give `runner`'s tasks (a `StageRunner`'s or an `EnvelopeCertifier`'s) `budget`, counted
    in its failure log (None: they keep the defaults)."""
    if budget is not None:
        runner.retries = Retries(budget, runner.failure_log)


class Retries:
    """Charges each failure of a piece of work (named by `key`) to its budget; `charge` says
    whether to run it again, and records what it charged."""

    def __init__(self, budget: Budget, failure_log: FailureLog):
        self.budget, self.failure_log = budget, failure_log
        self.spent: dict[Any, Counter] = {}  # key -> {"errors": n, "node_losses": m}

    def charge(self, key: Any, trial_id: str, stage: str, kind: str) -> bool:
        """Whether the work `key` (of `trial_id` in `stage`) that failed with `kind` runs again:
        a node loss within `node_losses`, else an error within `errors`."""
        spent = self.spent.setdefault(key, Counter())
        lost = kind == NODE_LOST and spent["node_losses"] < self.budget.node_losses
        charged = "node_losses" if lost else "errors"
        spent[charged] += 1
        self.failure_log.charge(trial_id, stage, charged)
        if lost:
            return True
        if kind == RAISED and not self.budget.retry_raised:
            return False  # the task's code raised: run again, it would most likely raise again
        return spent["errors"] <= self.budget.errors

    def errors(self, key: Any) -> int:
        """The failures of `key` charged to its errors."""
        return self.spent.get(key, Counter())["errors"]


# ------------------------------------------------------------------------------ Ray Tune
def guard_trial(trial: Any, retries: Retries, trial_id: str) -> None:
    """Make Ray Tune ask `retries` whether `trial` (Tune's) runs again after a failure. Tune
    decides with `Trial.should_recover()` right after recording the failure, counting every
    failure against `FailureConfig.max_failures` (a preempted node only if the autoscaler
    drained it first); a callback hears of it only after the decision. So the trial's own
    `should_recover` is replaced (once, when it starts)."""
    if not isinstance(getattr(trial, "should_recover", None), _Recover):
        trial.should_recover = _Recover(trial, retries, trial_id)


class _Recover:
    """A trial's `should_recover`: classifies the exception Tune pickled for this failure
    (`Trial.handle_error` writes it just before asking) and charges it to the trial's budget."""

    def __init__(self, trial: Any, retries: Retries, trial_id: str):
        self.trial, self.retries, self.trial_id = trial, retries, trial_id
        self.seen: tuple[int, int] | None = None  # the pickle read last: (mtime_ns, size)

    def __call__(self) -> bool:
        kind = classify(self._exception())
        again = self.retries.charge(self.trial_id, self.trial_id, "train", kind)
        spent = self.retries.spent[self.trial_id]
        log.warning(
            "trial %s: training failed (%s; %d errors, %d node losses so far): %s",
            *(self.trial_id, kind.replace("_", " "), spent["errors"], spent["node_losses"]),
            "resumes from its checkpoint" if again else "no retry left",
        )
        return again

    def _exception(self) -> BaseException | None:
        """This failure's exception; None if Tune pickled none for it (not a Ray error)."""
        import pickle  # Tune pickled it with cloudpickle, which pickle reads (Ray imported)

        path = getattr(self.trial, "pickled_error_file", None)
        try:
            stat = os.stat(path) if path else None
        except OSError:
            stat = None
        if path is None or stat is None or (stat.st_mtime_ns, stat.st_size) == self.seen:
            return None  # absent, or an earlier failure's
        self.seen = (stat.st_mtime_ns, stat.st_size)
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception:  # an unreadable pickle: an error, like any unknown failure
            return None

    def __reduce__(self):
        # Tune saves its trials' state (JSON, with cloudpickle for the rest); sweeper never
        # restores it (a run resumes from each trial's own files), so the budget stays here.
        return (_Unrecoverable, ())


class _Unrecoverable:
    """What a restored Tune state would find in place of a `_Recover`: no retries."""

    def __call__(self) -> bool:
        return False
