"""Properties of the pure math, over generated inputs (hypothesis): CERTIFY's certificate as
a function of the counts, PREDICT's abstention, the envelope, grid expansion.

Examples are derandomized (the same ones on every run, see conftest.py), so a failure here
is a reproducible counterexample, never a flake."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest, norm
from statsmodels.stats.proportion import proportion_confint

from sweeper.plan.grid import expand
from sweeper.plan.spaces import parse_spec
from sweeper.results.envelope import certified_accuracy, envelope, envelope_curve, model_table
from trainables.kernel.certificates import (
    ABSTAIN,
    certificate_from_counts,
    lower_confidence_bound,
    max_radius,
    predict_from_counts,
    radius_from_counts,
)

alphas = st.sampled_from([1e-4, 0.001, 0.01, 0.05, 0.1, 0.25])
sigmas = st.sampled_from([0.12, 0.25, 0.5, 1.0])


@st.composite
def counts_pair(draw, max_n: int = 200_000):
    """(nA, nB, n) with 0 <= nA <= nB <= n."""
    n = draw(st.integers(1, max_n))
    a, b = sorted(draw(st.integers(0, n)) for _ in range(2))
    return a, b, n


# ---------------------------------------------------------------- CERTIFY's certificate
@given(counts_pair(), alphas, sigmas)
def test_certificate_is_monotone_in_the_votes(counts, alpha, sigma):
    """More votes for the selected class never lower p_lower or the radius, nor turn a
    certificate into an abstention."""
    fewer, more, n = counts
    low = certificate_from_counts(3, fewer, n, alpha, sigma)
    high = certificate_from_counts(3, more, n, alpha, sigma)
    assert low.p_lower <= high.p_lower
    assert low.radius <= high.radius
    assert low.prediction == ABSTAIN or high.prediction == 3


@given(st.integers(1, 500_000), st.data(), alphas, sigmas)
def test_radius_is_at_most_sigma_times_the_probit_of_alpha_to_the_one_over_n(n, data, alpha, sigma):
    """σ·Φ⁻¹(α^(1/n)) (all n votes for the class) bounds every radius CERTIFY gives with n
    samples at level α; the bound is reached at nA = n."""
    bound = max_radius(sigma, n, alpha)
    nA = data.draw(st.integers(0, n))
    p_lower, radius = radius_from_counts(nA, n, alpha, sigma)
    assert 0.0 <= p_lower <= alpha ** (1 / n) * (1 + 1e-12)
    assert 0.0 <= radius <= max(bound, 0.0) * (1 + 1e-12) + 1e-15
    assert radius_from_counts(n, n, alpha, sigma)[1] == pytest.approx(max(bound, 0.0), rel=1e-9)


@given(counts_pair(max_n=100_000), alphas, sigmas)
def test_certificate_is_the_clopper_pearson_bound_and_its_probit(counts, alpha, sigma):
    nA, _, n = counts
    expected = proportion_confint(nA, n, alpha=2 * alpha, method="beta")[0]
    expected = 0.0 if nA == 0 else expected
    cert = certificate_from_counts(5, nA, n, alpha, sigma)
    assert cert.p_lower == pytest.approx(expected, rel=1e-9, abs=1e-12)
    if cert.p_lower < 0.5:
        assert (cert.prediction, cert.radius) == (ABSTAIN, 0.0)
    else:
        assert cert.prediction == 5
        assert cert.radius == pytest.approx(sigma * norm.ppf(cert.p_lower), rel=1e-9, abs=1e-12)
    assert (cert.nA, cert.n) == (nA, n)


@given(st.lists(counts_pair(max_n=10_000), min_size=1, max_size=20), alphas, sigmas)
def test_vectorised_counts_equal_one_at_a_time(rows, alpha, sigma):
    nA = np.array([r[0] for r in rows])
    n = np.array([r[2] for r in rows])
    p_lower, radius = radius_from_counts(nA, n, alpha, sigma)
    assert np.array_equal(p_lower, lower_confidence_bound(nA, n, alpha))
    for i, (a, _, m) in enumerate(rows):
        assert (p_lower[i], radius[i]) == radius_from_counts(a, m, alpha, sigma)


# ---------------------------------------------------------------- PREDICT
@given(st.lists(st.integers(0, 400), min_size=2, max_size=10), alphas)
def test_predict_abstains_iff_the_binomial_test_of_the_top_two_does_not_reject(counts, alpha):
    top, second = sorted(counts, reverse=True)[:2]
    result = predict_from_counts(counts, alpha)
    rejects = top + second > 0 and binomtest(top, top + second, 0.5).pvalue <= alpha
    if rejects:
        assert result == int(np.argmax(counts)) and counts[result] == top > second
    else:
        assert result == ABSTAIN


# ---------------------------------------------------------------- the envelope
@st.composite
def results_frames(draw):
    """A results frame: 1-5 models (some under two cert_ids) of 1-12 points, radii on a coarse
    grid so that ties between models and radii equal to a level are common."""
    rows = []
    for m in range(draw(st.integers(1, 5))):
        trial = f"t{draw(st.integers(0, 3))}{m}"
        cert = draw(st.sampled_from(["c0", "c1"]))
        for idx in range(draw(st.integers(1, 12))):
            correct = draw(st.booleans())
            radius = draw(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 1.5]))
            rows.append(
                {
                    "trial_id": trial,
                    "cert_id": cert,
                    "idx": idx,
                    "correct": correct,
                    "radius": radius if correct else 0.0,
                    "predict": 1 if correct else -1,
                    "sigma": 0.25 * (1 + m % 2),
                    "method": "gaussian",
                }
            )
    frame = pd.DataFrame(rows).drop_duplicates(["trial_id", "cert_id", "idx"])
    return frame.reset_index(drop=True)


RADII = [0.0, 0.25, 0.5, 0.6, 1.0, 1.5, 2.0]


def _by_hand(frame: pd.DataFrame, r: float) -> dict[tuple[str, str], float]:
    """Each model's certified accuracy at r: the share of its points correct with radius >= r."""
    ok = frame["correct"] & (frame["radius"] >= r)
    return ok.groupby([frame["trial_id"], frame["cert_id"]]).mean().to_dict()


@settings(max_examples=50)
@given(results_frames())
def test_the_envelope_is_the_best_model_at_each_radius_with_the_documented_ties(frame):
    table = envelope(frame, RADII)
    clean = _by_hand(frame, 0.0)
    for row in table.itertuples():
        accuracy = _by_hand(frame, row.radius)
        best = max(accuracy.values())
        assert row.certified_accuracy == pytest.approx(best, abs=1e-12)
        tied = [k for k, v in accuracy.items() if math.isclose(v, best, abs_tol=1e-12)]
        top_clean = max(clean[k] for k in tied)
        winner = min(k for k in tied if math.isclose(clean[k], top_clean, abs_tol=1e-12))
        assert (row.trial_id, row.cert_id) == winner
        assert row.models == len(accuracy)
    assert (np.diff(table["certified_accuracy"]) <= 1e-12).all()  # non-increasing in r


@settings(max_examples=50)
@given(results_frames())
def test_the_envelope_is_the_max_of_the_curves(frame):
    curves = certified_accuracy(frame, RADII)
    table = envelope(frame, RADII)
    assert np.allclose(table["certified_accuracy"], curves.max(axis=0).to_numpy())
    assert np.allclose(envelope_curve(frame, np.asarray(RADII)), curves.max(axis=0).to_numpy())
    models = model_table(frame)
    for i, model in models.iterrows():
        expected = _by_hand(frame, 0.0)[(model.trial_id, model.cert_id)]
        assert model.clean_acc == pytest.approx(expected)
        assert curves.iloc[i].tolist() == pytest.approx(
            [_by_hand(frame, r)[(model.trial_id, model.cert_id)] for r in RADII]
        )


@settings(max_examples=50)
@given(results_frames(), st.randoms(use_true_random=False), st.sampled_from([None, "sigma"]))
def test_the_envelope_does_not_depend_on_the_order_of_the_rows(frame, rng, by):
    order = list(range(len(frame)))
    rng.shuffle(order)
    shuffled = frame.iloc[order].reset_index(drop=True)
    pd.testing.assert_frame_equal(envelope(frame, RADII, by), envelope(shuffled, RADII, by))
    per_model = ["trial_id", "cert_id", "points", "clean_acc", "acr", "abstain_rate", "sigma"]
    pd.testing.assert_frame_equal(model_table(frame)[per_model], model_table(shuffled)[per_model])


# ---------------------------------------------------------------- grid expansion
axis_values = {
    "sigma": st.lists(st.sampled_from([0.12, 0.25, 0.5, 1.0]), min_size=1, max_size=4, unique=True),
    "epsilon": st.lists(
        st.sampled_from([0.25, 0.5, 1.0, 2.0]), min_size=1, max_size=4, unique=True
    ),
    "steps": st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True),
    "m_train": st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True),
    "attack": st.lists(st.sampled_from(["pgd", "ddn"]), min_size=1, max_size=2, unique=True),
}


@settings(max_examples=40)
@given(st.lists(st.fixed_dictionaries({}, optional=axis_values), min_size=1, max_size=3))
def test_grid_expansion_gives_the_product_of_the_axes(grids):
    """Each grid gives the product of its axes' lengths (the grids differ in seed, so no two
    trials coincide); the trials are distinct and vary exactly along the axes."""
    raw = {
        "fixed": {"dataset": "digits", "method": "smoothadv", "attack": "pgd", "epochs": 1},
        "grids": [
            {"name": f"g{i}", "fixed": {"seed": i}, "axes": axes} for i, axes in enumerate(grids)
        ],
    }
    spec, problems = parse_spec("prop", raw)
    assert not problems, problems
    trials = expand(spec)
    assert len(trials) == sum(math.prod(len(v) for v in axes.values()) for axes in grids)
    assert len({t.trial_id for t in trials}) == len(trials)
    for i, axes in enumerate(grids):
        mine = [t for t in trials if t.seed == i]
        for key, values in axes.items():
            assert sorted({getattr(t, key) for t in mine}, key=str) == sorted(values, key=str)


@given(st.integers(2, 10**6), alphas)
def test_lower_bound_is_below_the_point_estimate(n, alpha):
    for nA in (1, n // 3, n - 1):
        assert lower_confidence_bound(nA, n, alpha) <= nA / n
