"""The sharded-stage engine. Certification and the empirical attack are two `Stage`s it runs.

A stage computes rows for a finished model's test points under one setting (a certification
setting, an attack setting). The engine owns everything around that:

- splitting the model's test points into shards (`plan`: every `skip`-th point, at most
  `max_points`, `shard_size` per shard) and their files (named by `sweeper.results.storage`);
- resuming: a shard whose file exists, or a model whose rows are compacted, is not computed
  again; a model half-done with another shard size is refused (its rows would count twice);
- tasks, one per shard (fractional resources; GPU tasks keep their worker), run on Ray by
  `RayTasks`; the runner asks only the `Tasks` protocol (submit, wait, get, cancel), so the
  tests run it in their own process;
- retries: Ray retries nothing (`max_retries=0`: it would count a node's death against the
  budget meant for crashes); the runner submits a failed task again itself, a lost node and a
  crashed worker each within its own budget (`sweeper.run.retries`);
- progress events, and failures grouped per model and stage;
- compacting each model once its shards are written (`sweeper.run.compaction`: one task
  folds them into one verified file), and refreshing the stage's cache of compacted rows.

Reading is `sweeper.results.reader`. torch and Ray are imported only by the functions that run
tasks, so reading stays light.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sweeper.plan.spec import Resources
from sweeper.results.attested_rows import data_of, points_digest, signed
from sweeper.results.failures import FailureLog
from sweeper.results.shard_counts import Progress as Progress  # what is on storage
from sweeper.results.shard_counts import all_compacted as all_compacted
from sweeper.results.shard_counts import progress
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment, chunked
from sweeper.run.compaction import compact
from sweeper.run.retries import Retries, classify, task_budget
from sweeper.run.stage import Setting, Shard, Stage
from trainables.attestations import trained_checkpoint
from trainables.kernel import fileio
from trainables.kernel.attestation import load_signing_key
from trainables.kernel.config import TrialConfig

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """A progress event of a sweep: trial_started/_epoch/_finished/_failed (the launcher);
    shards_planned, shard_done, compacted, and <stage>_failed (certify_failed,
    empirical_failed: one of the stage's shard or compaction tasks failed) from the engine,
    whose events carry `shards`: (done, total, failed) of the stages' shards after it."""

    kind: str
    trial_id: str
    detail: str = ""
    shards: tuple[int, int, int] | None = None


def plan(cfg: TrialConfig, stage: str, setting: Setting, num_test: int) -> list[Shard]:
    """The shards of one model under one setting."""
    chunks = chunked(setting.test_points(num_test), setting.shard_size)
    return [
        Shard(stage, cfg.trial_id, setting.setting_id, k, len(chunks), c)
        for k, c in enumerate(chunks)
    ]


# ------------------------------------------------------------------------------ the tasks
def run_shard(exp: Experiment, stage: Stage, shard: Shard, setting: Setting, cpus: float) -> int:
    """Compute one shard and write its file; returns the rows written (0: it existed)."""
    out = exp.shard_path(shard.trial_id, shard.setting_id, shard.index, shard.count, stage.name)
    done = exp.compacted_path(stage.name, shard.trial_id, shard.setting_id, shard.count)
    if fileio.exists(out) or fileio.exists(done):
        return 0
    table = stage.compute(exp, shard, setting, cpus)
    if not table.schema.equals(stage.schema):
        raise TypeError(f"stage {stage.name} computed rows of another schema: {table.schema}")
    write_table(attest_shard(exp, stage.name, shard, table), out)
    return table.num_rows


def attest_shard(exp: Experiment, step: str, shard: Shard, table: pa.Table) -> pa.Table:
    """The shard's rows signed with this worker's key (as they are without one): made by
    `step` from the checkpoint its training attested, for this model, setting and points."""
    key = load_signing_key()
    if key is None:
        return table
    checkpoint = trained_checkpoint(exp.trial_dir(shard.trial_id), key)
    settings = {
        "trial_id": shard.trial_id,
        "setting_id": shard.setting_id,
        "shard": f"{shard.index}/{shard.count}",
        "points": points_digest(shard.indices),
    }
    inputs = {"checkpoint.pt": checkpoint, **data_of(table)}
    return signed(table, key, step, inputs, settings)


# ------------------------------------------------------------------------------ on Ray
@dataclass(frozen=True)
class Work:
    """One stage under one setting, for every model submitted."""

    stage: Stage
    setting: Setting


@dataclass(frozen=True)
class Job:
    """What a submitted task does: `shard` of a model under `work`, or (`shard` None) the
    compaction of the model's shards; `call` is how it was submitted (fn, options, args), to
    submit it again."""

    work: Work
    trial_id: str
    shard: Shard | None
    call: tuple = ()


class Tasks(Protocol):
    """Where the runner's tasks run: on Ray (`RayTasks`), or in the tests' process. A handle
    names a submitted task; `get` returns a task's result or raises its exception."""

    def submit(self, fn: Callable, options: dict[str, Any], *args: Any) -> Any:
        """Start `fn(*args)` with Ray's resource `options` (num_cpus, num_gpus)."""

    def wait(self, handles: list, timeout: float) -> list:
        """The handles of tasks that have ended, waiting at most `timeout` seconds for one."""

    def get(self, handle: Any) -> Any: ...

    def cancel(self, handle: Any) -> None: ...


@functools.cache
def _remote(fn: Callable, gpu: bool, retries: int):
    import ray

    # Ray gives every GPU task a fresh worker by default: keep it (and its CUDA context).
    options: dict[str, Any] = {"max_retries": retries, **({"max_calls": 0} if gpu else {})}
    return ray.remote(**options)(fn)


class RayTasks:
    """Tasks on Ray (initialized by the caller), each retried by Ray `max_retries` times after
    its worker or node died (Ray counts both alike: `StageRunner` asks for 0 and retries
    itself, `sweeper.run.retries`); a GPU task (`num_gpus` in its options) leaves its worker
    to the next one, with its CUDA context."""

    def __init__(self, max_retries: int = 2):
        self.max_retries = max_retries

    def submit(self, fn: Callable, options: dict[str, Any], *args: Any) -> Any:
        remote = _remote(fn, bool(options.get("num_gpus")), self.max_retries)
        return remote.options(**options).remote(*args)

    def wait(self, handles: list, timeout: float) -> list:
        import ray

        # Back at the first task to end, with every other ended by then: waiting for all of
        # them held each step of a certification (shards, then their compaction) a poll long.
        ready, rest = ray.wait(handles, num_returns=1, timeout=timeout)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        return ready

    def get(self, handle: Any) -> Any:
        import ray

        return ray.get(handle)

    def cancel(self, handle: Any) -> None:
        import ray

        ray.cancel(handle, force=True)


@functools.lru_cache(maxsize=8)
def test_size(dataset: str, data_dir: str | None) -> int:
    """How many test points the data set has (loads it: torch; cached). A data set on a
    bucket (`s3://`, `gs://`) has its standard test split: the driver does not fetch a copy
    (all of ImageNet) to count it; a worker reading fewer points fails on the missing index."""
    from trainables.data_cache import is_remote
    from trainables.kernel.catalog import STANDARD_TEST_SIZE

    if is_remote(data_dir) and dataset in STANDARD_TEST_SIZE:
        return STANDARD_TEST_SIZE[dataset]
    from trainables.datasets import load_dataset

    return len(load_dataset(dataset, "test", data_dir))


class StageRunner:
    """Submits the shard tasks of every finished model for every `work` item, compacts each
    model once its shards are written, and collects outcomes; a task's failure is recorded
    (grouped per model and stage), never raised. Tasks run on Ray unless `tasks` says where
    (Ray must then be initialized)."""

    def __init__(
        self,
        exp: Experiment,
        work: list[Work],
        resources: Resources,
        on_event: Callable[[Event], None],
        sizer: Callable[[str, str | None], int] = test_size,
        failure_log: FailureLog | None = None,
        tasks: Tasks | None = None,
        retries: Retries | None = None,
    ):
        self.exp, self.work, self.resources, self.on_event = exp, work, resources, on_event
        self.sizer = sizer
        if failure_log is None:
            failure_log = FailureLog(exp)
            failure_log.start()
        self.failure_log = failure_log  # grouped per model and stage, full texts in its log
        self.tasks: Tasks = tasks or RayTasks(max_retries=0)  # the runner retries
        # a failed task runs again within its budgets (default: LaunchOptions' defaults)
        self.retries = retries or Retries(task_budget(), failure_log)
        self.pending: dict[Any, Job] = {}
        self.remaining: dict[tuple[str, str, str], int] = {}  # (trial, stage, setting) -> shards
        # the driver's alone: the workers importing this module for its tasks skip the reader
        from sweeper.run.cache_refresh import CacheRefresher

        self.caches = CacheRefresher(exp)  # the stages' caches, refreshed off this loop
        self.done = 0
        self.planned: dict[tuple[str, str, str], int] = {}  # (trial, stage, setting) -> shards

    @property
    def total(self) -> int:
        return sum(self.planned.values())

    def expect(self, trials: list[TrialConfig]) -> None:
        """Count the shards of the `trials` a run will submit from its first event on, so
        that its progress reads done of the planned total, not of what was submitted yet."""
        for cfg, w in ((cfg, w) for cfg in trials for w in self.work):
            points = self.sizer(cfg.dataset, cfg.data_dir)
            key = (cfg.trial_id, w.stage.name, w.setting.setting_id)
            self.planned[key] = len(plan(cfg, w.stage.name, w.setting, points))

    # -------------------------------------------------------------------- submitting
    def submit(self, cfg: TrialConfig) -> int:
        """Queue every missing shard of a finished trial; returns how many were queued."""
        queued = sum(self._submit_work(cfg, w) for w in self.work)
        self._emit("shards_planned", cfg.trial_id, f"{queued} to do")
        return queued

    def _submit_work(self, cfg: TrialConfig, work: Work) -> int:
        stage, sid = work.stage.name, work.setting.setting_id
        shards = plan(cfg, stage, work.setting, self.sizer(cfg.dataset, cfg.data_dir))
        if not shards:
            return 0
        state = progress(self.exp, stage, cfg.trial_id, sid, len(shards))
        self.planned[(cfg.trial_id, stage, sid)] = len(shards)
        if state.compacted:
            self.done += len(shards)
            return 0
        if state.other_counts:  # another shard_size: its files would count rows twice
            other = sorted(state.other_counts)[0]
            self._fail(
                cfg.trial_id,
                stage,
                f"{sid} was computed in {other} shards, now "
                f"{len(shards)}: use the shard_size used before, or move that directory away",
            )
            return 0
        todo = [s for s in shards if s.index not in state.shards]
        self.done += len(shards) - len(todo)
        self.remaining[(cfg.trial_id, stage, sid)] = len(todo)
        options = {"num_cpus": self.resources.cpu, "num_gpus": self.resources.gpu}
        for shard in todo:
            args = (self.exp, work.stage, shard, work.setting, self.resources.cpu)
            self._start(Job(work, cfg.trial_id, shard, (run_shard, options, args)))
        if not todo:
            self._submit_compaction(work, cfg.trial_id, len(shards))
        return len(todo)

    def _submit_compaction(self, work: Work, trial_id: str, count: int) -> None:
        # One CPU each: compactions are short, and fractions would start a worker process
        # per concurrent compaction (each importing pyarrow) for no gain.
        args = (self.exp, work.stage, trial_id, work.setting, count)
        self._start(Job(work, trial_id, None, (compact, {"num_cpus": 1}, args)))

    def _start(self, job: Job) -> None:
        fn, options, args = job.call
        self.pending[self.tasks.submit(fn, options, *args)] = job

    def _again(self, job: Job, error: Exception) -> bool:
        """Whether the failed `job` was submitted again: its node was lost, or its worker
        crashed, within their budgets (`retries`; by default an exception its code raised is
        not retried)."""
        stage, shard = job.work.stage.name, job.shard
        part = f"shard {shard.index + 1}/{shard.count}" if shard is not None else "compaction"
        key = (job.trial_id, stage, job.work.setting.setting_id, part)
        kind = classify(error)
        if not self.retries.charge(key, job.trial_id, stage, kind):
            return False
        spent = self.retries.spent[key]
        log.warning(
            "trial %s: %s %s failed (%s; %d errors, %d node losses so far): submitted again",
            *(job.trial_id, stage, part, kind.replace("_", " ")),
            *(spent["errors"], spent["node_losses"]),
        )
        self._start(job)
        return True

    # -------------------------------------------------------------------- outcomes
    def poll(self, timeout: float = 0) -> None:
        """Collect every task that has ended (waiting at most `timeout` seconds for one)."""
        if not self.pending:
            return
        for handle in self.tasks.wait(list(self.pending), timeout):
            task = self.pending.pop(handle)
            try:
                result = self.tasks.get(handle)
            except Exception as e:  # reported in the outcome, grouped per model and stage
                if not self._again(task, e):
                    self._fail(task.trial_id, task.work.stage.name, str(e) or type(e).__name__)
                continue
            if task.shard is None:
                self._compacted(task.work, task.trial_id, result)
            else:
                self._shard_done(task.work, task.shard)

    def _shard_done(self, work: Work, shard: Shard) -> None:
        self.done += 1
        key = (shard.trial_id, shard.stage, shard.setting_id)
        self.remaining[key] -= 1
        if self.remaining[key] == 0:
            self._submit_compaction(work, shard.trial_id, shard.count)
        self._emit("shard_done", shard.trial_id, f"{shard.stage} {shard.index + 1}/{shard.count}")

    def _compacted(self, work: Work, trial_id: str, result: object) -> None:
        self.caches.compacted(work.stage, result)  # readers then open one file
        self._emit("compacted", trial_id, f"{work.stage.name} {work.setting.setting_id}")

    def finish(self) -> None:
        """Once every task has ended: the caches hold every compacted model."""
        self.caches.finish(list({w.stage.name: w.stage for w in self.work}.values()))

    def _fail(self, trial_id: str, stage: str, text: str) -> None:
        failure = self.failure_log.add(trial_id, stage, text)
        if failure.count == 1:  # one event per model and stage: the first line says it all
            self._emit(f"{stage}_failed", trial_id, failure.message)

    def _emit(self, kind: str, trial_id: str, detail: str) -> None:
        failed = sum(f.count for f in self.failure_log.failures.values() if f.stage != "train")
        self.on_event(Event(kind, trial_id, detail, (self.done, self.total, failed)))

    def failure_rows(self) -> list[tuple[str, str, str]]:
        """(trial_id, stage, "message (k tasks)") per model and stage whose tasks failed."""
        return [row for row in self.failure_log.rows() if row[1] != "train"]

    @property
    def in_flight(self) -> bool:
        """Whether a task is still to end (polling can bring news)."""
        return bool(self.pending)

    def wait(self, poll_every: float = 0.5) -> None:
        """Collect outcomes until no task is left (at most `poll_every` seconds per poll)."""
        while self.pending:
            self.poll(timeout=poll_every)

    def cancel(self) -> None:
        """Cancel every task still pending (written shards are kept)."""
        for handle in self.pending:
            self.tasks.cancel(handle)
        self.pending.clear()
        self.caches.close()
