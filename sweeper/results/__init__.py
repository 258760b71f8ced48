"""The experiment on storage, the foundation every stage writes to or reads from.

Owns the layout of an experiment (`storage`: the only module that spells paths), the lease (one
driver per experiment), what a sharded stage's rows are (`stage_table`), the two stages' row
tables (`certify_rows`: certification, `empirical_rows`: the empirical attack), reading a
stage's rows validated and cached (`reader`), the certified-accuracy envelope (`envelope`) and
an experiment's status (`status`). May import `trainables` (its config and file helpers) and
nothing else of `sweeper`: plan, run, report, ingest and cli all build on it.

The Python API for reading an experiment's results (docs/guide/reading-results.md):

    from sweeper.results import Experiment, load_results
    from sweeper.results.envelope import envelope

    results = load_results(Experiment("results", "digits"))  # validated rows, DDRS made sound
    frame = results.frame[results.frame["sound"]]            # what `sweeper envelope` reads
    envelope(frame, [0.0, 0.25, 0.5])                        # best model per radius

`Experiment` and `load_results` are imported on first use (`__getattr__`), so importing this
package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Experiment": "sweeper.results.storage",
    "load_results": "sweeper.results.certify_rows",
    "Results": "sweeper.results.certify_rows",
    "ResultsError": "sweeper.results.certify_rows",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sweeper.results' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
