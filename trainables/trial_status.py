"""`trial.json`: how far a trial got (state, epochs done, last metrics, config).

Written by the trial after every epoch and by the driver when a trial fails; read by the
planner and `sweeper status` without importing torch.
"""

from __future__ import annotations

import json
import time
from typing import Any

from trainables import fileio
from trainables.config import TrialConfig


def trial_dir(experiment_root: str, trial_id: str) -> str:
    return fileio.join(experiment_root, "trials", trial_id)


def write_status(
    directory: str, cfg: TrialConfig, state: str, epoch: int, metrics: dict, **extra
) -> None:
    """`trial.json`: the trial's config, state (running/finished/failed), epochs done, metrics."""
    doc = {
        "trial_id": cfg.trial_id,
        "state": state,
        "epoch": epoch,
        "epochs": cfg.epochs,
        "metrics": metrics,
        "config": cfg.to_dict(),
        "updated": time.time(),
        **extra,
    }
    fileio.write_bytes_atomic(
        fileio.join(directory, "trial.json"), json.dumps(doc, indent=1).encode()
    )


def experiment_relative(location: str, experiment_root: str) -> str:
    """`location` relative to the experiment (`trials/<id>/checkpoint.pt`), as trial.json
    stores paths so that a copied or synced experiment still reads; a location outside the
    experiment stays as it is. Nothing reads a trial's files through these paths (they are at
    `trials/<trial_id>/` by construction): they tell a person where to look."""
    root = str(experiment_root).rstrip("/")
    location = str(location)
    if location.startswith(root + "/"):
        return location[len(root) + 1 :]
    return location


def read_status(directory: str) -> dict[str, Any] | None:
    path = fileio.join(directory, "trial.json")
    if not fileio.exists(path):
        return None
    return json.loads(fileio.read_bytes(path))
