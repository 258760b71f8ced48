"""Command-line options made from the settings' own declarations (`trainables.kernel.settings`),
so a setting's flag, type, help and range cannot disagree with its YAML key and default.

`settings_options(cls)` turns every declared field of a settings dataclass into a Typer option;
`with_options(...)` adds them to a command (its signature is extended, the values arrive in its
`**options`); `given(cls, options)` reads back the fields the user set. Two kinds of options:

- overrides of a space's block (`CertifySpec`, `EmpiricalSpec`): unset by default, so the
  space's value stands; checked by the block's own `problems()` like the YAML (no Click range);
- settings of the command itself (`LaunchOptions`): the field's default, Click checks the range.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer
import yaml

from trainables.kernel.settings import (
    AtLeast,
    ListOf,
    NotBelow,
    Settings,
    declared,
    flag_of,
    parse_list,
)

SCALARS = (int, float, str, bool)


def _scalar_type(hint: Any) -> Any:
    """The one scalar type a hint allows besides None, or None if it is not that simple."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return args[0] if len(args) == 1 and args[0] in SCALARS else None
    return hint if hint in SCALARS else None


def _help(f: dataclasses.Field, override: bool) -> str:
    """The field's help, with what values it takes and (an override) where its default is;
    a command's own setting shows its default and range the way Click does."""
    if not override:
        return f.metadata["help"]
    bound = f.metadata["bound"]
    notes = [bound.describe()] if bound.describe() else []
    if not isinstance(bound, Settings):
        default = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        notes.append(f"default: the space's, else {'null' if default is None else default}")
    return f.metadata["help"].rstrip(".") + (f" ({'; '.join(notes)})." if notes else ".")


def _option(
    name: str, decls: list[str], kind: Any, help_text: str, default: Any, ranges: dict[str, float]
) -> inspect.Parameter:
    """One keyword parameter of a command: `name` in **options, flags `decls`."""
    annotation = bool | None if kind is bool else (kind or str) | None
    option = typer.Option(*decls, help=help_text, **ranges)  # type: ignore[arg-type]  # min/max
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[annotation, option],
    )


def _field_option(f: dataclasses.Field, hint: Any, override: bool) -> inspect.Parameter:
    kind, decl, bound = _scalar_type(hint), flag_of(f), f.metadata["bound"]
    if isinstance(bound, Settings):
        kind, decls = bool, [decl]  # a switch: on, with the parts' defaults
    else:
        decls = [f"{decl}/--no-{decl[2:]}"] if kind is bool and override else [decl]
    default, ranges = (None, {}) if override else (f.default, _range(bound))
    return _option(f.name, decls, kind, _help(f, override), default, ranges)


def _range(bound: Any) -> dict[str, float]:
    return {"min": bound.low} if isinstance(bound, (AtLeast, NotBelow)) else {}


def settings_options(
    cls: type, *, only: tuple[str, ...] | None = None, override: bool = True
) -> list[inspect.Parameter]:
    """A Typer option per declared field of `cls` (only those named in `only`, if given); a
    nested setting (`Settings`) gives a switch `--<name>` and an option per part."""
    hints = typing.get_type_hints(cls)
    params = []
    for f in declared(cls):
        if only is not None and f.name not in only:
            continue
        params.append(_field_option(f, hints[f.name], override))
        if isinstance(f.metadata["bound"], Settings):
            params += _part_options(f, _nested_type(hints[f.name]))
    return params


def _nested_type(hint: Any) -> type:
    return next(a for a in typing.get_args(hint) if a is not type(None))


def _part_options(f: dataclasses.Field, nested: type) -> list[inspect.Parameter]:
    """`--<name>-<part>` for each part of a nested setting (unset: the part's default)."""
    hints = typing.get_type_hints(nested)
    defaults = {part.name: part.default for part in dataclasses.fields(nested)}
    return [
        _option(
            f"{f.name}_{part}",
            ["--" + f"{f.name}-{part}".replace("_", "-")],
            _scalar_type(hints[part]),
            f"{text.rstrip('.')} (default: {defaults[part]}).",
            None,
            {},
        )
        for part, text in f.metadata["bound"].parts.items()
    ]


def with_options(*groups: list[inspect.Parameter]) -> Callable:
    """Extend a command's signature with generated options; it receives them as **options."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command)
        hints = typing.get_type_hints(command, include_extras=True)  # its own, evaluated
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in signature.parameters.values()
            if p.kind is not p.VAR_KEYWORD
        ]
        parameters = own + [p for g in groups for p in g]
        signed = signature.replace(parameters=parameters)
        command.__signature__ = signed  # type: ignore[attr-defined]
        return command

    return decorate


def given(cls: type, options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the fields of `cls` set on the command line, parsed; a problem per malformed value).
    A nested setting is on when its switch or any of its parts is given."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in declared(cls):
        bound = f.metadata["bound"]
        if isinstance(bound, Settings):
            parts = {p: options.get(f"{f.name}_{p}") for p in bound.parts}
            parts = {p: v for p, v in parts.items() if v is not None}
            if options.get(f.name) or parts:
                nested = _nested_type(hints[f.name])(**parts)
                wrong = [_part_flag(f, q) for q in nested.problems()]
                values.update({} if wrong else {f.name: nested})
                problems += wrong
        elif options.get(f.name) is not None:
            parsed = _parse(f, hints[f.name], options[f.name], problems)
            # None: malformed, said so in `problems`; out of bounds: named as typed, and
            # not passed on (a later check would say it again, by the setting's name)
            wrong = [] if parsed is None else bound.problems(flag_of(f), parsed)
            values.update({} if parsed is None or wrong else {f.name: parsed})
            problems += wrong
    return values, problems


def _part_flag(f: dataclasses.Field, problem: str) -> str:
    """A nested setting's problem ("skip must be ...") named by the flag typed
    (`--final-skip must be ...`)."""
    for part in f.metadata["bound"].parts:
        if problem.startswith(f"{part} "):
            return flag_of(f) + "-" + part.replace("_", "-") + problem[len(part) :]
    return f"{flag_of(f)}: {problem}"


def _parse(f: dataclasses.Field, hint: Any, value: Any, problems: list[str]) -> Any:
    """A value as the field takes it: lists from `0,0.25`, unions from a YAML scalar."""
    bound = f.metadata["bound"]
    if isinstance(bound, ListOf):
        try:
            return parse_list(value, bound.kind)
        except ValueError:
            if bound.kind is int:
                problems.append(f"{flag_of(f)} {value!r}: expected integers separated by commas")
            else:
                problems.append(
                    f"{flag_of(f)} {value!r}: expected numbers separated by commas (0,0.5,1) "
                    "or start:stop:step (0:2.25:0.25)"
                )
            return None
    if _scalar_type(hint) is None and isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    return value


# Declared once, for every command that reads results (`sweeper envelope`, `sweeper table`).
Strict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Exit 1 (after the output) if anything was left out: a results file that failed "
        "validation (named on stderr), a data-dependent model awaiting its memory pass.",
    ),
]

AttestedOnly = Annotated[
    bool,
    typer.Option(
        "--attested-only",
        help="Count only models whose results files are attested by the key ($SWEEPER_PUBLIC_KEY "
        "names a public key file, else this machine's signing key); see `sweeper verify`.",
    ),
]


# Declared once, for every command that plans a space (`run grid`, `certify`, `empirical`).
SpaceSmoke = Annotated[
    bool,
    typer.Option(
        "--smoke", help="The space's tiny variant: few epochs and draws (experiment <space>-smoke)."
    ),
]
Download = Annotated[
    bool, typer.Option("--download", help="Download the data set if missing (needs internet).")
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")]
Restart = Annotated[
    bool,
    typer.Option("--restart", help="Start over; the old experiment is moved aside, not deleted."),
]
Gpus = Annotated[
    int | None,
    typer.Option("--gpus", min=1, help="With --dry-run: the wall-clock on this many GPUs."),
]
Retrain = Annotated[
    bool,
    typer.Option(
        "--retrain",
        help="Train the --only trials again from scratch (e.g. a corrupt checkpoint); "
        "their checkpoints and results are moved to <experiment>/retired/, not deleted.",
    ),
]
