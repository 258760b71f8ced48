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
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import ray
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "data" / "kuberay-v1.7.0-rayjob.schema.json.gz"
RAYJOB = ROOT / "cluster" / "kuberay" / "rayjob.yaml"
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
