"""The `envelope` certification strategy's driver (issue 28): `EnvelopeCertifier` certifies
models as they arrive, `sweeper run grid`'s as trials finish and `sweeper certify`'s all at
once; it offers the interface of the sharded-stage engine's `StageRunner` (submit, poll, wait,
finish, cancel), so the launcher drives either.

A model that arrives gets its selection and first pilot (SELECT, one task). Once no selection
is pending, `envelope_planner.decide` names the next steps of the most promising live models,
a further pilot stage or the probe (PILOT, PROBE: one task each), a certification (FULL: the
stage CERTIFY's shards, run by the sharded-stage engine, `envelope_stage.ENVELOPE_CERTIFY`) or,
once none is left, a tie completion (COMPLETE: one task, `envelope_completion`), while fewer
than `slots` steps run, until every model is certified or pruned. A step whose files exist computes
nothing: a run stopped at any point and started again reads back what was done, once checked
(`envelope_storage`): each point's label is the data set's (`envelope_stage.labels_task`;
no file on storage gives one) and every decision is recomputed from the counts, never read
from a record; rows refused are named in a warning and drawn again. Pruning only grows as the
envelope grows and every counted certificate is an exact CERTIFY whatever the order, so the
guarantee does not depend on when models arrive or steps end (`envelope_planner`).

Each model's arrival number (its δ share, `envelope_bounds.model_delta`) is kept on storage
(`envelope_storage.Arrivals`): a model keeps its number across runs, a new one takes the
next. The bounds are recomputed from the recorded counts at the model's number, so numbers
need only be distinct: a lost or damaged arrivals file is renumbered, never a soundness
matter. At the end each model's verdict and bounds are written for people to read
(`results.envelope_records`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import pyarrow as pa

from sweeper.plan.spec import Resources
from sweeper.results.failures import FailureLog
from sweeper.results.storage import Experiment
from sweeper.run import shards
from sweeper.run.envelope_completion import Completions
from sweeper.run.envelope_driver import Driver
from sweeper.run.envelope_ledger import SKIPPED, Ledger, Settings
from sweeper.run.envelope_planner import COMPLETE, FULL, PROBE, SELECT, Step, decide
from sweeper.run.envelope_stage import EnvelopeFull, labels_task, pilot_task
from sweeper.run.envelope_storage import (
    Arrivals,
    checked,
    full_rows,
    pilot_refusal,
    pilot_rows,
    probe_rows,
    record_verdicts,
)
from sweeper.run.retries import Retries, classify, task_budget
from trainables.kernel import fileio
from trainables.kernel.catalog import NUM_CLASSES
from trainables.kernel.cert_ids import DECISION_RADII
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import CertifySpec

log = logging.getLogger(__name__)

RADII = DECISION_RADII  # the default decision grid: 0:2.25:0.25 (CertifySpec.radii)
FAILED = "failed"  # `decide`'s busy kind of a model whose step failed: left out of this run


def planner_settings(spec: CertifySpec, declared: int = 0) -> Settings:
    """The planner's settings of `spec`; `declared`: the models the run knows it will
    certify (δ split over them, `envelope_bounds.model_delta`; 0: by arrival only)."""
    return Settings(
        spec.n0,
        spec.n,
        spec.alpha,
        spec.decision_radii,
        spec.delta,
        spec.pilot_stages,
        declared,
    )


class EnvelopeCertifier:
    """The envelope strategy over models submitted one by one (module docstring); a failed
    step is recorded (grouped per model, as the engine does) and its model left out of this
    run. Tasks run on Ray unless `tasks` says where; `slots`: how many PILOT/FULL steps run at
    once; `max_steps`: start no more than that many (a resumed run continues). A task lost
    with its node, or whose worker crashed, runs again within `retries` (the engine's
    budgets, `sweeper.run.retries`; Ray itself retries nothing). `declared`: how many models
    the run knows will come (its plan's trials), over which δ is split evenly."""

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
        declared: int = 0,
    ):
        if failure_log is None:
            failure_log = FailureLog(exp)
            failure_log.start()
        self.failure_log = failure_log
        self.retries = Retries(task_budget(), failure_log)  # `run_budgets` may replace it
        tasks = tasks or shards.RayTasks(max_retries=0)
        self.d = Driver(exp, spec, resources, on_event, tasks, sizer, failure_log)
        self.ledger = Ledger(planner_settings(spec, declared))
        self.arrivals = Arrivals(exp, spec.cert_id)
        self.configs: dict[str, TrialConfig] = {}
        self.busy: dict[str, str] = {}  # model -> the kind of its step running (or FAILED)
        self.pilots: dict[Any, tuple[Step, tuple | None]] = {}  # SELECT/PILOT handles: step, points
        # the data set's labels (dataset, data_dir, points) -> {idx: label}, as a task read
        # them (`labels_task`) or a selection task's rows carry them; never from storage
        self.labels: dict[tuple, dict[int, int]] = {}
        self.reading: dict[Any, tuple] = {}  # a labels task's handle -> its key
        self.waiting: dict[tuple, list[tuple[Step, tuple | None]]] = {}  # key -> selections waiting
        self.fulls: dict[str, tuple[Step, shards.StageRunner]] = {}
        self.completions = Completions(self.d)  # COMPLETE steps running
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
        if self.pilots or self.reading or self.completions.running:
            for handle in self.d.tasks.wait(
                [*self.pilots, *self.reading, *self.completions.running], timeout
            ):
                self._ended(handle)
        for name, (_, runner) in list(self.fulls.items()):
            runner.poll(0 if self.pilots or self.reading else timeout / len(self.fulls))
            if not runner.pending:
                self._end_full(name)
        self._advance()

    @property
    def in_flight(self) -> bool:
        """Whether a step is still to end (polling can bring news)."""
        return bool(self.pilots or self.reading or self.fulls or self.completions.running)

    def wait(self, poll_every: float = 0.5) -> None:
        """Run until every model is certified, pruned or failed (or `max_steps` started)."""
        self._advance()
        while self.in_flight:
            self.poll(poll_every)

    def finish(self) -> None:
        """Write each model's verdict, bounds and curves (`results.envelope_records`)."""
        record_verdicts(self.d.exp, self.d.spec.cert_id, self.ledger)
        self.completions.refresh()

    def cancel(self) -> None:
        for handle in [*self.pilots, *self.reading, *self.completions.running]:
            self.d.tasks.cancel(handle)
        for _, runner in self.fulls.values():
            runner.cancel()
        self.pilots.clear()
        self.reading.clear()
        self.completions.running.clear()
        self.waiting.clear()
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
            setting = EnvelopeFull(self.d.spec, self._full_points(step), self._probed(step.model))
            runner = self.d.start_full(self.configs[step.model], setting, self.retries)
            self.fulls[step.model] = (step, runner)
            if not self.fulls[step.model][1].pending:
                self._end_full(step.model)
            return
        if step.kind == COMPLETE:
            return self._complete(step)
        assert points is not None or step.kind != SELECT  # `submit` gives a SELECT's points
        self._pilot(step, points)

    def _pilot(self, step: Step, points: tuple | None) -> None:
        """A SELECT, PILOT or PROBE step (the probe: the pilot stage after the last, of CERTIFY's
        estimation draws): its rows read back if on storage and they pass the checks (a
        selection's once its labels are read), else its task (over a file refused)."""
        chat = self._chat(step.model) if step.kind != SELECT else None
        if chat is not None:
            points = tuple((i, chat[i]) for i in step.idx)
        draws = step.draws if step.kind != SELECT else self.ledger.settings.pilots[0]
        piloted = step.kind != SELECT  # else the labels are known once a task has read them
        labels = self._model_labels(step.model) if piloted else self.labels.get(self._key(step))
        d = self.d
        stored = fileio.exists(d.exp.pilot_path(step.model, d.spec.cert_id, step.stage))
        if stored and labels is None:
            return self._read_labels(step, points)
        table = self._stored(step, draws, labels, chat) if stored else None
        if table is not None:
            return self._record_pilot(step, table, labels)
        args = (d.exp, step.model, d.spec, step.stage, points, draws, d.resources.cpu, stored)
        self.pilots[d.submit(pilot_task, *args)] = (step, points)

    def _stored(self, step: Step, draws: int, labels: dict | None, chat: dict | None) -> Any:
        """The step's pilot rows on storage if they pass `pilot_refusal` (with the data set's
        `labels`), else None (refused, named in a warning)."""
        path = self.d.exp.pilot_path(step.model, self.d.spec.cert_id, step.stage)
        classes = NUM_CLASSES[self.configs[step.model].dataset]
        why = partial(pilot_refusal, stage=step.stage, points=step.idx, draws=draws)
        why = partial(why, labels=labels, chat=chat, classes=classes)
        signed = ("pilot", step.model, self.d.spec.cert_id, {"stage": step.stage})
        return checked(path, why, "again", signed)[0]

    def _key(self, step: Step) -> tuple:
        cfg = self.configs[step.model]
        return (cfg.dataset, cfg.data_dir, step.idx)

    def _read_labels(self, step: Step, points: tuple | None) -> None:
        """The selection `step` waits for the data set's labels at its points (one task per
        data set and points, however many models wait)."""
        key = self._key(step)
        if key not in self.waiting:
            self.reading[self.d.submit(labels_task, *key)] = key
        self.waiting.setdefault(key, []).append((step, points))

    def _ended(self, handle: Any) -> None:
        """Record the task `handle`, ended (failed: run again within its budgets, else
        recorded; labels read: the selections waiting for them go on)."""
        if handle in self.completions.running:
            return self._end_complete(handle)
        key = self.reading.pop(handle, None)
        steps = self.waiting.pop(key, []) if key is not None else [self.pilots.pop(handle)]
        try:
            result = self.d.tasks.get(handle)
        except Exception as e:
            for step, points in steps:
                if not self._again(step, points, e):
                    self._failed(step, f"pilot: {e or type(e).__name__}")
            return
        if key is None:
            return self._record_pilot(steps[0][0], result, None)
        self.labels[key] = dict(zip(key[2], result, strict=True))
        for step, points in steps:
            self._start(step, points)

    def _chat(self, model: str) -> dict[int, int]:
        return self.ledger.models[model].classes()

    def _model_labels(self, model: str) -> dict[int, int]:
        return self.ledger.models[model].label_of()

    def _full_points(self, step: Step) -> tuple[tuple[int, int, bool], ...]:
        """(idx, ĉ, drawn) of every point of the model: drawn if the step asks it or the probe
        drew it (its count is known: it costs nothing to report)."""
        chat, drawn = self._chat(step.model), {*step.idx, *self._probed(step.model)}
        return tuple((i, c, i in drawn) for i, c in chat.items())

    def _probed(self, model: str) -> tuple[int, ...]:
        m = self.ledger.models[model]
        return tuple(m.known(m.probe))

    def _record_pilot(self, step: Step, table: pa.Table, labels: dict | None) -> None:
        """Record pilot rows: a task's (`labels` None: at a selection, the data set's labels
        as the task loaded them) or read back and checked against `labels`."""
        self.busy.pop(step.model, None)
        if step.kind == SELECT:
            cfg = self.configs[step.model]
            sigma = self.d.spec.sigma if self.d.spec.sigma is not None else cfg.sigma
            if labels is None:
                found = [table.column(c).to_pylist() for c in ("idx", "label")]
                labels = self.labels.setdefault(self._key(step), dict(zip(*found, strict=True)))
            number = self.arrivals.of(step.model)
            self.ledger.arrive(
                step.model, number, float(sigma), step.idx, [labels[i] for i in step.idx]
            )
        if step.kind == PROBE:
            self.ledger.record_probe(step.model, probe_rows(step.model, table))
        else:
            self.ledger.record_pilot(
                step.model, step.stage, pilot_rows(step.model, step.stage, table)
            )
        self.d.on_event(shards.Event("shard_done", step.model, "certify pilot"))

    def _end_full(self, model: str) -> None:
        step, runner = self.fulls.pop(model)
        runner.finish()
        m = self.ledger.models[model]
        table, why = self.d.full_rows(self.configs[model], m.label_of(), m.known(m.probe))
        if table is None:  # the engine recorded why, or the rows were refused
            if why:
                self.failure_log.add(model, "certify", why)
            self.busy[model] = FAILED
            return
        self.busy.pop(model, None)
        # a completion's counts (a run resumed after one) are recorded where it completes
        own = {*step.idx, *self._probed(model)}
        rows = [r if r.idx in own else replace(r, nA=SKIPPED) for r in full_rows(model, table)]
        self.ledger.record_full(model, rows, step.from_level)

    def _complete(self, step: Step) -> None:
        """A COMPLETE step: recorded at once if its counts are on storage, else its task."""
        cfg, m = self.configs[step.model], self.ledger.models[step.model]
        if (table := self.completions.start(step, cfg, m)) is not None:
            self._record_complete(step, table)

    def _end_complete(self, handle: Any) -> None:
        step = self.completions.running.pop(handle)
        try:
            self.d.tasks.get(handle)
        except Exception as e:
            if not self._again(step, None, e):
                self._failed(step, f"completion: {e or type(e).__name__}")
            return
        table = self.completions.rows(self.configs[step.model], self.ledger.models[step.model])
        if table is None:
            return self._failed(step, "completion: its rows were refused (see the warning)")
        self._record_complete(step, table)

    def _record_complete(self, step: Step, table: pa.Table) -> None:
        self.busy.pop(step.model, None)
        rows = self.completions.counted(step, self.configs[step.model], table)
        self.ledger.record_complete(step.model, rows)
        self.d.on_event(shards.Event("shard_done", step.model, "certify completion"))

    def _again(self, step: Step, points: tuple | None, error: Exception) -> bool:
        """Whether the task of `step` that failed with `error` was submitted again (its node
        lost, or its worker crashed, within the budgets; an exception of its code is not)."""
        part = f"{'completion' if step.kind == COMPLETE else 'pilot'} {step.stage}"
        key = (step.model, "certify", self.d.spec.cert_id, part)
        if not self.retries.charge(key, step.model, "certify", classify(error)):
            return False
        log.warning("trial %s: %s failed (%s): submitted again", step.model, part, error)
        self._start(step, points)
        return True

    def _failed(self, step: Step, text: str) -> None:
        self.failure_log.add(step.model, "certify", text)
        self.busy[step.model] = FAILED


Certifier = shards.StageRunner | EnvelopeCertifier  # what certifies models as they arrive
