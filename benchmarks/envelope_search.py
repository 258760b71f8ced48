"""The envelope search replayed on published certification logs (issue 37, "Measured").

    .venv/bin/python benchmarks/envelope_search.py --logs DIR --seeds 5
    .venv/bin/python benchmarks/envelope_search.py --smoke       # a synthetic grid, seconds

DIR: a tree of Cohen-format CERTIFY logs in the published layout, e.g. smoothing-adversarial's
`data/certify/cifar10` (`git archive` of a mirror). Its logs are read by `sweeper import`'s own
reader (`ingest.importer.plan_import`: the hyperparameters from the path names); the universe is
the grid of `--space` (default `cifar10-published`, the models behind those logs) that has a log.
Training a model = revealing its certified curve at the 10 decision radii 0:2.25:0.25. Each
replay drives the sweep's own `EnvelopeSearcher` (the Ray Tune Searcher, one trial at a time,
its curves handed over as certification would) built by the sweep's own `search_plan` (cost:
the dry run's device-hours of the space's figures, training and certification); its record is
written to a temporary experiment.

The trials run `--concurrent` at once, as Tune runs them under the search, a trial's curve
revealed when it finishes; seed k replays the logs as they are with its own finishing order
(each trial takes its cost times a seeded log-normal factor; seed 0: its cost exactly), the
randomness a sweep on a cluster has. `--bootstraps B` also replays on B bootstraps of the test
points (the same resample for every model: the envelope's own noise, which no search can
foresee), reported on a line of their own. Per replay: the share of the universe's training
cost spent when the search stops by itself, whether its envelope is then within 0.02 of the true
one at every radius and exact, and the share spent when it first is within 0.02. Baselines: 200
random orders (mean share to within 0.02) and cheapest-first. Then each σ searched alone (the
universe cut to one σ) and held out (the other σ's models trained already and fitted: what is
learnt at three σ carried to the fourth). The last line is the issue's."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ray.tune.search import Searcher

from sweeper.plan.cost import price_sweep
from sweeper.plan.grid import expand
from sweeper.plan.search_spec import SearchSpec
from sweeper.plan.spaces import load_space
from sweeper.plan.throughput import SHIPPED
from sweeper.results.storage import Experiment
from sweeper.run.search_room import search_slots
from sweeper.run.search_tune import EnvelopeSearcher, search_plan
from sweeper.run.tune_names import TuneTrials
from trainables.kernel.config import TrialConfig

WITHIN = 0.02
EIGHT = search_slots(8, None)  # a node of 8 GPUs under the search: 2 certify while curves are due


@dataclass(frozen=True)
class Universe:
    """Grid points with logs: per model its config, its points (idx, correct, radius), its
    training device-hours (the dry run's, for the shares reported)."""

    trials: list[TrialConfig]
    points: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    train_hours: dict[str, float]
    certify: object

    def curves(self, radii: list[float], weights: dict[int, int] | None) -> dict[str, np.ndarray]:
        """Each model's curve over its own points, each point counted `weights[idx]` times (a
        bootstrap of the test points, the same for every model; None: once)."""
        out = {}
        for tid, (idx, correct, radius) in self.points.items():
            w = np.ones(len(idx)) if weights is None else np.array([weights.get(i, 0) for i in idx])
            reach = np.where(correct, radius, -np.inf)
            total = max(float(w.sum()), 1.0)
            out[tid] = np.array([float((w * (reach >= r)).sum()) / total for r in radii])
        return out

    def bootstrap(self, seed: int) -> dict[int, int]:
        """How often each test point is drawn in a bootstrap of all the points logged."""
        every = sorted({int(i) for idx, _, _ in self.points.values() for i in idx})
        drawn = np.random.default_rng(seed).choice(every, len(every))
        values, counts = np.unique(drawn, return_counts=True)
        return dict(zip(values.tolist(), counts.tolist(), strict=True))


def load_logs(directory: str, space: str) -> Universe:
    from sweeper.ingest.importer import plan_import

    spec = load_space(space)
    grid = {t.trial_id: t for t in expand(spec)}
    with tempfile.TemporaryDirectory() as tmp:
        report = plan_import(directory, Experiment(tmp, "replay"), [])
    points, trials = {}, []
    for model in report.imported:
        if model.cfg.trial_id not in grid or model.cfg.trial_id in points:
            continue
        cols = model.columns()
        idx = np.asarray(cols["idx"], dtype=np.int64)
        correct = np.asarray(cols["correct"], dtype=bool)
        points[model.cfg.trial_id] = (idx, correct, np.asarray(cols["radius"], dtype=np.float64))
        trials.append(grid[model.cfg.trial_id])
    return _priced(trials, points, spec.certify, space, len(grid))


def _priced(trials, points, certify, space: str, grid_size: int) -> Universe:
    figures = {a: f for a, f in SHIPPED["gpu"].figures.items()}
    train = {c.trial.trial_id: c.train_hours for c in price_sweep(trials, certify, figures).costs}
    print(f"{space}: {len(trials)} of its {grid_size} grid points have a log", flush=True)
    return Universe(trials, points, train, certify)


class Revealed:
    """Certification in a replay: a trained model's curve is its log's; `known`: models trained
    before the search began (their curves read back as from storage)."""

    def __init__(self, truth: dict[str, np.ndarray], known: set[str] = frozenset()):  # type: ignore[assignment]
        self.truth, self.certified, self.known = truth, set(), set(known)

    def stored(self, trial_ids):
        return {t: self.truth[t] for t in trial_ids if t in self.known}

    def ready(self, awaiting):
        return {t: self.truth[t] for t in awaiting if t in self.certified}


def replay(
    u: Universe,
    truth: dict[str, np.ndarray],
    spec: SearchSpec,
    trials=None,
    known=(),
    lanes: Lanes | None = None,
) -> dict:
    """One search over `trials` (default: the universe) through the sweep's own searcher, as
    Tune drives it: while a slot of `lanes` is free it asks for a trial; a trial's curve is
    revealed when it finishes (`Lanes.duration` after it started); `known`: trials of the
    universe trained before it began (observed, never proposed). `order`: the trials in the
    order they finished."""
    trials = trials or u.trials
    lanes = lanes or Lanes(1, 0)
    plan = search_plan(spec, [*trials, *known], u.certify, gpu=True)
    with tempfile.TemporaryDirectory() as tmp:
        exp = Experiment(tmp, "replay")
        Path(exp.root).mkdir(parents=True)
        curves = Revealed(truth, {t.trial_id for t in known})
        searcher = EnvelopeSearcher(exp, plan, trials, list(known), curves, TuneTrials({}))  # type: ignore[arg-type]
        order = _drive(searcher, curves, lanes, u.train_hours)
        phases = {p["trial_id"]: p["phase"] for p in searcher.proposals}
    searched = [t for t in order if phases.get(t) == "search"]
    return {"order": order, "searched": searched, "stopped": searcher.stopped}


@dataclass(frozen=True)
class Lanes:
    """How a replay's trials run: `slots` at once (Tune's concurrency under the search), each
    taking its training cost times a log-normal factor (`jitter` its σ; seeded by `seed`):
    which finishes first, and so what the searcher knows when it is asked again, varies as on
    a cluster. One slot without jitter is one trial at a time in the searcher's order."""

    slots: int
    seed: int
    jitter: float = 0.3

    def durations(self, hours: dict[str, float]) -> dict[str, float]:
        rng = np.random.default_rng(self.seed)
        ids = sorted(hours)
        factor = np.exp(self.jitter * rng.standard_normal(len(ids))) if self.seed else 1.0
        return dict(zip(ids, (np.array([hours[t] for t in ids]) * factor).tolist(), strict=True))


def _drive(searcher: EnvelopeSearcher, curves: Revealed, lanes: Lanes, hours) -> list[str]:
    took = lanes.durations(hours)
    running: dict[str, tuple[float, str]] = {}  # Tune's id -> (finish time, trial id)
    order: list[str] = []
    now, asked, finished = 0.0, 0, False
    while True:
        while not finished and len(running) < lanes.slots:
            suggested = searcher.suggest(str(asked))
            if suggested == Searcher.FINISHED:
                finished = True
            if suggested is None or finished:
                break
            ours = searcher.running[str(asked)]
            running[str(asked)] = (now + took[ours], ours)
            asked += 1
        if not running:
            return order
        first = min(running, key=lambda k: (running[k][0], int(k)))
        now, ours = running.pop(first)
        searcher.on_trial_complete(first)
        curves.certified.add(ours)
        order.append(ours)


def share_to(order: list[str], u: Universe, truth, ids: set[str], tol: float) -> float | None:
    """The share of `ids`' training cost spent when the envelope of `order`'s prefix is first
    within `tol` of the true one at every radius (None: never)."""
    best = np.max([truth[t] for t in ids], axis=0)
    total, spent, env = sum(u.train_hours[t] for t in ids), 0.0, np.zeros_like(best)
    for t in order:
        spent += u.train_hours[t]
        env = np.maximum(env, truth[t])
        if np.abs(best - env).max() <= tol + 1e-12:
            return spent / total
    return None


def one_seed(u: Universe, spec: SearchSpec, radii, lanes: Lanes, bootstrap: bool) -> dict:
    """One replay (its trials run on `lanes`; on the logs as they are, or on a bootstrap of
    their test points seeded as the lanes are): the search's stop and error, and both again
    with its audit's models (the sweep trains them too: the envelope it reports is of every
    model trained)."""
    truth = u.curves(radii, u.bootstrap(lanes.seed) if bootstrap else None)
    ids = set(truth)
    start = time.perf_counter()
    run = replay(u, truth, spec, lanes=lanes)
    best = np.max(list(truth.values()), axis=0)
    total = sum(u.train_hours.values())

    def error(trained: list[str]) -> float:
        return float(np.abs(best - np.max([truth[t] for t in trained], axis=0)).max())

    return {
        "seed": lanes.seed,
        "stop": sum(u.train_hours[t] for t in run["searched"]) / total,
        "error": error(run["searched"]),
        "with_audit": sum(u.train_hours[t] for t in run["order"]) / total,
        "audit_error": error(run["order"]),
        "to_within": share_to(run["searched"], u, truth, ids, WITHIN),
        "random": _random_share(u, truth, ids),
        "cheapest": share_to(
            sorted(ids, key=lambda t: (u.train_hours[t], t)), u, truth, ids, WITHIN
        ),
        "models": len(run["searched"]),
        "audited": len(run["order"]) - len(run["searched"]),
        "reason": (run["stopped"] or {}).get("reason", "-"),
        "seconds": time.perf_counter() - start,
    }


def _random_share(u: Universe, truth, ids: set[str], orders: int = 200) -> float:
    rng = np.random.default_rng(0)
    listed = sorted(ids)
    shares = [
        share_to([listed[i] for i in rng.permutation(len(listed))], u, truth, ids, WITHIN)
        for _ in range(orders)
    ]
    return float(np.mean([s for s in shares if s is not None]))


def per_sigma(u: Universe, spec: SearchSpec, radii, lanes: Lanes) -> list[str]:
    """Each σ searched alone (the universe cut to it), then held out (the other σ's models
    trained already, fitted; only its own proposed): its share of that σ's cost and its own
    envelope's largest error."""
    truth = u.curves(radii, None)
    lines = []
    for sigma in sorted({t.sigma for t in u.trials}):
        trials = [t for t in u.trials if t.sigma == sigma]
        others = [t for t in u.trials if t.sigma != sigma]
        ids = {t.trial_id for t in trials}
        best = np.max([truth[t] for t in ids], axis=0)
        cost = sum(u.train_hours[t] for t in ids)
        for how, known in (("alone", []), ("held out", others)):
            run = replay(u, truth, spec, trials, known, lanes)
            found = np.max([truth[t] for t in run["searched"]], axis=0)
            share = sum(u.train_hours[t] for t in run["searched"]) / cost
            lines.append(
                f"  σ = {sigma:g} {how}: {len(trials)} models, stopped at {share:.0%} of its "
                f"cost, largest error {np.abs(best - found).max():.3f}"
            )
    return lines


def smoke_universe() -> Universe:
    """The shipped `digits` grid with a made-up smooth landscape (best ε grows with σ, m = 2
    best), 200 points per model: seconds, for the tests of this script."""
    spec = load_space("digits")
    trials = expand(spec)
    rng = np.random.default_rng(0)
    radii = np.asarray(spec.certify.decision_radii)
    points = {}
    for t in trials:
        eps = t.epsilon or t.sigma
        clean = 0.95 - 0.3 * t.sigma - 0.1 * np.log(eps / (2 * t.sigma)) ** 2
        clean -= 0.03 * (t.m_train or 1) ** 0.5 + 0.01 * (t.steps or 0)
        curve = np.clip(clean - radii * (0.9 - t.sigma), 0, 1)
        reach = (rng.random(200)[:, None] < curve[None, :]).sum(axis=1)
        radius = np.concatenate([[0.0], radii])[reach]  # certified up to the last r it passes
        points[t.trial_id] = (np.arange(200), reach > 0, radius)
    return _priced(trials, points, spec.certify, "digits (a made-up landscape)", len(trials))


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", help="a tree of published CERTIFY logs (e.g. data/certify/cifar10)")
    p.add_argument("--space", default="cifar10-published", help="the grid the logs are of")
    p.add_argument(
        "--seeds",
        type=int,
        default=5,
        help="replays on the logs as they are, each with its own finishing order of the "
        "trials (seed 0: every trial takes its cost exactly)",
    )
    p.add_argument(
        "--concurrent",
        type=int,
        default=EIGHT.total - EIGHT.reserve,
        help="trials trained at once (default: 8 slots, 2 of them certifying)",
    )
    p.add_argument(
        "--bootstraps",
        type=int,
        default=0,
        help="also replays on bootstraps of the test points (the envelope's own noise)",
    )
    p.add_argument("--tolerance", type=float, default=SearchSpec().tolerance)
    p.add_argument(
        "--audit",
        type=float,
        default=SearchSpec().audit,
        help="the audit's share of the search's cost, trained as a sweep does (0: none)",
    )
    p.add_argument("--smoke", action="store_true", help="a synthetic grid instead of logs")
    p.add_argument("--no-per-sigma", action="store_true", help="skip the per-σ searches")
    args = p.parse_args(argv)
    if not args.smoke and not args.logs:
        p.error("give --logs DIR (or --smoke)")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    u = smoke_universe() if args.smoke else load_logs(args.logs, args.space)
    spec = SearchSpec(mode="envelope", tolerance=args.tolerance, audit=args.audit)
    radii = list(u.certify.decision_radii)  # type: ignore[attr-defined]
    print(f"{args.concurrent} trials at once; the tolerance {args.tolerance}", flush=True)
    results = [
        _reported(one_seed(u, spec, radii, Lanes(args.concurrent, seed), False), "seed")
        for seed in range(args.seeds)
    ]
    resampled = [
        _reported(one_seed(u, spec, radii, Lanes(args.concurrent, b), True), "bootstrap")
        for b in range(1, args.bootstraps + 1)
    ]
    if not args.no_per_sigma:
        for line in per_sigma(u, spec, radii, Lanes(args.concurrent, 0)):
            print(line, flush=True)
    if resampled:
        print(
            f"on {len(resampled)} bootstraps of the test points: {outcome(resampled, args.audit)}"
        )
    print(summary(u, results, args.audit))
    return 0


def _reported(r: dict, label: str) -> dict:
    within = "-" if r["to_within"] is None else f"{r['to_within']:.0%}"
    print(
        f"{label} {r['seed']}: {r['models']} models, stopped at {r['stop']:.1%} "
        f"({r['reason']}), largest error {r['error']:.3f}; with its audit ({r['audited']} "
        f"models) {r['with_audit']:.1%}, error {r['audit_error']:.3f}; within {WITHIN} at "
        f"{within}; random {r['random']:.0%}, cheapest-first {r['cheapest']:.0%} "
        f"({r['seconds']:.0f} s)",
        flush=True,
    )
    return r


def outcome(results: list[dict], audit: float) -> str:
    """Where the replays stopped and how close they came, with the audit's models when
    `audit` (the sweep trains them too)."""
    stop, error = ("with_audit", "audit_error") if audit else ("stop", "error")
    k = len(results)
    median = statistics.median(r[stop] for r in results)
    w = sum(r[error] <= WITHIN + 1e-12 for r in results)
    e = sum(r[error] <= 1e-12 for r in results)
    return (
        f"stopped at {median:.0%} of the training cost (median), within {WITHIN} at every "
        f"radius in {w}/{k}, exact in {e}/{k}"
    )


def summary(u: Universe, results: list[dict], audit: float) -> str:
    """The issue's line, of the search as a sweep runs it (its audit's models included when
    `audit`), after a line of the search alone's."""
    k = len(results)
    to = [r["to_within"] for r in results if r["to_within"] is not None]
    x = f"{statistics.median(to):.0%}" if to else "never"
    rnd = statistics.mean(r["random"] for r in results)
    cheap = statistics.mean(r["cheapest"] for r in results if r["cheapest"] is not None)
    alone = f"the search alone (no audit): {outcome(results, 0.0)}\n" if audit else ""
    return (
        f"{alone}envelope search: {len(u.trials)} models, {k} seeds; "
        f"{outcome(results, audit)}; to within {WITHIN}: search {x}, random {rnd:.0%}, "
        f"cheapest-first {cheap:.0%}"
    )


if __name__ == "__main__":
    sys.exit(main())
