"""Tie completion on trained digits models (issue 39 §5): a model certified from the first
radius it could win at has rows not estimated below it; a completion draws them with
CERTIFY's very estimation draws (its counts are `full`'s), folds them into the model's
compacted rows (attested again), is recorded where it was decided, and is read back, not
drawn again, by a resumed run. Which ties need one is the planner's unit tests'
(tests/test_envelope_strategy.py); here every partial model is completed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_envelope_run import Local, _res, certify_envelope, trained  # noqa: F401  (the module's trained models)

from sweeper.results.attested_rows import attestation_problem
from sweeper.results.certify_rows import load_results
from sweeper.results.digests import file_digest
from sweeper.results.envelope_records import read_records
from sweeper.results.reader import _cache_records
from sweeper.run import envelope_planner, shards
from sweeper.run.certify_stage import CERTIFY
from sweeper.run.envelope_completion import complete_task
from sweeper.run.envelope_ledger import skipped


def _every_partial_model(ledger):
    done = [m for m in ledger.models.values() if m.certified is not None]
    return sorted((m for m in done if skipped(m).any()), key=lambda m: m.arrival)


def _run(exp, trials, env):
    tasks = Local()
    args = (exp, trials, env, _res(), lambda e: None)
    _, ledger = certify_envelope(*args, tasks=tasks, sizer=lambda d, _: 450)
    return ledger, tasks


def test_a_completion_counts_what_full_counts_and_a_resumed_run_reads_it_back(
    trained,  # noqa: F811
    signing_env,
    monkeypatch,
):
    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope", delta=0.03)
    monkeypatch.setattr(envelope_planner, "completions", _every_partial_model)
    ledger, tasks = _run(exp, trials, env)
    completed = [m for m in ledger.models.values() if m.certified is not None and m.from_level]
    assert tasks.names.count("complete_task") == len(completed) >= 1
    for cfg in trials:  # full on the same models
        for shard in shards.plan(cfg, "certify", spec.certify, 450):
            shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    frame = load_results(exp).frame
    assert load_results(exp).invalid == []  # the completed files pass the reader's checks
    full = frame[frame.cert_id == spec.certify.cert_id].set_index(["trial_id", "idx"])
    mine = frame[frame.cert_id == env.cert_id].set_index(["trial_id", "idx"])
    records = {k[0]: r for k, r in read_records(exp).items() if k[1] == env.cert_id}
    covers = _cache_records(exp.cache_path("certify"))[0]  # refreshed: each file read again
    for m in completed:
        cfg = next(t for t in trials if t.trial_id == m.name)
        path = exp.compacted_path(
            "certify", m.name, env.cert_id, len(shards.plan(cfg, "certify", env, 450))
        )
        assert covers[exp.relative(path)][1] == file_digest(Path(path).read_bytes())
        reach = m.idx[(m.upper > 0) & (m.cAHat == m.labels)]
        counts = mine.loc[m.name, "count"]
        assert counts[reach].notna().all() and not skipped(m).any()
        assert (counts[reach] == full.loc[m.name, "count"][reach]).all()
        assert records[m.name]["exact_from"] == 0.0 and m.exact_from == 0
    # resumed: the completions are read back where they were decided, nothing is drawn
    again, tasks = _run(exp, trials, env)
    assert tasks.names == ["labels_task"]
    assert np.array_equal(again.envelope(), ledger.envelope())
    for name, m in ledger.models.items():
        assert again.status(name) == ledger.status(name)
        assert m.counts is None or np.array_equal(again.models[name].counts, m.counts)


def test_the_completion_task_is_idempotent_attested_and_refuses_a_changed_file(
    trained,  # noqa: F811
    signing_env,
):
    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope", delta=0.04)
    ledger, _ = _run(exp, trials, env)
    files = {}
    for cfg in trials:
        count = len(shards.plan(cfg, "certify", env, 450))
        path = exp.compacted_path("certify", cfg.trial_id, env.cert_id, count)
        table = (
            pq.read_table(path)
            if cfg.trial_id in ledger.models and ledger.models[cfg.trial_id].counts is not None
            else None
        )
        if table is not None and None in table.column("count").to_pylist():
            files[cfg.trial_id] = (path, count, table)
    assert files  # a model certified from a radius on has rows not estimated
    name, (path, count, table) = next(iter(files.items()))
    m = ledger.models[name]
    idx, counts = (table.column(k).to_pylist() for k in ("idx", "count"))
    chat = dict(zip(m.idx.tolist(), m.cAHat.tolist(), strict=True))
    points = tuple((i, chat[i]) for i, c in zip(idx, counts, strict=True) if c is None)
    assert complete_task(exp, name, env, points, count, 1) == len(points)
    done = pq.read_table(path)
    assert attestation_problem(done, "compact", name, env.cert_id) is None
    assert None not in done.column("count").to_pylist()
    kept = [c for c in counts if c is not None]
    assert [
        c
        for i, c in zip(idx, done.column("count").to_pylist(), strict=True)
        if i not in dict(points)
    ] == kept
    before = Path(path).read_bytes()
    assert complete_task(exp, name, env, points, count, 1) == 0  # done: nothing drawn
    assert Path(path).read_bytes() == before
    # a count changed after the attestation: the file is refused, not completed over
    changed = done.column("count").to_pylist()
    changed[0] = changed[0] - 1 if changed[0] else 1
    j = done.schema.get_field_index("count")
    pq.write_table(done.set_column(j, done.schema.field(j), pa.array(changed, pa.int64())), path)
    with pytest.raises(RuntimeError, match="cannot complete"):
        complete_task(exp, name, env, points, count, 1)
    Path(path).write_bytes(before)  # the module's storage as it was, for the tests after


@pytest.mark.e2e
def test_completions_run_as_ray_tasks_and_their_rows_pass_the_reader(
    ray_session,
    trained,  # noqa: F811
    signing_env,
    monkeypatch,
):
    """On the session's Ray, whose workers sign: each completion a Ray task, its rewritten
    compacted rows attested by the worker and accepted by the reader."""
    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope", delta=0.05)
    monkeypatch.setattr(envelope_planner, "completions", _every_partial_model)
    args = (exp, trials, env, _res(), lambda e: None)
    _, ledger = certify_envelope(*args, sizer=lambda d, _: 450)
    completed = [m for m in ledger.models.values() if m.certified is not None and m.from_level]
    assert completed and all(m.exact_from == 0 for m in completed)
    read = load_results(exp)
    assert read.invalid == []
    mine = read.frame[read.frame.cert_id == env.cert_id].set_index(["trial_id", "idx"])
    for m in completed:
        reach = m.idx[(m.upper > 0) & (m.cAHat == m.labels)]
        assert mine.loc[m.name, "count"][reach].notna().all()
