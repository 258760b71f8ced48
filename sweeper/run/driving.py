"""What a driver holds while it runs work on Ray: the experiment's lease, a connection to Ray,
and room on the cluster (waiting for an autoscaler to provide it), with the nodes' versions
checked, and a watch on Ray itself (`RayWatch`: when its GCS goes away, `RayLost`, never a
silent exit). Who is told what, and how, is the caller's (`Watchers`): the command line shows
a live line and its progress display, the Python API logs."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sweeper.plan.spec import Resources
from sweeper.results.storage import Experiment
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    from sweeper.run.capacity import Capacity

log = logging.getLogger(__name__)


class WaitWatcher(Protocol):
    """Told of each wait for room on the cluster (`capacity.Waiting`), then closed when the
    room is there (or the wait failed)."""

    def __call__(self, waiting: Any) -> None: ...

    def close(self) -> None: ...


class LoggedWait:
    """The Python API's wait watcher: one log line per change of what the cluster has."""

    def __init__(self) -> None:
        self.last = ""

    def __call__(self, waiting: Any) -> None:
        what = waiting.view.describe()
        if what != self.last:
            log.info("waiting for room on the cluster (%.0f s): it has %s", waiting.elapsed, what)
            self.last = what

    def close(self) -> None:
        pass


def _log_event(event: Any) -> None:
    log.debug("%s %s %s", event.kind, event.trial_id, event.detail)


def _logged_progress(exp: Experiment) -> AbstractContextManager[Callable[[Any], None]]:
    return nullcontext(_log_event)


def _log_plan(plan: Any, resources: Resources, states: dict) -> None:
    log.info("%s: %d of %d trials selected", plan.exp.root, len(plan.trials), len(plan.all_trials))


@dataclass(frozen=True)
class Watchers:
    """Who drives and who watches a run: `holder`, the driver as the lease names it (the
        command line as typed, or the Python caller); `progress(exp)`, a context manager giving
        the callback every `shards.Event` goes to; `waiting()`, a new `WaitWatcher`; `warn`, a
        warning line (a lease taken over, a node that did not report its versions); `note`, a line
    of what is being done (nothing to do, an experiment moved aside); `planned(plan, resources,
    states)`, the plan of a run about to start, with each selected trial's trial.json."""

    holder: str = "sweeper.Sweep (Python)"
    only: str | None = None  # the slice run (`--only`), recorded in the lease for `status`
    progress: Callable[[Experiment], AbstractContextManager[Callable[[Any], None]]] = field(
        default=_logged_progress
    )
    waiting: Callable[[], WaitWatcher] = field(default=LoggedWait)
    warn: Callable[[str], None] = field(default=log.warning)
    note: Callable[[str], None] = field(default=log.info)
    planned: Callable[[Any, Resources, dict], None] = field(default=_log_plan)
    ray_lost: Callable[[str], None] = field(default=log.error)


# Seconds Ray's GCS may stay unreachable before the run is given up: Ray itself ends a driver
# whose GCS is gone for 60 s, with no word a person can act on (`RayWatch`).
RAY_LOST_S = 20.0
POLL_S = 2.0


class RayLost(Exception):
    """Ray went away under a run (its GCS unreachable, or Ray's own system error): one line
    saying so; re-running the same command resumes (finished work is kept)."""


def gcs_address() -> tuple[str, int] | None:
    """(host, port) of the connected Ray's GCS (None: not known, e.g. a Ray client)."""
    try:
        import ray

        host, _, port = str(ray.get_runtime_context().gcs_address).rpartition(":")
        return host, int(port)
    except Exception:  # a client connection, an older Ray: no watch
        return None


def reachable(address: tuple[str, int], timeout: float = POLL_S) -> bool:
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError:
        return False
    return True


def lost_line(address: tuple[str, int] | None, cause: str) -> str:
    where = f" at {address[0]}:{address[1]}" if address is not None else ""
    return f"Ray went away under the run (its GCS{where} {cause})"


class RayWatch:
    """While a run uses Ray, polls its GCS every `POLL_S`; unreachable for `limit` seconds,
    it tells `lost` one line (the command line: an `error:` line and how to resume), calls
    `release` (the run's lease: the next run need not find its holder gone) and ends the
    process with exit 1, before Ray's own exit would end it without a word."""

    def __init__(
        self,
        address: tuple[str, int] | None,
        lost: Callable[[str], None],
        limit: float = RAY_LOST_S,
        exit: Callable[[int], Any] = os._exit,
        release: Callable[[], None] = lambda: None,
    ):
        self.address, self.lost, self.limit, self.exit = address, lost, limit, exit
        self.release = release
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="sweeper-ray-watch", daemon=True)

    def __enter__(self) -> RayWatch:
        if self.address is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()

    def _watch(self) -> None:
        assert self.address is not None
        since = None
        while not self.stop.wait(POLL_S):
            if reachable(self.address):
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self.limit and not self.stop.is_set():
                self.lost(lost_line(self.address, f"unreachable for {self.limit:.0f} s"))
                try:  # the process ends here: no `with` block will release it
                    self.release()
                except Exception as e:  # storage gone too: the lease goes stale instead
                    log.warning("could not release the lease: %s", e)
                sys.stdout.flush()
                sys.stderr.flush()
                self.exit(1)
                return


def ray_lost(e: BaseException, address: tuple[str, int] | None) -> RayLost | None:
    """`e`, raised under a run, as Ray's death: Ray's own system error, or any error while
    its GCS cannot be reached (None: an error of the run itself)."""
    import ray.exceptions

    if isinstance(e, ray.exceptions.RaySystemError):
        return RayLost(lost_line(address, f"failed: {str(e).strip().splitlines()[0]}"))
    if address is not None and not reachable(address):
        return RayLost(lost_line(address, f"unreachable: {type(e).__name__}"))
    return None


def check_node_versions(warn: Callable[[str], None]) -> None:
    """Every alive node must run the driver's sweeper, torch and ray (sweeper.run.versions):
    ProblemsError naming each difference; a node that does not answer is a warning."""
    from sweeper.run.versions import CHECK_TIMEOUT_S, version_problems

    problems, silent = version_problems()
    for node in silent:
        warn(f"node {node} did not report its versions within {CHECK_TIMEOUT_S:.0f} s: not checked")
    if problems:
        raise ProblemsError(problems)


@contextmanager
def watching_ray(
    lost: Callable[[str], None], release: Callable[[], None] = lambda: None
) -> Iterator[None]:
    """The connected Ray watched (`RayWatch`, which calls `release` before it ends the
    process); an error that is Ray's death, `RayLost`."""
    gcs = gcs_address()
    with RayWatch(gcs, lost, release=release):
        try:
            yield
        except Exception as e:
            if (gone := ray_lost(e, gcs)) is not None:
                raise gone from None
            raise


@contextmanager
def driving(
    exp: Experiment,
    address: str | None,
    resources: Resources,
    count: int,
    wait_minutes: float,
    watchers: Watchers,
) -> Iterator[Capacity]:
    """Hold `exp` (its lease), connect to Ray, wait for room for one of `count` trials
    (asking an autoscaler for all of them) and check that the nodes run the driver's versions;
    yields the `Capacity` request, released on exit. Any problem: `ProblemsError`; Ray gone
    under the run: `RayLost` (or, its GCS unreachable for `RAY_LOST_S`, exit 1 by `RayWatch`
    after telling `watchers.ray_lost`)."""
    from sweeper.results.inventory import sign_if_keyed
    from sweeper.results.lease import Lease
    from sweeper.run.capacity import capacity_for
    from sweeper.run.launch import ray_cluster

    if links := exp.link_problems():  # before the lease: its lock file is inside too
        raise ProblemsError(links)
    display = watchers.waiting()
    try:
        with Lease(exp, watchers.holder, only=watchers.only) as lease, ray_cluster(address):
            if lease.took_over is not None:
                watchers.warn(f"took over the lease of {lease.took_over.describe()}, which is gone")
            try:
                with capacity_for(resources, count, wait_minutes * 60, display) as capacity:
                    display.close()
                    check_node_versions(watchers.warn)
                    with watching_ray(watchers.ray_lost, lease.release):
                        yield capacity
            finally:  # still holding the lease: what the run left, signed
                sign_if_keyed(exp)
    finally:
        display.close()
