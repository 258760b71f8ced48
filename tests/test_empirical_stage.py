"""The empirical robustness stage: SmoothAdv-PGD + PREDICT shards on a trained digits model,
their Parquet rows, the `empirical:` block of a space, `sweeper empirical` on bad input and
`sweeper envelope --empirical` (table column and dashed curve). The task function runs
directly here; the e2e test runs the command on the session's local Ray."""

from __future__ import annotations

import io
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space, parse_spec
from sweeper.plan.spec import CertifySpec, EmpiricalSpec
from sweeper.results import empirical_rows
from sweeper.results.certify_rows import ResultsError
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from sweeper.run import empirical_stage as emp
from sweeper.run import shards
from sweeper.run.certify_stage import CERTIFY
from trainables.attestations import attest_training
from trainables.kernel.trial_status import write_status
from trainables.train import fit

runner = CliRunner()
SPACE = """
fixed: {dataset: digits, method: gaussian, m_train: 1, epochs: 4, batch_size: 64, lr: 0.02, eval_subset: 64}
grids:
  - name: g
    axes: {sigma: [0.25, 0.5]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 16, n: 100, alpha: 0.001, skip: 15, max_points: null, batch_size: 400, shard_size: 10}
empirical: {epsilons: [0, 0.5, 1.0], m_test: [1, 8], steps: 5, batch_size: 400}
"""
POINTS, SHARDS = 30, 3  # every 15th of the 450 digits test images, 10 per shard


@pytest.fixture(scope="module")
def setup(tmp_path_factory, signing_key):
    """An experiment laid out as a sweep leaves it: sweep.json, and the σ = 0.25 trial trained
    (trials/<id>/checkpoint.pt, trial.json "finished") and certified; σ = 0.5 never ran."""
    tmp = tmp_path_factory.mktemp("empirical")
    space = tmp / "tiny.yaml"
    space.write_text(textwrap.dedent(SPACE))
    spec = load_space(str(space))
    trials = expand(spec)
    exp = Experiment(str(tmp / "store"), "tiny")
    write_sweep(exp, {"space": {}, "trials": [t.to_dict() for t in trials]})
    cfg = trials[0]
    state = fit(cfg, exp.checkpoint(cfg.trial_id), device=torch.device("cpu"))
    attest_training(
        exp.trial_dir(cfg.trial_id), cfg, exp.checkpoint(cfg.trial_id), None, signing_key
    )
    write_status(exp.trial_dir(cfg.trial_id), cfg, "finished", state.epoch, state.history[-1])
    for shard in shards.plan(cfg, "certify", spec.certify, 450):
        shards.run_shard(exp, CERTIFY, shard, spec.certify, 1)
    return space, spec, exp, cfg


@pytest.fixture(scope="module")
def attacked(setup):
    """Every shard of every setting of the space, written by the task function (no Ray)."""
    _, spec, exp, cfg = setup
    chosen = emp.settings(spec.empirical, spec.certify)
    written = {
        (s.emp_id, shard.index): shards.run_shard(exp, emp.EMPIRICAL, shard, s, 1)
        for s in chosen
        for shard in shards.plan(cfg, "empirical", s, 450)
    }
    return chosen, written, empirical_rows.load_empirical(exp)


# ------------------------------------------------------------------------------ the spec
def test_settings_from_the_block_and_the_certify_block(setup):
    _, spec, _, _ = setup
    chosen = emp.settings(spec.empirical, spec.certify)
    assert [(s.epsilon, s.m_test) for s in chosen] == [
        (0, None),
        (0.5, 1),
        (0.5, 8),
        (1, 1),
        (1, 8),
    ]
    clean = chosen[0]
    assert (clean.steps, clean.estimator) == (None, None)  # ε = 0: no attack, run once
    assert clean.emp_id == "clean_n-100_alpha-0.001_skip-15_max-all"
    assert chosen[2].emp_id == "eps-0.5_m-8_T-5_plugin_n-100_alpha-0.001_skip-15_max-all"
    assert {(s.n, s.alpha, s.skip, s.max_points, s.shard_size, s.batch_size) for s in chosen} == {
        (100, 0.001, 15, None, 10, 400)
    }  # null fields follow `certify`; batch_size set in the block


def test_defaults_are_the_papers_attack_on_the_certified_points():
    spec = load_space("digits")
    assert spec.empirical == EmpiricalSpec()
    chosen = emp.settings(spec.empirical, spec.certify)
    assert [s.epsilon for s in chosen] == [0, 0.25, 0.5, 1.0, 2.0]
    assert {(s.m_test, s.steps, s.estimator) for s in chosen[1:]} == {(128, 20, "plugin")}
    assert {(s.n, s.alpha, s.skip, s.max_points) for s in chosen} == {(1000, 0.001, 5, None)}
    smoke = emp.settings(spec.smoked().empirical, spec.smoked().certify)
    assert {(s.n, s.max_points, s.shard_size) for s in smoke} == {(200, 20, 10)}


def test_block_values_lists_scalars_and_all():
    block = {"epsilons": 0.5, "m_test": [4, 1], "max_points": "all", "estimator": "stein"}
    spec, problems = parse_spec("x", {"grids": [{"name": "g"}], "empirical": block})
    assert problems == []
    chosen = emp.settings(spec.empirical, CertifySpec(max_points=7))
    assert [(s.epsilon, s.m_test, s.estimator, s.max_points) for s in chosen] == [
        (0.5, 1, "stein", None),
        (0.5, 4, "stein", None),
    ]


def test_every_problem_of_the_block_is_reported_at_once():
    block = {
        "epsilons": [-1, "a"],
        "m_test": [0],
        "steps": 0,
        "n": 0,
        "alpha": 2,
        "estimator": "x",
        "skip": 0,
        "max_points": "some",
        "shard_size": 0,
        "batch_size": True,
        "bogus": 1,
    }
    _, problems = parse_spec("x", {"grids": [{"name": "g"}], "empirical": block})
    text = "\n".join(problems)
    for fragment in [
        "empirical: unknown key 'bogus'",
        "empirical.epsilons: every value must be a number >= 0 (got -1)",
        "(got 'a')",
        "empirical.m_test: every value must be an integer >= 1 (got 0)",
        "empirical.steps must be",
        "empirical.n must be",
        "empirical.skip must be",
        "empirical.shard_size must be",
        "empirical.batch_size must be",
        "empirical.alpha must be",
        "empirical.max_points must be",
        "unknown estimator 'x'",
    ]:
        assert fragment in text, text
    assert len(problems) == 12
    for raw, fragment in [
        ("nope", "empirical must be a mapping"),
        ({"epsilons": []}, "epsilons must be a non-empty list"),
    ]:
        _, problems = parse_spec("x", {"grids": [{"name": "g"}], "empirical": raw})
        assert any(fragment in p for p in problems), problems


# ------------------------------------------------------------------------------ the task
def test_rows_per_point_per_setting(attacked, setup):
    chosen, written, results = attacked
    _, _, exp, cfg = setup
    assert len(written) == len(chosen) * SHARDS and set(written.values()) == {10}
    assert len(results.files) == len(chosen) * SHARDS and not results.missing_shards
    frame = results.frame
    assert len(frame) == len(chosen) * POINTS
    assert pq.read_schema(results.files[0]).remove_metadata() == empirical_rows.EMPIRICAL_SCHEMA
    for s in chosen:
        rows = frame[frame["emp_id"] == s.emp_id]
        assert sorted(rows["idx"]) == list(range(0, 450, 15))
        assert (rows["epsilon_attack"] == s.epsilon).all()
        assert (rows["perturbation_norm"] <= s.epsilon + 1e-5).all()
        assert (rows["correct"] == (rows["predict"] == rows["label"])).all()
    assert frame[
        ["trial_id", "sigma", "method", "n", "alpha"]
    ].drop_duplicates().values.tolist() == [[cfg.trial_id, 0.25, "gaussian", 100, 0.001]]
    clean = frame[frame["epsilon_attack"] == 0]
    assert clean[["m_test", "steps_attack", "estimator"]].isna().all().all()
    assert (clean["perturbation_norm"] == 0).all()
    attacked_rows = frame[frame["epsilon_attack"] > 0]
    assert set(attacked_rows["steps_attack"]) == {5} and set(attacked_rows["estimator"]) == {
        "plugin"
    }
    assert (attacked_rows["perturbation_norm"] > 0).mean() > 0.9
    assert str(exp.root) in results.files[0] and "/empirical/" in results.files[0]


def test_accuracy_under_attack_is_at_most_the_clean_smoothed_accuracy(attacked):
    frame = attacked[2].frame
    clean = frame.loc[frame["epsilon_attack"] == 0, "correct"].mean()  # PREDICT, same points
    acc = frame[frame["epsilon_attack"] > 0].groupby(["epsilon_attack", "m_test"])["correct"].mean()
    assert clean > 0.7 and len(acc) == 4  # a useful smoothed classifier
    for (eps, m), value in acc.items():
        assert value <= clean, (eps, m, value, clean)
    assert acc[(1.0, 8)] < clean - 0.2  # the paper's attack bites at ε = 1 (σ = 0.25)
    assert acc[(1.0, 8)] <= acc[(0.5, 8)]


def test_a_second_run_writes_nothing(attacked, setup):
    chosen, _, results = attacked
    _, _, exp, cfg = setup
    before = {f: Path(f).stat().st_mtime_ns for f in results.files}
    for s in chosen:
        state = shards.progress(exp, "empirical", cfg.trial_id, s.emp_id, SHARDS)
        assert state.shards == frozenset(range(SHARDS)) and not state.compacted
        planned = shards.plan(cfg, "empirical", s, 450)
        assert [shards.run_shard(exp, emp.EMPIRICAL, sh, s, 1) for sh in planned] == [0] * SHARDS
    assert {f: Path(f).stat().st_mtime_ns for f in results.files} == before


def test_corrupt_file_is_named_and_left_out(tmp_path):
    exp = Experiment(str(tmp_path), "broken")
    bad = Path(exp.shard_path("0123456789ab", "clean_x", 0, 1, "empirical"))
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x00garbage" * 50)
    loaded = empirical_rows.load_empirical(exp)
    assert loaded.frame.empty and loaded.files == []
    assert len(loaded.invalid) == 1 and loaded.invalid[0].startswith(
        f"{bad}: not a readable Parquet"
    )
    with pytest.raises(ResultsError, match="no experiment at"):
        empirical_rows.load_empirical(Experiment(str(tmp_path), "absent"))


# ------------------------------------------------------------------------------ the envelope
def test_empirical_envelope_takes_each_models_strongest_attack():
    rows = []
    for tid, eps, m, correct in [
        ("a", 0.0, None, [1, 1, 1, 1]),
        ("b", 0.0, None, [1, 1, 1, 0]),
        ("a", 0.5, 1, [1, 1, 1, 0]),
        ("a", 0.5, 128, [1, 0, 0, 0]),  # a: strongest 0.25
        ("b", 0.5, 1, [1, 1, 0, 0]),
        ("b", 0.5, 128, [1, 1, 0, 0]),  # b: 0.5 wins
    ]:
        for i, c in enumerate(correct):
            rows.append(
                {
                    "trial_id": tid,
                    "n": 100,
                    "alpha": 0.001,
                    "epsilon_attack": eps,
                    "m_test": m,
                    "steps_attack": 20,
                    "estimator": "plugin",
                    "idx": i,
                    "correct": bool(c),
                    "sigma": 0.25 if tid == "a" else 0.5,
                }
            )
    frame = pd.DataFrame(rows)
    curve = empirical_rows.empirical_envelope(frame)
    assert curve[["radius", "empirical_accuracy", "empirical_winner"]].values.tolist() == [
        [0.0, 1.0, "a"],
        [0.5, 0.5, "b"],
    ]
    assert curve["empirical_m_test"].iloc[1] in (1, 128)
    by_sigma = empirical_rows.empirical_envelope(frame, "sigma")
    assert by_sigma[["sigma", "radius", "empirical_accuracy"]].values.tolist() == [
        [0.25, 0.0, 1.0],
        [0.25, 0.5, 0.25],
        [0.5, 0.0, 0.75],
        [0.5, 0.5, 0.5],
    ]
    table = pd.DataFrame({"radius": [0.0, 0.25, 0.5], "certified_accuracy": [0.9, 0.6, 0.4]})
    out = empirical_rows.overlay(table, frame, None)
    assert out["empirical_accuracy"].tolist()[::2] == [1.0, 0.5]
    assert np.isnan(out["empirical_accuracy"].iloc[1])


def test_envelope_overlay_column_and_plot(attacked, setup, tmp_path):
    _, _, exp, _ = setup
    frame = attacked[2].frame
    base = ["envelope", "--storage", exp.storage, "--experiment", exp.name, "--empirical"]
    plot = tmp_path / "envelope.png"
    result = runner.invoke(
        app, [*base, "--radii", "0,0.25,0.5,1", "--format", "csv", "--plot", str(plot)]
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(io.StringIO(result.stdout))
    strongest = frame.groupby("epsilon_attack")["correct"].mean()  # one model: clean ...
    for eps in (0.5, 1.0):  # ... and the lower of the two m_test
        sub = frame[frame["epsilon_attack"] == eps]
        strongest[eps] = sub.groupby("m_test")["correct"].mean().min()
    got = dict(zip(table["radius"], table["empirical_accuracy"], strict=True))
    assert np.isnan(got[0.25])
    for eps in (0.0, 0.5, 1.0):
        assert got[eps] == pytest.approx(strongest[eps])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "strongest attack" in result.stderr
    shown = runner.invoke(app, [*base, "--radii", "0,0.5"])
    assert shown.exit_code == 0 and "emp. acc" in shown.stdout


# ------------------------------------------------------------------------------ the CLI
def bad_input(args: list[str], *fragments: str) -> list[str]:
    """Exit 2, only `error: ...` lines on stderr (no traceback); returns them."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("experiment: ")]
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    for fragment in fragments:
        assert fragment in "\n".join(lines), lines
    return lines


def test_cli_bad_input_exits_2_with_one_line_each(setup, tmp_path):
    space, _, exp, _ = setup
    st = ["--storage", exp.storage, "--experiment", exp.name]
    before = sorted(p for p in Path(exp.root).rglob("*"))
    for args, fragment in [
        (["--epsilons", "0.2x"], "--epsilons '0.2x'"),
        (["--m-test", "0"], "--m-test: every value must be an integer >= 1"),
        (["--estimator", "nope"], "unknown --estimator 'nope'"),
        (["--steps", "0"], "--steps must be"),
        (["--alpha", "1.5"], "--alpha must be"),
        (["--only", "sigma=0.5"], "has finished training"),
        (["--only", "nosuch=1"], "nosuch"),
        (["--address", "127.0.0.1:1"], "127.0.0.1:1"),
    ]:
        assert len(bad_input(["empirical", space, *st, *args], fragment)) == 1
    lines = bad_input(["empirical", space, *st, "--epsilons", "x", "--m-test", "0", "--n", "0"])
    assert len(lines) == 3
    bad_input(["empirical", space, "--storage", tmp_path / "none"], "no experiment at")
    bad_input(["empirical", "nosuchspace", *st], "unknown space")
    assert sorted(p for p in Path(exp.root).rglob("*")) == before


def test_envelope_empirical_bad_input(tmp_path, setup):
    _, _, exp, _ = setup
    copy = Experiment(str(tmp_path), exp.name)  # certified, not attacked
    for part in ("trials", "certify"):  # the trial (its trial.json) behind the certified rows
        shutil.copytree(Path(exp.root) / part, Path(copy.root) / part)
    shutil.copy(Path(exp.root) / "sweep.json", Path(copy.root) / "sweep.json")  # it declares
    args = ["envelope", "--storage", str(tmp_path), "--experiment", exp.name, "--empirical"]
    assert len(bad_input(args, "no empirical robustness results", "sweeper empirical")) == 1
    bad = Path(copy.shard_path("0123456789ab", "clean_x", 0, 1, "empirical"))
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not parquet")
    assert len(bad_input(args, "not a readable Parquet file", str(bad))) == 1


# ------------------------------------------------------------------------------ on Ray
@pytest.mark.e2e
def test_sweeper_empirical_on_a_local_ray(ray_session, setup, attacked):
    space, _, exp, _ = setup
    args = [
        "empirical",
        str(space),
        "--storage",
        exp.storage,
        "--experiment",
        exp.name,
        "--cpu-only",
        "--epsilons",
        "0,1",
        "--m-test",
        "4",
        "--estimator",
        "stein",
    ]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    frame = empirical_rows.load_empirical(exp).frame
    stein = frame[frame["estimator"] == "stein"]
    assert len(stein) == POINTS and set(stein["m_test"]) == {4}  # ε = 0 existed: skipped
    plugin = frame[(frame["estimator"] == "plugin") & (frame["epsilon_attack"] == 1.0)]
    assert stein["correct"].mean() >= plugin["correct"].mean()  # gradient-free is weaker (C.6)
    files = sorted(Path(exp.root, "empirical").rglob("*.parquet"))
    stamps = [f.stat().st_mtime_ns for f in files]
    again = runner.invoke(app, args, catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert [
        f.stat().st_mtime_ns for f in sorted(Path(exp.root, "empirical").rglob("*.parquet"))
    ] == stamps
