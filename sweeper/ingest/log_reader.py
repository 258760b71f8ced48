"""Reading one certification log of the reference code, streamed, within limits.

A log is read line by line (never whole into memory), and each row is checked as it is read:
its fields (see sweeper.ingest.importer), idx unique and inside the data set's test split, label and
prediction classes of the data set, the radius no larger than CERTIFY can certify with the
n, α and certification σ its rows will be stored with (`max_printed_radius`), at most
`max_rows` rows and `MAX_LINE` characters a line.
The first violation stops the read, so the memory a log takes is bounded by the row cap
whatever the file's size. A radius beyond the bound raises `LogRefused` (the settings the
import would store contradict the log: the whole import is refused); any other violation
raises `LogSkip` (the file is no log CERTIFY wrote: it is skipped). Both say the line and why.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from trainables.kernel.catalog import NUM_CLASSES, STANDARD_TEST_SIZE

HEADER = ("idx", "label", "predict", "radius", "correct", "time")
COLUMNS = ("idx", "label", "predict", "radius", "correct", "time_s")
DEFAULT_MAX_ROWS = 100_000  # twice the largest test split (ImageNet's 50,000 validation images)
MAX_LINE = 4096  # characters; a data line of the reference code has about 50
_TIMEDELTA = re.compile(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)")


def max_printed_radius(n: int, alpha: float, sigma: float) -> float:
    """The largest radius CERTIFY can give with n samples at level α and noise σ (every sample
    votes for the top class: σ·Φ⁻¹(α^(1/n)), 3.8σ for n = 100,000 and α = 0.001) as the
    reference code may print it: rounded to 3 significant digits (`{:.3}`) or 4 decimals, so up
    to half a unit of the last digit above; never below 0 (an abstention's radius). Within what
    the stage reader accepts for imported rows (sweeper.results.certify_rows.check)."""
    from trainables.kernel.certificates import max_radius

    bound = max(float(max_radius(sigma, n, alpha)), 0.0)
    return bound + max(5e-3 * bound, 5e-5)


class LogSkip(ValueError):
    """A file that is not imported; the message says why."""


class LogRefused(ValueError):
    """A log with a row that the certification settings it would be stored with cannot give
    (a radius above their bound); the message says the line, the bound and the --set that
    fixes it. The import refuses it rather than skipping it: storing the rows would claim a
    certificate the stored n, α and σ_cert do not allow."""


@dataclass(frozen=True)
class LogLimits:
    """What the rows of one log may hold (the defaults check the fields only)."""

    max_rows: int = DEFAULT_MAX_ROWS
    dataset: str | None = None  # idx and classes are checked against its test split
    max_radius: float = math.inf
    certified_with: str = ""  # "n=100000, α=0.001, σ_cert=0.25": what max_radius follows from

    @classmethod
    def of(cls, max_rows: int, dataset: str, n: int, alpha: float, sigma: float) -> LogLimits:
        """The limits of a log whose rows will be stored with n, α and σ_cert = `sigma`."""
        bound = max_printed_radius(n, alpha, sigma)
        return cls(max_rows, dataset, bound, f"n={n}, α={alpha:g}, σ_cert={sigma:g}")

    def problem(self, row: tuple) -> str | None:
        """Why a parsed row cannot come from CERTIFY on this data set (None: it can)."""
        idx, label, predict, _, _, _ = row
        if self.dataset is not None:
            size, classes = STANDARD_TEST_SIZE[self.dataset], NUM_CLASSES[self.dataset]
            if idx >= size:
                return (
                    f"idx {idx} is past the {self.dataset} test set "
                    f"({size:,} points, idx 0..{size - 1})"
                )
            if label >= classes or predict >= classes:
                return (
                    f"label {label} or predict {predict} is not a {self.dataset} class "
                    f"(0..{classes - 1})"
                )
        return None

    def radius_problem(self, radius: float) -> str | None:
        """Why CERTIFY cannot print `radius` with the n, α and σ_cert of these limits (None:
        it can); the text names the bound and the --set that fixes it."""
        if radius <= self.max_radius:
            return None
        return (
            f"radius {radius:g} is larger than CERTIFY can certify with {self.certified_with} "
            f"(at most {self.max_radius:.4g} as printed): pass --set n=..., alpha=... or "
            "sigma_cert=... as the log was certified"
        )


def parse_time(text: str) -> float:
    """Seconds, from `13.7` or str(timedelta) `0:00:13.736080` / `1 day, 0:00:01`."""
    m = _TIMEDELTA.fullmatch(text)
    if m:
        days, h, mins, s = m.groups()
        return int(days or 0) * 86400 + int(h) * 3600 + int(mins) * 60 + float(s)
    seconds = float(text)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError
    return seconds


def _flag(text: str) -> bool:
    if text in ("0", "1", "True", "False"):
        return text in ("1", "True")
    raise ValueError


_WHAT = {
    "idx": "an integer",
    "label": "an integer",
    "predict": "an integer",
    "radius": "a number",
    "correct": "0 or 1",
    "time": "seconds or h:mm:ss.ffffff",
}
_PARSE: tuple[Callable[[str], Any], ...] = (int, int, int, float, _flag, parse_time)


def parse_row(fields: list[str]) -> tuple[int, int, int, float, bool, float]:
    """One data line's values (an abstention's radius stored as 0); ValueError names the first
    bad field."""
    if len(fields) != len(HEADER):
        raise ValueError(f"expected {len(HEADER)} tab-separated fields, got {len(fields)}")
    values: list[Any] = []
    for name, text, parse in zip(HEADER, fields, _PARSE, strict=True):
        try:
            values.append(parse(text))
        except ValueError:
            raise ValueError(f"{name} {text!r} is not {_WHAT[name]}") from None
    idx, label, predict, radius, correct, _ = values
    if idx < 0 or label < 0 or predict < -1:
        raise ValueError("idx and label must be >= 0 and predict >= -1")
    if not (math.isfinite(radius) and radius >= 0):
        raise ValueError(f"radius {fields[3]!r} is not a number >= 0")
    if correct != (predict == label):
        raise ValueError(f"correct is {int(correct)} but predict {predict} and label {label}")
    return tuple(values)


def _lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    """(line number, line without its end), one at a time; LogSkip for an overlong line."""
    number = 0
    while line := stream.readline(MAX_LINE):
        number += 1
        if len(line) == MAX_LINE and not line.endswith("\n"):
            raise LogSkip(f"line {number}: longer than {MAX_LINE} characters")
        yield number, line.rstrip("\n")


def read_log(source: str | Path, limits: LogLimits = LogLimits()) -> dict[str, list]:
    """A log's columns (idx, label, predict, radius, correct, time_s) from its text (a str)
    or its file (a Path, streamed); LogSkip or LogRefused says why not. LF, CRLF or CR line
    ends, a BOM."""
    if isinstance(source, Path):
        try:
            with source.open(encoding="utf-8-sig", errors="replace", newline=None) as stream:
                return _read_rows(stream, limits)
        except OSError as e:
            raise LogSkip(f"cannot read it ({e.strerror or e})") from None
    return _read_rows(io.StringIO(source.removeprefix("\ufeff"), newline=None), limits)


def _read_rows(stream: TextIO, limits: LogLimits) -> dict[str, list]:
    lines = _lines(stream)
    first_line = next(lines, (1, ""))[1]
    if tuple(f.strip() for f in first_line.split("\t")) != HEADER:
        if not first_line.strip() and not stream.read(MAX_LINE).strip():
            raise LogSkip("empty")
        raise LogSkip(f"line 1: not the header {'<TAB>'.join(HEADER)}")
    cols: dict[str, list] = {k: [] for k in COLUMNS}
    first: dict[int, int] = {}
    for number, line in lines:
        if not line.strip():
            continue
        try:
            row = parse_row([f.strip() for f in line.split("\t")])
            problem = limits.problem(row)
        except ValueError as e:
            problem = str(e)
        beyond = limits.radius_problem(row[3]) if problem is None else None
        if beyond is not None:  # the settings to store are wrong, not the file: refuse
            raise LogRefused(f"line {number}: {beyond}")
        if problem is None and row[0] in first:
            problem = f"idx {row[0]} again (first on line {first[row[0]]})"
        if problem is None and len(first) >= limits.max_rows:
            problem = f"more than {limits.max_rows:,} rows (--max-rows)"
        if problem is not None:
            raise LogSkip(f"line {number}: {problem}")
        first[row[0]] = number
        for values, value in zip(cols.values(), row, strict=True):
            values.append(value)
        cols["radius"][-1] = 0.0 if row[2] == -1 else row[3]
    if not cols["idx"]:
        raise LogSkip("header only (no rows)")
    return cols
