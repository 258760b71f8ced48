"""`sweeper status`: each trial's state after any interruption (liveness from the lease, shard
totals from the plan), the summary's figures on a known experiment, the view at the paper's
size (644 trials), --all, --format json, --watch, the run's plain progress lines, failures
grouped per trial and stage, and --retrain's move aside. No Ray: experiments are written by
hand in the real layout."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.cli.status import RunDisplay, event_line, sweep_ended
from sweeper.plan.grid import expand, parse_only, select
from sweeper.plan.spaces import load_space
from sweeper.plan.sweep_plan import retire_trials
from sweeper.results.failures import FailureLog, first_line, read_failures
from sweeper.results.status import StatusReader, summary_of
from sweeper.results.storage import Experiment, shard_name
from sweeper.results.summary import summarize
from sweeper.results.sweep_file import write_sweep
from sweeper.run.shards import Event
from trainables.kernel.config import TrialConfig
from trainables.kernel.trial_status import write_status

runner = CliRunner()
NOW = 2_000_000_000.0
CERTIFY = {"skip": 45, "max_points": None, "shard_size": 5}  # digits: 10 points, 2 shards
BASE = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=5)
A, B, C, D, F, G = (BASE.replace(sigma=s) for s in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5))
E = BASE.replace(sigma=0.5, init_from=D.trial_id)  # fine-tunes D
SID = "sigma-train_n0-8_n-32_alpha-0.01_skip-45_max-all"  # the setting certified


def _file(exp: Experiment, path: str, mtime: float) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb"):
        pass
    os.utime(path, (mtime, mtime))


def _state(exp, cfg, state, epoch, epoch_time=None, updated=NOW - 5000):
    metrics = {"epoch_time_s": epoch_time} if epoch_time else {}
    write_status(exp.trial_dir(cfg.trial_id), cfg, state, epoch, metrics)
    path = os.path.join(exp.trial_dir(cfg.trial_id), "trial.json")
    doc = json.loads(Path(path).read_text())
    doc["updated"] = updated
    Path(path).write_text(json.dumps(doc))


def _lease(
    exp: Experiment,
    released: bool,
    now: float = NOW,
    command: str = "sweeper run grid x",
    only: str | None = None,
) -> None:
    doc = {
        "only": only,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "since": now - 3600,
        "heartbeat": now,
        "token": "t",
        "released": now if released else None,
    }
    Path(exp.lease_json).write_text(json.dumps(doc))


def known_experiment(tmp_path, released: bool = False) -> Experiment:
    """A finished and certified; B trained, shard 0 of 2 written a minute ago; C at epoch 3 of
    5; D failed in training; E fine-tunes D; F never started; G trained, its certification
    failed (failures.json). Epoch times: A, B 30 s, C 60 s."""
    exp = Experiment(str(tmp_path / "store"), "known")
    trials = [A, B, C, D, E, F, G]
    write_sweep(
        exp,
        {
            "space": {"name": "known", "certify": CERTIFY, "resources": {"cpu": 1, "gpu": 0}},
            "trials": [t.to_dict() for t in trials],
        },
    )
    _state(exp, A, "finished", 5, 30.0)
    _state(exp, B, "finished", 5, 30.0)
    _state(exp, C, "running", 3, 60.0, updated=NOW - 100)
    _state(exp, D, "failed", 2)
    _state(exp, G, "finished", 5)
    sid = SID
    _file(exp, exp.compacted_path("certify", A.trial_id, sid, 2), NOW - 5000)
    _file(exp, exp.shard_path(B.trial_id, sid, 0, 2, "certify"), NOW - 60)
    log = FailureLog(exp)
    log.add(G.trial_id, "certify", "Traceback...\nCheckpointError: cannot read checkpoint x", 2)
    log.add(D.trial_id, "train", "RuntimeError: CUDA out of memory", 3)
    os.makedirs(os.path.dirname(exp.cache_path("certify")), exist_ok=True)
    pq.write_table(pa.table({"time_s": [2.0, 4.0]}), exp.cache_path("certify"))
    _lease(exp, released)
    return exp


def test_states_while_a_driver_runs(tmp_path):
    st = StatusReader(known_experiment(tmp_path)).read(now=NOW)
    states = {t.trial_id: (t.state, t.error) for t in st.trials}
    assert states == {
        A.trial_id: ("finished", ""),
        B.trial_id: ("certifying", ""),
        C.trial_id: ("training", ""),
        D.trial_id: ("failed", "train: RuntimeError: CUDA out of memory (3 attempts)"),
        E.trial_id: ("blocked", f"its parent {D.trial_id} failed"),
        F.trial_id: ("pending", ""),
        G.trial_id: ("failed", "certify: CheckpointError: cannot read checkpoint x (2 tasks)"),
    }
    shards = {t.trial_id: (t.shards["certify"].done, t.shards["certify"].total) for t in st.trials}
    assert (
        shards[A.trial_id] == (2, 2)
        and shards[B.trial_id] == (1, 2)
        and shards[G.trial_id] == (0, 2)
    )


def test_nothing_is_running_once_the_driver_is_gone(tmp_path):
    st = StatusReader(known_experiment(tmp_path, released=True)).read(now=NOW)
    states = {t.trial_id: t.state for t in st.trials}
    assert states[B.trial_id] == "trained" and states[C.trial_id] == "interrupted"
    assert "training" not in states.values() and "certifying" not in states.values()
    assert all(t.shards["certify"].total == 2 for t in st.trials)  # from the plan: never 0/?
    s = summarize(st)
    assert s.driver is None and s.epochs_per_hour is None and s.eta_train_s is None


def test_summary_figures(tmp_path):
    s = summarize(StatusReader(known_experiment(tmp_path)).read(now=NOW))
    assert s.states["training"] == 1 and s.states["failed"] == 2 and s.trials == 7
    assert s.epochs == (5 + 5 + 3 + 2 + 5, 35)
    assert s.shards == {"certify": (3, 14)} and s.rows == (15, 70)
    assert s.elapsed_s == 3600 and s.window_s == 900
    assert s.epochs_per_hour == 3 * 4  # C's 3 epochs (60 s each, last 100 s ago) in 15 min
    assert s.points_per_hour == 5 * 4  # B's shard of 5 points, a minute ago
    assert s.eta_train_s == pytest.approx((35 - 20) / 12 * 3600)
    assert s.eta_certify_s == pytest.approx((70 - 15) / 20 * 3600)
    spent, projected = 150 + 150 + 180, 150 + 150 + 300 + 4 * 5 * 40  # mean epoch: 40 s
    assert s.unit == "CPU" and s.train_hours == pytest.approx((spent / 3600, projected / 3600))
    assert s.certify_hours == pytest.approx((15 * 3 / 3600, 70 * 3 / 3600))  # 3 s per point


def test_watch_and_progress_end(tmp_path):
    exp = known_experiment(tmp_path)
    st = StatusReader(exp).read(now=NOW)
    assert not sweep_ended(st, driver_seen=True)
    for t in st.trials:
        t.state = "finished" if t.state != "failed" else "failed"
    assert sweep_ended(st, driver_seen=False)
    result = runner.invoke(
        app,
        ["status", "--storage", exp.storage, "--experiment", "x", "--watch", "--format", "json"],
    )
    assert result.exit_code == 2 and "--watch refreshes the table" in result.stderr


def test_watch_stops_when_the_sweep_has_ended(tmp_path):
    exp = known_experiment(tmp_path, released=True)
    for cfg in (B, C, D, E, F, G):  # everything finished: the first refresh is the last
        _state(exp, cfg, "finished", 5)
        _file(exp, exp.compacted_path("certify", cfg.trial_id, SID, 2), NOW)
    result = runner.invoke(
        app,
        ["status", "--storage", exp.storage, "--experiment", "known", "--watch", "--interval", "1"],
    )
    assert result.exit_code == 0, result.output
    assert "known: 7 trials: finished 7" in result.stdout and "\x1b" not in result.stdout


@pytest.fixture(scope="module")
def paper_size(tmp_path_factory):
    """The cifar10 grid's 644 trials: 40 training under a live driver, 5 failed, the rest
    pending or finished."""
    exp = Experiment(str(tmp_path_factory.mktemp("p") / "store"), "cifar10")
    spec = load_space("cifar10")
    trials = expand(spec)
    write_sweep(exp, {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in trials]})
    for k, cfg in enumerate(trials[:300]):
        state = "running" if k < 40 else "failed" if k < 45 else "finished"
        write_status(
            exp.trial_dir(cfg.trial_id),
            cfg,
            state,
            10,
            {"epoch_time_s": 300.0},
            error="RuntimeError: boom",
        )
    _lease(exp, released=False, now=time.time())
    return exp, trials


def test_summary_of_644_trials_fits_a_screen(paper_size, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # a screen of 160 by 40
    exp, trials = paper_size
    args = ["status", "--storage", exp.storage, "--experiment", "cifar10"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert len(lines) <= 40 and "\x1b" not in out.stdout
    assert lines[0] == "cifar10: 644 trials: pending 344, training 40, certifying 255, failed 5"
    assert "… and 280 more that need attention: sweeper status --all" in out.stdout
    every = runner.invoke(app, [*args, "--all"]).stdout
    assert all(t.trial_id in every for t in trials)
    doc = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)
    assert doc["summary"]["trials"] == 644 and doc["summary"]["states"]["training"] == 40
    assert doc["summary"]["elapsed_s"] >= 3600 and doc["summary"]["unit"] == "GPU"
    assert len(doc["attention"]) == 300 and doc["summary"]["shards"]["certify"] == [0, 6440]
    assert "trials" not in doc  # every trial: --all
    every = json.loads(runner.invoke(app, [*args, "--format", "json", "--all"]).stdout)
    assert len(every["trials"]) == 644 and len(every["attention"]) == 300
    failed = next(t for t in every["attention"] if t["state"] == "failed")
    assert failed["epoch"] == 10 and failed["epochs"] == trials[0].epochs  # numbers, not "10/…"
    assert failed["shards"]["certify"] == {"done": 0, "total": 10}
    assert failed["error"].startswith("train: RuntimeError: boom")


def test_status_all_at_80_columns_is_a_line_per_trial(paper_size, monkeypatch):
    """Issue 41 item 4: `status --all` of the cifar10 grid at 80 columns lists each of the 644
    trials on one line, every column but the errors, which are listed under the table, each
    under its trial; no line is longer than 80 (a longer summary item wraps at its words)."""
    monkeypatch.setenv("COLUMNS", "80")
    exp, trials = paper_size
    args = ["status", "--storage", exp.storage, "--experiment", "cifar10", "--all"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    ids = {t.trial_id for t in trials}
    rows = [line for line in lines if line[:12] in ids]
    assert len(rows) == 644 and {row[:12] for row in rows} == ids
    header = next(line for line in lines if line.startswith("trial_id"))
    assert header.split() == ["trial_id", "trial", "state", "epoch", "shards"]
    longest = max(trials, key=lambda t: len(summary_of(t)))
    assert summary_of(longest) in next(row for row in rows if row.startswith(longest.trial_id))
    errors = lines[lines.index("errors:") + 1 :]
    assert len(errors) == 5 and all(e.endswith("  train: RuntimeError: boom") for e in errors)
    assert "left out to fit" not in out.stdout
    narrow = runner.invoke(app, args, env={"COLUMNS": "70"}).stdout.splitlines()
    assert max(len(line) for line in narrow) <= 70
    assert sum(line[:12] in ids for line in narrow) == 644
    assert "left out to fit 70 columns: epoch (shown at 78 columns)" in narrow


def test_run_progress_is_plain_lines_off_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # piped without COLUMNS: each line whole
    exp = known_experiment(tmp_path)
    with RunDisplay(exp) as display:
        display(Event("trial_started", C.trial_id))
        display(Event("certify_failed", G.trial_id, "CheckpointError: x", (3, 14, 2)))
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert f"trial {C.trial_id} started" in out
    assert f"trial {G.trial_id} failed (certify): CheckpointError: x [shards 3/14, 2 failed]" in out
    assert "known: 7 trials:" in out  # the summary, at the start and at the end
    assert event_line(Event("shard_done", A.trial_id, "certify 1/2", (1, 2, 0))) == (
        f"trial {A.trial_id}: shard certify 1/2 written [shards 1/2]"
    )


def test_the_run_log_at_80_columns_is_an_event_a_line_and_the_summary_once(
    tmp_path, capsys, monkeypatch
):
    """Issue 41 item 4: at COLUMNS=80 every line of the log fits; an event is one line (the
    setting's id, as long as the line, left to the plan: `certify compacted`), a longer one
    (a failure's message, a summary item) wraps at its words under an indent past the time;
    the summary is printed at the start and once at the end."""
    monkeypatch.setenv("COLUMNS", "80")
    exp = known_experiment(tmp_path)
    sid = "sigma-train_n0-32_n-200_alpha-0.001_skip-5_max-20"
    with RunDisplay(exp) as display:
        display(Event("shards_planned", A.trial_id, "2 to do", (0, 68, 0)))
        display(Event("shard_done", A.trial_id, "certify 1/2", (1, 68, 0)))
        display(Event("compacted", A.trial_id, f"certify {sid}", (2, 68, 0)))
        display(Event("certify_failed", G.trial_id, "CheckpointError: " + "x " * 40, (3, 68, 2)))
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    events = [line[9:] for line in lines if line[9:].startswith("trial ")]
    assert events[:3] == [
        f"trial {A.trial_id}: shards queued (2 to do) [shards 0/68]",
        f"trial {A.trial_id}: shard certify 1/2 written [shards 1/68]",
        f"trial {A.trial_id}: certify compacted [shards 2/68]",
    ]
    at = next(i for i, line in enumerate(lines) if f"trial {G.trial_id} failed" in line)
    assert lines[at + 1].startswith(" " * 11) and lines[at + 2].endswith("[shards 3/68, 2 failed]")
    assert sum(": 7 trials:" in line for line in lines) == 2  # at the start and at the end
    assert all(line[:2].isdigit() or line.startswith(" " * 11) for line in lines)


def test_the_run_of_a_slice_counts_the_slice_in_status_progress_and_etas(tmp_path, capsys):
    """Issue 30 item 2: while `run grid --only sigma=0.5` runs (its lease records the slice,
    issue 41), `status`, its JSON, `Sweep.status()` and the run's own progress count the 2
    trials of the slice (B certifying, E blocked), never the sweep's 7: their epochs, rows
    and ETAs alone."""
    from sweeper.api.sweep import Sweep

    exp = known_experiment(tmp_path)
    # the slice is the lease's `only`, not words of its command line
    _lease(exp, False, command="sweeper run grid known --storage s", only="sigma=0.5")
    args = ["status", "--storage", exp.storage, "--experiment", "known"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = [line for line in out.stdout.splitlines() if not line.startswith("  ")]  # wrapped
    assert lines[0] == "known: slice 2 of 7 trials (--only sigma=0.5): blocked 1, certifying 1"
    assert lines[2].startswith("epochs: 5 of 10 (50.0 %)")
    assert lines[3].startswith("certify shards: 1 of 4 (25.0 %); rows 5 of 20 (25.0 %)")
    ids = {t.trial_id for t in (A, B, C, D, E, F, G)}
    assert {B.trial_id, E.trial_id} == {line.split()[0] for line in lines if line[:12] in ids}
    doc = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)
    assert doc["slice"] == {"trials": 2, "of": 7, "only": "sigma=0.5"}
    assert doc["summary"]["trials"] == 2 and doc["summary"]["rows"] == [5, 20]
    report = Sweep(storage=exp.storage, experiment="known").status()
    assert (report.status.only, report.status.sweep_trials, report.summary.trials) == (
        "sigma=0.5",
        7,
        2,
    )
    with RunDisplay(exp) as display:
        display(Event("trial_started", B.trial_id))
    assert "known: slice 2 of 7 trials (--only sigma=0.5): blocked 1" in capsys.readouterr().out
    _lease(exp, True, command="sweeper run grid known", only="sigma=0.5")  # the run ended
    out = runner.invoke(app, args)
    assert out.stdout.splitlines()[0].startswith("known: 7 trials: ")
    assert Sweep(storage=exp.storage, experiment="known").status().status.only is None
    # a run of `sweeper.Sweep(..., only=...)` records its slice in the lease the same way
    watching = Sweep("known", storage=exp.storage, only="sigma=0.5")._watchers()
    _lease(exp, False, command=watching.holder, only=watching.only)
    out = runner.invoke(app, args)
    assert out.stdout.splitlines()[0].startswith("known: slice 2 of 7 trials (--only sigma=0.5)")


def test_failures_are_grouped_and_kept_in_full(tmp_path):
    exp = Experiment(str(tmp_path / "store"), "f")
    log = FailureLog(exp)
    text = (
        "\x1b[36mray::run_shard()\x1b[39m\n  File x\npkg.mod.CheckpointError: bad file. Long tail"
    )
    log.add("a" * 12, "certify", text)
    log.add("a" * 12, "certify", text)
    log.add("b" * 12, "train", "RuntimeError: boom", 2)
    assert log.rows() == [
        ("a" * 12, "certify", "CheckpointError: bad file. Long tail (2 tasks)"),
        ("b" * 12, "train", "RuntimeError: boom (2 attempts)"),
    ]
    failures, where = read_failures(exp)
    assert failures[("a" * 12, "certify")].count == 2 and where == log.log_path
    full = Path(where).read_text()
    assert full.count("ray::run_shard()") == 2 and "\x1b" not in full
    FailureLog(exp).start()  # the next run: the last run's failures no longer stand
    assert read_failures(exp) == ({}, None) and os.path.exists(where)
    long = "CheckpointError: " + "x" * 200 + ". More detail that is cut."
    assert first_line(long) == "CheckpointError: " + "x" * 200 + "."


def test_retrain_moves_a_trial_aside(tmp_path):
    exp = known_experiment(tmp_path)
    before = Path(exp.cache_path("certify")).read_bytes()
    moved = retire_trials(exp, [A])
    assert moved is not None and moved.startswith(os.path.join(exp.root, "retired", ""))
    assert not os.path.exists(exp.trial_dir(A.trial_id))
    assert os.path.exists(os.path.join(moved, "trials", A.trial_id, "trial.json"))
    assert os.listdir(os.path.join(moved, "certify", A.trial_id))
    assert Path(moved, "cache", "certify.parquet").read_bytes() == before
    assert os.path.exists(exp.trial_dir(B.trial_id))  # the others stay


def test_only_selects_one_trial_by_its_id():
    numeric = "123456789012"  # a hash made of digits stays a string
    assert parse_only(f"trial_id={numeric}") == ({"trial_id": numeric}, [])
    chosen, problems = select([A, B, C], {"trial_id": B.trial_id})
    assert chosen == [B] and problems == []
    assert "matches no trial" in select([A], {"trial_id": numeric})[1][0]


def test_shard_name_is_what_the_layout_reads(tmp_path):
    exp = Experiment(str(tmp_path), "x")
    path = exp.shard_path("a" * 12, "s", 3, 10, "certify")
    assert path.endswith(shard_name(3, 10))


DAMAGED_TRIAL_JSON = {
    "truncated": b'{"trial_id": "x", "state": "runn',
    "not an object": b"[]",
    "no state": b'{"epoch": 1}',
    "epoch a word": b'{"state": "finished", "epoch": "five"}',
}


@pytest.mark.parametrize("kind", DAMAGED_TRIAL_JSON)
def test_a_damaged_trial_json_is_one_line_naming_it(tmp_path, kind):
    exp = known_experiment(tmp_path)
    path = os.path.join(exp.trial_dir(C.trial_id), "trial.json")
    Path(path).write_bytes(DAMAGED_TRIAL_JSON[kind])
    line = f"error: cannot read {path} ("
    fix = "delete it and re-run; the trial resumes from its checkpoint (or starts over without one)"
    result = runner.invoke(app, ["status", "--storage", exp.storage, "--experiment", exp.name])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1
    assert fix in result.stderr
    # The planner reads it too (`run grid`, `certify`, `empirical`), before Ray starts.
    spec = load_space("digits").smoked()
    trials = expand(spec)
    first = trials[0]
    smoke = Experiment(exp.storage, "digits-smoke")
    sweep = {"space": json.loads(spec.to_json()), "trials": [t.to_dict() for t in trials]}
    write_sweep(smoke, sweep)
    planted = os.path.join(smoke.trial_dir(first.trial_id), "trial.json")
    os.makedirs(os.path.dirname(planted))
    Path(planted).write_bytes(DAMAGED_TRIAL_JSON[kind])
    for command in (["run", "grid", "digits", "--dry-run"], ["certify", "digits"]):
        result = runner.invoke(app, [*command, "--smoke", "--storage", exp.storage])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert result.stderr == f"error: cannot read {planted} ({result.stderr.split(' (', 1)[1]}"
        assert result.stderr.count("\n") == 1 and fix in result.stderr


def test_status_names_the_result_files_left_out_and_strict_exits_1(tmp_path):
    """A's rows real, B's with a radius its counts do not give: status lists B's file and why
    (in the table and in json); --strict exits 1 then, 0 once the file is gone."""
    import certified_rows

    from sweeper.plan.spec import CertifySpec

    spec = CertifySpec(n0=10, n=1000, alpha=0.001, skip=45, max_points=None)
    exp = Experiment(str(tmp_path), "x")
    write_sweep(exp, {"space": None, "trials": [A.to_dict(), B.to_dict()]})
    certified_rows.model(exp, A, spec, [990] * 10, range(0, 450, 45))
    bad = certified_rows.model(exp, B, spec, [990] * 10, range(0, 450, 45))
    table = pq.read_table(bad)
    radius = table.schema.get_field_index("radius")
    table = table.set_column(radius, "radius", pa.array([0.3] * 10))
    pq.write_table(table, bad)
    args = ["status", "--storage", exp.storage, "--experiment", "x"]
    line = f"{bad}: a radius its p_lower and sigma_cert do not give"
    shown = runner.invoke(app, [*args, "--all"])
    said = " ".join(shown.stdout.split())  # wrapped at the words to fit, indented
    assert shown.exit_code == 0 and " ".join(line.split()) in said
    assert "left out of every result (1 files that fail validation):" in shown.stdout
    doc = json.loads(runner.invoke(app, [*args, "--format", "json"]).stdout)
    assert doc["left_out"] == [line]
    assert runner.invoke(app, [*args, "--strict"]).exit_code == 1
    os.remove(bad)
    assert runner.invoke(app, [*args, "--strict"]).exit_code == 0


def _two_settings(tmp_path, ddrs: bool) -> Experiment:
    """A certified under fixed σ (compacted, 2 shards) and under DDRS (2 of 2 shards); B
    under fixed σ only (1 of 2); the sweep's certify block plans DDRS or not."""
    exp = Experiment(str(tmp_path / "store"), "two")
    certify = {**CERTIFY, "ddrs": ddrs}
    write_sweep(
        exp, {"space": {"name": "two", "certify": certify}, "trials": [A.to_dict(), B.to_dict()]}
    )
    for cfg in (A, B):
        _state(exp, cfg, "finished", 5, 30.0)
    fixed, ddrs_sid = "sigma-train_n0-8_n-32", "ddrs_n0-8_n-32"
    _file(exp, exp.compacted_path("certify", A.trial_id, fixed, 2), NOW - 500)
    for index in (0, 1):
        _file(exp, exp.shard_path(A.trial_id, ddrs_sid, index, 2, "certify"), NOW - 400)
    _file(exp, exp.shard_path(B.trial_id, fixed, 0, 2, "certify"), NOW - 300)
    return exp


@pytest.mark.parametrize("ddrs", [False, True])
def test_shards_are_counted_per_setting_never_over_the_plan(tmp_path, ddrs):
    """Issue 30 item 11: a sweep certified under fixed σ and DDRS said `certify shards: 136 of
    68 (200.0 %)`: the plan counted one setting, the files both. Each setting on storage
    counts at its own shards; a planned one not written yet at the plan's."""
    exp = _two_settings(tmp_path, ddrs)
    st = StatusReader(exp).read(now=NOW)
    rows = {t.trial_id: t for t in st.trials}
    assert (rows[A.trial_id].shards_done, rows[A.trial_id].shards_expected) == (4, 4)
    assert rows[A.trial_id].state == "finished" and rows[A.trial_id].points == (20, 20)
    b = rows[B.trial_id]  # DDRS planned: its setting not written yet counts 2 more shards
    assert (b.shards_done, b.shards_expected) == ((1, 4) if ddrs else (1, 2))
    assert b.points == (5, 20 if ddrs else 10) and b.state == "trained"
    out = runner.invoke(app, ["status", "--storage", exp.storage, "--experiment", "two"]).stdout
    total = 8 if ddrs else 6
    assert f"certify shards: 5 of {total} ({500 / total:.1f} %)" in out


def test_a_model_the_envelope_strategy_pruned_is_done_not_unfinished(tmp_path):
    """Issue 28 in status: a pruned model has no shards and never will; it counts its planned
    shards as done (finished), not `0/2` awaiting certification."""
    from test_envelope_views import UPPER, record

    from sweeper.results.envelope_records import write_record

    exp = Experiment(str(tmp_path / "store"), "env")
    cert_id = "sigma-train_n0-8_n-32_envelope"
    space = {"name": "env", "certify": CERTIFY}
    trials = [A.to_dict(), B.to_dict()]
    # the setting as `sweeper certify` records it: a record counts only under a declared one
    write_sweep(exp, {"space": space, "trials": trials, "certify_settings": [cert_id]})
    for cfg in (A, B):
        _state(exp, cfg, "finished", 5, 30.0)
    _file(exp, exp.compacted_path("certify", A.trial_id, cert_id, 2), NOW - 500)
    write_record(exp, A.trial_id, cert_id, record("certified", [4] * 10))
    write_record(exp, B.trial_id, cert_id, record("pruned", UPPER))
    rows = {t.trial_id: t for t in StatusReader(exp).read(now=NOW).trials}
    assert rows[B.trial_id].state == "finished"
    assert (rows[B.trial_id].shards_done, rows[B.trial_id].shards_expected) == (2, 2)
    assert rows[B.trial_id].points == (0, 0)  # no point of it will be certified
    out = runner.invoke(app, ["status", "--storage", exp.storage, "--experiment", "env"]).stdout
    assert "env: 2 trials: finished 2" in out and "certify shards: 4 of 4 (100.0 %)" in out
