"""What the driver does at Tune's trial events (`SweepCallback`): report them, certify each
trial that finished, record a failed one with the full text of its error, and guard each
trial with its budgets (`retries`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ray import tune

from sweeper.results.storage import Experiment
from sweeper.run.capacity import Capacity
from sweeper.run.launch_options import LaunchOptions
from sweeper.run.outcome import Outcome
from sweeper.run.retries import guard_trial, run_budgets
from sweeper.run.shards import Event
from sweeper.run.tune_names import TuneTrials
from trainables.kernel.trial_status import read_status, write_status

if TYPE_CHECKING:
    from sweeper.run.envelope_run import Certifier


class SweepCallback(tune.Callback):
    """Reports trial events, certifies finished trials, records failures; guards each trial
    with its budgets (`retries`: errors and node losses apart; `launch._tuner` sets them)."""

    def __init__(
        self,
        exp: Experiment,
        certifier: Certifier,
        outcome: Outcome,
        on_event: Callable[[Event], None],
        handed: TuneTrials,
        room: tuple[Capacity, int] | None = None,
    ):
        self.exp, self.certifier, self.outcome, self.on_event = exp, certifier, outcome, on_event
        self.handed = handed  # the TrialConfig of each of Tune's trials
        self.room = room  # the autoscaler request and the number of trials to train
        self.retries = run_budgets(LaunchOptions(), certifier)

    def _shrink(self) -> None:
        """Ask the autoscaler only for the trials still to come, so the cluster drains."""
        if self.room is not None:
            capacity, total = self.room
            left = total - len(self.outcome.completed) - len(self.outcome.failed)
            capacity.set(min(capacity.count, left))

    def __getstate__(self) -> dict:
        # Tune pickles its run config into the experiment state; the live certifier and the
        # progress display stay in this process (resuming does not use Tune's state).
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def on_trial_start(self, iteration, trials, trial, **info):
        guard_trial(trial, self.retries, self.handed.name(trial))
        self.on_event(Event("trial_started", self.handed.name(trial)))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.on_event(Event("trial_epoch", self.handed.name(trial), f"{result.get('epoch')}"))

    def on_trial_complete(self, iteration, trials, trial, **info):
        cfg = self.handed.of(trial)
        self.outcome.completed.append(cfg.trial_id)
        self._shrink()
        self.on_event(Event("trial_finished", cfg.trial_id))
        self.certifier.submit(cfg)

    def on_trial_error(self, iteration, trials, trial, **info):
        cfg = self.handed.of(trial)
        attempts = max(1, self.retries.errors(cfg.trial_id))  # not its node losses
        failure = self.certifier.failure_log.add(
            cfg.trial_id, "train", _error_text(trial), attempts
        )
        message = failure.line()
        self.outcome.failures.append((cfg.trial_id, "train", message))
        self._shrink()
        status = read_status(self.exp.trial_dir(cfg.trial_id)) or {"epoch": 0, "metrics": {}}
        write_status(
            self.exp.trial_dir(cfg.trial_id),
            cfg,
            "failed",
            status["epoch"],
            status["metrics"],
            error=message,
        )
        self.on_event(Event("trial_failed", cfg.trial_id, message))

    def on_step_end(self, iteration, trials, **info):
        self.certifier.poll()  # the envelope search also polls it while Tune waits on it


def _error_text(trial) -> str:
    """The full text of a trial's error (Tune's error.txt: the traceback on the worker)."""
    path = getattr(trial, "error_file", None) or ""
    try:
        text = Path(path).read_text().strip() if path else ""
    except OSError:
        text = ""
    return text or "trial failed (see Ray Tune's error.txt under tune/)"
