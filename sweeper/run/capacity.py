"""What the connected Ray cluster can host, and waiting for its autoscaler to provide it.

A trial (or a certification task) asks for `Resources(cpu, gpu)`, fractions allowed; it can run
once an alive node has that much. A cluster that has no such node may still grow: an
autoscaler (`ray up`, KubeRay, Ray's fake multi-node provider) launches nodes for demand.
`Capacity` asks it for the sweep's trials with Ray's own `request_resources`, reports the wait,
returns as soon as one trial fits, and raises `CapacityError` when nothing can host a trial: no
autoscaler, an autoscaler that launched nothing for the request over several of its updates
(no node type fits, or every type is at its max_workers), or the wait passing its limit. The
request is shrunk as the sweep drains and released at the end, so the cluster scales down.

The autoscaler's state is read from the report its monitor writes to the GCS key-value store
after every update (`ray status` reads the same report). That key and the read-only provider's
node-type names are private Ray API: Ray is pinned and tests/test_autoscaling.py covers them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from sweeper.plan.spec import Resources
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ProblemsError

log = logging.getLogger(__name__)

QUIET_UPDATES = 3  # autoscaler updates without any launch before a request counts as infeasible


class CapacityError(ProblemsError):
    """No node of the cluster can host a trial, and none is coming."""


@dataclass(frozen=True)
class Autoscaler:
    """The autoscaler's last report: when it was written, what it is launching, what failed."""

    updated: float  # the report's time stamp: a new value at every autoscaler update
    launching: tuple[str, ...]  # e.g. "1 × gpu_worker" (requested, launching or starting up)
    nodes: int  # nodes it manages (head included), alive in Ray or not yet
    failures: tuple[str, ...]  # launch failures it reports


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[Mapping[str, float], ...]  # each alive node's total resources
    autoscaler: Autoscaler | None  # None: nothing can add nodes

    def hosts(self, r: Resources) -> bool:
        """Has some node room for one trial (when idle)?"""
        return any(fits(n, r) for n in self.nodes)

    def describe(self) -> str:
        """e.g. `2 nodes: {CPU: 1}, {CPU: 2, GPU: 1}`."""
        shown = [
            "{" + ", ".join(f"{k}: {n[k]:g}" for k in ("CPU", "GPU") if n.get(k)) + "}"
            for n in self.nodes
        ]
        return f"{len(self.nodes)} node{'s' * (len(self.nodes) != 1)}: " + ", ".join(shown)


def effective_resources(resources: Resources, cpu_only: bool) -> Resources:
    """A trial's resources, or with --cpu-only no GPU (and at least one CPU)."""
    return Resources(cpu=max(resources.cpu, 1.0), gpu=0.0) if cpu_only else resources


def per_process(resources: Resources, trials: list[TrialConfig]) -> Resources:
    """A certification task's share: one process of a data-parallel trial's resources
    (CERTIFY runs in one process, on one GPU)."""
    k = max((t.data_parallel or 1 for t in trials), default=1)
    return Resources(cpu=max(resources.cpu / k, 1.0), gpu=resources.gpu / k) if k > 1 else resources


def fits(room: Mapping[str, float], r: Resources) -> bool:
    """Whether `room` (a node's resources, or what is left of them) holds `r`."""
    return all(room.get(k, 0.0) >= v - 1e-9 for k, v in bundle(r).items())


def asks(r: Resources) -> str:
    return f"cpu={r.cpu:g}, gpu={r.gpu:g}"


def bundle(r: Resources) -> dict[str, float]:
    return {k: v for k, v in (("CPU", r.cpu), ("GPU", r.gpu)) if v > 0}


def read_view() -> ClusterView:
    """The connected cluster (Ray must be initialized)."""
    import ray

    nodes = tuple(dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive"))
    return ClusterView(nodes, read_autoscaler())


def read_autoscaler() -> Autoscaler | None:
    """The autoscaler's report, or None where no autoscaler can launch nodes (a local Ray,
    `ray start` without --autoscaling-config: their monitor runs a read-only provider)."""
    from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
    from ray.experimental.internal_kv import _internal_kv_get

    raw = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return None
    return parse_report(doc)


def parse_report(doc: Mapping) -> Autoscaler | None:
    """An `Autoscaler` from the monitor's status document (see `read_autoscaler`)."""
    from ray.autoscaler._private.util import format_readonly_node_type

    report = doc.get("autoscaler_report") or {}
    mapping = report.get("node_type_mapping") or {}
    if not mapping or all(t == format_readonly_node_type(i) for i, t in mapping.items()):
        return None
    launching = [f"{n} × {t}" for t, n in (report.get("pending_launches") or {}).items()]
    launching += [f"1 × {p[1]} ({p[2]})" for p in report.get("pending_nodes") or [] if len(p) > 2]
    available = (report.get("node_availability_summary") or {}).get("node_availabilities") or {}
    failures = [
        f"{t}: {(a.get('unavailable_node_information') or {}).get('description') or 'unavailable'}"
        for t, a in available.items()
        if not a.get("is_available", True)
    ]
    failures += [f"{f[1]} failed to start" for f in report.get("failed_nodes") or [] if len(f) > 1]
    active = report.get("active_nodes") or {}
    return Autoscaler(
        float(doc.get("time", 0.0)),
        tuple(launching),
        sum(active.values()) + len(report.get("pending_nodes") or []),
        tuple(failures),
    )


@dataclass(frozen=True)
class Waiting:
    """One look at the cluster while waiting for capacity (for a progress display)."""

    elapsed: float
    view: ClusterView
    resources: Resources


class Capacity:
    """A standing request to the autoscaler (if there is one) for `count` trials' worth of
    resources: it scales up for all of them at once, past its upscaling speed."""

    def __init__(self, resources: Resources, count: int):
        self.resources, self.count = resources, 0
        self.autoscaled = read_autoscaler() is not None
        self.set(count)

    def set(self, count: int) -> None:
        """Ask for room for `count` trials at once (0: no request; the cluster may shrink)."""
        from ray.autoscaler.sdk import request_resources

        count = max(0, count)
        if self.autoscaled and count != self.count:
            request_resources(bundles=[bundle(self.resources)] * count)
            self.count = count

    def release(self) -> None:
        self.set(0)

    def wait(self, limit_s: float, on_wait: Callable[[Waiting], None], poll_s: float = 1.0) -> None:
        """Return once a node can host one trial; raise CapacityError if none ever will."""
        updates: set[float] = set()
        start, grew = time.monotonic(), False
        first = read_view()
        while True:
            view = read_view()
            if view.hosts(self.resources):
                return
            problem = self._hopeless(view, first, updates, grew, time.monotonic() - start, limit_s)
            if problem:
                raise CapacityError([problem])
            if view.autoscaler is not None:
                updates.add(view.autoscaler.updated)
                grew = grew or bool(view.autoscaler.launching or view.autoscaler.failures)
                grew = grew or view.autoscaler.nodes > _nodes(first)
            on_wait(Waiting(time.monotonic() - start, view, self.resources))
            time.sleep(poll_s)

    def _hopeless(self, view, first, updates, grew, elapsed, limit_s) -> str | None:
        trial = f"one trial asks for {asks(self.resources)}"
        if view.autoscaler is None:
            return (
                f"no node of the Ray cluster can host a trial: {trial}, the cluster has "
                f"{view.describe()} and no autoscaler to add nodes. Lower `resources` in the "
                "space, pass --cpu-only to train on CPUs, or join a GPU cluster with --address"
            )
        if not grew and len(updates) > QUIET_UPDATES:
            return (
                f"the autoscaler launched nothing in {len(updates) - 1} updates: {trial}, the "
                f"cluster has {view.describe()}; no node type fits it or all are at max_workers "
                "(see `ray status`). Lower `resources` in the space or add a bigger node type"
            )
        if elapsed > limit_s:
            doing = ", ".join(view.autoscaler.launching + view.autoscaler.failures) or "nothing"
            return (
                f"no node for a trial after waiting {elapsed / 60:.1f} min (--wait-for-nodes): "
                f"{trial}, the cluster has {view.describe()}, the autoscaler reports: {doing}. "
                "Raise --wait-for-nodes or check the cluster (`ray status`)"
            )
        return None


@contextmanager
def capacity_for(
    resources: Resources, count: int, limit_s: float, on_wait: Callable[[Waiting], None]
) -> Iterator[Capacity]:
    """Room for `count` trials requested, one of them placeable on entry; released on exit."""
    capacity = Capacity(resources, count)
    try:
        capacity.wait(limit_s, on_wait)
        yield capacity
    finally:
        capacity.release()


def _nodes(view: ClusterView) -> int:
    return view.autoscaler.nodes if view.autoscaler is not None else len(view.nodes)


def cluster_slots(resources: Resources) -> int:
    """How many steps' tasks the Ray cluster (initialized) holds at once at `resources` each."""
    import ray

    total = ray.cluster_resources()
    if resources.gpu:
        return max(1, int(total.get("GPU", 0) / resources.gpu))
    return max(1, int(total.get("CPU", 1) / max(resources.cpu, 1e-6)))


def room_beside_groups(nodes: list[Mapping], groups: list[Mapping], need: Resources) -> bool:
    """Whether some alive node of `nodes` (`ray.nodes()`) has room for `need` outside the
    placement groups created on it (`groups`: `ray.util.placement_group_table()`'s values).
    A group holds its room whether or not anything runs in it: Ray Tune's trials hold theirs
    until Tune processes their actors' stops, and a task outside them cannot use it."""
    held: dict[str, dict[str, float]] = {}
    for group in groups:
        if group.get("state") != "CREATED":
            continue
        where = group.get("bundles_to_node_id", {})
        for index, asked in group.get("bundles", {}).items():
            node = held.setdefault(where.get(index, ""), {})
            for key, amount in asked.items():
                node[key] = node.get(key, 0.0) + amount
    for n in nodes:
        if not n.get("Alive"):
            continue
        total, taken = n.get("Resources", {}), held.get(n.get("NodeID", ""), {})
        if fits({k: v - taken.get(k, 0.0) for k, v in total.items()}, need):
            return True
    return False


def certification_room(need: Resources) -> bool:
    """`room_beside_groups` on the connected cluster (Ray initialized): whether a task of
    `need` could start beside the room placement groups hold."""
    import ray

    groups = list(ray.util.placement_group_table().values())
    return room_beside_groups(ray.nodes(), groups, need)
