"""What a sharded stage's rows are on storage, and writing a table of them.

A `StageTable` is the contract between the stage that writes rows (`sweeper.run.stage.Stage`
adds how they are computed) and the reader that validates them (`sweeper.results.reader`):
the stage's directory, the column naming its setting, the exact schema, and the checks every
row must pass. The tables of the two stages are `certify_rows.CERTIFY_ROWS` and
`empirical_rows.EMPIRICAL_ROWS`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from trainables.kernel import fileio

if TYPE_CHECKING:
    from trainables.kernel.config import TrialConfig


def no_problems(table: pa.Table) -> list:
    """The check of a stage whose rows need none beyond their identity."""
    return []


@dataclass(frozen=True)
class StageTable:
    """A stage's rows. `check(rows) -> [(bad-row mask, what is wrong)]` finds rows the stage
    could not have written, applied when reading (the file of any such row is left out); it
    reads `checked_columns`. `consistent(exp, rows, files, file_of_row, metadata)` checks the
    rows against the experiment's own records (the trial behind each file, the setting its
    path names), alike. Functions must be module-level ones (Ray pickles a stage by
    reference)."""

    name: str  # its directory under the experiment
    setting_column: str  # names the setting in the rows (cert_id, emp_id)
    schema: pa.Schema
    check: Callable[[pa.Table], list] = no_problems
    checked_columns: tuple[str, ...] = ()
    consistent: Callable[..., list] | None = None


def trial_parts(cfg: TrialConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a stage's rows carry of their trial, from its one `to_dict` on the way to
    Parquet: its identity columns (every field but the environment's, repeated per row) and
    its whole config, for the file's footer (`sweeper.config`; an imported file's trial is read
    back from it: `trial_records`)."""
    from trainables.kernel.config import ENVIRONMENT_FIELDS

    config = cfg.to_dict()
    return {k: v for k, v in config.items() if k not in ENVIRONMENT_FIELDS}, config


def write_table(table: pa.Table, location: str) -> None:
    """One Parquet file, atomically (temp + rename on a path, one PUT on an object store)."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    fileio.write_bytes_atomic(location, buffer.getvalue())
