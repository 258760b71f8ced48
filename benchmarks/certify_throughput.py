"""Throughput of randomized-smoothing certification and the cost of a SmoothAdv training step.

Run from the repository root:

    .venv/bin/python benchmarks/certify_throughput.py            # defaults: ~2 min, 1 thread
    .venv/bin/python benchmarks/certify_throughput.py --smoke    # a few seconds
    .venv/bin/python benchmarks/certify_throughput.py --resnet110 --threads 2 --repeats 7

Three tables, all measured in this one process, with random (untrained) weights:

1. Base-classifier samples/second of `Smooth.sample_counts` and `Smooth.certify` (one input)
   versus a bare batched forward pass (eval mode, inference_mode, argmax) of the same model on
   a pre-made batch of the same size. "counts/bare" and "cert/bare" are ratios of the best
   runs, "paired" the median over runs of the ratio of interleaved runs; the target is >= 0.95.
   Certification costs the forward passes plus drawing the noise, which is part of its real
   cost and is shown as "noise %" (drawing the noise of a batch / one bare forward). "in fwd
   %" is the share of `sample_counts` time spent inside the model's forward passes (median
   over runs): unlike the ratios it hardly moves with other load on the machine.
2. `certify_batch` packing several inputs into each forward batch versus one input per call.
3. One SmoothAdv-PGD loader batch (split into m_train chunks, each chunk's loss + backward +
   SGD step, as `trainables.train.train_epoch` does) relative to one Gaussian-augmentation
   (m_train = 1) loader batch of the same inputs. "naive" is m·(T + 1), the number of
   forward+backward passes of B samples, for reference.

Timings interleave the compared functions, run warm-up iterations first and report the best
of `--repeats` runs (the minimum is the least disturbed by other load on the machine). With one
thread (the default) the clock is this process's CPU time, which other processes on a shared
machine barely disturb and which equals wall time on an idle machine (`--clock wall` to
check); with more threads it is wall time.
Rates are base-classifier samples per second of that clock.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainables.kernel.config import TrialConfig
from trainables.methods import gaussian, smoothadv
from trainables.methods.base import StepContext
from trainables.models import build_model
from trainables.smoothing import Smooth

SIGMA = 0.25
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


@dataclass(frozen=True)
class Spec:
    """A model to benchmark: its input shape, certification batch sizes and training batch."""

    arch: str
    dataset: str
    shape: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    samples: int  # base-classifier samples per timed certification call
    train_batch: int  # loader batch B of the training-step table

    def rounds(self, batch_size: int) -> int:
        """Forward batches per timed call (at least 2: certify needs n0 and n)."""
        return max(2, self.samples // batch_size)


def build(spec: Spec) -> torch.nn.Module:
    """The spec's architecture (random weights) behind its dataset's normalization."""
    if spec.shape[0] == 1:
        return build_model(spec.arch, 10, (0.3052,), (0.3760,))
    return build_model(spec.arch, 10, CIFAR_MEAN, CIFAR_STD)


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


@dataclass(frozen=True)
class Timer:
    repeats: int
    warmup: int
    clock: Callable[[], float]

    def run(self, fns: dict, warmup: int | None = None) -> dict[str, list[float]]:
        """{name: [seconds of `clock` per run]}, running the functions round-robin after
        warm-up, so that run i of every function saw about the same machine load."""
        for _ in range(self.warmup if warmup is None else warmup):
            for fn in fns.values():
                fn()
        times: dict = {name: [] for name in fns}
        for _ in range(self.repeats):
            for name, fn in fns.items():
                start = self.clock()
                fn()
                times[name].append(self.clock() - start)
        return times


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over runs of numerator_i / denominator_i (run i of both was interleaved)."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


class TimedForward(torch.nn.Module):
    """Wraps a model and adds up the clock time spent in its forward passes."""

    def __init__(self, model: torch.nn.Module, clock: Callable[[], float]):
        super().__init__()
        self.model, self.clock, self.seconds = model, clock, 0.0

    def forward(self, x):
        start = self.clock()
        out = self.model(x)
        self.seconds += self.clock() - start
        return out


def forward_share(model, spec: Spec, batch_size: int, timer: Timer) -> float:
    """Median share of `sample_counts` time spent inside the model's forward passes: a
    load-insensitive view of its overhead (noise, bincount, bookkeeping)."""
    timed = TimedForward(model, timer.clock)
    smooth = Smooth(timed, 10, SIGMA)
    x = torch.rand(1, *spec.shape)
    num = spec.rounds(batch_size) * batch_size
    shares = []
    for _ in range(timer.repeats):
        timed.seconds, start = 0.0, timer.clock()
        smooth.sample_counts(x, num, batch_size)
        shares.append(timed.seconds / (timer.clock() - start))
    return statistics.median(shares)


def certify_fns(model, spec: Spec, batch_size: int) -> dict[str, Callable[[], object]]:
    """Bare forward, noise only, sample_counts and certify, all on `rounds` batches."""
    rounds = spec.rounds(batch_size)
    num = rounds * batch_size
    smooth = Smooth(model, 10, SIGMA)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(spec.shape, generator=gen)
    batch = torch.rand(batch_size, *spec.shape, generator=gen)
    buffer = torch.empty_like(batch)

    def bare():
        with torch.inference_mode():
            for _ in range(rounds):
                model(batch).argmax(dim=1)

    def noise():
        for _ in range(rounds):
            buffer.normal_(0.0, SIGMA, generator=gen).add_(x)

    return {
        "bare": bare,
        "noise": noise,
        "sample_counts": lambda: smooth.sample_counts(x[None], num, batch_size, gen),
        "certify": lambda: smooth.certify(x, batch_size, num - batch_size, 0.001, batch_size, gen),
    }


def certify_table(specs: list[Spec], timer: Timer) -> None:
    print("\n[1] base-classifier samples/s: Smooth vs a bare forward on a pre-made batch")
    head = f"{'model':16}{'batch':>6}{'bare/s':>9}{'counts/s':>10}{'certify/s':>10}"
    head += f"{'counts/bare':>12}{'paired':>8}{'cert/bare':>10}{'paired':>8}"
    print(head + f"{'noise %':>9}{'in fwd %':>10}")
    for spec in specs:
        model = build(spec).eval()
        for bs in spec.batch_sizes:
            rounds = spec.rounds(bs)
            t = timer.run(certify_fns(model, spec, bs))
            rate = {name: rounds * bs / min(ts) for name, ts in t.items()}
            print(
                f"{spec.arch:16}{bs:>6}{rate['bare']:>9.0f}{rate['sample_counts']:>10.0f}"
                f"{rate['certify']:>10.0f}{rate['sample_counts'] / rate['bare']:>12.3f}"
                f"{paired_ratio(t['bare'], t['sample_counts']):>8.3f}"
                f"{rate['certify'] / rate['bare']:>10.3f}"
                f"{paired_ratio(t['bare'], t['certify']):>8.3f}"
                f"{100 * min(t['noise']) / min(t['bare']):>8.1f}%"
                f"{100 * forward_share(model, spec, bs, timer):>9.1f}%"
            )


def packing_table(spec: Spec, points: int, budgets, batch_size: int, timer: Timer) -> None:
    """certify_batch with k inputs per call (k = 1 is one input at a time) vs a bare forward,
    for each (n0, n) in `budgets`."""
    print(f"\n[2] {spec.arch}: CERTIFY of {points} inputs, forward batch {batch_size}")
    model = build(spec).eval()
    smooth = Smooth(model, 10, SIGMA)
    gen = torch.Generator().manual_seed(0)
    xs = torch.rand(points, *spec.shape, generator=gen)
    batch = torch.rand(batch_size, *spec.shape, generator=gen)
    print(f"{'n0':>6}{'n':>7}{'inputs/call':>13}{'samples/s':>11}{'vs 1/call':>11}{'vs bare':>9}")
    for n0, n in budgets:
        total = points * (n0 + n)
        rounds = -(-total // batch_size)

        def bare(rounds=rounds):
            with torch.inference_mode():
                for _ in range(rounds):
                    model(batch).argmax(dim=1)

        def packed(k: int, n0=n0, n=n) -> Callable[[], object]:
            return lambda: [
                smooth.certify_batch(xs[i : i + k], n0, n, 0.001, batch_size, gen)
                for i in range(0, points, k)
            ]

        sizes = sorted({1, min(4, points), points})
        t = timer.run({"bare": bare} | {k: packed(k) for k in sizes}, warmup=1)
        bare_rate = rounds * batch_size / min(t["bare"])
        print(f"{n0:>6}{n:>7}{'bare forward':>13}{bare_rate:>11.0f}{'':>11}{1:>9.3f}")
        for k in sizes:
            rate, speedup = total / min(t[k]), min(t[1]) / min(t[k])
            print(f"{'':>13}{k:>13}{rate:>11.0f}{speedup:>11.2f}{rate / bare_rate:>9.3f}")


def train_batch_fn(spec: Spec, cfg: TrialConfig, method, x, y) -> Callable[[], object]:
    """One loader batch as the training loop runs it: m_train chunks, each a loss, a backward
    and an SGD step (model in train mode; attacks switch to eval themselves)."""
    torch.manual_seed(0)
    model = build(spec).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    ctx = StepContext(cfg, epoch=20, epsilon=cfg.epsilon or 0.0, generator=torch.Generator())
    m = cfg.m_train or 1

    def run():
        for xc, yc in zip(x.tensor_split(m), y.tensor_split(m), strict=True):
            out = method(model, xc, yc, ctx)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()

    return run


def train_table(spec: Spec, settings, attack: str, timer: Timer) -> None:
    B = spec.train_batch
    print(f"\n[3] {spec.arch}: SmoothAdv-{attack.upper()} loader batch of B={B} vs Gaussian")
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(B, *spec.shape, generator=gen)
    y = torch.randint(0, 10, (B,), generator=gen)
    common = {"dataset": spec.dataset, "arch": spec.arch, "sigma": SIGMA, "batch_size": B}
    base_cfg = TrialConfig(method="gaussian", m_train=1, **common)
    base = train_batch_fn(spec, base_cfg, gaussian.loss, x, y)
    print(f"{'m_train':>8}{'T':>4}{'gaussian ms':>13}{'smoothadv ms':>14}{'ratio':>8}{'naive':>7}")
    for m, steps in settings:
        cfg = TrialConfig(
            method="smoothadv", m_train=m, steps=steps, epsilon=0.5, attack=attack, **common
        )
        adv = train_batch_fn(spec, cfg, smoothadv.loss, x, y)
        t = timer.run({"gaussian": base, "smoothadv": adv})
        g, s = min(t["gaussian"]), min(t["smoothadv"])
        print(f"{m:>8}{steps:>4}{1e3 * g:>13.1f}{1e3 * s:>14.1f}{s / g:>8.2f}{m * (steps + 1):>7}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    p.add_argument("--resnet110", action="store_true", help="also certify with ResNet-110")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--repeats", type=int, default=7, help="timed runs (best is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    p.add_argument("--attack", choices=("pgd", "ddn"), default="pgd")
    p.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        help="cpu: this process's CPU time (default with 1 thread), wall: elapsed time "
        "(default with more threads, whose CPU time would count spin-waiting)",
    )
    return p.parse_args(argv)


def specs_for(args: argparse.Namespace) -> tuple[list[Spec], Spec, list[tuple[int, int]]]:
    """(specs to certify, the digits spec, the (m_train, T) grid of the training table)."""
    if args.smoke:
        digits = Spec("digits_cnn", "digits", (1, 8, 8), (100, 500), 1000, 32)
        resnet = Spec("cifar_resnet20", "cifar10", (3, 32, 32), (25,), 50, 8)
        return [digits, resnet], digits, [(1, 1), (2, 2)]
    specs = [
        Spec("digits_cnn", "digits", (1, 8, 8), (100, 400, 1000), 2000, 64),
        Spec("cifar_resnet20", "cifar10", (3, 32, 32), (50, 100), 200, 16),
    ]
    if args.resnet110:
        specs.append(Spec("cifar_resnet110", "cifar10", (3, 32, 32), (50, 100), 200, 16))
    return specs, specs[0], [(1, 1), (1, 4), (2, 2), (4, 4), (8, 2)]


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = args.clock or ("cpu" if args.threads == 1 else "wall")
    timer = Timer(2 if args.smoke else args.repeats, args.warmup, CLOCKS[clock])
    specs, digits, grid = specs_for(args)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), sigma={SIGMA}, "
        f"{clock} clock, best of {timer.repeats}"
    )
    certify_table(specs, timer)
    if args.smoke:
        packing_table(digits, 4, [(20, 200)], batch_size=200, timer=timer)
    else:
        packing_table(digits, 8, [(50, 500), (10, 100)], batch_size=400, timer=timer)
    for spec in specs[:2]:
        train_table(spec, grid if spec is digits else grid[:3], args.attack, timer)


if __name__ == "__main__":
    main()
