"""trainables.checkpoint without training: what a checkpoint holds, how it is read back (weights
only, onto a chosen device), and the one error a missing or unreadable file gives."""

from __future__ import annotations

import io
import re

import pytest
import torch

from trainables import checkpoint
from trainables.datasets import INFO
from trainables.kernel.config import TrialConfig
from trainables.models import build_model


class NotATensor:
    """A class torch.load(weights_only=True) must refuse to rebuild."""


def _model(cfg: TrialConfig) -> torch.nn.Module:
    info = INFO[cfg.dataset]
    torch.manual_seed(0)
    return build_model(cfg.arch, info.num_classes, info.mean, info.std)


def test_a_saved_payload_reads_back_as_written_plus_its_format_version(tmp_path):
    path = tmp_path / "trial" / "checkpoint.pt"
    payload = {"weights": torch.arange(6.0).view(2, 3), "epoch": 3, "history": [{"loss": 0.5}]}
    checkpoint.save(payload, path)
    loaded = checkpoint.load(path)
    assert set(loaded) == {"weights", "epoch", "history", "format_version"}
    assert torch.equal(loaded["weights"], payload["weights"])
    assert (loaded["epoch"], loaded["history"], loaded["format_version"]) == (3, [{"loss": 0.5}], 1)
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]  # no temp file left
    checkpoint.save({"epoch": 4}, path)  # a later epoch replaces the file
    assert checkpoint.load(path) == {"epoch": 4, "format_version": 1}


def test_load_maps_the_tensors_onto_the_given_device(tmp_path):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save({"weights": torch.ones(2)}, path)
    assert checkpoint.load(path)["weights"].device.type == "cpu"
    assert checkpoint.load(path, map_location="meta")["weights"].device.type == "meta"


def _error(text: str, path) -> str:
    """The CheckpointError message pattern: `text` and the file's name, exactly."""
    return f"^{text} {re.escape(str(path))}"


def test_missing_corrupt_and_pickled_object_files_are_one_checkpoint_error(tmp_path):
    missing = tmp_path / "missing.pt"
    with pytest.raises(
        checkpoint.CheckpointError, match=_error("checkpoint not found:", missing) + "$"
    ):
        checkpoint.load(missing)
    truncated = tmp_path / "truncated.pt"
    checkpoint.save({"weights": torch.ones(100)}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:200])
    with pytest.raises(
        checkpoint.CheckpointError, match=_error("cannot read checkpoint", truncated)
    ):
        checkpoint.load(truncated)
    foreign = tmp_path / "foreign.pt"
    buffer = io.BytesIO()
    torch.save({"model": NotATensor()}, buffer)  # a full pickle: code would run on load
    foreign.write_bytes(buffer.getvalue())
    with pytest.raises(checkpoint.CheckpointError, match=_error("cannot read checkpoint", foreign)):
        checkpoint.load(foreign)
    with pytest.raises(checkpoint.CheckpointError, match=_error("checkpoint not found:", missing)):
        checkpoint.load_model(missing)


def test_a_pickled_object_is_refused_even_when_the_environment_turns_torch_default_off(
    tmp_path, monkeypatch
):
    """torch.load's weights_only default can be switched off by TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD
    (it then unpickles anything: code runs); load passes weights_only=True, which that variable
    does not override."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    foreign = tmp_path / "foreign.pt"
    buffer = io.BytesIO()
    torch.save({"model": NotATensor()}, buffer)
    foreign.write_bytes(buffer.getvalue())
    with pytest.raises(checkpoint.CheckpointError, match=_error("cannot read checkpoint", foreign)):
        checkpoint.load(foreign)


def test_load_model_rebuilds_the_classifier_in_eval_mode_with_its_config(tmp_path):
    cfg = TrialConfig(dataset="digits", sigma=0.5)
    model = _model(cfg)
    path = tmp_path / "checkpoint.pt"
    checkpoint.save({"model": model.state_dict(), "config": cfg.to_dict()}, path)
    loaded, loaded_cfg = checkpoint.load_model(path)
    assert loaded_cfg == cfg and not loaded.training
    assert all(not m.training for m in loaded.modules())
    x = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}
