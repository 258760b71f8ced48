"""`trial.json`: how far a trial got (state, epochs done, last metrics, config).

Written by the trial after every epoch and by the driver when a trial fails; read by the
planner and `sweeper status` without importing torch.
"""

from __future__ import annotations

import json
import time
from typing import Any

from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ProblemsError


class TrialStatusError(ProblemsError):
    """A trial.json that cannot be read (damaged, or not written by a trial)."""


# Bytes: a trial.json holds a config, the last metrics and a one-line error (about 2 kB).
TRIAL_JSON_MAX = 2**20


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
    """The trial's `trial.json` (None if it never started); TrialStatusError naming the file
    if it is not one (what the planner and the driver read of it: a state and epochs done)."""
    path = fileio.join(directory, "trial.json")
    if not fileio.exists(path):
        return None
    return parse_status(path, read_raw(path))


def read_raw(path: str) -> bytes:
    """The bytes of the trial.json `path`; TrialStatusError naming it if it is no regular file
    (a FIFO would block the reader forever) or larger than TRIAL_JSON_MAX."""
    try:
        return fileio.read_bytes(path, TRIAL_JSON_MAX)
    except fileio.UnreadableFileError as e:
        raise _unreadable(path, e.why) from None


def parse_status(path: str, raw: bytes) -> dict[str, Any]:
    """The document of trial.json `path` read as `raw`; TrialStatusError if it is not one."""
    try:
        doc = json.loads(raw)
        why = _status_problem(doc)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        why = f"not JSON: {str(e).splitlines()[0]}"
    if why is None:
        return doc
    raise _unreadable(path, why)


def _unreadable(path: str, why: str) -> TrialStatusError:
    return TrialStatusError(
        [
            f"cannot read {path} ({why}): delete it and re-run; the trial resumes from its "
            "checkpoint (or starts over without one)"
        ]
    )


def _status_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return "not a JSON object"
    if not isinstance(doc.get("state"), str):
        return "no state"
    epoch = doc.get("epoch")
    if type(epoch) is not int or epoch < 0:
        return f"epoch {epoch!r} is not a count of epochs"
    metrics = doc.get("metrics", {})
    if not isinstance(metrics, dict):
        return "metrics is not a JSON object"
    # what `sweeper status` computes with: times, and the error line it prints
    times = {"metrics.epoch_time_s": metrics.get("epoch_time_s"), "updated": doc.get("updated")}
    for name, value in times.items():
        if value is not None and type(value) not in (int, float):
            return f"{name} {value!r:.40} is not a number of seconds"
    if not isinstance(doc.get("error", ""), str):
        return "error is not a line of text"
    return None
