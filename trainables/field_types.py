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


def _hints(cls: type) -> dict[str, Any]:
    """Resolved field annotations (cached: a 644-trial grid builds thousands of configs)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def type_problems(obj: Any) -> list[str]:
    """Fields of a dataclass instance whose values do not match their annotations."""
    hints = _hints(type(obj))
    return [
        f"{f.name} must be {_type_name(hints[f.name])} (got {getattr(obj, f.name)!r})"
        for f in fields(obj)
        if not _is_instance(getattr(obj, f.name), hints[f.name])
    ]


def float_fields(obj: Any) -> dict[str, float]:
    """The fields annotated float (or float | None) that hold an int, as floats."""
    hints = _hints(type(obj))
    changes: dict[str, float] = {}
    for f in fields(obj):
        value, hint = getattr(obj, f.name), hints[f.name]
        if isinstance(value, int) and float in (*typing.get_args(hint), hint):
            changes[f.name] = float(value)
    return changes


def _is_instance(value: Any, hint: Any) -> bool:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_is_instance(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if args:
        return " or ".join("null" if a is type(None) else a.__name__ for a in args)
    return str(hint.__name__)
