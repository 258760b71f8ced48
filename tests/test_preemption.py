"""Preemption (issue 29 §1): a worker node killed (its raylet and workers, SIGKILL) in the
middle of training and in the middle of certification, on Ray's own multi-node test cluster
(`ray.cluster_utils.Cluster`: one raylet per node on this machine).

The trial resumes from its last checkpoint on another node, the shard lost with the node runs
again, the rows have no duplicate and no gap, and neither loss is charged to the budgets meant
for errors (`sweeper.run.retries`): the sweep allows no retry after an error at all. A replacement node joins after each kill, as an autoscaler
replaces a preempted spot instance. The driver is a `sweeper run grid` subprocess joining the
cluster; this process only starts and kills nodes (the session's `ray.init` is not touched).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.certify_rows import load_results
from sweeper.results.failures import read_failures
from sweeper.results.storage import Experiment
from trainables.kernel.trial_status import read_status

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]

# One trial of 8 epochs, each long enough (about a second: batches of 8, two noise draws per
# input) that the kill, seen at the end of the first, lands before the last even on a loaded
# machine (epochs of 0.1 s once finished before the node was gone); certification in 3 shards
# of 5 points (every 30th of 450), each long enough (n = 50,000: some 10-20 s a shard with
# both nodes busy) to be caught running and still running when the kill lands (with 6 shards
# at n = 20,000 a shard once ended in between, and no certification was lost): the first two
# run together, the kill lands once one is written, on the other or on the third.
SPACE = """
fixed: {dataset: digits, epochs: 8, batch_size: 8, m_train: 2, eval_subset: 30, method: gaussian}
grids:
  - name: g
    axes: {sigma: [0.25]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 50000, alpha: 0.01, skip: 30, max_points: null, batch_size: 1000, shard_size: 5}
"""
POINTS, EPOCHS = 15, 8


@pytest.fixture
def cluster():
    """A head without CPUs (the driver's node) and two worker nodes of one CPU each; yields
    (the cluster, the environment of a driver joining it). The nodes take this process's
    authentication mode (Ray reads it once, at import), and so does the driver."""
    from ray.cluster_utils import Cluster
    from ray.experimental import internal_kv

    temp_dir = tempfile.mkdtemp(prefix="sw-pre-")  # short: Unix socket paths are limited
    head = {"num_cpus": 0, "include_dashboard": False, "temp_dir": temp_dir}
    session = internal_kv.global_gcs_client  # the session's Ray, if this process runs one
    nodes = Cluster(initialize_head=True, connect=False, head_node_args=head)
    try:
        for _ in range(2):
            nodes.add_node(num_cpus=1)
        yield nodes, {**os.environ, "RAY_ADDRESS": nodes.address, "COLUMNS": "200"}
    finally:
        nodes.shutdown()
        # Cluster.shutdown resets the process's internal KV client, the session Ray's too: the
        # tests after this one in the process would find Ray's KV gone
        if session is not None:
            internal_kv._initialize_internal_kv(session)


def _raylet_pid(node) -> int:
    return node.all_processes["raylet"][0].process.pid


def _kill(nodes, node) -> None:
    """SIGKILL a node's raylet and workers, as a preemption does; a replacement joins."""
    nodes.remove_node(node, allow_graceful=False)
    nodes.add_node(num_cpus=1)


def _node_running(nodes, task: str):
    """The worker node with a worker process running `task` (Ray titles the process
    `ray::<task>` while it runs one; its parent is its node's raylet). Linux's /proc."""
    raylets = {_raylet_pid(n): n for n in nodes.worker_nodes}
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # not a process, or it ended
        if title.startswith(f"ray::{task}") and ppid in raylets:
            return raylets[ppid]
    return None


def _until(what, driver: subprocess.Popen, timeout: float = 150):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert driver.poll() is None, "the sweep ended before the node could be killed"
        if (found := what()) is not None:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out waiting to kill a node")


def test_a_node_killed_mid_training_and_mid_certification_costs_no_work_and_no_error(
    cluster, tmp_path
):
    nodes, env = cluster
    space = tmp_path / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    exp = Experiment(str(tmp_path / "store"), "pre")
    (cfg,) = expand(load_space(str(space)))
    args = [*SWEEPER, "run", "grid", space, "--storage", tmp_path / "store", "--experiment", "pre"]
    args += ["--max-failures", "0", "--task-retries", "0"]  # no error may be retried
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen([str(a) for a in args], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # mid-training: after the first epoch's checkpoint, the trial's node dies
        status = _until(lambda: _epoch_done(exp, cfg.trial_id), driver)
        killed_at, first_node = status["epoch"], status["node"]
        _kill(nodes, next(n for n in nodes.worker_nodes if n.node_id == first_node))
        seen = _watch_training(exp, cfg.trial_id, driver)
        # mid-certification: some shards written, a node running one dies
        _until(lambda: any(Path(exp.certify_dir).rglob("shard-*.parquet")) or None, driver)
        _kill(nodes, _until(lambda: _node_running(nodes, "run_shard"), driver))
        assert driver.wait(timeout=200) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
        log.close()

    # the trial went on from its checkpoint on another node, not from epoch 0
    killed_at = max([killed_at] + [e for e, node in seen if node == first_node])
    after = [epoch for epoch, node in seen if node != first_node]
    assert killed_at < EPOCHS and after and min(after) > killed_at, (killed_at, seen)
    status = read_status(exp.trial_dir(cfg.trial_id))
    assert status["state"] == "finished" and status["epoch"] == EPOCHS
    # Tune's record: its trial restarted (its iterations count from 1 again), every epoch
    # reported once
    (results,) = Path(exp.tune_dir).rglob("result.json")
    reported = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["epoch"] for r in reported] == list(range(1, EPOCHS + 1))
    iterations = [r["training_iteration"] for r in reported]
    assert iterations != sorted(set(iterations)), iterations
    # every point certified exactly once
    frame = load_results(exp).frame
    assert len(frame) == POINTS and not frame.duplicated(["trial_id", "idx"]).any()
    assert sorted(frame["idx"]) == list(range(0, 450, 30))
    # both losses charged to the node losses, none to the errors, nothing failed
    failures, _ = read_failures(exp)
    assert failures == {}
    retried = json.loads(Path(exp.failures_json).read_text())["retried"]
    assert list(retried) == ["node_losses"], retried  # nothing charged to "errors"
    losses = retried["node_losses"][cfg.trial_id]
    assert losses["train"] == 1 and losses["certify"] >= 1, retried  # a queued task may die too


def _epoch_done(exp: Experiment, trial_id: str) -> dict | None:
    status = read_status(exp.trial_dir(trial_id))
    return status if status and status["epoch"] >= 1 and status.get("node") else None


def _watch_training(exp: Experiment, trial_id: str, driver) -> list[tuple[int, str]]:
    """(epoch, node) of each trial.json seen after the kill, until training ends (each
    epoch takes far longer than a poll: none is missed)."""
    seen: list[tuple[int, str]] = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and driver.poll() is None:
        status = read_status(exp.trial_dir(trial_id)) or {}
        if status.get("node") and (not seen or seen[-1] != (status["epoch"], status["node"])):
            seen.append((status["epoch"], status["node"]))
        if status.get("state") == "finished":
            return seen
        time.sleep(0.05)
    raise AssertionError(f"training did not finish after the kill: {seen}")
