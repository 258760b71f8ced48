"""A crafted pickle in a CIFAR-10 directory does not run (issue 16 item 4): the batches are
read with a restricted unpickler, and a file of an official batch's name and size must have
the MD5 torchvision publishes for it."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from trainables.datasets import DataError, load_dataset
from trainables.safe_pickle import CIFAR_OFFICIAL_SIZES, load_plain

TEST_POINTS = 6


class Payload:
    """Unpickling this calls `call(*args)`: what a crafted batch does."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def write_cifar(root: Path, test_batch: bytes | None = None, protocol: int = 4) -> Path:
    """Miniature CIFAR-10 python files (the real format: dicts of a uint8 `data` array of
    rows of 3072 and a list of `labels`), with `test_batch` replaced if given."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            "batch_label": f"{name} of 6",
            "filenames": [f"img{i}.png" for i in range(TEST_POINTS)],
            "data": rng.integers(0, 256, size=(TEST_POINTS, 3072), dtype=np.uint8),
            "labels": list(range(TEST_POINTS)),
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
    if test_batch is not None:
        (folder / "test_batch").write_bytes(test_batch)
    return folder / "test_batch"


def refused(root: Path) -> str:
    with pytest.raises(DataError) as raised:
        load_dataset("cifar10", "test", str(root))
    message = str(raised.value)
    assert "\n" not in message
    return message


PAYLOADS = {
    "exec": lambda marker: Payload(exec, f"open({str(marker)!r}, 'w').close()"),
    "os.system": lambda marker: Payload(os.system, f"touch {marker}"),
    "open": lambda marker: Payload(open, str(marker), "w"),
    "Path.touch": lambda marker: Payload(Path.touch, marker),
}


@pytest.mark.parametrize("kind", PAYLOADS)
def test_a_crafted_test_batch_does_not_run(tmp_path, kind):
    marker = tmp_path / "marker"
    crafted = pickle.dumps(PAYLOADS[kind](marker))
    made = pickle.loads(crafted)  # what pickle.load did with it: the marker appears
    if kind == "open":
        made.close()  # the file it opened (left open, it warns when collected)
    assert marker.exists()
    marker.unlink()
    path = write_cifar(tmp_path / "data", crafted)
    message = refused(tmp_path / "data")
    assert message.startswith(f"cannot read CIFAR-10 file {path}: UnpicklingError: refused global ")
    assert not marker.exists()


def test_a_payload_hidden_beside_real_data_does_not_run(tmp_path):
    marker = tmp_path / "marker"
    batch = {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1], "x": PAYLOADS["exec"](marker)}
    path = write_cifar(tmp_path / "data", pickle.dumps(batch))
    assert f"{path}: UnpicklingError: refused global builtins.exec" in refused(tmp_path / "data")
    assert not marker.exists()


def test_codecs_encode_is_admitted_for_latin1_only():
    rot13 = b"c_codecs\nencode\n(X\x03\x00\x00\x00abcX\x05\x00\x00\x00rot13tR."
    assert pickle.loads(rot13) == "nop"  # the plain unpickler would run any codec
    with pytest.raises(pickle.UnpicklingError, match="only latin-1"):
        load_plain(rot13)
    assert load_plain(pickle.dumps(b"\x00\xff", protocol=2)) == b"\x00\xff"


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_miniature_batches_of_every_protocol_load(tmp_path, protocol):
    write_cifar(tmp_path, protocol=protocol)
    folder = tmp_path / "cifar-10-batches-py"
    expected = pickle.loads((folder / "test_batch").read_bytes())
    test = load_dataset("cifar10", "test", str(tmp_path))
    assert len(test) == TEST_POINTS
    assert np.array_equal(test.images.numpy(), expected["data"].reshape(-1, 3, 32, 32))
    assert test.labels.tolist() == expected["labels"]
    assert len(load_dataset("cifar10", "train", str(tmp_path))) == 5 * TEST_POINTS


def test_an_official_sized_file_with_another_md5_is_named_before_unpickling(tmp_path):
    marker = tmp_path / "marker"
    crafted = pickle.dumps(PAYLOADS["open"](marker))  # padded: pickle stops at its STOP opcode
    padded = crafted + b"\0" * (CIFAR_OFFICIAL_SIZES["test_batch"] - len(crafted))
    path = write_cifar(tmp_path / "data", padded)
    message = refused(tmp_path / "data")
    assert message.startswith(
        f"cannot read CIFAR-10 file {path}: ValueError: it has the size of the official test_batch but MD5 "
    )
    assert "not the published 40351d587109b95175f43aff81a1287e" in message
    assert not marker.exists()


# ------------------------------------------------ arrays: numbers only, at most a batch's shape
# Hand-written pickles (protocol 0/2 opcodes) of what numpy's own pickles never do.
NDARRAY_OVER_BYTES = b"cnumpy\nndarray\n(K\x01\x85X\x01\x00\x00\x00OC\x08AAAAAAAAtR."  # segfaults
NDARRAY_OF_1E9 = b"cnumpy\nndarray\n(J\x00\xca\x9a;\x85tR."  # 8 GB of float64
RECONSTRUCT_1E9 = (
    b"cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\nJ\x00\xca\x9a;\x85C\x01b\x87R."
)
SETSTATE_1E9 = (  # numpy's (0,)-shaped array, then BUILD with a state of 10^9 values
    b"cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87R"
    b"(K\x01J\x00\xca\x9a;\x85cnumpy\ndtype\nX\x02\x00\x00\x00u1\x89\x88\x87R\x89C\x00tb."
)
CRAFTED_ARRAYS = {
    "ndarray over bytes": (NDARRAY_OVER_BYTES, "refused numpy.ndarray called directly"),
    "object array": (pickle.dumps(np.array([1, "x"], dtype=object)), "refused array dtype |O"),
    "ndarray of 1e9": (NDARRAY_OF_1E9, "refused numpy.ndarray called directly"),
    "reconstruct of 1e9": (RECONSTRUCT_1E9, "refused an array of shape (1000000000,)"),
    "setstate of 1e9": (SETSTATE_1E9, "refused an array of shape (1000000000,)"),
}


@pytest.mark.parametrize("kind", CRAFTED_ARRAYS)
def test_object_arrays_and_arrays_beyond_a_batch_are_refused_before_allocating(tmp_path, kind):
    import tracemalloc

    crafted, why = CRAFTED_ARRAYS[kind]
    assert len(crafted) < 250  # a few bytes ask for a segfault or gigabytes
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    try:
        with pytest.raises(pickle.UnpicklingError, match=re.escape(why)):
            load_plain(crafted)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    path = write_cifar(tmp_path / "data", crafted)
    message = refused(tmp_path / "data")
    assert message.startswith(f"cannot read CIFAR-10 file {path}: UnpicklingError: {why}")


def test_a_full_size_batch_still_loads():
    data = np.zeros((10_000, 3072), np.uint8)
    for protocol in (2, 5):
        loaded = load_plain(pickle.dumps({"data": data, "labels": [0] * 10_000}, protocol=protocol))
        assert np.array_equal(np.asarray(loaded["data"]), data)
    with pytest.raises(pickle.UnpicklingError, match="more than a CIFAR-10 batch's"):
        load_plain(pickle.dumps(np.zeros(10_000 * 3072 + 1, np.uint8), protocol=2))
