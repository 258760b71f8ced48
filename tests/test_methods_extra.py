"""SmoothMix, MACER, consistency and stability training: each loss against a hand computation
on a 2-class linear model with 1×1×2 inputs (fixed noise, float64), their invariants, and one
epoch of each through the training loop.

The noise is fixed by replacing `draw_noise` in the method's module; SmoothMix's λ then is the
first draw of the step's seeded generator and is recomputed here with an identically seeded one.
Expected values are computed with numpy / scipy only, never with the modules' helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from trainables import train
from trainables.kernel.config import TrialConfig
from trainables.methods import REGISTRY, consistency, macer, smoothmix, stability
from trainables.methods.base import StepContext, loss_of
from trainables.models import build_model

DT = torch.float64
NEW_METHODS = ("smoothmix", "macer", "consistency", "stability")
# The linear model of the hand computations: logits = W·x + c.
W = np.array([[2.0, -1.0], [-1.0, 1.5]])
C = np.array([0.1, -0.2])
RIGHT_0 = ([0.6, 0.3], 0)  # logits (1.0, −0.35): class 0, correctly classified
RIGHT_1 = ([0.2, 0.7], 1)  # logits (−0.2, 0.65): class 1, correctly classified
WRONG_1 = ([0.5, 0.5], 1)  # logits (0.6, 0.05): predicted 0, label 1
# The attacks compute their objective in at least float32 (float64 models: float64).
ATTACK_REL = 1e-12
SMALL_NOISE = [[[0.10, -0.20], [-0.15, 0.05]], [[0.05, 0.10], [-0.10, -0.05]]]  # (input, copy)


# ---------------------------------------------------------------------------- helpers


def linear_model(weight=W, bias=C, dtype=DT) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2)).to(dtype)
    with torch.no_grad():
        model[1].weight.copy_(torch.as_tensor(weight, dtype=DT))
        model[1].bias.copy_(torch.as_tensor(bias, dtype=DT))
    return model.train()


def batch(*cases, dtype=DT) -> tuple[torch.Tensor, torch.Tensor]:
    """(x of shape (b, 1, 1, 2), y) from (pixels, label) pairs."""
    x = torch.tensor([pixels for pixels, _ in cases], dtype=dtype).view(-1, 1, 1, 2)
    return x, torch.tensor([label for _, label in cases])


def context(method: str, epoch: int = 5, seed: int = 0, **fields) -> StepContext:
    cfg = TrialConfig(dataset="digits", method=method, **fields)
    return StepContext(cfg, epoch, 0.0, torch.Generator().manual_seed(seed))


def fix_noise(monkeypatch, module, noise) -> list[int]:
    """`module.draw_noise` returns `noise` ((b, m, 2) nested lists) and draws nothing; the
    returned list gets the m of every call."""
    calls: list[int] = []

    def fixed(x, m, sigma, generator):
        calls.append(m)
        return torch.tensor(noise, dtype=x.dtype).view(x.shape[0], m, *x.shape[1:])

    monkeypatch.setattr(module, "draw_noise", fixed)
    return calls


def record_inputs(model: nn.Module) -> list[tuple[bool, torch.Tensor]]:
    """(training?, input) of every forward call of `model`, inputs flattened to (n, 2)."""
    seen: list[tuple[bool, torch.Tensor]] = []
    model.register_forward_pre_hook(
        lambda mod, args: seen.append((mod.training, args[0].detach().flatten(1).clone()))
    )
    return seen


def training_inputs(seen) -> list[np.ndarray]:
    return [x.numpy() for training, x in seen if training]


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters()]


def np_softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return (p * (np.log(p) - np.log(q))).sum(axis=-1)


def logits_of(x: np.ndarray) -> np.ndarray:
    return x @ W.T + C


def seeded_lambda(b: int, seed: int = 0) -> np.ndarray:
    return torch.rand(b, generator=torch.Generator().manual_seed(seed), dtype=DT).numpy() / 2


# ---------------------------------------------------------------------------- every new method


def tiny_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3)).train()


METHOD_FIELDS = {
    "smoothmix": {"m_train": 2, "steps": 2, "warmup_epochs": 1},
    "macer": {"m_train": 4, "macer_gamma": 2.0},
    "consistency": {"m_train": 2},
    "stability": {},
}


@pytest.mark.parametrize("method", NEW_METHODS)
def test_loss_is_finite_and_sends_finite_nonzero_gradients_to_every_parameter(method):
    model = tiny_mlp()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(6, 1, 4, 4, generator=gen)
    y = torch.randint(0, 3, (6,), generator=gen)
    ctx = context(method, sigma=0.5, **METHOD_FIELDS[method])
    out = loss_of(REGISTRY[method])(model, x, y, ctx)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss)
    assert len(out.logits) == len(out.targets)
    out.loss.backward()
    for p in model.parameters():
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_batch_splitting_follows_each_reference_code():
    assert {name: method.splits_batch for name, method in REGISTRY.items()} == {
        "gaussian": True,
        "smoothadv": True,
        "vanilla_pgd": True,
        "pgd_noise": True,
        "smoothmix": True,
        "macer": False,
        "consistency": True,
        "stability": False,
    }


@pytest.mark.parametrize("method", NEW_METHODS)
def test_one_epoch_on_digits_takes_the_reference_optimizer_steps(method, monkeypatch):
    steps: list[int] = []
    build_state = train.build_state

    def build_state_with_hook(cfg, device=None):
        state = build_state(cfg, device)
        state.optimizer.register_step_post_hook(lambda opt, args, kwargs: steps.append(1))
        return state

    monkeypatch.setattr(train, "build_state", build_state_with_hook)
    cfg = TrialConfig(
        dataset="digits",
        method=method,
        m_train=2,
        steps=2,
        warmup_epochs=1,
        epochs=1,
        batch_size=32,
        lr=0.02,
        train_subset=64,
        eval_subset=32,
    )
    state = train.fit(cfg, None, device=torch.device("cpu"))
    (metrics,) = state.history
    chunks = 2 if REGISTRY[method].splits_batch else 1  # m_train = 2 chunks per batch
    assert len(steps) == 2 * chunks  # 64 inputs, batches of 32
    assert math.isfinite(metrics["train_loss"]) and 0 <= metrics["train_acc"] <= 1
    assert all(torch.isfinite(p).all() for p in state.model.parameters())


# ---------------------------------------------------------------------------- SmoothMix


def ascent_by_hand(
    x: np.ndarray, y: np.ndarray, alpha: float, steps: int, noise: np.ndarray | None = None
) -> list[np.ndarray]:
    """x_0 = x, ..., x_T of SmoothMix's adversary on the linear model (noise: (b, m, 2)).

    For 2 classes the gradient of the smoothed NLL −log mean_i p_i(y) in x is
    −(mean_i p_i(1−p_i) / mean_i p_i)·(W_y − W_other) whatever the noise, so every ascent step
    moves along u = (W_other − W_y)/‖W_other − W_y‖, by α·‖g‖/(‖g‖ + 1e-8) as the reference
    divides by the norm plus 1e-8, then clips to [0, 1]."""
    noise = np.zeros((len(x), 1, 2)) if noise is None else np.asarray(noise, dtype=float)
    d = W[1 - y] - W[y]
    u = d / np.linalg.norm(d, axis=1, keepdims=True)
    iterates = [x]
    for _ in range(steps):
        p = np_softmax(logits_of(iterates[-1][:, None] + noise))[np.arange(len(x)), :, y]
        g = (p * (1 - p)).mean(axis=1) / p.mean(axis=1) * np.linalg.norm(d, axis=1)
        step = (alpha * g / (g + 1e-8))[:, None]
        iterates.append(np.clip(iterates[-1] + step * u, 0, 1))
    return iterates


def smoothmix_by_hand(cases, noise, lam, *, alpha, steps, eta, w, one_step):
    """SmoothMix's loss and its parts: cross-entropy, the per-(input, copy) KL before the
    gate, the gate, the clean input actually used and the adversary."""
    x = np.array([pixels for pixels, _ in cases], dtype=float)
    y = np.array([label for _, label in cases])
    noise = np.array(noise, dtype=float)
    b = noise.shape[0]
    iterates = ascent_by_hand(x, y, alpha, steps, noise)
    x_adv = iterates[-1]
    if one_step:  # the first iterate, scaled into the ball of radius α·w around x
        first = iterates[1] - x
        length = np.linalg.norm(first, axis=1, keepdims=True)
        x = x + first * np.minimum(1.0, alpha * w / length)
    p = np_softmax(logits_of(x[:, None] + noise))  # (b, m, 2)
    xent = -np.log(p[np.arange(b), :, y]).mean()
    avg = p.mean(axis=1)
    gate = (avg.argmax(axis=1) == y).astype(float)
    x_mix = (1 - lam)[:, None] * x + lam[:, None] * x_adv
    target = (1 - lam)[:, None] * avg + lam[:, None] / 2
    q = np_softmax(logits_of(x_mix[:, None] + noise))
    kl = np_kl(target[:, None], q)  # (b, m)
    loss = xent + eta * w * (gate[:, None] * kl).mean()
    return {"loss": loss, "xent": xent, "kl": kl, "gate": gate, "x": x, "x_adv": x_adv}


SMOOTHMIX = {"sigma": 0.5, "m_train": 2, "steps": 3, "warmup_epochs": 3, "mix_alpha": 0.3}


@pytest.mark.parametrize("mix_step", [0, 1])
@pytest.mark.parametrize("epoch", [1, 2], ids=["warmup-half", "warmup-done"])
def test_smoothmix_loss_equals_the_hand_computation(monkeypatch, mix_step, epoch):
    cases = (RIGHT_0, WRONG_1)
    draws = fix_noise(monkeypatch, smoothmix, SMALL_NOISE)
    ctx = context("smoothmix", epoch, eta=2.0, mix_step=mix_step, **SMOOTHMIX)
    out = smoothmix.loss(linear_model(), *batch(*cases), ctx)
    assert draws == [2]  # one draw of m noises, used by the attack, the clean and mixed copies
    w = min(1.0, (epoch + 1) / 3)  # SmoothMix's own warm-up: (epoch + 1) / warmup_epochs
    hand = smoothmix_by_hand(
        cases,
        SMALL_NOISE,
        seeded_lambda(2),
        alpha=0.3,
        steps=3,
        eta=2.0,
        w=w,
        one_step=mix_step == 1,
    )
    assert hand["gate"].tolist() == [1.0, 0.0]
    assert hand["x_adv"][0, 0] == 0.0  # the last ascent step was clipped at 0
    assert out.loss.item() == pytest.approx(hand["loss"], rel=ATTACK_REL)
    assert out.logits.shape == (4, 2) and out.targets.tolist() == [0, 0, 1, 1]


def test_smoothmix_with_seeded_noise_equals_the_hand_computation():
    """The module's own draws from the step's generator: first the noise σ·randn((b, m, 1, 1,
    2)), then λ = rand(b)/2."""
    cases = (RIGHT_0, RIGHT_1, WRONG_1)
    ctx = context("smoothmix", 2, seed=9, eta=2.0, **SMOOTHMIX)
    out = smoothmix.loss(linear_model(), *batch(*cases), ctx)
    gen = torch.Generator().manual_seed(9)
    noise = torch.randn((3, 2, 1, 1, 2), generator=gen, dtype=DT) * 0.5
    lam = torch.rand(3, generator=gen, dtype=DT).numpy() / 2
    hand = smoothmix_by_hand(
        cases,
        noise.view(3, 2, 2).tolist(),
        lam,
        alpha=0.3,
        steps=3,
        eta=2.0,
        w=1.0,
        one_step=False,
    )
    assert out.loss.item() == pytest.approx(hand["loss"], rel=ATTACK_REL)


def test_smoothmix_draws_lambda_in_zero_to_one_half(monkeypatch):
    """λ read back from the mixed inputs: x_mix − x = λ·(x_adv − x)."""
    gen = torch.Generator().manual_seed(3)
    x = 0.2 + 0.6 * torch.rand(400, 1, 1, 2, generator=gen, dtype=DT)
    y = torch.randint(0, 2, (400,), generator=gen)
    noise = np.zeros((400, 1, 2)).tolist()
    fix_noise(monkeypatch, smoothmix, noise)
    model = linear_model()
    seen = record_inputs(model)
    cfg = {**SMOOTHMIX, "m_train": 1}
    smoothmix.loss(model, x, y, context("smoothmix", 5, seed=4, **cfg))
    clean, mixed = training_inputs(seen)
    assert np.array_equal(clean, x.flatten(1).numpy())
    direction = ascent_by_hand(clean, y.numpy(), 0.3, 3, np.zeros((400, 1, 2)))[-1] - clean
    lam = ((mixed - clean) * direction).sum(1) / (direction**2).sum(1)
    assert np.allclose(mixed - clean, lam[:, None] * direction, atol=1e-12)
    assert lam.min() >= 0 and lam.max() <= 0.5
    assert lam.min() < 0.02 and lam.max() > 0.48  # spread over the whole interval


def smoothmix_mix_term(monkeypatch, cases, noise) -> float:
    """The mean over (input, copy) of the gated KL term, as the loss weighs it (η·w = 1)."""
    fix_noise(monkeypatch, smoothmix, noise)
    x, y = batch(*cases)
    with_mix = smoothmix.loss(linear_model(), x, y, context("smoothmix", 2, eta=1.0, **SMOOTHMIX))
    without = smoothmix.loss(linear_model(), x, y, context("smoothmix", 2, eta=0.0, **SMOOTHMIX))
    return with_mix.loss.item() - without.loss.item()


def test_smoothmix_inputs_predicted_wrong_contribute_nothing_to_the_mixup_term(monkeypatch):
    both = smoothmix_mix_term(monkeypatch, (RIGHT_0, WRONG_1), SMALL_NOISE)
    right_alone = smoothmix_mix_term(monkeypatch, (RIGHT_0,), SMALL_NOISE[:1])
    hand = smoothmix_by_hand(
        (RIGHT_0, WRONG_1),
        SMALL_NOISE,
        seeded_lambda(2),
        alpha=0.3,
        steps=3,
        eta=1.0,
        w=1.0,
        one_step=False,
    )
    assert hand["kl"][1].sum() > 0.01  # ungated, the wrong input would add this much
    # A mean over the 2·m (input, copy) pairs against a mean over the m pairs of one input.
    assert 2 * both == pytest.approx(right_alone, rel=1e-10)
    assert right_alone == pytest.approx(hand["kl"][0].mean(), rel=ATTACK_REL)


def test_smoothmix_one_step_adversary_replaces_the_clean_input(monkeypatch):
    """Epoch 1 of 4 warm-up epochs (w = (1+1)/4 = ½): the first ascent step (length α, no clipping
    from these inputs) is cut to α/2, and the noisy cross-entropy, gate, target and mixup all
    start from there."""
    cases = (RIGHT_0, RIGHT_1)
    fix_noise(monkeypatch, smoothmix, SMALL_NOISE)
    model = linear_model()
    seen = record_inputs(model)
    ctx = context("smoothmix", 1, eta=2.0, mix_step=1, **{**SMOOTHMIX, "warmup_epochs": 4})
    smoothmix.loss(model, *batch(*cases), ctx)
    clean, mixed = training_inputs(seen)
    x = np.array([pixels for pixels, _ in cases])
    y = np.array([label for _, label in cases])
    u = (W[1 - y] - W[y]) / np.linalg.norm(W[1 - y] - W[y], axis=1, keepdims=True)
    start = x + 0.15 * u
    noise = np.array(SMALL_NOISE)
    assert np.allclose(clean, (start[:, None] + noise).reshape(4, 2), atol=1e-12)
    hand = smoothmix_by_hand(
        cases, SMALL_NOISE, seeded_lambda(2), alpha=0.3, steps=3, eta=2.0, w=0.5, one_step=True
    )
    assert np.allclose(hand["x"], start, atol=1e-12)
    lam = seeded_lambda(2)[:, None]
    x_mix = (1 - lam) * start + lam * hand["x_adv"]
    assert np.allclose(mixed, (x_mix[:, None] + noise).reshape(4, 2), atol=1e-12)


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_smoothmix_anchor_is_taken_at_the_start_of_step_mix_step_as_the_official_code(steps):
    """SmoothMix_PGD.attack sets its clean side when i == mix_step at the top of the loop:
    mix_step 0 -> x; mix_step 1 -> the first iterate, but x itself when steps = 1 (never
    reached; the config refuses that combination)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x = torch.rand(5, 1, 2, 2, generator=torch.Generator().manual_seed(1))
    y = torch.arange(5) % 3
    noise = torch.randn(5, 2, 1, 2, 2, generator=torch.Generator().manual_seed(2)) * 0.1
    anchor0, last = smoothmix.adversary(model, x, y, noise, 0.3, steps, 0, None)
    anchor1, last1 = smoothmix.adversary(model, x, y, noise, 0.3, steps, 1, None)
    _, first = smoothmix.adversary(model, x, y, noise, 0.3, 1, 0, None)
    assert torch.equal(anchor0, x) and torch.equal(last, last1)
    assert torch.equal(anchor1, x if steps == 1 else first)
    assert not torch.equal(first, x)


def test_smoothmix_attack_step_divides_by_the_norm_plus_1e_8_as_the_official_code():
    """Issue 40 item 3: on a confident input (a logit gap of 29) the smoothed NLL's gradient is
    ~7e-12, far below 1e-8: the reference's step moves α·‖g‖/(‖g‖ + 1e-8), almost nothing
    (a thousandth of α); at a gap of 14.5 (‖g‖ ≈ 1.5e-5) nearly a full α. Checked against
    that formula in float64."""
    gap, alpha = 29.0, 0.01
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2, 2)).double()
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[gap, 0.0], [0.0, 0.0]], dtype=torch.float64))
        model[1].bias.zero_()
    x = torch.tensor([[[[1.0, 0.5]]], [[[0.5, 0.5]]]], dtype=torch.float64)
    y = torch.tensor([0, 0])
    noise = torch.zeros(2, 1, 1, 1, 2, dtype=torch.float64)
    _, moved = smoothmix.adversary(model, x, y, noise, alpha, 1, 0, None)
    step = (moved - x).flatten(1).norm(dim=1) / alpha
    g = [gap / (1 + math.exp(gap * x[row, 0, 0, 0].item())) for row in range(2)]  # ‖∇ −log p0‖
    # 1 − p0 ≈ 2.5e-13 is held to ~4e-4 in float64 by autograd's softmax
    assert g[0] < 1e-10 and step[0].item() == pytest.approx(g[0] / (g[0] + 1e-8), rel=2e-3)
    assert step[0].item() < 1e-3
    assert step[1].item() == pytest.approx(g[1] / (g[1] + 1e-8), rel=1e-9)
    assert 0.999 < step[1].item() < 1 and smoothmix.REFERENCE_EPS == 1e-8


def test_smoothmix_warmup_is_the_official_schedule():
    assert [smoothmix.warmup(e, 3) for e in range(5)] == pytest.approx([1 / 3, 2 / 3, 1, 1, 1])
    assert smoothmix.warmup(0, 0) == 1.0


def test_smoothmix_without_the_mixup_term_is_noisy_cross_entropy_on_x(monkeypatch):
    cases = (RIGHT_0, RIGHT_1)
    fix_noise(monkeypatch, smoothmix, SMALL_NOISE)
    model = linear_model()
    seen = record_inputs(model)
    ctx = context("smoothmix", 0, eta=0.0, mix_step=0, **SMOOTHMIX)
    out = smoothmix.loss(model, *batch(*cases), ctx)
    clean = training_inputs(seen)[0]
    x = np.array([pixels for pixels, _ in cases])
    noisy = (x[:, None] + np.array(SMALL_NOISE)).reshape(4, 2)
    assert np.allclose(clean, noisy, atol=1e-15)
    p = np_softmax(logits_of(noisy))
    xent = -np.log(p[np.arange(4), [0, 0, 1, 1]]).mean()
    assert out.loss.item() == pytest.approx(xent, rel=1e-12)


@pytest.mark.parametrize("maxnorm", [None, 0.7])
def test_smoothmix_adversary_moves_at_most_t_alpha_or_maxnorm_and_stays_in_the_box(maxnorm):
    torch.manual_seed(0)
    model = build_model("digits_cnn", 10, (0.3,), (0.4,)).train()
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(16, 1, 8, 8, generator=gen).mul(1.4).sub(0.2).clamp(0, 1)  # some 0s and 1s
    y = torch.randint(0, 10, (16,), generator=gen)
    noise = torch.randn(16, 2, 1, 8, 8, generator=gen) * 0.5
    alpha, steps = 0.5, 4
    anchor, x_adv = smoothmix.adversary(model, x, y, noise, alpha, steps, 1, maxnorm)
    start, _ = smoothmix.adversary(model, x, y, noise, alpha, steps, 0, maxnorm)
    assert torch.equal(start, x)
    moved = (x_adv - x).flatten(1).norm(dim=1)
    first = (anchor - x).flatten(1).norm(dim=1)
    for point in (anchor, x_adv):
        assert point.min() >= 0 and point.max() <= 1
    assert (moved <= steps * alpha + 1e-5).all() and (first <= alpha + 1e-5).all()
    if maxnorm is None:
        assert moved.max() > 1.5 * alpha  # more than one step
    else:
        assert (moved <= maxnorm + 1e-5).all() and moved.max() > 0.9 * maxnorm
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_smoothmix_detach_changes_the_gradient_but_not_the_loss(monkeypatch):
    """Without detaching, the KL term also pulls the clean smoothed prediction (inside the
    target) towards the mixed one: that gradient must be there."""
    cases = (RIGHT_0, RIGHT_1)
    fix_noise(monkeypatch, smoothmix, SMALL_NOISE)
    results = {}
    for detach in (False, True):
        model = linear_model()
        ctx = context("smoothmix", 2, eta=5.0, mix_detach=detach, **SMOOTHMIX)
        out = smoothmix.loss(model, *batch(*cases), ctx)
        out.loss.backward()
        results[detach] = (out.loss.item(), grads(model))
    (value, attached), (value_detached, detached) = results[False], results[True]
    assert value == pytest.approx(value_detached, rel=1e-14)
    difference = max((a - d).abs().max().item() for a, d in zip(attached, detached, strict=True))
    assert difference > 1e-3


# ---------------------------------------------------------------------------- MACER

MACER = {"sigma": 0.5, "m_train": 2, "macer_beta": 2.0, "macer_gamma": 1.5}
MIDDLING_0 = ([0.4, 0.45], 0)  # logits (0.45, 0.075): right, but with a small gap


def macer_by_hand(cases, noise, *, sigma=0.5, beta=2.0, gamma=1.5):
    """(classification term, per-input hinge, per-input gap, per-input top class)."""
    x = np.array([pixels for pixels, _ in cases])
    y = np.array([label for _, label in cases])
    z = logits_of(x[:, None] + np.array(noise))  # (b, k, 2)
    p = np_softmax(z).mean(axis=1)
    classification = -np.log(p[np.arange(len(y)), y]).mean()
    p_beta = np.sort(np_softmax(beta * z).mean(axis=1), axis=1)[:, ::-1]
    gap = norm.ppf(p_beta[:, 0]) - norm.ppf(p_beta[:, 1])
    top = np_softmax(beta * z).mean(axis=1).argmax(axis=1)
    hinge = np.where(top == y, sigma / 2 * np.maximum(0.0, gamma - gap), 0.0)
    return classification, hinge, gap, top


def macer_robust_term(monkeypatch, cases, noise) -> float:
    """λ·(robustness term) with λ = 1: the loss minus the loss with λ = 0."""
    fix_noise(monkeypatch, macer, noise)
    x, y = batch(*cases)
    with_term = macer.loss(linear_model(), x, y, context("macer", lam=1.0, **MACER))
    without = macer.loss(linear_model(), x, y, context("macer", lam=0.0, **MACER))
    return with_term.loss.item() - without.loss.item()


MACER_NOISE = [[[0.10, -0.20], [-0.15, 0.05]], [[0.05, 0.10], [-0.10, -0.05]], [[0, 0.1], [0.1, 0]]]


def test_macer_loss_equals_the_hand_computation(monkeypatch):
    cases = (RIGHT_0, MIDDLING_0, WRONG_1)
    classification, hinge, gap, top = macer_by_hand(cases, MACER_NOISE)
    assert gap[0] > 1.5 and 0 < gap[1] < 1.5 and top[2] != 1
    assert gap[2] < 1.5  # the misclassified input would have a hinge if it were not gated
    fix_noise(monkeypatch, macer, MACER_NOISE)
    out = macer.loss(linear_model(), *batch(*cases), context("macer", lam=3.0, **MACER))
    assert out.loss.item() == pytest.approx(classification + 3.0 * hinge.mean(), rel=1e-9)


@pytest.mark.parametrize(
    ("case", "expected"),
    [(RIGHT_0, "zero"), (MIDDLING_0, "hinge"), (WRONG_1, "zero")],
    ids=["gap-above-gamma", "gap-below-gamma", "misclassified"],
)
def test_macer_hinge_per_input(monkeypatch, case, expected):
    noise = MACER_NOISE[:1]
    term = macer_robust_term(monkeypatch, (case,), noise)
    _, hinge, gap, _ = macer_by_hand((case,), noise)
    if expected == "zero":
        assert term == 0.0
    else:
        assert term > 0.1
        assert term == pytest.approx(0.5 / 2 * (1.5 - gap[0]), rel=1e-9)
        assert term == pytest.approx(hinge[0], rel=1e-9)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_macer_certain_prediction_gives_no_term_and_finite_gradients(monkeypatch, dtype):
    """Input 0 has p_y = 1 exactly (Φ⁻¹ = ∞) under temperature β = 16; input 1 is ordinary.
    The batch's loss and gradients stay finite, and input 0 adds no hinge, even with a margin
    γ = 16 above any gap of clamped probabilities (Φ⁻¹(1 − 1e-7) − Φ⁻¹(1e-20) ≈ 14.5)."""
    weight = [[300.0, -300.0], [-300.0, 300.0]]
    model = linear_model(weight, [0.0, 0.0], dtype)
    x, y = batch(([1.0, 0.0], 0), ([0.501, 0.5], 0), dtype=dtype)
    with torch.no_grad():
        p = torch.softmax(16 * model(x), dim=1)
    assert p[0, 0].item() == 1.0 and p[0, 1].item() == 0.0
    fix_noise(monkeypatch, macer, [[[0.0, 0.0]], [[0.0, 0.0]]])
    fields = {"sigma": 0.5, "m_train": 1, "macer_beta": 16.0, "macer_gamma": 16.0}
    out = macer.loss(model, x, y, context("macer", lam=12.0, **fields))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(g).all() for g in grads(model))
    certain_x, certain_y = x[:1], y[:1]
    fix_noise(monkeypatch, macer, [[[0.0, 0.0]]])
    with_term = macer.loss(model, certain_x, certain_y, context("macer", lam=12.0, **fields))
    without = macer.loss(model, certain_x, certain_y, context("macer", lam=0.0, **fields))
    assert with_term.loss.item() == without.loss.item()


def test_macer_with_the_papers_settings_trains_one_epoch_on_digits():
    cfg = TrialConfig(
        dataset="digits",
        method="macer",
        m_train=16,
        sigma=0.25,
        epochs=1,
        batch_size=32,
        lr=0.05,
        train_subset=64,
        eval_subset=32,
    )
    assert (cfg.lam, cfg.macer_beta, cfg.macer_gamma) == (12.0, 16.0, 8.0)
    state = train.fit(cfg, None, device=torch.device("cpu"))
    assert math.isfinite(state.history[0]["train_loss"])
    assert all(torch.isfinite(p).all() for p in state.model.parameters())


# ---------------------------------------------------------------------------- consistency

LOG3 = math.log(3.0)
HALF = ([0.5, 0.5], 0)  # with W = I, c = 0: logits (0.5, 0.5)


def test_consistency_kl_to_the_mean_prediction_by_hand(monkeypatch):
    """Copies with p_1 = (¾, ¼), p_2 = (¼, ¾): p̄ = (½, ½), KL(p̄ ‖ p_i) = ½·ln(4/3) for both,
    H(p̄) = ln 2, cross-entropy (−ln ¾ − ln ¼)/2."""
    fix_noise(monkeypatch, consistency, [[[LOG3, 0.0], [0.0, LOG3]]])
    model = linear_model(np.eye(2), [0.0, 0.0])
    ctx = context("consistency", sigma=0.25, m_train=2, lam=10.0, eta=0.5)
    out = consistency.loss(model, *batch(HALF), ctx)
    xent = (-math.log(0.75) - math.log(0.25)) / 2
    expected = xent + 10.0 * 0.5 * math.log(4 / 3) + 0.5 * math.log(2)
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("case", ["zero-noise", "constant-model"])
def test_consistency_with_identical_copies_is_cross_entropy_plus_eta_entropy(monkeypatch, case):
    if case == "zero-noise":
        model, noise = linear_model(), np.zeros((2, 3, 2)).tolist()
    else:
        model, noise = linear_model(np.zeros((2, 2)), [0.3, -0.1]), SMALL_NOISE
        noise = [[*row, [0.2, 0.3]] for row in noise]  # three copies
    cases = (RIGHT_0, WRONG_1)
    fix_noise(monkeypatch, consistency, noise)
    ctx = context("consistency", sigma=0.25, m_train=3, lam=10.0, eta=0.7)
    out = consistency.loss(model, *batch(*cases), ctx)
    x = np.array([pixels for pixels, _ in cases])
    weight = W if case == "zero-noise" else np.zeros((2, 2))
    bias = C if case == "zero-noise" else np.array([0.3, -0.1])
    p = np_softmax(x @ weight.T + bias)
    xent = -np.log(p[[0, 1], [0, 1]]).mean()
    entropy = -(p * np.log(p)).sum(axis=1).mean()
    assert out.loss.item() == pytest.approx(xent + 0.7 * entropy, rel=1e-12)


def test_consistency_with_seeded_noise_equals_the_hand_computation():
    """The module's own draw: noise = σ·randn((b, m, 1, 1, 2)) from the step's generator."""
    cases = (RIGHT_0, RIGHT_1, WRONG_1)
    ctx = context("consistency", seed=5, sigma=0.5, m_train=3, lam=10.0, eta=0.5)
    out = consistency.loss(linear_model(), *batch(*cases), ctx)
    gen = torch.Generator().manual_seed(5)
    noise = (torch.randn((3, 3, 1, 1, 2), generator=gen, dtype=DT) * 0.5).view(3, 3, 2).numpy()
    x = np.array([pixels for pixels, _ in cases])
    y = np.array([label for _, label in cases])
    p = np_softmax(logits_of(x[:, None] + noise))  # (b, m, 2)
    avg = p.mean(axis=1)
    xent = -np.log(p[np.arange(3), :, y]).mean()
    kl = np_kl(avg[:, None], p).mean(axis=1)
    entropy = -(avg * np.log(avg)).sum(axis=1)
    expected = xent + (10.0 * kl + 0.5 * entropy).mean()
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------- stability


def test_stability_kl_from_clean_to_noisy_by_hand(monkeypatch):
    """Clean p = (½, ½), noisy q = (¾, ¼): KL(p ‖ q) = ½·ln(4/3) (the other way round it
    would be ¾·ln(3/2) + ¼·ln(½)); cross-entropy on the clean input ln 2."""
    fix_noise(monkeypatch, stability, [[[LOG3, 0.0]]])
    model = linear_model(np.eye(2), [0.0, 0.0])
    ctx = context("stability", sigma=0.25, lam=2.0, stability_loss="kl")
    out = stability.loss(model, *batch(HALF), ctx)
    assert out.loss.item() == pytest.approx(math.log(2) + 2.0 * 0.5 * math.log(4 / 3), rel=1e-12)
    assert out.logits.tolist() == [[0.5, 0.5]]  # trained accuracy is on the clean input


def test_stability_cross_entropy_from_clean_to_noisy_by_hand(monkeypatch):
    """The default (train_stab.py): −Σ p·log q = KL(p ‖ q) + H(p) = ½·ln(4/3) + ln 2 for the
    same p = (½, ½), q = (¾, ¼)."""
    fix_noise(monkeypatch, stability, [[[LOG3, 0.0]]])
    model = linear_model(np.eye(2), [0.0, 0.0])
    out = stability.loss(model, *batch(HALF), context("stability", sigma=0.25, lam=2.0))
    regularizer = 0.5 * math.log(4 / 3) + math.log(2)
    assert out.loss.item() == pytest.approx(math.log(2) + 2.0 * regularizer, rel=1e-12)


@pytest.mark.parametrize("loss_name", ["cross_entropy", "kl"])
def test_stability_with_seeded_noise_equals_the_hand_computation(loss_name):
    cases = (RIGHT_0, RIGHT_1, WRONG_1)
    ctx = context("stability", seed=7, sigma=0.5, lam=2.0, stability_loss=loss_name)
    out = stability.loss(linear_model(), *batch(*cases), ctx)
    gen = torch.Generator().manual_seed(7)
    noise = (torch.randn((3, 1, 1, 1, 2), generator=gen, dtype=DT) * 0.5).view(3, 2).numpy()
    x = np.array([pixels for pixels, _ in cases])
    p, q = np_softmax(logits_of(x)), np_softmax(logits_of(x + noise))
    xent = -np.log(p[np.arange(3), [0, 1, 1]]).mean()
    reg = np_kl(p, q) if loss_name == "kl" else -(p * np.log(q)).sum(axis=1)
    assert out.loss.item() == pytest.approx(xent + 2.0 * reg.mean(), rel=1e-12)


@pytest.mark.parametrize("loss_name", ["cross_entropy", "kl"])
def test_stability_without_noise_is_clean_cross_entropy_plus_the_entropy_or_not(
    monkeypatch, loss_name
):
    cases = (RIGHT_0, WRONG_1)
    fix_noise(monkeypatch, stability, [[[0.0, 0.0]], [[0.0, 0.0]]])
    ctx = context("stability", lam=2.0, stability_loss=loss_name)
    out = stability.loss(linear_model(), *batch(*cases), ctx)
    p = np_softmax(logits_of(np.array([pixels for pixels, _ in cases])))
    entropy = -(p * np.log(p)).sum(axis=1).mean() if loss_name == "cross_entropy" else 0.0
    expected = -np.log(p[[0, 1], [0, 1]]).mean() + 2.0 * entropy
    assert out.loss.item() == pytest.approx(expected, rel=1e-12)
