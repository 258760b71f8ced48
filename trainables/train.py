"""The training entry point: one shared epoch loop for every method, a checkpoint per epoch,
and exact resume (on CPU, a resumed run is bitwise identical to an uninterrupted one). What a
trial holds between steps, and its checkpoint payload and restore: `trainables.train_state`.

For the SmoothAdv family (`Method.splits_batch`), each loader batch of B inputs is split into
m_train chunks of about B/m inputs; every chunk becomes m noisy copies, so each optimizer step
sees about B samples, as in the reference SmoothAdv code (batches smaller than m_train give
fewer, non-empty chunks). The other methods take one step per batch, as their papers' code.

DDRS training (`cfg.ddrs_start_epoch` set; Alfarra et al. 2022, Algorithm 2): the state keeps
a σ table with one σ_x per input of the training split (indexed by the loader's idx, the
position in the full split, so a `train_subset` only ever touches its own entries), all
cfg.sigma at first. In epochs >= ddrs_start_epoch, every chunk first runs OptimizeSigma from
its inputs' σ_x (model in eval mode, parameters frozen, noise from the state's noise
generator), stores the result and trains the chunk with it (`StepContext.sigma`); with
K = `ddrs_iterations` 0 every σ_x stays cfg.sigma (the start resolves to 0). The table
is part of the checkpoint, so a resumed run carries every σ_x on exactly.

Self-training (`cfg.pseudo_data` set; SmoothAdv NeurIPS appendix E.2): after every labelled
batch, `cfg.pseudo_ratio` batches of the same size from the pseudo-labelled stream
(`trainables.pseudo`) are split and stepped exactly like a labelled batch, with the loss
scaled by η = `cfg.pseudo_eta` before the backward pass. The paper picks a labelled or a
pseudo-labelled minibatch at random for every step; here they alternate in a fixed order
(the same mix in expectation for ratio 1, reproducible, and an epoch is still one pass over
the labelled set). The pseudo steps draw noise from the stream's own generator, so the
labelled steps' randomness is the same as without self-training; the stream's state is part
of the checkpoint. train_loss/train_acc cover the labelled steps only; pseudo_loss (unscaled)
and pseudo_acc the pseudo-labelled ones, pseudo_inputs counts this epoch's pseudo-labelled
inputs and pseudo_passes the passes over the pseudo-labelled set so far.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainables import attacks, checkpoint, distributed, pipeline, pseudo, runtime
from trainables.ddrs import optimize_sigma
from trainables.kernel import fileio
from trainables.kernel.config import TrialConfig, required
from trainables.methods import REGISTRY, Method
from trainables.methods.base import StepContext, epoch_epsilon, loss_of
from trainables.models import transfer_weights
from trainables.pipeline import Batches, split_indices, split_size
from trainables.train_state import TrainState, build_state

log = logging.getLogger(__name__)

EpochCallback = Callable[[dict[str, Any], TrainState], None]
PseudoSums = tuple[float, int, int, int]  # self-training: summed loss, correct, samples, inputs


def make_loaders(state: TrainState) -> tuple[Batches, Batches]:
    """The training and evaluation batches of `state.pipeline` (`pipeline.loaders`)."""
    if state.pseudo_stream is not None:
        state.pseudo_stream.load()  # read and check the pseudo-labelled data before training
    return pipeline.loaders(
        state.cfg, state.device, state.pipeline, state.loader_generator, state.augment_generator
    )


def ddrs_active(cfg: TrialConfig, epoch: int) -> bool:
    return cfg.ddrs_start_epoch is not None and epoch >= cfg.ddrs_start_epoch


def ddrs_chunk_sigma(state: TrainState, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """OptimizeSigma for one chunk from its stored σ_x; stores and returns the new (b,) σ.

    In eval mode, unlike the official training code (train mode: batch-norm statistics of
    the noisy chunk, running averages moved by every σ step): σ_x is optimized for the network
    that certification deploys, does not depend on the other inputs of the chunk, and only
    the training passes update the batch-norm statistics."""
    cfg, table = state.cfg, state.ddrs_sigma
    assert table is not None, "TrainState.sigma_table creates the table before the first chunk"
    if cfg.ddrs_iterations == 0:  # no σ step (DDRS-SmoothAdv's default): σ_x as stored, σ
        return table[idx].to(device=x.device, dtype=x.dtype)
    with attacks.frozen_eval(state.model) as model:
        sigma = optimize_sigma(  # starts from the table's σ on the chunk's device, in its dtype
            model,
            x,
            table[idx],
            iterations=required(cfg.ddrs_iterations, "ddrs_iterations"),
            lr=required(cfg.ddrs_lr, "ddrs_lr"),
            samples=required(cfg.ddrs_samples, "ddrs_samples"),
            generator=state.noise_generator,
        )
    table[idx] = sigma.to(device=table.device, dtype=table.dtype)
    return sigma


def ddrs_metrics(state: TrainState, loader: Batches) -> dict[str, float]:
    """Mean, min and max of σ_x over the inputs the loader trains on."""
    sigma = state.sigma_table(split_size(loader.dataset))[split_indices(loader.dataset)]
    return {
        "ddrs_sigma_mean": sigma.mean().item(),
        "ddrs_sigma_min": sigma.min().item(),
        "ddrs_sigma_max": sigma.max().item(),
    }


def _step(
    state: TrainState,
    method: Method,
    x: torch.Tensor,
    y: torch.Tensor,
    ctx: StepContext,
    scale: float = 1.0,
) -> tuple[float, int, int]:
    """One optimizer step on a chunk, its loss multiplied by `scale` (self-training's η) for
    the backward pass: (summed unscaled loss, correct, samples)."""
    with runtime.autocast(state.precision, state.device):
        out = loss_of(method)(state.model, x, y, ctx)
    state.optimizer.zero_grad(set_to_none=True)
    state.scaler.scale(out.loss if scale == 1.0 else out.loss * scale).backward()
    state.scaler.step(state.optimizer)
    state.scaler.update()
    correct = int((out.logits.argmax(1) == out.targets).sum().item())
    return out.loss.item() * len(out.targets), correct, len(out.targets)


def train_epoch(state: TrainState, loader: Batches) -> dict[str, float]:
    """One epoch of the configured method; returns mean loss and accuracy on what it trained on
    (and the σ table's statistics when DDRS training is configured)."""
    cfg, device = state.cfg, state.device
    method = REGISTRY[cfg.method]
    ctx = StepContext(cfg, state.epoch, epoch_epsilon(cfg, state.epoch), state.noise_generator)
    chunks = method.chunks(cfg)
    ddrs = ddrs_active(cfg, state.epoch)
    if ddrs:
        state.sigma_table(split_size(loader.dataset))
    state.model.train()
    total_loss, correct, seen = 0.0, 0, 0
    pseudo_sums: PseudoSums = (0.0, 0, 0, 0)  # self-training: loss, correct, samples, inputs
    for x, y, idx in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        for xc, yc, ic in zip(*(t.tensor_split(chunks) for t in (x, y, idx)), strict=True):
            if len(xc) == 0:
                continue
            if ddrs:
                ctx = dataclasses.replace(ctx, sigma_x=ddrs_chunk_sigma(state, xc, ic))
            loss, right, n = _step(state, method, xc, yc, ctx)
            total_loss, correct, seen = total_loss + loss, correct + right, seen + n
        if state.pseudo_stream is not None:
            pseudo_sums = pseudo_steps(
                state, state.pseudo_stream, method, ctx, chunks, len(x), pseudo_sums
            )
    metrics = {"train_loss": total_loss / max(seen, 1), "train_acc": correct / max(seen, 1)}
    if cfg.ddrs_start_epoch is not None:
        metrics.update(ddrs_metrics(state, loader))
    if state.pseudo_stream is not None:
        metrics.update(pseudo_metrics(state.pseudo_stream, pseudo_sums))
    return metrics


def pseudo_steps(
    state: TrainState,
    stream: pseudo.PseudoStream,
    method: Method,
    ctx: StepContext,
    chunks: int,
    size: int,
    sums: PseudoSums,
) -> PseudoSums:
    """Self-training after a labelled batch of `size` inputs: cfg.pseudo_ratio pseudo-labelled
    batches of that size, each split into `chunks` steps like a labelled batch, loss scaled by
    η ("for a pseudo-labelled minibatch, we scale the CE loss by a factor of η and we follow
    the rest of Pseudocode 1"), noise from the stream's generator. Returns `sums` (summed
    unscaled loss, correct, samples, inputs) plus this call's."""
    cfg = state.cfg
    ctx = dataclasses.replace(ctx, generator=stream.noise_generator, sigma_x=None)
    eta = required(cfg.pseudo_eta, "pseudo_eta")
    loss_sum, correct, seen, inputs = sums
    for _ in range(required(cfg.pseudo_ratio, "pseudo_ratio")):
        x, y, _ = stream.next_batch(size)
        x, y = x.to(state.device), y.to(state.device)
        for xc, yc in zip(x.tensor_split(chunks), y.tensor_split(chunks), strict=True):
            if len(xc) == 0:
                continue
            loss, right, n = _step(state, method, xc, yc, ctx, scale=eta)
            loss_sum, correct, seen = loss_sum + loss, correct + right, seen + n
        inputs += size
    return loss_sum, correct, seen, inputs


def pseudo_metrics(stream: pseudo.PseudoStream, sums: PseudoSums) -> dict[str, float]:
    loss_sum, correct, seen, inputs = sums
    return {
        "pseudo_loss": loss_sum / max(seen, 1),
        "pseudo_acc": correct / max(seen, 1),
        "pseudo_inputs": inputs,
        "pseudo_passes": stream.passes,
    }


def evaluate(
    model: torch.nn.Module, loader: Batches, sigma: float, device: torch.device, seed: int
) -> dict[str, float]:
    """Clean accuracy and accuracy under one draw of N(0, σ²) noise per test input."""
    generator = torch.Generator(device=device).manual_seed(seed)
    model.eval()
    clean = noisy = total = 0
    with torch.inference_mode():
        for x, y, _ in loader:
            x, y = x.to(device), y.to(device)
            noise = torch.randn(x.shape, generator=generator, device=device) * sigma
            clean += (model(x).argmax(1) == y).sum().item()
            noisy += (model(x + noise).argmax(1) == y).sum().item()
            total += len(y)
    return {"test_clean_acc": clean / max(total, 1), "test_noisy_acc": noisy / max(total, 1)}


def _ready(state: TrainState, rank: int, world_size: int) -> tuple[Batches, Batches]:
    """The loaders (this rank's share of the training one) and the model compiled in place
    if asked (the state dict keeps its keys)."""
    train_loader, test_loader = make_loaders(state)
    if world_size > 1:
        train_loader = distributed.prepare(state, train_loader, rank, world_size)
    if state.cfg.compile:
        runtime.compile_module(attacks.unwrap(state.model), state.device)
    return train_loader, test_loader


def _start(state: TrainState, checkpoint_path, resume_from, init_weights) -> TrainState:
    """`state` resumed (from the payload, else the checkpoint file) or, fresh, fine-tuning."""
    cfg = state.cfg
    if resume_from is None and checkpoint_path is not None and fileio.exists(str(checkpoint_path)):
        resume_from = checkpoint.load(checkpoint_path, map_location=state.device)
    if resume_from is not None:
        state.restore(resume_from)
        log.info("resuming %s at epoch %d", cfg.trial_id, state.epoch)
    elif init_weights is not None:
        transfer_weights(state.model, init_weights)
        log.info("fine-tuning %s from %s", cfg.trial_id, cfg.init_from)
    return state


def fit(
    cfg: TrialConfig,
    checkpoint_path: str | Path | None = None,
    device: torch.device | None = None,
    on_epoch: EpochCallback | None = None,
    stop_after: int | None = None,
    resume_from: dict[str, Any] | None = None,
    init_weights: dict[str, torch.Tensor] | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> TrainState:
    """Train `cfg` to cfg.epochs (or to `stop_after` finished epochs).

    Resumes from `resume_from` (a checkpoint payload) or from `checkpoint_path` if that file
    exists, and writes `checkpoint_path` atomically after every epoch. `on_epoch(metrics,
    state)` is called after each epoch's checkpoint is written. A fresh start of a fine-tune
    trial (cfg.init_from) first loads `init_weights`, the parent's model state dict, except
    the normalization and the last layer (`models.transfer_weights`). With world_size > 1
    this is one rank of data-parallel training (its process group already initialized, see
    `trainables.distributed`): only rank 0 evaluates, checkpoints and calls `on_epoch`.
    """
    state = _start(build_state(cfg, device), checkpoint_path, resume_from, init_weights)
    train_loader, test_loader = _ready(state, rank, world_size)
    last = cfg.epochs if stop_after is None else min(cfg.epochs, stop_after)
    while state.epoch < last:
        start = time.perf_counter()
        metrics = {"epoch": state.epoch + 1, "lr": state.optimizer.param_groups[0]["lr"]}
        metrics["epsilon"] = epoch_epsilon(cfg, state.epoch)
        distributed.set_epoch(train_loader, state.epoch)
        metrics.update(train_epoch(state, train_loader))
        if rank == 0:  # the other ranks hold the same weights (DistributedDataParallel)
            seed = cfg.seed + 7919 * (state.epoch + 1)
            metrics.update(
                evaluate(attacks.unwrap(state.model), test_loader, cfg.sigma, state.device, seed)
            )
        state.scheduler.step()
        state.epoch += 1
        metrics["epoch_time_s"] = time.perf_counter() - start
        state.history.append(metrics)
        if checkpoint_path is not None and rank == 0:
            checkpoint.save(state.payload(), checkpoint_path)
        if on_epoch is not None and rank == 0:
            on_epoch(metrics, state)
    if world_size > 1:
        distributed.assert_in_sync(state.model)
    return state
