"""Self-describing checkpoints: atomic writes, `weights_only=True` loads.

A checkpoint is a dict of tensors and plain Python values: the model, optimizer, scheduler and
AMP-scaler states, the number of finished epochs, the RNG states, the metric history and the
resolved `TrialConfig` as a dict, so a model can be rebuilt and certified from the file alone.
With DDRS training on (`ddrs_start_epoch` set) it also holds "ddrs_sigma": the float32 table of
σ_x per input of the full training split (by split position), restored exactly on resume.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainables.datasets import INFO
from trainables.kernel import fileio
from trainables.kernel.attestation import AttestationError
from trainables.kernel.config import TrialConfig, required
from trainables.models import build_model

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint is missing or unreadable; the message says which file."""


def save(payload: dict[str, Any], path: str | Path) -> None:
    """Write `payload` to `path` (a local path or URI) atomically."""
    buffer = io.BytesIO()
    torch.save({**payload, "format_version": FORMAT_VERSION}, buffer)
    fileio.write_bytes_atomic(str(path), buffer.getvalue())


def load(
    path: str | Path,
    map_location: str | torch.device = "cpu",
    verify: Callable[[str, bytes], None] | None = None,
) -> dict[str, Any]:
    """Read a checkpoint with `torch.load(weights_only=True)`; `verify(path, data)` first
    checks the very bytes loaded (`trainables.attestations.verify_checkpoint`), its
    AttestationError a CheckpointError."""
    try:
        data = fileio.read_bytes(str(path))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    if verify is not None:
        try:
            verify(str(path), data)
        except AttestationError as e:
            raise CheckpointError(f"checkpoint {path}: {e}") from None
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises many types for a truncated or foreign file
        raise CheckpointError(f"cannot read checkpoint {path}: {type(e).__name__}: {e}") from None


def load_model(
    path: str | Path,
    device: str | torch.device = "cpu",
    verify: Callable[[str, bytes], None] | None = None,
) -> tuple[torch.nn.Sequential, TrialConfig]:
    """The trained model (eval mode, on `device`) and the config that produced it (`verify`:
    as `load`'s)."""
    payload = load(path, map_location=device, verify=verify)
    cfg = TrialConfig.from_dict(payload["config"])
    info = INFO[cfg.dataset]
    model = build_model(required(cfg.arch, "arch"), info.num_classes, info.mean, info.std)
    model.load_state_dict(payload["model"])
    return model.to(device).eval(), cfg
