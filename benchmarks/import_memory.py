"""Peak memory of `sweeper import` on huge and on the largest valid logs (issue 16).

Run from the repository root (a benchmark, not a test; it writes a few hundred MB under a
temporary directory and removes them):

    .venv/bin/python benchmarks/import_memory.py                 # 10,000,000 rows, ~2 min
    .venv/bin/python benchmarks/import_memory.py --rows 1000000

Each case runs `sweeper import` in a fresh process and reports that process's peak resident
memory (getrusage ru_maxrss), beside a 2-row log's as the baseline (the interpreter, pyarrow,
pandas). Cases:

- `huge cifar10`: a `--rows`-row CIFAR-10 log of well-formed rows, idx 0, 1, 2, ... It cannot
  be valid (CIFAR-10 has 10,000 test points), and is refused at its first row past them; the
  parse streams, so only what was read before that is held.
- `huge imagenet --max-rows N`: the same for ImageNet with the row cap lifted to the file's
  size: refused at the first idx past the 50,000 validation images.
- `largest valid`: a 50,000-row ImageNet log, which is imported (the largest a log can be: idx
  is unique and inside the test split).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
CODE = (
    "import resource, sys\nfrom sweeper.cli import app\ntry:\n    app()\nfinally:\n"
    "    print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
)


def write_log(path: Path, rows: int, classes: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(HEADER)
        for start in range(0, rows, 100_000):
            f.writelines(
                f"{i}\t{i % classes}\t{i % classes}\t{(i % 90) / 100}\t1\t1.5\n"
                for i in range(start, min(rows, start + 100_000))
            )
    return path.parents[4]  # the directory to import (its names give dataset, arch, σ)


def run(args: list[str]) -> tuple[int, float, str]:
    """(peak RSS in kB, seconds, the command's last output line)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CODE, *args], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - start
    peak = int(proc.stderr.rsplit("maxrss ", 1)[1].split()[0])
    said = [
        ln for ln in (proc.stdout + proc.stderr).splitlines() if ln and not ln.startswith("maxrss")
    ]
    return peak, seconds, f"exit {proc.returncode}: {said[-1] if said else ''}"[:150]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    rows = parser.parse_args().rows
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cifar = "cifar10/resnet110/noise_0.25/test/sigma_0.25"
        imagenet = "imagenet/resnet50/noise_0.25/test/sigma_0.25"
        cases = [
            ("baseline: 2 rows", write_log(tmp_path / "small" / cifar, 2, 10), []),
            (f"huge cifar10: {rows:,} rows", write_log(tmp_path / "huge" / cifar, rows, 10), []),
            (
                f"huge imagenet --max-rows {rows}",
                write_log(tmp_path / "hugein" / imagenet, rows, 1000),
                ["--max-rows", str(rows)],
            ),
            (
                "largest valid: 50,000 rows",
                write_log(tmp_path / "valid" / imagenet, 50_000, 1000),
                [],
            ),
        ]
        print(f"{'case':36} {'file MB':>8} {'peak RSS MiB':>12} {'s':>6}  outcome")
        for i, (name, directory, extra) in enumerate(cases):
            size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 1e6
            args = [
                "import",
                str(directory),
                "--storage",
                str(tmp_path / "store"),
                "--experiment",
                f"e{i}",
                *extra,
            ]
            peak, seconds, outcome = run(args)
            print(f"{name:36} {size:8.1f} {peak / 1024:12.1f} {seconds:6.1f}  {outcome}")


if __name__ == "__main__":
    main()
