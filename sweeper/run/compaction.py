"""Compaction: once every shard of a model and setting is written, one task runs the stage's
finishing step (DDRS's memory pass), writes `compacted-of-K.parquet`, reads it back to verify
it, and only then deletes the shards. A crash at any point leaves either the shards or a
verified compacted file (or both: readers then take the compacted file, and the next
compaction deletes the leftover shards).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.attested_rows import (
    place_problem,
    said_by,
    signed_with,
    statement_of,
    unsigned_metadata,
)
from sweeper.results.digests import file_digest
from sweeper.results.file_checks import file_footer, footer_problem
from sweeper.results.stage_table import write_table
from sweeper.results.storage import MEMORY, Experiment, StageFile, by_model
from sweeper.run.stage import Identified, Stage
from trainables.kernel import fileio
from trainables.kernel.attestation import (
    AttestationError,
    SigningKey,
    Statement,
    load_signing_key,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compacted:
    """What a compaction wrote, as its task returns it to the driver (through Ray, not the
    storage): its `rows`, the SHA-256 of the file's bytes, and, when signed, what its
    statement says (`said_by`) under the key `key_id`. The driver's cache refresh takes that
    statement as verified while the file's bytes have this digest (`refresh_cache`'s
    `known`): the worker that signed the rows need not be second-guessed by the process
    that started it, only the storage in between."""

    rows: int
    digest: str
    said: dict | None = None
    key_id: str | None = None


def compact(
    exp: Experiment, stage: Stage, trial_id: str, setting: Identified, count: int
) -> Compacted:
    """Fold a model's `count` shards into its compacted file (after `stage.finish`), verify
    the file, then delete the shards (and a legacy memory file). Idempotent."""
    sid = setting.setting_id
    key = load_signing_key()
    target = exp.compacted_path(stage.name, trial_id, sid, count)
    files = exp.stage_files(stage.name, within=exp.setting_dir(stage.name, trial_id, sid))
    written: bytes | None = None  # the compacted file's bytes, once read back
    if not fileio.exists(target):
        rows, statement = _fold(exp, stage, (trial_id, setting, count), files, key)
    else:
        _check_footers([f for f in files if f.path == target], stage)
        rows = pq.read_metadata(_fs_path(target)[1], filesystem=_fs_path(target)[0]).num_rows
        statement = None
        if key is not None:
            written = fileio.read_bytes(target)  # the bytes verified are the bytes digested
            statement = _check_attested(target, written, "compact", (trial_id, sid), None, key)
    digest = _verified_digest(target, rows, stage.schema, written)
    for f in files:
        if f.kind in ("shard", "memory"):
            fileio.delete(f.path)
    if statement is None or key is None:
        return Compacted(rows, digest)
    return Compacted(rows, digest, said_by(statement), key.key_id)


def _fold(
    exp: Experiment,
    stage: Stage,
    model: tuple[str, Identified, int],
    files: list[StageFile],
    key: SigningKey | None,
) -> tuple[int, Statement | None]:
    """Write the compacted file of `model` (trial_id, setting, shard count) from its shards
    among `files`, signed with `key` when every shard is attested; returns its rows and its
    statement (None: unattested)."""
    trial_id, setting, count = model
    sid = setting.setting_id
    target = exp.compacted_path(stage.name, trial_id, sid, count)
    shards = sorted((f for f in files if f.kind == "shard" and f.count == count), key=_index)
    if missing := sorted(set(range(count)) - {f.index for f in shards}):
        raise RuntimeError(f"cannot compact {trial_id}/{sid}: shards {missing} of {count} missing")
    _check_footers(shards, stage)
    # Each shard read once: the rows verified are the rows folded, with no second read that a
    # shard rewritten in between would answer.
    shard_bytes = [fileio.read_bytes(f.path) for f in shards]
    inputs = _attested_shards(shards, shard_bytes, stage.name, key) if key else None
    if inputs is not None and any(f.kind == "memory" for f in files):
        log.warning("compacting %s/%s unsigned: a legacy memory file is unattested", trial_id, sid)
        inputs = None
    table = read_exact(shard_bytes, stage.schema).sort_by("idx")
    if stage.finish is not None:
        table = stage.finish(exp, trial_id, setting, table)
    _check_unique(table, target)
    table = table.replace_schema_metadata(_metadata(shard_bytes[0]))
    statement = None
    if key is not None and inputs is not None:
        made = {"trial_id": trial_id, "setting_id": sid, "stage": stage.name, "shards": count}
        if stage.finish is not None:  # e.g. the DDRS memory pass, attested with the rows
            made["finish"] = f"{stage.finish.__module__}.{stage.finish.__qualname__}"
        table, statement = signed_with(table, key, "compact", inputs, made)
    write_table(table, target)
    return table.num_rows, statement


def _index(f: StageFile) -> int:
    return f.index or 0


def _fs_path(location: str):
    return fileio.filesystem(location)


def _metadata(shard: bytes) -> dict:
    """The first shard's file metadata (backend, normalization, config) for the compacted
    file, without what is the shard's own (its number, its attestation)."""
    meta = unsigned_metadata(pq.read_schema(pa.BufferReader(shard)).metadata)
    return {k: v for k, v in meta.items() if k != b"sweeper.shard"}


def _check_attested(
    path: str, data: bytes, step: str, model: tuple[str, str], shard: str | None, key: SigningKey
) -> Statement | None:
    """The statement of the file at `path` (its bytes `data`), verified with `key`, of
    `step`, of its model (trial, setting) and `shard` ("i/k"; None: a compacted file); None
    when it carries none (unattested); RuntimeError naming the file when it fails."""
    try:
        statement = statement_of(pq.read_table(pa.BufferReader(data)), key.public)
    except AttestationError as e:
        raise RuntimeError(f"cannot compact {path}: {e}") from None
    if statement is not None and (problem := place_problem(said_by(statement), step, model, shard)):
        raise RuntimeError(f"cannot compact {path}: {problem}")
    return statement


def _attested_shards(
    shards: list[StageFile], shard_bytes: list[bytes], step: str, key: SigningKey
) -> dict[str, str] | None:
    """The compaction's inputs: each shard's rows, every shard verified (`_check_attested`,
    on its bytes `shard_bytes`) and all of one checkpoint; None when a shard is unattested
    (written without a key: the compacted file is then unattested too, and the reads mark
    it)."""
    inputs, checkpoints, unattested = {}, set(), []
    for f, data in zip(shards, shard_bytes, strict=True):
        shard = f"{f.index}/{f.count}"
        statement = _check_attested(f.path, data, step, f.model, shard, key)
        if statement is None:
            unattested.append(f.path)
            continue
        inputs[f"shard {shard}"] = statement.outputs["rows"]
        checkpoints.add(statement.inputs.get("checkpoint.pt"))
    if unattested:
        log.warning(
            "compacting %s unsigned: %d of its shards are not attested", step, len(unattested)
        )
        return None
    if len(checkpoints) != 1:
        raise RuntimeError(
            f"cannot compact {shards[0].path}: its model's shards are of several checkpoints"
        )
    return {**inputs, "checkpoint.pt": str(checkpoints.pop())}


def _check_footers(files: list[StageFile], stage: Stage) -> None:
    """Each file's schema the stage's and (certification) no more rows than its model has
    test points, from its footer: a planted file of millions of rows is never read whole."""
    for f in files:
        if problem := footer_problem(f, file_footer(f.path), stage.schema):
            raise RuntimeError(f"cannot compact {f.path}: {problem}")


def _check_unique(table: pa.Table, target: str) -> None:
    idx = table.column("idx").to_pylist()
    if len(set(idx)) != len(idx):
        dup = sorted(i for i, c in Counter(idx).items() if c > 1)[:5]
        raise RuntimeError(f"cannot compact {target}: test points {dup} appear twice")


def _verified_digest(target: str, rows: int, schema: pa.Schema, data: bytes | None) -> str:
    """The compacted file's SHA-256, once it reads back whole with the stage's schema and
    `rows` rows: one read of its bytes for both (`data`, if read already)."""
    data = fileio.read_bytes(target) if data is None else data
    table = pq.read_table(pa.BufferReader(data), schema=schema)
    if table.num_rows != rows:
        raise RuntimeError(f"{target} reads back {table.num_rows} rows, not {rows}: shards kept")
    return file_digest(data)


def read_exact(files: list[bytes], schema: pa.Schema) -> pa.Table:
    """Files of one stage, by their bytes, as one table with `schema` (columns a legacy file
    lacks are null)."""
    if not files:
        return schema.empty_table()
    import pyarrow.dataset as pads

    parquet = pads.ParquetFileFormat()
    fragments = [parquet.make_fragment(pa.BufferReader(data)) for data in files]
    return pads.FileSystemDataset(fragments, schema, parquet).to_table()


@dataclass(frozen=True)
class Named:
    """A setting known only by its id (enough to compact its models)."""

    setting_id: str


def compact_all(exp: Experiment, stages: list[Stage]) -> list[str]:
    """Compact every model whose shards are all written, in every stage, then refresh the
    caches; returns what was done, a line per stage (`sweeper compact`: e.g. for experiments
    written before compaction existed). The caller holds the experiment's lease."""
    from sweeper.results.reader import refresh_cache  # the reader: not on a compaction's worker

    lines = []
    for stage in stages:
        folded = waiting = memory = 0
        for (trial_id, sid), files in by_model(exp.stage_files(stage.name)).items():
            counts = {f.count for f in files if f.kind == "shard"}
            if any(f.kind == "compacted" for f in files) or len(counts) != 1:
                continue
            count = counts.pop() or 0
            if {f.index for f in files if f.kind == "shard"} != set(range(count)):
                waiting += 1
                continue
            compact(exp, stage, trial_id, Named(sid), count)
            folded += 1
            memory += any(f.kind == "memory" for f in files)
        cached = refresh_cache(exp, stage)
        legacy = f" ({memory} with a legacy DDRS {MEMORY} folded in and deleted)" if memory else ""
        lines.append(
            f"{stage.name}: compacted {folded} models{legacy}, {waiting} not complete; "
            f"the cache holds {cached} models"
        )
    return lines
