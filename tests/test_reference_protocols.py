"""Each method's training protocol against the authors' code that trained its published models
(issue 26): stability training's loss, every method's learning-rate schedule, MACER's
optimizer, input layer and deferred λ, and SmoothMix's momentum.

The reference code cannot be vendored: each `reference_*` function below transcribes the
arithmetic of the lines it names, in the reference's own layout, and sweeper must equal it:
- jh-jeong/smoothmix (and smoothing-consistency, identical files) `code/train_utils.py`
  `prologue` (l. 126-127: SGD(lr, momentum, weight_decay), StepLR(lr_step_size, gamma)), its
  scripts stepping `scheduler.step(epoch)` after each epoch (`train.py` l. 104,
  `train_consistency.py` l. 105, `train_stab.py` l. 93), and `train_stab.py` l. 64-74 and
  124-131 (the stability loss), `train_macer.py` l. 104-106 (`--deferred`);
- RuntianZ/macer `main.py` l. 135-138 (SGD momentum 0.9, weight decay 5e-4; MultiStepLR at
  [200, 400]) and l. 155-158 (`scheduler.step()` before each 1-based epoch), `macer.py`
  l. 29-65 (the loss), `model.py` (no input normalization);
- locuslab/smoothing `code/train.py` l. 69-72 and Hadisalman/smoothing-adversarial
  `code/train_pgd.py` l. 146, 175-176 (StepLR, `scheduler.step(epoch)` before each epoch).
Schedulers are torch's own, built and stepped as those scripts do.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from trainables.kernel.config import TrialConfig
from trainables.methods import REGISTRY, macer, stability
from trainables.methods.base import StepContext
from trainables.models import NormalizeLayer
from trainables.train_state import build_scheduler, build_state

DT = torch.float64
SHAPE = (3, 6, 6)
CLASSES = 4


def conv_net(seed: int = 0) -> nn.Module:
    """A small conv net with batch norm, in train mode, float64."""
    torch.manual_seed(seed)
    layers = [nn.Conv2d(3, 5, 3, padding=1), nn.BatchNorm2d(5), nn.ReLU(), nn.Flatten()]
    return nn.Sequential(*layers, nn.Linear(5 * 6 * 6, CLASSES)).to(DT).train()


def batch(size: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand((size, *SHAPE), generator=g, dtype=DT), torch.randint(
        0, CLASSES, (size,), generator=g
    )


def step_context(cfg: TrialConfig, epoch: int = 0, seed: int = 3) -> StepContext:
    return StepContext(cfg, epoch, 0.0, torch.Generator().manual_seed(seed))


def same_noise(x: torch.Tensor, m: int, sigma: float, seed: int = 3) -> torch.Tensor:
    """The draw sweeper's loss makes from its step generator, (b, m, C, H, W)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn((len(x), m, *x.shape[1:]), generator=g, dtype=x.dtype) * sigma


def gradients(model: nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def space_config(method: str, space: str = "cifar10-methods", **where) -> TrialConfig:
    """The first trial of `method` in a shipped space (with the given field values)."""
    return next(
        t
        for t in expand(load_space(space))
        if t.method == method and all(getattr(t, k) == v for k, v in where.items())
    )


# ---------------------------------------------------------------------------- §2 stability


def reference_stability_loss(model, inputs, targets, noise, lbd):
    """train_stab.py l. 126-131 with its `_cross_entropy` (l. 64-74) and the prologue's
    criterion CrossEntropyLoss() (train_utils.py l. 122)."""
    logits = model(inputs)
    logits_n = model(inputs + noise)
    loss_xent = F.cross_entropy(logits, targets)
    targets_prob = F.softmax(logits, dim=1)
    stab = (-targets_prob * F.log_softmax(logits_n, dim=1)).sum(1).mean()
    return loss_xent + lbd * stab


def paper_stability_loss(model, inputs, targets, noise, lbd):
    """Li et al.: CE(F(x), y) + λ·KL(softmax F(x) ‖ softmax F(x + δ))."""
    logits, logits_n = model(inputs), model(inputs + noise)
    p, log_p = F.softmax(logits, dim=1), F.log_softmax(logits, dim=1)
    kl = (p * (log_p - F.log_softmax(logits_n, dim=1))).sum(1).mean()
    return F.cross_entropy(logits, targets) + lbd * kl


@pytest.mark.parametrize(
    ("loss_name", "reference"),
    [("cross_entropy", reference_stability_loss), ("kl", paper_stability_loss)],
)
def test_stability_loss_and_gradients_equal_the_reference_on_the_same_noise(loss_name, reference):
    cfg = TrialConfig(dataset="cifar10", method="stability", sigma=0.5, lam=2.0)
    if loss_name == "kl":
        cfg = cfg.replace(stability_loss="kl")
    assert cfg.stability_loss == loss_name  # cross_entropy: the default
    x, y = batch()
    ours_model, ref_model = conv_net(), conv_net()
    ours = stability.loss(ours_model, x, y, step_context(cfg)).loss
    noise = same_noise(x, 1, 0.5)[:, 0]
    ref = reference(ref_model, x, y, noise, 2.0)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-12)
    for a, b in zip(gradients(ours_model, ours), gradients(ref_model, ref), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def test_stability_cross_entropy_and_kl_give_materially_different_updates():
    """The two regularizers differ by the clean prediction's entropy, which is not detached:
    one SGD step apart by far more than rounding (why the default matters)."""
    x, y = batch()
    noise = same_noise(x, 1, 0.5)[:, 0]
    updates = []
    for loss in (reference_stability_loss, paper_stability_loss):
        model = conv_net()
        grads = gradients(model, loss(model, x, y, noise, 2.0))
        updates.append(torch.cat([g.flatten() for g in grads]))
    ce, kl = updates
    assert ((ce - kl).norm() / ce.norm()).item() > 0.05


# ---------------------------------------------------------------------------- §3 schedules


def _optimizer(cfg: TrialConfig) -> torch.optim.SGD:
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=cfg.lr, momentum=cfg.momentum)


@contextlib.contextmanager
def _as_the_code_calls_it() -> Iterator[None]:
    """torch warns of step(epoch) (deprecated) and of a scheduler stepped before the
    optimizer, both of which the reference scripts do."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def reference_step_before_epoch(cfg: TrialConfig) -> list[float]:
    """locuslab/smoothing train.py l. 71-72, train_pgd.py l. 175-176: `for epoch in
    range(...): scheduler.step(epoch)`, then the epoch trains."""
    optimizer = _optimizer(cfg)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_step_size, cfg.lr_gamma)
    lrs = []
    for epoch in range(cfg.epochs):
        with _as_the_code_calls_it():
            scheduler.step(epoch)
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # the epoch's training
    return lrs


def reference_step_after_epoch(cfg: TrialConfig) -> list[float]:
    """jh-jeong's prologue StepLR, `scheduler.step(epoch)` after the epoch trained."""
    optimizer = _optimizer(cfg)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_step_size, cfg.lr_gamma)
    lrs = []
    for epoch in range(cfg.epochs):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        with _as_the_code_calls_it():
            scheduler.step(epoch)
    return lrs


def reference_macer(cfg: TrialConfig, milestones: list[int] | None = None) -> list[float]:
    """RuntianZ/macer main.py: MultiStepLR(milestones=[200, 400], gamma=0.1) (l. 137-138);
    `for epoch in range(start_epoch + 1, args.epochs + 1): scheduler.step()`, then the epoch
    trains (l. 155-158). `milestones`: other ones written into l. 138."""
    optimizer = _optimizer(cfg)
    milestones = [200, 400] if milestones is None else milestones
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.1)
    lrs = []
    for _epoch in range(1, cfg.epochs + 1):
        with _as_the_code_calls_it():
            scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
    return lrs


def sweepers_lrs(cfg: TrialConfig) -> list[float]:
    """The LR each epoch trains with in `trainables.train.fit`: read at the epoch's start,
    the scheduler stepped after it."""
    optimizer = _optimizer(cfg)
    scheduler = build_scheduler(cfg, optimizer)
    lrs = []
    for _epoch in range(cfg.epochs):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


REFERENCE_SCHEDULES = {
    "gaussian": reference_step_before_epoch,
    "smoothadv": reference_step_before_epoch,
    "vanilla_pgd": reference_step_before_epoch,
    "pgd_noise": reference_step_before_epoch,
    "smoothmix": reference_step_after_epoch,
    "consistency": reference_step_after_epoch,
    "stability": reference_step_after_epoch,
    "macer": reference_macer,
}


@pytest.mark.parametrize("method", sorted(REFERENCE_SCHEDULES))
def test_each_methods_lr_follows_its_reference_scheduler_epoch_by_epoch(method):
    """The space's config of the method (MACER's: its own 440-epoch protocol), or the
    defaults for the PGD baselines the space does not train."""
    assert set(REFERENCE_SCHEDULES) == set(REGISTRY)
    shipped = {t.method for t in expand(load_space("cifar10-methods"))}
    cfg = space_config(method) if method in shipped else TrialConfig(method=method)
    expected = REFERENCE_SCHEDULES[method](cfg)
    ours = sweepers_lrs(cfg)
    assert len(ours) == len(expected) == cfg.epochs
    for epoch, (a, b) in enumerate(zip(ours, expected, strict=True)):
        assert a == pytest.approx(b, rel=1e-12), (method, epoch)
    drops = [e for e in range(1, cfg.epochs) if ours[e] < ours[e - 1]]
    assert drops == cfg.lr_drops()
    jeong = method in ("smoothmix", "consistency", "stability")
    assert drops == ([199, 399] if method == "macer" else [51, 101] if jeong else [50, 100])


def _drops(lrs: list[float]) -> list[int]:
    """The 0-based epochs that train at a lower LR than the one before."""
    return [e for e in range(1, len(lrs)) if lrs[e] < lrs[e - 1]]


@pytest.mark.parametrize("given", [{}, {"sigma": 0.5, "lam": 4.0}, {"sigma": 1.0}])
def test_a_plain_macer_trial_trains_with_main_pys_protocol_epoch_by_epoch(given):
    """Issue 40 §5: main.py's argparse defaults (l. 39-46: 440 epochs, gauss_num 16, batch 64,
    lr 0.01), its SGD (l. 135-136: momentum 0.9, weight decay 5e-4) and its MultiStepLR([200,
    400]) stepped before each 1-based epoch are MACER's defaults (its row's protocol): a trial
    naming only the method (and σ, λ) is the space's MACER trial, and its LR at every one of
    the 440 epochs is main.py's."""
    cfg = TrialConfig(method="macer", **given)
    numbers = (cfg.epochs, cfg.m_train, cfg.batch_size, cfg.lr, cfg.momentum, cfg.weight_decay)
    assert numbers == (440, 16, 64, 0.01, 0.9, 5e-4)
    assert (cfg.lr_step_size, cfg.lr_gamma, cfg.lr_step_offset) == (200, 0.1, -1)
    assert cfg.normalize_input is False and cfg.lr_end_drop is None
    space = space_config("macer", sigma=cfg.sigma)
    assert cfg.replace(macer_deferred=space.macer_deferred).trial_id == space.trial_id
    ours, expected = sweepers_lrs(cfg), reference_macer(cfg)
    assert len(ours) == len(expected) == 440
    for epoch, (a, b) in enumerate(zip(ours, expected, strict=True)):
        assert a == pytest.approx(b, rel=1e-12), epoch
    assert _drops(ours) == cfg.lr_drops() == [199, 399]


# `TrialConfig(method=m).trial_id` before issue 40 §5: only MACER's changes (2bb09636ebd4, when
# it trained 150 epochs of batch 256 at lr 0.1, weight decay 1e-4, m_train 1, drops at 49, 99
# and 149); DDRS-trained MACER keeps the shared protocol (deviation 31).
PLAIN_IDS = {
    "gaussian": "ef8ed503e823",
    "smoothadv": "ce23b5386a84",
    "vanilla_pgd": "b77d2c08b301",
    "pgd_noise": "a3aeadc80299",
    "smoothmix": "3d349e533a21",
    "consistency": "f959ac67f7e8",
    "stability": "b145ce40c9e2",
}


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_every_other_method_keeps_the_shared_protocol(method):
    cfg = TrialConfig(method=method)
    numbers = (cfg.epochs, cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.lr_step_size)
    if method == "macer":
        assert numbers == (440, 64, 0.01, 5e-4, 200) and cfg.trial_id == "2cfc030038d9"
        ddrs = TrialConfig(method=method, ddrs_start_epoch=0)
        assert (ddrs.epochs, ddrs.batch_size, ddrs.lr, ddrs.weight_decay) == (150, 256, 0.1, 1e-4)
        assert (ddrs.lr_step_size, ddrs.m_train, ddrs.trial_id) == (50, 1, "846326ab87e3")
        return
    assert numbers == (150, 256, 0.1, 1e-4, 50)
    assert cfg.m_train == (1 if "m_train" in REGISTRY[method].settings else None)
    assert cfg.trial_id == PLAIN_IDS[method]


@pytest.mark.parametrize(("epochs", "size"), [(150, 50), (440, 200), (400, 200), (8, 6), (7, 7)])
def test_macers_drops_are_the_runs_milestones_each_one_epoch_early(epochs, size):
    """main.py's MultiStepLR, stepped before each 1-based epoch, drops the LR entering 0-based
    m − 1 for each milestone m. sweeper's milestones are the multiples of lr_step_size inside
    the run (k·size < epochs: main.py's 200 and 400 of 440 epochs; StepLR's drops, so every
    method has as many): over all epochs, ours equal main.py's with those milestones written
    in. Before issue 40 §5 a milestone at `epochs` itself dropped the LR for the last epoch
    too (150 epochs of step 50: entering 49, 99 and 149): `lr_end_drop: true`, a trial of its
    own, still trains so; where no milestone falls at `epochs` the two rules are one trial."""
    cfg = TrialConfig(dataset="digits", method="macer", epochs=epochs, lr_step_size=size)
    milestones = list(range(size, epochs, size))
    ours = sweepers_lrs(cfg)
    assert ours == pytest.approx(reference_macer(cfg, milestones), rel=1e-12)
    assert _drops(ours) == cfg.lr_drops() == [m - 1 for m in milestones]
    gaussian = TrialConfig(dataset="digits", method="gaussian", epochs=epochs, lr_step_size=size)
    assert len(cfg.lr_drops()) == len(gaussian.lr_drops())
    former = cfg.replace(lr_end_drop=True)
    before = list(range(size, epochs + 1, size))  # a milestone at `epochs` counted too
    assert sweepers_lrs(former) == pytest.approx(reference_macer(former, before), rel=1e-12)
    assert _drops(sweepers_lrs(former)) == former.lr_drops() == [m - 1 for m in before]
    if epochs % size:
        assert former == cfg and cfg.lr_end_drop is None
    else:
        assert (cfg.lr_end_drop, former.lr_end_drop) == (False, True)
        assert former.lr_drops() == [*cfg.lr_drops(), epochs - 1]
        assert former.trial_id != cfg.trial_id


def reference_ddrs(cfg: TrialConfig) -> list[float]:
    """MotasemAlfarra/Data_Dependent_Randomized_Smoothing CIFAR10/train_macer.py l. 361-382
    (train_smooth_adv.py alike): StepLR(step_sz, gamma); each epoch trains, then
    `scheduler.step()`."""
    optimizer = _optimizer(cfg)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_step_size, cfg.lr_gamma)
    lrs = []
    for _epoch in range(cfg.epochs):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("method", ["macer", "smoothadv", "gaussian"])
def test_ddrs_training_follows_the_ddrs_codes_schedule_and_input_layer(method):
    """Under DDRS training every method takes the DDRS code's protocol: its StepLR stepped
    after each epoch and its network's (x − μ)/s (models/resnet.py l. 163-164), not the
    method's own reference (MACER: drops one epoch early, no layer; SmoothAdv: x − μ)."""
    plain = space_config(method)
    cfg = plain.replace(
        ddrs_start_epoch=0, lr_step_offset=None, normalize_input=None, scale_input=None
    )
    assert sweepers_lrs(cfg) == pytest.approx(reference_ddrs(cfg), rel=1e-12)
    assert (cfg.normalize_input, cfg.scale_input, cfg.lr_step_offset) == (True, True, 0)
    ours = sweepers_lrs(cfg)
    assert [e for e in range(1, cfg.epochs) if ours[e] < ours[e - 1]] == cfg.lr_drops()
    assert cfg.lr_drops()[0] == cfg.lr_step_size


def test_a_shifted_schedule_resumes_where_it_stopped():
    """MultiStepLR's state (the offset schedules) round-trips through a checkpoint."""
    cfg = space_config("smoothmix")
    optimizer = _optimizer(cfg)
    scheduler = build_scheduler(cfg, optimizer)
    for _ in range(60):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    resumed_optimizer = _optimizer(cfg)
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    resumed = build_scheduler(cfg, resumed_optimizer)
    resumed.load_state_dict(state)
    lrs = []
    for _ in range(60, cfg.epochs):
        lrs.append(resumed_optimizer.param_groups[0]["lr"])
        resumed_optimizer.step()
        resumed.step()
    assert lrs == sweepers_lrs(cfg)[60:]


def test_the_offset_is_bounded_by_the_step_size():
    with pytest.raises(ValueError, match=r"lr_step_offset must be in .* = \(-50, 50\)"):
        TrialConfig(method="smoothmix", lr_step_offset=50)
    assert TrialConfig(method="smoothmix", lr_step_offset=0).lr_drops() == [50, 100]


# ---------------------------------------------------------------------------- §1 MACER


def reference_macer_loss(model, inputs, targets, noise, lbd, *, sigma, beta, gamma, k):
    """RuntianZ/macer macer.py l. 29-65 (its `macer_train` body for one batch), in float64;
    `noise`: its `randn_like(inputs) * sigma`, rows b·k .. b·k + k − 1 the copies of input b."""
    m = torch.distributions.Normal(torch.tensor([0.0], dtype=DT), torch.tensor([1.0], dtype=DT))
    input_size, num_classes = len(inputs), CLASSES
    new_shape = [input_size * k, *inputs[0].shape]
    inputs = inputs.repeat((1, k, 1, 1)).view(new_shape)
    outputs = model(inputs + noise).reshape((input_size, k, num_classes))
    outputs_softmax = F.softmax(outputs, dim=2).mean(1)
    outputs_logsoftmax = torch.log(outputs_softmax + 1e-10)
    classification_loss = F.nll_loss(outputs_logsoftmax, targets, reduction="sum")
    beta_outputs_softmax = F.softmax(outputs * beta, dim=2).mean(1)
    top2_score, top2_idx = torch.topk(beta_outputs_softmax, 2)
    indices_correct = top2_idx[:, 0] == targets
    out0, out1 = top2_score[indices_correct, 0], top2_score[indices_correct, 1]
    robustness_loss = m.icdf(out1) - m.icdf(out0)
    indices = (
        ~torch.isnan(robustness_loss)
        & ~torch.isinf(robustness_loss)
        & (torch.abs(robustness_loss) <= gamma)
    )
    out0, out1 = out0[indices], out1[indices]
    robustness_loss = (m.icdf(out1) - m.icdf(out0) + gamma).sum() * sigma / 2
    return (classification_loss + lbd * robustness_loss) / input_size


@pytest.mark.parametrize("epoch", [0, 198, 199, 300])
def test_deferred_macer_loss_equals_macer_train_with_the_epochs_lambda(epoch):
    """The space's σ = 1.0 row (λ = 12, deferred) with a small β (probabilities away from
    0 and 1, where sweeper clamps Φ⁻¹'s argument): λ = 0 before main.py's first LR drop."""
    cfg = space_config("macer", sigma=1.0).replace(m_train=3, macer_beta=2.0)
    assert cfg.macer_deferred and cfg.lam == 12.0
    lbd = 0.0 if reference_macer(cfg)[epoch] == cfg.lr else 12.0
    assert lbd == (0.0 if epoch < 199 else 12.0)
    x, y = batch()
    ours_model, ref_model = conv_net(), conv_net()
    ours = macer.loss(ours_model, x, y, step_context(cfg, epoch)).loss
    noise = same_noise(x, 3, 1.0).flatten(0, 1)
    kwargs = dict(sigma=1.0, beta=2.0, gamma=8.0, k=3)
    ref = reference_macer_loss(ref_model, x, y, noise, lbd, **kwargs)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-12)
    for a, b in zip(gradients(ours_model, ours), gradients(ref_model, ref), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_deferral_ends_at_the_first_lr_drop_of_either_reference_schedule():
    """main.py's schedule (the SmoothMix appendix C.2: λ = 0 "until the first learning rate
    decay"), and jh-jeong's train_macer.py l. 105 (`epoch <= args.lr_step_size`) with its own
    schedule (lr_step_offset 1); rows not deferred keep λ throughout."""
    runtian = space_config("macer", sigma=1.0)
    lrs = reference_macer(runtian)
    assert [macer.lam_in_epoch(runtian, e) for e in range(runtian.epochs)] == [
        0.0 if lr == runtian.lr else 12.0 for lr in lrs
    ]
    jeong = TrialConfig(method="macer", lam=16.0, macer_deferred=True, lr_step_offset=1)
    assert [macer.lam_in_epoch(jeong, e) for e in range(jeong.epochs)] == [
        0.0 if e <= jeong.lr_step_size else 16.0 for e in range(jeong.epochs)
    ]
    for sigma, lam in ((0.25, 12.0), (0.5, 4.0)):
        cfg = space_config("macer", sigma=sigma)
        assert not cfg.macer_deferred
        assert {macer.lam_in_epoch(cfg, e) for e in range(cfg.epochs)} == {lam}


def _param_group(optimizer: torch.optim.Optimizer) -> dict:
    """Its settings (`initial_lr`: the scheduler's note of the starting LR)."""
    return {k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "initial_lr")}


def test_macer_trains_with_main_pys_optimizer_and_no_input_standardization():
    """main.py l. 135-136: SGD(lr=args.lr, momentum=0.9, weight_decay=5e-4); model.py's
    ResNet-110 takes the [0, 1] pixels as they are (sweeper's first layer computes x)."""
    cfg = space_config("macer")
    state = build_state(cfg, torch.device("cpu"))
    params = [nn.Parameter(torch.zeros(1))]
    reference = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=5e-4)
    assert _param_group(state.optimizer) == _param_group(reference)
    layer, network = state.model[0], state.model[1]
    assert isinstance(layer, NormalizeLayer) and not cfg.normalize_input
    x = torch.rand((2, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    state.model.eval()
    with torch.no_grad():
        assert torch.equal(layer(x), x)
        assert torch.equal(state.model(x), network(x))
    standardized = build_state(cfg.replace(normalize_input=True), torch.device("cpu"))
    assert standardized.model[0].sds.flatten().tolist() == pytest.approx([0.2023, 0.1994, 0.2010])


# ---------------------------------------------------------------------------- §6 SmoothMix


@pytest.mark.parametrize("method", ["smoothmix", "consistency", "stability"])
def test_jeongs_methods_train_with_the_codes_plain_momentum(method):
    """jh-jeong's train_utils.py l. 126: SGD(params, lr=args.lr, momentum=args.momentum,
    weight_decay=args.weight_decay), defaults 0.1, 0.9, 1e-4 (train.py l. 30-39): plain
    momentum, where the SmoothMix paper's appendix C says Nesterov."""
    cfg = space_config(method).replace(arch="cifar_resnet20")
    state = build_state(cfg, torch.device("cpu"))
    params = [nn.Parameter(torch.zeros(1))]
    reference = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)
    assert _param_group(state.optimizer) == _param_group(reference)
    assert state.optimizer.param_groups[0]["nesterov"] is False
