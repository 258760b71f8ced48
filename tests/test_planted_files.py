"""Files planted in an experiment by someone with write access to a copy of it: a FIFO where
sweeper reads (it blocked every command forever), a sparse file of 20 GB (read whole into
memory), and JSON of another shape than sweeper writes (tracebacks). Each is one `error:` line
naming the file and the fix, exit 2, at once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_status import C, known_experiment
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep

runner = CliRunner()
SWEEP_FIX = "restore it from a copy, or start over"
TRIAL_FIX = "delete it and re-run; the trial resumes from its checkpoint"
FIXES = {
    "sweep.json": SWEEP_FIX,
    "lease.json": "remove it (or put the real file there) and re-run",
    "failures.json": "delete it (it lists the last run's failures",
}


def plant(path: str, kind: str) -> None:
    """A FIFO, or a sparse file of 20 GB (no disk used), at `path` instead of the file."""
    if os.path.exists(path):
        os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            f.truncate(20 * 2**30)


def one_line(result, path: str, fix: str) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: cannot read {path} ("), result.stderr
    assert fix in result.stderr
    return result.stderr


def status(exp: Experiment):
    return runner.invoke(app, ["status", "--storage", exp.storage, "--experiment", exp.name])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "sparse"])
@pytest.mark.parametrize("name", ["sweep.json", "lease.json", "failures.json"])
def test_status_names_a_planted_fifo_or_huge_file_at_once(tmp_path, name, kind):
    exp = known_experiment(tmp_path)
    path = os.path.join(exp.root, name)
    plant(path, kind)
    line = one_line(status(exp), path, FIXES[name])
    why = "a FIFO, not a regular file" if kind == "fifo" else "21,474,836,480 bytes, where"
    assert f"{path} ({why}" in line


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "sparse"])
def test_a_planted_trial_json_is_one_line_for_the_planner_and_skipped_by_status(tmp_path, kind):
    """The planner (`run grid`, `certify`) reads every trial's trial.json; `status` lists them
    first, and a listing holds regular files only (a FIFO is skipped: the trial is pending)."""
    spec = load_space("digits").smoked()
    trials = expand(spec)
    smoke = Experiment(str(tmp_path / "store"), "digits-smoke")
    write_sweep(
        smoke, {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in trials]}
    )
    planted = os.path.join(smoke.trial_dir(trials[0].trial_id), "trial.json")
    os.makedirs(os.path.dirname(planted))
    plant(planted, kind)
    result = runner.invoke(
        app, ["run", "grid", "digits", "--dry-run", "--smoke", "--storage", smoke.storage]
    )
    one_line(result, planted, TRIAL_FIX)
    if kind == "fifo":
        assert status(smoke).exit_code == 0
    else:
        one_line(status(smoke), planted, TRIAL_FIX)


BAD_SWEEPS = {
    "a list": (b"[]", "not a JSON object"),
    "null": (b"null", "not a JSON object"),
    "space a number": (b'{"trials": [], "space": 5}', "space is not a JSON object"),
    "space without trials": (b'{"space": {}}', "trials is not a list of JSON objects"),
    "a trial a number": (b'{"trials": [1]}', "trials is not a list of JSON objects"),
    "resources a list": (b'{"trials": [], "space": {"resources": []}}', "space.resources is not"),
    "gpu a word": (
        b'{"trials": [], "space": {"resources": {"gpu": "x"}}}',
        "space.resources.gpu 'x'",
    ),
    "skip a word": (
        b'{"trials": [], "space": {"certify": {"skip": "x"}}}',
        "space.certify.skip 'x'",
    ),
    "no max": (
        b'{"trials": [], "space": {"certify": {"max_points": -1}}}',
        "space.certify.max_points -1 is not a count",
    ),
    "name a number": (b'{"trials": [], "space": {"name": 5}}', "space.name is not text"),
    "truncated": (b'{"trials": [', "not JSON: "),
}


@pytest.mark.parametrize("kind", BAD_SWEEPS)
def test_a_sweep_json_of_another_shape_is_one_line_naming_it(tmp_path, kind):
    exp = known_experiment(tmp_path)
    raw, why = BAD_SWEEPS[kind]
    Path(exp.sweep_json).write_bytes(raw)
    assert f"{exp.sweep_json} ({why}" in one_line(status(exp), exp.sweep_json, SWEEP_FIX)


BAD_TRIAL_JSON = {
    "epoch time a word": (
        b'{"state": "running", "epoch": 1, "metrics": {"epoch_time_s": "x"}}',
        "metrics.epoch_time_s 'x' is not a number of seconds",
    ),
    "updated a word": (
        b'{"state": "running", "epoch": 1, "updated": "now"}',
        "updated 'now' is not a number of seconds",
    ),
    "error a number": (
        b'{"state": "failed", "epoch": 1, "error": 5}',
        "error is not a line of text",
    ),
}


@pytest.mark.parametrize("kind", BAD_TRIAL_JSON)
def test_a_trial_json_whose_times_are_no_numbers_is_one_line_naming_it(tmp_path, kind):
    """`status` sums epoch times and compares update times (a word there was a TypeError)."""
    exp = known_experiment(tmp_path)
    path = os.path.join(exp.trial_dir(C.trial_id), "trial.json")
    raw, why = BAD_TRIAL_JSON[kind]
    doc = {**json.loads(raw), "trial_id": C.trial_id}
    Path(path).write_text(json.dumps(doc))
    assert f"{path} ({why})" in one_line(status(exp), path, TRIAL_FIX)


@pytest.mark.parametrize(
    "doc",
    [[], {"failures": 5}, {"log": 5, "failures": []}, {"failures": [{"trial_id": "x"}]}],
)
def test_a_failures_json_of_another_shape_is_one_line_naming_it(tmp_path, doc):
    exp = known_experiment(tmp_path)
    Path(exp.failures_json).write_text(json.dumps(doc))
    one_line(status(exp), exp.failures_json, FIXES["failures.json"])
