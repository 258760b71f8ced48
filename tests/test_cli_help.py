"""The command line's help and names (issue 17): flags shown without a type, `--version` and
`-h`, the commands in the order a sweep uses them, the real default of `--experiment`, a
space given to `sweeper run` without `grid`, and help paragraphs that the terminal wraps
rather than the source, and option names never cut at 80 columns (Click's help layout, issue
30 item 7). Each runs the real entry point in a fresh interpreter, whose help width is fixed
by COLUMNS."""

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
    "verify",
    "empirical",
    "import",
    "spaces",
    "compact",
    "bench",
    "data",
    "key",
]
READ_COMMANDS = ["envelope", "table", "status", "report", "compact"]


def sweeper(*args: str, width: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(width)}
    return subprocess.run(
        [sys.executable, "-c", "from sweeper.cli import app; app(prog_name='sweeper')", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )


def option_rows(text: str) -> dict[str, str]:
    """`--flag` -> the rest of its row in Click's help (its continuation lines joined, runs
    of spaces as one); a switch with its negation as `--x/--no-x`."""
    rows: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"  (?:-\w, )?(--[\w-]+(?: / --[\w-]+)?)(.*)$", line)
        if match:
            current = match.group(1).replace(" / ", "/")
            rows[current] = match.group(2)
        elif current is not None and line.startswith(" " * 8) and line.strip():
            rows[current] += " " + line.strip()
        else:
            current = None
    return {key: re.sub(r"\s+", " ", rest).strip() for key, rest in rows.items()}


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
    panel = out[out.index("Commands:") :]
    listed = re.findall(r"^  (\w+)\s", panel, flags=re.M)
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
    assert max(len(line) for line in wide.splitlines()) <= 120  # HELP_WIDTH: readable lines
    assert (
        "Re-running the same command resumes: finished trials are not retrained, interrupted "
        "ones continue from their last checkpoint, and only missing certification shards are "
        "computed. With --search envelope: only what could still raise the envelope is trained. "
        "With --dry-run: the plan and its cost, without reading data or starting Ray."
    ) in " ".join(line.strip() for line in wide.splitlines())
    listing = sweeper("--help", width=240).stdout
    assert (
        "Import certification logs of the reference code (Cohen et al., SmoothAdv) as models of "
        "an experiment: hyperparameters from the directory names"
    ) in " ".join(line.strip() for line in listing.splitlines())
    narrow = sweeper("--help", width=80).stdout
    assert max(len(line) for line in narrow.splitlines()) <= 80
    bench = [line for line in narrow.splitlines() if "bench " in line or "on this machine" in line]
    assert bench and all(len(line) >= 65 for line in bench[:1])  # a full line, not a stub


def _commands(group, path=()):
    """(the words of each command, the command) under a Click group."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_no_option_name_or_help_is_cut_at_80_columns():
    """Issue 30 item 7: rich's option panels cut `--points-per-ba…` at 80 columns; the help
    is Click's, where every option's names are printed whole (on a line of their own when
    long) and no text ends in an ellipsis, piped and at 80 columns."""
    import typer
    from typer.testing import CliRunner

    from sweeper.cli import app

    group = typer.main.get_command(app)
    for words, command in _commands(group):
        out = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "80"})
        assert out.exit_code == 0, (words, out.output)
        assert max(len(line) for line in out.stdout.splitlines()) <= 80, words
        assert "…" not in out.stdout, words
        shown = option_rows(out.stdout)
        for param in command.params:
            names = [o for o in param.opts if o.startswith("--")]
            negative = [o for o in param.secondary_opts if o.startswith("--")]
            if names:
                assert "/".join(names + negative) in shown, (words, names, sorted(shown))


def test_a_mistyped_option_is_one_error_line_with_sane_suggestions():
    """Issue 30 item 10: Click suggested `--retrain` for `--radii`; the suggestion is only an
    option of the command that is really close, and the commands that take the option are
    named; one `error:` line, exit 2, no usage block."""
    out = sweeper("status", "--radii", "1")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "error: `sweeper status` has no option --radii; --radii is an option of `sweeper "
        "envelope`, `sweeper table`, `sweeper report`, `sweeper certify`, `sweeper run grid` "
        "(see `sweeper status -h`)\n"
    )
    typo = sweeper("run", "grid", "digits", "--radi", "1")
    assert typo.returncode == 2 and typo.stderr == (
        "error: `sweeper run grid` has no option --radi; did you mean --radii? "
        "(see `sweeper run grid -h`)\n"
    )
    missing = sweeper("run", "grid")
    assert missing.returncode == 2 and missing.stderr.startswith("error: Missing argument")
    assert len(missing.stderr.splitlines()) == 1
