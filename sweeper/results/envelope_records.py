"""The `envelope` certification strategy's verdict per model (issue 28), on storage as
`certify/<trial_id>/<cert_id>/envelope.json` (`Experiment.envelope_record`): its status
(`certified`, `pruned`, or `piloted`/`waiting` when a run stopped early), the radius grid, the
upper bound on its certified count per grid radius (with probability ≥ 1 − δ, from its pilot
draws), the pilot's plug-in estimate, the certified count per radius (certified models), and
the pilot draws spent. Views show pruned models with their upper bounds, never as zeros.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sweeper.results.storage import Experiment
from trainables.kernel import fileio

log = logging.getLogger(__name__)

STATUSES = ("certified", "pruned", "piloted", "waiting")


def write_record(exp: Experiment, trial_id: str, cert_id: str, record: dict[str, Any]) -> None:
    path = exp.envelope_record(trial_id, cert_id)
    fileio.write_bytes_atomic(path, json.dumps(record, indent=1).encode())


def read_records(exp: Experiment) -> dict[tuple[str, str], dict[str, Any]]:
    """(trial_id, cert_id) -> the record of every model the envelope strategy has seen (a
    record that does not parse is left out, with a warning)."""
    root = exp.stage_dir("certify")
    if not fileio.exists(root):
        return {}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(fileio.list_sizes(root, ".json")):
        parts = path.replace("\\", "/").split("/")
        if parts[-1] != "envelope.json" or len(parts) < 3:
            continue
        try:
            record = json.loads(fileio.read_bytes(path, limit=1_000_000))
        except (OSError, ValueError) as e:
            log.warning("left out %s: %s", path, e)
            continue
        if isinstance(record, dict) and record.get("status") in STATUSES:
            out[(parts[-3], parts[-2])] = record
    return out


def pruned(exp: Experiment) -> dict[tuple[str, str], dict[str, Any]]:
    """The records of the models the strategy pruned (never certified: no rows)."""
    return {k: r for k, r in read_records(exp).items() if r["status"] == "pruned"}
