"""The data plane's shape (issue 13): no module over 400 lines, no function body over 50 lines,
no import circle between its modules, and never an import of the control plane. Read from the
source (AST), so lazy imports inside functions count; imports under `if TYPE_CHECKING:` do
not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "trainables"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 400
MAX_BODY_LINES = 50


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(tree: ast.Module) -> set[str]:
    """Modules imported by statements that run (anywhere but under `if TYPE_CHECKING:`)."""
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in ast.walk(node)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in MODULES}
    return {
        name: {m for m in runtime_imports(ast.parse(path.read_text())) if m in modules} - {name}
        for name, path in modules.items()
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_and_function_sizes(path: Path):
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.end_lineno - node.body[0].lineno + 1
            assert body <= MAX_BODY_LINES, f"{node.name}: body of {body} lines"


def test_no_import_circle():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                pytest.fail("import circle: " + " -> ".join([*path[path.index(dep) :], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_checker_sees_lazy_imports_and_skips_type_checking_ones():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
        "def f():\n    from b import c\n"
    )
    assert runtime_imports(tree) == {"typing", "typing.TYPE_CHECKING", "b", "b.c"}
    assert "trainables.train" in import_graph()["trainables.distributed_fit"]


def test_the_data_plane_never_imports_the_control_plane():
    for path in MODULES:
        imported = runtime_imports(ast.parse(path.read_text()))
        assert not {m for m in imported if m.split(".")[0] == "sweeper"}, path
