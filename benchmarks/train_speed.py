"""One SmoothAdv-PGD training batch in each run mode against the reference formulation, and
what the inner attack computes.

Run from the repository root:

    .venv/bin/python benchmarks/train_speed.py            # ResNet-110, ~40 min on 1 core
    .venv/bin/python benchmarks/train_speed.py --smoke    # ResNet-20, batch 16, ~5 min

[1] Milliseconds per loader batch of B = 64 CIFAR-shaped inputs (random weights and data),
    m_train = 2, T = 2, ε = 0.5 past the warm-up: the reference formulation
    (`reference_loops.smoothadv_batch`, train_pgd.py's loop: 2 minibatches of 32 inputs x 2
    noise copies, PGD with frozen parameters in eval mode, then one SGD step each) against
    `trainables.train.train_epoch` on a one-batch loader (the same split and steps) with the
    model in each mode: fp32 as shipped, channels_last, compile, both, and bf16/fp16 where
    the hardware has them. "x ref" = reference ms / mode ms (best runs). A compiled mode's
    first batch compiles its graphs (train and attack: "compile s", wall clock).
[2] The inner attack, measured at the kernels: convolution backward calls of one
    `attacks.pgd` that compute a weight gradient (none: parameters are frozen, input
    gradients only), and its FLOPs per step relative to one forward pass (torch's FLOP
    counter: ~2 = forward + input gradient; a training step is ~3).

Timing: one torch thread and this process's CPU time (other processes barely disturb it),
round-robin after a warm-up batch, best of `--repeats`.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from certify_throughput import CLOCKS, Timer
from reference_loops import smoothadv_batch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from trainables import attacks, runtime
from trainables.kernel.config import TrialConfig
from trainables.train import train_epoch
from trainables.train_state import build_state

SIGMA, EPSILON, M, STEPS, EPOCH = 0.25, 0.5, 2, 2, 20
MODES = [  # (label, amp, channels_last, compile)
    ("fp32", "off", False, False),
    ("channels_last", "off", True, False),
    ("compile", "off", False, True),
    ("compile+channels_last", "off", True, True),
]


def config(args, amp: str, channels_last: bool, compile: bool) -> TrialConfig:
    return TrialConfig(
        dataset="cifar10",
        arch=args.arch,
        method="smoothadv",
        sigma=SIGMA,
        m_train=M,
        attack="pgd",
        epsilon=EPSILON,
        steps=STEPS,
        batch_size=args.batch,
        lr=0.01,
        amp=amp,
        channels_last=channels_last,
        compile=compile,
    )


def modes(device: torch.device) -> list[tuple[str, str, bool, bool]]:
    usable = [p for p in ("bf16", "fp16") if runtime.precision_problem(p, device) is None]
    return MODES + [(f"amp {p}+compile", p, False, True) for p in usable]


def ours(args, mode, device, x, y):
    """train_epoch of one loader batch for the mode's config (state built as fit builds it)."""
    _, amp, channels_last, compile = mode
    torch.manual_seed(0)
    state = build_state(config(args, amp, channels_last, compile), device)
    state.epoch = EPOCH
    if compile:
        runtime.compile_module(attacks.unwrap(state.model), device)
    batch = [(x, y, torch.arange(len(y)))]
    return lambda: train_epoch(state, batch)


def reference(args, device, x, y):
    torch.manual_seed(0)
    state = build_state(config(args, "off", False, False), device)
    model = copy.deepcopy(state.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return lambda: smoothadv_batch(model, opt, x, y, M, EPSILON, STEPS, SIGMA)


def step_table(args, timer: Timer, device: torch.device) -> float:
    """Table [1]; returns the best mode's speed-up over the reference."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(args.batch, 3, 32, 32, generator=gen).to(device)
    y = torch.randint(0, 10, (args.batch,), generator=gen).to(device)
    fns, compile_s = {"reference": reference(args, device, x, y)}, {}
    for mode in modes(device):
        fns[mode[0]] = ours(args, mode, device, x, y)
        if mode[3]:
            start = time.perf_counter()
            fns[mode[0]]()
            compile_s[mode[0]] = time.perf_counter() - start
    best = {name: min(t) for name, t in timer.run(fns).items()}
    print(f"\n[1] SmoothAdv-PGD loader batch, {args.arch}, B={args.batch}, m={M}, T={STEPS}")
    print(f"{'mode':26}{'ms/batch':>10}{'x ref':>8}{'compile s':>11}")
    for name, seconds in best.items():
        extra = f"{compile_s[name]:>11.0f}" if name in compile_s else ""
        print(f"{name:26}{1e3 * seconds:>10.0f}{best['reference'] / seconds:>8.2f}{extra}")
    return max(best["reference"] / s for name, s in best.items() if name != "reference")


class WeightGradCount(TorchDispatchMode):
    """Counts convolution backward calls, and those that compute a weight gradient."""

    def __init__(self):
        super().__init__()
        self.calls = self.weight = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution_backward.default:
            self.calls += 1
            self.weight += bool(args[-1][1])
        return func(*args, **(kwargs or {}))


def attack_table(args, device: torch.device) -> None:
    """Table [2], on the fp32 model."""
    torch.manual_seed(0)
    model = build_state(config(args, "off", False, False), device).model.train()
    b = args.batch // M
    x, y = torch.rand(b, 3, 32, 32, device=device), torch.randint(0, 10, (b,), device=device)
    noise = torch.randn(b, M, 3, 32, 32, device=device) * SIGMA
    with WeightGradCount() as kernels:
        attacks.pgd(model, x, y, noise, EPSILON, STEPS)
    flops = {}
    for name, fn in {
        "forward": lambda: model.eval()(x.repeat_interleave(M, 0)),
        "attack step": lambda: attacks.pgd(model, x, y, noise, EPSILON, 1),
        "training step": lambda: torch.nn.functional.cross_entropy(
            model.train()(x.repeat_interleave(M, 0)), y.repeat_interleave(M)
        ).backward(),
    }.items():
        with FlopCounterMode(display=False) as counter:
            fn()
        flops[name] = counter.get_total_flops()
    print(
        f"\n[2] inner attack ({b} inputs x {M} noises, T={STEPS}): {kernels.weight} of "
        f"{kernels.calls} convolution backward calls computed a weight gradient"
    )
    print(
        f"FLOPs / forward: attack step {flops['attack step'] / flops['forward']:.2f}, "
        f"training step {flops['training step'] / flops['forward']:.2f}"
    )


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="ResNet-20, batch 16")
    p.add_argument("--arch", default="cifar_resnet110")
    p.add_argument("--batch", type=int, default=64, help="loader batch B (m=2 chunks)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs (best is reported)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.smoke:
        args.arch, args.batch, args.repeats = "cifar_resnet20", 16, 2
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    clock = "cpu" if args.threads == 1 and device.type == "cpu" else "wall"
    print(
        f"torch {torch.__version__}, {device.type}, {torch.get_num_threads()} thread(s), "
        f"{clock} clock, best of {args.repeats}"
    )
    best = step_table(args, Timer(args.repeats, 1, CLOCKS[clock]), device)
    attack_table(args, device)
    print(f"\nSmoothAdv step: best mode {best:.2f}x the reference formulation (goal >= 1.2)")


if __name__ == "__main__":
    main()
