"""The `envelope` strategy's tie completion (`envelope_planner`, step 5), run on a worker.

A model's full step certifies the points that can reach the first radius it could win at;
the others are rows not estimated. When the model later ties the envelope at a radius where
the tie rule could go its way, the tie is broken on its clean accuracy, which those rows
leave short. `complete_task` then draws them: CERTIFY's estimation draws ("estimate", n per
point: the very draws `full` takes there), kept as the pilot stage after the probe's
(`pilot_task`, read back instead when that file is there and sound), and folds their counts
into the model's compacted certification rows, written again atomically with every other
row as it was. Under a key the file is signed again as the compaction's ("compact": its
inputs the rows it completed, the completion's draws and the checkpoint both were made
from). The driver reads the file back and checks it as it checks a full step's rows
(`envelope_storage.full_refusal`, with every count it already holds), so a completion
changes no count the planner has.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pyarrow as pa

from sweeper.results.attested_rows import (
    placed_statement,
    points_digest,
    rows_digest,
    signed,
    unsigned_metadata,
)
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.run.cache_refresh import refresh
from sweeper.run.envelope_driver import Driver
from sweeper.run.envelope_ledger import FullRow, Model
from sweeper.run.envelope_planner import Step
from sweeper.run.envelope_stage import ENVELOPE_CERTIFY, pilot_task, row_of
from sweeper.run.envelope_storage import checked, full_rows, probe_refusal, read_table
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import CertifySpec

CERTIFIED = ("predict", "count", "p_lower", "radius", "correct", "time_s")  # what it fills in


def completion_stage(spec: CertifySpec) -> int:
    """The pilot stage a completion's draws are kept at: the one after the probe's."""
    return len(spec.pilot_stages) + 2


def complete_task(
    exp: Experiment,
    trial_id: str,
    spec: CertifySpec,
    points: tuple[tuple[int, int], ...],
    count: int,
    cpus: float,
) -> int:
    """Complete one model's certification on `points` ((idx, ĉ): rows its full step left
    not estimated) in its compacted file of `count` shards (module docstring); returns the
    rows completed (0: they were). Raises when the compacted file is not the model's."""
    path = exp.compacted_path(ENVELOPE_CERTIFY.name, trial_id, spec.cert_id, count)
    table = read_table(path)
    statement = _attested(table, path, trial_id, spec.cert_id)
    idx = table.column("idx").to_pylist()
    label = dict(zip(idx, table.column("label").to_pylist(), strict=True))
    if missing := [i for i, _ in points if i not in label]:
        raise RuntimeError(f"cannot complete {path}: it has no row of points {missing[:5]}")
    counts = dict(zip(idx, table.column("count").to_pylist(), strict=True))
    todo = {i: c for i, c in points if counts[i] is None}
    if not todo:
        return 0
    start = time.perf_counter()
    draws = _draws(exp, trial_id, spec, points, label, cpus)
    per_point = (time.perf_counter() - start) / max(1, len(points))
    votes = dict(zip(*(draws.column(c).to_pylist() for c in ("idx", "votes")), strict=True))
    done = _with_counts(table, {i: (c, votes[i]) for i, c in todo.items()}, spec, per_point)
    done = done.replace_schema_metadata(unsigned_metadata(table.schema.metadata))
    if statement is not None:
        done = _signed(done, statement, table, draws, [i for i, _ in points])
    write_table(done, path)
    return len(todo)


def _attested(table: pa.Table, path: str, trial_id: str, cert_id: str):
    """The compacted file's statement, verified with this worker's key (None without a key
    or when the file carries none); RuntimeError naming the file when it fails."""
    from trainables.kernel.attestation import AttestationError, load_signing_key

    key = load_signing_key()
    if key is None:
        return None
    try:
        return placed_statement(table, key.public, "compact", (trial_id, cert_id))
    except AttestationError as e:
        raise RuntimeError(f"cannot complete {path}: {e}") from None


def _draws(exp, trial_id: str, spec: CertifySpec, points, label: dict, cpus: float) -> pa.Table:
    """The completion's pilot rows: the stored file when it holds n draws of each point with
    its label and ĉ (attested under a key), else drawn now (over a file refused)."""
    from trainables.kernel import fileio

    stage = completion_stage(spec)
    stored = exp.pilot_path(trial_id, spec.cert_id, stage)
    there = fileio.exists(stored)
    if there:
        want = {i: (label[i], c) for i, c in points}
        why = partial(probe_refusal, points=want, n=spec.n)
        signed_as = ("pilot", trial_id, spec.cert_id, {"stage": stage})
        table = checked(stored, why, "drawn again", signed_as)[0]
        if table is not None:
            return table
    return pilot_task(exp, trial_id, spec, stage, points, spec.n, cpus, there)


def _with_counts(table: pa.Table, counts: dict, spec: CertifySpec, per_point: float) -> pa.Table:
    """`table` with CERTIFY's row at each point of `counts` (idx -> (ĉ, nA))."""
    cols = {name: table.column(name).to_pylist() for name in ("idx", "label", "sigma_cert")}
    at = {i: k for k, i in enumerate(cols["idx"])}
    filled = {name: table.column(name).to_pylist() for name in CERTIFIED}
    for i, (c, nA) in counts.items():
        k = at[i]
        settings = spec.resolved(cols["sigma_cert"][k])
        row = row_of((i, cols["label"][k], c, True), nA, settings, per_point)
        for name in CERTIFIED:
            filled[name][k] = row[name]
    for name, values in filled.items():
        j = table.schema.get_field_index(name)
        table = table.set_column(
            j, table.schema.field(j), pa.array(values, table.schema.field(j).type)
        )
    return table


def _signed(done: pa.Table, statement, before: pa.Table, draws: pa.Table, idx: list[int]):
    """`done` signed as its compaction's: made from the rows it completed and the draws that
    completed them, of the checkpoint the compacted rows were made from."""
    from trainables.kernel.attestation import load_signing_key

    key = load_signing_key()
    assert key is not None  # a statement was verified with it
    inputs = {
        "compacted": rows_digest(before),
        "completion": rows_digest(draws),
        "checkpoint.pt": str(statement.inputs.get("checkpoint.pt")),
    }
    made = {**statement.settings, "completed": points_digest(idx)}
    return signed(done, key, "compact", inputs, made)


class Completions:
    """The driver's side of the COMPLETE steps (`envelope_run.EnvelopeCertifier`): each one's
    task started unless its counts are on storage already (a resumed run), and the model's
    compacted rows read back, checked."""

    def __init__(self, driver: Driver):
        self.d = driver
        self.running: dict[Any, Step] = {}  # task handle -> its step
        self.rewritten: set[str] = set()  # compacted files a completion counted from

    def start(self, step: Step, cfg: TrialConfig, m: Model) -> pa.Table | None:
        """The model's rows if they hold the step's counts already, else None (its task
        submitted: `running`)."""
        table = self.rows(cfg, m)
        if table is not None and None not in _counts_at(table, step.idx):
            return table
        chat = m.classes()
        points = tuple((i, chat[i]) for i in step.idx)
        args = (self.d.exp, step.model, self.d.spec, points, len(self.d.shard_plan(cfg)))
        self.running[self.d.submit(complete_task, *args, self.d.resources.cpu)] = step
        return None

    def counted(self, step: Step, cfg: TrialConfig, table: pa.Table) -> list[FullRow]:
        """The completion's counts in the model's rows `table` (checked: `rows`)."""
        self.rewritten.add(self.d.compacted(cfg))
        wanted = set(step.idx)
        return [r for r in full_rows(step.model, table) if r.idx in wanted]

    def refresh(self) -> None:
        """The stage's cache, with the files completions wrote again read again (a key
        holder's read takes a covered file of the same size as the cache holds it)."""
        if self.rewritten:
            refresh(self.d.exp, ENVELOPE_CERTIFY, frozenset(self.rewritten))

    def rows(self, cfg: TrialConfig, m: Model) -> pa.Table | None:
        """The model's compacted rows if they pass `full_refusal` with every count the ledger
        holds (a completion changes none), else None (named in a warning)."""
        return self.d.full_rows(cfg, m.label_of(), m.known(m.counts))[0]


def _counts_at(table: pa.Table, idx: tuple[int, ...]) -> list[int | None]:
    """The counts of compacted rows `table` at the points `idx` (None: not estimated)."""
    by_idx = dict(zip(*(table.column(c).to_pylist() for c in ("idx", "count")), strict=True))
    return [by_idx.get(i) for i in idx]
