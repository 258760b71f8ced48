"""Forward passes of the `envelope` certification strategy against `full`, on simulated draws
(issue 28, "How it is measured").

    .venv/bin/python benchmarks/envelope_certify.py --truth /tmp/smoothadv-truth.parquet --seeds 20
    .venv/bin/python benchmarks/envelope_certify.py --smoke     # a tiny synthetic truth, seconds

FILE has one row per model and test point, columns `model, sigma, idx, label, top, p_top`: the
smoothed classifier's top class under noise and its probability (every model on the same
points; build one with `benchmarks/envelope_truth.py`). Per seed, CERTIFY's counts are drawn
from it with numpy's binomial:
- selection as CERTIFY does it: n0 draws, the votes for `top` ~ Bin(n0, p_top), the rest go to
  one runner-up class (the label when `top` is not the label, else another class: the worst
  case for selection); ĉ is the class with more votes, a tie going to the smaller class id
  (numpy's argmax of the counts);
- the n estimation votes for ĉ, nA ~ Bin(n, p(ĉ)), p(ĉ) = p_top or 1 − p_top, drawn once per
  model and point and used by both protocols (a point the strategy skips never reads it);
- the pilot stages' votes, fresh: Bin(stage draws, p(ĉ)).
`full` certifies every model on every point (n0 + n forward passes per point). `envelope` runs
`sweeper.run.envelope_planner.decide` on a `Ledger` until it returns nothing, recording each
step's rows as the certify stage will; its forward passes are n0 per point, the pilot draws it
asked for and n per point it certified fully. The envelope (best count per grid radius) and the
winners (the house tie rule: count, then count at the first radius, then the first model in
the file) of both are compared at every radius. The last line is the issue's.

`--clones K` adds near ties (issue 39 §5): K replicate-like copies of the models that win the
envelope at some radius (by their expected counts), spread evenly over them, each point's
p_top moved by N(0, 0.002) (a retrained copy of a model: the same kind of classifier, a little
different per point; seeded, the same for every seed of the draws). Such copies are hard to
prune: their bounds sit on the envelope.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sweeper.run import envelope_bounds as eb
from sweeper.run.envelope_ledger import FullRow, Ledger, PilotRow, Settings
from sweeper.run.envelope_planner import COMPLETE, FULL, PROBE, SELECT, Step, decide

RADII = tuple(round(0.25 * t, 10) for t in range(10))  # 0:2.25:0.25
COLUMNS = ["model", "sigma", "idx", "label", "top", "p_top"]


@dataclass
class Truth:
    models: list[str]
    sigma: np.ndarray  # (M,)
    idx: np.ndarray  # (P,)
    label: np.ndarray  # (M, P)
    top: np.ndarray  # (M, P)
    p_top: np.ndarray  # (M, P)


@dataclass
class Draws:
    cAHat: np.ndarray  # (M, P)
    nA: np.ndarray  # (M, P)
    pilot: np.ndarray  # (S, M, P): each stage's new votes


def truth_from_frame(frame: pd.DataFrame) -> Truth:
    """The truth as arrays; models certified on fewer points than the others are left out
    (models compare by counts on the same points), and said so on stderr."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise SystemExit(f"envelope_certify.py: the truth lacks columns {missing}")
    if frame.duplicated(["model", "idx"]).any():
        raise SystemExit("envelope_certify.py: a model has two rows for one test point")
    idx = np.sort(frame["idx"].unique())
    sizes = frame.groupby("model", sort=False)["idx"].count()
    models = [m for m, size in sizes.items() if size == len(idx)]
    if len(models) < len(sizes):
        print(
            f"left out {len(sizes) - len(models)} models certified on fewer than all {len(idx)} points",
            file=sys.stderr,
        )
    if not models:
        raise SystemExit("envelope_certify.py: no model is certified on every test point")
    table = frame.set_index(["model", "idx"]).sort_index()
    grid = table.loc[pd.MultiIndex.from_product([models, idx])]
    shape = (len(models), len(idx))
    sigma = grid["sigma"].to_numpy(float).reshape(shape)
    return Truth(
        models,
        sigma[:, 0],
        idx.astype(np.int64),
        grid["label"].to_numpy(np.int64).reshape(shape),
        grid["top"].to_numpy(np.int64).reshape(shape),
        np.clip(grid["p_top"].to_numpy(float).reshape(shape), 0.0, 1.0),
    )


def smoke_truth(models: int = 16, points: int = 50, seed: int = 0) -> Truth:
    """A tiny synthetic truth: models of varied quality and σ, p_top from a Beta per model."""
    rng = np.random.default_rng(seed)
    sigma = np.array([0.12, 0.25, 0.5, 1.0])[np.arange(models) % 4]
    quality = rng.uniform(2.0, 12.0, size=models)
    label = np.tile(rng.integers(0, 10, size=points), (models, 1))
    p_top = rng.beta(quality[:, None], 1.0, size=(models, points))
    wrong = rng.random((models, points)) < 0.2
    top = np.where(wrong, (label + 1) % 10, label)
    names = [f"smoke-{j:03d}-sigma-{s:g}" for j, s in enumerate(sigma)]
    return Truth(names, sigma, np.arange(points, dtype=np.int64), label, top, p_top)


CLONE_SPREAD = 0.002  # sd of a clone's per-point p_top around its original's


def with_clones(truth: Truth, s: Settings, k: int, seed: int = 0) -> Truth:
    """`truth` and `k` near-tied copies of its envelope's winners (module docstring)."""
    if k <= 0:
        return truth
    expected = np.rint(truth.p_top * s.n).astype(np.int64)
    best = winners(curves(truth, s, truth.top, expected), np.ones(len(truth.models), bool))
    originals = sorted({int(w) for w in best if w >= 0})
    rng = np.random.default_rng(seed)
    pick = [originals[c % len(originals)] for c in range(k)]
    noise = rng.normal(0.0, CLONE_SPREAD, size=(k, truth.p_top.shape[1]))
    return Truth(
        [*truth.models, *(f"clone-{c}-of-{truth.models[w]}" for c, w in enumerate(pick))],
        np.concatenate([truth.sigma, truth.sigma[pick]]),
        truth.idx,
        np.concatenate([truth.label, truth.label[pick]]),
        np.concatenate([truth.top, truth.top[pick]]),
        np.concatenate([truth.p_top, np.clip(truth.p_top[pick] + noise, 0.0, 1.0)]),
    )


def draw(truth: Truth, s: Settings, rng: np.random.Generator) -> Draws:
    runner = np.where(truth.top != truth.label, truth.label, truth.top + 1)
    votes_top = rng.binomial(s.n0, truth.p_top)
    votes_runner = s.n0 - votes_top
    tie_to_top = truth.top < runner
    picks_top = (votes_top > votes_runner) | ((votes_top == votes_runner) & tie_to_top)
    cAHat = np.where(picks_top, truth.top, runner)
    p_hat = np.where(picks_top, truth.p_top, 1.0 - truth.p_top)
    nA = rng.binomial(s.n, p_hat)
    sizes = np.diff((0, *s.pilots))
    pilot = np.stack([rng.binomial(int(size), p_hat) for size in sizes])
    return Draws(cAHat, nA, pilot)


def curves(truth: Truth, s: Settings, cAHat: np.ndarray, nA: np.ndarray) -> np.ndarray:
    """Points per grid radius of each model: ĉ is the label and nA certifies the radius."""
    out = np.zeros((len(truth.models), len(s.radii)), np.int64)
    for j, sigma in enumerate(truth.sigma):
        lv = eb.levels(nA[j], eb.certified_counts(float(sigma), s.n, s.alpha, s.radii))
        out[j] = eb.curve(np.where(cAHat[j] == truth.label[j], lv, 0), len(s.radii))
    return out


def winners(table: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Per radius the winning row of `table` among `present` (count, then the count at the first
    radius, then the smaller row), −1 where none is present or the best count is 0 (no win)."""
    out = np.full(table.shape[1], -1)
    rows = np.flatnonzero(present)
    for t in range(table.shape[1]):
        if rows.size:
            order = np.lexsort((rows, -table[rows, 0], -table[rows, t]))
            out[t] = rows[order[0]] if table[rows[order[0]], t] > 0 else -1
    return out


def run_step(ledger: Ledger, step: Step, truth: Truth, draws: Draws, pos: dict) -> int:
    """Record what the step would compute from the simulated draws; its forward passes."""
    s, j = ledger.settings, truth.models.index(step.model)
    at = np.array([pos[i] for i in step.idx], np.int64)
    if step.kind in (PROBE, FULL, COMPLETE):
        rows = [FullRow(step.model, int(truth.idx[p]), int(draws.nA[j, p])) for p in at]
        if step.kind == PROBE:
            ledger.record_probe(step.model, rows)
        elif step.kind == COMPLETE:
            ledger.record_complete(step.model, rows)
        else:
            ledger.record_full(step.model, rows, step.from_level)
        return len(at) * s.n
    votes = draws.pilot[step.stage - 1, j]
    drawn = np.zeros(len(truth.idx), bool)
    drawn[at] = True
    if step.kind == SELECT:
        drawn &= draws.cAHat[j] == truth.label[j]  # issue 28 item 3: no estimation draws
    size = s.pilots[step.stage - 1] - (s.pilots[step.stage - 2] if step.stage > 1 else 0)
    rows = [
        PilotRow(step.model, step.stage, int(i), int(c), size * bool(d), int(v) * bool(d))
        for i, c, d, v in zip(truth.idx, draws.cAHat[j], drawn, votes, strict=True)
        if d or step.kind == SELECT
    ]
    ledger.record_pilot(step.model, step.stage, rows)
    return int(drawn.sum()) * size + (len(at) * s.n0 if step.kind == SELECT else 0)


def run_strategy(truth: Truth, draws: Draws, s: Settings) -> tuple[Ledger, int]:
    ledger = Ledger(s)
    for j, name in enumerate(truth.models):
        ledger.arrive(name, j + 1, float(truth.sigma[j]), truth.idx, truth.label[j])
    pos = {int(i): p for p, i in enumerate(truth.idx)}
    passes = 0
    while steps := decide(ledger):
        passes += sum(run_step(ledger, step, truth, draws, pos) for step in steps)
    return ledger, passes


def one_seed(truth: Truth, s: Settings, seed: int) -> dict:
    draws = draw(truth, s, np.random.default_rng(seed))
    M, P = truth.label.shape
    full = curves(truth, s, draws.cAHat, draws.nA)
    ledger, passes = run_strategy(truth, draws, s)
    certified = np.array([ledger.models[m].certified is not None for m in truth.models])
    mine = np.array(
        [
            ledger.models[m].certified if c else np.zeros(len(s.radii), np.int64)
            for m, c in zip(truth.models, certified, strict=True)
        ]
    )
    env_full, env_mine = full.max(axis=0), mine[certified].max(axis=0)
    win_full, win_mine = winners(full, np.ones(M, bool)), winners(mine, certified)
    return {
        "full": M * P * (s.n0 + s.n),
        "envelope": passes,
        "certified": int(certified.sum()),
        "equal": int((env_full == env_mine).sum()),
        "winners": int((win_full == win_mine).sum()),
        "worst": int((env_full - env_mine).max()),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--truth", help="Parquet file: model, sigma, idx, label, top, p_top")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a tiny synthetic truth, 2 seeds")
    ap.add_argument("--n0", type=int, default=100)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--alpha", type=float, default=0.001)
    ap.add_argument("--delta", type=float, default=0.01)
    ap.add_argument("--pilots", help="cumulative pilot draws per stage (default: the strategy's)")
    ap.add_argument("--clones", type=int, default=0, help="near-tied copies of the winners")
    ap.add_argument(
        "--open-ended",
        action="store_true",
        help="δ split by arrival only (models not known up front), not over the M models",
    )
    args = ap.parse_args(argv)
    if not args.smoke and not args.truth:
        ap.error("give --truth FILE.parquet or --smoke")
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    truth = smoke_truth() if args.smoke else truth_from_frame(pd.read_parquet(args.truth))
    seeds = 2 if args.smoke else args.seeds
    s = Settings(args.n0, args.n, args.alpha, RADII, args.delta)
    if args.pilots:
        s = Settings(
            args.n0,
            args.n,
            args.alpha,
            RADII,
            args.delta,
            tuple(int(x) for x in args.pilots.split(",")),
        )
    truth = with_clones(truth, s, args.clones)
    if not args.open_ended:  # as `certify` and `run grid` do: every model known up front
        s = replace(s, declared=len(truth.models))
    results = []
    for seed in range(seeds):
        r = one_seed(truth, s, seed)
        results.append(r)
        print(
            f"seed {seed}: envelope {r['envelope']:,} forward passes ({r['full'] / r['envelope']:.1f}× fewer), "
            f"{r['certified']} models certified fully, envelope equal at {r['equal']}/{len(RADII)} radii "
            f"(largest shortfall {r['worst']} points), winners equal at {r['winners']}/{len(RADII)}",
            flush=True,
        )
    M, P = truth.label.shape
    F1 = sum(r["full"] for r in results) // seeds
    F2 = sum(r["envelope"] for r in results) // seeds
    T = len(RADII) * seeds
    A, C = sum(r["equal"] for r in results), sum(r["winners"] for r in results)
    all_equal = sum(r["equal"] == len(RADII) for r in results)
    print(
        f"seeds with the envelope equal at every radius: {all_equal}/{seeds}; forward passes are per seed"
    )
    print(
        f"envelope certification: {M} models, {P} points; forward passes full {F1:,}, envelope {F2:,} "
        f"({F1 / F2:.1f}× fewer); envelope equal at {A}/{T} radii, winners equal at {C}/{T}, over {seeds} seeds"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
