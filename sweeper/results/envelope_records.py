"""The `envelope` certification strategy's verdict per model (issue 28), on storage as
`certify/<trial_id>/<cert_id>/envelope.json` (`Experiment.envelope_record`): its status
(`certified`, `pruned`, or `piloted`/`waiting` when a run stopped early), the radius grid, the
upper bound on its certified count per grid radius (with probability ≥ 1 − δ, from its pilot
draws), the pilot's plug-in estimate, the certified count per radius (certified models), and
the pilot draws spent. Views show pruned models with their upper bounds, never as zeros, and
only the records of models the sweep declared (`vouched`: a trial sweep.json lists, its
trial.json's config hashing to its id, under a setting sweep.json declares); the others are
named and left out (`Vouched.left_out`, among the files `load_results` leaves out).
"""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass
from typing import Any

from sweeper.results.storage import Experiment
from trainables.kernel import fileio
from trainables.kernel.cert_ids import CertId

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


@dataclass(frozen=True)
class Vouched:
    """The records of models the sweep declared, their trials' configs (checked against their
    ids), and "path: why" of each record left out."""

    records: dict[tuple[str, str], dict[str, Any]]
    configs: dict[str, Any]  # trial_id -> TrialConfig
    left_out: list[str]


def vouched(exp: Experiment) -> Vouched:
    """The records `read_records` finds of models the sweep declared: a trial sweep.json lists
    whose trials/<id>/trial.json holds a config hashing to its id, under a setting sweep.json
    declares (`sweep_file.declared`); the rest named with why (an `envelope.json` naming a
    model that never existed changes no view)."""
    from sweeper.results.sweep_file import declared
    from sweeper.results.trial_records import stored_trial

    sweep = declared(exp)
    kept, configs, left = {}, {}, []
    for (tid, cert_id), record in read_records(exp).items():
        if tid not in configs:
            configs[tid] = stored_trial(exp, tid)
        why = configs[tid] if isinstance(configs[tid], str) else sweep.trial_problem(tid)
        why = why or sweep.setting_problem(cert_id)
        if why is None:
            kept[(tid, cert_id)] = record
        else:
            left.append(f"{exp.envelope_record(tid, cert_id)}: {why}")
    good = {t: c for t, c in configs.items() if not isinstance(c, str)}
    return Vouched(kept, good, left)


def pruned(exp: Experiment) -> dict[tuple[str, str], dict[str, Any]]:
    """The records of the models the strategy pruned (never certified: no rows), of models
    the sweep declared (`vouched`)."""
    return {k: r for k, r in vouched(exp).records.items() if r["status"] == "pruned"}


def settled(exp: Experiment, trial_ids: list[str], cert_id: str) -> bool:
    """Whether the strategy has certified or pruned every one of `trial_ids` under `cert_id`
    (a run would compute nothing: pruning is final, the envelope only grows)."""
    return len(settled_models(exp, trial_ids, cert_id)) == len(trial_ids)


def settled_models(exp: Experiment, trial_ids: list[str], cert_id: str) -> list[str]:
    """Those of `trial_ids` the strategy has certified or pruned under `cert_id`."""
    records = read_records(exp)
    done = ("certified", "pruned")
    return [t for t in trial_ids if records.get((t, cert_id), {}).get("status") in done]


def upper_accuracy(record: dict[str, Any], radii: list[float]) -> list[float | None]:
    """The record's upper bound on certified accuracy at each of `radii`: the smallest bound
    on the count at a grid radius ≤ r (a count at r is at most the count at any smaller
    radius), over its points; None below the grid or without bounds."""
    grid, upper, points = record.get("radii") or [], record.get("upper"), record.get("points")
    if not upper or not points:
        return [None] * len(radii)
    out: list[float | None] = []
    for r in radii:
        below = [u for g, u in zip(grid, upper, strict=True) if g <= r + 1e-9]
        out.append(min(below) / points if below else None)
    return out


def pruned_models(exp: Experiment) -> list[dict[str, Any]]:
    """Each pruned model of a trial the sweep declared (`vouched`): trial_id, cert_id, its
    trial's config (checked against its id: never a column the config does not have) and its
    record, sorted by trial_id and cert_id."""
    found = vouched(exp)
    return [
        {"trial_id": t, "cert_id": c, "config": found.configs[t].to_dict(), "record": r}
        for (t, c), r in sorted(found.records.items())
        if r["status"] == "pruned"
    ]


def verdicts(exp: Experiment) -> list[dict[str, Any]]:
    """Per envelope cert_id: how many models are certified, pruned and unfinished, δ, and the
    pruned models with their upper bounds on certified accuracy at the grid's radii."""
    settings: dict[str, dict[str, Any]] = {}
    for (tid, cert_id), record in sorted(vouched(exp).records.items()):
        s = settings.setdefault(
            cert_id,
            {"cert_id": cert_id, "delta": record.get("delta"), "radii": record.get("radii")},
        )
        s.setdefault("certified", 0)
        s.setdefault("pruned", 0)
        s.setdefault("unfinished", 0)
        s.setdefault("pruned_models", [])
        status = record["status"]
        s[status if status in ("certified", "pruned") else "unfinished"] += 1
        if status == "pruned":
            upper = upper_accuracy(record, list(record.get("radii") or []))
            s["pruned_models"].append({"trial_id": tid, "upper": upper})
    return list(settings.values())


def delta_of(cert_id: str) -> float | None:
    """The δ an `_envelope` cert_id names (its `-delta-<δ>`, else the default); None if it
    names no setting of the envelope strategy."""
    setting = CertId.parse(cert_id)
    return None if setting is None or setting.envelope is None else setting.envelope.delta


def soundness_lines(exp: Experiment, cert_ids: list[str], radii: list[float]) -> list[str]:
    """What `sweeper envelope` states per `_envelope` setting among `cert_ids`: every winner
    certified with exact CERTIFY(n0, n, α); with probability ≥ 1 − δ no pruned model would
    have won at a radius of the decision grid; how many models were pruned."""
    records = vouched(exp).records
    out = []
    for cert_id in sorted(c for c in set(cert_ids) if delta_of(c) is not None):
        s = CertId.parse(cert_id)
        mine = [r for (_, c), r in records.items() if c == cert_id]
        grid: list[float] = next((r["radii"] for r in mine if r.get("radii")), [])
        pruned = sum(r["status"] == "pruned" for r in mine)
        off = [r for r in radii if not any(abs(r - g) < 1e-9 for g in grid)]
        exact = f"CERTIFY(n0 = {s.n0}, n = {s.n}, α = {s.alpha:g})" if s else "CERTIFY"
        line = (
            f"{cert_id}: every winner is certified with exact {exact}; with probability "
            f"≥ 1 − δ (δ = {delta_of(cert_id):g}) no pruned model would have won at a radius "
            f"of the grid {spelled_grid(grid)}; {pruned} of {len(mine)} models pruned"
        )
        if off and pruned:
            line += f" (radii off the grid, {', '.join(f'{r:g}' for r in off)}: not covered)"
        out.append(line)
    return out


def spelled_grid(grid: list[float]) -> str:
    """0:2.25:0.25 for an even grid from its first radius, else the list."""
    steps = {round(b - a, 9) for a, b in itertools.pairwise(grid)}
    if len(grid) > 2 and len(steps) == 1:
        return f"{grid[0]:g}:{grid[-1]:g}:{steps.pop():g}"
    return ",".join(f"{r:g}" for r in grid) or "(none recorded)"
