"""The shape of the code, read from its source (ARCHITECTURE.md): imports go one way, no module
imports itself back through others, and modules and functions stay small enough to read.

Imports are read from the AST of every module of `sweeper/` and `trainables/`, those inside
functions included (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sweeper", "trainables", "search_spaces")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50  # from `def` to the last line of the body (the signature counts)

# The stages of a sweep, each a subpackage of sweeper/, and the ones each may import (its
# __init__ docstring says the same). `results` (the experiment on storage: layout, row tables,
# validated reading) is the foundation; `cli` sits on top of everything.
LAYERS = {
    "results": set(),
    "plan": {"results"},
    "run": {"plan", "results"},
    "report": {"plan", "results"},
    "ingest": {"results"},
    "api": {"plan", "run", "results", "report", "ingest"},  # the front door, sweeper.Sweep
    # Every command is parse -> one `sweeper.Sweep` call (or `sweeper.api`'s) -> render: the
    # stages are reached through the front door, their types only under TYPE_CHECKING.
    "cli": {"api", "report"},
}


@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


@cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imports(name: str, annotations: bool = False) -> set[str]:
    """The modules of the packages that module `name` imports (anywhere in it; those under
    `if TYPE_CHECKING:` too if `annotations`)."""
    known = modules()
    out = set()
    module = tree(known[name])
    for node in ast.walk(module) if annotations else runtime_nodes(module):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:  # `from package import module` imports that module
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    return {m for m in out if m in known and m != name}


def runtime_nodes(module: ast.Module) -> list[ast.AST]:
    """Every node of `module` but those under `if TYPE_CHECKING:` (annotations, never run)."""
    skipped = {
        id(child)
        for node in ast.walk(module)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    return [node for node in ast.walk(module) if id(node) not in skipped]


def graph(annotations: bool = False) -> dict[str, set[str]]:
    return {name: imports(name, annotations) for name in modules()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each module that lies on one (as a closed path)."""
    found: dict[frozenset, list[str]] = {}
    for start in sorted(edges):
        paths = {start: [start]}
        frontier = [start]
        while frontier and start not in {e for f in frontier for e in edges[f]}:
            nxt = []
            for here in frontier:
                for there in sorted(edges[here] - paths.keys()):
                    paths[there] = [*paths[here], there]
                    nxt.append(there)
            frontier = nxt
        closing = [f for f in frontier if start in edges[f]]
        if closing:
            path = [*paths[min(closing, key=lambda f: (len(paths[f]), f))], start]
            found.setdefault(frozenset(path), path)
    return list(found.values())


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if parts[0] == "sweeper" and len(parts) > 1 else None


def function_lengths(path: Path):
    """(name, lines from `def` to the end of its body) of every function and method."""
    for node in ast.walk(tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


# ------------------------------------------------------------------------------ the checker
def test_the_checker_finds_cycles_and_only_cycles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}, "f": set()}
    assert sorted(map(tuple, cycles(edges))) == [("a", "b", "c", "a"), ("e", "e2", "e")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_every_kind_of_import():
    known = modules()
    assert "sweeper.results.storage" in imports("sweeper.results.lease")  # from x.y import z
    assert "sweeper.api.selection" in imports("sweeper.cli.reads")  # from x import module
    assert "sweeper.report.render" in imports("sweeper.cli.reads")  # inside a function
    assert "trainables.train" in imports("trainables.distributed_fit")
    typed_only = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nimport b\n"
    )
    assert [type(n).__name__ for n in runtime_nodes(typed_only) if isinstance(n, ast.Import)] == [
        "Import"
    ]
    assert "sweeper.plan.spec" in known and "sweeper.cli" in known and "trainables.methods" in known


# ------------------------------------------------------------------------------ imports
def test_no_import_cycle():
    found = [" -> ".join(c) for c in cycles(graph())]
    assert found == []


def test_no_import_circle_through_annotations_either():
    """An import only for annotations (`if TYPE_CHECKING:`) is still a dependency of the
    design: no module names a type of one that imports it back (issue 41 found the method
    table, the trial's configuration and its parts in such a circle of five files)."""
    found = [" -> ".join(c) for c in cycles(graph(annotations=True))]
    assert found == []
    assert "trainables.kernel.config" in imports("trainables.methods.base", annotations=True)
    assert "trainables.kernel.config" not in imports("trainables.methods.base")


def test_trainables_never_imports_sweeper():
    wrong = [
        (m, sorted(i for i in deps if i.startswith("sweeper")))
        for m, deps in graph().items()
        if m.startswith("trainables")
    ]
    assert [(m, deps) for m, deps in wrong if deps] == []


def test_every_sweeper_module_is_in_a_stage_package():
    loose = [m for m in modules() if m.startswith("sweeper.") and layer(m) not in LAYERS]
    assert loose == []
    # sweeper/__init__.py only names the front door (sweeper.Sweep, imported on first use)
    assert sorted(p.name for p in (ROOT / "sweeper").iterdir() if p.suffix == ".py") == [
        "__init__.py"
    ]


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_stage_packages_import_only_what_their_rule_allows(package):
    upward = sorted(
        f"{m} imports {dep}"
        for m, deps in graph().items()
        if layer(m) == package
        for dep in deps
        if layer(dep) not in (None, package, *LAYERS[package])
    )
    assert upward == []
    docstring = ast.get_docstring(tree(modules()[f"sweeper.{package}"]))
    assert docstring, f"sweeper/{package}/__init__.py must say what it owns and may import"


# ------------------------------------------------------------------------------ sizes
def test_modules_are_at_most_400_lines():
    long = [
        f"module {p.relative_to(ROOT)}"
        for p in modules().values()
        if len(p.read_text().splitlines()) > MAX_MODULE_LINES
    ]
    assert long == []


def test_functions_are_at_most_50_lines():
    long = [
        f"function {p.relative_to(ROOT)}:{name}"
        for p in modules().values()
        for name, lines in function_lengths(p)
        if lines > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_no_two_modules_share_a_name_outside_the_commands():
    """sweeper/cli/ modules are named after commands (cli/ingest.py runs `sweeper import`);
    every other module name says what it owns, once."""
    names: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name != "__init__.py" and layer(name) != "cli":
            names.setdefault(path.stem, []).append(name)
    assert {stem: where for stem, where in names.items() if len(where) > 1} == {}


def test_a_certification_worker_imports_neither_pandas_nor_scipy_stats():
    """What a shard's and a compaction's Ray worker imports before its first task: each new
    worker paid about 0.2 s of CPU for pandas (through `pyarrow.dataset`) and 0.5 s for
    `scipy.stats`, which neither uses (py-spy over a searched stand-in sweep's workers)."""
    import subprocess
    import sys

    code = (
        "import sys; import sweeper.run.shards, sweeper.run.certify_stage, sweeper.run.compaction; "
        "loaded = {'pandas', 'scipy.stats', 'pyarrow.dataset'} & set(sys.modules); "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
