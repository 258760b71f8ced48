"""What a security tester found the reader trusting, each fixed: a cache written before the
newest trial settings, duplicates split between the cache and a planted compacted file, a
legacy memory file's radii beyond what CERTIFY can give, damaged pages, and a footer claiming
more rows than a model's grid. Real rows (`certified_rows`) in the experiment
`test_row_provenance` builds: A, B and W compacted and cached, X's DDRS shard awaiting its
memory pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import certified_rows
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_row_provenance import (
    DD,
    POINTS,
    RADII,
    SPEC,
    VOTES,
    A,
    W,
    X,
    _abstaining_x,
    _compacted,
    _memory,
    assert_left_out,
    build_experiment,
    envelope,
    left_out,
    rewrite,
    runner,
)

from sweeper.cli import app
from sweeper.plan.spec import CertifySpec
from sweeper.results import reader, validation
from sweeper.results.certify_rows import CERTIFY_ROWS
from sweeper.results.provenance import most_points
from sweeper.results.reader import COVERS, ROWS, read_stage, refresh_cache
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from sweeper.run import compaction
from sweeper.run.certify_stage import CERTIFY

# Trial settings added to the rows' schema after caches were written (`ADDED_FIELDS`).
NEWER = ["scale_input", "train_multi_noise", "ddrs_macer_loss"]


@pytest.fixture
def experiment(tmp_path) -> Experiment:
    return build_experiment(tmp_path)


def _opened(monkeypatch) -> list[list[str]]:
    """The files each `read_valid` of the reader opens (not those the cache serves)."""
    opened: list[list[str]] = []
    real = reader.read_valid

    def recording(exp, stage, files, cols):
        opened.append([f.path for f in files])
        return real(exp, stage, files, cols)

    monkeypatch.setattr(reader, "read_valid", recording)
    return opened


def _args(command: str, exp: Experiment, *extra: str) -> list[str]:
    return [command, "--storage", exp.storage, "--experiment", exp.name, *extra]


# ------------------------------------------------------------------ 1. an older cache
def test_a_cache_written_before_the_newest_settings_is_served_by_every_command(
    experiment, monkeypatch
):
    """The cache as written before scale_input, train_multi_noise and ddrs_macer_loss: its
    file without their columns, its digests of the others kept. Those columns read as null
    on both sides: not a forgery. envelope, table and report all serve it."""
    exp = experiment
    before, _ = envelope(exp)
    cache = exp.cache_path("certify")
    table = pq.read_table(cache)
    meta = table.schema.metadata
    digests = {k: v for k, v in json.loads(meta[ROWS]).items() if k not in NEWER}
    old = table.drop_columns(NEWER).replace_schema_metadata(
        {COVERS: meta[COVERS], ROWS: json.dumps(digests)}
    )
    pq.write_table(old, cache)
    opened = _opened(monkeypatch)
    rows = read_stage(exp, CERTIFY_ROWS)
    assert rows.invalid == [] and rows.table.num_rows == 40
    assert opened == [[exp.shard_path(X.trial_id, DD.cert_id, 0, 1)]]  # the rest: the cache's
    accuracy, stderr = envelope(exp)
    assert accuracy == before and left_out(stderr) == []
    shown = runner.invoke(app, _args("table", exp, "--radii", RADII, "--format", "csv"))
    assert shown.exit_code == 0, shown.output
    built = runner.invoke(app, _args("report", exp, "--formats", "svg"))
    assert built.exit_code == 0, built.output


# ------------------------------------------------------------------ 2. two compacted files
def _a_in_two_shards(exp: Experiment) -> str:
    """A compacted again from two shards (its honest file `compacted-of-00002`), the cache
    refreshed; returns that file."""
    Path(_compacted(exp, A)).unlink()
    rows = certified_rows.rows(exp, A, SPEC, VOTES[A], POINTS)
    for k in (0, 1):
        write_table(rows.slice(5 * k, 5), exp.shard_path(A.trial_id, SPEC.cert_id, k, 2))
    compaction.compact(exp, CERTIFY, A.trial_id, SPEC, 2)
    refresh_cache(exp, CERTIFY_ROWS)
    return exp.compacted_path("certify", A.trial_id, SPEC.cert_id, 2)


@pytest.mark.parametrize("cache", ["kept", "removed", "refreshed"])
def test_a_model_with_two_compacted_files_is_left_out_whole_and_both_named(experiment, cache):
    """`compacted-of-00001` planted beside A's honest `compacted-of-00002` (cached), holding
    two of A's genuine rows, correct and certified far: counted beside the cache's they lift
    the envelope. Which file is real cannot be told: A is left out whole, both named, the
    envelope that of the experiment without A (with the cache kept, removed, or refreshed
    by a driver: the planted file never enters it)."""
    exp = experiment
    honest = _a_in_two_shards(exp)
    planted = exp.compacted_path("certify", A.trial_id, SPEC.cert_id, 1)
    write_table(pq.read_table(honest).slice(0, 2), planted)
    if cache == "removed":
        Path(exp.cache_path("certify")).unlink()
    elif cache == "refreshed":
        refresh_cache(exp, CERTIFY_ROWS)
    after, stderr = envelope(exp)
    why = "two compacted files of one model (compacted-of-00001.parquet, compacted-of-00002"
    named = [line for line in left_out(stderr) if why in line]
    assert sorted(line.partition(": ")[0] for line in named) == sorted([planted, honest])
    assert len(left_out(stderr)) == 2
    envelope(exp, "--strict", code=1)
    for path in (planted, honest):
        Path(path).rename(f"{path}.away")
    without_a, _ = envelope(exp)
    assert after == without_a


# ------------------------------------------------------------------ 3. memory radii
def _memory_of_x(exp: Experiment, predict, radius) -> str:
    """X's legacy memory file: CERTIFY abstained at points 0 and 2 (`_abstaining_x`), the
    memory gives them `predict` and `radius` (the other points unchanged)."""
    labels = _abstaining_x(exp)
    shard = pq.read_table(exp.shard_path(X.trial_id, DD.cert_id, 0, 1))
    path = exp.memory_path(X.trial_id, DD.cert_id)
    table = _memory(
        X.trial_id,
        DD.cert_id,
        [*predict, *labels[2:]],
        [*radius, *shard.column("radius").to_pylist()[2:]],
        [True, True] + [False] * 8,
    )
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("radius", [1e6, 1e308, math.inf])
def test_a_memory_radius_beyond_what_n_and_alpha_allow_is_left_out(experiment, radius):
    """The abstained points 0 and 2 given their labels with radius 1e6 (or 1e308, or inf):
    beyond σ_x·Φ⁻¹(α^(1/n)), which no CERTIFY gives (X's σ_x = 1.2: 2.96 at most)."""
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    before, _ = envelope(experiment)
    path = _memory_of_x(experiment, labels[:2], [radius] * 2)
    why = (
        "a radius that is negative, NaN or infinite"
        if radius == math.inf
        else "a radius larger than n and alpha allow for its sigma"
    )
    assert_left_out(experiment, before, path, why)


def test_a_class_taken_with_a_ball_larger_than_any_of_that_class_is_left_out(experiment):
    """Point 0 (CERTIFY abstained) takes class 2 with radius 1.5, within what σ_x allows:
    the memory pass gives r_j − d ≤ r_j for a ball j of class 2, and X's only other ball
    of class 2 (point 10) has radius 0.8."""
    labels = [certified_rows.DIGIT_LABELS[i % 10] for i in POINTS]
    assert (labels[0], labels[5]) == (2, 2) and labels.count(2) == 2
    before, _ = envelope(experiment)
    path = _memory_of_x(experiment, [labels[0], -1], [1.5, 0.0])
    why = "a class taken with a ball larger than any CERTIFY gave that class"
    assert_left_out(experiment, before, path, why)


# ------------------------------------------------------------------ 4. damaged pages
def _damage_a_page(path: str) -> None:
    """The first data page header of `path`'s radius column overwritten (its footer intact:
    the file lists and its schema reads, its rows do not)."""
    meta = pq.read_metadata(path)
    chunk = meta.row_group(0).column(meta.schema.names.index("radius"))
    data = bytearray(Path(path).read_bytes())
    data[chunk.data_page_offset : chunk.data_page_offset + 8] = b"\xff" * 8
    Path(path).write_bytes(bytes(data))


DAMAGED = "not a readable Parquet file (Couldn't deserialize thrift"


def test_a_compacted_file_with_a_damaged_page_is_named_and_left_out(experiment):
    """W's file damaged: the one scan of the files fails, so they are read one by one and W's
    is named: a corrupt results file is bad input to the reads (exit 2, the fix named); status
    and compact carry on."""
    exp = experiment
    path = _compacted(exp, W)
    _damage_a_page(path)
    refused = runner.invoke(app, _args("envelope", exp))
    assert refused.exit_code == 2 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"error: corrupt results file {path}: {DAMAGED}")
    status = runner.invoke(app, _args("status", exp))
    assert status.exit_code == 0, status.output
    said = " ".join(status.output.split())  # wrapped at the words to its width, indented
    assert " ".join(f"{path}: {DAMAGED}".split()) in said
    compacted = runner.invoke(app, _args("compact", exp))
    assert compacted.exit_code == 0, compacted.output
    assert [p.partition(": ")[0] for p in read_stage(exp, CERTIFY_ROWS).invalid] == [path]


def test_a_cache_with_a_damaged_page_is_named_and_the_files_read(experiment):
    """The cache damaged: named, its models read from their files; `compact` rebuilds it."""
    exp = experiment
    before, _ = envelope(exp)
    cache = exp.cache_path("certify")
    _damage_a_page(cache)
    after, stderr = envelope(exp)
    assert after == before
    assert [line.partition(": ")[0] for line in left_out(stderr)] == [cache]
    assert left_out(stderr)[0].startswith(f"{cache}: {DAMAGED}")
    assert runner.invoke(app, _args("compact", exp)).exit_code == 0
    assert read_stage(exp, CERTIFY_ROWS).invalid == []  # the cache rebuilt from the files


# ------------------------------------------------------------------ 5. row counts
def test_a_file_with_more_rows_than_its_grid_is_named_and_never_scanned(experiment, monkeypatch):
    """W's file with 2,000 rows (its first repeated) where its cert_id names 10 test points
    (every 2nd of digits' 450, at most 10): its footer says so, and the file is named and
    left out before its rows are read (a shard of millions would fill memory)."""
    exp = experiment
    before, _ = envelope(exp)
    path = _compacted(exp, W)
    rewrite(path, lambda t: pa.concat_tables([t, *[t.slice(0, 1)] * 1990]))
    scanned: list[str] = []
    scan = validation.scan
    for module in (reader, validation):  # files are scanned there, the cache here
        monkeypatch.setattr(
            module, "scan", lambda paths, *a: scanned.extend(paths) or scan(paths, *a)
        )
    why = "2000 rows, more than the 10 test points its cert_id names in the test split of digits"
    assert_left_out(exp, before, path, why)
    assert path not in scanned


def test_a_models_most_test_points_are_its_grid_over_its_test_split():
    assert most_points(SPEC.cert_id, "digits") == 10  # skip 2, max 10
    assert most_points(CertifySpec(skip=20, max_points=None).cert_id, "cifar10") == 500
    assert most_points(CertifySpec(skip=7, max_points=None).cert_id, "digits") == 65  # ⌈450/7⌉
    assert most_points("imported-sigma-0.25-n-100000-alpha-0.001", "cifar10") == 10_000
    assert most_points("another", None) == 50_000  # the largest split


def test_a_cache_with_more_rows_than_its_models_grids_is_named_and_never_scanned(
    experiment, monkeypatch
):
    """The cache with 2,000 rows where the three models it records have 10 test points
    each: named from its footer, not scanned, the files read."""
    exp = experiment
    before, _ = envelope(exp)
    cache = exp.cache_path("certify")
    rewrite(cache, lambda t: pa.concat_tables([t, *[t.slice(0, 1)] * 1970]))
    scanned: list[str] = []
    scan = validation.scan
    for module in (reader, validation):  # files are scanned there, the cache here
        monkeypatch.setattr(
            module, "scan", lambda paths, *a: scanned.extend(paths) or scan(paths, *a)
        )
    rows = read_stage(exp, CERTIFY_ROWS)
    assert rows.invalid == [
        f"{cache}: 2000 rows, more than the 30 test points of the models it records; "
        "reading the files instead"
    ]
    assert cache not in scanned and rows.table.num_rows == 40
    assert envelope(exp)[0] == before


def test_a_fifo_planted_as_the_cache_is_named_not_waited_on(tmp_path):
    """pyarrow opens the cache by path: a FIFO there would block every reader forever."""
    import os

    from sweeper.results.reader import _cache_records

    path = tmp_path / "certify.parquet"
    os.mkfifo(path)
    with pytest.raises(ValueError, match="a FIFO, not a regular file"):
        _cache_records(str(path))


# ------------------------------------------------------------------ what a warm read remembers
def _validations(monkeypatch) -> list[int]:
    """How many rows each `row_problems` of the reader checked."""
    checked: list[int] = []
    real = reader.row_problems

    def counting(exp, stage, table, *args, **kwargs):
        checked.append(table.num_rows)
        return real(exp, stage, table, *args, **kwargs)

    monkeypatch.setattr(reader, "row_problems", counting)
    return checked


def test_a_warm_read_checks_no_row_again_until_an_input_of_the_checks_changes(
    experiment, monkeypatch
):
    """issue 39 §5: the cache's rows, found valid with these very inputs, are not checked
    again on the next read (`read_memo`); a trial's trial.json or the cache written again
    (even with the same bytes: the kernel's ctime) means a full check, and a cache whose rows
    were changed since is refused as before."""
    checked = _validations(monkeypatch)
    first = read_stage(experiment, CERTIFY_ROWS).table
    assert checked and checked[0] > 0
    again = read_stage(experiment, CERTIFY_ROWS).table
    assert again.equals(first) and len(checked) == 1  # the cache's rows: not checked again
    trial_json = Path(experiment.trial_dir(A.trial_id), "trial.json")
    trial_json.write_bytes(trial_json.read_bytes())  # the same bytes, written again
    assert read_stage(experiment, CERTIFY_ROWS).table.equals(first) and len(checked) == 2
    assert read_stage(experiment, CERTIFY_ROWS).table.equals(first) and len(checked) == 2
    cache = Path(experiment.cache_path("certify"))
    table = pq.read_table(cache)
    counts = table.column("count").to_pylist()
    changed = pa.array(
        [None if c is None else c - 1 for c in counts], table.schema.field("count").type
    )
    pq.write_table(table.set_column(table.column_names.index("count"), "count", changed), cache)
    rows = read_stage(experiment, CERTIFY_ROWS)
    assert any("not those it was written with" in p for p in rows.invalid), rows.invalid

    # the files are read instead: their counts, not the changed cache's
    def counts_of(table: pa.Table) -> set:
        cols = ("trial_id", "cert_id", "idx", "count")
        return set(zip(*(table.column(c).to_pylist() for c in cols), strict=True))

    assert counts_of(rows.table) == counts_of(first)
