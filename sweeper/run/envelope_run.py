"""The `envelope` certification strategy's driver (issue 28): `EnvelopeCertifier` certifies
models as they arrive, `sweeper run grid`'s as trials finish and `sweeper certify`'s all at once
(`certify_envelope`); it offers the interface of the sharded-stage engine's `StageRunner`
(submit, poll, wait, finish, cancel), so the launcher drives either.

A model that arrives gets its selection and first pilot (SELECT, one task). Once no selection
is pending, `envelope_planner.decide` names the next steps of the most promising live models,
a further pilot stage (PILOT, one task) or a certification (FULL: the stage CERTIFY's shards,
run by the sharded-stage engine, `envelope_stage.ENVELOPE_CERTIFY`), while fewer than `slots`
steps run, until every model is certified or pruned. Each step's result is read back from
storage before it is recorded in the `Ledger`, and a step whose files exist computes nothing: a
run stopped at any point and started again reads back what was done. Pruning only grows as the
envelope grows and every counted certificate is an exact CERTIFY whatever the order, so the
guarantee does not depend on when models arrive or steps end (`envelope_planner`).

Each model's arrival number (its δ share, `envelope_bounds.model_delta`) is kept on storage
(`Arrivals`): a model keeps its number across runs, a new one takes the next. The bounds are
recomputed from the recorded counts at the model's number, so numbers need only be distinct:
a lost or damaged arrivals file is renumbered, never a soundness matter. At the end each
model's verdict and upper bounds are written (`results.envelope_records`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.plan.spec import Resources
from sweeper.results.envelope_records import write_record
from sweeper.results.failures import FailureLog
from sweeper.results.storage import Experiment
from sweeper.run import shards
from sweeper.run.envelope_planner import (
    FULL,
    PILOT,
    SELECT,
    SKIPPED,
    FullRow,
    Ledger,
    PilotRow,
    Settings,
    Step,
    decide,
)
from sweeper.run.envelope_stage import ENVELOPE_CERTIFY, EnvelopeFull, pilot_task
from sweeper.run.outcome import Outcome
from sweeper.run.retries import Retries, classify, task_budget
from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import DECISION_RADII, CertifySpec

log = logging.getLogger(__name__)

RADII = DECISION_RADII  # the default decision grid: 0:2.25:0.25 (CertifySpec.radii)
FAILED = "failed"  # `decide`'s busy kind of a model whose step failed: left out of this run


def planner_settings(spec: CertifySpec) -> Settings:
    return Settings(spec.n0, spec.n, spec.alpha, spec.decision_radii, spec.delta, spec.pilot_stages)


class Arrivals:
    """Each model's arrival number (1, 2, ...), kept in `Experiment.arrivals_json`."""

    def __init__(self, exp: Experiment, cert_id: str):
        self.path = exp.arrivals_json(cert_id)
        self.number: dict[str, int] = {}
        if fileio.exists(self.path):
            try:
                order = json.loads(fileio.read_bytes(self.path, limit=50_000_000))
                if not (isinstance(order, list) and all(isinstance(t, str) for t in order)):
                    raise ValueError("not a list of trial ids")
                self.number = {t: j + 1 for j, t in enumerate(dict.fromkeys(order))}
            except (OSError, ValueError) as e:
                log.warning("envelope: renumbering the models' arrivals (%s: %s)", self.path, e)

    def of(self, trial_id: str) -> int:
        """The model's number, given (and written) at its first arrival."""
        if trial_id not in self.number:
            self.number[trial_id] = len(self.number) + 1
            fileio.write_bytes_atomic(self.path, json.dumps(list(self.number)).encode())
        return self.number[trial_id]


@dataclass
class Driver:
    exp: Experiment
    spec: CertifySpec
    resources: Resources
    on_event: Callable[[shards.Event], None]
    tasks: shards.Tasks
    sizer: Callable[[str, str | None], int]
    failures: FailureLog

    def points(self, cfg: TrialConfig) -> list[int]:
        """The model's test points: the stage CERTIFY's (every skip-th, at most max)."""
        return [i for s in self.shard_plan(cfg) for i in s.indices]

    def shard_plan(self, cfg: TrialConfig) -> list:
        return shards.plan(cfg, "certify", self.spec, self.sizer(cfg.dataset, cfg.data_dir))

    def start_pilot(self, tid: str, stage: int, points: tuple, draws: int) -> pa.Table | Any:
        """The pilot rows of (model, stage) if on storage, else the handle of the task that
        draws them on `points` ((idx, ĉ), ĉ −1 at stage 1)."""
        path = self.exp.pilot_path(tid, self.spec.cert_id, stage)
        if fileio.exists(path):
            return _read(path)
        options = {"num_cpus": self.resources.cpu, "num_gpus": self.resources.gpu}
        args = (self.exp, tid, self.spec, stage, points, draws, self.resources.cpu)
        return self.tasks.submit(pilot_task, options, *args)

    def start_full(
        self, cfg: TrialConfig, setting: EnvelopeFull, retries: Retries
    ) -> shards.StageRunner:
        """The model's certification shards, submitted to the engine (none if compacted)."""
        runner = shards.StageRunner(
            self.exp,
            [shards.Work(ENVELOPE_CERTIFY, setting)],
            self.resources,
            self.on_event,
            self.sizer,
            self.failures,
            self.tasks,
            retries,
        )
        runner.submit(cfg)
        return runner

    def full_rows(self, cfg: TrialConfig) -> pa.Table | None:
        """The model's compacted certification rows (None: its FULL step failed)."""
        path = self.exp.compacted_path(
            "certify", cfg.trial_id, self.spec.cert_id, len(self.shard_plan(cfg))
        )
        return _read(path) if fileio.exists(path) else None


def _read(path: str) -> pa.Table:
    fs, p = fileio.filesystem(path)
    return pq.read_table(p, filesystem=fs)


def _pilot_rows(model: str, stage: int, table: pa.Table) -> list[PilotRow]:
    cols = [table.column(c).to_pylist() for c in ("idx", "cAHat", "draws", "votes")]
    return [PilotRow(model, stage, *row) for row in zip(*cols, strict=True)]


def _full_rows(model: str, table: pa.Table) -> list[FullRow]:
    counts = table.column("count").to_pylist()
    idx = table.column("idx").to_pylist()
    return [
        FullRow(model, i, SKIPPED if c is None else c) for i, c in zip(idx, counts, strict=True)
    ]


class EnvelopeCertifier:
    """The envelope strategy over models submitted one by one (module docstring); a failed
    step is recorded (grouped per model, as the engine does) and its model left out of this
    run. Tasks run on Ray unless `tasks` says where; `slots`: how many PILOT/FULL steps run at
    once; `max_steps`: start no more than that many (a resumed run continues). A task lost
    with its node, or whose worker crashed, runs again within `retries` (the engine's
    budgets, `sweeper.run.retries`; Ray itself retries nothing)."""

    def __init__(
        self,
        exp: Experiment,
        spec: CertifySpec,
        resources: Resources,
        on_event: Callable[[shards.Event], None],
        *,
        tasks: shards.Tasks | None = None,
        sizer: Callable[[str, str | None], int] = shards.test_size,
        failure_log: FailureLog | None = None,
        slots: int = 1,
        max_steps: int | None = None,
    ):
        if failure_log is None:
            failure_log = FailureLog(exp)
            failure_log.start()
        self.failure_log = failure_log
        self.retries = Retries(task_budget(), failure_log)  # `run_budgets` may replace it
        tasks = tasks or shards.RayTasks(max_retries=0)
        self.d = Driver(exp, spec, resources, on_event, tasks, sizer, failure_log)
        self.ledger = Ledger(planner_settings(spec))
        self.arrivals = Arrivals(exp, spec.cert_id)
        self.configs: dict[str, TrialConfig] = {}
        self.busy: dict[str, str] = {}  # model -> the kind of its step running (or FAILED)
        self.pilots: dict[Any, tuple[Step, tuple]] = {}  # SELECT/PILOT handles: step, points
        self.fulls: dict[str, tuple[Step, shards.StageRunner]] = {}
        self.slots, self.max_steps, self.started = max(1, slots), max_steps, 0

    # -------------------------------------------------------------------- the interface
    def submit(self, cfg: TrialConfig) -> int:
        """A finished model arrives: its selection and first pilot start (read back if on
        storage); decisions wait until no selection is pending (`poll`)."""
        if cfg.trial_id in self.configs:
            return 0
        self.configs[cfg.trial_id] = cfg
        self.arrivals.of(cfg.trial_id)
        points = tuple((i, -1) for i in self.d.points(cfg))
        self._start(Step(SELECT, cfg.trial_id, 1, tuple(i for i, _ in points), 0), points)
        return 1

    def poll(self, timeout: float = 0) -> None:
        """Record every step that has ended (waiting at most `timeout` seconds for one), then
        start what `decide` names."""
        if self.pilots:
            for handle in self.d.tasks.wait(list(self.pilots), timeout):
                step, points = self.pilots.pop(handle)
                try:
                    table = self.d.tasks.get(handle)
                except Exception as e:  # run again within its budgets, else recorded
                    if not self._again(step, points, e):
                        self._failed(step, f"pilot: {e or type(e).__name__}")
                    continue
                self._record_pilot(step, table)
        for name, (_, runner) in list(self.fulls.items()):
            runner.poll(0 if self.pilots else timeout / len(self.fulls))
            if not runner.pending:
                self._end_full(name)
        self._advance()

    def wait(self, poll_every: float = 0.5) -> None:
        """Run until every model is certified, pruned or failed (or `max_steps` started)."""
        self._advance()
        while self.pilots or self.fulls:
            self.poll(poll_every)

    def finish(self) -> None:
        """Write each model's verdict, bounds and curves (`results.envelope_records`)."""
        record_verdicts(self.d, self.ledger)

    def cancel(self) -> None:
        for handle in self.pilots:
            self.d.tasks.cancel(handle)
        for _, runner in self.fulls.values():
            runner.cancel()
        self.pilots.clear()
        self.fulls.clear()

    def failure_rows(self) -> list[tuple[str, str, str]]:
        return [row for row in self.failure_log.rows() if row[1] != "train"]

    # -------------------------------------------------------------------- steps
    def _advance(self) -> None:
        """Start the steps `decide` names until it names none (a step read back from storage
        ends at once and may let another start)."""
        if any(kind == SELECT for kind in self.busy.values()):
            return  # a model is arriving: decide once it has its bounds
        while self.max_steps is None or self.started < self.max_steps:
            steps = [s for s in decide(self.ledger, self.busy, self.slots) if s.kind != SELECT]
            if not steps:
                return
            for step in steps[: None if self.max_steps is None else self.max_steps - self.started]:
                self.started += 1
                self._start(step)

    def _start(self, step: Step, points: tuple | None = None) -> None:
        self.busy[step.model] = step.kind
        if step.kind == FULL:
            setting = EnvelopeFull(self.d.spec, self._full_points(step))
            runner = self.d.start_full(self.configs[step.model], setting, self.retries)
            self.fulls[step.model] = (step, runner)
            if not self.fulls[step.model][1].pending:
                self._end_full(step.model)
            return
        s = self.ledger.settings
        if step.kind == PILOT:
            chat = self._chat(step.model)
            points, draws = tuple((i, chat[i]) for i in step.idx), step.draws
        else:
            assert points is not None  # `submit` gives a SELECT's points
            draws = s.pilots[0]
        started = self.d.start_pilot(step.model, step.stage, points, draws)
        if isinstance(started, pa.Table):
            self._record_pilot(step, started)
        else:
            self.pilots[started] = (step, points)

    def _chat(self, model: str) -> dict[int, int]:
        m = self.ledger.models[model]
        assert m.cAHat is not None
        return dict(zip(m.idx.tolist(), m.cAHat.tolist(), strict=True))

    def _full_points(self, step: Step) -> tuple[tuple[int, int, int, bool], ...]:
        """(idx, label, ĉ, drawn) of every point of the model: drawn if the step asks it."""
        m, chat, drawn = self.ledger.models[step.model], self._chat(step.model), set(step.idx)
        return tuple(
            (i, lab, chat[i], i in drawn)
            for i, lab in zip(m.idx.tolist(), m.labels.tolist(), strict=True)
        )

    def _record_pilot(self, step: Step, table: pa.Table) -> None:
        self.busy.pop(step.model, None)
        if step.kind == SELECT:
            cfg = self.configs[step.model]
            sigma = self.d.spec.sigma if self.d.spec.sigma is not None else cfg.sigma
            idx, labels = table.column("idx").to_pylist(), table.column("label").to_pylist()
            number = self.arrivals.of(step.model)
            self.ledger.arrive(step.model, number, float(sigma), idx, labels)
        rows = _pilot_rows(step.model, step.stage, table)
        self.ledger.record_pilot(step.model, step.stage, rows)
        self.d.on_event(shards.Event("shard_done", step.model, "certify pilot"))

    def _end_full(self, model: str) -> None:
        step, runner = self.fulls.pop(model)
        runner.finish()
        table = self.d.full_rows(self.configs[model])
        if table is None:  # the engine recorded why
            self.busy[model] = FAILED
            return
        self.busy.pop(model, None)
        self.ledger.record_full(model, _full_rows(model, table), step.from_level)

    def _again(self, step: Step, points: tuple | None, error: Exception) -> bool:
        """Whether the pilot task that failed with `error` was submitted again (its node lost,
        or its worker crashed, within the budgets; an exception of its code is not retried)."""
        key = (step.model, "certify", self.d.spec.cert_id, f"pilot {step.stage}")
        if not self.retries.charge(key, step.model, "certify", classify(error)):
            return False
        log.warning(
            "trial %s: pilot %d failed (%s): submitted again", step.model, step.stage, error
        )
        self._start(step, points)
        return True

    def _failed(self, step: Step, text: str) -> None:
        self.failure_log.add(step.model, "certify", text)
        self.busy[step.model] = FAILED


def record_verdicts(d: Driver, ledger: Ledger) -> None:
    """Each model's verdict, bounds and curves (`results.envelope_records`)."""
    s = ledger.settings
    for name, m in ledger.models.items():
        exact = s.radii[m.exact_from] if m.exact_from < len(s.radii) else None
        record = {
            "status": ledger.status(name),
            "strategy": "envelope",
            "delta": s.delta,
            "pilots": list(s.pilots),
            "radii": list(s.radii),
            "upper": None if m.upper_curve is None else m.upper_curve.tolist(),
            "plug_in": None if m.plug_in is None else m.plug_in.tolist(),
            "certified": None if m.certified is None else m.certified.tolist(),
            # below this radius some points that could not reach it were not certified: the
            # model's accuracy there is a lower bound of what `full` would report
            "exact_from": exact if m.certified is not None else None,
            "points": len(m.idx),
            "pilot_draws": 0 if m.draws is None else int(m.draws.sum()),
        }
        write_record(d.exp, name, d.spec.cert_id, record)


def cluster_slots(resources: Resources) -> int:
    """How many steps' tasks the Ray cluster (initialized) holds at once at `resources` each."""
    import ray

    total = ray.cluster_resources()
    if resources.gpu:
        return max(1, int(total.get("GPU", 0) / resources.gpu))
    return max(1, int(total.get("CPU", 1) / max(resources.cpu, 1e-6)))


def certify_envelope(
    exp: Experiment,
    trials: list[TrialConfig],
    spec: CertifySpec,
    resources: Resources,
    on_event: Callable[[shards.Event], None],
    *,
    tasks: shards.Tasks | None = None,
    sizer: Callable[[str, str | None], int] = shards.test_size,
    slots: int = 1,
    max_steps: int | None = None,
) -> tuple[Outcome, Ledger]:
    """Certify `trials` (finished) under the envelope strategy, all arriving at once in the
    order given; Ray must be initialized unless `tasks` says where tasks run."""
    certifier = EnvelopeCertifier(
        exp, spec, resources, on_event, tasks=tasks, sizer=sizer, slots=slots, max_steps=max_steps
    )
    outcome = Outcome()
    for cfg in trials:
        certifier.submit(cfg)
    try:
        certifier.wait()
    except KeyboardInterrupt:
        certifier.cancel()
        outcome.interrupted = True
    certifier.finish()
    outcome.failures += certifier.failure_rows()
    return outcome, certifier.ledger
