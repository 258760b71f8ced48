"""What this user's reads of a local experiment's cache remember between runs, outside the
storage (`$XDG_CACHE_HOME/sweeper/validated/`), so that a warm read of an unchanged experiment
does not hash every compacted file and re-check every row again (issue 39 §5: the envelope
read of 6,440 models).

Two memos, both keyed by what the kernel says of a file, never by what a file says of itself:

- a file's **fingerprint** (`fingerprint`: size, mtime and ctime in ns, inode, device, by
  `lstat`) → the SHA-256 of its bytes when this user last hashed them. Any write to a file,
  or its replacement, changes its ctime, which only the kernel sets: a fingerprint seen before
  means the same bytes.
- a **validation** key (`validation_key`: the cache file's fingerprint, the files it covers
  with their digests, the fingerprints of everything else the row checks read, the columns,
  the checking code) → that the rows were found valid. Every input of the checks is in the key,
  so a hit is the result the checks would give again.

Only for local storage (a bucket has no ctime: its reads check everything each time). A memo
that cannot be read or written costs a full check, nothing more; a planted memo could only
name keys no file has (the key is a digest of fingerprints the reader takes itself), unless
the planter can already write this user's cache, which the reads trust as they trust the
attestation memo (`attestation_reads.Memo`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from functools import cache
from pathlib import Path

from sweeper.results.attestation_reads import user_cache
from sweeper.results.storage import Experiment
from trainables.kernel import fileio

Fingerprint = tuple[int, int, int, int, int]

# the modules whose code decides whether rows are valid: a change to any is a new key
CHECKING_CODE = (
    "results/reader.py",
    "results/validation.py",
    "results/provenance.py",
    "results/certify_rows.py",
    "results/empirical_rows.py",
    "results/stage_table.py",
    "results/trial_records.py",
    "results/sweep_file.py",
    "results/digests.py",
    "results/read_memo.py",
)


def fingerprint(location: str) -> Fingerprint | None:
    """What the kernel says of a local file (None: a bucket's, or not a regular file)."""
    if fileio.is_uri(location):
        return None
    try:
        st = os.lstat(fileio.local_path(location))
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


@cache
def checking_code() -> str:
    """A digest of the checking code (`CHECKING_CODE`), once per process."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in CHECKING_CODE:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes())
    return digest.hexdigest()


def validation_key(cache: Fingerprint, covered: list, context: list, cols: list[str]) -> str:
    """The key of one validation: the cache file's fingerprint, [(relative path, digest)] of
    the files it covers, the fingerprints of the other files the checks read (`context`),
    the columns and the checking code."""
    doc = [list(cache), sorted(covered), context, sorted(cols), checking_code()]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class ReadMemo:
    """The memos of one local experiment (module docstring); None-like for a bucket's: every
    lookup misses and nothing is written."""

    def __init__(self, root: str):
        self.path: Path | None = None
        self.digests: dict[str, list] = {}  # relative path -> [fingerprint, sha256]
        self.valid: list[str] = []  # validation keys found valid, newest last
        self.changed = False
        if fileio.is_uri(root):
            return
        where = str(fileio.local_path(root).resolve())
        self.path = user_cache("validated", hashlib.sha256(where.encode()).hexdigest() + ".json")
        try:
            doc = json.loads(self.path.read_text())
            self.digests = dict(doc["digests"])
            self.valid = [k for k in doc["valid"] if isinstance(k, str)]
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def digest(self, relative: str, found: Fingerprint | None) -> str | None:
        """The file's SHA-256 remembered at this fingerprint, else None (hash it)."""
        record = self.digests.get(relative)
        if found is None or not isinstance(record, list) or len(record) != 2:
            return None
        return record[1] if record[0] == list(found) and isinstance(record[1], str) else None

    def remember(self, relative: str, found: Fingerprint | None, digest: str) -> None:
        if self.path is not None and found is not None:
            self.digests[relative] = [list(found), digest]
            self.changed = True

    def validated(self, key: str) -> bool:
        return key in self.valid

    def record_valid(self, key: str) -> None:
        if self.path is not None and key not in self.valid:
            self.valid = [*self.valid[-7:], key]  # a few: an experiment's stages and slices
            self.changed = True

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # one per process and thread: a run refreshes its caches on a thread of their own
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps({"digests": self.digests, "valid": self.valid}))
            os.replace(tmp, self.path)
        except OSError:
            pass


def cache_key(exp: Experiment, path: str, covered, covers: dict, cols) -> str | None:
    """The `read_memo` key of validating the cache at `path` for `covered` (None: not a
    local cache): besides the cache and the files, what the row checks read, sweep.json and
    each trial's directory and trial.json, by fingerprint."""
    cache = fingerprint(path)
    if cache is None:
        return None
    trials = sorted({f.trial_id for f in covered})
    context = [
        fingerprint(exp.sweep_json),
        [
            (
                t,
                dir_print(exp.trial_dir(t)),
                fingerprint(fileio.join(exp.trial_dir(t), "trial.json")),
            )
            for t in trials
        ],
    ]
    files = [(exp.relative(f.path), covers[exp.relative(f.path)][1]) for f in covered]
    return validation_key(cache, files, context, cols)


def dir_print(directory: str) -> list[int] | None:
    """A directory's own lstat (a link put in its place is told apart), or None."""
    try:
        st = os.lstat(fileio.local_path(directory))
    except OSError:
        return None
    return [st.st_mode, st.st_ino, st.st_dev, st.st_ctime_ns]
