"""What the cluster pages say to pull back from a cluster is readable in place by the read
commands (issue 29 §3): `sweeper status` on the copy says what it says on the cluster, and
`sweeper envelope` reads the same models.

`sweeper status` reads sweep.json, each trial's trial.json and the lease; the shards alone
(`ray rsync-down` of `certify/` and sweep.json, as documented before) left every trial
`pending` while `envelope` read all the models. The documented command is read from
cluster.yaml and docs/cluster.md, and carried out here as Ray carries it out (rsync with
cluster.yaml's rsync_exclude) on an experiment written by the tests' writers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import certified_rows
import pytest
import yaml
from test_cluster_yaml import rsync_excluded

from sweeper.plan.spec import CertifySpec
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_status import write_status

ROOT = Path(__file__).resolve().parents[1]
SWEEPER = str(Path(sys.executable).parent / "sweeper")
RSYNC_DOWN = re.compile(r"ray rsync-down cluster\.yaml (\S+) (\S+)")


def documented_pulls() -> list[tuple[str, str]]:
    """Every `ray rsync-down` the cluster pages show: (remote, local)."""
    found = []
    for page in (ROOT / "cluster.yaml", ROOT / "docs" / "cluster.md"):
        found += RSYNC_DOWN.findall(page.read_text())
    return found


def remote_experiment(storage: Path) -> Experiment:
    """On the cluster's storage: three certified trials, one stopped at epoch 2 of 4."""
    exp = Experiment(str(storage), "cifar10")
    spec = CertifySpec(n0=10, n=100, alpha=0.001, skip=1, max_points=None)
    adv = dict(method="smoothadv", attack="pgd", epsilon=0.5, steps=2, m_train=1, epochs=1)
    gaussian = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
    trials = {
        gaussian: [100, 100, 99, 97, 95, 90, 85, 70, 60, 40],
        TrialConfig(dataset="digits", sigma=0.25, **adv): [
            100,
            100,
            100,
            99,
            98,
            96,
            90,
            80,
            55,
            45,
        ],
        TrialConfig(dataset="digits", sigma=0.5, **adv): [
            100,
            100,
            100,
            100,
            99,
            95,
            80,
            60,
            45,
            30,
        ],
    }
    stopped = gaussian.replace(sigma=0.5, epochs=4)
    write_sweep(
        exp, {"space": {"name": "cifar10"}, "trials": [c.to_dict() for c in [*trials, stopped]]}
    )
    for cfg, counts in trials.items():
        certified_rows.model(exp, cfg, spec, counts)
        (Path(exp.trial_dir(cfg.trial_id)) / "checkpoint.pt").write_bytes(b"weights")
    write_status(exp.trial_dir(stopped.trial_id), stopped, "running", 2, {})
    return exp


def rsync_down(remote: str, local: str, efs: Path, workdir: Path) -> None:
    """`ray rsync-down cluster.yaml REMOTE LOCAL` with /efs at `efs`, run in `workdir`: rsync -a
    with cluster.yaml's --exclude patterns (Ray passes them on the way down too)."""
    excludes = yaml.safe_load((ROOT / "cluster.yaml").read_text())["rsync_exclude"]
    source = efs / remote.removeprefix("/efs/")
    target = workdir / local
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        return
    # rsync: "dir/" copies what is inside dir into the target, "dir" the folder itself
    base = source if remote.endswith("/") else source.parent
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(base).as_posix()
        if path.is_file() and not rsync_excluded(excludes, rel):
            dest = (target if remote.endswith("/") else target / source.name) / path.relative_to(
                source
            )
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)


def read(storage: Path, *args: str) -> str:
    done = subprocess.run(
        [SWEEPER, *args, "--storage", str(storage), "--experiment", "cifar10"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def states(storage: Path) -> dict[str, str]:
    doc = json.loads(read(storage, "status", "--all", "--format", "json"))
    return {t["trial_id"]: t["state"] for t in doc["trials"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    efs = tmp_path_factory.mktemp("efs")
    remote_experiment(efs / "sweeper")
    return efs


def test_the_documented_pull_is_the_whole_experiment():
    pulls = documented_pulls()
    assert pulls, "the cluster pages say how to pull results back"
    assert set(pulls) == {("/efs/sweeper/cifar10/", "results/cifar10/")}


def test_what_the_documented_pull_brings_back_reads_as_on_the_cluster(cluster, tmp_path):
    on_cluster = states(cluster / "sweeper")
    assert sorted(on_cluster.values()) == ["finished", "finished", "finished", "interrupted"]
    for remote, local in documented_pulls():
        rsync_down(remote, local, cluster, tmp_path)
    assert states(tmp_path / "results") == on_cluster
    radii = ("--radii", "0:1:0.25", "--format", "csv")
    assert read(tmp_path / "results", "envelope", *radii) == read(
        cluster / "sweeper", "envelope", *radii
    )


def test_the_shards_alone_left_every_trial_pending(cluster, tmp_path):
    """What the old pages pulled: the check above would catch it."""
    for remote, local in [
        ("/efs/sweeper/cifar10/certify", "results/cifar10/"),
        ("/efs/sweeper/cifar10/sweep.json", "results/cifar10/sweep.json"),
    ]:
        rsync_down(remote, local, cluster, tmp_path)
    assert set(states(tmp_path / "results").values()) == {"pending"}
