"""Reading a local file safely: a FIFO planted at a name sweeper reads would block it forever,
a device never end, a sparse file of 20 GB fill the memory. `open_regular` opens without
blocking (a FIFO opens at once), checks the open fd (no race with a swap of the name) and
refuses anything that is not a regular file, or is larger than its reader's bound.

Below a confined root (`trainables.kernel.fileio.confine`, the storage) a link at the file's name is
refused too (O_NOFOLLOW), as writes refuse it: nothing sweeper writes is a link, so one is
planted. Elsewhere (files a user imports, a storage root that is itself a link: O_NOFOLLOW
concerns the last component only) links are followed, and the fd is checked all the same.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from trainables.kernel.errors import ProblemsError


class UnreadableFileError(ProblemsError):
    """A file to read that is no regular file (a FIFO, a device, a link inside the storage)
    or larger than its reader's bound: one line naming it and the fix; `why` alone, for a
    reader that words its own fix."""

    def __init__(self, location: str, why: str):
        self.location, self.why = str(location), why
        fix = "remove it (or put the real file there) and re-run"
        super().__init__([f"cannot read {location} ({why}): {fix}"])


def too_large(size: str, limit: int) -> str:
    """The reason for a file of `size` bytes (spelt) over `limit`."""
    return f"{size} bytes, where such a file holds at most {limit:,}"


def open_regular(location: str, local: Path, confined: bool, limit: int | None) -> int:
    """An fd of the regular file at the absolute path `local` (named `location` in errors),
    not through a link at its name if `confined`; UnreadableFileError if it is no regular file
    or larger than `limit` bytes (fstat's size); FileNotFoundError if it is missing."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if confined else 0)
    try:
        fd = os.open(local, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and confined:
            raise UnreadableFileError(location, "a symlink inside the storage") from None
        raise
    info = os.fstat(fd)
    why = None
    if not stat.S_ISREG(info.st_mode):
        why = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or directory"
        why += ", not a regular file"
    elif limit is not None and info.st_size > limit:
        why = too_large(f"{info.st_size:,}", limit)
    if why is not None:
        os.close(fd)
        raise UnreadableFileError(location, why)
    return fd
