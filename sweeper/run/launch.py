"""Launching a sweep on Ray: connect or start a cluster, check it can host the trials, run a
Ray Tune experiment of the unfinished trials, and certify each trial as soon as it finishes.

Resuming needs no Tune state: every trial keeps its own checkpoint under the experiment
(`trials/<trial_id>/`), so a later run trains only what is unfinished, continuing from the
newest epoch on storage, and certifies only the shards that are missing.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

# Tune's loggers are chosen explicitly (`trackers`), and the legacy reporter, which honours
# verbose=0: the console belongs to sweeper's own progress display.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

import ray
from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.search import Searcher

from sweeper.plan.spec import CertifySpec, Resources
from sweeper.plan.sweep_plan import address_credentials_problem
from sweeper.results.credentials import redact, scrub
from sweeper.results.storage import Experiment
from sweeper.run.capacity import Capacity, certification_room, per_process
from sweeper.run.certify_stage import CERTIFY
from sweeper.run.launch_options import LaunchOptions, trackers
from sweeper.run.outcome import Outcome
from sweeper.run.retries import Budget, budget_tasks, run_budgets
from sweeper.run.search_curves import Curves
from sweeper.run.search_room import Slots, one_pending, search_slots
from sweeper.run.search_tune import EnvelopeSearcher, SearchPlan, search_rounds
from sweeper.run.shards import Event, StageRunner, Work, test_size
from sweeper.run.signing import workers_signing_env
from sweeper.run.stage import Stage
from sweeper.run.stage_searcher import StageSearcher, stage_searcher
from sweeper.run.trial_events import SweepCallback
from sweeper.run.tune_names import TuneTrials
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ProblemsError
from trainables.kernel.trial_hooks import FAULT_ENV

if TYPE_CHECKING:
    from sweeper.run.envelope_run import Certifier

log = logging.getLogger(__name__)


class LaunchError(ProblemsError):
    """The cluster cannot run the sweep."""


@dataclass(frozen=True)
class DataPlane:
    """What runs on the workers: the Tune trainable, the certification stage and how the
    number of test points is found. The defaults are the real ones; benchmarks/sweep_scale.py
    drives the launcher with stand-ins that do no heavy compute (a documented substitute at
    this boundary, so everything else is the real control plane)."""

    trainable: Callable | None = None  # None: trainables.tune_trial.run_trial (imports torch)
    certify: Stage = CERTIFY
    sizer: Callable[[str, str | None], int] = test_size


# ---------------------------------------------------------------------------- the cluster
# Ray ends a worker idle for 1 s once its node has more workers than CPUs, and a sweep's trial
# actors, certification tasks and compactions outnumber them: each worker started again imports
# pyarrow (and torch, to certify). Kept a minute, they bridge the gaps between models (644
# stand-in trials, benchmarks/sweep_scale.py: 145-160 workers started, 52-68 with a minute;
# the sweep 203-214 s against 129-142 s). The
# local Ray takes it here; cluster.yaml, the KubeRay manifest and the Slurm script set it.
IDLE_WORKER_MS = 60_000
LOCAL_RAY = {"idle_worker_killing_time_threshold_ms": IDLE_WORKER_MS}  # Ray's _system_config


@contextmanager
def ray_cluster(address: str | None) -> Iterator[None]:
    """Use an already-initialized Ray, join `address` (or $RAY_ADDRESS, as `ray job submit`
    sets it), or else start a local Ray; shut down what we started. Without an address this
    never joins the cluster a `ray start` on this machine last recorded (Ray's own default):
    the docs promise a local Ray, and a stale record must not capture a sweep. An address
    with credentials (`ray://user:pass@host`, from either) is LaunchError before Ray starts,
    and an error shows the address redacted."""
    target = address or os.environ.get("RAY_ADDRESS") or "local"
    if problem := address_credentials_problem(target, "--address" if address else "RAY_ADDRESS"):
        raise LaunchError([problem])  # before Ray: its errors would quote the address
    if ray.is_initialized():
        yield
        return
    local: dict[str, Any] = {"_system_config": LOCAL_RAY} if target == "local" else {}
    try:
        ray.init(
            address=target,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            runtime_env=workers_signing_env(),
            **local,
        )
    except (ConnectionError, RuntimeError) as e:  # Ray's text may quote the address: scrubbed
        where = f"--address {redact(address)}" if address else f"RAY_ADDRESS={redact(target)}"
        what = (
            "cannot start a local Ray" if target == "local" else f"cannot connect to Ray at {where}"
        )
        raise LaunchError([f"{what}: {scrub(str(e).splitlines()[0], target)}"]) from None
    try:
        yield
    finally:
        ray.shutdown()


# ---------------------------------------------------------------------------- Tune
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


def _tune_fit(tuner: tune.Tuner) -> None:
    """`tuner.fit()`, then SIGINT's and SIGUSR1's handlers as they were before it: Tune puts its
    own back only on a signal, and a Ctrl-C while certification goes on would reach a Tune no
    longer running, and be lost."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1)}
    try:
        tuner.fit()
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)


def _run_trial() -> Callable:
    from trainables.tune_trial import run_trial  # torch: only a driver that trains imports it

    return run_trial


def _tuner(
    exp: Experiment,
    searcher: Searcher,
    samples: int,
    resources: Resources,
    options: LaunchOptions,
    callback,
    trainable: Callable | None,
    round_: int = 0,
):
    # Tune keeps one pending trial for custom searchers (200+ for grid search): a sweep needs
    # many, to pack trials on fractional GPUs and to give the autoscaler demand to act on.
    cpus = ray.cluster_resources().get("CPU", 1.0)
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(max(200, int(cpus * 1.1))))
    if not round_:  # the budgets span the search's rounds
        callback.retries = run_budgets(options, callback.certifier)
    trainable = tune.with_resources(
        tune.with_parameters(trainable or _run_trial(), experiment_root=exp.root),
        {"cpu": resources.cpu, "gpu": resources.gpu},
    )
    run_config = tune.RunConfig(
        name=time.strftime("run-%Y%m%d-%H%M%S") + (f"-{round_}" if round_ else ""),
        storage_path=exp.tune_dir,
        verbose=0,
        # decides only for a trial not yet guarded (`retries.guard_trial`: budgets apart)
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        callbacks=[JsonLoggerCallback(), CSVLoggerCallback(), *trackers(exp, options), callback],
    )
    tune_config = tune.TuneConfig(
        search_alg=searcher,
        num_samples=samples,
        max_concurrent_trials=options.max_concurrent,
        # under the search an actor kept for reuse takes a slot held back for certification
        reuse_actors=not isinstance(searcher, EnvelopeSearcher) or searcher.slots_reuse,
        trial_name_creator=callback.handed.name,
        trial_dirname_creator=callback.handed.dirname,
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
    room: Capacity | None = None,
    plane: DataPlane = DataPlane(),
    search: SearchPlan | None = None,
) -> Outcome:
    """Train `to_train` with Ray Tune (every trial, or as the envelope `search` decides),
    certify every trial as it finishes (and the already `finished` ones with missing shards).
    Ray must be initialized (see `ray_cluster`); `room`, the autoscaler request
    (`sweeper.run.capacity`), shrinks as trials end."""
    outcome = Outcome()
    resources_task = per_process(resources, [*to_train, *finished])
    sizes = (resources, resources_task)  # a trial's, a certification task's
    curves = None if search is None else Curves(exp, certify, search.radii)
    tapped = on_event if curves is None else curves.tap(on_event)
    declared = [*finished, *to_train]  # under the search: those it may train
    certifier = _certifier(exp, certify, resources_task, tapped, plane, declared, search is None)
    for cfg in finished:
        certifier.submit(cfg)
    searcher: StageSearcher | EnvelopeSearcher | None = None
    if to_train:
        constants = {"cpus_per_trial": resources.cpu, "fault": os.environ.get(FAULT_ENV, "")}
        handed = TuneTrials(constants)
        searcher, options = _searcher(
            exp, (to_train, finished), search, curves, certifier, handed, sizes, options
        )
        shrink = (room, len(to_train)) if room is not None else None
        callback = SweepCallback(exp, certifier, outcome, on_event, handed, shrink)
        # under the search the searcher ends each round; Tune's count would end it unasked
        samples = -1 if isinstance(searcher, EnvelopeSearcher) else len(to_train)
        tuner = functools.partial(
            _tuner, exp, searcher, samples, resources, options, callback, plane.trainable
        )
        with _sigterm_as_sigint():
            _fit(tuner, searcher, certifier)
        if isinstance(searcher, StageSearcher):
            outcome.blocked = searcher.blocked()
    interrupted = _interrupted(outcome, to_train, searcher)
    with _sigterm_as_sigint():
        outcome.interrupted = _settle(certifier, searcher, interrupted)
    outcome.failures += certifier.failure_rows()
    return outcome


def _searcher(
    exp: Experiment,
    trials: tuple[list[TrialConfig], list[TrialConfig]],
    search: SearchPlan | None,
    curves: Curves | None,
    certifier: Certifier,
    handed: TuneTrials,
    resources: tuple[Resources, Resources],
    options: LaunchOptions,
) -> tuple[StageSearcher | EnvelopeSearcher, LaunchOptions]:
    """What Tune trains, of `trials` (to train, finished): every one, parents first, or what
    the envelope `search` proposes, its slots capping the trials at once (in the options);
    `resources`: a trial's and a certification task's."""
    to_train, finished = trials
    if search is None or curves is None:
        return stage_searcher(exp, to_train, finished, handed), options
    curves.certifier = certifier
    searcher = EnvelopeSearcher(exp, search, to_train, finished, curves, handed)
    searcher.certifier = certifier
    trial, task = resources
    searcher.slots = _search_slots(trial, options)
    # Tune may wait for a curve in its own loop while a certification task has room beside it
    searcher.room = functools.partial(certification_room, task)
    return searcher, replace(options, max_concurrent=searcher.slots.cap)


def _fit(tuner: Callable[..., tune.Tuner], searcher: Searcher, certifier: Certifier) -> None:
    """Tune's run, or under the envelope search its rounds (`search_tune.search_rounds`)."""
    if isinstance(searcher, EnvelopeSearcher):
        with one_pending():
            search_rounds(lambda k: _tune_fit(tuner(k)), searcher, certifier)
    else:
        _tune_fit(tuner())


def _settle(certifier: Certifier, searcher: Searcher | None, interrupted: bool) -> bool:
    """After training: certification waited for, or cancelled if the run was `interrupted`
    before or is meanwhile (Ctrl-C, SIGTERM); then the envelope search's account of its audit,
    from the curves certified since. Returns whether the run was interrupted."""
    if not interrupted:
        try:
            certifier.wait()
            certifier.finish()
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        certifier.cancel()
    if isinstance(searcher, EnvelopeSearcher):
        searcher.finish()
    return interrupted


def _search_slots(resources: Resources, options: LaunchOptions) -> Slots:
    """Trials trained at once under the envelope search (`search_room.search_slots`)."""
    from sweeper.run.capacity import cluster_slots

    return search_slots(cluster_slots(resources), options.max_concurrent)


def _interrupted(outcome: Outcome, to_train: list[TrialConfig], searcher: Searcher | None) -> bool:
    """Whether the run stopped before its training was done: a trial it was to train has not
    ended (under the search: it had not finished, or a trial it started has not ended)."""
    ended = set(outcome.completed) | set(outcome.failed) | set(outcome.blocked)
    if isinstance(searcher, EnvelopeSearcher):
        return not searcher.done or any(t not in ended for t in searcher.started)
    return any(t.trial_id not in ended for t in to_train)


def _certifier(
    exp: Experiment,
    certify: CertifySpec,
    resources: Resources,
    on_event,
    plane: DataPlane = DataPlane(),
    declared: list[TrialConfig] | tuple = (),
    certain: bool = True,
) -> Certifier:
    """Certification of every finished model under each setting (fixed σ, and DDRS if asked),
    or as the `envelope` strategy decides (`envelope_run`), as the models arrive (`declared`
    known up front: the envelope strategy's δ is split over them; full certification's progress
    counts their shards from its first event, if `certain` they all come)."""
    if certify.strategy == "envelope":
        from sweeper.run.capacity import cluster_slots
        from sweeper.run.envelope_run import EnvelopeCertifier

        slots, count = cluster_slots(resources), len(declared)
        return EnvelopeCertifier(
            exp, certify, resources, on_event, sizer=plane.sizer, slots=slots, declared=count
        )
    work = [Work(plane.certify, spec) for spec in certify.variants()]
    runner = StageRunner(exp, work, resources, on_event, plane.sizer)
    runner.expect(list(declared) if certain else [])
    return runner


def certify_trials(
    exp: Experiment,
    trials: list[TrialConfig],
    certify: CertifySpec,
    resources: Resources,
    on_event: Callable[[Event], None],
    budget: Budget | None = None,
) -> Outcome:
    """Certify finished trials (`sweeper certify`; Ray initialized), `budget`: tasks' retries."""
    outcome = Outcome()
    certifier = _certifier(exp, certify, per_process(resources, trials), on_event, declared=trials)
    budget_tasks(certifier, budget)
    for cfg in trials:
        certifier.submit(cfg)
    with _sigterm_as_sigint():  # a scheduler's SIGTERM stops it as Ctrl-C does
        outcome.interrupted = _settle(certifier, None, interrupted=False)
    outcome.failures += certifier.failure_rows()
    return outcome
