"""The envelope search end to end on a local Ray (2 CPUs): Tune trains what the searcher
proposes while earlier models are certified, the search stops by itself, audits, and says
what it skipped; a second run trains nothing again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.status import experiment_status
from sweeper.results.storage import Experiment
from tests.test_e2e import run_cli, write_space
from trainables.kernel.trial_status import read_status

pytestmark = pytest.mark.e2e

SPACE = """
fixed: {dataset: digits, epochs: 1, batch_size: 64, train_subset: 128, eval_subset: 60, lr: 0.05, warmup_epochs: 1, method: smoothadv, attack: pgd, steps: 1}
grids:
  - name: sa
    axes: {sigma: [0.25, 0.5], epsilon: [0.25, 0.5, 1.0], m_train: [1, 2]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 64, alpha: 0.01, skip: 15, max_points: null, batch_size: 64, shard_size: 30}
search: {mode: envelope, tolerance: 0.05, audit: 0.0}
"""


@pytest.fixture(scope="module")
def searched(ray_session, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("search")
    space = write_space(tmp, SPACE, "searched.yaml")
    result = run_cli("run", "grid", space, "--storage", tmp / "store", "--experiment", "s")
    assert result.exit_code == 0, result.output
    return space, Experiment(str(tmp / "store"), "s")


def test_it_trains_only_what_it_proposed_and_records_why(searched):
    space, exp = searched
    trials = expand(load_space(str(space)))
    record = json.loads(Path(exp.search_json).read_text())
    proposed = [p["trial_id"] for p in record["proposals"]]
    assert record["stopped"]["reason"] in ("tolerance", "exhausted")
    assert len(proposed) == len(set(proposed)) and record["universe"] == len(trials)
    for cfg in trials:
        status = read_status(exp.trial_dir(cfg.trial_id))
        if cfg.trial_id in proposed:
            assert status["state"] == "finished"
            certified = Path(exp.setting_dir("certify", cfg.trial_id, "x")).parent
            assert list(certified.rglob("compacted-of-*.parquet"))
        else:
            assert status is None  # never started: no checkpoint, no trial.json
    # the initial design takes each σ's cheapest point first
    first = {t.trial_id: t for t in trials}[proposed[0]]
    assert first.m_train == 1


def test_status_and_envelope_say_what_was_skipped_and_that_there_is_no_guarantee(searched):
    _space, exp = searched
    st = experiment_status(exp)
    trained = len(json.loads(Path(exp.search_json).read_text())["proposals"])
    assert st.counts()["finished"] == trained
    assert st.counts()["skipped"] == len(st.trials) - trained
    result = run_cli("envelope", "--storage", Path(exp.root).parent, "--experiment", "s")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert f"the envelope search trained {trained} of {len(st.trials)} grid points" in text
    assert "no guarantee" in text


def test_a_second_run_trains_nothing_again(searched):
    space, exp = searched
    before = {p.name: p.stat().st_mtime for p in Path(exp.root, "trials").iterdir()}
    result = run_cli("run", "grid", space, "--storage", Path(exp.root).parent, "--experiment", "s")
    assert result.exit_code == 0, result.output
    after = {p.name: p.stat().st_mtime for p in Path(exp.root, "trials").iterdir()}
    assert after.keys() == before.keys()  # no trial started that the search had skipped
    for name, mtime in before.items():
        assert read_status(Path(exp.root, "trials", name))["state"] == "finished"
        assert after[name] == mtime


def test_on_one_slot_the_search_waits_for_curves_between_tune_s_rounds(ray_session, tmp_path):
    """A trial takes both CPUs, as certification does: Tune's room must be free while the
    search awaits a curve (Tune's own wait held it for 600 s: the time limit fails this)."""
    one_slot = SPACE.replace("cpu: 1", "cpu: 2").replace(
        "epsilon: [0.25, 0.5, 1.0]", "epsilon: [0.5]"
    )
    space = write_space(tmp_path, one_slot.replace("m_train: [1, 2]", "m_train: [1]"), "one.yaml")
    result = run_cli("run", "grid", space, "--storage", tmp_path / "store", "--experiment", "o")
    assert result.exit_code == 0, result.output
    exp = Experiment(str(tmp_path / "store"), "o")
    record = json.loads(Path(exp.search_json).read_text())
    assert record["stopped"]["reason"] == "exhausted" and len(record["proposals"]) == 2
    assert len(list(Path(exp.tune_dir).glob("run-*"))) >= 2  # a round ended on the wait


def test_tune_waits_for_a_curve_in_its_own_loop_where_certification_has_room(
    ray_session, tmp_path, monkeypatch
):
    """One trial at a time on 2 CPUs: when both initial models are trained, the search waits
    for their curves with no trial in Tune, and Tune waits in its own loop (asking every
    second) while certification runs on the CPU beside the last trial's: one round, no restart
    of its trial actors. `TUNE_WAIT_S` raised so a slow machine cannot end the round."""
    from sweeper.run import search_tune

    monkeypatch.setattr(search_tune, "TUNE_WAIT_S", 300.0)
    two = SPACE.replace(
        "sigma: [0.25, 0.5], epsilon: [0.25, 0.5, 1.0]", "sigma: [0.25], epsilon: [0.5]"
    )
    space = write_space(tmp_path, two, "two.yaml")
    store = tmp_path / "store"
    result = run_cli(
        "run", "grid", space, "--storage", store, "--experiment", "w", "--max-concurrent", 1
    )
    assert result.exit_code == 0, result.output
    exp = Experiment(str(store), "w")
    record = json.loads(Path(exp.search_json).read_text())
    assert record["stopped"]["reason"] == "exhausted" and len(record["proposals"]) == 2
    assert record["waits"]["in_tune"] >= 1 and record["waits"]["rounds"] == 0
    assert len(list(Path(exp.tune_dir).glob("run-*"))) == 1


def test_certification_room_reads_the_cluster_s_placement_groups(ray_session):
    """On the session's Ray (2 CPUs): a placement group of both CPUs leaves a 1-CPU task no
    room, whether or not anything runs in it; removed, the room is back."""
    import time

    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from sweeper.plan.spec import Resources
    from sweeper.run.capacity import certification_room

    task = Resources(cpu=1, gpu=0)
    assert certification_room(task)
    group = placement_group([{"CPU": ray.cluster_resources()["CPU"]}])
    ray.get(group.ready(), timeout=60)
    try:
        assert not certification_room(task)
    finally:
        remove_placement_group(group)
    deadline = time.monotonic() + 30
    while not certification_room(task) and time.monotonic() < deadline:
        time.sleep(0.1)  # the removal is asynchronous
    assert certification_room(task)
