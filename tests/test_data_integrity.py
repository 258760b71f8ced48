"""What a node fetches and what `sweeper data put` sends (issue 38): a download stops at its
manifest entry's size, an object of the right size whose sha256 differs is refused, and `data
put` follows no link below --from (it once uploaded a symlink's target). On moto's S3 server."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
from test_cli import bad_input
from test_datasets import _write_mnist
from typer.testing import CliRunner

from sweeper.cli import app
from trainables import data_cache, data_put
from trainables.kernel import fileio

runner = CliRunner()
BUCKET = "sweeper-test"
TEST_IMAGES = "MNIST/raw/t10k-images-idx3-ubyte.gz"


@pytest.fixture
def url(s3_endpoint) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/data"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(data_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def mnist(tmp_path) -> Path:
    root = tmp_path / "local"
    _write_mnist(root / "MNIST" / "raw", gz=True)
    return root


def put(dataset: str, source: Path, url: str):
    return runner.invoke(app, ["data", "put", dataset, "--from", str(source), "--to", url])


def on_bucket(url: str) -> dict[str, int]:
    return fileio.list_sizes(url) if fileio.exists(url) else {}


def no_copy_left(cache: Path) -> None:
    [home] = cache.iterdir()
    assert [p.name for p in home.iterdir()] == [".mnist.lock"], "no copy, whole or half"


# ------------------------------------------------------------------------------ fetching
def test_an_object_larger_than_its_entry_is_refused_before_more_is_read(
    mnist, url, cache, monkeypatch
):
    """Issue 38: a 300 MiB object was written to the cache before its size was checked. Now
    the stream is read at most to the entry's size and one byte more, then refused."""
    assert put("mnist", mnist, url).exit_code == 0
    entry = next(e for e in data_cache.entries_of(url, "mnist") if e.path == TEST_IMAGES)
    fileio.write_bytes_atomic(f"{url}/{TEST_IMAGES}", b"\0" * (16 * 2**20))  # 16 MiB
    read: list[int] = []
    real = fileio.filesystem

    class Counted:
        def __init__(self, src):
            self.src = src

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.src.close()

        def read(self, n: int) -> bytes:
            chunk = self.src.read(n)
            read.append(len(chunk))
            return chunk

    def counting(location: str):
        fs, path = real(location)

        class FS:  # the real file system, its streams of the test images counted
            def __getattr__(self, name):
                return getattr(fs, name)

            def open_input_stream(self, p):
                stream = fs.open_input_stream(p)
                return Counted(stream) if p.endswith(TEST_IMAGES) else stream

        return FS(), path

    monkeypatch.setattr(data_cache.fileio, "filesystem", counting)
    with pytest.raises(data_cache.RemoteDataError) as e:
        data_cache.fetch(url, "mnist")
    [line] = e.value.problems
    assert line.startswith(f"{url}/{TEST_IMAGES} does not match its manifest entry (more than")
    assert sum(read) == entry.size + 1, "read to the entry's size and one byte more, no further"
    no_copy_left(cache)


def test_an_object_of_the_right_size_whose_sha256_differs_is_refused(mnist, url, cache):
    """Issue 38 §4: every earlier test changed an object's size too, so a fetch that checked
    the size alone passed them all. Same size, one byte flipped: refused, nothing kept."""
    assert put("mnist", mnist, url).exit_code == 0
    entry = next(e for e in data_cache.entries_of(url, "mnist") if e.path == TEST_IMAGES)
    original = (mnist / TEST_IMAGES).read_bytes()
    forged = bytes([original[0] ^ 1]) + original[1:]
    assert len(forged) == entry.size and hashlib.sha256(forged).hexdigest() != entry.sha256
    fileio.write_bytes_atomic(f"{url}/{TEST_IMAGES}", forged)
    with pytest.raises(data_cache.RemoteDataError) as e:
        data_cache.fetch(url, "mnist")
    [line] = e.value.problems
    found = hashlib.sha256(forged).hexdigest()[:12]
    assert line.startswith(
        f"{url}/{TEST_IMAGES} does not match its manifest entry (sha256 {found}…, "
        f"{entry.size} bytes; expected {entry.sha256[:12]}…, {entry.size} bytes)"
    ), line
    no_copy_left(cache)
    fileio.write_bytes_atomic(f"{url}/{TEST_IMAGES}", original)  # the real one: fetched
    assert (data_cache.fetch(url, "mnist") / TEST_IMAGES).read_bytes() == original


# ------------------------------------------------------------------------------ the signed manifest
def _forge_the_test_split(mnist: Path, url: str) -> None:
    """The attack run's data forgery: a test file and the manifest rewritten together, so the
    manifest vouches for the forged file."""
    forged = bytes(reversed((mnist / TEST_IMAGES).read_bytes()))
    fileio.write_bytes_atomic(f"{url}/{TEST_IMAGES}", forged)
    entries = tuple(
        data_cache.Entry(e.path, len(forged), hashlib.sha256(forged).hexdigest())
        if e.path == TEST_IMAGES
        else e
        for e in data_cache.entries_of(url, "mnist")
    )
    fileio.write_bytes_atomic(
        data_cache.manifest_location(url), data_cache.manifest_bytes({"mnist": entries})
    )


def test_a_test_split_rewritten_with_its_manifest_is_refused_under_the_key(
    mnist, url, cache, signing_env, monkeypatch
):
    """Issue 38: a fresh node accepted a test batch and manifest rewritten together. `data put`
    with a key signs the manifest; a process holding the key fetches only what it signed."""
    assert put("mnist", mnist, url).exit_code == 0
    assert fileio.exists(f"{url}/data.attestation.json")
    digest = data_cache.data_inputs("mnist", url)["data"]
    _forge_the_test_split(mnist, url)
    with pytest.raises(data_cache.RemoteDataError) as e:
        data_cache.fetch(url, "mnist")
    [line] = e.value.problems
    assert line.startswith(f"the data manifest at {url} was changed after it was signed: "), line
    assert f"sweeper data put DATASET --from DIR --to {url}" in line
    assert not cache.exists() or not list(cache.glob("*/mnist-*")), "nothing fetched"
    # the driver says so before Ray starts: the data check reads the manifest the same way
    assert data_cache.remote_problem(url, "mnist") == line
    # without a key nothing is checked (the results are unattested anyway)
    monkeypatch.delenv("SWEEPER_SIGNING_KEY")
    assert data_cache.data_inputs("mnist", url)["data"] != digest
    # a put with the key signs again what it sends: the real file back, fetched
    monkeypatch.setenv("SWEEPER_SIGNING_KEY", signing_env.pem().decode())
    assert put("mnist", mnist, url).exit_code == 0
    assert data_cache.data_inputs("mnist", url)["data"] == digest
    fetched = data_cache.fetch(url, "mnist") / TEST_IMAGES
    assert fetched.read_bytes() == (mnist / TEST_IMAGES).read_bytes()


def test_an_unsigned_or_foreign_manifest_is_refused_under_the_key(mnist, url, cache, signing_env):
    """A manifest put without the key, or signed for another data URI, is not the key
    holder's: refused, naming why and the fix."""
    from trainables.data_attestation import manifest_problem
    from trainables.kernel.attestation import SigningKey

    raw = lambda: fileio.read_bytes(data_cache.manifest_location(url))  # noqa: E731
    assert put("mnist", mnist, url).exit_code == 0
    assert manifest_problem(url, raw()) is None
    other = f"{url}-copy"
    fileio.write_bytes_atomic(data_cache.manifest_location(other), raw())
    statement = fileio.read_bytes(f"{url}/data.attestation.json")
    fileio.write_bytes_atomic(f"{other}/data.attestation.json", statement)
    assert manifest_problem(other, raw()).startswith(
        f"{other}/data.attestation.json is not the statement of the data at {other}: put it"
    )
    assert "does not verify" in manifest_problem(url, raw(), SigningKey.generate())
    fileio.delete(f"{url}/data.attestation.json")
    assert manifest_problem(url, raw()).startswith(f"the data manifest at {url} is not signed")


# ------------------------------------------------------------------------------ putting
def test_data_put_pseudo_refuses_a_symlink_below_from_and_uploads_nothing(tmp_path, url):
    """Issue 38: `data put pseudo` followed a symlink out of --from and uploaded its target."""
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_bytes(b"PRIVATE KEY")
    source = tmp_path / "pseudo"
    (source / "0").mkdir(parents=True)
    (source / "0" / "a.png").write_bytes(b"png")
    (source / "1").mkdir()
    (source / "1" / "b.png").symlink_to(secret)
    [line] = bad_input(["data", "put", "pseudo", "--from", str(source), "--to", url])
    assert line == (
        f"error: --from {source / '1' / 'b.png'}: is a symlink: `sweeper data put` follows no "
        "link; put the file itself there"
    )
    (source / "1" / "b.png").unlink()
    (source / "2").symlink_to(secret.parent, target_is_directory=True)  # a linked folder
    [line] = bad_input(["data", "put", "pseudo", "--from", str(source), "--to", url])
    assert line.startswith(f"error: --from {source / '2'}: is a symlink")
    link = tmp_path / "pseudo.npz"
    link.symlink_to(secret)  # the .npz named itself a link
    [line] = bad_input(["data", "put", "pseudo", "--from", str(link), "--to", url])
    assert line.startswith(f"error: --from {link}: is a symlink")
    assert on_bucket(url) == {}, "nothing sent"


def test_data_put_of_a_data_set_refuses_a_link_among_its_files(mnist, tmp_path, url):
    secret = tmp_path / "outside"
    secret.write_bytes(b"PRIVATE KEY")
    (mnist / TEST_IMAGES).unlink()
    (mnist / TEST_IMAGES).symlink_to(secret)
    [line] = bad_input(["data", "put", "mnist", "--from", str(mnist), "--to", url])
    assert line.startswith(f"error: {mnist / TEST_IMAGES} is a symlink: `sweeper data put`")
    assert on_bucket(url) == {}, "nothing sent"


def test_open_below_follows_no_link_at_any_component(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "d").mkdir(parents=True)
    (outside / "d" / "f").write_bytes(b"x")
    root.mkdir()
    (root / "d").symlink_to(outside / "d", target_is_directory=True)
    with pytest.raises(data_cache.RemoteDataError, match=r"root/d is a symlink"):
        data_put.open_below(root, "d/f")
    os.mkfifo(root / "fifo")  # opened without blocking, then refused
    with pytest.raises(data_cache.RemoteDataError, match=r"root/fifo is not a regular file"):
        data_put.open_below(root, "fifo")
    with pytest.raises(data_cache.RemoteDataError, match="leaves the data set's directory"):
        data_put.open_below(root, "../outside/d/f")
    (root / "e").mkdir()
    (root / "e" / "f").write_bytes(b"y")
    with os.fdopen(data_put.open_below(root, "e/f"), "rb") as f:
        assert f.read() == b"y"
    root_link = tmp_path / "named"
    root_link.symlink_to(root, target_is_directory=True)  # --from itself may be a link
    os.close(data_put.open_below(root_link, "e/f"))
