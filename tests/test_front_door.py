"""`sweeper.Sweep`, the Python API (issue 27 §1): on the same experiment it gives the numbers
the command line prints (envelope, per-model table, status, the dry run's plan and cost), and
one real run of the digits smoke space on a local Ray leaves its files and its envelope."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_cli import ADV, GAUSS, PENDING, RADII, make_experiment
from typer.testing import CliRunner

import sweeper
from sweeper.cli import app
from sweeper.plan.sweep_plan import PlanError
from sweeper.run.launch_options import LaunchOptions
from trainables.kernel.errors import ProblemsError

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
RADII_LIST = [float(r) for r in RADII.split(",")]


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def exp(tmp_path):
    """sweep.json with 3 trials: GAUSS certified, ADV partly, PENDING never started."""
    return make_experiment(tmp_path / "s")


def where(exp) -> list[str]:
    return ["--storage", exp.storage, "--experiment", exp.name]


def test_sweep_is_imported_lazily_and_cheaply():
    code = (
        "import sys, sweeper\n"
        "assert 'sweeper.api.sweep' not in sys.modules\n"
        "sweeper.Sweep\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray'}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert sweeper.Sweep.__module__ == "sweeper.api.sweep"
    with pytest.raises(AttributeError):
        sweeper.Nope  # noqa: B018


def test_envelope_is_the_commands_csv(exp):
    printed = pd.read_csv(
        io.StringIO(cli("envelope", *where(exp), "--radii", RADII, "--format", "csv"))
    )
    table = sweeper.Sweep(storage=exp.storage, experiment=exp.name).envelope(RADII_LIST)
    assert table["radius"].tolist() == printed["radius"].tolist()
    assert table["certified_accuracy"].tolist() == printed["certified_accuracy"].tolist()
    # no winner where nothing is certified, in the library as in the csv (issue 39)
    assert (table["certified_accuracy"] == 0).any()
    ids = [[None if pd.isna(t) else t for t in f["trial_id"]] for f in (table, printed)]
    assert ids[0] == ids[1]
    assert table["clean_acc"].dtype.kind == "f"
    assert table["models"].tolist() == printed["models"].tolist()


def test_envelope_by_a_column_and_only_are_the_commands(exp):
    args = ["--radii", RADII, "--format", "csv", "--by", "sigma", "--only", "method=gaussian"]
    printed = pd.read_csv(io.StringIO(cli("envelope", *where(exp), *args)))
    sweep = sweeper.Sweep(storage=exp.storage, experiment=exp.name, only="method=gaussian")
    table = sweep.envelope(RADII_LIST, by="sigma")
    assert table["sigma"].tolist() == printed["sigma"].tolist()
    assert table["certified_accuracy"].tolist() == printed["certified_accuracy"].tolist()
    assert set(sweep.read().frame["trial_id"]) == {GAUSS.trial_id}


def test_table_is_the_commands_csv(exp):
    printed = pd.read_csv(
        io.StringIO(cli("table", *where(exp), "--radii", RADII, "--format", "csv"))
    )
    table = sweeper.Sweep(storage=exp.storage, experiment=exp.name).table(RADII_LIST)
    assert table["trial_id"].tolist() == printed["trial_id"].tolist()  # by ACR, best first
    assert set(table["trial_id"]) == {GAUSS.trial_id, ADV.trial_id}
    for column in [f"r={r:g}" for r in RADII_LIST] + ["acr", "points"]:
        assert table[column].tolist() == pytest.approx(printed[column].tolist()), column


def test_status_is_the_commands_json(exp):
    printed = json.loads(cli("status", *where(exp), "--all", "--format", "json"))
    report = sweeper.Sweep(storage=exp.storage, experiment=exp.name).status()
    summary = json.loads(json.dumps(report.summary.to_dict()))
    for key in ("experiment", "trials", "states", "epochs", "shards", "rows", "size_bytes"):
        assert summary[key] == printed["summary"][key], key
    states = {t.trial_id: t.state for t in report.status.trials}
    assert states == {t["trial_id"]: t["state"] for t in printed["trials"]}
    assert states == {
        GAUSS.trial_id: "finished",
        ADV.trial_id: "failed",
        PENDING.trial_id: "pending",
    }
    assert report.status.left_out == printed["left_out"] == []


def test_reading_without_an_experiment_takes_the_latest_and_a_missing_one_is_a_problem(exp):
    assert sweeper.Sweep(storage=exp.storage).exp().name == exp.name
    with pytest.raises(ProblemsError, match="no experiments under"):
        sweeper.Sweep(storage=str(Path(exp.storage) / "void")).envelope([0.0])
    with pytest.raises(ProblemsError, match="matches no model"):
        sweeper.Sweep(storage=exp.storage, only="sigma=0.75").envelope([0.0])


@pytest.mark.parametrize(
    ("space", "only", "args"),
    [("cifar10", None, ["--gpus", "8"]), ("digits", "sigma=0.25,attack=pgd", ["--smoke"])],
)
def test_plan_counts_and_prices_as_the_dry_run(tmp_path, monkeypatch, space, only, args):
    monkeypatch.setenv("SWEEPER_THROUGHPUT", str(tmp_path / "cache" / "throughput.json"))
    storage = str(tmp_path / "s")
    smoke = "--smoke" in args
    priced = sweeper.Sweep(space, storage=storage, only=only, smoke=smoke).plan()
    selected = ["--only", only] if only else []
    out = " ".join(
        cli("run", "grid", space, "--dry-run", "--storage", storage, *selected, *args).split()
    )
    trials, total = len(priced.trials), len(priced.plan.all_trials)
    assert f"{trials} of {total} in the sweep" in out
    assert f"for {trials} trials" in out
    hours = priced.cost.hours
    if priced.kind == "gpu":
        assert f"total ≈ {hours:,.0f} GPU-h for {trials} trials" in out
        assert 10_000 < hours < 30_000
    else:
        assert f"total ≈ {hours * 60:.1f} core-min" in out or f"{hours * 3600:.1f} core-s" in out
    assert not Path(storage).exists()  # a plan writes nothing


def test_a_sweep_without_a_space_cannot_plan(tmp_path):
    with pytest.raises(PlanError, match="names no space"):
        sweeper.Sweep(storage=str(tmp_path)).plan()


@pytest.mark.e2e
def test_run_trains_and_certifies_the_digits_smoke_space(ray_session, tmp_path):
    storage = str(tmp_path / "store")
    sweep = sweeper.Sweep("digits", storage=storage, smoke=True, only="method=gaussian")
    ran = sweep.run(options=LaunchOptions(cpu_only=True))
    assert ran.outcome is not None and not ran.outcome.interrupted
    assert not ran.outcome.failed and not ran.outcome.certify_failures
    exp = ran.plan.exp
    assert exp.name == "digits-smoke" and len(ran.trials) == 2
    for trial in ran.trials:
        assert (Path(exp.trial_dir(trial.trial_id)) / "trial.json").is_file()
    assert list(Path(exp.root).rglob("compacted-of-*.parquet"))
    assert (Path(exp.root) / "sweep.json").is_file()
    again = sweep.run(options=LaunchOptions(cpu_only=True))
    assert again.outcome is None  # everything trained and certified: nothing to do

    radii = [0.0, 0.25, 0.5]
    table = sweep.envelope(radii)
    accuracy = table["certified_accuracy"].tolist()
    assert accuracy == sorted(accuracy, reverse=True) and accuracy[0] > 0
    printed = pd.read_csv(
        io.StringIO(
            cli(
                "envelope",
                "--storage",
                storage,
                "--experiment",
                exp.name,
                "--radii",
                "0,0.25,0.5",
                "--format",
                "csv",
            )
        )
    )
    assert accuracy == printed["certified_accuracy"].tolist()
    assert sweep.status().summary.states["finished"] == 2
