"""SmoothAdv-DDN and -PGD against the authors' code (Hadisalman/smoothing-adversarial,
code/attacks.py, driven by code/train_pgd.py), on a small conv net, same inputs and noise.

The reference cannot be vendored: `reference_ddn` and `reference_pgd` below re-derive its
arithmetic in its own layout (the m copies of input b on rows b·m .. b·m + m − 1, one δ per
input repeated over them, torch's SGD and CosineAnnealingLR stepped as train_pgd.py's
attacker steps them), with sweeper's one deviation from its arithmetic (docs/deviations.md, 19:
a nonzero gradient whose fp32 norm underflows keeps its direction, where the code draws at
random). Our attacks must equal them to 1e-5 over T ∈ {1, 2, 4, 10}, m ∈ {1, 2, 4} and
several ε, including inputs whose gradient is exactly zero.

The same holds for the gradient-free attack (estimator (7), `stein_pgd`) against the code's
`_attack_mutlinoise_no_grad`, m = 1 included, where the code's `attack()` runs its gradient
attack instead (sweeper's plug-in PGD at m = 1 is that); and for SmoothAdv training with one
noise per input (`train_multi_noise: false`) against train_pgd.py's loop without
--train-multi-noise (the loss, every gradient and the batch-norm buffers after one step).

`test_against_the_reference_code_itself` runs the reference's own classes when the
environment variable SMOOTHING_ADVERSARIAL points at a checkout of that repository (a
directory holding code/attacks.py), against the re-derivation without the deviation and ours
against the re-derivation with it, and its no-gradient attack likewise (the test after it);
both are skipped otherwise:

    git clone https://github.com/Hadisalman/smoothing-adversarial /tmp/sa
    SMOOTHING_ADVERSARIAL=/tmp/sa pytest -s tests/test_smoothadv_reference.py
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainables import attacks

SHAPE = (3, 8, 8)  # three channels: the reference repeats δ along dim 1, then views as rows
CLASSES = 5
CASES = list(itertools.product([1, 2, 4, 10], [1, 2, 4], [0.25, 0.5, 1.0]))  # T, m, ε
TOLERANCE = 1e-5


def conv_net(seed: int = 0, logit_scale: float = 4.0) -> nn.Module:
    """A small conv net with batch norm (running statistics set, used in eval mode)."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 6, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(6 * 4 * 4, CLASSES),
    )
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.2, 0.2)
        model[1].running_var.uniform_(0.5, 1.5)
        model[-1].weight.mul_(logit_scale)
    return model.eval()


def batch(model: nn.Module, size: int = 12, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Images on the 1/255 grid (as CIFAR-10's) with saturated pixels; labels: the model's
    clean prediction but for the last quarter (random, mostly misclassified)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (size, *SHAPE), generator=g).float() / 255
    x[:, :, :2] = 0.0
    x[:, :, -1] = 1.0
    with torch.no_grad():
        y = model(x).argmax(dim=1)
    y[-size // 4 :] = torch.randint(0, CLASSES, (size // 4,), generator=g)
    return x, y


def gaussian(x: torch.Tensor, m: int, sigma: float = 0.25, seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((len(x), m, *x.shape[1:]), generator=g) * sigma


# ---------------------------------------------------------------------------- re-derivation


def _rows(x: torch.Tensor, m: int) -> torch.Tensor:
    return x.repeat_interleave(m, dim=0)


def _reference_loss(logits: torch.Tensor, y: torch.Tensor, m: int) -> torch.Tensor:
    """What the reference's optimizer descends: −CE summed (m = 1, `_attack`), or −(batch
    mean of −log of the mean softmax of y, clamped at 1e-20) (m > 1, `_attack_mutlinoise`)."""
    if m == 1:
        return -F.cross_entropy(logits, y, reduction="sum")
    mean_softmax = F.softmax(logits, dim=1).reshape(len(y), m, -1).mean(dim=1)
    return -F.nll_loss(torch.log(mean_softmax.clamp(min=1e-20)), y)


def _normalized_grad(delta: torch.Tensor, generator, keep_tiny: bool) -> None:
    """The gradient of δ divided by its row norms; rows whose fp32 norm is 0 get randn (not
    normalized). With `keep_tiny` (sweeper's Deviations 19), a row that is not all zero but
    whose fp32 sum of squares is subnormal (norm below 2^-63: imprecise) or 0 (every entry
    below ~1e-23) is divided by its norm in fp64 instead; without it, the code's own rule."""
    grad = delta.grad
    flat = grad.reshape(len(grad), -1)
    norms = flat.norm(p=2, dim=1)
    zero = norms == 0
    tiny = (norms < 2.0**-63) & (flat != 0).any(dim=1) if keep_tiny else torch.zeros_like(zero)
    wide = flat[tiny].double()
    kept = (wide / wide.norm(p=2, dim=1, keepdim=True)).float()
    grad.div_(norms.view(-1, 1, 1, 1))
    grad[tiny] = kept.view(-1, *grad.shape[1:])
    zero &= ~tiny
    if zero.any():
        grad[zero] = torch.randn(grad[zero].shape, generator=generator)


def _mode(votes: torch.Tensor) -> torch.Tensor:
    """(B,) the most frequent class of each row of votes (B, m); the smallest on a tie."""
    counts = F.one_hot(votes, CLASSES).sum(dim=1)
    return counts.argmax(dim=1)  # argmax returns the first (smallest) maximal class


def reference_ddn(
    model, x, y, noise, epsilon, steps, init_norm, gamma=0.05, generator=None, keep_tiny=True
):
    B, m = noise.shape[:2]
    rows, flat_noise = _rows(x, m), noise.reshape(B * m, *x.shape[1:])
    delta = torch.zeros_like(x, requires_grad=True)
    optimizer = torch.optim.SGD([delta], lr=1.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=0.01)
    norm = torch.full((B,), float(init_norm))
    worst = torch.max(x, 1 - x).reshape(B, -1).norm(p=2, dim=1)
    best_l2, best = worst.clone(), torch.zeros_like(x)
    for _ in range(steps):
        with warnings.catch_warnings():  # the scheduler steps before the optimizer, on purpose
            warnings.simplefilter("ignore")
            schedule.step()
        l2 = delta.detach().reshape(B, -1).norm(p=2, dim=1)
        logits = model(rows + _rows(delta, m) + flat_noise)
        is_adv = _mode(logits.argmax(dim=1).reshape(B, m)) != y
        better = is_adv & (l2 < best_l2)
        best_l2[better] = l2[better]
        best[better] = delta.detach()[better]
        optimizer.zero_grad()
        _reference_loss(logits, y, m).backward()
        _normalized_grad(delta, generator, keep_tiny)
        optimizer.step()
        norm = torch.min(norm * (1 - (2 * is_adv.float() - 1) * gamma), worst)
        with torch.no_grad():
            delta.mul_((norm / delta.reshape(B, -1).norm(p=2, dim=1)).view(-1, 1, 1, 1))
            delta.copy_((torch.round((delta + x) * 255) / 255).clamp(0, 1) - x)
    best = torch.renorm(best, p=2, dim=0, maxnorm=epsilon)
    return x + torch.round(best * 255) / 255


def reference_pgd(model, x, y, noise, epsilon, steps, generator=None, keep_tiny=True):
    B, m = noise.shape[:2]
    rows, flat_noise = _rows(x, m), noise.reshape(B * m, *x.shape[1:])
    delta = torch.zeros_like(x, requires_grad=True)
    optimizer = torch.optim.SGD([delta], lr=epsilon / steps * 2)
    for _ in range(steps):
        logits = model(rows + _rows(delta, m) + flat_noise)
        optimizer.zero_grad()
        _reference_loss(logits, y, m).backward()
        _normalized_grad(delta, generator, keep_tiny)
        optimizer.step()
        with torch.no_grad():
            delta.copy_((delta + x).clamp(0, 1) - x)
            delta.copy_(torch.renorm(delta, p=2, dim=0, maxnorm=epsilon))
    return (x + delta).detach()


# ---------------------------------------------------------------------------- tests


def _gen(seed: int = 9) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("steps", "m", "epsilon"), CASES)
def test_ddn_equals_the_reference_arithmetic(steps, m, epsilon):
    """Initial norm ε (train_pgd.py's), cosine steps at k = 1..T, the majority vote, the
    final quantization; and the ddn_init_norm override."""
    model = conv_net()
    x, y = batch(model)
    noise = gaussian(x, m)
    ours = attacks.ddn(model, x, y, noise, epsilon, steps, generator=_gen())
    expected = reference_ddn(
        model, x, y, noise, epsilon, steps, init_norm=epsilon, generator=_gen()
    )
    assert (ours - expected).abs().max().item() <= TOLERANCE
    moved = int(((ours - x).flatten(1).norm(dim=1) > 0).sum())
    assert moved >= (3 if steps > 1 and epsilon == 1.0 else 0)  # T = 1 never tries a δ ≠ 0
    override = attacks.ddn(model, x, y, noise, epsilon, steps, init_norm=1.0, generator=_gen())
    expected = reference_ddn(model, x, y, noise, epsilon, steps, init_norm=1.0, generator=_gen())
    assert (override - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize(("steps", "m", "epsilon"), CASES)
def test_pgd_equals_the_reference_arithmetic(steps, m, epsilon):
    model = conv_net()
    x, y = batch(model)
    noise = gaussian(x, m)
    ours = attacks.pgd(model, x, y, noise, epsilon, steps, generator=_gen())
    expected = reference_pgd(model, x, y, noise, epsilon, steps, generator=_gen())
    assert (ours - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("m", [1, 4])
@pytest.mark.parametrize("name", ["ddn", "pgd"])
def test_zero_gradient_rows_step_along_the_generators_draws_as_the_reference(name, m):
    """Logits scaled so far that softmax saturates: confidently classified inputs have an
    exactly zero gradient and step along a standard normal draw instead (and, at later steps,
    some have a gradient whose fp32 norm underflows: Deviations 19, with m = 4)."""
    model = conv_net(logit_scale=3e4)
    x, y = batch(model, 16)
    noise = gaussian(x, m)
    grad, _ = attacks.input_grad(model, x, torch.zeros_like(x), noise, y)
    zero = grad.flatten(1).norm(dim=1) == 0
    assert 0 < int(zero.sum()) < len(x)
    if name == "ddn":
        ours = attacks.ddn(model, x, y, noise, 1.0, 4, generator=_gen())
        expected = reference_ddn(model, x, y, noise, 1.0, 4, init_norm=1.0, generator=_gen())
    else:
        ours = attacks.pgd(model, x, y, noise, 1.0, 4, generator=_gen())
        expected = reference_pgd(model, x, y, noise, 1.0, 4, generator=_gen())
    assert (ours - expected).abs().max().item() <= TOLERANCE
    moved = (ours - x).flatten(1).norm(dim=1) > 0
    assert bool(moved[zero].any())
    again = getattr(attacks, name)(model, x, y, noise, 1.0, 4, generator=_gen())
    assert torch.equal(again, ours)  # reproducible from the generator


def test_ddn_majority_vote_takes_the_smallest_class_on_a_tie():
    logits = torch.tensor([[0, 9, 0], [9, 0, 0], [0, 0, 9], [0, 9, 0], [9, 0, 0], [0, 0, 9.0]])
    votes = attacks.majority(logits, 2)  # (1, 0), (2, 1), (0, 2)
    assert votes.tolist() == [0, 1, 0]
    assert attacks.majority(logits, 3).tolist() == [0, 0]
    assert votes.tolist() == _mode(logits.argmax(1).reshape(3, 2)).tolist()


# ---------------------------------------------------------------------------- the code itself


def _reference_module():
    root = os.environ.get("SMOOTHING_ADVERSARIAL")
    if not root:
        pytest.skip("set SMOOTHING_ADVERSARIAL to a checkout of Hadisalman/smoothing-adversarial")
    path = Path(root) / "code" / "attacks.py"
    if not path.is_file():
        pytest.fail(f"SMOOTHING_ADVERSARIAL={root}: no code/attacks.py there")
    spec = importlib.util.spec_from_file_location("smoothing_adversarial_attacks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_reference(module, name, model, x, y, noise, epsilon, steps, seed):
    B, m = noise.shape[:2]
    if name == "ddn":
        attacker = module.DDN(steps=steps, max_norm=epsilon, init_norm=epsilon, gamma=0.05)
    else:
        attacker = module.PGD_L2(steps=steps, max_norm=epsilon)
    torch.manual_seed(seed)  # its zero-gradient draws come from the global generator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = attacker.attack(
            model, _rows(x, m), y, noise=noise.reshape(B * m, *x.shape[1:]), num_noise_vectors=m
        )
    return out.detach()[::m]


def _rederived(name, model, x, y, noise, epsilon, steps, keep_tiny):
    torch.manual_seed(5)  # the reference's zero-gradient draws come from the global generator
    if name == "ddn":
        return reference_ddn(model, x, y, noise, epsilon, steps, epsilon, keep_tiny=keep_tiny)
    return reference_pgd(model, x, y, noise, epsilon, steps, keep_tiny=keep_tiny)


def test_against_the_reference_code_itself():
    """Salman et al.'s DDN and PGD_L2 classes, as train_pgd.py calls them, against the
    re-derivation of their arithmetic (its zero-gradient draws from the global generator, same
    seed), and ours against the re-derivation with Deviations 19 (logits scaled by 3e4 give
    gradients whose fp32 norm underflows); ours gets generator=None."""
    module = _reference_module()
    worst = {"ddn": 0.0, "pgd": 0.0, "ours ddn": 0.0, "ours pgd": 0.0}
    for (steps, m, epsilon), scale in itertools.product(CASES, [4.0, 3e4]):
        model = conv_net(logit_scale=scale)
        x, y = batch(model)
        noise = gaussian(x, m)
        for name in ("ddn", "pgd"):
            expected = _run_reference(module, name, model, x, y, noise, epsilon, steps, seed=5)
            code = _rederived(name, model, x, y, noise, epsilon, steps, keep_tiny=False)
            worst[name] = max(worst[name], (code - expected).abs().max().item())
            kept = _rederived(name, model, x, y, noise, epsilon, steps, keep_tiny=True)
            torch.manual_seed(5)
            ours = getattr(attacks, name)(model, x, y, noise, epsilon, steps)
            worst[f"ours {name}"] = max(worst[f"ours {name}"], (ours - kept).abs().max().item())
    print(f"\nmax differences over {2 * len(CASES)} cases: {worst}")
    assert max(worst.values()) <= TOLERANCE


# ------------------------------------------------ train_pgd.py without --train-multi-noise


def reference_one_noise_batch(model, x, y, m, sigma, epsilon, steps, attack, gen):
    """train_pgd.py's train() on one loader batch without --train-multi-noise (l. 228-294),
    transcribed: `get_minibatches` (m chunks of B // m), each chunk's inputs repeated m times
    (`inputs.repeat((1, m, 1, 1)).view(batch[0].shape)`), its noise `randn_like(inputs) *
    noise_sd` (here from `gen`), the attacker in eval mode with the parameters frozen (the
    re-derivations above, in the same row layout), then `inputs[::m] + noise[::m]` of every
    chunk concatenated and one cross-entropy (the criterion's batch mean) in train mode,
    against `batch[1]`."""
    b = len(x) // m
    noisy_inputs_list = []
    for i in range(m):
        inputs, targets = x[i * b : (i + 1) * b], y[i * b : (i + 1) * b]
        inputs = inputs.repeat((1, m, 1, 1)).view(b * m, *x.shape[1:])
        assert torch.equal(inputs, _rows(x[i * b : (i + 1) * b], m))
        noise = torch.randn(inputs.shape, generator=gen) * sigma
        model.requires_grad_(False)
        model.eval()
        per_input = noise.view(b, m, *x.shape[1:])
        if attack == "pgd":
            adv = reference_pgd(model, inputs[::m], targets, per_input, epsilon, steps)
        else:
            adv = reference_ddn(model, inputs[::m], targets, per_input, epsilon, steps, epsilon)
        inputs = _rows(adv, m)  # the attacker returns every copy's row
        model.train()
        model.requires_grad_(True)
        noisy_inputs_list.append(inputs[::m] + noise[::m])
    noisy_inputs = torch.cat(noisy_inputs_list)
    assert len(y) == len(noisy_inputs)
    return F.cross_entropy(model(noisy_inputs), y)


@pytest.mark.parametrize("attack", ["pgd", "ddn"])
@pytest.mark.parametrize("m", [2, 4])
def test_one_noise_per_input_equals_train_pgd_without_train_multi_noise(attack, m):
    """train_multi_noise false: one optimizer step per batch (`Method.chunks`), its loss and
    every parameter's gradient those of the transcription, on the same noise (drawn chunk by
    chunk from generators in the same state) and a model in the same state."""
    import copy

    from trainables.kernel.config import TrialConfig
    from trainables.methods import REGISTRY, smoothadv
    from trainables.methods.base import StepContext

    model = conv_net().train()
    x, y = batch(model)
    cfg = TrialConfig(
        dataset="cifar10",
        method="smoothadv",
        sigma=0.25,
        m_train=m,
        attack=attack,
        epsilon=0.5,
        steps=4,
        train_multi_noise=False,
    )
    assert REGISTRY["smoothadv"].chunks(cfg) == 1
    assert REGISTRY["smoothadv"].chunks(cfg.replace(train_multi_noise=True)) == m
    ours_model, ref_model = copy.deepcopy(model), copy.deepcopy(model)
    ctx = StepContext(cfg, epoch=20, epsilon=0.5, generator=_gen(7))
    out = smoothadv.loss(ours_model, x, y, ctx)
    expected = reference_one_noise_batch(ref_model, x, y, m, 0.25, 0.5, 4, attack, _gen(7))
    assert ours_model.training and torch.equal(out.targets, y) and len(out.logits) == len(x)
    assert abs(out.loss.item() - expected.item()) <= TOLERANCE
    out.loss.backward()
    expected.backward()
    for (name, p), q in zip(ours_model.named_parameters(), ref_model.parameters(), strict=True):
        assert (p.grad - q.grad).abs().max().item() <= TOLERANCE, name
    for a, b in zip(ours_model.buffers(), ref_model.buffers(), strict=True):
        assert torch.allclose(a.float(), b.float(), atol=TOLERANCE)  # one train-mode pass


def test_one_noise_per_input_is_unused_at_m_train_1_and_trains_a_whole_batch_per_step():
    """m_train 1: one noise per input either way (train_pgd.py's two branches train alike), so
    the setting is unused and no part of the trial_id. A trial with it false takes one
    optimizer step per loader batch, with it true one per chunk."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from trainables.kernel.config import TrialConfig
    from trainables.train import fit

    one = TrialConfig(dataset="digits", method="smoothadv", m_train=1, train_multi_noise=False)
    assert one.train_multi_noise is None and one == TrialConfig(dataset="digits", m_train=1)
    cfg = TrialConfig(
        dataset="digits",
        method="smoothadv",
        sigma=0.25,
        m_train=2,
        epsilon=0.5,
        steps=2,
        epochs=1,
        batch_size=32,
        train_subset=64,
        eval_subset=32,
        train_multi_noise=False,
    )
    assert cfg.trial_id != cfg.replace(train_multi_noise=True).trial_id
    taken: list[bool] = []
    hook = register_optimizer_step_post_hook(lambda *_: taken.append(True))
    try:
        for multi, steps in ((False, 2), (True, 4)):  # 64 inputs in batches of 32; m = 2 chunks
            taken.clear()
            state = fit(cfg.replace(train_multi_noise=multi), device=torch.device("cpu"))
            assert len(taken) == steps and state.history[0]["epoch"] == 1
    finally:
        hook.remove()


# ------------------------------------------------ the no-gradient attack (estimator (7))


def reference_stein(model, x, y, noise, epsilon, steps, generator=None):
    """`PGD_L2._attack_mutlinoise_no_grad` (code/attacks.py l. 205-245), re-derived in its row
    layout for any m: each step the estimate −(1/m) Σ_i softmax(F(x' + δ_i))_y · δ_i (its
    `nll_loss` of the softmax, repeated over the pixels, times the noise; no 1/σ²), divided by
    its fp32 row norm (randn where 0), a step of 2ε/T along it, the box, torch's renorm."""
    B, m = noise.shape[:2]
    rows, flat_noise = _rows(x, m), noise.reshape(B * m, *x.shape[1:])
    delta = torch.zeros_like(x)
    with torch.no_grad():
        for _ in range(steps):
            softmax = F.softmax(model(rows + _rows(delta, m) + flat_noise), dim=1)
            labels = y.unsqueeze(1).repeat(1, 1, m).view(B * m)
            p_y = F.nll_loss(softmax, labels, reduction="none")
            grad = p_y.repeat(*x.shape[1:], 1).permute(3, 0, 1, 2) * flat_noise
            grad = grad.reshape(-1, m, *x.shape[1:]).mean(1)
            grad_norms = grad.view(B, -1).norm(p=2, dim=1)
            grad.div_(grad_norms.view(-1, 1, 1, 1))
            if (grad_norms == 0).any():
                grad[grad_norms == 0] = torch.randn(
                    grad[grad_norms == 0].shape, generator=generator
                )
            delta = delta + grad * epsilon / steps * 2
            delta = (delta + x).clamp(0, 1) - x
            delta = torch.renorm(delta, p=2, dim=0, maxnorm=epsilon)
    return x + delta


def reference_no_grad_attack(model, x, y, noise, epsilon, steps, generator=None):
    """`PGD_L2.attack(..., num_noise_vectors=m, no_grad=True)` (l. 45-54), as predict.py and
    train_pgd.py call it with --no-grad-attack: it tests `num_noise_vectors == 1` first, so
    with one noise it runs the gradient attack `_attack`, whatever `no_grad` says."""
    if noise.shape[1] == 1:
        return reference_pgd(model, x, y, noise, epsilon, steps, generator, keep_tiny=False)
    return reference_stein(model, x, y, noise, epsilon, steps, generator)


@pytest.mark.parametrize(("steps", "m", "epsilon"), CASES)
def test_stein_pgd_equals_the_no_gradient_attacks_arithmetic(steps, m, epsilon):
    """sweeper's estimator "stein" is the code's `_attack_mutlinoise_no_grad` for every m (the
    1/σ² it adds leaves the direction as it is), m = 1 included, where the code does not run
    it (docs/deviations.md: `estimator: plugin` at m_test 1 is the code's number there)."""
    model = conv_net()
    x, y = batch(model)
    noise = gaussian(x, m)
    ours = attacks.stein_pgd(model, x, y, noise, epsilon, steps, sigma=0.25, generator=_gen())
    expected = reference_stein(model, x, y, noise, epsilon, steps, generator=_gen())
    assert (ours - expected).abs().max().item() <= TOLERANCE


def test_the_codes_no_gradient_attack_with_one_noise_is_the_plugin_attack():
    """With m_test = 1 the code's "no-grad" attack is its gradient attack: sweeper's plug-in
    PGD at m = 1 equals it; the one-sample estimate (7) (estimator stein) goes elsewhere."""
    model = conv_net()
    x, y = batch(model)
    noise = gaussian(x, 1)
    code = reference_no_grad_attack(model, x, y, noise, 1.0, 4, generator=_gen())
    plugin = attacks.pgd(model, x, y, noise, 1.0, 4, generator=_gen())
    assert (plugin - code).abs().max().item() <= TOLERANCE
    stein = attacks.stein_pgd(model, x, y, noise, 1.0, 4, sigma=0.25, generator=_gen())
    assert (stein - code).abs().max().item() > 0.01


def test_the_no_gradient_attack_against_the_reference_code_itself():
    """`PGD_L2.attack(..., no_grad=True)` of the code itself against `reference_no_grad_attack`
    (its gradient attack at m = 1, `_attack_mutlinoise_no_grad` otherwise), same seed."""
    module = _reference_module()
    worst = 0.0
    for steps, m, epsilon in CASES:
        model = conv_net()
        x, y = batch(model)
        noise = gaussian(x, m)
        attacker = module.PGD_L2(steps=steps, max_norm=epsilon)
        rows, flat = _rows(x, m), noise.reshape(len(x) * m, *x.shape[1:])
        torch.manual_seed(5)
        code = attacker.attack(model, rows, y, noise=flat, num_noise_vectors=m, no_grad=True)
        torch.manual_seed(5)
        expected = reference_no_grad_attack(model, x, y, noise, epsilon, steps)
        worst = max(worst, (code.detach()[::m] - expected).abs().max().item())
    print(f"\nmax difference over {len(CASES)} cases: {worst}")
    assert worst <= TOLERANCE
