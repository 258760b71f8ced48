"""Reading results outside sweeper: the storage's globs are one table each, and the docs'
pandas, DuckDB and polars recipes give `sweeper envelope`'s certified accuracies on a DDRS
experiment (built without Ray: real shards, the real memory pass, a legacy memory file
migrated by `sweeper compact`)."""

from __future__ import annotations

import glob
import hashlib
import json
import re
from dataclasses import fields
from pathlib import Path

import certified_rows
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.results import Experiment, load_results
from sweeper.results.certify_rows import (
    CERTIFY_ROWS,
    MEMORY_SCHEMA,
    SCHEMA,
    ResultsError,
    identity_fields,
    max_radius,
    read_tables,
    shard_table,
)
from sweeper.results.envelope import envelope
from sweeper.results.file_checks import LEGACY_OPTIONAL
from sweeper.results.reader import (
    COVERS,
    ROWS,
    _model_index,
    read_stage,
    refresh_cache,
    uncovered,
)
from sweeper.results.stage_table import write_table
from sweeper.results.storage import MEMORY, StageFile
from sweeper.run import compaction
from sweeper.run.certify_stage import CERTIFY
from trainables.kernel import fileio
from trainables.kernel.certificates import radius_from_counts
from trainables.kernel.config import ENVIRONMENT_FIELDS, TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.trial_status import write_status

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "reading-results.md"
FIXED = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None)
DDRS = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None, ddrs=DDRSSettings())
A = TrialConfig(dataset="digits", method="gaussian", sigma=0.5, m_train=1, epochs=1)
B = A.replace(sigma=0.25)
C = A.replace(sigma=1.0)
RADII = [0.0, 0.25, 0.5, 1.0, 1.5, 1.7]


def _shard(exp, cfg, spec, k, count, idx, predict, label, radius, sigma_cert, smoothing):
    certified_rows.trained(exp, cfg)
    cols = certified_rows.reaching(spec.n, spec.alpha, idx, label, predict, radius, sigma_cert)
    constants = {"smoothing": smoothing, "n0": spec.n0, "n": spec.n, "alpha": spec.alpha}
    table = shard_table(cfg, exp.name, spec.cert_id, constants, cols, {"config": cfg.to_dict()})
    path = Path(exp.shard_path(cfg.trial_id, spec.cert_id, k, count))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


@pytest.fixture
def ddrs_experiment(tmp_path, monkeypatch) -> Experiment:
    """results/digits: model A certified with DDRS on digits test points 0-4 (labels 2, 0, 4,
    9, 4) whose balls overlap, so the memory pass changes points 1 and 4 (compacted with the
    real pass); model B at fixed σ (compacted); model C certified with DDRS before compaction
    existed (a shard and its memory.parquet, left for `sweeper compact`)."""
    monkeypatch.chdir(tmp_path)
    exp = Experiment("results", "digits")
    write_status(exp.trial_dir(A.trial_id), A, "finished", 1, {})  # the memory pass reads it
    labels = [2, 0, 4, 9, 4]
    sigmas = [1.0, 1.1, 0.9, 1.0, 1.2]
    _shard(
        exp,
        A,
        DDRS,
        0,
        2,
        [0, 1, 2],
        [2, 0, 4],
        labels[:3],
        [1.2, 1.9, 1.5],
        sigmas[:3],
        "data-dependent",
    )
    _shard(
        exp, A, DDRS, 1, 2, [3, 4], [-1, 9], labels[3:], [0.0, 0.8], sigmas[3:], "data-dependent"
    )
    compaction.compact(exp, CERTIFY, A.trial_id, DDRS, 2)
    _shard(
        exp,
        B,
        FIXED,
        0,
        1,
        [0, 1, 2, 3, 4],
        [2, 0, 1, 9, -1],
        labels,
        [0.3, 0.6, 0.2, 0.1, 0.0],
        [0.25] * 5,
        "fixed",
    )
    compaction.compact(exp, CERTIFY, B.trial_id, FIXED, 1)
    _shard(
        exp,
        C,
        DDRS,
        0,
        1,
        [0, 1, 2, 3, 4],
        [2, 0, 4, 9, 4],
        labels,
        [1.6, 1.6, 1.6, 1.6, 1.6],
        [1.0] * 5,
        "data-dependent",
    )
    raw = pq.read_table(exp.shard_path(C.trial_id, DDRS.cert_id, 0, 1)).column("radius").to_pylist()
    memory = pa.Table.from_pydict(
        {
            "trial_id": [C.trial_id] * 5,
            "cert_id": [DDRS.cert_id] * 5,
            "idx": [0, 1, 2, 3, 4],
            "predict_memory": [2, 0, -1, 9, 4],
            "radius_memory": [raw[0], 0.4, 0.0, raw[3], 1.0],
            "correct_memory": [True, True, False, True, True],
            "memory_changed": [False, True, True, False, True],
        },
        schema=MEMORY_SCHEMA,
    )
    pq.write_table(memory, Path(exp.setting_dir("certify", C.trial_id, DDRS.cert_id)) / MEMORY)
    return exp


def _envelope(exp: Experiment) -> list[float]:
    results = load_results(exp)
    assert not results.invalid and results.frame["sound"].all()
    return envelope(results.frame, RADII)["certified_accuracy"].round(9).tolist()


def test_each_kind_of_file_is_its_own_glob_of_one_schema(ddrs_experiment):
    exp = ddrs_experiment
    assert exp.glob() == str(Path(exp.root, "certify", "*", "*", "compacted-of-*.parquet"))
    compacted, shards, memory = (
        sorted(glob.glob(exp.glob("certify", kind))) for kind in ("compacted", "shard", "memory")
    )
    assert [Path(p).parts[-3] for p in compacted] == sorted([A.trial_id, B.trial_id])
    assert [Path(p).name for p in shards] == ["shard-00000-of-00001.parquet"]  # model C's
    assert [Path(p).name for p in memory] == [MEMORY]
    for path in compacted + shards:
        assert pq.read_schema(path).remove_metadata().equals(SCHEMA)
    assert pq.read_schema(memory[0]).remove_metadata().equals(MEMORY_SCHEMA)
    assert exp.glob("empirical", "shard").endswith(
        str(Path("empirical", "*", "*", "shard-*-of-*.parquet"))
    )


def test_sweeper_compact_migrates_the_legacy_memory_file_and_says_so(ddrs_experiment):
    exp = ddrs_experiment
    before = _envelope(exp)  # the reader takes the legacy memory file where it is
    result = CliRunner().invoke(app, ["compact", "--storage", "results", "--experiment", "digits"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "certify: compacted 1 models (1 with a legacy DDRS memory.parquet folded in and "
        "deleted), 0 not complete; the cache holds 3 models",
        "empirical: compacted 0 models, 0 not complete; the cache holds 0 models",
    ]
    assert glob.glob(exp.glob("certify", "memory")) == glob.glob(exp.glob("certify", "shard")) == []
    assert len(glob.glob(exp.glob())) == 3
    assert _envelope(exp) == before


def _recipes() -> dict[str, str]:
    """The code blocks of docs/guide/reading-results.md, by the library each imports."""
    text = PAGE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [(re.search(r"^import (pandas|duckdb|polars)\b", b, re.M), b) for b in blocks]
    return {m[1]: b for m, b in found if m}


def _run(code: str, r: float, capsys) -> dict:
    code, replaced = re.subn(r"^r = 0\.5  #", f"r = {r!r}  #", code, flags=re.M)
    assert replaced == 1
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    capsys.readouterr()
    return namespace


def _best(library: str, namespace: dict) -> float:
    certified = namespace["certified"]
    if library == "pandas":
        return float(certified.max())
    if library == "duckdb":
        return float(certified["accuracy"].iloc[0])
    return float(certified["accuracy"].max())


@pytest.mark.parametrize("library", ["pandas", "duckdb", "polars"])
def test_the_docs_recipes_give_the_envelope_of_a_ddrs_experiment(ddrs_experiment, library, capsys):
    pytest.importorskip(library)
    exp = ddrs_experiment
    assert (
        CliRunner()
        .invoke(app, ["compact", "--storage", "results", "--experiment", "digits"])
        .exit_code
        == 0
    )
    expected = _envelope(exp)
    # The adjusted rows matter: read from the Monte-Carlo certificates (*_raw) the envelope
    # would be [1, 1, 1, 1, 1, 0.2] (C right everywhere with radius 1.6, A's 1.9 at point 1).
    assert expected == pytest.approx([0.8, 0.8, 0.6, 0.6, 0.4, 0.0])
    code = _recipes()[library]
    got = [_best(library, _run(code, r, capsys)) for r in RADII]
    assert np.round(got, 9).tolist() == expected


def test_the_python_api_in_the_docs_is_the_envelope(ddrs_experiment, capsys):
    code = next(
        b
        for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
        if "from sweeper.results import Experiment, load_results" in b
    )
    exec(compile(code, str(PAGE), "exec"), namespace := {})
    assert "certified_accuracy" in capsys.readouterr().out
    assert namespace["frame"]["sound"].all() and len(namespace["frame"]) == 15


def test_a_ddrs_models_largest_radius_is_at_its_largest_per_point_sigma(ddrs_experiment):
    from sweeper.results.certify_rows import max_radius
    from sweeper.results.envelope import max_radii, model_table

    frame = load_results(ddrs_experiment).frame
    reach = dict(zip(model_table(frame)["trial_id"], max_radii(frame), strict=True))
    assert reach[A.trial_id] == pytest.approx(max_radius(1.2, 1000, 0.001))  # σ_x up to 1.2
    assert reach[B.trial_id] == pytest.approx(max_radius(0.25, 1000, 0.001))
    assert reach[C.trial_id] == pytest.approx(max_radius(1.0, 1000, 0.001))


# ------------------------------------------------------------------ the validated reading
SPEC = CertifySpec(n0=10, n=1000, alpha=0.001, skip=1, max_points=None)
CID = SPEC.cert_id
D = A.replace(sigma=2.0)
E = A.replace(sigma=0.75)
LABELS = [2, 0, 4, 9, 4]
# What read_stage(columns=["radius"]) gives: the column asked for, then what validation reads
RADIUS_AND_CHECKED = [
    "radius",
    "experiment",
    "trial_id",
    "cert_id",
    "idx",
    "dataset",
    "label",
    "predict",
    "correct",
    "sigma_cert",
    "n",
    "alpha",
    "n0",
    "count",
    "p_lower",
    "smoothing",
    "predict_raw",
    "radius_raw",
    "correct_raw",
    "memory_changed",
]


def _rows(
    exp: Experiment,
    cfg: TrialConfig,
    radius: list[float],
    idx: list[int] | None = None,
    cert_id: str = CID,
) -> pa.Table:
    """Fixed-σ CERTIFY rows of `cfg` on test points `idx` (default 0, 1, ...) under the
    setting `cert_id` (that of SPEC unless given): CERTIFY's arithmetic on the fewest votes
    whose radius reaches each of `radius` (0: an abstention; `_reach` says what it gives),
    the label predicted; the trial's trial.json written. An imported setting's rows have no
    counts, their radii as given, and the import record `sweeper import` writes."""
    idx = list(range(len(radius))) if idx is None else idx
    labels = [LABELS[i] for i in idx]
    certified_rows.trained(exp, cfg)
    sigmas = [cfg.sigma] * len(idx)
    imported = cert_id.startswith("imported-")
    reached = [min(r, 1.0) for r in radius] if imported else radius
    cols = certified_rows.reaching(SPEC.n, SPEC.alpha, idx, labels, labels, reached, sigmas)
    metadata: dict = {"config": cfg.to_dict()}
    if imported:
        cols.update(count=[None] * len(idx), p_lower=[None] * len(idx), radius=radius)
        metadata["certify_backend"] = "imported from a test's log"
    constants = {"smoothing": "fixed", "n0": SPEC.n0, "n": SPEC.n, "alpha": SPEC.alpha}
    return shard_table(cfg, exp.name, cert_id, constants, cols, metadata)


def _reach(radius: float, sigma: float) -> float:
    """The radius `_rows` gives for `radius` at σ (n = 1000, α = 0.001)."""
    count = certified_rows.count_for(radius, sigma, SPEC.n, SPEC.alpha)
    return float(radius_from_counts(count, SPEC.n, SPEC.alpha, sigma)[1])


def _model(exp: Experiment, cfg: TrialConfig, reaching: list[float], **columns) -> str:
    """A model compacted from one shard (`_rows`, then `columns` replaced), written with the
    project's writers (local or S3); returns its compacted file."""
    table = _with(_rows(exp, cfg, reaching), **columns)
    write_table(table, exp.shard_path(cfg.trial_id, CID, 0, 1))
    compaction.compact(exp, CERTIFY, cfg.trial_id, SPEC, 1)
    return exp.compacted_path("certify", cfg.trial_id, CID, 1)


@pytest.fixture
def two_models(tmp_path) -> Experiment:
    """Models A (points 0, 1) and B (points 0-2), compacted; no cache yet."""
    exp = Experiment(str(tmp_path), "exp")
    _model(exp, A, [0.3, 0.2])
    _model(exp, B, [0.1, 0.2, 0.3])
    return exp


def _covers(exp: Experiment) -> dict:
    return json.loads(pq.read_schema(exp.cache_path("certify")).metadata[COVERS])


def _recorded(exp: Experiment, paths: list[str]) -> dict:
    """What a cache records of the files it holds: each one's size and bytes' SHA-256."""
    return {
        exp.relative(p): [Path(p).stat().st_size, hashlib.sha256(Path(p).read_bytes()).hexdigest()]
        for p in paths
    }


def _garble(path: str) -> None:
    """Same size, not Parquet: a reader that opens it fails; one that takes the cache's
    record of it (path and size) never opens it."""
    Path(path).write_bytes(b"\0" * Path(path).stat().st_size)


def _points(table: pa.Table) -> dict[str, list[int]]:
    """trial_id -> its test points, as read."""
    out: dict[str, list[int]] = {}
    for row in table.select(["trial_id", "idx"]).to_pylist():
        out.setdefault(row["trial_id"], []).append(row["idx"])
    return {k: sorted(v) for k, v in out.items()}


def _rewrite_cache(exp: Experiment, change) -> None:
    """The cache's rows changed by `change(table)`, its record of the files kept."""
    path = exp.cache_path("certify")
    table = pq.read_table(path)
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), path)


def test_the_cache_folds_in_only_files_that_validate_and_every_read_names_the_others(
    two_models,
):
    """Beside A and B: model D's file has `time_s` as a list (its problem's text has a ": "
    of its own), model E's a radius no CERTIFY at its σ gives. The cache holds A and B only,
    so every later read opens D and E again and names them."""
    exp = two_models
    lists = _rows(exp, D, [0.5, 0.5])
    lists = lists.set_column(
        lists.schema.get_field_index("time_s"),
        "time_s",
        pa.array([[0.1], [0.1]], pa.list_(pa.float64())),
    )
    bad_type = exp.compacted_path("certify", D.trial_id, CID, 1)
    write_table(lists, bad_type)
    too_far = _model(exp, E, [0.5, 0.5], radius=[_reach(0.5, 0.75), 9.0])  # nothing beyond 1.9
    assert refresh_cache(exp, CERTIFY_ROWS) == 2
    good = [exp.compacted_path("certify", cfg.trial_id, CID, 1) for cfg in (A, B)]
    assert _covers(exp) == _recorded(exp, good)
    expected = sorted(
        [
            f"{bad_type}: column 'time_s' is list<element: double>, not double",
            f"{too_far}: a radius larger than n and alpha allow for its sigma",
        ]
    )
    for _ in range(2):  # the read after the refresh, and after another one
        result = read_stage(exp, CERTIFY_ROWS)
        assert sorted(result.invalid) == expected
        assert _points(result.table) == {A.trial_id: [0, 1], B.trial_id: [0, 1, 2]}
        assert sorted(result.files) == sorted(good)
        assert refresh_cache(exp, CERTIFY_ROWS) == 2


def test_a_refresh_keeps_the_rows_the_cache_holds_and_adds_the_new_models(two_models):
    """A refresh after C is compacted keeps A's and B's cached rows beside C's. A file the
    cache holds is served from it only while its bytes are those cached: A's garbled at its
    size is read (and named), B's and C's rows still come from the cache."""
    exp = two_models
    assert refresh_cache(exp, CERTIFY_ROWS) == 2
    _model(exp, C, [0.4, 0.5, 0.6, 0.7])
    assert refresh_cache(exp, CERTIFY_ROWS) == 3
    expected = {A.trial_id: [0, 1], B.trial_id: [0, 1, 2], C.trial_id: [0, 1, 2, 3]}
    assert _points(pq.read_table(exp.cache_path("certify"))) == expected
    assert len(_covers(exp)) == 3 and refresh_cache(exp, CERTIFY_ROWS) == 3
    result = read_stage(exp, CERTIFY_ROWS)
    assert _points(result.table) == expected and not result.invalid
    garbled = exp.compacted_path("certify", A.trial_id, CID, 1)
    _garble(garbled)
    result = read_stage(exp, CERTIFY_ROWS)
    assert [line.partition(": ")[0] for line in result.invalid] == [garbled]
    assert _points(result.table) == {B.trial_id: [0, 1, 2], C.trial_id: [0, 1, 2, 3]}


def test_a_read_of_some_columns_has_those_and_the_models_ids_from_cache_and_files(
    two_models,
):
    """Validation reads more (`RADIUS_AND_CHECKED`), from the cache or the files, but a read
    returns what it asked and each row's model and point; a warm read of the cache (its rows
    found valid before: `read_memo`) reads only those."""
    exp = two_models
    refresh_cache(exp, CERTIFY_ROWS)
    asked = ["radius", "trial_id", "cert_id", "idx"]
    cached = read_stage(exp, CERTIFY_ROWS, ["radius"])  # every model from the cache
    assert cached.table.column_names == asked
    assert read_stage(exp, CERTIFY_ROWS, ["radius"]).table.equals(cached.table)  # warm
    _model(exp, C, [0.4])  # and one from its file
    both = read_stage(exp, CERTIFY_ROWS, ["radius"])
    assert both.table.column_names == asked and not both.invalid
    assert set(RADIUS_AND_CHECKED) > set(asked)
    reached = [(0.3, 0.5), (0.2, 0.5), (0.1, 0.25), (0.2, 0.25), (0.3, 0.25), (0.4, 1.0)]
    expected = sorted(_reach(r, sigma) for r, sigma in reached)
    assert sorted(both.table.column("radius").to_pylist()) == expected


def test_a_cache_that_records_sizes_only_is_not_used_and_a_refresh_rebuilds_it(two_models):
    """A cache written before content digests (its record: path -> size) vouches for no file:
    the files are read (nothing is named: they are valid), and a refresh records digests."""
    exp = two_models
    refresh_cache(exp, CERTIFY_ROWS)
    sizes = {rel: record[0] for rel, record in _covers(exp).items()}
    cache = exp.cache_path("certify")
    pq.write_table(pq.read_table(cache).replace_schema_metadata({COVERS: json.dumps(sizes)}), cache)
    garbled = exp.compacted_path("certify", A.trial_id, CID, 1)
    _garble(garbled)  # read: not served from the old cache
    result = read_stage(exp, CERTIFY_ROWS)
    assert [line.partition(": ")[0] for line in result.invalid] == [garbled]
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 2
    assert refresh_cache(exp, CERTIFY_ROWS) == 1
    assert _covers(exp) == _recorded(exp, [exp.compacted_path("certify", B.trial_id, CID, 1)])


def test_a_cache_whose_rows_were_edited_is_named_and_the_files_read(two_models):
    """The cache edited (A's point 0 without its trial_id; a row appended) with its record of
    the files kept: its rows no longer have the digests it was written with, so it is
    named and every model is read from its file."""
    exp = two_models
    refresh_cache(exp, CERTIFY_ROWS)

    def forget_a_trial(table: pa.Table) -> pa.Table:
        trial = table.column("trial_id").to_pylist()
        trial[0] = None
        return table.set_column(0, "trial_id", pa.array(trial, pa.string()))

    cache = exp.cache_path("certify")
    for change in (forget_a_trial, lambda t: pa.concat_tables([t, t.slice(0, 1)])):
        _rewrite_cache(exp, change)
        result = read_stage(exp, CERTIFY_ROWS)
        assert result.invalid == [
            f"{cache}: its rows are not those it was written with; reading the files instead"
        ]
        assert _points(result.table) == {A.trial_id: [0, 1], B.trial_id: [0, 1, 2]}
        refresh_cache(exp, CERTIFY_ROWS)


def test_model_index_finds_each_rows_model_and_minus_one_for_others():
    def model(trial_id: str) -> StageFile:
        return StageFile(f"{trial_id}.parquet", "certify", trial_id, CID, "compacted")

    table = pa.table(
        {"trial_id": ["a", "b", "a", None, "b", "c"], "cert_id": [CID, CID, "other", CID, CID, CID]}
    )
    index = _model_index(table, "cert_id", [model("b"), model("a")])
    assert index.tolist() == [1, 0, -1, -1, 0, -1] and index.dtype == np.int64
    empty = _model_index(table.slice(0, 0), "cert_id", [model("a")])
    assert empty.dtype == np.int64 and empty.shape == (0,)


def test_uncovered_counts_the_compacted_files_the_cache_does_not_hold(two_models):
    """Compacted files only (not a model's shards), each held while its size is the one the
    cache recorded; without a readable cache, every one."""
    exp = two_models
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 2  # no cache yet
    refresh_cache(exp, CERTIFY_ROWS)
    _model(exp, C, [0.4])
    for k in (0, 1):  # D: two shards of three, not compacted
        write_table(_rows(exp, D, [0.5], [k]), exp.shard_path(D.trial_id, CID, k, 3))
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 1  # C
    with open(exp.compacted_path("certify", A.trial_id, CID, 1), "ab") as f:
        f.write(b"\0")  # changed since the cache was written
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 2
    cache = exp.cache_path("certify")
    pq.write_table(pq.read_table(cache).replace_schema_metadata({}), cache)  # not a cache
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 3
    Path(cache).write_bytes(b"not parquet")
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 3


def test_the_reading_path_reads_an_experiment_in_a_bucket(s3_endpoint):
    """On S3 (moto): the cache is written and read through the bucket's filesystem, files it
    does not hold are read and validated, a model's shards tell its missing ones."""
    exp = Experiment("s3://sweeper-test/reading", "exp")
    _model(exp, A, [0.3, 0.2])
    _model(exp, B, [0.1, 0.2, 0.3])
    assert refresh_cache(exp, CERTIFY_ROWS) == 2
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 0
    _model(exp, C, [0.4])
    bad = _model(exp, E, [0.5, 0.5], radius=[_reach(0.5, 0.75), 9.0])
    write_table(_rows(exp, D, [0.5], [1]), exp.shard_path(D.trial_id, CID, 1, 3))
    assert uncovered(exp, CERTIFY_ROWS, exp.stage_files("certify")) == 2
    result = read_stage(exp, CERTIFY_ROWS)
    assert result.invalid == [f"{bad}: a radius larger than n and alpha allow for its sigma"]
    assert _points(result.table) == {
        A.trial_id: [0, 1],
        B.trial_id: [0, 1, 2],
        C.trial_id: [0],
        D.trial_id: [1],
    }
    assert result.missing == {(D.trial_id, CID): [0, 2]}
    frame = load_results(exp).frame
    assert len(frame) == 7 and frame["sound"].all()


def test_identity_columns_are_the_trials_hyperparameters_typed_as_declared():
    """Every TrialConfig field but those of the environment it ran in (paths, workers, how
    the model was run), typed from its annotation (an optional int is an int64 column)."""
    got = {f.name: f.type for f in identity_fields()}
    assert list(got) == [f.name for f in fields(TrialConfig) if f.name not in ENVIRONMENT_FIELDS]
    assert not {"data_dir", "num_workers", "channels_last", "compile"} & set(got)
    assert (got["dataset"], got["sigma"], got["m_train"], got["mix_detach"]) == (
        pa.string(),
        pa.float64(),
        pa.int64(),
        pa.bool_(),
    )
    assert (got["epochs"], got["amp"], got["init_from"]) == (pa.int64(), pa.string(), pa.string())


def test_radii_up_to_what_certify_can_give_are_kept_and_each_problem_is_named(tmp_path):
    """Models at σ = 0.5, n = 1000, α = 0.001, whose largest radius is L = σ·Φ⁻¹(α^(1/n)):
    a computed radius may reach L plus float slack (L·1e-9 + 1e-12), an imported one (printed
    to 3 digits) L plus L·6e-3 + 5e-4; anything beyond, and rows or files no CERTIFY wrote,
    are named and left out."""
    exp = Experiment(str(tmp_path), "exp")
    big = max_radius(0.5, 1000, 0.001)
    computed, printed = big * 1e-9 + 1e-12, big * 6e-3 + 5e-4
    imported = "imported-sigma-0.5-n-1000-alpha-0.001"
    too_far = "a radius larger than n and alpha allow for its sigma"
    models = [  # radius of points 0 and 1, cert_id, predict of point 1; problem or None
        ([big, big + computed], CID, 0, None),
        ([0.1, big + 1e-6], CID, 0, too_far),
        ([big, big + printed - 1e-4], imported, 0, None),
        ([0.1, big + printed + 1e-4], imported, 0, too_far),
        ([0.1, -0.1], CID, 0, "a radius that is negative, NaN or infinite"),
        ([0.1, 0.2], CID, -1, "an abstention with a radius"),
    ]
    expected, kept = [], {}
    for epochs, (radius, cert_id, predict, problem) in enumerate(models, 2):
        cfg = A.replace(epochs=epochs, amp="bf16")
        reached = [min(max(r, 0.1), big * (1 - 1e-9)) for r in radius]
        table = _with(_rows(exp, cfg, reached, cert_id=cert_id), radius=radius)
        table = table.set_column(
            table.schema.get_field_index("predict"), "predict", pa.array([2, predict])
        )
        table = table.set_column(
            table.schema.get_field_index("correct"), "correct", pa.array([True, predict == 0])
        )
        path = exp.shard_path(cfg.trial_id, cert_id, 0, 1)
        write_table(table, path)
        if problem is None:
            kept[cfg.trial_id] = [0, 1]
        else:
            expected.append(f"{path}: {problem}")
    garbage = exp.shard_path(B.trial_id, CID, 0, 1)
    fileio.write_bytes_atomic(garbage, b"not parquet")
    expected.append(
        f"{garbage}: not a readable Parquet file (Parquet magic bytes not found in "
        "footer. Either the file is corrupted or this is not a parquet file.)"
    )
    extra = exp.shard_path(C.trial_id, CID, 0, 1)
    write_table(_rows(exp, C, [0.1]).append_column("note", pa.array(["hi"])), extra)
    expected.append(f"{extra}: unexpected columns ['note']")
    result = read_stage(exp, CERTIFY_ROWS)
    assert sorted(result.invalid) == sorted(expected)
    assert _points(result.table) == kept
    assert set(result.table.column("amp").to_pylist()) == {"bf16"}


def _with(table: pa.Table, **columns) -> pa.Table:
    """`table` with the given columns' values replaced (typed as the schema says)."""
    for name, values in columns.items():
        field = table.schema.get_field_index(name)
        table = table.set_column(field, name, pa.array(values, table.schema.field(name).type))
    return table


def test_each_rows_problem_is_named_with_its_file_and_only_that_file_is_left_out(tmp_path):
    """Models of two points (0 and 1: labels 2 and 0, predicted right), each with one thing
    no CERTIFY of this experiment writes; beside them a model whose second shard repeats a
    point of its first (only the second is left out)."""
    exp = Experiment(str(tmp_path), "exp")
    cases = [
        ({"trial_id": [B.trial_id] * 2}, "trial_id is not the one its path names"),
        ({"cert_id": ["another"] * 2}, "cert_id is not the one its path names"),
        ({"experiment": [None, "exp"]}, "experiment is not 'exp'"),
        ({"idx": [1, 1]}, "test points the model already has (duplicated rows)"),
        ({"idx": [None, 1]}, "a test point number that is missing or negative"),
        ({"idx": [-1, 1]}, "a test point number that is missing or negative"),
        ({"label": [None, 0]}, "a label outside the data set's classes"),
        (
            {"predict": [None, 0], "correct": [False, True]},
            "a prediction outside the data set's classes",
        ),
        ({"correct": [None, True]}, "correct is missing"),
        ({"label": [10, 0], "correct": [False, True]}, "a label outside the data set's classes"),
        (  # no class count: even label 0, predicted 0, is outside it
            {"dataset": ["no-such-set"] * 2, "label": [0, 0], "predict": [0, 0]},
            "a label outside the data set's classes",
        ),
        (
            {"predict": [10, 0], "correct": [False, True]},
            "a prediction outside the data set's classes",
        ),
        (
            {"predict": [-2, 0], "correct": [False, True]},
            "a prediction outside the data set's classes",
        ),
        ({"correct": [False, True]}, "correct disagrees with predict and label"),
    ]
    expected = []
    for epochs, (columns, problem) in enumerate(cases, 2):
        cfg = A.replace(epochs=epochs)
        path = exp.shard_path(cfg.trial_id, CID, 0, 1)
        write_table(_with(_rows(exp, cfg, [0.1, 0.2]), **columns), path)
        expected.append(f"{path}: {problem}")
    split = A.replace(epochs=22)
    write_table(_rows(exp, split, [0.1, 0.2]), exp.shard_path(split.trial_id, CID, 0, 2))
    again = exp.shard_path(split.trial_id, CID, 1, 2)
    write_table(_rows(exp, split, [0.3, 0.4], [1, 2]), again)
    expected.append(f"{again}: test points the model already has (duplicated rows)")
    result = read_stage(exp, CERTIFY_ROWS)
    assert sorted(result.invalid) == sorted(expected)
    assert _points(result.table) == {split.trial_id: [0, 1]}


def test_test_points_are_compared_within_a_model_however_large_their_numbers(tmp_path):
    """Two models with points 0, 2⁴⁰, 2⁵³ and 2⁵³ + 1 each: no point twice in a model,
    whatever the two models' order (a key of model·2⁴⁰ + point made one model's 2⁴⁰ the next
    one's 0) and however large the number (as floats, 2⁵³ + 1 would be 2⁵³): each file is named
    for what is wrong, points outside the test split."""
    exp = Experiment(str(tmp_path), "exp")
    points = [0, 2**40, 2**53, 2**53 + 1]
    paths = []
    for cfg in (A, B):
        table = _with(_rows(exp, cfg, [0.1, 0.2, 0.3, 0.4]), idx=points)
        paths.append(exp.shard_path(cfg.trial_id, CID, 0, 1))
        write_table(table, paths[-1])
    result = read_stage(exp, CERTIFY_ROWS)
    outside = "a test point outside the data set's test split"  # not "duplicated rows"
    assert sorted(result.invalid) == sorted(f"{p}: {outside}" for p in paths)


# ------------------------------------------------------------------ the results table
def _memory(trial_id: str, idx: list[int], idx_type: pa.DataType | None = None) -> pa.Table:
    """A legacy DDRS memory file's rows (the memory pass changed nothing)."""
    k = len(idx)
    return pa.table(
        {
            "trial_id": [trial_id] * k,
            "cert_id": [CID] * k,
            "idx": pa.array(idx, idx_type or pa.int64()),
            "predict_memory": [1] * k,
            "radius_memory": [0.5] * k,
            "correct_memory": [True] * k,
            "memory_changed": [False] * k,
        }
    )


def _memory_files(root: str) -> list[str]:
    """Two memory files (one with idx as int32, as another writer may have typed it) and a
    third that is not Parquet; returns their paths."""
    exp = Experiment(root, "exp")
    paths = [exp.memory_path(cfg.trial_id, CID) for cfg in (A, B, C)]
    write_table(_memory(A.trial_id, [0, 1], pa.int32()), paths[0])
    write_table(_memory(B.trial_id, [2]), paths[1])
    fileio.write_bytes_atomic(paths[2], b"not parquet")
    return paths


def test_read_tables_reads_files_as_one_table_of_the_schema_and_names_a_corrupt_one(tmp_path):
    a, b, corrupt = _memory_files(str(tmp_path))
    table = read_tables([a, b], MEMORY_SCHEMA)
    assert table.schema == MEMORY_SCHEMA and table.column("idx").to_pylist() == [0, 1, 2]
    assert read_tables([], MEMORY_SCHEMA).equals(MEMORY_SCHEMA.empty_table())
    with pytest.raises(ResultsError) as error:
        read_tables([a, corrupt, b], MEMORY_SCHEMA)
    assert str(error.value) == (
        f"corrupt results file {corrupt}: Could not open Parquet input source '{corrupt}': "
        "Parquet magic bytes not found in footer. Either the file is corrupted or this is not "
        "a parquet file."
    )


def test_read_tables_reads_file_by_file_when_the_one_scan_fails(tmp_path, monkeypatch):
    """The files as one table of the schema all the same (here the scan of all of them at
    once fails, as it does when one of them is corrupt)."""
    a, b, _ = _memory_files(str(tmp_path))
    expected = read_tables([a, b], MEMORY_SCHEMA)

    def failing(*args, **kwargs):
        raise OSError("the listing failed")

    import pyarrow.dataset as pads

    monkeypatch.setattr(pads, "dataset", failing)
    table = read_tables([a, b], MEMORY_SCHEMA)
    assert table.schema == MEMORY_SCHEMA and table.equals(expected)


def test_read_tables_reads_through_the_buckets_filesystem(s3_endpoint):
    a, b, corrupt = _memory_files("s3://sweeper-test/memory")
    assert read_tables([a, b], MEMORY_SCHEMA).column("idx").to_pylist() == [0, 1, 2]
    with pytest.raises(ResultsError, match=f"^corrupt results file {corrupt}: "):
        read_tables([a, b, corrupt], MEMORY_SCHEMA)  # the good ones read from the bucket


def test_load_results_of_some_columns_has_those_and_what_the_reading_needs(ddrs_experiment):
    """With a legacy memory file to apply (its checks read them), the columns validation
    reads too."""
    frame = load_results(ddrs_experiment, ["radius"]).frame
    assert list(frame.columns) == [
        "radius",
        "smoothing",
        "predict",
        "correct",
        "predict_raw",
        "radius_raw",
        "correct_raw",
        "memory_changed",
        "experiment",
        "trial_id",
        "cert_id",
        "idx",
        "dataset",
        "label",
        "sigma_cert",
        "n",
        "alpha",
        "n0",
        "count",
        "p_lower",
        "sound",
    ]
    assert len(frame) == 15


def test_raw_certificates_keep_their_types_beside_models_without_them(ddrs_experiment):
    """predict/radius/correct_raw of a fixed-σ model (none stored: its own values) and of
    DDRS models (the Monte-Carlo ones) in one frame: ints, floats and bools, not floats."""
    frame = load_results(ddrs_experiment).frame.sort_values(["trial_id", "idx"])
    assert (frame["predict_raw"].dtype, frame["radius_raw"].dtype, frame["correct_raw"].dtype) == (
        np.int64,
        np.float64,
        np.bool_,
    )
    by_model = {t: g for t, g in frame.groupby("trial_id")}
    assert by_model[B.trial_id]["predict_raw"].tolist() == [2, 0, 1, 9, -1]  # fixed: predict
    assert by_model[A.trial_id]["predict_raw"].tolist() == [2, 0, 4, -1, 9]  # as certified
    assert by_model[A.trial_id]["correct_raw"].tolist() == [True, True, True, False, False]


def test_a_legacy_file_without_the_newer_columns_is_read_as_fixed_sigma_and_sound(tmp_path):
    """A compacted file written before DDRS: no `smoothing` nor raw columns."""
    exp = Experiment(str(tmp_path), "exp")
    legacy = _rows(exp, A, [0.3, 0.3, 0.2]).drop_columns(sorted(LEGACY_OPTIONAL))
    write_table(legacy, exp.compacted_path("certify", A.trial_id, CID, 1))
    results = load_results(exp)
    assert not results.invalid and len(results.frame) == 3
    assert results.frame["smoothing"].tolist() == ["fixed"] * 3
    expected = [_reach(0.3, 0.5), _reach(0.3, 0.5), _reach(0.2, 0.5)]
    assert results.frame["radius_raw"].tolist() == expected
    assert results.frame["sound"].all()


def test_a_shard_table_without_a_smoothing_is_fixed_sigma_with_no_raw_certificates():
    """Rows of CERTIFY's columns for a trial: its identity and the constants on every row,
    "fixed" σ unless the constants say otherwise, the DDRS columns null; metadata as given
    (strings as they are, anything else as JSON)."""
    columns = _rows(Experiment("results", "exp"), A, [0.3, 0.0]).select(
        ["idx", "label", "predict", "count", "p_lower", "radius", "correct", "sigma_cert", "time_s"]
    )
    constants = {"n0": SPEC.n0, "n": SPEC.n, "alpha": SPEC.alpha}
    table = shard_table(
        A, "exp", CID, constants, columns.to_pydict(), {"backend": "torch", "config": {"a": 1}}
    )
    assert table.schema.remove_metadata().equals(SCHEMA)
    assert table.schema.metadata == {b"sweeper.backend": b"torch", b"sweeper.config": b'{"a": 1}'}
    assert table.column("smoothing").to_pylist() == ["fixed", "fixed"]
    assert table.column("trial_id").to_pylist() == [A.trial_id] * 2
    assert table.column("sigma").to_pylist() == [0.5] * 2  # A's σ, an identity column
    assert table.column("n").to_pylist() == [1000] * 2  # a constant
    for name in ("predict_raw", "radius_raw", "correct_raw", "memory_changed"):
        assert table.column(name).null_count == 2, name


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {COVERS: '{"a": 5}', ROWS: "{}"},
        {COVERS: '{"a": [1]}', ROWS: "{}"},
        {COVERS: "not json"},
    ],
)
def test_a_cache_without_its_records_is_named_and_the_files_read(two_models, metadata):
    """No record of the files, of its rows, or records of another shape: named as no cache
    of this experiment, every model read from its file."""
    exp = two_models
    refresh_cache(exp, CERTIFY_ROWS)
    cache = exp.cache_path("certify")
    pq.write_table(pq.read_table(cache).replace_schema_metadata(metadata), cache)
    result = read_stage(exp, CERTIFY_ROWS)
    assert [line.partition(": ")[0] for line in result.invalid] == [cache]
    assert result.invalid[0].startswith(f"{cache}: not a cache of this experiment (")
    assert result.invalid[0].endswith("; reading the files")
    assert _points(result.table) == {A.trial_id: [0, 1], B.trial_id: [0, 1, 2]}


def test_the_cache_opens_no_file_whose_size_changed_and_serves_the_rest(two_models, monkeypatch):
    """A file whose size is not the recorded one is read as a file, not hashed; the others
    are hashed and served from the cache."""
    exp = two_models
    refresh_cache(exp, CERTIFY_ROWS)
    a = exp.compacted_path("certify", A.trial_id, CID, 1)
    with open(a, "ab") as f:
        f.write(b"\0")  # no longer Parquet: read, and named
    hashed = []
    real = fileio.read_bytes
    monkeypatch.setattr(fileio, "read_bytes", lambda p, *a: hashed.append(p) or real(p, *a))
    result = read_stage(exp, CERTIFY_ROWS)
    assert [p for p in hashed if p.endswith(".parquet")] == [
        exp.compacted_path("certify", B.trial_id, CID, 1)
    ]
    assert [line.partition(": ")[0] for line in result.invalid] == [a]
    assert _points(result.table) == {B.trial_id: [0, 1, 2]}


def test_a_file_and_trial_from_before_issue_26s_settings_read_as_they_trained(tmp_path):
    """A compacted file written before normalize_input, stability_loss, macer_deferred and
    lr_step_offset existed lacks their columns, and its trial.json their keys: the trial
    keeps its id, the rows are read (those columns null) with their certificates unchanged."""
    from trainables.kernel.config import ADDED_FIELDS

    exp = Experiment(str(tmp_path), "old")
    old = {"stability_loss": "kl", "lr_step_offset": 0}  # how stability trained then
    cfg = TrialConfig(dataset="digits", method="stability", sigma=0.25, **old)
    path = certified_rows.model(exp, cfg, SPEC, [990, 700, 400, 1000, 10])
    new = pq.read_table(path)
    pq.write_table(new.drop_columns(list(ADDED_FIELDS)), path)
    status = Path(exp.trial_dir(cfg.trial_id), "trial.json")
    doc = json.loads(status.read_text())
    doc["config"] = {k: v for k, v in doc["config"].items() if k not in ADDED_FIELDS}
    status.write_text(json.dumps(doc))
    assert TrialConfig.from_dict(doc["config"]).trial_id == cfg.trial_id
    results = load_results(exp)
    assert results.invalid == []
    frame = results.frame.sort_values("idx")
    assert frame["radius"].tolist() == new.column("radius").to_pylist()
    assert frame["stability_loss"].isna().all() and frame["lr_step_offset"].isna().all()
