"""Reading a local file safely: a FIFO planted at a name sweeper reads would block it forever,
a device never end, a sparse file of 20 GB fill the memory. `open_regular` opens without
blocking (a FIFO opens at once), checks the open fd (no race with a swap of the name) and
refuses anything that is not a regular file, or is larger than its reader's bound.

Below a confined root (`trainables.kernel.confinement`, the storage) no read follows a link,
as no write does: the file's folder is reached one component at a time from the root with
O_NOFOLLOW and the file opened from it with O_NOFOLLOW, so a link at its name or at any folder
above it (`trials/<id>`, `certify/<id>`, `cache`) is refused, naming the link; a listing
(`walk`) leaves out every link below it and names it. Nothing sweeper writes is a link, so one
is planted. Elsewhere (files a user imports, a storage root that is itself a link) links are
followed, and the fd is checked all the same.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from trainables.kernel.confinement import LinkError, confining_root, directory_fd, is_link
from trainables.kernel.errors import ProblemsError

LINKED = "a symlink inside the storage, never read through"


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


def open_regular(location: str, local: Path, limit: int | None) -> int:
    """An fd of the regular file at the absolute path `local` (named `location` in errors),
    never through a link below a confined root; UnreadableFileError if it is no regular file,
    a link (or below one) inside the storage, or larger than `limit` bytes (fstat's size);
    FileNotFoundError if it is missing."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if confining_root(local) is None:
        fd = os.open(local, flags)
    else:
        fd = _open_below(location, local, flags | os.O_NOFOLLOW)
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


def _open_below(location: str, local: Path, flags: int) -> int:
    """`os.open` of `local`, below a confined root, from its folder reached by `directory_fd`."""
    try:
        with directory_fd(local.parent) as parent:
            try:
                return os.open(local.name, flags, dir_fd=parent)
            except OSError as e:
                if e.errno != errno.ELOOP and not is_link(parent, local.name):
                    raise OSError(e.errno, e.strerror, str(location)) from None
    except LinkError as e:
        raise UnreadableFileError(location, f"{e.link} is {LINKED}") from None
    raise UnreadableFileError(location, LINKED)


def exists_below(local: Path) -> bool:
    """Whether anything is at `local` (below a confined root), a link included, looked up
    without following one: a link at the name or above it exists, so that its read refuses
    it by name rather than finding nothing."""
    try:
        with directory_fd(local.parent) as parent:
            os.lstat(local.name, dir_fd=parent)
    except LinkError:
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def walk(top: Path, suffix: str, links: list[str]) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every regular file below the folder `top` (below or at a confined
    root) whose name ends with `suffix` and is not hidden (".name.tmp"), never through a link:
    each link on the way (`top` or a folder above it included; hidden ones aside) is left out
    and appended to `links`. Each folder is opened from its parent's fd
    with O_NOFOLLOW, so a folder swapped for a link meanwhile is refused, not listed."""
    try:
        with directory_fd(top) as fd:
            yield from _walk_fd(fd, str(top), suffix, links)
    except LinkError as e:
        links.append(e.link)
    except (FileNotFoundError, NotADirectoryError):
        return


def _walk_fd(fd: int, here: str, suffix: str, links: list[str]):
    with os.scandir(fd) as entries:
        listed = list(entries)
    for entry in listed:
        path = os.path.join(here, entry.name)
        if entry.is_symlink():
            if not entry.name.startswith("."):  # a folder or a file: either way never read
                links.append(path)
        elif entry.is_dir(follow_symlinks=False):
            try:
                child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:  # gone, or swapped for a link since it was listed
                if is_link(fd, entry.name):
                    links.append(path)
                continue
            try:
                yield from _walk_fd(child, path, suffix, links)
            finally:
                os.close(child)
        elif _listed(entry.name, suffix) and entry.is_file(follow_symlinks=False):
            yield path, entry.stat(follow_symlinks=False)


def _listed(name: str, suffix: str) -> bool:
    return name.endswith(suffix) and not name.startswith(".")
