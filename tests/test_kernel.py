"""The torch-free kernel (issue 27 §3): what the driver and the workers share is defined once,
in `trainables.kernel`, and importing it imports neither torch nor Ray."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = (
    "PRECISIONS",
    "ESTIMATORS",
    "FAULT_ENV",
    "max_radius",
    "lower_confidence_bound",
    "ABSTAIN",
)


def test_importing_the_kernel_imports_neither_torch_nor_ray():
    modules = sorted(p.stem for p in (ROOT / "trainables" / "kernel").glob("*.py"))
    imports = [f"import trainables.kernel.{m}" for m in modules if m != "__init__"]
    probe = "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    code = "; ".join([*imports, "import sys", probe])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_each_shared_name_is_defined_once_in_the_kernel():
    """No module of sweeper/ or trainables/ defines (assigns or def's) a shared name but the
    kernel: the driver and the workers import the one definition."""
    where: dict[str, list[str]] = {name: [] for name in SHARED}
    for path in [*ROOT.glob("sweeper/**/*.py"), *ROOT.glob("trainables/**/*.py")]:
        for node in ast.parse(path.read_text()).body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            for name in names:
                if name in where:
                    where[name].append(str(path.relative_to(ROOT)))
    once = {name: set(paths) for name, paths in where.items()}  # overloads: one module
    assert all(len(p) == 1 and "trainables/kernel/" in next(iter(p)) for p in once.values()), once
