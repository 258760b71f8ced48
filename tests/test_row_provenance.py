"""Every row counted is consistent with a real certification of a real trial (issue 25 §2).

A small experiment of real rows (CERTIFY's arithmetic on vote counts, written by the
project's writers, each trial with its trial.json), then tampered in each way that once
changed the envelope: each time the tampered file is left out, named on stderr with why, the
envelope is the untampered one, and `--strict` exits 1."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import certified_rows
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import beta, norm
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.results.certify_rows import CERTIFY_ROWS, MEMORY_SCHEMA, shard_table
from sweeper.results.reader import refresh_cache
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.results.sweep_file import write_sweep
from trainables.kernel.cert_ids import CertId
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings

SPEC = CertifySpec(n0=10, n=1000, alpha=0.001, skip=2, max_points=10)  # points 0, 2, ..., 18
DD = CertifySpec(n0=10, n=1000, alpha=0.001, skip=2, max_points=10, ddrs=DDRSSettings())
A = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=1, epochs=1)
B = A.replace(sigma=0.25)
W = A.replace(seed=1)  # never the best: what a tampered file of it would lift is seen
X = A.replace(sigma=1.0)  # certified with DDRS, awaiting its memory pass
POINTS = list(range(0, 20, 2))
# Votes among 1000 for each point's label: A certifies most points far, B fewer and closer.
VOTES = {
    A: [995, 990, 980, 960, 900, 800, 700, 600, 400, 300],
    B: [999] * 6 + [550, 500, 450, 300],
    W: [700] * 3 + [450] * 7,  # right at radius 0.2 on 3 points: below A and B everywhere
}
RADII = "0,0.25,0.5,0.75,1"
runner = CliRunner()


def _compacted(exp: Experiment, cfg: TrialConfig) -> str:
    return exp.compacted_path("certify", cfg.trial_id, SPEC.cert_id, 1)


@pytest.fixture
def experiment(tmp_path) -> Experiment:
    return build_experiment(tmp_path)


def build_experiment(tmp_path: Path) -> Experiment:
    """A, B and W certified at the training σ on digits points 0, 2, ..., 18 and compacted,
    the cache refreshed; X certified with DDRS in one shard (no memory pass yet)."""
    exp = Experiment(str(tmp_path / "results"), "exp")
    write_sweep(exp, {"space": None, "trials": [c.to_dict() for c in (A, B, W, X)]})
    for cfg in (A, B, W):
        certified_rows.model(exp, cfg, SPEC, VOTES[cfg], POINTS)
    certified_rows.trained(exp, X)
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    cols = certified_rows.reaching(DD.n, DD.alpha, POINTS, labels, labels, [0.8] * 10, [1.2] * 10)
    constants = {"smoothing": "data-dependent", "n0": DD.n0, "n": DD.n, "alpha": DD.alpha}
    table = shard_table(X, exp.name, DD.cert_id, constants, cols, {"config": X.to_dict()})
    write_table(table, exp.shard_path(X.trial_id, DD.cert_id, 0, 1))
    refresh_cache(exp, CERTIFY_ROWS)
    return exp


def envelope(exp: Experiment, *extra: str, code: int = 0) -> tuple[list[float], list[str]]:
    """(certified accuracy at RADII, stderr lines) of `sweeper envelope`."""
    args = ["envelope", "--radii", RADII, "--format", "csv", *extra]
    result = runner.invoke(app, [*args, "--storage", exp.storage, "--experiment", exp.name])
    assert result.exit_code == code, (result.output, result.exception)
    frame = pd.read_csv(io.StringIO(result.stdout))
    return frame["certified_accuracy"].round(9).tolist(), result.stderr.splitlines()


def left_out(stderr: list[str]) -> list[str]:
    return [line.removeprefix("warning: left out ") for line in stderr if "left out /" in line]


def rewrite(path: str, change) -> None:
    """The Parquet file at `path` with its rows changed by `change(table)`, metadata kept."""
    table = pq.read_table(path)
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), path)


def with_values(table: pa.Table, **columns) -> pa.Table:
    for name, values in columns.items():
        field = table.schema.field(name)
        table = table.set_column(
            table.schema.get_field_index(name), name, pa.array(values, field.type)
        )
    return table


def assert_left_out(exp: Experiment, before: list[float], path: str, why: str) -> None:
    """The envelope unchanged, `path` named with `why`, and --strict exits 1."""
    after, stderr = envelope(exp)
    assert after == before
    assert f"{path}: {why}" in left_out(stderr)
    assert envelope(exp, "--strict", code=1)[0] == before


def test_the_untampered_experiment_leaves_nothing_out(experiment):
    accuracy, stderr = envelope(experiment)
    assert accuracy == [0.8, 0.6, 0.6, 0.4, 0.1]
    assert left_out(stderr) == []
    assert any("1 data-dependent model awaits its memory pass" in line for line in stderr)


# ------------------------------------------------------------------ test points
@pytest.mark.parametrize(
    ("points", "why"),
    [
        (range(1001, 1011), "a test point outside the data set's test split"),  # every row
        ([10**12], "a test point outside the data set's test split"),
        ([3], "a test point off the grid its cert_id names (every skip-th, at most max)"),
        ([20], "a test point off the grid its cert_id names (every skip-th, at most max)"),
    ],
)
def test_rows_outside_the_split_or_off_the_grid_are_left_out(experiment, points, why):
    """W's last rows moved to points the setting never certifies: beyond digits' 450 test
    points, odd ones (skip 2), the 11th point (max 10). (Rows appended beyond the grid's 10
    are named from the file's footer before any is read: test_reading_tampering.)"""
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)

    def move(table: pa.Table) -> pa.Table:
        idx = table.column("idx").to_pylist()
        return with_values(table, idx=idx[: len(idx) - len(points)] + list(points))

    rewrite(path, move)
    assert_left_out(experiment, before, path, why)


def test_a_finished_model_with_a_gap_in_its_grid_is_left_out(experiment):
    """A's abstained point 16 taken out of its compacted file (9 rows, 0..14 and 18) would
    lift its clean accuracy to 8/9; the same gap across a model's complete set of shards too.
    A left out, B wins where A did."""
    without_a = [0.7, 0.6, 0.6, 0.0, 0.0]
    path = _compacted(experiment, A)
    rewrite(path, lambda t: t.filter(pa.array([i != 16 for i in t.column("idx").to_pylist()])))
    why = "a finished model with a gap in its grid (points missing before its last)"
    after, stderr = envelope(experiment)
    assert after == without_a and f"{path}: {why}" in left_out(stderr)
    table = pq.read_table(path)
    Path(path).unlink()
    shards = [experiment.shard_path(A.trial_id, SPEC.cert_id, k, 2) for k in range(2)]
    for k, shard in enumerate(shards):
        pq.write_table(table.slice(5 * k, 5 if k == 0 else 4), shard)
    after, stderr = envelope(experiment)
    assert after == without_a and {f"{s}: {why}" for s in shards} <= set(left_out(stderr))


def test_a_finished_model_truncated_at_its_end_is_not_told_apart(experiment):
    """What the rows cannot show (docs/guide/results.md): a grid cut short after its last point
    reads as a smaller test split. A's last two points (both abstained) gone lift its clean
    accuracy."""
    path = _compacted(experiment, A)
    rewrite(path, lambda t: t.slice(0, 8))
    accuracy, stderr = envelope(experiment)
    assert left_out(stderr) == [] and accuracy[0] == 1.0


# ------------------------------------------------------------------ the setting
@pytest.mark.parametrize(
    ("columns", "why"),
    [
        ({"n": [-1] * 10}, "n is not the one its cert_id names"),
        ({"alpha": [1.0] * 10}, "alpha is not the one its cert_id names"),
        ({"n0": [1] * 10}, "n0 is not the one its cert_id names"),
        ({"sigma_cert": [100.0] * 10}, "sigma_cert is not the one its cert_id names"),
        ({"smoothing": ["data-dependent"] * 10}, "smoothing is not the one its cert_id names"),
    ],
)
def test_settings_that_are_not_the_cert_ids_are_left_out(experiment, columns, why):
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)
    rewrite(path, lambda t: with_values(t, **columns))
    assert_left_out(experiment, before, path, why)


def test_a_sigma_cert_with_the_radius_it_would_give_is_still_not_the_trials(experiment):
    """σ_cert = 100 where the cert_id says σ_train, the radii made to match it: left out."""
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)

    def sigma_100(table: pa.Table) -> pa.Table:
        p = table.column("p_lower").to_pylist()
        radius = [100 * norm.ppf(x) if x >= 0.5 else 0.0 for x in p]
        return with_values(table, sigma_cert=[100.0] * 10, radius=radius)

    rewrite(path, sigma_100)
    assert_left_out(experiment, before, path, "sigma_cert is not the one its cert_id names")


def test_cert_ids_name_the_settings_their_spec_has_and_nothing_else():
    specs = [
        CertifySpec(),
        CertifySpec(sigma=0.25, max_points=None, precision="bf16", channels_last=True),
        CertifySpec(n0=1, n=1, alpha=0.4, skip=7, compile=True, ddrs=DDRSSettings(lr=1e-5)),
    ]
    for spec in specs:
        got = CertId.parse(spec.cert_id)
        assert got is not None and (got.n, got.alpha, got.sigma, got.n0) == (
            spec.n,
            spec.alpha,
            spec.sigma,
            spec.n0,
        )
        assert (got.skip, got.max_points, got.ddrs) == (spec.skip, spec.max_points, spec.ddrs)
    imported = CertId.parse("imported-sigma-0.25-n-100000-alpha-0.001")
    assert imported == CertId(100000, 0.001, 0.25) and imported.imported
    for wrong in [
        "sigma-train_n0-100_n-0_alpha-0.001_skip-20_max-500",  # n < 1
        "sigma-train_n0-100_n-100_alpha-1_skip-20_max-500",  # α = 1
        "sigma-train_n0-100_n-0100_alpha-0.001_skip-20_max-500",  # not how it is spelled
        "sigma-0_n0-100_n-100_alpha-0.001_skip-20_max-500",  # σ = 0
        "imported-sigma-0.25-n-100-alpha-nan",
        "another",
    ]:
        assert CertId.parse(wrong) is None, wrong


# ------------------------------------------------------------------ the certificate
def test_p_lower_and_the_radius_are_clopper_pearson_and_the_gaussian_quantile():
    """The rows the tests write have what the papers' formulas give, computed here
    independently: p_lower = beta.ppf(α, k, n − k + 1), radius = σ·Φ⁻¹(p_lower), abstaining
    below 1/2."""
    cols = certified_rows.columns(SPEC, 0.5, [0, 2, 4], [990, 700, 400], [2, 4, 4])
    for k, p, r, y in zip(
        [990, 700, 400], cols["p_lower"], cols["radius"], cols["predict"], strict=True
    ):
        expected = beta.ppf(0.001, k, 1000 - k + 1)
        assert p == pytest.approx(expected, rel=1e-12)
        assert (r, y) == (
            (pytest.approx(0.5 * norm.ppf(expected), rel=1e-12), 4 if k == 700 else 2)
            if expected >= 0.5
            else (0.0, -1)
        )


@pytest.mark.parametrize(
    ("columns", "why"),
    [
        (
            {"radius": [0.45] * 3 + [0.0] * 7, "p_lower": [0.5] * 3 + [0.1] * 7},
            "a p_lower its count, n and alpha do not give",
        ),
        ({"radius": [0.45] * 3 + [0.0] * 7}, "a radius its p_lower and sigma_cert do not give"),
        ({"count": [None] * 10}, "no count to recompute its certificate from"),
        ({"count": [1001] * 10}, "a count outside 0..n"),
    ],
)
def test_certificates_their_counts_do_not_give_are_left_out(experiment, columns, why):
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)
    rewrite(path, lambda t: with_values(t, **columns))
    assert_left_out(experiment, before, path, why)


def test_a_radius_one_part_in_a_million_beyond_its_count_is_left_out(experiment):
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)
    rewrite(
        path,
        lambda t: with_values(t, radius=[r * (1 + 1e-6) for r in t.column("radius").to_pylist()]),
    )
    assert_left_out(experiment, before, path, "a radius its p_lower and sigma_cert do not give")


def test_an_abstention_with_enough_votes_is_left_out(experiment):
    """A point whose count certifies, written as an abstention (rows may not hide points)."""
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)
    rewrite(
        path, lambda t: with_values(t, predict=[-1] * 10, radius=[0.0] * 10, correct=[False] * 10)
    )
    why = "a prediction its p_lower does not give (abstain exactly when p_lower < 1/2)"
    assert_left_out(experiment, before, path, why)


# ------------------------------------------------------------------ the trial
def test_a_self_consistent_model_with_no_trial_behind_it_is_left_out(experiment):
    """A model certified right at every point with every vote (it would win everywhere),
    self-consistent, under a trial_id no trial.json stands behind."""
    before, _ = envelope(experiment)
    fake = A.replace(seed=7)
    table = certified_rows.rows(experiment, fake, SPEC, [1000] * 10, POINTS)
    path = _compacted(experiment, fake)
    Path(path).parent.mkdir(parents=True)
    pq.write_table(table, path)
    assert_left_out(
        experiment, before, path, f"no trial behind it (no trials/{fake.trial_id}/trial.json)"
    )


def test_a_trial_json_of_another_config_does_not_vouch(experiment):
    before, _ = envelope(experiment)
    trial_json = Path(experiment.trial_dir(W.trial_id)) / "trial.json"
    doc = json.loads(trial_json.read_text())
    trial_json.write_text(json.dumps({**doc, "config": A.to_dict()}))
    why = f"no trial behind it (trials/{W.trial_id}/trial.json is the config of {A.trial_id})"
    assert_left_out(experiment, before, _compacted(experiment, W), why)


def test_rows_whose_hyperparameters_are_not_their_trials_are_left_out(experiment):
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)
    rewrite(path, lambda t: with_values(t, method=["smoothadv"] * 10))
    assert_left_out(experiment, before, path, "method is not its trial's")


def test_an_imported_model_is_vouched_for_by_its_import_record_only(tmp_path):
    """`sweeper import`'s shard (no counts, its import record in the metadata) is counted;
    the same rows without the record, or with a record of another config, are not."""
    exp = Experiment(str(tmp_path), "exp")
    cert_id = "imported-sigma-0.5-n-1000-alpha-0.001"
    cols = certified_rows.columns(
        SPEC, 0.5, POINTS, VOTES[A], [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    )
    cols.update(
        count=[None] * 10, p_lower=[None] * 10, radius=[round(r, 3) for r in cols["radius"]]
    )
    constants = {"smoothing": "fixed", "n0": 100, "n": 1000, "alpha": 0.001}
    records = {
        A: {
            "config": A.to_dict(),
            "certify_backend": "imported from logs/noise_0.50/test/sigma_0.50",
        },
        B: {"config": B.to_dict()},  # no record of an import
        A.replace(seed=3): {"config": A.to_dict(), "certify_backend": "imported from x"},
    }
    for cfg, meta in records.items():
        table = shard_table(cfg, exp.name, cert_id, constants, cols, meta)
        table = with_values(table, sigma=[0.5] * 10)  # A's σ (the rows' identity is the cfg's)
        write_table(table, exp.shard_path(cfg.trial_id, cert_id, 0, 1))
    write_sweep(exp, {"space": None, "trials": [], "imported": True})
    result = runner.invoke(
        app,
        [
            "envelope",
            "--storage",
            str(tmp_path),
            "--experiment",
            "exp",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.output
    named = sorted(left_out(result.stderr.splitlines()))
    other = A.replace(seed=3)
    assert named == sorted(
        [
            f"{exp.shard_path(B.trial_id, cert_id, 0, 1)}: no trial behind it (no trial.json, and no import record in the file)",
            f"{exp.shard_path(other.trial_id, cert_id, 0, 1)}: no trial behind it (the file's import record is the config of {A.trial_id})",
        ]
    )
    assert "1 model, 10 certified points" in result.stderr


# ------------------------------------------------------------------ the cache
@pytest.mark.parametrize("edit", ["same size", "appended"])
def test_an_edited_cache_is_named_and_the_files_counted(experiment, edit):
    before, _ = envelope(experiment)
    cache = experiment.cache_path("certify")

    def change(table: pa.Table) -> pa.Table:
        if edit == "appended":
            return pa.concat_tables([table, with_values(table.slice(0, 1), idx=[1001])])
        return with_values(
            table, radius=[9.0 if r > 0 else r for r in table.column("radius").to_pylist()]
        )

    rewrite(cache, change)
    after, stderr = envelope(experiment)
    assert after == before
    why = (  # a row beyond the 30 points of the models it records: named from its footer
        "31 rows, more than the 30 test points of the models it records"
        if edit == "appended"
        else "its rows are not those it was written with"
    )
    assert f"{cache}: {why}; reading the files instead" in left_out(stderr)
    assert envelope(experiment, "--strict", code=1)[0] == before


def test_a_compacted_file_rewritten_at_its_size_is_read_not_taken_from_the_cache(experiment):
    """W's file with a value changed at the same size: read (its bytes are not those the
    cache holds), and its rows no longer what their counts give."""
    before, _ = envelope(experiment)
    path = _compacted(experiment, W)
    size = Path(path).stat().st_size
    p_lower = pq.read_table(path).column("p_lower").to_pylist()
    rewrite(path, lambda t: with_values(t, p_lower=[0.7] * 3 + p_lower[3:]))
    assert Path(path).stat().st_size == size
    assert_left_out(experiment, before, path, "a p_lower its count, n and alpha do not give")


# ------------------------------------------------------------------ legacy memory files
def _memory(trial_id: str, cert_id: str, predict, radius, changed) -> pa.Table:
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    return pa.Table.from_pydict(
        {
            "trial_id": [trial_id] * 10,
            "cert_id": [cert_id] * 10,
            "idx": POINTS,
            "predict_memory": predict,
            "radius_memory": radius,
            "correct_memory": [p == y for p, y in zip(predict, labels, strict=True)],
            "memory_changed": changed,
        },
        schema=MEMORY_SCHEMA,
    )


def test_a_memory_file_under_another_models_directory_changes_nothing(experiment):
    """In X's directory, rows naming A (compacted and cached) with radius 1000: named, A as
    it was, X still awaiting its memory pass."""
    before, _ = envelope(experiment)
    path = experiment.memory_path(X.trial_id, DD.cert_id)
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    pq.write_table(_memory(A.trial_id, SPEC.cert_id, labels, [1000.0] * 10, [True] * 10), path)
    assert_left_out(
        experiment, before, path, "rows of another model than the one whose directory holds it"
    )


def test_a_memory_file_no_memory_pass_writes_is_left_out(experiment):
    before, _ = envelope(experiment)
    path = experiment.memory_path(X.trial_id, DD.cert_id)
    pq.write_table(_memory(X.trial_id, DD.cert_id, [99] * 10, [math.nan] * 10, [True] * 10), path)
    assert_left_out(experiment, before, path, "a prediction outside the data set's classes")


def test_a_memory_file_the_memory_pass_could_write_makes_its_model_sound(experiment):
    """X's own memory file, changing nothing: X is counted (its certificates at σ_x = 1.2)."""
    shard = experiment.shard_path(X.trial_id, DD.cert_id, 0, 1)
    rows = pq.read_table(shard)
    predict, radius = rows.column("predict").to_pylist(), rows.column("radius").to_pylist()
    path = experiment.memory_path(X.trial_id, DD.cert_id)
    pq.write_table(_memory(X.trial_id, DD.cert_id, predict, radius, [False] * 10), path)
    accuracy, stderr = envelope(experiment, "--strict")
    assert left_out(stderr) == []  # fixed σ and data-dependent side by side, X at 0.8 everywhere
    fixed, dependent = [0.8, 0.6, 0.6, 0.4, 0.1], [1.0, 1.0, 1.0, 1.0, 0.0]
    assert accuracy in (dependent + fixed, fixed + dependent)
    assert not any("await their memory pass" in line for line in stderr)


def _abstaining_x(exp: Experiment) -> list[int]:
    """X's shard rewritten so that CERTIFY abstained at points 0 and 2 (counts a third of n,
    radius 0); returns the labels."""
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    predict = [-1, -1, *labels[2:]]
    cols = certified_rows.reaching(DD.n, DD.alpha, POINTS, labels, predict, [0.8] * 10, [1.2] * 10)
    constants = {"smoothing": "data-dependent", "n0": DD.n0, "n": DD.n, "alpha": DD.alpha}
    table = shard_table(X, exp.name, DD.cert_id, constants, cols, {"config": X.to_dict()})
    write_table(table, exp.shard_path(X.trial_id, DD.cert_id, 0, 1))
    return labels


def test_the_authors_memory_rule_is_read_from_a_memory_file_and_from_compacted_rows(
    experiment,
):
    """post_processing_memory_based.py's rule: X's abstention at point 0 lies in an earlier
    ball and takes its class (here the label, radius 0.5), a ball covering the abstention at
    point 2 shrinks (point 4: radius 0.3). The legacy memory file saying so is used, and so
    are the compacted rows `sweeper compact` folds it into (the reader's `_memory_checks`):
    X right on 9 of 10 points up to radius 0.3, 8 at 0.5 (point 0 exactly), 7 beyond."""
    from sweeper.run import compaction
    from sweeper.run.certify_stage import CERTIFY

    labels = _abstaining_x(experiment)
    shard = pq.read_table(experiment.shard_path(X.trial_id, DD.cert_id, 0, 1))
    radius = shard.column("radius").to_pylist()
    predict = [labels[0], -1, *labels[2:]]
    radius = [0.5, 0.0, 0.3, *radius[3:]]
    changed = [True, False, True] + [False] * 7
    path = experiment.memory_path(X.trial_id, DD.cert_id)
    pq.write_table(_memory(X.trial_id, DD.cert_id, predict, radius, changed), path)
    accuracy, stderr = envelope(experiment, "--strict")
    assert left_out(stderr) == []
    fixed, dependent = [0.8, 0.6, 0.6, 0.4, 0.1], [0.9, 0.9, 0.8, 0.7, 0.0]
    assert accuracy in (dependent + fixed, fixed + dependent)
    compaction.compact(experiment, CERTIFY, X.trial_id, DD, 1)
    compacted = experiment.compacted_path("certify", X.trial_id, DD.cert_id, 1)
    rows = pq.read_table(compacted)
    assert rows.column("predict").to_pylist()[:3] == [labels[0], -1, labels[2]]
    assert rows.column("predict_raw").to_pylist()[:3] == [-1, -1, labels[2]]
    assert envelope(experiment, "--strict") == (accuracy, stderr)


def test_a_model_awaiting_its_memory_pass_fails_strict(experiment):
    envelope(experiment, "--strict", code=1)


def test_the_copy_of_an_experiment_reads_the_same(experiment, tmp_path):
    """The checks take their truth from inside the experiment: a copied one reads alike."""
    copy = tmp_path / "copy"
    shutil.copytree(experiment.root, copy / "exp")
    assert envelope(Experiment(str(copy), "exp")) == envelope(experiment)


def test_compaction_refuses_a_memory_file_that_fails_and_keeps_the_shards(experiment):
    """`sweeper compact` folds a legacy memory file only if it passes the reader's checks: one
    with a prediction outside the classes stops X's compaction, named, and X's shard stays."""
    from sweeper.run import compaction
    from sweeper.run.certify_stage import CERTIFY

    path = experiment.memory_path(X.trial_id, DD.cert_id)
    pq.write_table(_memory(X.trial_id, DD.cert_id, [99] * 10, [0.1] * 10, [True] * 10), path)
    with pytest.raises(RuntimeError) as error:
        compaction.compact(experiment, CERTIFY, X.trial_id, DD, 1)
    assert str(error.value) == (
        f"{path}: a prediction outside the data set's classes: move it away (the memory pass "
        "then runs again)"
    )
    assert Path(experiment.shard_path(X.trial_id, DD.cert_id, 0, 1)).is_file()


def test_table_names_what_it_leaves_out_and_strict_exits_1(experiment):
    path = _compacted(experiment, W)
    rewrite(path, lambda t: with_values(t, n=[-1] * 10))
    args = ["table", "--storage", experiment.storage, "--experiment", experiment.name]
    shown = runner.invoke(app, [*args, "--format", "csv"])
    assert shown.exit_code == 0
    assert f"warning: left out {path}: n is not the one its cert_id names" in shown.stderr
    assert sorted(pd.read_csv(io.StringIO(shown.stdout))["trial_id"]) == sorted(
        [A.trial_id, B.trial_id]
    )
    strict = runner.invoke(app, [*args, "--strict", "--format", "csv"])
    assert strict.exit_code == 1 and strict.stdout == shown.stdout
    assert "error: --strict: 1 files and 1 models were left out (named above)" in strict.stderr
