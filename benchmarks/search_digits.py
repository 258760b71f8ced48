"""A real sweep on this machine's CPUs, full grid against `--search envelope` (issue 37,
"Measured"); with `--halving ETA` also the search under the halving scheduler and the full grid
under it (item 4: the space's trials given the proxy, `--proxy-every`, `--proxy-points`):
epochs trained, wall time and the envelope per radius with its 95% interval, in one run.

    .venv/bin/python benchmarks/search_digits.py --storage /tmp/search-digits --halving 3
    .venv/bin/python benchmarks/search_digits.py --storage /tmp/s --space digits --smoke

Every sweep goes through `sweeper.Sweep` on a local Ray (every core), each into its own
experiment (`<space>-full`, `<space>-search`, `<space>-halving`, `<space>-full-halving`) under
--storage; the search with the space's search settings and `--tolerance`. Re-running resumes
what is there: each run's wall time is kept beside the experiment (`<name>.wall.json`) and the
sum printed, with the number of runs (a resumed run restarts Ray and re-reads storage, so the
sum is an upper bound)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sweeper import Sweep
from sweeper.results.status import experiment_status

RADII = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]


def run(space: str | dict, storage: str, name: str, smoke: bool, search: dict | None) -> dict:
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
    epochs = sum(t.epoch for t in st.trials)  # a halted trial's: those it trained
    table = sweep.envelope(RADII)
    return {
        "seconds": seconds,
        "fresh": fresh and len(runs) == 1,
        "runs": len(runs),
        "trained": st.counts()["finished"],
        "halted": st.counts()["halted"],
        "trials": len(st.trials),
        "epochs": epochs,
        "envelope": [
            (r, a, lo, hi)
            for r, a, lo, hi in table[
                ["radius", "certified_accuracy", "ci_low", "ci_high"]
            ].itertuples(index=False, name=None)
        ],
        "search": json.loads(Path(storage, name, "search.json").read_text())
        if search and search.get("mode") == "envelope"
        else None,
    }


def with_proxy(space: str, every: int, points: int) -> dict:
    """The space's YAML as a mapping, its trials measuring the halving scheduler's proxy."""
    from sweeper.plan.spaces import read_yaml, resolve_space_path

    doc = read_yaml(resolve_space_path(space))
    doc["fixed"] = {**doc.get("fixed", {}), "proxy_every": every, "proxy_points": points}
    smoke = doc.get("smoke", {}).get("fixed", {})
    if smoke.get("epochs", every + 1) <= every:  # a smoke run long enough for one rung
        smoke["epochs"] = every + 1
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--storage", required=True)
    p.add_argument("--space", default="digits-wide")
    p.add_argument("--smoke", action="store_true", help="the space's smoke variant")
    p.add_argument("--tolerance", type=float, default=None, help="default: the space's")
    p.add_argument("--halving", type=int, default=None, help="also the search with halving")
    p.add_argument("--proxy-every", type=int, default=2, help="under --halving (epochs)")
    p.add_argument("--proxy-points", type=int, default=150, help="under --halving (inputs)")
    args = p.parse_args(argv)
    search = {"mode": "envelope"}
    if args.tolerance is not None:
        search["tolerance"] = args.tolerance
    runs = {
        "full": run(args.space, args.storage, f"{args.space}-full", args.smoke, None),
        "search": run(args.space, args.storage, f"{args.space}-search", args.smoke, search),
    }
    if args.halving is not None:  # the search with the scheduler, then the grid with it
        space = with_proxy(args.space, args.proxy_every, args.proxy_points)
        halving = {**search, "halving": args.halving}
        name = f"{args.space}-halving"
        runs["halving"] = run(space, args.storage, name, args.smoke, halving)
        full_halving = {"mode": "full", "halving": args.halving}
        name = f"{args.space}-full-halving"
        runs["full+halving"] = run(space, args.storage, name, args.smoke, full_halving)
    report(runs)
    return 0


def report(runs: dict[str, dict]) -> None:
    full = runs["full"]
    for label, r in runs.items():
        resumed = "" if r["fresh"] else f" (in {r['runs']} runs, resumed)"
        halted = f", {r['halted']} halted" if r["halted"] else ""
        print(
            f"{label}: trained {r['trained']} of {r['trials']} trials{halted}, {r['epochs']} "
            f"epochs, {r['seconds'] / 60:.1f} min{resumed}"
        )
    print("radius " + "".join(f"  {label + ' (95% CI)':<22}" for label in runs))
    for i, (radius, *_) in enumerate(full["envelope"]):
        cells = [r["envelope"][i][1:] for r in runs.values()]
        print(
            f"{radius:6.2f} " + "".join(f"  {a:.3f} ({lo:.3f}–{hi:.3f})  " for a, lo, hi in cells)
        )
    for label, r in runs.items():
        if label != "full":
            print(summary(label, r, full))


def summary(label: str, r: dict, full: dict) -> str:
    doc = r["search"] or {}
    raised = max((doc.get("audit") or {}).get("raised") or [0.0])
    stopped = (doc.get("stopped") or {}).get("reason")
    moved = max(abs(x[1] - y[1]) for x, y in zip(full["envelope"], r["envelope"], strict=True))
    halted = f", {r['halted']} halted" if r["halted"] else ""
    return (
        f"{label} digits: {r['trained']} of {r['trials']} trained{halted} ({r['epochs']} of "
        f"{full['epochs']} epochs, {r['seconds'] / max(full['seconds'], 1e-9):.0%} of full's "
        f"wall time), stopped ({stopped}), audit raised the envelope by {raised:.3f}; largest "
        f"envelope difference {moved:.3f}"
    )


if __name__ == "__main__":
    sys.exit(main())
