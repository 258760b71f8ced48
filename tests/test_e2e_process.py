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

from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.storage import Experiment
from trainables import checkpoint
from trainables.kernel.trial_status import read_status

pytestmark = pytest.mark.e2e
SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]

MULTI_NODE = """
import json, sys, time
from pathlib import Path
import ray
from ray.cluster_utils import Cluster
from sweeper.plan.grid import expand
from sweeper.run.launch import DataPlane, LaunchOptions, run_sweep
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import Resources
from sweeper.results.storage import Experiment
from trainables.kernel.trial_status import read_status

def together(config, experiment_root):
    # The real trial, entered once all four run at once (files, not time): then each node
    # (1 CPU, 1 GPU) holds exactly two of the 0.5-CPU, 0.5-GPU trials.
    from trainables.kernel.config import TrialConfig
    from trainables.tune_trial import run_trial
    barrier = Path(experiment_root).parent.parent / "running"
    barrier.mkdir(exist_ok=True)
    (barrier / TrialConfig.from_dict(config["trial"]).trial_id).touch()
    deadline = time.monotonic() + 300
    while len(list(barrier.iterdir())) < 4:
        if time.monotonic() > deadline:
            raise RuntimeError("the four trials never ran at once")
        time.sleep(0.2)
    run_trial(config, experiment_root)

cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 0})
for _ in range(2):
    cluster.add_node(num_cpus=1, num_gpus=1)
cluster.wait_for_nodes()
spec = load_space(sys.argv[1])
trials = expand(spec)
exp = Experiment(sys.argv[2], "multi")
outcome = run_sweep(exp, trials, [], spec.certify, Resources(cpu=0.5, gpu=0.5),
                    LaunchOptions(max_failures=0), lambda e: None, plane=DataPlane(trainable=together))
nodes = [read_status(exp.trial_dir(t.trial_id))["node"] for t in trials]
node_ids = sorted(n["NodeID"] for n in ray.nodes() if n["Resources"].get("GPU"))
print(json.dumps({"nodes": nodes, "gpu_nodes": node_ids, "failed": outcome.failed,
                  "interrupted": outcome.interrupted}))
ray.shutdown()
cluster.shutdown()
"""

SPACE = """
fixed: {dataset: digits, epochs: 1, batch_size: 64, train_subset: 128, eval_subset: 30, method: gaussian}
grids:
  - name: g
    axes: {sigma: [0.12, 0.25, 0.5, 1.0]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 16, alpha: 0.01, skip: 90, batch_size: 64, shard_size: 5}
"""

SLOW_SPACE = """
fixed: {dataset: digits, epochs: 3, batch_size: 32, train_subset: 256, method: smoothadv, attack: pgd, steps: 1, m_train: 2, epsilon: 0.25}
grids:
  - name: sa
    axes: {sigma: [0.25]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 16, alpha: 0.01, skip: 90, batch_size: 64, shard_size: 5}
"""

# `sweeper run` whose trials stop after their first epoch (checkpoint and trial.json written)
# and wait there until the sweep is stopped: the test hook `_maybe_fail`, which runs right
# after each epoch's checkpoint, waits instead of raising. Everything else is the real CLI.
HELD_RUN = """
import sys, threading
from sweeper.run import launch
from sweeper.cli import app

def held_trial(config, experiment_root):
    from trainables import tune_trial
    def hold(fault, cfg, epoch):
        threading.Event().wait()  # never set: held until the sweep ends the trial
    tune_trial._maybe_fail = hold
    tune_trial.run_trial(config, experiment_root)

launch._run_trial = lambda: held_trial
sys.argv[0] = "sweeper"
app()
"""


def test_multi_node_cluster_spreads_trials(tmp_path):
    """Four trials that must run at once on two nodes that each fit two: both nodes host
    exactly two (what Ray's resource accounting guarantees, not what it usually does)."""
    space = tmp_path / "space.yaml"
    space.write_text(textwrap.dedent(SPACE))
    script = tmp_path / "multi.py"
    script.write_text(MULTI_NODE)
    done = subprocess.run(
        [sys.executable, str(script), str(space), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["failed"] and not report["interrupted"]
    assert sorted(report["nodes"]) == sorted(report["gpu_nodes"] * 2)


def _wait_for_epoch(exp: Experiment, trial_id: str, proc: subprocess.Popen) -> None:
    """Until the trial's trial.json says an epoch is done (state on disk, no time limit: the
    test's own timeout ends a hang); fails at once if the sweep exits first."""
    while True:
        status = read_status(exp.trial_dir(trial_id))
        if status and status["epoch"] >= 1:
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)


def test_sigterm_leaves_a_resumable_experiment(tmp_path):
    """SIGTERM (what a CI runner or a batch scheduler sends) while a trial is held after its
    first epoch: exit 130, the epoch-1 checkpoint kept; the next run resumes it to the end."""
    space = tmp_path / "slow.yaml"
    space.write_text(textwrap.dedent(SLOW_SPACE))
    script = tmp_path / "held.py"
    script.write_text(HELD_RUN)
    (cfg,) = expand(load_space(str(space)))
    exp = Experiment(str(tmp_path / "store"), "term")
    args = ["run", "grid", str(space), "--storage", exp.storage, "--experiment", "term"]
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _wait_for_epoch(exp, cfg.trial_id, proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err[-3000:]
    assert "re-run" in out
    held = checkpoint.load(exp.checkpoint(cfg.trial_id))
    assert held["epoch"] == 1 and read_status(exp.trial_dir(cfg.trial_id))["epoch"] == 1

    again = subprocess.run([*SWEEPER, *args], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert "1 to resume" in again.stdout
    payload = checkpoint.load(exp.checkpoint(cfg.trial_id))
    assert payload["epoch"] == cfg.epochs and payload["history"][0] == held["history"][0]
    assert read_status(exp.trial_dir(cfg.trial_id))["state"] == "finished"
    assert Path(exp.certify_dir, cfg.trial_id).is_dir()


SEARCH_SLOW_CERTIFY = """
fixed: {dataset: digits, epochs: 1, batch_size: 64, train_subset: 128, eval_subset: 60, lr: 0.05, warmup_epochs: 1, method: smoothadv, attack: pgd, steps: 1, sigma: 0.25, epsilon: 0.5}
grids:
  - name: sa
    axes: {m_train: [1, 2]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 2000000, alpha: 0.01, skip: 1, max_points: 60, batch_size: 1000, shard_size: 60}
search: {mode: envelope, tolerance: 0.05, audit: 0.0}
"""


def test_sigterm_while_tune_waits_for_a_curve_in_its_loop_ends_the_search(tmp_path):
    """Both models trained one at a time on 2 CPUs, the first certified (one task of n = 2M
    draws per point: far longer than this test) while the second trains: once it has, the search waits for both curves in
    Tune's own loop (a CPU beside the last trial's room), which does not look at signals.
    SIGTERM then ends the run, interrupted (exit 130), with no round of Tune after it; a lost
    one would leave the driver waiting for the curves (this test's timeout)."""
    space = tmp_path / "search.yaml"
    space.write_text(textwrap.dedent(SEARCH_SLOW_CERTIFY))
    exp = Experiment(str(tmp_path / "store"), "wait")
    args = ["run", "grid", str(space), "--storage", exp.storage, "--experiment", "wait"]
    log = tmp_path / "run.log"  # not a pipe: the progress display would fill it unread
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [*SWEEPER, *args, "--max-concurrent", "1"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "120"},
        )
    try:
        trials = [t.trial_id for t in expand(load_space(str(space)))]
        while not all(
            (read_status(exp.trial_dir(t)) or {}).get("state") == "finished" for t in trials
        ):
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(3)  # Tune has processed the last trial's end: it waits in its loop
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, log.read_text()[-3000:]
    record = json.loads(Path(exp.search_json).read_text())
    assert record["waits"]["rounds"] == 0 and record["stopped"] is None
    assert len(list(Path(exp.tune_dir).glob("run-*"))) == 1
