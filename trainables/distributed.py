"""Synchronous data-parallel SGD inside one trial, as one rank sees it: k processes, one per
GPU (or, without CUDA, k CPU processes on the gloo backend), gradients averaged by
DistributedDataParallel. This module joins the process group, wraps the model and shards the
loader; `trainables.distributed_fit` starts the k processes, each running `train.fit`.

The trial's own process is rank 0: it talks to Ray Tune (reports, checkpoints) while ranks
1..k−1 run in child processes. Ray gives the trial its k GPUs (resources
`gpu: k` in the space) and sets CUDA_VISIBLE_DEVICES, so rank r uses cuda:r. Each rank trains
on its 1/k share of every epoch (DistributedSampler, batch_size/k inputs per step), so the
global batch is `batch_size`, as in the SmoothAdv ImageNet protocol (4 GPUs, batch 400).
Batch-norm statistics stay per GPU (no SyncBatchNorm), as in the reference code.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from trainables.pipeline import Batches, DeviceLoader
from trainables.train_state import TrainState

# Seconds a rank waits for the others in a collective before failing (a crashed rank would
# otherwise leave the trial hanging).
TIMEOUT_ENV = "SWEEPER_DDP_TIMEOUT_S"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def device_for(rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if torch.cuda.is_available() else torch.device("cpu")


def init(rank: int, world_size: int, port: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend(),
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, 1800))),
    )


def prepare(state: TrainState, train_loader: Batches, rank: int, world_size: int) -> Batches:
    """Make `state` one rank of data-parallel training: DistributedDataParallel around the
    model, this rank's own noise stream, and a loader over its 1/k share of every epoch (the
    per-rank batch is batch_size / k, so the global batch stays batch_size)."""
    cfg = state.cfg
    state.rank, state.world_size = rank, world_size
    ids = [state.device.index] if state.device.type == "cuda" else None
    state.model = DistributedDataParallel(state.model, device_ids=ids)
    if rank > 0:  # rank 0's stream is in the checkpoint; the others derive theirs
        state.noise_generator.manual_seed(cfg.seed + 1 + 7919 * rank + 104729 * state.epoch)
        if state.augment_generator is not None:
            state.augment_generator.manual_seed(cfg.seed + 2 + 7919 * rank + 104729 * state.epoch)
    if isinstance(train_loader, DeviceLoader):  # DistributedSampler's order, on the device
        return train_loader.shard(rank, world_size, cfg.seed, cfg.batch_size // world_size)
    sampler: DistributedSampler[Any] = DistributedSampler(
        train_loader.dataset, world_size, rank, shuffle=True, seed=cfg.seed
    )
    return DataLoader(
        train_loader.dataset,
        cfg.batch_size // world_size,
        sampler=sampler,
        num_workers=cfg.num_workers,
        pin_memory=state.device.type == "cuda",
    )


def assert_in_sync(model: torch.nn.Module) -> None:
    """Raise if the ranks' parameters differ (they must not, under DistributedDataParallel)."""
    total = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    low, high = total.clone(), total.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    if not torch.equal(low, high):
        raise RuntimeError(
            f"data-parallel ranks diverged: parameter sums {low.item()} != {high.item()}"
        )


def set_epoch(loader: Batches, epoch: int) -> None:
    """A new shuffle per epoch, the same on every rank (no-op for an ordinary loader)."""
    if isinstance(loader, DeviceLoader):
        loader.set_epoch(epoch)
    elif isinstance(loader, DataLoader) and isinstance(loader.sampler, DistributedSampler):
        loader.sampler.set_epoch(epoch)
