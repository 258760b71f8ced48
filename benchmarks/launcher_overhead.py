"""Per-trial overhead of Ray Tune on a local Ray, with and without actor reuse.

Run from the repository root (a benchmark, not a test; it starts its own local Ray):

    .venv/bin/python benchmarks/launcher_overhead.py            # 64 trials, ~1-2.5 min
    .venv/bin/python benchmarks/launcher_overhead.py --smoke    # 8 trials, ~30 s
    .venv/bin/python benchmarks/launcher_overhead.py --trials 32 --repeats 3

Nearly all of the time is the reuse_actors=False fit: every trial starts a new worker
process that imports Ray Tune (~1.5 s each on a busy 2-core machine).

N trivial trials (a Tune function trainable that only calls `tune.report({"x": 1})`, one
CPU each, so two run at once on `ray.init(num_cpus=2)`) are run as one grid with
`TuneConfig(reuse_actors=False)` and with `reuse_actors=True`. Everything but the trial's
body is overhead: actor start-up (or reuse), scheduling, result processing, experiment
state. sweeper's launcher uses `reuse_actors=True` (sweeper/run/launch.py).

One warm-up fit of 4 trials runs first (first worker processes, imports, file caches); the
two modes are then run alternately `--repeats` times and the best wall time of each is
reported.

As in sweeper's launcher, Tune's auto loggers are off (TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1:
TensorBoardX would import torch into the driver) and only the JSON and CSV loggers are on
(the ResultGrid reads its metrics from them). Everything comes from `ray.tune` (Train V2 is
on by default in Ray 2.60: no ray.train APIs).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import time

os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # before Tune is imported

import ray
from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

CPUS = 2


def trivial(config: dict) -> None:
    tune.report({"x": 1})


def fit(trials: int, reuse: bool, storage: str, name: str) -> float:
    """Wall time of one Tuner.fit() of `trials` trivial trials; fails if any trial failed."""
    tuner = tune.Tuner(
        trivial,
        param_space={"i": tune.grid_search(list(range(trials)))},
        tune_config=tune.TuneConfig(reuse_actors=reuse),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage,
            verbose=0,
            callbacks=[JsonLoggerCallback(), CSVLoggerCallback()],  # as sweeper's launcher
        ),
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # Tune's experiment boxes: keep stdout a table
        results = tuner.fit()
    elapsed = time.perf_counter() - start
    if results.num_errors or len(results) != trials:
        raise RuntimeError(f"{name}: {results.num_errors} of {len(results)} trials failed")
    return elapsed


def measure(trials: int, repeats: int, storage: str) -> dict[bool, float]:
    """Best wall time per reuse_actors setting, the two settings run alternately."""
    fit(4, True, storage, "warm-up")
    best = {False: float("inf"), True: float("inf")}
    for k in range(repeats):
        for reuse in (False, True):
            elapsed = fit(trials, reuse, storage, f"reuse-{reuse}-{k}")
            best[reuse] = min(best[reuse], elapsed)
            print(f"  reuse_actors={reuse}: {elapsed:.2f} s", file=sys.stderr, flush=True)
    return best


def report(best: dict[bool, float], trials: int, repeats: int, init_s: float) -> None:
    print(
        f"Ray {ray.__version__}: {trials} trivial Tune trials on a local Ray with {CPUS} CPUs "
        f"(1 CPU per trial), best of {repeats}; ray.init took {init_s:.1f} s"
    )
    header = f"{'mode':<20} {'trials':>6} {'wall s':>7} {'trials/s':>9} {'s/trial':>8}"
    print(header + f" {'s/trial/slot':>13}")
    for reuse in (False, True):
        wall = best[reuse]
        print(
            f"{f'reuse_actors={reuse}':<20} {trials:>6} {wall:>7.2f} {trials / wall:>9.2f} "
            f"{wall / trials:>8.3f} {wall * CPUS / trials:>13.3f}"
        )
    print(
        f"ratio: reuse_actors=True runs {best[False] / best[True]:.1f}x the trials/s of "
        f"reuse_actors=False (s/trial/slot: a trial's wall time with {CPUS} running at once)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=64, help="trivial trials per fit")
    parser.add_argument("--repeats", type=int, default=1, help="fits per mode (best is kept)")
    parser.add_argument("--smoke", action="store_true", help="8 trials, one fit per mode")
    args = parser.parse_args(argv)
    if args.smoke:
        args.trials, args.repeats = 8, 1
    start = time.perf_counter()
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    ray.init(
        address="local",
        num_cpus=CPUS,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    init_s = time.perf_counter() - start
    try:
        with tempfile.TemporaryDirectory(prefix="tune-overhead-") as storage:
            best = measure(args.trials, args.repeats, storage)
    finally:
        ray.shutdown()
    report(best, args.trials, args.repeats, init_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
