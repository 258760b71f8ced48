"""Trial ids and stored trials survive code changes (issue 13): the ids below, the resolved
configs in data/configs_before_issue13.json and the trial in data/trial_before_issue13/ were
all computed or written by the code before `TrialConfig` was split into parts. A trial id is
the hash of the resolved config; if one of these changes, every stored trial of that kind
would be trained again from scratch. Only update them on purpose."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from trainables import checkpoint
from trainables.kernel.config import ADDED_FIELDS, TrialConfig
from trainables.kernel.trial_status import read_status
from trainables.train import fit

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


# Issue 26: these methods' defaults now follow their reference code (the LR drops, stability's
# cross-entropy, MACER's inputs without standardization; SmoothAdv's from-scratch CIFAR-10 and
# ImageNet models center their inputs without scaling them, §5), so the configs as given train
# otherwise and have these ids; with the fields added since at their former behaviour
# (`ADDED_FIELDS`) they keep the pinned ones. DDRS-trained MACER also takes the DDRS script's
# robustness term (`ddrs_macer_loss: ddrs`, §7), the DDRS code's protocol (standardized inputs,
# its StepLR: deviation 31) and, on CIFAR-10, its script's 64 σ samples (`ddrs_samples`, a
# changed default: FORMER_DEFAULTS gives back the former one); since issue 40 item 2 also the
# script's pairing of noise copies with σ_x (`ddrs_noise_pairing: reference`, deviation 29: its
# id was 15ad3d010a5c from issue 26 to issue 40). Since issue 40 item 5 a macer trial that
# leaves them unset takes main.py's batch 64 and weight decay 5e-4 (MACER's protocol, its row in
# REGISTRY; this config spells the other three numbers): the space's σ = 0.25 MACER trial. Its
# id was 17c8190d19cb from issue 26 to issue 40 §5; FORMER_DEFAULTS gives back the former
# numbers.
NEW_DEFAULT_IDS = {
    "smoothmix": "871a5ad37169",
    "macer": "2cfc030038d9",
    "consistency": "5b822480a628",
    "stability": "eaf4c75d34b4",
    "ddrs_macer": "61510c2cbf14",
    "smoothadv_pgd": "3a59062b057e",
    "smoothadv_ddn": "2fc993b5af6e",
    "data_parallel": "87701e0098f1",
    "amp_bf16": "908face65b32",
}

FORMER_DEFAULTS = {
    "ddrs_macer": {"ddrs_samples": 1},
    "macer": {"batch_size": 256, "weight_decay": 1e-4},
}


@pytest.mark.parametrize("name", sorted(PINNED_IDS))
def test_trial_ids_of_every_kind_of_config_are_unchanged(name: str):
    case = CONFIGS[name]
    given = case["given"]
    assert TrialConfig(**given).trial_id == NEW_DEFAULT_IDS.get(name, PINNED_IDS[name])
    former = {k: v for k, v in ADDED_FIELDS.items() if k not in given}
    cfg = TrialConfig(**given, **former, **FORMER_DEFAULTS.get(name, {}))
    assert cfg.trial_id == case["trial_id"] == PINNED_IDS[name]
    resolved, now = case["resolved"], cfg.to_dict()
    assert [(k, now[k]) for k in now if k in resolved] == list(resolved.items())  # and order
    added = {k: v for k, v in now.items() if k not in resolved}
    assert added.keys() == ADDED_FIELDS.keys()
    assert all(v in (None, ADDED_FIELDS[k]) for k, v in added.items())  # None: unused
    again = TrialConfig.from_dict(resolved)  # stored before the fields: read as trained
    assert again == cfg and again.trial_id == PINNED_IDS[name]


def test_a_trial_written_before_loads_and_resumes_to_the_end(tmp_path):
    """What a stored trial can promise on any machine: its id is its config's hash, its
    checkpoint loads (weights only) into the model the config builds, and training resumes at
    its next epoch and finishes. Its weights were computed on another CPU, so nothing trained
    from them is compared bit for bit (torch promises no equality across CPUs)."""
    status = read_status(str(STORED_TRIAL))
    cfg = TrialConfig.from_dict(status["config"])
    assert cfg.trial_id == status["trial_id"] == STORED_TRIAL.name
    assert (status["state"], status["epoch"], cfg.epochs) == ("running", 1, 2)
    ckpt = tmp_path / "checkpoint.pt"
    shutil.copy(STORED_TRIAL / "checkpoint.pt", ckpt)
    model, stored_cfg = checkpoint.load_model(ckpt)
    assert stored_cfg == cfg and checkpoint.load(ckpt)["epoch"] == 1
    resumed = fit(cfg, ckpt, device=torch.device("cpu"))
    assert resumed.epoch == 2 and len(resumed.history) == 2
    assert resumed.history[0] == status["metrics"]  # epoch 1 came from the stored checkpoint
    assert resumed.history[1]["epoch"] == 2 and math.isfinite(resumed.history[1]["train_loss"])
    before, after = model.state_dict(), resumed.model.state_dict()
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # epoch 2 trained them
    assert checkpoint.load(ckpt)["epoch"] == 2  # and wrote them back


def test_a_run_resumed_from_its_own_checkpoint_equals_an_uninterrupted_run(tmp_path):
    """The stored trial's config, trained here: stopped after epoch 1 and resumed from the
    checkpoint this run wrote, it ends with the weights and metrics of a run never stopped."""
    cfg = TrialConfig.from_dict(read_status(str(STORED_TRIAL))["config"])
    cpu = torch.device("cpu")
    ckpt = tmp_path / "stopped" / "checkpoint.pt"
    assert fit(cfg, ckpt, device=cpu, stop_after=1).epoch == 1
    trained: list[int] = []  # epochs the resumed call trained itself
    resumed = fit(cfg, ckpt, device=cpu, on_epoch=lambda m, _: trained.append(m["epoch"]))
    assert trained == [2]
    straight = fit(cfg, tmp_path / "straight" / "checkpoint.pt", device=cpu)
    assert resumed.epoch == straight.epoch == 2
    state, again = resumed.model.state_dict(), straight.model.state_dict()
    assert state.keys() == again.keys()
    assert all(torch.equal(state[k], again[k]) for k in again)
    for key in ("train_loss", "train_acc", "test_clean_acc", "test_noisy_acc"):
        assert [h[key] for h in resumed.history] == [h[key] for h in straight.history]
