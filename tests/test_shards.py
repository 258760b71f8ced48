"""The sharded-stage engine without Ray: compaction (crash safety, idempotence, the DDRS memory
folded in), the reader's validation of every file (forged, damaged, duplicated) and the
results cache; status counted from file names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweeper.plan.spec import CertifySpec, Resources
from sweeper.results.envelope import envelope
from sweeper.results.failures import read_failures
from sweeper.results.reader import read_stage, refresh_cache
from sweeper.results.rows import MEMORY_SCHEMA, SCHEMA, load_results, max_radius, shard_table
from sweeper.results.stage_table import write_table
from sweeper.results.status import stage_shards
from sweeper.results.storage import MEMORY, Experiment
from sweeper.run import compaction, shards
from sweeper.run.certify_stage import CERTIFY
from trainables.config import TrialConfig
from trainables.config_parts import DDRSSettings
from trainables.trial_status import write_status

SPEC = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, shard_size=2)
CID = SPEC.cert_id
A = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=1, epochs=1)
B = TrialConfig(dataset="digits", method="gaussian", sigma=0.25, m_train=1, epochs=1)
RADII = [0.0, 0.25, 0.5]


def rows(cfg: TrialConfig, idx: list[int], radius: list[float], experiment: str = "exp",
         smoothing: str = "fixed", cert_id: str = CID) -> pa.Table:  # fmt: skip
    """CERTIFY-like rows: every point right (label 1) unless its radius is 0 (abstain)."""
    predict = [1 if r > 0 else -1 for r in radius]
    cols = {"idx": idx, "label": [1] * len(idx), "predict": predict, "count": [900] * len(idx),
            "p_lower": [0.9] * len(idx), "radius": radius, "correct": [p == 1 for p in predict],
            "sigma_cert": [cfg.sigma] * len(idx), "time_s": [0.1] * len(idx)}  # fmt: skip
    constants = {"smoothing": smoothing, "n0": SPEC.n0, "n": SPEC.n, "alpha": SPEC.alpha}
    return shard_table(cfg, experiment, cert_id, constants, cols, {"config": cfg.to_dict()})


def write(exp: Experiment, cfg: TrialConfig, k: int, count: int, table: pa.Table,
          cert_id: str = CID) -> Path:  # fmt: skip
    path = Path(exp.shard_path(cfg.trial_id, cert_id, k, count))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@pytest.fixture
def exp(tmp_path) -> Experiment:
    """Models A (4 points, 2 shards) and B (2 points, 1 shard), every shard written."""
    exp = Experiment(str(tmp_path), "exp")
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
    assert compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2) == 4
    folder = Path(exp.setting_dir("certify", A.trial_id, CID))
    assert sorted(p.name for p in folder.iterdir()) == ["compacted-of-00002.parquet"]
    table = pq.read_table(folder / "compacted-of-00002.parquet")
    assert table.column("idx").to_pylist() == [0, 1, 2, 3]
    assert table.schema.remove_metadata().equals(SCHEMA)
    assert json.loads(table.schema.metadata[b"sweeper.config"]) == A.to_dict()
    assert certified(exp) == before  # the same rows, now from one file
    assert compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2) == 4  # idempotent


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


def test_a_legacy_ddrs_memory_file_is_folded_into_the_compacted_rows(tmp_path):
    """An experiment certified with DDRS before compaction existed: its memory.parquet is
    used as it is (no second memory pass), then deleted with the shards."""
    exp = Experiment(str(tmp_path), "exp")
    dd = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
    table = rows(A, [0, 1, 2], [0.3, 0.5, 0.2], smoothing="data-dependent", cert_id=dd.cert_id)
    write(exp, A, 0, 1, table, dd.cert_id)
    memory = pa.Table.from_pydict(
        {"trial_id": [A.trial_id] * 3, "cert_id": [dd.cert_id] * 3, "idx": [0, 1, 2],
         "predict_memory": [1, 1, -1], "radius_memory": [0.3, 0.25, 0.0],
         "correct_memory": [True, True, False], "memory_changed": [False, True, True]},
        schema=MEMORY_SCHEMA,
    )  # fmt: skip
    folder = Path(exp.setting_dir("certify", A.trial_id, dd.cert_id))
    pq.write_table(memory, folder / MEMORY)
    old = load_results(exp).frame  # read as experiments certified before compaction were
    assert old["sound"].all() and old["radius"].tolist() == [0.3, 0.25, 0.0]
    compaction.compact(exp, CERTIFY, A.trial_id, dd, 1)
    assert sorted(p.name for p in folder.iterdir()) == ["compacted-of-00001.parquet"]
    new = load_results(exp).frame
    for col in ("predict", "radius", "correct", "predict_raw", "radius_raw", "memory_changed"):
        assert new[col].tolist() == old[col].tolist(), col
    assert new["radius_raw"].tolist() == [0.3, 0.5, 0.2] and new["sound"].all()


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
    raw_predict, raw_radius = [2, 0, 4, -1, 9], [1.2, 1.9, 1.5, 0.0, 0.8]
    assert 1.2 < d01 < 1.2 + 1.9 and d24 < 1.5  # ball 1 overlaps ball 0; x4 is inside ball 2
    cols = {"idx": [0, 1, 2, 3, 4], "label": [2, 0, 4, 9, 4], "predict": raw_predict,
            "count": [990] * 5, "p_lower": [0.99] * 5, "radius": raw_radius,
            "correct": [True, True, True, False, False], "sigma_cert": [1.0, 1.1, 0.9, 1.0, 1.2],
            "time_s": [0.1] * 5}  # fmt: skip
    constants = {"smoothing": "data-dependent", "n0": dd.n0, "n": dd.n, "alpha": dd.alpha}
    table = shard_table(A, "exp", dd.cert_id, constants, cols, {"config": A.to_dict()})
    write(exp, A, 0, 2, table.slice(0, 3), dd.cert_id)
    write(exp, A, 1, 2, table.slice(3), dd.cert_id)
    assert compaction.compact(exp, CERTIFY, A.trial_id, dd, 2) == 5

    compacted = pq.read_table(exp.compacted_path("certify", A.trial_id, dd.cert_id, 2))
    results = load_results(exp)
    assert not results.invalid and results.files == [exp.compacted_path(
        "certify", A.trial_id, dd.cert_id, 2)]  # fmt: skip
    frame = results.frame.sort_values("idx")
    expected = {"predict": [2, 0, 4, -1, 4], "correct": [True, True, True, False, True],
                "predict_raw": raw_predict, "radius_raw": raw_radius,
                "correct_raw": [True, True, True, False, False],
                "memory_changed": [False, True, False, False, True]}  # fmt: skip
    adjusted = [1.2, d01 - 1.2, 1.5, 0.0, 1.5 - d24]
    for source in (compacted.to_pandas(), frame):
        for col, values in expected.items():
            assert source[col].tolist() == values, col
        assert source["radius"].to_numpy() == pytest.approx(adjusted, abs=1e-12)
    assert frame["sound"].all()
    # Certified accuracy from the adjusted rows (4/5 right; radii 1.2, 1.60, 1.5, 0.14): the
    # raw ones (3/5 right; radii 1.2, 1.9, 1.5) would give 0.6 at r = 0 and 0.2 at r = 1.7.
    table = envelope(frame, [0.0, 0.5, 1.0, 1.7], None)
    assert table["certified_accuracy"].tolist() == pytest.approx([0.8, 0.6, 0.6, 0.0])
    assert table["acr"].iloc[0] == pytest.approx(sum(adjusted) / 5)


# ------------------------------------------------------------------------------ validation
def _plant(exp: Experiment, cfg: TrialConfig, k: int, count: int, table: pa.Table) -> str:
    return str(write(exp, cfg, k, count, table))


FORGED = [
    ("another experiment's rows", lambda: rows(A, [0, 1], [0.3, 0.0], experiment="other"),
     "experiment is not 'exp'"),
    ("a radius no CERTIFY gives", lambda: rows(A, [0, 1], [9.0, 0.0]),
     "a radius larger than n and alpha allow"),
    ("a negative radius", lambda: rows(A, [0, 1], [-0.1, 0.0]), "negative, NaN or infinite"),
    ("a NaN radius", lambda: rows(A, [0, 1], [float("nan"), 0.0]), "negative, NaN or infinite"),
    ("duplicated rows", lambda: pa.concat_tables([rows(A, [0, 1], [0.3, 0.0])] * 2),
     "duplicated rows"),
    ("B's rows under A's path", lambda: rows(B, [0, 1], [0.2, 0.0]), "trial_id is not"),
    ("no `correct` column", lambda: rows(A, [0, 1], [0.3, 0.0]).drop_columns(["correct"]),
     "column 'correct' is missing"),
    ("radius as text", lambda: rows(A, [0, 1], [0.3, 0.0]).set_column(
        SCHEMA.get_field_index("radius"), "radius", pa.array(["0.3", "0.0"])),
     "column 'radius' is string"),
    ("a label of no class", lambda: rows(A, [0, 1], [0.3, 0.0]).set_column(
        SCHEMA.get_field_index("label"), "label", pa.array([1, 99], pa.int64())),
     "a label outside the data set's classes"),
]  # fmt: skip


@pytest.mark.parametrize("what,table,problem", FORGED, ids=[f[0] for f in FORGED])
def test_a_forged_or_damaged_file_is_named_and_left_out(exp, what, table, problem):
    bad = _plant(exp, A, 0, 2, table())  # replaces A's first shard
    results = load_results(exp)
    assert [line.split(": ")[0] for line in results.invalid] == [bad], results.invalid
    assert problem in results.invalid[0]
    assert bad not in results.files and (A.trial_id, CID) in results.missing_shards
    frame = results.frame
    assert sorted(frame.loc[frame.trial_id == A.trial_id, "idx"]) == [2, 3]  # A's other shard
    assert (frame["radius"] <= 0.6).all()  # nothing of the forged file got in


def test_planted_files_change_no_envelope(exp, tmp_path):
    """Beside a clean experiment: a forged model (another experiment's rows, radius 9), a
    model whose file lacks `correct` and has radius as text, and a copy of a shard's rows
    under another model's path are each named and left out; the envelope stays the clean one."""
    clean = certified(exp)
    forged = TrialConfig(dataset="digits", method="gaussian", sigma=1.0, m_train=1, epochs=2)
    damaged = TrialConfig(dataset="digits", method="gaussian", sigma=1.0, m_train=1, epochs=3)
    bad_schema = rows(damaged, [0, 1], [0.9, 0.9]).drop_columns(["correct"])
    bad_schema = bad_schema.set_column(
        SCHEMA.get_field_index("radius") - 1, "radius", pa.array(["0.9", "0.9"]))  # fmt: skip
    planted = [
        _plant(exp, forged, 0, 1, rows(forged, [0, 1], [9.0, 9.0], experiment="other")),
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
def test_the_cache_serves_compacted_models_from_one_file(exp):
    clean = certified(exp)
    for cfg, count in ((A, 2), (B, 1)):
        compaction.compact(exp, CERTIFY, cfg.trial_id, SPEC, count)
    assert refresh_cache(exp, CERTIFY) == 2
    compacted = Path(exp.compacted_path("certify", A.trial_id, CID, 2))
    garbage = b"\0" * compacted.stat().st_size  # same size: covered, so never opened
    compacted.write_bytes(garbage)
    result = read_stage(exp, CERTIFY)
    assert result.table.num_rows == 6 and not result.invalid
    assert certified(exp) == clean
    compacted.write_bytes(garbage + b"\0")  # changed: read from the file, which is invalid
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


def test_the_driver_spells_the_fault_hook_as_the_trial_does():
    from sweeper.run.launch import FAULT_ENV
    from trainables.tune_trial import FAULT_ENV as trial_fault

    assert trial_fault == FAULT_ENV


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
class _Tasks:
    """Stands in for `_remote(...)`: records the tasks a runner would start on Ray."""

    def __init__(self):
        self.started: list[tuple] = []

    def __call__(self, fn, gpu):
        return self

    def options(self, **resources):
        return self

    def remote(self, *args):
        self.started.append(args)
        return object()


def test_a_model_half_done_with_another_shard_size_is_refused_not_resumed(tmp_path, monkeypatch):
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
    tasks, events = _Tasks(), []
    monkeypatch.setattr(shards, "_remote", tasks)
    runner = shards.StageRunner(
        exp, [shards.Work(CERTIFY, SPEC)], Resources(), events.append, sizer=lambda d, _: 8
    )
    assert runner.submit(A) == 0
    assert tasks.started == [] and runner.pending == {}
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
