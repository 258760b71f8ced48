"""Two-stage sweeps: a fine-tuning grid over the trials of a pre-training grid."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch
from ray.tune.search import Searcher
from typer.testing import CliRunner

from sweeper.cli import app
from sweeper.plan.grid import expand
from sweeper.plan.spaces import SpecError, load_space
from sweeper.plan.spec import Resources
from sweeper.results.certify_rows import load_results
from sweeper.results.storage import Experiment
from sweeper.run.launch import StageSearcher, run_sweep
from sweeper.run.launch_options import LaunchOptions
from sweeper.run.tune_names import TuneTrials
from trainables.datasets import DataError, load_dataset
from trainables.kernel.trial_hooks import FAULT_ENV
from trainables.kernel.trial_status import read_status
from trainables.models import build_model, transfer_weights

SPACE = """
fixed: {dataset: digits, batch_size: 64, train_subset: 128, eval_subset: 60, lr: 0.05}
grids:
  - name: pretrain
    fixed: {method: gaussian, epochs: 2}
    axes: {sigma: [0.25, 0.5]}
  - name: finetune
    parent: pretrain
    inherit: [sigma]
    fixed: {method: smoothadv, attack: pgd, epsilon: 0.25, warmup_epochs: 0, epochs: 1, lr: 0.001, lr_step_size: 1000}
    axes: {steps: [1, 2]}
resources: {cpu: 1, gpu: 0}
certify: {n0: 8, n: 16, alpha: 0.01, skip: 90, batch_size: 64, shard_size: 5}
"""


def space_file(tmp_path, text=SPACE):
    path = tmp_path / "stages.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_expansion_crosses_each_parent_with_the_stage_axes(tmp_path):
    trials = expand(load_space(str(space_file(tmp_path))))
    parents, children = trials[:2], trials[2:]
    assert [t.method for t in parents] == ["gaussian"] * 2 and all(
        t.init_from is None for t in parents
    )
    assert len(children) == 4
    for parent, pair in zip(parents, (children[:2], children[2:]), strict=True):
        assert [c.init_from for c in pair] == [parent.trial_id] * 2
        assert [c.sigma for c in pair] == [parent.sigma] * 2  # inherited
        assert [c.steps for c in pair] == [1, 2]
    assert children[0].lr == 0.001 and children[0].epochs == 1


def test_stage_declarations_are_validated(tmp_path):
    bad = SPACE.replace("parent: pretrain", "parent: later").replace(
        "inherit: [sigma]", "inherit: [nope]"
    )
    with pytest.raises(SpecError) as err:
        load_space(str(space_file(tmp_path, bad)))
    text = str(err.value)
    assert "parent 'later' must name an earlier grid (pretrain)" in text
    assert "inherit must be a list of hyperparameters" in text


def test_searcher_releases_children_after_their_parent():
    trials = expand(load_space_text(SPACE))
    searcher = StageSearcher(trials, set(), TuneTrials({"k": 1}))
    first, second = searcher.suggest("t1"), searcher.suggest("t2")
    assert [first["trial"]["method"], second["trial"]["method"]] == ["gaussian"] * 2
    assert first["k"] == 1
    assert searcher.suggest("t3") is None  # children wait
    searcher.on_trial_complete("t1")
    child = searcher.suggest("t3")
    assert child["trial"]["init_from"] == trials[0].trial_id
    searcher.on_trial_complete("t2", error=True)  # the second parent fails for good
    assert searcher.suggest("t4")["trial"]["init_from"] == trials[0].trial_id
    searcher.on_trial_complete("t3")
    searcher.on_trial_complete("t4")
    assert searcher.suggest("t5") == Searcher.FINISHED
    assert searcher.blocked() == {t.trial_id: trials[1].trial_id for t in trials[4:]}


def load_space_text(text):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return load_space(str(space_file(Path(d), text)))


def test_transfer_keeps_normalization_and_a_fresh_logit_layer():
    torch.manual_seed(0)
    parent = build_model("digits_cnn", 7, (0.1,), (0.2,))
    torch.manual_seed(1)
    child = build_model("digits_cnn", 10, (0.3,), (0.4,))
    before = {k: v.clone() for k, v in child.state_dict().items()}
    kept = transfer_weights(child, parent.state_dict())
    assert set(kept) == {"0.means", "0.sds", "1.classifier.3.weight", "1.classifier.3.bias"}
    for k, v in child.state_dict().items():
        expected = before[k] if k in kept else parent.state_dict()[k]
        assert torch.equal(v, expected), k
    with pytest.raises(ValueError, match="do not fit this architecture"):
        transfer_weights(child, build_model("lenet", 10, (0.1,), (0.2,)).state_dict())


def test_imagenet32_npz_batches(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(1, 11):
        np.savez(
            tmp_path / f"train_data_batch_{i}.npz",
            data=rng.integers(0, 256, (3, 3072), dtype=np.uint8),
            labels=np.array([1, 500, 1000]),
        )
    val = rng.integers(0, 256, (2, 3072), dtype=np.uint8)
    np.savez(tmp_path / "val_data.npz", data=val, labels=np.array([7, 8]))
    train = load_dataset("imagenet32", "train", str(tmp_path))
    test = load_dataset("imagenet32", "test", str(tmp_path))
    assert len(train) == 30 and [train[i][1] for i in range(3)] == [0, 499, 999]
    x, y, idx = test[1]
    assert x.shape == (3, 32, 32) and y == 7 and idx == 1
    assert torch.allclose(x[0, 0, :3], torch.tensor(val[1, :3] / 255.0, dtype=torch.float32))
    (tmp_path / "val_data.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="cannot read ImageNet32 file"):
        load_dataset("imagenet32", "test", str(tmp_path))


@pytest.mark.e2e
def test_fine_tune_trials_start_after_their_parent_and_name_it(ray_session, tmp_path):
    spec = load_space(str(space_file(tmp_path)))
    trials = expand(spec)
    events = []
    exp = Experiment(str(tmp_path / "store"), "stages")
    outcome = run_sweep(
        exp,
        trials,
        [],
        spec.certify,
        Resources(cpu=1),
        LaunchOptions(),
        lambda e: events.append((e.kind, e.trial_id)),
    )
    assert not outcome.failed and not outcome.blocked and not outcome.interrupted
    order = [tid for kind, tid in events if kind in ("trial_started", "trial_finished")]
    for child in trials[2:]:
        finished_parent = order.index(child.init_from, order.index(child.init_from) + 1)
        assert finished_parent < order.index(child.trial_id)
    frame = load_results(exp).frame
    children = frame[frame["init_from"].notna()]
    assert set(children["trial_id"]) == {t.trial_id for t in trials[2:]}
    assert set(children["init_from"]) == {t.trial_id for t in trials[:2]}


@pytest.mark.e2e
def test_a_failed_parent_blocks_its_children(ray_session, tmp_path, monkeypatch):
    trials = expand(load_space(str(space_file(tmp_path))))
    monkeypatch.setenv(FAULT_ENV, f"{trials[1].trial_id}:1")
    args = [
        "run",
        "grid",
        str(space_file(tmp_path)),
        "--storage",
        str(tmp_path / "s"),
        "--max-failures",
        "0",
    ]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert result.output.count("blocked") >= 2 and trials[1].trial_id in result.output
    exp = Experiment(str(tmp_path / "s"), "stages")
    for child in trials[4:]:
        assert read_status(exp.trial_dir(child.trial_id)) is None  # never started
    for child in trials[2:4]:
        assert read_status(exp.trial_dir(child.trial_id))["state"] == "finished"
