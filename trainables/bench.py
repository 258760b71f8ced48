"""Throughput of each architecture on this machine's device, for pricing sweeps.

Two figures per architecture, in samples per second of the whole device:
- forward: base-classifier samples of certification (`Smooth.sample_counts`: noise drawn into
  a batch, a forward pass in eval mode and inference mode, the votes counted), at the
  certification batch size of the shipped spaces;
- train: inputs of a Gaussian-augmentation training step (m_train = 1: noise, forward,
  cross-entropy, backward, SGD step; `trainables.train.train_epoch` on a one-batch loader),
  at the training batch size of the shipped spaces (per GPU for data-parallel ResNet-50).

Inputs are random images of the architecture's data set shape and the weights random: no
data is read. On a CPU, samples per second barely depend on the batch beyond a few dozen,
so smaller batches keep the measurement short; `sweeper bench` runs torch on one thread there,
so the figures are per core. Each figure is the best of `repeats` timed runs after one
untimed run.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import TensorDataset

from trainables.datasets import INFO
from trainables.kernel.catalog import ARCHS
from trainables.kernel.config import TrialConfig
from trainables.pipeline import Batch
from trainables.smoothing import Smooth
from trainables.train import train_epoch
from trainables.train_state import build_state


@dataclass(frozen=True)
class BenchSpec:
    """An architecture's data set and batch sizes: (train, forward) on a GPU and on a CPU."""

    dataset: str
    gpu: tuple[int, int]
    cpu: tuple[int, int]


# GPU batches are the shipped spaces' (cifar10: 256 / certify 1000; imagenet: 400 over 4 GPUs
# / certify 400; mnist: 256 / 2000; digits: 64 / 1100).
SPECS: dict[str, BenchSpec] = {
    "cifar_resnet20": BenchSpec("cifar10", (256, 1000), (128, 500)),
    "cifar_resnet56": BenchSpec("cifar10", (256, 1000), (64, 200)),
    "cifar_resnet110": BenchSpec("cifar10", (256, 1000), (32, 100)),
    "resnet50": BenchSpec("imagenet", (100, 400), (4, 8)),
    "lenet": BenchSpec("mnist", (256, 2000), (256, 2000)),
    "digits_cnn": BenchSpec("digits", (64, 1100), (64, 1100)),
}
SMOKE_BATCH = (4, 8)  # --smoke: (train, forward) on any device
assert set(SPECS) == set(ARCHS), "every architecture needs its bench batches"


@dataclass(frozen=True)
class Measurement:
    arch: str
    forward: float  # samples per second
    train: float  # inputs per second of training steps
    forward_batch: int
    train_batch: int


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    threads = torch.get_num_threads()
    return f"cpu: {cpu_model()} ({threads} thread{'s' if threads != 1 else ''})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def best_rate(run: Callable[[], object], samples: int, repeats: int, device: torch.device) -> float:
    """Samples per second of the fastest of `repeats` timed runs, after one untimed run. On a
    CPU with one thread the clock is this process's CPU time (other load on the machine
    barely disturbs it; on an idle machine it is the wall time), else the wall time."""
    one_thread = device.type == "cpu" and torch.get_num_threads() == 1
    clock = time.process_time if one_thread else time.perf_counter
    run()
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = clock()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, clock() - start)
    return samples / best


def _inputs(dataset: str, batch: int, device: torch.device):
    info = INFO[dataset]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(batch, *info.shape, generator=gen)
    return x.to(device), torch.randint(0, info.num_classes, (batch,), generator=gen).to(device)


def forward_rate(arch: str, batch: int, repeats: int, device: torch.device) -> float:
    """Certification samples per second: one input, `batch` noisy copies per forward pass."""
    spec = SPECS[arch]
    state = build_state(TrialConfig(dataset=spec.dataset, arch=arch, method="gaussian"), device)
    smooth = Smooth(state.model, INFO[spec.dataset].num_classes, sigma=0.25)
    x, _ = _inputs(spec.dataset, 1, device)
    generator = torch.Generator(device=device).manual_seed(1)
    num = 2 * batch  # two forward batches per run
    return best_rate(lambda: smooth.sample_counts(x, num, batch, generator), num, repeats, device)


def train_rate(arch: str, batch: int, repeats: int, device: torch.device) -> float:
    """Training inputs per second of Gaussian-augmentation steps on one batch."""
    spec = SPECS[arch]
    cfg = TrialConfig(
        dataset=spec.dataset, arch=arch, method="gaussian", m_train=1, batch_size=batch, lr=0.01
    )
    state = build_state(cfg, device)
    x, y = _inputs(spec.dataset, batch, device)
    loader = OneBatch((x, y, torch.arange(batch)))
    return best_rate(lambda: train_epoch(state, loader), batch, repeats, device)


class OneBatch:
    """A loader of one fixed batch (`dataset`: as many inputs, for the `Batches` protocol)."""

    def __init__(self, batch: Batch):
        self.batch = batch
        self.dataset = TensorDataset(batch[2])

    def __iter__(self) -> Iterator[Batch]:
        yield self.batch


def measure(arch: str, device: torch.device, smoke: bool = False, repeats: int = 3) -> Measurement:
    """Forward and training-step throughput of `arch` on `device` (`smoke`: tiny batches,
    one timed run: checks the machinery, not a figure to price with)."""
    spec = SPECS[arch]
    train_b, forward_b = SMOKE_BATCH if smoke else (spec.gpu if device.type == "cuda" else spec.cpu)
    repeats = 1 if smoke else repeats
    return Measurement(
        arch,
        forward_rate(arch, forward_b, repeats, device),
        train_rate(arch, train_b, repeats, device),
        forward_b,
        train_b,
    )
