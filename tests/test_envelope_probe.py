"""Ambiguous-first certification on trained digits models (issue 39 §2): the probe draws
CERTIFY's very estimation draws (its counts are `full`'s at those points), and a full step
after it takes the probed counts from the probe's file, checked: a file changed since its
attestation fails the step instead of being counted."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_envelope_run import trained  # noqa: F401  (the module's trained models)

from sweeper.results.certify_rows import load_results
from sweeper.run import shards
from sweeper.run.certify_stage import CERTIFY
from sweeper.run.envelope_stage import EnvelopeFull, full_shard, pilot_task


def test_a_probe_counts_what_full_counts_and_the_full_step_takes_them_checked(
    trained,  # noqa: F811
    signing_env,
):
    _, spec, exp, trials = trained
    env = dataclasses.replace(spec.certify, strategy="envelope")
    cfg, probe_stage = trials[0], len(env.pilot_stages) + 1
    plan = shards.plan(cfg, "certify", env, 450)
    points = [i for s in plan for i in s.indices]
    select = pilot_task(exp, cfg.trial_id, env, 1, tuple((i, -1) for i in points), 10, 1)
    chat = dict(zip(*(select.column(c).to_pylist() for c in ("idx", "cAHat")), strict=True))
    asked = points[::3]
    probe = pilot_task(
        exp, cfg.trial_id, env, probe_stage, tuple((i, chat[i]) for i in asked), env.n, 1
    )
    votes = dict(zip(*(probe.column(c).to_pylist() for c in ("idx", "votes")), strict=True))
    assert set(probe.column("draws").to_pylist()) == {env.n}
    # full on the same model: the probe's votes are its counts, point by point
    for shard in shards.plan(cfg, "certify", spec.certify, 450):
        shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    frame = load_results(exp).frame
    full = frame[(frame.cert_id == spec.certify.cert_id) & (frame.trial_id == cfg.trial_id)]
    counts = full.set_index("idx")["count"]
    assert {i: int(counts[i]) for i in asked} == votes
    # the full step draws the others and takes the probed counts from the file
    setting = EnvelopeFull(env, tuple((i, chat[i], True) for i in points), tuple(asked))
    rows = full_shard(exp, plan[0], setting, 1)
    got = dict(zip(*(rows.column(c).to_pylist() for c in ("idx", "count")), strict=True))
    assert got == {i: int(counts[i]) for i in plan[0].indices}
    # a probe file changed after its attestation is refused: the step fails, nothing counted
    path = exp.pilot_path(cfg.trial_id, env.cert_id, probe_stage)
    table = pq.read_table(path)
    changed = pa.array([v + 1 if v < env.n else v for v in table.column("votes").to_pylist()])
    pq.write_table(table.set_column(4, "votes", changed), path)
    with pytest.raises(RuntimeError, match="probe's counts cannot be taken"):
        full_shard(exp, plan[0], setting, 1)
