"""Sweeps on a cluster that autoscales from zero GPU nodes: Ray's own fake multi-node
autoscaler (the `fake_multinode` provider that `ray.cluster_utils.AutoscalingCluster` drives).

The 2.60 wheel lacks the example config `AutoscalingCluster` reads, so the cluster config is
written here in cluster.yaml's schema and the head started as `AutoscalingCluster.start` does
(`ray start --head --autoscaling-config=...` with RAY_FAKE_CLUSTER=1), on its own port and
temp dir, in its own process group: `ray stop` would end every Ray on the machine (the
session fixture's too), so the cluster is ended by killing that group. Nothing here calls
`ray.init` in the test process (the session fixture owns that): every driver is a subprocess.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import Resources
from sweeper.results.certify_rows import load_results
from sweeper.results.storage import Experiment
from sweeper.run.capacity import ClusterView, parse_report
from trainables.kernel.trial_status import read_status

pytestmark = pytest.mark.e2e
SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]

CLUSTER = """
cluster_name: sweeper-fake
max_workers: 1
upscaling_speed: 1.0
idle_timeout_minutes: 5
provider:
  type: fake_multinode
  use_node_id_as_ip: true
  disable_node_updaters: true
  disable_launch_config_check: true
auth: {ssh_user: ubuntu}
available_node_types:
  ray.head.default:
    resources: {CPU: 1}
    node_config: {}
    max_workers: 0
  gpu_worker:
    resources: {CPU: 2, GPU: 1}
    node_config: {}
    min_workers: 0
    max_workers: 1
head_node_type: ray.head.default
file_mounts: {}
cluster_synced_files: []
file_mounts_sync_continuously: false
initialization_commands: []
setup_commands: []
head_setup_commands: []
worker_setup_commands: []
head_start_ray_commands: []
worker_start_ray_commands: []
"""

SPACE = """
fixed: {dataset: digits, epochs: 1, batch_size: 64, train_subset: 128, eval_subset: 30, method: gaussian}
grids:
  - name: g
    axes: {sigma: [0.25, 0.5]}
resources: {cpu: 1, gpu: 0.5}
certify: {n0: 8, n: 32, alpha: 0.01, skip: 90, max_points: null, batch_size: 64, shard_size: 5}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _wait_for_gcs(address: str, head: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert head.poll() is None, log.read_text()[-3000:]
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the fake cluster's head did not come up:\n{log.read_text()[-3000:]}")


def _auth_env(tmp: Path) -> dict[str, str]:
    """Token authentication with a token of this test's own, in its temp dir: the cluster and
    its drivers never read or write ~/.ray/auth_token (a fresh machine has none)."""
    token = tmp / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}


@pytest.fixture(scope="module")
def fake_cluster(tmp_path_factory):
    """A head with {CPU: 1} and no GPU, an autoscaler that can add one {CPU: 2, GPU: 1} worker.
    Yields the environment a driver needs to join it with `--address auto`."""
    tmp = tmp_path_factory.mktemp("autoscaling")
    config = yaml.safe_load(CLUSTER)
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)  # the same schema as cluster.yaml
    port = _free_port()
    address = f"{ray.util.get_node_ip_address()}:{port}"
    config["provider"]["gcs_address"] = address  # where the fake workers find the head
    (tmp / "cluster.json").write_text(json.dumps(config))
    temp_dir = tempfile.mkdtemp(prefix="sw-as-")  # short: Unix socket paths are limited
    auth = _auth_env(tmp)
    env = {**os.environ, **auth, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    log = tmp / "head.log"
    with log.open("w") as out:  # the head writes to its own copy of the descriptor
        head = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ray"),
                "start",
                "--head",
                f"--port={port}",
                "--num-cpus=1",
                "--num-gpus=0",
                f"--autoscaling-config={tmp / 'cluster.json'}",
                "--include-dashboard=false",
                f"--temp-dir={temp_dir}",
                "--disable-usage-stats",
                "--block",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_gcs(address, head, log)
        driver_env = {**os.environ, **auth, "RAY_ADDRESS": address, "COLUMNS": "200"}
        _wait_for_autoscaler(driver_env, head, log)
        yield driver_env
    finally:
        _kill_group(head)


def _wait_for_autoscaler(env: dict, head: subprocess.Popen, log: Path) -> None:
    """Until the autoscaler has written its first report (it reads the config first)."""
    code = textwrap.dedent("""
        import json, time, ray
        from sweeper.run.capacity import read_autoscaler
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        deadline = time.monotonic() + 60
        while read_autoscaler() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        print(read_autoscaler() is not None)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.stdout.strip().endswith("True") and head.poll() is None, (
        done.stderr[-2000:] + log.read_text()[-3000:]
    )


def _kill_group(head: subprocess.Popen) -> None:
    """End the fake cluster: every process of it is in the head's process group."""
    try:
        os.killpg(head.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    head.wait(timeout=30)


def _cluster_state(env: dict) -> dict:
    """Alive nodes and the autoscaler request, read by a separate driver."""
    code = textwrap.dedent("""
        import json, ray
        from ray.experimental.internal_kv import _internal_kv_get
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        request = json.loads(_internal_kv_get(b"autoscaler_resource_request") or b"[]")
        print(json.dumps({"nodes": nodes, "request": request}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sweep_starts_with_no_gpu_node_and_completes(fake_cluster, tmp_path):
    assert not any(n.get("GPU") for n in _cluster_state(fake_cluster)["nodes"])  # from zero
    space = tmp_path / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    store = tmp_path / "store"
    args = [
        *SWEEPER,
        "run",
        "grid",
        str(space),
        "--address",
        "auto",
        "--storage",
        str(store),
        "--experiment",
        "scaled",
        "--wait-for-nodes",
        "5",
    ]
    done = subprocess.run(args, env=fake_cluster, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "waiting for GPU nodes" in done.stdout
    exp = Experiment(str(store), "scaled")
    trials = expand(load_space(str(space)))
    for cfg in trials:
        assert read_status(exp.trial_dir(cfg.trial_id))["state"] == "finished"
    results = load_results(exp)
    assert set(results.frame["trial_id"]) == {t.trial_id for t in trials}
    assert not results.missing_shards and len(results.frame) == 2 * 5  # every 90th of 450
    state = _cluster_state(fake_cluster)
    assert any(n.get("GPU") == 1 for n in state["nodes"])  # the worker the autoscaler added
    assert state["request"] == []  # released: the cluster may scale back down


def test_a_trial_no_node_type_can_host_is_refused(fake_cluster, tmp_path):
    space = tmp_path / "big.yaml"
    space.write_text(textwrap.dedent(SPACE).replace("gpu: 0.5", "gpu: 2"))
    store = tmp_path / "store"
    args = [
        *SWEEPER,
        "run",
        "grid",
        str(space),
        "--address",
        "auto",
        "--storage",
        str(store),
        "--experiment",
        "big",
        "--wait-for-nodes",
        "5",
    ]
    done = subprocess.run(args, env=fake_cluster, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "gpu=2" in errors[0] and "launched nothing" in errors[0], errors
    assert "Traceback" not in done.stderr
    assert not (store / "big" / "sweep.json").exists()
    assert _cluster_state(fake_cluster)["request"] == []


# ------------------------------------------------------------------------ without a cluster
def test_a_local_ray_without_autoscaler_refuses_at_once(ray_session, tmp_path):
    """The session's local Ray has 2 CPUs and 1 GPU and nothing to add nodes: a trial asking
    for 2 GPUs can never run, and the sweep says so before writing anything."""
    space = tmp_path / "big.yaml"
    space.write_text(textwrap.dedent(SPACE).replace("gpu: 0.5", "gpu: 2"))
    result = CliRunner().invoke(
        app, ["run", "grid", str(space), "--storage", str(tmp_path / "s"), "--experiment", "x"]
    )
    assert result.exit_code == 2, result.output
    assert "gpu=2" in result.output and "no autoscaler" in result.output
    assert not (tmp_path / "s" / "x").exists()


# ------------------------------------------------------------------------ the report's shape
REPORT = {
    "time": 1795446911.25,
    "autoscaler_report": {
        "active_nodes": {"ray.head.default": 1, "gpu_worker": 1},
        "pending_nodes": [["192.0.2.9", "gpu_worker", "setting-up"]],
        "pending_launches": {"gpu_worker": 2},
        "failed_nodes": [["192.0.2.8", "gpu_worker"]],
        "node_availability_summary": {
            "node_availabilities": {
                "gpu_worker": {
                    "is_available": False,
                    "unavailable_node_information": {
                        "category": "LaunchFailed",
                        "description": "InsufficientInstanceCapacity",
                    },
                }
            }
        },
        "node_type_mapping": {"fffff00000": "ray.head.default", "fffff00001": "gpu_worker"},
    },
}


def test_autoscaler_report_is_read():
    scaler = parse_report(REPORT)
    assert scaler.updated == 1795446911.25 and scaler.nodes == 3
    assert scaler.launching == ("2 × gpu_worker", "1 × gpu_worker (setting-up)")
    assert scaler.failures == (
        "gpu_worker: InsufficientInstanceCapacity",
        "gpu_worker failed to start",
    )


def test_a_read_only_provider_is_no_autoscaler():
    from ray.autoscaler._private.util import format_readonly_node_type

    node = "6eefc89d9bdf5f9d80a7f1c87fc13c1de34c99904838160f54a5554e"
    local = {
        "time": 1.0,
        "autoscaler_report": {
            "active_nodes": {format_readonly_node_type(node): 1},
            "node_type_mapping": {node: format_readonly_node_type(node)},
        },
    }
    assert parse_report(local) is None
    assert parse_report({}) is None


def test_cluster_view_hosts_and_describes():
    view = ClusterView(({"CPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}), None)
    assert view.hosts(Resources(cpu=2, gpu=0.5)) and view.hosts(Resources(cpu=1, gpu=0))
    assert not view.hosts(Resources(cpu=3, gpu=0)) and not view.hosts(Resources(cpu=1, gpu=2))
    assert view.describe() == "2 nodes: {CPU: 1}, {CPU: 2, GPU: 1}"
