"""sweep.json: written whole (`write_sweep`), read (`read_sweep`, `StatusReader`) as its bytes,
bounded, from a regular file only, and its shape checked where it is read, so that bad input is
one line naming the file and the fix (`SweepError`), never a traceback nor a hang.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from trainables.kernel import fileio
from trainables.kernel.errors import ProblemsError

if TYPE_CHECKING:
    from sweeper.results.storage import Experiment

# Bytes: the paper's grid (644 trials) writes a sweep.json of 0.8 MB; this bounds ~50,000.
SWEEP_JSON_MAX = 64 * 2**20


class SweepError(ProblemsError):
    """A sweep.json that cannot be read: no regular file, too large, not JSON, or not the
    shape `write_sweep` writes (`sweep_problem`); one line naming it and the fix."""


def sweep_bytes(exp: Experiment) -> bytes:
    """The bytes of sweep.json; FileNotFoundError if there is none, SweepError if it is no
    regular file (a FIFO would block the reader forever) or over SWEEP_JSON_MAX bytes."""
    try:
        return fileio.read_bytes(exp.sweep_json, SWEEP_JSON_MAX)
    except fileio.UnreadableFileError as e:
        raise _sweep_error(exp, e.why) from None


def parse_sweep(exp: Experiment, raw: bytes) -> dict[str, Any]:
    """The document of sweep.json read as `raw`; SweepError naming it if it is not one."""
    try:
        doc = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise _sweep_error(exp, f"not JSON: {str(e).splitlines()[0]}") from None
    why = sweep_problem(doc)
    if why is not None:
        raise _sweep_error(exp, why)
    return doc


def _sweep_error(exp: Experiment, why: str) -> SweepError:
    return SweepError(
        [
            f"cannot read {exp.sweep_json} ({why}): restore it from a copy, or start over "
            "(`sweeper run ... --restart` keeps the old experiment aside) or pass another "
            "--experiment"
        ]
    )


def sweep_problem(doc: Any) -> str | None:
    """Why `doc` is not a sweep.json as its readers use it (None: it is): an object whose
    `trials` is a list of objects (trial configs; `TrialConfig.from_dict` checks each), whose
    `space` is null or an object with, where present, a `name` (text), `resources` (cpu, gpu:
    numbers >= 0) and `certify` (skip, shard_size: counts >= 1; max_points: a count or null)."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    trials = doc.get("trials")
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        return "trials is not a list of JSON objects"
    space = doc.get("space")
    if space is None:
        return None
    if not isinstance(space, dict):
        return "space is not a JSON object"
    if not isinstance(space.get("name", ""), str | None):
        return "space.name is not text"
    for block in ("resources", "certify"):
        if not isinstance(space.get(block, {}), dict):
            return f"space.{block} is not a JSON object"
    wanted = {"resources": {"cpu": 0, "gpu": 0}, "certify": {"skip": 1, "shard_size": 1}}
    for block, least in wanted.items():
        for key, low in least.items():
            value = space.get(block, {}).get(key)
            if value is not None and not _at_least(value, low, block == "certify"):
                return f"space.{block}.{key} {value!r:.40} is not a number >= {low}"
    points = space.get("certify", {}).get("max_points")
    if points is not None and not _at_least(points, 0, True):
        return f"space.certify.max_points {points!r:.40} is not a count"
    return None


def _at_least(value: Any, low: int, integer: bool) -> bool:
    """A JSON number (an integer if `integer`; not a bool, not NaN) of at least `low`."""
    return type(value) in ((int,) if integer else (int, float)) and value >= low


def write_sweep(exp: Experiment, doc: dict[str, Any]) -> None:
    fileio.write_bytes_atomic(
        exp.sweep_json, json.dumps({**doc, "written": time.time()}, indent=1).encode()
    )


def read_sweep(exp: Experiment) -> dict[str, Any] | None:
    """The experiment's sweep.json (None if there is none); SweepError naming it and the fix
    if it is no regular file, too large, not JSON or not the shape of one (`sweep_file`)."""
    if not fileio.exists(exp.sweep_json):
        return None
    return parse_sweep(exp, sweep_bytes(exp))
