"""sweep.json: written whole (`write_sweep`), read (`read_sweep`, `StatusReader`) as its bytes,
bounded, from a regular file only, and its shape checked where it is read, so that bad input is
one line naming the file and the fix (`SweepError`), never a traceback nor a hang.

It is also what the sweep declared (`declared`): the trials (their configs, each one's trial_id
its hash) and the certification settings (the cert_ids of its space's certify block and those
recorded under `certify_settings` by `run grid`, `sweeper certify` and `sweeper import`:
`record_settings`). The readers count only rows of declared trials under declared settings.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
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


# ------------------------------------------------------------------------ what it declares
SETTINGS = "certify_settings"  # cert_ids the sweep's runs certified with (its space's too)
IMPORTED = "imported-"  # how `sweeper import` spells its settings


@dataclass(frozen=True)
class Declared:
    """What sweep.json declares. `trials`: the trial_ids its trials' configs hash to (None: no
    sweep.json, nothing to check against); `settings`: the cert_ids of its space's certify
    block and of `certify_settings` (None: it declares none, a hand-written or pre-recording
    sweep.json: not checked); `imported`: an import's sweep.json, whose imported settings
    count unrecorded (imports made before they were recorded)."""

    trials: frozenset[str] | None
    settings: frozenset[str] | None
    imported: bool = False

    def trial_problem(self, trial_id: str) -> str | None:
        """Why the rows of `trial_id` do not count (None: they may)."""
        if self.trials is None or trial_id in self.trials:
            return None
        return f"not a trial of the sweep (sweep.json lists no trial {trial_id})"

    def setting_problem(self, cert_id: str) -> str | None:
        """Why rows certified under `cert_id` do not count (None: they may)."""
        if self.imported and cert_id.startswith(IMPORTED):
            return None
        if self.settings is None or cert_id in self.settings:
            return None
        return (
            "a certification setting the sweep never declared (not in sweep.json: "
            "`sweeper certify` with these settings declares it)"
        )


_DECLARED: dict[tuple[str, str], Declared] = {}  # (sweep.json, digest of its bytes) -> parsed


def declared(exp: Experiment) -> Declared:
    """What `exp`'s sweep.json declares (`Declared`), parsed once per content; SweepError
    naming it if it cannot be read (a reader then counts nothing rather than everything)."""
    if not fileio.exists(exp.sweep_json):
        return Declared(None, None)
    raw = sweep_bytes(exp)
    key = (exp.sweep_json, hashlib.sha256(raw).hexdigest())
    if key not in _DECLARED:
        _DECLARED.clear()  # one experiment at a time, in practice
        _DECLARED[key] = _parse_declared(parse_sweep(exp, raw))
    return _DECLARED[key]


def _parse_declared(doc: dict[str, Any]) -> Declared:
    from trainables.kernel.config import TrialConfig
    from trainables.kernel.errors import ProblemsError

    trials = set()
    for d in doc["trials"]:
        try:
            trials.add(TrialConfig.from_dict(d).trial_id)
        except (ProblemsError, TypeError, ValueError, AttributeError):
            continue  # a config no trial has: it declares none
    settings = space_settings(doc.get("space"))
    recorded = doc.get(SETTINGS)
    if isinstance(recorded, list):
        settings = (settings or set()) | {s for s in recorded if isinstance(s, str)}
    frozen = None if settings is None else frozenset(settings)
    return Declared(frozenset(trials), frozen, doc.get("imported") is True)


def space_settings(space: Any) -> set[str] | None:
    """The cert_ids a sweep.json's space certifies with (`CertifySpec.variants`); None if it
    has no certify block, or one that is no `CertifySpec`."""
    import dataclasses

    from trainables.kernel.ddrs_settings import DDRSSettings
    from trainables.kernel.final_points import final_value
    from trainables.kernel.stage_settings import CertifySpec

    block = space.get("certify") if isinstance(space, dict) else None
    if not isinstance(block, dict):
        return None
    names = {f.name for f in dataclasses.fields(CertifySpec)}
    try:
        kwargs = {k: v for k, v in block.items() if k in names}
        if isinstance(kwargs.get("ddrs"), dict):
            kwargs["ddrs"] = DDRSSettings(**kwargs["ddrs"])
        final = final_value(kwargs.get("final"))
        kwargs["final"] = None if isinstance(final, str) else final
        spec = CertifySpec(**kwargs)
        step = [] if spec.final_step is None else [spec.final_step.cert_id]
        return {*(variant.cert_id for variant in spec.variants()), *step}
    except (TypeError, ValueError, AttributeError):
        return None


def declared_settings(doc: dict[str, Any] | None) -> list[str]:
    """Every cert_id `doc` (a sweep.json's document) declares, sorted."""
    if doc is None:
        return []
    recorded = [s for s in doc.get(SETTINGS) or [] if isinstance(s, str)]
    return sorted({*recorded, *(space_settings(doc.get("space")) or set())})


def record_settings(exp: Experiment, cert_ids: list[str]) -> None:
    """Add `cert_ids` to the settings sweep.json declares (the caller holds the lease); one
    that declares none (no certify block, nothing recorded: hand-made) checks none, and stays."""
    doc = read_sweep(exp)
    if doc is None or (space_settings(doc.get("space")) is None and SETTINGS not in doc):
        return
    settings = declared_settings(doc)
    if not set(cert_ids) <= set(settings):
        write_sweep(exp, {**doc, SETTINGS: sorted({*settings, *cert_ids})})
