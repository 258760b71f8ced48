"""What the reads make of attestations (issue 38 item 3; docs/security.md).

With a key to check with (`reading_key`: the public key in the file $SWEEPER_PUBLIC_KEY names,
as published with results, else this machine's signing key's), every results file whose rows
a read uses is classified (`check_files`): attested (its statement verifies, is of its own
model, setting and shard, signs its rows, and was made from the checkpoint its trial's
training attested), unattested (no statement: made without a key, or before keys, or planted)
or failed. A failed file's rows never count: it is named and left out, like a damaged file.
An unattested file's models still count, and the views say which numbers rest on them
(`--attested-only` leaves them out). Without a key nothing is checked and nothing is said.

Verification reads a file's rows once: what a file's statement says is remembered by the
SHA-256 of the file's bytes, per key, in `$XDG_CACHE_HOME/sweeper/attested/<key id>.json`
(outside the storage, which is not trusted), so later reads only hash the bytes."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.attested_rows import imported, place_problem, said_by, statement_of
from sweeper.results.storage import Experiment, StageFile
from trainables.attestations import train_statement
from trainables.kernel import fileio
from trainables.kernel.attestation import (
    AttestationError,
    PublicKey,
    load_signing_key,
    sha256_bytes,
)
from trainables.kernel.errors import ProblemsError

PUBLIC_ENV = "SWEEPER_PUBLIC_KEY"


def reading_key() -> PublicKey | None:
    """The key reads check attestations with (module docstring); None: not checked.
    ProblemsError (exit 2) for a key that cannot be read."""
    try:
        if path := os.environ.get(PUBLIC_ENV, "").strip():
            return PublicKey.from_pem(Path(path).expanduser().read_bytes())
        key = load_signing_key()
    except (AttestationError, OSError) as e:
        where = f"${PUBLIC_ENV}" if os.environ.get(PUBLIC_ENV, "").strip() else "signing key"
        raise ProblemsError([f"{where}: {e}"]) from None
    return None if key is None else key.public


@dataclass(frozen=True)
class Attestations:
    """Of the files a read used: `unattested` the models (trial_id, setting) resting on a file
    with no statement, `failed` "path: why" (left out), `attested` how many files verified."""

    key_id: str
    attested: int
    unattested: frozenset[tuple[str, str]]
    failed: tuple[str, ...]
    inventory: tuple[str, ...] = ()  # what the signed inventory says is gone (`deleted_since`)

    @property
    def failed_models(self) -> set[str]:
        return {line.partition(": ")[0] for line in self.failed}


def check_files(
    exp: Experiment, files: list[StageFile], key: PublicKey, known: Mapping[str, dict] | None = None
) -> Attestations:
    """Each of `files` (shards and compacted files of one stage) classified (module
    docstring). `known`: what statements say, by the SHA-256 of their files' bytes, that
    this process knows without reading them (its own compaction tasks' `Compacted`)."""
    memo = Memo(key.key_id)
    for digest, vouched in (known or {}).items():
        memo.put(digest, vouched)
    trained: dict[str, str | None] = {}
    attested, unattested, failed = 0, set(), []
    for f in files:
        try:
            said = file_statement(f, key, memo)
            if said is None:
                unattested.add(f.model)
                continue
            check_statement(f, said, _trained(exp, f.trial_id, key, trained))
            attested += 1
        except (AttestationError, OSError, ValueError, pa.ArrowInvalid) as e:
            failed.append(f"{f.path}: {e}")
    memo.save()
    return Attestations(key.key_id, attested, frozenset(unattested), tuple(failed))


def file_statement(f: StageFile, key: PublicKey, memo: Memo) -> dict | None:
    """What the file's statement says (step, trial_id, setting_id, shard, checkpoint), from
    the memo when its bytes were verified before; None when it carries none."""
    data = fileio.read_bytes(f.path)
    digest = sha256_bytes(data)
    if (said := memo.get(digest)) is not None:
        return said
    statement = statement_of(pq.read_table(pa.BufferReader(data)), key)
    if statement is None:
        return None
    said = said_by(statement)
    memo.put(digest, said)
    return said


def check_statement(f: StageFile, said: dict, checkpoint: str | None) -> None:
    """AttestationError unless what file `f`'s statement says (`said_by`) is of its own place
    and made from `checkpoint` (the one its trial's training attested); an imported model's
    rows come from a published log, with no checkpoint behind them."""
    if imported(f, said["step"]):
        step, shard = "import", None
    else:
        step = "compact" if f.kind == "compacted" else f.stage
        shard = f"{f.index}/{f.count}" if f.kind == "shard" else None
    if problem := place_problem(said, step, f.model, shard):
        raise AttestationError(problem)
    if step != "import" and (checkpoint is None or said["checkpoint"] != checkpoint):
        raise AttestationError("made from a checkpoint its trial's training did not attest")


def _trained(exp: Experiment, trial_id: str, key: PublicKey, seen: dict) -> str | None:
    """The checkpoint digest trial `trial_id`'s training attested (None: none that verifies)."""
    if trial_id not in seen:
        try:
            statement = train_statement(exp.trial_dir(trial_id), key)
            seen[trial_id] = str(statement.outputs.get("checkpoint.pt"))
        except (AttestationError, OSError):
            seen[trial_id] = None
    return seen[trial_id]


def user_cache(*parts: str) -> Path:
    """A path under this user's cache ($XDG_CACHE_HOME/sweeper, else ~/.cache/sweeper): what
    a key holder remembers outside the storage."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "sweeper", *parts)


class Memo:
    """Verified statements by file digest, per key, outside the storage (module docstring).
    Losing it costs a re-verification, nothing more: any read or write problem is ignored."""

    def __init__(self, key_id: str):
        self.path = user_cache("attested", f"{key_id}.json")
        self.changed = False
        try:
            loaded = json.loads(self.path.read_text())
            self.known: dict[str, dict] = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            self.known = {}

    def get(self, digest: str) -> dict | None:
        said = self.known.get(digest)
        return said if isinstance(said, dict) else None

    def put(self, digest: str, said: dict) -> None:
        if self.known.get(digest) == said:  # nothing new: no rewrite of the file for it
            return
        self.known[digest] = said
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # one per process and thread: a run refreshes its caches on a thread of their own
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(self.known))
            os.replace(tmp, self.path)
        except OSError:
            pass
