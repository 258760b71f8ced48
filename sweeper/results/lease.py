"""One driver per experiment: a lease that `sweeper run grid`, `certify` and `empirical` hold
for their whole run, so two drivers never race on an experiment's trials and shards.

`<experiment>/lease.json` says who holds it (`lease_holder`: pid, host, command, the slice it
runs, since, heartbeat); a thread
rewrites it every `HEARTBEAT_S`. How the lease is taken depends on the storage:

- A local or shared path (NFS/EFS): an exclusive `flock` on `<experiment>/.lease.lock`, held
  while the driver lives. The kernel (or the NFS server, after its client lease of about 90 s)
  frees it when the holder dies, so a dead holder's lease is simply taken over. Guarantee: two
  live drivers never hold it at once (on NFS, as far as its locking is honoured: NFSv4 and EFS
  do; `nolock` mounts do not). A holder that leaves nothing else behind removes the lock file
  as it lets go, so after `flock` a driver checks that its file is still the one at the path
  (else it locked a removed file) and opens it again if not (`lease_lock`). The holder checks
  the same at each heartbeat: a lock file removed or replaced under it (`rm .lease.lock`) is
  locked again if no other driver has locked it or written lease.json since; else the lease
  was taken over, and the holder stops as on Ctrl-C (as on S3). A symlink at `.lease.lock`
  (or below the storage) is refused (`fileio.LinkError`), never followed.
- S3 (a plain s3://bucket/key, with boto3: the `cluster` extra; `lease_s3`): the lease object
  is created only if there is none (`If-None-Match: *`), and renewed, released or taken over
  only if it is still the version read (`If-Match: <ETag>`). Guarantee: two drivers never both
  hold it; of drivers racing for it one PUT lands, the others get LeaseHeld. A holder whose
  lease was taken over (it paused beyond `STALE_S`) learns so at its next heartbeat, when its
  renewal is refused, and stops as on Ctrl-C (state saved, resumable).
- Any other object store (gs://, s3:// with options, S3 without boto3): the lease object is
  written whole (one PUT) and read back after `SETTLE_S`: the driver whose token is there holds
  it; a heartbeat that finds another's token there has lost it. Not guaranteed: two drivers
  starting within the same moment can both run until the next heartbeat (`HEARTBEAT_S`).

On an object store a lease is taken over once it is gone: released, its pid dead on this host,
its heartbeat older than `STALE_S`, or its heartbeat or start more than `STALE_S` in the future
(a skewed clock or a forged time would otherwise keep it until then).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict

from sweeper.results.lease_holder import (
    LAST_TIME,
    LEASE_JSON_MAX,
    STALE_S,
    Holder,
    held_message,
    holder_of,
    parse_lease,
    read_holder,
)
from sweeper.results.lease_lock import LeaseError, open_lock, relock, still_there
from sweeper.results.lease_s3 import ConditionalObject, conditional_object
from sweeper.results.storage import Experiment
from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

__all__ = ["LAST_TIME", "LEASE_JSON_MAX", "STALE_S", "Holder", "held_message", "read_holder"]
log = logging.getLogger(__name__)

HEARTBEAT_S = float(os.environ.get("SWEEPER_LEASE_HEARTBEAT_S", "30"))
SETTLE_S = float(os.environ.get("SWEEPER_LEASE_SETTLE_S", "2"))
LOCK_ATTEMPTS = 20  # `.lease.lock` removed under us this often in a row: someone keeps at it


class LeaseHeld(ProblemsError):
    """Another live driver holds the experiment."""


def _interrupt(_: Holder | None) -> None:
    os.kill(os.getpid(), signal.SIGINT)  # stop like Ctrl-C: Tune saves state, exit 130


def _current(exp: Experiment) -> Holder | None:
    """read_holder for a driver that holds the lease: what is not a lease is no other's."""
    try:
        return read_holder(exp)
    except LeaseError:
        return None


def _flock(fd: int) -> None:
    """Lock `fd` exclusively, or OSError at once if another open file holds the lock."""
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


class Lease:
    """Hold `exp` for one command: `with Lease(exp, command) as lease: ...`. `held` while it
    is ours; `lost` is the driver that took it from us (on an object store, or through a new
    `.lease.lock`; None while not lost, or if that driver is unknown), and `on_lost` is then
    called with it (by default: SIGINT to this process)."""

    def __init__(
        self,
        exp: Experiment,
        command: str,
        on_lost: Callable[[Holder | None], None] | None = None,
        only: str | None = None,
    ):
        self.exp, self.me = exp, Holder.me(command, only)
        self.on_lost = on_lost or _interrupt
        self.took_over: Holder | None = None  # the gone holder we replaced, if any
        self.lost: Holder | None = None
        self.held = False
        self._lock_fd: int | None = None
        self._lock_path = fileio.local_path(exp.root) / ".lease.lock"  # a local or shared path
        self._object: ConditionalObject | None = None  # S3, written on conditions
        self._etag = ""  # the version of the lease object that is ours
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lease or raise LeaseHeld naming the holder."""
        if fileio.is_uri(self.exp.root):
            self._object = conditional_object(self.exp.lease_json)
        if self._object is not None:
            previous = self._acquire_conditional(self._object)
        else:
            previous = read_holder(self.exp)
            if fileio.is_uri(self.exp.root):
                self._acquire_object(previous)
            else:
                self._acquire_lock()
        self.held = True
        if previous is not None and previous.released is None:
            self.took_over = previous
            log.info("taking over the lease of %r: it is gone", previous.describe())
        self._thread = threading.Thread(target=self._beat, name="sweeper-lease", daemon=True)
        self._thread.start()

    def _acquire_lock(self) -> None:
        path = self._lock_path
        for _ in range(LOCK_ATTEMPTS):
            fd = open_lock(path)
            if fd is None:
                continue
            try:
                _flock(fd)
            except OSError:
                os.close(fd)
                holder = read_holder(self.exp)
                live = holder if holder is not None and holder.released is None else None
                raise LeaseHeld([held_message(self.exp, live)]) from None
            if still_there(fd, path):
                self._lock_fd = fd
                self._write()
                return
            os.close(fd)  # a removed file's lock guards nothing: lock the one there now
        raise LeaseHeld([held_message(self.exp, None)])

    def _acquire_object(self, previous: Holder | None) -> None:
        if previous is not None and previous.alive():
            raise LeaseHeld([held_message(self.exp, previous)])
        self._write()
        time.sleep(SETTLE_S)  # a driver that wrote at the same moment: the last PUT wins
        now = read_holder(self.exp)
        if now is None or now.token != self.me.token:
            raise LeaseHeld([held_message(self.exp, now)])

    def _acquire_conditional(self, obj: ConditionalObject) -> Holder | None:
        """Create the lease object, or replace a gone holder's: each PUT is conditional on
        the version read, so of drivers racing for it one lands. The holder replaced."""
        found = obj.read()
        previous = None if found is None else parse_lease(self.exp, found[0])
        if previous is not None and previous.alive():
            raise LeaseHeld([held_message(self.exp, previous)])
        body = self._body()
        etag = obj.create(body) if found is None else obj.replace(body, found[1])
        if etag is None:
            there, etag = self._there(obj)
            if there is None or there.token != self.me.token:  # else a retried PUT of ours
                raise LeaseHeld([held_message(self.exp, there)])
        self._etag = etag
        return previous

    def _there(self, obj: ConditionalObject) -> tuple[Holder | None, str]:
        """The holder in the lease object (None if none, or not a lease) and its ETag ("" if
        there is no object)."""
        found = obj.read()
        if found is None:
            return None, ""
        try:
            return parse_lease(self.exp, found[0]), found[1]
        except LeaseError:
            return None, found[1]

    def _ours(self, raw: bytes) -> bool:
        """Is this version of the lease object one that we wrote, and not let go of?"""
        with contextlib.suppress(ValueError):
            holder = holder_of(json.loads(raw))
            return holder.token == self.me.token and holder.released is None
        return False

    def _renew(self, obj: ConditionalObject, body: bytes) -> bool:
        """Write `body` if the lease object is still ours; False if another's is there."""
        etag = obj.rewrite(body, self._etag, self._ours)
        if etag is not None:
            self._etag = etag
        return etag is not None

    def _body(self, released: bool = False) -> bytes:
        now = time.time()
        doc = {**asdict(self.me), "heartbeat": now, "released": now if released else None}
        return json.dumps(doc, indent=1).encode()

    def _write(self, released: bool = False) -> None:
        fileio.write_bytes_atomic(self.exp.lease_json, self._body(released))

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S) and self.beat():
            pass

    def beat(self) -> bool:
        """Renew the heartbeat; False once the lease is lost (on an object store, another
        driver's version of the lease object is there)."""
        try:
            if self._object is not None:
                if self._renew(self._object, self._body()):
                    return True
                if not self._stop.is_set():  # (a beat that outlived release: not a loss)
                    self._lose(self._there(self._object)[0])
                return False
            if self._lock_fd is not None and not self._keep_lock():
                current = _current(self.exp)
                mine = current is None or current.token == self.me.token
                self._lose(None if mine else current, "a driver that locked a new .lease.lock")
                return False
            current = _current(self.exp)
            if fileio.is_uri(self.exp.root) and current and current.token != self.me.token:
                self._lose(current)
                return False
            self._write()
        except OSError as e:  # storage briefly unreachable: try again at the next beat
            log.warning("lease heartbeat failed: %s", e)
        return True

    def _keep_lock(self) -> bool:
        """Is the lock file at the path still the one we lock? If it was removed or replaced
        (`rm .lease.lock`), lock the one there now (`relock`), unless another driver has
        locked it or written lease.json since: then False, the lease is lost."""
        held = self._lock_fd
        if held is None or still_there(held, self._lock_path):  # (None: not holding one)
            return True
        fd = relock(self._lock_path, _flock)
        current = None if fd is None else _current(self.exp)
        if fd is None or (current is not None and current.token != self.me.token):
            if fd is not None:
                os.close(fd)  # another driver took the lease meanwhile (and let go)
            return False
        os.close(held)
        self._lock_fd = fd
        log.warning("the lease's %s was removed or replaced: locked the new one", self._lock_path)
        return True

    def _lose(self, thief: Holder | None, unknown: str = "a lease.json that is no lease") -> None:
        self.lost, self.held = thief, False
        # %r: the thief's host is read from storage, and repr escapes its control characters
        who = unknown if thief is None else thief.describe()
        log.error("lost the lease of %r to %r: stopping", self.exp.name, who)
        self.on_lost(thief)

    def release(self) -> None:
        """Let go: the lease says so (if it is still ours), and the lock is freed."""
        ours = self.held  # a lost lease's files are the new holder's: left alone
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.held and self._object is not None:
            with contextlib.suppress(OSError):  # unreachable: it goes stale, as if we died
                self._renew(self._object, self._body(released=True))
        elif self.held:
            current = _current(self.exp)
            if current is not None and current.token == self.me.token:
                self._write(released=True)
        self.held = False
        if self._lock_fd is not None:
            if ours:
                self._tidy()  # while the flock is still ours
            os.close(self._lock_fd)  # closing frees the flock
            self._lock_fd = None

    def _tidy(self) -> None:
        """A run that wrote nothing (it stopped before starting) leaves no directory behind.
        The lock goes after lease.json: a driver that locks a new one keeps the lease.json it
        writes (and the directory is removed only if empty)."""
        root = fileio.local_path(self.exp.root)
        if root.is_dir() and {p.name for p in root.iterdir()} <= {".lease.lock", "lease.json"}:
            for name in ("lease.json", ".lease.lock"):
                (root / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: another driver has come
                root.rmdir()
