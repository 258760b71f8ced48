"""The final step on a real experiment (issue 40 item 1): `sweeper certify SPACE --final`
re-certifies the envelope winners and the models within their intervals, exactly those
`final_selection` names from the selection's rows, on the report points, under its own
cert_id; a re-run computes nothing again; the dry run prices it. The digits smoke sweep of
`test_e2e` (Ray, real training and CERTIFY), copied."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from sweeper.results.certify_rows import load_results
from sweeper.results.final_selection import final_candidates, to_recertify
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import declared_settings, read_sweep
from trainables.kernel.final_points import FinalPoints, final_id
from trainables.kernel.stage_settings import DECISION_RADII

pytestmark = pytest.mark.e2e

FINAL = ["--final", "--final-stop", "200", "--final-skip", "2"]  # 100 report points


@pytest.fixture
def copy(pristine_sweep, tmp_path):
    space, exp = pristine_sweep
    shutil.copytree(exp.root, tmp_path / "e2e")
    return space, Experiment(str(tmp_path), "e2e")


def said(result) -> str:
    """The command's output on one line (the console wraps long ids)."""
    return " ".join(result.output.split())


def test_certify_final_recertifies_the_candidates_on_the_report_points(copy):
    from test_e2e import run_cli

    space, exp = copy
    selection = load_results(exp).frame
    cert_id = selection["cert_id"].unique().tolist()
    assert len(cert_id) == 1  # the smoke sweep's one setting
    expected = to_recertify(final_candidates(selection, list(DECISION_RADII)))
    assert expected  # at least the winners
    args = ["--storage", exp.storage, "--experiment", exp.name]
    dry = run_cli("certify", space, *args, *FINAL, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"final step: {len(expected)} models to re-certify" in said(dry)
    assert f"final step left ≈ 0 core-hours for {len(expected)} models" not in said(dry)
    assert f"for {len(expected)} models (8e+03 forwards per model" in said(dry)  # 100·(16+64)

    result = run_cli("certify", space, *args, *FINAL)
    assert result.exit_code == 0, result.output
    final = final_id(cert_id[0], FinalPoints(skip=2, stop=200))
    assert f"with {final}; 0 done already" in said(result), result.output
    assert final in declared_settings(read_sweep(exp))
    files = sorted(Path(exp.certify_dir).glob(f"*/{final}/compacted-of-*.parquet"))
    assert sorted(f.parent.parent.name for f in files) == [t for t, _ in expected]
    for f in files:
        assert pq.read_table(f).column("idx").to_pylist() == list(range(0, 200, 2))
    rows = load_results(exp).frame
    assert (rows["cert_id"] == final).sum() == 100 * len(expected)  # counted: declared, sound
    stamps = [f.stat().st_mtime_ns for f in files]

    again = run_cli("certify", space, *args, *FINAL)
    assert again.exit_code == 0, again.output
    assert f"{len(expected)} done already" in said(again)
    assert [f.stat().st_mtime_ns for f in files] == stamps  # nothing computed again
    dry = run_cli("certify", space, *args, *FINAL, "--dry-run")
    assert "final step left ≈ 0 core-hours for 0 models" in said(dry)

    # The views: the selection's envelope with the final numbers beside it, the points named.
    shown = run_cli("envelope", *args, "--radii", "0,0.25", "--format", "csv")
    assert shown.exit_code == 0, shown.output
    table = pd.read_csv(io.StringIO(shown.stdout))
    assert (table["final_cert_id"] == final).all() and (table["final_points"] == 100).all()
    assert (table["points"] == 30).all()  # the selection's: every 15th digit
    for _, row in table.iterrows():
        mine = rows[(rows["trial_id"] == row["trial_id"]) & (rows["cert_id"] == final)]
        certified = mine["correct"].astype(bool) & (mine["radius"] >= row["radius"])
        assert row["final_accuracy"] == pytest.approx(certified.mean())
        assert row["final_best"] >= row["final_accuracy"]
    per_model = run_cli("table", *args, "--radii", "0.25", "--format", "csv")
    models = pd.read_csv(io.StringIO(per_model.stdout))
    assert sorted(models["step"]) == ["final"] * len(expected) + ["selection"] * 3
    assert "final step on every 2-th point of 0–199" in " ".join(shown.stderr.split())


def test_the_final_step_picks_from_what_the_envelope_strategy_certified(copy):
    """`--strategy envelope --final`: the selection under the envelope strategy (its own
    cert_id), then the final step from its rows, under the final cert_id of the same n0, n, α
    without the strategy's tag; status and envelope read both."""
    from test_e2e import run_cli

    space, exp = copy
    args = ["--storage", exp.storage, "--experiment", exp.name, "--strategy", "envelope"]
    result = run_cli("certify", space, *args, "--final", "--final-stop", "60")
    assert result.exit_code == 0, result.output
    rows = load_results(exp).frame
    selection = [c for c in rows["cert_id"].unique() if "_envelope" in c]
    assert len(selection) == 1
    chosen = rows[rows["cert_id"] == selection[0]].reset_index(drop=True)
    expected = to_recertify(final_candidates(chosen, list(DECISION_RADII)))
    final = final_id(selection[0].split("_envelope")[0], FinalPoints(stop=60))
    assert f"final step: {len(expected)} models to re-certify" in said(result)
    finals = rows[rows["cert_id"] == final]
    assert sorted(finals["trial_id"].unique()) == [t for t, _ in expected]
    assert sorted(set(finals["idx"])) == list(range(60))
    status = run_cli("status", "--storage", exp.storage, "--experiment", exp.name)
    assert status.exit_code == 0, status.output
    where = ["--storage", exp.storage, "--experiment", exp.name]
    shown = run_cli(
        "envelope", *where, "--only", "strategy=envelope", "--radii", "0", "--format", "csv"
    )
    assert shown.exit_code == 0, shown.output
    table = pd.read_csv(io.StringIO(shown.stdout))
    assert table["final_cert_id"].tolist() == [final] and table["final_points"].tolist() == [60]
