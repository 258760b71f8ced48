"""sweeper.storage's small pure parts: which experiments a storage holds, where a trial's
checkpoint lives, how test points are cut into shards, and what messages show of a URI."""

from __future__ import annotations

import glob
import json
import os
import time

import pytest

from sweeper.results.storage import (
    Experiment,
    StageFile,
    StorageError,
    experiments,
    index_chunks,
    redact,
    storage_problem,
)
from sweeper.results.sweep_file import read_sweep, write_sweep
from trainables.kernel import fileio


def _sweep(root, name: str, mtime_ns: int) -> None:
    (root / name).mkdir()
    (root / name / "sweep.json").write_text("{}")
    os.utime(root / name / "sweep.json", ns=(mtime_ns, mtime_ns))


@pytest.mark.parametrize("folder", ["store", "store ", "store X"])
def test_experiments_are_the_top_level_folders_with_a_sweep_json_oldest_first(tmp_path, folder):
    """Oldest sweep.json first (one at the epoch itself sorts before one a nanosecond later,
    whatever their names), in a storage whose name may end in a space or any letter."""
    storage = tmp_path / folder
    storage.mkdir()
    _sweep(storage, "newest", 3_000_000_000_000_000_000)
    _sweep(storage, "middle", 2_000_000_000_000_000_000)
    _sweep(storage, "after", 1)
    _sweep(storage, "epoch", 0)
    (storage / "empty").mkdir()  # no sweep.json: not an experiment
    (storage / "loose").mkdir()
    (storage / "loose" / "sweep.json").mkdir()  # a folder named sweep.json is not one
    (storage / "file.txt").write_text("x")
    (storage / "outer").mkdir()
    _sweep(storage / "outer", "nested", 5)  # below the top level: not listed
    assert experiments(str(storage)) == ["epoch", "after", "middle", "newest"]
    assert experiments(str(storage / "absent")) == []
    assert experiments(str(storage / "file.txt")) == []


def test_an_experiment_exists_once_its_sweep_json_does_and_names_its_checkpoints(tmp_path):
    exp = Experiment(str(tmp_path), "run1")
    os.makedirs(exp.root)
    assert not exp.exists()
    (tmp_path / "run1" / "sweep.json").write_text("{}")
    assert exp.exists()
    expected = tmp_path.absolute() / "run1" / "trials" / "0123456789ab" / "checkpoint.pt"
    assert exp.checkpoint("0123456789ab") == str(expected)


def test_index_chunks_take_every_skip_th_point_up_to_max_points_in_shards():
    assert index_chunks(10, 3, None, 2) == [(0, 3), (6, 9)]
    assert index_chunks(10, 3, None, 3) == [(0, 3, 6), (9,)]
    assert index_chunks(100, 20, 3, 2) == [(0, 20), (40,)]  # max_points before the shards
    assert index_chunks(5, 1, None, 100) == [(0, 1, 2, 3, 4)]
    assert index_chunks(10000, 20, 500, 50)[-1] == tuple(range(9000, 10000, 20))
    assert len(index_chunks(10000, 20, 500, 50)) == 10  # the paper's 500 points, 10 shards
    assert index_chunks(0, 1, None, 5) == []


def test_redact_hides_credentials_and_queries_of_uris_only():
    assert redact("s3://AKIA:secret@bucket/prefix") == "s3://***@bucket/prefix"
    assert redact("s3://user@bucket/prefix") == "s3://***@bucket/prefix"
    assert redact("s3://bucket/prefix?secret_key=x&region=y") == "s3://***@bucket/prefix?***"
    assert redact("gs://a:b@bucket/p?token=t") == "gs://***@bucket/p?***"
    assert redact("s3://bucket/prefix") == "s3://bucket/prefix"
    assert redact("/local/user@host/path") == "/local/user@host/path"  # a path, not a URI
    assert redact("file:///tmp/a@b?c") == "file:///tmp/a@b?c"


def test_sweep_json_reads_back_as_written_with_the_time_it_was_written(tmp_path):
    exp = Experiment(str(tmp_path), "run1")
    assert read_sweep(exp) is None and not exp.exists()
    doc = {"trials": [{"trial_id": "0123456789ab", "sigma": 0.25}], "space": {"name": "grid"}}
    before = time.time()
    write_sweep(exp, doc)
    after = time.time()
    read = read_sweep(exp)
    assert exp.exists() and set(read) == {"trials", "space", "written"}
    assert {k: read[k] for k in doc} == doc and before <= read["written"] <= after
    assert json.loads((tmp_path / "run1" / "sweep.json").read_text()) == read


CREDENTIALS = (
    "--storage {shown}: credentials in the URI are refused (they would be stored in trial.json"
    " and Ray Tune's state): give s3://bucket/prefix and set the credentials the AWS way, in the"
    " environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), a profile (AWS_PROFILE) or the"
    " node's instance profile"
)


def test_storage_uris_with_credentials_are_a_problem_and_others_are_not():
    assert storage_problem("/data/user@host/results") is None  # a path: never a problem
    assert storage_problem("s3://bucket/prefix?region=us-west-2") is None
    assert storage_problem("s3://AKIA:secret@bucket/p") == CREDENTIALS.format(
        shown="s3://***@bucket/p"
    )
    # a secret key in the query, in any case and even without a value
    for uri in ("s3://bucket/p?Secret_Key=", "s3://bucket/p?region=x&TOKEN=t"):
        assert storage_problem(uri) == CREDENTIALS.format(shown="s3://***@bucket/p?***")


def test_experiment_refuses_credentials_names_that_are_not_plain_and_links_out(tmp_path):
    with pytest.raises(StorageError) as refused:
        Experiment("s3://AKIA:secret@bucket/p", "x")
    assert refused.value.problems == [CREDENTIALS.format(shown="s3://***@bucket/p")]
    for name in ("", "../x", ".hidden", "a/b"):
        with pytest.raises(StorageError) as refused:
            Experiment(str(tmp_path), name)
        assert refused.value.problems == [
            f"--experiment {name!r}: expected a plain name (letters, digits, '.', '_', '-'; not "
            "starting with '.'; no '/'; at most 128 characters), e.g. cifar10-run2"
        ]
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    store.mkdir()
    elsewhere.mkdir()
    (store / "out").symlink_to(elsewhere)
    (store / "self").symlink_to(store)
    for name, real in (("out", elsewhere), ("self", store)):
        with pytest.raises(StorageError) as refused:
            Experiment(str(store), name)
        assert refused.value.problems == [
            f"--experiment: {store / name} resolves to {real}, outside the storage {store}: "
            "remove the link or pass another --experiment"
        ]
    assert Experiment("s3://bucket/p", "x").root == "s3://bucket/p/x"  # no link check on URIs


def test_paths_below_the_experiment_parse_back_to_what_they_are(tmp_path):
    exp = Experiment(str(tmp_path), "e")
    trial, setting = "0123456789ab", "cert-1"
    shard = exp.shard_path(trial, setting, 3, 10)
    assert exp.parse_stage_file("certify", shard, 77) == StageFile(
        shard, "certify", trial, setting, "shard", 3, 10, 77
    )
    compacted = exp.compacted_path("empirical", trial, setting, 10)
    assert exp.parse_stage_file("empirical", compacted) == StageFile(
        compacted, "empirical", trial, setting, "compacted", None, 10, 0
    )
    memory = exp.memory_path(trial, setting)
    assert exp.parse_stage_file("certify", memory, 5) == StageFile(
        memory, "certify", trial, setting, "memory", size=5
    )
    windows = exp.stage_dir("certify") + f"\\{trial}\\{setting}\\shard-00000-of-00001.parquet"
    assert exp.parse_stage_file("certify", windows).kind == "shard"
    for foreign in (
        f"{trial}/{setting}/deeper/shard-00000-of-00001.parquet",
        f"not-a-trial/{setting}/shard-00000-of-00001.parquet",
        f"{trial}/{setting}/notes.txt",
    ):
        assert exp.parse_stage_file("certify", f"{exp.stage_dir('certify')}/{foreign}") is None
    assert exp.relative(shard) == f"certify/{trial}/{setting}/shard-00003-of-00010.parquet"
    assert exp.relative(exp.root + "\\cache\\certify.parquet") == "cache/certify.parquet"
    assert exp.cache_path("certify") == str(tmp_path.absolute() / "e" / "cache" / "certify.parquet")


def test_names_with_anything_around_the_layouts_names_are_not_its_files(tmp_path):
    """A trial folder or a file name with characters before or after the layout's name (here
    "X", which stripping the wrong characters off the path would remove) is ignored, by
    stage_files and parse_stage_file alike."""
    exp = Experiment(str(tmp_path), "e")
    trial, setting = "0123456789ab", "cert-1"
    good = exp.shard_path(trial, setting, 0, 1)
    stage = exp.stage_dir("certify")
    outside = [
        f"{stage}/X{trial}/{setting}/shard-00000-of-00001.parquet",
        f"{stage}/XX{trial}/{setting}/compacted-of-00001.parquet",
        f"{stage}/X/{trial}/{setting}/memory.parquet",
    ]
    setting_dir = exp.setting_dir("certify", trial, setting)
    names = ("shard-00000-of-00001", "compacted-of-00001", "memory")
    trailing = [fileio.join(setting_dir, f"{name}.parquetX") for name in names]
    for path in [good, *outside, *trailing]:
        fileio.write_bytes_atomic(path, b"")
    assert [f.path for f in exp.stage_files("certify")] == [good]
    assert [f.path for f in exp.stage_files("certify", within=setting_dir)] == [good]
    for path in [*outside, *trailing]:
        assert exp.parse_stage_file("certify", path) is None, path
    assert exp.parse_stage_file("certify", good) is not None


def test_each_kind_has_one_glob_matching_exactly_its_files(tmp_path):
    """`Experiment.glob(stage, kind)` matches that kind's files of that stage and nothing
    else (DuckDB, polars and Python's glob read the stage through it); certify's compacted
    files by default."""
    exp = Experiment(str(tmp_path), "e")
    trial, setting = "0123456789ab", "cert-1"
    files = {
        ("certify", "shard"): exp.shard_path(trial, setting, 0, 2),
        ("certify", "compacted"): exp.compacted_path("certify", trial, setting, 2),
        ("certify", "memory"): exp.memory_path(trial, setting),
        ("empirical", "compacted"): exp.compacted_path("empirical", trial, setting, 2),
    }
    for path in [*files.values(), fileio.join(exp.setting_dir("certify", trial, setting), "x.txt")]:
        fileio.write_bytes_atomic(path, b"")
    for (stage, kind), path in files.items():
        assert glob.glob(exp.glob(stage, kind)) == [path]
        assert [(f.stage, f.kind) for f in exp.stage_files(stage) if f.path == path] == [
            (stage, kind)
        ]
    assert exp.glob() == exp.glob("certify", "compacted")
    assert glob.glob(exp.glob("empirical", "shard")) == []


def test_failure_logs_and_retired_trials_sit_in_their_folders_at_the_experiment_root(tmp_path):
    exp = Experiment(str(tmp_path), "e")
    root = tmp_path.absolute() / "e"
    assert exp.failures_log("20261124-010203") == str(
        root / "logs" / "failures-20261124-010203.log"
    )
    assert exp.retired_dir("20261124-010203") == str(root / "retired" / "20261124-010203")
    remote = Experiment("s3://bucket/sweeps", "e")
    assert remote.failures_log("s") == "s3://bucket/sweeps/e/logs/failures-s.log"
    assert remote.retired_dir("s") == "s3://bucket/sweeps/e/retired/s"


def test_a_uri_storage_is_never_checked_against_the_local_disk(tmp_path):
    """A local folder that happens to be spelled like the URI (here a link "s3:/bucket/e" in
    the working directory, pointing outside) has no say over the bucket."""
    (tmp_path / "s3:" / "bucket").mkdir(parents=True)
    (tmp_path / "s3:" / "bucket" / "e").symlink_to(tmp_path)
    os.chdir(tmp_path)
    with pytest.raises(StorageError, match="outside the storage"):
        Experiment("s3:/bucket", "e")  # the same spelling as a local path: refused
    assert Experiment("s3://bucket", "e").root == "s3://bucket/e"
