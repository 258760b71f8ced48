"""The halving scheduler's record (`<experiment>/halving.json`, `Experiment.halving_json`),
written by the run (`sweeper.run.halving`) at each proxy report, read back by a resumed driver:

    {"version": 1, "eta": 3,
     "rungs": {"sigma=0.25/epoch=2/radii=4": {trial_id: [accuracy per radius], ...}, ...},
     "halted": {trial_id: epoch, ...}}

Like search.json it explains and continues decisions; no view counts a number from it (a
halted trial's state is its own trial.json). A record that does not parse or holds other
shapes is left out with a warning: the rungs then start empty."""

from __future__ import annotations

import json
import logging
from typing import Any

from sweeper.results.storage import Experiment
from trainables.kernel import fileio

log = logging.getLogger(__name__)

VERSION = 1
LIMIT = 64_000_000  # bytes: 10,000 trials at 10 rungs of 10 radii are about 10 MB


def write_halving(exp: Experiment, doc: dict[str, Any]) -> None:
    fileio.write_bytes_atomic(exp.halving_json, json.dumps({**doc, "version": VERSION}).encode())


def read_halving(exp: Experiment) -> dict[str, Any] | None:
    """The record, or None if there is none or it is not one (with a warning)."""
    try:
        if not fileio.exists(exp.halving_json):
            return None
        doc = json.loads(fileio.read_bytes(exp.halving_json, limit=LIMIT))
    except (OSError, ValueError) as e:
        log.warning("left out %s: %s", exp.halving_json, e)
        return None
    if not _well_formed(doc):
        log.warning("left out %s: not a halving record of this version", exp.halving_json)
        return None
    return doc


def _well_formed(doc: Any) -> bool:
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return False
    rungs, halted = doc.get("rungs"), doc.get("halted")
    if not isinstance(rungs, dict) or not isinstance(halted, dict):
        return False
    if not all(isinstance(rung, dict) for rung in rungs.values()):
        return False
    curves = [c for rung in rungs.values() for c in rung.values()]
    numbers = all(
        isinstance(c, list) and all(isinstance(v, (int, float)) for v in c) for c in curves
    )
    return numbers and all(isinstance(e, int) for e in halted.values())


def halted_trials(exp: Experiment, trained: set[str]) -> dict[str, int]:
    """The trials the halving scheduler halted that have not been trained on since (not in
    `trained`): trial_id -> the epoch it stopped after. Empty without a record."""
    doc = read_halving(exp) or {"halted": {}}
    return {tid: e for tid, e in doc["halted"].items() if tid not in trained}
