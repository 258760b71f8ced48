"""A results file's attestation: the signed statement in its Parquet footer (issue 38).

A shard's rows are signed on the worker that computed them (step = the stage's name: inputs the
checkpoint its training attested, settings the trial, setting, shard and its points), a
compacted file's by the compaction that folded verified shards (step "compact": inputs each
shard's rows), an imported model's by `sweeper import` (step "import": the log's digest).
What is signed is the rows' digest (`rows_digest`: the SHA-256 of the canonical JSON of every
column's digest, `digests.column_digests`), so the statement travels in the file's own
metadata under `ATTESTATION` and still binds every value: a row changed, added or removed, or
the statement moved to another file, fails (`statement_of`)."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from sweeper.results.digests import column_digests
from sweeper.results.storage import StageFile
from trainables.attestations import code_version
from trainables.kernel.attestation import (
    AttestationError,
    PublicKey,
    SigningKey,
    Statement,
    canonical,
    load_signing_key,
    sha256_bytes,
)
from trainables.kernel.cert_ids import is_imported

ATTESTATION = b"sweeper.attestation"


def rows_digest(table: pa.Table) -> str:
    """The SHA-256 of `table`'s rows: its columns' digests, in canonical JSON."""
    return sha256_bytes(canonical(column_digests(table)))


def points_digest(indices: list[int] | tuple[int, ...]) -> str:
    return hashlib.sha256(canonical(list(indices))).hexdigest()


def data_of(table: pa.Table) -> dict[str, str]:
    """The data input of a statement about rows whose metadata records their trial's config
    (`trainables.data_cache.data_inputs`: a bucket's data set by its manifest entry)."""
    from trainables.data_cache import data_inputs

    config = json.loads((table.schema.metadata or {}).get(b"sweeper.config", b"{}"))
    return data_inputs(config.get("dataset", ""), config.get("data_dir"))


def signed(
    table: pa.Table, key: SigningKey, step: str, inputs: dict[str, str], settings: dict
) -> pa.Table:
    """`table` with its statement (`step` made these rows from `inputs`) in its metadata."""
    return signed_with(table, key, step, inputs, settings)[0]


def signed_with(
    table: pa.Table, key: SigningKey, step: str, inputs: dict[str, str], settings: dict
) -> tuple[pa.Table, Statement]:
    """`signed`, and the statement it carries (what its writer can vouch for)."""
    statement = Statement(step, inputs, {"rows": rows_digest(table)}, settings, code_version())
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != ATTESTATION}
    signed_table = table.replace_schema_metadata(
        {**meta, ATTESTATION: canonical(key.sign(statement))}
    )
    return signed_table, statement


def unsigned_metadata(metadata: dict | None) -> dict:
    """A file's metadata without its statement (what a file made from it starts from)."""
    return {k: v for k, v in (metadata or {}).items() if k != ATTESTATION}


def statement_of(table: pa.Table, public: PublicKey) -> Statement | None:
    """The statement `table` (read with its metadata) carries, verified with `public` and
    matching its rows; None when it carries none (unattested); AttestationError when it
    fails."""
    raw = (table.schema.metadata or {}).get(ATTESTATION)
    if raw is None:
        return None
    try:
        envelope = json.loads(raw)
    except ValueError:
        raise AttestationError("its attestation is not JSON") from None
    statement = public.verify(envelope)
    if statement.outputs.get("rows") != rows_digest(table):
        raise AttestationError("its rows are not the ones its attestation signed")
    return statement


def said_by(statement: Statement) -> dict:
    """What a statement says of its place, as a JSON dict (what the reads' memo keeps): its
    step, its settings (trial_id, setting_id, shard, ...) and the checkpoint it was made from."""
    return {
        **statement.settings,
        "step": statement.step,
        "checkpoint": statement.inputs.get("checkpoint.pt"),
    }


def place_problem(
    said: dict,
    step: str,
    model: tuple[str, str],
    shard: str | None = None,
    expected: dict[str, object] | None = None,
) -> str | None:
    """Why a statement (`said_by`) is not `step` of this `model` (trial_id, setting_id), of
    this `shard` ("i/k", for a shard) and with the `expected` settings (e.g. a pilot's stage),
    i.e. one moved from another file; None when it is."""
    if (said.get("step"), said.get("trial_id"), said.get("setting_id")) != (step, *model):
        return (
            f"its attestation is {said.get('step')} of {said.get('trial_id')}/"
            f"{said.get('setting_id')}, not {step} of {model[0]}/{model[1]}"
        )
    if shard is not None and said.get("shard") != shard:
        return "its attestation is of another shard"
    wrong = [k for k, v in (expected or {}).items() if said.get(k) != v]
    return f"its attestation is of another {wrong[0]}" if wrong else None


def imported(f: StageFile, step: str) -> bool:
    """Whether a file signed as `step` is `sweeper import`'s: a compacted file of an imported
    setting (its rows from a published log, whose digest the statement names)."""
    return step == "import" and f.kind == "compacted" and is_imported(f.setting_id)


def attestation_problem(
    table: pa.Table, step: str, trial_id: str, setting_id: str, **expected: object
) -> str | None:
    """Why rows read back cannot count, as far as their attestation goes, when this process
    holds a key (None: they can, or there is no key): not attested, not verifying, or not of
    `step` for this model and setting (and `expected` settings, e.g. a pilot's stage)."""
    key = load_signing_key()
    if key is None:
        return None
    try:
        statement = placed_statement(table, key.public, step, (trial_id, setting_id), expected)
    except AttestationError as e:
        return str(e)
    return None if statement is not None else "not attested, and a signing key is set"


def placed_statement(
    table: pa.Table,
    public: PublicKey,
    step: str,
    model: tuple[str, str],
    expected: dict[str, object] | None = None,
) -> Statement | None:
    """The rows' statement, verified with `public` and placed (`place_problem`) as `step`'s of
    this `model` (trial_id, setting_id) with the `expected` settings; None when the rows carry
    none; AttestationError saying why it cannot be theirs."""
    statement = statement_of(table, public)
    if statement is None:
        return None
    problem = place_problem(said_by(statement), step, model, None, expected)
    if problem:
        raise AttestationError(problem)
    return statement
