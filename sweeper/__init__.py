"""sweeper: Ray-based sweeps of randomized-smoothing classifiers (the driver's side).

The Python API is `sweeper.Sweep` (`sweeper/api/sweep.py`); the command line is
`sweeper.cli`. `Sweep` is imported on first use (PEP 562 `__getattr__`), so importing
`sweeper` or its command line stays cheap: `sweeper --help` and dry runs import neither torch
nor Ray (tests/test_cli_speed.py).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"Sweep": "sweeper.api.sweep", "Watchers": "sweeper.run.driving"}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sweeper' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
