"""How models are run: precision, channels_last and compile for certification and training;
fp32 certification unchanged bit for bit; the SmoothAdv attack computes no weight gradients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.run_settings import run_settings
from sweeper.plan.spec import CertifySpec
from sweeper.results.storage import Experiment
from sweeper.run import shards
from sweeper.run.certify_stage import CERTIFY
from trainables import attacks, runtime
from trainables.attestations import attest_training
from trainables.certify_points import certify_points, run_mode
from trainables.datasets import INFO, load_dataset
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings
from trainables.models import build_model
from trainables.smoothing import Smooth
from trainables.train import fit
from trainables.train_state import build_state

CPU = torch.device("cpu")
NO_BF16 = not runtime.cpu_has_bf16()
REPO = Path(__file__).resolve().parent.parent


def digits_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    info = INFO["digits"]
    return build_model("digits_cnn", 10, info.mean, info.std).eval()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A digits model trained for two epochs, in an experiment's checkpoint location."""
    exp = Experiment(str(tmp_path_factory.mktemp("runtime") / "store"), "rt")
    cfg = TrialConfig(
        dataset="digits",
        method="gaussian",
        sigma=0.25,
        epochs=2,
        batch_size=64,
        lr=0.05,
        eval_subset=64,
    )
    fit(cfg, exp.checkpoint(cfg.trial_id), device=CPU)
    attest_training(exp.trial_dir(cfg.trial_id), cfg, exp.checkpoint(cfg.trial_id), None)
    return exp, cfg


# ---------------------------------------------------------------------------- precision
def test_precision_problems_name_the_setting_and_the_fix():
    assert runtime.precision_problem("fp32", CPU) is None
    assert runtime.precision_problem("fp16", CPU) == (
        "precision fp16 needs a CUDA GPU (this is cpu); use fp32 or bf16"
    )
    assert "unknown precision 'fp8'" in runtime.precision_problem("fp8", CPU)


@pytest.mark.skipif(not NO_BF16, reason="this CPU computes bf16 natively")
def test_bf16_is_refused_on_a_cpu_without_bf16_instructions():
    problem = runtime.precision_problem("bf16", CPU)
    assert problem.startswith("precision bf16: this CPU has no bf16 instructions")
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.25, batch_size=20, precision="bf16")
    with pytest.raises(runtime.RuntimeSettingError, match="no bf16 instructions"):
        certify_points(digits_model(), load_dataset("digits", "test"), [0], 10, settings, 0, CPU)
    with pytest.raises(runtime.RuntimeSettingError, match="no bf16 instructions"):
        build_state(TrialConfig(dataset="digits", amp="bf16"), CPU)


# ---------------------------------------------------------------------------- certification
def plain_counts(model, x, num, k, sigma, generator) -> torch.Tensor:
    """Sample_counts of one point as the fp32 path has always drawn them: a (k, C, H, W)
    buffer filled by normal_(0, σ) in place, x added, argmax counted."""
    counts = torch.zeros(10, dtype=torch.long)
    buffer = torch.empty((k, *x.shape))
    with torch.inference_mode():
        while num > 0:
            batch = buffer[: min(k, num)]
            batch.normal_(0.0, sigma, generator=generator).add_(x)
            counts += torch.bincount(model(batch).argmax(1), minlength=10)
            num -= len(batch)
    return counts


def test_fp32_votes_are_the_plain_sampling_order_bit_for_bit():
    model, x = digits_model(), load_dataset("digits", "test")[3][0]
    expected = plain_counts(model, x, 250, 100, 0.5, torch.Generator().manual_seed(7))
    smooth = Smooth(model, 10, 0.5)
    got = smooth.sample_counts(x[None], 250, 100, torch.Generator().manual_seed(7))[0]
    assert torch.equal(got, expected) and expected.sum() == 250


class DtypeRecorder(nn.Module):
    """Logits from a fixed linear map; remembers the dtype and device of its inputs."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 10)
        self.seen: set = set()

    def forward(self, x):
        self.seen.add((x.dtype, x.device.type))
        return self.linear(x.flatten(1))


def test_reduced_precision_draws_the_noise_in_its_dtype():
    """The noisy batch itself is bf16 (not fp32 cast inside the model), on the device."""
    torch.manual_seed(0)
    model, x = DtypeRecorder(), torch.rand(2, 1, 8, 8)
    with runtime.autocast("bf16", x.device):  # as certify_points runs it
        counts = Smooth(model, 10, 0.25, runtime.noise_dtype("bf16")).sample_counts(x, 30, 20)
    assert model.seen == {(torch.bfloat16, "cpu")} and counts.sum(1).tolist() == [30, 30]
    model.seen.clear()
    Smooth(model.double(), 10, 0.25).sample_counts(x.double(), 30, 20)
    assert model.seen == {(torch.float64, "cpu")}, "fp32 keeps the inputs' own dtype"


def test_fp16_certification_needs_cuda():
    settings = CertifySpec(n0=10, n=20, alpha=0.01, sigma=0.25, batch_size=20, precision="fp16")
    with pytest.raises(runtime.RuntimeSettingError, match="fp16 needs a CUDA GPU"):
        certify_points(digits_model(), load_dataset("digits", "test"), [0], 10, settings, 0, CPU)


def test_channels_last_certification_agrees_with_the_default():
    data = load_dataset("digits", "test")
    base = CertifySpec(n0=20, n=200, alpha=0.01, sigma=0.25, batch_size=200)
    fast = CertifySpec(n0=20, n=200, alpha=0.01, sigma=0.25, batch_size=200, channels_last=True)
    points = list(range(0, 100, 5))
    a = certify_points(digits_model(), data, points, 10, base, 11, CPU)
    model = digits_model()
    b = certify_points(model, data, points, 10, fast, 11, CPU)
    assert model[1].features[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert sum(p == q for p, q in zip(a["predict"], b["predict"], strict=True)) >= 19
    assert run_mode(fast, CPU) == {"precision": "fp32", "channels_last": "true", "compile": "eager"}


def test_compile_falls_back_with_one_warning_line_where_it_cannot_compile(tmp_path):
    """No C++ compiler for inductor's CPU backend (and an empty compile cache): eager."""
    code = (
        "import logging, torch; from trainables import runtime; logging.basicConfig(); "
        "m = torch.nn.Linear(2, 2); print(runtime.prepare(m, torch.device('cpu'), False, True)); "
        "print(m(torch.ones(1, 2)).shape)"
    )
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-compiler"),
        "PYTHONPATH": str(REPO),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["eager (compile unavailable)", "torch.Size([1, 2])"]
    warnings = [line for line in done.stderr.splitlines() if "compile" in line]
    assert len(warnings) == 1 and "torch.compile cannot run on cpu here" in warnings[0]


def test_compiled_certification_runs_the_compiled_model_and_agrees():
    if runtime.compile_problem("cpu") is not None:
        pytest.skip(f"torch.compile cannot run here: {runtime.compile_problem('cpu')}")
    data, points = load_dataset("digits", "test"), list(range(0, 60, 6))
    eager = CertifySpec(n0=20, n=100, alpha=0.01, sigma=0.25, batch_size=100)
    compiled = CertifySpec(n0=20, n=100, alpha=0.01, sigma=0.25, batch_size=100, compile=True)
    a = certify_points(digits_model(), data, points, 10, eager, 3, CPU)
    b = certify_points(digits_model(), data, points, 10, compiled, 3, CPU)
    assert run_mode(compiled, CPU)["compile"] == "compiled"
    assert sum(p == q for p, q in zip(a["predict"], b["predict"], strict=True)) >= 9


# ---------------------------------------------------------------------------- spec, CLI, shards
def test_cert_id_names_non_default_run_settings_only():
    default = CertifySpec()
    assert default.cert_id == "sigma-train_n0-100_n-100000_alpha-0.001_skip-20_max-500"
    fast = CertifySpec(precision="bf16", channels_last=True, compile=True)
    assert fast.cert_id == default.cert_id + "_prec-bf16_cl_compiled"
    ddrs = CertifySpec(channels_last=True, ddrs=DDRSSettings())
    assert ddrs.cert_id.rsplit("_ddrs", 1)[0] == default.cert_id + "_cl"
    assert [run_settings(s.cert_id) for s in (default, fast, ddrs)] == [
        "fp32",
        "bf16, channels_last, compiled",
        "fp32, channels_last",
    ]
    assert CertifySpec(precision="fp64").problems() == [
        "unknown precision 'fp64' (valid: fp32, bf16, fp16)"
    ]


def test_certify_flags_are_validated_like_the_space(tmp_path):
    result = CliRunner().invoke(
        app, ["certify", "digits", "--precision", "fp64", "--storage", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "error: unknown --precision 'fp64' (valid: fp32, bf16, fp16)" in result.stderr
    for flags, said in [
        (["--n0", "0"], "error: --n0 must be an integer >= 1 (got 0)"),
        (["--final-skip", "0"], "error: --final-skip must be an integer >= 1 (got 0)"),
    ]:  # each named by the flag typed, before anything is written
        result = CliRunner().invoke(app, ["certify", "digits", *flags, "--storage", str(tmp_path)])
        assert result.exit_code == 2 and said in result.stderr, result.stderr
    help_text = CliRunner().invoke(app, ["certify", "--help"]).output
    for flag in ("--precision", "--channels-last", "--no-compile"):
        assert flag in help_text


def test_shards_record_how_the_base_classifier_ran(trained):
    exp, cfg = trained
    for spec in (
        CertifySpec(n0=10, n=40, skip=90, batch_size=40, shard_size=5),
        CertifySpec(n0=10, n=40, skip=90, batch_size=40, shard_size=5, channels_last=True),
    ):
        shard = shards.plan(cfg, "certify", spec, 450)[0]
        assert shards.run_shard(exp, CERTIFY, shard, spec, 1) == 5
        path = exp.shard_path(cfg.trial_id, spec.cert_id, 0, shard.count)
        meta = pq.read_schema(path).metadata
        got = {
            k: meta[f"sweeper.{k}".encode()].decode()
            for k in ("precision", "channels_last", "compile")
        }
        assert got == {
            "precision": "fp32",
            "channels_last": json.dumps(spec.channels_last),
            "compile": "eager",
        }
    assert spec.cert_id.endswith("_cl")


# ---------------------------------------------------------------------------- training
def test_fp16_amp_on_a_cpu_trains_in_fp32_as_before(caplog):
    cfg = TrialConfig(
        dataset="digits",
        method="gaussian",
        epochs=1,
        train_subset=128,
        eval_subset=32,
        batch_size=64,
    )
    fp16 = fit(cfg.replace(amp="fp16"), device=CPU)
    off = fit(cfg, device=CPU)
    assert fp16.precision == off.precision == "fp32"
    assert "amp fp16 needs CUDA: training in fp32 on cpu" in caplog.text
    for name, tensor in off.model.state_dict().items():
        assert torch.equal(tensor, fp16.model.state_dict()[name]), name


class ConvBackwardMasks(TorchDispatchMode):
    """Records which gradients each convolution backward computes: (input, weight, bias)."""

    def __init__(self):
        super().__init__()
        self.masks: list[tuple[bool, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution_backward.default:
            self.masks.append(tuple(args[-1]))
        return func(*args, **(kwargs or {}))


def test_smoothadv_attack_computes_input_gradients_only():
    """Measured at the kernels: every convolution backward of the attack computes the input
    gradient and no weight gradient; the training step's backward computes weight ones."""
    model = digits_model().train()
    x, y = torch.rand(4, 1, 8, 8), torch.randint(0, 10, (4,))
    noise = torch.randn(4, 2, 1, 8, 8) * 0.25
    with ConvBackwardMasks() as attack:
        attacks.pgd(model, x, y, noise, 0.5, 2)
    assert attack.masks and all(m[0] and not m[1] for m in attack.masks), attack.masks
    assert all(p.grad is None for p in model.parameters()) and model.training
    with ConvBackwardMasks() as step:
        nn.functional.cross_entropy(model(x), y).backward()
    assert step.masks and all(m[1] for m in step.masks)


def test_fp16_certification_without_a_gpu_is_bad_input(tmp_path):
    from sweeper.plan.grid import expand
    from sweeper.plan.spaces import load_space, parse_spec
    from sweeper.results.sweep_file import write_sweep
    from trainables.kernel.trial_status import write_status

    raw = {
        "fixed": {"dataset": "digits", "method": "gaussian"},
        "grids": [{"name": "g"}],
        "resources": {"cpu": 1, "gpu": 0},
        "certify": {"precision": "fp16"},
    }
    message = (
        "certify.precision fp16 needs CUDA, but the certification tasks get no GPU "
        "(resources.gpu 0 or --cpu-only): use precision fp32 (or bf16 on a CPU with bf16 "
        "instructions)"
    )
    assert parse_spec("x", raw) == (None, [message])
    assert parse_spec("x", {**raw, "resources": {"cpu": 1, "gpu": 1}})[1] == []
    exp = Experiment(str(tmp_path), "digits")
    trials = expand(load_space("digits"))
    write_sweep(exp, {"space": {}, "trials": [t.to_dict() for t in trials]})
    write_status(exp.trial_dir(trials[0].trial_id), trials[0], "finished", trials[0].epochs, {})
    result = CliRunner().invoke(
        app, ["certify", "digits", "--precision", "fp16", "--storage", str(tmp_path)]
    )
    assert result.exit_code == 2 and result.stderr.strip().splitlines()[-1] == f"error: {message}"
