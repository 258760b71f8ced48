"""Data-parallel trials: 2 CPU processes on the gloo backend stand in for 2 GPUs."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from sweeper.plan.spec import CertifySpec, Resources
from sweeper.results.storage import Experiment
from sweeper.run.launch import run_sweep
from sweeper.run.launch_options import LaunchOptions
from trainables import checkpoint
from trainables.distributed import TIMEOUT_ENV, free_port
from trainables.distributed_fit import fit_data_parallel
from trainables.kernel.config import TrialConfig
from trainables.kernel.errors import ConfigError
from trainables.kernel.trial_status import read_status
from trainables.train import _ready
from trainables.train_state import build_state


@pytest.fixture(autouse=True)
def _fail_fast(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "120")  # a broken rank fails the test instead of hanging


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


def test_data_parallel_config():
    assert TrialConfig(**CFG, data_parallel=1).trial_id == TrialConfig(**CFG).trial_id
    assert TrialConfig(**CFG, data_parallel=2).trial_id != TrialConfig(**CFG).trial_id
    with pytest.raises(
        ConfigError, match=r"batch_size \(64\) must be a multiple of data_parallel \(3\)"
    ):
        TrialConfig(**CFG, data_parallel=3)
    with pytest.raises(ConfigError, match="data_parallel must be >= 1"):
        TrialConfig(**CFG, data_parallel=0)


@pytest.fixture
def one_process_group():
    """A gloo group of this process alone: enough for DistributedDataParallel to wrap a model,
    so one rank's view of data-parallel training is testable in process."""
    address = f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group("gloo", init_method=address, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_each_rank_trains_on_its_own_half_of_every_epoch(one_process_group):
    """`fit`'s set-up for rank r of k: the model wrapped in DistributedDataParallel, and a
    loader over every k-th input of the epoch's order from r, batch_size / k per step."""
    cfg = TrialConfig(**CFG, data_parallel=2)
    seen = []
    for rank in (0, 1):
        state = build_state(cfg, torch.device("cpu"))
        train_loader, _ = _ready(state, rank, 2)
        assert isinstance(state.model, DistributedDataParallel)
        assert (state.rank, state.world_size) == (rank, 2)
        batches = [idx.tolist() for _, _, idx in train_loader]
        assert {len(b) for b in batches[:-1]} == {32}  # batch_size 64 / 2 ranks
        seen.append(sorted(i for b in batches for i in b))
    assert len(seen[0]) == len(seen[1]) == 256  # 512 training inputs, half each
    assert not set(seen[0]) & set(seen[1])


def test_two_gloo_processes_train_in_sync(tmp_path):
    cfg = TrialConfig(**CFG, data_parallel=2)
    reports = []
    path = str(tmp_path / "checkpoint.pt")
    state = fit_data_parallel(cfg, 2, path, lambda m, s: reports.append(m["epoch"]))
    assert reports == [1, 2, 3]  # rank 0 only reports
    payload = checkpoint.load(path)
    assert payload["epoch"] == 3 and not any(k.startswith("module.") for k in payload["model"])
    assert payload["history"][-1]["test_noisy_acc"] > 0.5  # 10 classes
    for name, tensor in state.model.module.state_dict().items():
        assert torch.equal(tensor, payload["model"][name])
    resumed = fit_data_parallel(cfg.replace(epochs=4), 2, path)  # resumes at epoch 3 on both ranks
    assert resumed.epoch == 4 and len(resumed.history) == 4


@pytest.mark.e2e
def test_a_data_parallel_trial_on_ray(ray_session, tmp_path):
    cfg = TrialConfig(**CFG, data_parallel=2)
    exp = Experiment(str(tmp_path / "store"), "ddp")
    certify = CertifySpec(n0=8, n=16, alpha=0.01, skip=90, batch_size=64, shard_size=5)
    outcome = run_sweep(exp, [cfg], [], certify, Resources(cpu=2), LaunchOptions(), lambda e: None)
    assert not outcome.failed and outcome.completed == [cfg.trial_id], outcome
    assert read_status(exp.trial_dir(cfg.trial_id))["epoch"] == 3


def test_a_rank_shuffles_its_share_anew_each_epoch_and_checks_the_ranks_agree(
    one_process_group, monkeypatch
):
    """`fit` as rank 0 of 2: epoch e's order is DistributedSampler's (seed, epoch e) share of
    rank 0, and the ranks' weights are compared once, after the last epoch."""
    from trainables import distributed
    from trainables.pipeline import DeviceLoader
    from trainables.train import fit

    cfg = TrialConfig(**{**CFG, "epochs": 2}, data_parallel=2)
    orders, synced = [], []
    set_epoch = distributed.set_epoch

    def recording(loader, epoch):
        set_epoch(loader, epoch)
        assert isinstance(loader, DeviceLoader)  # digits is held on the device
        orders.append(loader.order().tolist())

    monkeypatch.setattr(distributed, "set_epoch", recording)
    monkeypatch.setattr(distributed, "assert_in_sync", synced.append)
    state = fit(cfg, device=torch.device("cpu"), rank=0, world_size=2)
    sampler = DistributedSampler(range(512), 2, 0, shuffle=True, seed=cfg.seed)
    expected = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert orders == expected and orders[0] != orders[1]
    assert synced == [state.model]
