"""Data loading from miniature copies of the real on-disk formats (no download, no real data)."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from trainables.datasets import (
    CIFAR_FILES,
    INFO,
    MNIST_FILES,
    DataError,
    load_dataset,
)
from trainables.kernel.catalog import DATASETS

CIFAR_TRAIN_PER_BATCH = 3
CIFAR_TEST = 4


# ---------------------------------------------------------------------------- helpers
def _one_line_error(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    return msg


def _write_pickle(path: Path, obj) -> None:
    path.write_bytes(pickle.dumps(obj))


def _cifar_batch(rng: np.random.Generator, n: int, first_label: int) -> dict:
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    return {"data": data, "labels": [(first_label + i) % 10 for i in range(n)]}


def _write_cifar(root: Path) -> dict[str, dict]:
    """The python-pickle CIFAR-10 layout: data_batch_1..5, test_batch, batches.meta."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for i, name in enumerate(CIFAR_FILES):
        n = CIFAR_TEST if name == "test_batch" else CIFAR_TRAIN_PER_BATCH
        batches[name] = _cifar_batch(rng, n, first_label=i)
        _write_pickle(folder / name, batches[name])
    # a recognisable test row: red all 255, green all 0, blue all 128
    batches["test_batch"]["data"][0] = np.repeat(np.uint8([255, 0, 128]), 1024)
    _write_pickle(folder / "test_batch", batches["test_batch"])
    labels = [f"class{i}" for i in range(10)]
    _write_pickle(folder / "batches.meta", {"label_names": labels, "num_vis": 3072})
    return batches


@pytest.fixture
def cifar_root(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    return tmp_path, _write_cifar(tmp_path)


def _idx_bytes(array: np.ndarray) -> bytes:
    magic = 0x00000800 | array.ndim  # 0x08 = unsigned byte
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_idx(path: Path, array: np.ndarray, gz: bool) -> None:
    raw = _idx_bytes(array)
    if gz:
        with gzip.open(f"{path}.gz", "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)


def _write_mnist(folder: Path, gz: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    out = {}
    for split, n in (("train", 5), ("test", 3)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        img_name, lbl_name = MNIST_FILES[split]
        _write_idx(folder / img_name, images, gz)
        _write_idx(folder / lbl_name, labels, gz)
        out[split] = (images, labels)
    return out


def _write_imagefolder(root: Path, colors: dict[str, tuple[int, int, int]]) -> None:
    """Two tiny solid-colour images per class (one PNG, one JPEG) in train/ and val/."""
    from PIL import Image

    for sub in ("train", "val"):
        for cls, color in colors.items():
            folder = root / sub / cls
            folder.mkdir(parents=True)
            Image.new("RGB", (20, 14), color).save(folder / "a.png")
            Image.new("RGB", (14, 20), color).save(folder / "b.jpg", quality=95)


# ---------------------------------------------------------------------------- CIFAR-10
def test_cifar_train_concatenates_the_five_batches_in_order(cifar_root):
    root, batches = cifar_root
    ds = load_dataset("cifar10", "train", str(root))
    assert len(ds) == 5 * CIFAR_TRAIN_PER_BATCH
    expected_labels = [y for name in CIFAR_FILES[:5] for y in batches[name]["labels"]]
    rows = np.concatenate([batches[name]["data"] for name in CIFAR_FILES[:5]])
    for i in range(len(ds)):
        x, y, idx = ds[i]
        assert x.shape == (3, 32, 32) and x.dtype == torch.float32
        assert (y, idx) == (expected_labels[i], i)
        # pixel (c, h, w) is byte c*1024 + h*32 + w of the row
        for c, h, w in ((0, 0, 0), (1, 5, 7), (2, 31, 31), (0, 31, 0)):
            assert x[c, h, w].item() == pytest.approx(rows[i, c * 1024 + h * 32 + w] / 255)
        assert x.min() >= 0.0 and x.max() <= 1.0


def test_cifar_test_split_and_channel_order(cifar_root):
    root, batches = cifar_root
    ds = load_dataset("cifar10", "test", str(root))
    assert len(ds) == CIFAR_TEST
    x, y, idx = ds[0]
    assert (y, idx) == (batches["test_batch"]["labels"][0], 0)
    assert torch.all(x[0] == 1.0), "the first 1024 bytes are the red channel"
    assert torch.all(x[1] == 0.0)
    assert torch.allclose(x[2], torch.full((32, 32), 128 / 255))
    assert [ds[i][1] for i in range(len(ds))] == batches["test_batch"]["labels"]


def test_cifar_augmentation_crops_and_flips_within_the_original_pixels(cifar_root):
    root, _ = cifar_root
    plain = load_dataset("cifar10", "train", str(root))
    augmented = load_dataset("cifar10", "train", str(root), augment=True)
    torch.manual_seed(0)
    changed = 0
    for i in range(len(plain)):
        original = plain[i][0]
        allowed = torch.cat([original.flatten(), torch.zeros(1)])
        for _ in range(3):
            x, y, idx = augmented[i]
            assert x.shape == (3, 32, 32)
            assert (y, idx) == (plain[i][1], i)
            assert torch.isin(x, allowed).all(), "augmentation invented pixel values"
            changed += not torch.equal(x, original)
    assert changed > 0, "RandomCrop/RandomHorizontalFlip never changed an image"


# ---------------------------------------------------------------------------- MNIST
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("layout", ["MNIST/raw", "."], ids=["torchvision", "flat"])
def test_mnist_idx_files(tmp_path: Path, layout: str, gz: bool):
    arrays = _write_mnist(tmp_path / layout, gz)
    for split, (images, labels) in arrays.items():
        ds = load_dataset("mnist", split, str(tmp_path))
        assert len(ds) == len(labels)
        for i in range(len(ds)):
            x, y, idx = ds[i]
            assert x.shape == (1, 28, 28) and x.dtype == torch.float32
            assert (y, idx) == (int(labels[i]), i)
            expected = torch.from_numpy(images[i]).float().div(255)
            assert torch.equal(x[0], expected)
            assert x[0, 3, 17].item() == pytest.approx(images[i, 3, 17] / 255)


def test_mnist_truncated_idx_raises_data_error(tmp_path: Path):
    folder = tmp_path / "MNIST" / "raw"
    _write_mnist(folder, gz=False)
    path = folder / MNIST_FILES["test"][0]
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError) as e:
        load_dataset("mnist", "test", str(tmp_path))
    assert str(path) in _one_line_error(e)


@pytest.mark.parametrize("name", [*MNIST_FILES["train"]])
@pytest.mark.parametrize("keep", [2, 6, -1], ids=["magic", "dims", "body"])
def test_mnist_truncated_gz_raises_data_error(tmp_path: Path, name: str, keep: int):
    folder = tmp_path / "MNIST" / "raw"
    _write_mnist(folder, gz=True)
    path = folder / f"{name}.gz"
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[:keep]))  # a valid gzip of a cut idx file
    with pytest.raises(DataError) as e:
        load_dataset("mnist", "train", str(tmp_path))
    assert str(path) in _one_line_error(e)


def test_mnist_cut_gzip_stream_raises_data_error(tmp_path: Path):
    folder = tmp_path / "MNIST" / "raw"
    _write_mnist(folder, gz=True)
    path = folder / f"{MNIST_FILES['train'][0]}.gz"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(DataError) as e:
        load_dataset("mnist", "train", str(tmp_path))
    assert str(path) in _one_line_error(e)


def test_mnist_images_and_labels_of_different_length(tmp_path: Path):
    folder = tmp_path / "MNIST" / "raw"
    _write_mnist(folder, gz=False)
    _write_idx(folder / MNIST_FILES["test"][1], np.zeros(7, np.uint8), gz=False)
    with pytest.raises(DataError, match="do not match"):
        load_dataset("mnist", "test", str(tmp_path))


# ---------------------------------------------------------------------------- ImageNet
COLORS = {"n01": (255, 0, 128), "n02": (0, 200, 40)}


@pytest.fixture
def imagenet_root(tmp_path: Path) -> Path:
    _write_imagefolder(tmp_path, COLORS)
    return tmp_path


def test_imagenet_train_augmented(imagenet_root: Path):
    torch.manual_seed(0)
    ds = load_dataset("imagenet", "train", str(imagenet_root), augment=True)
    assert len(ds) == 2 * len(COLORS)
    for i in range(len(ds)):
        x, y, idx = ds[i]
        assert x.shape == (3, 224, 224) and x.dtype == torch.float32
        assert idx == i and y == i // 2  # classes sorted, two images each
        assert x.min() >= 0.0 and x.max() <= 1.0


def test_imagenet_val_resize_center_crop(imagenet_root: Path):
    ds = load_dataset("imagenet", "test", str(imagenet_root))
    assert len(ds) == 2 * len(COLORS)
    for i in range(len(ds)):
        x, y, idx = ds[i]
        assert x.shape == (3, 224, 224)
        assert (y, idx) == (i // 2, i)
        color = torch.tensor(COLORS[sorted(COLORS)[y]]).float().div(255).view(3, 1, 1)
        atol = 1 / 255 if i % 2 == 0 else 4 / 255  # PNG is lossless, JPEG nearly so
        assert torch.allclose(x, color.expand_as(x), atol=atol), "wrong colour/channel order"


def test_imagenet_without_class_folders_raises_data_error(tmp_path: Path):
    (tmp_path / "val").mkdir()
    with pytest.raises(DataError) as e:
        load_dataset("imagenet", "test", str(tmp_path))
    assert str(tmp_path / "val") in _one_line_error(e)


# ---------------------------------------------------------------------------- digits
@pytest.fixture(scope="module")
def digits() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    out = {}
    for split in ("train", "test"):
        ds = load_dataset("digits", split)
        items = [ds[i] for i in range(len(ds))]
        assert [idx for _, _, idx in items] == list(range(len(ds)))
        out[split] = (torch.stack([x for x, _, _ in items]), torch.tensor([y for _, y, _ in items]))
    return out


def test_digits_split_sizes_shapes_and_values(digits):
    x_tr, x_te = digits["train"][0], digits["test"][0]
    assert len(x_tr) == 1347 and len(x_te) == 450
    assert x_tr.shape[1:] == x_te.shape[1:] == INFO["digits"].shape == (1, 8, 8)
    for x in (x_tr, x_te):
        assert x.dtype == torch.float32 and x.min() == 0.0 and x.max() == 1.0
        assert torch.equal(x * 16, (x * 16).round()), "pixels are the 0..16 levels / 16"


def test_digits_split_is_stratified(digits):
    train = torch.bincount(digits["train"][1], minlength=10)
    test = torch.bincount(digits["test"][1], minlength=10)
    assert len(train) == len(test) == INFO["digits"].num_classes
    for n_train, n_test in zip(train.tolist(), test.tolist(), strict=True):
        assert abs(n_test - 0.25 * (n_train + n_test)) <= 1


def test_digits_split_is_fixed(digits):
    for split in ("train", "test"):
        again = load_dataset("digits", split)
        x, y = digits[split]
        for i in (0, 1, 100, len(again) - 1):
            xi, yi, idx = again[i]
            assert idx == i and yi == y[i] and torch.equal(xi, x[i])


def test_digits_stats_match_info(digits):
    x = digits["train"][0]
    info = INFO["digits"]
    assert x.mean().item() == pytest.approx(info.mean[0], abs=5e-4)
    assert x.std().item() == pytest.approx(info.std[0], abs=5e-4)


# ---------------------------------------------------------------------------- errors
def test_missing_cifar_directory(tmp_path: Path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", "train", str(missing))
    msg = _one_line_error(e)
    assert str(missing / "cifar-10-batches-py") in msg
    assert all(name in msg for name in CIFAR_FILES[:5])


def test_missing_mnist_directory(tmp_path: Path):
    with pytest.raises(DataError) as e:
        load_dataset("mnist", "test", str(tmp_path))
    msg = _one_line_error(e)
    assert str(tmp_path / "MNIST" / "raw") in msg
    assert all(name in msg for name in MNIST_FILES["test"])


def test_missing_imagenet_directory(tmp_path: Path):
    with pytest.raises(DataError) as e:
        load_dataset("imagenet", "train", str(tmp_path))
    msg = _one_line_error(e)
    assert str(tmp_path / "train") in msg and "<class>" in msg


@pytest.mark.parametrize("name", ["cifar10", "mnist", "imagenet"])
def test_data_dir_none_names_the_option(name: str):
    with pytest.raises(DataError) as e:
        load_dataset(name, "train", None)
    assert "--data-dir" in _one_line_error(e)


def _good_batch() -> dict:
    return _cifar_batch(np.random.default_rng(2), CIFAR_TEST, 0)


CORRUPT_CIFAR = {
    "garbage": b"this is not a pickle at all",
    "truncated": pickle.dumps(_good_batch())[:500],
    "bad_frame": b"\x80\x04\x95" + b"\xff" * 20,
    "unknown_class": b"cnot_a_module\nThing\n.",
    "not_a_dict": pickle.dumps([1, 2, 3]),
    "no_labels": pickle.dumps({"data": _good_batch()["data"]}),
    "wrong_row_size": pickle.dumps({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}),
    "label_count": pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1, 2]}),
}


@pytest.mark.parametrize("content", CORRUPT_CIFAR.values(), ids=CORRUPT_CIFAR.keys())
def test_corrupt_cifar_batch_raises_data_error(cifar_root, content: bytes):
    root, _ = cifar_root
    path = root / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(content)
    with pytest.raises(DataError) as e:
        load_dataset("cifar10", "test", str(root))
    assert str(path) in _one_line_error(e)


def test_unknown_dataset_and_split_list_valid_names(tmp_path: Path):
    with pytest.raises(DataError) as e:
        load_dataset("svhn", "train", str(tmp_path))
    msg = _one_line_error(e)
    assert "svhn" in msg and all(name in msg for name in DATASETS)
    with pytest.raises(DataError, match="train, test"):
        load_dataset("digits", "validation")


def test_info_registry_matches_config():
    assert tuple(INFO) == DATASETS
    for name, info in INFO.items():
        assert info.name == name
        assert len(info.mean) == len(info.std) == info.shape[0]
        assert info.dim == info.shape[0] * info.shape[1] * info.shape[2]
