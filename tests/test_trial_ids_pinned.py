"""Trial ids and stored trials survive code changes (issue 13): the ids below, the resolved
configs in data/configs_before_issue13.json and the trial in data/trial_before_issue13/ were
all computed or written by the code before `TrialConfig` was split into parts. A trial id is
the hash of the resolved config; if one of these changes, every stored trial of that kind
would be trained again from scratch. Only update them on purpose."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from trainables.config import TrialConfig
from trainables.train import fit
from trainables.trial_status import read_status

DATA = Path(__file__).parent / "data"
CONFIGS = json.loads((DATA / "configs_before_issue13.json").read_text())
STORED_TRIAL = DATA / "trial_before_issue13" / "526987898f0e"

PINNED_IDS = {
    "gaussian": "094b487638fe",
    "smoothadv_pgd": "50b8f420dc35",
    "smoothadv_ddn": "40f58fcff0f3",
    "smoothmix": "99b0f36c283c",
    "macer": "6e29d6dc1442",
    "consistency": "75615e9e8937",
    "stability": "e577112ad713",
    "vanilla_pgd": "242a6d52a738",
    "pgd_noise": "9991ac416b08",
    "ddrs_macer": "8d3ec05a5951",
    "ddrs_gaussian": "1dd2021c240b",
    "data_parallel": "5527a58c9b6d",
    "amp_fp16": "d8e25e5226bf",
    "amp_bf16": "b9da92ea3894",
    "pseudo": "bde4da8840a4",
    "init_from": "fe3f0d005dde",
}


@pytest.mark.parametrize("name", sorted(PINNED_IDS))
def test_trial_ids_of_every_kind_of_config_are_unchanged(name: str):
    case = CONFIGS[name]
    cfg = TrialConfig(**case["given"])
    assert cfg.trial_id == case["trial_id"] == PINNED_IDS[name]
    assert list(cfg.to_dict().items()) == list(case["resolved"].items())  # values and order
    again = TrialConfig.from_dict(case["resolved"])
    assert again == cfg and again.trial_id == PINNED_IDS[name]


def test_a_trial_written_before_resumes_and_finishes_as_an_uninterrupted_run(tmp_path):
    status = read_status(str(STORED_TRIAL))
    cfg = TrialConfig.from_dict(status["config"])
    assert cfg.trial_id == status["trial_id"] == STORED_TRIAL.name
    assert (status["state"], status["epoch"], cfg.epochs) == ("running", 1, 2)
    ckpt = tmp_path / "checkpoint.pt"  # written with 1 torch thread, as conftest sets
    shutil.copy(STORED_TRIAL / "checkpoint.pt", ckpt)
    cpu = torch.device("cpu")
    resumed = fit(cfg, ckpt, device=cpu)
    straight = fit(cfg, tmp_path / "straight" / "checkpoint.pt", device=cpu)
    assert resumed.epoch == straight.epoch == 2
    assert resumed.history[0] == status["metrics"]  # epoch 1 came from the stored checkpoint
    state, again = resumed.model.state_dict(), straight.model.state_dict()
    assert all(torch.equal(state[k], again[k]) for k in again)
    for key in ("train_loss", "train_acc", "test_clean_acc", "test_noisy_acc"):
        assert resumed.history[1][key] == straight.history[1][key]
