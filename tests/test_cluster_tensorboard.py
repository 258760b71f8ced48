"""Training curves where users look (issue 29 §4): TensorBoard is an extra of its own, and
`make demo` ends with the one command that installs it and opens the demo's curves where
Tune's logger writes them. (In a test_cluster_* file: the files this change could touch.)"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from packaging.requirements import Requirement

from sweeper.results.storage import Experiment

ROOT = Path(__file__).resolve().parents[1]


def extra(name: str) -> list[Requirement]:
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(rf"^{name} = \[(.*?)\]", text, re.M | re.S)
    assert block, f"no [{name}] extra"
    return [Requirement(r) for r in re.findall(r'"([^"]+)"', block.group(1))]


def test_tensorboard_is_an_extra_pinned_like_the_others():
    (tb,) = extra("tensorboard")
    assert tb.name == "tensorboard" and str(tb.specifier).startswith(">=")
    deps = re.search(
        r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M
    )
    assert "tensorboard>" not in deps.group(1) and "tensorboardX>=" in deps.group(1)


def test_make_demo_ends_by_saying_how_to_open_the_curves():
    done = subprocess.run(
        ["make", "-n", "-s", "-o", ".venv/.installed", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    (said,) = shlex.split(last)[1:]  # echo "...": one line
    install, _, open_ = said.removeprefix("training curves: ").partition(" && ")
    assert shlex.split(install) == [".venv/bin/pip", "install", "-q", "-e", ".[tensorboard]"]
    words = shlex.split(open_)
    assert words[0] == ".venv/bin/tensorboard" and words[1] == "--logdir"
    storage = re.search(r"^DEMO_STORAGE \?= (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert words[2] == f"{storage}/digits/tune"  # where Tune writes (storage's one spelling):
    assert Experiment(storage, "digits").tune_dir.endswith(f"/{storage}/digits/tune")
    assert "run grid digits" in done.stdout  # the demo's experiment is digits


def test_the_docs_name_the_extra_where_they_send_users_to_tensorboard():
    watching = (ROOT / "docs" / "guide" / "watching.md").read_text()
    assert "pip install -e '.[tensorboard]'" in watching
