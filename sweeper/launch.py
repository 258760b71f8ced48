"""Launching a sweep on Ray: connect or start a cluster, check it can host the trials, run a
Ray Tune experiment of the unfinished trials, and certify each trial as soon as it finishes.

Resuming needs no Tune state: every trial keeps its own checkpoint under the experiment
(`trials/<trial_id>/`), so a later run trains only what is unfinished, continuing from the
newest epoch on storage, and certifies only the shards that are missing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# No TensorBoard logger (it imports torch into the driver), and the legacy reporter, which
# honours verbose=0: the console belongs to sweeper's own progress display.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

import ray
from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.search import Searcher

from sweeper.certify import Certifier, Event
from sweeper.plan import is_finished
from sweeper.spec import CertifySpec, Resources
from sweeper.storage import Experiment
from trainables.config import ProblemsError, TrialConfig
from trainables.trial_status import read_status, write_status
from trainables.tune_trial import FAULT_ENV, run_trial

log = logging.getLogger(__name__)


class LaunchError(ProblemsError):
    """The cluster cannot run the sweep."""


@dataclass(frozen=True)
class LaunchOptions:
    address: str | None = None  # None: start a local Ray in-process
    max_concurrent: int | None = None
    max_failures: int = 2  # Tune retries per trial (each resumes from its checkpoint)
    cpu_only: bool = False


@dataclass
class Outcome:
    completed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # trial_id -> error message
    blocked: dict[str, str] = field(default_factory=dict)  # trial_id -> its failed parent
    interrupted: bool = False
    certify_failures: list[tuple[str, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------- the cluster
@contextmanager
def ray_cluster(address: str | None) -> Iterator[None]:
    """Use an already-initialized Ray, join `address`, or start a local Ray; shut down what we
    started."""
    if ray.is_initialized():
        yield
        return
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    except (ConnectionError, RuntimeError) as e:
        raise LaunchError(
            [f"cannot connect to Ray at --address {address}: {str(e).splitlines()[0]}"]
        ) from None
    try:
        yield
    finally:
        ray.shutdown()


def effective_resources(resources: Resources, cpu_only: bool) -> Resources:
    return Resources(cpu=max(resources.cpu, 1.0), gpu=0.0) if cpu_only else resources


def per_process(resources: Resources, trials: list[TrialConfig]) -> Resources:
    """A certification task's share: one process of a data-parallel trial's resources
    (CERTIFY runs in one process, on one GPU)."""
    k = max((t.data_parallel or 1 for t in trials), default=1)
    return Resources(cpu=max(resources.cpu / k, 1.0), gpu=resources.gpu / k) if k > 1 else resources


def resource_problems(resources: Resources) -> list[str]:
    """Can any node of the connected cluster host one trial? (A trial asking for a GPU on a
    cluster without one would otherwise wait forever.)"""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    total_gpu = sum(n.get("GPU", 0) for n in nodes)
    if resources.gpu > 0 and total_gpu == 0:
        return [
            f"the Ray cluster has no GPU but each trial asks for gpu={resources.gpu}: pass --cpu-only "
            "to train on CPUs, or join a GPU cluster with --address"
        ]
    if not any(
        n.get("CPU", 0) >= resources.cpu and n.get("GPU", 0) >= resources.gpu for n in nodes
    ):
        biggest = max((n.get("CPU", 0) for n in nodes), default=0)
        return [
            f"no node of the Ray cluster has cpu={resources.cpu}, gpu={resources.gpu} for one trial "
            f"(largest node: {biggest:g} CPUs): lower `resources` in the space or add bigger nodes"
        ]
    return []


# ---------------------------------------------------------------------------- Tune
class StageSearcher(Searcher):
    """Hands Tune the trials in order, a fine-tune trial only once its parent has finished.

    Trials whose parent is finished already (an earlier run) start at once. When a parent
    fails for good, its children are never started: `blocked` names them, and the search
    ends once nothing else can run."""

    def __init__(self, trials: list[TrialConfig], finished: set[str], constants: dict):
        super().__init__()
        self.waiting = list(trials)
        self.finished = set(finished)
        self.failed: set[str] = set()
        self.running: dict[str, str] = {}  # Tune's trial id -> ours
        self.constants = constants

    def suggest(self, trial_id: str):
        for i, cfg in enumerate(self.waiting):
            if cfg.init_from is None or cfg.init_from in self.finished:
                self.running[trial_id] = self.waiting.pop(i).trial_id
                return {**self.constants, "trial": cfg.to_dict()}
        if not self.waiting or (not self.running and self.blocked()):
            return Searcher.FINISHED
        return None  # children wait for their running parents

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        ours = self.running.pop(trial_id, None)
        if ours is not None:
            (self.failed if error else self.finished).add(ours)

    def blocked(self) -> dict[str, str]:
        """Waiting trials that can never start: child -> the parent that failed (or is absent)."""
        active = set(self.running.values()) | {c.trial_id for c in self.waiting}
        return {
            c.trial_id: c.init_from
            for c in self.waiting
            if c.init_from is not None
            and c.init_from not in self.finished
            and c.init_from not in active
        }

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: resuming reads each trial's own state, not Tune's."""

    def restore(self, checkpoint_path: str) -> None:
        """See `save`."""


class _SweepCallback(tune.Callback):
    """Reports trial events, certifies finished trials, records failures."""

    def __init__(
        self,
        exp: Experiment,
        certifier: Certifier,
        outcome: Outcome,
        on_event: Callable[[Event], None],
    ):
        self.exp, self.certifier, self.outcome, self.on_event = exp, certifier, outcome, on_event

    def __getstate__(self) -> dict:
        # Tune pickles its run config into the experiment state; the live certifier and the
        # progress display stay in this process (resuming does not use Tune's state).
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.on_event(Event("trial_started", _tid(trial)))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.on_event(Event("trial_epoch", _tid(trial), f"{result.get('epoch')}"))

    def on_trial_complete(self, iteration, trials, trial, **info):
        cfg = TrialConfig.from_dict(trial.config["trial"])
        self.outcome.completed.append(cfg.trial_id)
        self.on_event(Event("trial_finished", cfg.trial_id))
        self.certifier.submit(cfg)

    def on_trial_error(self, iteration, trials, trial, **info):
        cfg = TrialConfig.from_dict(trial.config["trial"])
        message = _error_message(trial)
        self.outcome.failed[cfg.trial_id] = message
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
        self.certifier.poll()


def _tid(trial) -> str:
    return TrialConfig.from_dict(trial.config["trial"]).trial_id


def _error_message(trial) -> str:
    path = getattr(trial, "error_file", None) or ""
    try:
        text = Path(path).read_text().strip() if path else ""
    except OSError:
        text = ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "trial failed (see Ray Tune's error.txt under tune/)"


@contextmanager
def _sigterm_as_sigint() -> Iterator[None]:
    """A scheduler's SIGTERM stops the sweep like Ctrl-C does: Tune saves and returns."""
    if threading.current_thread() is threading.main_thread():  # signals only work there
        previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        yield


def _tuner(
    exp: Experiment, searcher: StageSearcher, resources: Resources, options: LaunchOptions, callback
):
    # Tune keeps one pending trial for custom searchers (200+ for grid search): a sweep needs
    # many, to pack trials on fractional GPUs and to give the autoscaler demand to act on.
    cpus = ray.cluster_resources().get("CPU", 1.0)
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(max(200, int(cpus * 1.1))))
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, experiment_root=exp.root),
        {"cpu": resources.cpu, "gpu": resources.gpu},
    )
    run_config = tune.RunConfig(
        name=time.strftime("run-%Y%m%d-%H%M%S"),
        storage_path=exp.tune_dir,
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        callbacks=[JsonLoggerCallback(), CSVLoggerCallback(), callback],
    )
    tune_config = tune.TuneConfig(
        search_alg=searcher,
        num_samples=len(searcher.waiting),
        max_concurrent_trials=options.max_concurrent,
        reuse_actors=True,
    )
    return tune.Tuner(trainable, tune_config=tune_config, run_config=run_config)


def run_sweep(
    exp: Experiment,
    to_train: list[TrialConfig],
    finished: list[TrialConfig],
    certify: CertifySpec,
    resources: Resources,
    options: LaunchOptions,
    on_event: Callable[[Event], None],
) -> Outcome:
    """Train `to_train` with Ray Tune, certify every trial as it finishes (and the already
    `finished` ones with missing shards). Ray must be initialized (see `ray_cluster`)."""
    outcome = Outcome()
    certifier = Certifier(
        exp, certify.variants(), per_process(resources, [*to_train, *finished]), on_event
    )
    for cfg in finished:
        certifier.submit(cfg)
    if to_train:
        constants = {"cpus_per_trial": resources.cpu, "fault": os.environ.get(FAULT_ENV, "")}
        parents = {t.init_from for t in to_train if t.init_from}
        done = {t.trial_id for t in finished} | {
            p for p in parents if is_finished(read_status(exp.trial_dir(p)), None)
        }  # parents outside this --only slice may have finished in an earlier run
        searcher = StageSearcher(to_train, done, constants)
        callback = _SweepCallback(exp, certifier, outcome, on_event)
        with _sigterm_as_sigint():
            _tuner(exp, searcher, resources, options, callback).fit()
        outcome.blocked = searcher.blocked()
    ended = set(outcome.completed) | set(outcome.failed) | set(outcome.blocked)
    outcome.interrupted = any(t.trial_id not in ended for t in to_train)
    if outcome.interrupted:
        certifier.cancel()
    else:
        certifier.wait()
    outcome.certify_failures = list(certifier.failures)
    return outcome


def certify_trials(
    exp: Experiment,
    trials: list[TrialConfig],
    certify: CertifySpec,
    resources: Resources,
    on_event: Callable[[Event], None],
) -> Outcome:
    """Certify finished trials only (`sweeper certify`); Ray must be initialized."""
    outcome = Outcome()
    certifier = Certifier(exp, certify.variants(), per_process(resources, trials), on_event)
    for cfg in trials:
        certifier.submit(cfg)
    try:
        certifier.wait()
    except KeyboardInterrupt:
        certifier.cancel()
        outcome.interrupted = True
    outcome.certify_failures = list(certifier.failures)
    return outcome
