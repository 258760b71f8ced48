"""Throughput figures that price a sweep: samples per second of each architecture's forward
pass (certification) and training step (forward + backward + update), per device.

Two sources: the table shipped here, every figure with where it came from, and the figures
`sweeper bench` measured on the user's own device, kept in a small JSON file
($SWEEPER_THROUGHPUT, else $XDG_CACHE_HOME/sweeper/throughput.json, else
~/.cache/sweeper/throughput.json) that a dry run prefers. Pure Python: no torch, no Ray.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainables.kernel import fileio
from trainables.kernel.catalog import ARCHS

KINDS = ("gpu", "cpu")
FILE_VERSION = 1


@dataclass(frozen=True)
class Figure:
    """Samples per second of one architecture on one device, and where the figures came from."""

    forward: float
    train: float
    source: str


@dataclass(frozen=True)
class DeviceFigures:
    name: str
    kind: str  # "gpu" (GPU-hours: the whole device) or "cpu" (core-hours: one thread)
    figures: dict[str, Figure]
    origin: str  # "shipped table" or the measured file's path
    smoke: bool = False  # measured with `sweeper bench --smoke` (tiny batches)


# ----------------------------------------------------------------------- the shipped table
# GTX 1080 Ti, the card of the reference code's published certification logs.
# F110: CERTIFY of ResNet-110 on CIFAR-10 (n0 = 100, n = 100,000, batch 400) took a median
# 14.705 s per image over the 440,000 images of the 44 logs in Hadisalman/smoothing-adversarial
# data/certify/best_models/cifar10/**/stdout.txt whose nvidia-smi header names a GeForce GTX
# 1080 Ti (e.g. .../cohen/resnet110/noise_0.25/test/stdout.txt: 14.1-15.6 s per image):
# 100,100 / 14.705 = 6,807 forwards/s. (Cohen et al. 2019 report 15 s per image on an RTX
# 2080 Ti; locuslab/smoothing data/certify/cifar10 logs: 14.1-17.5 s.)
# FB_RATIO: a training step costs (forward + backward) / forward = 101.21 ms / 34.14 ms = 2.96
# forward passes: ResNet-50 on a GTX 1080 Ti, jcjohnson/cnn-benchmarks README.md (cuDNN 5.1.10).
# R50_TRAIN: ResNet-50 FP32 training on one GTX 1080 Ti, 209 images/s (Lambda Labs, "RTX 2080 Ti
# Deep Learning Benchmarks with TensorFlow", lambdalabs.com/blog/2080-ti-deep-learning-benchmarks).
# MACS: multiply-accumulates of one forward pass of this project's models (conv + linear layers,
# counted with forward hooks on trainables.models.build_model).
F110 = 100_100 / 14.705
FB_RATIO = 101.21 / 34.14
R50_TRAIN = 209.0
MACS = {
    "cifar_resnet20": 40_813_184,
    "cifar_resnet56": 125_747_840,
    "cifar_resnet110": 253_149_824,
    "lenet": 416_520,
    "digits_cnn": 1_330_432,
}
_LOGS = "Hadisalman/smoothing-adversarial data/certify/best_models/cifar10 stdout.txt (1080 Ti)"
_TRAIN_EST = "train: estimate, forward / 2.96 (fwd+bwd vs fwd time, jcjohnson/cnn-benchmarks)"


def _scaled(arch: str) -> Figure:
    """Small models: ResNet-110's measured rate scaled by multiply-accumulates. Likely an upper
    bound: a smaller model keeps a GPU less busy per multiply-accumulate (the other way round,
    ResNet-50 runs ~1.5× faster than this scaling predicts), and per-batch overheads dominate
    LeNet and digits_cnn."""
    forward = F110 * MACS["cifar_resnet110"] / MACS[arch]
    source = (
        f"estimate: cifar_resnet110's {F110:,.0f}/s × MACs 253.1M / {MACS[arch] / 1e6:.2f}M; "
        f"{_TRAIN_EST}"
    )
    return Figure(forward, forward / FB_RATIO, source)


GTX_1080_TI = DeviceFigures(
    "GTX 1080 Ti",
    "gpu",
    {
        "cifar_resnet110": Figure(
            F110, F110 / FB_RATIO, f"forward: measured, {_LOGS}; {_TRAIN_EST}"
        ),
        "resnet50": Figure(
            R50_TRAIN * FB_RATIO,
            R50_TRAIN,
            "train: measured, Lambda Labs TensorFlow benchmark (209 images/s); forward: estimate, "
            "train × 2.96 (jcjohnson/cnn-benchmarks); cross-check: ~655/s from the ResNet-50 / "
            "ResNet-110 time per image (150 s / 14.5 s) in locuslab/smoothing data/certify",
        ),
        **{
            arch: _scaled(arch)
            for arch in ("cifar_resnet20", "cifar_resnet56", "lenet", "digits_cnn")
        },
    },
    "shipped table",
)
# One CPU core, for sweeps whose trials ask for no GPU (digits, --cpu-only): measured by
# `sweeper bench` (1 thread, best of 3 runs in process CPU time, torch 2.14.1) on this
# project's test machine, an AMD EPYC 2-core VM, on 2026-11-23. (forward/s, train/s)
_CPU_BENCH = "measured by `sweeper bench` on an AMD EPYC VM core (1 thread, torch 2.14.1)"
EPYC_CORE = DeviceFigures(
    "AMD EPYC core",
    "cpu",
    {
        arch: Figure(forward, train, _CPU_BENCH)
        for arch, (forward, train) in {
            "cifar_resnet20": (431.0, 131.0),
            "cifar_resnet56": (187.0, 55.8),
            "cifar_resnet110": (100.0, 30.1),
            "resnet50": (5.73, 2.02),
            "lenet": (14_700.0, 6_010.0),
            "digits_cnn": (12_000.0, 3_400.0),
        }.items()
    },
    "shipped table",
)
SHIPPED: dict[str, DeviceFigures] = {"gpu": GTX_1080_TI, "cpu": EPYC_CORE}
for _table in SHIPPED.values():
    assert set(_table.figures) == set(ARCHS), f"{_table.name}: every architecture needs figures"


# ----------------------------------------------------------------------- measured figures
def figures_path() -> Path:
    """Where `sweeper bench` keeps the figures it measured."""
    if os.environ.get("SWEEPER_THROUGHPUT"):
        return Path(os.environ["SWEEPER_THROUGHPUT"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "sweeper" / "throughput.json"


def _rate(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _device(kind: str, raw: Any, origin: str) -> DeviceFigures:
    """One device entry of the file; ValueError naming what is wrong."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ValueError(f"devices.{kind} must be a mapping with a name")
    archs = raw.get("archs")
    if not isinstance(archs, dict):
        raise ValueError(f"devices.{kind}.archs must be a mapping")
    figures = {}
    for arch, f in archs.items():
        if not (isinstance(f, dict) and _rate(f.get("forward")) and _rate(f.get("train"))):
            raise ValueError(f"devices.{kind}.archs.{arch} needs forward and train rates > 0")
        if arch in ARCHS:  # an architecture this version does not know is not priced
            source = f"measured by `sweeper bench` {raw.get('measured_at', '')}".rstrip()
            figures[arch] = Figure(float(f["forward"]), float(f["train"]), source)
    return DeviceFigures(raw["name"], kind, figures, origin, bool(raw.get("smoke", False)))


def parse_measured(raw: Any, origin: str) -> dict[str, DeviceFigures]:
    """The devices of a figures file's JSON; ValueError (one line) if it is not well formed."""
    if not isinstance(raw, dict) or raw.get("version") != FILE_VERSION:
        raise ValueError(f"not a version-{FILE_VERSION} figures file")
    devices = raw.get("devices")
    if not isinstance(devices, dict) or set(devices) - set(KINDS):
        raise ValueError(f"devices must be a mapping with keys among {', '.join(KINDS)}")
    return {kind: _device(kind, entry, origin) for kind, entry in devices.items()}


def read_measured(path: Path) -> tuple[dict[str, DeviceFigures], str | None]:
    """(devices, None), ({}, None) without a file, or ({}, why the file is not trusted)."""
    if not path.exists():
        return {}, None
    try:
        return parse_measured(json.loads(path.read_text()), str(path)), None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        return {}, f"{type(e).__name__}: {e}".splitlines()[0]


def write_measured(path: Path, kind: str, entry: dict[str, Any]) -> None:
    """Store one device's figures atomically, keeping the other kind's entry. New figures of
    the device already there are merged into its own (a `--arch` run updates only those
    architectures); a smoke run, another device or a corrupt file is replaced."""
    try:
        old = json.loads(path.read_text()) if path.exists() else {}
        parse_measured(old, str(path))
        devices = dict(old["devices"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError):
        devices = {}
    previous = devices.get(kind)
    if (
        previous
        and previous["name"] == entry["name"]
        and not (previous.get("smoke") or entry["smoke"])
    ):
        entry = {**entry, "archs": {**previous["archs"], **entry["archs"]}}
    devices[kind] = entry
    blob = json.dumps({"version": FILE_VERSION, "devices": devices}, indent=2, sort_keys=True)
    fileio.write_bytes_atomic(str(path), (blob + "\n").encode())


def device_entry(name: str, rates: dict[str, tuple[float, float, int, int]], smoke: bool) -> dict:
    """A device's entry: arch -> (forward/s, train/s, forward batch, train batch)."""
    archs = {
        arch: {"forward": f, "train": t, "forward_batch": fb, "train_batch": tb}
        for arch, (f, t, fb, tb) in rates.items()
    }
    return {
        "name": name,
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "smoke": smoke,
        "archs": archs,
    }


def figures_for(
    kind: str, archs: list[str], measured: dict[str, DeviceFigures]
) -> dict[str, tuple[Figure, DeviceFigures]]:
    """arch -> (figure, its device): measured figures of that kind where they exist, else the
    shipped table's."""
    own = measured.get(kind)
    shipped = SHIPPED[kind]
    return {
        a: (own.figures[a], own) if own and a in own.figures else (shipped.figures[a], shipped)
        for a in archs
    }
