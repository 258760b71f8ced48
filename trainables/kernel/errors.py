"""The validation error types: every problem found at once, one line each.

Pure Python, imported by the control plane (space specs, storage, the CLI's `error:` lines)
and by the data plane (trial configurations).
"""

from __future__ import annotations


class ProblemsError(ValueError):
    """Several problems found together; `problems` has one line each, reported at once."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class ConfigError(ProblemsError):
    """Problems with a trial configuration."""
