"""Certification throughput on a CUDA GPU: the figures a sweep's cost estimate needs.

Run from the repository root on a machine with a GPU (without one it prints one line and
exits 0):

    .venv/bin/python benchmarks/gpu.py                       # ResNet-110, ~10 min
    .venv/bin/python benchmarks/gpu.py --smoke               # a minute
    .venv/bin/python benchmarks/gpu.py --arch cifar_resnet20 --batch-sizes 1000,4000 \
        --precisions fp32,bf16 --concurrency 1,2,4,8 --seconds 20

[1] Base-classifier samples/s of `Smooth.sample_counts` (CERTIFY's sampling: noise drawn on
    the GPU, votes counted there) on one CIFAR-shaped input, for every precision x
    channels_last x compile x forward batch size, with the share of the GPU's peak FLOP/s
    that is: 2 x multiply-accumulates per sample (`sweeper.plan.throughput.MACS`) x samples/s,
    against the peak of a large matmul measured here in the same precision (fp32: with TF32
    where cuDNN's convolutions use it, PyTorch's default on Ampere and newer) and, for GPUs
    in the table below, the datasheet's dense peak (TF32 likewise).
[2] Fractional packing: k certification processes on this one GPU at once (the space's
    `gpu: 1/k`), each running the best setting of [1] for `--seconds`; aggregate samples/s
    and its ratio to one process.
The last line sums up what the dry-run cost estimate can use (samples/s per GPU).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

PRECISIONS = ("fp32", "bf16", "fp16")
# Dense peak TFLOP/s from NVIDIA's datasheets: (fp32, TF32 tensor or None, fp16/bf16 tensor).
# fp32 convolutions use TF32 where the GPU has it (cuDNN's default in PyTorch).
DATASHEET = {
    "H100 SXM": (67.0, 495.0, 989.0),
    "H100 PCIe": (51.0, 378.0, 756.0),
    "A100": (19.5, 156.0, 312.0),
    "A10": (31.2, 62.5, 125.0),
    "L4": (30.3, 60.0, 121.0),
    "V100": (15.7, None, 125.0),
    "T4": (8.1, None, 65.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    def ints(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected integers like 1,2,4 (got {text!r})"
            ) from None
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"expected integers >= 1 (got {text!r})")
        return values

    def precisions(text: str) -> list[str]:
        bad = [p for p in text.split(",") if p not in PRECISIONS]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown precision {bad[0]!r} (valid: fp32, bf16, fp16)"
            )
        return text.split(",")

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="ResNet-20, one batch size, 3 s runs")
    p.add_argument("--arch", default="cifar_resnet110", help="a CIFAR-shaped architecture")
    p.add_argument("--batch-sizes", type=ints, default=[400, 1000, 4000])
    p.add_argument("--precisions", type=precisions, default=list(PRECISIONS))
    p.add_argument("--concurrency", type=ints, default=[1, 2, 4], help="processes on one GPU")
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per setting")
    args = p.parse_args(argv)
    if args.smoke:
        args.arch, args.batch_sizes, args.seconds = "cifar_resnet20", [1000], 3.0
    return args


def make_sampler(arch: str, mode: tuple, batch: int):
    """A function running CERTIFY's sampling for `batch` samples per forward, in `mode`
    (precision, channels_last, compile), on cuda; returns samples drawn per call."""
    from trainables import runtime
    from trainables.datasets import INFO
    from trainables.models import build_model
    from trainables.smoothing import Smooth

    device = torch.device("cuda")
    precision, channels_last, compile = mode
    info = INFO["cifar10"]
    torch.manual_seed(0)
    model = build_model(arch, 10, info.mean, info.std).to(device).eval()
    runtime.prepare(model, device, channels_last, compile)
    smooth = Smooth(model, 10, 0.25, precision)
    x, gen = torch.rand(1, 3, 32, 32, device=device), torch.Generator(device=device).manual_seed(0)
    num = 10 * batch

    def run() -> int:
        smooth.sample_counts(x, num, batch, gen).sum().item()  # .item(): waits for the GPU
        return num

    return run


def rate(run, seconds: float) -> float:
    """Samples/s of `run` over at least `seconds` of wall time, after a warm-up call."""
    run()
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        samples += run()
    return samples / (time.perf_counter() - start)


def matmul_peak(precision: str) -> float:
    """FLOP/s of a large matmul in `precision` on this GPU (its practical peak); fp32 with
    TF32 allowed exactly where cuDNN's convolutions allow it."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32
    try:
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        a @ a
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        return 10 * 2 * 8192**3 / (time.perf_counter() - start)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def datasheet_peak(precision: str) -> float | None:
    name = torch.cuda.get_device_name()
    for key, (fp32, tf32, half) in DATASHEET.items():
        if all(part in name for part in key.split()):
            if precision != "fp32":
                return 1e12 * half
            return 1e12 * (tf32 if tf32 and torch.backends.cudnn.allow_tf32 else fp32)
    return None


def settings_table(args) -> tuple[tuple, int, float]:
    """Table [1]; returns the fastest (mode, batch) and its samples/s."""
    from sweeper.plan.throughput import MACS
    from trainables import runtime

    flops = 2 * MACS[args.arch]
    usable = [
        p for p in args.precisions if runtime.precision_problem(p, torch.device("cuda")) is None
    ]
    print(
        f"\n[1] {args.arch} sampling on {torch.cuda.get_device_name()}, {args.seconds:g} s per setting"
    )
    print(
        f"{'precision':>9}{'chan_last':>10}{'compile':>9}{'batch':>7}{'samples/s':>12}"
        f"{'TFLOP/s':>9}{'% matmul':>10}{'% sheet':>9}"
    )
    best = ((), 0, 0.0)
    for precision in usable:
        peak, sheet = matmul_peak(precision), datasheet_peak(precision)
        for cl, comp, batch in itertools.product((False, True), (False, True), args.batch_sizes):
            r = rate(make_sampler(args.arch, (precision, cl, comp), batch), args.seconds)
            sheet_share = f"{100 * r * flops / sheet:>8.1f}%" if sheet else f"{'-':>9}"
            print(
                f"{precision:>9}{cl!s:>10}{comp!s:>9}{batch:>7}{r:>12.0f}{r * flops / 1e12:>9.2f}"
                f"{100 * r * flops / peak:>9.1f}%{sheet_share}"
            )
            if r > best[2]:
                best = ((precision, cl, comp), batch, r)
    return best


def _packed_worker(arch, mode, batch, seconds, start, queue) -> None:
    run = make_sampler(arch, mode, batch)
    run()  # warm-up (and compilation) before the common start
    start.wait()
    queue.put(rate(run, seconds))


def packing_table(args, mode: tuple, batch: int) -> dict[int, float]:
    """Table [2]: aggregate samples/s of k concurrent processes on this GPU."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    print(f"\n[2] k certification processes on one GPU, each {mode} batch {batch}")
    print(f"{'k':>3}{'samples/s':>12}{'x one':>8}")
    total: dict[int, float] = {}
    for k in args.concurrency:
        start, queue = ctx.Barrier(k), ctx.Queue()
        procs = [
            ctx.Process(
                target=_packed_worker, args=(args.arch, mode, batch, args.seconds, start, queue)
            )
            for _ in range(k)
        ]
        for proc in procs:
            proc.start()
        total[k] = sum(queue.get(timeout=900 + args.seconds) for _ in procs)
        for proc in procs:
            proc.join()
        print(f"{k:>3}{total[k]:>12.0f}{total[k] / total[min(total)]:>8.2f}")
    return total


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu.py: no CUDA device here; nothing measured (run it on a machine with a GPU)")
        return 0
    mode, batch, best = settings_table(args)
    packed = packing_table(args, mode, batch)
    k = max(packed, key=packed.get)
    print(
        f"\ncost figures: {args.arch} CERTIFY sampling {best:.0f} samples/s per GPU "
        f"({mode[0]}, channels_last={mode[1]}, compile={mode[2]}, batch {batch}); packed "
        f"{k} per GPU: {packed[k]:.0f} samples/s per GPU"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
