"""Write the transcripts of the documentation from real runs: never paste one.

A transcript is a block of a page between

    <!-- transcript NAME: written by docs/make_transcripts.py, ... -->
    <!-- /transcript -->

This script runs NAME's commands (`TRANSCRIPTS`) in a temporary directory (HOME there too, a
terminal of 80 columns; the directory's path is left out of the output, so `--storage demo`
shows as `demo/...`) and writes between the markers a line saying where the output comes
from (the commit, the CPU: the numbers depend on it) and a code block with each `$ command`
and what it printed (stdout and stderr, as a terminal shows them). Long outputs keep their first
and last lines. `tests/test_docs.py` checks that every transcript of the docs is this script's
and that a fresh run of the fast ones prints the same lines, numbers aside.

    .venv/bin/python docs/make_transcripts.py            # every transcript
    .venv/bin/python docs/make_transcripts.py read       # one (names: TRANSCRIPTS)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^<!-- transcript (?P<name>[\w-]+): .*-->$", re.M)
END = "<!-- /transcript -->"
HEADER = re.compile(
    r"^Produced by `python docs/make_transcripts.py (?P<name>[\w-]+)` at commit "
    r"(?P<commit>[0-9a-f]{7,40})(?P<dirty> with uncommitted changes)? on (?P<cpu>.+); "
    r"the numbers depend on the CPU\.$"
)


@dataclass(frozen=True)
class Command:
    line: str  # as shown after `$ `, starting with `sweeper`
    head: int = 0  # keep the first `head` and the last `tail` lines of a longer output
    tail: int = 0

    def elide(self, lines: list[str]) -> list[str]:
        if not self.head or len(lines) <= self.head + self.tail + 1:
            return lines
        cut = len(lines) - self.head - self.tail
        return [*lines[: self.head], f"... ({cut} more lines)", *lines[len(lines) - self.tail :]]


@dataclass(frozen=True)
class Transcript:
    page: str  # relative to the repository
    commands: tuple[Command, ...]
    setup: str = ""  # the name of a function of SETUPS run in the directory first
    checked: bool = True  # tests/test_docs.py runs it afresh (fast: no training)


def _hand_experiment(workdir: Path) -> None:
    """A small experiment written with the tests' writers (tests/certified_rows.py): three
    finished digits trials, each certified on 10 test points with n = 100 from given votes, and
    a fourth whose driver stopped after its second epoch."""
    sys.path.insert(0, str(ROOT / "tests"))
    import certified_rows

    from sweeper.plan.spec import CertifySpec
    from sweeper.results.storage import Experiment
    from sweeper.results.sweep_file import write_sweep
    from trainables.kernel.config import TrialConfig
    from trainables.kernel.trial_status import write_status

    exp = Experiment(str(workdir / "hand"), "hand")
    spec = CertifySpec(n0=10, n=100, alpha=0.001, skip=1, max_points=None)
    gaussian = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
    adv = dict(method="smoothadv", attack="pgd", epsilon=0.5, steps=2, m_train=1, epochs=1)
    votes = {  # of the n = 100 draws, for the label, at test points 0..9
        "gaussian": [100, 100, 99, 97, 95, 90, 85, 70, 60, 40],
        "smoothadv 0.25": [100, 100, 100, 99, 98, 96, 90, 80, 55, 45],
        "smoothadv 0.5": [100, 100, 100, 100, 99, 95, 80, 60, 45, 30],
    }
    trials = {
        gaussian: votes["gaussian"],
        TrialConfig(dataset="digits", sigma=0.25, **adv): votes["smoothadv 0.25"],
        TrialConfig(dataset="digits", sigma=0.5, **adv): votes["smoothadv 0.5"],
    }
    stopped = gaussian.replace(sigma=0.5, epochs=4)  # its driver gone after epoch 2
    planned = [*trials, stopped]
    write_sweep(exp, {"space": {"name": "hand"}, "trials": [c.to_dict() for c in planned]})
    for cfg, counts in trials.items():
        certified_rows.model(exp, cfg, spec, counts)
    write_status(exp.trial_dir(stopped.trial_id), stopped, "running", 2, {})


SETUPS: dict[str, Callable[[Path], None]] = {"hand": _hand_experiment}

TRANSCRIPTS: dict[str, Transcript] = {
    # The README's three commands: a real smoke sweep (about a minute on 2 cores), not re-run
    # by the tests.
    "demo": Transcript(
        "README.md",
        (
            Command("sweeper run grid digits --smoke --storage demo", head=13, tail=12),
            Command("sweeper envelope --storage demo --radii 0:1:0.25"),
            Command("sweeper report --storage demo", head=5, tail=3),
        ),
        checked=False,
    ),
    "dry-run": Transcript(
        "docs/guide/cost.md",
        (Command("sweeper run grid cifar10 --dry-run --gpus 8", head=22, tail=5),),
    ),
    "status": Transcript(
        "docs/guide/watching.md",
        (Command("sweeper status --storage hand"), Command("sweeper status --storage hand --all")),
        setup="hand",
    ),
    "read": Transcript(
        "docs/guide/commands.md",
        (
            Command("sweeper envelope --storage hand --radii 0:1:0.25"),
            Command("sweeper table --storage hand"),
        ),
        setup="hand",
    ),
}


def environment(workdir: Path) -> dict[str, str]:
    """The commands' environment: this one, with HOME and the caches in `workdir` (no stored
    throughput figures: the dry run prices with the shipped table), 80 columns, unbuffered."""
    env = {k: v for k, v in os.environ.items() if k not in ("SWEEPER_THROUGHPUT", "RAY_ADDRESS")}
    env.update(
        # `sweeper` on PATH is this venv's: the `Next:` hints say `sweeper`, not this machine's path
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        HOME=str(workdir),
        # relative to the commands' working directory (`workdir`): a path printed from it has
        # the same length wherever `workdir` is, so lines wrap at 80 columns alike everywhere
        XDG_CACHE_HOME=".cache",
        COLUMNS="80",
        LINES="40",
        TERM="dumb",
        PYTHONUNBUFFERED="1",
    )
    env.pop("FORCE_COLOR", None)
    return env


def run_command(command: Command, workdir: Path) -> list[str]:
    """`$ line` and what the command printed, stdout and stderr as they came, elided."""
    args = shlex.split(command.line)
    assert args[0] == "sweeper", command.line
    exe = Path(sys.executable).parent / "sweeper"
    done = subprocess.run(
        [str(exe), *args[1:]],
        cwd=workdir,
        env=environment(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command.line} exited {done.returncode}:\n{done.stdout}")
    text = done.stdout
    for directory in {str(workdir.resolve()), str(workdir)}:
        text = text.replace(f"{directory}/.cache/", "~/.cache/").replace(f"{directory}/", "")
    lines = [line.rstrip() for line in text.splitlines()]
    return [f"$ {command.line}", *command.elide(lines)]


def produce(name: str, workdir: Path) -> list[str]:
    """Every command of transcript `name` run in `workdir`: the lines of its code block."""
    transcript = TRANSCRIPTS[name]
    if transcript.setup:
        SETUPS[transcript.setup](workdir)
    lines: list[str] = []
    for command in transcript.commands:
        if lines:
            lines.append("")
        lines.extend(run_command(command, workdir))
    return lines


def blocks(text: str) -> list[tuple[str, str, list[str], tuple[int, int]]]:
    """The transcripts of a page: (name, header line, the code block's lines, (start, end) of
    the text between the markers)."""
    found = []
    for begin in BEGIN.finditer(text):
        end = text.index(END, begin.end())
        inner = text[begin.end() : end].strip("\n").splitlines()
        header = inner[0] if inner else ""
        fence = [i for i, line in enumerate(inner) if line.startswith("```")]
        code = inner[fence[0] + 1 : fence[-1]] if len(fence) >= 2 else []
        found.append((begin["name"], header, code, (begin.end(), end)))
    return found


def commands_of(code: list[str]) -> list[str]:
    """The commands a code block shows (its `$ ` lines)."""
    return [line[2:] for line in code if line.startswith("$ ")]


def normalized(lines: list[str]) -> list[str]:
    """Lines with every number as `#` and every run of spaces or table rules as one space:
    floats differ between CPUs, so transcripts are compared modulo numbers."""
    out = []
    for line in lines:
        line = re.sub(r"\d+(?:[.,]\d+)*", "#", line)
        line = re.sub(r"[\s━─═]+", " ", line).strip()
        out.append(line)
    return out


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
        name = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
        model = name[1].strip() if name else "unknown CPU"
    except OSError:
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} cores"


def header(name: str) -> str:
    commit = _git("rev-parse", "--short=12", "HEAD")
    dirty = _git("status", "--porcelain", "--", "sweeper", "trainables", "search_spaces")
    line = (
        f"Produced by `python docs/make_transcripts.py {name}` at commit {commit}"
        f"{' with uncommitted changes' if dirty else ''} on {_cpu()}; "
        "the numbers depend on the CPU."
    )
    assert HEADER.match(line), line
    return line


def write(name: str) -> None:
    transcript = TRANSCRIPTS[name]
    page = ROOT / transcript.page
    with tempfile.TemporaryDirectory(prefix="sweeper-docs-") as tmp:
        lines = produce(name, Path(tmp))
    text = page.read_text()
    (span,) = [b[3] for b in blocks(text) if b[0] == name]
    inner = "\n".join(["", header(name), "", "```text", *lines, "```", ""])
    page.write_text(text[: span[0]] + inner + text[span[1] :])
    print(f"{transcript.page}: transcript {name}, {len(lines)} lines")


def main(names: list[str]) -> None:
    for name in names or list(TRANSCRIPTS):
        write(name)


if __name__ == "__main__":
    main(sys.argv[1:])
