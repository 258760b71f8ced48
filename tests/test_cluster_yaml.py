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
import fnmatch
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from sweeper.plan.spaces import load_space

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
    # Ray's defaults.yaml must not bring back what cluster.yaml leaves out.
    head = prepared["available_node_types"][prepared["head_node_type"]]["node_config"]
    assert (
        head["IamInstanceProfile"]
        == config["available_node_types"]["head"]["node_config"]["IamInstanceProfile"]
    )
    assert prepared["head_setup_commands"] == config["setup_commands"]  # setup, then nothing more
    assert prepared["rsync_exclude"] == config["rsync_exclude"]


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


def test_gpu_workers_are_spot_first_with_an_on_demand_fallback_of_the_same_shape(prepared):
    """Autoscaler v2 (`ray up`'s default) ranks the types that fit equally by priority and
    falls back from a type whose launch failed; v1 breaks ties by the name sorted last."""
    gpu = {k: v for k, v in worker_types(prepared).items() if v["resources"].get("GPU", 0) > 0}
    market = {
        k: v["node_config"].get("InstanceMarketOptions", {}).get("MarketType")
        for k, v in gpu.items()
    }
    spot = [k for k, m in market.items() if m == "spot"]
    on_demand = [k for k, m in market.items() if m is None]
    assert spot and on_demand, market
    for s in spot:
        for d in on_demand:
            assert gpu[s]["priority"] > gpu[d].get("priority", 0) and s > d, (s, d)
            assert gpu[s]["resources"] == gpu[d]["resources"]
            same = {k: v for k, v in gpu[s]["node_config"].items() if k != "InstanceMarketOptions"}
            assert same == gpu[d]["node_config"], (s, d)


def test_min_workers_within_bounds(prepared):
    for name, node in prepared["available_node_types"].items():
        assert 0 <= node["min_workers"] <= node["max_workers"], name
    total_min = sum(n["min_workers"] for n in prepared["available_node_types"].values())
    assert total_min <= prepared["max_workers"]
    assert prepared["idle_timeout_minutes"] > 0


IMAGE = re.compile(r"rayproject/ray:(?P<tag>[\w.-]+)@sha256:(?P<digest>[0-9a-f]{64}|REPLACE_ME)")


def test_docker_image_pins_ray_and_python_by_digest(config):
    image = IMAGE.fullmatch(config["docker"]["image"])
    assert image, config["docker"]["image"]
    tag = image["tag"]
    assert ray.__version__ in tag.split("-") and "py311" in tag.split("-") and tag.endswith("-gpu")
    assert pyproject_pin("ray") == f"ray[tune]=={ray.__version__}"
    # The digest placeholder and the command that gets it name the same image and tag.
    text = (ROOT / "cluster.yaml").read_text()
    assert f"docker buildx imagetools inspect rayproject/ray:{tag} " in text
    if image["digest"] == "REPLACE_ME":
        assert "replace sha256:REPLACE_ME" in text
    assert (
        f"docker buildx imagetools inspect rayproject/ray:{tag}"
        in (ROOT / "docs" / "security.md").read_text()
    )


def locked() -> dict[str, tuple[str, list[str]]]:
    """requirements/cluster.txt: name -> (version, its sha256 hashes)."""
    text = (ROOT / "requirements" / "cluster.txt").read_text()
    entries = re.findall(
        r"^([A-Za-z0-9_.-]+)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", text, re.M
    )
    return {
        name.lower().replace("_", "-"): (version, re.findall(r"sha256:([0-9a-f]{64})", hashes))
        for name, version, hashes in entries
    }


def test_lock_file_pins_every_dependency_with_hashes():
    from packaging.requirements import Requirement

    lock = locked()
    text = (ROOT / "requirements" / "cluster.txt").read_text()
    requirement_lines = [ln for ln in text.splitlines() if re.match(r"^[A-Za-z0-9]", ln)]
    assert len(requirement_lines) == len(lock) > 20  # every requirement pinned and hashed
    assert "make lock" in text.splitlines()[1]  # how to regenerate it
    pyproject = (ROOT / "pyproject.toml").read_text()  # no tomllib: Python 3.10 is supported
    block = re.search(r"^dependencies = \[(.*?)^\]", pyproject, re.S | re.M).group(1)
    cluster = re.search(r"^cluster = \[(.*?)\]", pyproject, re.M).group(1)
    wanted = re.findall(r'"([^"]+)"', block) + re.findall(r'"([^"]+)"', cluster)
    assert len(wanted) > 10 and "boto3>=1.35.69" in wanted  # conditional writes
    for dep in map(Requirement, wanted):
        name = dep.name.lower()
        assert name in lock, f"{name} is not in requirements/cluster.txt: run `make lock`"
        assert dep.specifier.contains(lock[name][0]), (name, str(dep.specifier), lock[name][0])
    assert lock["torch"][0] == pyproject_pin("torch").split("==")[1]
    assert lock["ray"][0] == ray.__version__


def test_setup_commands_install_the_lock_with_hashes_then_the_project(config):
    commands = config["setup_commands"]
    remote, local = next(iter(config["file_mounts"].items()))
    assert local == "."
    assert commands == [
        f"cd {remote} && pip install -q --require-hashes -r requirements/cluster.txt",
        f"cd {remote} && pip install -q --no-deps --no-build-isolation -e .",
    ]
    # Nothing anywhere installs a package outside the lock.
    others = config["head_setup_commands"] + config["worker_setup_commands"]
    assert not [c for c in others if "pip install" in c]


def test_nodes_have_their_own_profiles_security_group_and_imdsv2(config):
    types = config["available_node_types"]
    groups = set()
    for name, node in types.items():
        node_config = node["node_config"]
        assert node_config["MetadataOptions"]["HttpTokens"] == "required", name
        assert node_config["MetadataOptions"]["HttpPutResponseHopLimit"] == 1, name
        assert node_config["IamInstanceProfile"]["Name"].startswith(config["cluster_name"])
        groups.add(tuple(node_config["SecurityGroupIds"]))
    assert groups == {("sg-REPLACE_ME",)}  # one group for all: Ray creates none (SSH 0.0.0.0/0)
    head = types[config["head_node_type"]]["node_config"]["IamInstanceProfile"]
    assert all(
        n["node_config"]["IamInstanceProfile"] != head
        for k, n in types.items()
        if k != config["head_node_type"]
    )
    assert config["provider"]["use_internal_ips"] is False
    assert "security_group" not in config["provider"]


SECRETS = [
    ".env",
    ".env.production",
    "deploy.pem",
    "tls/server.key",
    "credentials",
    "aws/credentials",
    "gcp-credentials.json",
    "id_rsa",
    "id_ed25519.pub",
    ".aws/config",
    ".ssh/known_hosts",
    ".netrc",
    "sub/dir/.env",
]
KEPT = [
    "sweeper/results/storage.py",
    "sweeper/results/credentials.py",
    "README.md",
    "search_spaces/cifar10.yaml",
    "requirements/cluster.txt",
    "cluster/iam/head-policy.json",
    "keys.py",
    "environment.yml",
]


def rsync_excluded(patterns: list[str], path: str) -> bool:
    """rsync's --exclude rule for these patterns: one without "/" matches a name at any depth
    (and then everything below it), "**/" any leading directories."""
    parts = path.split("/")
    for pattern in patterns:
        if "/" not in pattern.rstrip("/"):
            if any(fnmatch.fnmatchcase(part, pattern) for part in parts):
                return True
        elif fnmatch.fnmatchcase("/" + path, "*/" + pattern.removeprefix("**/")):
            return True
    return False


def test_file_mounts_exclude_secrets_explicitly(config, tmp_path):
    excludes = config["rsync_exclude"]
    for needed in (".env", "*.pem", "*.key", "credentials", ".aws", "*credentials*.json"):
        assert needed in excludes
    assert [p for p in SECRETS if not rsync_excluded(excludes, p)] == []
    assert [p for p in KEPT if rsync_excluded(excludes, p)] == []
    # every file of the packages a node installs reaches it (a pattern such as
    # "credentials.*" once left sweeper/results/credentials.py behind)
    sources = [
        p.relative_to(ROOT).as_posix()
        for package in ("sweeper", "trainables", "search_spaces", "requirements")
        for p in (ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert len(sources) > 50
    assert [p for p in sources if rsync_excluded(excludes, p)] == []
    # Ray passes them to rsync as --exclude arguments, beside the .gitignore filter.
    from ray.autoscaler._private.command_runner import SSHCommandRunner

    args = SSHCommandRunner._create_rsync_filter_args(
        None, options={"rsync_exclude": excludes, "rsync_filter": config["rsync_filter"]}
    )
    assert [args[i + 1] for i, a in enumerate(args) if a == "--exclude"] == excludes
    if shutil.which("rsync"):  # the real matcher, where rsync is installed
        for path in SECRETS + KEPT:
            (tmp_path / "src" / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "src" / path).write_text("x")
        out = subprocess.run(
            [
                "rsync",
                "-a",
                "--dry-run",
                "--out-format=%n",
                *args[: 2 * len(excludes)],
                f"{tmp_path / 'src'}/",
                str(tmp_path / "dst"),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        copied = {line for line in out.splitlines() if not line.endswith("/")}
        assert copied == set(KEPT), copied


def test_efs_is_mounted_with_tls(config):
    init = " ".join(config["initialization_commands"])
    assert "mount -t efs -o tls fs-REPLACE_ME:/ /efs" in init
    assert "nfs4" not in init and "-t nfs" not in init
    assert "command -v mount.efs" in init  # efs-utils installed when the AMI lacks it


EFS_UTILS = re.compile(
    r"git clone -q --depth 1 --branch (?P<tag>v[\d.]+) https://github\.com/aws/efs-utils (?P<dir>\S+) &&\s*"
    r'test "\$\(git -C (?P=dir) rev-parse HEAD\)" = (?P<commit>[0-9a-f]{40}) &&'
)


def _run_efs_install(install: str, tmp: Path, head: str) -> tuple[int, str]:
    """The install command under bash with stand-ins for sudo, apt-get and git (whose clone
    makes a build-deb.sh that logs, and whose rev-parse answers `head`): (exit, the log)."""
    bin_dir, log = tmp / "bin", tmp / "log"
    bin_dir.mkdir(exist_ok=True)
    log.write_text("")
    shims = {
        "sudo": '"$@"',
        "apt-get": f'echo "apt-get $*" >> {log}',
        "git": f"""if [ "$1" = clone ]; then d="${{@: -1}}"; mkdir -p "$d";
            printf '#!/bin/sh\\necho build-deb >> {log}\\n' > "$d/build-deb.sh"; chmod +x "$d/build-deb.sh";
            echo "git clone $*" >> {log}; else echo {head}; fi""",
    }
    for name, body in shims.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    command = install.replace("/tmp/efs-utils", str(tmp / "efs-utils"))
    done = subprocess.run(
        ["bash", "-c", command], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True
    )
    return done.returncode, log.read_text()


def test_efs_utils_is_a_pinned_release_checked_before_it_runs(config, tmp_path):
    (install,) = [c for c in config["initialization_commands"] if "efs-utils" in c]
    pinned = EFS_UTILS.search(install)
    assert pinned, install
    assert "curl" not in install and "wget" not in install
    version = pinned["tag"].removeprefix("v")
    deb = f"{tmp_path}/efs-utils/build/amazon-efs-utils-{version}-1_all.deb"
    # the pinned commit: cloned, built with the README's Debian recipe, installed with apt
    code, log = _run_efs_install(install, tmp_path, pinned["commit"])
    assert code == 0, log
    lines = log.splitlines()
    assert lines[-2:] == ["build-deb", f"apt-get install -y -q {deb}"]
    assert f"--branch {pinned['tag']} https://github.com/aws/efs-utils" in log
    # a moved tag or another repository (any other commit): nothing of it runs
    code, log = _run_efs_install(install, tmp_path, "0" * 40)
    assert code != 0 and "build-deb" not in log and deb not in log


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
