"""One driver per experiment: a lease that `sweeper run grid`, `certify` and `empirical` hold
for their whole run, so two drivers never race on an experiment's trials and shards.

`<experiment>/lease.json` says who holds it (pid, host, command, since, heartbeat); a thread
rewrites it every `HEARTBEAT_S`. How the lease is taken depends on the storage:

- A local or shared path (NFS/EFS): an exclusive `flock` on `<experiment>/.lease.lock`, held
  while the driver lives. The kernel (or the NFS server, after its client lease of about 90 s)
  frees it when the holder dies, so a dead holder's lease is simply taken over. Guarantee: two
  live drivers never hold it at once (on NFS, as far as its locking is honoured: NFSv4 and EFS
  do; a file system mounted with `nolock` does not).
- An object store (s3://...) has no locks. The lease object is written whole (one PUT) and read
  back after `SETTLE_S`: the driver whose token is there holds it. A lease whose heartbeat is
  older than `STALE_S` (or whose pid is dead on this host) is taken over. Every heartbeat
  re-reads the object; a driver that finds another's token there has lost the lease and stops
  (as on Ctrl-C: state saved, resumable). What it cannot guarantee: two drivers starting within
  the same moment can both run until the next heartbeat (at most `HEARTBEAT_S`); a holder
  paused for longer than `STALE_S` (a suspended laptop) loses its lease to a newcomer.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from sweeper.results.storage import Experiment
from trainables import fileio
from trainables.errors import ProblemsError

log = logging.getLogger(__name__)

HEARTBEAT_S = float(os.environ.get("SWEEPER_LEASE_HEARTBEAT_S", "30"))
STALE_S = float(os.environ.get("SWEEPER_LEASE_STALE_S", "300"))  # no heartbeat for 5 min: gone
SETTLE_S = float(os.environ.get("SWEEPER_LEASE_SETTLE_S", "2"))


class LeaseHeld(ProblemsError):
    """Another live driver holds the experiment."""


class LeaseError(ProblemsError):
    """A lease.json that is not a lease (damaged, or written by something else)."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    command: str
    since: float
    heartbeat: float
    token: str
    released: float | None = None  # when the holder let go (None: still held, or it died)

    @classmethod
    def me(cls, command: str) -> Holder:
        now = time.time()
        return cls(os.getpid(), socket.gethostname(), command, now, now, uuid.uuid4().hex)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on host {self.host} since {since}"

    def alive(self, now: float | None = None) -> bool:
        """Is the holder still there? (not released; its pid on this host, else a recent
        heartbeat)"""
        if self.released is not None:
            return False
        if self.host == socket.gethostname():
            return _pid_alive(self.pid)
        return (now or time.time()) - self.heartbeat < STALE_S


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _interrupt(_: Holder) -> None:
    os.kill(os.getpid(), signal.SIGINT)  # stop like Ctrl-C: Tune saves state, exit 130


def read_holder(exp: Experiment) -> Holder | None:
    """Who holds (or last held) the experiment's lease; None if nobody (or it cannot be read
    right now); LeaseError naming the file if what is there is not a lease."""
    try:
        raw = fileio.read_bytes(exp.lease_json)
    except OSError:
        return None
    try:
        return _holder(json.loads(raw))
    except ValueError as e:  # JSONDecodeError too
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise LeaseError(
            [
                f"cannot read the lease {exp.lease_json} ({why}): if no sweeper command is running "
                f"on experiment {exp.name!r}, delete it and re-run"
            ]
        ) from None


# A lease's timestamps: seconds since the epoch, before the year 5000 (`describe` prints them).
LAST_TIME = 95_617_584_000.0


def _holder(doc: Any) -> Holder:
    """The Holder a lease.json's document says; ValueError saying what is wrong with it."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in ("pid", "host", "command", "since", "heartbeat", "token") if k not in doc]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    if type(doc["pid"]) is not int or doc["pid"] <= 0:
        raise ValueError(f"pid {doc['pid']!r} is not a process id")
    if not all(isinstance(doc[k], str) for k in ("host", "command", "token")):
        raise ValueError("host, command and token must be strings")
    for key in ("since", "heartbeat", "released"):
        value = doc.get(key)
        if value is not None and (
            type(value) not in (int, float) or not 0 <= value <= LAST_TIME  # NaN fails too
        ):
            raise ValueError(f"{key} {value!r} is not a time")
    return Holder(**{k: doc[k] for k in Holder.__dataclass_fields__ if k in doc})


def _current(exp: Experiment) -> Holder | None:
    """read_holder for a driver that holds the lease: what is not a lease is no other's."""
    try:
        return read_holder(exp)
    except LeaseError:
        return None


def held_message(exp: Experiment, holder: Holder | None) -> str:
    who = "another driver that is starting" if holder is None else (
        f"{holder.describe()} (`{holder.command}`)"
    )
    return (
        f"experiment {exp.name!r} is in use by {who}: wait for it to end, stop it (Ctrl-C; "
        "re-running resumes), or pass another --experiment"
    )


class Lease:
    """Hold `exp` for one command: `with Lease(exp, command) as lease: ...`. `lost` is set if
    another driver took the lease (object stores only); the process then gets SIGINT."""

    def __init__(
        self, exp: Experiment, command: str, on_lost: Callable[[Holder], None] | None = None
    ):
        self.exp, self.me = exp, Holder.me(command)
        self.on_lost = on_lost or _interrupt
        self.took_over: Holder | None = None  # the gone holder we replaced, if any
        self.lost: Holder | None = None
        self._lock_fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lease or raise LeaseHeld naming the holder."""
        previous = read_holder(self.exp)
        if fileio.is_uri(self.exp.root):
            self._acquire_object(previous)
        else:
            self._acquire_lock(previous)
        if previous is not None and previous.released is None:
            self.took_over = previous
            log.info("taking over the lease of %r: it is gone", previous.describe())
        self._thread = threading.Thread(target=self._beat, name="sweeper-lease", daemon=True)
        self._thread.start()

    def _acquire_lock(self, previous: Holder | None) -> None:
        import fcntl

        path = fileio.local_path(self.exp.root) / ".lease.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, fileio.FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = read_holder(self.exp)
            live = holder if holder is not None and holder.released is None else None
            raise LeaseHeld([held_message(self.exp, live)]) from None
        self._lock_fd = fd
        self._write()

    def _acquire_object(self, previous: Holder | None) -> None:
        if previous is not None and previous.alive():
            raise LeaseHeld([held_message(self.exp, previous)])
        self._write()
        time.sleep(SETTLE_S)  # a driver that wrote at the same moment: the last PUT wins
        now = read_holder(self.exp)
        if now is None or now.token != self.me.token:
            raise LeaseHeld([held_message(self.exp, now)])

    def _write(self) -> None:
        beat = {**asdict(self.me), "heartbeat": time.time()}
        fileio.write_bytes_atomic(self.exp.lease_json, json.dumps(beat, indent=1).encode())

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S) and self.beat():
            pass

    def beat(self) -> bool:
        """Renew the heartbeat; False once the lease is lost (on an object store, another
        driver's token is in the lease object)."""
        try:
            current = _current(self.exp)
            if fileio.is_uri(self.exp.root) and current and current.token != self.me.token:
                self._lose(current)
                return False
            self._write()
        except OSError as e:  # storage briefly unreachable: try again at the next beat
            log.warning("lease heartbeat failed: %s", e)
        return True

    def _lose(self, thief: Holder) -> None:
        self.lost = thief
        # %r: the thief's host is read from storage, and repr escapes its control characters
        log.error("lost the lease of %r to %r: stopping", self.exp.name, thief.describe())
        self.on_lost(thief)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lost is None:
            current = _current(self.exp)
            if current is not None and current.token == self.me.token:
                done = {**asdict(self.me), "heartbeat": time.time(), "released": time.time()}
                fileio.write_bytes_atomic(self.exp.lease_json, json.dumps(done, indent=1).encode())
        if self._lock_fd is not None:
            self._tidy()  # while the flock is still ours
            os.close(self._lock_fd)  # closing frees the flock
            self._lock_fd = None

    def _tidy(self) -> None:
        """A run that wrote nothing (it stopped before starting) leaves no directory behind."""
        root = fileio.local_path(self.exp.root)
        ours = {".lease.lock", "lease.json"}
        if root.is_dir() and {p.name for p in root.iterdir()} <= ours:
            for name in ours:
                (root / name).unlink(missing_ok=True)
            root.rmdir()
