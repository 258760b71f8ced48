"""The halving scheduler end to end on a local Ray (2 CPUs): trials report their proxy, the
ones below their σ's top at every radius stop where they stand, uncertified and said so; a run
under the same rate leaves them; a run without it continues them from their checkpoints."""

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

# Two models that learn first, then two whose learning rate leaves them near chance: one trial
# at a time, so the rung holds the learners' curves when the others report theirs.
SPACE = """
fixed: {dataset: digits, method: gaussian, sigma: 0.25, epochs: 3, batch_size: 64, train_subset: 256, eval_subset: 60, proxy_every: 1, proxy_points: 100, proxy_n: 20}
grids:
  - name: learns
    axes: {lr: [0.1, 0.05]}
  - name: stalls
    axes: {lr: [0.000001, 0.000002]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 64, alpha: 0.01, skip: 15, max_points: null, batch_size: 64, shard_size: 30}
search: {halving: 2}
"""


@pytest.fixture(scope="module")
def halved(ray_session, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("halving")
    space = write_space(tmp, SPACE, "halved.yaml")
    store = tmp / "store"
    result = run_cli(
        "run", "grid", space, "--storage", store, "--experiment", "h", "--max-concurrent", "1"
    )
    assert result.exit_code == 0, result.output
    halted = len(json.loads(Path(store, "h", "halving.json").read_text())["halted"])
    assert f"({halted} halted by --halving this run, not certified)" in " ".join(
        result.output.split()
    )
    return space, Experiment(str(store), "h")


def test_the_stalled_trials_are_halted_after_their_first_rung_and_not_certified(halved):
    space, exp = halved
    trials = expand(load_space(str(space)))
    record = json.loads(Path(exp.halving_json).read_text())
    stalls = [t for t in trials if t.lr < 0.001]
    assert record["eta"] == 2 and set(record["halted"]) >= {t.trial_id for t in stalls}
    assert read_status(exp.trial_dir(trials[0].trial_id))["state"] == "finished"
    for cfg in trials:
        status = read_status(exp.trial_dir(cfg.trial_id))
        shards = list(Path(exp.root).glob(f"certify/*/{cfg.trial_id}/**/*.parquet"))
        if cfg.trial_id in record["halted"]:
            assert status["state"] == "halted" and status["halving"] == 2
            assert status["epoch"] == record["halted"][cfg.trial_id] == 1
            assert len(status["metrics"]["proxy"]) == 2 and not shards
            assert Path(exp.trial_dir(cfg.trial_id), "checkpoint.pt").exists()
        else:
            assert status["state"] == "finished" and status["epoch"] == 3
    st = experiment_status(exp)
    assert st.counts()["halted"] == len(record["halted"])
    assert st.counts()["finished"] == len(trials) - len(record["halted"])
    result = run_cli("envelope", "--storage", Path(exp.root).parent, "--experiment", "h")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert f"{len(record['halted'])} trials halted by --halving" in text
    assert "have no results yet" not in text


def test_the_same_rate_leaves_them_and_a_run_without_it_continues_them(halved):
    space, exp = halved
    store = Path(exp.root).parent
    halted = json.loads(Path(exp.halving_json).read_text())["halted"]
    result = run_cli("run", "grid", space, "--storage", store, "--experiment", "h")
    assert result.exit_code == 0, result.output
    assert all(read_status(exp.trial_dir(t))["state"] == "halted" for t in halted)
    plain = write_space(Path(exp.root).parent.parent, SPACE.replace("search: {halving: 2}", ""))
    result = run_cli("run", "grid", plain, "--storage", store, "--experiment", "h")
    assert result.exit_code == 0, result.output
    for tid in halted:
        status = read_status(exp.trial_dir(tid))
        assert status["state"] == "finished" and status["epoch"] == 3
        # resumed from the halted epoch's checkpoint: epochs 2 and 3 only in this run
        assert status["metrics"]["epoch"] == 3
    assert experiment_status(exp).counts()["finished"] == 4
