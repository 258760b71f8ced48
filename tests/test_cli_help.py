"""The command line's help and names (issue 17): flags shown without a type, `--version` and
`-h`, the commands in the order a sweep uses them, the real default of `--experiment`, a
space given to `sweeper run` without `grid`, and help paragraphs that the terminal wraps
rather than the source. Each runs the real entry point in a fresh interpreter, whose help
width is fixed by TERMINAL_WIDTH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = [
    "run",
    "certify",
    "status",
    "envelope",
    "table",
    "report",
    "empirical",
    "import",
    "spaces",
    "compact",
    "bench",
    "data",
]
READ_COMMANDS = ["envelope", "table", "status", "report", "compact"]


def sweeper(*args: str, width: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERMINAL_WIDTH": str(width)}
    return subprocess.run(
        [sys.executable, "-c", "from sweeper.cli import app; app(prog_name='sweeper')", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )


def option_rows(text: str) -> dict[str, str]:
    """`--flag` -> the rest of its row in a rich help panel, its runs of spaces as one."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"[│|]\s+(--[\w-]+(?:/--[\w-]+)?)\s+(.*?)\s*[│|]?$", line)
        if match:
            rows[match.group(1)] = re.sub(r"\s+", " ", match.group(2))
    return rows


def test_flags_show_no_type_and_options_with_values_keep_theirs():
    out = sweeper("run", "grid", "--help")
    assert out.returncode == 0, out.stderr
    rows = option_rows(out.stdout)
    for flag in ("--dry-run", "--download", "--smoke", "--restart", "--cpu-only", "--help"):
        assert not rows[flag].startswith("<"), (flag, rows[flag])
    assert rows["--dry-run"] == "Print the plan and stop."
    assert rows["--storage"].startswith("<str>")
    assert rows["--max-concurrent"].startswith("<int range>")
    for command in ([], ["certify"], ["envelope"], ["empirical"], ["report"]):
        text = sweeper(*command, "--help").stdout
        assert "<bool>" not in text, command


def test_version_and_short_help():
    out = sweeper("--version")
    assert (out.returncode, out.stdout, out.stderr) == (0, f"sweeper {version('sweeper')}\n", "")
    long, short = sweeper("--help"), sweeper("-h")
    assert (short.returncode, short.stdout) == (0, long.stdout)
    assert sweeper("envelope", "-h").stdout == sweeper("envelope", "--help").stdout


def test_commands_are_listed_in_the_order_a_sweep_uses_them():
    out = sweeper("--help").stdout
    panel = out[out.index("Commands") :]
    listed = re.findall(r"^[│|] (\w+)\s", panel, flags=re.M)
    assert listed == ORDER


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_read_commands_say_their_experiment_default_is_the_most_recent(command):
    rows = option_rows(sweeper(command, "--help").stdout)
    assert rows["--experiment"] == (
        "<str> Experiment name (default: the most recent experiment under --storage, "
        "named on stderr)."
    )


@pytest.mark.parametrize("command", [["run", "grid"], ["certify"], ["empirical"]])
def test_commands_given_a_space_default_to_its_name(command):
    rows = option_rows(sweeper(*command, "--help").stdout)
    assert rows["--experiment"] == "<str> Experiment name (default: the space's name)."


def test_run_with_a_space_suggests_run_grid():
    out = sweeper("run", "digits")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "error: no such command 'sweeper run digits' (sweeper run takes a kind of sweep: grid); "
        "to run the space 'digits': sweeper run grid digits\n"
    )
    typo = sweeper("run", "gird", "digits")  # a misspelt command: click's own suggestion
    assert typo.returncode == 2 and "Did you mean 'grid'?" in typo.stderr


def test_help_paragraphs_are_wrapped_by_the_terminal_not_the_source():
    wide = sweeper("run", "grid", "--help", width=400).stdout
    assert (
        "Re-running the same command resumes: finished trials are not retrained, interrupted "
        "ones continue from their last checkpoint, and only missing certification shards are "
        "computed. With --dry-run: the plan and its cost, without reading data or starting Ray."
    ) in wide
    listing = sweeper("--help", width=240).stdout
    assert (
        "Import certification logs of the reference code (Cohen et al., SmoothAdv) as models of "
        "an experiment: hyperparameters from the directory names"
    ) in listing
    narrow = sweeper("--help", width=80).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80
    bench = [line for line in narrow.splitlines() if "(CUDA" in line or "on this machine" in line]
    assert bench and all(len(line) >= 70 for line in bench[:1])  # a full line, not a stub
