"""The training loop on the digits data set: exact resume, checkpoints, learning, chunking."""

from __future__ import annotations

import math
import os
import time

import pytest
import torch

from trainables import checkpoint
from trainables.kernel.config import TrialConfig
from trainables.methods import REGISTRY
from trainables.train import evaluate, fit, make_loaders, train_epoch
from trainables.train_state import build_state

CPU = torch.device("cpu")
HISTORY_KEYS = (
    "epoch",
    "lr",
    "epsilon",
    "train_loss",
    "train_acc",
    "test_clean_acc",
    "test_noisy_acc",
)


def small_cfg(**changes) -> TrialConfig:
    base = {
        "dataset": "digits",
        "method": "smoothadv",
        "attack": "pgd",
        "m_train": 2,
        "epsilon": 0.5,
        "steps": 2,
        "warmup_epochs": 2,
        "epochs": 3,
        "batch_size": 64,
        "lr": 0.02,
        "lr_step_size": 2,
        "train_subset": 192,
        "eval_subset": 96,
    }
    return TrialConfig(**{**base, **changes})


def assert_nested_equal(a, b, where="") -> None:
    """Tensors equal bitwise (torch.equal), everything else ==, recursively."""
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


@pytest.mark.parametrize(
    ("attack", "stop_after"), [("pgd", 1), ("pgd", 2), ("ddn", 1)], ids=["pgd-1", "pgd-2", "ddn-1"]
)
def test_resume_is_bitwise_identical_to_an_uninterrupted_run(tmp_path, attack, stop_after):
    cfg = small_cfg(attack=attack)
    interrupted = tmp_path / "a" / "checkpoint.pt"
    first = fit(cfg, interrupted, device=CPU, stop_after=stop_after)
    assert first.epoch == stop_after
    resumed = fit(cfg, interrupted, device=CPU)
    straight = fit(cfg, tmp_path / "b" / "checkpoint.pt", device=CPU)
    assert resumed.epoch == straight.epoch == cfg.epochs
    assert_nested_equal(resumed.model.state_dict(), straight.model.state_dict(), "model")
    assert_nested_equal(resumed.optimizer.state_dict(), straight.optimizer.state_dict(), "optim")
    assert_nested_equal(resumed.scheduler.state_dict(), straight.scheduler.state_dict(), "sched")
    assert_nested_equal(resumed.payload()["rng"], straight.payload()["rng"], "rng")
    for h_resumed, h_straight in zip(resumed.history, straight.history, strict=True):
        assert {k: h_resumed[k] for k in HISTORY_KEYS} == {k: h_straight[k] for k in HISTORY_KEYS}
    assert [h["epsilon"] for h in straight.history] == [0.25, 0.5, 0.5]  # min(ε, (e+1)ε/W)


def test_the_method_is_given_each_epochs_warm_up_epsilon(monkeypatch):
    """The ε the loss receives in epoch e (from 0), not a figure computed beside it: the
    reference warm-up min(ε, (e+1)·ε/W), here ε/4, 2ε/4, 3ε/4, ε, ε (exact in binary). One
    batch of one chunk per epoch: one loss call each. The history records the same ε."""
    import trainables.methods.smoothadv as smoothadv

    received: list[tuple[int, float]] = []
    real = smoothadv.loss

    def recording(model, x, y, ctx):
        received.append((ctx.epoch, ctx.epsilon))
        return real(model, x, y, ctx)

    monkeypatch.setattr(smoothadv, "loss", recording)
    small = {"m_train": 1, "steps": 1, "batch_size": 32, "train_subset": 32, "eval_subset": 16}
    cfg = small_cfg(epsilon=0.5, warmup_epochs=4, epochs=5, **small)
    history = fit(cfg, None, device=CPU).history
    expected = [(e, min(0.5, (e + 1) * 0.5 / 4)) for e in range(5)]
    assert received == expected == [(0, 0.125), (1, 0.25), (2, 0.375), (3, 0.5), (4, 0.5)]
    assert [h["epsilon"] for h in history] == [eps for _, eps in expected]


# ---------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cfg = small_cfg(epochs=2, m_train=1, steps=1)
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint.pt"
    return cfg, path, fit(cfg, path, device=CPU)


def test_checkpoint_is_self_describing_and_loads_weights_only(trained):
    cfg, path, state = trained
    payload = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("model", "optimizer", "scheduler", "epoch", "rng", "config", "trial_id"):
        assert key in payload
    assert payload["config"] == cfg.to_dict()
    assert payload["trial_id"] == cfg.trial_id
    assert payload["epoch"] == 2
    assert_nested_equal(payload["model"], state.model.state_dict(), "model")
    assert_nested_equal(payload["optimizer"], state.optimizer.state_dict(), "optim")
    assert len(payload["history"]) == 2


def test_load_model_rebuilds_the_same_classifier(trained):
    cfg, path, state = trained
    model, loaded_cfg = checkpoint.load_model(path)
    assert loaded_cfg == cfg and not model.training
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    state.model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), state.model(x))


def test_corrupt_or_missing_checkpoint_raises_checkpoint_error_naming_the_file(tmp_path):
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"this is not a checkpoint")
    for target in (bad, tmp_path / "missing.pt"):
        with pytest.raises(checkpoint.CheckpointError, match=str(target)):
            checkpoint.load(target)
        with pytest.raises(checkpoint.CheckpointError, match=str(target)):
            checkpoint.load_model(target)


def test_checkpoint_write_is_atomic(trained, tmp_path, monkeypatch):
    """A write that fails before its final rename leaves the old file intact and no litter."""
    _, path, state = trained
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left
    target = tmp_path / "checkpoint.pt"
    checkpoint.save(state.payload(), target)
    before = target.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("crashed before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="crashed"):
        checkpoint.save({**state.payload(), "epoch": 99}, target)
    monkeypatch.undo()
    assert target.read_bytes() == before
    assert checkpoint.load(target)["epoch"] == state.epoch
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


# ---------------------------------------------------------------------------- learning


def test_smoothadv_on_digits_learns_well_above_chance():
    cfg = TrialConfig(
        dataset="digits",
        method="smoothadv",
        attack="pgd",
        m_train=1,
        sigma=0.25,
        epsilon=0.25,
        steps=2,
        warmup_epochs=3,
        epochs=5,
        batch_size=64,
        lr=0.01,
    )
    history = fit(cfg, None, device=CPU).history
    assert [h["epsilon"] for h in history] == pytest.approx([0.25 / 3, 0.5 / 3, 0.25, 0.25, 0.25])
    assert history[-1]["test_noisy_acc"] > 0.6  # chance is 0.1
    assert history[-1]["test_clean_acc"] > 0.6


METHOD_CASES = [(m, "pgd") for m in REGISTRY] + [("smoothadv", "ddn")]


@pytest.mark.parametrize(
    ("method", "attack"), METHOD_CASES, ids=[f"{m}-{a}" for m, a in METHOD_CASES]
)
def test_every_method_trains_one_epoch_with_finite_loss(method, attack):
    extra = {} if method == "gaussian" else {"attack": attack, "warmup_epochs": 1}
    if method == "vanilla_pgd":
        extra["m_train"] = None
    cfg = small_cfg(
        method=method, epochs=1, train_subset=64, batch_size=32, eval_subset=32, **extra
    )
    initial = build_state(cfg, CPU).model.state_dict()
    state = fit(cfg, None, device=CPU)
    (metrics,) = state.history
    attacks_inputs = method in ("smoothadv", "vanilla_pgd", "pgd_noise")
    assert metrics["epsilon"] == (0.5 if attacks_inputs else 0.0)
    assert math.isfinite(metrics["train_loss"])
    assert 0 <= metrics["train_acc"] <= 1
    params = state.model.state_dict()
    assert all(torch.isfinite(p).all() for p in params.values() if p.is_floating_point())
    assert any(not torch.equal(params[k], initial[k]) for k in params)


@pytest.mark.parametrize("method", ["gaussian", "smoothadv"])
def test_batch_is_split_into_m_train_chunks_each_a_full_optimizer_step(method):
    """B = 64 with m_train = 4: 4 steps on 16 inputs × 4 noisy copies = 64 samples each;
    a last batch of 6 inputs gives chunks of 2, 2, 1, 1 inputs."""
    cfg = small_cfg(method=method, m_train=4, batch_size=64, train_subset=70, warmup_epochs=1)
    state = build_state(cfg, CPU)
    train_loader, _ = make_loaders(state)
    seen: list[tuple[bool, int]] = []
    steps: list[int] = []
    state.model.register_forward_pre_hook(
        lambda mod, args: seen.append((mod.training, len(args[0])))
    )
    state.optimizer.register_step_post_hook(lambda opt, args, kwargs: steps.append(len(seen)))
    train_epoch(state, train_loader)
    trained_on = [n for training, n in seen if training]
    assert trained_on == [64, 64, 64, 64, 8, 8, 4, 4]
    assert len(steps) == 8
    attack_calls = [n for training, n in seen if not training]
    assert attack_calls == ([] if method == "gaussian" else [64] * 8 + [8] * 4 + [4] * 4)


class _SumSign(torch.nn.Module):
    """Class 0 iff the input's pixels sum to 0 or more (argmax takes the first of a tie): right
    on clean zero images of class 0, and under noise as the noise drawn decides, image by image."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.flatten(1).sum(1)
        return torch.stack([s, -s], dim=1)


def test_evaluate_draws_its_noise_from_its_own_seed_not_the_global_generator():
    batches = [
        (torch.zeros(40, 1, 4, 4), torch.zeros(40, dtype=torch.long), torch.arange(40))
        for _ in range(3)
    ]
    generator = torch.Generator().manual_seed(11)
    right = 0
    for x, _, _ in batches:  # the noise evaluate must draw: N(0, σ²) from seed 11, in order
        noise = torch.randn(x.shape, generator=generator) * 0.5
        right += int((noise.flatten(1).sum(1) > 0).sum())
    expected = {"test_clean_acc": 1.0, "test_noisy_acc": right / 120}
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        assert evaluate(_SumSign(), batches, 0.5, CPU, seed=11) == expected
    assert evaluate(_SumSign(), batches, 0.5, CPU, seed=12) != expected


def test_evaluate_of_a_single_test_input_is_its_own_accuracy():
    batches = [(torch.zeros(1, 1, 4, 4), torch.zeros(1, dtype=torch.long), torch.arange(1))]
    result = evaluate(_SumSign(), batches, 0.0, CPU, seed=0)  # σ = 0: noisy is clean
    assert result == {"test_clean_acc": 1.0, "test_noisy_acc": 1.0}


def test_a_compiled_trial_compiles_the_unwrapped_model_on_its_device(monkeypatch):
    """`compile: true` hands the network itself (not a data-parallel wrapper) and the trial's
    device to `runtime.compile_module`, once, before the first epoch."""
    calls = []
    monkeypatch.setattr(
        "trainables.train.runtime.compile_module", lambda m, d: calls.append((m, d))
    )
    state = fit(small_cfg(epochs=1, compile=True, train_subset=64, eval_subset=32), device=CPU)
    assert len(calls) == 1
    model, device = calls[0]
    assert model is state.model and device == CPU


def test_a_fresh_fine_tune_starts_from_its_parents_weights_but_its_own_last_layer():
    """`init_weights` (the parent's state dict) is loaded before the first epoch, except the
    input normalization and the logit layer; a resumed fine-tune ignores it (its checkpoint
    already holds the trained weights)."""
    parent = build_state(small_cfg(seed=1), CPU).model.state_dict()
    cfg = small_cfg(seed=2, init_from="0123456789ab")
    own = build_state(cfg, CPU).model.state_dict()
    state = fit(cfg, device=CPU, stop_after=0, init_weights=parent)
    loaded = state.model.state_dict()
    kept = {"0.means", "0.sds", "1.classifier.3.weight", "1.classifier.3.bias"}  # LeNet's
    for key, tensor in loaded.items():
        assert torch.equal(tensor, (own if key in kept else parent)[key]), key
    for key in ("1.features.0.weight", "1.classifier.3.weight"):  # the two seeds differ
        assert not torch.equal(parent[key], own[key])
    trained = fit(cfg, device=CPU, stop_after=1, init_weights=parent)
    payload = trained.payload()
    epochs = []
    resumed = fit(
        cfg,
        device=CPU,
        stop_after=1,
        init_weights=parent,
        resume_from=payload,
        on_epoch=lambda metrics, _: epochs.append(metrics["epoch"]),
    )
    assert resumed.epoch == 1 and epochs == []  # resumed after epoch 1: nothing trained again
    for key, tensor in resumed.model.state_dict().items():  # the trained weights, not the parent's
        assert torch.equal(tensor, payload["model"][key])


def test_each_epochs_metrics_are_reproducible_and_nothing_is_written_without_a_path(tmp_path):
    """Epoch e's test_noisy_acc is `evaluate` with seed cfg.seed + 7919·e on that epoch's model;
    epoch_time_s is the epoch's own wall time; `on_epoch` gets the state after the epoch; and
    a fit without a checkpoint path writes no file."""
    cfg = small_cfg(method="gaussian", sigma=0.25, epochs=2, lr_step_size=5, seed=3)
    seen = []

    def on_epoch(metrics, state):
        model = state.model
        seen.append((metrics, state.epoch, {k: v.clone() for k, v in model.state_dict().items()}))

    start = time.perf_counter()
    fit(cfg, device=CPU, on_epoch=on_epoch)
    elapsed = time.perf_counter() - start
    assert list(tmp_path.iterdir()) == []  # the working directory (conftest): nothing written
    _, test_loader = make_loaders(build_state(cfg, CPU))
    times = []
    for metrics, epoch, weights in seen:
        assert metrics["epoch"] == epoch
        model = build_state(cfg, CPU).model
        model.load_state_dict(weights)
        expected = evaluate(model, test_loader, 0.25, CPU, seed=3 + 7919 * epoch)
        assert metrics["test_noisy_acc"] == expected["test_noisy_acc"]
        times.append(metrics["epoch_time_s"])
    assert [epoch for _, epoch, _ in seen] == [1, 2]
    assert all(isinstance(t, float) and t > 0 for t in times) and sum(times) <= elapsed


@pytest.mark.parametrize(
    ("method", "m_train"), [("macer", 4), ("stability", None), ("vanilla_pgd", None)]
)
def test_a_method_that_does_not_split_or_no_m_train_takes_one_step_per_batch(method, m_train):
    """MACER and stability training draw their own noisy copies of the whole batch (MACER's
    m_train is its sample count), and a splitting method without m_train (vanilla PGD: one
    noisy copy) has one chunk."""
    cfg = small_cfg(method=method, m_train=m_train, train_subset=70, warmup_epochs=1)
    state = build_state(cfg, CPU)
    train_loader, _ = make_loaders(state)
    steps: list[int] = []
    state.optimizer.register_step_post_hook(lambda opt, args, kwargs: steps.append(1))
    train_epoch(state, train_loader)
    assert len(steps) == 2  # batches of 64 and 6


def test_the_epochs_loss_and_accuracy_are_the_steps_sums_over_their_samples(monkeypatch):
    """train_loss = Σ summed loss / Σ samples and train_acc = Σ correct / Σ samples over the
    epoch's steps, exactly; an epoch of one sample is that sample's."""
    from trainables import train

    step = train._step
    returned = []

    def recording(*args, **kwargs):
        returned.append(step(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(train, "_step", recording)
    for subset, m in ((70, 2), (1, 1)):  # one sample: a mean over max(seen, 1) samples
        cfg = small_cfg(method="gaussian", m_train=m, train_subset=subset, sigma=0.05, lr=0.1)
        state = build_state(cfg, CPU)
        train_loader, _ = make_loaders(state)
        sums = []
        for _ in range(1 if subset > 1 else 6):  # one input is learnt within a few steps
            returned.clear()
            metrics = train_epoch(state, train_loader)
            loss, correct, seen = (sum(r[i] for r in returned) for i in range(3))
            assert seen == m * subset  # m_train noisy copies of every input
            assert metrics == {"train_loss": loss / seen, "train_acc": correct / seen}
            assert len(returned) == (4 if subset == 70 else 1)
            sums.append((loss, correct))
        # so that a mean over another count would show: some loss, and some input right
        assert max(loss for loss, _ in sums) > 0 and max(right for _, right in sums) > 0
