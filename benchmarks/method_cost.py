"""Cost of a training step of every training method, relative to Gaussian training.

Run from the repository root:

    .venv/bin/python benchmarks/method_cost.py            # defaults: about 1 min, 1 thread
    .venv/bin/python benchmarks/method_cost.py --smoke    # tiny batches, a few seconds
    .venv/bin/python benchmarks/method_cost.py --repeats 9 --resnet-repeats 5

For every method in `trainables.methods.REGISTRY`, with representative settings, one loader
batch is trained by `trainables.train.train_epoch` itself (a one-batch loader): split into
m_train chunks with one optimizer step each when the method `splits_batch` (the SmoothAdv
family), else one step on the whole batch; each step is the method's loss, a backward and an
SGD step. All methods get the same batch: the first B training digits for digits_cnn (B = 64),
random 32×32 images for cifar_resnet20 (B = 16, fewer repeats). Weights are random (the same
seed for every method) and the epoch is past the warm-up, so attacks use their full ε and
SmoothMix's mixup term is on. σ = 0.25, ε = 0.5.

Columns: "ms/batch" is the best of `--repeats` runs of the whole loader batch; "steps" the
optimizer steps it takes; "ms/step" their ratio; "× gauss" ms/batch over Gaussian training
(m_train = 1) of the same batch, i.e. the cost of consuming the same data; "naive" the number
of forward+backward passes over B samples the method makes (attack passes included, although
they need no parameter gradients), for reference.

Timing: one torch thread and this process's CPU time (other processes on a shared machine
barely disturb it; it equals wall time on an idle machine); one untimed run of every method
first (it also counts the optimizer steps) and `--warmup` more rounds, then the methods run
round-robin so that run i of every method saw about the same machine load, and
the minimum over runs is reported.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainables.datasets import load_dataset
from trainables.kernel.config import TrialConfig
from trainables.methods import REGISTRY
from trainables.train import train_epoch
from trainables.train_state import build_state

SIGMA, EPSILON = 0.25, 0.5
EPOCH = 20  # past every warm-up (10 epochs by default)
CPU = torch.device("cpu")


@dataclass(frozen=True)
class Setting:
    method: str
    label: str
    fields: dict[str, Any]

    def naive_passes(self) -> int:
        """Forward+backward passes over B samples: attack steps and training passes."""
        m = self.fields.get("m_train") or 1
        steps = self.fields.get("steps", 0)
        return {
            "gaussian": m,
            "smoothadv": m * (steps + 1),
            "vanilla_pgd": steps + 1,
            "pgd_noise": steps + m,
            "smoothmix": m * (steps + 2),  # attack, clean copies, mixed copies
            "macer": m,
            "consistency": m,
            "stability": 2,  # clean and noisy
        }[self.method]


SETTINGS = (
    Setting("gaussian", "m=1", {"m_train": 1}),
    Setting("smoothadv", "PGD T=10 m=8", {"attack": "pgd", "steps": 10, "m_train": 8}),
    Setting("smoothadv", "PGD T=2 m=1", {"attack": "pgd", "steps": 2, "m_train": 1}),
    Setting("vanilla_pgd", "T=10", {"steps": 10}),
    Setting("pgd_noise", "T=10 m=1", {"steps": 10, "m_train": 1}),
    Setting("smoothmix", "m=2 T=4 mix_step=0", {"m_train": 2, "steps": 4, "mix_step": 0}),
    Setting("smoothmix", "m=2 T=4 mix_step=1", {"m_train": 2, "steps": 4, "mix_step": 1}),
    Setting("macer", "k=16", {"m_train": 16}),
    Setting("consistency", "m=2", {"m_train": 2}),
    Setting("stability", "", {}),
)
_missing = set(REGISTRY) - {s.method for s in SETTINGS}
assert not _missing, f"methods without a benchmark setting: {sorted(_missing)}"


@dataclass(frozen=True)
class Spec:
    """A model and the loader batch it trains on."""

    arch: str
    dataset: str
    batch_size: int
    repeats: int


def loader_batch(spec: Spec) -> tuple[torch.Tensor, torch.Tensor]:
    if spec.dataset == "digits":
        data = load_dataset("digits", "train")
        return data.images[: spec.batch_size].float(), data.labels[: spec.batch_size]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(spec.batch_size, 3, 32, 32, generator=gen)
    return x, torch.randint(0, 10, (spec.batch_size,), generator=gen)


def config(spec: Spec, setting: Setting) -> TrialConfig:
    """ε is dropped (None) by the methods without an attack."""
    return TrialConfig(
        dataset=spec.dataset,
        arch=spec.arch,
        method=setting.method,
        sigma=SIGMA,
        epsilon=EPSILON,
        batch_size=spec.batch_size,
        lr=0.01,
        **setting.fields,
    )


def batch_runner(spec: Spec, setting: Setting, x: torch.Tensor, y: torch.Tensor):
    """(a function training one loader batch with train_epoch, the optimizer steps it takes).
    Building it trains the batch once, untimed: that run is each method's first warm-up."""
    state = build_state(config(spec, setting), CPU)
    state.epoch = EPOCH
    loader = [(x, y, torch.arange(len(y)))]
    steps: list[int] = []
    hook = state.optimizer.register_step_post_hook(lambda opt, args, kwargs: steps.append(1))
    train_epoch(state, loader)
    hook.remove()
    return (lambda: train_epoch(state, loader)), len(steps)


def best_times(runners: list[Callable[[], object]], repeats: int, warmup: int) -> list[float]:
    """Best CPU seconds per run of each runner, run round-robin after `warmup` rounds."""
    for _ in range(warmup):
        for run in runners:
            run()
    best = [float("inf")] * len(runners)
    for _ in range(repeats):
        for i, run in enumerate(runners):
            start = time.process_time()
            run()
            best[i] = min(best[i], time.process_time() - start)
    return best


def table(spec: Spec, warmup: int) -> None:
    x, y = loader_batch(spec)
    built = [batch_runner(spec, setting, x, y) for setting in SETTINGS]
    best = best_times([run for run, _ in built], spec.repeats, warmup)
    print(f"\n{spec.arch}: loader batch B={spec.batch_size}, best of {spec.repeats}")
    print(
        f"{'method':13}{'setting':20}{'steps':>6}{'ms/batch':>10}{'ms/step':>9}"
        f"{'× gauss':>9}{'naive':>7}"
    )
    for setting, (_, steps), seconds in zip(SETTINGS, built, best, strict=True):
        ms = 1e3 * seconds
        print(
            f"{setting.method:13}{setting.label:20}{steps:>6}{ms:>10.1f}{ms / steps:>9.1f}"
            f"{seconds / best[0]:>9.2f}{setting.naive_passes():>7}"
        )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny batches, one run: a few seconds")
    p.add_argument("--repeats", type=int, default=7, help="timed runs for digits_cnn")
    p.add_argument("--resnet-repeats", type=int, default=3, help="timed runs for cifar_resnet20")
    p.add_argument("--warmup", type=int, default=0, help="untimed rounds after the first run")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.smoke:
        specs = [Spec("digits_cnn", "digits", 16, 1), Spec("cifar_resnet20", "cifar10", 2, 1)]
        warmup = 0
    else:
        specs = [
            Spec("digits_cnn", "digits", 64, args.repeats),
            Spec("cifar_resnet20", "cifar10", 16, args.resnet_repeats),
        ]
        warmup = args.warmup
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, sigma={SIGMA}, "
        f"epsilon={EPSILON}, epoch {EPOCH} (warm-up done), process CPU time, "
        f"{1 + warmup} untimed run(s) first"
    )
    for spec in specs:
        table(spec, warmup)


if __name__ == "__main__":
    main()
