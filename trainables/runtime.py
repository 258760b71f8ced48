"""How a model is run: numeric precision (autocast), memory format and compilation.

None of these settings changes what a model *is* (its weights, its trial_id); they change how
its forward passes are computed, and so, in floating point, possibly their results:
- `precision` fp32 (no autocast), bf16 or fp16 (torch.autocast). fp16 needs CUDA; bf16 needs
  CUDA with bf16 support or a CPU with bf16 instructions (AVX512-BF16 or AMX). Elsewhere bf16
  is emulated and far slower than fp32 (measured ~0.03x on an AVX2 CPU), so it is refused
  with a one-line `RuntimeSettingError`, never chosen silently.
- `channels_last`: weights (and so activations) in NHWC memory layout, which oneDNN and
  cuDNN convolutions prefer. Not bitwise equal to NCHW on every backend (on this project's
  AVX2 CPU the logits differ in the last bits), so certification records it.
- `compile`: `torch.compile` of the module's forward, in place (`nn.Module.compile`, so the
  state dict keeps its keys). Where compiling cannot work (no C++ compiler for the CPU backend,
  an unsupported platform) a tiny probe fails once per process and the module runs eagerly
  after a one-line warning.
"""

from __future__ import annotations

import functools
import logging
from contextlib import nullcontext

import torch
from torch import nn

from trainables.kernel.run_modes import PRECISIONS

log = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class RuntimeSettingError(RuntimeError):
    """A precision this device cannot run (usefully); the message says what to use instead."""


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX tiles)."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def precision_problem(precision: str, device: torch.device) -> str | None:
    """Why `precision` cannot be used on `device` (one line), or None if it can."""
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r} (valid: {', '.join(PRECISIONS)})"
    if precision == "fp32":
        return None
    if device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            return "precision bf16: this GPU has no bf16 support; use fp16 or fp32"
        return None
    if precision == "fp16":
        return f"precision fp16 needs a CUDA GPU (this is {device.type}); use fp32 or bf16"
    if device.type == "cpu" and not cpu_has_bf16():
        return (
            "precision bf16: this CPU has no bf16 instructions (AVX512-BF16/AMX), where bf16 "
            "runs ~30x slower than fp32; use fp32, or a GPU or CPU with bf16 support"
        )
    return None


def check_precision(precision: str, device: torch.device) -> None:
    problem = precision_problem(precision, device)
    if problem is not None:
        raise RuntimeSettingError(problem)


def noise_dtype(precision: str) -> torch.dtype | None:
    """The dtype of the noisy batches `Smooth` draws at `precision` (None at fp32: the
    inputs' own)."""
    return None if precision == "fp32" else DTYPES[precision]


def autocast(precision: str, device: torch.device):
    """The autocast context of `precision` on `device` (nothing at fp32)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def to_channels_last(model: nn.Module) -> nn.Module:
    """The model's 4-d parameters and buffers in NHWC layout (in place; returns the model)."""
    return model.to(memory_format=torch.channels_last)


@functools.cache
def compile_problem(device_type: str) -> str | None:
    """Why torch.compile cannot run on this device type here (one line), or None.

    Compiles and runs a tiny conv net forward and backward once per process: what fails here
    (no C++ compiler for the CPU backend, no Triton for CUDA, an unsupported platform) would
    fail for every model."""
    device = torch.device(device_type)
    probe = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten())
    probe = probe.to(device)
    try:
        x = torch.ones(2, 1, 4, 4, device=device, requires_grad=True)
        torch.compile(probe)(x).sum().backward()
    except Exception as e:  # the backends raise many types; any of them means "cannot"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"{type(e).__name__}: {reason}"[:300]
    return None


def compile_mode(compile: bool, device: torch.device) -> str:
    """How a model set to `compile` runs on `device`, for the records: "eager", "compiled" or
    "eager (compile unavailable)"."""
    if not compile:
        return "eager"
    return "compiled" if compile_problem(device.type) is None else "eager (compile unavailable)"


def compile_module(module: nn.Module, device: torch.device) -> bool:
    """`torch.compile` the module's forward in place if compiling works on `device`; else log
    one warning line and leave it eager. Returns whether it was compiled."""
    problem = compile_problem(device.type)
    if problem is not None:
        log.warning(
            "compile: torch.compile cannot run on %s here (%s); running eagerly",
            device.type,
            problem,
        )
        return False
    module.compile()
    return True


def prepare(model: nn.Module, device: torch.device, channels_last: bool, compile: bool) -> str:
    """Apply the memory format and compilation to `model` in place; returns `compile_mode`."""
    if channels_last:
        to_channels_last(model)
    if compile:
        compile_module(model, device)
    return compile_mode(compile, device)
