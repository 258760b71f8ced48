"""What a stage's files are, checked before any of their rows is read: each file's footer (its
schema exactly the stage's, a legacy file lacking only the columns added since) and the files
of each model (one compacted file at most: two cannot both be its rows), and each
certification file's row count at most its model's test points (`footer_problem`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.storage import StageFile, by_model
from trainables.kernel import fileio
from trainables.kernel.config import ADDED_FIELDS

# Columns older files lack: DDRS's, and the trial settings added since (a file written before
# them reads them as null; the trial's config says how it trained, `ADDED_FIELDS`).
LEGACY_OPTIONAL = frozenset(
    {"smoothing", "predict_raw", "radius_raw", "correct_raw", "memory_changed", *ADDED_FIELDS}
)
# Columns whose type changed, with their former type: `amp` was a bool (false/true), read as
# the off/fp16 it meant (`reader._legacy_values`).
LEGACY_TYPES = {"amp": pa.bool_()}
TWO_COMPACTED = "two compacted files of one model ({}): which one is real cannot be told"


def one_compacted(compacted: list[StageFile]) -> tuple[list[StageFile], list[str]]:
    """(the compacted files of models that have one, ["path: problem"] naming every file of
    the models that have more). Compaction writes one file per model and a model is never
    compacted twice, so a second one (another shard count, or planted) makes the model's
    rows unknowable: the whole model is left out, whichever file is real."""
    kept, invalid = [], []
    for files in by_model(compacted).values():
        if len(files) == 1:
            kept += files
            continue
        names = ", ".join(sorted(f.path.rsplit("/", 1)[-1] for f in files))
        invalid += [f"{f.path}: {TWO_COMPACTED.format(names)}" for f in files]
    return kept, invalid


@dataclass(frozen=True)
class Footer:
    """What a Parquet file's footer says: its schema (with its metadata) and row count."""

    schema: pa.Schema
    rows: int


def file_footer(path: str) -> Footer | str:
    """A file's footer, or why it cannot be read."""
    fs, local = fileio.filesystem(path)
    try:
        meta = pq.read_metadata(local, filesystem=fs)
        return Footer(meta.schema.to_arrow_schema(), meta.num_rows)
    except (pa.ArrowInvalid, OSError) as e:
        return f"not a readable Parquet file ({str(e).splitlines()[0]})"


def file_schema(path: str) -> pa.Schema | str:
    """A file's schema (with its metadata), or why it cannot be read."""
    footer = file_footer(path)
    return footer if isinstance(footer, str) else footer.schema


def footer_problem(f: StageFile, footer: Footer | str, schema: pa.Schema) -> str | None:
    """Why file `f` of the stage of `schema` is not one, from its footer alone: its schema
    (`schema_problem`), or (a certification file) more rows than its model has test points,
    so that a file claiming millions is never scanned."""
    if isinstance(footer, str) or (problem := schema_problem(footer.schema, schema)):
        return footer if isinstance(footer, str) else problem
    if f.stage != "certify":
        return None
    from sweeper.results.provenance import most_points  # it imports storage, as this does

    dataset = _dataset(footer.schema.metadata or {})
    most = most_points(f.setting_id, dataset)
    if footer.rows > most:
        split = f"the test split of {dataset}" if dataset else "the largest test split"
        return f"{footer.rows} rows, more than the {most} test points its cert_id names in {split}"
    return None


def cache_problem(footer: Footer | str, schema: pa.Schema, stage: str, covers: dict) -> str | None:
    """Why a stage's cache is not one, from its footer alone: its schema, or (certification)
    more rows than the models it records can have (`covers`: their paths relative to the
    experiment, `<stage>/<trial_id>/<cert_id>/<file>`; each model's grid over the largest
    test split), so that a cache claiming millions is never scanned."""
    if isinstance(footer, str) or (problem := schema_problem(footer.schema, schema)):
        return footer if isinstance(footer, str) else problem
    if stage != "certify":
        return None
    from sweeper.results.provenance import most_points

    most = sum(most_points(_setting_dir(rel), None) for rel in covers)
    if footer.rows > most:
        return f"{footer.rows} rows, more than the {most} test points of the models it records"
    return None


def _setting_dir(relative: str) -> str:
    """The setting directory (cert_id) of a stage file's path relative to the experiment."""
    parts = relative.replace("\\", "/").split("/")
    return parts[-2] if len(parts) > 1 else ""


def _dataset(metadata: dict) -> str | None:
    """The data set of the trial config a file's metadata records (None: none recorded)."""
    try:
        dataset = json.loads(metadata.get(b"sweeper.config", b"null"))["dataset"]
    except (ValueError, TypeError, KeyError):
        return None
    return dataset if isinstance(dataset, str) else None


def schema_problem(have: pa.Schema | str, schema: pa.Schema) -> str | None:
    """Why a file of schema `have` (or unreadable: why) is not one of the stage's (None:
    its schema is exactly the stage's)."""
    if isinstance(have, str):
        return have
    types = dict(zip(have.names, have.types, strict=True))  # a schema's `names` is a new list
    for f in schema:
        if f.name not in types:
            if f.name not in LEGACY_OPTIONAL:
                return f"column {f.name!r} is missing"
        elif not _type_ok(types[f.name], f):
            return f"column {f.name!r} is {types[f.name]}, not {f.type}"
    wanted = set(schema.names)
    extra = [n for n in have.names if n not in wanted]
    return f"unexpected columns {extra}" if extra else None


def _type_ok(have: pa.DataType, wanted: pa.Field) -> bool:
    legacy = LEGACY_TYPES.get(wanted.name)
    return have.equals(wanted.type) or (legacy is not None and have.equals(legacy))
