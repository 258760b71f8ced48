"""Run-time checks of a dataclass's values against its field annotations.

Configurations arrive from YAML, JSON and the command line, so a field annotated `int` can
hold "2" or 1.5: `type_problems` names each such field (int is accepted for float, bool is not
accepted for int), and `float_fields` gives the int values of float fields as floats (1 and 1.0
must hash to the same trial_id). Pure Python.
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from typing import Any

_HINTS: dict[type, dict[str, Any]] = {}
_CHECKS: dict[type, list[tuple[str, tuple[type, ...], bool]]] = {}
_FLOATS: dict[type, tuple[str, ...]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Resolved field annotations (cached: a 644-trial grid builds thousands of configs)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _checks(cls: type) -> list[tuple[str, tuple[type, ...], bool]]:
    """(field, the types it accepts, whether a bool is refused) per field of `cls`, worked out
    once per class: checking is then one isinstance per field (grids build thousands)."""
    if cls not in _CHECKS:
        hints = _hints(cls)
        _CHECKS[cls] = [(f.name, *_accepted(hints[f.name])) for f in fields(cls)]
    return _CHECKS[cls]


def _accepted(hint: Any) -> tuple[tuple[type, ...], bool]:
    """(the types a value of `hint` may have, whether bool is refused although int is in them)."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    members = typing.get_args(hint) if union else (hint,)
    accepted: list[type] = []
    for member in members:
        accepted += [int, float] if member is float else [typing.get_origin(member) or member]
    return tuple(dict.fromkeys(accepted)), bool not in members and (int in accepted)


def type_problems(obj: Any) -> list[str]:
    """Fields of a dataclass instance whose values do not match their annotations."""
    hints = _hints(type(obj))
    return [
        f"{name} must be {_type_name(hints[name])} (got {getattr(obj, name)!r})"
        for name, accepted, no_bool in _checks(type(obj))
        if not _matches(getattr(obj, name), accepted, no_bool)
    ]


def _matches(value: Any, accepted: tuple[type, ...], no_bool: bool) -> bool:
    return isinstance(value, accepted) and not (no_bool and isinstance(value, bool))


def float_fields(obj: Any) -> dict[str, float]:
    """The fields annotated float (or float | None) that hold an int, as floats."""
    return {
        name: float(value)
        for name in _float_names(type(obj))
        if isinstance(value := getattr(obj, name), int)
    }


def _float_names(cls: type) -> tuple[str, ...]:
    if cls not in _FLOATS:
        hints = _hints(cls)
        _FLOATS[cls] = tuple(
            f.name for f in fields(cls) if float in (*typing.get_args(hints[f.name]), hints[f.name])
        )
    return _FLOATS[cls]


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if args:
        return " or ".join("null" if a is type(None) else a.__name__ for a in args)
    return str(hint.__name__)
