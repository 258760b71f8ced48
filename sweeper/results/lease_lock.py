"""The lock file of a lease on a local or shared path (`<experiment>/.lease.lock`): opened
without following a link, and checked to be still the file at its path (`lease` holds an
exclusive `flock` on it while its driver lives).

A removed or replaced lock file guards nothing: a driver that locked it would not exclude one
that locks the file now at the path. So a driver checks after `flock` that its file is still
there (`still_there`), and its holder checks the same at each heartbeat (`Lease.beat`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError


class LeaseError(ProblemsError):
    """A lease.json that is no lease (damaged, or not sweeper's), or a bad `.lease.lock`."""


def open_lock(path: Path) -> int | None:
    """An fd of the lock file `path` (made if missing), never through a symlink (LinkError
    naming it, if one is planted there or below the storage); None if its directory was
    removed meanwhile (a releasing holder's `_tidy`); LeaseError if it is not a plain file."""
    try:
        fd = fileio.open_confined(str(path), os.O_RDWR | os.O_CREAT, fileio.FILE_MODE)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted there
        os.close(fd)
        raise LeaseError([f"{path} is not a plain file: remove it and re-run"])
    return fd


def still_there(fd: int, path: Path) -> bool:
    """Is the file open as `fd` still the one at `path` (not removed, nor replaced)?"""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)


def relock(path: Path, flock: Callable[[int], None]) -> int | None:
    """An fd of the lock file now at `path`, locked with `flock` (exclusive, not waiting), for
    a holder whose own file was removed or replaced; None if another holds its lock, it is no
    longer the file at the path, or a link or FIFO is there (never followed)."""
    try:
        fd = open_lock(path)
    except (fileio.LinkError, LeaseError):
        return None
    if fd is None:  # the experiment's directory is gone
        return None
    try:
        flock(fd)
    except OSError:  # another driver holds it
        os.close(fd)
        return None
    if not still_there(fd, path):
        os.close(fd)
        return None
    return fd
