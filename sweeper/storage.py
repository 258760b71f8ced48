"""The storage layout of one experiment (a local path or a URI such as s3://bucket/prefix):

<storage>/<experiment>/
  sweep.json                                   the resolved sweep, written before Ray starts
  lease.json, .lease.lock                      which driver holds the experiment (sweeper.lease)
  tune/run-<time>/                             Ray Tune's directory for each `sweeper run`
  trials/<trial_id>/checkpoint.pt, trial.json  newest epoch's checkpoint and the trial's state
  certify/<trial_id>/<cert_id>/shard-00003-of-00010.parquet
  reports/                                     tables and figures
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from trainables import fileio

DEFAULT_STORAGE = os.environ.get("SWEEPER_STORAGE", "results")
SHARD_RE = re.compile(r"shard-(\d{5})-of-(\d{5})\.parquet$")


def shard_name(index: int, count: int) -> str:
    """`shard-00003-of-00010.parquet`: the file of shard `index` of `count` (SHARD_RE reads it)."""
    return f"shard-{index:05d}-of-{count:05d}.parquet"


def index_chunks(
    num_test: int, skip: int, max_points: int | None, shard_size: int
) -> list[tuple[int, ...]]:
    """Every `skip`-th test point, at most `max_points` of them (the paper: every 20th, 500),
    cut into shards of `shard_size`; certification and the empirical stage split alike."""
    indices = list(range(0, num_test, skip))[:max_points]
    return [tuple(indices[i : i + shard_size]) for i in range(0, len(indices), shard_size)]


@dataclass(frozen=True)
class Experiment:
    storage: str
    name: str

    @property
    def root(self) -> str:
        base = (
            self.storage
            if fileio.is_uri(self.storage)
            else str(fileio.local_path(self.storage).absolute())
        )
        return fileio.join(base, self.name)

    @property
    def sweep_json(self) -> str:
        return fileio.join(self.root, "sweep.json")

    @property
    def lease_json(self) -> str:
        return fileio.join(self.root, "lease.json")

    @property
    def tune_dir(self) -> str:
        return fileio.join(self.root, "tune")

    @property
    def certify_dir(self) -> str:
        return fileio.join(self.root, "certify")

    @property
    def reports_dir(self) -> str:
        return fileio.join(self.root, "reports")

    def trial_dir(self, trial_id: str) -> str:
        return fileio.join(self.root, "trials", trial_id)

    def checkpoint(self, trial_id: str) -> str:
        # Imported here: trainables.checkpoint pulls in torch, which `sweeper envelope` and
        # `sweeper status` do not need (it took most of their start-up time).
        from trainables.checkpoint import CHECKPOINT_NAME

        return fileio.join(self.trial_dir(trial_id), CHECKPOINT_NAME)

    def shard_path(self, trial_id: str, cert_id: str, shard: int, num_shards: int) -> str:
        return fileio.join(self.certify_dir, trial_id, cert_id, shard_name(shard, num_shards))

    def exists(self) -> bool:
        return fileio.exists(self.sweep_json)


def write_sweep(exp: Experiment, doc: dict[str, Any]) -> None:
    fileio.write_bytes_atomic(
        exp.sweep_json, json.dumps({**doc, "written": time.time()}, indent=1).encode()
    )


def read_sweep(exp: Experiment) -> dict[str, Any] | None:
    if not fileio.exists(exp.sweep_json):
        return None
    return json.loads(fileio.read_bytes(exp.sweep_json))
