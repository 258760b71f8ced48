"""End-to-end sweeps on a local Ray (2 CPUs, one fake GPU): train, certify, resume, pack."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.results import envelope as env
from sweeper.results.certify_rows import SCHEMA, load_results
from sweeper.results.storage import Experiment
from sweeper.run.tune_names import readable
from trainables import checkpoint
from trainables.kernel.trial_hooks import FAULT_ENV
from trainables.kernel.trial_status import read_status

pytestmark = pytest.mark.e2e

SPACE = """
fixed: {dataset: digits, epochs: 2, batch_size: 64, train_subset: 128, eval_subset: 60, lr: 0.05, warmup_epochs: 1}
grids:
  - name: sa
    fixed: {method: smoothadv, attack: pgd, steps: 1, m_train: 1}
    axes: {sigma: [0.25, 0.5], epsilon: [0.25]}
  - name: g
    fixed: {method: gaussian}
    axes: {sigma: [0.25]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 64, alpha: 0.01, skip: 15, max_points: null, batch_size: 64, shard_size: 10}
"""
POINTS = 30  # 450 digits test images, every 15th
SHARDS = 3


def write_space(tmp_path, text=SPACE, name="tiny.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def run_cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return result


def test_every_trained_model_is_attested_and_the_key_is_nowhere_in_the_experiment(
    finished_sweep, signing_key
):
    """Issue 38: each finished trial's training statement, signed by the session's key, binds
    the checkpoint's bytes on storage to the trial's config; the secret is in no file."""
    from trainables.attestations import attestation_path, config_digest
    from trainables.kernel.attestation import PublicKey, sha256_file

    space, exp = finished_sweep
    public = PublicKey.from_pem(signing_key.public.pem())
    for cfg in expand(load_space(str(space))):
        envelope = json.loads(
            Path(attestation_path(exp.trial_dir(cfg.trial_id), "train")).read_text()
        )
        statement = public.verify(envelope)
        assert statement.step == "train" and statement.settings["trial_id"] == cfg.trial_id
        assert statement.inputs == {"config": config_digest(cfg)}
        assert statement.outputs == {"checkpoint.pt": sha256_file(exp.checkpoint(cfg.trial_id))}
    public_pem = Path(exp.storage).parent / "public.pem"
    public_pem.write_bytes(signing_key.public.pem())
    verified = run_cli(
        "verify", "--storage", exp.storage, "--experiment", exp.name, "--public-key", public_pem
    )
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.splitlines()[-1].endswith(
        " files attested, 0 unattested, 0 failed; signed inventory version 1"
    )
    secret = "".join(signing_key.pem().decode().splitlines()[1:-1]).encode()
    files = [p for p in Path(exp.storage).rglob("*") if p.is_file()]
    assert files and not [p for p in files if secret[:40] in p.read_bytes()]


def test_sweep_writes_checkpoints_and_shards(finished_sweep):
    space, exp = finished_sweep
    trials = expand(load_space(str(space)))
    assert len(trials) == 3
    for cfg in trials:
        status = read_status(exp.trial_dir(cfg.trial_id))
        assert status["state"] == "finished" and status["epoch"] == 2
        payload = checkpoint.load(exp.checkpoint(cfg.trial_id))
        assert payload["epoch"] == 2 and payload["config"] == cfg.to_dict()
        assert len(payload["history"]) == 2
    results = load_results(exp)
    # Each model's shards were folded into one compacted file, and those into the cache.
    assert len(results.files) == 3 and not results.missing_shards and not results.invalid
    assert all(f.endswith(f"compacted-of-{SHARDS:05d}.parquet") for f in results.files)
    assert not list(Path(exp.certify_dir).rglob("shard-*.parquet"))
    assert Path(exp.cache_path("certify")).is_file()
    assert pq.read_schema(results.files[0]).remove_metadata() == SCHEMA
    frame = results.frame
    assert len(frame) == 3 * POINTS
    assert not frame.duplicated(["trial_id", "idx"]).any()
    assert sorted(frame["idx"].unique()) == list(range(0, 450, 15))
    assert set(frame["trial_id"]) == {t.trial_id for t in trials}
    assert (frame.loc[frame["predict"] == -1, "radius"] == 0).all()


def test_tune_folders_and_trial_json_name_sweepers_trials(finished_sweep):
    """Tune's trial folders are `<trial_id>_<readable config>`, its progress.csv names the
    sweeper trial, and trial.json's checkpoint is relative to the experiment."""
    space, exp = finished_sweep
    trials = {t.trial_id: t for t in expand(load_space(str(space)))}
    folders = [p for p in Path(exp.tune_dir).glob("run-*/*") if p.is_dir()]
    assert sorted(p.name for p in folders) == sorted(
        f"{t}_{readable(c)}" for t, c in trials.items()
    )
    for folder in folders:
        trial_id = folder.name.split("_")[0]
        progress = pd.read_csv(folder / "progress.csv")
        assert set(progress["sweeper_trial_id"]) == {trial_id}
        assert (
            read_status(exp.trial_dir(trial_id))["checkpoint"] == f"trials/{trial_id}/checkpoint.pt"
        )
    assert {readable(c) for c in trials.values()} == {
        "smoothadv_pgd_sigma=0.25_eps=0.25_T=1_m=1",
        "smoothadv_pgd_sigma=0.5_eps=0.25_T=1_m=1",
        "gaussian_sigma=0.25_m=1",
    }


def test_envelope_is_max_of_curves_and_non_increasing(finished_sweep):
    _, exp = finished_sweep
    frame = load_results(exp).frame
    radii = env.parse_radii("0:1.5:0.05")
    table = env.envelope(frame, radii)
    curves = env.certified_accuracy(frame, radii)
    assert np.allclose(table["certified_accuracy"], curves.max(axis=0).to_numpy())
    assert (np.diff(table["certified_accuracy"]) <= 1e-12).all()
    assert table["certified_accuracy"].iloc[0] > 0.1


def test_second_run_redoes_nothing(finished_sweep):
    space, exp = finished_sweep
    before = {f: Path(f).read_bytes() for f in load_results(exp).files}
    ckpts = {
        t.trial_id: Path(exp.checkpoint(t.trial_id)).read_bytes()
        for t in expand(load_space(str(space)))
    }
    result = run_cli("run", "grid", space, "--storage", exp.storage, "--experiment", "e2e")
    assert result.exit_code == 0, result.output
    assert "3 finished" in result.output
    assert "nothing to do: all 3 trials are trained and certified" in result.output  # no Ray
    assert {f: Path(f).read_bytes() for f in load_results(exp).files} == before
    assert {t: Path(exp.checkpoint(t)).read_bytes() for t in ckpts} == ckpts


def test_certify_with_other_settings_adds_rows(finished_sweep):
    space, exp = finished_sweep
    old = load_results(exp).frame
    result = run_cli(
        "certify",
        space,
        "--storage",
        exp.storage,
        "--experiment",
        "e2e",
        "--n",
        "32",
        "--max-points",
        "10",
    )
    assert result.exit_code == 0, result.output
    new = load_results(exp).frame
    assert len(new) == len(old) + 3 * 10
    assert set(new["n"]) == {64, 32}
    assert new["cert_id"].nunique() == 2


def test_failed_trial_exits_nonzero_and_resume_continues(ray_session, tmp_path, monkeypatch):
    space = write_space(tmp_path)
    trials = expand(load_space(str(space)))
    victim = trials[1].trial_id
    store = tmp_path / "store"
    monkeypatch.setenv(FAULT_ENV, f"{victim}:1")
    first = run_cli(
        "run", "grid", space, "--storage", store, "--experiment", "r", "--max-failures", "0"
    )
    assert first.exit_code == 1, first.output
    assert "failures" in first.output and victim in first.output
    exp = Experiment(str(store), "r")
    assert read_status(exp.trial_dir(victim))["state"] == "failed"
    assert checkpoint.load(exp.checkpoint(victim))["epoch"] == 1
    survivors = {
        t.trial_id: Path(exp.checkpoint(t.trial_id)).read_bytes()
        for t in trials
        if t.trial_id != victim
    }
    first_epoch = checkpoint.load(exp.checkpoint(victim))["history"][0]

    monkeypatch.delenv(FAULT_ENV)
    second = run_cli("run", "grid", space, "--storage", store, "--experiment", "r")
    assert second.exit_code == 0, second.output
    assert "1 to resume" in second.output
    payload = checkpoint.load(exp.checkpoint(victim))
    assert payload["epoch"] == 2 and payload["history"][0] == first_epoch
    assert {t: Path(exp.checkpoint(t)).read_bytes() for t in survivors} == survivors
    frame = load_results(exp).frame
    assert len(frame) == 3 * POINTS and not frame.duplicated(["trial_id", "idx"]).any()


PACK = 4  # trials of {cpu: 0.5, gpu: 0.25} the session's Ray (2 CPUs, 1 GPU) holds at once


def packed_trial(config: dict, experiment_root: str) -> None:
    """The real trainable, entered only once all PACK trials are running at the same time:
    each trial leaves a file beside the storage and waits until PACK files exist. If the
    launcher asked for whole GPUs (or Tune started fewer trials), they never would all run at
    once and the trial fails with that message. The wait is on files, not on time."""
    import time as clock

    from trainables.kernel.config import TrialConfig
    from trainables.tune_trial import run_trial

    barrier = Path(experiment_root).parent.parent / "running"  # beside the storage
    barrier.mkdir(exist_ok=True)
    (barrier / TrialConfig.from_dict(config["trial"]).trial_id).touch()
    deadline = clock.monotonic() + 300  # a hang guard: a failed trial names the problem
    while len(list(barrier.iterdir())) < PACK:
        if clock.monotonic() > deadline:
            raise RuntimeError(f"only {len(list(barrier.iterdir()))} of {PACK} trials ran at once")
        clock.sleep(0.2)
    run_trial(config, experiment_root)


def test_fractional_gpus_pack_four_trials(ray_session, tmp_path):
    """0.25 GPU and 0.5 CPU per trial on 1 GPU and 2 CPUs: Ray must run all four at once
    (the trials wait for each other before training, so this holds however fast they are)."""
    from ray import cloudpickle

    from sweeper.plan.spec import Resources
    from sweeper.run.launch import DataPlane, run_sweep
    from sweeper.run.launch_options import LaunchOptions

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    space = write_space(tmp_path, SPACE.replace("sigma: [0.25, 0.5]", "sigma: [0.25, 0.5, 1.0]"))
    spec = load_space(str(space))
    trials = expand(spec)
    assert len(trials) == PACK
    running, peak = set(), [0]

    def on_event(event):
        if event.kind == "trial_started":
            running.add(event.trial_id)
            peak[0] = max(peak[0], len(running))
        elif event.kind in ("trial_finished", "trial_failed"):
            running.discard(event.trial_id)

    exp = Experiment(str(tmp_path / "store"), "pack")
    options = LaunchOptions(max_failures=0)
    outcome = run_sweep(
        exp,
        trials,
        [],
        spec.certify,
        Resources(cpu=0.5, gpu=0.25),
        options,
        on_event,
        plane=DataPlane(trainable=packed_trial),
    )
    assert not outcome.failed and not outcome.interrupted, outcome.failed
    assert peak[0] == PACK  # every trial started before any finished
    assert sorted(p.name for p in (tmp_path / "running").iterdir()) == sorted(
        t.trial_id for t in trials
    )
    for cfg in trials:
        assert read_status(exp.trial_dir(cfg.trial_id))["state"] == "finished"
    assert len(load_results(exp).frame) == PACK * POINTS


def test_digits_methods_sweep_gives_one_curve_per_method(ray_session, tmp_path):
    store = tmp_path / "store"
    args = ["digits-methods", "--smoke", "--only", "sigma=0.25", "--storage", store]
    result = run_cli("run", "grid", *args)
    assert result.exit_code == 0, result.output
    frame = load_results(Experiment(str(store), "digits-methods-smoke")).frame
    per_method = frame.groupby("method")["trial_id"].nunique().to_dict()
    expected = {
        "gaussian": 1,
        "smoothadv": 1,
        "smoothmix": 2,
        "macer": 1,
        "consistency": 1,
        "stability": 1,
    }
    assert per_method == expected
    assert frame.groupby("trial_id").size().eq(20).all()
    table = run_cli("table", "--storage", store, "--format", "csv", "--radii", "0,0.25")
    assert table.exit_code == 0, table.output
    lines = [ln for ln in table.stdout.splitlines() if ln and not ln.startswith("experiment:")]
    assert lines[0].startswith("trial_id,method,") and "acr" in lines[0]
    assert len(lines) == 1 + 7
    assert {ln.split(",")[1] for ln in lines[1:]} == set(expected)


def test_certify_ddrs_adds_sound_data_dependent_rows(finished_sweep):
    space, exp = finished_sweep
    args = ["--storage", exp.storage, "--experiment", "e2e", "--max-points", "10"]
    result = run_cli(
        "certify", space, *args, "--ddrs", "--ddrs-iterations", "3", "--ddrs-lr", "0.01"
    )
    assert result.exit_code == 0, result.output
    frame = load_results(Experiment(exp.storage, "e2e")).frame
    dependent = frame[frame["smoothing"] == "data-dependent"]
    assert len(dependent) == 3 * 10 and dependent["sound"].all()
    # The memory pass ran before compaction: raw certificates kept beside the sound ones.
    assert dependent["memory_changed"].notna().all() and dependent["radius_raw"].notna().all()
    assert (dependent["radius"] <= dependent["radius_raw"] + 1e-12).all()
    assert dependent.groupby("trial_id")["sigma_cert"].nunique().gt(1).all()  # σ_x per point
    fixed = frame[
        (frame["smoothing"] == "fixed")
        & (frame["cert_id"].isin(set(dependent["cert_id"].str.rsplit("_ddrs", n=1).str[0])))
    ]
    assert len(fixed) == 3 * 10  # the same settings at fixed σ, side by side
    table = env.envelope(frame, [0.0, 0.25], "smoothing")
    assert set(table["smoothing"]) == {"fixed", "data-dependent"}
    # Read outside sweeper (docs/guide/reading-results.md): DuckDB over the storage's glob of
    # compacted files gives the envelope's certified accuracies, DDRS ones sound.
    duckdb = pytest.importorskip("duckdb")
    exp = Experiment(exp.storage, "e2e")
    for r in (0.0, 0.25):
        got = dict(
            duckdb.execute(f"""
            SELECT smoothing, max(accuracy) FROM (
              SELECT smoothing, trial_id, cert_id, avg((correct AND radius >= {r})::INTEGER) AS accuracy
              FROM read_parquet('{exp.glob()}') GROUP BY ALL) GROUP BY smoothing""").fetchall()
        )
        want = env.envelope(frame, [r], "smoothing").set_index("smoothing")["certified_accuracy"]
        assert got == pytest.approx(want.to_dict())


SPACE_DDRS = SPACE.replace(
    "certify: {n0: 16, n: 64,", "certify: {ddrs: {iterations: 2, lr: 0.01}, n0: 16, n: 64,"
).replace("sigma: [0.25, 0.5]", "sigma: [0.25]")


def test_space_with_ddrs_certifies_both_ways(ray_session, tmp_path):
    space = write_space(tmp_path, SPACE_DDRS)
    result = run_cli("run", "grid", space, "--storage", tmp_path / "store", "--experiment", "dd")
    assert result.exit_code == 0, result.output
    frame = load_results(Experiment(str(tmp_path / "store"), "dd")).frame
    counts = frame.groupby("smoothing").size().to_dict()
    assert counts == {"fixed": 2 * POINTS, "data-dependent": 2 * POINTS}
    assert frame["sound"].all()


def test_certify_refuses_to_mix_shard_sizes(finished_sweep, tmp_path):
    """A compacted model is complete whatever shard size certifies it next; a model half
    certified in one shard size is refused another (its rows would count twice)."""
    space, exp = finished_sweep
    before = sorted(load_results(exp).files)
    args = ["--storage", exp.storage, "--experiment", "e2e", "--shard-size", "7"]
    result = run_cli("certify", space, *args)
    assert result.exit_code == 0, result.output
    assert sorted(load_results(exp).files) == before
    partial = Experiment(str(tmp_path), "e2e")  # the same experiment, one model half certified
    shutil.copytree(exp.root, partial.root)
    done = next(Path(partial.certify_dir).glob(f"*/*max-all/compacted-of-{SHARDS:05d}.parquet"))
    table = pq.read_table(done)
    pq.write_table(table.slice(0, 10), done.with_name(f"shard-00000-of-{SHARDS:05d}.parquet"))
    done.unlink()
    Path(partial.cache_path("certify")).unlink()
    result = run_cli(
        "certify", space, "--storage", partial.storage, "--experiment", "e2e", "--shard-size", "7"
    )
    assert result.exit_code == 1, result.output
    assert "use the shard_size used before" in result.output.replace("\n", " ")
