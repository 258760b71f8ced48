"""Which grid points a run trains: all of them (`full`, the default) or as the envelope search
decides (`envelope`: `sweeper.run.envelope_search`), declared once with `setting`: a space's
`search:` block (or `search: envelope`), `sweeper run grid`'s `--search`, `--tolerance`,
`--budget`, `--audit`, and `Sweep.run(search=...)` are read from these lines.

The search has no statistical guarantee: the envelope it reports is of the models it trained.
Its defaults come from the replay on the published SmoothAdv logs (`benchmarks/envelope_search.py`,
docs/guide/envelope-search.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainables.kernel.field_types import type_problems
from trainables.kernel.settings import NotBelow, OneOf, Positive, bound_problems, setting

SEARCHES = ("full", "envelope")
SEARCH_ONLY = ("tolerance", "budget", "audit")  # the settings only search envelope reads


@dataclass(frozen=True)
class SearchSpec:
    mode: str = setting(
        "full",
        "full: train every grid point; envelope: train the points that could still raise the "
        "certified-accuracy envelope, chosen by a Gaussian process of the curves certified so "
        "far, per unit of cost (no guarantee: the envelope is of the models trained).",
        OneOf(SEARCHES),
        flag="--search",
    )
    tolerance: float = setting(
        0.002,
        "envelope search: stop when no untrained point's expected gain of the envelope, at any "
        "radius, exceeds this (certified accuracy, 0.002 = 0.2 points).",
        Positive(),
    )
    budget: float | None = setting(
        None,
        "envelope search: train models worth no more than this many device-hours of training "
        "(GPU-hours; core-hours for CPU trials), as the dry run prices them (null: no limit).",
        Positive(),
    )
    audit: float = setting(
        0.05,
        "envelope search: after it stops, also train untrained points worth this share of the "
        "training cost it spent (the highest upper bounds and a random sample; at least one "
        "unless 0) and report how much they raise the envelope.",
        NotBelow(0),
    )

    def problems(self) -> list[str]:
        return type_problems(self) or bound_problems(self)

    def idle(self, given: Iterable[str]) -> list[str]:
        """Which of the `given` settings `full` never reads: set, they would change nothing."""
        return [k for k in SEARCH_ONLY if k in given] if self.mode == "full" else []

    @property
    def active(self) -> bool:
        return self.mode == "envelope"
