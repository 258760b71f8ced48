"""The final certification step's test points (issue 40 item 1; docs/guide/final-step.md).

The papers select on some test points and report on others: SmoothAdv selected its envelope on
every 20th test point (500) and re-certified each winner on all 10,000; MACER reported on
images 500–999. A space's `certify.final` (`sweeper certify --final`) says which: `skip`,
`max_points` and a range `start`/`stop`, like the selection's own points, and `disjoint`
(report only on points the selection did not use). Pure Python: the driver names and plans the
step, the workers certify its points.

A final step's rows have a cert_id of their own, the selection's without its strategy tag
followed by `FinalPoints.tag` (`_final-skip-1-max-all`, `-from-500-to-1000`, `-disjoint`), so
they never pool with the selection's and every view can say which points each number used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainables.kernel.field_types import type_problems
from trainables.kernel.settings import AtLeast, bound_problems, declared, setting

FINAL_MARK = "_final-"  # begins a final step's cert_id segment (`FinalPoints.tag`)
_TAG = re.compile(
    r"(?P<base>.+)_final-skip-(?P<skip>\d+)-max-(?P<max>all|\d+)"
    r"(?:-from-(?P<start>\d+))?(?:-to-(?P<stop>\d+))?(?P<disjoint>-disjoint)?"
)


@dataclass(frozen=True)
class FinalPoints:
    """The report points of the final step: every `skip`-th test point of [start, stop), at
    most `max_points` of them; `disjoint`: the selection's points left out of the numbers.
    The defaults: every test point (SmoothAdv's 10,000 on CIFAR-10)."""

    skip: int = setting(1, "Report on every SKIP-th test point of the range.", AtLeast(1))
    max_points: int | None = setting(
        None, "At most this many report points (null: every one of the range).", AtLeast(1)
    )
    start: int = setting(0, "The range's first test point (MACER's: 500).", AtLeast(0))
    stop: int | None = setting(
        None, "The range's end, excluded (null: the test split's end; MACER's: 1000).", AtLeast(1)
    )
    disjoint: bool = setting(
        False, "Report only on the range's points the selection did not certify."
    )

    def problems(self) -> list[str]:
        found = type_problems(self) or bound_problems(self)
        if not found and self.stop is not None and self.stop <= self.start:
            found.append(f"stop must be above start (got start {self.start}, stop {self.stop})")
        return found

    @property
    def tag(self) -> str:
        """The cert_id segment (without its leading underscore) naming these points."""
        top = "all" if self.max_points is None else self.max_points
        text = f"final-skip-{self.skip}-max-{top}"
        text += f"-from-{self.start}" if self.start else ""
        text += "" if self.stop is None else f"-to-{self.stop}"
        return text + ("-disjoint" if self.disjoint else "")

    def indices(self, num_test: int) -> list[int]:
        """The test points the final step certifies, of a split of `num_test` (every one of
        the range, `disjoint` or not: the views leave the selection's out of the numbers)."""
        stop = num_test if self.stop is None else min(self.stop, num_test)
        return list(range(self.start, stop, self.skip))[: self.max_points]

    def describe(self) -> str:
        """The points in words (the views' `points` notes)."""
        end = "the end" if self.stop is None else f"{self.stop - 1}"
        every = "every point" if self.skip == 1 else f"every {self.skip}-th point"
        text = f"{every} of {self.start}–{end}"
        text += "" if self.max_points is None else f", at most {self.max_points}"
        return text + (", less the selection's" if self.disjoint else "")


FINAL_PARTS = {f.name: f.metadata["help"] for f in declared(FinalPoints)}


def final_id(selection_base: str, points: FinalPoints) -> str:
    """The cert_id of the final step of the selection whose cert_id without strategy tag is
    `selection_base`."""
    return f"{selection_base}_{points.tag}"


def final_of(cert_id: str) -> tuple[str, FinalPoints] | None:
    """(the selection's base cert_id, the report points) of a final step's cert_id; None for
    any other cert_id (a selection's, or one no spelling of `final_id` gives)."""
    m = _TAG.fullmatch(cert_id)
    if m is None:
        return None
    points = FinalPoints(
        skip=int(m["skip"]),
        max_points=None if m["max"] == "all" else int(m["max"]),
        start=int(m["start"] or 0),
        stop=None if m["stop"] is None else int(m["stop"]),
        disjoint=m["disjoint"] is not None,
    )
    if points.problems() or final_id(m["base"], points) != cert_id:
        return None
    return m["base"], points


def is_final(cert_id: str) -> bool:
    """Whether `cert_id` names a final step's rows."""
    return FINAL_MARK in cert_id and final_of(cert_id) is not None


def final_value(value: object) -> FinalPoints | str | None:
    """A space's `final:` as FinalPoints: null/false (no final step), true or "all" (every
    test point), a mapping of FinalPoints' keys; a string saying what is wrong otherwise."""
    if value is None or value is False:
        return None
    if value is True or value == "all":
        return FinalPoints()
    if isinstance(value, FinalPoints):
        return value
    if not isinstance(value, dict):
        return "must be all, true, false or a mapping of skip, max_points, start, stop, disjoint"
    names = {f.name for f in declared(FinalPoints)}
    unknown = [k for k in value if k not in names]
    if unknown:
        return f"unknown key {unknown[0]!r} (valid: {', '.join(sorted(names))})"
    return FinalPoints(**value)
