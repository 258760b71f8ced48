"""Data sets kept on an object store (`--data-dir s3://bucket/prefix`, gs://), fetched once per
node into a local cache and read from there. Torch-free: the driver checks a data URI before
Ray starts, and `sweeper data put` writes one, without importing torch.

On the bucket, `<url>/sweeper-data.json` (the manifest, written by `put` after every file it
lists) names, per data set, each file's path relative to `<url>`, its size and its sha256.

On a node, `fetch(url, dataset)` returns `<cache>/<sha256 of url>/<dataset>-<digest>`, a
directory laid out as the data set's local copy was, where the digest is that of the data set's
manifest entry: a new `put` is a new directory. Contracts of the cache:

- it is filled in a hidden temporary directory and renamed to its final name only after every
  file's size and sha256 matched the manifest: a half-fetched or corrupt copy is never used;
- a process that finds the final directory reuses it and downloads nothing (one GET: the
  manifest); processes of one node that fetch at once wait on one lock file, and one downloads;
- a manifest path that is absolute, has `..`, `.` or empty parts, or a backslash is refused
  before anything is written: nothing lands outside the cache directory.

The cache is `$SWEEPER_DATA_CACHE`, else `~/.cache/sweeper/data`. Old versions stay until
removed by hand (a running sweep may still read them).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath

from trainables.data_attestation import manifest_problem
from trainables.kernel import fileio
from trainables.kernel.credential_parts import redact
from trainables.kernel.errors import ProblemsError

log = logging.getLogger(__name__)

MANIFEST_NAME = "sweeper-data.json"
PSEUDO = "pseudo"  # self-training's pseudo-labelled data in a manifest (`sweeper data put pseudo`)
FORMAT = 1
CACHE_ENV = "SWEEPER_DATA_CACHE"
MANIFEST_LIMIT = 512 * 2**20  # ImageNet's 1.3 M entries take about 160 MB
CHUNK = 8 * 2**20
THREADS = 8  # files moved at once: ImageNet is 1.3 M small objects
# A data URI: scheme, a bucket name as S3 and GCS spell them, a plain key prefix (no options,
# credentials, escapes or spaces: credentials come the standard way, never in the URI).
_DATA_URI = re.compile(r"(s3|gs|gcs)://([a-z0-9][a-z0-9._-]{1,221})(/[^?#%@\s\\]*)?")


class RemoteDataError(ProblemsError):
    """A data set on an object store cannot be put or fetched: one line naming what (the
    bucket, the manifest, the file) and the fix."""

    def __init__(self, line: str):
        super().__init__([line])


@dataclasses.dataclass(frozen=True)
class Entry:
    """One file of a data set: its path relative to the data URI (posix), size, sha256."""

    path: str
    size: int
    sha256: str


def is_remote(data_dir: str | None) -> bool:
    """A data directory on an object store (fetched into the cache), not a local path."""
    return data_dir is not None and fileio.is_uri(data_dir)


def uri_problem(url: str) -> str | None:
    """Why `url` is no data URI this module takes (one line with the fix, `url` redacted: a
    refused one may carry credentials), or None."""
    if _DATA_URI.fullmatch(url.rstrip("/") or url):
        return None
    return (
        f"{redact(url)!r} is not a data URI: give s3://bucket/prefix or gs://bucket/prefix (a "
        "bucket name, a plain path; credentials come from the environment, never the URI)"
    )


def checked_url(url: str) -> str:
    """`url` checked (RemoteDataError) and without a trailing slash."""
    if problem := uri_problem(url):
        raise RemoteDataError(problem)
    return url.rstrip("/")


def manifest_location(url: str) -> str:
    return fileio.join(checked_url(url), MANIFEST_NAME)


def path_problem(path: object) -> str | None:
    """Why a manifest path could write outside the data set's directory, or None."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        return f"{path!r} is not a relative posix path"
    parts = path.split("/")
    if PurePosixPath(path).is_absolute() or any(p in ("", ".", "..") for p in parts):
        return f"{path!r} leaves the data set's directory (absolute, or with '..', '.', '//')"
    return None


def parse_manifest(raw: bytes, where: str) -> dict[str, tuple[Entry, ...]]:
    """The manifest's entries per data set; RemoteDataError naming `where` if it is no JSON of
    this format, or any path is unsafe (`path_problem`) or listed twice, or a field is wrong."""
    fix = "write it again with `sweeper data put`"
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT}")
        found = {name: tuple(_entry(e) for e in files) for name, files in doc["datasets"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RemoteDataError(f"manifest {where} is unreadable ({e}): {fix}") from None
    for name, entries in found.items():
        paths = [e.path for e in entries]
        if problem := next(filter(None, map(path_problem, paths)), None):
            raise RemoteDataError(f"manifest {where}, data set {name!r}: {problem}; refused")
        if len(set(paths)) != len(paths):
            raise RemoteDataError(f"manifest {where} lists a file of {name!r} twice: {fix}")
    return found


def _entry(item: dict) -> Entry:
    path, size, digest = item["path"], item["size"], item["sha256"]
    if not isinstance(size, int) or size < 0 or not re.fullmatch(r"[0-9a-f]{64}", str(digest)):
        raise ValueError(f"bad size or sha256 for {path!r}")
    return Entry(path, size, digest)  # the path is checked by `parse_manifest`


def manifest_bytes(datasets: dict[str, tuple[Entry, ...]]) -> bytes:
    doc = {
        "format": FORMAT,
        "written_by": "sweeper data put",
        "datasets": {
            name: [dataclasses.asdict(e) for e in entries]
            for name, entries in sorted(datasets.items())
        },
    }
    return json.dumps(doc, indent=1).encode()


@contextlib.contextmanager
def remote_errors(what: str, fix: str) -> Iterator[None]:
    """Turn a storage failure (no bucket, no credentials, no network) into RemoteDataError."""
    try:
        yield
    except RemoteDataError:
        raise
    except (OSError, ValueError) as e:
        why = " ".join(str(e).split())[:300]
        raise RemoteDataError(f"cannot reach {what} ({why}): {fix}") from None


REACH_FIX = (
    "check the bucket's name, that it exists, and the credentials and endpoint "
    "(AWS_* / GOOGLE_* variables, the instance's role)"
)


def bucket_problem(url: str) -> str | None:
    """Why the bucket of `url` cannot be reached (one line with the fix), or None. Asks the
    bucket itself (S3: HeadBucket, which needs s3:ListBucket on it): for `put`, and to word
    a missing manifest; a fetch reads the manifest only (a worker's role may list no bucket)."""
    scheme, bucket = checked_url(url).split("://")[0], checked_url(url).split("/")[2]
    try:
        with remote_errors(f"the bucket {scheme}://{bucket}", REACH_FIX):
            fs, _ = fileio.filesystem(f"{scheme}://{bucket}")
            if fs.get_file_info(bucket).type == fileio._pafs().FileType.NotFound:
                raise RemoteDataError(f"no bucket {scheme}://{bucket}: {REACH_FIX}")
    except RemoteDataError as e:
        return str(e)
    return None


def read_manifest(url: str, signed: bool = True) -> dict[str, tuple[Entry, ...]]:
    """The manifest of the data URI `url`; RemoteDataError if it cannot be read (naming the
    bucket when that is missing, else the manifest, and the fix) or it is malformed, or
    (`signed`, in a process holding a signing key) it is not the manifest the key holder put
    (`trainables.data_attestation`)."""
    where = manifest_location(url)
    fix = (
        f"put the data set there first: sweeper data put DATASET --from DIR --to {checked_url(url)}"
    )
    with remote_errors(where, REACH_FIX):
        try:
            raw = fileio.read_bytes(where, MANIFEST_LIMIT)
        except FileNotFoundError:
            missing = bucket_problem(url)
            if missing and missing.startswith("no bucket"):
                raise RemoteDataError(missing) from None
            raise RemoteDataError(f"no data manifest {where}: {fix}") from None
    if signed and (problem := manifest_problem(checked_url(url), raw)):
        raise RemoteDataError(problem)
    return parse_manifest(raw, where)


def entries_of(url: str, dataset: str) -> tuple[Entry, ...]:
    """The files of `dataset` under `url`; RemoteDataError if the manifest has none."""
    entries = read_manifest(url).get(dataset)
    if not entries:
        raise RemoteDataError(
            f"{manifest_location(url)} holds no {dataset!r}: "
            f"sweeper data put {dataset} --from DIR --to {checked_url(url)}"
        )
    return entries


def data_inputs(dataset: str, data_dir: str | None) -> dict[str, str]:
    """A statement's data input: for a data set on a bucket, {"data": `dataset_digest`} of the
    (signed) manifest's entry; none for a local directory (each node's own disk, outside the
    storage: docs/security.md) or an embedded data set."""
    if not (data_dir and is_remote(data_dir)):
        return {}
    return {"data": dataset_digest(entries_of(data_dir, dataset))}


def remote_problem(url: str, dataset: str) -> str | None:
    """Why `dataset` cannot be fetched from `url` (the URI, the bucket, the manifest, the
    data set in it), or None. Cheap: reads the manifest, no data file."""
    try:
        entries_of(url, dataset)
    except RemoteDataError as e:
        return str(e)
    return None


def cache_root() -> Path:
    """Where fetched data sets live: `$SWEEPER_DATA_CACHE`, else `~/.cache/sweeper/data`."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sweeper" / "data")


def entries_digest(entries: tuple[Entry, ...]) -> str:
    return dataset_digest(entries)[:16]


def dataset_digest(entries: tuple[Entry, ...]) -> str:
    """The sha256 naming one data set's files as a manifest lists them (paths, sizes, sha256s):
    what a statement names as its data."""
    return hashlib.sha256(manifest_bytes({"": entries})).hexdigest()


def fetch(url: str, dataset: str, cache: Path | None = None) -> Path:
    """The local directory holding `dataset` as put at `url`, downloaded and verified on the
    first call on this node (see the module docstring), reused after."""
    url = checked_url(url)
    entries = entries_of(url, dataset)
    home = (cache or cache_root()) / hashlib.sha256(url.encode()).hexdigest()[:16]
    final = home / f"{dataset}-{entries_digest(entries)}"
    if final.is_dir():
        return final
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f".{dataset}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if final.is_dir():  # another process fetched it while this one waited
            return final
        for stale in home.glob(f".{dataset}.*.tmp"):  # left by a process that died holding it
            shutil.rmtree(stale, ignore_errors=True)
        tmp = home / f".{dataset}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            tmp.mkdir()
            size = _download_all(url, entries, tmp)
            (tmp / ".manifest.json").write_bytes(manifest_bytes({dataset: entries}))
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log.info(
        "fetched %s from %s into %s (%d files, %d bytes)", dataset, url, final, len(entries), size
    )
    return final


def _download_all(url: str, entries: tuple[Entry, ...], into: Path) -> int:
    return in_parallel(lambda e: _download(url, e, into), entries)


def in_parallel(task: Callable[[Entry], int], entries: Sequence[Entry]) -> int:
    """The sum of `task(entry)` over `entries`, THREADS at a time (each thread takes the next
    entry: no future per file for ImageNet's 1.3 M); the first error stops every thread
    before its next entry and is raised."""
    todo, lock = iter(entries), threading.Lock()
    failed: list[BaseException] = []

    def work() -> int:
        total = 0
        while not failed:
            with lock:
                entry = next(todo, None)
            if entry is None:
                break
            try:
                total += task(entry)
            except BaseException as e:
                failed.append(e)
        return total

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(work) for _ in range(max(1, min(THREADS, len(entries))))]
    if failed:
        raise failed[0]
    return sum(f.result() for f in futures)


def _download(url: str, entry: Entry, into: Path) -> int:
    """Stream one object into `into/<path>`, hashing it, never past the manifest's size: an
    object larger than its entry is refused as soon as a byte beyond it arrives (at most
    `entry.size` bytes are written), one of the right size is refused if its sha256 differs.
    RemoteDataError naming it."""
    location = fileio.join(url, entry.path)
    target = into.joinpath(*entry.path.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with open(target, "xb") as dst:  # a local failure (a full disk) stays an OSError naming it
        for chunk in _chunks(location, entry.size + 1):  # one byte more: the object is larger
            size += len(chunk)
            if size > entry.size:
                raise _mismatch(location, entry, f"more than {entry.size} bytes")
            digest.update(chunk)
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())  # on disk before the rename publishes the copy
    if size != entry.size or digest.hexdigest() != entry.sha256:
        raise _mismatch(location, entry, f"sha256 {digest.hexdigest()[:12]}…, {size} bytes")
    return size


def _mismatch(location: str, entry: Entry, found: str) -> RemoteDataError:
    return RemoteDataError(
        f"{location} does not match its manifest entry ({found}; expected "
        f"{entry.sha256[:12]}…, {entry.size} bytes): it changed since `sweeper data put`; put "
        "the data set again"
    )


def _chunks(location: str, limit: int) -> Iterator[bytes]:
    """The object's first `limit` bytes (or all, if fewer) in chunks; a failure to read it
    is RemoteDataError naming it."""
    fix = "check that the bucket still holds what `sweeper data put` wrote"
    fs, path = fileio.filesystem(location)
    with remote_errors(location, fix):
        src = fs.open_input_stream(path)
    with src:
        while limit > 0:
            with remote_errors(location, fix):
                chunk = src.read(min(CHUNK, limit))
            if not chunk:
                return
            limit -= len(chunk)
            yield chunk
