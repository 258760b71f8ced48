"""Search spaces on disk: YAML files read and validated into a typed, frozen `SweepSpec`.

A space is a shipped name (`search_spaces/<name>.yaml`) or a path to the user's own file. Every
problem in a file is reported at once, each with its place in the file, including the problems
of the trials its grids expand to (with and without the smoke overrides).

Reading is bounded before anything is built: a document nested deeper than `MAX_DEPTH` or of
more than `MAX_NODES` values once its aliases are expanded (a "billion laughs") is refused
while it is composed, and grids that describe more than `max_trials` trials (counted from
their axes' lengths) are refused before they are expanded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from sweeper.plan.grid import MAX_TRIALS, expansion_problems, trial_count
from sweeper.plan.run_settings import precision_problem
from sweeper.plan.spec import (
    TRIAL_KEYS,
    CertifySpec,
    EmpiricalSpec,
    Grid,
    Resources,
    SearchSpec,
    SweepSpec,
)
from sweeper.results.credentials import space_credentials_problems
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.errors import ProblemsError
from trainables.kernel.final_points import final_value

SPACES_DIR = Path(__file__).resolve().parents[2] / "search_spaces"
TOP_KEYS = (
    "description",
    "fixed",
    "grids",
    "resources",
    "certify",
    "empirical",
    "search",
    "smoke",
)
GRID_KEYS = frozenset({"name", "fixed", "axes", "parent", "inherit"})


class SpecError(ProblemsError):
    """Problems with a search space."""


# A space is a few levels of mappings and lists (the shipped ones: 6) of a few hundred values.
MAX_DEPTH = 32
MAX_NODES = 100_000


class _TooLarge(Exception):
    def __init__(self, what: str, mark: Any):
        super().__init__(what)
        self.what, self.mark = what, mark


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that measures each node as it is composed (an alias is the node it
    names, measured already), so a document too deep or too large once its aliases are
    expanded is refused before PyYAML recurses into it or anything is built from it."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, height), expanded

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        alias = self.check_event(yaml.AliasEvent)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooLarge(f"nested deeper than {MAX_DEPTH} levels", mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias and id(node) not in self._sizes:
            raise _TooLarge("an alias inside the value it names (a recursive alias)", mark)
        if not alias:
            self._measure(node, mark)
        return node

    def _measure(self, node: Any, mark: Any) -> None:
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        sizes = [self._sizes[id(c)] for c in children]
        count = 1 + sum(n for n, _ in sizes)
        height = 1 + max((h for _, h in sizes), default=0)
        if count > MAX_NODES:
            raise _TooLarge(f"more than {MAX_NODES:,} values once its aliases are expanded", mark)
        if height > MAX_DEPTH:
            raise _TooLarge(f"nested deeper than {MAX_DEPTH} levels through its aliases", mark)
        self._sizes[id(node)] = (count, height)


def read_yaml(path: Path) -> Any:
    """The YAML document of `path`, read with safe_load's types; SpecError (one line) if it
    cannot be read, is malformed, or is too deep or too large (see `_BoundedLoader`)."""
    try:
        loader = _BoundedLoader(path.read_text())
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except _TooLarge as e:
        where = f"line {e.mark.line + 1}, column {e.mark.column + 1}"
        raise SpecError(
            [f"{path}: refused at {where}: {e.what}; a space is a few mappings and lists of values"]
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError([f"{path}: malformed YAML{where}: {problem}"]) from None
    except OSError as e:
        raise SpecError([f"cannot read {path}: {e.strerror}"]) from None


def available_spaces() -> list[str]:
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def resolve_space_path(space: str) -> Path:
    """A shipped space by name, or a path to the user's own YAML file."""
    path = Path(space).expanduser()
    # A file, not any path: `--storage .` makes ./<experiment> a directory, often named as
    # the shipped space it ran (`sweeper certify digits` must still mean the shipped one).
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise SpecError([f"search space file not found: {path}"])
        return path
    shipped = SPACES_DIR / f"{space}.yaml"
    if not shipped.is_file():
        names = ", ".join(available_spaces())
        raise SpecError(
            [f"unknown space {space!r} (available: {names}; or pass a path to a YAML file)"]
        )
    return shipped


def load_space(space: str, max_trials: int = MAX_TRIALS) -> SweepSpec:
    """Read and validate a search space; raises SpecError listing every problem. Grids that
    describe more than `max_trials` trials are refused before they are expanded."""
    path = resolve_space_path(space)
    spec, problems = parse_spec(path.stem, read_yaml(path), max_trials)
    if problems or spec is None:
        raise SpecError([f"{path.name}: {p}" for p in problems])
    return spec


def parse_spec(
    name: str, raw: Any, max_trials: int = MAX_TRIALS
) -> tuple[SweepSpec | None, list[str]]:
    """(spec, []) or (None, every problem)."""
    if not isinstance(raw, dict):
        return None, ["a search space must be a mapping with keys: " + ", ".join(TOP_KEYS)]
    if secrets := space_credentials_problems(raw):  # alone: no other check may echo them
        return None, secrets
    problems = [
        f"unknown key {k!r} (valid: {', '.join(TOP_KEYS)})" for k in raw if k not in TOP_KEYS
    ]
    fixed = _trial_mapping(raw.get("fixed"), "fixed", problems)
    grids = _grids(raw.get("grids"), problems)
    resources = _dataclass(Resources, raw.get("resources"), "resources", problems)
    certify = _dataclass(CertifySpec, raw.get("certify"), "certify", problems)
    empirical = _dataclass(EmpiricalSpec, raw.get("empirical"), "empirical", problems)
    search = _search(raw.get("search"), problems)
    smoke_fixed, smoke_certify = _smoke(raw.get("smoke") or {}, certify, problems)
    description = str(raw.get("description", ""))
    spec = SweepSpec(
        name,
        description,
        fixed,
        grids,
        resources,
        certify,
        smoke_fixed,
        smoke_certify,
        empirical=empirical,
        search=search,
    )
    if (problem := size_problem(spec, max_trials)) is not None:
        return None, [*problems, problem]  # not expanded: that is what the limit prevents
    # The trials' own problems (types, sigma <= 0, ...) are reported alongside the structural
    # ones above: unknown keys were dropped, so what is left can still be checked.
    prefix = "with smoke overrides: "
    base = expansion_problems(spec)
    smoked = [p for p in expansion_problems(spec.smoked(), prefix) if p[len(prefix) :] not in base]
    problems = list(dict.fromkeys(problems + base + smoked))
    if (problem := precision_problem(certify, resources)) is not None:
        problems.append(problem)
    problems += idle_problems(spec, raw.get("certify"), (raw.get("smoke") or {}).get("certify"))
    if search.active and any(g.parent for g in grids):
        problems.append(SEARCH_STAGES)
    return (None, problems) if problems else (spec, [])


SEARCH_STAGES = (
    "search: envelope searches one grid of independent trials, and this space has fine-tune "
    "stages (a grid with parent): use search full"
)


def _search(value: Any, problems: list[str]) -> SearchSpec:
    """`search: envelope` (or full), or a mapping of `SearchSpec`'s settings; the envelope
    search's settings under `full` are refused (they would change nothing)."""
    if isinstance(value, str):
        value = {"mode": value}
    search = _dataclass(SearchSpec, value, "search", problems)
    problems += [
        f"search.{k} is a setting of the envelope search, and this search is full: "
        f"set mode: envelope (or search: envelope), or remove {k}"
        for k in search.idle(value if isinstance(value, dict) else {})
    ]
    return search


def idle_problems(spec: SweepSpec, block: Any, smoke_block: Any) -> list[str]:
    """The envelope's settings (pilots, radii, delta) set in a certify block, or in the smoke
    block's, whose strategy is full: they would change nothing."""
    keys = set(block) if isinstance(block, dict) else set()
    smoke_keys = set(smoke_block) if isinstance(smoke_block, dict) else set()
    found = {f"certify.{k}": k for k in spec.certify.idle(keys)}
    found |= {f"smoke.certify.{k}": k for k in spec.smoked().certify.idle(smoke_keys)}
    return [
        f"{where} is a setting of strategy envelope, and this certify block's strategy is full: "
        f"set strategy: envelope, or remove {name}"
        for where, name in found.items()
    ]


def _smoke(smoke: Any, certify: CertifySpec, problems: list[str]) -> tuple[dict, dict]:
    """The smoke block's (fixed, certify) overrides; its problems appended to `problems`
    (those of the certify block it overrides only once)."""
    if not isinstance(smoke, dict) or set(smoke) - {"fixed", "certify"}:
        problems.append("smoke must be a mapping with keys fixed, certify")
        smoke = {}
    smoke_fixed = _trial_mapping(smoke.get("fixed"), "smoke.fixed", problems)
    smoke_certify = smoke.get("certify") or {}
    if not isinstance(smoke_certify, dict):
        problems.append("smoke.certify must be a mapping")
        return smoke_fixed, {}
    merged: list[str] = []  # the certify block's own problems are reported once
    _dataclass(
        CertifySpec, {**dataclasses.asdict(certify), **smoke_certify}, "smoke.certify", merged
    )
    problems += [p for p in merged if p.replace("smoke.", "", 1) not in problems]
    names = {f.name for f in fields(CertifySpec)}
    smoke_certify = {k: v for k, v in smoke_certify.items() if k in names}
    if "ddrs" in smoke_certify:
        smoke_certify["ddrs"] = _ddrs(smoke_certify["ddrs"], "smoke.certify.ddrs", [])
    return smoke_fixed, smoke_certify


def size_problem(spec: SweepSpec, max_trials: int) -> str | None:
    """Grids that describe more than `max_trials` trials, counted from their axes' lengths."""
    count = trial_count(spec)
    if count <= max_trials:
        return None
    shapes = [" x ".join(str(len(values)) for _, values in g.axes) or "1" for g in spec.grids]
    return (
        f"the grids describe {count:,} trials ({' + '.join(shapes)} values of their axes), "
        f"more than --max-trials {max_trials:,}: narrow the axes, or pass --max-trials {count} "
        "if the sweep is meant to be this large"
    )


def _trial_mapping(value: Any, where: str, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{where} must be a mapping of hyperparameters")
        return {}
    for key in value:
        if key not in TRIAL_KEYS:
            problems.append(f"{where}: unknown hyperparameter {key!r}")
    return {k: v for k, v in value.items() if k in TRIAL_KEYS}


def _grids(value: Any, problems: list[str]) -> tuple[Grid, ...]:
    if not isinstance(value, list) or not value:
        problems.append("grids must be a non-empty list of {name, fixed, axes}")
        return ()
    grids: list[Grid] = []
    for i, g in enumerate(value):
        where = f"grids[{i}]"
        if not isinstance(g, dict) or set(g) - GRID_KEYS:
            problems.append(f"{where} must be a mapping with keys {', '.join(sorted(GRID_KEYS))}")
            continue
        fixed = _trial_mapping(g.get("fixed", {}), f"{where}.fixed", problems)
        axes = _axes(g.get("axes", {}) or {}, where, problems)
        parent, inherit = _stage(g, where, [grid.name for grid in grids], problems)
        grids.append(Grid(str(g.get("name", f"grid{i}")), fixed, axes, parent, inherit))
    return tuple(grids)


def _stage(g: dict, where: str, earlier: list[str], problems: list[str]):
    """(parent, inherit) of a fine-tuning stage, checked against the grids before it."""
    parent, inherit = g.get("parent"), g.get("inherit", [])
    if parent is not None and parent not in earlier:
        problems.append(
            f"{where}.parent {parent!r} must name an earlier grid ({', '.join(earlier) or 'none'})"
        )
    if not isinstance(inherit, list) or any(k not in TRIAL_KEYS for k in inherit):
        problems.append(f"{where}.inherit must be a list of hyperparameters (got {inherit!r})")
        inherit = []
    if inherit and parent is None:
        problems.append(f"{where}.inherit needs a parent grid")
    if "init_from" in g.get("fixed", {}) or "init_from" in inherit:
        problems.append(f"{where}: init_from is set by `parent`, not by hand")
    return (str(parent) if parent is not None else None), tuple(inherit)


def _axes(value: Any, where: str, problems: list[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if not isinstance(value, dict):
        problems.append(f"{where}.axes must be a mapping of axis name -> list of values")
        return ()
    axes = []
    for name, values in value.items():
        if not isinstance(values, list):
            problems.append(f"{where}.axes.{name} must be a list (got {values!r})")
        elif not values:
            problems.append(f"{where}.axes.{name} is empty")
        else:
            for v in values:
                keys = v.keys() if isinstance(v, dict) else [name]
                problems.extend(
                    f"{where}.axes.{name}: unknown hyperparameter {k!r}"
                    for k in keys
                    if k not in TRIAL_KEYS
                )
            # Keep what is known, so the values' own problems can be reported too.
            values = [
                {k: x for k, x in v.items() if k in TRIAL_KEYS} if isinstance(v, dict) else v
                for v in values
                if isinstance(v, dict) or name in TRIAL_KEYS
            ]
            if values:
                axes.append((str(name), tuple(values)))
    return tuple(axes)


def _dataclass(cls, value: Any, where: str, problems: list[str]):
    """Build settings dataclass `cls` from a mapping, collecting its problems."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        problems.append(f"{where} must be a mapping")
        return cls()
    names = {f.name for f in fields(cls)}
    problems.extend(
        f"{where}: unknown key {k!r} (valid: {', '.join(sorted(names))})"
        for k in value
        if k not in names
    )
    kwargs = {k: v for k, v in value.items() if k in names}
    if cls is CertifySpec and "ddrs" in kwargs:
        kwargs["ddrs"] = _ddrs(kwargs["ddrs"], f"{where}.ddrs", problems)
    if cls is CertifySpec and "final" in kwargs:
        final = final_value(kwargs["final"])
        if isinstance(final, str):
            problems.append(f"{where}.final {final}")
            final = None
        kwargs["final"] = final
    obj = cls(**kwargs)
    problems.extend(f"{where}.{p}" for p in obj.problems())
    return obj


def _ddrs(value: Any, where: str, problems: list[str]) -> DDRSSettings | None:
    """`ddrs:` in a certify block: null/false (off), true or {} (defaults), or settings."""
    if value is None or value is False:
        return None
    if value is True:
        return DDRSSettings()
    if isinstance(value, DDRSSettings):
        return value
    if not isinstance(value, dict):
        problems.append(f"{where} must be true, false or a mapping of settings")
        return None
    names = {f.name for f in fields(DDRSSettings)}
    problems.extend(
        f"{where}: unknown key {k!r} (valid: {', '.join(sorted(names))})"
        for k in value
        if k not in names
    )
    return DDRSSettings(**{k: v for k, v in value.items() if k in names})
