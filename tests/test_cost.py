"""The dry run's cost estimate: exact pricing on known cases, the work each training method
really does, the dry run through the CLI without data, `sweeper bench` and its figures file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan import throughput
from sweeper.plan.cost import (
    TEST_SIZE,
    TRAIN_SIZE,
    Devices,
    SweepCost,
    TrialCost,
    attack_epochs,
    certified_points,
    certify_work,
    groups,
    price_sweep,
    step_passes,
    training_work,
    wall_clock,
)
from sweeper.plan.grid import expand
from sweeper.plan.spaces import load_space
from sweeper.plan.spec import CertifySpec, Resources
from sweeper.results.storage import index_chunks
from trainables.kernel.catalog import DATASETS
from trainables.kernel.config import TrialConfig
from trainables.kernel.ddrs_settings import DDRSSettings

runner = CliRunner()
FIG = throughput.Figure(forward=1000.0, train=100.0, source="test figures")

TWO_TRIALS = """
description: two known trials
fixed: {dataset: digits, arch: digits_cnn, epochs: 2, train_subset: 100, eval_subset: 50}
grids:
  - name: gauss
    fixed: {method: gaussian, m_train: 1, sigma: 0.25}
  - name: adv
    fixed: {method: smoothadv, attack: pgd, steps: 2, m_train: 2, epsilon: 0.5,
            warmup_epochs: 3, warmup_schedule: paper, sigma: 0.25}
resources: {cpu: 1, gpu: 0.5}
certify: {n0: 10, n: 90, skip: 10, max_points: null, shard_size: 45}
"""


@pytest.fixture
def figures_file(tmp_path, monkeypatch):
    """Point the measured-figures file at a temporary path (no user cache involved)."""
    path = tmp_path / "cache" / "throughput.json"
    monkeypatch.setenv("SWEEPER_THROUGHPUT", str(path))
    return path


@pytest.fixture
def two_trials(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(TWO_TRIALS)
    return path


# ------------------------------------------------------------------------------ arithmetic
def test_two_trial_space_costs_exactly_what_it_does(two_trials):
    spec = load_space(str(two_trials))
    gauss, adv = expand(spec)
    sweep = price_sweep([gauss, adv], spec.certify, {"digits_cnn": FIG})
    # Gaussian: 2 epochs x 100 inputs x 1 pass = 200 passes at 100/s; evaluation 2 epochs x
    # 50 inputs x 2 (clean, noisy) = 200 forwards at 1000/s: 2.2 s.
    # SmoothAdv m=2, T=2: epoch 0 has ε = 0 (the paper's warm-up), so 2 passes; epoch 1: 2 x 3 = 6;
    # 100 inputs: 800 passes = 8 s, + 0.2 s evaluation.
    # CERTIFY: every 10th of 450 test digits = 45 points x (10 + 90) = 4,500 forwards = 4.5 s.
    assert [c.train_hours * 3600 for c in sweep.costs] == pytest.approx([2.2, 8.2], rel=1e-12)
    assert [c.certify_hours * 3600 for c in sweep.costs] == pytest.approx([4.5, 4.5], rel=1e-12)
    assert [c.certify_forwards for c in sweep.costs] == [4500, 4500]
    assert sweep.hours * 3600 == pytest.approx(19.4, rel=1e-12)
    assert sweep.spread()[0] * 3600 == pytest.approx(6.7, rel=1e-12)
    labels = [(g.label, g.trials, g.passes) for g in groups(sweep.costs)]
    assert labels == [
        ("digits digits_cnn gaussian m=1 2 ep 100 inputs", 1, 1),
        ("digits digits_cnn smoothadv T=2 m=2 2 ep 100 inputs", 1, 6),
    ]
    # on one GPU at 0.5 GPU per trial both run at once and share it: the sweep's 19.4 s
    wall = wall_clock(sweep, Resources(cpu=1, gpu=0.5), "gpu", Devices(1, None, "one GPU"))
    assert (wall.at_once, wall.devices) == (2, 1)
    assert wall.hours * 3600 == pytest.approx(19.4, rel=1e-12)


def test_wall_clock_packing_cpus_and_the_longest_trial():
    long, short = (TrialCost(TrialConfig(), h, 0.0, 0.0) for h in (30.0, 10.0))
    sweep = SweepCost([long] + [short] * 9)  # 120 GPU-h
    packed = Resources(cpu=2, gpu=0.25)
    # 8 GPUs at 4 per GPU: 32 slots, but only 10 trials: 3 GPUs occupied
    wall = wall_clock(sweep, packed, "gpu", Devices(8, None, ""))
    assert (wall.at_once, wall.devices, wall.hours) == (10, 3, 40.0)
    # 8 CPUs at 2 per trial: 4 trials at once on one GPU; the longest trial (30 h) bounds it
    wall = wall_clock(sweep, packed, "gpu", Devices(8, 8, ""))
    assert (wall.at_once, wall.devices, wall.hours) == (4, 1, 120.0)
    wall = wall_clock(sweep, Resources(cpu=16, gpu=4), "gpu", Devices(8, None, ""))
    assert (wall.at_once, wall.devices, wall.hours) == (2, 8, 15.0)
    assert wall_clock(sweep, packed, "gpu", Devices(0, 64, "")) is None
    wall = wall_clock(sweep, Resources(cpu=1, gpu=0), "cpu", Devices(0, 4, ""))
    assert (wall.at_once, wall.devices, wall.hours) == (4, 4, 30.0)
    # a fine-tune trial waits for its parent: 30 + 25 h on any number of GPUs
    child = TrialCost(TrialConfig(init_from=long.trial.trial_id, epochs=30), 25.0, 0.0, 0.0)
    wall = wall_clock(SweepCost([long, child]), packed, "gpu", Devices(64, None, ""))
    assert wall.hours == 55.0


def test_certification_points_and_ddrs_work():
    for dataset in DATASETS:
        for skip, most in ((1, None), (20, 500), (7, 13), (100, 500)):
            spec = CertifySpec(skip=skip, max_points=most)
            chunks = index_chunks(TEST_SIZE[dataset], skip, most, spec.shard_size)
            assert certified_points(dataset, spec) == sum(map(len, chunks))
    cfg = TrialConfig(dataset="cifar10")
    spec = CertifySpec(n0=100, n=100_000, skip=20, max_points=500)
    assert certify_work(cfg, spec) == (0.0, 500 * 100_100)  # the paper's 5·10^7 per model
    ddrs = CertifySpec(n0=100, n=1000, skip=20, max_points=500, ddrs=DDRSSettings(100, 1e-4, 2))
    # fixed σ and data-dependent σ: twice n0 + n forwards, plus K x samples ascent passes
    assert certify_work(cfg, ddrs) == (500 * 100 * 2, 2 * 500 * 1100)


def test_split_sizes_are_the_loaders():
    from trainables.datasets import load_dataset

    assert TRAIN_SIZE["digits"] == len(load_dataset("digits", "train"))
    assert TEST_SIZE["digits"] == len(load_dataset("digits", "test"))


def _macs(model, shape) -> int:
    """Multiply-accumulates of one forward pass through the conv and linear layers."""
    from torch import nn

    counts = []

    def hook(mod, args, out):
        per_output = (
            mod.in_features
            if isinstance(mod, nn.Linear)
            else (mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1])
        )
        counts.append(out.numel() * per_output)

    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model.eval()(torch.zeros(1, *shape))
    return sum(counts)


def test_the_scaled_figures_use_the_models_multiply_accumulates():
    from trainables.datasets import INFO
    from trainables.models import build_model

    data = {
        "cifar_resnet20": "cifar10",
        "cifar_resnet56": "cifar10",
        "cifar_resnet110": "cifar10",
        "lenet": "mnist",
        "digits_cnn": "digits",
    }
    assert set(data) == set(throughput.MACS)
    for arch, dataset in data.items():
        info = INFO[dataset]
        model = build_model(arch, info.num_classes, info.mean, info.std)
        assert _macs(model, info.shape) == throughput.MACS[arch], arch


def test_a_plain_macer_trial_is_priced_with_main_pys_protocol():
    """Issue 40 §5: a trial naming only MACER trains main.py's 440 epochs of 16 noisy copies per
    input (batch 64 changes no pass count), and the dry run prices exactly that, not the 150
    epochs of one copy it was priced at before."""
    from sweeper.plan.cost import group_label

    cfg = TrialConfig(method="macer")
    passes, forwards = training_work(cfg)
    assert passes == 440 * 16 * TRAIN_SIZE["cifar10"]
    assert forwards == 440 * 2 * TEST_SIZE["cifar10"]
    assert group_label(cfg) == "cifar10 cifar_resnet110 macer m=16 440 ep"
    cost = price_sweep([cfg], CertifySpec(), {"cifar_resnet110": FIG}).costs[0]
    assert cost.train_hours * 3600 == pytest.approx(passes / FIG.train + forwards / FIG.forward)
    former = cfg.replace(epochs=150, m_train=1, batch_size=256, lr=0.1, lr_step_size=50)
    assert training_work(former)[0] == 150 * 1 * TRAIN_SIZE["cifar10"]


def test_ddrs_and_self_training_add_their_passes():
    base = TrialConfig(dataset="digits", method="gaussian", m_train=1, epochs=10)
    passes, _ = training_work(base)
    assert passes == 10 * TRAIN_SIZE["digits"]
    ddrs = base.replace(ddrs_start_epoch=4, ddrs_iterations=10, ddrs_samples=2)
    assert training_work(ddrs)[0] == passes + 6 * 10 * 2 * TRAIN_SIZE["digits"]
    assert training_work(ddrs.replace(ddrs_iterations=0))[0] == passes  # no σ step at K = 0
    pseudo = base.replace(
        pseudo_data="/x.npz", pseudo_fingerprint="0" * 16, pseudo_eta=0.5, pseudo_ratio=2
    )
    assert training_work(pseudo)[0] == 3 * passes


# ------------------------------------------------------------------------------ the methods
METHOD_CASES = [
    {"method": "gaussian", "m_train": 2},
    {"method": "smoothadv", "attack": "pgd", "steps": 3, "m_train": 2},
    {"method": "smoothadv", "attack": "ddn", "steps": 2, "m_train": 4},
    {"method": "vanilla_pgd", "steps": 3},
    {"method": "pgd_noise", "steps": 3, "m_train": 2},
    {"method": "smoothmix", "steps": 2, "m_train": 2},
    {"method": "smoothmix", "steps": 2, "m_train": 2, "mix_step": 1},
    {"method": "macer", "m_train": 4},
    {"method": "consistency", "m_train": 2},
    {"method": "stability"},
]


def test_every_method_is_priced_and_named_by_its_own_row():
    """A method of the table is never priced or labelled by a fallback: each row says its
    passes and its label, and the cases above run every one of them."""
    from sweeper.report.tables import method_label
    from trainables.methods import REGISTRY

    assert {f["method"] for f in METHOD_CASES} == set(REGISTRY)
    for name, row in REGISTRY.items():
        assert method_label(name) == row.label and row.label != name
        assert row.passes(4, 3) >= 1


@pytest.mark.parametrize("fields", METHOD_CASES, ids=lambda f: "-".join(map(str, f.values())))
def test_step_passes_count_what_the_method_runs(fields):
    """Every sample through the model in one training epoch (attack steps included), per
    input, is what the pricing charges: after the warm-up, and in the first epoch (ε = 0
    under the paper's warm-up, ε/W under the reference's)."""
    from trainables.methods.base import epoch_epsilon

    for schedule in ("reference", "paper"):
        cfg = TrialConfig(
            dataset="digits",
            sigma=0.25,
            epsilon=0.5,
            batch_size=8,
            lr=0.01,
            warmup_epochs=3,
            **fields,
            warmup_schedule=schedule,
        )
        _count_passes(cfg, epoch_epsilon(cfg, 0) > 0)


def _count_passes(cfg: TrialConfig, first_attacked: bool) -> None:
    from trainables.train import train_epoch
    from trainables.train_state import build_state

    state = build_state(cfg, torch.device("cpu"))
    seen = []
    state.model.register_forward_hook(lambda mod, args, out: seen.append(len(args[0])))
    x = torch.rand(8, 1, 8, 8)
    loader = [(x, torch.arange(8) % 10, torch.arange(8))]
    for epoch, attacked in ((5, True), (0, first_attacked)):
        seen.clear()
        state.epoch = epoch
        train_epoch(state, loader)
        assert sum(seen) == 8 * step_passes(cfg, attacked), (epoch, seen)


def test_attack_epochs_follow_the_warm_up():
    from trainables.methods.base import epoch_epsilon

    for method in ("smoothadv", "vanilla_pgd", "gaussian", "smoothmix"):
        for warmup, eps in ((10, 1.0), (1, 1.0), (0, 0.5), (3, 0.0)):
            cfg = TrialConfig(
                dataset="digits",
                method=method,
                epochs=12,
                warmup_epochs=warmup,
                epsilon=eps,
                steps=2,
            )
            with_attack = sum(epoch_epsilon(cfg, e) > 0 for e in range(cfg.epochs))
            expected = with_attack if method in ("smoothadv", "vanilla_pgd") else 0
            assert attack_epochs(cfg) == expected, (method, warmup, eps)


# ------------------------------------------------------------------------------ the CLI
def test_cifar10_dry_run_needs_no_data_and_prices_the_sweep(tmp_path, figures_file):
    result = runner.invoke(
        app, ["run", "grid", "cifar10", "--dry-run", "--storage", str(tmp_path), "--gpus", "8"]
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "644 of 644 in the sweep" in out
    assert "a real run needs cifar10 (--data-dir DIR, or --download)" in out
    assert "cifar_resnet110 on GTX 1080 Ti (shipped table)" in out
    assert "Hadisalman/smoothing-adversarial" in out
    assert "(5.0·10^7 forwards per model)" in out
    # the shipped figures: 6,807 forwards/s, 2,296 training inputs/s
    sweep = price_sweep(
        expand(load_space("cifar10")),
        load_space("cifar10").certify,
        {"cifar_resnet110": throughput.GTX_1080_TI.figures["cifar_resnet110"]},
    )
    assert f"total ≈ {sweep.hours:,.0f} GPU-h for 644 trials" in out
    assert 10_000 < sweep.hours < 30_000  # months on 8 GPUs, not a day
    wall = wall_clock(sweep, Resources(cpu=2, gpu=0.25), "gpu", Devices(8, None, ""))
    assert wall.hours == pytest.approx(sweep.hours / 8)
    assert (
        f"wall-clock ≈ {wall.hours / 24:,.1f} days on 8 GPUs (--gpus), at 4 trials per GPU (32 at once on 8 GPUs)"
        in out
    )
    assert not (tmp_path / "cifar10").exists()
    assert not figures_file.exists()


def test_gpus_without_dry_run_is_bad_input(tmp_path):
    result = runner.invoke(
        app, ["run", "grid", "digits", "--gpus", "2", "--storage", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "error: --gpus sizes the wall-clock estimate of --dry-run" in result.output
    assert list(tmp_path.iterdir()) == []


def test_dry_run_imports_neither_torch_nor_ray(tmp_path):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from sweeper.cli import app\n"
        f"r = CliRunner().invoke(app, ['run', 'grid', 'cifar10', '--dry-run', '--storage', {str(tmp_path)!r}, '--gpus', '4'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'GPU-h' in r.stdout\n"
        "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))\n"
    )
    env = {**os.environ, "SWEEPER_THROUGHPUT": str(tmp_path / "none.json")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def _dry_run_space(tmp_path, kind: str) -> str:
    """digits (CPU trials), or the same grid asking for a GPU when the bench measured one."""
    if kind == "cpu":
        return "digits"
    path = tmp_path / "digits-gpu.yaml"
    path.write_text(TWO_TRIALS)
    return str(path)


def test_bench_smoke_writes_figures_the_next_dry_run_uses(tmp_path, figures_file):
    result = runner.invoke(app, ["bench", "--smoke", "--arch", "digits_cnn"])
    assert result.exit_code == 0, result.output
    raw = json.loads(figures_file.read_text())
    [(kind, device)] = throughput.parse_measured(raw, str(figures_file)).items()
    assert kind == ("gpu" if torch.cuda.is_available() else "cpu")
    assert set(device.figures) == {"digits_cnn"} and device.smoke
    fig = device.figures["digits_cnn"]
    assert fig.forward > 0 and fig.train > 0
    assert raw["devices"][kind]["archs"]["digits_cnn"]["train_batch"] == 4
    space = _dry_run_space(tmp_path, kind)
    result = runner.invoke(app, ["run", "grid", space, "--dry-run", "--storage", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    flat = "".join(out.split())  # a long path is folded at any character to fit the width
    assert "".join(f"digits_cnn on {device.name} ({figures_file} --smoke".split()) in flat
    assert f"forward {fig.forward:,.0f}/s, training step {fig.train:,.0f}/s" in out
    # another architecture measured later joins it (a full run, not --smoke, replaces smoke)
    result = runner.invoke(app, ["bench", "--smoke", "--arch", "lenet,digits_cnn"])
    assert result.exit_code == 0, result.output
    devices = throughput.parse_measured(json.loads(figures_file.read_text()), "")
    assert set(devices[kind].figures) == {"lenet", "digits_cnn"}


def test_bench_rejects_an_unknown_architecture(figures_file):
    result = runner.invoke(app, ["bench", "--arch", "vgg16"])
    assert result.exit_code == 2
    assert "error: --arch: unknown architecture 'vgg16'" in result.output
    assert not figures_file.exists()


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps(
            {
                "version": 1,
                "devices": {
                    "cpu": {"name": "x", "archs": {"digits_cnn": {"forward": -1, "train": 5}}}
                },
            }
        ),
        json.dumps([1, 2]),
    ],
    ids=["not-json", "negative-rate", "not-a-mapping"],
)
def test_a_corrupt_figures_file_is_one_warning_and_not_trusted(tmp_path, figures_file, content):
    figures_file.parent.mkdir(parents=True)
    figures_file.write_text(content)
    result = runner.invoke(app, ["run", "grid", "digits", "--dry-run", "--storage", str(tmp_path)])
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and str(figures_file) in warnings[0], result.stderr
    assert "digits_cnn on" in result.stdout and "(shipped table)" in result.stdout
    assert figures_file.read_text() == content  # the dry run writes nothing
    # `sweeper bench` replaces it with a well-formed file
    assert runner.invoke(app, ["bench", "--smoke", "--arch", "digits_cnn"]).exit_code == 0
    throughput.parse_measured(json.loads(figures_file.read_text()), "")


@pytest.mark.e2e
def test_dry_run_on_a_cluster_prices_its_gpus(ray_session, tmp_path, figures_file, two_trials):
    """--address: the wall-clock on the connected cluster's GPUs (the session's Ray: 1 GPU,
    2 CPUs), at the space's packing (0.5 GPU per trial: 2 at once)."""
    result = runner.invoke(
        app,
        [
            "run",
            "grid",
            str(two_trials),
            "--dry-run",
            "--address",
            "auto",
            "--storage",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "on the cluster at auto (1 GPUs, 2 CPUs now)" in out
    assert "at 2 trials per GPU (2 at once on 1 GPUs)" in out
