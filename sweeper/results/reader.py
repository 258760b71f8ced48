"""Reading a stage's rows: nothing trusted as read, and few files opened.

A finished model's rows are one compacted file; the experiment's cache (`cache/<stage>.parquet`)
holds the rows of many compacted files in one, so a 644-model sweep is read from one file
instead of 644 (or 6,440 shards). The reader lists the stage once, takes from the cache the
models whose compacted file it covers (same path, size and bytes: `digests`), and opens only
the rest: compacted files it does not cover, and the shards of unfinished models. The cache's
own rows must have the digests it was written with, else it is named and the files are read.

Every file is validated before its rows are used: its schema exactly the stage's (a legacy file
may lack the columns added since), its `experiment`, trial_id and setting equal to what its
path says, its rows passing the stage's own checks (certified radii in [0, the largest radius
n and α allow], labels within the class count, ...), every row's test point a number ≥ 0 and
none twice for a model, and against the experiment's records (the stage's `consistent`: for
certification, `provenance`). A file that fails is named with what is wrong and left out,
never merged (`StageRows.invalid`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sweeper.results.attestation_reads import check_files, reading_key
from sweeper.results.attested_rows import ATTESTATION
from sweeper.results.digests import column_digests, file_digest
from sweeper.results.file_checks import cache_problem, file_footer, one_compacted
from sweeper.results.read_memo import ReadMemo, cache_key, fingerprint
from sweeper.results.signed_cache import cache_statement, unattested_in, verified_cache
from sweeper.results.stage_table import StageTable, write_table
from sweeper.results.storage import Experiment, StageFile, by_model
from sweeper.results.sweep_file import declared
from sweeper.results.validation import read_valid, row_problems, scan, unreadable_reason
from trainables.kernel import fileio
from trainables.kernel.attestation import canonical, load_signing_key
from trainables.kernel.cert_ids import is_imported

# Cache metadata: {path relative to the experiment: [size, SHA-256 of its bytes]} of the
# compacted files it holds, and {column: digest of its rows} (`digests`).
COVERS = b"sweeper.covers"
ROWS = b"sweeper.rows"


@dataclass
class StageRows:
    table: pa.Table
    files: list[str]  # the compacted and shard files whose rows are in `table`
    missing: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # unfinished models
    invalid: list[str] = field(default_factory=list)  # "path: what is wrong", left out
    memory: list[StageFile] = field(default_factory=list)  # legacy DDRS memory files to apply
    used: list[StageFile] = field(default_factory=list)  # `files`, as listed
    # files whose rows came from a cache the reader's key verified: path -> attested
    vouched: dict[str, bool] = field(default_factory=dict)


def read_stage(exp: Experiment, stage: StageTable, columns: list[str] | None = None) -> StageRows:
    """Every valid row of `stage` (only `columns`, if given, plus what validation needs).
    Each model's rows come from one source: the cache, its compacted file, or its shards
    (a model with two compacted files from none: `one_compacted`), so no test point of a
    model can be both in the cache and in a file."""
    links: list[str] = []  # never read through: each named and left out
    models = by_model(exp.stage_files(stage.name, links=links))
    listed = [f for fs in models.values() for f in fs if f.kind == "compacted"]
    done = {f.model for f in listed}
    compacted, invalid = one_compacted(listed)
    invalid += [f"{link}: {fileio.LINKED}" for link in links]
    shards = [f for m, fs in models.items() if m not in done for f in fs if f.kind == "shard"]
    memory = [f for m, fs in models.items() if m not in done for f in fs if f.kind == "memory"]
    cols = read_columns(stage, columns)
    # what is returned: the columns asked, not those only the checks read (a legacy memory
    # file's checks read them later)
    keep = cols if columns is None or memory else _asked(stage, columns)
    cached, covered, cache_invalid, vouched = _from_cache(exp, stage, compacted, (cols, keep))
    rest = [f for f in compacted if f.path not in covered] + shards
    table, rest_invalid = read_valid(exp, stage, rest, cols)
    invalid += cache_invalid + rest_invalid
    bad = {p.partition(": ")[0] for p in invalid}
    table = table.select(keep)
    table = pa.concat_tables([cached.select(keep), table]) if cached.num_rows else table
    used = [f for f in compacted if f.path in covered] + [f for f in rest if f.path not in bad]
    valid_shards = [f for f in shards if f.path not in bad]
    paths = [f.path for f in used]
    return StageRows(table, paths, _missing(valid_shards), invalid, memory, used, vouched)


def read_columns(stage: StageTable, columns: list[str] | None) -> list[str]:
    """`columns` (None: all) and those the validation of `stage`'s rows reads."""
    base = ["experiment", "trial_id", stage.setting_column, "idx", *stage.checked_columns]
    wanted = [f.name for f in stage.schema] if columns is None else columns
    return list(dict.fromkeys([*wanted, *base]))


def _asked(stage: StageTable, columns: list[str]) -> list[str]:
    return list(dict.fromkeys([*columns, "trial_id", stage.setting_column, "idx"]))


def _missing(shards: list[StageFile]) -> dict[tuple[str, str], list[int]]:
    """Per unfinished model, the shard numbers absent from its `shard-k-of-K` sequence."""
    seen: dict[tuple[str, str], set[int]] = {}
    count: dict[tuple[str, str], int] = {}
    for f in shards:
        seen.setdefault(f.model, set()).add(f.index or 0)
        count[f.model] = f.count or 0
    return {m: sorted(set(range(count[m])) - s) for m, s in seen.items() if len(s) < count[m]}


# ------------------------------------------------------------------------------ the cache
def _from_cache(exp: Experiment, stage: StageTable, compacted: list[StageFile], columns):
    """(the cached rows of compacted files still present with the bytes they were cached
    with, their paths, problems, {path: attested} when a key verified the cache and what it
    records of the files' attestations: `signed_cache`). A cache that cannot be trusted is
    named and ignored: the files are read. `columns`: (those the checks read, those kept)."""
    path = exp.cache_path(stage.name)
    cols, keep = columns
    empty = stage.schema.empty_table().select(keep)
    if not compacted or not fileio.exists(path):
        return empty, set(), [], {}
    try:
        covers, rows = _cache_records(path)
    except OldCache:  # replaced by the next refresh (`sweeper compact`, or a run's)
        return empty, set(), [], {}
    except (KeyError, ValueError, pa.ArrowInvalid, OSError) as e:
        return (
            empty,
            set(),
            [f"{path}: not a cache of this experiment ({e}); reading the files"],
            {},
        )
    if key := reading_key():
        verified = verified_cache(_meta(path), covers, rows, key)
        if isinstance(verified, str):
            return empty, set(), [f"{path}: {verified}; reading the files instead"], {}
        unattested = unattested_in(verified)
        signed = _signed_rows(exp, stage, path, compacted, cols, (rows, covers), unattested)
        if signed is not None:
            return signed
    memo = ReadMemo(exp.root)
    covered, metadata = _unchanged(exp, compacted, covers, memo)
    if not covered:
        memo.save()
        return empty, set(), [], {}
    records = (rows, metadata, covers)
    table, problems = _cached_rows(exp, stage, path, covered, (cols, keep), records, memo)
    memo.save()
    if problems:
        return empty, set(), [f"{path}: {problems[0]}; reading the files instead"], {}
    return table, {f.path for f in covered}, [], {}


def _signed_rows(exp, stage, path: str, compacted, cols, records, unattested: set[str] | None):
    """The `_from_cache` answer for a cache the reader's key verified, recording the files'
    attestations (`unattested` not None): covered files by their size, read, hashed and
    re-checked none (the key holder checked them as it folded them); None to take the checked
    path instead: no such record, or a covered model the sweep no longer declares (the checked
    path names it) or rows that are not as signed."""
    covers = records[1]
    if unattested is None:
        return None
    covered = []
    for f in compacted:
        record = covers.get(exp.relative(f.path))
        if record is not None and record[0] == f.size:
            covered.append(f)
    sweep = declared(exp)
    for f in covered:
        imported = is_imported(f.setting_id)
        if sweep.setting_problem(f.setting_id) or (
            not imported and sweep.trial_problem(f.trial_id)
        ):
            return None
    if not covered:
        return None
    table = _cache_table(stage, path, covered, cols, records)[0]
    if table is None:
        return None
    vouched = {f.path: exp.relative(f.path) not in unattested for f in covered}
    return table, set(vouched), [], vouched


class OldCache(ValueError):
    """A cache of sizes only (before content digests): it vouches for nothing; read the files."""


def _cache_records(path: str) -> tuple[dict, dict]:
    """(its COVERS: relative path -> [size, SHA-256 of the bytes], its ROWS: column -> digest);
    OldCache if it records sizes only, KeyError/ValueError if it is no cache (a FIFO too)."""
    if why := fileio.regular_file_problem(path):
        raise ValueError(why)
    fs, local = fileio.filesystem(path)
    meta = pq.read_schema(local, filesystem=fs).metadata or {}
    covers = json.loads(meta[COVERS])
    if ROWS not in meta and all(isinstance(v, int) for v in covers.values()):
        raise OldCache("a record of sizes only")
    rows = json.loads(meta[ROWS])
    if not all(isinstance(v, list) and len(v) == 2 for v in covers.values()):
        raise ValueError("a record of the files that is not [size, digest] each")
    return covers, rows


def _meta(path: str) -> dict:
    fs, local = fileio.filesystem(path)
    return pq.read_schema(local, filesystem=fs).metadata or {}


def _unchanged(exp: Experiment, compacted: list[StageFile], covers: dict, memo: ReadMemo):
    """(the compacted files whose bytes are those the cache recorded, each one's Parquet
    metadata where an import record may be needed). The size first, so a file that
    changed size is not read; a local file whose fingerprint this user hashed before is not
    read again (`read_memo`), unless its import record is needed."""
    covered: list[StageFile] = []
    metadata: list[dict | None] = []
    for f in compacted:
        relative = exp.relative(f.path)
        record = covers.get(relative)
        if record is None or record[0] != f.size:
            continue
        imported = is_imported(f.setting_id)
        found = fingerprint(f.path)
        if not imported and memo.digest(relative, found) == record[1]:
            covered.append(f)
            metadata.append(None)
            continue
        try:
            data = fileio.read_bytes(f.path)
        except OSError:
            continue
        digest = file_digest(data)
        memo.remember(relative, found, digest)
        if digest == record[1]:
            covered.append(f)
            metadata.append(pq.read_schema(pa.BufferReader(data)).metadata if imported else None)
    return covered, metadata


def _cached_rows(exp, stage, path: str, covered: list[StageFile], columns, records, memo):
    """The cache's rows of the `covered` models: its columns' digests those it was written
    with, then validated like files (one per model); none of it again when this user found
    these very rows valid with these very inputs (`read_memo.cache_key`): then only the
    columns kept are read. `columns`: (those the checks read, those kept)."""
    (cols, keep), (digests, metadata, covers) = columns, records
    before, key = fingerprint(path), cache_key(exp, path, covered, covers, cols)
    known = key is not None and memo.validated(key)
    read = keep if known else cols
    table, problem, frag = _cache_table(stage, path, covered, read, (digests, covers), known)
    if table is None:
        return None, [problem]
    if known:  # the bytes read must be those validated
        return (table, []) if fingerprint(path) == before else (None, ["changed as it was read"])
    table = table.append_column("__fragment_index", pa.array(frag))
    problems = row_problems(exp, stage, table, covered, identified=True, metadata=metadata)
    if not problems and key is not None and fingerprint(path) == before:
        memo.record_valid(key)
    return table.drop_columns(["__fragment_index"]), [
        f"rows of {covered[i].trial_id}: {p}" for i, p in problems.items()
    ]


def _cache_table(
    stage: StageTable, path: str, covered: list[StageFile], cols, records, known: bool = False
):
    """(the cache's rows of the `covered` models, its columns' digests those it was written
    with (`known`: not compared here, the caller knows these bytes); None if not, then why;
    each row's index in `covered`)."""
    digests, covers = records
    footer = file_footer(path)
    if problem := cache_problem(footer, stage.schema, stage.name, covers):
        return None, problem, None
    try:
        table = scan([path], stage.schema, cols)
    except (OSError, pa.ArrowInvalid) as e:  # a damaged page
        return None, unreadable_reason(e), None
    if not known and not _as_written(table, footer.schema.names, digests):  # type: ignore[union-attr]
        return None, "its rows are not those it was written with", None
    frag = _model_index(table, stage.setting_column, covered)
    if (frag < 0).any():  # rows of models no longer present (filtering copies every column)
        table, frag = table.filter(pa.array(frag >= 0)), frag[frag >= 0]
    return table, None, frag


def _as_written(table: pa.Table, written: list[str], digests: dict) -> bool:
    """Whether the cache's columns read in `table` have the digests it recorded. A column
    its file lacks (one added to the schema since it was written, `LEGACY_OPTIONAL`) reads
    as null and was never recorded: nothing to compare, unless a digest of it was recorded
    (then the column was dropped since)."""
    names = [c for c in table.column_names if c in written or c in digests]
    return column_digests(table, names) == {c: digests.get(c) for c in names}


def _model_index(table: pa.Table, setting_column: str, models: list[StageFile]) -> np.ndarray:
    """Per row, the index in `models` of its (trial_id, setting), or -1 (a null included).
    Strings are dictionary-encoded once per column, not joined per row (a cache holds
    millions); a null is encoded as a name of its own, which no model has."""
    codes, names = [], []
    for column in ("trial_id", setting_column):
        encoded = pc.dictionary_encode(table.column(column), null_encoding="encode")
        encoded = encoded.combine_chunks()
        codes.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
        names.append(encoded.dictionary.to_pylist())
    where = {m.model: i for i, m in enumerate(models)}
    lookup = np.array([[where.get((t, s), -1) for s in names[1]] for t in names[0]], dtype=np.int64)
    return lookup[codes[0], codes[1]] if len(codes[0]) else np.zeros(0, dtype=np.int64)


def refresh_cache(
    exp: Experiment,
    stage: StageTable,
    rewritten: frozenset[str] = frozenset(),
    known: Mapping[str, dict] | None = None,
) -> int:
    """Fold every valid compacted file into the stage's cache (atomically), each recorded with
    its size and the digest of its bytes as validated, the cache's columns with theirs; with
    a key, files whose attestation fails left out, and the statement signed (`signed_cache`).
    `rewritten`: paths of files written again since (an envelope strategy's tie completion),
    read again whatever the cache says of them (a key holder's read trusts a covered file of
    the same size). `known`: statements this process vouches for by their files' digests
    (`attestation_reads.check_files`). Returns how many models the cache holds. Only the
    driver holding the lease calls this, one call at a time (`sweeper.run.cache_refresh`)."""
    compacted = one_compacted([f for f in exp.stage_files(stage.name) if f.kind == "compacted"])[0]
    if not compacted:
        return 0
    cols = [f.name for f in stage.schema]
    cached, covered, _, vouched = _from_cache(exp, stage, compacted, (cols, cols))
    covered = covered - rewritten
    vouched = {p: v for p, v in vouched.items() if p not in rewritten}
    new = [f for f in compacted if f.path not in covered]
    if not new:
        return len(covered)
    old = _cache_records(exp.cache_path(stage.name))[0] if covered else {}
    # Digests before the rows are read: a file rewritten meanwhile then fails its digest.
    digests = {f.path: file_digest(fileio.read_bytes(f.path)) for f in new}
    table, invalid = read_valid(exp, stage, new, cols)
    bad = {p.partition(": ")[0] for p in invalid}
    key, unattested = load_signing_key(), None
    if key is not None:  # what the signed cache records of each file's attestation
        unattested, failed = _attestations(exp, compacted, vouched, key, known)
        bad |= failed
    kept = [f for f in compacted if f.path in covered and f.path not in bad]
    covers = {exp.relative(f.path): old[exp.relative(f.path)] for f in kept}
    covers.update(
        {exp.relative(f.path): [f.size, digests[f.path]] for f in new if f.path not in bad}
    )
    cached, table = _without(cached, stage, kept), _without(table, stage, new, bad)
    rows = pa.concat_tables([cached, table]) if cached.num_rows else table
    digested = column_digests(rows)
    meta = {COVERS: json.dumps(covers), ROWS: json.dumps(digested)}
    if key is not None:  # what it covers, its columns and the files' attestations, signed
        listed = None if unattested is None else sorted(unattested & set(covers))
        meta[ATTESTATION] = canonical(key.sign(cache_statement(covers, digested, listed))).decode()
    write_table(rows.replace_schema_metadata(meta), exp.cache_path(stage.name))
    return len(covers)


def _without(table: pa.Table, stage: StageTable, files: list[StageFile], bad=frozenset()):
    """`table`'s rows of `files` whose paths are not in `bad`."""
    keep = np.flatnonzero([f.path not in bad for f in files])
    if len(keep) == len(files) and not (_model_index(table, stage.setting_column, files) < 0).any():
        return table
    return table.filter(pa.array(np.isin(_model_index(table, stage.setting_column, files), keep)))


def _attestations(exp: Experiment, compacted: list[StageFile], vouched: dict, key, known):
    """(the covered-to-be files resting on no attestation, relative paths; the paths whose
    attestation fails, left out of the cache): a file the old signed cache vouched for as it
    recorded, every other one checked (`attestation_reads.check_files`, `known` its memo's)."""
    todo = [f for f in compacted if f.path not in vouched]
    checked = check_files(exp, todo, key.public, known)
    failed = {line.partition(": ")[0] for line in checked.failed}
    unattested = {exp.relative(p) for p, attested in vouched.items() if not attested}
    unattested |= {exp.relative(f.path) for f in todo if f.model in checked.unattested}
    return unattested, failed


def uncovered(exp: Experiment, stage: StageTable, files: Iterable[StageFile]) -> int:
    """How many compacted files the cache does not hold, by their sizes (the driver
    refreshes it when many; a reader checks the bytes too)."""
    try:
        covers = _cache_records(exp.cache_path(stage.name))[0]
    except (KeyError, ValueError, pa.ArrowInvalid, OSError):
        covers = {}
    sizes = {rel: record[0] for rel, record in covers.items()}
    return sum(sizes.get(exp.relative(f.path)) != f.size for f in files if f.kind == "compacted")
