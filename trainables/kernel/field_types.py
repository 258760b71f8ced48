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


# Per field: (name, the types a value may be, whether a bool is refused): the annotations
# flattened once per class, not walked per value (a sweep's driver validates thousands).
_Check = tuple[str, tuple[type, ...], bool]
_CHECKS: dict[type, list[_Check]] = {}


def _checks(cls: type) -> list[_Check]:
    if cls not in _CHECKS:
        hints = _hints(cls)
        _CHECKS[cls] = [(f.name, *_accepted(hints[f.name])) for f in fields(cls)]
    return _CHECKS[cls]


def _accepted(hint: Any) -> tuple[tuple[type, ...], bool]:
    """(the types a value of `hint` may be, whether a bool is refused): int is accepted for
    float, and a bool (an int to Python) is refused for int and float unless bool is named."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    args = typing.get_args(hint) if union else (hint,)
    args = tuple(typing.get_origin(a) or a for a in args)  # tuple[int, ...]: a tuple
    accepted = tuple({int: (int,), float: (int, float)}.get(a, (a,)) for a in args)
    return tuple(t for ts in accepted for t in ts), bool not in args and (
        int in args or float in args
    )


def type_problems(obj: Any) -> list[str]:
    """Fields of a dataclass instance whose values do not match their annotations."""
    bad = [
        name
        for name, accepted, no_bool in _checks(type(obj))
        if not isinstance(value := getattr(obj, name), accepted)
        or (no_bool and isinstance(value, bool))
    ]
    hints = _hints(type(obj))
    return [
        f"{name} must be {_type_name(hints[name])} (got {getattr(obj, name)!r})" for name in bad
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


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if args:
        return " or ".join("null" if a is type(None) else a.__name__ for a in args)
    return str(hint.__name__)
