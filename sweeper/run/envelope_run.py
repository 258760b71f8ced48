"""The `envelope` certification strategy's driver loop (issue 28): `certify_envelope`.

Every finished model gets its selection and first pilot (`SELECT`, in parallel, one task per
model); then `envelope_planner.decide` names the one next step, a further pilot stage of a
model (`PILOT`, one task) or its certification (`FULL`: the stage CERTIFY's shards, run by the
sharded-stage engine, `envelope_stage.ENVELOPE_CERTIFY`), until every model is certified or
pruned. Each step's result is read back from storage before it is recorded in the `Ledger`
(pilot files, the compacted certification rows), and a step whose files exist computes nothing:
a run stopped at any point and started again rebuilds the same ledger, so `decide` (a pure
function of it) takes the same decisions and nothing is recomputed. At the end each model's
verdict and upper bounds are written (`results.envelope_records`).

Arrival order (each model's δ share, `envelope_bounds.model_delta`) is the order of the trials
given (the plan's): the same trials give the same order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.plan.spec import Resources
from sweeper.results.envelope_records import write_record
from sweeper.results.failures import FailureLog
from sweeper.results.storage import Experiment
from sweeper.run import shards
from sweeper.run.envelope_planner import (
    FULL,
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
from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import DECISION_RADII, CertifySpec

log = logging.getLogger(__name__)

RADII = DECISION_RADII  # the default decision grid: 0:2.25:0.25 (CertifySpec.radii)


def planner_settings(spec: CertifySpec) -> Settings:
    return Settings(spec.n0, spec.n, spec.alpha, spec.decision_radii, spec.delta, spec.pilot_stages)


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
        size = self.sizer(cfg.dataset, cfg.data_dir)
        return [i for s in shards.plan(cfg, "certify", self.spec, size) for i in s.indices]

    def pilots(self, asked: list[tuple[str, int, tuple, int]]) -> dict[str, pa.Table]:
        """Each (trial_id, stage, points, draws)'s pilot rows: read if on storage, else drawn
        by a task (all at once); a failed task is recorded and its model left out."""
        out, handles = {}, {}
        options = {"num_cpus": self.resources.cpu, "num_gpus": self.resources.gpu}
        for tid, stage, points, draws in asked:
            path = self.exp.pilot_path(tid, self.spec.cert_id, stage)
            if fileio.exists(path):
                out[tid] = _read(path)
                continue
            args = (self.exp, tid, self.spec, stage, points, draws, self.resources.cpu)
            handles[self.tasks.submit(pilot_task, options, *args)] = tid
        for handle, tid in handles.items():
            try:
                out[tid] = self.tasks.get(handle)
            except Exception as e:  # recorded, grouped per model and stage
                self.failures.add(tid, "certify", f"pilot: {e or type(e).__name__}")
            self.on_event(shards.Event("shard_done", tid, "certify pilot"))
        return out

    def full(self, cfg: TrialConfig, setting: EnvelopeFull) -> pa.Table | None:
        """The model's certification rows (computed by the engine unless compacted)."""
        runner = shards.StageRunner(
            self.exp,
            [shards.Work(ENVELOPE_CERTIFY, setting)],
            self.resources,
            self.on_event,
            self.sizer,
            self.failures,
            self.tasks,
        )
        runner.submit(cfg)
        runner.wait()
        runner.finish()
        if runner.failure_rows():
            return None
        count = len(shards.plan(cfg, "certify", self.spec, self.sizer(cfg.dataset, cfg.data_dir)))
        return _read(self.exp.compacted_path("certify", cfg.trial_id, self.spec.cert_id, count))


def _read(path: str) -> pa.Table:
    fs, p = fileio.filesystem(path)
    return pq.read_table(p, filesystem=fs)


def _pilot_rows(model: str, stage: int, table: pa.Table) -> list[PilotRow]:
    cols = [table.column(c).to_pylist() for c in ("idx", "cAHat", "draws", "votes")]
    return [PilotRow(model, stage, *row) for row in zip(*cols, strict=True)]


def arrive_all(d: Driver, ledger: Ledger, trials: list[TrialConfig]) -> None:
    """Every model's selection and first pilot (SELECT), then its arrival in the ledger."""
    s = ledger.settings
    points = {t.trial_id: tuple((i, -1) for i in d.points(t)) for t in trials}
    asked = [(t.trial_id, 1, points[t.trial_id], s.pilots[0]) for t in trials]
    tables = d.pilots(asked)
    for j, cfg in enumerate(trials):
        table = tables.get(cfg.trial_id)
        if table is None:
            continue
        sigma = d.spec.sigma if d.spec.sigma is not None else cfg.sigma
        idx, labels = table.column("idx").to_pylist(), table.column("label").to_pylist()
        ledger.arrive(cfg.trial_id, j + 1, float(sigma), idx, labels)
        ledger.record_pilot(cfg.trial_id, 1, _pilot_rows(cfg.trial_id, 1, table))


def run_step(d: Driver, ledger: Ledger, step: Step, cfg: TrialConfig) -> bool:
    """Run (or read back) one PILOT or FULL step and record it; False if it failed."""
    m = ledger.models[step.model]
    assert m.cAHat is not None
    chat = dict(zip(m.idx.tolist(), m.cAHat.tolist(), strict=True))
    if step.kind == FULL:
        drawn = set(step.idx)
        points = tuple(
            (i, lab, chat[i], i in drawn)
            for i, lab in zip(m.idx.tolist(), m.labels.tolist(), strict=True)
        )
        table = d.full(cfg, EnvelopeFull(d.spec, points))
        if table is None:
            return False
        counts = table.column("count").to_pylist()
        rows = [
            FullRow(step.model, i, SKIPPED if c is None else c)
            for i, c in zip(table.column("idx").to_pylist(), counts, strict=True)
        ]
        ledger.record_full(step.model, rows, step.from_level)
        return True
    asked = [(step.model, step.stage, tuple((i, chat[i]) for i in step.idx), step.draws)]
    table = d.pilots(asked).get(step.model)
    if table is None:
        return False
    ledger.record_pilot(step.model, step.stage, _pilot_rows(step.model, step.stage, table))
    return True


def record_verdicts(d: Driver, ledger: Ledger) -> None:
    """Each model's verdict, bounds and curves (`results.envelope_records`)."""
    s = ledger.settings
    for name, m in ledger.models.items():
        record = {
            "status": ledger.status(name),
            "strategy": "envelope",
            "delta": s.delta,
            "pilots": list(s.pilots),
            "radii": list(s.radii),
            "upper": None if m.upper_curve is None else m.upper_curve.tolist(),
            "plug_in": None if m.plug_in is None else m.plug_in.tolist(),
            "certified": None if m.certified is None else m.certified.tolist(),
            "points": len(m.idx),
            "pilot_draws": 0 if m.draws is None else int(m.draws.sum()),
        }
        write_record(d.exp, name, d.spec.cert_id, record)


def certify_envelope(
    exp: Experiment,
    trials: list[TrialConfig],
    spec: CertifySpec,
    resources: Resources,
    on_event: Callable[[shards.Event], None],
    *,
    tasks: shards.Tasks | None = None,
    sizer: Callable[[str, str | None], int] = shards.test_size,
    max_steps: int | None = None,
) -> tuple[Outcome, Ledger]:
    """Certify `trials` under the envelope strategy (module docstring); Ray must be
    initialized unless `tasks` says where tasks run. `max_steps`: stop after that many PILOT
    or FULL steps (a resumed run continues where it stopped)."""
    failures = FailureLog(exp)
    failures.start()
    d = Driver(exp, spec, resources, on_event, tasks or shards.RayTasks(), sizer, failures)
    ledger = Ledger(planner_settings(spec))
    arrive_all(d, ledger, trials)
    by_id = {t.trial_id: t for t in trials}
    done = 0
    outcome = Outcome()
    while (steps := decide(ledger)) and (max_steps is None or done < max_steps):
        step = steps[-1]  # every model has arrived with its selection: no SELECT is left
        log.info(
            "envelope: %s %s stage %d on %d points",
            step.kind,
            step.model,
            step.stage,
            len(step.idx),
        )
        if not run_step(d, ledger, step, by_id[step.model]):
            break
        done += 1
    record_verdicts(d, ledger)
    outcome.failures += [row for row in failures.rows() if row[1] != "train"]
    return outcome, ledger
