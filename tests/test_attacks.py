"""SmoothAdv attacks and the training methods that use them, on tiny hand-made models."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn

from trainables import attacks
from trainables.kernel.config import TrialConfig
from trainables.methods import smoothadv, vanilla_pgd
from trainables.methods.base import StepContext, draw_noise, epoch_epsilon, warmup_factor

SHAPE = (1, 8, 8)
D = 64


class Recorder(nn.Module):
    """Wraps a model; records every forward input with the mode and gradient flags."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.calls: list[SimpleNamespace] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(
            SimpleNamespace(
                x=x.detach().clone(),
                training=self.training,
                requires_grad=[p.requires_grad for p in self.parameters()],
                grad_enabled=torch.is_grad_enabled(),
            )
        )
        return self.inner(x)


def linear_model(num_classes: int = 10, scale: float = 1.0, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(D, num_classes))
    with torch.no_grad():
        model[1].weight.mul_(scale)
    return model


def two_class_model(v: torch.Tensor) -> nn.Module:
    """logits = (0, v·x): the loss of class 0 rises along +v, at every point."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(D, 2))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.zero_()
        model[1].weight[1] = v.flatten()
    return model


def inputs(batch: int, seed: int = 1) -> torch.Tensor:
    """Random images in [0, 1] with saturated pixels (0 and 1), as real digits have."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((batch, *SHAPE), generator=g)
    x[x < 0.2] = 0.0
    x[x > 0.8] = 1.0
    return x


def noise_for(x: torch.Tensor, m: int, sigma: float = 0.25, seed: int = 2) -> torch.Tensor:
    return draw_noise(x, m, sigma, torch.Generator().manual_seed(seed))


def p_true(model, x, y, noise) -> torch.Tensor:
    with torch.no_grad():
        return attacks.smoothed_probs(model, x, noise).gather(1, y.unsqueeze(1)).squeeze(1)


def norms(v: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).norm(dim=1)


def run_attack(name: str, model, x, y, noise, epsilon: float, steps: int) -> torch.Tensor:
    if name == "pgd":
        return attacks.pgd(model, x, y, noise, epsilon, steps)
    if name == "ddn":
        return attacks.ddn(model, x, y, noise, epsilon, steps)
    return attacks.stein_pgd(model, x, y, noise, epsilon, steps, sigma=0.25)


def ctx_for(method, epsilon=0.5, steps=3, m_train=2, seed=5, attack="pgd") -> StepContext:
    extra = {} if method == "vanilla_pgd" else {"m_train": m_train}
    cfg = TrialConfig(
        dataset="digits", method=method, attack=attack, epsilon=epsilon, steps=steps, **extra
    )
    return StepContext(
        cfg, epoch=20, epsilon=epsilon, generator=torch.Generator().manual_seed(seed)
    )


# ---------------------------------------------------------------------------- PGD


@pytest.mark.parametrize("name", ["pgd", "ddn", "stein"])
@pytest.mark.parametrize("epsilon", [0.25, 1.0, 3.0])
def test_attack_stays_in_ball_and_box(name, epsilon):
    """DDN quantizes its final δ to 1/255 levels after the renorm (as the reference), so it may
    leave the ball and, for inputs off the 1/255 grid, the box by half a level per pixel."""
    model = linear_model(scale=5.0)
    x = inputs(16)
    y = torch.arange(16) % 10
    x_adv = run_attack(name, model, x, y, noise_for(x, 3), epsilon, steps=4)
    slack = 0.5 / 255 if name == "ddn" else 0.0
    assert x_adv.shape == x.shape
    assert bool((norms(x_adv - x) <= epsilon + slack * math.sqrt(D) + 1e-5).all())
    assert x_adv.min() >= -slack and x_adv.max() <= 1 + slack
    assert not x_adv.requires_grad
    if name == "ddn":
        levels = (x_adv - x) * 255
        torch.testing.assert_close(levels, levels.round(), atol=1e-4, rtol=0)


def test_pgd_has_no_random_start_and_zero_gradient_steps_along_a_draw_of_the_generator():
    """Input 0 sits where ReLU(v·x − 1) is dead (zero gradient): as the reference code, it
    steps along −r, r a standard normal draw (from the generator), then clamp and renorm."""
    v = torch.ones(D)
    model = nn.Sequential(nn.Flatten(), nn.Linear(D, 1), nn.ReLU(), nn.Linear(1, 2))
    with torch.no_grad():
        model[1].weight.copy_(v.view(1, D))
        model[1].bias.fill_(-1.0)
        model[3].weight.copy_(torch.tensor([[0.0], [1.0]]))
        model[3].bias.zero_()
    rec = Recorder(model)
    x = torch.stack([torch.full(SHAPE, 0.001), torch.full(SHAPE, 0.5)])
    y = torch.zeros(2, dtype=torch.long)
    no_noise = torch.zeros(2, 1, *SHAPE)
    gen = torch.Generator().manual_seed(3)
    x_adv = attacks.pgd(rec, x, y, no_noise, epsilon=0.5, steps=3, generator=gen)
    assert torch.equal(rec.calls[0].x, x)  # the first step starts at x itself
    r = torch.randn((1, *SHAPE), generator=torch.Generator().manual_seed(3))
    first = torch.renorm((x[:1] - 0.5 / 3 * 2 * r).clamp(0, 1) - x[:1], 2, 0, 0.5)
    torch.testing.assert_close(rec.calls[1].x[:1] - x[:1], first, atol=1e-7, rtol=0)
    assert norms(x_adv - x)[1] == pytest.approx(0.5, abs=1e-5)
    assert not torch.equal(x_adv[0], x[0])


def test_pgd_zero_gradient_everywhere_is_reproducible_from_the_generator():
    model = linear_model()
    with torch.no_grad():
        model[1].weight.zero_()
    x, y = inputs(4), torch.zeros(4, dtype=torch.long)

    def attack(seed):
        gen = torch.Generator().manual_seed(seed)
        return attacks.pgd(model, x, y, noise_for(x, 2), 1.0, 5, generator=gen)

    assert torch.equal(attack(4), attack(4))
    assert not torch.equal(attack(4), attack(5))
    assert bool((norms(attack(4) - x) > 0.5).all())


def test_stein_pgd_zero_estimate_steps_along_a_draw_of_the_generator():
    """A constant classifier and mirrored noise (+a, −a): the Stein estimate is exactly 0, so
    the step is 2ε/T times a standard normal draw from the generator (not normalized), then
    clamped to the box and projected onto the ε-ball."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(D, 2))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.zero_()
    x = torch.full((2, *SHAPE), 0.5)
    a = torch.linspace(-0.3, 0.3, D).view(SHAPE)
    noise = torch.stack([a, -a]).expand(2, 2, *SHAPE).contiguous()
    y = torch.zeros(2, dtype=torch.long)
    gen = torch.Generator().manual_seed(6)
    x_adv = attacks.stein_pgd(model, x, y, noise, epsilon=0.5, steps=1, sigma=0.25, generator=gen)
    r = torch.randn((2, *SHAPE), generator=torch.Generator().manual_seed(6))
    expected = attacks.project_l2((x + 1.0 * r).clamp(0, 1) - x, 0.5)
    torch.testing.assert_close(x_adv - x, expected, atol=1e-7, rtol=0)


@pytest.mark.parametrize("steps", [1, 2, 4, 10])
def test_pgd_step_is_2eps_over_T_along_the_gradient(steps):
    """From x = 0.5 (no clamping), the first step moves min(2ε/T, ε) along +v exactly."""
    epsilon = 0.3
    v = torch.where(torch.arange(D) % 3 == 0, 1.0, -1.0).view(1, *SHAPE)
    rec = Recorder(two_class_model(v))
    x = torch.full((1, *SHAPE), 0.5)
    x_adv = attacks.pgd(
        rec, x, torch.zeros(1, dtype=torch.long), torch.zeros(1, 1, *SHAPE), epsilon, steps
    )
    first = rec.calls[1].x if steps > 1 else x_adv
    expected = min(2 * epsilon / steps, epsilon) * v / v.norm()
    torch.testing.assert_close(first - x, expected, atol=1e-6, rtol=0)
    assert len(rec.calls) == steps


@pytest.mark.parametrize("gap", [0.0, 60.0, 90.0, 100.0])
def test_pgd_step_keeps_the_direction_of_a_confident_models_tiny_gradient(gap):
    """logits (0, v·x − gap) with v·x = 0 at x = 0.5, y = 0: the cross-entropy's input gradient
    is p₁·v with p₁ ≈ e^−gap (1e-26 at gap 60, a subnormal 4e-44 at 100). Its fp32 sum of
    squares underflows, which made the reference code step along a random draw; the step must
    still go along +v."""
    epsilon = 0.3
    v = torch.where(torch.arange(D) % 2 == 0, 1.0, -1.0).view(1, *SHAPE)
    model = two_class_model(v)
    with torch.no_grad():
        model[1].bias[1] = -gap
    x = torch.full((1, *SHAPE), 0.5)
    y = torch.zeros(1, dtype=torch.long)
    x_adv = attacks.pgd(
        model, x, y, torch.zeros(1, 1, *SHAPE), epsilon, 1, torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(x_adv - x, epsilon * v / v.norm(), atol=1e-6, rtol=0)


def test_pgd_lowers_smoothed_probability_of_true_class():
    model = linear_model(scale=3.0)
    x = inputs(32)
    y = model(x).argmax(1).detach()
    noise = noise_for(x, 4)
    before = p_true(model, x, y, noise)
    after = p_true(model, attacks.pgd(model, x, y, noise, epsilon=0.5, steps=5), y, noise)
    assert bool((after < before).all())
    assert after.mean() < 0.8 * before.mean()


@pytest.mark.parametrize("attack", ["pgd", "ddn"])
def test_smoothadv_reuses_the_same_noise_in_every_step_and_in_training(attack):
    """Every forward of smoothadv.loss sees x' + δ_i with the same δ (drawn from ctx.generator)."""
    b, m, steps, sigma = 6, 3, 4, 0.25
    inner = linear_model(scale=3.0)
    rec = Recorder(inner)
    x, y = inputs(b), torch.arange(b)
    ctx = ctx_for("smoothadv", epsilon=0.5, steps=steps, m_train=m, seed=7, attack=attack)
    out = smoothadv.loss(rec, x, y, ctx)
    noise = draw_noise(x, m, sigma, torch.Generator().manual_seed(7))
    assert len(rec.calls) == steps + 1
    points = [c.x.view(b, m, *SHAPE) - noise for c in rec.calls]
    for p in points:  # every copy i of input j shows the same x'_j once δ_i is removed
        torch.testing.assert_close(p, p[:, :1].expand_as(p), atol=1e-6, rtol=0)
    torch.testing.assert_close(points[0][:, 0], x, atol=1e-6, rtol=0)
    x_adv = run_attack(attack, inner, x, y, noise, 0.5, steps)
    assert not torch.allclose(x_adv, x)
    assert bool((norms(points[-1][:, 0] - x) <= 0.5 + 1e-5).all())
    torch.testing.assert_close(points[-1][:, 0], x_adv, atol=1e-6, rtol=0)
    assert [c.training for c in rec.calls] == [False] * steps + [True]
    assert torch.equal(out.targets, y.repeat_interleave(m))


# ---------------------------------------------------------------------------- DDN


def test_ddn_lowers_smoothed_probability():
    model = linear_model(scale=3.0)
    x = inputs(32)
    y = model(x).argmax(1).detach()
    noise = noise_for(x, 4)
    x_adv = attacks.ddn(model, x, y, noise, epsilon=2.0, steps=10)
    before, after = p_true(model, x, y, noise), p_true(model, x_adv, y, noise)
    moved = norms(x_adv - x) > 0
    assert moved.float().mean() > 0.5
    assert bool((after[moved] < before[moved]).all())
    assert torch.equal(x_adv[~moved], x[~moved])


def test_ddn_returns_clean_input_when_nothing_is_found():
    """A classifier whose class 0 always wins by a wide margin (but depends on x)."""
    model = linear_model(num_classes=3)
    with torch.no_grad():
        model[1].bias.copy_(torch.tensor([100.0, 0.0, 0.0]))
    x = inputs(8)
    y = torch.zeros(8, dtype=torch.long)
    x_adv = attacks.ddn(model, x, y, noise_for(x, 2), epsilon=1.0, steps=6)
    assert torch.equal(x_adv, x)


def test_ddn_step_sizes_are_the_reference_cosine_schedule_stepped_before_each_step():
    """CosineAnnealingLR(lr 1, T_max = T, eta_min 0.01) after k = 1..T scheduler steps."""
    assert attacks.ddn_step_sizes(2) == pytest.approx([0.505, 0.01])
    assert attacks.ddn_step_sizes(1) == pytest.approx([0.01])
    for steps in (1, 2, 4, 7, 10):
        delta = torch.zeros(1, requires_grad=True)
        optimizer = torch.optim.SGD([delta], lr=1.0)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps, eta_min=0.01)
        expected = []
        for _ in range(steps):
            optimizer.step()
            schedule.step()
            expected.append(optimizer.param_groups[0]["lr"])
        assert attacks.ddn_step_sizes(steps) == pytest.approx(expected, rel=1e-12)
    sizes = attacks.ddn_step_sizes(7)
    assert all(a > b for a, b in itertools.pairwise(sizes)) and sizes[-1] == pytest.approx(0.01)


# ---------------------------------------------------------------------------- modes


@pytest.mark.parametrize("name", ["pgd", "ddn", "stein"])
def test_attack_runs_in_eval_mode_with_frozen_parameters_and_restores(name):
    inner = nn.Sequential(nn.Flatten(), nn.Linear(D, 16), nn.BatchNorm1d(16), nn.Linear(16, 4))
    rec = Recorder(inner).train()
    x = inputs(8)
    x_adv = run_attack(name, rec, x, torch.arange(8) % 4, noise_for(x, 2), 0.5, steps=3)
    assert len(rec.calls) == 3
    assert all(not c.training and not any(c.requires_grad) for c in rec.calls)
    assert rec.training and all(mod.training for mod in rec.modules())
    assert all(p.requires_grad and p.grad is None for p in rec.parameters())
    assert x_adv.shape == x.shape


def test_frozen_eval_keeps_eval_mode_and_frozen_parameters_as_they_were():
    model = linear_model().eval()
    model[1].bias.requires_grad_(False)
    with attacks.frozen_eval(model):
        assert not any(p.requires_grad for p in model.parameters())
    assert not model.training
    assert model[1].weight.requires_grad and not model[1].bias.requires_grad


# ---------------------------------------------------------------------------- Stein


def test_stein_pgd_descends_G_y_without_network_gradients():
    v = torch.where(torch.arange(D) % 2 == 0, 1.0, -1.0).view(1, *SHAPE)
    rec = Recorder(two_class_model(2.0 * v))
    x = torch.full((4, *SHAPE), 0.5)
    y = torch.zeros(4, dtype=torch.long)
    x_adv = attacks.stein_pgd(rec, x, y, noise_for(x, 256), epsilon=0.5, steps=4, sigma=0.25)
    assert all(not c.grad_enabled for c in rec.calls)
    assert all(p.grad is None for p in rec.parameters())
    direction = (x_adv - x).flatten(1)
    cosine = direction @ v.flatten() / (direction.norm(dim=1) * v.norm())
    assert bool((cosine > 0.5).all())  # the loss of class 0 rises along +v
    fresh = noise_for(x, 2000, seed=11)
    assert bool((p_true(rec.inner, x_adv, y, fresh) < p_true(rec.inner, x, y, fresh) - 0.1).all())


def constant_model(gap: float) -> nn.Module:
    """Logits (−gap, 0, 0) whatever the input: class 0 has p₀ = e^−gap / (e^−gap + 2) for every
    noisy copy (1e-20 at gap 45, 2e-25 at 56, a subnormal 2e-44 at 100, 0 in fp32 beyond 102)."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(D, 3))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.copy_(torch.tensor([-gap, 0.0, 0.0]))
    return model


@pytest.mark.parametrize("gap", [0.0, 45.0, 50.0, 56.0, 80.0, 100.0])
def test_stein_pgd_keeps_the_estimates_direction_however_confident_the_model(gap):
    """A constant model: the Stein estimate is p₀/σ² times the mean noise n̄ (p₀ is the same for
    every noise), so one step of 2ε from x = 0.5, then projected onto the ε-ball, is −ε·n̄/‖n̄‖.
    At σ = 0.12 its entries are about 4e-20 at gap 45 and 7e-25 at 56: their fp32 sum of
    squares is subnormal, then 0, where the reference code's arithmetic steps along a random
    draw; the step must keep the estimate's direction however small p₀ is."""
    x = torch.full((4, *SHAPE), 0.5)
    noise = noise_for(x, 8, sigma=0.12)
    y = torch.zeros(4, dtype=torch.long)
    gen = torch.Generator().manual_seed(0)
    x_adv = attacks.stein_pgd(constant_model(gap), x, y, noise, 0.25, 1, 0.12, gen)
    mean = noise.mean(dim=1)
    expected = -0.25 * mean / norms(mean).view(-1, 1, 1, 1)
    torch.testing.assert_close(x_adv - x, expected, atol=1e-6, rtol=0)


def test_stein_pgd_steps_along_a_draw_once_the_probability_itself_is_zero():
    """At gap 110, p₀ is exactly 0 in fp32 (the reference code's softmax too): the estimate is
    exactly zero, so the step is 2ε times a standard normal draw from the generator, clamped
    to the box and projected onto the ε-ball."""
    x = torch.full((4, *SHAPE), 0.5)
    y = torch.zeros(4, dtype=torch.long)
    gen = torch.Generator().manual_seed(6)
    noise = noise_for(x, 8, sigma=0.12)
    x_adv = attacks.stein_pgd(constant_model(110.0), x, y, noise, 0.25, 1, 0.12, gen)
    r = torch.randn((4, *SHAPE), generator=torch.Generator().manual_seed(6))
    expected = attacks.project_l2((x + 0.5 * r).clamp(0, 1) - x, 0.25)
    torch.testing.assert_close(x_adv - x, expected, atol=1e-7, rtol=0)


# ---------------------------------------------------------------------------- baselines


def test_vanilla_pgd_trains_on_x_adv_without_noise():
    inner = linear_model(scale=3.0)
    rec = Recorder(inner)
    x, y = inputs(6), torch.arange(6)
    ctx = ctx_for("vanilla_pgd", epsilon=0.5, steps=3)
    out = vanilla_pgd.loss_vanilla(rec, x, y, ctx)
    x_adv = attacks.pgd(inner, x, y, torch.zeros(6, 1, *SHAPE), 0.5, 3)
    assert len(rec.calls) == 4
    assert torch.equal(rec.calls[0].x, x)  # the attack sees no noise
    assert torch.equal(rec.calls[-1].x, x_adv) and rec.calls[-1].training
    assert not torch.allclose(x_adv, x)
    assert torch.equal(out.targets, y)


def test_pgd_noise_trains_on_x_adv_plus_noise():
    inner = linear_model(scale=3.0)
    rec = Recorder(inner)
    x, y = inputs(6), torch.arange(6)
    ctx = ctx_for("pgd_noise", epsilon=0.5, steps=3, m_train=2, seed=9)
    out = vanilla_pgd.loss_with_noise(rec, x, y, ctx)
    x_adv = attacks.pgd(inner, x, y, torch.zeros(6, 1, *SHAPE), 0.5, 3)
    noise = draw_noise(x, 2, 0.25, torch.Generator().manual_seed(9))
    assert torch.equal(rec.calls[0].x, x)
    assert torch.equal(rec.calls[-1].x, (x_adv.unsqueeze(1) + noise).flatten(0, 1))
    assert rec.calls[-1].training
    assert torch.equal(out.targets, y.repeat_interleave(2))


# ---------------------------------------------------------------------------- warm-up


def test_warmup_is_the_reference_schedule_by_default():
    """train_pgd.py: min(ε, (epoch + 1)·ε / W), computed the same way (bit for bit)."""
    factors = [warmup_factor(e, 10) for e in range(13)]
    assert factors[:3] == pytest.approx([0.1, 0.2, 0.3])
    assert factors[9:] == [1.0] * 4
    for epsilon in (0.25, 0.5, 1.0, 2.0, 255 / 256, 0.3):
        cfg = TrialConfig(dataset="digits", method="smoothadv", epsilon=epsilon, warmup_epochs=10)
        for e in range(12):
            assert epoch_epsilon(cfg, e) == min(epsilon, (e + 1) * epsilon / 10)  # exact
    cfg = TrialConfig(dataset="digits", method="smoothadv", epsilon=0.5, warmup_epochs=10)
    assert [epoch_epsilon(cfg, e) for e in (0, 3, 9, 50)] == pytest.approx([0.05, 0.2, 0.5, 0.5])


def test_warmup_paper_schedule_rises_linearly_from_zero():
    """The paper's text (appendix D): 0 in epoch 0, ε at epoch W − 1."""
    factors = [warmup_factor(e, 10, "paper") for e in range(13)]
    assert factors[0] == 0.0
    assert factors[1] == pytest.approx(1 / 9)
    assert factors[5] == pytest.approx(5 / 9)
    assert factors[9:] == [1.0] * 4
    cfg = TrialConfig(
        dataset="digits",
        method="smoothadv",
        epsilon=0.5,
        warmup_epochs=10,
        warmup_schedule="paper",
    )
    assert [epoch_epsilon(cfg, e) for e in (0, 3, 9, 50)] == pytest.approx([0, 0.5 / 3, 0.5, 0.5])


@pytest.mark.parametrize("warmup", [0, 1])
def test_no_warmup_when_warmup_epochs_at_most_one(warmup):
    for schedule in ("reference", "paper"):
        assert [warmup_factor(e, warmup, schedule) for e in range(3)] == [1.0] * 3
        cfg = TrialConfig(
            dataset="digits",
            method="pgd_noise",
            epsilon=2.0,
            warmup_epochs=warmup,
            warmup_schedule=schedule,
        )
        assert epoch_epsilon(cfg, 0) == 2.0


def test_methods_without_attack_have_zero_epsilon():
    cfg = TrialConfig(dataset="digits", method="gaussian")
    assert epoch_epsilon(cfg, 0) == 0.0 and epoch_epsilon(cfg, 30) == 0.0


# ---------------------------------------------------------------------------- mixed precision


def _cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.flatten(1), b.flatten(1)
    return (a * b).sum(dim=1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-30)


def _confident_mlp(logit_scale: float) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * D, 32), nn.ReLU(), nn.Linear(32, 5))
    with torch.no_grad():
        model[3].weight.mul_(logit_scale)
    return model.eval()


@pytest.mark.parametrize("m", [1, 4])
def test_fp16_autocast_keeps_the_attack_gradient_that_a_plain_backward_pass_flushes(m):
    """A confident model: the objective's gradient at the logits is below fp16's smallest
    number for many inputs. Sent back through the fp16 network as it is, those rows become
    zero; input_grad scales each input by a power of two first and keeps the fp32 direction."""
    model = _confident_mlp(300.0)
    g = torch.Generator().manual_seed(1)
    x = torch.rand((64, 3, 8, 8), generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    noise = torch.randn((64, m, 3, 8, 8), generator=g) * 0.1
    delta = torch.zeros_like(x)
    full, _ = attacks.input_grad(model, x, delta, noise, y)
    with torch.autocast("cpu", dtype=torch.float16):
        half, logits = attacks.input_grad(model, x, delta, noise, y)
        d = delta.clone().requires_grad_(True)
        plain_logits = model(((x + d).unsqueeze(1) + noise).flatten(0, 1))
        (plain,) = torch.autograd.grad(attacks.smoothadv_loss(plain_logits.float(), y, m), d)
    assert logits.dtype == torch.float32 and plain_logits.dtype == torch.float16
    kept = full.flatten(1).norm(dim=1) > 0
    assert int(kept.sum()) >= 60
    flushed = kept & (plain.flatten(1).norm(dim=1) == 0)
    assert int(flushed.sum()) >= 16  # the plain fp16 backward pass loses these rows
    assert bool((half.flatten(1).norm(dim=1)[kept] > 0).all())
    cosines = _cosines(half, full)[kept]  # fp16 activations: directions to about 1e-2
    assert float(cosines.mean()) > 0.99 and float(cosines.min()) > 0.95


@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("name", ["pgd", "ddn"])
def test_bf16_autocast_adversarial_examples_match_fp32_closely(name, m):
    """The objective is computed in fp32 inside autocast: bf16 network arithmetic moves the
    adversarial examples only slightly (DDN also finds an adversary for the same inputs)."""
    model = _conv_net()
    x = inputs(32)
    with torch.no_grad():
        y = model(x).argmax(1)
    noise = noise_for(x, m)
    attack = getattr(attacks, name)
    full = attack(model, x, y, noise, 1.0, 4, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = attack(model, x, y, noise, 1.0, 4, generator=torch.Generator().manual_seed(1))
    assert half.dtype == torch.float32
    assert (half - full).abs().mean() < 0.1 * (full - x).abs().mean()
    moved_full, moved_half = norms(full - x) > 0, norms(half - x) > 0
    assert (moved_full == moved_half).float().mean() >= 0.9
    both = moved_full & moved_half
    assert int(both.sum()) >= 16
    assert float(_cosines(half - x, full - x)[both].min()) > (0.98 if name == "pgd" else 0.95)


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 6, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(6 * D, 5),
    )
    with torch.no_grad():
        model[-1].weight.mul_(4.0)
    return model.eval()


# ---------------------------------------------------------------------------- exact steps
def test_smoothed_probs_is_the_mean_softmax_over_the_noisy_copies_of_each_input():
    """On 3-channel inputs (each point and channel its own): mean_i softmax(F(x + δ_i))."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 5))
    x = torch.rand(2, 3, 4, 4)
    noise = torch.randn(2, 4, 3, 4, 4) * 0.5
    with torch.no_grad():
        got = attacks.smoothed_probs(model, x, noise)
        for b in range(2):
            probs = [torch.softmax(model((x[b] + noise[b, i])[None]), dim=1) for i in range(4)]
            torch.testing.assert_close(got[b], torch.cat(probs).mean(dim=0))


@pytest.mark.parametrize(("epsilon", "steps"), [(0.3, 1), (0.3, 2), (0.3, 4), (1.0, 3)])
def test_stein_pgd_first_step_is_2eps_over_T_against_the_estimated_gradient(epsilon, steps):
    """Mirrored noise (+a, −a) along v makes the Stein estimate point exactly along −v (the
    class-0 probability falls along +v), so from x = 0.5 the first step is min(2ε/T, ε)·v/‖v‖;
    3-channel inputs, as CIFAR's."""
    shape = (3, 4, 4)
    v = torch.where(torch.arange(48) % 2 == 0, 1.0, -1.0).view(1, *shape)
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 2))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].bias.zero_()
        model[1].weight[1] = v.flatten()
    rec = Recorder(model)
    x = torch.full((2, *shape), 0.5)
    noise = torch.stack([0.1 * v[0], -0.1 * v[0]]).expand(2, 2, *shape).contiguous()
    y = torch.zeros(2, dtype=torch.long)
    x_adv = attacks.stein_pgd(rec, x, y, noise, epsilon, steps, sigma=0.1)
    first = rec.calls[1].x.view(2, 2, *shape)[:, 0] - noise[:, 0] if steps > 1 else x_adv
    expected = (min(2 * epsilon / steps, epsilon) * v / v.norm()).expand(2, *shape)
    torch.testing.assert_close(first - x, expected, atol=1e-6, rtol=0)
    assert len(rec.calls) == steps


def _ddn_norm_after_one_step(y: int, init_norm: float | None, x_value: float = 0.5) -> float:
    """‖δ‖ of DDN's second iterate (levels=None, no noise): the sphere's radius after one
    update, the first iterate x being adversarial iff y = 0 (the model says class 1 at x)."""
    v = torch.where(torch.arange(D) % 2 == 0, 1.0, 0.5).view(1, *SHAPE)
    rec = Recorder(two_class_model(0.01 * v))  # small logits: a gradient along ±v, not 0
    x = torch.full((1, *SHAPE), x_value)
    attacks.ddn(
        rec,
        x,
        torch.tensor([y]),
        torch.zeros(1, 1, *SHAPE),
        epsilon=0.5,
        steps=2,
        init_norm=init_norm,
        gamma=0.1,
        levels=None,
    )
    return float((rec.calls[1].x - x).norm())


def test_ddn_sphere_shrinks_by_1_minus_gamma_after_an_adversarial_iterate_else_grows():
    assert _ddn_norm_after_one_step(y=0, init_norm=None) == pytest.approx(0.5 * 0.9, rel=1e-6)
    assert _ddn_norm_after_one_step(y=1, init_norm=None) == pytest.approx(0.5 * 1.1, rel=1e-6)
    assert _ddn_norm_after_one_step(y=1, init_norm=0.2) == pytest.approx(0.2 * 1.1, rel=1e-6)


def test_ddn_sphere_never_exceeds_the_distance_to_the_farthest_corner():
    """From x = 0.75 the farthest corner (0) is 0.75·√D away; a radius of 10 is cut to it, and
    the step (against v, whose entries are unequal) clamped into the box: a larger radius
    would clamp more pixels to 0."""
    v = torch.where(torch.arange(D) % 2 == 0, 1.0, 0.5).view(1, *SHAPE)
    expected = (0.75 - 0.75 * math.sqrt(D) * v / v.norm()).clamp(0, 1) - 0.75
    assert 0 < int((expected > -0.75).sum()) < D  # some pixels clamped, some not
    got = _ddn_norm_after_one_step(y=1, init_norm=10.0, x_value=0.75)
    assert got == pytest.approx(float(expected.norm()), rel=1e-6)


def test_ddn_caps_each_row_at_its_own_farthest_corner():
    """Two inputs at once, x = 0.75 and x = 0.5: each row's radius of 10 is cut to its own
    farthest-corner distance (0.75·√D and 0.5·√D), not to one shared by the batch."""
    v = torch.where(torch.arange(D) % 2 == 0, 1.0, 0.5).view(1, *SHAPE)
    rec = Recorder(two_class_model(0.01 * v))
    x = torch.stack([torch.full(SHAPE, 0.75), torch.full(SHAPE, 0.5)])
    attacks.ddn(
        rec,
        x,
        torch.tensor([1, 1]),
        torch.zeros(2, 1, *SHAPE),
        epsilon=0.5,
        steps=2,
        init_norm=10.0,
        gamma=0.1,
        levels=None,
    )
    expected = [((c - c * math.sqrt(D) * v / v.norm()).clamp(0, 1) - c).norm() for c in (0.75, 0.5)]
    torch.testing.assert_close(norms(rec.calls[1].x - x), torch.stack(expected), atol=1e-5, rtol=0)


def test_ddn_returns_its_smallest_adversarial_iterate():
    """Of the iterates DDN evaluates (levels=None, a large ε so that nothing is renormed), it
    keeps the first of the smallest whose majority vote is wrong; x itself if none is."""
    model = linear_model(scale=3.0)
    rec = Recorder(model)
    x = inputs(16)
    y = model(x).argmax(1).detach()
    noise = noise_for(x, 3)
    x_adv = attacks.ddn(rec, x, y, noise, epsilon=50.0, steps=8, levels=None)
    best = x.clone()
    best_l2 = torch.full((16,), float("inf"))
    with torch.no_grad():
        for call in rec.calls:
            iterate = call.x.view(16, 3, *SHAPE)[:, 0] - noise[:, 0]
            adversarial = attacks.majority(model(call.x), 3) != y
            l2 = norms(iterate - x)
            better = adversarial & (l2 < best_l2 - 1e-6)
            best[better], best_l2[better] = iterate[better], l2[better]
    assert bool(torch.isfinite(best_l2).any())
    torch.testing.assert_close(x_adv, best, atol=1e-5, rtol=0)


def test_smoothadv_loss_is_minus_the_summed_cross_entropy_for_one_noise_else_the_mean_j():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    y = torch.tensor([0, 1])
    log_p = torch.log_softmax(logits, dim=1)
    expected = log_p[0, 0] + log_p[1, 1]  # −(CE_0 + CE_1): summed, not averaged
    torch.testing.assert_close(attacks.smoothadv_loss(logits, y, 1), expected)
    j = -torch.log(torch.softmax(logits, dim=1).mean(dim=0)[0])  # one input, m = 2 copies
    torch.testing.assert_close(attacks.smoothadv_loss(logits, y[:1], 2), -j)


def test_pow2_scale_brings_each_inputs_largest_gradient_into_1_2_by_a_power_of_two():
    """(B·m, K) logit gradients, m = 2: each input's two rows get the same scale 2^k with
    2^k · max|g| in [1, 2)."""
    g = torch.tensor([[3e-6, -1e-5], [2e-6, 0.0], [0.75, 0.1], [-1.0, 0.2], [4.0, 1.0], [0.0, 2.0]])
    scale = attacks._pow2_scale(g, 2)
    assert scale.shape == (6, 1)
    tops = g.view(3, 4).abs().amax(dim=1).tolist()  # 1e-5 (in float32), 1.0, 4.0
    assert [scale[2 * b].item() for b in range(3)] == [scale[2 * b + 1].item() for b in range(3)]
    assert [scale[2 * b].item() for b in range(3)][1:] == [1.0, 0.25]
    for b, top in enumerate(tops):
        assert math.log2(scale[2 * b].item()).is_integer()
        assert 1.0 <= scale[2 * b].item() * top < 2.0


def test_unit_or_random_draws_zero_rows_in_the_gradients_dtype_from_the_generator():
    """A zero row of a float64 gradient is a float64 standard normal draw of the generator
    (float64 draws are not float32 ones widened); other rows are divided by their norm."""
    grad = torch.zeros(3, 2, 2, dtype=torch.float64)
    grad[1] = torch.tensor([[3.0, 0.0], [0.0, 4.0]], dtype=torch.float64)
    unit = attacks.unit_or_random(grad, torch.Generator().manual_seed(5))
    draws = torch.randn((2, 2, 2), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert unit.dtype == torch.float64
    assert torch.equal(unit[[0, 2]], draws)
    assert torch.equal(unit[1], grad[1] / 5.0)


SCALES = [-146, -100, -70, 0, 70, 100]  # powers of two: 2^-146·v is subnormal in fp32


def rows_at_scales(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(the same row v at every scale 2^k of SCALES and a zero row last, v/‖v‖ computed in
    fp64). v's entries are powers of two of different sizes, one negative: exact at any scale."""
    v = torch.tensor([[4.0, -1.0], [0.5, 2.0]], dtype=torch.float64)
    scaled = [torch.ldexp(v, torch.tensor(k)).to(dtype) for k in SCALES]
    return torch.stack([*scaled, torch.zeros_like(v, dtype=dtype)]), (v / v.norm()).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unit_or_random_keeps_the_direction_of_a_row_at_any_scale(dtype):
    """Every nonzero row, from fp32's subnormals to 2^100 (whose squares under- or overflow),
    is divided by its norm; rows of very different sizes share the batch. The zero row, and
    only it, is the generator's draw."""
    grad, unit_v = rows_at_scales(dtype)
    unit = attacks.unit_or_random(grad, torch.Generator().manual_seed(5))
    draw = torch.randn((1, 2, 2), generator=torch.Generator().manual_seed(5), dtype=dtype)
    for row in unit[:-1]:
        torch.testing.assert_close(row, unit_v, atol=0, rtol=2e-7)
    assert torch.equal(unit[-1:], draw)


def test_unit_or_random_is_the_plain_division_where_the_norm_is_in_range():
    """Rows whose norm fp32 computes without under- or overflow come out bit for bit as
    grad / ‖grad‖ (the reference code's division): scaling by a power of two is exact."""
    g = torch.Generator().manual_seed(8)
    grad = torch.randn((6, 3, 4, 4), generator=g) * torch.logspace(-15, 15, 6).view(-1, 1, 1, 1)
    plain = grad / grad.flatten(1).norm(p=2, dim=1).view(-1, 1, 1, 1)
    assert torch.equal(attacks.unit_or_random(grad, None), plain)


def test_pow2_rows_scales_each_row_by_a_power_of_two_into_half_to_one():
    grad, _ = rows_at_scales()
    scaled = attacks.pow2_rows(grad)
    top = scaled.flatten(1).abs().amax(dim=1)
    assert bool((top[:-1] >= 0.5).all()) and bool((top[:-1] < 1.0).all())
    assert torch.equal(scaled[-1], grad[-1])  # a zero row stays zero
    for row, original in zip(scaled[:-1], grad[:-1], strict=True):
        ratio = row.double() / original.double()
        assert torch.equal(ratio, ratio[0, 0].expand_as(ratio))  # one factor per row, exactly
        assert math.log2(ratio[0, 0].item()).is_integer()


def test_quantize_rounds_to_the_nearest_of_the_levels():
    v = torch.tensor([0.0, 0.3, 0.5, 0.999, 1.0])
    torch.testing.assert_close(attacks.quantize(v, 256), torch.round(v * 255) / 255)
    assert attacks.quantize(v, 3).tolist() == [0.0, 0.5, 0.5, 1.0, 1.0]
    assert attacks.quantize(v, None) is v


# DDN's contract on every iterate. A parameter-free model whose vote is wrong iff
# ‖input‖₂ > GRID_R, fed x = 0 and zero noise, shows the iterates exactly (the input is δ
# itself) and has a zero gradient everywhere (each step goes along a standard normal draw of
# the generator). From the iterates the result follows by the reference's rule: the first
# adversarial iterate of smallest ℓ2 norm (`l2 < best_l2`, so the earliest of a tie),
# renormed into the ℓ2 ε-ball (`renorm_(p=2, dim=0)`) and quantized.

# 3 channels and a batch of 4 (a radius per channel could not broadcast); few pixels, so
# that different iterates of equal norm are common.
GRID_SHAPE = (3, 1, 1)
GRID_BATCH = 4
GRID_LEVELS = 256
GRID_EPSILON = 3 / 255
# Adversarial iff beyond ε, so the kept iterate is always renormed; no ‖δ‖ on the grid of
# levels equals GRID_R (4.1² is no integer).
GRID_R = 4.1 / 255


class NormThreshold(nn.Module):
    """Votes class 1 (wrong, y = 0) iff ‖input‖₂ > GRID_R; a zero gradient. Records its inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        wrong = (x.flatten(1).norm(dim=1) > GRID_R).float()
        return torch.stack([1 - wrong, wrong], dim=1) + 0 * x.flatten(1).sum(dim=1, keepdim=True)


def run_grid_ddn(seed: int, steps: int = 20) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model = NormThreshold()
    x = torch.zeros(GRID_BATCH, *GRID_SHAPE)
    y = torch.zeros(GRID_BATCH, dtype=torch.long)
    out = attacks.ddn(
        model,
        x,
        y,
        torch.zeros(GRID_BATCH, 1, *GRID_SHAPE),
        GRID_EPSILON,
        steps,
        levels=GRID_LEVELS,
        generator=torch.Generator().manual_seed(seed),
    )
    return out, model.seen


def kept_by_the_reference(iterates: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(B, *GRID_SHAPE) the first adversarial iterate of least ℓ2 norm per row (0 if none), and
    the number of rows where a later, different iterate has that same norm (norms computed
    as DDN computes them, batched, so that float ties are its ties)."""
    best = torch.zeros_like(iterates[0])
    best_l2 = torch.full((GRID_BATCH,), float("inf"))
    norms = [delta.flatten(1).norm(p=2, dim=1) for delta in iterates]
    for delta, l2 in zip(iterates, norms, strict=True):
        for b in range(GRID_BATCH):
            if l2[b] > GRID_R and l2[b] < best_l2[b]:
                best[b], best_l2[b] = delta[b], l2[b]
    tied = 0
    for b in range(GRID_BATCH):
        tied += any(
            bool(l2[b] == best_l2[b]) and not torch.equal(d[b], best[b])
            for d, l2 in zip(iterates, norms, strict=True)
        )
    return best, tied


def test_ddn_keeps_the_first_smallest_adversarial_iterate_renormed_into_the_ball():
    ties = 0
    for seed in range(8):
        out, iterates = run_grid_ddn(seed)
        best, tied = kept_by_the_reference(iterates)
        expected = attacks.quantize(
            torch.renorm(best, p=2, dim=0, maxnorm=GRID_EPSILON), GRID_LEVELS
        )
        assert torch.equal(out, expected), f"seed {seed}"
        ties += tied
    assert ties > 0  # some rows had two different iterates of the kept norm: the earlier won


def test_ddn_iterates_lie_on_the_quantization_grid_and_the_result_within_epsilon():
    out, iterates = run_grid_ddn(seed=3)
    for delta in iterates:
        torch.testing.assert_close(delta * 255, torch.round(delta * 255), atol=1e-4, rtol=0)
    assert any(float(d.flatten(1).norm(dim=1).max()) > GRID_EPSILON for d in iterates)
    half_level = 0.5 / 255 * (torch.tensor(GRID_SHAPE).prod().sqrt())
    assert float(out.flatten(1).norm(dim=1).max()) <= GRID_EPSILON + float(half_level)


def test_ddn_random_steps_come_from_the_generator_not_the_global_rng():
    torch.manual_seed(0)
    first, _ = run_grid_ddn(seed=11)
    torch.manual_seed(1)
    second, _ = run_grid_ddn(seed=11)
    other, _ = run_grid_ddn(seed=12)
    assert torch.equal(first, second)
    assert not torch.equal(first, other)


def test_attacks_run_the_module_inside_distributed_data_parallel(tmp_path):
    """Under DistributedDataParallel an attack's forward passes go to the wrapped module (they
    must not join the gradient reduction); one gloo process stands in for the ranks."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        inner = nn.Linear(4, 2)
        wrapped = nn.parallel.DistributedDataParallel(inner)
        assert attacks.unwrap(wrapped) is inner
        assert attacks.unwrap(inner) is inner
        with attacks.frozen_eval(wrapped) as model:
            assert model is inner
    finally:
        dist.destroy_process_group()
