"""The on-device data pipeline for in-memory data sets (CIFAR-10, MNIST, digits, ImageNet32).

A trial that shares a GPU with others has a few CPU cores at most; DataLoader workers doing
crop and flip image by image starve its share of the accelerator. Here the whole split lives
on the trial's device as one tensor (uint8 where the data set is stored as bytes: CIFAR-10
is 150 MB), and every batch is gathered, cropped and flipped there: no worker processes and
no host-to-device copy per batch.

Equivalence with the DataLoader pipeline (`trainables.train.make_loaders` with
data_pipeline "loader"):
- The shuffle draws exactly what a shuffling DataLoader with the same generator draws per
  epoch (a 64-bit base seed, then the permutation, then a second permutation that its
  RandomSampler computes when it runs out), so data sets without augmentation (MNIST,
  digits) get the very same batches, and a run's later epochs the same order.
- The augmentation of CIFAR-10 and ImageNet32 (`datasets.CROP_FLIP_DATASETS`) is
  torchvision's RandomCrop(32, padding=4) + RandomHorizontalFlip(): per image, an offset
  (i, j) uniform in {0..8}² into the zero-padded image and a flip with probability 1/2,
  drawn here from the trial's augmentation generator on the device instead of torch's global
  one (same distribution, other draws; tested against torchvision).
- Pixels become floats as `datasets.ImageTensors` makes them (uint8 / 255), bit for bit.

Batches are (x, y, idx) with x and y on the device and idx (positions in the full split, as
`ImageTensors` yields them) on the CPU, where the DDRS σ table lives.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from trainables.datasets import CROP_FLIP_DATASETS, ImageTensors, IndexedFolder, load_dataset
from trainables.kernel.config import TrialConfig

PAD = 4  # RandomCrop's padding for 32x32 CIFAR-style images
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # x, y, idx


class Batches(Protocol):
    """What training and evaluation iterate: a DataLoader or a DeviceLoader, yielding
    (x, y, idx) batches, with the data set they come from."""

    @property
    def dataset(self) -> Dataset[Any]: ...

    def __iter__(self) -> Iterator[Batch]: ...


def in_memory(dataset: Dataset[Any]) -> tuple[ImageTensors, torch.Tensor]:
    """The ImageTensors under (possibly nested) Subsets and the split positions they select;
    TypeError for a data set that is not in memory (ImageNet's image folders)."""
    base = dataset
    while isinstance(base, Subset):
        base = base.dataset
    if not isinstance(base, ImageTensors):
        raise TypeError(f"{type(base).__name__} is not an in-memory data set")
    return base, split_indices(dataset)


def crop_flip(images: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """RandomCrop(H, padding=4) then RandomHorizontalFlip(0.5) of each image of (B, C, H, W),
    drawn from `generator` (on the images' device); any dtype, padding with zeros."""
    B, C, H, W = images.shape
    device = images.device
    padded = F.pad(images, (PAD, PAD, PAD, PAD))
    offsets = torch.randint(0, 2 * PAD + 1, (2, B, 1), generator=generator, device=device)
    flips = torch.rand(B, 1, generator=generator, device=device) < 0.5
    rows = offsets[0] + torch.arange(H, device=device)  # (B, H)
    cols = offsets[1] + torch.arange(W, device=device)  # (B, W)
    cols = torch.where(flips, cols.flip(1), cols)  # a flipped crop reads its columns backwards
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    c = torch.arange(C, device=device).view(1, C, 1, 1)
    return padded[b, c, rows.view(B, 1, H, 1), cols.view(B, 1, 1, W)]


def as_float(images: torch.Tensor) -> torch.Tensor:
    """Model inputs in [0, 1], as ImageTensors.__getitem__ makes them."""
    return images.float().div(255) if images.dtype == torch.uint8 else images


class DeviceLoader:
    """Batches of one in-memory split, held on `device`.

    shuffle: draw a new order per epoch from `generator` (a CPU generator, as a DataLoader's);
    augment: crop and flip each batch on the device with `augment_generator` (on `device`).
    `shard(rank, world_size, seed)` turns it into one rank's loader of data-parallel training
    (DistributedSampler's order: a permutation seeded with seed + epoch, padded to a multiple
    of world_size, every world_size-th position from `rank`)."""

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int,
        device: torch.device,
        *,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        augment: bool = False,
        augment_generator: torch.Generator | None = None,
    ):
        base, positions = in_memory(dataset)
        self.dataset = dataset  # for split_size / split_indices, as DataLoader.dataset
        self.images = base.images[positions].to(device)
        self.labels = base.labels[positions].to(device)
        self.positions = positions
        self.batch_size, self.device = batch_size, device
        self.shuffle, self.generator = shuffle, generator
        self.augment, self.augment_generator = augment, augment_generator
        self.epoch, self.rank, self.world_size = 0, 0, 1
        self.seed: int | None = None

    def shard(self, rank: int, world_size: int, seed: int, batch_size: int) -> DeviceLoader:
        self.rank, self.world_size, self.seed, self.batch_size = rank, world_size, seed, batch_size
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> torch.Tensor:
        """This epoch's positions into the held images (CPU, int64)."""
        n = len(self.positions)
        if self.seed is not None:  # data-parallel: DistributedSampler's order for this rank
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            perm = torch.randperm(n, generator=g)
            total = -(-n // self.world_size) * self.world_size
            perm = torch.cat([perm, perm[: total - n]]) if total > n else perm
            return perm[self.rank : total : self.world_size]
        if not self.shuffle:
            return torch.arange(n)
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)  # base seed
        perm = torch.randperm(n, generator=self.generator)
        torch.randperm(n, generator=self.generator)  # what RandomSampler draws at its end
        return perm

    def __len__(self) -> int:
        n = len(self.positions)
        rows = n if self.seed is None else -(-n // self.world_size)
        return -(-rows // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        order = self.order()
        on_device = order.to(self.device, non_blocking=True)  # one copy per epoch
        for start in range(0, len(order), self.batch_size):
            stop = start + self.batch_size
            x = self.images[on_device[start:stop]]
            if self.augment:
                x = crop_flip(x, self.augment_generator)
            yield as_float(x), self.labels[on_device[start:stop]], self.positions[order[start:stop]]


def loaders(
    cfg: TrialConfig,
    device: torch.device,
    which: str,
    generator: torch.Generator,
    augment_generator: torch.Generator | None = None,
) -> tuple[Batches, Batches]:
    """(training, evaluation) batches of `which` pipeline, "device" or "loader". Training
    batches are shuffled with `generator` (CPU); the evaluation ones come in order, at least
    256 at a time. The loader pipeline's crop/flip is torchvision's in the data set (global
    RNG, `num_workers` processes); the device one draws from `augment_generator`."""
    split = load_dataset(cfg.dataset, "train", cfg.data_dir, cfg.download, augment=True)
    train = _first(split, cfg.train_subset)
    test = _first(load_dataset(cfg.dataset, "test", cfg.data_dir, cfg.download), cfg.eval_subset)
    eval_batch = max(cfg.batch_size, 256)
    if which == "device":  # the torchvision transform loaded with the split goes unused
        return (
            DeviceLoader(
                train,
                cfg.batch_size,
                device,
                shuffle=True,
                generator=generator,
                augment=cfg.dataset in CROP_FLIP_DATASETS,
                augment_generator=augment_generator,
            ),
            DeviceLoader(test, eval_batch, device),
        )
    workers, pin = cfg.num_workers, device.type == "cuda"
    return (
        DataLoader(
            train,
            cfg.batch_size,
            shuffle=True,
            generator=generator,
            num_workers=workers,
            pin_memory=pin,
        ),
        DataLoader(test, eval_batch, shuffle=False, num_workers=workers, pin_memory=pin),
    )


def _first(dataset: ImageTensors | IndexedFolder, count: int | None) -> Dataset[Any]:
    """The first `count` inputs of a split (all of them for None or a larger count)."""
    return dataset if count is None or count >= len(dataset) else Subset(dataset, range(count))


def split_indices(dataset: Dataset[Any]) -> torch.Tensor:
    """The positions in the full split of a (possibly Subset-wrapped) data set's inputs: the
    idx values its loader yields."""
    if isinstance(dataset, Subset):
        return split_indices(dataset.dataset)[torch.as_tensor(list(dataset.indices))]
    return torch.arange(split_size(dataset))


def split_size(dataset: Dataset[Any]) -> int:
    """The number of inputs of the full split under any Subset wrappers."""
    if isinstance(dataset, Subset):
        return split_size(dataset.dataset)
    if not isinstance(dataset, Sized):
        raise TypeError(f"{type(dataset).__name__} has no length: not a split")
    return len(dataset)
