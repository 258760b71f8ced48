"""Data-dependent smoothing (`trainables.ddrs`) and per-point σ in `Smooth`.

OptimizeSigma is checked on toy classifiers whose smoothed probabilities, and so whose proxy
radius R(σ) = σ/2·(Φ⁻¹(p1) − Φ⁻¹(p2)) with p clamped to [0.02, 0.98], are known in closed form:
- a linear classifier, at distance d from its hyperplane: p1 = Φ(d/σ), so R(σ) = min(σ·z, d)
  with z = Φ⁻¹(0.98): R grows like σ·z until σ* = d/z and is flat (= d) beyond;
- a ball classifier (class 0 iff ‖x‖ < 1) at its centre in D dimensions: p0 = F_χ²(D)(1/σ²),
  so R(σ) = σ·z until p0 drops below 0.98 and decreases after: a unique maximizer
  σ* = 1/√(χ²_D quantile 0.98).

The memory pass is checked on hand-built balls in the plane, against a transcription of the
authors' post_processing_memory_based.py (abstentions in the memory as radius-0 balls of class
−1) and, for its invariant (no two balls of different predictions intersect), on random
certificates in 2 and 10 dimensions, under both readings of abstentions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import chi2, norm
from torch import nn

from trainables.certify_points import certify_points
from trainables.ddrs import PROB_CLAMP, MemoryResult, memory_certify, optimize_sigma, proxy_radius
from trainables.kernel.certificates import ABSTAIN, max_radius
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.kernel.stage_settings import CertifySpec
from trainables.smoothing import Smooth

SHAPE = (1, 2, 2)
D = math.prod(SHAPE)
Z_HI = float(norm.ppf(PROB_CLAMP[1]))  # Φ⁻¹(0.98): the largest |Φ⁻¹(p)| the clamp lets through
BALL_SIGMA_STAR = 1 / math.sqrt(chi2.ppf(PROB_CLAMP[1], D))  # P(σ²χ²_D < 1) = 0.98


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class ProbitLinear(nn.Module):
    """Two classes, P(class 1) = Φ(s·(w·x + b)) with ‖w‖ = 1 (logits are log-probabilities).

    Under x + σε with x at signed distance d from the hyperplane, the expected softmax of the
    true class is exactly Φ(|d|/√(σ² + 1/s²)): a hard linear classifier blurred by 1/s."""

    def __init__(self, sharpness: float = 20.0):
        super().__init__()
        w = torch.tensor([1.0, 2.0, -2.0, 4.0], dtype=torch.float64)
        self.w = nn.Parameter(w / w.norm())
        self.b = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))
        self.sharpness = sharpness

    def forward(self, x):
        t = self.sharpness * (x.flatten(1) @ self.w + self.b)
        return torch.stack([torch.special.log_ndtr(-t), torch.special.log_ndtr(t)], dim=1)

    def at_distances(self, distances) -> torch.Tensor:
        d = torch.as_tensor(distances, dtype=torch.float64).unsqueeze(1)
        return (d * self.w.detach()).view(-1, *SHAPE)

    def radius(self, d: float, sigma: float) -> float:
        """The clamped proxy radius in closed form (expectation, no sampling)."""
        p = norm.cdf(abs(d) / math.sqrt(sigma**2 + self.sharpness**-2))
        p = min(max(p, PROB_CLAMP[0]), PROB_CLAMP[1])
        return sigma * float(norm.ppf(p))


class Ball(nn.Module):
    """Class 0 inside the unit ball around the origin, class 1 outside (logit gap s·(1−‖x‖²))."""

    def __init__(self, sharpness: float = 30.0):
        super().__init__()
        self.sharpness = sharpness

    def forward(self, x):
        t = self.sharpness * (1 - x.flatten(1).pow(2).sum(dim=1))
        return torch.stack([t / 2, -t / 2], dim=1)

    @staticmethod
    def radius_at_centre(sigma: float) -> float:
        """The clamped proxy radius at the origin for the hard ball: p0 = F_χ²(D)(1/σ²)."""
        p0 = float(np.clip(chi2.cdf(1 / sigma**2, D), *PROB_CLAMP))
        return sigma * abs(float(norm.ppf(p0)))


def _centres(n: int) -> torch.Tensor:
    return torch.zeros(n, *SHAPE, dtype=torch.float64)


# ------------------------------------------------------------------------------ proxy radius


def test_proxy_radius_matches_the_closed_form_of_a_linear_classifier():
    """Within 4 Monte-Carlo standard errors (σ·sd(p̂)/φ(Φ⁻¹(p)), by the delta method)."""
    model = ProbitLinear()
    distances = [0.3, -0.5, 1.0, 2.0]
    x = model.at_distances(distances)
    n = 20_000
    eps = torch.randn(len(distances), n, *SHAPE, generator=_gen(1), dtype=torch.float64)
    for s in (0.05, 0.2, 0.5, 1.0, 3.0):
        sigma = torch.full((len(distances),), s, dtype=torch.float64)
        got = proxy_radius(model, x, sigma, eps).detach().tolist()
        for d, r in zip(distances, got, strict=True):
            p = min(norm.cdf(abs(d) / math.hypot(s, 1 / model.sharpness)), PROB_CLAMP[1])
            se = s * math.sqrt(p * (1 - p) / n) / norm.pdf(norm.ppf(p))
            assert r == pytest.approx(model.radius(d, s), abs=4 * se + 1e-3), (d, s)


# ---------------------------------------------------------------------------- optimize_sigma


def test_clamped_region_ascends_by_lr_times_probit_of_the_clamp_each_step():
    """Far from the boundary p̂1 > 0.98 at every step, so R = σ·z and ∂R/∂σ = z exactly:
    K steps move σ0 (a per-point tensor here) to σ0 + K·lr·z, on both sides of the boundary
    (to float32 precision: the probabilities are clamped in float32)."""
    model = ProbitLinear()
    x = model.at_distances([3.0, -3.0, 4.0, -5.0])
    sigma0 = torch.tensor([0.02, 0.05, 0.1, 0.2], dtype=torch.float64)
    before = sigma0.clone()
    sigma = optimize_sigma(model, x, sigma0, iterations=20, lr=0.01, samples=8, generator=_gen())
    np.testing.assert_allclose(sigma.numpy(), (sigma0 + 20 * 0.01 * Z_HI).numpy(), rtol=1e-6)
    assert torch.equal(sigma0, before)  # the caller's σ0 is not modified
    assert sigma.shape == (4,) and sigma.dtype == torch.float64


def test_linear_classifier_sigma_grows_from_small_sigma0_into_the_optimal_region():
    """R(σ) = min(σ·z, d) (blurred a little by the 1/s of the model): from σ0 ≪ σ* = d/z the
    ascent raises σ to at least about σ*, where R is within a few percent of its supremum d.
    (Every σ ≥ σ* is optimal, so σ need not stop at σ*; the sampled gradient, biased upward by
    the clamp and the convexity of Φ⁻¹, does carry it somewhat beyond.)"""
    model = ProbitLinear()
    distances = [0.5, 1.0, -1.0, 2.0]
    sigma0 = 0.05
    sigma = optimize_sigma(
        model,
        model.at_distances(distances),
        sigma0,
        iterations=100,
        lr=0.02,
        samples=64,
        generator=_gen(),
    )
    for d, s in zip(distances, sigma.tolist(), strict=True):
        star = abs(d) / Z_HI
        assert s >= 0.9 * star, (d, s, star)
        assert model.radius(d, s) >= 0.97 * abs(d)
        assert model.radius(d, s) >= model.radius(d, sigma0) + 0.3 * abs(d)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ball_classifier_sigma_converges_to_the_unique_maximizer_from_both_sides(seed):
    sigma0 = torch.tensor([0.1, 0.15, 0.45, 0.5], dtype=torch.float64)
    sigma = optimize_sigma(
        Ball(), _centres(4), sigma0, iterations=200, lr=0.005, samples=256, generator=_gen(seed)
    )
    np.testing.assert_allclose(sigma.numpy(), BALL_SIGMA_STAR, rtol=0.2)
    assert (sigma[:2] > sigma0[:2]).all() and (sigma[2:] < sigma0[2:]).all()
    for s0, s in zip(sigma0.tolist(), sigma.tolist(), strict=True):
        assert Ball.radius_at_centre(s) >= Ball.radius_at_centre(s0)
        assert Ball.radius_at_centre(s) >= 0.75 * Ball.radius_at_centre(BALL_SIGMA_STAR)


@pytest.mark.parametrize("min_sigma", [1e-3, 0.05])
def test_a_huge_step_down_is_clamped_at_min_sigma(min_sigma):
    """At σ0 = 0.4 the ball's R falls steeply with σ: one step with lr = 100 would end far
    below zero; σ stops at min_sigma."""
    sigma = optimize_sigma(
        Ball(),
        _centres(3),
        0.4,
        iterations=1,
        lr=100.0,
        samples=256,
        min_sigma=min_sigma,
        generator=_gen(),
    )
    assert torch.equal(sigma, torch.full((3,), min_sigma, dtype=torch.float64))


def test_sigma_stays_positive_under_wild_steps():
    sigma = optimize_sigma(
        Ball(), _centres(8), 0.4, iterations=30, lr=50.0, samples=16, generator=_gen()
    )
    assert (sigma >= 1e-3).all() and torch.isfinite(sigma).all()


def test_float_and_tensor_sigma0_agree_and_seeds_reproduce():
    model = ProbitLinear()
    x = model.at_distances([0.5, -1.0, 2.0])

    def run(sigma0, seed):
        return optimize_sigma(
            model, x, sigma0, iterations=30, lr=0.02, samples=4, generator=_gen(seed)
        )

    as_float = run(0.25, 7)
    assert torch.equal(as_float, run(0.25, 7))
    assert torch.equal(as_float, run(torch.full((3,), 0.25, dtype=torch.float64), 7))
    assert not torch.equal(as_float, run(0.25, 8))  # the noise matters here: seeds differ


def test_model_parameters_keep_their_flags_and_get_no_grad():
    model = ProbitLinear()
    model.b.requires_grad_(False)
    model.train()
    optimize_sigma(model, model.at_distances([1.0, -1.0]), 0.25, iterations=5, lr=0.01, samples=4)
    assert (model.w.requires_grad, model.b.requires_grad) == (True, False)
    assert model.w.grad is None and model.b.grad is None
    assert model.training  # the mode is the caller's business


def test_flags_are_restored_when_the_model_raises():
    class Failing(ProbitLinear):
        calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("boom")
            return super().forward(x)

    model = Failing()
    with pytest.raises(RuntimeError, match="boom"):
        optimize_sigma(model, model.at_distances([1.0]), 0.25, iterations=5, lr=0.01)
    assert model.w.requires_grad and model.b.requires_grad


# ---------------------------------------------------------------------------- memory_certify


def _certify(points, predictions, radii, abstentions_in_memory: bool = True) -> MemoryResult:
    return memory_certify(
        np.asarray(points, dtype=float),
        np.asarray(predictions),
        np.asarray(radii),
        abstentions_in_memory,
    )


def _conflicts(points, predictions, radii, abstentions: bool = True, tol: float = 1e-9):
    """Pairs (i, j) of points with different predictions whose open balls intersect, i.e.
    ‖x_i − x_j‖ < r_i + r_j (O(N²), independent of the module). `abstentions`: an abstention
    is a point of class −1 (radius 0) that no ball of a class may contain; else it is left
    out."""
    points = np.asarray(points, dtype=float).reshape(len(points), -1)
    bad = []
    for i in range(len(points)):
        for j in range(i):
            if predictions[i] == predictions[j]:
                continue
            if not abstentions and ABSTAIN in (predictions[i], predictions[j]):
                continue
            if np.linalg.norm(points[i] - points[j]) < radii[i] + radii[j] - tol:
                bad.append((j, i))
    return bad


def _script_memory(points, predictions, radii) -> tuple[list[int], list[float]]:
    """MotasemAlfarra/Data_Dependent_Randomized_Smoothing post_processing_memory_based.py
    l. 30-76 transcribed: every line enters saved_* (abstentions too: class −1, radius 0).
    Two changes: its `rad, rad_idx = torch.min(t)` raises (a 1-D tensor's minimum is one 0-d
    tensor, which does not unpack), read as torch.min(t, dim=0); float64 throughout (it
    compares float32 radii and images), so the two agree to the last bits."""
    saved_images, saved_predictions, saved_radii = [], [], []
    for point, pred, rad in zip(points, predictions, radii, strict=True):
        img, pred, rad = torch.as_tensor(point, dtype=torch.float64), int(pred), float(rad)
        if saved_images:
            stacked = torch.stack(saved_images).reshape(len(saved_radii), -1)
            diff = torch.norm(img.reshape(1, -1) - stacked, dim=1)
            radii_t = torch.tensor(saved_radii, dtype=torch.float64)
            where_overlap = diff < (radii_t + rad)
            if where_overlap.any():
                preds_overlap = torch.tensor(saved_predictions)[where_overlap]
                diff_class = preds_overlap != pred
                if diff_class.any():
                    gaps = diff[where_overlap][diff_class] - radii_t[where_overlap][diff_class]
                    low, low_idx = torch.min(gaps, dim=0)
                    if low.item() < 0:
                        pred = int(preds_overlap[diff_class][low_idx])
                    rad = torch.abs(low).item()
        saved_images.append(img)
        saved_predictions.append(pred)
        saved_radii.append(rad)
    return saved_predictions, saved_radii


def test_overlapping_balls_of_the_same_class_are_left_alone():
    out = _certify([[0, 0], [1, 0], [0.5, 0.5]], [3, 3, 3], [1.0, 1.0, 2.0])
    assert out.prediction.tolist() == [3, 3, 3]
    assert out.radius.tolist() == [1.0, 1.0, 2.0]
    assert not out.changed.any()


def test_a_later_ball_of_another_class_shrinks_to_distance_minus_the_earlier_radius():
    # d = 3, r_j = 1 (earlier), r_i = 2.5 (later): LargestOutSubset gives d − r_j = 2.
    out = _certify([[0, 0], [3, 0]], [0, 1], [1.0, 2.5])
    assert out.prediction.tolist() == [0, 1]
    assert out.radius.tolist() == [1.0, 2.0]
    assert out.changed.tolist() == [False, True]


def test_the_shrink_is_the_minimum_over_all_overlapping_earlier_balls():
    points = [[0, 0], [0, 4], [3, 3], [3, 3.5]]
    out = _certify(points, [0, 2, 1, 1], [1.0, 2.0, 5.0, 0.1])
    d_first, d_second = math.hypot(3, 3), math.hypot(3, 1)  # from (3, 3)
    assert out.radius[2] == pytest.approx(min(d_first - 1.0, d_second - 2.0))
    assert out.radius[2] == pytest.approx(d_second - 2.0)
    # the last point only overlaps class-1 balls and balls it does not reach: untouched
    assert out.prediction.tolist() == [0, 2, 1, 1]
    assert out.radius[3] == 0.1
    assert out.changed.tolist() == [False, False, True, False]


def test_a_point_inside_a_ball_of_another_class_takes_its_class_and_the_largest_inner_ball():
    out = _certify([[0, 0], [0.5, 0], [5, 0]], [0, 1, 2], [2.0, 1.0, 1.0])
    assert out.prediction.tolist() == [0, 0, 2]
    assert out.radius[:2].tolist() == [2.0, 1.5]  # r_j − d
    assert out.changed.tolist() == [False, True, False]
    assert not _conflicts([[0, 0], [0.5, 0], [5, 0]], out.prediction, out.radius)


def test_the_switched_ball_also_respects_other_classes():
    """x lies inside the class-0 ball; the ball r_j − d around it stays clear of the class-2 ball
    that touches the class-0 ball from outside."""
    points = [[0, 0], [3, 0], [1, 0]]
    out = _certify(points, [0, 2, 1], [2.0, 1.0, 0.5])
    assert out.prediction.tolist() == [0, 2, 0]
    assert out.radius.tolist() == [2.0, 1.0, 1.0]
    assert not _conflicts(points, out.prediction, out.radius)


def test_touching_balls_are_disjoint():
    out = _certify([[0, 0], [3, 0], [3, 5]], [0, 1, 2], [1.0, 2.0, 3.0])  # d = r_i + r_j twice
    assert out.radius.tolist() == [1.0, 2.0, 3.0]
    assert not out.changed.any()


def test_a_point_on_the_sphere_of_another_class_keeps_its_class_with_radius_zero():
    out = _certify([[0, 0], [2, 0]], [0, 1], [2.0, 1.0])  # x_1 is not inside the open ball
    assert out.prediction.tolist() == [0, 1]
    assert out.radius.tolist() == [2.0, 0.0]


def test_without_abstentions_in_memory_abstentions_are_unchanged_and_constrain_nothing():
    """sweeper's reading before issue 26 (`abstentions_in_memory=False`)."""
    points = [[0, 0], [0.5, 0], [3, 0], [0.2, 0]]
    out = _certify(points, [ABSTAIN, 1, 0, ABSTAIN], [5.0, 1.0, 0.5, 0.0], False)
    # the abstention's (nonsensical) ball of radius 5 neither switches point 1 (inside it) nor
    # shrinks point 2 (overlapping it); point 3 lies inside point 1's ball but stays abstained
    assert out.prediction.tolist() == [ABSTAIN, 1, 0, ABSTAIN]
    assert out.radius.tolist() == [5.0, 1.0, 0.5, 0.0]
    assert not out.changed.any()


def test_a_later_ball_covering_an_abstention_shrinks_to_its_distance():
    """The script: the abstention at the origin is a radius-0 ball of class −1; the class-1
    ball of radius 1 at distance 0.25 becomes d − 0 = 0.25, the class-0 one that does not
    reach it stays."""
    out = _certify([[0, 0], [0.25, 0], [3, 0]], [ABSTAIN, 1, 0], [0.0, 1.0, 0.5])
    assert out.prediction.tolist() == [ABSTAIN, 1, 0]
    assert out.radius.tolist() == [0.0, 0.25, 0.5]
    assert out.changed.tolist() == [False, True, False]
    assert _script_memory([[0, 0], [0.25, 0], [3, 0]], [ABSTAIN, 1, 0], [0.0, 1.0, 0.5]) == (
        out.prediction.tolist(),
        out.radius.tolist(),
    )


def test_an_abstention_inside_an_earlier_ball_takes_its_class_and_the_largest_inner_ball():
    """The script: the abstention at (0.5, 0) lies in the class-0 ball of radius 2 around the
    origin: class 0, radius r_j − d = 1.5; the one at (4, 0) lies in no ball and stays; a
    class-2 ball later at (3, 0) of radius 2 shrinks to 3 − 2 = 1 (the class-0 ball) and
    would also have to leave out the abstention at distance 1 (d − 0 = 1)."""
    points = [[0, 0], [0.5, 0], [4, 0], [3, 0]]
    preds, radii = [0, ABSTAIN, ABSTAIN, 2], [2.0, 0.0, 0.0, 2.0]
    out = _certify(points, preds, radii)
    assert out.prediction.tolist() == [0, 0, ABSTAIN, 2]
    assert out.radius.tolist() == [2.0, 1.5, 0.0, 1.0]
    assert out.changed.tolist() == [False, True, False, True]
    assert not _conflicts(points, out.prediction, out.radius)
    assert _script_memory(points, preds, radii) == (out.prediction.tolist(), out.radius.tolist())
    old = _certify(points, preds, radii, False)  # the other reading: both abstentions stay
    assert old.prediction.tolist() == [0, ABSTAIN, ABSTAIN, 2]
    assert old.radius.tolist() == [2.0, 0.0, 0.0, 1.0]


def test_abstentions_do_not_constrain_each_other_and_must_have_radius_zero():
    out = _certify([[0, 0], [0, 0], [1e-3, 0]], [ABSTAIN] * 3, [0.0] * 3)
    assert out.prediction.tolist() == [ABSTAIN] * 3 and not out.changed.any()
    with pytest.raises(ValueError, match="an abstention with a radius"):
        _certify([[0, 0]], [ABSTAIN], [0.5])


def test_the_result_depends_on_the_order_and_both_orders_are_consistent():
    points = np.array([[0.0, 0.0], [3.0, 0.0], [0.5, 0.0]])
    preds, radii = np.array([0, 1, 1]), np.array([2.0, 2.0, 1.0])
    forward = memory_certify(points, preds, radii)
    backward = memory_certify(points[::-1], preds[::-1], radii[::-1])
    assert forward.prediction.tolist() == [0, 1, 0]
    assert forward.radius.tolist() == [2.0, 1.0, 1.5]
    # reversed: (0.5, 0) first, then (3, 0) of the same class (kept), then the origin lies
    # inside the class-1 ball of radius 1 around (0.5, 0): it switches to class 1, radius 0.5
    assert backward.prediction[::-1].tolist() == [1, 1, 1]
    assert backward.radius[::-1].tolist() == [0.5, 2.0, 1.0]
    assert backward.changed[::-1].tolist() == [True, False, False]
    for out, pts in ((forward, points), (backward, points[::-1])):
        assert not _conflicts(pts, out.prediction, out.radius)


def _random_certificates(rng, n: int, dim: int, max_radius: float, abstain: float = 0.25):
    points = rng.normal(size=(n, dim))
    preds = np.where(rng.random(n) < abstain, ABSTAIN, rng.integers(0, 3, size=n))
    radii = rng.uniform(0, max_radius, size=n)
    radii[rng.random(n) < 0.1] = 0.0
    radii[preds == ABSTAIN] = 0.0  # CERTIFY's
    return points, preds, radii


@pytest.mark.parametrize(("dim", "max_radius"), [(2, 1.0), (10, 4.0)])
@pytest.mark.parametrize("abstain", [0.15, 0.4])
def test_the_memory_pass_is_the_scripts_on_random_certificates(dim, max_radius, abstain):
    """Predictions equal, radii equal to float rounding (the two compute the norms apart),
    over 40 sets of 30 certificates each; abstentions switched and balls shrunk by an
    abstention both occur."""
    rng = np.random.default_rng(100 + dim)
    switched = shrunk_by_abstention = 0
    for _ in range(40):
        points, preds, radii = _random_certificates(rng, 30, dim, max_radius, abstain)
        out = memory_certify(points, preds, radii)
        script_preds, script_radii = _script_memory(points, preds, radii)
        assert out.prediction.tolist() == script_preds
        np.testing.assert_allclose(out.radius, script_radii, rtol=1e-12, atol=1e-12)
        old = memory_certify(points, preds, radii, abstentions_in_memory=False)
        switched += int(((preds == ABSTAIN) & (out.prediction != ABSTAIN)).sum())
        shrunk_by_abstention += int((out.radius < old.radius - 1e-9).sum())
    assert switched > 10 and shrunk_by_abstention > 10


@pytest.mark.parametrize(("dim", "max_radius"), [(2, 1.0), (10, 4.0)])
@pytest.mark.parametrize("abstentions", [True, False])
def test_random_certificates_end_without_conflicts_and_with_minimal_changes(
    dim, max_radius, abstentions
):
    rng = np.random.default_rng(dim)
    switched = shrunk = 0
    for _ in range(40):
        points, preds, radii = _random_certificates(rng, 30, dim, max_radius)
        assert _conflicts(points, preds, radii, abstentions)  # the raw certificates do conflict
        out = memory_certify(points, preds, radii, abstentions)
        pred, rad = out.prediction, out.radius
        assert not _conflicts(points, pred, rad, abstentions)
        assert (rad >= 0).all() and (rad[pred == ABSTAIN] == 0).all()
        assert (pred[preds != ABSTAIN] != ABSTAIN).all()  # never a new abstention
        if not abstentions:
            assert (pred[preds == ABSTAIN] == ABSTAIN).all()
        assert (out.changed == ((pred != preds) | (rad != radii))).all()
        dist = np.linalg.norm(points[:, None] - points[None], axis=2)
        for i in np.flatnonzero(out.changed):
            earlier = np.arange(i)[(pred[:i] != ABSTAIN) | abstentions]
            if pred[i] != preds[i]:  # switched: a ball inside an earlier ball of its new class
                switched += 1
                same = earlier[pred[earlier] == pred[i]]
                assert (dist[i, same] + rad[i] <= rad[same] + 1e-9).any()
            else:  # shrunk, as little as possible: it touches an earlier ball of another class
                shrunk += 1
                assert rad[i] < radii[i]
                other = earlier[pred[earlier] != pred[i]]
                assert np.isclose(dist[i, other], rad[i] + rad[other], atol=1e-9).any()
        again = memory_certify(points, pred, rad, abstentions)  # the result is a fixed point
        assert not again.changed.any()
    assert switched > 10 and shrunk > 10


# ------------------------------------------------------------------- per-point σ in Smooth


class Constant(nn.Module):
    def __init__(self, label: int, num_classes: int = 3):
        super().__init__()
        self.label, self.num_classes = label, num_classes

    def forward(self, x):
        logits = torch.zeros(x.shape[0], self.num_classes)
        logits[:, self.label] = 1.0
        return logits


class HardLinear(nn.Module):
    """Class 1 iff w·x > 0 (‖w‖ = 1): under N(0, σ²) noise at signed distance d the votes for
    class 1 are Binomial(n, Φ(d/σ))."""

    def __init__(self):
        super().__init__()
        w = torch.tensor([2.0, -1.0, 1.0, 3.0])
        self.w = w / w.norm()

    def forward(self, x):
        t = x.flatten(1) @ self.w
        return torch.stack([-t, t], dim=1)

    def at_distances(self, distances) -> torch.Tensor:
        d = torch.as_tensor(distances, dtype=torch.float32).unsqueeze(1)
        return (d * self.w).view(-1, *SHAPE)


class Recorder(nn.Module):
    """Keeps every noisy input it sees; votes for class 0."""

    def __init__(self):
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        self.seen.append(x.clone())
        return torch.zeros(x.shape[0], 2)


def test_constant_classifier_radius_is_each_points_sigma_times_the_max_probit():
    sigmas = torch.tensor([0.12, 0.25, 0.5, 1.0, 2.0])
    xs = torch.rand(5, *SHAPE, generator=_gen())
    n, alpha = 500, 0.001
    certs = Smooth(Constant(2), 3, 0.25).certify_batch(xs, 10, n, alpha, 64, _gen(), sigmas)
    for cert, s in zip(certs, sigmas.tolist(), strict=True):
        assert (cert.prediction, cert.nA, cert.n) == (2, n, n)
        assert cert.radius == pytest.approx(max_radius(s, n, alpha), rel=1e-6)
        assert cert.radius == pytest.approx(s * norm.ppf(alpha ** (1 / n)), rel=1e-6)


def test_the_noise_of_each_point_has_its_own_sigma():
    """Points far apart, so every recorded noisy input belongs to the nearest one; several
    forward batches, each holding several points (batch_size < number of points)."""
    sigmas = torch.tensor([0.1, 0.3, 0.05, 1.0, 0.6, 0.2])
    xs = (100.0 * torch.arange(6.0)).view(6, 1, 1, 1).expand(6, *SHAPE).contiguous()
    model = Recorder()
    Smooth(model, 2, 0.5).certify_batch(xs, 40, 400, 0.001, 4, _gen(), sigmas)
    seen = torch.cat(model.seen).flatten(1)
    owner = (seen.mean(dim=1) / 100.0).round().long()
    for i, s in enumerate(sigmas.tolist()):
        noise = seen[owner == i] - xs[i].flatten()
        assert len(noise) == 440  # n0 + n draws, each its own
        assert noise.std().item() == pytest.approx(s, rel=0.08)  # ~5 standard errors
        assert noise.mean().abs().item() < 5 * s / math.sqrt(noise.numel())


def test_linear_classifier_votes_follow_phi_of_distance_over_each_points_sigma():
    model = HardLinear()
    sigmas = torch.tensor([0.25, 0.5, 1.0, 2.0])
    xs = model.at_distances([0.5] * 4)
    n = 20_000
    counts = Smooth(model, 2, 0.5).sample_counts(xs, n, 1000, _gen(), sigmas)
    assert counts.sum(dim=1).tolist() == [n] * 4
    for votes, s in zip(counts[:, 1].tolist(), sigmas.tolist(), strict=True):
        p = norm.cdf(0.5 / s)
        assert abs(votes - n * p) < 5 * math.sqrt(n * p * (1 - p)) + 1, (s, votes, n * p)


def test_a_point_certified_with_sigmas_equals_a_smooth_built_with_its_sigma():
    """Same generator state, same draws: identical certificates (near the boundary, so the
    votes are random), alone and for a batch sharing one σ."""
    model = HardLinear()
    xs = model.at_distances([0.2, -0.4, 0.05])
    for s in (0.125, 0.375):  # exact in float32, so σ·Φ⁻¹(p) agrees to the last bit
        fixed = Smooth(model, 2, s)
        per_point = Smooth(model, 2, 99.0)  # its own σ must not be used
        for x in xs:
            expected = fixed.certify_batch(x[None], 50, 2000, 0.001, 256, _gen(3))
            got = per_point.certify_batch(x[None], 50, 2000, 0.001, 256, _gen(3), torch.tensor([s]))
            assert got == expected
        sigmas = torch.full((3,), s)
        expected = fixed.certify_batch(xs, 50, 2000, 0.001, 256, _gen(4))
        assert per_point.certify_batch(xs, 50, 2000, 0.001, 256, _gen(4), sigmas) == expected


def test_mixed_sigmas_in_one_batch_match_each_point_alone_on_a_deterministic_classifier():
    """Far from the boundary (|d| ≥ 8σ) every vote is certain, so the certificates do not
    depend on the draws: batching points with different σ changes nothing."""
    model = HardLinear()
    distances = [1.0, -2.0, 4.0, -1.0, 3.0]
    sigmas = [0.125, 0.25, 0.5, 0.125, 0.375]  # exact in float32
    xs = model.at_distances(distances)
    batch = Smooth(model, 2, 0.5).certify_batch(xs, 20, 300, 0.01, 3, _gen(), torch.tensor(sigmas))
    for x, s, d, cert in zip(xs, sigmas, distances, batch, strict=True):
        alone = Smooth(model, 2, s).certify_batch(x[None], 20, 300, 0.01, 3, _gen(9))[0]
        assert cert == alone
        assert cert.prediction == int(d > 0)
        assert cert.radius == pytest.approx(max_radius(s, 300, 0.01), rel=1e-6)


def test_a_sigma_table_longer_than_the_points_is_refused():
    """`sigmas` holds one σ per input: a longer table (the σs of another split, say) is an
    error, not silently cut to the points' number (each point would still get a σ, maybe
    not its own)."""
    xs = torch.rand(2, *SHAPE, generator=_gen())
    with pytest.raises(ValueError, match="longer than"):
        Smooth(Constant(1), 3, 0.25).certify_batch(
            xs, 5, 20, 0.01, 8, _gen(), torch.tensor([0.25, 0.5, 1.0])
        )


# ------------------------------------------------------------------------------ certify_points


class Keyed(nn.Module):
    """Inputs near 100·k (k = 0, 1, ...) get logits `gaps[k]`·onehot(`classes[k]`): a vote the
    noise cannot change, and a softmax p1 = sigmoid(gap) with no gradient in σ (the key is
    rounded). So R(σ) = σ·Φ⁻¹(p1) exactly, and OptimizeSigma's every step adds lr·Φ⁻¹(p1):
    σ_x = σ0 + K·lr·Φ⁻¹(sigmoid(gap)), a different σ for each gap."""

    def __init__(self, classes: list[int], gaps: list[float]):
        super().__init__()
        self.classes, self.gaps = torch.tensor(classes), torch.tensor(gaps)

    def forward(self, x):
        key = torch.round(x.flatten(1).mean(dim=1) / 100).long()
        onehot = nn.functional.one_hot(self.classes[key], 2).to(x.dtype)
        return onehot * self.gaps[key].to(x.dtype).unsqueeze(1)


def test_ddrs_rows_carry_each_points_own_sigma_and_its_radius():
    """Five points with five different σ_x, two per forward batch: each row has the σ its own
    point's gap gives (not a neighbour's) and the radius of that σ, σ_x·Φ⁻¹(α^(1/n))."""
    classes, gaps = [1, 0, 0, 1, 0], [2.0, 0.5, 3.0, 1.0, 1.5]
    data = [(torch.full(SHAPE, 100.0 * k), c, k) for k, c in enumerate(classes)]
    ddrs = DDRSSettings(iterations=10, lr=0.05, samples=2)
    sigma0, n, alpha = 0.25, 300, 0.01
    settings = CertifySpec(
        n0=10, n=n, alpha=alpha, sigma=sigma0, batch_size=64, points_per_batch=2, ddrs=ddrs
    )
    rows = certify_points(Keyed(classes, gaps), data, range(5), 2, settings, 3, torch.device("cpu"))
    assert rows["idx"] == [0, 1, 2, 3, 4] and rows["predict"] == classes
    expected = [sigma0 + 10 * 0.05 * norm.ppf(1 / (1 + math.exp(-g))) for g in gaps]
    np.testing.assert_allclose(rows["sigma_cert"], expected, rtol=1e-5)
    assert len(set(rows["sigma_cert"])) == 5  # all different: a mix-up would show
    top = norm.ppf(alpha ** (1 / n))
    np.testing.assert_allclose(rows["radius"], [s * top for s in expected], rtol=1e-5)
    probit = norm.ppf(rows["p_lower"])
    np.testing.assert_allclose(rows["radius"], np.array(rows["sigma_cert"]) * probit, rtol=1e-9)
    assert rows["correct"] == [True] * 5 and rows["count"] == [n] * 5


def test_a_ddrs_run_draws_its_sigmas_and_votes_from_its_seed_alone():
    """ProbitLinear near its hyperplane: σ_x follows the noise OptimizeSigma draws and the
    votes the noise CERTIFY draws. The same seed gives the same σ_x and counts whatever the
    global RNG's state; another seed gives others."""
    model = ProbitLinear(sharpness=5.0)
    xs = model.at_distances([0.05, -0.1, 0.2])
    data = [(x, int(d > 0), i) for i, (x, d) in enumerate(zip(xs, [0.05, -0.1, 0.2], strict=True))]
    ddrs = DDRSSettings(iterations=3, lr=0.05, samples=2)
    settings = CertifySpec(
        n0=10, n=100, alpha=0.01, sigma=0.25, batch_size=64, points_per_batch=2, ddrs=ddrs
    )

    def run(seed: int, global_seed: int) -> tuple[list, list]:
        torch.manual_seed(global_seed)
        rows = certify_points(model, data, range(3), 2, settings, seed, torch.device("cpu"))
        return rows["sigma_cert"], rows["count"]

    sigmas, counts = run(5, 0)
    assert run(5, 1) == (sigmas, counts)
    other_sigmas, other_counts = run(6, 0)
    assert all(a != b for a, b in zip(sigmas, other_sigmas, strict=True))
    assert other_counts != counts
