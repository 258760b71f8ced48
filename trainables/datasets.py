"""Data sets, read from local files in their standard on-disk formats.

Every data set yields `(x, y, idx)`: x a float tensor in [0, 1] of shape (C, H, W), y the label
and idx the position in the split (certification shards and DDRS key results by it).
Standardization is *not* applied here: it is the model's first layer.

Nothing is downloaded unless `download=True`, or the data directory is a data URI (s3://,
gs://: the node's verified copy in its cache is read, `trainables.data_cache`); a missing
directory raises `DataError` whose message names the path and the files expected there.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from trainables import data_cache
from trainables.kernel.catalog import DATASETS, INPUT_DIM, NUM_CLASSES
from trainables.safe_pickle import load_plain, official_md5_problem


class DataError(RuntimeError):
    """A data set cannot be read; the message is one line saying what to fix."""


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    num_classes: int
    shape: tuple[int, int, int]  # (C, H, W) of a model input
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def dim(self) -> int:
        c, h, w = self.shape
        return c * h * w


INFO = {
    "cifar10": DatasetInfo(
        "cifar10", 10, (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
    ),
    "imagenet": DatasetInfo(
        "imagenet", 1000, (3, 224, 224), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    ),
    "mnist": DatasetInfo("mnist", 10, (1, 28, 28), (0.1307,), (0.3081,)),
    # Statistics of the digits training split (pixels / 16).
    "digits": DatasetInfo("digits", 10, (1, 8, 8), (0.3052,), (0.3760,)),
    # Downsampled ImageNet (Chrabaszcz et al. 2017), 32x32: ImageNet's channel statistics.
    "imagenet32": DatasetInfo(
        "imagenet32", 1000, (3, 32, 32), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    ),
}
assert tuple(INFO) == DATASETS, "data registry and catalog.DATASETS disagree"
assert {k: v.num_classes for k, v in INFO.items()} == NUM_CLASSES, "catalog.NUM_CLASSES disagrees"
assert {k: v.dim for k, v in INFO.items()} == INPUT_DIM, "catalog.INPUT_DIM disagrees"

# Data sets trained with RandomCrop(32, padding=4) + RandomHorizontalFlip (`_cifar_augment`);
# the on-device pipeline (`trainables.pipeline`) does the same to these and nothing to others.
CROP_FLIP_DATASETS = frozenset({"cifar10", "imagenet32"})
# Data sets held in memory as tensors (ImageTensors); ImageNet is read image by image.
IN_MEMORY_DATASETS = frozenset({"cifar10", "mnist", "digits", "imagenet32"})

CIFAR_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
DIGITS_TEST_FRACTION = 0.25
DIGITS_SPLIT_SEED = 0


class ImageTensors(Dataset):
    """In-memory images (N, C, H, W) uint8 or float in [0, 1], with an optional per-sample
    transform (applied to the float tensor)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform=None):
        self.images = images
        self.labels = labels.long()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        x = self.images[i]
        x = x.float().div(255) if x.dtype == torch.uint8 else x
        if self.transform is not None:
            x = self.transform(x)
        return x, int(self.labels[i]), i


class IndexedFolder(Dataset):
    """torchvision ImageFolder that also yields the index."""

    def __init__(self, folder):
        self.folder = folder

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, i: int):
        x, y = self.folder[i]
        return x, y, i


def load_dataset(
    name: str,
    split: str,
    data_dir: str | None = None,
    download: bool = False,
    augment: bool = False,
) -> ImageTensors | IndexedFolder:
    """The `split` ("train" or "test") of data set `name`; `augment` turns on the training
    augmentation (CIFAR-10: random crop with 4-pixel padding + horizontal flip; ImageNet:
    RandomResizedCrop 224 + flip)."""
    if name not in INFO:
        raise DataError(f"unknown dataset {name!r} (valid: {', '.join(DATASETS)})")
    if split not in ("train", "test"):
        raise DataError(f"unknown split {split!r} (valid: train, test)")
    if name == "digits":
        return _digits(split)
    root = _data_root(name, data_dir)
    if name == "cifar10":
        return _cifar10(root, split, download, augment)
    if name == "mnist":
        return _mnist(root, split, download)
    if name == "imagenet32":
        return _imagenet32(root, split, augment)
    return _imagenet(root, split, augment)


def _data_root(name: str, data_dir: str | None) -> Path:
    """The local directory to read `name` from: `data_dir`, or for a data URI (s3://, gs://)
    this node's verified copy of it (`trainables.data_cache.fetch`, downloaded once)."""
    if data_dir is None:
        raise DataError(f"dataset {name!r} needs a data directory: pass --data-dir DIR (data_dir)")
    if data_cache.is_remote(data_dir):
        try:
            return data_cache.fetch(data_dir, name)
        except data_cache.RemoteDataError as e:
            raise DataError(str(e)) from None
    return Path(data_dir).expanduser()


def _digits(split: str) -> ImageTensors:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = data.images.astype(np.float32) / 16.0
    x_tr, x_te, y_tr, y_te = train_test_split(
        images,
        data.target,
        test_size=DIGITS_TEST_FRACTION,
        stratify=data.target,
        random_state=DIGITS_SPLIT_SEED,
    )
    x, y = (x_tr, y_tr) if split == "train" else (x_te, y_te)
    return ImageTensors(torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y))


def _cifar10(root: Path, split: str, download: bool, augment: bool) -> ImageTensors:
    folder = root / "cifar-10-batches-py"
    if download and not folder.is_dir():
        import torchvision

        torchvision.datasets.CIFAR10(str(root), train=True, download=True)
    names = CIFAR_FILES[:5] if split == "train" else CIFAR_FILES[5:]
    _require(folder, names, "CIFAR-10 (python version, as torchvision writes it)", download)
    images, labels = [], []
    for fname in names:
        try:
            raw = (folder / fname).read_bytes()
            if problem := official_md5_problem(folder / fname, raw):
                raise ValueError(problem)
            batch = load_plain(raw)  # never pickle.load: a crafted batch would run code
            data = np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            batch_labels = [int(y) for y in batch["labels"]]
            if len(data) != len(batch_labels):
                raise ValueError(f"{len(data)} images but {len(batch_labels)} labels")
        except Exception as e:  # a corrupt pickle can raise almost anything
            msg = f"{type(e).__name__}: {e}".replace("\n", " ")
            raise DataError(f"cannot read CIFAR-10 file {folder / fname}: {msg}") from None
        images.append(data)
        labels.extend(batch_labels)
    transform = _cifar_augment() if augment else None
    return ImageTensors(torch.from_numpy(np.concatenate(images)), torch.tensor(labels), transform)


def _cifar_augment():
    from torchvision import transforms

    return transforms.Compose(
        [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
    )


def _mnist(root: Path, split: str, download: bool) -> ImageTensors:
    folder = root / "MNIST" / "raw"
    if download and not folder.is_dir():
        import torchvision

        torchvision.datasets.MNIST(str(root), train=True, download=True)
    img_name, lbl_name = MNIST_FILES[split]
    if not folder.is_dir() and any((root / n).exists() for n in (img_name, f"{img_name}.gz")):
        folder = root  # the raw files (plain or .gz) directly in the given directory
    _require(
        folder,
        [img_name, lbl_name],
        "MNIST (idx format, as torchvision writes it)",
        download,
        gz=True,
    )
    images = _read_idx(folder, img_name)
    labels = _read_idx(folder, lbl_name)
    if images.ndim != 3 or len(images) != len(labels):
        raise DataError(f"MNIST files in {folder} do not match: {images.shape} vs {labels.shape}")
    return ImageTensors(
        torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))
    )


def _read_idx(folder: Path, name: str) -> np.ndarray:
    """Read an idx file (plain or .gz): magic (0, 0, dtype, ndim), big-endian dims, data."""
    path = folder / name if (folder / name).exists() else folder / f"{name}.gz"
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
        ndim = raw[3]
        dims = np.frombuffer(raw, dtype=">i4", count=ndim, offset=4)
        if raw[2] != 0x08:
            raise ValueError(f"unsupported idx dtype 0x{raw[2]:02x}")
        return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims).copy()
    except (OSError, ValueError, IndexError, EOFError) as e:
        raise DataError(f"cannot read MNIST file {path}: {e}") from None


IMAGENET32_FILES = {
    "train": [f"train_data_batch_{i}.npz" for i in range(1, 11)],
    "test": ["val_data.npz"],
}


def imagenet32_folder(root: Path, split: str) -> Path:
    """Where the npz batches are: `root` itself or the archives' folder inside it."""
    sub = root / ("Imagenet32_train_npz" if split == "train" else "Imagenet32_val_npz")
    return sub if sub.is_dir() else root


def _imagenet32(root: Path, split: str, augment: bool) -> ImageTensors:
    """ImageNet32 as distributed (image-net.org "Downsampled ImageNet 32x32", npz): each file
    holds `data` uint8 (N, 3072), rows channel-first like CIFAR, and `labels` 1..1000."""
    folder = imagenet32_folder(root, split)
    names = IMAGENET32_FILES[split]
    _require(
        folder, names, "ImageNet32 (npz batches: train_data_batch_1..10.npz, val_data.npz)", True
    )
    images, labels = [], []
    for fname in names:
        try:
            with np.load(folder / fname) as batch:
                images.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
                labels.append(np.asarray(batch["labels"], dtype=np.int64).reshape(-1) - 1)
        except Exception as e:  # zipfile/pickle/key/shape errors of a damaged file
            raise DataError(
                f"cannot read ImageNet32 file {folder / fname}: {type(e).__name__}: {e}"
            ) from None
    y = np.concatenate(labels)
    if y.min() < 0 or y.max() > 999:
        raise DataError(
            f"ImageNet32 labels in {folder} must be 1..1000 (got {y.min() + 1}..{y.max() + 1})"
        )
    transform = _cifar_augment() if augment else None
    return ImageTensors(torch.from_numpy(np.concatenate(images)), torch.from_numpy(y), transform)


def _imagenet(root: Path, split: str, augment: bool) -> IndexedFolder:
    from torchvision import datasets, transforms

    sub = "train" if split == "train" else "val"
    if not (root / sub).is_dir():
        raise DataError(
            f"ImageNet not found: expected {root / sub}/<class>/<image> (ImageFolder layout "
            f"with train/ and val/); pass --data-dir pointing at the directory holding them"
        )
    if augment:
        tf = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()]
    else:
        tf = [transforms.Resize(256), transforms.CenterCrop(224)]
    try:
        folder = datasets.ImageFolder(
            str(root / sub), transforms.Compose([*tf, transforms.ToTensor()])
        )
    except OSError as e:  # no class folders, or no images in them
        raise DataError(
            f"ImageNet not readable in {root / sub}: {e} (expected <class>/<image> subfolders)"
        ) from None
    return IndexedFolder(folder)


def _require(folder: Path, names: list[str], what: str, download: bool, gz: bool = False) -> None:
    missing = [
        n for n in names if not (folder / n).exists() and not (gz and (folder / f"{n}.gz").exists())
    ]
    if missing:
        hint = "" if download else " (or pass --download where there is internet)"
        raise DataError(
            f"{what} not found: expected {', '.join(missing)} in {folder}; "
            f"pass --data-dir pointing at the directory that holds it{hint}"
        )


def data_problem(name: str, data_dir: str | None, download: bool = False) -> str | None:
    """Why data set `name` cannot be read from `data_dir` (one line), or None if it can.
    Cheap: looks for the expected files without reading them."""
    if name not in INFO:
        return f"unknown dataset {name!r} (valid: {', '.join(DATASETS)})"
    if name == "digits":
        return None
    if data_cache.is_remote(data_dir):  # the URI, its bucket and the data set's manifest entry
        return data_cache.uri_problem(str(data_dir)) or data_cache.remote_problem(
            str(data_dir), name
        )
    if download:
        return None
    try:
        root = _data_root(name, data_dir)
        if name == "cifar10":
            _require(
                root / "cifar-10-batches-py",
                CIFAR_FILES,
                "CIFAR-10 (python version, as torchvision writes it)",
                download,
            )
        elif name == "mnist":
            folder = root / "MNIST" / "raw" if (root / "MNIST" / "raw").is_dir() else root
            _require(
                folder,
                [*MNIST_FILES["train"], *MNIST_FILES["test"]],
                "MNIST (idx format, as torchvision writes it)",
                download,
                gz=True,
            )
        elif name == "imagenet32":
            for split, names in IMAGENET32_FILES.items():
                _require(imagenet32_folder(root, split), names, "ImageNet32 (npz batches)", True)
        elif not (root / "train").is_dir() or not (root / "val").is_dir():
            return (
                f"ImageNet not found: expected {root}/train and {root}/val in ImageFolder layout; "
                "pass --data-dir pointing at the directory holding them"
            )
    except DataError as e:
        return str(e)
    return None


def dataset_files(name: str, root: Path) -> list[str]:
    """The files the loader of `name` reads below the local directory `root`, as posix paths
    relative to it (what `sweeper data put` uploads); DataError if `root` does not hold them."""
    if name == "digits":
        raise DataError("digits ships with scikit-learn: there is nothing to put")
    if problem := data_problem(name, str(root)):
        raise DataError(problem)
    if name == "cifar10":
        extra = (
            ["batches.meta"] if (root / "cifar-10-batches-py" / "batches.meta").is_file() else []
        )
        return [f"cifar-10-batches-py/{n}" for n in [*CIFAR_FILES, *extra]]
    if name == "mnist":
        folder = root / "MNIST" / "raw" if (root / "MNIST" / "raw").is_dir() else root
        names = [
            n if (folder / n).exists() else f"{n}.gz" for pair in MNIST_FILES.values() for n in pair
        ]
        found = [folder / n for n in names]
    elif name == "imagenet32":
        found = [imagenet32_folder(root, s) / n for s, ns in IMAGENET32_FILES.items() for n in ns]
    else:
        found = [
            Path(top, f)
            for sub in ("train", "val")
            for top, _, files in sorted(os.walk(root / sub))
            for f in sorted(files)
            if not f.startswith(".")
        ]
    return [p.relative_to(root).as_posix() for p in found]
