"""The results cache as a key holder signed it (issue 38): what lets a keyed read skip the
per-file work without trusting the storage.

The driver that refreshes a stage's cache (`reader.refresh_cache`, holding the lease) has
validated every row it folds (`validation.read_valid`) and, with a key, checked each new
file's attestation (`attestation_reads.check_files`): files that fail are left out of the
cache, unattested ones are named. It then signs a statement (step "cache") of the files it
covers (their sizes and SHA-256s), its columns' digests, and `unattested` (the covered files
resting on no attestation). A reader holding the key that verifies that statement and finds
the rows' digests as signed takes the cached rows as they are (`unattested_in`): no
covered file is read or hashed, no row re-checked, no statement of a covered file verified,
and a covered file's attestation is the one the statement records. A covered file whose size
changed is read instead; one replaced at the same size does not matter (its cached rows, the
signed ones, are what count; `sweeper verify` names the file). Without a key, or with a cache
whose statement fails or predates `unattested`, every file is checked as before."""

from __future__ import annotations

import json

from sweeper.results.attested_rows import ATTESTATION
from trainables.attestations import code_version
from trainables.kernel.attestation import (
    AttestationError,
    PublicKey,
    Statement,
    canonical,
    sha256_bytes,
)

UNATTESTED = "unattested"


def cache_statement(covers: dict, rows: dict, unattested: list[str] | None = None) -> Statement:
    """The cache's statement: the files it covers (their sizes and digests) and its columns'
    digests, each as the SHA-256 of its canonical JSON; `unattested`: the covered files (paths
    relative to the experiment) resting on no attestation, None when they were not checked."""
    settings = {} if unattested is None else {UNATTESTED: sorted(unattested)}
    return Statement(
        "cache",
        {"covers": sha256_bytes(canonical(covers))},
        {"columns": sha256_bytes(canonical(rows))},
        settings,
        code_version(),
    )


def verified_cache(meta: dict, covers: dict, rows: dict, key: PublicKey) -> Statement | str:
    """The cache's statement, verified with `key` and of these records (its files and its
    columns' digests), else why the cache cannot be taken as it says. The records themselves
    bind the rows: a reader compares the columns it reads with their digests."""
    raw = meta.get(ATTESTATION)
    if raw is None:
        return "not attested"
    try:
        statement = key.verify(json.loads(raw))
    except (AttestationError, ValueError) as e:
        return f"its attestation fails: {e}"
    expected = cache_statement(covers, rows)
    if (statement.step, dict(statement.inputs), dict(statement.outputs)) != (
        expected.step,
        dict(expected.inputs),
        dict(expected.outputs),
    ):
        return "its attestation is not of these records"
    return statement


def unattested_in(statement: Statement) -> set[str] | None:
    """The covered files resting on no attestation, as a verified statement records them;
    None when it records none (signed before caches recorded attestations): then every file
    is checked."""
    listed = statement.settings.get(UNATTESTED)
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        return None
    return set(listed)
