"""One declaration per setting (`trainables.kernel.settings`): every certification, attack and
launch setting declared in its dataclass is a YAML key and a command-line option of the same
meaning, with the same help, default and bounds. Walks the declarations, so a new setting is
checked without touching this file."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import typer
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cli.driver import DRIVER, launch_options
from sweeper.cli.options import given
from sweeper.plan.search_spec import SEARCH_ONLY
from sweeper.plan.spaces import parse_spec
from sweeper.plan.spec import CertifySpec, EmpiricalSpec, SearchSpec
from sweeper.run.launch_options import LaunchOptions
from trainables.kernel.settings import (
    AtLeast,
    Between,
    ListOf,
    NotBelow,
    OneOf,
    Positive,
    Settings,
    declared,
    flag_of,
)
from trainables.kernel.stage_settings import ENVELOPE_ONLY

# (command, the settings dataclass, the YAML block holding it or None, which fields it takes)
COMMANDS = [
    (["certify"], CertifySpec, "certify", None),
    (["empirical"], EmpiricalSpec, "empirical", None),
    (["certify"], LaunchOptions, None, DRIVER),
    (["empirical"], LaunchOptions, None, DRIVER),
    (["run", "grid"], LaunchOptions, None, None),
    (["run", "grid"], SearchSpec, "search", None),
]
CASES = [
    (command, cls, block, f)
    for command, cls, block, only in COMMANDS
    for f in declared(cls)
    if only is None or f.name in only
]
IDS = [f"{' '.join(c)}:{f.name}" for c, _, _, f in CASES]


def sample(f: dataclasses.Field, hint) -> tuple[object, str]:
    """(a valid value other than the default, as typed on the command line)."""
    bound = f.metadata["bound"]
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if isinstance(bound, ListOf):
        value = (4,) if bound.kind is int else (0.5, 1.5)
        return value, ",".join(map(str, value))
    valid = {AtLeast: 7, Between: 0.01, Positive: 0.5, NotBelow: 5.0}.get(type(bound))
    if isinstance(bound, OneOf):
        valid = next(c for c in bound.choices if c != f.default)
    elif valid is None:
        valid = {bool: not f.default, str: "auto"}[kinds[0]]
    return valid, str(valid)


def invalid(f: dataclasses.Field) -> object | None:
    """A value outside the field's bounds (None: every value of its type is in them)."""
    bound = f.metadata["bound"]
    if isinstance(bound, ListOf):
        return (-1.5,) if bound.kind is float else (0,)
    values = {AtLeast: 0, Between: 0.75, Positive: -1.0, NotBelow: -1.0, OneOf: "nope"}
    return values.get(type(bound))


def click_command(command: list[str]):
    group = typer.main.get_command(app)
    for name in command:
        group = group.commands[name]
    return group


def parsed_options(command: list[str], args: list[str]) -> dict:
    """The options a command receives for `args` (Click parses them; nothing runs)."""
    ctx = click_command(command).make_context(" ".join(command), ["digits", *args])
    return ctx.params


def test_the_walk_covers_every_declared_setting():
    names = {(" ".join(c), f.name) for c, _, _, f in CASES}
    assert {
        ("certify", "n"),
        ("certify", "sigma"),
        ("certify", "ddrs"),
        ("certify", "precision"),
        ("empirical", "epsilons"),
        ("empirical", "max_points"),
        ("run grid", "max_concurrent"),
        ("certify", "wait_for_nodes"),
    } <= names
    assert len(declared(CertifySpec)) == len(dataclasses.fields(CertifySpec))
    assert len(declared(EmpiricalSpec)) == len(dataclasses.fields(EmpiricalSpec))
    assert len(declared(LaunchOptions)) == len(dataclasses.fields(LaunchOptions))
    assert len(declared(SearchSpec)) == len(dataclasses.fields(SearchSpec))


@pytest.mark.parametrize(("command", "cls", "block", "f"), CASES, ids=IDS)
def test_every_setting_is_an_option_with_its_declared_help(command, cls, block, f):
    assert f.metadata["help"], f"{cls.__name__}.{f.name} has no help"
    params = {opt: p for p in click_command(command).params for opt in p.opts}
    option = params[flag_of(f)]
    assert option.help.startswith(f.metadata["help"].rstrip("."))
    if block is None:  # a command's own setting: Click shows the field's default
        assert option.default == f.default
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).output
    assert flag_of(f) in shown


@pytest.mark.parametrize(("command", "cls", "block", "f"), CASES, ids=IDS)
def test_every_setting_means_the_same_in_yaml_and_on_the_command_line(command, cls, block, f):
    hint = typing.get_type_hints(cls)[f.name]
    if isinstance(f.metadata["bound"], Settings):
        return _nested_settings(command, f, hint)
    value, typed = sample(f, hint)
    args = [flag_of(f)] if isinstance(value, bool) and value else [flag_of(f), typed]
    if isinstance(value, bool) and not value:
        args = [f"--no-{flag_of(f)[2:]}"] if block else []
    options = parsed_options(command, args)
    if block is None:
        assert getattr(launch_options(options), f.name) == value
        return
    overrides, problems = given(cls, options)
    assert problems == [] and overrides == {f.name: value}
    # The envelope's own settings are refused where strategy full would ignore them.
    context = {"strategy": "envelope"} if f.name in ENVELOPE_ONLY else {}
    context = {"mode": "envelope"} if cls is SearchSpec and f.name in SEARCH_ONLY else context
    raw = {"grids": [{"name": "g"}], block: {**context, f.name: _yaml(value)}}
    spec, problems = parse_spec("x", raw)
    assert problems == [] and getattr(getattr(spec, block), f.name) == value


def _yaml(value):
    return list(value) if isinstance(value, tuple) else value


def _nested_settings(command: list[str], f: dataclasses.Field, hint) -> None:
    """`--ddrs` alone: the defaults; `--ddrs-<part> v`: that part; YAML `ddrs: {part: v}` alike
    (and so for `final`)."""
    nested = next(a for a in typing.get_args(hint) if a is not type(None))
    assert set(f.metadata["bound"].parts) == {p.name for p in dataclasses.fields(nested)}
    assert given(CertifySpec, parsed_options(command, [flag_of(f)]))[0] == {f.name: nested()}
    assert given(CertifySpec, parsed_options(command, []))[0] == {}
    for part in dataclasses.fields(nested):
        value = _part_sample(part.default)
        option = f"--{f.name}-{part.name}".replace("_", "-")
        expected = nested(**{part.name: value})
        args = [option] if value is True else [option, str(value)]
        assert given(CertifySpec, parsed_options(command, args))[0] == {f.name: expected}
        spec, problems = parse_spec(
            "x", {"grids": [{"name": "g"}], "certify": {f.name: {part.name: value}}}
        )
        assert problems == [] and getattr(spec.certify, f.name) == expected


def _part_sample(default):
    """A value of a nested part other than its default."""
    if isinstance(default, bool):
        return not default
    return 7 if default is None else (default * 3 or 3)


@pytest.mark.parametrize(
    ("command", "cls", "block", "f"),
    [c for c in CASES if c[2] is not None and invalid(c[3]) is not None],
    ids=[
        i for c, i in zip(CASES, IDS, strict=True) if c[2] is not None and invalid(c[3]) is not None
    ],
)
def test_a_value_out_of_bounds_is_refused_alike_in_yaml_and_on_the_command_line(
    command, cls, block, f
):
    bad = invalid(f)
    _, problems = parse_spec("x", {"grids": [{"name": "g"}], block: {f.name: _yaml(bad)}})
    yaml_problem = next(p for p in problems if f.name in p)
    typed = ",".join(map(str, bad)) if isinstance(bad, tuple) else str(bad)
    result = CliRunner().invoke(
        app, [*command, "digits", "--storage", "/nonexistent/none", flag_of(f), typed]
    )
    assert result.exit_code == 2
    # the same words, the setting named by the flag typed
    said = yaml_problem.removeprefix(f"{block}.").replace(f.name, flag_of(f), 1)
    assert said in result.stderr, result.stderr


def test_every_list_of_numbers_takes_the_radii_syntax():
    """`--radii 0:1:0.25` on `certify`/`run grid` means what it means on `envelope` and
    `table` (`parse_list`, one syntax); a list of integers takes commas only."""
    from sweeper.results.envelope import parse_radii

    values, problems = given(CertifySpec, {"radii": "0:1:0.25", "pilots": "10,30"})
    assert problems == [] and values == {"radii": (0.0, 0.25, 0.5, 0.75, 1.0), "pilots": (10, 30)}
    assert list(values["radii"]) == parse_radii("0:1:0.25")
    assert given(CertifySpec, {"radii": "0.1:0.3:0.1"})[0]["radii"] == (0.1, 0.2, 0.3)
    _, problems = given(CertifySpec, {"radii": "0:x", "pilots": "10:30:10"})
    assert problems == [
        "--pilots '10:30:10': expected integers separated by commas",
        "--radii '0:x': expected numbers separated by commas (0,0.5,1) or start:stop:step "
        "(0:2.25:0.25)",
    ]
