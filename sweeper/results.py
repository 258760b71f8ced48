"""The results table: its Parquet schema, shard writing, and reading an experiment's results.

One row per test point per model per certification setting (DESIGN.md section 4). Identity
columns are every resolved hyperparameter of the trial (null where a method does not use
it); certification columns keep the counts (`count`, `n`) so radii can be recomputed for
another α without a GPU. File metadata records the certify backend and the normalization.
"""

from __future__ import annotations

import io
import json
import typing
from collections import defaultdict
from dataclasses import dataclass, field, fields

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from sweeper.storage import SHARD_RE, Experiment
from trainables import fileio
from trainables.config import ENVIRONMENT_FIELDS, TrialConfig

_ARROW = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
CERT_COLUMNS = [
    ("sigma_cert", pa.float64()),
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
]
MODEL_KEY = ["trial_id", "cert_id"]


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
    """A shard's rows: the trial's identity and the certification constants repeated per row."""
    rows = len(columns["idx"])
    data = {
        "trial_id": [cfg.trial_id] * rows,
        "experiment": [experiment] * rows,
        "cert_id": [cert_id] * rows,
    }
    data.update({k: [v] * rows for k, v in cfg.to_dict().items() if k not in ENVIRONMENT_FIELDS})
    data.update({k: [v] * rows for k, v in constants.items()})
    data.update(columns)
    table = pa.Table.from_pydict({f.name: data[f.name] for f in SCHEMA}, schema=SCHEMA)
    meta = {f"sweeper.{k}": v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
    return table.replace_schema_metadata(meta)


def write_shard(table: pa.Table, location: str) -> None:
    """Write one shard file atomically."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    fileio.write_bytes_atomic(location, buffer.getvalue())


@dataclass
class Results:
    frame: pd.DataFrame  # every row of every shard found
    files: list[str]
    # (trial_id, cert_id) -> shard numbers missing from a model that has some shards
    missing_shards: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    @property
    def models(self) -> int:
        return 0 if self.frame.empty else int(self.frame.groupby(MODEL_KEY).ngroups)


def shard_files(exp: Experiment) -> list[str]:
    return [f for f in fileio.list_files(exp.certify_dir, ".parquet") if SHARD_RE.search(f)]


def missing_shards(files: list[str]) -> dict[tuple[str, str], list[int]]:
    """Per model, the shard numbers absent from the `shard-k-of-K` sequence."""
    seen: dict[tuple[str, str], set[int]] = defaultdict(set)
    total: dict[tuple[str, str], int] = {}
    for f in files:
        parts = f.replace("\\", "/").split("/")
        key = (parts[-3], parts[-2])
        m = SHARD_RE.search(parts[-1])
        seen[key].add(int(m.group(1)))
        total[key] = int(m.group(2))
    return {k: sorted(set(range(total[k])) - s) for k, s in seen.items() if len(s) < total[k]}


def read_tables(files: list[str]) -> pa.Table:
    """All shards as one table; a file that is not valid Parquet is named in the error."""
    if not files:
        return SCHEMA.empty_table()
    fs, _ = fileio.filesystem(files[0])
    paths = [fileio.filesystem(f)[1] for f in files]
    try:
        return pads.dataset(paths, format="parquet", filesystem=fs, schema=SCHEMA).to_table()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        pass
    tables = []
    for f, p in zip(files, paths, strict=True):
        try:
            tables.append(pq.read_table(p, filesystem=fs, schema=SCHEMA))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
            reason = str(e).splitlines()[0]
            raise ResultsError(
                f"corrupt results file {f}: {reason}; delete it and run `sweeper certify` to redo it"
            ) from None
    return pa.concat_tables(tables)


def load_results(exp: Experiment) -> Results:
    """Every certification row of an experiment, with the shards that are missing."""
    if not fileio.exists(exp.root):
        raise ResultsError(f"no experiment at {exp.root}: check --storage and --experiment")
    files = shard_files(exp)
    frame = read_tables(files).to_pandas()
    return Results(frame, files, missing_shards(files))
