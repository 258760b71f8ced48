"""Empirical robustness: SmoothAdv-PGD against the smoothed classifier, then PREDICT."""

from __future__ import annotations

import pytest
import torch

from trainables import empirical_robustness
from trainables.datasets import load_dataset
from trainables.kernel.certificates import ABSTAIN
from trainables.kernel.config import TrialConfig
from trainables.smoothing import Smooth
from trainables.train import fit

SIGMA = 0.25
N, ALPHA, BATCH = 100, 0.001, 1000
POINTS = 24


@pytest.fixture(scope="module")
def model():
    cfg = TrialConfig(
        dataset="digits",
        method="gaussian",
        sigma=SIGMA,
        m_train=1,
        epochs=4,
        batch_size=64,
        lr=0.02,
        eval_subset=64,
    )
    net = fit(cfg, None, device=torch.device("cpu")).model.eval()
    net.zero_grad(set_to_none=True)  # the attacks must not leave parameter gradients
    return net


@pytest.fixture(scope="module")
def points():
    test = load_dataset("digits", "test")
    x = torch.stack([test[i][0] for i in range(POINTS)])
    y = torch.tensor([test[i][1] for i in range(POINTS)])
    return x, y


def run(model, points, epsilon, estimator="plugin", m_test=8, steps=10, seed=0):
    x, y = points
    return empirical_robustness.attack_and_predict(
        model,
        x,
        y,
        SIGMA,
        epsilon,
        steps,
        m_test,
        N,
        ALPHA,
        BATCH,
        estimator=estimator,
        generator=torch.Generator().manual_seed(seed),
    )


@pytest.fixture(scope="module")
def clean(model, points):
    return run(model, points, epsilon=0.0)


@pytest.fixture(scope="module")
def attacked(model, points):
    return run(model, points, epsilon=1.0)


def test_epsilon_zero_is_clean_predict_with_the_same_generator(model, points, clean):
    x, y = points
    smooth = Smooth(model, 10, SIGMA)
    g = torch.Generator().manual_seed(0)
    expected = [smooth.predict(xi, N, ALPHA, BATCH, generator=g) for xi in x]
    assert [r.prediction for r in clean] == expected
    assert [r.label for r in clean] == y.tolist()
    assert all(r.perturbation_norm == 0.0 for r in clean)
    assert all(r.correct == (r.prediction == r.label) for r in clean)
    assert empirical_robustness.accuracy(clean) > 0.6  # the model is a useful smoothed classifier


def test_epsilon_zero_draws_no_attack_noise(model, points):
    """With few, very noisy votes PREDICT depends on every draw: still the same predictions."""
    x, y = points

    def clean_predict(seed):
        g = torch.Generator().manual_seed(seed)
        return [Smooth(model, 10, 1.0).predict(xi, 10, 0.3, BATCH, generator=g) for xi in x]

    assert clean_predict(0) != clean_predict(1)  # the check below is sensitive
    results = empirical_robustness.attack_and_predict(
        model, x, y, 1.0, 0.0, 10, 8, 10, 0.3, BATCH, generator=torch.Generator().manual_seed(0)
    )
    assert [r.prediction for r in results] == clean_predict(0)


def test_one_result_per_input_within_the_ball(attacked):
    assert len(attacked) == POINTS
    assert all(isinstance(r, empirical_robustness.EmpiricalResult) for r in attacked)
    assert all(0 < r.perturbation_norm <= 1.0 + 1e-5 for r in attacked)
    assert all(r.correct == (r.prediction == r.label) for r in attacked)
    assert all(not r.correct for r in attacked if r.abstained)
    assert all(r.prediction == ABSTAIN or 0 <= r.prediction < 10 for r in attacked)


def test_attack_lowers_accuracy_below_clean_smoothed_accuracy(clean, attacked):
    assert empirical_robustness.accuracy(attacked) <= empirical_robustness.accuracy(clean)
    assert empirical_robustness.accuracy(attacked) < empirical_robustness.accuracy(clean) - 0.2


def test_stein_estimator_runs_and_is_weaker_than_the_plugin_attack(model, points, attacked):
    stein = run(model, points, epsilon=1.0, estimator="stein")
    assert len(stein) == POINTS
    assert all(r.perturbation_norm <= 1.0 + 1e-5 for r in stein)
    assert all(p.grad is None for p in model.parameters())
    assert empirical_robustness.accuracy(attacked) <= empirical_robustness.accuracy(
        stein
    )  # paper, appendix C.6


def test_attack_and_predict_run_in_eval_mode_batched_and_restore_the_model(points):
    x, y = points
    calls: list[tuple[bool, int]] = []
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).train()
    net.register_forward_pre_hook(lambda mod, args: calls.append((mod.training, len(args[0]))))
    with torch.no_grad():
        x_adv = empirical_robustness.smoothadv_attack(
            net, x[:5], y[:5], SIGMA, 0.5, steps=3, m_test=4
        )
    assert calls == [(False, 5 * 4)] * 3  # one forward per step for all inputs and noises
    assert x_adv.shape == (5, 1, 8, 8)
    assert (x_adv - x[:5]).flatten(1).norm(dim=1).min() > 0.4  # it did move
    calls.clear()
    results = empirical_robustness.attack_and_predict(
        net, x[:5], y[:5], SIGMA, 0.5, 3, 4, 8, 0.5, 100
    )
    assert len(results) == 5 and calls[:3] == [(False, 5 * 4)] * 3
    assert len(calls) > 3 and not any(training for training, _ in calls)  # PREDICT too
    assert net.training and all(p.requires_grad for p in net.parameters())


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"estimator": "nope"}, "unknown estimator \x27nope\x27"),
        (
            {"epsilon": -1.0},
            r"need sigma > 0, epsilon >= 0, steps >= 1, m_test >= 1 \(got 0\.25, -1\.0, 2, 2\)",
        ),
        ({"m_test": 0}, r"m_test >= 1 \(got 0\.25, 0\.5, 2, 0\)"),
        ({"steps": 0}, r"steps >= 1, m_test >= 1 \(got 0\.25, 0\.5, 0, 2\)"),
        ({"sigma": 0.0}, r"need sigma > 0, .* \(got 0\.0, 0\.5, 2, 2\)"),
    ],
)
def test_invalid_arguments_are_rejected(points, bad, message):
    x, y = points
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    args = {"sigma": SIGMA, "epsilon": 0.5, "steps": 2, "m_test": 2, **bad}
    with pytest.raises(ValueError, match=message):
        empirical_robustness.smoothadv_attack(net, x[:2], y[:2], **args)
