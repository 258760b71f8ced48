"""cluster.yaml: valid for the installed Ray's cluster launcher, and the properties we rely on.

Validation runs offline in the order `ray up` uses (ray.autoscaler._private.commands.
_bootstrap_config): Ray's JSON schema, then `prepare_config` (merges the provider's
defaults.yaml, the setup commands and the per-type worker bounds) and `validate_config`
(schema again, head_node_type, sum of min_workers <= max_workers). `ray up` then calls the
AWS provider's `fillout_available_node_types_resources` and `bootstrap_config`, which need
boto3 and AWS credentials (instance types, IAM, subnets, key pairs): those are left to
`ray up` (boto3 is not even installed in the project's venv, and these tests pass). The two util functions are private API; this test is what tells us when a Ray
upgrade changes them (and the schema).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from sweeper.spec import load_space

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@pytest.fixture
def config() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


@pytest.fixture
def prepared(config) -> dict:
    return prepare_config(copy.deepcopy(config))


def worker_types(cfg: dict) -> dict[str, dict]:
    return {k: v for k, v in cfg["available_node_types"].items() if k != cfg["head_node_type"]}


def pyproject_pin(name: str) -> str:
    """`name==version` as pinned in pyproject.toml's dependencies (extras kept)."""
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(rf'"({re.escape(name)}(\[[^\]]*\])?==[^"]+)"', text).group(1)


# ------------------------------------------------------------------ validation
def test_schema_valid(config, schema):
    jsonschema.validate(config, schema)


def test_prepare_and_validate_offline(config, prepared):
    validate_config(prepared)
    assert prepared["cluster_name"] == "sweeper"
    assert prepared["provider"]["type"] == "aws"
    # prepare_config keeps our node types and setup commands (defaults.yaml is merged shallowly).
    assert prepared["available_node_types"] == config["available_node_types"]
    assert (
        prepared["worker_setup_commands"][: len(config["setup_commands"])]
        == (config["setup_commands"])
    )


# ------------------------------------------------------------------ properties we rely on
def test_head_advertises_no_trial_resources(prepared):
    head = prepared["available_node_types"][prepared["head_node_type"]]
    # Absent keys would be autodetected from the instance type, so both must be explicit 0.
    assert head["resources"].get("CPU") == 0
    assert head["resources"].get("GPU") == 0
    assert head["max_workers"] == 0


def test_gpu_workers_fit_the_cifar10_space(prepared):
    workers = worker_types(prepared)
    gpu_types = {k: v for k, v in workers.items() if v["resources"].get("GPU", 0) > 0}
    assert gpu_types, "no GPU worker type"
    trial = load_space("cifar10").resources
    for name, node in gpu_types.items():
        gpus, cpus = node["resources"]["GPU"], node["resources"]["CPU"]
        assert type(gpus) is int and type(cpus) is int, name
        assert gpus >= trial.gpu and cpus >= trial.cpu, name
        # GPU workers scale from zero: `sweeper run` asks the autoscaler for them and waits
        # (tests/test_autoscaling.py); none is paid for while the cluster is idle.
        assert node["min_workers"] == 0 and 1 <= node["max_workers"] <= prepared["max_workers"]


def test_min_workers_within_bounds(prepared):
    for name, node in prepared["available_node_types"].items():
        assert 0 <= node["min_workers"] <= node["max_workers"], name
    total_min = sum(n["min_workers"] for n in prepared["available_node_types"].values())
    assert total_min <= prepared["max_workers"]
    assert prepared["idle_timeout_minutes"] > 0


def test_docker_image_pins_ray_and_python(config):
    repo, _, tag = config["docker"]["image"].partition(":")
    assert repo == "rayproject/ray"
    assert ray.__version__ in tag.split("-")
    assert "py311" in tag.split("-")
    assert tag.endswith("-gpu")
    assert pyproject_pin("ray") == f"ray[tune]=={ray.__version__}"


def test_setup_commands_install_pinned_torch_and_the_project(config):
    commands = " && ".join(config["setup_commands"])
    torch_pin, vision_pin = pyproject_pin("torch"), pyproject_pin("torchvision")
    assert re.search(rf"pip install .*{re.escape(torch_pin)}\b", commands)
    assert vision_pin in commands
    remote, local = next(iter(config["file_mounts"].items()))
    assert local == "."
    assert f"cd {remote} && pip install -q -e ." in commands
    assert commands.index(torch_pin) < commands.index("-e .")


def test_shared_storage_and_auth_token(config):
    init = " ".join(config["initialization_commands"])
    assert "fs-REPLACE_ME" in init and "/efs" in init
    options = " ".join(config["docker"]["run_options"])
    assert "-v /efs:/efs" in options
    assert "RAY_AUTH_MODE=token" in options
    token_path = re.search(r"RAY_AUTH_TOKEN_PATH=(\S+)", options).group(1)
    assert token_path in init


def dashboard_hosts(commands: list[str]) -> list[str]:
    args = [a for c in commands for a in shlex.split(c.replace(";", " "))]
    hosts = [a.split("=", 1)[1] for a in args if a.startswith("--dashboard-host=")]
    hosts += [args[i + 1] for i, a in enumerate(args) if a == "--dashboard-host"]
    return hosts


def test_dashboard_is_not_public(config):
    hosts = dashboard_hosts(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert hosts, "say where the dashboard binds"
    assert all(h in ("127.0.0.1", "localhost", "::1") for h in hosts), hosts
    assert dashboard_hosts(["ray start --head --dashboard-host 0.0.0.0"]) == ["0.0.0.0"]


# ------------------------------------------------------------------ the validation catches errors
def test_missing_cluster_name_fails_schema(config, schema):
    del config["cluster_name"]
    with pytest.raises(jsonschema.ValidationError, match="cluster_name"):
        jsonschema.validate(config, schema)


def test_fractional_node_resources_fail(config, schema):
    worker = next(iter(worker_types(config)))
    config["available_node_types"][worker]["resources"] = {"CPU": 48, "GPU": 0.5}
    with pytest.raises(jsonschema.ValidationError, match=r"0\.5"):
        jsonschema.validate(config, schema)
    with pytest.raises(jsonschema.ValidationError, match=r"0\.5 is not of type .integer."):
        validate_config(prepare_config(config))


def test_unknown_top_level_key_fails(config, schema):
    config["max_wokers"] = 4
    with pytest.raises(jsonschema.ValidationError, match="max_wokers"):
        jsonschema.validate(config, schema)


def test_min_workers_above_global_max_fails(config):
    worker = next(iter(worker_types(config)))
    config["available_node_types"][worker]["min_workers"] = config["max_workers"] + 1
    with pytest.raises(ValueError, match="max_workers"):
        validate_config(prepare_config(config))


def test_unknown_head_node_type_fails(config):
    config["head_node_type"] = "no-such-type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(prepare_config(config))
