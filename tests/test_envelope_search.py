"""The envelope search's policy (`sweeper.run.envelope_search`, `search_surrogate`): the math
of expected improvement, the features read off a grid, and the decisions on known landscapes.
Pure: no Ray, no storage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from sweeper.plan.grid import expand
from sweeper.plan.spaces import parse_spec
from sweeper.run.envelope_search import EnvelopeSearch
from sweeper.run.search_surrogate import Features, expected_improvement

RADII = [0.0, 0.25, 0.5, 0.75]


def grid(sigmas=(0.25, 0.5), eps=(0.25, 0.5, 1.0, 2.0), steps=(1, 2, 4), m=(1, 2, 4)):
    raw = {
        "fixed": {"dataset": "digits", "epochs": 2},
        "grids": [
            {
                "name": "sa",
                "fixed": {"method": "smoothadv", "attack": "pgd"},
                "axes": {
                    "sigma": list(sigmas),
                    "epsilon": list(eps),
                    "steps": list(steps),
                    "m_train": list(m),
                },
            }
        ],
    }
    spec, problems = parse_spec("t", raw)
    assert not problems, problems
    return expand(spec)


def cost(t) -> float:
    return float((t.steps + 1) * t.m_train)


def landscape(t) -> np.ndarray:
    """A smooth, unimodal curve per point: best ε grows with σ, m = 2 best, T hardly matters."""
    best_eps = 2 * t.sigma
    clean = 0.9 - 0.4 * t.sigma - 0.08 * math.log(t.epsilon / best_eps) ** 2
    clean -= 0.03 * math.log2(t.m_train / 2) ** 2 + 0.005 * t.steps
    return np.array([max(0.0, clean - r * (0.6 - t.sigma * 0.5)) for r in RADII])


# ------------------------------------------------------------------------ the math
def test_expected_improvement_is_exact_on_known_cases():
    s = np.array([[0.1]])
    # at the incumbent: s·φ(0)
    assert expected_improvement(np.array([[0.5]]), s, np.array([0.5]))[0, 0] == pytest.approx(
        0.1 * norm.pdf(0)
    )
    # far above: the difference itself; far below: nothing
    assert expected_improvement(np.array([[1.5]]), s, np.array([0.5]))[0, 0] == pytest.approx(1.0)
    assert expected_improvement(np.array([[-1.5]]), s, np.array([0.5]))[0, 0] == pytest.approx(
        0.0, abs=1e-12
    )
    # (μ − b)Φ(z) + sφ(z) at z = 1
    got = expected_improvement(np.array([[0.6]]), s, np.array([0.5]))[0, 0]
    assert got == pytest.approx(0.1 * norm.cdf(1) + 0.1 * norm.pdf(1))


def test_features_are_the_varying_axes_scaled_in_log_where_positive():
    trials = grid(sigmas=(0.25,), eps=(0.25, 1.0), steps=(1, 4), m=(1,))
    features = Features(trials)
    names = [p.name for p in features.parts]
    assert names == ["epsilon", "steps"]  # σ is the group; nothing else varies
    by = {(t.epsilon, t.steps): features.vector(t) for t in trials}
    assert by[(0.25, 1)].tolist() == [0.0, 0.0]
    assert by[(1.0, 4)].tolist() == [1.0, 1.0]
    # log scale: ε = 0.5 would sit halfway between 0.25 and 1.0
    assert np.allclose(by[(1.0, 1)], [1.0, 0.0])


def test_a_field_determined_by_the_kept_ones_is_no_feature():
    raw = {
        "fixed": {"dataset": "digits", "epochs": 2, "method": "smoothadv", "steps": 2},
        "grids": [
            {
                "name": "a",
                "axes": {"sigma": [0.25], "epsilon": [0.5, 1.0], "attack": ["pgd", "ddn"]},
            }
        ],
    }
    spec, problems = parse_spec("t", raw)
    assert not problems
    trials = expand(spec)
    names = [p.name for p in Features(trials).parts]
    assert "attack" in names and "ddn_gamma" not in names  # ddn_gamma follows the attack


# ------------------------------------------------------------------------ decisions
def run_search(trials, truth, tolerance=0.002, budget=None, limit=1000):
    costs = {t.trial_id: cost(t) for t in trials}
    search = EnvelopeSearch(trials, costs, RADII, tolerance, budget)
    order = []
    for _ in range(limit):
        decision = search.decide(set())
        if decision.kind != "train":
            return search, order, decision
        order.append(decision.trial_id)
        search.observe(decision.trial_id, truth[decision.trial_id])
    raise AssertionError("the search did not stop")


def test_the_search_finds_the_envelope_of_a_smooth_landscape_for_part_of_the_cost():
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    search, order, decision = run_search(trials, truth)
    true_envelope = np.max(list(truth.values()), axis=0)
    assert decision.kind == "stop" and decision.reason == "tolerance"
    assert np.abs(search.envelope() - true_envelope).max() <= 0.01
    spent = sum(cost(t) for t in trials if t.trial_id in order)
    assert spent < 0.6 * sum(cost(t) for t in trials)
    assert len(set(order)) == len(order)  # never the same point twice


def test_decisions_are_a_function_of_the_observations_not_their_order():
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    costs = {t.trial_id: cost(t) for t in trials}
    driver, order = EnvelopeSearch(trials, costs, RADII, 0.002), []
    while len(order) < 10 and (decision := driver.decide(set())).kind == "train":
        order.append(decision.trial_id)
        driver.observe(decision.trial_id, truth[decision.trial_id])
    first = EnvelopeSearch(trials, costs, RADII, 0.002)
    second = EnvelopeSearch(trials, costs, RADII, 0.002)
    for tid in order[:10]:
        first.observe(tid, truth[tid])
    for tid in reversed(order[:10]):
        second.observe(tid, truth[tid])
    assert first.decide(set()) == second.decide(set())


def test_hyperparameters_tuned_on_a_sample_keep_decisions_a_function_of_the_observations(
    monkeypatch,
):
    """Past TUNED_MODELS fitted models a radius's kernel is tuned on a fixed pseudo-random
    sample of them and reused while the sample is unchanged: a driver that decided after
    every model and a resumed one that observes them all at once predict the same."""
    from sweeper.run import search_surrogate

    monkeypatch.setattr(search_surrogate, "TUNED_MODELS", 8)
    tunings = []
    real = search_surrogate.Process.__init__

    def counted(self, x, y, points, kernel=None):
        tunings.append(kernel is None)
        real(self, x, y, points, kernel)

    monkeypatch.setattr(search_surrogate.Process, "__init__", counted)
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    costs = {t.trial_id: cost(t) for t in trials}
    driver, order = EnvelopeSearch(trials, costs, RADII, 0.0), []
    while len(order) < 20 and (decision := driver.decide(set())).kind == "train":
        order.append(decision.trial_id)
        driver.observe(decision.trial_id, truth[decision.trial_id])
    left = driver.untrained(set())
    before = driver.predict(left)
    tunings.clear()
    resumed = EnvelopeSearch(trials, costs, RADII, 0.0)
    for tid in order:
        resumed.observe(tid, truth[tid])
    for a, b in zip(before.values(), resumed.predict(left).values(), strict=True):
        np.testing.assert_allclose(a[0], b[0], atol=1e-9)
        np.testing.assert_allclose(a[1], b[1], atol=1e-9)
    # the resumed driver tuned each fitted radius once, on 8 models, and conditioned on 20
    assert sum(tunings) == len(RADII) and tunings.count(False) == len(RADII)
    assert driver.decide(set()) == resumed.decide(set())
    # a model outside the sample is conditioned on without tuning again
    rank = search_surrogate.tuning_rank
    sample = sorted(order, key=rank)[:8]
    outside = next(t for t in left if rank(t) > rank(sample[-1]))
    tunings.clear()
    resumed.observe(outside, truth[outside])
    resumed.predict(left[:1])
    assert tunings == [False] * len(RADII)


def test_the_first_point_of_a_sigma_is_its_cheapest():
    trials = grid()
    costs = {t.trial_id: cost(t) for t in trials}
    decision = EnvelopeSearch(trials, costs, RADII, 0.002).decide(set())
    chosen = next(t for t in trials if t.trial_id == decision.trial_id)
    assert decision.kind == "train" and cost(chosen) == min(costs.values())


def test_pending_points_are_not_proposed_and_waiting_is_not_stopping():
    trials = grid(sigmas=(0.25,), eps=(0.5,), steps=(1,), m=(1, 2))
    costs = {t.trial_id: cost(t) for t in trials}
    search = EnvelopeSearch(trials, costs, RADII, 0.002)
    first = search.decide(set()).trial_id
    second = search.decide({first}).trial_id
    assert second != first
    assert search.decide({first, second}).kind == "wait"  # every point is under way
    search.observe(first, [0.5, 0.4, 0.2, 0.1])
    search.observe(second, [0.6, 0.5, 0.3, 0.1])
    assert search.decide(set()).reason == "exhausted"


def test_a_pending_point_is_believed_at_its_prediction_so_its_neighbour_is_a_smaller_bet():
    """Kriging believer: conditioning on a pending model at its predicted curve leaves every
    prediction's mean where it was (it is what the process expected) and narrows the spread
    beside it, so a neighbour's expected gain falls: it is no longer the same bet twice."""
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    search = EnvelopeSearch(trials, {t.trial_id: cost(t) for t in trials}, RADII, 0.002)
    for _ in range(8):
        tid = search.decide(set()).trial_id
        search.observe(tid, truth[tid])
    a = search.universe[search.decide(set()).trial_id]
    b = next(  # a's neighbour along m_train
        t
        for t in trials
        if t.trial_id not in search.curves
        and t != a
        and (t.sigma, t.epsilon, t.steps) == (a.sigma, a.epsilon, a.steps)
    )
    alone = search.predict([b.trial_id, a.trial_id])
    believer, best = search._believed({a.trial_id})
    mean, std = believer.predict(
        np.stack([search.x[b.trial_id], search.x[a.trial_id]]), [b.sigma] * 2
    )
    np.testing.assert_allclose(mean[0], alone[b.trial_id][0], atol=1e-6)
    np.testing.assert_allclose(best, np.maximum(search.envelope(), alone[a.trial_id][0]))
    assert (std[0] <= alone[b.trial_id][1] + 1e-9).all() and (std[0] < alone[b.trial_id][1]).any()
    assert std[1].max() < alone[a.trial_id][1].max()  # a itself: nearly known now
    before = search.gains([b.trial_id], set())[b.trial_id]
    assert search.gains([b.trial_id], {a.trial_id})[b.trial_id] < before


def test_the_believer_s_update_is_the_process_fitted_to_observed_and_pending_models_together():
    """`Believer` conditions a fitted process on pending models by an update of its Cholesky
    factor: what scikit-learn's fit to both (the same kernel and constant mean) predicts,
    means and spreads, for believed accuracies that are not the predicted ones too."""
    from sweeper.run.search_process import Believer, Process

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(40, 3))
    y = 0.3 + 0.4 * np.sin(3 * x[:, 0]) * x[:, 1] + 0.02 * rng.standard_normal(40)
    seen = Process(x[:34], y[:34], points=500)
    joint = Process(x, y, points=500, kernel=seen.kernel, offset=seen.offset)
    believer = Believer(seen, x[34:], y[34:], points=500)
    at = np.vstack([rng.uniform(size=(25, 3)), x[:3]])
    for got, want in zip(believer.predict(at), joint.predict(at), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)


def test_a_process_conditioned_on_given_hyperparameters_skips_only_the_likelihood():
    """With its kernel given, a radius's process predicts what scikit-learn's own regressor
    fitted with that kernel predicts; the marginal likelihood it never reads is not computed.
    Tuning (no kernel given) still maximises it."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    from sweeper.run.search_process import Process

    rng = np.random.default_rng(1)
    x = rng.uniform(size=(30, 2))
    y = 0.5 + 0.3 * np.cos(4 * x[:, 0]) * x[:, 1]
    tuned = Process(x, y, points=500)
    assert np.isfinite(tuned.gp.log_marginal_likelihood_value_)
    given = Process(x, y, points=500, kernel=tuned.kernel)
    assert math.isnan(given.gp.log_marginal_likelihood_value_)
    plain = GaussianProcessRegressor(tuned.kernel, alpha=y * (1 - y) / 500 + 1e-6, optimizer=None)
    plain.fit(x, y - given.offset)
    at = rng.uniform(size=(12, 2))
    mean, std = plain.predict(at, return_std=True)
    np.testing.assert_allclose(given.gp.predict(at, return_std=True), (mean, std), atol=1e-12)


def test_the_budget_stops_the_search_before_a_point_would_pass_it():
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    _search, order, decision = run_search(trials, truth, budget=20.0)
    spent = sum(cost(t) for t in trials if t.trial_id in order)
    assert spent <= 20.0 and decision.kind == "stop" and decision.reason == "budget"


def test_diverged_models_are_observed_but_not_fitted():
    trials = grid(sigmas=(0.25,))
    costs = {t.trial_id: cost(t) for t in trials}
    search = EnvelopeSearch(trials, costs, RADII, 0.002, chance=0.1)
    for t in trials[:3]:
        search.observe(t.trial_id, [0.1, 0.0, 0.0, 0.0])  # at chance: diverged
    assert all(search.diverged(t.trial_id) for t in trials[:3])
    # nothing to learn a shape from: no process, no gain to expect, yet trained and counted
    assert search.predict([trials[5].trial_id])[trials[5].trial_id] is None
    assert search.spent(set()) == sum(costs[t.trial_id] for t in trials[:3])


def test_the_audit_is_deterministic_alternates_and_keeps_to_its_allowance():
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    search, order, _ = run_search(trials, truth)
    picks = search.audit_picks(allowance=30.0, seed_text="exp")
    assert picks == search.audit_picks(allowance=30.0, seed_text="exp")
    kinds = [why for _, why in picks]
    assert kinds[:2] == ["upper bound", "random"][: len(kinds[:2])]
    assert not {tid for tid, _ in picks} & set(order)
    costs = {t.trial_id: cost(t) for t in trials}
    assert sum(costs[tid] for tid, _ in picks[1:]) <= 30.0
    # the first pick is taken whatever it costs: an audit is never empty
    assert len(search.audit_picks(allowance=0.0, seed_text="exp")) == 1


# ------------------------------------------------------------------------ the cost of deciding
def searched(trials, truth, models: int) -> EnvelopeSearch:
    """A search that has trained its first `models` proposals."""
    search = EnvelopeSearch(trials, {t.trial_id: cost(t) for t in trials}, RADII, 0.002)
    for _ in range(models):
        tid = search.decide(set()).trial_id
        search.observe(tid, truth[tid])
    return search


def test_a_decision_is_remembered_until_an_observation_or_the_pending_set_changes(monkeypatch):
    """Tune asks for a trial again and again while the search waits: nothing new, nothing
    refitted or predicted; a new observation or pending trial decides afresh."""
    from sweeper.run import search_surrogate

    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    search = searched(trials, truth, 12)
    predictions: list[int] = []
    real = search_surrogate.Surrogate.predict
    monkeypatch.setattr(
        search_surrogate.Surrogate,
        "predict",
        lambda self, x, groups: predictions.append(len(x)) or real(self, x, groups),
    )
    first = search.decide(set())
    assert predictions and first.kind == "train"
    predictions.clear()
    assert search.decide(set()) == first and predictions == []
    assert search.decide({first.trial_id}).trial_id != first.trial_id  # pending: decided anew
    assert predictions
    predictions.clear()
    search.observe(first.trial_id, truth[first.trial_id])
    after = search.decide(set())
    assert predictions and after.trial_id != first.trial_id


def test_a_radius_whose_models_did_not_change_keeps_its_process(monkeypatch):
    """A model whose σ cannot reach a radius changes nothing there: that radius's process is
    not fitted again, and predicts as a fresh search of the same observations does."""
    from sweeper.run import search_surrogate

    fits: list[int] = []
    real = search_surrogate.Process.__init__

    def counted(self, x, y, points, kernel=None):
        fits.append(len(x))
        real(self, x, y, points, kernel)

    monkeypatch.setattr(search_surrogate.Process, "__init__", counted)
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    for t in trials:  # σ = 0.25 cannot certify at the last radius
        truth[t.trial_id][-1] = 0.0 if t.sigma == 0.25 else truth[t.trial_id][-1]
    costs = {t.trial_id: cost(t) for t in trials}
    search = EnvelopeSearch(trials, costs, RADII, 0.0)
    low = [t.trial_id for t in trials if t.sigma == 0.25]
    high = [t.trial_id for t in trials if t.sigma == 0.5]
    for tid in low[:4] + high[:4]:
        search.observe(tid, truth[tid])
    left = search.untrained(set())
    search.predict(left)
    fits.clear()
    search.observe(low[4], truth[low[4]])
    kept = search.predict(left)
    assert len(fits) == len(RADII) - 1  # every radius but the last, which σ = 0.25 cannot reach
    fresh = EnvelopeSearch(trials, costs, RADII, 0.0)
    for tid in [*low[:5], *high[:4]]:
        fresh.observe(tid, truth[tid])
    for a, b in zip(kept.values(), fresh.predict(left).values(), strict=True):
        np.testing.assert_allclose(a[0], b[0], atol=1e-9)
        np.testing.assert_allclose(a[1], b[1], atol=1e-9)


def test_the_surrogate_fits_and_predicts_on_one_blas_thread(monkeypatch):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from threadpoolctl import threadpool_info

    seen: list[int] = []
    real = GaussianProcessRegressor.fit

    def fit(self, x, y):
        seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
        return real(self, x, y)

    monkeypatch.setattr(GaussianProcessRegressor, "fit", fit)
    trials = grid()
    truth = {t.trial_id: landscape(t) for t in trials}
    searched(trials, truth, 8)
    assert seen and set(seen) == {1}
