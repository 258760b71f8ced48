"""Issue 38 §1 on a real experiment: the envelope only over the settings the sweep declared
(sweep.json) and the trials it lists, a trial's config checked against its id everywhere,
pruned models included. The digits smoke sweep of `test_e2e` (Ray, real training and CERTIFY),
copied and forged in each way that once changed what `envelope` and `table` say: each forged
file is self-consistent (its certificates recomputed from its counts, so only the declaration
stops it: declaring it changes the envelope), is named on stderr with why, and the envelope
is the untouched one."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.special import ndtri
from scipy.stats import beta
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import SETTINGS, read_sweep, record_settings, write_sweep
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ConfigError

pytestmark = pytest.mark.e2e
runner = CliRunner()
RADII = "0:2:0.25"


def _read(exp: Experiment, command: str, *extra: str, code: int = 0):
    args = [command, "--radii", RADII, "--format", "csv", *extra]
    result = runner.invoke(app, [*args, "--storage", exp.storage, "--experiment", exp.name])
    assert result.exit_code == code, (result.output, result.exception)
    return pd.read_csv(io.StringIO(result.stdout)), result.stderr.splitlines()


def _accuracy(exp: Experiment) -> tuple[list[float], list[str]]:
    frame, stderr = _read(exp, "envelope")
    return frame["certified_accuracy"].round(9).tolist(), stderr


def _set(table: pa.Table, **columns) -> pa.Table:
    for name, values in columns.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pa.array(values, table.schema.field(name).type))
    return table


def _perfect(t: pa.Table, n: int, alpha: float, sigma: float, cert_id: str) -> pa.Table:
    """Every point right with all n votes, under (n, α, σ): a certificate its counts give."""
    k = t.num_rows
    p = float(beta.ppf(alpha, n, 1))
    return _set(
        t,
        cert_id=[cert_id] * k,
        n=[n] * k,
        alpha=[alpha] * k,
        sigma_cert=[sigma] * k,
        count=[n] * k,
        p_lower=[p] * k,
        radius=[sigma * float(ndtri(p))] * k,
        predict=t.column("label").to_pylist(),
        correct=[True] * k,
    )


@pytest.fixture
def copy(pristine_sweep, tmp_path):
    """A copy of the smoke experiment, its compacted files and its one setting."""
    _, exp = pristine_sweep
    shutil.copytree(exp.root, tmp_path / "e2e")
    copied = Experiment(str(tmp_path), "e2e")
    files = sorted(f.path for f in copied.stage_files("certify") if f.kind == "compacted")
    return copied, files, files[0].split("/")[-2]


def _write_trial(exp: Experiment, real: str, config: dict) -> str:
    """trials/<id>/trial.json as a real one, with `config` (its id: the config's hash, if it
    is one); returns the id."""
    doc = json.loads(Path(exp.trial_dir(real), "trial.json").read_text())
    try:
        tid = TrialConfig.from_dict(config).trial_id
    except ConfigError:  # a config no trial has: any id
        tid = "0123456789ab"
    Path(exp.trial_dir(tid)).mkdir(parents=True, exist_ok=True)
    Path(exp.trial_dir(tid), "trial.json").write_text(json.dumps({**doc, "config": config}))
    return tid


def test_a_made_up_trial_hashed_into_its_own_trial_json_is_left_out(copy):
    exp, files, setting = copy
    before, _ = _accuracy(exp)
    real = files[0].split("/")[-3]
    config = json.loads(Path(exp.trial_dir(real), "trial.json").read_text())["config"]
    fake = TrialConfig.from_dict(config).replace(seed=4242)
    tid = _write_trial(exp, real, fake.to_dict())
    t = pq.read_table(files[0])
    spec = (t.column("n")[0].as_py(), t.column("alpha")[0].as_py(), fake.sigma, setting)
    forged = _set(_perfect(t, *spec), trial_id=[tid] * t.num_rows, seed=[4242] * t.num_rows)
    path = exp.compacted_path("certify", tid, setting, 1)
    Path(path).parent.mkdir(parents=True)
    pq.write_table(forged.replace_schema_metadata(t.schema.metadata), path)
    accuracy, stderr = _accuracy(exp)
    assert accuracy == before
    why = f"not a trial of the sweep (sweep.json lists no trial {tid})"
    assert f"warning: left out {path}: {why}" in stderr
    _read(exp, "envelope", "--strict", code=1)
    doc = read_sweep(exp)  # listed, it would have counted: the listing is what stops it
    write_sweep(exp, {**doc, "trials": [*doc["trials"], fake.to_dict()]})
    assert _accuracy(exp)[0] != before


@pytest.mark.parametrize(
    ("n", "alpha", "sigma", "spelled"),
    [
        (64, 0.01, 100.0, "sigma-100_n0-16_n-64_alpha-0.01_skip-15_max-all"),
        (10**15, 0.5, None, "sigma-train_n0-16_n-1000000000000000_alpha-0.5_skip-15_max-all"),
    ],
)
def test_a_new_setting_directory_for_a_real_trial_is_left_out(copy, n, alpha, sigma, spelled):
    exp, files, setting = copy
    assert setting == "sigma-train_n0-16_n-64_alpha-0.01_skip-15_max-all"
    before, _ = _accuracy(exp)
    t = pq.read_table(files[0])
    forged = _perfect(t, n, alpha, sigma or t.column("sigma_cert")[0].as_py(), spelled)
    path = files[0].replace(f"/{setting}/", f"/{spelled}/")
    Path(path).parent.mkdir(parents=True)
    pq.write_table(forged.replace_schema_metadata(t.schema.metadata), path)
    accuracy, stderr = _accuracy(exp)
    assert accuracy == before
    assert (
        f"warning: left out {path}: a certification setting the sweep never declared (not in "
        "sweep.json: `sweeper certify` with these settings declares it)"
    ) in stderr
    _read(exp, "envelope", "--strict", code=1)
    record_settings(exp, [spelled])  # declared, it would have counted
    assert before[0] < 1.0 and _accuracy(exp)[0][0] == 1.0


def test_deleted_winners_and_their_sweep_entries_are_said_missing(copy):
    exp, _, _ = copy
    frame, stderr = _read(exp, "envelope")
    winner = frame["trial_id"].dropna().iloc[0]
    assert "of the sweep's" not in "\n".join(stderr)
    shutil.rmtree(exp.trial_dir(winner))
    shutil.rmtree(Path(exp.root, "certify", winner))
    doc = read_sweep(exp)
    kept = [d for d in doc["trials"] if TrialConfig.from_dict(d).trial_id != winner]
    write_sweep(exp, {**doc, "trials": kept})
    _, stderr = _read(exp, "envelope")
    assert (
        f"sweep.json's space declares 1 trial its trials list lacks ({winner}): their "
        "results, if any, are left out"
    ) in stderr
    assert "1 of the sweep's 3 trials have no results yet" in stderr


def test_with_the_key_the_reads_say_the_signed_inventory_lists_the_deleted_winner(
    copy, signing_env
):
    """The same deletion read by the key holder: the driver's signed inventory lists the
    winner's results, so the envelope says they are gone (without hashing a file)."""
    exp, _, setting = copy
    frame, stderr = _read(exp, "envelope")
    assert not [line for line in stderr if "signed inventory" in line]
    winner = frame["trial_id"].dropna().iloc[0]
    shutil.rmtree(exp.trial_dir(winner))
    shutil.rmtree(Path(exp.root, "certify", winner))
    _, stderr = _read(exp, "envelope")
    assert (
        f"warning: certify/{winner}/{setting}: in the signed inventory, now absent (deleted)"
        in (stderr)
    )
    assert any("results the signed inventory lists are missing: the envelope" in s for s in stderr)


def _record(points: int) -> dict:
    grid = [0.0, 0.25, 0.5]
    return {"status": "pruned", "radii": grid, "upper": [points] * 3, "points": points}


def test_an_envelope_record_of_a_model_that_never_existed_changes_no_view(copy):
    exp, files, setting = copy
    before, _ = _read(exp, "table")
    real = files[0].split("/")[-3]
    config = json.loads(Path(exp.trial_dir(real), "trial.json").read_text())["config"]
    planted = {}
    # a made-up trial whose trial.json claims columns no config has (ACR 9.99)
    ghost = _write_trial(exp, real, {**config, "acr": 9.99, "seed": 7})
    planted[ghost] = "no trial behind it (trials/0123456789ab/trial.json: not a trial's config"
    # a made-up config hashed into its own trial.json, never in sweep.json
    fake = _write_trial(exp, real, TrialConfig.from_dict(config).replace(seed=99).to_dict())
    planted[fake] = f"not a trial of the sweep (sweep.json lists no trial {fake})"
    for tid in planted:
        Path(exp.certify_dir, tid, setting).mkdir(parents=True)
        Path(exp.envelope_record(tid, setting)).write_text(json.dumps(_record(30)))
    # a real trial, pruned under a setting the sweep never declared
    other = setting.replace("alpha-0.01", "alpha-0.02")
    Path(exp.certify_dir, real, other).mkdir(parents=True)
    Path(exp.envelope_record(real, other)).write_text(json.dumps(_record(30)))
    after, stderr = _read(exp, "table")
    pd.testing.assert_frame_equal(after, before)
    for tid, why in planted.items():
        line = f"warning: left out {exp.envelope_record(tid, setting)}: {why}"
        assert any(x.startswith(line) for x in stderr), (line, stderr)
    assert f"warning: left out {exp.envelope_record(real, other)}: a certification setting" in (
        "\n".join(stderr)
    )
    _read(exp, "table", "--strict", code=1)
    doc = read_sweep(exp)  # the settings recorded do not vouch for a trial never listed
    write_sweep(exp, {**doc, SETTINGS: [setting, other]})
    after, _ = _read(exp, "table")
    assert len(after) == len(before) + 1 and real in set(after["trial_id"])


def test_a_model_vouched_for_by_its_own_import_record_is_left_out(copy):
    """Issue 38's attack: a real trial's rows planted under an `imported-…` setting with an
    import record of their own (the file vouching for itself, each row certifying a radius
    ten times its own). A swept experiment declares no import: named and left out."""
    exp, files, _ = copy
    before, _ = _accuracy(exp)
    table = pq.read_table(files[0])
    real = files[0].split("/")[-3]
    cert_id = "imported-sigma-0.25-n-64-alpha-0.01"
    meta = {**table.schema.metadata, b"sweeper.certify_backend": b"imported from planted.log"}
    radius = [10 * r for r in table.column("radius").to_pylist()]
    forged = _set(table, cert_id=[cert_id] * table.num_rows, radius=radius)
    path = Path(exp.root, "certify", real, cert_id, "compacted-of-00001.parquet")
    path.parent.mkdir(parents=True)
    pq.write_table(forged.replace_schema_metadata(meta), path)
    after, stderr = _accuracy(exp)
    assert after == before
    assert [s for s in stderr if s.startswith(f"warning: left out {path}: ")], stderr
