"""CERTIFY throughput in each run mode against the reference certify loop, and how far each
faster mode's certificates are from fp32's.

Run from the repository root:

    .venv/bin/python benchmarks/certify_speed.py            # ResNet-110, ~25 min on 1 core
    .venv/bin/python benchmarks/certify_speed.py --smoke    # ResNet-20, small sizes, ~3 min

[1] Samples/s of CERTIFY of one CIFAR-shaped input per call (n0 + n samples, forward batch
    `--batch`) on ResNet-110 with random weights: the reference loop (`reference_loops.certify`,
    Cohen et al.'s core.py: fp32, Python-loop batches, host-side counting) and this project's
    `Smooth.certify` on the same model in each mode: fp32 as shipped, channels_last, compile,
    both, and bf16/fp16 where the hardware has them. "× ref" is the ratio of best runs. The
    first call of a compiled mode compiles it ("compile s", wall clock, not in the rates).
    bf16 on a CPU without bf16 instructions (refused by `sweeper certify`) is measured once
    at a quarter of the sizes, to show why it is refused.
[2] Agreement on a digits model trained here for a few epochs: CERTIFY of every 3rd test
    image (n0 = 100, n = `--agree-n`) in fp32 and in each faster mode with the same seeds
    (the same noise draws; bf16 draws the same values rounded): share of identical
    predictions and mean |Δ radius|. "fp32, other seed" is fp32 against itself with other
    noise draws: the Monte-Carlo spread the differences compare with. Emulated bf16 is
    included here (a small model) even where it is refused.

Timing: one torch thread and this process's CPU time by default (other processes on a shared
machine barely disturb it), the modes run round-robin after a warm-up call, best of
`--repeats` runs.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from certify_throughput import CLOCKS, Timer
from reference_loops import certify as reference_certify

from trainables import runtime
from trainables.datasets import INFO, load_dataset
from trainables.kernel.certificates import ABSTAIN
from trainables.kernel.config import TrialConfig
from trainables.models import build_model
from trainables.smoothing import Smooth
from trainables.train import fit

SIGMA, ALPHA = 0.25, 0.001
# (label, precision, channels_last, compile)
FP32_MODES = [
    ("fp32", "fp32", False, False),
    ("channels_last", "fp32", True, False),
    ("compile", "fp32", False, True),
    ("compile+channels_last", "fp32", True, True),
]


def reduced_modes(device: torch.device) -> list[tuple[str, str, bool, bool]]:
    """bf16/fp16 modes this device has hardware for (fp16: CUDA only)."""
    names = ["bf16", "fp16"] if device.type == "cuda" else ["bf16"]
    usable = [p for p in names if runtime.precision_problem(p, device) is None]
    return [(p, p, False, False) for p in usable] + [
        (f"{p}+compile+channels_last", p, True, True) for p in usable
    ]


def prepared(model: torch.nn.Module, mode, device: torch.device) -> torch.nn.Module:
    """A copy of `model` set up as certification sets it up in `mode`."""
    _, _, channels_last, compile = mode
    twin = copy.deepcopy(model)
    runtime.prepare(twin, device, channels_last, compile)
    return twin.eval()


def throughput(args, timer: Timer, device: torch.device) -> float:
    """Table [1]; returns the best fp32 mode's ratio to the reference."""
    torch.manual_seed(0)
    info = INFO["cifar10"]
    model = build_model(args.arch, 10, info.mean, info.std).to(device).eval()
    x = torch.rand(3, 32, 32, device=device)
    n0, n, b = args.n0, args.n, args.batch
    fns = {"reference": lambda: reference_certify(model, x, n0, n, ALPHA, b, SIGMA, 10)}
    compile_s = {}
    for mode in FP32_MODES + reduced_modes(device):
        twin, gen = prepared(model, mode, device), torch.Generator(device=device).manual_seed(0)
        smooth = Smooth(twin, 10, SIGMA, mode[1])
        fns[mode[0]] = lambda s=smooth, g=gen: s.certify(x, n0, n, ALPHA, b, g)
        if mode[3]:
            start = time.perf_counter()
            fns[mode[0]]()
            compile_s[mode[0]] = time.perf_counter() - start
    times = timer.run(fns)
    rates = {name: (n0 + n) / min(t) for name, t in times.items()}
    print(
        f"\n[1] CERTIFY samples/s, {args.arch}, one 3x32x32 input per call, n0={n0} n={n} batch={b}"
    )
    print(f"{'mode':26}{'samples/s':>11}{'x ref':>8}{'compile s':>11}")
    for name, rate in rates.items():
        extra = f"{compile_s[name]:>11.0f}" if name in compile_s else ""
        print(f"{name:26}{rate:>11.1f}{rate / rates['reference']:>8.2f}{extra}")
    if device.type == "cpu" and not runtime.cpu_has_bf16():
        emulated_bf16(model, x, args, rates["reference"])
    return max(rates[m[0]] for m in FP32_MODES) / rates["reference"]


def emulated_bf16(model, x, args, reference_rate: float) -> None:
    """bf16 autocast on a CPU without bf16 instructions, one call at a quarter of the sizes."""
    n0, n, b = max(1, args.n0 // 4), max(1, args.n // 4), max(1, args.batch // 4)
    smooth = Smooth(model, 10, SIGMA, "bf16")
    start = time.process_time()
    smooth.certify(x, n0, n, ALPHA, b, torch.Generator().manual_seed(0))
    rate = (n0 + n) / (time.process_time() - start)
    print(
        f"{'bf16 (emulated; refused)':26}{rate:>11.1f}"
        f"{rate / reference_rate:>8.3f}   (n0={n0} n={n} batch={b}, one run)"
    )


def trained_digits(epochs: int) -> torch.nn.Module:
    cfg = TrialConfig(
        dataset="digits",
        method="gaussian",
        sigma=SIGMA,
        epochs=epochs,
        batch_size=64,
        lr=0.05,
        lr_step_size=max(1, epochs - 2),
        eval_subset=64,
    )
    return fit(cfg, device=torch.device("cpu")).model.eval()


def certificates(model, mode, xs, n: int, seed: int):
    """(predictions, radii) of CERTIFY of every input of xs in `mode` (as certify_points
    runs it, without its refusal of emulated bf16)."""
    smooth = Smooth(prepared(model, mode, xs.device), 10, SIGMA, mode[1])
    gen = torch.Generator(device=xs.device).manual_seed(seed)
    certs = smooth.certify_batch(xs, 100, n, ALPHA, 1000, gen)
    return [c.prediction for c in certs], torch.tensor([c.radius for c in certs])


def agreement(args) -> float:
    """Table [2]; returns the smallest share of identical predictions among the modes."""
    model = trained_digits(args.agree_epochs)
    data = load_dataset("digits", "test")
    xs = torch.stack([data[i][0] for i in range(0, len(data), 3)])
    base, radii = certificates(model, FP32_MODES[0], xs, args.agree_n, seed=1)
    print(
        f"\n[2] agreement with fp32, digits_cnn trained {args.agree_epochs} epochs, "
        f"{len(xs)} points, n0=100 n={args.agree_n}"
    )
    abstain = sum(p == ABSTAIN for p in base) / len(base)
    print(f"fp32: abstentions {abstain:.1%}, mean radius {radii.mean():.3f}")
    print(f"{'mode':26}{'same pred':>11}{'mean |dR|':>11}{'max |dR|':>10}")
    modes = [
        ("fp32, other seed", "fp32", False, False),
        *FP32_MODES[1:],
        ("bf16", "bf16", False, False),
    ]
    worst = 1.0
    for mode in modes:
        seed = 2 if mode[0] == "fp32, other seed" else 1
        preds, r = certificates(model, mode, xs, args.agree_n, seed)
        same = sum(p == q for p, q in zip(preds, base, strict=True)) / len(base)
        worst = min(worst, same) if mode[0] != "fp32, other seed" else worst
        delta = (r - radii).abs()
        print(f"{mode[0]:26}{same:>11.1%}{delta.mean():>11.4f}{delta.max():>10.4f}")
    return worst


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="ResNet-20 and small sizes")
    p.add_argument("--arch", default="cifar_resnet110")
    p.add_argument("--batch", type=int, default=200, help="noisy samples per forward pass")
    p.add_argument("--n0", type=int, default=100)
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--repeats", type=int, default=3, help="timed runs (best is reported)")
    p.add_argument("--agree-n", type=int, default=2000)
    p.add_argument("--agree-epochs", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.smoke:
        args.arch, args.batch, args.n0, args.n, args.repeats = "cifar_resnet20", 50, 20, 80, 2
        args.agree_n, args.agree_epochs = 300, 3
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    clock = "cpu" if args.threads == 1 and device.type == "cpu" else "wall"
    timer = Timer(args.repeats, 1, CLOCKS[clock])
    print(
        f"torch {torch.__version__}, {device.type}, {torch.get_num_threads()} thread(s), "
        f"{clock} clock, best of {args.repeats}; bf16 hardware: {runtime.cpu_has_bf16()}"
    )
    best = throughput(args, timer, device)
    worst = agreement(args)
    print(
        f"\ncertify: best fp32 mode {best:.2f}x the reference loop (goal >= 1.3); "
        f"identical predictions >= {worst:.1%} in every mode (goal >= 99%)"
    )


if __name__ == "__main__":
    main()
