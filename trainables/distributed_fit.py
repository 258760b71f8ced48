"""`fit_data_parallel`: `train.fit` of one trial on k processes (synchronous data-parallel SGD,
`trainables.distributed`). The calling process is rank 0, the one that evaluates, writes the
checkpoint and reports; ranks 1..k−1 are spawned here, train alongside it and write nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainables.distributed import device_for, free_port, init
from trainables.kernel.config import TrialConfig
from trainables.train import fit


def _worker(rank: int, world_size: int, port: int, cfg: TrialConfig, kwargs: dict) -> None:
    """Ranks 1..k−1: train alongside rank 0, writing nothing (`cfg` pickled as it is: the
    spawned process gets the resolved config, no dict to read back)."""
    torch.set_num_threads(max(1, kwargs.pop("threads", 1)))
    init(rank, world_size, port)
    try:
        fit(
            cfg,
            device=device_for(rank),
            rank=rank,
            world_size=world_size,
            **kwargs,
        )
    finally:
        dist.destroy_process_group()


def fit_data_parallel(
    cfg: TrialConfig,
    world_size: int,
    checkpoint_path: str | None = None,
    on_epoch: Callable | None = None,
    resume_from: dict[str, Any] | None = None,
    init_weights: dict[str, torch.Tensor] | None = None,
    stop_after: int | None = None,
):
    """`train.fit` on `world_size` processes; returns rank 0's TrainState. Only rank 0
    evaluates, writes `checkpoint_path` and calls `on_epoch`."""
    port = free_port()
    # Every rank reads the same checkpoint on start (only rank 0 ever writes it).
    shared = {
        "checkpoint_path": checkpoint_path,
        "resume_from": resume_from,
        "init_weights": init_weights,
        "stop_after": stop_after,
        "threads": torch.get_num_threads(),
    }
    ctx = mp.get_context("spawn")
    workers = [
        ctx.Process(target=_worker, args=(r, world_size, port, cfg, dict(shared)), daemon=True)
        for r in range(1, world_size)
    ]
    for w in workers:
        w.start()
    init(0, world_size, port)
    try:
        state = fit(
            cfg,
            checkpoint_path,
            device_for(0),
            on_epoch,
            stop_after,
            resume_from,
            init_weights,
            rank=0,
            world_size=world_size,
        )
    finally:
        dist.destroy_process_group()
        for w in workers:
            w.join(timeout=60)
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    if failed:
        raise RuntimeError(f"data-parallel workers exited with codes {failed}")
    return state
