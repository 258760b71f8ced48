"""Each trained model's certified-accuracy curve at the envelope search's radii, as
certification produces it during a run (`Curves.ready`) or as an earlier run left it on storage
(`Curves.stored`). What the search learns from:

- strategy `full`: the model's certified accuracy at each radius as the envelope computes it
  (`results.envelope.certified_accuracy`), from its compacted rows, read through the reader's
  validation (`results.validation.read_valid`);
- strategy `envelope`: a certified model's certified counts per grid radius (below the radius
  it was certified from, its pilot's estimate for the points left out: `Ledger.estimate`); a
  pruned model's upper bounds (it cannot reach the envelope: all the search needs to know), from the
  certifier's ledger, which recomputes an earlier run's models from their rows as they arrive
  (a record on storage, `envelope.json`, is never read back).

A model whose certification failed for good has no curve: the search counts it trained and
learns nothing from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from sweeper.results.certify_rows import CERTIFY_ROWS
from sweeper.results.envelope import certified_accuracy
from sweeper.results.reader import read_columns
from sweeper.results.storage import Experiment
from sweeper.results.validation import read_valid
from sweeper.run.shards import Event
from trainables.kernel.stage_settings import CertifySpec

if TYPE_CHECKING:
    from sweeper.run.envelope_run import Certifier

FAILED: None = None  # a model trained whose certification failed: no curve


class Curves:
    """The curves of one run's models under the fixed-σ setting of `certify` at `radii`."""

    def __init__(self, exp: Experiment, certify: CertifySpec, radii: list[float]):
        self.exp, self.radii = exp, list(radii)
        self.spec = certify.variants()[0]  # the fixed-σ setting (DDRS's is not searched on)
        self.compacted: set[str] = set()  # models compacted during this run (strategy full)
        self.certifier: Certifier | None = None

    def tap(self, on_event: Callable[[Event], None]) -> Callable[[Event], None]:
        """`on_event`, noting each model whose rows are compacted under the setting."""
        what = f"certify {self.spec.cert_id}"

        def tapped(event: Event) -> None:
            if event.kind == "compacted" and event.detail == what:
                self.compacted.add(event.trial_id)
            on_event(event)

        return tapped

    # ------------------------------------------------------------------ during the run
    def ready(self, awaiting: set[str]) -> dict[str, np.ndarray | None]:
        """Of the `awaiting` models, those whose curve is known now (None: certification
        failed for good)."""
        out: dict[str, np.ndarray | None] = {}
        failures = self.certifier.failure_log.failures if self.certifier is not None else {}
        for tid in sorted(awaiting):
            if (tid, "certify") in failures:
                out[tid] = FAILED
            elif (curve := self._ready(tid)) is not None:
                out[tid] = curve
        return out

    def _ready(self, trial_id: str) -> np.ndarray | None:
        if self.spec.strategy == "envelope":
            ledger = getattr(self.certifier, "ledger", None)
            if ledger is None or trial_id not in ledger.models:
                return None
            return _ledger_curve(ledger, trial_id)
        if trial_id in self.compacted:
            return self.rows_curve(trial_id)
        return None

    # ------------------------------------------------------------------ on storage
    def stored(self, trial_ids: list[str]) -> dict[str, np.ndarray]:
        """The curves an earlier run left for `trial_ids` (a model not certified is left out:
        this run certifies it and `ready` gives its curve). None under the envelope strategy:
        its certifier replays the models' rows and `ready` gives their curves."""
        if self.spec.strategy == "envelope":
            return {}
        curves = {tid: self.rows_curve(tid) for tid in trial_ids}
        return {tid: c for tid, c in curves.items() if c is not None}

    def rows_curve(self, trial_id: str) -> np.ndarray | None:
        """The curve of a model's compacted rows (validated), or None if it has none."""
        where = self.exp.setting_dir("certify", trial_id, self.spec.cert_id)
        files = [f for f in self.exp.stage_files("certify", within=where) if f.kind == "compacted"]
        if not files:
            return None
        cols = read_columns(CERTIFY_ROWS, ["correct", "radius"])
        table, invalid = read_valid(self.exp, CERTIFY_ROWS, files[-1:], cols)
        if invalid or table.num_rows == 0:
            return None
        return certified_accuracy(table.to_pandas(), self.radii).to_numpy(np.float64)[0]


def _ledger_curve(ledger: Any, trial_id: str) -> np.ndarray | None:
    """A settled model's curve from the envelope certifier's ledger: certified counts (their
    estimate where inexact), or a pruned model's upper bounds, per grid radius over its points."""
    status = ledger.status(trial_id)
    m = ledger.models[trial_id]
    points = max(len(m.idx), 1)
    if status == "certified":
        return np.asarray(ledger.estimate(m), dtype=np.float64) / points
    if status == "pruned":
        return np.asarray(m.upper_curve, dtype=np.float64) / points
    return None
