"""How long the commands that only plan or list take, each in a fresh process (issue 17).

Run from the repository root (a benchmark, not a test; about a minute):

    .venv/bin/python benchmarks/cli_speed.py            # 5 repeats, the median of each
    .venv/bin/python benchmarks/cli_speed.py --repeats 1

Each command runs as `python -c "from sweeper.cli import app; app()" ARGS` with this checkout
first on the path, its output discarded; the figure is the median wall-clock of the repeats,
with its CPU time (user + system, which a busy shared machine inflates less than the wall
clock). Baselines in the same run: the bare interpreter (`python -c pass`) and importing typer
and rich, which every command pays. `sweeper spaces` is measured with an empty cache (it
expands every shipped space) and with the cache its first run wrote. Goals on a 2-core
machine: `--help` <= 0.5 s, `spaces` <= 1 s, the dry run of any shipped space <= 2 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = "from sweeper.cli import app; app()"
GOALS = {"--help": 0.5, "spaces": 1.0, "dry run": 2.0}


def timed(code: str, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh interpreter running `code` with `args`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{args}: exit {done.returncode}\n{done.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median(
    code: str, args: list[str], env: dict[str, str], repeats: int, fresh_cache: bool = False
) -> tuple[float, float]:
    runs = []
    for _ in range(repeats):
        if fresh_cache:
            env = {**env, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="cli-speed-cache-")}
        runs.append(timed(code, args, env))
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def cases(storage: str) -> list[tuple[str, str, list[str], str | None]]:
    """(label, code, args, goal key) of every measurement."""
    sys.path.insert(0, str(ROOT))
    from sweeper.plan.spaces import available_spaces

    out = [
        ("python -c pass", "pass", [], None),
        ("import typer, rich", "import typer, rich.console", [], None),
        ("sweeper --help", CLI, ["--help"], "--help"),
        ("sweeper spaces (cold cache)", CLI, ["spaces"], "spaces"),
        ("sweeper spaces", CLI, ["spaces"], "spaces"),
    ]
    for space in available_spaces():
        out.append(
            (
                f"run grid {space} --dry-run",
                CLI,
                ["run", "grid", space, "--dry-run", "--storage", storage],
                "dry run",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats: expected an integer >= 1")
    storage = tempfile.mkdtemp(prefix="cli-speed-")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": tempfile.mkdtemp()}
    timed(CLI, ["spaces"], env)  # fills the cache the warm `spaces` reads
    rows = []
    for label, code, cli_args, goal in cases(storage):
        cold = "cold cache" in label
        wall, cpu = median(code, cli_args, env, args.repeats, fresh_cache=cold)
        rows.append((label, wall, cpu, goal))
    base = rows[0][1]
    print(f"{'command':<44} {'wall s':>7} {'cpu s':>6} {'x python':>8} {'goal s':>6}  within")
    for label, wall, cpu, goal in rows:
        limit = GOALS.get(goal) if goal else None
        verdict = "" if limit is None else ("yes" if wall <= limit else "NO")
        print(
            f"{label:<44} {wall:7.2f} {cpu:6.2f} {wall / base:8.1f} "
            f"{'' if limit is None else f'{limit:.1f}':>6}  {verdict}"
        )
    print(
        f"median of {args.repeats} fresh processes each; load average now "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
