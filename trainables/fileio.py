"""Byte-level file access on a local path or a URI (file://, s3://, gs://, ...).

Local paths use the OS directly (rename is atomic); URIs go through pyarrow's filesystems,
where one PUT is the atomic unit. Writers never leave a half-written file at the final name.
pyarrow is imported on first use of a filesystem, so that commands which only plan (`--help`,
`spaces`, `--dry-run`) start fast.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def is_uri(location: str) -> bool:
    return "://" in str(location) and not str(location).startswith("file://")


def local_path(location: str) -> Path:
    """The local path of a plain path or a file:// URI."""
    location = str(location)
    return Path(location[len("file://") :] if location.startswith("file://") else location)


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
        return _pafs().LocalFileSystem(), str(local_path(location).absolute())
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
    if not is_uri(location):
        return local_path(location).exists()
    fs, path = filesystem(location)
    return fs.get_file_info(path).type != _pafs().FileType.NotFound


def read_bytes(location: str) -> bytes:
    if not is_uri(location):
        return local_path(location).read_bytes()
    fs, path = filesystem(location)
    with fs.open_input_stream(path) as f:
        return f.read()


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
    local = local_path(location)
    local.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600 files; results are shared (EFS, colleagues)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, local)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def delete(location: str) -> None:
    """Remove one file (no error if it is already gone)."""
    if not is_uri(location):
        local_path(location).unlink(missing_ok=True)
        return
    fs, path = filesystem(location)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def _listing(location: str, suffix: str) -> Iterator[tuple[str, Any]]:
    """(location of the file, its pyarrow FileInfo) for every file under `location`
    (recursively) whose name ends with `suffix`, from one listing; nothing if the location
    does not exist. Hidden temp files (".name.tmp") are skipped."""
    fs, path = filesystem(location)
    arrow = _pafs()
    if fs.get_file_info(path).type == arrow.FileType.NotFound:
        return
    head, base = _child_head(location), len(path.rstrip("/")) + 1
    sep = "/" if "://" in head else os.sep
    for info in fs.get_file_info(arrow.FileSelector(path, recursive=True)):
        hidden = info.base_name.startswith(".")
        if info.type == arrow.FileType.File and not hidden and info.base_name.endswith(suffix):
            yield head + info.path[base:].replace("/", sep), info


def list_files(location: str, suffix: str = "") -> list[str]:
    """Every file under `location` (recursively) whose name ends with `suffix`, sorted;
    empty if the location does not exist. Hidden temp files (".name.tmp") are skipped."""
    return sorted(name for name, _ in _listing(location, suffix))


def list_sizes(location: str, suffix: str = "") -> dict[str, int]:
    """`list_files` with each file's size in bytes."""
    return {name: int(info.size or 0) for name, info in _listing(location, suffix)}


def list_stats(location: str, suffix: str = "") -> dict[str, tuple[int, float]]:
    """`list_sizes` with each file's modification time too (seconds since the epoch), from the
    same one listing: `sweeper status` counts what was written lately."""
    return {
        name: (int(info.size or 0), (info.mtime_ns or 0) / 1e9)
        for name, info in _listing(location, suffix)
    }


def total_size(location: str) -> int:
    """Bytes used by every file under `location`."""
    fs, path = filesystem(location)
    arrow = _pafs()
    if fs.get_file_info(path).type == arrow.FileType.NotFound:
        return 0
    infos = fs.get_file_info(arrow.FileSelector(path, recursive=True))
    return sum(i.size or 0 for i in infos if i.type == arrow.FileType.File)
