"""The envelope strategy's inputs come from where they belong (issue 38): labels from the data
set, never from a pilot, row or record file on storage, and every decision recomputed from
the pilot counts. The attack: a planted `pilot-01.parquet` whose labels equal the model's
prediction (every point counts: 0.40 -> 0.80 at r = 0), or differ from it (the real winners
pruned), then a certification under the envelope strategy. On trained digits models: the
planted files are named in a warning, drawn again, and the envelope is the honest run's."""

from __future__ import annotations

import dataclasses
import json
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_envelope_run import certify_envelope
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import Resources
from sweeper.results.certify_rows import load_results
from sweeper.results.envelope import envelope
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from sweeper.run.envelope_stage import PILOT_SCHEMA, labels_task
from sweeper.run.envelope_storage import full_refusal, pilot_refusal
from trainables.attestations import attest_training
from trainables.kernel.trial_status import write_status
from trainables.train import fit

SPACE = """
fixed: {dataset: digits, method: gaussian, m_train: 1, batch_size: 64, lr: 0.02, eval_subset: 64}
grids:
  - name: g
    axes: {sigma: [0.25, 0.5], epochs: [1, 4]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 32, n: 400, alpha: 0.001, skip: 15, max_points: null, batch_size: 400, shard_size: 10}
"""


class Local:
    """Tasks run in this process; records what was submitted."""

    def __init__(self):
        self.results, self.names = {}, []

    def submit(self, fn, options, *args):
        self.names.append(fn.__name__)
        self.results[len(self.names)] = fn(*args)
        return len(self.names)

    def wait(self, handles, timeout):
        return list(handles)

    def get(self, handle):
        return self.results[handle]

    def cancel(self, handle):
        pass


# ------------------------------------------------------------------------ the checks alone
def _pilot(idx, label, chat, draws, votes) -> pa.Table:
    cols = {"idx": idx, "label": label, "cAHat": chat, "draws": draws, "votes": votes}
    return pa.table(cols, schema=PILOT_SCHEMA)


LABELS = {0: 3, 15: 7, 30: 1}


def test_pilot_rows_count_only_with_the_data_sets_labels_and_the_steps_draws():
    good = _pilot([0, 15, 30], [3, 7, 1], [3, 2, 1], [10, 0, 10], [9, 0, 4])
    assert pilot_refusal(good, 1, (0, 15, 30), 10, LABELS, None, 10) is None
    forged = _pilot([0, 15, 30], [3, 2, 1], [3, 2, 1], [10, 10, 10], [9, 8, 4])
    assert "point 15: label 2, the data set's is 7" in pilot_refusal(
        forged, 1, (0, 15, 30), 10, LABELS, None, 10
    )
    pruning = _pilot([0, 15, 30], [4, 7, 2], [3, 2, 1], [0, 0, 0], [0, 0, 0])
    assert "point 0: label 4" in pilot_refusal(pruning, 1, (0, 15, 30), 10, LABELS, None, 10)
    cases = {
        "rows": _pilot([0, 15], [3, 7], [3, 2], [10, 0], [9, 0]),  # a point missing
        "votes": _pilot([0, 15, 30], [3, 7, 1], [3, 2, 1], [10, 0, 10], [11, 0, 4]),
        "draws": _pilot([0, 15, 30], [3, 7, 1], [3, 2, 1], [10, 5, 10], [9, 0, 4]),
        "class": _pilot([0, 15, 30], [3, 7, 1], [3, 12, 1], [10, 0, 10], [9, 0, 4]),
        "null": _pilot([0, 15, 30], [3, 7, 1], [3, 2, 1], [10, 0, None], [9, 0, 4]),
    }
    for what, table in cases.items():
        why = pilot_refusal(table, 1, (0, 15, 30), 10, LABELS, None, 10)
        assert why is not None and (what in why or what == "null"), (what, why)
    # a later stage: its rows keep the selection's classes, any of the model's points
    later = _pilot([30], [1], [1], [20], [20])
    chat = {0: 3, 15: 2, 30: 1}
    assert pilot_refusal(later, 2, (0, 30), 20, LABELS, chat, 10) is None
    moved = _pilot([30], [1], [5], [20], [20])
    assert "not the selection's" in pilot_refusal(moved, 2, (0, 30), 20, LABELS, chat, 10)
    stranger = _pilot([45], [1], [1], [20], [20])
    assert pilot_refusal(stranger, 2, (0, 30), 20, LABELS, chat, 10) is not None


def test_full_rows_count_only_with_the_data_sets_labels_and_at_most_n_votes():
    rows = pa.table({"idx": [0, 15, 30], "label": [3, 7, 1], "count": [390, None, 12]})
    assert full_refusal(rows, LABELS, 400) is None
    relabelled = rows.set_column(1, "label", pa.array([3, 2, 1]))
    assert "point 15: label 2" in full_refusal(relabelled, LABELS, 400)
    over = rows.set_column(2, "count", pa.array([401, None, 12]))
    assert "count 401" in full_refusal(over, LABELS, 400)
    assert "not the model's 3 points" in full_refusal(rows.slice(0, 2), LABELS, 400)


# ------------------------------------------------------------------ on trained digits models
@pytest.fixture(scope="module")
def trained(tmp_path_factory, signing_key):
    tmp = tmp_path_factory.mktemp("inputs")
    space = tmp / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    spec = load_space(str(space))
    trials = expand(spec)
    exp = Experiment(str(tmp / "store"), "tiny")
    write_sweep(exp, {"space": {}, "trials": [t.to_dict() for t in trials]})
    for cfg in trials:
        state = fit(cfg, exp.checkpoint(cfg.trial_id), device=torch.device("cpu"))
        attest_training(
            exp.trial_dir(cfg.trial_id), cfg, exp.checkpoint(cfg.trial_id), None, signing_key
        )
        write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", state.epoch, state.history[-1])
    env = dataclasses.replace(spec.certify, strategy="envelope", delta=0.05)
    honest = _copy(exp, tmp / "honest")
    _, ledger, _ = _run(honest, trials, env)
    return space, trials, env, exp, honest, ledger


def _copy(exp: Experiment, where: Path) -> Experiment:
    shutil.copytree(exp.root, where / exp.name)
    return Experiment(str(where), exp.name)


def _run(exp, trials, spec):
    tasks = Local()
    sizer = lambda d, _: 450  # noqa: E731  (every model on the same 450-point split)
    outcome, ledger = certify_envelope(
        exp, trials, spec, Resources(cpu=1, gpu=0), lambda e: None, tasks=tasks, sizer=sizer
    )
    return outcome, ledger, tasks


def _as_prediction(t: pa.Table, first: int) -> dict:
    """Every label set to the selected class; a point that was not drawn (its class was not
    its label) given all the pilot's votes."""
    chat, drawn = t.column("cAHat").to_pylist(), t.column("draws").to_pylist()
    votes = [v if d else first for v, d in zip(t.column("votes").to_pylist(), drawn, strict=True)]
    return {"label": chat, "draws": [first] * len(chat), "votes": votes}


def _not_prediction(t: pa.Table, first: int) -> dict:
    """Every label set to another class than the selected one: no point counts."""
    chat = t.column("cAHat").to_pylist()
    zeros = [0] * len(chat)
    return {"label": [(c + 1) % 10 for c in chat], "draws": zeros, "votes": zeros}


def _plant(honest, forged, trials, spec, forge) -> list[str]:
    """A pilot-01.parquet per model in `forged`, made from the honest one by `forge`; those
    whose labels it changed."""
    planted = []
    for cfg in trials:
        t = pq.read_table(honest.pilot_path(cfg.trial_id, spec.cert_id, 1))
        cols = {n: t.column(n).to_pylist() for n in PILOT_SCHEMA.names}
        cols.update(forge(t, spec.pilot_stages[0]))
        path = forged.pilot_path(cfg.trial_id, spec.cert_id, 1)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols, schema=PILOT_SCHEMA), path)
        if cols["label"] != t.column("label").to_pylist():
            planted.append(path)
    return planted


def _same_certificates(rows, truth) -> None:
    """Two runs of the strategy scheduled differently: the same points with the data set's
    labels, every count both drew the same, the same envelope at the grid radii."""
    assert rows.index.equals(truth.index) and rows["label"].equals(truth["label"])
    both = rows["count"].notna() & truth["count"].notna()
    assert both.sum() > len(rows) / 2
    columns = ["count", "correct", "radius"]
    assert rows.loc[both, columns].equals(truth.loc[both, columns])
    radii = [0.25 * k for k in range(10)]
    ours, theirs = envelope(rows.reset_index(), radii), envelope(truth.reset_index(), radii)
    assert ours["certified_accuracy"].tolist() == theirs["certified_accuracy"].tolist()


def _frame(exp, cert_id):
    frame = load_results(exp).frame
    return frame[frame.cert_id == cert_id].set_index(["trial_id", "idx"]).sort_index()


@pytest.mark.parametrize("forge", [_as_prediction, _not_prediction])
def test_planted_pilot_labels_are_refused_and_the_envelope_is_the_honest_one(
    trained, tmp_path, caplog, forge
):
    _, trials, env, exp, honest, ledger = trained
    forged = _copy(exp, tmp_path)
    planted = _plant(honest, forged, trials, env, forge)
    with caplog.at_level("WARNING", logger="sweeper"):
        outcome, got, tasks = _run(forged, trials, env)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert planted and all(f"left out {p}" in warned for p in planted), warned
    assert warned.count("left out") == len(planted)
    assert outcome.failures == [] and tasks.names.count("labels_task") == 1
    assert np.array_equal(got.envelope(), ledger.envelope())
    assert {m: got.status(m) for m in got.models} == {m: ledger.status(m) for m in ledger.models}
    rows, truth = _frame(forged, env.cert_id), _frame(honest, env.cert_id)
    assert rows[["label", "count", "correct"]].equals(truth[["label", "count", "correct"]])
    for path in planted:  # drawn again over the planted files, with the data set's labels
        t = pq.read_table(path)
        idx = tuple(t.column("idx").to_pylist())
        assert t.column("label").to_pylist() == labels_task("digits", None, idx)


def test_a_planted_full_file_with_labels_set_to_predictions_is_named_and_not_counted(
    trained, tmp_path, caplog
):
    _, trials, env, _, honest, ledger = trained
    forged = _copy(honest, tmp_path)
    certified = [m for m in ledger.models if ledger.status(m) == "certified"]
    path = next(Path(forged.setting_dir("certify", certified[0], env.cert_id)).glob("compact*"))
    t = pq.read_table(path)
    predict = [p if p >= 0 else 0 for p in t.column("predict").to_pylist()]
    pq.write_table(t.set_column(t.schema.get_field_index("label"), "label", [predict]), path)
    with caplog.at_level("WARNING", logger="sweeper"):
        outcome, got, tasks = _run(forged, trials, env)
    assert f"left out {path}" in " ".join(r.getMessage() for r in caplog.records)
    assert [f[0] for f in outcome.failures] == [certified[0]] and str(path) in outcome.failures[0][
        2
    ]
    assert got.models[certified[0]].certified is None  # not counted
    assert tasks.names == ["labels_task"]  # everything else read back and checked


@pytest.mark.e2e
def test_sweeper_certify_envelope_ignores_planted_pilots_and_verdicts(
    ray_session, trained, tmp_path
):
    """`sweeper certify --strategy envelope` on an experiment with planted pilot files (labels
    set to the predictions) and planted verdicts (every model `pruned`): nothing is skipped,
    the planted files are drawn again, the rows are the honest run's: the same points with the
    data set's labels, every count drawn by both the same, the same envelope. (The command runs
    two steps at once on the session's Ray where the honest run ran one: a model may be
    certified from another radius, so which points are drawn may differ, never a count.)"""
    space, trials, env, exp, honest, _ = trained
    forged = _copy(exp, tmp_path)
    _plant(honest, forged, trials, env, _as_prediction)
    for cfg in trials:
        record = {"status": "pruned", "strategy": "envelope", "radii": [0.0], "upper": [0]}
        Path(forged.envelope_record(cfg.trial_id, env.cert_id)).write_text(json.dumps(record))
    args = ["certify", str(space), "--storage", forged.storage, "--experiment", forged.name]
    flags = ["--cpu-only", "--strategy", "envelope", "--delta", "0.05"]
    result = CliRunner().invoke(app, [*args, *flags], catch_exceptions=False)
    assert result.exit_code == 0 and "nothing to do" not in result.output, result.output
    _same_certificates(_frame(forged, env.cert_id), _frame(honest, env.cert_id))


def test_with_a_key_forged_pilot_counts_are_refused_and_drawn_again(
    trained, tmp_path, caplog, signing_env
):
    """The gap labels alone leave (issue 38): pilot rows with the data set's labels but
    counts made up (every drawn point given no votes: a real winner would look prunable).
    Signed by the worker that drew them, they fail their attestation and are drawn again;
    the envelope, every verdict and every row are the honest signed run's."""
    _, trials, env, exp, _, _ = trained
    signed = _copy(exp, tmp_path / "signed")
    for cfg in trials:  # the checkpoints, attested as a keyed sweep trains them
        where = signed.trial_dir(cfg.trial_id)
        attest_training(where, cfg, signed.checkpoint(cfg.trial_id), None)
    _, honest, _ = _run(signed, trials, env)
    forged = _copy(signed, tmp_path / "forged")
    planted = []
    for cfg in trials:
        path = forged.pilot_path(cfg.trial_id, env.cert_id, 1)
        t = pq.read_table(path)
        votes = [0] * t.num_rows
        i = t.schema.get_field_index("votes")
        pq.write_table(t.set_column(i, t.schema.field(i), pa.array(votes, pa.int64())), path)
        planted.append(path)
    with caplog.at_level("WARNING", logger="sweeper"):
        outcome, got, _ = _run(forged, trials, env)
    warned = " ".join(r.getMessage() for r in caplog.records)
    for path in planted:
        assert f"left out {path} (its rows are not the ones its attestation signed)" in warned
    assert outcome.failures == []
    assert np.array_equal(got.envelope(), honest.envelope())
    assert {m: got.status(m) for m in got.models} == {m: honest.status(m) for m in honest.models}
    got_rows, honest_rows = _frame(forged, env.cert_id), _frame(signed, env.cert_id)
    assert got_rows[["count", "correct", "radius"]].equals(
        honest_rows[["count", "correct", "radius"]]
    )
