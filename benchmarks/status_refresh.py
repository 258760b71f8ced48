"""Cost of one refresh of `sweeper status --watch` (and of `run grid`'s live view) on a
644-trial experiment written by the real launcher.

Run from the repository root (a benchmark, not a test):

    .venv/bin/python benchmarks/status_refresh.py --source /tmp/s644full --experiment cifar10

The experiment (e.g. the one `benchmarks/sweep_scale.py` leaves: the cifar10 grid's 644 trials,
6,440 certification shards compacted, the cache) is copied to a temporary directory and made
to look mid-sweep there: 32 trials training (trial.json running with per-epoch metrics), 100
trained ones with their compacted certification moved away and 3 shards written instead, a
live lease (this process). Then:

- the first read (`StatusReader.read`: sweep.json's 644 configs parsed, every trial.json read),
- a refresh (the same reader again, as --watch does: listings, the trial.json files that
  changed, here 32 rewritten between refreshes), summarized and rendered to text,
- the baseline: one recursive listing of the experiment (`fileio.total_size`), the least any
  view of it must do.

Wall and CPU seconds are the median of `--repeats`; the goal is one refresh ≤ 1 s of work.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from sweeper.cli.status_view import view
from sweeper.results.status import StatusReader
from sweeper.results.storage import Experiment
from sweeper.results.summary import summarize
from trainables.kernel import fileio


def timed(fn, repeats: int) -> tuple[float, float, object]:
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), out


def mid_sweep(root: Path) -> list[Path]:
    """Make the copy look mid-sweep; returns the trial.json files a refresh finds changed."""
    trials = sorted((root / "trials").iterdir())
    now = time.time()
    running = []
    for k, directory in enumerate(trials[:32]):
        doc = json.loads((directory / "trial.json").read_text())
        metrics = {
            "epoch": 40 + k,
            "lr": 0.1,
            "epsilon": 0.5,
            "train_loss": 1.2,
            "train_acc": 0.5,
            "test_clean_acc": 0.6,
            "test_noisy_acc": 0.5,
            "epoch_time_s": 300.0,
        }
        doc.update(state="running", epoch=40 + k, metrics=metrics, updated=now - 10 * k)
        (directory / "trial.json").write_text(json.dumps(doc))
        running.append(directory / "trial.json")
    for directory in trials[32:132]:
        for compacted in (root / "certify" / directory.name).glob("*/compacted-*.parquet"):
            for k in range(3):
                shutil.copy(compacted, compacted.with_name(f"shard-{k:05d}-of-00010.parquet"))
            compacted.unlink()
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": "benchmark",
        "since": now - 3600,
        "heartbeat": now,
        "token": "benchmark",
    }
    (root / "lease.json").write_text(json.dumps(me))
    return running


def render(reader: StatusReader) -> str:
    st = reader.read()
    out = Console(file=io.StringIO(), width=120, force_terminal=False)
    out.print(view(st, summarize(st), False, st.space))
    return out.file.getvalue()  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="/tmp/s644full", help="storage holding the experiment")
    parser.add_argument("--experiment", default="cifar10")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    src = Path(args.source) / args.experiment
    if not (src / "sweep.json").exists():
        print(f"status_refresh.py: no experiment at {src} (run benchmarks/sweep_scale.py first)")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(
            src,
            Path(tmp) / args.experiment,
            ignore=shutil.ignore_patterns("standin-starts", "tune"),
        )
        running = mid_sweep(Path(tmp) / args.experiment)
        exp = Experiment(tmp, args.experiment)
        base_wall, base_cpu, _ = timed(lambda: fileio.total_size(exp.root), args.repeats)
        first_wall, first_cpu, _ = timed(lambda: StatusReader(exp).read(), args.repeats)
        reader = StatusReader(exp)
        text = render(reader)

        def refresh() -> str:
            for path in running:  # as a sweep would: the running trials rewrote their trial.json
                os.utime(path)
            return render(reader)

        wall, cpu, text = timed(refresh, args.repeats)
        trials = len(reader.read().trials)
    print(f"experiment: {src} ({trials} trials), load average {os.getloadavg()[0]:.1f}")
    print(f"baseline, one listing of the experiment: {base_wall:.3f} s wall, {base_cpu:.3f} s CPU")
    print(
        f"first read (configs parsed, every trial.json): {first_wall:.3f} s wall, "
        f"{first_cpu:.3f} s CPU ({first_cpu / base_cpu:.1f}x the listing's CPU)"
    )
    print(
        f"one refresh (read, summarize, render): {wall:.3f} s wall, {cpu:.3f} s CPU "
        f"({cpu / base_cpu:.1f}x the listing's CPU); goal ≤ 1 s of work: "
        f"{'met' if cpu <= 1.0 else 'NOT met'}"
    )
    print(f"the view has {len(str(text).splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
