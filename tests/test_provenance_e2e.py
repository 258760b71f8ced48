"""Issue 25 §2 on a real experiment: the digits smoke sweep (Ray, real training and CERTIFY),
copied and tampered in each way that once changed the envelope. Each time the tampered file is
named on stderr with why, the envelope is what it is without that file (a new model's files:
the untampered envelope), and `--strict` exits 1."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import norm
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.results.certify_rows import MEMORY_SCHEMA
from sweeper.results.storage import MEMORY, Experiment

pytestmark = pytest.mark.e2e
runner = CliRunner()
RADII = "0:1:0.125"


def _envelope(exp: Experiment, *extra: str, code: int = 0) -> tuple[list[float], str]:
    args = ["envelope", "--radii", RADII, "--format", "csv", *extra]
    result = runner.invoke(app, [*args, "--storage", exp.storage, "--experiment", exp.name])
    assert result.exit_code == code, (result.output, result.exception)
    accuracy = pd.read_csv(io.StringIO(result.stdout))["certified_accuracy"].round(9).tolist()
    return accuracy, result.stderr


def _set(table: pa.Table, **columns) -> pa.Table:
    for name, values in columns.items():
        field = table.schema.field(name)
        table = table.set_column(
            table.schema.get_field_index(name), name, pa.array(values, field.type)
        )
    return table


def _rewrite(path: str, change) -> None:
    table = pq.read_table(path)
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), path)


def _extra_points(t: pa.Table) -> pa.Table:  # its points moved beyond digits' 450
    # (as many rows as the grid has: more would be refused from the footer, unread)
    return _set(t, idx=list(range(1001, 1001 + t.num_rows)))


def _sigma_100(t: pa.Table) -> pa.Table:
    p = t.column("p_lower").to_pylist()
    return _set(
        t, sigma_cert=[100.0] * len(p), radius=[100 * norm.ppf(x) if x >= 0.5 else 0.0 for x in p]
    )


def _radius_03(t: pa.Table) -> pa.Table:
    keep = [y != -1 for y in t.column("predict").to_pylist()]
    return _set(
        t,
        radius=[0.3 if k else 0.0 for k in keep],
        p_lower=[
            0.5 if k else p for k, p in zip(keep, t.column("p_lower").to_pylist(), strict=True)
        ],
    )


TAMPERED_MODEL = {  # a model's compacted file changed: (change, why it is left out)
    "extra points": (_extra_points, "a test point outside the data set's test split"),
    "point 10^12": (
        lambda t: _set(t, idx=[10**12, *t.column("idx").to_pylist()[1:]]),
        "a test point outside the data set's test split",
    ),
    "n = -1": (lambda t: _set(t, n=[-1] * t.num_rows), "n is not the one its cert_id names"),
    "alpha = 1": (
        lambda t: _set(t, alpha=[1.0] * t.num_rows),
        "alpha is not the one its cert_id names",
    ),
    "sigma_cert 100": (_sigma_100, "sigma_cert is not the one its cert_id names"),
    "r = 0.3, p_lower = 0.5": (_radius_03, "a p_lower its count, n and alpha do not give"),
}


def _envelope_without(exp: Experiment, target: str, tmp_path: Path) -> list[float]:
    """The envelope of a copy of `exp` without the results file `target` (read from the files)."""
    shutil.copytree(exp.root, tmp_path / "without" / "e2e")
    without = Experiment(str(tmp_path / "without"), "e2e")
    Path(without.cache_path("certify")).unlink()
    Path(without.root, target[len(exp.root) + 1 :]).unlink()
    return _envelope(without)[0]


@pytest.fixture
def copy(pristine_sweep, tmp_path):
    """A copy of the smoke experiment (the sweep's own stays untouched), its compacted files."""
    _, exp = pristine_sweep
    shutil.copytree(exp.root, tmp_path / "e2e")
    copied = Experiment(str(tmp_path), "e2e")
    files = sorted(f.path for f in copied.stage_files("certify") if f.kind == "compacted")
    return copied, files


@pytest.mark.parametrize("case", list(TAMPERED_MODEL))
def test_a_tampered_model_is_left_out_named_and_strict_fails(copy, tmp_path, case):
    exp, files = copy
    change, why = TAMPERED_MODEL[case]
    target = files[0]
    expected = _envelope_without(exp, target, tmp_path)
    _rewrite(target, change)
    accuracy, stderr = _envelope(exp)
    assert accuracy == expected
    assert f"warning: left out {target}: {why}" in stderr.splitlines()
    assert _envelope(exp, "--strict", code=1)[0] == expected


def test_new_files_no_certification_wrote_change_nothing(copy):
    """A self-consistent model under a trial_id no trial.json stands behind; the cache edited
    at its size and then appended to; a legacy memory file naming a compacted, cached model
    (radius 1000) placed under another model's directory."""
    exp, files = copy
    before, _ = _envelope(exp)
    model = pq.read_table(files[0])
    fake = "0123456789ab"
    setting = files[0].split("/")[-2]
    fake_path = f"{exp.root}/certify/{fake}/{setting}/compacted-of-00001.parquet"
    Path(fake_path).parent.mkdir(parents=True)
    pq.write_table(_set(model, trial_id=[fake] * model.num_rows), fake_path)
    cache = exp.cache_path("certify")
    _rewrite(cache, lambda t: _set(t, radius=[r * 3 for r in t.column("radius").to_pylist()]))
    trial = files[1].split("/")[-3]
    memory_path = f"{exp.root}/certify/{trial}/{setting}_ddrs-K1-lr0.1-n1-min0.001/{MEMORY}"
    Path(memory_path).parent.mkdir(parents=True)
    k = model.num_rows
    memory = {
        "trial_id": model.column("trial_id").to_pylist(),
        "cert_id": [setting] * k,
        "idx": model.column("idx").to_pylist(),
        "predict_memory": model.column("label").to_pylist(),
        "radius_memory": [1000.0] * k,
        "correct_memory": [True] * k,
        "memory_changed": [True] * k,
    }
    pq.write_table(pa.Table.from_pydict(memory, schema=MEMORY_SCHEMA), memory_path)
    accuracy, stderr = _envelope(exp)
    assert accuracy == before
    lines = stderr.splitlines()
    assert (
        f"warning: left out {fake_path}: no trial behind it (no trials/{fake}/trial.json)" in lines
    )
    assert (
        f"warning: left out {cache}: its rows are not those it was written with; reading the files instead"
        in lines
    )
    assert (
        f"warning: left out {memory_path}: rows of another model than the one whose directory holds it"
        in lines
    )
    assert _envelope(exp, "--strict", code=1)[0] == before
    _rewrite(cache, lambda t: pa.concat_tables([t, t.slice(0, 5)]))  # appended rows
    accuracy, stderr = _envelope(exp)
    assert accuracy == before and f"{cache}: " in stderr, stderr


# ------------------------------------------------------------------ under the key (issue 38)
def _labels_are_predictions(t: pa.Table) -> pa.Table:
    predict = t.column("predict").to_pylist()
    return _set(t, label=[max(p, 0) for p in predict], correct=[p != -1 for p in predict])


def _resigned(t: pa.Table) -> pa.Table:  # rows vouched for by the forger's own key
    from sweeper.results.attested_rows import signed
    from trainables.kernel.attestation import SigningKey

    return signed(t, SigningKey.generate(), "compact", {}, {})


ATTESTED_FORGERIES = {  # self-consistent: only the key tells them (each: why it is left out)
    "cut to 3 points": (lambda t: t.slice(0, 3), "its rows are not the ones its attestation"),
    "labels set to the predictions": (_labels_are_predictions, "its rows are not the ones"),
    "rows signed by another key": (_resigned, "not signed by this key"),
}


@pytest.mark.parametrize("case", list(ATTESTED_FORGERIES))
def test_with_the_key_a_self_consistent_forgery_is_left_out_named(
    copy, tmp_path, case, signing_env
):
    """Issue 38: a compacted file cut short, its labels set to its predictions, or its rows
    signed with a forger's own key: consistent with themselves, each read with the sweep's
    key is named and left out, and the envelope is the one without it."""
    exp, files = copy
    change, why = ATTESTED_FORGERIES[case]
    target = files[0]
    expected = _envelope_without(exp, target, tmp_path)
    table = pq.read_table(target)
    pq.write_table(change(table), target)
    Path(exp.cache_path("certify")).unlink()  # the rows are read from the files
    accuracy, stderr = _envelope(exp)
    assert accuracy == expected
    [line] = [s for s in stderr.splitlines() if s.startswith(f"warning: left out {target}: ")]
    assert why in line, line


def test_with_the_key_an_unattested_model_is_marked_and_attested_only_leaves_it_out(
    copy, tmp_path, signing_env
):
    """The statement stripped from a model's file (as one made without a key, or planted):
    counted, its winning numbers marked †; --attested-only gives the envelope without it."""
    from sweeper.results.attested_rows import unsigned_metadata

    exp, files = copy
    before, _ = _envelope(exp)
    target = files[0]
    expected = _envelope_without(exp, target, tmp_path)
    table = pq.read_table(target)
    pq.write_table(table.replace_schema_metadata(unsigned_metadata(table.schema.metadata)), target)
    Path(exp.cache_path("certify")).unlink()
    accuracy, stderr = _envelope(exp)
    assert accuracy == before
    assert "1 model rest on unattested files (made without a key, or planted): counted" in stderr
    assert _envelope(exp, "--attested-only")[0] == expected


def test_with_the_key_a_replaced_checkpoint_is_never_certified(
    pristine_sweep, tmp_path, signing_env
):
    """Issue 38's attack on a real experiment: a trial's checkpoint.pt replaced by another
    model (here: another trial's, itself genuine), its certify folder removed, then `sweeper
    certify` by the key holder: the task refuses the checkpoint (no row of it is written),
    the run exits 1 naming why, and the envelope is the one without that model."""
    space, pristine = pristine_sweep
    shutil.copytree(pristine.root, tmp_path / "e2e")
    exp = Experiment(str(tmp_path), "e2e")
    victim, donor = sorted(p.name for p in Path(exp.root, "trials").iterdir())[:2]
    shutil.copytree(exp.root, tmp_path / "without" / "e2e")
    without = Experiment(str(tmp_path / "without"), "e2e")
    shutil.rmtree(Path(without.root, "certify", victim))
    Path(without.cache_path("certify")).unlink()
    expected, _ = _envelope(without)
    shutil.copy(exp.checkpoint(donor), exp.checkpoint(victim))
    shutil.rmtree(Path(exp.root, "certify", victim))
    Path(exp.cache_path("certify")).unlink()
    args = ["certify", str(space), "--storage", exp.storage, "--experiment", exp.name]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "not the ones its training attested" in result.output.replace("\n", " ")
    assert not list(Path(exp.root, "certify", victim).rglob("*.parquet"))
    assert _envelope(exp)[0] == expected
