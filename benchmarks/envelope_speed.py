"""Speed of `sweeper.results.envelope.envelope` on results tables of a real sweep's size and larger.

Run from the repository root (a benchmark, not a test):

    .venv/bin/python benchmarks/envelope_speed.py           # everything, ~3-4 min on 2 cores
    .venv/bin/python benchmarks/envelope_speed.py --smoke   # small tables, a few seconds
    .venv/bin/python benchmarks/envelope_speed.py --sizes 644x500 --files none   # ~10 s

1. Synthetic results tables of M models x P test points: 644x500 is the CIFAR-10 paper
   sweep (640 SmoothAdv trials + 4 Gaussian baselines, 500 certified points each), 20000x500
   is 10M rows. Columns and dtypes are what `load_results` returns: an Arrow table with the
   `sweeper.results.certify_rows.SCHEMA` types (identity columns of the cifar10 grid, CERTIFY columns
   simulated from vote counts) converted with `to_pandas()`, without writing Parquet.
   `envelope(frame, radii)` for radii 0:2.25:0.25, without and with `--by sigma`, is timed
   against a naive pandas implementation in the same process on the same frame: per radius,
   a groupby-mean of the boolean `correct & (radius >= r)` per model and a sort for the
   winner (accuracy, then clean accuracy, then trial_id). Both must give the same winners
   and accuracies, or the script exits with status 1.
2. `load_results` of an experiment of real Parquet shard files (`shard_table` + `write_table`
   of digits `TrialConfig`s with varied sigma/epsilon), 644 models x 10 shards of 50 points
   by default (writing the 6,440 files takes ~25-40 s), then the envelope of what it read.

Timings are the best of `--repeats` runs after one warm-up run (exceptions are printed).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
from scipy.special import ndtri

from sweeper.results.certify_rows import MODEL_KEY, SCHEMA, load_results, shard_table
from sweeper.results.envelope import envelope, parse_radii
from sweeper.results.stage_table import write_table
from sweeper.results.storage import Experiment
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import CertifySpec

RADII = "0:2.25:0.25"
BIG = 2_000_000  # rows above which the naive baseline is timed once
N, N0, ALPHA = 100_000, 100, 0.001
CERT_ID = CertifySpec(n0=N0, n=N, alpha=ALPHA, skip=20, max_points=500).cert_id
GRID: dict[str, list] = {
    "sigma": [0.12, 0.25, 0.5, 1.0],
    "epsilon": [0.25, 0.5, 1.0, 2.0],
    "steps": [2, 4, 6, 8, 10],
    "m_train": [1, 2, 4, 8],
    "attack": ["pgd", "ddn"],
}


# ------------------------------------------------------------------ synthetic tables
def grid_configs(count: int, dataset: str = "cifar10", **fixed) -> list[TrialConfig]:
    """The cifar10 grid (640 SmoothAdv + 4 Gaussian), repeated with new seeds up to `count`."""
    smoothadv = [dict(zip(GRID, v, strict=True)) for v in itertools.product(*GRID.values())]
    gaussian = [{"method": "gaussian", "sigma": s} for s in GRID["sigma"]]
    params = smoothadv + gaussian
    return [
        TrialConfig(dataset=dataset, seed=i // len(params), **params[i % len(params)], **fixed)
        for i in range(count)
    ]


def grid_identities(count: int) -> list[dict]:
    """Identities (with "trial_id") of `grid_configs(count)`, hashed as `TrialConfig.trial_id`
    does: one TrialConfig per grid point, not per seed (20,000 TrialConfigs take ~15 s)."""
    size = math.prod(len(v) for v in GRID.values()) + len(GRID["sigma"])  # 640 + 4
    base = [c.identity() for c in grid_configs(size)]
    out = []
    for i in range(count):
        ident = {**base[i % len(base)], "seed": i // len(base)}
        blob = json.dumps(ident, sort_keys=True, separators=(",", ":"))
        # the hash takes amp as it was hashed when a bool; the results column is its name
        amp = {False: "off", True: "fp16"}.get(ident.get("amp"), ident.get("amp"))
        trial_id = hashlib.sha256(blob.encode()).hexdigest()[:12]
        out.append({**ident, "amp": amp, "trial_id": trial_id})
    return out


def certify_columns(sigma: np.ndarray, quality: np.ndarray, points: int, rng) -> dict:
    """CERTIFY-like per-point columns for models of noise `sigma` and skill `quality`."""
    models, rows = len(sigma), len(sigma) * points
    sigma, quality = np.repeat(sigma, points), np.repeat(quality, points)
    idx = np.tile(np.arange(points) * 20, models)
    label = idx % 10
    p_a = rng.beta(1 + 6 * quality, 1.5)
    count = rng.binomial(N, p_a)
    p_hat = count / N
    # Normal approximation of the Clopper-Pearson bound, capped at its value for count = N.
    p_lower = np.clip(p_hat - 3.09 * np.sqrt(p_hat * (1 - p_hat) / N), 0, ALPHA ** (1 / N))
    abstain = p_lower < 0.5
    right = rng.random(rows) < 0.5 + quality / 2
    predict = np.where(abstain, -1, np.where(right, label, (label + 1) % 10))
    radius = np.where(abstain, 0.0, sigma * ndtri(np.maximum(p_lower, 0.5)))
    return {
        "sigma_cert": sigma,
        "idx": idx,
        "label": label,
        "predict": predict,
        "count": count,
        "p_lower": p_lower,
        "radius": radius,
        "correct": predict == label,
        "time_s": rng.exponential(20.0, rows),
    }


def synthetic_table(models: int, points: int, seed: int = 0) -> pa.Table:
    """A results table of `models` x `points` rows with the `SCHEMA` types."""
    rng = np.random.default_rng(seed)
    ids = grid_identities(models)
    rows = np.repeat(np.arange(models), points)
    sigma = np.array([d["sigma"] for d in ids])
    data = certify_columns(sigma, rng.uniform(0.2, 0.9, models), points, rng)
    data.update({"n0": np.full(len(rows), N0), "n": np.full(len(rows), N)})
    data["alpha"] = np.full(len(rows), ALPHA)
    keys = {k: [d.get(k) for d in ids] for k in set().union(*ids)}  # gaussian: no attack keys
    keys.update({"experiment": ["cifar10"] * models, "cert_id": [CERT_ID] * models})
    take = pa.array(rows)
    arrays = [
        pa.array(keys[f.name], f.type).take(take)
        if f.name in keys
        else pa.array(data.pop(f.name), f.type)
        if f.name in data
        else pa.nulls(len(rows), f.type)  # hyperparameters no trial of the grid uses
        for f in SCHEMA
    ]
    return pa.table(arrays, schema=SCHEMA)


def synthetic_frame(models: int, points: int, seed: int = 0) -> pd.DataFrame:
    """The table as `load_results` returns it (`to_pandas()`); Arrow memory is released
    column by column while converting."""
    return synthetic_table(models, points, seed).to_pandas(self_destruct=True, split_blocks=True)


# ------------------------------------------------------------------ the naive envelope
def naive_envelope(frame: pd.DataFrame, radii: list[float], by: str | None) -> pd.DataFrame:
    """Plain pandas: per radius, a groupby-mean of `correct & radius >= r` and a sort."""
    keys = [frame[k] for k in ([by, *MODEL_KEY] if by else MODEL_KEY)]
    clean = frame["correct"].groupby(keys, dropna=False).mean()
    rows = []
    for r in radii:
        acc = (frame["correct"] & (frame["radius"] >= r)).groupby(keys, dropna=False).mean()
        ranked = pd.DataFrame({"acc": acc, "clean": clean}).reset_index()
        ranked = ranked.sort_values(
            ["acc", "clean", *MODEL_KEY], ascending=[False, False, True, True], kind="stable"
        )
        best = ranked.drop_duplicates(by) if by else ranked.head(1)
        names = [by, *MODEL_KEY] if by else MODEL_KEY
        rows.append(best[names].assign(radius=r, certified_accuracy=best["acc"].to_numpy()))
    return pd.concat(rows, ignore_index=True)


def same_winners(fast: pd.DataFrame, naive: pd.DataFrame, by: str | None) -> bool:
    """Same model and accuracy per (group, radius)?"""
    order = [by, "radius"] if by else ["radius"]
    cols = [*order, *MODEL_KEY, "certified_accuracy"]
    a = fast[cols].sort_values(order, kind="stable").reset_index(drop=True)
    b = naive[cols].sort_values(order, kind="stable").reset_index(drop=True)
    ids_equal = all(a[c].astype(str).equals(b[c].astype(str)) for c in [*order, *MODEL_KEY])
    acc_equal = np.array_equal(a["certified_accuracy"], b["certified_accuracy"])
    return len(a) == len(b) and ids_equal and acc_equal


# ------------------------------------------------------------------ timing
def best_of(fn: Callable[[], object], repeats: int, warm_up: bool = True) -> tuple[float, object]:
    """Best wall time of `repeats` calls (after one warm-up call), and the last result."""
    result = fn() if warm_up else None
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def naive_runs(rows: int, repeats: int) -> tuple[int, bool]:
    """The naive baseline runs once, without warm-up, on tables over BIG rows (~25 s each)."""
    return (1, False) if rows > BIG else (repeats, True)


def envelope_rows(frame: pd.DataFrame, label: str, models: int, repeats: int) -> list[dict]:
    """`envelope` versus the naive implementation, without and with --by sigma."""
    radii = parse_radii(RADII)
    rows = []
    for by in (None, "sigma"):
        fast_s, fast = best_of(lambda b=by: envelope(frame, radii, b), repeats)
        naive_s, naive = best_of(
            lambda b=by: naive_envelope(frame, radii, b), *naive_runs(len(frame), repeats)
        )
        rows.append(
            {
                "table": label,
                "rows": len(frame),
                "models": models,
                "by": by or "-",
                "envelope s": fast_s,
                "rows/s": len(frame) / fast_s,
                "naive s": naive_s,
                "naive/envelope": naive_s / fast_s,
                "same winners": same_winners(fast, naive, by),
            }
        )
        print(f"  {label} by={by or '-'}: {fast_s:.3f} s", file=sys.stderr, flush=True)
    return rows


# ------------------------------------------------------------------ Parquet shards
def write_experiment(root: str, models: int, shards: int, points: int) -> Experiment:
    """`models` digits trials x `shards` real shard files of `points` rows each."""
    exp = Experiment(root, "digits-bench")
    rng = np.random.default_rng(1)
    configs = grid_configs(models, dataset="digits", epochs=2)
    quality = rng.uniform(0.2, 0.9, models)
    metadata = {"certify_backend": "benchmark", "normalization": "none", "shard": "synthetic"}
    for cfg, q in zip(configs, quality, strict=True):
        for s in range(shards):
            cols = certify_columns(np.array([cfg.sigma]), np.array([q]), points, rng)
            cols["idx"] = cols["idx"] + s * points * 20
            constants = {"sigma_cert": cfg.sigma, "n0": N0, "n": N, "alpha": ALPHA}
            cols = {k: v.tolist() for k, v in cols.items() if k not in constants}
            table = shard_table(cfg, exp.name, CERT_ID, constants, cols, metadata)
            write_table(table, exp.shard_path(cfg.trial_id, CERT_ID, s, shards))
    return exp


def load_rows(models: int, shards: int, points: int, repeats: int) -> tuple[list[dict], dict]:
    """Write the shard files, time `load_results`, then `envelope` on what it returned."""
    with tempfile.TemporaryDirectory(prefix="envelope-bench-") as root:
        start = time.perf_counter()
        exp = write_experiment(root, models, shards, points)
        write_s = time.perf_counter() - start
        # The files were just written (page cache warm): no separate warm-up run.
        load_s, results = best_of(lambda: load_results(exp), repeats, warm_up=False)
    rows = len(results.frame)
    load = {
        "experiment": f"{models}x{shards} files",
        "files": len(results.files),
        "rows": rows,
        "write s": write_s,
        "load_results s": load_s,
        "rows/s": rows / load_s,
        "files/s": len(results.files) / load_s,
    }
    return envelope_rows(results.frame, f"{models}x{shards} files", models, repeats), load


# ------------------------------------------------------------------ main
def parse_size(text: str) -> tuple[int, int]:
    a, _, b = text.lower().partition("x")
    return int(a), int(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="644x500,20000x500", help="MODELSxPOINTS,...")
    parser.add_argument("--files", default="644x10", help="MODELSxSHARDS of Parquet files, or none")
    parser.add_argument("--points-per-shard", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="small tables, one repeat")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.files, args.repeats, args.points_per_shard = "64x100", "16x4", 1, 20
    rows, loads = [], []
    for models, points in map(parse_size, args.sizes.split(",")):
        start = time.perf_counter()
        frame = synthetic_frame(models, points)
        print(f"  built {models}x{points} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        rows += envelope_rows(frame, f"{models}x{points}", models, args.repeats)
        del frame
    if args.files != "none":
        models, shards = parse_size(args.files)
        more, load = load_rows(models, shards, args.points_per_shard, args.repeats)
        rows, loads = rows + more, [load]
    return report(pd.DataFrame(rows), pd.DataFrame(loads), args.repeats)


def report(rows: pd.DataFrame, loads: pd.DataFrame, repeats: int) -> int:
    """Print the tables; exit status 1 if a winner differs from the naive computation."""
    print(
        f"envelope(frame, radii={RADII}) vs naive pandas: best of {repeats} after a warm-up "
        f"(naive on tables over {BIG:,} rows: one run)"
    )
    print(rows.to_string(index=False, formatters=FORMATS))
    if not loads.empty:
        print(f"\nload_results of real Parquet shard files, best of {repeats} (after writing them)")
        print(loads.to_string(index=False, formatters=FORMATS))
    paper = rows[rows["table"] == "644x500"]
    if not paper.empty:
        worst = paper["envelope s"].max()
        verdict = "met" if worst < 1 else "MISSED"
        print(f"\ntarget: envelope < 1 s on 644x500: {verdict} (slowest {worst:.3f} s)")
    if not rows["same winners"].all():
        print("ERROR: envelope and the naive computation disagree", file=sys.stderr)
        return 1
    return 0


FORMATS = {
    "rows": "{:,}".format,
    "envelope s": "{:.3f}".format,
    "naive s": "{:.3f}".format,
    "rows/s": "{:,.0f}".format,
    "naive/envelope": "{:.1f}x".format,
    "write s": "{:.1f}".format,
    "load_results s": "{:.3f}".format,
    "files/s": "{:,.0f}".format,
}


if __name__ == "__main__":
    sys.exit(main())
