"""Who holds an experiment's lease: `<experiment>/lease.json`'s document (`Holder`: pid, host,
the command as typed, the slice of the sweep it runs, since, heartbeat, released), read and
checked (`read_holder`), and whether its holder is still there (`Holder.alive`). The lease
itself, taken, renewed and released: `lease`."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sweeper.results.credentials import redact_args
from sweeper.results.lease_lock import LeaseError
from sweeper.results.storage import Experiment
from trainables.kernel import fileio

STALE_S = float(os.environ.get("SWEEPER_LEASE_STALE_S", "300"))  # no heartbeat for 5 min: gone


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    command: str
    since: float
    heartbeat: float
    token: str
    released: float | None = None  # when the holder let go (None: still held, or it died)
    # the slice of the sweep it runs (`--only`, `Sweep(only=...)`; None: all of it), which
    # `sweeper status` and `Sweep.status()` count while it runs (`api.status_report`)
    only: str | None = None

    @classmethod
    def me(cls, command: str, only: str | None = None) -> Holder:
        now = time.time()
        return cls(
            os.getpid(), socket.gethostname(), command, now, now, uuid.uuid4().hex, only=only
        )

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} on host {self.host} since {since}"

    def alive(self, now: float | None = None) -> bool:
        """Is the holder still there? Not once released; on this host, while its pid lives;
        elsewhere, while its heartbeat is under STALE_S old and neither it nor `since` is over
        STALE_S ahead (a skewed clock or a forged time keeps it at most 2 * STALE_S)."""
        if self.released is not None:
            return False
        if self.host == socket.gethostname():
            return _pid_alive(self.pid)
        now = time.time() if now is None else now
        if max(self.since, self.heartbeat) > now + STALE_S:
            return False
        return now - self.heartbeat < STALE_S


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


def read_holder(exp: Experiment) -> Holder | None:
    """Who holds (or last held) the experiment's lease; None if nobody (or it cannot be read
    right now); LeaseError naming it if it is no lease, or no regular file of LEASE_JSON_MAX."""
    try:
        return parse_lease(exp, fileio.read_bytes(exp.lease_json, LEASE_JSON_MAX))
    except fileio.UnreadableFileError as e:  # a FIFO would block every command forever
        raise LeaseError(e.problems) from None
    except OSError:
        return None


def parse_lease(exp: Experiment, raw: bytes) -> Holder:
    """The Holder in a lease.json's bytes; LeaseError naming the file and the fix if none."""
    try:
        return holder_of(json.loads(raw))
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
LEASE_JSON_MAX = 2**20  # bytes: a lease is ~300 (pid, host, command line, times, a token)


def holder_of(doc: Any) -> Holder:
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
    if doc.get("only") is not None and not isinstance(doc["only"], str):
        raise ValueError(f"only {doc['only']!r} is not a slice (--only's text)")
    fields = {k: doc[k] for k in Holder.__dataclass_fields__ if k in doc}
    # a lease written before credentials were refused may hold some: never shown as stored
    fields["command"] = " ".join(redact_args(doc["command"].split()))
    return Holder(**fields)


def held_message(exp: Experiment, holder: Holder | None) -> str:
    who = "another driver that is starting"
    if holder is not None:
        who = f"{holder.describe()} (`{holder.command}`)"
    return (
        f"experiment {exp.name!r} is in use by {who}: wait for it to end, stop it (Ctrl-C; "
        "re-running resumes), or pass another --experiment"
    )
