"""Every setting declared once: its dataclass field carries the type, the default, the help and
the bounds, and everything else is read from there.

A settings dataclass (`CertifySpec`, `EmpiricalSpec`, `LaunchOptions`) declares each field as
`name: type = setting(default, "help", Bound(...))`. The space's YAML is checked against the
same bounds (`bound_problems`), and the command line's options are made from the same fields
(`sweeper.cli.options`): flag, type, help and the range in `--help`. A new setting is one such
line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MISSING = dataclasses.MISSING


def _int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Bound:
    """What values a setting takes: `problems` says why a value is not one (null is always
    let through: a null setting means "unset" and is checked where it is resolved)."""

    def problems(self, name: str, value: Any) -> list[str]:
        return []

    def describe(self) -> str:
        return ""


@dataclass(frozen=True)
class AtLeast(Bound):
    """An integer >= low (`all_ok`: or the word "all")."""

    low: int
    all_ok: bool = False

    def problems(self, name: str, value: Any) -> list[str]:
        if value is None or _int_at_least(value, self.low) or (self.all_ok and value == "all"):
            return []
        return [f"{name} must be {self.describe()} (got {value!r})"]

    def describe(self) -> str:
        return f"an integer >= {self.low}" + (", all or null" if self.all_ok else "")


@dataclass(frozen=True)
class Positive(Bound):
    """A number > 0."""

    def problems(self, name: str, value: Any) -> list[str]:
        ok = value is None or (_number(value) and value > 0)
        return [] if ok else [f"{name} must be > 0 (got {value!r})"]

    def describe(self) -> str:
        return "a number > 0"


@dataclass(frozen=True)
class NotBelow(Bound):
    """A number >= low."""

    low: float

    def problems(self, name: str, value: Any) -> list[str]:
        ok = value is None or (_number(value) and value >= self.low)
        return [] if ok else [f"{name} must be {self.describe()} (got {value!r})"]

    def describe(self) -> str:
        return f"a number >= {self.low:g}"


@dataclass(frozen=True)
class Between(Bound):
    """A number in the open interval (low, high)."""

    low: float
    high: float

    def problems(self, name: str, value: Any) -> list[str]:
        ok = value is None or (_number(value) and self.low < value < self.high)
        return [] if ok else [f"{name} must be {self.describe()} (got {value!r})"]

    def describe(self) -> str:
        return f"a number in ({self.low:g}, {self.high:g})"


@dataclass(frozen=True)
class OneOf(Bound):
    choices: tuple[str, ...]

    def problems(self, name: str, value: Any) -> list[str]:
        if value is None or value in self.choices:
            return []
        return [f"unknown {name} {value!r} (valid: {', '.join(self.choices)})"]

    def describe(self) -> str:
        return "one of " + ", ".join(self.choices)


@dataclass(frozen=True)
class ListOf(Bound):
    """A non-empty list of numbers (`kind` float) or integers (`kind` int), each >= low."""

    kind: type
    low: float

    def problems(self, name: str, value: Any) -> list[str]:
        if not isinstance(value, tuple) or not value:
            return [f"{name} must be a non-empty list (got {value!r})"]
        kinds = (int, float) if self.kind is float else (int,)
        bad = [
            v for v in value if isinstance(v, bool) or not isinstance(v, kinds) or not v >= self.low
        ]
        return [f"{name}: every value must be {self.what()} (got {v!r})" for v in bad]

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

    def problems(self, name: str, value: Any) -> list[str]:
        return [] if value is None else [f"{name}.{q}" for q in value.problems()]


def setting(
    default: Any = MISSING,
    help: str = "",
    bound: Bound | None = None,
    *,
    flag: str | None = None,
    default_factory: Any = MISSING,
) -> Any:
    """A dataclass field declaring a setting: its default, its help, what values it takes
    (`bound`) and its command-line flag (default: --<name>, underscores as dashes)."""
    metadata = {"help": help, "bound": bound or Bound(), "flag": flag}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared(cls: type) -> list[dataclasses.Field]:
    """The fields of settings class `cls` declared with `setting`, in order."""
    return [f for f in dataclasses.fields(cls) if "bound" in f.metadata]


def bound_problems(settings: Any) -> list[str]:
    """Every value of a settings instance outside its field's bounds, in field order."""
    return [
        problem
        for f in declared(type(settings))
        for problem in f.metadata["bound"].problems(f.name, getattr(settings, f.name))
    ]


def flag_of(f: dataclasses.Field, prefix: str = "") -> str:
    """The command-line flag of a setting (`prefix`: of a nested setting's parts)."""
    return f.metadata.get("flag") or "--" + (prefix + f.name).replace("_", "-")
