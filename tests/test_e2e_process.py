"""End-to-end runs that need their own process: a simulated multi-node cluster, and SIGTERM
sent to a running `sweeper run` (what a CI runner or a batch scheduler does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sweeper.grid import expand
from sweeper.spec import load_space
from sweeper.storage import Experiment
from trainables import checkpoint
from trainables.trial_status import read_status

pytestmark = pytest.mark.e2e
SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]

MULTI_NODE = """
import json, sys
import ray
from ray.cluster_utils import Cluster
from sweeper.grid import expand
from sweeper.launch import LaunchOptions, run_sweep
from sweeper.spec import Resources, load_space
from sweeper.storage import Experiment
from trainables.trial_status import read_status

cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 0})
for _ in range(2):
    cluster.add_node(num_cpus=1, num_gpus=1)
cluster.wait_for_nodes()
spec = load_space(sys.argv[1])
trials = expand(spec)
exp = Experiment(sys.argv[2], "multi")
outcome = run_sweep(exp, trials, [], spec.certify, Resources(cpu=0.5, gpu=0.5), LaunchOptions(), lambda e: None)
nodes = [read_status(exp.trial_dir(t.trial_id))["node"] for t in trials]
print(json.dumps({"nodes": nodes, "failed": outcome.failed, "interrupted": outcome.interrupted}))
ray.shutdown()
cluster.shutdown()
"""

SPACE = """
fixed: {dataset: digits, epochs: 3, batch_size: 64, train_subset: 512, eval_subset: 30, method: gaussian}
grids:
  - name: g
    axes: {sigma: [0.12, 0.25, 0.5, 1.0]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 16, alpha: 0.01, skip: 90, batch_size: 64, shard_size: 5}
"""

SLOW_SPACE = """
fixed: {dataset: digits, epochs: 6, batch_size: 32, method: smoothadv, attack: pgd, steps: 2, m_train: 2, epsilon: 0.25}
grids:
  - name: sa
    axes: {sigma: [0.25]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 16, alpha: 0.01, skip: 90, batch_size: 64, shard_size: 5}
"""


def test_multi_node_cluster_spreads_trials(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(textwrap.dedent(SPACE))
    script = tmp_path / "multi.py"
    script.write_text(MULTI_NODE)
    done = subprocess.run([sys.executable, str(script), str(space), str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["failed"] and not report["interrupted"]
    assert len(set(report["nodes"])) == 2  # 1 CPU per node fits two 0.5-CPU trials: both nodes used


def _wait_for_epoch(
    exp: Experiment, trial_id: str, proc: subprocess.Popen, timeout: float = 300
) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = read_status(exp.trial_dir(trial_id))
        if status and status["epoch"] >= 1:
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)
    raise AssertionError("the trial never finished an epoch")


def test_sigterm_leaves_a_resumable_experiment(tmp_path):
    space = tmp_path / "slow.yaml"
    space.write_text(textwrap.dedent(SLOW_SPACE))
    (cfg,) = expand(load_space(str(space)))
    exp = Experiment(str(tmp_path / "store"), "term")
    args = [*SWEEPER, "run", "grid", str(space), "--storage", exp.storage, "--experiment", "term"]
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    _wait_for_epoch(exp, cfg.trial_id, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err[-3000:]
    assert "re-run" in out
    stopped_at = checkpoint.load(exp.checkpoint(cfg.trial_id))["epoch"]
    assert 1 <= stopped_at < cfg.epochs
    first_epoch = checkpoint.load(exp.checkpoint(cfg.trial_id))["history"][0]

    again = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert "1 to resume" in again.stdout
    payload = checkpoint.load(exp.checkpoint(cfg.trial_id))
    assert payload["epoch"] == cfg.epochs and payload["history"][0] == first_epoch
    assert Path(exp.certify_dir, cfg.trial_id).is_dir()
