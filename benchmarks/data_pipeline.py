"""Training batches per second: the on-device pipeline against the DataLoader pipeline.

Run from the repository root:

    .venv/bin/python benchmarks/data_pipeline.py            # 50,000 CIFAR-shaped images
    .venv/bin/python benchmarks/data_pipeline.py --smoke    # 5,000 images

Images per second of one epoch of augmented CIFAR-10 training batches (B = 256: random crop
with 4-pixel padding + horizontal flip, floats in [0, 1] on the trial's device), with no
model: what a trial's data pipeline alone can feed. The data are random uint8 images in the
CIFAR-10 layout (the pipelines do not look at the pixel values).
- device: `trainables.pipeline.DeviceLoader` (the split held on the device, crop/flip there,
  no worker processes);
- loader, w workers: `torch.utils.data.DataLoader` over `datasets.ImageTensors` with
  torchvision's RandomCrop + RandomHorizontalFlip per image (the "loader" data_pipeline),
  each batch copied to the device, at 1 and 3 worker processes.
The clock is wall time (DataLoader workers are other processes), best of `--repeats` epochs,
the pipelines interleaved; the main process uses one torch thread. On a shared machine the
worker figures move with the other load; this machine has 2 cores, so 3 workers oversubscribe.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torch.utils.data import DataLoader

from trainables.datasets import ImageTensors, _cifar_augment
from trainables.pipeline import DeviceLoader

BATCH = 256


def cifar_like(n: int) -> ImageTensors:
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=gen)
    labels = torch.randint(0, 10, (n,), generator=gen)
    return ImageTensors(images, labels, _cifar_augment())


def epoch_fn(loader, device: torch.device):
    def run() -> int:
        seen = 0
        for x, y, _ in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            seen += len(y)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return seen

    return run


def pipelines(n: int, device: torch.device) -> dict:
    data = cifar_like(n)
    plain = ImageTensors(data.images, data.labels)
    device_loader = DeviceLoader(
        plain,
        BATCH,
        device,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        augment=True,
        augment_generator=torch.Generator(device=device).manual_seed(1),
    )
    fns = {"device": epoch_fn(device_loader, device)}
    for workers in (1, 3):
        loader = DataLoader(
            data,
            BATCH,
            shuffle=True,
            num_workers=workers,
            persistent_workers=True,
            pin_memory=device.type == "cuda",
            generator=torch.Generator().manual_seed(0),
        )
        fns[f"loader, {workers} worker{'s' * (workers > 1)}"] = epoch_fn(loader, device)
    return fns


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="5,000 images, 2 repeats")
    p.add_argument("--images", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.smoke:
        args.images, args.repeats = 5_000, 2
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # 3 on 2 cores
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    fns = pipelines(args.images, device)
    best = {name: float("inf") for name in fns}
    for _ in range(args.repeats + 1):  # the first round warms up (and starts the workers)
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    print(
        f"torch {torch.__version__}, {device.type}, {args.images} CIFAR-shaped images, batch "
        f"{BATCH}, crop+flip, wall clock, best of {args.repeats}"
    )
    print(f"{'pipeline':20}{'images/s':>11}{'x device':>10}")
    for name, seconds in best.items():
        rate = args.images / seconds
        print(f"{name:20}{rate:>11.0f}{best['device'] / seconds:>10.3f}")


if __name__ == "__main__":
    main()
