"""Data on a cluster without a shared disk (issue 29 §2): `sweeper data put` puts a miniature
data set in its real on-disk format on moto's S3 server, and `load_dataset(..., "s3://...")`
fetches it into the local cache, verifies it and reads the same tensors as from the local copy.
GCS takes the same code path through pyarrow's GcsFileSystem; no GCS emulator runs here."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from pathlib import Path

import pytest
import torch
from test_cli import bad_input
from test_datasets import _write_cifar, _write_mnist
from typer.testing import CliRunner

from sweeper.cli import app
from trainables import data_cache
from trainables.datasets import DataError, load_dataset
from trainables.kernel.config import TrialConfig

runner = CliRunner()
BUCKET = "sweeper-test"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """This test's own data cache ($SWEEPER_DATA_CACHE)."""
    monkeypatch.setenv(data_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def url(s3_endpoint) -> str:
    """A fresh prefix on moto's bucket."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/data"


@pytest.fixture
def local(tmp_path) -> Path:
    """A miniature CIFAR-10 (pickle batches, as torchvision writes them) and MNIST (gz)."""
    root = tmp_path / "local"
    _write_cifar(root)
    _write_mnist(root / "MNIST" / "raw", gz=True)
    return root


def put(dataset: str, source: Path, url: str):
    return runner.invoke(app, ["data", "put", dataset, "--from", str(source), "--to", url])


def s3(s3_endpoint):
    import boto3

    return boto3.client("s3")


def key(url: str, path: str) -> str:
    return f"{url.removeprefix(f's3://{BUCKET}/')}/{path}"


def same(a, b) -> bool:
    return torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)


def test_put_then_load_reads_what_the_local_copy_holds(local, url, cache):
    for dataset in ("cifar10", "mnist"):  # two data sets at one URI: the manifest keeps both
        result = put(dataset, local, url)
        assert result.exit_code == 0, result.output
        assert f"manifest: {url}/sweeper-data.json" in result.stdout
    manifest = data_cache.read_manifest(url)
    assert sorted(manifest) == ["cifar10", "mnist"]
    for entry in manifest["cifar10"]:
        assert entry.sha256 == hashlib.sha256((local / entry.path).read_bytes()).hexdigest()
    for dataset in ("cifar10", "mnist"):
        for split in ("train", "test"):
            remote = load_dataset(dataset, split, url)
            assert same(remote, load_dataset(dataset, split, str(local))), (dataset, split)
    assert len(list(cache.glob("*/cifar10-*"))) == 1
    assert list(cache.glob("*/.*.tmp")) == []


def test_a_second_load_downloads_nothing(local, url, cache, s3_endpoint):
    assert put("cifar10", local, url).exit_code == 0
    first = data_cache.fetch(url, "cifar10")
    mtimes = {p: p.stat().st_mtime_ns for p in first.rglob("*")}
    client = s3(s3_endpoint)
    for entry in data_cache.read_manifest(url)["cifar10"]:  # only the manifest stays
        client.delete_object(Bucket=BUCKET, Key=key(url, entry.path))
    assert same(load_dataset("cifar10", "test", url), load_dataset("cifar10", "test", str(local)))
    assert data_cache.fetch(url, "cifar10") == first
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*")} == mtimes


def test_a_second_put_sends_only_what_changed(local, url, cache):
    assert "7 files, 7 sent" in put("cifar10", local, url).stdout
    assert "7 files, 0 sent" in put("cifar10", local, url).stdout
    (local / "cifar-10-batches-py" / "batches.meta").write_bytes(b"new")
    assert "7 files, 1 sent" in put("cifar10", local, url).stdout


def test_a_file_changed_on_the_bucket_is_an_error_naming_it(local, url, cache, s3_endpoint):
    assert put("cifar10", local, url).exit_code == 0
    s3(s3_endpoint).put_object(
        Bucket=BUCKET, Key=key(url, "cifar-10-batches-py/test_batch"), Body=b"tampered"
    )
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", "test", url)
    assert f"{url}/cifar-10-batches-py/test_batch does not match its manifest entry" in str(e.value)
    assert "put the data set again" in str(e.value)
    [home] = cache.iterdir()
    assert [p.name for p in home.iterdir()] == [".cifar10.lock"], "no copy is left, whole or half"


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/tmp/x", "a//b", "./a", "a\\..\\b", ""])
def test_a_manifest_path_outside_the_cache_is_refused(path, url, cache, tmp_path):
    digest = hashlib.sha256(b"x").hexdigest()
    entries = (data_cache.Entry(path, 1, digest),)
    doc = data_cache.manifest_bytes({"cifar10": entries})
    from trainables.kernel import fileio

    fileio.write_bytes_atomic(data_cache.manifest_location(url), doc)
    fileio.write_bytes_atomic(f"{url}/x", b"x")
    with pytest.raises(DataError, match="refused"):
        load_dataset("cifar10", "test", url)
    assert not (tmp_path / "x").exists() and not cache.exists()


def test_processes_fetching_at_once_share_one_download(local, url, cache):
    assert put("cifar10", local, url).exit_code == 0
    home = cache / hashlib.sha256(url.encode()).hexdigest()[:16]
    (home / ".cifar10.dead0000.tmp").mkdir(parents=True)  # a fetch that died half-way
    (home / ".cifar10.dead0000.tmp" / "junk").write_bytes(b"half")
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda: found.append(data_cache.fetch(url, "cifar10")))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 3 and len(set(found)) == 1
    assert sorted(p.name for p in home.iterdir()) == [".cifar10.lock", found[0].name]


def test_put_refuses_bad_input_with_one_line_and_exit_2(local, tmp_path, url):
    bad_input(["data", "put", "cifar10", "--from", str(tmp_path / "nope"), "--to", url], "--from")
    bad_input(["data", "put", "svhn", "--from", str(local), "--to", url], "unknown data set")
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_input(
        ["data", "put", "cifar10", "--from", str(empty), "--to", url], "CIFAR-10", "not found"
    )
    bad_input(["data", "put", "digits", "--from", str(local), "--to", url], "scikit-learn")
    for target in ("http://host/x", "s3://Bad_Bucket/x"):
        bad_input(["data", "put", "cifar10", "--from", str(local), "--to", target], "data URI")
    [line] = bad_input(  # credentials: refused first, shown redacted (tests/test_secrets.py)
        ["data", "put", "cifar10", "--from", str(local), "--to", "s3://key:secret@bucket/x"],
        "--to s3://***@bucket/x: credentials in the data location are refused",
    )
    assert "secret" not in line
    missing = "s3://no-such-bucket-here/cifar10"
    bad_input(["data", "put", "cifar10", "--from", str(local), "--to", missing], "no bucket")


def test_a_run_checks_a_data_uri_before_ray_starts(local, url, cache, tmp_path):
    store = tmp_path / "store"
    args = ["run", "grid", "cifar10", "--storage", str(store), "--data-dir", url]
    [line] = bad_input([*args, "--dry-run"], f"no data manifest {url}/sweeper-data.json")
    assert f"sweeper data put DATASET --from DIR --to {url}" in line
    bad_input(args, "no data manifest")  # a real run: refused before Ray
    for command in ("certify", "empirical"):
        bad_input([command, *args[2:]], "no data manifest")
    bad_input(
        ["run", "grid", "cifar10", "--dry-run", "--data-dir", "s3://no-such-bucket-here/d"],
        "no bucket s3://no-such-bucket-here",
    )
    assert put("mnist", local, url).exit_code == 0
    bad_input([*args, "--dry-run"], "holds no 'cifar10'")
    assert put("cifar10", local, url).exit_code == 0
    ok = runner.invoke(app, [*args, "--dry-run"])
    assert ok.exit_code == 0, ok.output
    assert f"checked in {url}" in ok.stdout
    assert not cache.exists(), "a check reads the manifest only"
    assert not store.exists()


def test_the_manifest_is_json_with_sizes_and_hashes(local, url):
    assert put("cifar10", local, url).exit_code == 0
    from trainables.kernel import fileio

    doc = json.loads(fileio.read_bytes(data_cache.manifest_location(url)))
    files = doc["datasets"]["cifar10"]
    assert doc["format"] == 1 and len(files) == 7
    assert files[0] == {
        "path": "cifar-10-batches-py/batches.meta",
        "size": (local / "cifar-10-batches-py" / "batches.meta").stat().st_size,
        "sha256": hashlib.sha256(
            (local / "cifar-10-batches-py" / "batches.meta").read_bytes()
        ).hexdigest(),
    }


def test_data_uris_are_plain_bucket_uris_of_s3_or_gcs():
    for good in ("s3://bucket/data", "s3://my.bucket/a/b/", "gs://bucket/data", "gcs://bk1"):
        assert data_cache.uri_problem(good) is None, good
    for bad in ("s3://bucket/data?region=x", "s3://k:s@bucket/x", "hdfs://h/x", "s3:///x"):
        assert "not a data URI" in (data_cache.uri_problem(bad) or ""), bad


def test_put_sends_the_files_each_loader_reads(tmp_path):
    from test_datasets import _write_imagefolder

    from trainables.datasets import dataset_files

    _write_mnist(tmp_path / "mnist", gz=False)  # the raw files directly in the directory
    (tmp_path / "mnist" / "notes.txt").write_text("not data")
    assert dataset_files("mnist", tmp_path / "mnist") == [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ]
    _write_imagefolder(tmp_path / "imagenet", {"a": (255, 0, 0), "b": (0, 0, 255)})
    assert dataset_files("imagenet", tmp_path / "imagenet") == [
        f"{sub}/{cls}/{name}"
        for sub in ("train", "val")
        for cls in "ab"
        for name in ("a.png", "b.jpg")
    ]


TINY_MNIST_SPACE = """\
description: one LeNet trial on the miniature MNIST, its data fetched from the bucket
fixed: {dataset: mnist, arch: lenet, epochs: 1, batch_size: 4, lr: 0.01, method: gaussian,
        m_train: 1, sigma: 0.25}
grids: [{name: g, axes: {seed: [0]}}]
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 32, alpha: 0.001, skip: 1, max_points: 3, batch_size: 32, shard_size: 3}
"""


@pytest.mark.e2e
def test_a_sweep_on_ray_trains_and_certifies_from_the_bucket(local, url, cache, s3_endpoint):
    """The trial and its certification task, in Ray's worker processes, read the data set
    through the node's cache: one copy, fetched once."""
    import os
    import subprocess
    import sys

    from sweeper.results.certify_rows import load_results
    from sweeper.results.storage import Experiment

    assert put("mnist", local, url).exit_code == 0
    space = local.parent / "tiny.yaml"
    space.write_text(TINY_MNIST_SPACE)
    store = local.parent / "store"
    sweeper = [sys.executable, "-c", "from sweeper.cli import app; app()"]
    done = subprocess.run(
        [
            *sweeper,
            "run",
            "grid",
            str(space),
            "--storage",
            str(store),
            "--data-dir",
            url,
            "--cpu-only",
        ],
        env={**os.environ, **s3_endpoint, data_cache.CACHE_ENV: str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(load_results(Experiment(str(store), "tiny")).frame) == 3
    [copy] = cache.glob("*/mnist-*")
    assert sorted(p.name for p in copy.rglob("*.gz")) == sorted(
        p.name for p in (local / "MNIST" / "raw").iterdir()
    )


def test_the_driver_counts_a_remote_test_split_without_fetching_it(monkeypatch, tmp_path):
    """Shards of a data set on a bucket are cut at its standard test size: the driver never
    downloads the data set (all of ImageNet) to count it."""
    from sweeper.run import shards

    monkeypatch.setenv("SWEEPER_DATA_CACHE", str(tmp_path / "cache"))
    shards.test_size.cache_clear()
    assert shards.test_size("imagenet", "s3://no-such-bucket/imagenet") == 50_000
    assert shards.test_size("cifar10", "gs://no-such-bucket/c10") == 10_000
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("layout", ["npz", "folders"])
def test_pseudo_labelled_data_put_on_the_bucket_is_what_self_training_reads(
    layout, url, cache, tmp_path
):
    """`sweeper data put pseudo` of an .npz or of <label>/ folders; pseudo_data: the URI then
    loads the same images and labels as the local copy, through the node's cache, with the
    fingerprint `sweeper pseudo-data URI` prints and the driver's check passing."""
    from PIL import Image
    from test_self_training import pseudo_arrays, write_npz

    from trainables.pseudo import fingerprint, load_pseudo, pseudo_problems

    images, labels = pseudo_arrays(12)
    source = write_npz(tmp_path / "pseudo.npz", images, labels)
    if layout == "folders":
        source = tmp_path / "pseudo"
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            (source / str(label)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(image[0]).save(source / str(label) / f"{i:03d}.png")
    result = put("pseudo", source, url)
    assert result.exit_code == 0, result.output
    assert f"pseudo_data: {url}" in result.stdout
    local = load_pseudo(source, "digits")
    remote = load_pseudo(url, "digits")
    assert torch.equal(local[0], remote[0]) and torch.equal(local[1], remote[1])
    assert any(cache.rglob("*")), "read from the node's cache"
    printed = runner.invoke(app, ["pseudo-data", url, "--dataset", "digits"])
    assert f"pseudo_fingerprint: {fingerprint(*local)}" in printed.stdout
    cfg = TrialConfig(
        dataset="digits",
        method="gaussian",
        pseudo_data=url,
        pseudo_fingerprint=fingerprint(*local),
        pseudo_eta=0.5,
    )
    assert cfg.problems() == [] and pseudo_problems([cfg]) == []
    other = cfg.replace(pseudo_data=f"{url}-elsewhere")
    [problem] = pseudo_problems([other])
    assert f"no data manifest {url}-elsewhere/sweeper-data.json" in problem
    assert pseudo_problems([cfg.replace(pseudo_data="s3://Bad_Bucket/p")])[0].startswith(
        "pseudo_data 's3://Bad_Bucket/p' is not a data URI"
    )
    bad_input(["data", "put", "pseudo", "--from", str(tmp_path / "nope"), "--to", url], "--from")
