"""The storage's confinement: below a local root given to `confine` (the storage; `Experiment`
confines its own), a folder is reached one component at a time from the root with `O_NOFOLLOW`
(`directory_fd`), so a symlink planted anywhere below the root (`reports -> /elsewhere`) is
refused (`LinkError`), never followed. Writes (`fileio`) and reads (`local_reads`) both go
through it. The root itself, and the path above it, are the user's choice and may be links.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from trainables.kernel.errors import ProblemsError


class LinkError(ProblemsError):
    """A symlink below a confined root on the way to a file (`link`: the link's path)."""

    def __init__(self, problems: list[str], link: str = ""):
        super().__init__(problems)
        self.link = link


_CONFINED: set[Path] = set()


def confine(root: Path) -> None:
    """From now on, refuse to follow a symlink below the local directory `root` (absolute) on
    the way to any write, delete, move, lock or read of this process (`fileio.confine`)."""
    _CONFINED.add(root)


def confining_root(path: Path) -> Path | None:
    """The confined root that `path` (absolute) lies strictly below, the innermost one."""
    roots = [r for r in _CONFINED if r in path.parents]
    return max(roots, key=lambda r: len(r.parts)) if roots else None


def is_confined(path: Path) -> bool:
    """Whether `path` (absolute) is a confined root or lies below one."""
    return path in _CONFINED or confining_root(path) is not None


@contextlib.contextmanager
def directory_fd(directory: Path, create: bool = False) -> Iterator[int]:
    """An open fd of the local `directory` (made, with its parents, if `create`), reached from
    its confining root one component at a time without following a symlink; LinkError if a
    component below the root is a link."""
    directory = Path(os.path.abspath(directory))
    root = confining_root(directory) or (directory if directory in _CONFINED else None)
    if root is None:
        if create:
            directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    else:
        if create:
            root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            here = root
            for part in directory.relative_to(root).parts:
                here = here / part
                child = _step_down(fd, here, root, create)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
    try:
        yield fd
    finally:
        os.close(fd)


def _step_down(fd: int, here: Path, root: Path, create: bool) -> int:
    """A new fd of the directory `here`, the entry `here.name` of directory `fd`, never
    through a link."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(here.name, dir_fd=fd)
    try:
        return os.open(here.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError as e:
        # a link gives ELOOP, or ENOTDIR with O_DIRECTORY on Linux; a file there stays an
        # OSError naming the path
        link = e.errno in (errno.ELOOP, errno.ENOTDIR) and is_link(fd, here.name)
        if not link:
            raise OSError(e.errno, e.strerror, str(here)) from None
    raise LinkError(
        [
            f"{here} is a symlink inside the storage {root}: sweeper never writes through a "
            "link inside the storage; remove it (or move the real directory there) and re-run"
        ],
        str(here),
    )


def is_link(fd: int, name: str) -> bool:
    """Whether the entry `name` of directory `fd` is a symlink."""
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode)
    except OSError:
        return False
