"""trial.json stores paths relative to the experiment, so a copied or synced experiment still
reads; trial.json files written before (absolute paths) still read too (issue 17)."""

from __future__ import annotations

import json
import shutil

from test_cli import GAUSS, make_experiment
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.results.storage import Experiment
from trainables.kernel.trial_status import experiment_relative, read_status, write_status


def test_paths_inside_the_experiment_become_relative_others_stay():
    assert experiment_relative("/s/e/trials/ab/checkpoint.pt", "/s/e") == "trials/ab/checkpoint.pt"
    assert experiment_relative("/s/e/trials/ab/checkpoint.pt", "/s/e/") == "trials/ab/checkpoint.pt"
    assert experiment_relative("s3://b/x/e/trials/ab/c.pt", "s3://b/x/e") == "trials/ab/c.pt"
    assert experiment_relative("/s/ee/trials/ab/c.pt", "/s/e") == "/s/ee/trials/ab/c.pt"
    assert experiment_relative("/data/pseudo.npz", "/s/e") == "/data/pseudo.npz"


def test_a_copied_experiment_with_old_and_new_trial_json_still_reads(tmp_path):
    exp = make_experiment(tmp_path / "a")
    gauss_dir = exp.trial_dir(GAUSS.trial_id)
    old = {
        **read_status(gauss_dir),
        "checkpoint": f"{exp.root}/trials/{GAUSS.trial_id}/checkpoint.pt",
    }
    (tmp_path / "a" / exp.name / "trials" / GAUSS.trial_id / "trial.json").write_text(
        json.dumps(old)
    )
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    copy = Experiment(str(tmp_path / "b"), exp.name)
    result = CliRunner().invoke(
        app, ["status", "--storage", copy.storage, "--experiment", copy.name, "--all"]
    )
    assert result.exit_code == 0, result.output
    assert GAUSS.trial_id in result.output and "finished" in result.output
    relative = f"trials/{GAUSS.trial_id}/checkpoint.pt"
    write_status(copy.trial_dir(GAUSS.trial_id), GAUSS, "finished", 1, {}, checkpoint=relative)
    assert read_status(copy.trial_dir(GAUSS.trial_id))["checkpoint"] == relative
