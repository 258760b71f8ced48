"""CERTIFY / PREDICT of `trainables.smoothing` against reference statistics and classifiers
whose smoothed behaviour is known in closed form (constant, linear, coin-flip)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import beta, binom, binomtest, norm
from statsmodels.stats.proportion import proportion_confint
from torch import nn

from trainables.certify_points import certify_points, point_generators, run_mode, seed_for
from trainables.kernel.certificates import (
    ABSTAIN,
    certificate_from_counts,
    lower_confidence_bound,
    max_radius,
    predict_from_counts,
    radius_from_counts,
)
from trainables.kernel.stage_settings import CertifySpec
from trainables.models import NormalizeLayer
from trainables.smoothing import Smooth

SHAPE = (1, 4, 4)
ALPHAS = (0.001, 0.01, 0.05)
COUNTS = sorted(
    {(nA, n) for n in (1, 10, 100, 1000, 100_000) for nA in (0, 1, n // 2, n - 1, n)}
    | {(52, 100), (600, 1000), (99_990, 100_000)}
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class ConstantClassifier(nn.Module):
    """Always votes for `label`, whatever the input."""

    def __init__(self, label: int, num_classes: int = 10):
        super().__init__()
        self.label, self.num_classes = label, num_classes

    def forward(self, x):
        logits = torch.zeros(x.shape[0], self.num_classes)
        logits[:, self.label] = 1.0
        return logits


class LinearBinary(nn.Sequential):
    """Class 1 iff a·x + c > 0 in pixel space, built behind a NormalizeLayer (as every model in
    `trainables.models`), so a wrong noise space would show up as a wrong radius."""

    MEAN, SD = 0.3, 0.5

    def __init__(self, seed: int = 0):
        gen = _gen(seed)
        a = torch.randn(math.prod(SHAPE), generator=gen)
        self.a, self.c = a, float(-(a * 0.5).sum())  # the centre 0.5·1 lies on the hyperplane
        linear = nn.Linear(a.numel(), 2)
        with torch.no_grad():  # logit₁ − logit₀ = (a·s)·z + c + a·μ·1 with z = (x − μ)/s
            linear.weight.zero_()
            linear.weight[1] = a * self.SD
            linear.bias.copy_(torch.tensor([0.0, self.c + float(a.sum()) * self.MEAN]))
        super().__init__(NormalizeLayer((self.MEAN,), (self.SD,)), nn.Flatten(), linear)

    def signed_distance(self, xs: torch.Tensor) -> torch.Tensor:
        """ℓ2 distance (pixel units) of each input to the decision hyperplane, signed by side."""
        return (xs.flatten(1) @ self.a + self.c) / self.a.norm()

    def at_distances(self, distances) -> torch.Tensor:
        """Inputs at the given signed distances from the hyperplane, along its normal."""
        d = torch.as_tensor(distances, dtype=torch.float32).unsqueeze(1)
        return (0.5 + d * self.a / self.a.norm()).view(-1, *SHAPE)


class CoinFlip(nn.Module):
    """Class 1 iff pixel (0,0,0) exceeds `threshold`: at x = threshold it is a fair coin
    under noise; far below or above it, it is (nearly) deterministic."""

    def __init__(self, threshold: float = 0.0):
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        up = (x[:, 0, 0, 0] > self.threshold).float()
        return torch.stack([1 - up, up, torch.zeros_like(up)], dim=1)


class PixelArgmax(nn.Module):
    """Votes for the brightest of the first `num_classes` pixels."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes

    def forward(self, x):
        return x.flatten(1)[:, : self.num_classes]


class SwitchAfter(nn.Module):
    """Votes `first` for the first `switch` noisy samples it is shown (counted over every
    forward call), `then` for every later one: CERTIFY's selection draws (n0 per point) see
    one class, its estimation draws (n per point) another."""

    def __init__(self, switch: int, first: int, then: int, num_classes: int = 3):
        super().__init__()
        self.switch, self.first, self.then, self.num_classes = switch, first, then, num_classes
        self.seen = 0

    def forward(self, x):
        order = torch.arange(self.seen, self.seen + x.shape[0])
        self.seen += x.shape[0]
        votes = torch.where(order < self.switch, self.first, self.then)
        return nn.functional.one_hot(votes, self.num_classes).float()


def _one_hot_inputs(labels) -> torch.Tensor:
    """One input per label, with pixel number `label` lit (1.0) and the others dark."""
    xs = torch.zeros(len(labels), *SHAPE)
    xs.view(len(labels), -1)[torch.arange(len(labels)), torch.as_tensor(labels)] = 1.0
    return xs


# ---------------------------------------------------------------- confidence bound and radius


@pytest.mark.parametrize("alpha", ALPHAS)
def test_lower_confidence_bound_matches_statsmodels(alpha):
    for nA, n in COUNTS:
        expected = proportion_confint(nA, n, alpha=2 * alpha, method="beta")[0]
        assert lower_confidence_bound(nA, n, alpha) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert lower_confidence_bound(0, 1000, alpha) == 0.0
    assert lower_confidence_bound(1000, 1000, alpha) == pytest.approx(alpha ** (1 / 1000))


@pytest.mark.parametrize("alpha", ALPHAS)
def test_lower_confidence_bound_is_beta_ppf_bit_for_bit(alpha):
    """The bound is computed with `scipy.special.betaincinv`, not `scipy.stats.beta.ppf` (the
    import cost a new worker 0.5 s): the same numbers, every count of the published n (100,000)
    and of small and large n, on the scipy installed (they differ in scipy 1.11: cephes)."""
    for n in (1, 2, 10, 100, 1_000, 100_000, 2_000_000):
        nA = np.unique(np.linspace(1, n, min(n, 100_001)).astype(np.int64)).astype(np.float64)
        np.testing.assert_array_equal(
            lower_confidence_bound(nA, n, alpha), beta.ppf(alpha, nA, n - nA + 1)
        )


def test_the_bound_and_radius_do_not_import_scipy_stats():
    """A shard's worker computes its certificates without loading `scipy.stats`."""
    code = (
        "import sys; from trainables.kernel.certificates import radius_from_counts; "
        "radius_from_counts([9, 0, 990], [10, 10, 1000], 0.001, 0.25); "
        "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("sigma", [0.12, 0.5, 1.0])
def test_radius_is_sigma_times_probit_or_abstain(alpha, sigma):
    outcomes = set()
    for nA, n in COUNTS:
        p = proportion_confint(nA, n, alpha=2 * alpha, method="beta")[0]
        p_lower, radius = radius_from_counts(nA, n, alpha, sigma)
        cert = certificate_from_counts(7, nA, n, alpha, sigma)
        assert p_lower == pytest.approx(p, rel=1e-9, abs=1e-12)
        if p >= 0.5:
            assert radius == pytest.approx(sigma * norm.ppf(p), rel=1e-9, abs=1e-12)
            assert (cert.prediction, cert.nA, cert.n) == (7, nA, n)
        else:
            assert radius == 0.0
            assert cert.prediction == ABSTAIN
        assert cert.radius == pytest.approx(radius)
        outcomes.add(cert.prediction)
    assert outcomes == {7, ABSTAIN}


def test_vectorised_counts_equal_scalar_ones():
    nA, n = (np.array(v) for v in zip(*COUNTS, strict=True))
    for alpha, sigma in [(0.001, 0.25), (0.05, 1.0)]:
        bounds = lower_confidence_bound(nA, n, alpha)
        p_lower, radii = radius_from_counts(nA, n, alpha, sigma)
        assert bounds.shape == radii.shape == (len(COUNTS),)
        for i, (a, m) in enumerate(COUNTS):
            assert bounds[i] == lower_confidence_bound(a, m, alpha)
            assert (p_lower[i], radii[i]) == radius_from_counts(a, m, alpha, sigma)


def test_scalar_counts_give_python_floats_and_arrays_give_arrays():
    """One (nA, n) gives plain floats (they go into JSON and Parquet rows as they are);
    arrays give arrays of the same shape."""
    p_lower, radius = radius_from_counts(990, 1000, 0.001, 0.25)
    bound = lower_confidence_bound(990, 1000, 0.001)
    assert type(p_lower) is float and type(radius) is float and type(bound) is float
    assert json.loads(json.dumps([p_lower, radius, bound])) == [p_lower, radius, bound]
    p_lower, radius = radius_from_counts(np.array([[990], [10]]), 1000, 0.001, 0.25)
    assert p_lower.shape == radius.shape == (2, 1) and radius[1, 0] == 0.0


def test_max_radius_value():
    assert round(max_radius(1.0, 100_000, 0.001), 4) == 3.8115
    assert max_radius(0.25, 100_000, 0.001) == pytest.approx(0.25 * 3.8115, abs=1e-4)


def test_max_radius_is_computed_in_float64_whatever_the_dtype_of_n():
    """The bound every stored radius is checked against: 1/n in float32 (1/1000 is
    0.0010000000475) would move it, so a count column read as float32 gives the same bound."""
    from scipy.special import ndtri

    n = np.array([100_000, 1_000, 7])
    exact = 0.5 * ndtri(np.power(0.001, 1.0 / n.astype(np.float64)))
    for given in (n, n.astype(np.float32), n.astype(np.int32)):
        assert np.array_equal(max_radius(0.5, given, 0.001), exact), given.dtype


# ---------------------------------------------------------------- CERTIFY


@pytest.mark.parametrize("sigma", [0.25, 0.5])
def test_constant_classifier_certifies_the_largest_radius(sigma):
    n, alpha = 100_000, 0.001
    smooth = Smooth(ConstantClassifier(3), num_classes=10, sigma=sigma)
    cert = smooth.certificate(torch.rand(SHAPE), 100, n, alpha, 25_000, _gen())
    expected = sigma * norm.ppf(alpha ** (1 / n))
    assert (cert.prediction, cert.nA, cert.n) == (3, n, n)
    assert cert.radius == pytest.approx(expected, rel=1e-9)
    assert max_radius(sigma, n, alpha) == pytest.approx(expected, rel=1e-12)
    assert round(cert.radius / sigma, 4) == 3.8115


def _failure_probabilities(distances: np.ndarray, sigma, alpha, n0, n) -> np.ndarray:
    """Per point of the linear classifier, the exact probability that CERTIFY's answer is
    wrong (a certified wrong class, or a radius beyond the true distance |d|), from the vote
    share Φ(d/σ) alone (scipy, not the module under test). Selection: class 1 iff it wins
    more than half of the n0 votes (a tie goes to class 0, as argmax does). Then nA ~
    Bin(n, share of the selected class); a right class fails iff σ·Φ⁻¹(p_lower) > |d|, i.e.
    p_lower > Φ(|d|/σ); a wrong class fails iff it is certified (p_lower >= 1/2)."""
    k = np.arange(n + 1)
    bound = np.where(k > 0, beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)
    share1 = norm.cdf(distances / sigma)
    select1 = binom.sf(n0 // 2, n0, share1)
    truth = (distances > 0).astype(int)
    failure = np.zeros(len(distances))
    for cls, chosen in ((1, select1), (0, 1 - select1)):
        share = share1 if cls == 1 else 1 - share1
        right = (truth == cls)[:, None]
        fails = np.where(right, bound > norm.cdf(np.abs(distances) / sigma)[:, None], bound >= 0.5)
        failure += chosen * (binom.pmf(k, n, share[:, None]) * fails).sum(axis=1)
    return failure


def test_certify_fails_as_often_as_the_confidence_level_says_on_a_linear_classifier():
    """Certified radius > true distance, or a wrong class: each point fails with an exact
    probability (≤ α) computable for the linear classifier. The count of failures over 1000
    points must lie within 5 standard deviations of its expectation (~168 at α = 0.2: a large
    α makes the test sharp): using 2α gives ~328 failures, α/2 ~55, both far outside."""
    sigma, alpha, n0, n, points = 0.25, 0.2, 64, 500, 1000
    model = LinearBinary(seed=1)
    distances = (torch.rand(points, generator=_gen(2)) * 2 - 1) * 2.5 * sigma
    xs = model.at_distances(distances)
    certs = Smooth(model, 2, sigma).certify_batch(xs, n0, n, alpha, 10_000, _gen(3))
    failures = certified = 0
    for cert, d in zip(certs, distances.tolist(), strict=True):
        if cert.prediction == ABSTAIN:
            continue
        certified += 1
        failures += cert.prediction != int(d > 0) or cert.radius > abs(d)
    p = _failure_probabilities(distances.double().numpy(), sigma, alpha, n0, n)
    assert (p <= alpha + 1e-12).all()  # the guarantee, point by point
    mean, sd = p.sum(), np.sqrt((p * (1 - p)).sum())
    assert certified >= points // 2
    assert abs(failures - mean) <= 5 * sd, (failures, mean, sd)


def test_certified_radius_is_tight_on_a_linear_classifier():
    """The smoothed linear classifier's exact robust radius is the distance itself, so with
    many samples the certificate lies just below it (z_α·SE/φ ≈ 0.03σ … 0.05σ here); n0 is
    large enough that the selection step never picks the minority class (which would abstain)."""
    sigma, alpha = 0.25, 1e-4
    model = LinearBinary(seed=4)
    distances = torch.tensor([0.25, -0.5, 1.0, -1.5]) * sigma
    xs = model.at_distances(distances)
    assert torch.allclose(model.signed_distance(xs), distances, atol=1e-5)
    certs = Smooth(model, 2, sigma).certify_batch(xs, 1000, 20_000, alpha, 40_000, _gen(5))
    for cert, d in zip(certs, distances.tolist(), strict=True):
        assert cert.prediction == int(d > 0)
        assert abs(d) - 0.1 * sigma < cert.radius < abs(d)
        if abs(d) >= sigma:
            assert cert.radius > 0.92 * abs(d)


def test_vote_shares_follow_the_gaussian_in_pixel_space():
    """P(f(x + ε) = 1) = Φ(d/σ) for the linear classifier: checks the noise scale and space."""
    sigma, num = 0.5, 20_000
    model = LinearBinary(seed=6)
    distances = torch.tensor([-0.6, -0.1, 0.0, 0.3, 0.8])
    counts = Smooth(model, 2, sigma).sample_counts(model.at_distances(distances), num, 7_000)
    expected = norm.cdf(distances.numpy() / sigma)
    se = np.sqrt(expected * (1 - expected) / num)
    assert np.all(np.abs(counts[:, 1].numpy() / num - expected) < 5 * se)


@pytest.mark.parametrize(("points", "batch_size"), [(1, 7), (1, 1000), (5, 13), (5, 4000)])
def test_certify_selects_the_class_from_the_n0_draws_and_counts_it_in_the_n_fresh_ones(
    points, batch_size
):
    """The selection/estimation split is what makes the bound valid: the class is chosen from
    the n0 draws only and its votes are counted among n other draws. A classifier that votes
    class 0 on the n0 draws and class 1 on the n draws must abstain (nA = 0 votes for the
    selected class 0), although class 1 has every one of the n votes."""
    n0, n, alpha = 10, 500, 0.001
    model = SwitchAfter(switch=points * n0, first=0, then=1)
    certs = Smooth(model, 3, 0.25).certify_batch(
        torch.rand(points, *SHAPE), n0, n, alpha, batch_size, _gen()
    )
    assert model.seen == points * (n0 + n)  # n0 + n draws per point, no more, no fewer
    for cert in certs:
        assert (cert.prediction, cert.radius, cert.nA, cert.n) == (ABSTAIN, 0.0, 0, n)
        assert cert.p_lower == 0.0


def test_certify_keeps_the_n0_class_when_the_n_draws_agree():
    """The same switching classifier certifies when both stages vote alike (the test above
    abstains because of the split, not because the classifier cannot be certified)."""
    n0, n, alpha, sigma = 10, 500, 0.001, 0.25
    model = SwitchAfter(switch=n0, first=2, then=2)
    cert = Smooth(model, 3, sigma).certificate(torch.rand(SHAPE), n0, n, alpha, 64, _gen())
    assert (cert.prediction, cert.nA, cert.n) == (2, n, n)
    assert cert.radius == pytest.approx(max_radius(sigma, n, alpha), rel=1e-12)


# (nA, n, α) whose Clopper–Pearson bound is exactly 1/2 in floating point: α^(1/n) = 1/2 when
# nA = n, and the median of the symmetric Beta(nA, nA) when n = 2·nA − 1 and α = 1/2.
EXACT_HALF = [(1, 1, 0.5), (2, 2, 0.25), (3, 3, 0.125), (2, 3, 0.5), (3, 5, 0.5), (10, 19, 0.5)]


@pytest.mark.parametrize(("nA", "n", "alpha"), EXACT_HALF)
def test_p_lower_of_exactly_one_half_certifies_radius_zero(nA, n, alpha):
    """CERTIFY abstains iff p_lower < 1/2 (Cohen et al.'s code: `if pABar < 0.5`): at exactly
    1/2 it returns the class with radius σ·Φ⁻¹(1/2) = 0; one vote fewer abstains."""
    assert lower_confidence_bound(nA, n, alpha) == 0.5
    cert = certificate_from_counts(7, nA, n, alpha, 0.5)
    assert (cert.prediction, cert.radius, cert.p_lower) == (7, 0.0, 0.5)
    assert radius_from_counts(nA, n, alpha, 0.5) == (0.5, 0.0)
    below = certificate_from_counts(7, nA - 1, n, alpha, 0.5)
    assert below.p_lower < 0.5 and (below.prediction, below.radius) == (ABSTAIN, 0.0)


def test_certify_at_p_lower_one_half_counts_as_correct_at_radius_zero():
    """The boundary through the whole of CERTIFY: n = 2, α = 1/4 and a constant classifier
    give p_lower = 0.25^(1/2) = 1/2 exactly, so the point is certified (radius 0)."""
    cert = Smooth(ConstantClassifier(4), 10, 0.5).certificate(
        torch.rand(SHAPE), 1, 2, 0.25, 8, _gen()
    )
    assert (cert.prediction, cert.radius, cert.nA, cert.p_lower) == (4, 0.0, 2, 0.5)


def test_certify_batch_matches_one_at_a_time():
    """With votes that noise cannot change, batched and single CERTIFY agree exactly, and
    every point gets its own class (no mix-up between points sharing a forward batch)."""
    labels = [4, 0, 2, 2, 5, 1, 3]
    smooth = Smooth(PixelArgmax(6), num_classes=6, sigma=0.05)
    xs = _one_hot_inputs(labels)
    batched = smooth.certify_batch(xs, 11, 1001, 0.001, 300, _gen())
    single = [smooth.certify(x, 11, 1001, 0.001, 128, _gen(9)) for x in xs]
    assert [(c.prediction, c.radius) for c in batched] == single
    assert [c.prediction for c in batched] == labels
    assert all(r == pytest.approx(max_radius(0.05, 1001, 0.001)) for _, r in single)


@pytest.mark.parametrize(("points", "num", "batch_size"), [(1, 101, 7), (3, 10, 2), (7, 13, 5)])
def test_sample_counts_rows_sum_to_num(points, num, batch_size):
    labels = [i % 4 for i in range(points)]
    smooth = Smooth(PixelArgmax(4), num_classes=4, sigma=0.1)
    counts = smooth.sample_counts(_one_hot_inputs(labels), num, batch_size, _gen())
    assert counts.dtype == torch.long and counts.shape == (points, 4)
    assert counts.sum(dim=1).tolist() == [num] * points
    assert counts.argmax(dim=1).tolist() == labels


def test_vote_counts_stay_exact_past_two_to_the_24_draws():
    """Counts are integers all the way: 2^24 + 1 votes (four batches of 2^22, then one draw)
    are counted as such, where a float32 tally would stop at 2^24 (its spacing there is 2)."""

    class Zero(nn.Module):
        def forward(self, x):
            return x.new_zeros(x.shape[0], 2)

    num = 2**24 + 1
    counts = Smooth(Zero(), 2, 0.25).sample_counts(torch.zeros(1, 1), num, 2**22, _gen())
    assert counts.tolist() == [[num, 0]]


def test_sample_counts_respects_batch_size():
    sizes = []

    class Recorder(PixelArgmax):
        def forward(self, x):
            sizes.append(x.shape[0])
            return super().forward(x)

    Smooth(Recorder(4), 4, 0.1).sample_counts(torch.rand(10, *SHAPE), 9, 4)
    assert max(sizes) <= 4 and sum(sizes) == 10 * 9


def test_seeded_runs_reproduce():
    model = LinearBinary(seed=7)
    smooth = Smooth(model, 2, 0.5)
    xs = model.at_distances([0.05, -0.1, 0.2])
    first = smooth.sample_counts(xs, 999, 256, _gen(11))
    assert torch.equal(first, smooth.sample_counts(xs, 999, 256, _gen(11)))
    assert not torch.equal(first, smooth.sample_counts(xs, 999, 256, _gen(12)))
    certs = [smooth.certify_batch(xs, 50, 999, 0.01, 256, _gen(13)) for _ in range(2)]
    assert certs[0] == certs[1]


def test_certify_and_predict_draw_every_sample_from_the_given_generator():
    """A seeded generator makes CERTIFY and PREDICT reproducible: their noise comes from it
    alone (torch's global generator is never touched) and the one-point entry points give
    what the batched ones give for the same generator state."""
    model = LinearBinary(seed=7)
    smooth = Smooth(model, 2, 0.5)
    xs = model.at_distances([0.05, -0.1, 0.2])
    torch.manual_seed(0)
    untouched = torch.get_rng_state()
    for x in xs:
        batched = smooth.certify_batch(x[None], 50, 999, 0.01, 256, _gen(21))[0]
        assert smooth.certificate(x, 50, 999, 0.01, 256, _gen(21)) == batched
        assert smooth.certify(x, 50, 999, 0.01, 256, _gen(21)) == (
            batched.prediction,
            batched.radius,
        )
        votes = smooth.sample_counts(x[None], 999, 256, _gen(22))[0].numpy()
        assert smooth.predict(x, 999, 0.01, 256, _gen(22)) == predict_from_counts(votes, 0.01)
    assert torch.equal(torch.get_rng_state(), untouched)


def test_one_point_entry_points_take_a_multichannel_input():
    """certify, certificate and predict take one (C,H,W) input, here with C = 3 (an RGB
    image): the channels are one point's, never several points."""
    labels = [0, 5, 11]
    xs = torch.zeros(len(labels), 3, 2, 2)
    xs.view(len(labels), -1)[torch.arange(len(labels)), torch.tensor(labels)] = 1.0
    smooth = Smooth(PixelArgmax(12), num_classes=12, sigma=0.05)
    limit = max_radius(0.05, 500, 0.001)
    for x, label in zip(xs, labels, strict=True):
        assert smooth.certify(x, 10, 500, 0.001, 64, _gen()) == (label, pytest.approx(limit))
        cert = smooth.certificate(x, 10, 500, 0.001, 64, _gen())
        assert (cert.prediction, cert.nA) == (label, 500)
        assert smooth.predict(x, 500, 0.001, 64, _gen()) == label
    batched = smooth.certify_batch(xs, 10, 500, 0.001, 64, _gen())
    assert [c.prediction for c in batched] == labels


def test_sampling_keeps_the_inputs_dtype():
    """float64 inputs are noised and classified in float64 (a float32 buffer would hand a
    float64 model float32 samples)."""
    model = LinearBinary(seed=3).double()
    xs = model.at_distances([0.3, -0.3]).double()
    counts = Smooth(model, 2, 0.25).sample_counts(xs, 200, 64, _gen())
    assert counts.dtype == torch.long and counts.sum(dim=1).tolist() == [200, 200]


@pytest.mark.parametrize(
    ("points", "num", "batch_size", "batches"),
    [
        (1, 9, 4, [4, 4, 1]),
        (3, 5, 7, [6, 6, 3]),
        (10, 2, 4, [4, 4, 4, 4, 2, 2]),
        (2, 3, 1, [1] * 6),
    ],
)
def test_forward_batches_are_exactly_as_documented(points, num, batch_size, batches):
    """Up to batch_size points share a forward batch, each with batch_size // (those points)
    draws at a time (at least one), the last draws of a group in a smaller batch."""
    sizes = []

    class Recorder(PixelArgmax):
        def forward(self, x):
            sizes.append(x.shape[0])
            return super().forward(x)

    counts = Smooth(Recorder(4), 4, 0.1).sample_counts(torch.rand(points, *SHAPE), num, batch_size)
    assert sizes == batches
    assert counts.sum(dim=1).tolist() == [num] * points


def test_batchnorm_model_runs_in_eval_mode_and_is_restored():
    """A model left in train mode is still evaluated as a fixed function: batch-norm must not
    mix the points of a forward batch nor update its running statistics. Point 0's noise is
    the generator's first draw whether or not other points share its batch."""
    model = nn.Sequential(nn.BatchNorm2d(1), nn.Flatten(), nn.Linear(16, 3))
    model.train()
    model[2].eval()
    running_mean = model[0].running_mean.clone()
    smooth = Smooth(model, 3, 0.25)
    xs = torch.rand(4, *SHAPE)
    batched = smooth.sample_counts(xs, 500, 2000, _gen(1))
    alone = smooth.sample_counts(xs[:1], 500, 500, _gen(1))
    assert torch.equal(batched[:1], alone)
    assert torch.equal(model[0].running_mean, running_mean)
    assert [m.training for m in model] == [True, True, False]


# ---------------------------------------------------------------- PREDICT


def test_predict_abstains_on_a_fair_coin_and_not_on_a_sure_thing():
    x = torch.zeros(SHAPE)
    fair = Smooth(CoinFlip(0.0), num_classes=3, sigma=0.5)
    assert fair.predict(x, 2000, 0.001, 500, _gen()) == ABSTAIN
    sure = Smooth(CoinFlip(-2.0), num_classes=3, sigma=0.5)
    assert sure.predict(x, 2000, 0.001, 500, _gen()) == 1
    assert Smooth(CoinFlip(2.0), 3, 0.5).predict(x, 2000, 0.001, 500, _gen()) == 0


HAND_COUNTS = [
    [60, 40, 0],
    [0, 45, 55],
    [100, 0, 0],
    [0, 0, 0, 30, 10],
    [510, 490, 3],
    [5, 5, 0],
    [1, 12, 1],
    [0, 9, 0],
    [7, 0, 1, 0],
    [300, 200, 250, 10],
]


@pytest.mark.parametrize("alpha", [0.001, 0.05])
def test_predict_from_counts_matches_binomtest(alpha):
    outcomes = set()
    for counts in HAND_COUNTS:
        order = np.argsort(counts)[::-1]
        n1, n2 = counts[order[0]], counts[order[1]]
        expected = int(order[0]) if binomtest(n1, n1 + n2, 0.5).pvalue <= alpha else ABSTAIN
        assert predict_from_counts(counts, alpha) == expected, counts
        outcomes.add(expected == ABSTAIN)
    assert outcomes == {True, False}


@pytest.mark.parametrize(("counts", "alpha"), [([5, 0, 0], 0.0625), ([0, 7, 1], 0.0703125)])
def test_predict_at_a_p_value_of_exactly_alpha_returns_the_class(counts, alpha):
    """PREDICT abstains iff the p-value exceeds α (Cohen et al.: `if binom_test(...) > alpha`);
    at exactly α it predicts. Both p-values are exact in binary: 2·2⁻⁵ and 2·(1+8)/2⁸."""
    top, second = sorted(counts, reverse=True)[:2]
    assert binomtest(top, top + second, 0.5).pvalue == alpha
    assert predict_from_counts(counts, alpha) == int(np.argmax(counts))
    assert predict_from_counts(counts, alpha * (1 - 1e-9)) == ABSTAIN


@pytest.mark.parametrize("sigma", [0.0, -0.25, float("nan")])
def test_smooth_rejects_non_positive_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        Smooth(ConstantClassifier(0), 10, sigma)


# ---------------------------------------------------------------- certify_points: the rows


def test_certify_points_rows_count_an_abstention_as_wrong_and_a_certified_class_by_its_label():
    """CoinFlip on six points of a data set (items `(x, label, idx)`, as every data set):
    pixel 0 at the threshold is a fair coin, so CERTIFY abstains, whatever the label; at ±10σ
    the votes are unanimous, so the point is certified at σ·Φ⁻¹(α^(1/n)), right or wrong as
    its label says. Two points per forward batch, so the rows come from three batches."""
    sigma, n, alpha = 0.5, 200, 0.001
    pixel = [0.0, 5.0, 5.0, 0.0, -5.0, -5.0]  # classes: coin, 1, 1, coin, 0, 0
    labels = [1, 1, 0, 0, 0, 2]
    data = []
    for i, (p, label) in enumerate(zip(pixel, labels, strict=True)):
        x = torch.full(SHAPE, 0.5)
        x[0, 0, 0] = p
        data.append((x, label, i))
    indices = [0, 1, 2, 3, 4, 5]
    settings = CertifySpec(n0=20, n=n, alpha=alpha, sigma=sigma, batch_size=64, points_per_batch=2)
    cols = certify_points(CoinFlip(), data, indices, 3, settings, 7, torch.device("cpu"))
    rows = [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]
    top = sigma * float(norm.ppf(beta.ppf(alpha, n, 1)))  # all n votes: p_lower = Beta quantile
    expected = [  # predict, correct, radius of points 0 to 5
        (ABSTAIN, False, 0.0),  # a coin, labelled 1
        (1, True, top),
        (1, False, top),  # class 1, labelled 0
        (ABSTAIN, False, 0.0),  # a coin, labelled 0
        (0, True, top),
        (0, False, top),  # class 0, labelled 2
    ]
    assert [r["idx"] for r in rows] == indices and [r["label"] for r in rows] == labels
    for row, (predict, correct, radius) in zip(rows, expected, strict=True):
        assert (row["predict"], row["correct"]) == (predict, correct), row
        assert type(row["correct"]) is bool
        assert row["radius"] == pytest.approx(radius, rel=1e-9, abs=0.0), row
        assert row["sigma_cert"] == sigma
        if predict == ABSTAIN:  # a coin: about n/2 votes for the selected class
            assert row["p_lower"] < 0.5 and 0.3 * n < row["count"] < 0.7 * n, row
        else:
            assert row["count"] == n and row["p_lower"] == pytest.approx(alpha ** (1 / n))
    assert top == pytest.approx(0.5 * 1.8257, abs=1e-4)  # Φ⁻¹(0.001^(1/200)) by hand


def _coin_points(count: int) -> list:
    """`count` data-set items (x, label, idx) at CoinFlip's threshold: every vote a coin."""
    return [(torch.full(SHAPE, 0.0), i % 2, i) for i in range(count)]


def test_certify_points_time_s_is_each_batchs_clock_split_evenly_over_its_points(monkeypatch):
    """The clock read around each forward batch (σ optimization and CERTIFY), here a fake
    one: 3 s for the batch of points 0 and 1, 1 s for point 2 alone."""
    import trainables.certify_points as module

    ticks = iter([10.0, 13.0, 20.0, 21.0])
    monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.5, batch_size=20, points_per_batch=2)
    cols = certify_points(
        CoinFlip(), _coin_points(3), [0, 1, 2], 3, settings, 1, torch.device("cpu")
    )
    assert cols["time_s"] == [1.5, 1.5, 1.0]
    assert next(ticks, None) is None  # two readings per batch, no more


def test_certify_points_time_s_on_the_real_clock_is_shared_within_a_batch():
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.5, batch_size=20, points_per_batch=2)
    times = certify_points(
        CoinFlip(), _coin_points(3), [0, 1, 2], 3, settings, 1, torch.device("cpu")
    )["time_s"]
    assert all(type(t) is float and t >= 0.0 for t in times) and times[0] == times[1]


def test_certify_points_never_pairs_a_point_with_another_points_certificate(monkeypatch):
    """A batch that comes back with fewer certificates than points is an error, not rows
    cut to the shorter list (every later point would then be missing or shifted)."""
    certify_batch = Smooth.certify_batch
    monkeypatch.setattr(Smooth, "certify_batch", lambda *a, **k: certify_batch(*a, **k)[:-1])
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.5, batch_size=20, points_per_batch=2)
    with pytest.raises(ValueError, match="zip"):
        certify_points(CoinFlip(), _coin_points(2), [0, 1], 3, settings, 1, torch.device("cpu"))


@pytest.mark.parametrize(
    ("batch_size", "per_batch", "available", "expected"),
    [
        (400, None, 10, 4),
        (400, None, 3, 3),
        (50, None, 10, 1),
        (400, 5, 10, 5),
        (400, 5, 1, 1),
        (400, None, 0, 1),
    ],
)
def test_points_per_batch_fill_a_batch_of_n0_draws_at_least_one_at_most_those_available(
    batch_size, per_batch, available, expected
):
    """Unset, a batch holds batch_size // n0 points (n0 = 100), never fewer than one, even
    when n0 alone exceeds the batch."""
    settings = CertifySpec(
        n0=100, n=1000, alpha=0.01, sigma=0.25, batch_size=batch_size, points_per_batch=per_batch
    )
    assert settings.points(available) == expected


def _crc32(data: bytes) -> int:
    """CRC-32 (ISO-HDLC, as zlib and PNG), bit by bit from its specification."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_seed_for_is_the_crc32_of_the_slash_joined_parts_spread_over_63_bits():
    """seed = CRC-32("a/b/...") · 2654435761 mod (2⁶³ − 1): the same everywhere. CRC-32 of
    "123456789" is the specification's check value 0xCBF43926; times the multiplier it is
    below the modulus. The shard seed of (trial, setting, 1) has CRC-32 0xD0E11D31, whose
    product 9302241845603489761 exceeds 2⁶³ − 1 and wraps once."""
    assert _crc32(b"123456789") == 0xCBF43926
    assert seed_for("123456789") == 0xCBF43926 * 2654435761 == 9082895893736749382
    assert seed_for(123456789) == seed_for("123456789")
    shard = ("0123456789ab", "sigma-train_n0-100")
    assert _crc32(b"0123456789ab/sigma-train_n0-100/1") == 0xD0E11D31
    assert seed_for(*shard, 1) == 9302241845603489761 - (2**63 - 1) == 78869808748713954
    assert seed_for(*shard, 0) == 7477227109968674679  # CRC-32 0xA7E62DA7, no wrap
    assert seed_for("a", "b") == seed_for("a/b") == _crc32(b"a/b") * 2654435761
    seeds = [seed_for(*shard, k) for k in range(2000)]
    assert all(0 <= s < 2**63 - 1 for s in seeds) and len(set(seeds)) == 2000
    assert max(seeds) > 2**62  # spread over the 63 bits, not the 32 of the CRC


def test_run_mode_records_precision_layout_and_whether_the_model_compiles(monkeypatch):
    from trainables import runtime

    cpu = torch.device("cpu")
    asked = []
    monkeypatch.setattr(runtime, "compile_problem", lambda kind: asked.append(kind))
    compiled = CertifySpec(
        n0=10, n=20, alpha=0.01, sigma=0.25, batch_size=20, precision="bf16", compile=True
    )
    assert run_mode(compiled, cpu) == {
        "precision": "bf16",
        "channels_last": "false",
        "compile": "compiled",
    }
    assert asked == ["cpu"]
    monkeypatch.setattr(runtime, "compile_problem", lambda kind: "no C++ compiler")
    assert run_mode(compiled, cpu)["compile"] == "eager (compile unavailable)"
    eager = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.25, batch_size=20, channels_last=True)
    assert run_mode(eager, cpu) == {
        "precision": "fp32",
        "channels_last": "true",
        "compile": "eager",
    }


def test_certify_points_tries_to_compile_on_its_device_when_asked(monkeypatch, caplog):
    """compile=True: the device's compile problem is looked up (here: there is one) and the
    model runs eagerly after one warning line; compile=False asks nothing."""
    from trainables import runtime

    asked = []
    monkeypatch.setattr(runtime, "compile_problem", lambda kind: asked.append(kind) or "no cc")
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.5, batch_size=20, compile=True)
    with caplog.at_level("WARNING"):
        cols = certify_points(
            CoinFlip(), _coin_points(2), [0, 1], 3, settings, 1, torch.device("cpu")
        )
    assert asked == ["cpu", "cpu"] and cols["idx"] == [0, 1]  # prepare's, and its mode's
    assert [r.getMessage() for r in caplog.records] == [
        "compile: torch.compile cannot run on cpu here (no cc); running eagerly"
    ]
    certify_points(
        CoinFlip(),
        _coin_points(2),
        [0, 1],
        3,
        replace(settings, compile=False),
        1,
        torch.device("cpu"),
    )
    assert asked == ["cpu", "cpu"]


class TwoChannelConv(nn.Module):
    """A 2-channel convolution (a 1-channel weight is channels-last whatever its layout)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 3, 2)

    def forward(self, x):
        return self.conv(x).mean(dim=(2, 3))


def test_certify_points_puts_the_model_channels_last_when_asked():
    model, cpu = TwoChannelConv(), torch.device("cpu")
    data = [(torch.rand(2, 4, 4, generator=_gen(i)), 0, i) for i in range(2)]
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.5, batch_size=20)
    certify_points(model, data, [0, 1], 3, settings, 1, cpu)
    assert not model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    certify_points(model, data, [0, 1], 3, replace(settings, channels_last=True), 1, cpu)
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)


class DtypeSeen(nn.Module):
    """CoinFlip's votes; remembers the dtype of every noisy batch it is shown."""

    def __init__(self):
        super().__init__()
        self.seen: set = set()

    def forward(self, x):
        self.seen.add(x.dtype)
        return CoinFlip()(x)


def test_certify_points_runs_the_model_at_the_settings_precision(monkeypatch):
    """bf16: the noisy batches are bf16 (checked on any CPU: its bf16 check is waived)."""
    from trainables import runtime

    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda: True)
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.5, batch_size=20)
    for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        model = DtypeSeen()
        certify_points(
            model,
            _coin_points(2),
            [0, 1],
            3,
            replace(settings, precision=precision),
            1,
            torch.device("cpu"),
        )
        assert model.seen == {dtype}, precision


def test_certify_points_draws_every_sample_from_its_seed_alone():
    """The same seed gives the same votes whatever the global RNG's state; another seed
    other votes (coins: the counts are random)."""
    settings = CertifySpec(n0=10, n=200, alpha=0.01, sigma=0.5, batch_size=64, points_per_batch=2)

    def counts(seed: int, global_seed: int) -> list[int]:
        torch.manual_seed(global_seed)
        return certify_points(
            CoinFlip(), _coin_points(4), range(4), 3, settings, seed, torch.device("cpu")
        )["count"]

    first = counts(5, 0)
    assert counts(5, 1) == first and counts(6, 0) != first
    cpu = torch.device("cpu")
    expected = Smooth(CoinFlip(), 3, 0.5).certify_batch(
        torch.zeros(2, *SHAPE),
        10,
        200,
        0.01,
        64,
        point_generators(5, "select", [0, 1], cpu),
        estimation=point_generators(5, "estimate", [0, 1], cpu),
    )
    assert first[:2] == [c.nA for c in expected]  # each point: its own streams of the seed


def test_a_points_certificate_does_not_depend_on_its_batch_or_shard():
    """Per-point streams: point i's row is the same certified alone, in batches of 1 or 4,
    and among other points (what lets the envelope strategy draw only some points as `full`
    draws them); the draws of a model's points are not the same streams."""
    cpu = torch.device("cpu")
    base = CertifySpec(n0=10, n=300, alpha=0.01, sigma=0.5, batch_size=64)
    rows = {}
    for ppb, indices in ((1, range(6)), (4, range(6)), (3, [4, 1, 5])):
        cols = certify_points(
            CoinFlip(), _coin_points(6), indices, 3, replace(base, points_per_batch=ppb), 9, cpu
        )
        for idx, count in zip(cols["idx"], cols["count"], strict=True):
            rows.setdefault(idx, set()).add(count)
    assert all(len(counts) == 1 for counts in rows.values()), rows
    assert len({next(iter(c)) for c in rows.values()}) > 1


def test_per_point_streams_are_one_stream_however_chunked():
    """A point's noise from its own generator is the same drawn in one call or in chunks (of
    a multiple of 16 values: torch's CPU normal_ transforms uniforms in blocks of 16)."""
    whole = torch.empty(10, 3, 4, 4).normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    parts = [torch.empty(k, 3, 4, 4).normal_(0, 0.5, generator=g) for k in (3, 1, 6)]
    assert torch.equal(torch.cat(parts), whole)
