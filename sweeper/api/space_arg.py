"""What `Sweep(space, param_space=...)` takes as its space: a shipped space's name, a YAML
file's path (a `str` or a `Path`), or the space as a mapping with a space file's keys
(`plan.param_space.ParamSpace`, given as `param_space=` or in `space`'s place). Anything
else, both at once, or a mapping with a key that is no string is one `SpaceTypeError`: a
`PlanError` and a `TypeError`, one line saying what is wrong and the fix. What the mapping
holds is the space's reading to judge (`parse_spec`, every problem at once), not this."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from sweeper.plan.param_space import WHERE, ParamSpace, load
from sweeper.plan.spaces import MAX_DEPTH, SpecError
from sweeper.plan.spec import SweepSpec
from sweeper.plan.sweep_plan import PlanError

DICT = "the space as a dict with a space file's keys: param_space={'fixed': {...}, 'grids': [...]}"
KINDS = f"a shipped space's name (`sweeper spaces`), a YAML file's path, or {DICT}"


class SpaceTypeError(PlanError, TypeError):
    """`Sweep` given a space of the wrong type: one line, what is wrong and the fix."""


def space_of(space: Any, param_space: Any) -> str | ParamSpace | None:
    """The space of `Sweep(space, param_space=...)`: a name or a path as a `str`, a mapping
    as a `ParamSpace` (a copy: later changes to the caller's dict do not reach it), or None
    (reading an experiment only); SpaceTypeError for anything else."""
    if space is not None and param_space is not None:
        raise SpaceTypeError(
            [f"Sweep got both a space ({_shown(space)}) and param_space: pass one of them"]
        )
    if isinstance(space, Mapping):
        space, param_space = None, space
    if param_space is not None:
        if not isinstance(param_space, Mapping):
            raise SpaceTypeError([f"Sweep's param_space is {_shown(param_space)}: pass {DICT}"])
        return ParamSpace(_copy(param_space, WHERE, 0))
    if space is None or isinstance(space, str):
        return space
    if isinstance(space, os.PathLike) and isinstance(path := os.fspath(space), str):
        return path
    raise SpaceTypeError([f"Sweep's space is {_shown(space)}: pass {KINDS}"])


def _copy(value: Any, where: str, depth: int) -> Any:
    """`value` with its mappings and lists copied; SpaceTypeError for a mapping's key that is
    not a string (a space file's keys are) and for nesting deeper than a space file may."""
    if depth > MAX_DEPTH:
        raise SpaceTypeError(
            [
                f"{WHERE} is nested deeper than {MAX_DEPTH} levels (at {_shortened(where)}: a "
                "dict inside itself?): a space is a few dicts and lists of values"
            ]
        )
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise SpaceTypeError(
                    [
                        f"{where} has a key that is not a string, {_shown(key)}: write it as "
                        f"the string {str(key)!r}, as a space file's keys are"
                    ]
                )
        return {k: _copy(v, f"{where}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        copied = [_copy(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return copied if isinstance(value, list) else tuple(copied)  # parse_spec judges it
    return value


def _shown(value: Any) -> str:
    """`value` as a message shows it: its type and its repr, shortened."""
    return f"{type(value).__name__} {_shortened(repr(value))}"


def _shortened(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def space_spec(space: str | ParamSpace) -> SweepSpec:
    """The validated spec of `space`; PlanError listing every problem (`param_space.load`)."""
    try:
        return load(space)
    except SpecError as e:
        raise PlanError(e.problems) from None


def shipped_spaces() -> list[Any]:
    """The spaces shipped with sweeper, each one's summary (`sweeper spaces`:
    `plan.space_list.shipped_summaries`)."""
    from sweeper.plan.space_list import shipped_summaries

    return list(shipped_summaries())
