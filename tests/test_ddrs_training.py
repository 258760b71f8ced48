"""DDRS training (Alfarra et al. 2022, Algorithm 2): a σ_x per training input, optimized from
its previous value whenever the input is visited from `ddrs_start_epoch` on, trained with, and
carried through checkpoints. Config fields, per-input noise, the epoch loop, exact resume."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from trainables import checkpoint, train
from trainables.certify_points import certify_points
from trainables.datasets import load_dataset
from trainables.ddrs import memory_certify, optimize_sigma
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRS_FIELDS, DDRSSettings
from trainables.kernel.errors import ConfigError
from trainables.kernel.stage_settings import CertifySpec
from trainables.methods import METHODS, REGISTRY, gaussian, macer
from trainables.methods.base import StepContext, draw_noise, loss_of
from trainables.train import fit, make_loaders, train_epoch
from trainables.train_state import build_state

CPU = torch.device("cpu")
SUBSET = 64  # training inputs used of the 1347 of the digits training split
DIGITS_TRAIN = 1347


def ddrs_cfg(**changes) -> TrialConfig:
    """Gaussian training on 64 digits, DDRS from epoch 1 with a large σ step (visible moves)."""
    base = dict(
        dataset="digits",
        method="gaussian",
        sigma=0.25,
        m_train=2,
        epochs=3,
        batch_size=32,
        lr=0.02,
        train_subset=SUBSET,
        eval_subset=32,
        ddrs_start_epoch=1,
        ddrs_iterations=2,
        ddrs_lr=0.01,
        ddrs_samples=2,
    )
    return TrialConfig(**{**base, **changes})


def smoothadv(**changes) -> TrialConfig:
    attack = dict(attack="pgd", epsilon=0.25, steps=1, warmup_epochs=1)
    return ddrs_cfg(method="smoothadv", **{**attack, **changes})


def assert_nested_equal(a, b, where="") -> None:
    """Tensors equal bitwise, everything else ==, recursively."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"tensors differ at {where}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"keys differ at {where}"
        for k in a:
            assert_nested_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"lengths differ at {where}"
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            assert_nested_equal(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{a!r} != {b!r} at {where}"


# ---------------------------------------------------------------------------- config


def test_configs_without_ddrs_keep_their_trial_ids():
    """Ids computed with the config module before the DDRS fields existed (the default, a
    SmoothAdv-PGD config, changed on purpose when warmup_schedule joined the identity of
    attack-trained methods: it was 5001c805a1a3; and in issue 26 §5, its CIFAR-10 inputs
    centred, not scaled: at scale_input true it keeps 533c2517d407)."""
    assert TrialConfig().trial_id == "ce23b5386a84"
    assert TrialConfig(scale_input=True).trial_id == "533c2517d407"
    gaussian = dict(
        dataset="digits",
        method="gaussian",
        sigma=0.5,
        m_train=2,
        epochs=10,
        batch_size=32,
        lr=0.05,
        seed=1,
    )
    assert TrialConfig(**gaussian).trial_id == "deb3f6d4571b"
    # DDRS settings without ddrs_start_epoch are ignored (nulled), like unused method fields
    ignored = TrialConfig(**gaussian, ddrs_iterations=7, ddrs_lr=0.5, ddrs_samples=3)
    assert ignored.trial_id == "deb3f6d4571b"
    assert all(getattr(ignored, name) is None for name in DDRS_FIELDS)
    assert not any(name in ignored.identity() for name in DDRS_FIELDS)


def test_ddrs_defaults_fill_in_and_join_the_identity():
    cfg = TrialConfig(dataset="digits", method="gaussian", epochs=10, ddrs_start_epoch=3)
    assert (cfg.ddrs_start_epoch, cfg.ddrs_iterations, cfg.ddrs_lr, cfg.ddrs_samples) == (
        3,
        10,
        1e-4,
        1,
    )
    assert {name: cfg.identity().get(name) for name in DDRS_FIELDS} == {
        "ddrs_start_epoch": 3,
        "ddrs_iterations": 10,
        "ddrs_lr": 1e-4,
        "ddrs_samples": 1,
        "ddrs_macer_loss": None,  # MACER's only
        "ddrs_noise_pairing": None,  # MACER's only
    }
    off = cfg.replace(ddrs_start_epoch=None)
    assert off.trial_id != cfg.trial_id
    assert type(cfg.replace(ddrs_lr=1).ddrs_lr) is float
    assert TrialConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("method", "dataset", "given", "samples"),
    [
        ("macer", "cifar10", {}, 64),
        ("macer", "imagenet", {}, 1),
        ("macer", "mnist", {}, 1),
        ("smoothadv", "cifar10", {"ddrs_iterations": 1}, 1),
        ("smoothadv", "cifar10", {}, None),  # K = 0: no σ step draws
        ("gaussian", "cifar10", {}, 1),
    ],
)
def test_sigma_samples_default_to_each_ddrs_scripts(method, dataset, given, samples):
    """CIFAR10/train_macer.py `--gaussian_num_ds` 64 (l. 71); train_smooth_adv.py and the
    ImageNet scripts draw 1 (the paper's n = 1: `ddrs_samples: 1` asks for it), unused
    (None) at train_smooth_adv.py's K = 0."""
    cfg = TrialConfig(dataset=dataset, method=method, ddrs_start_epoch=0, **given)
    assert cfg.ddrs_samples == samples
    paper = cfg.replace(ddrs_samples=1)
    assert (paper.trial_id == cfg.trial_id) is (samples in (1, None))


@pytest.mark.parametrize(
    ("method", "dataset", "expected"),
    [
        ("macer", "cifar10", (10, 1e-4, 64, "ddrs", "reference")),
        ("macer", "digits", (10, 1e-4, 1, "ddrs", "reference")),
        ("smoothadv", "cifar10", (0, None, None, None, None)),
        ("gaussian", "cifar10", (10, 1e-4, 1, None, None)),
    ],
)
def test_each_methods_ddrs_defaults_are_its_registry_rows(method, dataset, expected):
    """The defaults of DDRS training live in each method's row (`Method.ddrs`): MACER's are
    CIFAR10/train_macer.py's (K = 10 l. 63, 64 draws on CIFAR-10 l. 71, its robustness term
    l. 131-138 and noise pairing l. 163-166), SmoothAdv's train_smooth_adv.py's (K = 0, l. 63:
    nothing else is used); a setting a row does not name is None."""
    cfg = TrialConfig(dataset=dataset, method=method, m_train=2, ddrs_start_epoch=0)
    assert tuple(getattr(cfg, name) for name in DDRS_FIELDS[1:]) == expected
    row = REGISTRY[method].ddrs
    assert set(row) <= set(DDRS_FIELDS[1:])
    assert all((getattr(cfg, name) is None) for name in DDRS_FIELDS[1:] if name not in row)


def test_ddrs_smoothadv_takes_its_scripts_k_0_and_every_start_is_one_trial():
    """train_smooth_adv.py trains with --iter_sig_tr 0 (l. 63) and switches at --epoch-switch 60
    (l. 69), but its two branches then make the same calls (l. 367-374: train(..., 0, ...),
    test(..., 0)): σ_x stays σ throughout and no start changes the model. So a K = 0 trial's
    start resolves to 0 (ddrs_lr and ddrs_samples, unused, to None): one trial id for one
    training; it is still DDRS-trained (the DDRS code's protocol, 31: inputs scaled), not the
    plain SmoothAdv trial. With K raised, the start and the ascent's settings count again."""
    cfg = TrialConfig(dataset="cifar10", method="smoothadv", ddrs_start_epoch=60)
    assert (cfg.ddrs_start_epoch, cfg.ddrs_iterations, cfg.ddrs_lr, cfg.ddrs_samples) == (
        0,
        0,
        None,
        None,
    )
    for start in (0, 10, 149):
        other = TrialConfig(
            dataset="cifar10",
            method="smoothadv",
            ddrs_start_epoch=start,
            ddrs_lr=1e-3,
            ddrs_samples=4,
        )
        assert other == cfg and other.trial_id == cfg.trial_id
    assert {k: cfg.identity()[k] for k in ("ddrs_start_epoch", "ddrs_iterations")} == {
        "ddrs_start_epoch": 0,
        "ddrs_iterations": 0,
    }
    plain = TrialConfig(dataset="cifar10", method="smoothadv")
    assert plain.trial_id != cfg.trial_id
    assert (plain.scale_input, cfg.scale_input) == (False, True)
    assert TrialConfig.from_dict(cfg.to_dict()) == cfg
    raised = cfg.replace(ddrs_iterations=10, ddrs_start_epoch=60)
    assert (raised.ddrs_start_epoch, raised.ddrs_lr, raised.ddrs_samples) == (60, 1e-4, 1)
    assert raised.trial_id != cfg.trial_id
    assert raised.trial_id != raised.replace(ddrs_start_epoch=59).trial_id


@pytest.mark.parametrize("method", ["gaussian", "macer"])
def test_k_0_is_accepted_for_every_ddrs_method(method):
    """K = 0 was refused (>= 1) before issue 40; now every DDRS method takes it: σ_x = σ,
    the start 0, and MACER keeps its robustness term (its noise pairing is moot: one σ)."""
    cfg = TrialConfig(
        dataset="digits", method=method, m_train=2, epochs=10, ddrs_start_epoch=3, ddrs_iterations=0
    )
    assert (cfg.ddrs_start_epoch, cfg.ddrs_lr, cfg.ddrs_samples, cfg.ddrs_noise_pairing) == (
        0,
        None,
        None,
        None,
    )
    assert cfg.ddrs_macer_loss == ("ddrs" if method == "macer" else None)
    assert TrialConfig.from_dict(cfg.to_dict()) == cfg


def _problems(**kwargs) -> list[str]:
    with pytest.raises(ConfigError) as e:
        TrialConfig(**{"dataset": "digits", "method": "gaussian", "epochs": 10, **kwargs})
    return e.value.problems


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ddrs_start_epoch", -1),
        ("ddrs_start_epoch", 10),
        ("ddrs_iterations", -1),
        ("ddrs_samples", 0),
        ("ddrs_lr", 0.0),
        ("ddrs_lr", -1e-4),
        ("ddrs_iterations", 1.5),
        ("ddrs_samples", "2"),
        ("ddrs_lr", True),
        ("ddrs_start_epoch", 1.0),
    ],
)
def test_each_ddrs_problem_names_its_field(field, value):
    problems = _problems(**{"ddrs_start_epoch": 2, field: value})
    assert len(problems) == 1 and field in problems[0], problems


def test_all_ddrs_problems_at_once():
    problems = _problems(
        method="macer",
        m_train=2,
        ddrs_start_epoch=10,
        ddrs_iterations=-1,
        ddrs_samples=0,
        ddrs_lr=0,
        ddrs_macer_loss="paper",
        ddrs_noise_pairing="paper",
    )
    assert len(problems) == 6
    for name in DDRS_FIELDS:
        assert any(name in p for p in problems), (name, problems)


def test_ddrs_macer_takes_the_ddrs_scripts_loss_and_macers_keeps_the_former_id():
    """`ddrs_macer_loss` resolves to "ddrs" for DDRS-trained MACER (a new trial_id); "macer",
    its behaviour before the field, keeps the id; other methods and MACER without DDRS have
    none (a value given is dropped, like an unused method setting)."""
    macer_cfg = dict(dataset="digits", method="macer", m_train=2, epochs=10)
    cfg = TrialConfig(**macer_cfg, ddrs_start_epoch=3)
    former = cfg.replace(ddrs_macer_loss="macer")
    assert (cfg.ddrs_macer_loss, former.ddrs_macer_loss) == ("ddrs", "macer")
    assert (
        cfg.identity()["ddrs_macer_loss"] == "ddrs" and "ddrs_macer_loss" not in former.identity()
    )
    stored = {k: v for k, v in former.to_dict().items() if k != "ddrs_macer_loss"}
    assert TrialConfig.from_dict(stored) == former  # stored before the field: trained so
    for other in (
        TrialConfig(**macer_cfg, ddrs_macer_loss="ddrs"),
        ddrs_cfg(ddrs_macer_loss="ddrs"),
    ):
        assert other.ddrs_macer_loss is None and "ddrs_macer_loss" not in other.identity()


@pytest.mark.parametrize(
    "method", [m for m in METHODS if m not in ("gaussian", "smoothadv", "macer")]
)
def test_ddrs_training_refuses_other_methods(method):
    extra = {"m_train": None} if method == "vanilla_pgd" else {}
    (problem,) = _problems(method=method, ddrs_start_epoch=0, **extra)
    assert problem.startswith("ddrs_start_epoch") and repr(method) in problem
    assert TrialConfig(dataset="digits", method=method, **extra).ddrs_start_epoch is None


# ---------------------------------------------------------------------------- per-input noise


def test_draw_noise_scales_each_input_by_its_own_sigma():
    x = torch.rand(3, 1, 2, 2)
    sigma = torch.tensor([0.1, 0.5, 2.0])
    per_input = draw_noise(x, 4, sigma, torch.Generator().manual_seed(0))
    unit = draw_noise(x, 4, 1.0, torch.Generator().manual_seed(0))
    assert per_input.shape == (3, 4, 1, 2, 2)
    assert torch.equal(per_input, unit * sigma.view(3, 1, 1, 1, 1))
    # a float σ gives exactly what it always gave
    plain = torch.randn((3, 4, 1, 2, 2), generator=torch.Generator().manual_seed(0)) * 0.25
    assert torch.equal(draw_noise(x, 4, 0.25, torch.Generator().manual_seed(0)), plain)
    with pytest.raises(ValueError, match="per-input sigma"):
        draw_noise(x, 4, torch.ones(2), None)


def test_step_context_sigma_defaults_to_the_config_sigma():
    cfg = TrialConfig(dataset="digits", method="gaussian", sigma=0.5)
    assert StepContext(cfg, 0, 0.0, torch.Generator()).sigma == 0.5
    table = torch.tensor([0.1, 0.2])
    assert StepContext(cfg, 0, 0.0, torch.Generator(), table).sigma is table


def test_macer_hinge_takes_one_sigma_per_input():
    logits = torch.randn(3 * 4, 5, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1, 2])
    sigma = torch.tensor([0.1, 0.5, 1.0])
    per_input = macer.radius_hinge(logits, y, 4, sigma, 2.0, 8.0)
    for i, s in enumerate(sigma.tolist()):
        assert per_input[i] == pytest.approx(
            macer.radius_hinge(logits, y, 4, s, 2.0, 8.0)[i].item()
        )


def _script_macer_loss(probs, labels, sigma, gamma):
    """MotasemAlfarra/Data_Dependent_Randomized_Smoothing CIFAR10/train_macer.py l. 131-138,
    transcribed (its device argument dropped): `probs` the mean softmax of the noisy copies
    (its network ends in a softmax), `sigma` one σ per input."""
    vals, ind = torch.topk(probs, 2)
    correct_ind = ind[:, 0] == labels
    zeros = torch.zeros(sum(correct_ind).item(), dtype=probs.dtype)
    m = torch.distributions.normal.Normal(zeros, torch.ones_like(zeros))
    gap = m.icdf(vals[correct_ind, 0].clamp_(0.02, 0.98)) - m.icdf(
        vals[correct_ind, 1].clamp_(0.02, 0.98)
    )
    radius = sigma[correct_ind].reshape(-1) / 2 * gap
    return torch.relu(gamma - radius).mean()


def test_ddrs_macer_hinge_of_a_known_case():
    """p̂ = (0.99, 0.01, 0) is clamped to (0.98, 0.02): gap 2·Φ⁻¹(0.98); at σ = 0.5, γ = 8 the
    hinge is 8 − 0.5·Φ⁻¹(0.98). The second input is wrong: out of the mean (not a 0 in it)."""
    p = torch.tensor([[0.99, 0.01, 0.0], [0.2, 0.7, 0.1]], dtype=torch.float64)
    got = macer.ddrs_radius_hinge(p, torch.tensor([0, 0]), 0.5, 8.0)
    assert got.item() == pytest.approx(8 - 0.5 * norm.ppf(0.98), rel=1e-12)
    none_right = macer.ddrs_radius_hinge(p, torch.tensor([2, 2]), 0.5, 8.0)
    assert none_right.item() == 0.0  # the script's mean over no input is NaN


@pytest.mark.parametrize("gamma", [8.0, 0.3])
def test_ddrs_macer_hinge_is_the_scripts_value_and_gradient(gamma):
    """Random mean softmaxes (some inputs wrong, some entries beyond the clamp, at γ = 0.3
    some hinges at 0), per-input σ: the value and its gradient w.r.t. the logits agree."""
    g = torch.Generator().manual_seed(4)
    shared = 6 * torch.randn(16, 1, 3, generator=g, dtype=torch.float64)  # confident inputs
    logits = (shared + torch.randn(16, 5, 3, generator=g, dtype=torch.float64)).requires_grad_()
    y = torch.randint(0, 3, (16,), generator=g)
    sigma = 0.1 + torch.rand(16, generator=g, dtype=torch.float64)
    p = torch.softmax(logits, dim=2).mean(dim=1)
    ours = macer.ddrs_radius_hinge(p, y, sigma, gamma)
    (ours_grad,) = torch.autograd.grad(ours, logits)
    theirs = _script_macer_loss(torch.softmax(logits, dim=2).mean(dim=1), y, sigma, gamma)
    (theirs_grad,) = torch.autograd.grad(theirs, logits)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    torch.testing.assert_close(ours_grad, theirs_grad, rtol=1e-10, atol=1e-14)
    clamped = (p.topk(2, dim=1).values > 0.98) | (p.topk(2, dim=1).values < 0.02)
    assert clamped.any() and 0 < (p.argmax(1) == y).sum() < 16


def _script_corrupted_batch(batch, sigma, gaussian_num, eps):
    """MotasemAlfarra/Data_Dependent_Randomized_Smoothing CIFAR10/train_macer.py l. 160-168,
    transcribed: `batch` (b, C, H, W), `sigma` (b,) (get_sigma's `sig.reshape(-1)`), `eps` the
    standard normals its `torch.randn_like(batch)` draws for the repeated batch (b·k, C, H, W)."""
    batch_size = len(batch)
    new_shape = [batch_size * gaussian_num]
    new_shape.extend(batch[0].shape)
    batch = batch.repeat((1, gaussian_num, 1, 1)).view(new_shape)
    sigma_repeated = sigma.repeat((1, gaussian_num, 1, 1)).view(-1, 1, 1, 1)
    noise = eps * sigma_repeated
    return batch + noise


class Recorder(torch.nn.Module):
    """A linear classifier that keeps the inputs of its last call."""

    def __init__(self, features: int, classes: int = 10):
        super().__init__()
        self.linear = torch.nn.Linear(features, classes).double()
        self.seen: torch.Tensor | None = None

    def forward(self, x):
        self.seen = x.detach().clone()
        return self.linear(x.flatten(1))


@pytest.mark.parametrize(("b", "k"), [(3, 4), (4, 2), (2, 4), (5, 3), (4, 1)])
def test_ddrs_macer_noise_copies_take_sigma_as_the_script_pairs_them(b, k):
    """Issue 40 item 2. train_macer.py l. 163-166 repeats the batch input-major (row i·k + j is
    copy j of input i) but σ copy-major (`sigma.repeat((1, k, 1, 1)).view(-1, 1, 1, 1)`: row r
    gets σ[r mod b]), so copy j of input i is drawn at σ[(i·k + j) mod b]. b inputs of three
    channels (the repeat runs along dim 1), each with its own σ_x: the noisy copies sweeper's
    DDRS-MACER trains on are the script's, re-derived in float64 on the same normals, row for
    row; with `own` each copy takes its input's σ_x; they agree only where the layouts do
    (k = 1: the ImageNet script's default)."""
    g = torch.Generator().manual_seed(5)
    x = torch.rand(b, 3, 4, 4, generator=g, dtype=torch.float64)
    sigma = torch.linspace(0.15, 0.35, b, dtype=torch.float64)  # distinct per input
    y = torch.arange(b) % 10
    model = Recorder(3 * 4 * 4)
    rows = {}
    for pairing in ("reference", "own"):
        cfg = TrialConfig(
            dataset="digits", method="macer", m_train=k, epochs=3, ddrs_start_epoch=0
        ).replace(ddrs_noise_pairing=pairing)
        ctx = StepContext(cfg, 0, 0.0, torch.Generator().manual_seed(9), sigma)
        macer.loss(model, x, y, ctx)
        rows[pairing] = model.seen
    assert TrialConfig(dataset="digits", method="macer", ddrs_start_epoch=0).ddrs_noise_pairing == (
        "reference"
    )
    eps = torch.randn(
        b * k, 3, 4, 4, generator=torch.Generator().manual_seed(9), dtype=torch.float64
    )
    script = _script_corrupted_batch(x, sigma, k, eps)
    assert torch.equal(rows["reference"], script)
    clean = x.repeat_interleave(k, dim=0)  # row i·k + j: input i
    drawn_at = ((rows["reference"] - clean) / eps).mean(dim=(1, 2, 3))
    expected = torch.tensor([sigma[r % b].item() for r in range(b * k)], dtype=torch.float64)
    torch.testing.assert_close(drawn_at, expected, rtol=1e-9, atol=0)
    own_at = ((rows["own"] - clean) / eps).mean(dim=(1, 2, 3))
    torch.testing.assert_close(own_at, sigma.repeat_interleave(k), rtol=1e-9, atol=0)
    assert torch.equal(rows["own"], rows["reference"]) is (k == 1)


@pytest.mark.parametrize("pairing", ["reference", "own"])
@pytest.mark.parametrize("loss", ["ddrs", "macer"])
def test_ddrs_trained_macer_loss_is_the_scripts_or_macers(loss, pairing):
    """One chunk of DDRS-trained MACER at σ_x per input, on the same normals: "ddrs" is
    train_macer.py l. 160-174 (its compute_loss l. 91-95: NLL of log(mean softmax + 1e-10))
    plus λ·its term at each input's own σ_x (l. 137); "macer" is MACER's term (`radius_hinge`,
    β) at σ_x. The noisy copies: the script's layout (`reference`) or each input's σ_x."""
    cfg = TrialConfig(dataset="digits", method="macer", m_train=4, epochs=3, ddrs_start_epoch=0)
    cfg = cfg.replace(ddrs_macer_loss=loss, ddrs_noise_pairing=pairing)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).double()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # weights of its own: the global RNG's state depends on test order
        for w in model.parameters():
            w.copy_(0.2 * torch.randn(w.shape, generator=g, dtype=torch.float64))
    x = torch.rand(6, 1, 8, 8, generator=g, dtype=torch.float64)
    sigma = 0.1 + torch.rand(6, generator=g, dtype=torch.float64)
    y = model(x).argmax(1)  # right on the noise-free inputs, but for two
    y[:2] = (y[:2] + 1) % 10
    got = macer.loss(model, x, y, StepContext(cfg, 0, 0.0, torch.Generator().manual_seed(9), sigma))
    if pairing == "reference":
        eps = torch.randn(24, 1, 8, 8, generator=torch.Generator().manual_seed(9), dtype=x.dtype)
        corrupted = _script_corrupted_batch(x, sigma, 4, eps)
    else:
        noise = draw_noise(x, 4, sigma, torch.Generator().manual_seed(9))
        corrupted = (x.unsqueeze(1) + noise).flatten(0, 1)
    logits = model(corrupted)
    outputs_softmax = torch.softmax(logits, dim=1).reshape(6, 4, 10).mean(1)
    total = torch.nn.NLLLoss()(torch.log(outputs_softmax + 1e-10), y)
    if loss == "ddrs":
        total = total + 12.0 * _script_macer_loss(outputs_softmax, y, sigma, 8.0)
    else:
        total = total + 12.0 * macer.radius_hinge(logits, y, 4, sigma, 16.0, 8.0).mean()
    assert got.loss.item() == pytest.approx(total.item(), rel=1e-12)
    assert 0 < (outputs_softmax.argmax(1) == y).sum() < 6  # the term is over some inputs


# ---------------------------------------------------------------------------- the epoch loop


def test_chunk_sigma_optimization_leaves_the_model_untouched():
    """OptimizeSigma runs in eval mode with frozen parameters, drawing from the noise
    generator: no batch-norm statistics move, no parameter gets a gradient, train mode and
    requires_grad are restored, only the chunk's table entries change."""
    cfg = ddrs_cfg()
    state = build_state(cfg, CPU)
    state.sigma_table(DIGITS_TRAIN)
    before = {k: v.clone() for k, v in state.model.state_dict().items()}
    state.model.train()
    x = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    idx = torch.tensor([5, 900, 3, 17, 40, 41, 1000, 1346])
    global_rng, noise_rng = torch.get_rng_state(), state.noise_generator.get_state()
    sigma = train.ddrs_chunk_sigma(state, x, idx)
    # the draws come from the state's noise generator, not from torch's global one
    assert torch.equal(torch.get_rng_state(), global_rng)
    assert not torch.equal(state.noise_generator.get_state(), noise_rng)
    assert sigma.shape == (8,) and not torch.equal(sigma, torch.full((8,), 0.25))
    assert torch.equal(state.ddrs_sigma[idx], sigma)
    untouched = torch.ones(DIGITS_TRAIN, dtype=torch.bool)
    untouched[idx] = False
    assert (state.ddrs_sigma[untouched] == 0.25).all()
    assert_nested_equal(state.model.state_dict(), before, "model")
    assert state.model.training
    assert all(p.requires_grad and p.grad is None for p in state.model.parameters())


def test_sigma_optimization_is_the_deployed_networks_and_moves_no_batch_norm_buffer():
    """The official DDRS training code runs OptimizeSigma in train mode (batch-norm statistics
    of the noisy batch, running averages updated by every σ step); sweeper keeps eval mode:
    σ_x is then optimized for the network that certification deploys (eval mode, running
    statistics), independent of which inputs share the chunk, and the training passes alone
    move the running statistics. On the batch-norm digits CNN: every buffer is unchanged,
    σ_x equals OptimizeSigma on the eval-mode network, and train mode would give another σ_x."""
    cfg = ddrs_cfg(ddrs_iterations=3, ddrs_lr=0.05)
    state = build_state(cfg, CPU)
    state.sigma_table(DIGITS_TRAIN)
    state.model.train()
    buffers = {k: v.clone() for k, v in state.model.named_buffers()}
    assert any(k.endswith("num_batches_tracked") for k in buffers)
    x = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    idx = torch.arange(8)
    noise_state = state.noise_generator.get_state()
    sigma = train.ddrs_chunk_sigma(state, x, idx)
    assert_nested_equal(dict(state.model.named_buffers()), buffers, "buffers")
    assert state.model.training
    deployed = copy.deepcopy(state.model).eval()
    gen = torch.Generator().set_state(noise_state)
    expected = optimize_sigma(deployed, x, 0.25, 3, 0.05, cfg.ddrs_samples, generator=gen)
    assert torch.equal(sigma, expected)
    batch_stats = copy.deepcopy(state.model).train()
    gen = torch.Generator().set_state(noise_state)
    other = optimize_sigma(batch_stats, x, 0.25, 3, 0.05, cfg.ddrs_samples, generator=gen)
    assert not torch.allclose(other, sigma)
    moved = [k for k, v in batch_stats.named_buffers() if not torch.equal(v, buffers[k])]
    assert moved  # what train mode would have done to the model being trained


def test_sigma_is_fixed_before_the_start_epoch_then_per_input(monkeypatch):
    """Epoch 0 trains with the float cfg.sigma and leaves the table at cfg.sigma; epoch 1
    optimizes σ_x of every visited input (eval-mode passes: K per chunk) and trains with it;
    inputs outside train_subset keep cfg.sigma."""
    cfg = ddrs_cfg()
    seen: list[tuple[int, object]] = []
    gaussian_loss = loss_of(REGISTRY["gaussian"])

    def spy(model, x, y, ctx):
        seen.append((ctx.epoch, ctx.sigma))
        return gaussian_loss(model, x, y, ctx)

    state = build_state(cfg, CPU)
    loader, _ = make_loaders(state)
    evals: list[int] = []
    state.model.register_forward_pre_hook(
        lambda mod, args: None if mod.training else evals.append(len(args[0]))
    )
    monkeypatch.setattr(gaussian, "loss", spy)
    metrics = train_epoch(state, loader)
    assert evals == [] and all(s == 0.25 and isinstance(s, float) for _, s in seen)
    assert torch.equal(state.ddrs_sigma, torch.full((DIGITS_TRAIN,), 0.25))
    assert (metrics["ddrs_sigma_mean"], metrics["ddrs_sigma_min"]) == (0.25, 0.25)
    state.epoch, seen[:] = 1, []
    metrics = train_epoch(state, loader)
    chunks = 2 * SUBSET // cfg.batch_size  # m_train = 2 chunks of 16 per batch of 32
    assert evals == [16 * cfg.ddrs_samples] * (chunks * cfg.ddrs_iterations)
    used = torch.cat([s for _, s in seen])
    assert len(seen) == chunks and used.shape == (SUBSET,)
    visited = state.ddrs_sigma[:SUBSET]
    assert torch.equal(used.sort().values, visited.sort().values)
    assert (visited != 0.25).all()
    assert (state.ddrs_sigma[SUBSET:] == 0.25).all()
    assert metrics["ddrs_sigma_mean"] == pytest.approx(visited.mean().item())
    assert metrics["ddrs_sigma_min"] == visited.min().item()
    assert metrics["ddrs_sigma_max"] == visited.max().item()


@pytest.mark.parametrize("method", ["gaussian", "smoothadv", "macer"])
def test_each_supported_method_trains_with_ddrs_and_finite_loss(method):
    cfg = ddrs_cfg(epochs=2)
    if method == "smoothadv":
        cfg = smoothadv(epochs=2)
    elif method == "macer":
        cfg = cfg.replace(method="macer", m_train=4)
    state = fit(cfg, None, device=CPU)
    for metrics in state.history:
        assert math.isfinite(metrics["train_loss"]) and 0 <= metrics["train_acc"] <= 1
    first, second = state.history
    assert first["ddrs_sigma_min"] == first["ddrs_sigma_max"] == 0.25
    assert second["ddrs_sigma_min"] < second["ddrs_sigma_max"]
    assert torch.isfinite(state.ddrs_sigma).all() and (state.ddrs_sigma > 0).all()
    params = state.model.state_dict().values()
    assert all(torch.isfinite(p).all() for p in params if p.is_floating_point())


def test_at_k_0_ddrs_smoothadv_trains_the_method_under_the_ddrs_protocol_and_certifies(tmp_path):
    """train_smooth_adv.py's defaults (K = 0): σ_x stays σ for every input and epoch, so the
    model is, bit for bit, the SmoothAdv trial of the same protocol (on digits SmoothAdv's
    own); the table (all σ) is in the checkpoint. Its DDRS is certification's, which works on
    it as on any model: OptimizeSigma per test point from σ (the script's l. 394, 100 steps on
    the test set), then the memory pass (Algorithm 3) over the certificates."""
    cfg = smoothadv(ddrs_iterations=None, ddrs_lr=None, ddrs_samples=None)
    assert (cfg.ddrs_iterations, cfg.ddrs_start_epoch) == (0, 0)
    path = tmp_path / "checkpoint.pt"
    state = fit(cfg, path, device=CPU)
    plain = fit(cfg.replace(ddrs_start_epoch=None), None, device=CPU)
    assert_nested_equal(state.model.state_dict(), plain.model.state_dict(), "model")
    assert torch.equal(checkpoint.load(path)["ddrs_sigma"], torch.full((DIGITS_TRAIN,), 0.25))
    assert all(h["ddrs_sigma_min"] == h["ddrs_sigma_max"] == 0.25 for h in state.history)

    model, stored = checkpoint.load_model(path)
    assert stored == cfg
    test = load_dataset("digits", "test")
    settings = CertifySpec(
        n0=16,
        n=200,
        alpha=0.01,
        sigma=stored.sigma,
        batch_size=200,
        points_per_batch=4,
        ddrs=DDRSSettings(iterations=5, lr=0.01, samples=2),
    )
    rows = certify_points(model, test, range(12), 10, settings, 0, CPU)
    assert len(set(rows["sigma_cert"])) > 1 and 0.25 not in rows["sigma_cert"]
    points = torch.stack([test[i][0] for i in range(12)]).numpy()
    memory = memory_certify(points, np.array(rows["predict"]), np.array(rows["radius"]))
    assert len(memory.radius) == 12 and (memory.radius <= np.array(rows["radius"]) + 1e-12).all()


def test_training_without_ddrs_has_no_sigma_table(tmp_path):
    cfg = ddrs_cfg(epochs=1, ddrs_start_epoch=None)
    state = fit(cfg, tmp_path / "checkpoint.pt", device=CPU)
    assert state.ddrs_sigma is None
    assert "ddrs_sigma" not in checkpoint.load(tmp_path / "checkpoint.pt")
    assert not any(k.startswith("ddrs") for k in state.history[0])


# ---------------------------------------------------------------------------- checkpoint, resume


def test_the_sigma_table_is_in_the_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.pt"
    state = fit(ddrs_cfg(epochs=2), path, device=CPU)
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert payload["ddrs_sigma"].shape == (DIGITS_TRAIN,)
    assert payload["ddrs_sigma"].dtype == torch.float32
    assert torch.equal(payload["ddrs_sigma"], state.ddrs_sigma)
    assert torch.equal(checkpoint.load(path)["ddrs_sigma"], state.ddrs_sigma)


@pytest.mark.parametrize(
    ("make", "stop_after"),
    [(ddrs_cfg, 1), (ddrs_cfg, 2), (smoothadv, 2)],
    ids=["gaussian-before-start", "gaussian-after-start", "smoothadv-after-start"],
)
def test_resume_restores_the_sigma_table_exactly(tmp_path, make, stop_after):
    """Stopped after `stop_after` epochs and resumed from the checkpoint file, a run ends
    bitwise equal to an uninterrupted one: σ table, model, optimizer, RNG, history."""
    cfg = make()
    interrupted = tmp_path / "a" / "checkpoint.pt"
    first = fit(cfg, interrupted, device=CPU, stop_after=stop_after)
    assert first.epoch == stop_after
    assert torch.equal(checkpoint.load(interrupted)["ddrs_sigma"], first.ddrs_sigma)
    resumed = fit(cfg, interrupted, device=CPU)
    straight = fit(cfg, tmp_path / "b" / "checkpoint.pt", device=CPU)
    assert resumed.epoch == straight.epoch == cfg.epochs
    assert torch.equal(resumed.ddrs_sigma, straight.ddrs_sigma)
    assert not torch.equal(straight.ddrs_sigma, first.ddrs_sigma)  # σ moved after the stop
    assert_nested_equal(resumed.model.state_dict(), straight.model.state_dict(), "model")
    assert_nested_equal(resumed.optimizer.state_dict(), straight.optimizer.state_dict(), "optim")
    assert_nested_equal(resumed.payload()["rng"], straight.payload()["rng"], "rng")
    for h_resumed, h_straight in zip(resumed.history, straight.history, strict=True):
        h_resumed.pop("epoch_time_s"), h_straight.pop("epoch_time_s")
        assert h_resumed == h_straight


def test_resuming_with_a_table_of_another_size_fails_clearly():
    state = build_state(ddrs_cfg(), CPU)
    state.restore({**state.payload(), "ddrs_sigma": torch.full((10,), 0.25)})
    with pytest.raises(ValueError, match="10 entries for a training split of 1347"):
        state.sigma_table(DIGITS_TRAIN)
