"""The sharded-stage engine without Ray: compaction (crash safety, idempotence, the DDRS memory
folded in), the reader's validation of every file (forged, damaged, duplicated) and the
results cache; status counted from file names; the runner (planning, resuming, compaction once
a model's shards are written, progress events, failures, the cache's refreshes) with its tasks
run in this process, and the calls it makes of Ray by default."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path

import certified_rows
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ray import exceptions as rx  # before the `fake_ray` fixture stands in for Ray
from scipy.stats import beta, norm

from sweeper.plan.spec import CertifySpec, Resources
from sweeper.results import empirical_rows, reader, validation
from sweeper.results.certify_rows import (
    MEMORY_SCHEMA,
    SCHEMA,
    load_results,
    max_radius,
    shard_table,
)
from sweeper.results.envelope import envelope
from sweeper.results.failures import FailureLog, read_failures
from sweeper.results.reader import read_stage, refresh_cache
from sweeper.results.stage_table import write_table
from sweeper.results.status import stage_shards
from sweeper.results.storage import MEMORY, Experiment
from sweeper.run import compaction, shards
from sweeper.run.certify_stage import CERTIFY
from sweeper.run.empirical_stage import EMPIRICAL, EmpiricalSetting, empirical_table
from sweeper.run.retries import Budget, Retries
from sweeper.run.stage import Shard
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.trial_status import write_status

SPEC = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, shard_size=2)
CID = SPEC.cert_id
A = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=1, epochs=1)
B = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
RADII = [0.0, 0.25, 0.5]


def rows(
    cfg: TrialConfig,
    idx: list[int],
    radius: list[float],
    experiment: str = "exp",
    smoothing: str = "fixed",
    cert_id: str = CID,
) -> pa.Table:
    """CERTIFY's rows (its arithmetic on vote counts among SPEC's n, at the trial's σ) of
    digits points `idx`: each predicts its label with the least radius reaching `radius`
    (`reached`), or abstains where that is 0."""
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in idx]
    predict = [y if r > 0 else -1 for y, r in zip(labels, radius, strict=True)]
    sigmas = [cfg.sigma] * len(idx)
    cols = certified_rows.reaching(SPEC.n, SPEC.alpha, idx, labels, predict, radius, sigmas)
    constants = {"smoothing": smoothing, "n0": SPEC.n0, "n": SPEC.n, "alpha": SPEC.alpha}
    return shard_table(cfg, experiment, cert_id, constants, cols, {"config": cfg.to_dict()})


def reached(radius: float, sigma: float) -> float:
    """The least radius CERTIFY gives at σ among SPEC's n votes that is at least `radius`
    (0 for 0), computed here from the formulas: σ·Φ⁻¹(p̲), p̲ = beta.ppf(α, k, n − k + 1)."""
    if radius <= 0:
        return 0.0
    k = np.arange(1, SPEC.n + 1)
    p = beta.ppf(SPEC.alpha, k, SPEC.n - k + 1)
    radii = np.where(p >= 0.5, sigma * norm.ppf(p), 0.0)
    return float(radii[np.argmax(radii >= radius)])


def tampered(table: pa.Table, **columns: list) -> pa.Table:
    """`table` with `columns` replaced by these values (of the column's type)."""
    for name, values in columns.items():
        where = table.schema.get_field_index(name)
        table = table.set_column(where, name, pa.array(values, table.schema.field(name).type))
    return table


def write(
    exp: Experiment, cfg: TrialConfig, k: int, count: int, table: pa.Table, cert_id: str = CID
) -> Path:
    path = Path(exp.shard_path(cfg.trial_id, cert_id, k, count))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@pytest.fixture
def exp(tmp_path) -> Experiment:
    """Models A (4 points, 2 shards) and B (2 points, 1 shard), every shard written."""
    exp = Experiment(str(tmp_path), "exp")
    for cfg in (A, B):
        certified_rows.trained(exp, cfg)
    write(exp, A, 0, 2, rows(A, [0, 1], [0.3, 0.0]))
    write(exp, A, 1, 2, rows(A, [2, 3], [0.6, 0.1]))
    write(exp, B, 0, 1, rows(B, [0, 1], [0.2, 0.4]))
    return exp


def certified(exp: Experiment) -> dict:
    frame = load_results(exp).frame
    return envelope(frame, RADII, None)["certified_accuracy"].round(6).tolist()


# ------------------------------------------------------------------------------ compaction
def test_compaction_folds_verifies_then_deletes_the_shards(exp):
    before = certified(exp)
    assert compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2).rows == 4
    folder = Path(exp.setting_dir("certify", A.trial_id, CID))
    assert sorted(p.name for p in folder.iterdir()) == ["compacted-of-00002.parquet"]
    table = pq.read_table(folder / "compacted-of-00002.parquet")
    assert table.column("idx").to_pylist() == [0, 1, 2, 3]
    assert table.schema.remove_metadata().equals(SCHEMA)
    assert json.loads(table.schema.metadata[b"sweeper.config"]) == A.to_dict()
    assert certified(exp) == before  # the same rows, now from one file
    assert compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2).rows == 4  # idempotent


def test_a_crash_between_writing_and_deleting_is_recovered(exp):
    """Shards left beside a compacted file (the compaction died before deleting them) are
    ignored by readers and deleted by the next compaction; resume skips the model."""
    leftover = Path(exp.shard_path(A.trial_id, CID, 1, 2))
    saved = leftover.read_bytes()
    compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    leftover.write_bytes(saved)
    frame = load_results(exp).frame
    assert len(frame) == 6 and not frame.duplicated(["trial_id", "cert_id", "idx"]).any()
    state = shards.progress(exp, "certify", A.trial_id, CID, 2)
    assert state.compacted  # the runner submits nothing for this model
    compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    assert not leftover.exists()


def test_compaction_refuses_missing_or_repeated_points(exp):
    Path(exp.shard_path(A.trial_id, CID, 1, 2)).unlink()
    with pytest.raises(RuntimeError, match=r"shards \[1\] of 2 missing"):
        compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    write(exp, A, 1, 2, rows(A, [1, 3], [0.6, 0.1]))  # point 1 again
    with pytest.raises(RuntimeError, match=r"test points \[1\] appear twice"):
        compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    assert len(list(Path(exp.setting_dir("certify", A.trial_id, CID)).iterdir())) == 2  # kept


def test_compaction_never_reads_a_shard_longer_than_its_model_s_grid(exp, monkeypatch):
    """A shard whose footer claims 451 rows where digits has 450 test points is refused from
    its footer before any row is read; the shards stay."""
    many = rows(A, list(range(451)), [0.1] * 451)
    bad = write(exp, A, 1, 2, many)
    monkeypatch.setattr(compaction, "read_exact", lambda *a: pytest.fail("rows were read"))
    with pytest.raises(RuntimeError, match=f"cannot compact {bad}: 451 rows, more than the 450"):
        compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    assert len(list(Path(exp.setting_dir("certify", A.trial_id, CID)).iterdir())) == 2


def test_a_legacy_ddrs_memory_file_is_folded_into_the_compacted_rows(tmp_path):
    """An experiment certified with DDRS before compaction existed: its memory.parquet is
    used as it is (no second memory pass), then deleted with the shards."""
    exp = Experiment(str(tmp_path), "exp")
    certified_rows.trained(exp, A)
    dd = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
    table = rows(A, [0, 1, 2], [0.3, 0.5, 0.2], smoothing="data-dependent", cert_id=dd.cert_id)
    write(exp, A, 0, 1, table, dd.cert_id)
    raw = [reached(r, A.sigma) for r in (0.3, 0.5, 0.2)]  # points 0-2 predict labels 2, 0, 4
    memory = pa.Table.from_pydict(
        {
            "trial_id": [A.trial_id] * 3,
            "cert_id": [dd.cert_id] * 3,
            "idx": [0, 1, 2],
            "predict_memory": [2, 0, -1],
            "radius_memory": [raw[0], 0.25, 0.0],
            "correct_memory": [True, True, False],
            "memory_changed": [False, True, True],
        },
        schema=MEMORY_SCHEMA,
    )
    folder = Path(exp.setting_dir("certify", A.trial_id, dd.cert_id))
    pq.write_table(memory, folder / MEMORY)
    old = load_results(exp).frame  # read as experiments certified before compaction were
    assert old["sound"].all() and old["radius"].tolist() == [raw[0], 0.25, 0.0]
    compaction.compact(exp, CERTIFY, A.trial_id, dd, 1)
    assert sorted(p.name for p in folder.iterdir()) == ["compacted-of-00001.parquet"]
    new = load_results(exp).frame
    for col in ("predict", "radius", "correct", "predict_raw", "radius_raw", "memory_changed"):
        assert new[col].tolist() == old[col].tolist(), col
    assert new["radius_raw"].tolist() == raw and new["sound"].all()


def _digit(index: int) -> np.ndarray:
    from trainables.datasets import load_dataset

    return load_dataset("digits", "test", None)[index][0].numpy().ravel().astype(np.float64)


def test_compaction_runs_the_ddrs_memory_pass_and_results_carry_its_certificates(tmp_path):
    """Hand-built DDRS certificates whose balls overlap, on digits test points 0-4 (labels
    2, 0, 4, 9, 4), compacted without Ray: the memory pass (ascending idx) must shrink point
    1's ball (an earlier ball of another class overlaps it: radius d(0,1) − r0) and switch
    point 4 into point 2's class (x4 lies inside ball 2: radius r2 − d(2,4)), keep the
    Monte-Carlo values as *_raw, and the envelope must read the adjusted ones."""
    exp = Experiment(str(tmp_path), "exp")
    dd = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
    write_status(exp.trial_dir(A.trial_id), A, "finished", 1, {})  # the pass reads the config
    d01, d24 = (float(np.linalg.norm(_digit(i) - _digit(j))) for i, j in ((0, 1), (2, 4)))
    # CERTIFY's rows at σ_x 1.0, 1.1, 0.9, 1.0, 1.2 with the least radii reaching these
    raw_predict, labels = [2, 0, 4, -1, 9], [2, 0, 4, 9, 4]
    least, sigmas = [1.2, 1.9, 1.5, 0.0, 0.8], [1.0, 1.1, 0.9, 1.0, 1.2]
    raw_radius = [reached(r, s) for r, s in zip(least, sigmas, strict=True)]
    r0, r1, r2 = raw_radius[:3]  # 1.2032, 1.9054, 1.5095
    assert r0 < d01 < r0 + r1 and d24 < r2  # ball 1 overlaps ball 0; x4 is inside ball 2
    cols = certified_rows.reaching(dd.n, dd.alpha, range(5), labels, raw_predict, least, sigmas)
    assert cols["radius"] == raw_radius
    constants = {"smoothing": "data-dependent", "n0": dd.n0, "n": dd.n, "alpha": dd.alpha}
    table = shard_table(A, "exp", dd.cert_id, constants, cols, {"config": A.to_dict()})
    write(exp, A, 0, 2, table.slice(0, 3), dd.cert_id)
    write(exp, A, 1, 2, table.slice(3), dd.cert_id)
    assert compaction.compact(exp, CERTIFY, A.trial_id, dd, 2).rows == 5

    compacted = pq.read_table(exp.compacted_path("certify", A.trial_id, dd.cert_id, 2))
    results = load_results(exp)
    assert not results.invalid and results.files == [
        exp.compacted_path("certify", A.trial_id, dd.cert_id, 2)
    ]
    frame = results.frame.sort_values("idx")
    expected = {
        "predict": [2, 0, 4, -1, 4],
        "correct": [True, True, True, False, True],
        "predict_raw": raw_predict,
        "radius_raw": raw_radius,
        "correct_raw": [True, True, True, False, False],
        "memory_changed": [False, True, False, False, True],
    }
    adjusted = [r0, d01 - r0, r2, 0.0, r2 - d24]
    for source in (compacted.to_pandas(), frame):
        for col, values in expected.items():
            assert source[col].tolist() == values, col
        assert source["radius"].to_numpy() == pytest.approx(adjusted, abs=1e-12)
    assert frame["sound"].all()
    # Certified accuracy from the adjusted rows (4/5 right; radii 1.20, 1.60, 1.51, 0.15): the
    # raw ones (3/5 right; radii 1.20, 1.91, 1.51) would give 0.6 at r = 0 and 0.2 at r = 1.7.
    table = envelope(frame, [0.0, 0.5, 1.0, 1.7], None)
    assert table["certified_accuracy"].tolist() == pytest.approx([0.8, 0.6, 0.6, 0.0])
    assert table["acr"].iloc[0] == pytest.approx(sum(adjusted) / 5)


# ------------------------------------------------------------------------------ validation
def _plant(exp: Experiment, cfg: TrialConfig, k: int, count: int, table: pa.Table) -> str:
    return str(write(exp, cfg, k, count, table))


FORGED = [
    (
        "another experiment's rows",
        lambda: rows(A, [0, 1], [0.3, 0.0], experiment="other"),
        "experiment is not 'exp'",
    ),
    (
        "a radius no CERTIFY gives",
        lambda: tampered(rows(A, [0, 1], [0.3, 0.0]), radius=[9.0, 0.0]),
        "a radius larger than n and alpha allow",
    ),
    (
        "a negative radius",
        lambda: tampered(rows(A, [0, 1], [0.3, 0.0]), radius=[-0.1, 0.0]),
        "negative, NaN or infinite",
    ),
    (
        "a NaN radius",
        lambda: tampered(rows(A, [0, 1], [0.3, 0.0]), radius=[float("nan"), 0.0]),
        "negative, NaN or infinite",
    ),
    (
        "duplicated rows",
        lambda: pa.concat_tables([rows(A, [0, 1], [0.3, 0.0])] * 2),
        "duplicated rows",
    ),
    ("B's rows under A's path", lambda: rows(B, [0, 1], [0.2, 0.0]), "trial_id is not"),
    (
        "no `correct` column",
        lambda: rows(A, [0, 1], [0.3, 0.0]).drop_columns(["correct"]),
        "column 'correct' is missing",
    ),
    (
        "radius as text",
        lambda: rows(A, [0, 1], [0.3, 0.0]).set_column(
            SCHEMA.get_field_index("radius"), "radius", pa.array(["0.3", "0.0"])
        ),
        "column 'radius' is string",
    ),
    (
        "a label of no class",
        lambda: tampered(rows(A, [0, 1], [0.3, 0.0]), label=[2, 99]),
        "a label outside the data set's classes",
    ),
]


@pytest.mark.parametrize("what,table,problem", FORGED, ids=[f[0] for f in FORGED])
def test_a_forged_or_damaged_file_is_named_and_left_out(exp, what, table, problem):
    bad = _plant(exp, A, 0, 2, table())  # replaces A's first shard
    results = load_results(exp)
    assert [line.split(": ")[0] for line in results.invalid] == [bad], results.invalid
    assert problem in results.invalid[0]
    assert bad not in results.files and (A.trial_id, CID) in results.missing_shards
    frame = results.frame
    assert sorted(frame.loc[frame.trial_id == A.trial_id, "idx"]) == [2, 3]  # A's other shard
    assert (frame["radius"] <= reached(0.6, A.sigma)).all()  # nothing of the forged file got in


def test_planted_files_change_no_envelope(exp, tmp_path):
    """Beside a clean experiment: a forged model (another experiment's rows, radius 9), a
    model whose file lacks `correct` and has radius as text, and a copy of a shard's rows
    under another model's path are each named and left out; the envelope stays the clean one."""
    clean = certified(exp)
    forged = TrialConfig(dataset="digits", method="gaussian", sigma=1.0, m_train=1, epochs=2)
    damaged = TrialConfig(dataset="digits", method="gaussian", sigma=1.0, m_train=1, epochs=3)
    bad_schema = rows(damaged, [0, 1], [0.9, 0.9]).drop_columns(["correct"])
    bad_schema = bad_schema.set_column(
        SCHEMA.get_field_index("radius") - 1, "radius", pa.array(["0.9", "0.9"])
    )
    other = tampered(rows(forged, [0, 1], [0.9, 0.9], experiment="other"), radius=[9.0, 9.0])
    planted = [
        _plant(exp, forged, 0, 1, other),
        _plant(exp, damaged, 0, 1, bad_schema),
        _plant(exp, B, 0, 2, pa.concat_tables([rows(B, [2, 3], [0.4, 0.4])] * 2)),
    ]
    results = load_results(exp)
    assert sorted(line.split(": ")[0] for line in results.invalid) == sorted(planted)
    assert certified(exp) == clean


def test_max_radius_is_the_clopper_pearson_limit():
    # n = 10^5, α = 0.001: the largest radius is σ·Φ⁻¹(α^(1/n)) = 3.8115 σ
    assert max_radius(1.0, 100_000, 0.001) == pytest.approx(3.8115, abs=1e-4)


# ------------------------------------------------------------------------------ the cache
def test_the_cache_serves_compacted_models_from_one_file(exp, monkeypatch):
    """Both models' rows are read from the cache alone; a compacted file whose bytes are no
    longer those cached (same size or not) is read from the file, which is invalid."""
    clean = certified(exp)
    for cfg, count in ((A, 2), (B, 1)):
        compaction.compact(exp, CERTIFY, cfg.trial_id, SPEC, count)
    assert refresh_cache(exp, CERTIFY) == 2
    scanned: list[list[str]] = []
    scan = validation.scan
    for module in (reader, validation):  # files are scanned there, the cache here
        monkeypatch.setattr(
            module, "scan", lambda paths, *a: scanned.append(paths) or scan(paths, *a)
        )
    result = read_stage(exp, CERTIFY)
    assert result.table.num_rows == 6 and not result.invalid
    assert scanned == [[exp.cache_path("certify")]]  # no compacted file's rows read
    assert certified(exp) == clean
    compacted = Path(exp.compacted_path("certify", A.trial_id, CID, 2))
    garbage = b"\0" * compacted.stat().st_size  # same size: its digest is not the cached one
    for changed in (garbage, garbage + b"\0"):
        compacted.write_bytes(changed)
        assert [p.split(": ")[0] for p in read_stage(exp, CERTIFY).invalid] == [str(compacted)]
    compacted.unlink()  # gone: its cached rows go too
    frame = load_results(exp).frame
    assert set(frame["trial_id"]) == {B.trial_id}


def test_a_forged_cache_is_ignored(exp):
    clean = certified(exp)
    for cfg, count in ((A, 2), (B, 1)):
        compaction.compact(exp, CERTIFY, cfg.trial_id, SPEC, count)
    refresh_cache(exp, CERTIFY)
    path = Path(exp.cache_path("certify"))
    table = pq.read_table(path)
    radius = np.array(table.column("radius").to_pylist())
    radius[0] = 9.0
    meta = table.schema.metadata
    forged = table.set_column(SCHEMA.get_field_index("radius"), "radius", pa.array(radius))
    pq.write_table(forged.replace_schema_metadata(meta), path)
    result = read_stage(exp, CERTIFY)
    assert result.invalid and "reading the files instead" in result.invalid[0]
    assert certified(exp) == clean


# ------------------------------------------------------------------------------ status
def test_status_counts_shards_from_names(exp):
    compaction.compact(exp, CERTIFY, B.trial_id, SPEC, 1)
    Path(exp.shard_path(A.trial_id, CID, 1, 2)).unlink()
    counts = stage_shards(exp.stage_files("certify"))
    assert (counts[A.trial_id].done, counts[A.trial_id].total) == (1, 2)
    assert (counts[B.trial_id].done, counts[B.trial_id].total) == (1, 1)


def test_sweeper_compact_migrates_an_experiment_written_before(exp):
    """Shards of complete models are compacted and cached; an incomplete model is left."""
    from typer.testing import CliRunner

    from sweeper.cli import app

    clean = certified(exp)
    Path(exp.shard_path(B.trial_id, CID, 0, 1)).rename(Path(exp.shard_path(B.trial_id, CID, 0, 2)))
    result = CliRunner().invoke(app, ["compact", "--storage", exp.storage, "--experiment", "exp"])
    assert result.exit_code == 0, result.output
    assert "certify: compacted 1 models, 1 not complete; the cache holds 1 models" in result.output
    assert Path(exp.compacted_path("certify", A.trial_id, CID, 2)).is_file()
    assert Path(exp.shard_path(B.trial_id, CID, 0, 2)).is_file()
    assert Path(exp.cache_path("certify")).is_file()
    assert certified(exp) == clean


# ------------------------------------------------------------------------------ resuming
def test_a_model_half_done_with_another_shard_size_is_refused_not_resumed(tmp_path):
    """8 test points in shards of 2 make 4 shards; a shard of 3 (written with shard_size 3)
    is there: computing the 4 would count its points twice. Nothing is started, the model's
    failure says why, in the run's failures.json too, and the old file is left as it was."""
    exp = Experiment(str(tmp_path), "exp")
    old = Path(exp.shard_path(A.trial_id, CID, 0, 3))
    old.parent.mkdir(parents=True)
    write_table(rows(A, [0, 1, 2], [0.3, 0.0, 0.2]), str(old))
    saved = old.read_bytes()
    assert shards.progress(exp, "certify", A.trial_id, CID, 4) == shards.Progress(
        compacted=False, shards=frozenset(), other_counts=frozenset({3})
    )
    tasks, events = InProcess(), []
    work = [shards.Work(CERTIFY, SPEC)]
    runner = shards.StageRunner(exp, work, Resources(), events.append, lambda d, _: 8, tasks=tasks)
    assert runner.submit(A) == 0
    assert tasks.submitted == [] and runner.pending == {}
    message = (
        f"{CID} was computed in 3 shards, now 4: use the shard_size used before, "
        "or move that directory away"
    )
    assert runner.failure_rows() == [(A.trial_id, "certify", message)]
    assert [(e.kind, e.detail) for e in events] == [
        ("certify_failed", message),
        ("shards_planned", "0 to do"),
    ]
    failures, _ = read_failures(exp)
    assert failures[(A.trial_id, "certify")].message == message
    assert old.read_bytes() == saved and sorted(p.name for p in old.parent.iterdir()) == [old.name]


def test_progress_tells_shards_of_the_planned_count_from_those_of_another(exp):
    write(exp, A, 2, 3, rows(A, [4, 5, 6], [0.1, 0.2, 0.3]))
    assert shards.progress(exp, "certify", A.trial_id, CID, 2) == shards.Progress(
        compacted=False, shards=frozenset({0, 1}), other_counts=frozenset({3})
    )
    assert shards.progress(exp, "certify", A.trial_id, CID, 3) == shards.Progress(
        compacted=False, shards=frozenset({2}), other_counts=frozenset({2})
    )
    assert shards.progress(exp, "certify", B.trial_id, CID, 1) == shards.Progress(
        compacted=False, shards=frozenset({0}), other_counts=frozenset()
    )


# ------------------------------------------------------------------------------ the runner
# StageRunner with its tasks run in this process (`InProcess`, a `shards.Tasks`): the real
# run_shard, compaction, cache and failure log on an experiment in tmp_path, and stages whose
# compute writes CERTIFY-like rows in no time. `RayTasks` is checked against Ray's calls below.
C = TrialConfig(
    dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=2, data_dir="elsewhere"
)
SIZES = {("digits", None): 8, ("digits", "elsewhere"): 6}  # A: 4 shards of 2, C: 3 shards
SPEC2 = CertifySpec(n0=10, n=1000, alpha=0.001, skip=2, max_points=None, shard_size=2)
CLEAN = EmpiricalSetting(
    0.0, None, None, None, n=100, alpha=0.001, skip=1, max_points=None, shard_size=4, batch_size=10
)


def sizer(dataset: str, data_dir: str | None) -> int:
    return SIZES[(dataset, data_dir)]


class InProcess:
    """Runs the runner's tasks here: a task runs when a `wait` lets it end, the newest first
    (a schedule Ray may choose too), at most `per_wait` of them per wait (None: all); `get`
    raises a task's exception as Ray's does. Records what was submitted, each wait's timeout
    and the tasks cancelled."""

    def __init__(self, per_wait: int | None = 1):
        self.per_wait = per_wait
        self.submitted: list[tuple[str, dict]] = []  # (function, options) in submission order
        self.timeouts: list[float] = []
        self.cancelled: list[int] = []
        self.queued: dict[int, tuple] = {}
        self.ended: dict[int, tuple] = {}  # handle -> (result, exception)

    def submit(self, fn, options, *args):
        handle = len(self.submitted)
        self.submitted.append((fn.__name__, options))
        self.queued[handle] = (fn, args)
        return handle

    def wait(self, handles, timeout):
        if set(handles) - set(self.queued) - set(self.ended):
            raise TypeError(f"not tasks of this runner: {handles}")  # as ray.wait
        self.timeouts.append(timeout)
        for handle in sorted(set(handles) & set(self.queued), reverse=True)[: self.per_wait]:
            fn, args = self.queued.pop(handle)
            try:
                self.ended[handle] = (fn(*args), None)
            except Exception as e:
                self.ended[handle] = (None, e)
        return [h for h in handles if h in self.ended]

    def get(self, handle):
        result, error = self.ended.pop(handle)
        if error is not None:
            raise error
        return result

    def cancel(self, handle):
        self.cancelled.append(handle)
        del self.queued[handle]


@dataclass
class Bench:
    """An experiment in tmp_path and the tiny stages' record: every shard they computed
    (stage, trial_id, setting_id, index, cpus) and the exceptions some shards raise."""

    exp: Experiment
    computed: list[tuple] = field(default_factory=list)
    fail: dict[tuple[str, str, int], Exception] = field(default_factory=dict)
    models: dict[str, TrialConfig] = field(
        default_factory=lambda: {c.trial_id: c for c in (A, B, C)}
    )

    def compute(self, exp: Experiment, shard: Shard, setting, cpus: float) -> pa.Table:
        """Rows of the shard's points, point i with the least radius reaching i/100 (0:
        abstains)."""
        self.computed.append((shard.stage, shard.trial_id, shard.setting_id, shard.index, cpus))
        if (shard.stage, shard.trial_id, shard.index) in self.fail:
            raise self.fail[(shard.stage, shard.trial_id, shard.index)]
        cfg, idx = self.models[shard.trial_id], list(shard.indices)
        if shard.stage == "empirical":
            cols = {
                "idx": idx,
                "label": [1] * len(idx),
                "predict": [1] * len(idx),
                "correct": [True] * len(idx),
                "perturbation_norm": [0.0] * len(idx),
                "time_s": [0.1] * len(idx),
            }
            return empirical_table(cfg, exp.name, setting, cols, {"config": cfg.to_dict()})
        return rows(cfg, idx, [i / 100 for i in idx], exp.name, cert_id=setting.setting_id)

    def work(self, *settings) -> list[shards.Work]:
        """Certification (a CertifySpec) or the empirical stage, each shard in no time."""
        stages = {CertifySpec: CERTIFY, EmpiricalSetting: EMPIRICAL}
        return [shards.Work(replace(stages[type(s)], compute=self.compute), s) for s in settings]

    def runner(self, work, tasks, on_event, **kwargs) -> shards.StageRunner:
        resources = kwargs.pop("resources", Resources(cpu=1.5))
        return shards.StageRunner(self.exp, work, resources, on_event, sizer, tasks=tasks, **kwargs)

    def files(self, stage: str, cfg: TrialConfig, setting_id: str = CID) -> list[str]:
        folder = Path(self.exp.setting_dir(stage, cfg.trial_id, setting_id))
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []

    def cached_models(self, stage: str = "certify") -> int:
        """How many models the stage's cache holds (0: no cache)."""
        path = Path(self.exp.cache_path(stage))
        if not path.exists():
            return 0
        return len(set(pq.read_table(path, columns=["trial_id"])["trial_id"].to_pylist()))


@pytest.fixture
def bench(tmp_path, fake_ray) -> Bench:
    """(Ray stands in too: a runner that went to Ray by mistake would start a real one.)
    A, B and C trained (their trial.json written)."""
    bench = Bench(Experiment(str(tmp_path), "exp"))
    for cfg in bench.models.values():
        certified_rows.trained(bench.exp, cfg)
    return bench


def seen(events: list[shards.Event]) -> list[tuple]:
    return [(e.kind, e.trial_id, e.detail, e.shards) for e in events]


def test_every_shard_is_computed_then_each_model_compacted_once_its_shards_are_written(bench):
    """A (8 points) and C (6 points, its own data_dir) in shards of 2; tasks end one at a
    time, the newest first, so C's shards end before A's and a model's compaction is started
    only after its last shard, then ends before any other task."""
    tasks, events = InProcess(), []
    runner = bench.runner(bench.work(SPEC), tasks, events.append)
    assert (runner.submit(A), runner.submit(C)) == (4, 3)
    runner.poll()  # what has ended (C's last shard), without waiting
    assert [e.kind for e in events] == ["shards_planned", "shards_planned", "shard_done"]
    runner.wait(poll_every=0.25)  # the rest, waiting at most 0.25 s per poll
    a, c, certify = A.trial_id, C.trial_id, f"certify {CID}"
    assert seen(events) == [
        ("shards_planned", a, "4 to do", (0, 4, 0)),
        ("shards_planned", c, "3 to do", (0, 7, 0)),
        ("shard_done", c, "certify 3/3", (1, 7, 0)),
        ("shard_done", c, "certify 2/3", (2, 7, 0)),
        ("shard_done", c, "certify 1/3", (3, 7, 0)),
        ("compacted", c, certify, (3, 7, 0)),
        ("shard_done", a, "certify 4/4", (4, 7, 0)),
        ("shard_done", a, "certify 3/4", (5, 7, 0)),
        ("shard_done", a, "certify 2/4", (6, 7, 0)),
        ("shard_done", a, "certify 1/4", (7, 7, 0)),
        ("compacted", a, certify, (7, 7, 0)),
    ]
    assert tasks.timeouts == [0] + [0.25] * 8 and runner.pending == {}
    shard_task = ("run_shard", {"num_cpus": 1.5, "num_gpus": 0.0})
    compaction = ("compact", {"num_cpus": 1})  # one whole CPU, whatever a shard task asks
    assert tasks.submitted == [shard_task] * 7 + [compaction] * 2
    assert sorted(bench.computed) == sorted(
        [("certify", a, CID, k, 1.5) for k in range(4)]
        + [("certify", c, CID, k, 1.5) for k in range(3)]
    )
    assert bench.files("certify", A) == ["compacted-of-00004.parquet"]
    assert bench.files("certify", C) == ["compacted-of-00003.parquet"]
    exp = bench.exp
    frame = load_results(exp).frame.sort_values(["trial_id", "idx"])
    for cfg, points in ((A, 8), (C, 6)):
        mine = frame[frame.trial_id == cfg.trial_id]
        assert mine["idx"].tolist() == list(range(points))
        assert mine["radius"].tolist() == [reached(i / 100, cfg.sigma) for i in range(points)]
    assert runner.failure_rows() == [] and read_failures(exp)[0] == {}
    assert bench.cached_models() == 0  # 2 models: the cache waits for finish()
    runner.finish()
    assert bench.cached_models() == 2


def test_a_run_counts_its_planned_shards_from_the_first_event(bench):
    """Issue 41 item 4: `expect` counts the shards of the models a run will submit, so its
    progress reads done of the planned total from the first event ("[shards 0/11]"), never a
    total that grows as models arrive; a model it did not expect adds its own, once, and
    expecting a model again does not count it twice."""
    tasks, events = InProcess(per_wait=None), []
    runner = bench.runner(bench.work(SPEC, SPEC2), tasks, events.append)
    runner.expect([A, C])
    runner.expect([A])
    assert runner.total == (4 + 2) + (3 + 2)  # A: 8 points, C: 6; SPEC2 takes every 2nd
    runner.submit(C)
    runner.submit(A)
    assert [e.shards for e in events] == [(0, 11, 0), (0, 11, 0)]
    runner.wait(poll_every=0.25)
    assert {e.shards[1] for e in events} == {11} and events[-1].shards[0] == 11
    runner.submit(B)  # not expected: its own 4 + 2 join the total
    assert events[-1].shards == (11, 17, 0)


def test_resuming_computes_only_the_missing_shards(bench):
    """A has shards 0 and 2 of 4, C is compacted, B (8 points) has all its shards but was
    never compacted (a run stopped before): only A's shards 1 and 3 are computed, B is
    compacted as it is submitted, and the counts start from what is on storage."""
    exp = bench.exp
    write(exp, A, 0, 4, rows(A, [0, 1], [0.0, 0.01]))
    write(exp, A, 2, 4, rows(A, [4, 5], [0.04, 0.05]))
    c_rows = Path(exp.compacted_path("certify", C.trial_id, CID, 3))
    c_rows.parent.mkdir(parents=True)
    write_table(rows(C, list(range(6)), [0.3] * 6), str(c_rows))
    for k in range(4):
        write(exp, B, k, 4, rows(B, [2 * k, 2 * k + 1], [0.2, 0.2]))
    tasks, events = InProcess(), []
    runner = bench.runner(bench.work(SPEC), tasks, events.append)
    assert [runner.submit(cfg) for cfg in (A, C, B)] == [2, 0, 0]
    runner.wait()
    assert tasks.timeouts == [0.5] * 4  # an ended task is seen within half a second
    a, b, c, certify = A.trial_id, B.trial_id, C.trial_id, f"certify {CID}"
    assert seen(events) == [
        ("shards_planned", a, "2 to do", (2, 4, 0)),
        ("shards_planned", c, "0 to do", (5, 7, 0)),
        ("shards_planned", b, "0 to do", (9, 11, 0)),
        ("compacted", b, certify, (9, 11, 0)),
        ("shard_done", a, "certify 4/4", (10, 11, 0)),
        ("shard_done", a, "certify 2/4", (11, 11, 0)),
        ("compacted", a, certify, (11, 11, 0)),
    ]
    assert [name for name, _ in tasks.submitted] == ["run_shard", "run_shard", "compact", "compact"]
    assert sorted(bench.computed) == [("certify", a, CID, k, 1.5) for k in (1, 3)]
    frame = load_results(exp).frame
    assert sorted(frame.loc[frame.trial_id == a, "radius"]) == [
        reached(i / 100, A.sigma) for i in range(8)
    ]
    assert sorted(frame.loc[frame.trial_id == b, "idx"]) == list(range(8))
    assert c_rows.exists() and bench.files("certify", C) == [c_rows.name]


def test_each_stage_and_setting_of_a_model_has_its_own_shards_and_compaction(bench):
    """Certification under two settings (every point; every 2nd) and the clean empirical
    stage (shards of 4) for one model: 4 + 2 + 2 shards, three compacted files."""
    tasks, events = InProcess(per_wait=None), []
    runner = bench.runner(bench.work(SPEC, SPEC2, CLEAN), tasks, events.append)
    assert runner.submit(A) == 8
    runner.wait()
    cid2, eid = SPEC2.cert_id, CLEAN.emp_id
    assert [e.detail for e in events if e.kind == "compacted"] == [
        f"certify {CID}",
        f"certify {cid2}",
        f"empirical {eid}",
    ]
    assert events[-1].shards == (8, 8, 0) and runner.failure_rows() == []
    assert bench.files("certify", A) == ["compacted-of-00004.parquet"]
    assert bench.files("certify", A, cid2) == ["compacted-of-00002.parquet"]
    assert bench.files("empirical", A, eid) == ["compacted-of-00002.parquet"]
    frame = load_results(bench.exp).frame
    assert sorted(frame.loc[frame.cert_id == CID, "idx"]) == list(range(8))
    assert sorted(frame.loc[frame.cert_id == cid2, "idx"]) == [0, 2, 4, 6]
    assert sorted(empirical_rows.load_empirical(bench.exp).frame["idx"]) == list(range(8))
    assert {(s, k) for s, _, _, k, _ in bench.computed if s == "empirical"} == {
        ("empirical", 0),
        ("empirical", 1),
    }
    runner.finish()
    assert (bench.cached_models("certify"), bench.cached_models("empirical")) == (1, 1)


def test_failed_tasks_are_recorded_per_model_and_stage_with_one_event_each(bench):
    """Shards 1 and 2 of A fail alike, C's shard 0 raises an exception without a message; a
    training failure the launcher recorded in the same log is no stage's. One poll collects
    every task that ended, failed or not; a model with a failed shard is not compacted."""
    oom = "CUDA out of memory. Tried to allocate 2.00 GiB"
    bench.fail = {
        ("certify", A.trial_id, 1): ValueError(oom),
        ("certify", A.trial_id, 2): ValueError(oom),
        ("certify", C.trial_id, 0): RuntimeError(),
    }
    failure_log = FailureLog(bench.exp)
    failure_log.add(B.trial_id, "train", "RuntimeError: loss is NaN")
    tasks, events = InProcess(per_wait=None), []
    runner = bench.runner(bench.work(SPEC), tasks, events.append, failure_log=failure_log)
    runner.submit(A)
    runner.submit(C)
    runner.poll()
    a, c = A.trial_id, C.trial_id
    assert seen(events)[2:] == [
        ("shard_done", a, "certify 1/4", (1, 7, 0)),
        ("certify_failed", a, oom, (1, 7, 1)),
        ("shard_done", a, "certify 4/4", (2, 7, 2)),
        ("certify_failed", c, "RuntimeError", (2, 7, 3)),
        ("shard_done", c, "certify 2/3", (3, 7, 3)),
        ("shard_done", c, "certify 3/3", (4, 7, 3)),
    ]
    assert tasks.timeouts == [0] and runner.pending == {}  # poll() does not wait
    assert runner.failure_rows() == [
        (a, "certify", f"{oom} (2 tasks)"),
        (c, "certify", "RuntimeError"),
    ]
    failures, _ = read_failures(bench.exp)
    assert (failures[(a, "certify")].count, failures[(B.trial_id, "train")].count) == (2, 1)
    assert bench.files("certify", A) == [
        "shard-00000-of-00004.parquet",
        "shard-00003-of-00004.parquet",
    ]
    assert [name for name, _ in tasks.submitted] == ["run_shard"] * 7  # no compaction


def test_a_failed_compaction_is_the_stage_s_failure_and_keeps_the_shards(bench):
    def finish(exp, trial_id, setting, table):
        raise OSError(f"cannot write the memory pass of {trial_id}")

    work = [replace(w, stage=replace(w.stage, finish=finish)) for w in bench.work(SPEC)]
    events: list[shards.Event] = []
    runner = bench.runner(work, InProcess(), events.append)
    runner.submit(A)
    runner.wait()
    message = f"cannot write the memory pass of {A.trial_id}"
    assert seen(events)[-1] == ("certify_failed", A.trial_id, message, (4, 4, 1))
    assert "compacted" not in [e.kind for e in events]
    assert runner.failure_rows() == [(A.trial_id, "certify", message)]
    assert len(bench.files("certify", A)) == 4
    runner.finish()
    assert not Path(bench.exp.cache_path("certify")).exists()  # nothing new to cache


def test_the_cache_is_refreshed_after_16_models_then_when_a_quarter_of_it_is_new(bench):
    """81 models compacted before the run (not cached), then 41 compacted by it: the cache is
    rewritten at the run's 16th compaction (97 models), then once 97 // 4 = 24 more are
    compacted (121), and by finish() for the last one: a number of rewrites logarithmic in
    the models, each reader opening one file for nearly all of them. (A refresh runs on a
    thread of its own, `cache_refresh`: here each is waited for as it starts.)"""
    small = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=2, shard_size=2)
    models = [replace(A, epochs=k) for k in range(1, 123)]
    bench.models.update({cfg.trial_id: cfg for cfg in models})
    for cfg in models:
        certified_rows.trained(bench.exp, cfg)
    for cfg in models[:81]:
        path = bench.exp.compacted_path("certify", cfg.trial_id, small.cert_id, 1)
        Path(path).parent.mkdir(parents=True)
        write_table(rows(cfg, [0, 1], [0.0, 0.01], cert_id=small.cert_id), path)
    cached = []  # models in the cache at each compaction's event

    def on_event(event: shards.Event) -> None:
        if event.kind == "compacted":
            runner.caches.collect(wait=True)
            cached.append(bench.cached_models())

    runner = bench.runner(bench.work(small), InProcess(), on_event)
    for cfg in models[81:]:
        runner.submit(cfg)
    runner.wait()
    assert cached == [0] * 15 + [97] * 24 + [121] * 2
    runner.finish()
    assert bench.cached_models() == 122


def test_finish_refreshes_only_the_caches_of_stages_that_compacted_models(bench, caplog):
    """A's certification was compacted by an earlier run (and never cached); this run attacks
    A: finish() caches the empirical rows and leaves certification's cache alone. A cache
    that cannot be written is a warning: readers open the compacted files instead."""
    done = Path(bench.exp.compacted_path("certify", A.trial_id, CID, 4))
    done.parent.mkdir(parents=True)
    write_table(rows(A, list(range(8)), [0.1] * 8), str(done))
    events: list[shards.Event] = []
    runner = bench.runner(bench.work(SPEC, CLEAN), InProcess(), events.append)
    assert runner.submit(A) == 2
    runner.wait()
    assert events[0].shards == (4, 6, 0) and events[-1].kind == "compacted"
    runner.finish()
    assert (bench.cached_models("certify"), bench.cached_models("empirical")) == (0, 1)
    runner.finish()  # nothing compacted since: nothing rewritten
    assert not Path(bench.exp.cache_path("certify")).exists()

    Path(bench.exp.cache_path("certify")).mkdir()  # a directory where the cache goes
    runner = bench.runner(bench.work(SPEC), InProcess(), events.append)
    runner.submit(B)
    runner.wait()
    runner.finish()
    assert "could not refresh the certify cache" in caplog.text
    assert sorted(load_results(bench.exp).frame["trial_id"].unique()) == sorted(
        [A.trial_id, B.trial_id]
    )


def test_cancel_stops_every_pending_task_and_wait_then_returns(bench):
    tasks, events = InProcess(), []
    runner = bench.runner(bench.work(SPEC), tasks, events.append)
    runner.submit(A)
    runner.poll(timeout=2.0)  # A's shard 3 ends
    runner.cancel()
    assert sorted(tasks.cancelled) == [0, 1, 2] and runner.pending == {}
    runner.wait()
    runner.poll()
    assert tasks.timeouts == [2.0]  # nothing pending: Ray is not asked
    assert bench.files("certify", A) == ["shard-00003-of-00004.parquet"]
    assert [e.kind for e in events] == ["shards_planned", "shard_done"]


def test_a_setting_with_no_points_plans_nothing(bench):
    """max_points 0: no shard, no task, no compacted file of zero shards."""
    none = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=0, shard_size=2)
    tasks, events = InProcess(), []
    runner = bench.runner(bench.work(none), tasks, events.append)
    assert runner.submit(A) == 0
    assert seen(events) == [("shards_planned", A.trial_id, "0 to do", (0, 0, 0))]
    assert tasks.submitted == [] and not Path(bench.exp.root, "certify").exists()


def test_a_runner_starts_a_new_run_of_failures_unless_given_the_run_s_log(bench):
    """The last run's failures.json no longer stands once a runner starts (its log stays);
    the launcher's runner shares one log with training, whose failures it does not count."""
    old = FailureLog(bench.exp)
    old.add(A.trial_id, "certify", "RuntimeError: from the last run")
    assert read_failures(bench.exp)[0] != {}
    runner = bench.runner(bench.work(SPEC), InProcess(), print)
    assert read_failures(bench.exp)[0] == {} and Path(old.log_path).exists()
    runner.failure_log.add(B.trial_id, "train", "RuntimeError: loss is NaN")
    assert runner.failure_rows() == [] and list(read_failures(bench.exp)[0]) == [
        (B.trial_id, "train")
    ]


def test_shard_tasks_ask_for_the_gpu_share_and_compactions_for_one_cpu(bench):
    tasks = InProcess()
    runner = bench.runner(bench.work(SPEC2), tasks, print, resources=Resources(cpu=2, gpu=0.25))
    runner.submit(A)
    runner.wait()
    assert tasks.submitted == [("run_shard", {"num_cpus": 2, "num_gpus": 0.25})] * 2 + [
        ("compact", {"num_cpus": 1})
    ]
    assert {cpus for *_, cpus in bench.computed} == {2}


class FakeRay(types.ModuleType):
    """The calls of Ray's API that `RayTasks` makes, recorded (Ray's defaults where a call
    may leave an argument out); a task runs when it is started, its exception kept for get."""

    def __init__(self):
        super().__init__("ray")
        self.calls: list[tuple] = []
        self.ended: list[tuple] = []  # per task: (result, exception)

    def remote(self, **decorator):
        return lambda fn: _FakeRemote(self, fn, decorator)

    def wait(self, refs, *, num_returns=1, timeout=None):
        self.calls.append(("wait", list(refs), num_returns, timeout))
        return list(refs)[:num_returns], list(refs)[num_returns:]

    def get(self, ref):
        self.calls.append(("get", ref))
        result, error = self.ended[ref]
        if error is not None:
            raise error
        return result

    def cancel(self, ref, *, force=False):
        self.calls.append(("cancel", ref, force))


@dataclass
class _FakeRemote:
    ray: FakeRay
    fn: object
    decorator: dict
    options_: dict = field(default_factory=dict)

    def options(self, **options):
        return replace(self, options_=options)

    def remote(self, *args):
        self.ray.calls.append(("start", self.fn.__name__, self.decorator, self.options_))
        try:
            self.ray.ended.append((self.fn(*args), None))
        except Exception as e:
            self.ray.ended.append((None, e))
        return len(self.ray.ended) - 1


@pytest.fixture
def fake_ray(monkeypatch):
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    shards._remote.cache_clear()  # remote functions of the real Ray (or an earlier fake)
    yield ray
    shards._remote.cache_clear()


def test_by_default_tasks_run_on_ray_not_retried_by_ray_and_gpu_tasks_keep_their_worker(
    bench, fake_ray
):
    """A runner given no `tasks` runs them on Ray: a shard task with its CPUs and GPU share,
    never retried by Ray (max_retries=0: the runner retries, `sweeper.run.retries`), and
    declared with max_calls=0 when it uses a GPU (Ray would otherwise start a fresh worker,
    and a CUDA context, for every GPU task); a compaction with one CPU. An exception of the
    task's code is not retried. A poll waits at most its timeout for the first pending task to
    end, then takes every other one ended by then."""
    bench.fail = {("certify", A.trial_id, 0): ValueError("no such checkpoint")}
    work = bench.work(SPEC2)
    runner = shards.StageRunner(bench.exp, work, Resources(cpu=2, gpu=0.5), print, sizer)
    runner.submit(A)
    runner.poll(timeout=3)
    gpu_shard = ("start", "run_shard", {"max_retries": 0, "max_calls": 0})
    assert fake_ray.calls == [
        (*gpu_shard, {"num_cpus": 2, "num_gpus": 0.5}),
        (*gpu_shard, {"num_cpus": 2, "num_gpus": 0.5}),
        ("wait", [0, 1], 1, 3),
        ("wait", [1], 1, 0),
        ("get", 0),
        ("get", 1),
    ]
    assert runner.failure_rows() == [(A.trial_id, "certify", "no such checkpoint")]

    fake_ray.calls.clear()
    bench.fail.clear()
    runner = shards.StageRunner(bench.exp, work, Resources(cpu=1), print, sizer)
    runner.submit(A)  # shard 1 is written: shard 0 is computed, then A is compacted
    runner.poll()
    runner.cancel()
    assert fake_ray.calls == [
        ("start", "run_shard", {"max_retries": 0}, {"num_cpus": 1, "num_gpus": 0.0}),
        ("wait", [2], 1, 0),
        ("get", 2),
        ("start", "compact", {"max_retries": 0}, {"num_cpus": 1}),
        ("cancel", 3, True),
    ]
    assert runner.pending == {}


def test_a_task_lost_with_its_node_runs_again_without_spending_the_error_budget(bench):
    """Tasks end with Ray's exceptions (as `ray.get` raises them, Ray retrying nothing): a
    shard lost with its node twice, then computed; one whose worker crashed once; one whose
    code raised (not retried); one lost three times, the third charged to the errors. Each
    resubmitted shard is computed once more; only the raised one fails; failures.json counts
    what each budget took."""
    lost = rx.NodeDiedError("Task failed because the node it was running on is dead")
    first = {0: [lost, lost], 1: [rx.WorkerCrashedError()], 2: [ValueError("bug")]}
    first[3] = [lost, lost, lost]

    def compute(exp, shard, setting, cpus):
        if first.get(shard.index):
            raise first[shard.index].pop(0)
        return bench.compute(exp, shard, setting, cpus)

    work = [replace(w, stage=replace(w.stage, compute=compute)) for w in bench.work(SPEC)]
    log = FailureLog(bench.exp)
    retries = Retries(Budget(errors=1, node_losses=2, retry_raised=False), log)
    tasks = InProcess(per_wait=None)
    runner = bench.runner(work, tasks, print, failure_log=log, retries=retries)
    assert runner.submit(A) == 4
    runner.wait(poll_every=0)
    assert sorted(i for *_, i, _ in bench.computed) == [0, 1, 3]  # the raised one: no rows
    assert [name for name, _ in tasks.submitted] == ["run_shard"] * 10  # 4 + 2 + 1 + 0 + 3
    assert runner.failure_rows() == [(A.trial_id, "certify", "bug")]
    doc = json.loads(Path(bench.exp.failures_json).read_text())
    tid = A.trial_id
    assert doc["retried"] == {
        "node_losses": {tid: {"certify": 4}},  # shard 0 twice, shard 3 twice
        "errors": {tid: {"certify": 3}},  # the crash, the raised one, shard 3's third loss
    }


# ------------------------------------------------------------------------------ one task
def test_plan_takes_every_skip_th_point_up_to_max_points_in_shards(bench):
    setting = replace(CLEAN, skip=3, max_points=5, shard_size=2)
    planned = shards.plan(A, "empirical", setting, 20)
    assert planned == [
        Shard("empirical", A.trial_id, setting.emp_id, k, 3, points)
        for k, points in enumerate([(0, 3), (6, 9), (12,)])
    ]


def test_a_shard_task_writes_its_rows_once_and_only_rows_of_its_stage(bench):
    """run_shard writes the shard's file under its stage and returns its rows; a shard whose
    file exists, or whose model is compacted, is not computed again (0 rows). Rows of another
    schema are refused and nothing is written."""
    [certify, attack] = bench.work(SPEC2, CLEAN)
    shard = shards.plan(A, "empirical", CLEAN, 8)[1]
    assert shards.run_shard(bench.exp, attack.stage, shard, CLEAN, 3) == 4
    assert shards.run_shard(bench.exp, attack.stage, shard, CLEAN, 3) == 0
    assert bench.files("empirical", A, CLEAN.emp_id) == ["shard-00001-of-00002.parquet"]
    assert bench.computed == [("empirical", A.trial_id, CLEAN.emp_id, 1, 3)]
    first = shards.plan(A, "certify", SPEC2, 8)[0]
    done = Path(bench.exp.compacted_path("certify", A.trial_id, SPEC2.cert_id, 2))
    done.parent.mkdir(parents=True)
    write_table(rows(A, [0, 2, 4, 6], [0.1] * 4, cert_id=SPEC2.cert_id), str(done))
    assert shards.run_shard(bench.exp, certify.stage, first, SPEC2, 1) == 0
    assert bench.files("certify", A, SPEC2.cert_id) == [done.name] and len(bench.computed) == 1

    wrong = replace(attack.stage, schema=SCHEMA)  # certification's columns, not the attack's
    with pytest.raises(TypeError, match="stage empirical computed rows of another schema"):
        shards.run_shard(bench.exp, wrong, shards.plan(A, "empirical", CLEAN, 8)[0], CLEAN, 1)
    assert bench.files("empirical", A, CLEAN.emp_id) == ["shard-00001-of-00002.parquet"]


def test_all_compacted_only_when_every_model_is_compacted_under_every_setting(exp):
    """`sweeper run` and `sweeper empirical` start no Ray when it says so."""
    settings = [("certify", CID)]
    models = [A.trial_id, B.trial_id]
    assert not shards.all_compacted(exp, models, settings)  # shards, not compacted
    compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    assert not shards.all_compacted(exp, models, settings)
    compaction.compact(exp, CERTIFY, B.trial_id, SPEC, 1)
    assert shards.all_compacted(exp, models, settings)
    assert not shards.all_compacted(exp, models, [*settings, ("empirical", CLEAN.emp_id)])
    assert not shards.all_compacted(exp, [*models, C.trial_id], settings)  # C never ran


def test_a_compacted_file_that_does_not_read_back_whole_keeps_its_shards(tmp_path, monkeypatch):
    """compact verifies the file it wrote from the bytes it digests: a short file raises, and
    the shards stay for the next attempt."""
    exp = Experiment(str(tmp_path), "short")
    cfg = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, epochs=1)
    spec = CertifySpec(n0=10, n=100, alpha=0.001)
    certified_rows.trained(exp, cfg)
    shard = exp.shard_path(cfg.trial_id, spec.cert_id, 0, 1)
    write_table(certified_rows.rows(exp, cfg, spec, [90, 80, 70]), shard)
    real = compaction.write_table
    monkeypatch.setattr(compaction, "write_table", lambda table, to: real(table.slice(0, 2), to))
    with pytest.raises(RuntimeError, match="reads back 2 rows, not 3: shards kept"):
        compaction.compact(exp, CERTIFY, cfg.trial_id, spec, 1)
    assert Path(shard).exists()
