"""The `sweeper` command line on bad input and on hand-made experiments (no Ray is started)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import certified_rows
import pandas as pd
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import CertifySpec
from sweeper.results.certify_rows import shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_status import write_status

runner = CliRunner()
SWEEPER = Path(sys.executable).parent / "sweeper"

# Certified at a fixed σ_cert = 2 (`--sigma-cert 2`): the radii below are ones CERTIFY can
# give at n = 100 (up to 3.0), which the trials' own σ (0.25, 0.5) could not.
CERT = CertifySpec(sigma=2.0, n0=10, n=100, alpha=0.001, skip=1, max_points=None)
CID = CERT.cert_id
GAUSS = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
ADV = TrialConfig(
    dataset="digits",
    method="smoothadv",
    sigma=0.5,
    attack="ddn",
    epsilon=0.5,
    steps=2,
    m_train=2,
    epochs=1,
)
PENDING = GAUSS.replace(sigma=1.0)
# Digits' test points 0-3 (labels 2, 0, 4, 9): each model's predictions (−1: abstained) and
# the radius its votes just reach (`certified_rows.reaching`: the fewest of the 100 votes that
# do, so each radius lies between the one named and the next of RADII).
# GAUSS: clean 0.75, radii 0.1 / 0.5 / 1.0 and one abstention.
# ADV: clean 0.5, radii 2.0 / 0.3, one wrong prediction (7 for a 4) with radius 0.7, one
# abstention.
POINTS = {
    GAUSS: ([2, 0, 4, -1], [0.1, 0.5, 1.0, 0.0]),
    ADV: ([2, 0, 7, -1], [2.0, 0.3, 0.7, 0.0]),
}
RADII = "0,0.5,1,1.5,2,2.25"
ENVELOPE = [0.75, 0.5, 0.25, 0.25, 0.25, 0.0]
WINNERS = [GAUSS, GAUSS, GAUSS, ADV, ADV, None]  # r=1: tie, GAUSS has the higher clean acc


def _shard(exp: Experiment, cfg: TrialConfig, rows: slice, shard: int, of: int) -> None:
    """CERTIFY's rows of `cfg` on points `rows` (its arithmetic on the votes that give
    POINTS' radii), as shard `shard` of `of`."""
    predict, radius = (v[rows] for v in POINTS[cfg])
    idx = list(range(rows.start, rows.stop))
    labels = [certified_rows.DIGIT_LABELS[i] for i in idx]
    sigmas = [CERT.sigma] * len(idx)
    cols = certified_rows.reaching(CERT.n, CERT.alpha, idx, labels, predict, radius, sigmas)
    constants = {"smoothing": "fixed", "n0": CERT.n0, "n": CERT.n, "alpha": CERT.alpha}
    meta = {"certify_backend": "test", "normalization": "none", "config": cfg.to_dict()}
    table = shard_table(cfg, exp.name, CID, constants, cols, meta)
    write_table(table, exp.shard_path(cfg.trial_id, CID, shard, of))


def make_experiment(storage: Path, name: str = "exp") -> Experiment:
    """sweep.json with 3 trials; GAUSS finished with 2 of 2 shards, ADV failed after
    certifying shards 0 and 2 of 3, PENDING never started."""
    exp = Experiment(str(storage), name)
    write_sweep(
        exp, {"space": {"name": "hand"}, "trials": [c.to_dict() for c in (GAUSS, ADV, PENDING)]}
    )
    _shard(exp, GAUSS, slice(0, 2), 0, 2)
    _shard(exp, GAUSS, slice(2, 4), 1, 2)
    _shard(exp, ADV, slice(0, 2), 0, 3)
    _shard(exp, ADV, slice(2, 4), 2, 3)
    write_status(exp.trial_dir(GAUSS.trial_id), GAUSS, "finished", 1, {"clean_acc": 0.9})
    write_status(exp.trial_dir(ADV.trial_id), ADV, "failed", 0, {}, error="CUDA out of memory")
    return exp


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def bad_input(args: list[str], *fragments: str) -> list[str]:
    """Run the CLI, expect exit 2 with only `error: ...` lines on stderr; return them."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("experiment: ")]
    assert lines, "no error printed"
    assert all(line.startswith("error: ") for line in lines), result.stderr
    text = "\n".join(lines)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} missing from:\n{text}"
    return lines


@pytest.fixture
def storage(tmp_path) -> Path:
    """A storage directory with a marker file that no failing command may touch."""
    root = tmp_path / "store"
    root.mkdir()
    (root / "MARKER").write_text("keep me")
    return root


MALFORMED = "fixed:\n  dataset: digits\n grids: []\n"
NEGATIVE_SIGMA = """\
fixed: {dataset: digits}
grids:
  - name: g
    axes:
      sigma: [0.25, -0.5, 0]
"""


# ------------------------------------------------------------------------------ help, spaces
@pytest.mark.parametrize(
    "args",
    [[], ["spaces"], ["run"], ["run", "grid"], ["certify"], ["envelope"], ["status"]],
)
def test_help_for_every_command(args):
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_spaces_lists_the_shipped_spaces(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # its cache: not the user's
    result = runner.invoke(app, ["spaces"])
    assert result.exit_code == 0, result.output
    shipped = (
        ("cifar10", 644),
        ("cifar10-published", 468),
        ("cifar10-methods", 21),
        ("digits", 34),
        ("digits-methods", 14),
        ("imagenet", 30),
        ("mnist", 21),
    )
    lines = result.stdout.splitlines()
    for name, count in shipped:
        line = next(ln for ln in lines if ln.split()[:1] == [name])
        assert line.split()[1] == str(count), line
    assert "gpu=0.25" in result.stdout


def test_spaces_at_80_columns_shows_each_description_whole(tmp_path, monkeypatch):
    """Issue 41 item 4: a table cut the descriptions (`Hadisalman/smoothing-adversar…`) in a
    column a third of the width; each space is now a line, its description wrapped under it."""
    from sweeper.plan.space_list import shipped_summaries

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = runner.invoke(app, ["spaces"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in result.stdout
    said = " ".join(result.stdout.split())
    for s in shipped_summaries():
        assert f"{s.name} {s.trials} cpu={s.cpu:g} gpu={s.gpu:g} {s.description}" in said
    assert "Hadisalman/smoothing-adversarial, data/certify/cifar10" in said


# ------------------------------------------------------------------------------ run grid
def test_run_grid_bad_input_exits_2_and_touches_nothing(tmp_path, storage):
    before = tree(storage)
    st = ["--storage", str(storage)]
    bad_input(["run", "grid", "nosuchspace", *st], "unknown space 'nosuchspace'", "digits")
    malformed = tmp_path / "malformed.yaml"
    malformed.write_text(MALFORMED)
    [line] = bad_input(["run", "grid", str(malformed), *st], "malformed YAML", "line 3")
    assert str(malformed) in line
    negative = tmp_path / "negative.yaml"
    negative.write_text(NEGATIVE_SIGMA)
    lines = bad_input(["run", "grid", str(negative), *st], "sigma must be > 0 (got -0.5)")
    assert any("sigma must be > 0 (got 0)" in line for line in lines)
    bad_input(["run", "grid", str(tmp_path / "absent.yaml"), *st], "not found")
    bad_input(
        ["run", "grid", "digits", "--only", "nosuchkey=1", *st],
        "--only: unknown hyperparameter 'nosuchkey'",
    )
    bad_input(["run", "grid", "digits", "--only", "sigma=0.3", *st], "--only sigma=0.3")
    bad_input(["run", "grid", "digits", "--only", "sigma=[1", *st], "--only sigma")
    bad_input(
        ["run", "grid", "digits", "--address", "127.0.0.1:1", *st],
        "cannot reach the Ray cluster at --address 127.0.0.1:1",
    )
    bad_input(["run", "grid", "digits", "--address", "nohostport", *st], "--address 'nohostport'")
    assert tree(storage) == before


def test_cifar10_needs_its_data(tmp_path, storage):
    before = tree(storage)
    bad_input(["run", "grid", "cifar10", "--storage", str(storage)], "--data-dir")
    missing = tmp_path / "no" / "such" / "dir"
    bad_input(
        ["run", "grid", "cifar10", "--data-dir", str(missing), "--storage", str(storage)],
        str(missing),
    )
    assert tree(storage) == before


def test_several_problems_are_reported_together(tmp_path, storage):
    missing = tmp_path / "nodata"
    lines = bad_input(
        [
            "run",
            "grid",
            "mnist",
            "--data-dir",
            str(missing),
            "--storage",
            str(storage),
            "--only",
            "nosuchkey=1,sigma",
            "--address",
            "127.0.0.1:1",
        ],
        str(missing),
        "nosuchkey",
        "expected key=value",
        "127.0.0.1:1",
    )
    assert len(lines) == 4, lines
    negative = tmp_path / "negative.yaml"
    negative.write_text(NEGATIVE_SIGMA + "colour: red\ncertify: {n: 0}\n")
    lines = bad_input(
        ["run", "grid", str(negative), "--storage", str(storage), "--address", "127.0.0.1:1"],
        "unknown key 'colour'",
        "certify.n must be an integer >= 1",
        "sigma must be > 0",
        "127.0.0.1:1",
    )
    assert len(lines) == 5, lines
    assert tree(storage) == {"MARKER": b"keep me"}


def test_dry_run_prints_the_plan_and_creates_nothing(storage):
    result = runner.invoke(app, ["run", "grid", "digits", "--dry-run", "--storage", str(storage)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "dry run" in out
    assert "34 of 34 in the sweep" in out
    assert "34 new" in out
    c = load_space("digits").certify
    assert f"n0={c.n0} n={c.n} alpha={c.alpha:g} every {c.skip}-th" in out
    # the experiment's folder, relative to the working directory when it lies below it
    shown = os.path.relpath(storage / "digits")
    assert (shown if not shown.startswith("..") else str(storage / "digits")) in out
    assert not (storage / "digits").exists()
    assert tree(storage) == {"MARKER": b"keep me"}
    result = runner.invoke(
        app,
        [
            "run",
            "grid",
            "digits",
            "--dry-run",
            "--smoke",
            "--only",
            "sigma=0.25,attack=pgd",
            "--storage",
            str(storage),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "8 of 34 in the sweep" in result.stdout
    c = load_space("digits").smoked().certify
    assert f"n0={c.n0} n={c.n} " in result.stdout
    assert os.path.relpath(storage / "digits-smoke") in result.stdout
    assert tree(storage) == {"MARKER": b"keep me"}


def test_existing_experiment_with_another_sweep(storage):
    make_experiment(storage, "digits")
    before = tree(storage)
    [line] = bad_input(
        ["run", "grid", "digits", "--dry-run", "--storage", str(storage)],
        "holds a different sweep",
        "--experiment",
        "--restart",
    )
    assert "'digits'" in line
    # --restart is the way out it names: the conflict is not an error then
    result = runner.invoke(
        app, ["run", "grid", "digits", "--restart", "--dry-run", "--storage", str(storage)]
    )
    assert result.exit_code == 0, result.output
    assert "34 of 34" in result.stdout
    # ... but bad input still stops it before anything is moved aside
    bad_input(
        [
            "run",
            "grid",
            "digits",
            "--restart",
            "--address",
            "127.0.0.1:1",
            "--storage",
            str(storage),
        ],
        "127.0.0.1:1",
    )
    assert tree(storage) == before
    # a new experiment name is fine
    result = runner.invoke(
        app, ["run", "grid", "digits", "--dry-run", "--experiment", "d2", "--storage", str(storage)]
    )
    assert result.exit_code == 0, result.output


def test_unreadable_sweep_json_is_one_error_line(storage):
    exp = Experiment(str(storage), "digits")
    (storage / "digits").mkdir()
    Path(exp.sweep_json).write_text(json.dumps({"trials": [{"bogus": 1}]}))
    bad_input(["run", "grid", "digits", "--dry-run", "--storage", str(storage)], exp.sweep_json)
    Path(exp.sweep_json).write_text("{not json")
    bad_input(["run", "grid", "digits", "--dry-run", "--storage", str(storage)], exp.sweep_json)
    bad_input(["status", "--storage", str(storage), "--experiment", "digits"], "cannot read")


# ------------------------------------------------------------------------------ certify
def test_certify_bad_input(storage):
    before = tree(storage)
    st = ["--storage", str(storage)]
    bad_input(["certify", "digits", *st], "no experiment at", "run grid digits")
    bad_input(
        ["certify", "digits", "--n", "0", "--alpha", "0.9", *st],
        "n must be an integer >= 1",
        "alpha",
    )
    bad_input(["certify", "nosuchspace", *st], "unknown space")
    # an experiment with a finished trial: an unreachable cluster is caught before Ray
    exp = Experiment(str(storage), "digits")
    trials = expand(load_space("digits"))
    write_sweep(exp, {"space": {}, "trials": [t.to_dict() for t in trials]})
    write_status(exp.trial_dir(trials[0].trial_id), trials[0], "finished", trials[0].epochs, {})
    before = tree(storage)
    bad_input(["certify", "digits", "--address", "127.0.0.1:1", *st], "127.0.0.1:1")
    assert tree(storage) == before


# ------------------------------------------------------------------------------ envelope
def test_envelope_bad_input(tmp_path, storage):
    [line] = bad_input(["envelope", "--storage", str(storage)], "no experiments under")
    assert str(storage) in line
    bad_input(["envelope", "--storage", str(tmp_path / "absent")], "no experiments under")
    (storage / "empty").mkdir()
    write_sweep(Experiment(str(storage), "empty"), {"trials": []})
    bad_input(["envelope", "--storage", str(storage)], "no certification results yet")
    [line] = bad_input(
        ["envelope", "--storage", str(storage), "--experiment", "nope"],
        "no experiment 'nope' under",
    )
    for args, fragment in [
        (["--radii", "bad"], "--radii 'bad'"),
        (["--radii", "0:inf:1"], "--radii"),
        (["--radii", ","], "--radii"),
        (["--format", "nope"], "--format 'nope'"),
        (["--plot", "x.txt"], "--plot 'x.txt'"),
        (["--radius", "-1"], "--radius must be >= 0"),
        (["--radius", "1", "--radii", "0,1"], "not both"),
        (["--only", "nosuch=1"], "nosuch"),
    ]:
        [line] = bad_input(["envelope", "--storage", str(storage), *args], fragment)
    lines = bad_input(
        ["envelope", "--storage", str(storage), "--format", "nope", "--radii", "x"],
        "--format",
        "--radii",
    )
    assert len(lines) == 2


def test_envelope_on_corrupt_parquet(storage):
    exp = make_experiment(storage)
    bad = Path(exp.shard_path(ADV.trial_id, CID, 1, 3))
    bad.write_bytes(b"\x00garbage" * 50)
    before = tree(storage)
    lines = bad_input(
        ["envelope", "--storage", str(storage), "--experiment", "exp"], "corrupt", str(bad)
    )
    assert len(lines) == 1
    assert tree(storage) == before


def test_envelope_formats_give_the_exact_numbers(tmp_path, storage):
    make_experiment(storage)
    base = ["envelope", "--storage", str(storage), "--radii", RADII]
    result = runner.invoke(app, [*base, "--format", "csv"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert frame["radius"].tolist() == [0, 0.5, 1, 1.5, 2, 2.25]
    assert frame["certified_accuracy"].tolist() == ENVELOPE
    assert frame["trial_id"].fillna("-").tolist() == [w.trial_id if w else "-" for w in WINNERS]
    assert frame["clean_acc"].fillna(-1).tolist() == [0.75, 0.75, 0.75, 0.5, 0.5, -1]
    assert (frame["models"] == 2).all()
    # partial results are read, and the models missing shards are named
    assert "experiment: exp" in result.stderr
    assert "2 models, 8 certified points" in result.stderr
    assert f"1 model is missing shards (partial results): {ADV.trial_id} (1 shard)" in (
        result.stderr
    )

    result = runner.invoke(app, [*base, "--format", "json", "--experiment", "exp"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["certified_accuracy"] for r in records] == ENVELOPE
    assert [r["attack"] for r in records] == [w.attack if w else None for w in WINNERS]

    result = runner.invoke(app, [*base, "--format", "markdown", "--by", "sigma"])
    assert result.exit_code == 0, result.output
    md = result.stdout.strip().splitlines()
    assert md[0].startswith("| sigma | radius | certified_accuracy | ci | trial_id |")
    assert len(md) == 2 + 12
    assert md[2].startswith(f"| 0.25 | 0 | 0.750 | 0.194–0.994 | {GAUSS.trial_id} |")
    assert md[-1].startswith("| 0.5 | 2.25 | 0.000 | - | - |")

    result = runner.invoke(
        app, ["envelope", "--storage", str(storage), "--radius", "1.5", "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    [row] = pd.read_csv(io.StringIO(result.stdout)).to_dict("records")
    assert (row["certified_accuracy"], row["trial_id"]) == (0.25, ADV.trial_id)

    result = runner.invoke(app, [*base, "--only", "method=gaussian", "--format", "csv"])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert frame["certified_accuracy"].tolist() == [0.75, 0.5, 0.25, 0, 0, 0]
    assert (frame["models"] == 1).all()

    result = runner.invoke(app, base)  # the rich table
    assert result.exit_code == 0, result.output
    assert "upper envelope of exp" in result.stdout
    assert GAUSS.trial_id in result.stdout and ADV.trial_id in result.stdout

    plot = tmp_path / "out" / "envelope.png"
    result = runner.invoke(app, [*base, "--plot", str(plot), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert f"figure written to {plot}" in result.stderr


# ------------------------------------------------------------------------------ status
def test_status_shows_states_and_shards(storage, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # a wide terminal: a trial's row on one line
    make_experiment(storage)
    args = ["status", "--storage", str(storage), "--experiment", "exp"]
    result = runner.invoke(app, [*args, "--all"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "3 trials: pending 1, failed 1, finished 1" in out
    rows = {
        tid: next(ln for ln in out.splitlines() if tid in ln)
        for tid in (GAUSS.trial_id, ADV.trial_id, PENDING.trial_id)
    }
    assert "finished" in rows[GAUSS.trial_id] and "2/2" in rows[GAUSS.trial_id]
    assert "1/1" in rows[GAUSS.trial_id]  # epochs
    assert "failed" in rows[ADV.trial_id] and "2/3" in rows[ADV.trial_id]
    assert "train: CUDA out of memory" in rows[ADV.trial_id]
    assert "pending" in rows[PENDING.trial_id]
    assert "certify shards: 4 of 5 (80.0 %)" in out
    attention = runner.invoke(app, args).stdout  # without --all: only the failed trial is listed
    assert ADV.trial_id in attention and GAUSS.trial_id not in attention
    assert PENDING.trial_id not in attention
    bad_input(
        ["status", "--storage", str(storage), "--experiment", "nope"], "no experiment 'nope' under"
    )
    bad_input(["status", "--storage", str(storage / "void")], "no experiments under")


# ------------------------------------------------------------------------------ a real process
def test_console_script_prints_errors_without_traceback(storage):
    exp = make_experiment(storage)
    bad = Path(exp.shard_path(GAUSS.trial_id, CID, 0, 2))
    bad.write_bytes(b"PAR1 but not really")
    before = tree(storage)
    proc = subprocess.run(
        [str(SWEEPER), "envelope", "--storage", str(storage), "--experiment", "exp"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: corrupt results file {bad}: not a readable Parquet file")
    assert line.endswith("recomputes what is missing)")
    assert proc.stdout == ""
    assert tree(storage) == before


def test_the_next_hint_names_a_sweeper_that_runs_from_here(monkeypatch, tmp_path):
    """`sweeper` when that name finds this program; the path it was started by when it is not
    on PATH (after `make install` without activating the venv)."""
    from sweeper.cli.common import sweeper_command

    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    program = venv / "sweeper"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(program), "run"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert sweeper_command() == ".venv/bin/sweeper"
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin")
    assert sweeper_command() == "sweeper"
    monkeypatch.setattr("sys.argv", ["python", "-m", "pytest"])  # not the console script
    assert sweeper_command() == "sweeper"


def test_a_dry_run_checks_the_data_dir_it_is_given(tmp_path):
    """Without --data-dir a dry run reads no data (it says what a run needs); with one it
    checks it as a real run would, before anything starts (issue 30 item 4)."""
    args = ["run", "grid", "cifar10", "--dry-run", "--storage", str(tmp_path / "store")]
    unchecked = runner.invoke(app, args)
    assert unchecked.exit_code == 0, unchecked.output
    assert "data: not read on a dry run; a real run needs cifar10" in unchecked.stdout
    missing = runner.invoke(app, [*args, "--data-dir", str(tmp_path / "no-such-dir")])
    assert missing.exit_code == 2
    [line] = missing.stderr.splitlines()
    assert line.startswith("error: CIFAR-10 (python version, as torchvision writes it) not found")
    assert not (tmp_path / "store").exists()


def test_storage_at_an_experiment_and_a_missing_experiment_say_what_to_pass(storage):
    """--storage naming an experiment's folder says so and the flags to pass; an --experiment
    that does not exist lists those that do (issue 30 item 5)."""
    make_experiment(storage)
    inside = runner.invoke(app, ["envelope", "--storage", str(storage / "exp")])
    assert inside.exit_code == 2
    assert inside.stderr.strip() == (
        f"error: --storage {storage / 'exp'} is an experiment, not a storage of experiments: "
        f"pass --storage {storage} --experiment exp"
    )
    for command in ("envelope", "table", "status"):
        missing = runner.invoke(app, [command, "--storage", str(storage), "--experiment", "nope"])
        assert missing.exit_code == 2, command
        assert missing.stderr.strip() == (
            f"error: no experiment 'nope' under --storage {storage} (the experiments there: exp)"
        )


def test_only_takes_the_names_the_tables_print(storage):
    """`--only T=2` is steps = 2, as every table heads it; a mistyped key gets the closest
    name and the usual ones (issue 30 item 6)."""
    from sweeper.plan.grid import parse_only

    assert parse_only("T=2,m=4,σ=0.5,ε=1") == (
        {"steps": 2, "m_train": 4, "sigma": 0.5, "epsilon": 1},
        [],
    )
    _, [problem] = parse_only("stpes=2")
    assert problem.startswith("--only: unknown hyperparameter 'stpes' (did you mean 'steps'?")
