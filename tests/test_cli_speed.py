"""The command line stays light where it only reads or plans (issue 17): `--help`, `spaces`,
`run grid --dry-run` of every shipped space and the read commands import neither torch nor
Ray, and a command with nothing to compute (`certify` when every model is certified) does not
start Ray. Asserted on `sys.modules` of a fresh interpreter that ran the commands; the times
themselves are measured by benchmarks/cli_speed.py, never here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_cli import make_experiment

from sweeper.plan.grid import expand
from sweeper.plan.spaces import available_spaces, load_space
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from sweeper.run.shards import all_compacted
from trainables.kernel import fileio
from trainables.kernel.trial_status import write_status

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torchvision", "ray")

# Runs each command line (a JSON list of argument lists) in this interpreter, then prints
# the heavy modules that were imported and each command's exit code.
RUNNER = """
import json, sys
from sweeper.cli import app
codes = []
for args in json.loads(sys.argv[1]):
    try:
        app(args)
    except SystemExit as e:
        codes.append(e.code or 0)
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps({"heavy": heavy, "codes": codes}))
"""


def run_commands(commands: list[list[str]], tmp_path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(commands), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_spaces_and_every_dry_run_import_neither_torch_nor_ray(tmp_path):
    storage = str(tmp_path / "s")
    dry_runs = [["run", "grid", s, "--dry-run", "--storage", storage] for s in available_spaces()]
    commands = [["--help"], ["run", "grid", "--help"], ["spaces"], *dry_runs]
    result = run_commands(commands, tmp_path)
    assert result == {"heavy": [], "codes": [0] * len(commands)}
    assert not (tmp_path / "s").exists()  # a dry run writes nothing


def test_read_commands_import_neither_torch_nor_ray(tmp_path):
    exp = make_experiment(tmp_path / "s")
    where = ["--storage", exp.storage, "--experiment", exp.name]
    commands = [
        ["envelope", *where, "--radii", "0,0.5"],
        ["envelope", *where, "--format", "json", "--plot", str(tmp_path / "e.png")],
        ["table", *where],
        ["status", *where],
        ["status", *where, "--all", "--format", "json"],
        ["report", *where, "--formats", "svg"],
    ]
    result = run_commands(commands, tmp_path)
    assert result == {"heavy": [], "codes": [0] * len(commands)}
    assert (tmp_path / "e.png").stat().st_size > 0  # the commands really ran


def certified_digits(storage: Path) -> tuple[Experiment, list[str]]:
    """The digits space's experiment with its first trial trained and certified under every
    setting of the space (a compacted file each); the others never started."""
    spec = load_space("digits")
    trials = expand(spec)
    exp = Experiment(str(storage), "digits")
    write_sweep(exp, {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in trials]})
    first = trials[0]
    write_status(exp.trial_dir(first.trial_id), first, "finished", first.epochs, {})
    settings = [s.setting_id for s in spec.certify.variants()]
    for setting in settings:
        fileio.write_bytes_atomic(exp.compacted_path("certify", first.trial_id, setting, 1), b"")
    return exp, settings


def test_certify_with_nothing_to_do_starts_no_ray(tmp_path):
    exp, _ = certified_digits(tmp_path / "s")
    result = run_commands([["certify", "digits", "--storage", exp.storage]], tmp_path)
    assert result == {"heavy": [], "codes": [0]}
    assert not fileio.exists(exp.lease_json)  # nothing was driven: the lease was never taken


def test_all_compacted_needs_every_model_under_every_setting(tmp_path):
    exp, settings = certified_digits(tmp_path / "s")
    trial_ids = [p.name for p in (tmp_path / "s" / "digits" / "trials").iterdir()]
    assert len(trial_ids) == 1
    assert all_compacted(exp, trial_ids, [("certify", s) for s in settings])
    assert not all_compacted(
        exp, trial_ids, [("certify", s) for s in settings] + [("certify", "c-other")]
    )
    assert not all_compacted(exp, [*trial_ids, "0123456789ab"], [("certify", settings[0])])
    assert not all_compacted(exp, trial_ids, [("empirical", settings[0])])


def test_certify_dry_run_counts_what_is_certified_and_imports_neither_torch_nor_ray(tmp_path):
    """`sweeper certify --dry-run` from one listing: the first trial certified, the second
    with one shard of two written, the third finished and not begun, the fourth still training;
    it writes nothing, takes no lease and imports neither torch nor Ray."""
    from typer.testing import CliRunner

    from sweeper.cli import app

    exp, settings = certified_digits(tmp_path / "s")
    trials = expand(load_space("digits"))
    for t in trials[1:3]:
        write_status(exp.trial_dir(t.trial_id), t, "finished", t.epochs, {})
    write_status(exp.trial_dir(trials[3].trial_id), trials[3], "running", 1, {})
    fileio.write_bytes_atomic(exp.shard_path(trials[1].trial_id, settings[0], 0, 2), b"")
    before = sorted(p for p in (tmp_path / "s").rglob("*"))
    args = ["certify", "digits", "--storage", exp.storage, "--dry-run"]
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert (
        "3 finished trials: 1 certified, 1 begun (1 of 2 shards written), 1 not begun; "
        "31 not finished" in out.stdout
    )
    assert "certification left ≈" in out.stdout and "for 2 models" in out.stdout
    assert sorted(p for p in (tmp_path / "s").rglob("*")) == before
    other = CliRunner().invoke(app, [*args, "--n", "2000"], env={"COLUMNS": "200"})
    assert "3 finished trials: 0 certified, 0 begun, 3 not begun" in other.stdout
    result = run_commands([args, [*args, "--strategy", "envelope"]], tmp_path)
    assert result == {"heavy": [], "codes": [0, 0]}
