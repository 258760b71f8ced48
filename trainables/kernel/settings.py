"""Every setting declared once: its dataclass field carries the type, the default, the help and
the bounds, and everything else is read from there. One mechanism for the trial's settings
(`TrialConfig`'s parts), certification's and the attack's (`trainables.kernel.stage_settings`)
and the launch's (`sweeper.run.launch_options`).

A settings dataclass declares each field as `name: type = setting(default, "help", Bound(...))`.
A space's YAML is checked against the same bounds (`bound_problems`), the command line's
options are made from the same fields (`sweeper.cli.options`: flag, type, help and the range in
`--help`), and a trial's parts check their values with them (`Bound.unmet`). A new setting is
one such line. Pure Python (no torch).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MISSING: Any = dataclasses.MISSING


def _int_at_least(value: Any, low: float) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_list(text: str, kind: type = float) -> tuple[Any, ...]:
    """A list as a command line writes it: `0,0.5,1`, or for numbers `start:stop:step` (stop
    included, each value rounded to 10 decimals so 0:2.25:0.25 gives 0.25 exactly). ValueError
    when it is neither (or empty, or not finite, or a range that does not rise)."""
    if ":" in text and kind is float:
        start, stop, step = (float(p) for p in text.split(":"))
        if not (all(map(math.isfinite, (start, stop, step))) and step > 0 and start <= stop):
            raise ValueError(text)
        count = math.floor((stop - start) / step + 1e-9) + 1
        values = tuple(round(start + k * step, 10) for k in range(count))
    else:
        values = tuple(kind(p) for p in text.split(",") if p.strip())
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(text)
    return values


class Bound:
    """What values a setting takes. `holds` says whether a set (non-null) value is one;
    two phrasings say why not: `problems` as a space's YAML and the command line say it (null
    is always let through: a null setting means "unset" and is checked where it is resolved),
    `unmet` as a trial's configuration says it (`requirement`, the short form)."""

    def holds(self, value: Any) -> bool:
        return True

    def describe(self) -> str:
        """The values it takes, for `--help` and the YAML's messages ("" for any)."""
        return ""

    def requirement(self) -> str:
        """The values it takes, short (">= 1"), for a trial's messages."""
        return self.describe()

    def problems(self, name: str, value: Any) -> list[str]:
        if value is None or self.holds(value):
            return []
        return [f"{name} must be {self.describe()} (got {value!r})"]

    def unmet(
        self, name: str, value: Any, *, where: str = "", required: bool = False, null: bool = False
    ) -> list[str]:
        """A trial's phrasing: `name` must be the `requirement` (`where`: for what, e.g. " for
        method 'x'"). Null is a problem if `required` (a setting the trial uses), else let
        through; `null` says "or null" (a field that may be unset)."""
        if (value is None and not required) or (value is not None and self.holds(value)):
            return []
        return [f"{name} must be {self.requirement()}{' or null' * null}{where} (got {value})"]


@dataclass(frozen=True)
class AtLeast(Bound):
    """An integer >= low (`all_ok`: or the word "all")."""

    low: int
    all_ok: bool = False

    def holds(self, value: Any) -> bool:
        return _int_at_least(value, self.low) or (self.all_ok and value == "all")

    def describe(self) -> str:
        return f"an integer >= {self.low}" + (", all or null" if self.all_ok else "")

    def requirement(self) -> str:
        return f">= {self.low}"


@dataclass(frozen=True)
class Positive(Bound):
    """A number > 0."""

    def holds(self, value: Any) -> bool:
        return _number(value) and value > 0

    def problems(self, name: str, value: Any) -> list[str]:
        ok = value is None or self.holds(value)
        return [] if ok else [f"{name} must be > 0 (got {value!r})"]

    def describe(self) -> str:
        return "a number > 0"

    def requirement(self) -> str:
        return "> 0"


@dataclass(frozen=True)
class NotBelow(Bound):
    """A number >= low."""

    low: float

    def holds(self, value: Any) -> bool:
        return _number(value) and value >= self.low

    def describe(self) -> str:
        return f"a number >= {self.low:g}"

    def requirement(self) -> str:
        return f">= {self.low:g}"


@dataclass(frozen=True)
class Between(Bound):
    """A number in the open interval (low, high)."""

    low: float
    high: float

    def holds(self, value: Any) -> bool:
        return _number(value) and self.low < value < self.high

    def describe(self) -> str:
        return f"a number in ({self.low:g}, {self.high:g})"

    def requirement(self) -> str:
        return f"in ({self.low:g}, {self.high:g})"


@dataclass(frozen=True)
class OneOf(Bound):
    """One of `choices` (names, or numbers as a trial's `mix_step`)."""

    choices: tuple[Any, ...]

    def holds(self, value: Any) -> bool:
        return value in self.choices

    def problems(self, name: str, value: Any) -> list[str]:
        if value is None or self.holds(value):
            return []
        return [f"unknown {name} {value!r} (valid: {', '.join(map(str, self.choices))})"]

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.choices))

    def requirement(self) -> str:
        return " or ".join(map(str, self.choices))


@dataclass(frozen=True)
class TrueOrFalse(Bound):
    """A switch (its type is checked with the others': any bool holds)."""

    def requirement(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class ListOf(Bound):
    """A non-empty list of numbers (`kind` float) or integers (`kind` int), each >= low."""

    kind: type
    low: float
    null_ok: bool = False

    def problems(self, name: str, value: Any) -> list[str]:
        if value is None and self.null_ok:  # null: the setting's own default rule
            return []
        if not isinstance(value, tuple) or not value:
            return [f"{name} must be a non-empty list (got {value!r})"]
        return [
            f"{name}: every value must be {self.what()} (got {v!r})"
            for v in value
            if not self._ok(v)
        ]

    def _ok(self, v: Any) -> bool:
        kinds = (int, float) if self.kind is float else (int,)
        return not isinstance(v, bool) and isinstance(v, kinds) and v >= self.low

    def holds(self, value: Any) -> bool:
        return isinstance(value, tuple) and bool(value) and all(map(self._ok, value))

    def what(self) -> str:
        return f"a number >= {self.low:g}" if self.kind is float else f"an integer >= {self.low:g}"

    def describe(self) -> str:
        return f"comma-separated, each {self.what()}"


@dataclass(frozen=True)
class Settings(Bound):
    """Nested settings (a dataclass with its own `problems()`, e.g. DDRS's), each part named
    in `parts` with its help: on the command line `--<name>` turns them on and
    `--<name>-<part>` sets one."""

    parts: Mapping[str, str]

    def holds(self, value: Any) -> bool:
        return not value.problems()

    def problems(self, name: str, value: Any) -> list[str]:
        return [] if value is None else [f"{name}.{q}" for q in value.problems()]


def setting(
    default: Any = MISSING,
    help: str = "",
    bound: Bound | None = None,
    *,
    flag: str | None = None,
    default_factory: Any = MISSING,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """A dataclass field declaring a setting: its default, its help, what values it takes
    (`bound`), its command-line flag (default: --<name>, underscores as dashes) and any other
    `metadata` (e.g. a trial's environment fields)."""
    meta = {**(metadata or {}), "help": help, "bound": bound or Bound(), "flag": flag}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


_DECLARED: dict[type, tuple[dataclasses.Field[Any], ...]] = {}


def declared(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The fields of settings class `cls` declared with `setting`, in order (cached: a
    sweep's driver validates thousands of trials)."""
    if cls not in _DECLARED:
        _DECLARED[cls] = tuple(f for f in dataclasses.fields(cls) if "bound" in f.metadata)
    return _DECLARED[cls]


def bound_problems(settings: Any) -> list[str]:
    """Every value of a settings instance outside its field's bounds, in field order (the
    YAML's and the command line's phrasing)."""
    return [
        problem
        for f in declared(type(settings))
        for problem in f.metadata["bound"].problems(f.name, getattr(settings, f.name))
    ]


def flag_of(f: dataclasses.Field[Any], prefix: str = "") -> str:
    """The command-line flag of a setting (`prefix`: of a nested setting's parts)."""
    flag: str | None = f.metadata.get("flag")
    return flag or "--" + (prefix + f.name).replace("_", "-")
