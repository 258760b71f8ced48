"""Stopping inside a trial (issue 37, item 4): asynchronous successive halving, per σ, on the
trials' proxy (`trainables.proxy`: certified accuracy on a validation split carved from the
training set, at radii 0, σ/2, σ, ...), as a Ray Tune scheduler (`--halving ETA`).

Each proxy report is a rung (the epoch it was measured after). A trial's curve there is
compared with the curves every trial of its σ reported at the same rung so far (itself
included): it continues if at some radius it reaches the top 1/η of them (the quantile
1 − 1/η, ties kept, as Tune's ASHA does for one metric, but never the lowest curve of a radius
where they differ); the envelope is a maximum over radii, so a model that leads at any one
radius can still make it. With fewer than η curves at a rung nothing is halted there.

A halted trial stops (Tune's STOP) where it stands: it is not certified, trial.json says
`halted` with the η that halted it, and its checkpoint stays, so a run under another η or
without `--halving` continues it from there; one under the same η leaves it halted.

The rungs are recorded on storage (`halving.json`, `results.halving_records`), so a resumed
driver judges the trials still to come against the same curves. The decision uses no test
point; like the envelope search, it has no guarantee (a model slow to start can be halted)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sweeper.results.halving_records import read_halving, write_halving
from sweeper.results.storage import Experiment
from sweeper.run.tune_names import TuneTrials

log = logging.getLogger(__name__)


def keeps(curve: list[float], recorded: list[list[float]], eta: int) -> bool:
    """Whether a trial whose proxy is `curve` continues, among the `recorded` curves of its rung
    (itself included): at some radius in the top 1/`eta` (at or above the quantile 1 − 1/eta,
    and above the lowest: a radius where every curve is equal, zero most often, says nothing),
    or if fewer than `eta` are recorded or no radius tells the curves apart."""
    if len(recorded) < eta:
        return True
    values = np.asarray(recorded, dtype=np.float64)  # (trials, radii)
    lowest = values.min(axis=0)
    if not np.any(values.max(axis=0) > lowest):
        return True
    cutoffs = np.quantile(values, 1 - 1 / eta, axis=0)
    mine = np.asarray(curve, dtype=np.float64)
    return bool(np.any((mine >= cutoffs - 1e-12) & (mine > lowest)))


def rung_key(sigma: float, epoch: int, radii: int) -> str:
    """A rung: trials of one σ after one epoch, their curves at the same radii."""
    return f"sigma={sigma:g}/epoch={epoch}/radii={radii}"


class Halving(FIFOScheduler):
    """Successive halving on the proxy at rate `eta` (module docstring); `handed` names each
    of Tune's trials' `TrialConfig`. `halted`: trial_id -> the epoch it was halted after, as
    recorded (earlier runs' too); `stopped`: those this scheduler stopped in this run, the ones
    whose end in Tune is a halt (a trial the record says halted may be trained again: its
    trial.json was not written as halted when the driver died)."""

    def __init__(self, exp: Experiment, eta: int, handed: TuneTrials):
        super().__init__()
        self.exp, self.eta, self.handed = exp, eta, handed
        doc = read_halving(exp) or {}
        same = doc.get("eta") == eta  # under another rate every trial is judged anew
        self.rungs: dict[str, dict[str, list[float]]] = doc["rungs"] if same else {}
        self.halted: dict[str, int] = doc["halted"] if same else {}
        self.stopped: dict[str, int] = {}

    def on_trial_result(self, tune_controller, trial, result: dict[str, Any]) -> str:
        curve = result.get("proxy")
        if not isinstance(curve, list) or not curve:
            return TrialScheduler.CONTINUE
        cfg = self.handed.of(trial)
        epoch = int(result["epoch"])
        rung = self.rungs.setdefault(rung_key(cfg.sigma, epoch, len(curve)), {})
        rung[cfg.trial_id] = [float(v) for v in curve]
        decision = TrialScheduler.CONTINUE
        self.halted.pop(cfg.trial_id, None)  # a record's halt its training went past
        if not keeps(curve, list(rung.values()), self.eta):
            self.halted[cfg.trial_id] = self.stopped[cfg.trial_id] = epoch
            decision = TrialScheduler.STOP
            log.info("halving: %s halted after epoch %d (proxy %s)", cfg.trial_id, epoch, curve)
        write_halving(self.exp, {"eta": self.eta, "rungs": self.rungs, "halted": self.halted})
        return decision

    def __getstate__(self) -> dict:
        # Tune pickles its scheduler into the experiment state; resuming reads the storage.
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
