"""Every node runs the driver's sweeper, torch and ray, checked when a command starts work.

The image digest and the hash-locked requirements/cluster.txt (cluster.yaml) make nodes alike;
this check catches what they cannot: a node set up by hand, an older image, a worker that ran
another `pip install`, code edited on the head only. One Ray task per alive node (num_cpus=0,
pinned to the node) reports the versions that node's worker processes see; any difference from
the driver's is a problem naming the node, the package and both versions (exit 2 at launch).
Nodes that join later (autoscaling) come up from the same image and lock file.

sweeper's version is its package version plus a digest of its source (sweeper/ and
trainables/): every checkout says 0.1.0, the digest tells two checkouts apart.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Mapping
from pathlib import Path

PACKAGES = ("sweeper", "torch", "ray")
CHECK_TIMEOUT_S = 120.0  # a node's first worker process may take a while to start
_SOURCE_PACKAGES = ("sweeper", "trainables")


def source_digest(roots: list[Path]) -> str:
    """12 hex digits of the SHA-256 of every .py file under `roots` (paths and bytes)."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _installed(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def local_versions() -> dict[str, str]:
    """This process's sweeper (version+source digest), torch and ray versions."""
    import trainables.kernel.config

    # The source is that of the packages holding these very modules, as imported (several
    # checkouts may be on the path).
    roots = [Path(__file__).parents[1], Path(trainables.kernel.config.__file__).parents[1]]
    return {
        "sweeper": f"{_installed('sweeper')}+{source_digest(roots)}",
        "torch": _installed("torch"),
        "ray": _installed("ray"),
    }


def differences(driver: Mapping[str, str], nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per (node, package) whose version is not the driver's."""
    return [
        f"node {node} runs {package} {versions.get(package, 'not installed')}, the driver "
        f"{package} {driver[package]}: every node must run the driver's sweeper, torch and ray "
        "(the image digest and requirements/cluster.txt pin them: rebuild the node with "
        "`ray up cluster.yaml`, or terminate it)"
        for node, versions in sorted(nodes.items())
        for package in PACKAGES
        if versions.get(package, "not installed") != driver[package]
    ]


def _node_name(node: Mapping) -> str:
    return f"{node.get('NodeManagerAddress', '?')} ({str(node['NodeID'])[:8]})"


def cluster_versions(timeout_s: float = CHECK_TIMEOUT_S) -> tuple[dict[str, dict], list[str]]:
    """({node name: its versions}, names of alive nodes that did not answer in `timeout_s`)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    report = ray.remote(num_cpus=0, max_retries=0)(local_versions)
    asked = {
        report.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(): _node_name(node)
        for node in ray.nodes()
        if node.get("Alive")
    }
    ready, pending = ray.wait(list(asked), num_returns=len(asked), timeout=timeout_s)
    answers: dict[str, dict] = {}
    silent = [asked[ref] for ref in pending]
    for ref in ready:
        try:
            answers[asked[ref]] = ray.get(ref)
        except ray.exceptions.RayError:  # the node died meanwhile: nothing runs there now
            silent.append(asked[ref])
    for ref in pending:
        ray.cancel(ref, force=True)
    return answers, sorted(silent)


def version_problems(timeout_s: float = CHECK_TIMEOUT_S) -> tuple[list[str], list[str]]:
    """(a line per version that differs from the driver's, nodes that did not answer)."""
    answers, silent = cluster_versions(timeout_s)
    return differences(local_versions(), answers), silent
