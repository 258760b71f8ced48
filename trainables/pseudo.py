"""Self-training (SmoothAdv NeurIPS appendix E.2): a pseudo-labelled data set whose batches are
interleaved with the labelled ones, their loss scaled by η (`cfg.pseudo_eta`).

The data (`cfg.pseudo_data`, an absolute path, or a data URI `s3://bucket/prefix` (gs://) where
`sweeper data put pseudo --from PATH --to URI` put it: each node then fetches it once into its
data cache and checks its hashes, `trainables.data_cache`) is either
- an `.npz` file with `images`, uint8 of shape (N, C, H, W), (N, H, W, C) or, for one-channel
  data sets, (N, H, W), and `labels`, integers in 0..K-1 of shape (N,); or
- a directory `DIR/<label>/<image file>` whose sub-folders are named by the decimal class
  index 0..K-1 (png, jpg, ...; converted to the data set's L or RGB mode),
with H×W and C those of the labelled data set (32×32×3 for CIFAR-10, 8×8×1 for digits).

Where the file lives is not part of a trial's identity (`pseudo_data` is an environment field);
what it holds is: `cfg.pseudo_fingerprint` is the first 16 hex digits of a SHA-256 of the
decoded content (the (N, C, H, W) images and the labels, so independent of the file's layout
and compression), printed by `python -m trainables.pseudo PATH --dataset NAME`, and checked
against the data before training and in the sweep's data check.

`PseudoStream` serves batches of any size from an endless sequence of shuffled passes over the
set (cycling when it is smaller than an epoch needs; a batch may span two passes), with the
labelled set's augmentation. It owns its random streams (index permutations, the augmentation's
RNG state and the noise generator of the pseudo-labelled steps), so adding it leaves the
labelled steps' randomness unchanged, and `state_dict()` goes into the checkpoint for a bitwise
resume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainables import data_cache
from trainables.datasets import INFO, DataError
from trainables.kernel.config import TrialConfig, required

FINGERPRINT_DIGITS = 16
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
# Offsets of the pseudo stream's seeds from cfg.seed (the labelled loader uses +0, its noise +1).
SEED_INDEX, SEED_NOISE, SEED_AUGMENT = 2, 3, 4


# ---------------------------------------------------------------------------- reading
def local_copy(path: str | Path) -> Path:
    """Where to read `path` on this node: the path itself, or for a data URI the cached copy of
    the set put there (its one file, or its <label>/ folders); DataError naming what is wrong
    with the bucket, the manifest or a file."""
    if not data_cache.is_remote(str(path)):
        return Path(path).expanduser()
    try:
        root = data_cache.fetch(str(path), data_cache.PSEUDO)
    except data_cache.RemoteDataError as e:
        raise DataError(e.problems[0]) from None
    files = [p for p in root.iterdir() if not p.name.startswith(".")]
    return files[0] if len(files) == 1 and files[0].is_file() else root


def load_pseudo(path: str | Path, dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The images (N, C, H, W) uint8 and labels (N,) int64 at `path` (a data URI: its copy
    in the node's cache), checked against the shape and classes of data set `dataset`;
    DataError (one line naming the path) otherwise."""
    path = local_copy(path)
    info = INFO[dataset]
    if path.is_dir():
        images, labels = _read_folder(path, info.shape, info.num_classes)
    elif path.is_file():
        images, labels = _read_npz(path)
        images = _to_nchw(images, info.shape, path, dataset)
    else:
        raise DataError(
            f"pseudo-labelled data not found: {path} (expected an .npz file with `images` and "
            f"`labels`, or a directory of <label>/<image> folders)"
        )
    _check_labels(labels, len(images), info.num_classes, path, dataset)
    if len(images) == 0:
        raise DataError(f"pseudo-labelled data {path} holds no images")
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels.astype(np.int64))


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):  # a .npy file: one array
            raise DataError(f"pseudo-labelled data {path} is not an .npz archive")
        with npz:
            missing = [k for k in ("images", "labels") if k not in npz.files]
            if missing:
                have = ", ".join(npz.files) or "nothing"
                raise DataError(
                    f"pseudo-labelled data {path} must hold arrays `images` and `labels` "
                    f"(missing {', '.join(missing)}; has {have})"
                )
            return npz["images"], npz["labels"]
    except DataError:
        raise
    except Exception as e:  # zip, pickle and format errors of a foreign or damaged file
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")
        raise DataError(f"cannot read pseudo-labelled data {path}: {msg}") from None


def _to_nchw(images: np.ndarray, shape: tuple[int, int, int], path: Path, name: str):
    c, h, w = shape
    if images.dtype != np.uint8:
        raise DataError(f"pseudo-labelled images in {path} must be uint8 (got {images.dtype})")
    if images.ndim == 4 and images.shape[1:] == (c, h, w):
        return images
    if images.ndim == 4 and images.shape[1:] == (h, w, c):
        return images.transpose(0, 3, 1, 2)
    if images.ndim == 3 and c == 1 and images.shape[1:] == (h, w):
        return images[:, None]
    wanted = f"(N, {c}, {h}, {w}) or (N, {h}, {w}, {c})" + (f" or (N, {h}, {w})" if c == 1 else "")
    raise DataError(
        f"pseudo-labelled images in {path} have shape {tuple(images.shape)}; "
        f"dataset {name!r} needs {wanted}"
    )


def _check_labels(labels: np.ndarray, n: int, k: int, path: Path, name: str) -> None:
    if labels.ndim != 1 or len(labels) != n or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(
            f"pseudo-labels in {path} must be integers of shape ({n},), one per image "
            f"(got {labels.dtype} of shape {tuple(labels.shape)})"
        )
    if n and (labels.min() < 0 or labels.max() >= k):
        raise DataError(
            f"pseudo-labels in {path} must be in 0..{k - 1} for dataset {name!r} "
            f"(got {labels.min()}..{labels.max()})"
        )


def _read_folder(path: Path, shape: tuple[int, int, int], k: int):
    from PIL import Image

    c, h, w = shape
    mode = "L" if c == 1 else "RGB"
    images, labels = [], []
    for sub in sorted(p for p in path.iterdir() if not p.name.startswith(".")):
        if not (sub.is_dir() and sub.name.isdigit() and int(sub.name) < k):
            raise DataError(
                f"pseudo-labelled folder {path} must hold only sub-folders named by a class "
                f"index 0..{k - 1} (found {sub.name!r})"
            )
        for file in sorted(sub.iterdir()):
            if file.suffix.lower() not in IMAGE_SUFFIXES:
                continue
            try:
                with Image.open(file) as img:
                    array = np.asarray(img.convert(mode), dtype=np.uint8)
            except Exception as e:  # PIL raises many types for a damaged file
                raise DataError(f"cannot read pseudo-labelled image {file}: {e}") from None
            if array.shape[:2] != (h, w):
                got = "x".join(map(str, array.shape[:2][::-1]))
                raise DataError(
                    f"pseudo-labelled image {file} is {got}; the data set needs {w}x{h}"
                )
            images.append(array.reshape(h, w, c).transpose(2, 0, 1))
            labels.append(int(sub.name))
    if not images:
        raise DataError(f"pseudo-labelled folder {path} holds no images in <label>/ sub-folders")
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def fingerprint(images: torch.Tensor, labels: torch.Tensor) -> str:
    """The content's identity: SHA-256 of the (N, C, H, W) uint8 images and int64 labels."""
    digest = hashlib.sha256(b"sweeper-pseudo-v1")
    digest.update(np.asarray(images.shape, dtype="<i8").tobytes())
    digest.update(images.contiguous().numpy().data)
    digest.update(np.ascontiguousarray(labels.numpy(), dtype="<i8").data)
    return digest.hexdigest()[:FINGERPRINT_DIGITS]


def load_checked(cfg: TrialConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """`cfg.pseudo_data`, checked against the data set and `cfg.pseudo_fingerprint`."""
    images, labels = load_pseudo(required(cfg.pseudo_data, "pseudo_data"), cfg.dataset)
    actual = fingerprint(images, labels)
    if actual != cfg.pseudo_fingerprint:
        raise DataError(
            f"pseudo-labelled data {cfg.pseudo_data} has fingerprint {actual}, not the "
            f"configured pseudo_fingerprint {cfg.pseudo_fingerprint} (other data at that path?)"
        )
    return images, labels


def pseudo_problems(trials: Iterable[TrialConfig]) -> list[str]:
    """One line per problem with the trials' pseudo-labelled data (read once per path and data
    set): a relative path, missing or malformed data, or another fingerprint."""
    problems: dict[str, None] = {}
    checked: dict[tuple[str, str], str] = {}
    for cfg in trials:
        if cfg.pseudo_data is None:
            continue
        remote = data_cache.is_remote(cfg.pseudo_data)
        if remote and (problem := data_cache.uri_problem(cfg.pseudo_data)):
            problems[f"pseudo_data {problem}"] = None
            continue
        if not remote and not Path(cfg.pseudo_data).expanduser().is_absolute():
            problems[
                f"pseudo_data must be an absolute path (trials run in their own working "
                f"directories; got {cfg.pseudo_data!r})"
            ] = None
            continue
        key = (cfg.pseudo_data, cfg.dataset)
        if key not in checked:
            try:
                checked[key] = fingerprint(*load_pseudo(*key))
            except DataError as e:
                problems[str(e)] = None
                checked[key] = ""
        if checked[key] and checked[key] != cfg.pseudo_fingerprint:
            problems[
                f"pseudo_fingerprint {cfg.pseudo_fingerprint} does not match the data at "
                f"{cfg.pseudo_data} (its fingerprint is {checked[key]})"
            ] = None
    return list(problems)


def augmentation(dataset: str):
    """The labelled training split's augmentation, for (C, H, W) float tensors: random crop
    (padding 4) + flip for 3×32×32 data (CIFAR-10), random resized crop + flip for ImageNet,
    none for MNIST and digits."""
    from torchvision import transforms

    if dataset == "imagenet":
        return transforms.Compose(
            [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()]
        )
    if INFO[dataset].shape == (3, 32, 32):
        return transforms.Compose(
            [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
        )
    return None


# ---------------------------------------------------------------------------- the stream
class PseudoStream:
    """Endless shuffled passes over the pseudo-labelled set, batches of any size."""

    def __init__(self, cfg: TrialConfig, device: torch.device):
        self.cfg = cfg
        self.index_generator = torch.Generator().manual_seed(cfg.seed + SEED_INDEX)
        self.noise_generator = torch.Generator(device=device).manual_seed(cfg.seed + SEED_NOISE)
        self.augment_state = torch.Generator().manual_seed(cfg.seed + SEED_AUGMENT).get_state()
        self.images: torch.Tensor | None = None
        self.labels: torch.Tensor | None = None
        self.transform = augmentation(cfg.dataset)
        self.perm: torch.Tensor | None = None  # the current pass's order
        self.pos = 0  # inputs of the current pass already served
        self.drawn = 0  # inputs served since the start of training

    def load(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The (images, labels), read and checked on the first call."""
        if self.images is None or self.labels is None:
            self.images, self.labels = load_checked(self.cfg)
            self._check_perm(len(self.labels))
        return self.images, self.labels

    def __len__(self) -> int:
        return len(self.load()[1])

    def next_batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x float in [0, 1] (size, C, H, W), y, idx): the next `size` inputs of the stream."""
        n, parts, need = len(self), [], size
        while need > 0:
            if self.perm is None or self.pos == n:
                self.perm, self.pos = torch.randperm(n, generator=self.index_generator), 0
            take = min(need, n - self.pos)
            parts.append(self.perm[self.pos : self.pos + take])
            self.pos, need = self.pos + take, need - take
        idx = torch.cat(parts)
        self.drawn += size
        images, labels = self.load()
        x = images[idx].float().div(255)
        if self.transform is not None:
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(self.augment_state)
                x = torch.stack([self.transform(xi) for xi in x])
                self.augment_state = torch.get_rng_state()
        return x, labels[idx], idx

    @property
    def passes(self) -> float:
        """Passes over the pseudo-labelled set so far (inputs served / set size)."""
        return self.drawn / len(self)

    def state_dict(self) -> dict[str, Any]:
        return {
            "index": self.index_generator.get_state(),
            "noise": self.noise_generator.get_state(),
            "augment": self.augment_state.clone(),
            "perm": None if self.perm is None else self.perm.clone(),
            "pos": self.pos,
            "drawn": self.drawn,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index_generator.set_state(state["index"].cpu())
        self.noise_generator.set_state(state["noise"].cpu())
        self.augment_state = state["augment"].cpu().clone()
        self.perm = None if state["perm"] is None else state["perm"].cpu().clone()
        self.pos, self.drawn = int(state["pos"]), int(state["drawn"])
        if self.labels is not None:
            self._check_perm(len(self.labels))

    def _check_perm(self, count: int) -> None:
        if self.perm is not None and len(self.perm) != count:
            raise DataError(
                f"the checkpoint's pseudo-labelled stream covers {len(self.perm)} inputs but "
                f"{self.cfg.pseudo_data} holds {count}"
            )


def stream(cfg: TrialConfig, device: torch.device) -> PseudoStream | None:
    """The trial's pseudo-labelled stream, or None without self-training."""
    return None if cfg.pseudo_data is None else PseudoStream(cfg, device)


@dataclass(frozen=True)
class PseudoSummary:
    """What `sweeper pseudo-data` says of pseudo-labelled data: the `pseudo_fingerprint` a
    space must give for it, how many images of which shape, and the labels per class."""

    fingerprint: str
    images: int
    shape: tuple[int, ...]
    per_class: list[int]


def summarize(path: str, dataset: str) -> PseudoSummary:
    """Load and check pseudo-labelled data for `dataset` (DataError if it is not such data)."""
    images, labels = load_pseudo(path, dataset)
    counts = np.bincount(labels.numpy(), minlength=INFO[dataset].num_classes)
    shape = tuple(int(d) for d in images.shape[1:])
    return PseudoSummary(fingerprint(images, labels), len(images), shape, counts.tolist())
