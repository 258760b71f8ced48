"""`Sweep.read()` returns a `Reading` (issue 41 §1, as Ray Tune's `ResultGrid`): the rows read
once, every view built on it giving the command line's numbers, the files left out, and per
trial a `TrialResult` (config, metrics, checkpoint path, status, certification per setting)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_cli_reads import CERT, PENDING, POINTS, G, S, make, write_shard
from typer.testing import CliRunner

from sweeper import Sweep
from sweeper.api.reading import Reading
from sweeper.cli import app
from sweeper.results.storage import Experiment
from trainables.kernel.errors import ProblemsError

runner = CliRunner()
RADII = [0.0, 0.25, 0.5]


@pytest.fixture
def exp(tmp_path) -> Experiment:
    """G and S certified (4 points each), the sweep planned G, S and PENDING (never run)."""
    return make(tmp_path, trials=(G, S, PENDING))


def command_csv(exp: Experiment, *args: str) -> pd.DataFrame:
    where = ["--storage", exp.storage, "--experiment", exp.name]
    result = runner.invoke(app, [*args, *where, "--format", "csv"])
    assert result.exit_code == 0, result.output
    return pd.read_csv(io.StringIO(result.stdout))


def test_read_returns_a_reading_whose_views_are_the_commands(exp):
    read = Sweep(storage=exp.storage, experiment=exp.name).read()
    assert isinstance(read, Reading) and read.exp == exp and read.unsound == 0
    assert read.left_out == [] and read.unsound_models == 0 and read.only is None
    assert len(read.get_dataframe()) == 8 and read.models() == 2
    radii = ",".join(f"{r:g}" for r in RADII)
    envelope = read.envelope(RADII)
    cli = command_csv(exp, "envelope", "--radii", radii)
    assert list(envelope.columns) == list(cli.columns)
    assert envelope["certified_accuracy"].tolist() == cli["certified_accuracy"].tolist()
    assert (
        envelope["trial_id"].tolist()
        == cli["trial_id"].tolist()
        == [
            G.trial_id,
            S.trial_id,
            S.trial_id,
        ]
    )
    table = read.table(RADII)
    assert table["acr"].tolist() == pytest.approx(
        command_csv(exp, "table", "--radii", radii)["acr"].tolist()
    )
    c = read.coverage()
    assert (c.models, c.trials, c.points, c.planned, c.absent) == (2, 2, 8, 3, 1)
    assert read.guarantee_notes(RADII) == []  # full certification: nothing to qualify


def test_each_trial_is_a_result_with_its_config_metrics_checkpoint_status_and_settings(exp):
    Path(exp.checkpoint(G.trial_id)).write_bytes(b"weights")
    read = Sweep(storage=exp.storage, experiment=exp.name).read()
    assert len(read) == 3 and [r.trial_id for r in read] == [
        G.trial_id,
        S.trial_id,
        PENDING.trial_id,
    ]
    g = read[G.trial_id]
    assert g.config == G.to_dict() and g.status == "finished" and g.metrics == {}
    assert g.checkpoint == exp.checkpoint(G.trial_id) and g.path == exp.trial_dir(G.trial_id)
    (setting,) = g.certification.values()
    assert setting.cert_id == CERT.cert_id and setting.points == 4 and setting.sound
    assert setting.clean_accuracy == 0.75  # 3 of G's 4 points predicted right
    assert setting.acr == pytest.approx(
        read.table(RADII).set_index("trial_id").at[G.trial_id, "acr"]
    )
    assert setting.missing_shards == () and setting.attested is None  # no key here
    s, pending = read[1], read[PENDING.trial_id]
    assert s.checkpoint is None and s.certification[CERT.cert_id].clean_accuracy == 0.5
    assert (pending.status, pending.certification, pending.metrics) == ("pending", {}, {})
    with pytest.raises(KeyError, match="no trial 'nope' in exp"):
        read["nope"]


def test_the_slice_is_read_once_and_every_view_and_trial_is_the_slices(exp):
    read = Sweep(storage=exp.storage, experiment=exp.name, only="method=gaussian").read()
    assert read.only == "method=gaussian" and read.selection == {"method": "gaussian"}
    assert set(read.frame["trial_id"]) == {G.trial_id}
    assert [r.trial_id for r in read] == [G.trial_id, PENDING.trial_id]  # the slice's trials
    assert read.envelope([0.0])["trial_id"].tolist() == [G.trial_id]
    with pytest.raises(ProblemsError, match="--only method=nope matches no model"):
        Sweep(storage=exp.storage, experiment=exp.name, only="method=nope").read()
    with pytest.raises(ProblemsError, match="not a results column"):
        read.envelope([0.0], by="nope")  # bad input: one ProblemsError, as the command's


def test_files_left_out_and_trials_without_a_sweep_are_said(exp):
    bad = exp.shard_path("0123456789ab", CERT.cert_id, 0, 1)
    Path(bad).parent.mkdir(parents=True)
    pq.write_table(pa.table({"idx": [0, 1]}), bad)  # readable, not a results file
    read = Sweep(storage=exp.storage, experiment=exp.name).read()
    assert [line.partition(": ")[0] for line in read.left_out] == [bad]
    # results without a sweep.json (as imported ones): their trials are results all the same
    other = Experiment(exp.storage, "imported")
    write_shard(other, G, POINTS[G])
    (result,) = Sweep(storage=exp.storage, experiment="imported").read()
    assert (result.trial_id, result.status) == (G.trial_id, "imported")
    assert result.config["sigma"] == G.sigma and result.config["method"] == "gaussian"


def test_report_and_compact_through_sweep_are_the_commands(exp):
    sweep = Sweep(storage=exp.storage, experiment=exp.name)
    written = sweep.report(RADII, figure_formats=("svg",))
    assert written[-1].endswith("reports/index.md") and all(Path(w).exists() for w in written)
    where = ["--storage", exp.storage, "--experiment", exp.name]
    result = runner.invoke(app, ["report", *where, "--radii", "0,0.25,0.5", "--formats", "svg"])
    assert result.exit_code == 0 and result.stdout.splitlines() == written
    lines = sweep.compact()
    assert lines[0] == "certify: compacted 2 models, 0 not complete; the cache holds 2 models"
    again = runner.invoke(app, ["compact", *where]).stdout.splitlines()  # nothing left to fold
    assert again[0] == "certify: compacted 0 models, 0 not complete; the cache holds 2 models"
    assert len(again) == len(lines)
