"""The results table: its Parquet schema, shard writing, and reading an experiment's results.

One row per test point per model per certification setting. Identity
columns are every resolved hyperparameter of the trial (null where a method does not use
it); certification columns keep the counts (`count`, `n`) so radii can be recomputed for
another α without a GPU. File metadata records the certify backend and the normalization.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sweeper.results.provenance import certified_checks, not_estimated
from sweeper.results.reader import read_stage
from sweeper.results.stage_table import StageTable, trial_parts
from sweeper.results.storage import Experiment
from sweeper.results.validation import float_column, int_column, prediction_checks
from trainables.kernel import fileio
from trainables.kernel.cert_ids import IMPORTED_PREFIX
from trainables.kernel.certificates import max_radius as max_radius  # its home; read from here too
from trainables.kernel.config import ENVIRONMENT_FIELDS, TrialConfig

if typing.TYPE_CHECKING:
    import pandas as pd  # imported where used: a shard's worker needs none of it

    from sweeper.results.attestation_reads import Attestations

_ARROW = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
CERT_COLUMNS = [
    ("sigma_cert", pa.float64()),  # per point: it varies under data-dependent smoothing
    ("smoothing", pa.string()),  # "fixed" σ, or "data-dependent" (DDRS, σ_x per point)
    ("n0", pa.int64()),
    ("n", pa.int64()),
    ("alpha", pa.float64()),
    ("idx", pa.int64()),
    ("label", pa.int64()),
    ("predict", pa.int64()),  # −1 = abstain
    ("count", pa.int64()),  # votes for the predicted (selected) class among n
    ("p_lower", pa.float64()),
    ("radius", pa.float64()),  # 0 when abstaining
    ("correct", pa.bool_()),
    ("time_s", pa.float64()),
    # Data-dependent models, once their memory pass has run: the Monte-Carlo certificates
    # (predict/radius/correct then hold the sound, memory-adjusted ones); null otherwise.
    ("predict_raw", pa.int64()),
    ("radius_raw", pa.float64()),
    ("correct_raw", pa.bool_()),
    ("memory_changed", pa.bool_()),
]
RAW = ("predict_raw", "radius_raw", "correct_raw", "memory_changed")
SOUND = ("predict", "radius", "correct")  # what the memory pass makes sound (apply_memory)
MODEL_KEY = ["trial_id", "cert_id"]
# Written by the DDRS memory pass before compaction existed, one file per data-dependent
# model (certify/<trial_id>/<cert_id>/memory.parquet); read for models not compacted yet.
MEMORY_SCHEMA = pa.schema(
    [
        ("trial_id", pa.string()),
        ("cert_id", pa.string()),
        ("idx", pa.int64()),
        ("predict_memory", pa.int64()),
        ("radius_memory", pa.float64()),
        ("correct_memory", pa.bool_()),
        ("memory_changed", pa.bool_()),
    ]
)


class ResultsError(RuntimeError):
    """Results cannot be read; the message names the file or directory."""


def _arrow_type(hint) -> pa.DataType:
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return _ARROW[args[0]]


def identity_fields() -> list[pa.Field]:
    hints = typing.get_type_hints(TrialConfig)
    return [
        pa.field(f.name, _arrow_type(hints[f.name]))
        for f in fields(TrialConfig)
        if f.name not in ENVIRONMENT_FIELDS
    ]


SCHEMA = pa.schema(
    [
        pa.field("trial_id", pa.string()),
        pa.field("experiment", pa.string()),
        pa.field("cert_id", pa.string()),
    ]
    + identity_fields()
    + [pa.field(name, typ) for name, typ in CERT_COLUMNS]
)


def shard_table(
    cfg: TrialConfig,
    experiment: str,
    cert_id: str,
    constants: dict,
    columns: dict[str, list],
    metadata: dict,
) -> pa.Table:
    """A shard's rows: the trial's identity and the certification constants repeated per row;
    `metadata` and the trial's config in the file's footer."""
    rows = len(columns["idx"])
    identity, config = trial_parts(cfg)
    data: dict[str, list[typing.Any]] = {
        "trial_id": [cfg.trial_id] * rows,
        "experiment": [experiment] * rows,
        "cert_id": [cert_id] * rows,
    }
    data.update({k: [v] * rows for k, v in identity.items()})
    data.update({k: [v] * rows for k, v in constants.items()})
    data.update(columns)
    data.setdefault("smoothing", ["fixed"] * rows)
    for name in RAW:
        data.setdefault(name, [None] * rows)
    table = pa.Table.from_pydict({f.name: data[f.name] for f in SCHEMA}, schema=SCHEMA)
    footer = {"config": config, **metadata}  # metadata may name another (tests plant one)
    meta = {f"sweeper.{k}": v if isinstance(v, str) else json.dumps(v) for k, v in footer.items()}
    return table.replace_schema_metadata(meta)


def check(table: pa.Table) -> list[tuple[np.ndarray, str]]:
    """Rows no CERTIFY could have written (the reader names and drops their file)."""
    predict, radius = int_column(table, "predict"), float_column(table, "radius")
    # per row: elementwise is ~60x faster than finding the few distinct settings first
    largest = max_radius(*(float_column(table, c) for c in ("sigma_cert", "n", "alpha")))
    imported = pc.starts_with(table.column("cert_id"), IMPORTED_PREFIX).to_numpy(
        zero_copy_only=False
    )
    slack = np.where(imported, largest * 6e-3 + 5e-4, largest * 1e-9 + 1e-12)  # printed to 3 digits
    skipped = not_estimated(table)  # the envelope strategy's: radius null (provenance)
    return [
        *prediction_checks(table),
        (
            ~skipped & (~np.isfinite(radius) | (radius < 0)),
            "a radius that is negative, NaN or infinite",
        ),
        (radius > largest + slack, "a radius larger than n and alpha allow for its sigma"),
        (~skipped & (predict == -1) & (radius != 0), "an abstention with a radius"),
    ]


# What `check` and `certified_checks` read (a read of some columns adds these).
CHECKED = (
    *("dataset", "label", "predict", "radius", "correct", "sigma_cert", "n", "alpha", "cert_id"),
    *("n0", "count", "p_lower", "smoothing", *RAW),
)
CERTIFY_ROWS = StageTable("certify", "cert_id", SCHEMA, check, CHECKED, certified_checks)


@dataclass
class Results:
    """Every valid certification row found. For data-dependent models (smoothing ==
    "data-dependent") predict/radius/correct are the memory-adjusted, sound values and the
    Monte-Carlo ones are kept as predict_raw/radius_raw/correct_raw; `sound` is False for
    rows of such models whose memory pass has not run yet."""

    frame: pd.DataFrame
    files: list[str]  # compacted and shard files whose rows are in the frame
    # (trial_id, cert_id) -> shard numbers missing from a model that has some shards
    missing_shards: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)  # "path: what is wrong", left out
    # what the files' attestations say (None: no key to check with; `attestation_reads`)
    attestations: Attestations | None = None

    @property
    def models(self) -> int:
        return 0 if self.frame.empty else int(self.frame.groupby(MODEL_KEY).ngroups)


def read_tables(files: list[str], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Files of one kind as one table; a file that is not valid Parquet is named in the error."""
    import pyarrow.dataset as pads  # here: it imports pandas, which a shard's worker never needs

    if not files:
        return schema.empty_table()
    fs, _ = fileio.filesystem(files[0])
    paths = [fileio.filesystem(f)[1] for f in files]
    try:
        return pads.dataset(paths, format="parquet", filesystem=fs, schema=schema).to_table()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        pass
    tables = []
    for f, p in zip(files, paths, strict=True):
        try:
            tables.append(pq.read_table(p, filesystem=fs, schema=schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
            reason = str(e).splitlines()[0]
            raise ResultsError(f"corrupt results file {f}: {reason}") from None
    return pa.concat_tables(tables)


def load_results(exp: Experiment, columns: list[str] | None = None) -> Results:
    """Every valid certification row of an experiment (only `columns`, if given, plus what
    validation and the DDRS columns need), with the shards still missing and the files left
    out as invalid (legacy DDRS memory files among them: `legacy_memory`; the envelope
    strategy's records of models the sweep never declared: `envelope_records.vouched`)."""
    import pandas as pd

    from sweeper.results.attestation_reads import reading_key
    from sweeper.results.envelope_records import vouched
    from sweeper.results.legacy_memory import read_memory, valid_memory

    if not fileio.exists(exp.root):
        raise ResultsError(f"no experiment at {exp.root}: check --storage and --experiment")
    wanted = None if columns is None else [*columns, "smoothing", *SOUND, *RAW]
    rows = read_stage(exp, CERTIFY_ROWS, wanted)
    frame = rows.table.to_pandas()
    frame["smoothing"] = frame["smoothing"].fillna("fixed")  # files written before DDRS
    memory, unreadable = read_memory(rows.memory, MEMORY_SCHEMA)
    memory, wrong = valid_memory(frame, memory)
    frame = apply_memory(frame, memory[list(MEMORY_SCHEMA.names)])
    records = vouched(exp).left_out
    invalid = rows.invalid + unreadable + wrong + records
    attestations = None
    if (key := reading_key()) is not None:  # failed files' models never count
        attestations = _attestations(exp, rows, key)
        failed = {f.model for f in rows.used if f.path in attestations.failed_models}
        if failed:  # a mask over the rows (never a Python loop over them: 3.2M at 10x)
            models = pd.MultiIndex.from_arrays([frame["trial_id"], frame["cert_id"]])
            kept = ~models.isin(list(failed))
            frame = frame[np.asarray(kept, dtype=bool)].reset_index(drop=True)
        invalid += list(attestations.failed)
    return Results(frame, rows.files, rows.missing, invalid, attestations)


def _attestations(exp: Experiment, rows, key) -> Attestations:
    """What the files `rows` used rest on: each file checked (`check_files`), except those a
    cache the key verified vouched for (`signed_cache`: as it recorded them); and what the
    signed inventory says is gone."""
    from sweeper.results.attestation_reads import check_files
    from sweeper.results.inventory import deleted_since

    checked = check_files(exp, [f for f in rows.used if f.path not in rows.vouched], key)
    vouched = [f for f in rows.used if f.path in rows.vouched]
    return dataclasses.replace(
        checked,
        attested=checked.attested + sum(rows.vouched[f.path] for f in vouched),
        unattested=checked.unattested | {f.model for f in vouched if not rows.vouched[f.path]},
        inventory=tuple(deleted_since(exp, key, CERTIFY_ROWS.name)),
    )


def apply_memory(frame: pd.DataFrame, memory: pd.DataFrame) -> pd.DataFrame:
    """Sound certificates in predict/radius/correct, Monte-Carlo ones in *_raw (see
    `Results`): compacted data-dependent rows have both already; rows of models certified
    before compaction existed take them from their legacy memory file."""
    if not memory.empty:
        frame = _legacy_memory(frame, memory)
    for col in ("predict", "radius", "correct"):  # fixed σ (or no memory pass yet): raw = value
        raw = frame[f"{col}_raw"]
        frame[f"{col}_raw"] = (
            frame[col]
            if raw.isna().all()
            else raw.where(raw.notna(), frame[col]).astype(frame[col].dtype)
        )
    adjusted = frame["memory_changed"].notna().to_numpy()
    frame["sound"] = (frame["smoothing"] != "data-dependent").to_numpy() | adjusted
    return frame


def _legacy_memory(frame: pd.DataFrame, memory: pd.DataFrame) -> pd.DataFrame:
    """Rows of models with a legacy memory.parquet: the adjusted values in place, the
    Monte-Carlo ones as *_raw."""
    memory = memory.rename(columns={"memory_changed": "changed_memory"})
    frame = frame.merge(memory, on=["trial_id", "cert_id", "idx"], how="left")
    legacy = frame["predict_memory"].notna().to_numpy()
    for col in ("predict", "radius", "correct"):
        raw = frame[f"{col}_raw"].astype(object)
        raw[legacy] = frame.loc[legacy, col]
        frame[f"{col}_raw"] = raw
        frame.loc[legacy, col] = frame.loc[legacy, f"{col}_memory"].astype(frame[col].dtype)
    changed = frame["memory_changed"].astype(object)
    changed[legacy] = frame.loc[legacy, "changed_memory"]
    frame["memory_changed"] = changed
    return frame.drop(
        columns=["predict_memory", "radius_memory", "correct_memory", "changed_memory"]
    )
