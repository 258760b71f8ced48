"""The envelope search's record (`<experiment>/search.json`, `Experiment.search_json`), written
by the run (`sweeper.run.search_tune`) after every proposal and when it stops, read by the views
(`status`, `envelope`, `report`, `sweeper.Sweep`) to say what was trained, skipped and audited.

    {"version": 1, "settings": {mode, tolerance, budget, audit}, "radii": [...],
     "unit": "GPU-hours" | "core-hours", "universe": N,
     "proposals": [{"trial_id", "phase": "search" | "audit", "why", "gain", "cost"}, ...],
     "stopped": null | {"reason", "gain", "spent", "models"},
     "audit": null | {"trials": [...], "before": [...], "after": [...], "raised": [...]},
     "deciding": {"calls", "cpu_s"}, "curve_wait": {"curves", "seconds"},
     "waits": {"in_tune", "rounds"}}

`deciding`: Tune's calls for a trial in the run that wrote the record and the CPU seconds they
took in the driver (reading curves, deciding, writing this record; not certification's poll):
the control plane's cost of the search (`benchmarks/sweep_scale.py --search`). `curve_wait`:
of the curves that came in that run, how many and the seconds from each trial's end in Tune to
its curve in the search, summed (certification's latency, which the search waits on).
`waits`: in that run, the waits for curves with no trial of the search in Tune that Tune's own
loop served (`in_tune`) and those that ended Tune's round (`rounds`; `search_tune`).

The record explains decisions; it decides nothing that a reader counts: every number a view
shows comes from the certification rows. The search has no guarantee, and the views say so."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from sweeper.results.storage import Experiment
from trainables.kernel import fileio

log = logging.getLogger(__name__)

VERSION = 1
LIMIT = 16_000_000  # bytes: a record of 20,000 proposals is about 3 MB
NO_GUARANTEE = (
    "the envelope search trained {trained} of {universe} grid points; the envelope is of the "
    "models trained (no guarantee that a skipped point would not have raised it)"
)


def write_search(exp: Experiment, doc: dict[str, Any]) -> None:
    fileio.write_bytes_atomic(exp.search_json, json.dumps({**doc, "version": VERSION}).encode())


def read_search(exp: Experiment) -> dict[str, Any] | None:
    """The record, or None if there is none or it does not parse (with a warning: views then
    show the experiment without the search's account)."""
    try:
        if not fileio.exists(exp.search_json):
            return None
        doc = json.loads(fileio.read_bytes(exp.search_json, limit=LIMIT))
    except (OSError, ValueError) as e:
        log.warning("left out %s: %s", exp.search_json, e)
        return None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        log.warning("left out %s: not a search record of this version", exp.search_json)
        return None
    return doc


@dataclass(frozen=True)
class SearchAccount:
    """What the views say of a search: grid points in its universe, trained (by the search or
    before it), audited, skipped (never trained), whether and why it stopped, and how much the
    audit raised the envelope (largest over the radii; None before the audit is certified)."""

    universe: int
    trained: int
    audited: int
    skipped: int
    stopped: str | None
    gain: float | None
    audit_raised: float | None

    def lines(self) -> list[str]:
        """The account in words, the no-guarantee sentence first."""
        out = [NO_GUARANTEE.format(trained=self.trained, universe=self.universe)]
        state = f"stopped ({self.stopped})" if self.stopped else "not stopped yet"
        largest = f"; largest expected gain left {self.gain:.4f}" if self.gain is not None else ""
        out.append(
            f"search {state}{largest}: {self.trained} trained, {self.audited} of them by the "
            f"audit, {self.skipped} skipped"
        )
        if self.audit_raised is not None:
            out.append(
                f"the audit's models raised the envelope by at most {self.audit_raised:.3f} "
                "at any radius"
                + (": the search missed a better model" if self.audit_raised > 0 else "")
            )
        return out


def account(exp: Experiment, finished: set[str]) -> SearchAccount | None:
    """The search's account of `exp` (`finished`: the trials trained), or None if no search ran."""
    doc = read_search(exp)
    if doc is None:
        return None
    audited = {p.get("trial_id") for p in doc.get("proposals", []) if p.get("phase") == "audit"}
    universe = int(doc.get("universe") or 0)
    trained = len(finished)
    stopped = doc.get("stopped") or {}
    raised = (doc.get("audit") or {}).get("raised")
    return SearchAccount(
        universe=universe,
        trained=trained,
        audited=len(audited & finished),
        skipped=max(universe - trained, 0),
        stopped=stopped.get("reason"),
        gain=stopped.get("gain"),
        audit_raised=max(raised) if raised else (0.0 if raised == [] else None),
    )
