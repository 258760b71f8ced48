"""Nothing outside the storage is touched (issue 16): experiment names, symlinks, --restart,
--only report directories, credentials in storage URIs, and file-system errors at the CLI edge.

Every case runs the real command line (Typer's runner, or a subprocess where a resource limit
makes writes fail) and checks the files on disk before and after.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.table import Table
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cli.common import os_error_line
from sweeper.cli.display import TerminalConsole, printable
from sweeper.plan.sweep_plan import PlanError, move_aside
from sweeper.results.storage import Experiment, StorageError, redact, storage_problem

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
HEADER = "idx\tlabel\tpredict\tradius\tcorrect\ttime"
LOG_DIR = "cifar10/resnet110/noise_0.25/test/sigma_0.25"  # a Cohen-layout log of 0.25 σ


def write_log(root: Path, rows: int) -> Path:
    """A valid CIFAR-10 log: `rows` points, every other one certified at a radius < 0.95."""
    lines = [HEADER] + [
        f"{i}\t{i % 10}\t{i % 10 if i % 2 else -1}\t{(i % 90) / 100 if i % 2 else 0.0}\t{i % 2}\t1.5"
        for i in range(rows)
    ]
    path = root / LOG_DIR
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return root


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and directory (None) under root."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in root.rglob("*")
    }


def error_lines(result, code: int = 2) -> list[str]:
    """Exit `code`, no traceback, and stderr only `error:` lines; returns them."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    return lines


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """tmp_path with a storage `store/` holding a marker, and a directory of logs to import."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "MARKER").write_text("keep me")
    write_log(tmp_path / "logs", 4)
    return tmp_path


# Every command that takes --experiment (test_every_command_with_experiment_is_covered).
COMMANDS = {
    "run grid": ["run", "grid", "digits", "--smoke"],
    "certify": ["certify", "digits", "--smoke"],
    "empirical": ["empirical", "digits", "--smoke"],
    "envelope": ["envelope"],
    "table": ["table"],
    "report": ["report"],
    "status": ["status"],
    "import": ["import", "{logs}"],
    "compact": ["compact"],
    "verify": ["verify"],
}


def _commands_with_experiment(group, prefix: str = "") -> set[str]:
    found = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):  # a group (Typer's are not click.Group)
            found |= _commands_with_experiment(command, path + " ")
        elif any("--experiment" in p.opts for p in command.params):
            found.add(path)
    return found


def test_every_command_with_experiment_is_covered():
    assert _commands_with_experiment(typer.main.get_command(app)) == set(COMMANDS)


# ------------------------------------------------------------------------------ names
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", ["../x", "/abs", ".", "..", "a/b", ".hidden", "", "a b"])
def test_a_name_that_is_no_plain_name_is_refused_and_nothing_is_written(place, command, name):
    name = str(place / "abs") if name == "/abs" else name  # absolute, and inside what we watch
    args = [a.format(logs=place / "logs") for a in COMMANDS[command]]
    before = snapshot(place)
    result = runner.invoke(app, [*args, "--storage", str(place / "store"), "--experiment", name])
    (line,) = error_lines(result)
    assert line.startswith(f"error: --experiment {name!r}: expected a plain name"), line
    assert snapshot(place) == before


def test_restart_with_the_storage_root_as_experiment_moves_nothing(place):
    before = snapshot(place)
    for name in (".", "", "..", str(place / "store")):
        args = ["run", "grid", "digits", "--smoke", "--restart", "--storage", str(place / "store")]
        error_lines(runner.invoke(app, [*args, "--experiment", name]))
    assert snapshot(place) == before


def test_an_experiment_linked_outside_the_storage_is_refused(place):
    (place / "outside").mkdir()
    (place / "store" / "linked").symlink_to(place / "outside")
    (place / "store" / "self").symlink_to(place / "store")
    before = snapshot(place)
    for name, args in [
        ("linked", ["status"]),
        ("linked", ["import", str(place / "logs")]),
        ("linked", ["run", "grid", "digits", "--smoke", "--dry-run"]),
        ("self", ["run", "grid", "digits", "--smoke", "--restart"]),
    ]:
        result = runner.invoke(
            app, [*args, "--storage", str(place / "store"), "--experiment", name]
        )
        (line,) = error_lines(result)
        assert "outside the storage" in line, line
    assert snapshot(place) == before and not list((place / "outside").iterdir())


def test_move_aside_never_moves_the_storage_root(place):
    exp = Experiment(str(place / "store"), "exp")
    (place / "store" / "exp").symlink_to(place / "store")  # swapped in after the check
    before = snapshot(place)
    with pytest.raises(PlanError, match="moved nothing"):
        move_aside(exp)
    assert snapshot(place) == before


def test_a_space_whose_name_is_no_plain_name_needs_experiment(place):
    space = place / "my space.yaml"
    shutil.copy(ROOT / "search_spaces" / "digits.yaml", space)
    store = str(place / "store")
    result = runner.invoke(app, ["run", "grid", str(space), "--dry-run", "--storage", store])
    (line,) = error_lines(result)
    assert "the space name (the default --experiment) 'my space'" in line
    assert "pass --experiment NAME" in line
    args = ["run", "grid", str(space), "--dry-run", "--storage", store, "--experiment", "mine"]
    assert runner.invoke(app, args).exit_code == 0


@pytest.mark.parametrize(
    "only", ["../../x", "sigma=0.25/../../..", "a" * 300, "σ=1,method=..", "/etc/passwd"]
)
def test_only_slices_become_one_plain_directory_under_reports(tmp_path, only):
    exp = Experiment(str(tmp_path), "exp")
    reports = exp.reports_dir
    directory = Path(exp.report_dir(only))
    assert directory.parent == Path(reports)
    assert directory.name.startswith("only-") and len(directory.name) <= 100
    assert set(directory.name) <= set(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._=-"
    )
    assert exp.report_dir("method=gaussian") == str(Path(reports) / "only-method=gaussian")
    assert exp.report_dir(None) == reports


# ------------------------------------------------------------------------------ credentials
SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
CREDENTIAL_URIS = [
    f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/prefix",
    f"s3://{SECRET}@bucket",
    f"s3://bucket/prefix?access_key=AKIA&secret_key={SECRET}",
    f"gs://bucket/prefix?token={SECRET}",
]


@pytest.mark.parametrize("uri", CREDENTIAL_URIS)
@pytest.mark.parametrize(
    "args",
    [
        ["run", "grid", "digits", "--smoke", "--dry-run"],
        ["run", "grid", "digits", "--smoke"],
        ["certify", "digits", "--smoke"],
        ["envelope"],
        ["status", "--experiment", "x"],
        ["import", "{logs}", "--experiment", "x"],
    ],
)
def test_storage_uris_with_credentials_are_refused_without_echoing_them(place, uri, args):
    args = [a.format(logs=place / "logs") for a in args]
    before = snapshot(place)
    (line,) = error_lines(runner.invoke(app, [*args, "--storage", uri]))
    assert "credentials in the URI are refused" in line and "AWS_ACCESS_KEY_ID" in line
    assert "AWS_PROFILE" in line and SECRET not in line
    assert snapshot(place) == before


def test_plain_uris_pass_and_redact_hides_the_secret():
    assert storage_problem("s3://bucket/prefix") is None
    assert storage_problem("s3://bucket/prefix?region=us-west-2") is None
    assert storage_problem("/local/path@2024") is None
    assert redact(f"s3://AKIA:{SECRET}@bucket/p") == "s3://***@bucket/p"
    with pytest.raises(StorageError):
        Experiment(CREDENTIAL_URIS[0], "x")


# ------------------------------------------------------------------------------ disk errors
def _run_limited(args: list[str], max_file_bytes: int | None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess where no file may grow past `max_file_bytes` (RLIMIT_FSIZE,
    SIGXFSZ ignored: the write fails with EFBIG, as a full disk fails it with ENOSPC)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    code = "from sweeper.cli import app; app()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit if max_file_bytes else None,
        timeout=300,
    )


def _one_write_error(proc: subprocess.CompletedProcess, where: Path) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: File too large: ") and str(where) in line, line
    assert "free on its file system" in line and "re-run the same command" in line
    return line


def test_import_on_a_full_disk_is_one_line_and_resumes(tmp_path):
    write_log(tmp_path / "logs", 3000)
    store = tmp_path / "store"
    args = ["import", str(tmp_path / "logs"), "--storage", str(store), "--experiment", "pub"]
    _one_write_error(_run_limited(args, 8192), store / "pub" / "certify")
    assert not (store / "pub" / "sweep.json").exists()  # no experiment that looks whole
    assert not [p for p in store.rglob("*") if p.is_file()]  # nor half a shard
    done = _run_limited(args, None)
    assert done.returncode == 0, done.stderr
    assert "imported 1 logs (3000 rows) into pub" in done.stdout
    assert (store / "pub" / "sweep.json").is_file()


def test_report_on_a_full_disk_is_one_line_and_resumes(tmp_path):
    write_log(tmp_path / "logs", 400)
    store = tmp_path / "store"
    common = ["--storage", str(store), "--experiment", "pub"]
    assert _run_limited(["import", str(tmp_path / "logs"), *common], None).returncode == 0
    # matplotlib's font cache built here, not under the limit (an empty home has none yet,
    # and the unit layer's order on two workers may not have built it first)
    import matplotlib.font_manager  # noqa: F401

    _one_write_error(
        _run_limited(["report", *common, "--formats", "png"], 8192), store / "pub" / "reports"
    )
    done = _run_limited(["report", *common, "--formats", "png"], None)
    assert done.returncode == 0, done.stderr
    assert (store / "pub" / "reports" / "index.md").is_file()


def test_the_driver_reports_an_unwritable_experiment_in_one_line(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "digits-smoke").write_text("a file where the experiment directory goes")
    result = runner.invoke(app, ["run", "grid", "digits", "--smoke", "--storage", str(store)])
    (line,) = error_lines(result, code=1)
    assert str(store / "digits-smoke") in line and "free on its file system" in line


def test_a_full_disk_line_names_the_file_and_the_free_space(tmp_path):
    with pytest.raises(OSError) as raised, open("/dev/full", "wb") as full:
        full.write(b"x")
        full.flush()
    assert raised.value.errno == errno.ENOSPC
    where = tmp_path / "exp" / "trials" / "t" / "trial.json"
    line = os_error_line(OSError(raised.value.errno, raised.value.strerror, str(where)))
    free = shutil.disk_usage(tmp_path).free
    assert line.startswith(f"No space left on device: {where} (")
    number, unit = line.split(" (")[1].split(" free")[0].split()
    scale = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "bytes": 1}[unit]
    assert abs(float(number) * scale - free) <= 0.1 * scale + 1e8  # the disk may change a little


# ---------------------------------------------------------- nothing from storage drives the terminal
def test_printable_escapes_what_could_drive_a_terminal():
    assert printable("a\x1b]0;pwned\x07b") == "a\\x1b]0;pwned\\x07b"
    assert printable("\x1b[2J\r\x9b1m\x7f\u202etxt") == "\\x1b[2J\\r\\x9b1m\\x7f\\u202etxt"
    assert printable("σ=0.25\tε\nnext line") == "σ=0.25\tε\nnext line"  # text, tabs, lines stay
    assert printable("one\nline", one_line=True) == "one\\nline"


def test_the_console_escapes_text_and_keeps_its_own_styles():
    console = TerminalConsole(force_terminal=True, width=60, color_system="standard")
    table = Table("trial")
    table.add_row("evil\x1b]0;pwned")
    with console.capture() as captured:
        console.print("[red]failed[/]: x\x1b[2Jy", highlight=False)
        console.print(table)
    out = captured.get()
    assert "\x1b[31mfailed" in out  # rich's own colour
    assert "x\\x1b[2Jy" in out and "evil\\x1b]0;pwned" in out
    assert "\x1b]" not in out and "\x1b[2J" not in out


# What prints a plain line: display.echo, common.fail (and typer.echo's --version).
PLAIN_PRINTERS = {"display.py", "common.py"}


def test_the_commands_print_plain_lines_through_echo():
    for path in sorted((ROOT / "sweeper" / "cli").glob("*.py")):
        if path.name not in PLAIN_PRINTERS:
            assert "typer.echo(" not in path.read_text(), f"{path.name}: print with display.echo"


def test_a_driver_refuses_hard_links_and_special_files_under_tune(tmp_path):
    """Ray Tune writes its files under tune/ in place: one planted as a hard link to a file
    outside (or a FIFO) stops `run grid` before the lease or Ray, and the outside file keeps
    its bytes."""
    store = tmp_path / "store"
    run = store / "digits-smoke" / "tune" / "run-20991231-000000"
    run.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.link(victim, run / "tuner.pkl")
    os.mkfifo(run / "experiment_state.json")
    exp = Experiment(str(store), "digits-smoke")
    assert sorted(line.split(" is ")[1].split(" under")[0] for line in exp.link_problems()) == [
        "a hard link (2 names)",
        "not a regular file",
    ]
    result = runner.invoke(app, ["run", "grid", "digits", "--smoke", "--storage", str(store)])
    lines = error_lines(result)
    assert len(lines) == 2 and all("tune/" in line for line in lines)
    assert victim.read_bytes() == b"precious"
    assert not (store / "digits-smoke" / "lease.json").exists()
