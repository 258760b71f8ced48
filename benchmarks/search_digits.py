"""A real sweep on this machine's CPUs, full grid against `--search envelope` (issue 37,
"Measured"): epochs trained, wall time and the envelope per radius with its 95% interval, in
one run.

    .venv/bin/python benchmarks/search_digits.py --storage /tmp/search-digits
    .venv/bin/python benchmarks/search_digits.py --storage /tmp/s --space digits --smoke

Both sweeps go through `sweeper.Sweep` on a local Ray (every core), each into its own
experiment (`<space>-full`, `<space>-search`) under --storage; the search with the space's
search settings and `--tolerance`. Re-running resumes what is there: each run's wall time is
kept beside the experiment (`<name>.wall.json`) and the sum printed, with the number of runs
(a resumed run restarts Ray and re-reads storage, so the sum is an upper bound)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sweeper import Sweep
from sweeper.results.status import experiment_status

RADII = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]


def run(space: str, storage: str, name: str, smoke: bool, search: dict | None) -> dict:
    sweep = Sweep(space, storage=storage, experiment=name, smoke=smoke)
    fresh = not Path(storage, name, "sweep.json").exists()
    clock = Path(storage, f"{name}.wall.json")  # every run's seconds, beside the experiment
    before = [] if fresh or not clock.exists() else json.loads(clock.read_text())
    start = time.perf_counter()
    sweep.run(search=search)
    runs = [*before, time.perf_counter() - start]
    clock.write_text(json.dumps(runs))
    seconds = sum(runs)
    st = experiment_status(sweep.exp())
    epochs = sum(t.epoch for t in st.trials)
    table = sweep.envelope(RADII)
    return {
        "seconds": seconds,
        "fresh": fresh and len(runs) == 1,
        "runs": len(runs),
        "trained": st.counts()["finished"],
        "trials": len(st.trials),
        "epochs": epochs,
        "envelope": [
            (r, a, lo, hi)
            for r, a, lo, hi in table[
                ["radius", "certified_accuracy", "ci_low", "ci_high"]
            ].itertuples(index=False, name=None)
        ],
        "search": json.loads(Path(storage, name, "search.json").read_text()) if search else None,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", required=True)
    p.add_argument("--space", default="digits-wide")
    p.add_argument("--smoke", action="store_true", help="the space's smoke variant")
    p.add_argument("--tolerance", type=float, default=None, help="default: the space's")
    args = p.parse_args(argv)
    search = {"mode": "envelope"}
    if args.tolerance is not None:
        search["tolerance"] = args.tolerance
    full = run(args.space, args.storage, f"{args.space}-full", args.smoke, None)
    searched = run(args.space, args.storage, f"{args.space}-search", args.smoke, search)
    for label, r in (("full", full), ("search", searched)):
        resumed = "" if r["fresh"] else f" (in {r['runs']} runs, resumed)"
        print(
            f"{label}: trained {r['trained']} of {r['trials']} trials, {r['epochs']} epochs, "
            f"{r['seconds'] / 60:.1f} min{resumed}"
        )
    print("radius   full (95% CI)          search (95% CI)")
    for (r, a, lo, hi), (_, b, lo2, hi2) in zip(
        full["envelope"], searched["envelope"], strict=True
    ):
        print(f"{r:6.2f}   {a:.3f} ({lo:.3f}–{hi:.3f})    {b:.3f} ({lo2:.3f}–{hi2:.3f})")
    doc = searched["search"] or {}
    audit = doc.get("audit") or {}
    stopped = doc.get("stopped") or {}
    raised = max(audit.get("raised") or [0.0])
    print(
        f"search digits: {searched['trained']} of {searched['trials']} trained "
        f"({searched['epochs']} of {full['epochs']} epochs, "
        f"{searched['seconds'] / max(full['seconds'], 1e-9):.0%} of full's wall time), stopped "
        f"({stopped.get('reason')}), audit raised the envelope by {raised:.3f}; largest "
        f"envelope difference {max(abs(x[1] - y[1]) for x, y in zip(full['envelope'], searched['envelope'], strict=True)):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
