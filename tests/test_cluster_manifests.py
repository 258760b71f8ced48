"""cluster/kuberay/rayjob.yaml against KubeRay's RayJob schema, and the properties we rely on;
cluster/slurm/sweeper.sbatch parses and follows Ray's recipe.

The schema is the `openAPIV3Schema` of KubeRay v1.7.0's CRD (ray-project/kuberay, tag v1.7.0,
commit 59d663aeec13760646da3db9c1cf8cfe883e30b7,
ray-operator/config/crd/bases/ray.io_rayjobs.yaml), stored compact and gzipped in tests/data.
The API server checks the same schema; it also refuses (strict field validation) or drops
fields the schema does not declare, which `unknown_fields` finds here."""

from __future__ import annotations

import gzip
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import ray
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "data" / "kuberay-v1.7.0-rayjob.schema.json.gz"
RAYJOB = ROOT / "cluster" / "kuberay" / "rayjob.yaml"
READER = ROOT / "cluster" / "kuberay" / "results-reader.yaml"
SBATCH = ROOT / "cluster" / "slurm" / "sweeper.sbatch"


def schema() -> dict:
    return json.loads(gzip.decompress(SCHEMA.read_bytes()))


def manifest() -> dict:
    return yaml.safe_load(RAYJOB.read_text())


def unknown_fields(value: Any, node: dict, path: str = "") -> list[str]:
    """Keys of `value` that `node` (a structural schema) does not declare, recursively."""
    found = []
    if isinstance(value, dict) and "properties" in node:
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return []
        for key, sub in value.items():
            if key not in node["properties"]:
                found.append(f"{path}.{key}")
            else:
                found += unknown_fields(sub, node["properties"][key], f"{path}.{key}")
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        for key, sub in value.items():
            found += unknown_fields(sub, node["additionalProperties"], f"{path}.{key}")
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            found += unknown_fields(item, node["items"], f"{path}[{i}]")
    return found


def test_the_rayjob_is_valid_against_kuberays_schema():
    errors = [e.message for e in jsonschema.Draft7Validator(schema()).iter_errors(manifest())]
    assert errors == []
    assert unknown_fields(manifest(), schema()) == []


def test_the_schema_check_catches_mistakes():
    broken = manifest()
    broken["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = "zero"
    broken["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "imagee"
    ] = "x"
    errors = list(jsonschema.Draft7Validator(schema()).iter_errors(broken))
    assert [list(e.path)[-1] for e in errors] == ["minReplicas"]
    assert unknown_fields(broken, schema()) == [
        ".spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].imagee"
    ]


def test_the_rayjob_runs_sweeper_on_an_autoscaling_gpu_group_with_the_projects_ray():
    spec = manifest()["spec"]
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == ray.__version__
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (gpu,) = cluster["workerGroupSpecs"]
    assert (gpu["minReplicas"], gpu["replicas"]) == (0, 0) and gpu["maxReplicas"] >= 1
    worker = gpu["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    pods = [
        cluster["headGroupSpec"]["template"]["spec"],
        gpu["template"]["spec"],
        spec["submitterPodTemplate"]["spec"],
    ]
    assert {c["image"] for p in pods for c in p["containers"]} == {"REGISTRY/sweeper:TAG"}
    mounts = [
        {m["mountPath"] for m in p["containers"][0].get("volumeMounts", [])} for p in pods[:2]
    ]
    assert all("/mnt/sweeper" in m for m in mounts)
    words = shlex.split(spec["entrypoint"])
    assert words[:4] == ["sweeper", "run", "grid", "cifar10"]
    assert words[words.index("--storage") + 1].startswith("/mnt/sweeper/")
    assert "--address" not in words  # `ray job submit` sets RAY_ADDRESS, which sweeper joins
    assert spec["shutdownAfterJobFinishes"] is True


def test_the_slurm_script_parses_and_follows_rays_recipe():
    assert subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True).returncode == 0
    text = SBATCH.read_text()
    assert "ray start --head" in text and 'ray start --address="$address"' in text
    assert 'sweeper run grid "$SPACE" --address "$address"' in text
    assert (SBATCH.stat().st_mode & 0o111) != 0


def pods(spec: dict) -> dict[str, dict]:
    """The RayJob's pod specs: head, each worker group, the submitter."""
    cluster = spec["rayClusterSpec"]
    out = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    for group in cluster["workerGroupSpecs"]:
        out[group["groupName"]] = group["template"]["spec"]
    out["submitter"] = spec["submitterPodTemplate"]["spec"]
    return out


TOKEN = {"secretKeyRef": {"name": "sweeper-ray-token", "key": "auth_token"}}


def token_auth_problems(spec: dict) -> list[str]:
    """Containers of the RayJob that would start Ray, or talk to it, without the token."""
    problems = []
    auth = spec["rayClusterSpec"].get("authOptions") or {}
    if auth.get("mode") != "token" or auth.get("secretName") != TOKEN["secretKeyRef"]["name"]:
        problems.append(f"authOptions: {auth}")
    for name, pod in pods(spec).items():
        for container in pod["containers"]:
            env = {e["name"]: e for e in container.get("env", [])}
            if env.get("RAY_AUTH_MODE", {}).get("value") != "token":
                problems.append(f"{name}/{container['name']}: RAY_AUTH_MODE")
            if env.get("RAY_AUTH_TOKEN", {}).get("valueFrom") != TOKEN:
                problems.append(f"{name}/{container['name']}: RAY_AUTH_TOKEN")
            if "RAY_AUTH_TOKEN" in env and "value" in env["RAY_AUTH_TOKEN"]:
                problems.append(f"{name}/{container['name']}: a token written in the manifest")
    return problems


def test_every_pod_of_the_rayjob_uses_token_authentication_from_a_secret():
    spec = manifest()["spec"]
    assert token_auth_problems(spec) == []
    assert set(pods(spec)) == {"head", "gpu", "submitter"}
    # KubeRay v1.7.0 reads the token under this key (RAY_AUTH_TOKEN_SECRET_KEY)
    text = RAYJOB.read_text()
    assert "kubectl create secret generic sweeper-ray-token --from-literal=auth_token=" in text
    # the check finds a pod left open, and a token written in the file
    for edit in (
        lambda s: s["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][
            0
        ].pop("env"),
        lambda s: s["rayClusterSpec"].pop("authOptions"),
        lambda s: s["submitterPodTemplate"]["spec"]["containers"][0]["env"].__setitem__(
            1, {"name": "RAY_AUTH_TOKEN", "value": "abc", "valueFrom": TOKEN}
        ),
    ):
        broken = manifest()["spec"]
        edit(broken)
        assert token_auth_problems(broken) != []


def test_the_results_reader_mounts_the_rayjobs_volume_and_validates_as_a_pod():
    reader = yaml.safe_load(READER.read_text())
    assert (reader["apiVersion"], reader["kind"]) == ("v1", "Pod")
    assert set(reader) == {"apiVersion", "kind", "metadata", "spec"}
    # the PodSpec schema of Kubernetes, as KubeRay's CRD embeds it for the submitter's pod
    pod_spec = schema()["properties"]["spec"]["properties"]["submitterPodTemplate"]["properties"][
        "spec"
    ]
    errors = [e.message for e in jsonschema.Draft7Validator(pod_spec).iter_errors(reader["spec"])]
    assert errors == []
    assert unknown_fields(reader["spec"], pod_spec) == []
    broken = yaml.safe_load(READER.read_text())["spec"]
    broken["containers"][0]["volumeMount"] = broken["containers"][0].pop("volumeMounts")
    assert unknown_fields(broken, pod_spec) == [".containers[0].volumeMount"]
    # the same claim at the same path, and the same image, as the RayJob's pods
    job = pods(manifest()["spec"])
    (container,) = reader["spec"]["containers"]
    for name in ("head", "gpu"):
        assert job[name]["volumes"][0] == reader["spec"]["volumes"][0]
        assert job[name]["containers"][0]["volumeMounts"][0] == container["volumeMounts"][0]
        assert job[name]["containers"][0]["image"] == container["image"]
    # its commands read where the RayJob's entrypoint writes
    storage = shlex.split(manifest()["spec"]["entrypoint"])
    storage = storage[storage.index("--storage") + 1]
    commands = re.findall(
        r"kubectl exec sweeper-results-reader -- (sweeper .*)", READER.read_text()
    )
    assert len(commands) >= 3
    for command in commands:
        words = shlex.split(command)
        assert words[words.index("--storage") + 1] == storage
    assert reader["metadata"]["name"] == "sweeper-results-reader"
    assert 0 < reader["spec"]["activeDeadlineSeconds"] <= 24 * 3600


def run_sbatch(tmp: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The sbatch script on a 2-node "allocation" of stand-ins: srun runs its command here,
    scontrol names two nodes, and `ray`, `sweeper` and `sleep` log what they were started with
    and what token they could read. Returns the run and the log's lines."""
    bin_dir, log = tmp / "bin", tmp / "calls.log"
    bin_dir.mkdir(parents=True)
    seen = (
        f'f="$RAY_AUTH_TOKEN_PATH"; echo "$(basename $0) $* | mode=$RAY_AUTH_MODE '
        f'file=$f perm=$(stat -c %a "$f") token=$(cat "$f")" >> {log}'
    )
    shims = {
        "srun": 'while [[ "$1" == -* ]]; do [[ "$1" == -w ]] && shift; shift; done; exec "$@"',
        "scontrol": "echo node-1; echo node-2",
        "hostname": "echo 10.0.0.1",
        "ray": seen,
        "sweeper": seen,
        "sleep": "exec /bin/sleep 0.3",  # the script's waits, shortened
    }
    for name, body in shims.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    venv = tmp / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "activate").write_text("")
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp / "home"),
        "SWEEPER_VENV": str(tmp / "venv"),
        "SLURM_JOB_NODELIST": "node-[1-2]",
        "SLURM_JOB_ID": "4242",
        "SLURM_CPUS_PER_TASK": "32",
        "SLURM_GPUS_PER_TASK": "4",
    }
    done = subprocess.run(
        ["bash", str(SBATCH), "cifar10", "/shared/sweeper", "/shared/data"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, log.read_text().splitlines() if log.exists() else []


def test_the_slurm_script_starts_ray_and_the_driver_with_a_token_only_its_user_reads(tmp_path):
    done, calls = run_sbatch(tmp_path)
    assert done.returncode == 0, done.stderr
    starts = sorted(
        (c for c in calls if c.startswith("ray start")), key=lambda c: "--head" not in c
    )
    drivers = [c for c in calls if c.startswith("sweeper ")]
    assert len(starts) == 2 and "--head" in starts[0] and "--dashboard-host=127.0.0.1" in starts[0]
    assert [d.split(" |")[0] for d in drivers] == [
        "sweeper run grid cifar10 --address 10.0.0.1:6379 --storage /shared/sweeper --data-dir /shared/data",
        "sweeper envelope --storage /shared/sweeper --experiment cifar10 --radii 0:2.25:0.25",
    ]
    token_file = tmp_path / "home" / ".ray" / "sweeper-4242.token"
    tokens = set()
    for call in starts + drivers:
        fields = dict(f.split("=", 1) for f in call.split(" | ")[1].split())
        assert fields["mode"] == "token" and fields["file"] == str(token_file), call
        assert fields["perm"] == "600", call
        tokens.add(fields["token"])
    (token,) = tokens  # one token for the whole cluster, a fresh 256-bit one
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    assert oct(token_file.parent.stat().st_mode & 0o777) == "0o700"
    assert not token_file.exists()  # removed when the job ends
    assert run_sbatch(tmp_path / "again")[1][0].split("token=")[1] != token


def test_every_cluster_keeps_idle_workers_as_long_as_the_local_ray():
    """`launch.IDLE_WORKER_MS` (a local Ray's `_system_config`) is what the nodes of the
    cluster YAML, the RayJob and the Slurm script start Ray with."""
    from sweeper.run.launch import IDLE_WORKER_MS, LOCAL_RAY

    name = "idle_worker_killing_time_threshold_ms"
    assert {name: IDLE_WORKER_MS} == LOCAL_RAY
    setting = f"RAY_{name}={IDLE_WORKER_MS}"
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert f"--env {setting}" in config["docker"]["run_options"]
    assert f"export {setting}\n" in SBATCH.read_text()
    for pod_name, pod in pods(manifest()["spec"]).items():
        for container in pod["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if pod_name != "submitter":
                assert env.get(f"RAY_{name}") == str(IDLE_WORKER_MS), (pod_name, env)


def test_a_local_ray_keeps_idle_workers_and_a_joined_cluster_keeps_its_own(monkeypatch):
    from sweeper.run import launch

    calls: list[dict] = []
    monkeypatch.setattr(launch.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(launch.ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(launch.ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for address in (None, "10.0.0.1:6379"):
        with launch.ray_cluster(address):
            pass
    assert calls[0]["address"] == "local" and calls[0]["_system_config"] == launch.LOCAL_RAY
    assert calls[1]["address"] == "10.0.0.1:6379" and "_system_config" not in calls[1]
