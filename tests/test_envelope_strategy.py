"""The `envelope` certification strategy's statistical core (issue 28): the bounds against scipy,
their level on simulated draws, the planner's pruning and point-level skips, its determinism
from the records (a resumed run decides the same), and the benchmark's smoke mode."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta, binom

from sweeper.run import envelope_bounds as eb
from sweeper.run.envelope_ledger import (
    SKIPPED,
    FullRow,
    Ledger,
    PilotRow,
    Settings,
    could_win_from,
)
from sweeper.run.envelope_planner import (
    COMPLETE,
    FULL,
    PILOT,
    PROBE,
    SELECT,
    Step,
    ambiguous,
    completions,
    decide,
    next_step,
)
from trainables.kernel.certificates import radius_from_counts

ROOT = Path(__file__).resolve().parents[1]
RADII = tuple(0.25 * t for t in range(10))


def benchmark():
    spec = importlib.util.spec_from_file_location(
        "envelope_certify", ROOT / "benchmarks" / "envelope_certify.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["envelope_certify"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ the bounds
def test_upper_confidence_bound_is_clopper_pearson():
    k, N = np.array([0, 1, 37, 99, 100]), 100
    expected = np.where(k < N, beta.ppf(1 - 0.01, k + 1, np.maximum(N - k, 1)), 1.0)
    assert np.allclose(eb.upper_confidence_bound(k, N, 0.01), expected, rtol=0, atol=1e-12)
    assert np.all(np.diff(eb.upper_confidence_bound(np.arange(101), 100, 0.01)) > 0)
    assert eb.upper_confidence_bound(100, 100, 0.01) == 1.0


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 0.93, 0.9999, 1.0])
@pytest.mark.parametrize("delta", [0.05, 1e-9])
def test_count_upper_quantile_is_the_least_count_with_the_tail_bound(p, delta):
    n = 10_000
    k = int(eb.count_upper_quantile(np.array([p]), n, delta)[0])
    assert binom.sf(k, n, p) <= delta
    if k > 0:
        assert binom.sf(k - 1, n, p) > delta
    assert k == {0.0: 0, 1.0: n}.get(p, k) and (p < 0.99 or k > 9_990)


def test_certified_counts_are_the_least_counts_certifying_each_radius():
    n, alpha, sigma = 100_000, 0.001, 0.25
    need = eb.certified_counts(sigma, n, alpha, RADII)
    for r, k in zip(RADII, need, strict=True):
        if k <= n:
            p, rad = radius_from_counts(k, n, alpha, sigma)
            assert p >= 0.5 and rad >= r
        if 0 < k <= n + 1 and k - 1 <= n:
            p, rad = radius_from_counts(k - 1, n, alpha, sigma)
            assert p < 0.5 or rad < r
    assert need[-1] == n + 1  # 2.25 > 3.81·0.25: no count certifies it
    assert list(eb.levels([0, need[0], need[1] - 1, n], need)) == [0, 1, 1, int((need <= n).sum())]


def test_radius_bound_grows_with_votes_and_agrees_with_levels():
    n, alpha, sigma, d = 100_000, 0.001, 0.5, 1e-6
    k = np.arange(0, 1001, 50)
    radius = eb.radius_upper_bound(k, 1000, n, alpha, sigma, d)
    finite = radius[np.isfinite(radius)]
    assert radius[0] == -np.inf and np.all(np.diff(finite) >= 0) and len(finite) > 10
    levels = eb.point_levels(k, 1000, n, eb.certified_counts(sigma, n, alpha, RADII), d)
    assert list(levels) == [int((np.array(RADII) <= r).sum()) for r in radius]
    assert eb.point_levels([0], [0], n, eb.certified_counts(sigma, n, alpha, RADII), d)[0] == 8


@pytest.mark.parametrize("p", [0.55, 0.8, 0.97, 0.995])
def test_radius_bound_holds_at_its_level_on_simulated_draws(p):
    """Over many simulated points the full CERTIFY's radius exceeds the bound at most at the
    nominal rate δ (plus 4 standard errors); the plug-in radius, no bound, exceeds it often."""
    rng = np.random.default_rng(int(p * 1000))
    points, N, n, alpha, sigma, delta = 40_000, 200, 2_000, 0.001, 1.0, 0.05
    k, nA = rng.binomial(N, p, points), rng.binomial(n, p, points)
    p_low, full = radius_from_counts(nA, n, alpha, sigma)
    full = np.where(np.asarray(p_low) >= 0.5, full, -np.inf)
    bound = eb.radius_upper_bound(k, N, n, alpha, sigma, delta)
    rate = np.mean(full > bound)
    assert rate <= delta + 4 * np.sqrt(delta * (1 - delta) / points)
    p_plug, plug = radius_from_counts(np.rint(k / N * n), n, alpha, sigma)
    plug = np.where(np.asarray(p_plug) >= 0.5, plug, -np.inf)
    assert np.mean(full > plug) > 3 * delta


def test_delta_split_sums_to_delta_however_many_models_arrive():
    assert sum(eb.model_delta(j, 0.01) for j in range(1, 200_000)) < 0.01
    assert sum(eb.model_delta(j, 0.01) for j in range(1, 200_000)) > 0.01 * 0.9999
    assert eb.point_delta(3, 0.01, 4, 500) == pytest.approx(0.01 * 6 / (np.pi**2 * 9) / 2000)
    with pytest.raises(ValueError):
        eb.model_delta(0, 0.01)


# ------------------------------------------------------------------------------ the planner
S = Settings(n0=100, n=100_000, alpha=0.001, radii=RADII, delta=0.01, pilots=(1_000, 10_000))


def play(ledger, rates, cAHat=None, until=None, log=None):
    """Run decide/record with deterministic counts (votes = rate·draws) until nothing is left
    (or `until` steps), appending every recorded call to `log`."""
    taken = []
    while (steps := decide(ledger)) and (until is None or len(taken) < until):
        for step in steps:
            m = ledger.models[step.model]
            rate = rates[step.model]
            chat = m.labels if cAHat is None else cAHat[step.model]
            at = {int(i): p for p, i in enumerate(m.idx)}
            if step.kind == PROBE:
                rows = [FullRow(step.model, i, int(rate[at[i]] * S.n)) for i in step.idx]
                call = ("probe", step.model, rows)
                ledger.record_probe(step.model, rows)
            elif step.kind == FULL:
                rows = [FullRow(step.model, i, int(rate[at[i]] * S.n)) for i in step.idx]
                call = ("full", step.model, rows, step.from_level)
                ledger.record_full(step.model, rows, step.from_level)
            elif step.kind == COMPLETE:
                rows = [FullRow(step.model, i, int(rate[at[i]] * S.n)) for i in step.idx]
                call = ("complete", step.model, rows)
                ledger.record_complete(step.model, rows)
            else:
                rows = [
                    PilotRow(
                        step.model,
                        step.stage,
                        i,
                        int(chat[at[i]]),
                        step.draws if step.kind == PILOT or chat[at[i]] == m.labels[at[i]] else 0,
                        int(rate[at[i]] * step.draws),
                    )
                    for i in step.idx
                ]
                if step.kind == SELECT:
                    rows = [
                        PilotRow(
                            r.model,
                            1,
                            r.idx,
                            r.cAHat,
                            min(r.draws, S.pilots[0]),
                            int(rate[at[r.idx]] * S.pilots[0]) if r.draws else 0,
                        )
                        for r in rows
                    ]
                call = ("pilot", step.model, step.stage, rows)
                ledger.record_pilot(step.model, step.stage, rows)
            taken.append(step)
            if log is not None:
                log.append(call)
    return taken


def replay(log):
    ledger = Ledger(S)
    for call in log:
        if call[0] == "arrive":
            ledger.arrive(*call[1:])
        elif call[0] == "pilot":
            ledger.record_pilot(call[1], call[2], call[3])
        elif call[0] == "probe":
            ledger.record_probe(call[1], call[2])
        elif call[0] == "complete":
            ledger.record_complete(call[1], call[2])
        else:
            ledger.record_full(call[1], call[2], call[3])
    return ledger


def sweep(specs, log):
    """Arrive models {name: (sigma, rates)} on 100 points with labels 0."""
    ledger = Ledger(S)
    for j, (name, (sigma, _)) in enumerate(specs.items(), start=1):
        call = ("arrive", name, j, sigma, np.arange(100), np.zeros(100, np.int64))
        ledger.arrive(*call[1:])
        log.append(call)
    return ledger


def test_a_model_below_the_envelope_everywhere_is_pruned_and_the_winners_are_certified():
    specs = {
        "strong": (0.25, np.full(100, 0.999)),
        "weak": (0.25, np.r_[np.full(80, 0.6), np.full(20, 0.3)]),
        # less promising, but certifies radii the σ=0.25 models cannot reach, on 50 points
        "wide": (1.0, np.r_[np.full(50, 0.9), np.full(50, 0.3)]),
    }
    log: list = []
    ledger = sweep(specs, log)
    first = decide(ledger)
    assert [s.kind for s in first] == [SELECT] * 3 and first[0].draws == S.n0 + S.pilots[0]
    steps = play(ledger, {k: v[1] for k, v in specs.items()}, log=log)
    assert decide(ledger) == []
    assert [ledger.status(m) for m in specs] == ["certified", "pruned", "certified"]
    full = [s for s in steps if s.kind == FULL]
    assert full[0].model == "strong" and len(full[0].idx) == 100 and full[0].from_level == 0
    # "wide" can only win where "strong" certifies nothing (from 1.0): its full run draws only
    # the points that can reach 1.0, and the others count as not certified
    assert full[1].model == "wide" and full[1].from_level == 4 == could_win_from(
        ledger.models["wide"].upper_curve, ledger.models["strong"].certified
    )
    assert sorted(full[1].idx) == list(range(50))
    assert list(ledger.models["wide"].certified[[0, 4, 5, 6]]) == [50, 50, 50, 0]
    assert list(ledger.envelope()[[0, 3, 4, 6]]) == [100, 100, 50, 0]


def test_a_tie_is_never_pruned_and_a_wrong_selection_needs_no_draws():
    specs = {"a": (0.25, np.full(100, 0.9)), "b": (0.25, np.full(100, 0.9))}
    cAHat = {
        "a": np.zeros(100, np.int64),
        "b": np.r_[np.zeros(90, np.int64), np.ones(10, np.int64)],
    }
    log: list = []
    ledger = sweep(specs, log)
    play(ledger, {k: v[1] for k, v in specs.items()}, cAHat=cAHat, log=log)
    b = ledger.models["b"]
    assert b.draws[90:].sum() == 0 and b.upper[90:].sum() == 0 and b.draws[:90].min() > 0
    assert ledger.status("a") == "certified"
    assert ledger.status("b") == "pruned"  # 90 of 100 points at most: below "a" everywhere
    twin = Ledger(S)
    twin.models = {"a": ledger.models["a"]}
    twin.arrive("c", 3, 0.25, np.arange(100), np.zeros(100, np.int64))
    twin.record_pilot("c", 1, [PilotRow("c", 1, i, 0, 1_000, 900) for i in range(100)])
    c = twin.models["c"]
    assert np.all(c.upper_curve >= twin.envelope()) and twin.status("c") == "piloted"


def test_skipped_points_count_as_not_certified():
    ledger = Ledger(S)
    ledger.arrive("m", 1, 0.5, np.arange(4), np.zeros(4, np.int64))
    for stage, size in ((1, 1_000), (2, 9_000)):
        ledger.record_pilot("m", stage, [PilotRow("m", stage, i, 0, size, size) for i in range(4)])
    ledger.record_full("m", [FullRow("m", 0, S.n), FullRow("m", 1, SKIPPED)], 3)
    assert list(ledger.models["m"].certified[:3]) == [1, 1, 1]
    with pytest.raises(ValueError):
        ledger.record_pilot("m", 2, [])
    for pilots in [(1_000, 1_000), (1_000, 100_000), ()]:
        with pytest.raises(ValueError):
            Settings(100, 100_000, 0.001, RADII, 0.01, pilots)


def test_decisions_are_a_function_of_the_records_so_a_resumed_run_decides_the_same():
    rng = np.random.default_rng(7)
    specs = {
        f"m{j}": (float(rng.choice([0.25, 0.5, 1.0])), rng.uniform(0.5, 1.0, 100)) for j in range(8)
    }
    rates = {k: v[1] for k, v in specs.items()}
    log: list = []
    ledger = sweep(specs, log)
    play(ledger, rates, until=12, log=log)
    resumed = replay(log)  # after a kill: the persisted rows, nothing else
    assert decide(resumed) == decide(ledger)
    rest = play(ledger, rates, log=None)
    assert play(resumed, rates) == rest
    assert {m: ledger.status(m) for m in specs} == {m: resumed.status(m) for m in specs}
    assert all(ledger.status(m) in ("certified", "pruned") for m in specs)


# ------------------------------------------------------------------------------ the benchmark
def test_the_strategy_keeps_the_envelope_of_full_certification_on_simulated_draws():
    bench = benchmark()
    truth = bench.smoke_truth(models=12, points=40, seed=3)
    settings = Settings(100, 100_000, 0.001, bench.RADII, 0.01, (1_000, 10_000))
    result = bench.one_seed(truth, settings, seed=5)
    assert result["equal"] == len(bench.RADII) and result["envelope"] < result["full"] / 3


def test_benchmark_smoke_mode_prints_the_issue_line():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "envelope_certify.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    pattern = (
        r"envelope certification: \d+ models, \d+ points; forward passes full [\d,]+, envelope [\d,]+ "
        r"\([\d.]+× fewer\); envelope equal at \d+/\d+ radii, winners equal at \d+/\d+, over 2 seeds"
    )
    assert re.fullmatch(pattern, last), last


def _piloted(specs):
    """The models of `specs` arrived with every pilot stage drawn (none certified yet)."""
    ledger = sweep(specs, [])
    play(ledger, {k: v[1] for k, v in specs.items()}, until=1)  # the SELECTs, all at once
    for name, (_, rate) in specs.items():
        draws = S.pilots[1] - S.pilots[0]
        rows = [PilotRow(name, 2, i, 0, draws, int(rate[i] * draws)) for i in range(100)]
        ledger.record_pilot(name, 2, rows)
    return ledger


def test_steps_run_in_parallel_up_to_the_slots_and_a_parallel_full_must_still_add():
    """decide(busy, slots): steps of distinct models while fewer than `slots` run; the first
    is the sequential choice; a FULL beside a running FULL only if its plug-in curve would
    still add to the envelope once the running one comes out at its own."""
    specs = {
        "strong": (0.25, np.full(100, 0.999)),
        "weak": (0.25, np.r_[np.full(80, 0.6), np.full(20, 0.3)]),
        "wide": (1.0, np.r_[np.full(50, 0.9), np.full(50, 0.3)]),
    }
    ledger = sweep(specs, [])
    play(ledger, {k: v[1] for k, v in specs.items()}, until=1)
    one = decide(ledger)
    assert len(one) == 1 and one[0].kind == PILOT
    three = decide(ledger, slots=3)
    assert three[0] == one[0] and len({s.model for s in three}) == 3
    assert decide(ledger, busy={one[0].model: PILOT}) == []
    other = decide(ledger, busy={one[0].model: PILOT}, slots=2)
    assert len(other) == 1 and other[0].model != one[0].model
    ledger = _piloted(specs)
    first = decide(ledger)
    assert [(s.kind, s.model) for s in first] == [(FULL, "strong")]
    beside = decide(ledger, busy={"strong": FULL}, slots=3)
    # "weak" would add nothing once "strong" is certified at its plug-in: it waits
    assert [(s.kind, s.model) for s in beside] == [(FULL, "wide")]
    failed = decide(ledger, busy={"strong": "failed"}, slots=1)
    assert [s.model for s in failed] != ["strong"] and len(failed) == 1


def test_every_delta_of_the_chain_is_pinned():
    """δ → the j-th model's share δ·6/(π²j²) → a point's δ_j/(S·P) → halves δ_point/2 for the
    pilot's Clopper–Pearson bound and for the full count's quantile. Each step pinned where a
    change of it would change a bound (issue 39 §2: no test failed if a half took all of δ)."""
    k, N, n = np.arange(700, 1001, 3), 1_000, 100_000
    d = 1e-6
    halves = eb.count_upper_quantile(eb.upper_confidence_bound(k, N, d / 2), n, d / 2)
    assert np.array_equal(eb.count_upper_bound(k, N, n, d), halves)
    whole_pilot = eb.count_upper_quantile(eb.upper_confidence_bound(k, N, d), n, d / 2)
    whole_full = eb.count_upper_quantile(eb.upper_confidence_bound(k, N, d / 2), n, d)
    assert (whole_pilot < halves).any() and (whole_full < halves).any()  # looser δ: tighter

    # the ledger bounds model j's points with point_delta(j, δ, S, P), nothing else
    points, j = 60, 3
    ledger = Ledger(S)
    ledger.arrive("m", j, 0.5, np.arange(points), np.zeros(points, np.int64))
    votes = np.linspace(0.6 * S.pilots[0], S.pilots[0], points).astype(np.int64)
    rows = [PilotRow("m", 1, i, 0, S.pilots[0], int(v)) for i, v in enumerate(votes)]
    ledger.record_pilot("m", 1, rows)
    thresholds = ledger.thresholds(0.5)
    exact = eb.point_delta(j, S.delta, len(S.pilots), points)
    assert exact == pytest.approx(S.delta * 6 / (np.pi**2 * j**2) / (len(S.pilots) * points))
    upper = ledger.models["m"].upper
    assert np.array_equal(upper, eb.point_levels(votes, S.pilots[0], S.n, thresholds, exact))
    for wrong in (exact * 4, eb.point_delta(1, S.delta, len(S.pilots), points)):
        assert not np.array_equal(
            upper, eb.point_levels(votes, S.pilots[0], S.n, thresholds, wrong)
        )


def test_a_later_pilot_draws_only_the_points_whose_level_it_has_not_resolved():
    """After the first pilot, a point whose bound is already at its plug-in level is left out
    of the next stage (more draws would hardly lower its bound); the others are drawn, and a
    stage with nothing left draws nothing (issue 39 §2)."""
    points = 40
    ledger = Ledger(S)
    ledger.arrive("m", 1, 0.5, np.arange(points), np.zeros(points, np.int64))
    votes = np.linspace(0.55 * S.pilots[0], S.pilots[0], points).astype(np.int64)
    ledger.record_pilot(
        "m", 1, [PilotRow("m", 1, i, 0, S.pilots[0], int(v)) for i, v in enumerate(votes)]
    )
    m = ledger.models["m"]
    resolved = m.upper == m.guess
    assert resolved.any() and (~resolved).any()  # both kinds among the points
    step = next_step(m, ledger.envelope(), S)
    assert step.kind == PILOT and step.draws == S.pilots[1] - S.pilots[0]
    t_min = step.from_level
    assert step.idx == tuple(m.idx[(m.upper > t_min) & ~resolved].tolist())
    # every point resolved: the stage is drawn on none, and certification follows
    ledger.record_pilot("m", 2, [])
    assert next_step(ledger.models["m"], ledger.envelope(), S).kind == FULL


def test_delta_split_over_the_models_declared_up_front_still_sums_to_delta():
    """With M models declared (a run's plan), the first M arrival numbers share 0.9·δ evenly
    and later ones 0.1·δ by the arrival split: Σ ≤ δ whichever model takes which number, and
    the declared share beats the arrival split from the 18th model on (issue 39 §2)."""
    M, delta = 440, 0.01
    shares = [eb.model_delta(j, delta, M) for j in range(1, 200_000)]
    assert sum(shares) < delta and sum(shares) > 0.9999 * delta
    assert shares[0] == shares[M - 1] == pytest.approx(0.9 * delta / M)
    assert shares[M] == pytest.approx(0.1 * delta * 6 / np.pi**2)
    better = (j for j in range(1, M + 1) if eb.model_delta(j, delta, M) > eb.model_delta(j, delta))
    assert next(better) == 18
    assert eb.point_delta(5, delta, 4, 500, M) == pytest.approx(0.9 * delta / M / 2000)
    declared = dataclasses.replace(S, declared=M)
    ledger = Ledger(declared)
    ledger.arrive("m", 300, 0.5, np.arange(50), np.zeros(50, np.int64))
    votes = np.linspace(0.6 * S.pilots[0], S.pilots[0], 50).astype(np.int64)
    ledger.record_pilot(
        "m", 1, [PilotRow("m", 1, i, 0, S.pilots[0], int(v)) for i, v in enumerate(votes)]
    )
    d = eb.point_delta(300, delta, len(S.pilots), 50, M)
    expected = eb.point_levels(votes, S.pilots[0], S.n, ledger.thresholds(0.5), d)
    assert np.array_equal(ledger.models["m"].upper, expected)


def _probed_pair():
    """A certified model "a" (every point at 0.999) and "m", alike on 90 points and at 0.5 on
    10: its pilots' bounds let those 10 reach r = 0 (a tie with "a" there), its plug-in curve
    does not; played until "m"'s next step is its probe."""
    rates = {"a": np.full(100, 0.999), "m": np.r_[np.full(90, 0.999), np.full(10, 0.5)]}
    ledger = sweep({"a": (0.25, rates["a"]), "m": (0.25, rates["m"])}, [])
    while (steps := decide(ledger)) and steps[0].kind != PROBE:
        play(ledger, rates, until=1)
    return ledger, rates, steps


def test_a_probe_of_the_ambiguous_points_prunes_with_exact_counts_and_no_delta():
    """Ambiguous-first (issue 39 §2): once a surviving model's pilots are drawn and its plug-in
    curve is below the envelope, CERTIFY's estimation draws are taken on the points whose
    level is ambiguous at a contested radius only; their exact levels replace their bounds
    (no δ spent: the bounds of the other points are untouched) and the model is pruned without
    drawing the rest."""
    ledger, rates, steps = _probed_pair()
    m = ledger.models["m"]
    assert ledger.status("a") == "certified" and m.stage == len(S.pilots)
    assert [s.kind for s in steps] == [PROBE] and steps[0].idx == tuple(range(90, 100))
    assert steps[0].draws == S.n and steps[0].stage == len(S.pilots) + 1
    assert list(ambiguous(m, ledger.envelope(), 0).nonzero()[0]) == list(range(90, 100))
    bounds = m.upper.copy()
    assert bounds[90:].min() >= 1 and m.guess[90:].max() == 0  # counted at r = 0 by the bound
    play(ledger, rates)
    assert ledger.status("m") == "pruned" and m.certified is None
    assert list(m.upper[90:]) == [0] * 10  # nA = n/2: not certified at r = 0
    assert np.array_equal(m.upper[:90], bounds[:90])
    assert list(m.probe[90:]) == [S.n // 2] * 10 and set(m.probe[:90]) == {SKIPPED}


def test_after_a_probe_the_full_step_draws_only_the_rest_and_counts_the_probe():
    """A probe that does not prune: the full certification draws the reachable points the
    probe did not, and the model's curve counts both (the probe's counts are the very
    estimation draws `full` takes)."""
    ledger, _, steps = _probed_pair()
    m = ledger.models["m"]
    ledger.record_probe("m", [FullRow("m", i, S.n) for i in steps[0].idx])
    assert list(m.upper[90:]) == list(m.guess[90:]) and m.upper[90:].min() > 1
    step = next_step(m, ledger.envelope(), S)
    assert step.kind == FULL and step.idx == tuple(range(90))
    ledger.record_full("m", [FullRow("m", i, int(0.999 * S.n)) for i in step.idx], 0)
    a, certified = ledger.models["a"].certified, m.certified
    assert certified[0] == 100 and np.array_equal(certified, np.maximum(a, certified))
    assert m.exact_from == 0
    with pytest.raises(ValueError):
        ledger.record_probe("m", [])  # once only


def test_a_tie_it_would_lose_on_clean_accuracy_does_not_keep_a_model_alive():
    """A model whose bound only ties the envelope at a radius, with a clean accuracy (its
    bound at r = 0) below the winner's there, cannot win it by the tie rule: it is pruned.
    With a clean bound equal to the winner's it is not (the next rule could favour it), nor
    when the decision grid does not start at 0 (its first count is no clean accuracy)."""
    ledger = Ledger(S)
    first_level = int(ledger.thresholds(0.25)[0])  # certifies r = 0 only
    counts = [S.n] * 5 + [first_level] * 5
    for name, j in (("a", 1), ("b", 2)):
        ledger.arrive(name, j, 0.25, np.arange(10), np.zeros(10, np.int64))
        ledger.record_pilot(name, 1, [PilotRow(name, 1, i, 0, 1_000, 1_000) for i in range(10)])
        ledger.record_pilot(name, 2, [])
    ledger.record_full("a", [FullRow("a", i, c) for i, c in enumerate(counts)], 0)
    a, b, envelope = ledger.models["a"].certified, ledger.models["b"], ledger.envelope()
    assert a[0] == 10 and a[1] == 5 and a[-1] == 0
    assert list(ledger.clean()) == [10 if c else 0 for c in a]
    b.upper_curve = np.minimum(a, 9)  # ties "a" from r = 0.25 on, its clean accuracy ≤ 9
    assert could_win_from(b.upper_curve, envelope) == 1  # alive on the tie alone ...
    assert ledger.pruned(b, envelope)  # ... which it would lose: 9 < 10 at r = 0
    b.upper_curve = a.copy()  # the same clean accuracy: the next rule decides, not pruned
    assert not ledger.pruned(b, envelope) and ledger.status("b") == "piloted"
    shifted = Ledger(dataclasses.replace(S, radii=RADII[1:]))
    assert shifted.clean() is None  # no clean accuracy on a grid from 0.25


def _tied_pair(gap: int):
    """ "a" certified on all 10 points (clean accuracy 10, 5 points from r = 0.25 on); "b"
    certified from r = 0.25 on with the same 5 points there (a tie with "a"), its other
    points skipped, `gap` of them with a bound that could count at r = 0."""
    ledger = Ledger(S)
    first_level = int(ledger.thresholds(0.25)[0])  # certifies r = 0 only
    for name, j in (("a", 1), ("b", 2)):
        ledger.arrive(name, j, 0.25, np.arange(10), np.zeros(10, np.int64))
        ledger.record_pilot(name, 1, [PilotRow(name, 1, i, 0, 1_000, 1_000) for i in range(10)])
        ledger.record_pilot(name, 2, [])
    counts = [S.n] * 5 + [first_level] * 5
    ledger.record_full("a", [FullRow("a", i, c) for i, c in enumerate(counts)], 0)
    b = ledger.models["b"]
    b.upper[5:] = [1] * gap + [0] * (5 - gap)
    rows = [FullRow("b", i, S.n if i < 5 else SKIPPED) for i in range(10)]
    ledger.record_full("b", rows, 1)
    return ledger, first_level


def test_a_tie_the_model_could_win_on_clean_accuracy_is_completed_and_one_it_loses_is_not():
    """Step 5 of the planner: "b" ties "a" from r = 0.25 on with a clean accuracy of 5 to 10
    (its skipped points could count at r = 0): the tie rule could favour it, so once nothing
    else is to do its skipped points are drawn (COMPLETE, CERTIFY's n estimation draws) and
    its curve becomes full's at every radius. With a clean accuracy of at most 9 it surely
    loses the tie (10 for "a"): nothing is drawn. Not while anything else runs."""
    ledger, first_level = _tied_pair(gap=5)
    b = ledger.models["b"]
    assert b.exact_from == 1 and list(b.certified[:3]) == [5, 5, 5]
    # what the envelope search learns: the pilot's estimate below exact_from (all 1,000 votes
    # of 1,000: each skipped point at its plug-in level, which counts at r = 0), exact from it
    assert list(ledger.estimate(b)[:3]) == [10, 5, 5]
    assert completions(ledger) == [b]
    assert decide(ledger, {"c": PILOT}) == []  # something else may still break the tie
    steps = decide(ledger)
    assert steps == [Step(COMPLETE, "b", len(S.pilots) + 2, tuple(range(5, 10)), S.n)]
    ledger.record_complete("b", [FullRow("b", i, first_level) for i in range(5, 10)])
    assert b.exact_from == 0 and list(b.certified[:3]) == [10, 5, 5]
    assert np.array_equal(b.certified, ledger.models["a"].certified)
    assert completions(ledger) == [] and decide(ledger) == []
    loses, _ = _tied_pair(gap=4)
    assert completions(loses) == [] and decide(loses) == []
    shifted, _ = _tied_pair(gap=5)
    shifted.settings = dataclasses.replace(S, radii=RADII[1:])
    assert completions(shifted) == []  # no clean accuracy breaks a tie on a grid from 0.25
