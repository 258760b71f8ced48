"""Every node runs the driver's sweeper, torch and ray (issue 16 item 6)."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

from sweeper.run.versions import cluster_versions, differences, local_versions, source_digest

ROOT = Path(__file__).resolve().parents[1]
DRIVER = {"sweeper": "0.1.0+0123456789ab", "torch": "2.14.1", "ray": "2.60.0"}


def test_differences_name_the_node_the_package_and_both_versions():
    nodes = {
        "10.0.1.7 (3f2a9c1d)": {**DRIVER, "torch": "2.13.0"},
        "10.0.1.8 (77aa0b2e)": dict(DRIVER),
        "10.0.1.9 (0c0ffee0)": {"sweeper": "0.1.0+fedcba987654", "ray": "2.60.0"},
    }
    lines = differences(DRIVER, nodes)
    assert [line.split(":")[0] for line in lines] == [
        "node 10.0.1.7 (3f2a9c1d) runs torch 2.13.0, the driver torch 2.14.1",
        "node 10.0.1.9 (0c0ffee0) runs sweeper 0.1.0+fedcba987654, the driver sweeper 0.1.0+0123456789ab",
        "node 10.0.1.9 (0c0ffee0) runs torch not installed, the driver torch 2.14.1",
    ]
    assert all("requirements/cluster.txt" in line for line in lines)
    assert differences(DRIVER, {"a": dict(DRIVER)}) == []


def test_local_versions_are_the_installed_ones_and_the_source():
    mine = local_versions()
    assert mine["torch"] == importlib.metadata.version("torch")
    assert mine["ray"] == importlib.metadata.version("ray")
    version, digest = mine["sweeper"].split("+")
    assert version == importlib.metadata.version("sweeper")
    assert digest == source_digest([ROOT / "sweeper", ROOT / "trainables"])


def test_the_source_digest_tells_two_checkouts_apart(tmp_path):
    copies = [tmp_path / "a", tmp_path / "b"]
    for copy in copies:
        for package in ("sweeper", "trainables"):
            shutil.copytree(
                ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
            )
    digests = [source_digest([c / "sweeper", c / "trainables"]) for c in copies]
    assert digests[0] == digests[1] == source_digest([ROOT / "sweeper", ROOT / "trainables"])
    with (copies[1] / "trainables" / "train.py").open("a") as f:
        f.write("\n# edited on one node only\n")
    assert source_digest([copies[1] / "sweeper", copies[1] / "trainables"]) != digests[0]


def test_every_node_of_the_session_ray_runs_the_drivers_versions(ray_session):
    answers, silent = cluster_versions(timeout_s=120)
    alive = [n for n in ray_session.nodes() if n["Alive"]]
    assert silent == [] and len(answers) == len(alive) >= 1
    assert all(versions == local_versions() for versions in answers.values())
    assert differences(local_versions(), answers) == []
