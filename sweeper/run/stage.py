"""A sharded stage as the engine (`sweeper.run.shards`) runs it: the setting it runs under,
the shards of a model's test points, and the stage (its rows' table and how to compute them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Protocol

import pyarrow as pa

from sweeper.results.stage_table import StageTable


class Identified(Protocol):
    """A setting as far as compaction needs it: its id."""

    @property
    def setting_id(self) -> str: ...  # names it in paths; new settings give new files


class Setting(Identified, Protocol):
    """What the engine needs of a stage's setting (CertifySpec, EmpiricalSetting)."""

    @property
    def skip(self) -> int: ...

    @property
    def max_points(self) -> int | None: ...

    @property
    def shard_size(self) -> int: ...

    def test_points(self, num_test: int) -> list[int]: ...


@dataclass(frozen=True)
class Shard:
    stage: str
    trial_id: str
    setting_id: str
    index: int
    count: int
    indices: tuple[int, ...]  # positions in the test split


@dataclass(frozen=True, kw_only=True)
class Stage(StageTable):
    """A sharded stage: the rows it writes (a `StageTable`: name, schema, checks) and how.
    `compute(exp, shard, setting, cpus)` runs on a worker and returns the shard's rows with
    exactly `schema`; `finish(exp, trial_id, setting, table)` (optional) turns a model's
    complete rows (sorted by idx) into what is compacted, on a worker too. Every function must
    be a module-level one (Ray pickles the stage by reference)."""

    compute: Callable[..., pa.Table]
    finish: Callable[..., pa.Table] | None = None

    @classmethod
    def of(
        cls,
        table: StageTable,
        compute: Callable[..., pa.Table],
        finish: Callable[..., pa.Table] | None = None,
    ) -> Stage:
        """The stage writing `table`'s rows with `compute` (and `finish`)."""
        parts = {f.name: getattr(table, f.name) for f in fields(StageTable)}
        return cls(**parts, compute=compute, finish=finish)
