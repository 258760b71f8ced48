"""Byte-level file access on a local path or a URI (s3://, gs://, ...).

Local paths (plain, or `file:///abs` and `local:///abs` in any case) use the OS directly
(rename is atomic); URIs go through pyarrow's filesystems, where one PUT is the atomic unit.
Writers never leave a half-written file at the final name. pyarrow is imported on first use of
a filesystem, so that commands which only plan (`--help`, `spaces`, `--dry-run`) start fast.

Confinement (`trainables.kernel.confinement`): below a local root given to `confine` (the
storage; `Experiment` confines its own), every write, delete, move and lock reaches its
directory one component at a time from the root with `O_NOFOLLOW`, so a symlink planted
anywhere below the root (`reports -> /elsewhere`) is refused (`LinkError`), never followed; a
symlink at the final name is replaced, never written through. The root itself, and the path
above it, are the user's choice and may be links.

Reads: a local file must be a regular file, checked on an fd opened without blocking
(`trainables.kernel.local_reads`); a reader may bound its size. Below a confined root no read
follows a link either: `read_bytes` and pyarrow's reads by path (`filesystem`,
`trainables.kernel.confined_fs`) refuse a link at the name or above it, naming it, and a
listing (`list_files`, ...) leaves out every link below it, each added to its `links`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.kernel import confinement
from trainables.kernel.confinement import LinkError as LinkError  # re-exported
from trainables.kernel.confinement import confining_root, directory_fd, is_confined
from trainables.kernel.local_reads import LINKED as LINKED  # re-exported
from trainables.kernel.local_reads import (
    UnreadableFileError,
    exists_below,
    open_regular,
    too_large,
    walk,
)

if TYPE_CHECKING:
    import pyarrow.fs as pafs


def _file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()  # what open() would give a new file under this process's umask
# Filesystems without directories: a write needs no parent made first (pyarrow would PUT an
# empty marker object per ancestor folder, on every write).
OBJECT_STORES = frozenset({"s3", "gcs"})


# URI schemes that name a local path (pyarrow's own spelling of its local file system too)
LOCAL_SCHEMES = ("file://", "local://")


def _local_scheme(location: str) -> str | None:
    head = str(location)[:8].lower()
    return next((scheme for scheme in LOCAL_SCHEMES if head.startswith(scheme)), None)


def is_uri(location: str) -> bool:
    """A remote location (s3://, gs://, ...): not a plain path nor a local URI."""
    return "://" in str(location) and _local_scheme(location) is None


def local_path(location: str) -> Path:
    """The local path of a plain path or a local URI (`file:///abs`, `LOCAL:///abs`)."""
    location = str(location)
    scheme = _local_scheme(location)
    return Path(location[len(scheme) :] if scheme else location)


def local_uri_problem(location: str) -> str | None:
    """Why a local URI names no absolute local path (`file://host/x`, `file://rel`), or None."""
    scheme = _local_scheme(location)
    if scheme is None or str(location)[len(scheme) :].startswith("/"):
        return None
    return (
        f"{location!r}: a local URI names an absolute path on this machine, as "
        f"{scheme}/path/to/storage (three slashes); or give the path itself"
    )


def confine(root: str | Path) -> None:
    """From now on, refuse to follow a symlink below the local directory `root` on the way to
    any write, delete, move, lock or read of this process (see the module docstring)."""
    confinement.confine(Path(os.path.abspath(local_path(str(root)))))


def links_below(root: str, limit: int = 5) -> list[str]:
    """Up to `limit` symlinks found below the local directory `root` (walked without following
    any): what a driver refuses before Ray starts, since Ray Tune writes under the experiment
    through its own file system calls, which `confine` does not reach."""
    found: list[str] = []
    for top, dirs, files in os.walk(local_path(root)):
        for name in [*dirs, *files]:
            if os.path.islink(os.path.join(top, name)):
                found.append(os.path.join(top, name))
                if len(found) == limit:
                    return found
    return found


def open_confined(location: str, flags: int, mode: int = 0o666) -> int:
    """`os.open` of a local file with O_NOFOLLOW, its directory reached by `directory_fd`
    (made if missing): a symlink at the name or above it, below a confined root, is refused."""
    local = Path(os.path.abspath(local_path(location)))
    with directory_fd(local.parent, create=True) as parent:
        try:
            return os.open(local.name, flags | os.O_NOFOLLOW, mode, dir_fd=parent)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise LinkError(
                [f"{local} is a symlink: sweeper never writes through a link; remove it and re-run"]
            ) from None


def _pafs() -> types.ModuleType:
    import pyarrow.fs

    return pyarrow.fs


# scheme, bucket, key of a plain bucket URI (no options, fragments, escapes or spaces)
_BUCKET_URI = re.compile(r"(s3|gs|gcs)://([^/?#%\s]+)/?([^?#%\s]*)")


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for any location. A plain bucket URI (s3://, gs://:
    no options, no escapes) shares its bucket's one filesystem (the region is looked up once,
    not once per file: S3 took two HEAD requests per call); any other URI gets its own."""
    location = str(location)
    if not is_uri(location):
        from trainables.kernel.confined_fs import local_filesystem

        return local_filesystem(), str(local_path(location).absolute())
    plain = _BUCKET_URI.fullmatch(location)
    if plain is None:
        return _pafs().FileSystem.from_uri(location)
    scheme, bucket, key = plain.groups()
    return _bucket(scheme, bucket), f"{bucket}/{key}".rstrip("/")  # as from_uri spells it


@functools.lru_cache(maxsize=64)
def _bucket(scheme: str, bucket: str) -> pafs.FileSystem:
    """The filesystem of one bucket. On S3, delayed open sends a small file as one PUT (an
    eager open starts a multipart upload: three requests)."""
    options = "?allow_delayed_open=true" if scheme == "s3" else ""
    return _pafs().FileSystem.from_uri(f"{scheme}://{bucket}{options}")[0]


def join(base: str, *parts: str) -> str:
    base = str(base)
    if "://" in base:  # any URI, file:// included: pathlib would collapse the "//"
        return "/".join([base.rstrip("/"), *parts])
    return str(Path(base, *parts))


def _child_head(location: str) -> str:
    """What `join(location, rel)` puts before `rel`, computed once for a whole listing (a
    pathlib join per file was most of listing 6,440 shards)."""
    return join(location, "x")[:-1]  # join drops a trailing "/" of the location itself


def exists(location: str) -> bool:
    """Whether a file or folder is at `location`; below a confined root looked up without
    following a link, and a link there (or above it) exists: its read names it."""
    if not is_uri(location):
        local = Path(os.path.abspath(local_path(location)))
        return exists_below(local) if confining_root(local) else local.exists()
    fs, path = filesystem(location)
    return fs.get_file_info(path).type != _pafs().FileType.NotFound


def regular_file_problem(location: str, limit: int | None = None) -> str | None:
    """Why the local file `location` cannot be read (a FIFO, which blocks its reader forever;
    a device; a link inside the storage; more than `limit` bytes), or None: a regular file,
    missing, or a URI (objects are regular). For readers that open it by path (pyarrow)."""
    try:
        if not is_uri(location):
            os.close(_open_regular(location, limit))
    except UnreadableFileError as e:
        return e.why
    except FileNotFoundError:
        pass
    return None


def read_bytes(location: str, limit: int | None = None) -> bytes:
    """The whole file. A local one must be a regular file (UnreadableFileError naming it: a
    FIFO would block forever, a device never end); with `limit`, a larger file is refused
    before it is read (fstat's size, or the object's) and while it is (it grew since)."""
    if is_uri(location):
        data = _read_object(location, limit)
    else:
        with os.fdopen(_open_regular(location, limit), "rb") as f:
            data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UnreadableFileError(location, too_large(f"more than {limit:,}", limit))
    return data


def _open_regular(location: str, limit: int | None) -> int:
    return open_regular(location, Path(os.path.abspath(local_path(location))), limit)


def _read_object(location: str, limit: int | None) -> bytes:
    fs, path = filesystem(location)
    if limit is not None and (size := fs.get_file_info(path).size or 0) > limit:
        raise UnreadableFileError(location, too_large(f"{size:,}", limit))
    with fs.open_input_stream(path) as f:
        return f.read() if limit is None else f.read(limit + 1)


def write_bytes_atomic(location: str, data: bytes) -> None:
    """Write `data` so that readers see either the old file or the complete new one. A failed
    write (a full disk) raises OSError naming `location` (a bare write() error names none)."""
    try:
        _write_atomic(location, data)
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, str(location)) from e


def _write_atomic(location: str, data: bytes) -> None:
    if is_uri(location):
        fs, path = filesystem(location)
        if fs.type_name not in OBJECT_STORES:
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as f:
            f.write(data)
        return
    local = Path(os.path.abspath(local_path(location)))
    with directory_fd(local.parent, create=True) as parent:
        tmp = f".{local.name}.{uuid.uuid4().hex[:12]}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        # FILE_MODE: what open() gives under the umask; results are shared (EFS, colleagues)
        fd = os.open(tmp, flags, FILE_MODE, dir_fd=parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            # rename replaces a link at the final name itself: nothing is written through it
            os.replace(tmp, local.name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=parent)
            raise


def delete(location: str) -> None:
    """Remove one file (no error if it is already gone)."""
    if not is_uri(location):
        local = Path(os.path.abspath(local_path(location)))
        try:
            with directory_fd(local.parent) as parent:
                os.unlink(local.name, dir_fd=parent)  # a link itself, never what it names
        except FileNotFoundError:
            pass
        return
    fs, path = filesystem(location)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def move_confined(source: str, target: str) -> None:
    """Rename the local `source` (a file or directory) to `target`, making target's parent;
    both reached by `directory_fd`, so no link below a confined root is followed."""
    src, dst = (Path(os.path.abspath(local_path(p))) for p in (source, target))
    with directory_fd(src.parent) as a, directory_fd(dst.parent, create=True) as b:
        os.rename(src.name, dst.name, src_dir_fd=a, dst_dir_fd=b)


def _listing(
    location: str, suffix: str, links: list[str] | None
) -> Iterator[tuple[str, int, float]]:
    """(location of the file, its size, its modification time) for every file under
    `location` (recursively) whose name ends with `suffix`, from one listing; nothing if the
    location does not exist. Hidden temp files (".name.tmp") are skipped. Below a confined
    root no link is followed: each one is left out and added to `links` (`local_reads.walk`)."""
    local = Path(os.path.abspath(local_path(location)))
    if not is_uri(location) and is_confined(local):
        head, base = _child_head(location), len(str(local)) + 1
        for path, info in walk(local, suffix, [] if links is None else links):
            yield head + path[base:], info.st_size, info.st_mtime_ns / 1e9
        return
    fs, path = filesystem(location)
    arrow = _pafs()
    if fs.get_file_info(path).type == arrow.FileType.NotFound:
        return
    head, base = _child_head(location), len(path.rstrip("/")) + 1
    sep = "/" if "://" in head else os.sep
    for info in fs.get_file_info(arrow.FileSelector(path, recursive=True)):
        hidden = info.base_name.startswith(".")
        if info.type == arrow.FileType.File and not hidden and info.base_name.endswith(suffix):
            name = head + info.path[base:].replace("/", sep)
            yield name, int(info.size or 0), (info.mtime_ns or 0) / 1e9


def list_files(location: str, suffix: str = "", links: list[str] | None = None) -> list[str]:
    """Every file under `location` (recursively) whose name ends with `suffix`, sorted;
    empty if the location does not exist. Hidden temp files (".name.tmp") are skipped, and
    so is every link below a confined root (each added to `links`, if given)."""
    return sorted(name for name, _, _ in _listing(location, suffix, links))


def list_sizes(location: str, suffix: str = "", links: list[str] | None = None) -> dict[str, int]:
    """`list_files` with each file's size in bytes."""
    return {name: size for name, size, _ in _listing(location, suffix, links)}


def list_stats(
    location: str, suffix: str = "", links: list[str] | None = None
) -> dict[str, tuple[int, float]]:
    """`list_sizes` with each file's modification time too (seconds since the epoch), from the
    same one listing: `sweeper status` counts what was written lately."""
    return {name: (size, mtime) for name, size, mtime in _listing(location, suffix, links)}


def total_size(location: str) -> int:
    """Bytes used by every file under `location`."""
    fs, path = filesystem(location)
    arrow = _pafs()
    if fs.get_file_info(path).type == arrow.FileType.NotFound:
        return 0
    infos = fs.get_file_info(arrow.FileSelector(path, recursive=True))
    return sum(i.size or 0 for i in infos if i.type == arrow.FileType.File)
