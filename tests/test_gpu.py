"""What only a CUDA machine can run: AMP training, CERTIFY on the GPU, NCCL data-parallel
training. Every test is marked `gpu` and skipped without CUDA (conftest.py); `make test-gpu`
runs them. Small on purpose (digits, a few epochs): they check that the GPU paths are taken
and agree with the CPU ones, not the GPU's speed."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from trainables import checkpoint
from trainables.certify_points import certify_points
from trainables.datasets import INFO, load_dataset
from trainables.kernel.certificates import max_radius
from trainables.kernel.config import TrialConfig
from trainables.kernel.stage_settings import CertifySpec
from trainables.models import build_model
from trainables.pseudo import fingerprint, load_pseudo
from trainables.smoothing import Smooth
from trainables.train import fit

pytestmark = pytest.mark.gpu

CFG = dict(
    dataset="digits",
    method="gaussian",
    sigma=0.25,
    epochs=3,
    batch_size=64,
    lr=0.05,
    train_subset=512,
    eval_subset=100,
)
CUDA = torch.device("cuda")


def _gen(seed: int, device: torch.device = CUDA) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def test_amp_training_runs_the_forward_pass_in_fp16_and_learns(tmp_path):
    """`amp: true` on CUDA: the network's layers compute in float16 under autocast, the
    GradScaler is live and checkpointed, losses stay finite and the model learns; resuming
    continues from the checkpoint."""
    cfg = TrialConfig(**CFG, amp=True)
    dtypes: set[torch.dtype] = set()

    def record(module, inputs, output):
        if module.training:
            dtypes.add(output.dtype)

    path = str(tmp_path / "checkpoint.pt")
    seen = []

    def on_epoch(metrics, state):
        if not seen:  # hooks on the first epoch's end: every later forward pass is recorded
            for m in state.model.modules():
                if isinstance(m, nn.Linear | nn.Conv2d):
                    m.register_forward_hook(record)
        seen.append(metrics)

    state = fit(cfg, path, CUDA, on_epoch, stop_after=2)
    assert state.amp and state.device.type == "cuda"
    assert dtypes == {torch.float16}
    assert all(math.isfinite(m["train_loss"]) for m in seen)
    payload = checkpoint.load(path)
    assert payload["epoch"] == 2 and payload["scaler"]["scale"] > 0
    resumed = fit(cfg, path, CUDA)
    assert resumed.epoch == 3 and resumed.history[:2] == payload["history"]
    assert resumed.history[-1]["test_noisy_acc"] > 0.5  # 10 classes


class PixelArgmax(nn.Module):
    """Votes for the brightest of the first `num_classes` pixels: with a small σ the votes
    cannot change, so CUDA and CPU must give identical certificates."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes

    def forward(self, x):
        return x.flatten(1)[:, : self.num_classes]


def test_certify_on_cuda_gives_the_certificates_of_the_cpu():
    labels = [3, 0, 5, 1, 4, 2, 2]
    xs = torch.zeros(len(labels), 1, 4, 4)
    xs.view(len(labels), -1)[torch.arange(len(labels)), torch.tensor(labels)] = 1.0
    n0, n, alpha, sigma = 16, 5000, 0.001, 0.05
    smooth = Smooth(PixelArgmax(6), 6, sigma)
    cpu = smooth.certify_batch(xs, n0, n, alpha, 1000, torch.Generator().manual_seed(0))
    gpu = smooth.certify_batch(xs.to(CUDA), n0, n, alpha, 1000, _gen(0))
    assert gpu == cpu
    assert [c.prediction for c in gpu] == labels
    assert all(c.radius == pytest.approx(max_radius(sigma, n, alpha)) for c in gpu)


def test_cuda_votes_follow_the_gaussian_and_seeds_reproduce():
    """A linear classifier's vote share under CUDA noise is Φ(d/σ) (the noise scale and space
    are right on the device), and the same CUDA generator seed gives the same counts."""
    dim, sigma, num = 16, 0.5, 20_000
    linear = nn.Linear(dim, 2).to(CUDA)
    with torch.no_grad():
        linear.weight.zero_()
        linear.weight[1, 0] = 1.0  # class 1 iff pixel 0 > 0
        linear.bias.zero_()
    model = nn.Sequential(nn.Flatten(), linear)
    distances = torch.tensor([-0.6, -0.1, 0.0, 0.3, 0.8])
    xs = torch.zeros(len(distances), 1, 4, 4)
    xs[:, 0, 0, 0] = distances
    smooth = Smooth(model, 2, sigma)
    counts = smooth.sample_counts(xs.to(CUDA), num, 7_000, _gen(1))
    assert counts.device.type == "cuda" and counts.sum(dim=1).tolist() == [num] * len(xs)
    expected = norm.cdf(distances.numpy() / sigma)
    se = np.sqrt(expected * (1 - expected) / num)
    assert np.all(np.abs(counts[:, 1].cpu().numpy() / num - expected) < 5 * se + 1e-12)
    assert torch.equal(counts, smooth.sample_counts(xs.to(CUDA), num, 7_000, _gen(1)))


def test_certify_points_of_a_trained_model_on_cuda(tmp_path):
    """The certification stage's own function on CUDA: rows for every point, radii within
    the Clopper–Pearson limit, abstentions with radius 0."""
    cfg = TrialConfig(**{**CFG, "epochs": 1})
    state = fit(cfg, None, CUDA)
    dataset = load_dataset("digits", "test", None)
    settings = CertifySpec(n0=16, n=256, alpha=0.01, sigma=0.25, batch_size=512)
    cols = certify_points(state.model, dataset, list(range(0, 40, 4)), 10, settings, 7, CUDA)
    assert cols["idx"] == list(range(0, 40, 4))
    limit = max_radius(0.25, 256, 0.01)
    for predict, radius, correct, label in zip(
        cols["predict"], cols["radius"], cols["correct"], cols["label"], strict=True
    ):
        assert 0.0 <= radius <= limit + 1e-9
        assert (predict == -1) <= (radius == 0.0)
        assert correct == (predict == label)
    assert sum(cols["correct"]) >= 5  # a trained model is right on most digits


@pytest.mark.parametrize("name", ["pgd", "ddn", "stein_pgd"])
def test_the_attacks_run_on_cuda_and_stay_in_the_ball_and_box(name):
    """SmoothAdv's attacks on CUDA inputs: every tensor they make (DDN's sphere radii, the
    zero-gradient draws) is on the inputs' device; the result is on CUDA, in [0, 1] and
    within ε (DDN: plus half a quantization level per pixel)."""
    from trainables import attacks

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 5)).to(CUDA)
    x = torch.rand(4, 3, 8, 8, generator=_gen(1), device=CUDA)
    y = torch.arange(4, device=CUDA)
    noise = 0.25 * torch.randn(4, 2, 3, 8, 8, generator=_gen(2), device=CUDA)
    extra = {"sigma": 0.25} if name == "stein_pgd" else {}
    x_adv = getattr(attacks, name)(model, x, y, noise, 0.5, 3, generator=_gen(3), **extra)
    assert x_adv.device.type == "cuda"
    assert attacks.unit_or_random(torch.zeros(2, 3, device=CUDA), _gen(4)).device.type == "cuda"
    assert float(x_adv.min()) >= 0.0 and float(x_adv.max()) <= 1.0
    slack = 0.5 / 255 * math.sqrt(3 * 8 * 8) if name == "ddn" else 1e-5
    assert float((x_adv - x).flatten(1).norm(dim=1).max()) <= 0.5 + slack


def test_load_model_puts_a_cpu_checkpoint_on_cuda_and_a_cuda_one_on_a_machine_without(tmp_path):
    """A checkpoint written on the CPU loads onto CUDA (the parameters on the GPU), and one
    written from CUDA tensors loads where no GPU is visible (a laptop reading a cluster's
    results): the tensors are mapped to the asked device, not to the one they were saved from."""
    cfg = TrialConfig(**{**CFG, "epochs": 1})
    model = build_model(cfg.arch, 10, INFO["digits"].mean, INFO["digits"].std)
    path = tmp_path / "cpu.pt"
    checkpoint.save({"model": model.state_dict(), "config": cfg.to_dict()}, path)
    loaded, _ = checkpoint.load_model(path, CUDA)
    assert {p.device.type for p in loaded.parameters()} == {"cuda"}
    on_cuda = tmp_path / "cuda.pt"
    state = {k: v.to(CUDA) for k, v in model.state_dict().items()}
    checkpoint.save({"model": state, "config": cfg.to_dict()}, on_cuda)
    read = "from trainables import checkpoint; import sys; m, _ = checkpoint.load_model(sys.argv[1]); print({p.device.type for p in m.parameters()})"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", read, str(on_cuda)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "{'cpu'}"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL data-parallel needs 2 GPUs")
def test_two_nccl_ranks_train_in_sync(tmp_path, monkeypatch):
    from trainables.distributed import TIMEOUT_ENV, backend
    from trainables.distributed_fit import fit_data_parallel

    monkeypatch.setenv(TIMEOUT_ENV, "300")  # a broken rank fails the test instead of hanging
    assert backend() == "nccl"
    cfg = TrialConfig(**CFG, data_parallel=2)
    path = str(tmp_path / "checkpoint.pt")
    reports = []
    state = fit_data_parallel(cfg, 2, path, lambda m, s: reports.append(m["epoch"]))
    assert reports == [1, 2, 3]
    payload = checkpoint.load(path)
    assert payload["history"][-1]["test_noisy_acc"] > 0.5
    for name, tensor in state.model.module.state_dict().items():
        assert torch.equal(tensor.cpu(), payload["model"][name])


def test_ddrs_and_self_training_run_on_cuda(tmp_path):
    """DDRS training and self-training with the model on CUDA: each chunk's σ_x is optimized
    on the GPU from the CPU σ table and written back to it; pseudo-labelled batches are moved
    to the GPU like labelled ones."""
    ddrs_settings = {"ddrs_start_epoch": 1, "ddrs_iterations": 2, "ddrs_lr": 0.01}
    ddrs = TrialConfig(**{**CFG, "epochs": 2, "train_subset": 64}, **ddrs_settings)
    state = fit(ddrs, tmp_path / "ddrs" / "checkpoint.pt", CUDA)
    table = state.ddrs_sigma
    assert table is not None and table.device.type == "cpu" and table.dtype == torch.float32
    assert bool((table[:64] != 0.25).any()) and bool(torch.isfinite(table).all())
    test = load_dataset("digits", "test")
    images = (test.images[:50] * 255).round().to(torch.uint8).numpy()
    np.savez(tmp_path / "pseudo.npz", images=images, labels=test.labels[:50].numpy())
    path = tmp_path / "pseudo.npz"
    pseudo_settings = {
        "pseudo_data": str(path),
        "pseudo_fingerprint": fingerprint(*load_pseudo(path, "digits")),
        "pseudo_eta": 0.5,
    }
    pseudo = TrialConfig(**{**CFG, "epochs": 1, "train_subset": 128}, **pseudo_settings)
    history = fit(pseudo, tmp_path / "pseudo" / "checkpoint.pt", CUDA).history
    assert history[0]["pseudo_inputs"] == 128 and math.isfinite(history[0]["pseudo_loss"])
