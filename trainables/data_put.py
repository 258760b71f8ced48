"""`sweeper data put`'s library: a local copy of a data set uploaded to an object store, then
its manifest (`trainables.data_cache`: the format, and the fetch every node makes).

Contracts: every file is read below the directory the user named one component at a time with
O_NOFOLLOW (`open_below`): a symlink anywhere below it (a file's, or a folder's) is refused
before anything is sent, and no link's target is ever uploaded; a file that changes between its
hash and its upload is refused; the manifest is written last, after every file it lists.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import logging
import os
import stat
from pathlib import Path

from trainables.data_attestation import sign_manifest
from trainables.data_cache import (
    CHUNK,
    Entry,
    RemoteDataError,
    bucket_problem,
    checked_url,
    in_parallel,
    manifest_bytes,
    manifest_location,
    path_problem,
    read_manifest,
    remote_errors,
)
from trainables.kernel import fileio

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PutSummary:
    """What `put` did: the manifest's location, the files it lists, how many were sent (the
    others were on the bucket already with the same hash) and their bytes."""

    manifest: str
    files: int
    uploaded: int
    bytes: int


def open_below(root: Path, path: str) -> int:
    """A read-only fd of the regular file `path` (posix, relative) below the directory `root`,
    every component reached from `root` with O_NOFOLLOW: RemoteDataError naming the first that
    is a symlink (`put` uploads no link's target), or the file if it is no regular file.
    `root` itself may be one (the directory the user named)."""
    if problem := path_problem(path):
        raise RemoteDataError(f"cannot put {problem}")
    parts = path.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                raise _refused(root, parts[: i + 1], "is a symlink")
            last = os.O_NONBLOCK if i == len(parts) - 1 else os.O_DIRECTORY  # a FIFO: no wait
            try:  # O_NOFOLLOW: a link swapped in since the check is refused as well
                fd, parent = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | last, dir_fd=fd), fd
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise _refused(root, parts[: i + 1], "is a symlink") from None
            os.close(parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refused(root, parts, "is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refused(root: Path, parts: list[str], what: str) -> RemoteDataError:
    return RemoteDataError(
        f"{root.joinpath(*parts)} {what}: `sweeper data put` follows no link and uploads only "
        "regular files; put the file itself there and re-run"
    )


def _local_entry(root: Path, path: str) -> Entry:
    """The manifest entry of `root/path`, read through `open_below` (no link followed)."""
    digest, size = hashlib.sha256(), 0
    with os.fdopen(open_below(root, path), "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return Entry(path, size, digest.hexdigest())


def put(root: Path, files: list[str], url: str, dataset: str) -> PutSummary:
    """Upload `files` (posix paths relative to the local directory `root`) to `url` and write
    the manifest's entry for `dataset` last (entries of other data sets are kept). A file
    already on the bucket with the size and sha256 of the old manifest is not sent again.
    No link below `root` is followed (`open_below`): one is RemoteDataError before anything
    is sent."""
    url = checked_url(url)
    if problem := next(filter(None, map(path_problem, files)), None):
        raise RemoteDataError(f"cannot put {problem}")
    if problem := bucket_problem(url):
        raise RemoteDataError(problem)
    old = _old_manifest(url)
    entries = tuple(_local_entry(root, p) for p in sorted(files))
    with remote_errors(url, "check the bucket's permissions (write access) and re-run"):
        on_bucket = fileio.list_sizes(url)
        known = set(old.get(dataset, ()))
        send = [
            e
            for e in entries
            if e not in known or on_bucket.get(fileio.join(url, e.path)) != e.size
        ]
        in_parallel(lambda e: _upload(root, url, e), send)
        manifest = manifest_bytes({**old, dataset: entries})
        fileio.write_bytes_atomic(manifest_location(url), manifest)
        sign_manifest(url, manifest)
    log.info("put %s: %d files, %d sent, to %s", dataset, len(entries), len(send), url)
    return PutSummary(manifest_location(url), len(entries), len(send), sum(e.size for e in send))


def _old_manifest(url: str) -> dict[str, tuple[Entry, ...]]:
    """The manifest at `url` (its other data sets are kept), empty if there is none; one that
    cannot be parsed, or (with a signing key) is not the one the key holder signed, is
    replaced, with a warning: the key never signs entries someone else wrote."""
    try:
        return read_manifest(url)
    except RemoteDataError as e:
        if not fileio.exists(manifest_location(url)):
            return {}
        log.warning("replacing it: %s", e)
        return {}


def _upload(root: Path, url: str, entry: Entry) -> int:
    """Send `root/<entry.path>` (no link followed) to `url`; RemoteDataError if it is no longer
    what its entry says (changed since it was hashed): the manifest would not vouch for it."""
    fs, path = fileio.filesystem(fileio.join(url, entry.path))
    digest, size = hashlib.sha256(), 0
    with os.fdopen(open_below(root, entry.path), "rb") as src, fs.open_output_stream(path) as dst:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            dst.write(chunk)
    if (size, digest.hexdigest()) != (entry.size, entry.sha256):
        raise RemoteDataError(f"{root / entry.path} changed while it was put: re-run")
    return entry.size
