"""`--storage s3://...` on a real S3 protocol: moto's S3 server, reached the standard AWS way
(AWS_ENDPOINT_URL and the usual credential variables). A smoke sweep trains, checkpoints and
certifies into the bucket, resumes without retraining, and every read command reads it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.results.certify_rows import load_results
from sweeper.results.storage import Experiment

pytestmark = pytest.mark.e2e
SWEEPER = [sys.executable, "-c", "from sweeper.cli import app; app()"]
STORAGE = "s3://sweeper-test/sweeps"
SLICE = ["--smoke", "--only", "sigma=0.25,m_train=1,steps=1,attack=pgd"]  # 2 trials (ε 0.25, 0.5)


def _objects(prefix: str) -> dict[str, str]:
    """key -> ETag of every object under the prefix (what a rewrite would change)."""
    import boto3

    pages = boto3.client("s3").get_paginator("list_objects_v2")
    return {
        o["Key"]: o["ETag"]
        for page in pages.paginate(Bucket="sweeper-test", Prefix=prefix)
        for o in page.get("Contents", [])
    }


def _sweeper(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SWEEPER, *args],
        env={**os.environ, **env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def s3_sweep(s3_endpoint):
    done = _sweeper(s3_endpoint, "run", "grid", "digits", *SLICE, "--storage", STORAGE)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Experiment(STORAGE, "digits-smoke")


def test_sweep_writes_checkpoints_and_shards_to_the_bucket(s3_sweep):
    keys = _objects("sweeps/digits-smoke/")
    assert "sweeps/digits-smoke/sweep.json" in keys
    checkpoints = [k for k in keys if k.endswith("/checkpoint.pt")]
    rows = [k for k in keys if "/certify/" in k and k.endswith(".parquet")]
    # 20 points, 10 per shard: each model's 2 shards compacted into one file, then cached
    assert len(checkpoints) == 2 and len(rows) == 2
    assert all(k.endswith("/compacted-of-00002.parquet") for k in rows)
    assert "sweeps/digits-smoke/cache/certify.parquet" in keys
    results = load_results(s3_sweep)
    assert len(results.frame) == 2 * 20 and not results.missing_shards


def test_rerun_resumes_without_retraining(s3_sweep, s3_endpoint):
    before = _objects("sweeps/digits-smoke/")
    done = _sweeper(s3_endpoint, "run", "grid", "digits", *SLICE, "--storage", STORAGE)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 finished, 0 to resume, 0 new" in done.stdout
    after = _objects("sweeps/digits-smoke/")
    trained = {k: v for k, v in before.items() if k.endswith((".pt", ".parquet"))}
    assert trained and all(after[k] == v for k, v in trained.items())  # nothing rewritten


def test_read_commands_read_the_bucket(s3_sweep, tmp_path):
    runner = CliRunner()
    common = ["--storage", STORAGE, "--experiment", "digits-smoke"]
    envelope = runner.invoke(app, ["envelope", *common, "--radii", "0:0.5:0.25", "--format", "csv"])
    assert envelope.exit_code == 0, envelope.output
    assert envelope.output.splitlines()[0].startswith("radius,certified_accuracy")
    status = runner.invoke(app, ["status", *common])
    assert status.exit_code == 0 and "finished 2" in status.output, status.output
    report = runner.invoke(app, ["report", *common, "--formats", "png"])
    assert report.exit_code == 0, report.output
    assert any(k.endswith("reports/index.md") for k in _objects("sweeps/digits-smoke/reports/"))


def test_empirical_stage_writes_to_the_bucket(s3_sweep, s3_endpoint):
    done = _sweeper(
        s3_endpoint,
        "empirical",
        "digits",
        *SLICE,
        "--storage",
        STORAGE,
        "--epsilons",
        "0.25",
        "--m-test",
        "2",
        "--steps",
        "2",
        "--n",
        "32",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [k for k in _objects("sweeps/digits-smoke/empirical/") if k.endswith(".parquet")]
    assert len(rows) == 2 and all("/compacted-of-00002.parquet" in k for k in rows)
