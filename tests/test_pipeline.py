"""The on-device data pipeline: the DataLoader's batches and augmentation distribution, and
exact resume (also of checkpoints written by the DataLoader pipeline before it existed)."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.functional as TF
from scipy.stats import chi2_contingency, chisquare
from test_datasets import _write_cifar
from test_training import assert_nested_equal
from torch.utils.data import DataLoader, DistributedSampler, Subset

from trainables import checkpoint, pipeline
from trainables.datasets import _cifar_augment, load_dataset
from trainables.kernel.config import TrialConfig
from trainables.train import fit, make_loaders
from trainables.train_state import build_state

CPU = torch.device("cpu")
DRAWS = 162 * 100  # 100 expected per outcome: 9 x 9 crop offsets, flipped or not


def outcomes(image: torch.Tensor) -> dict[bytes, int]:
    """Every image RandomCrop(32, padding=4) + RandomHorizontalFlip can make of `image`,
    built with torchvision's own functional ops: {bytes of the result: outcome number}."""
    padded = TF.pad(image, [4])
    made = {}
    for i in range(9):
        for j in range(9):
            crop = TF.crop(padded, i, j, 32, 32)
            for flip in (False, True):
                made[(TF.hflip(crop) if flip else crop).numpy().tobytes()] = len(made)
    assert len(made) == 162, "the test image must make every outcome distinct"
    return made


def test_crop_flip_has_the_distribution_of_torchvisions_augmentation():
    image = (torch.arange(32 * 32, dtype=torch.float32).view(1, 32, 32) + 1) / 2048
    known = outcomes(image)
    torch.manual_seed(0)
    transform = _cifar_augment()
    before = [known[transform(image).numpy().tobytes()] for _ in range(DRAWS)]
    generator = torch.Generator().manual_seed(0)
    after = []
    for _ in range(DRAWS // 1620):
        batch = pipeline.crop_flip(image.expand(1620, 1, 32, 32), generator)
        after += [known[x.numpy().tobytes()] for x in batch]  # KeyError: not a valid outcome
    old, new = (torch.bincount(torch.tensor(v), minlength=162) for v in (before, after))
    assert chisquare(new.numpy()).pvalue > 1e-3  # uniform over the 162 outcomes
    assert chi2_contingency(torch.stack([old, new]).numpy()).pvalue > 1e-3  # as torchvision's


def test_crop_flip_of_uint8_images_gives_the_dataloaders_floats(tmp_path):
    _write_cifar(tmp_path)
    train = load_dataset("cifar10", "train", str(tmp_path))
    x = train.images[:5]
    out = pipeline.crop_flip(x, torch.Generator().manual_seed(1))
    assert out.dtype == torch.uint8 and out.shape == x.shape
    floats = pipeline.as_float(out)
    for k in range(5):
        assert floats[k].numpy().tobytes() in outcomes(train[k][0])


def test_device_batches_are_the_dataloaders_without_augmentation():
    """digits is not augmented: the device pipeline yields the DataLoader's very batches,
    epoch after epoch, and leaves the shuffle generator in the same state."""
    data = Subset(load_dataset("digits", "train"), range(200))
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    old = DataLoader(data, 64, shuffle=True, generator=gen_a)
    new = pipeline.DeviceLoader(data, 64, CPU, shuffle=True, generator=gen_b)
    assert len(old) == len(new) == 4
    for _ in range(3):
        for (xa, ya, ia), (xb, yb, ib) in zip(old, new, strict=True):
            assert torch.equal(xa, xb) and torch.equal(ya, yb) and torch.equal(ia, ib)
    assert torch.equal(gen_a.get_state(), gen_b.get_state())


@pytest.mark.parametrize(("n", "world"), [(10, 2), (11, 3), (7, 4)])
def test_sharded_device_order_is_distributed_samplers(n, world):
    data = load_dataset("digits", "test")
    subset = Subset(data, range(n))
    for rank in range(world):
        sampler = DistributedSampler(subset, world, rank, shuffle=True, seed=3)
        loader = pipeline.DeviceLoader(subset, 2, CPU).shard(rank, world, 3, 2)
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            loader.set_epoch(epoch)
            assert loader.order().tolist() == list(sampler)
            assert len(loader) == -(-len(sampler) // 2)


def cifar_cfg(root, **changes) -> TrialConfig:
    base = dict(
        dataset="cifar10",
        arch="cifar_resnet20",
        method="gaussian",
        sigma=0.25,
        epochs=3,
        batch_size=8,
        lr=0.01,
        lr_step_size=2,
        eval_subset=4,
        data_dir=str(root),
    )
    return TrialConfig(**{**base, **changes})


def test_cifar_batches_are_cropped_and_flipped_on_the_device(tmp_path):
    _write_cifar(tmp_path)
    state = build_state(cifar_cfg(tmp_path), CPU)
    train, _ = make_loaders(state)
    assert isinstance(train, pipeline.DeviceLoader) and train.augment
    plain = load_dataset("cifar10", "train", str(tmp_path))
    changed = 0
    for x, y, idx in train:
        for xi, yi, i in zip(x, y, idx.tolist(), strict=True):
            assert xi.numpy().tobytes() in outcomes(plain[i][0]) and yi == plain[i][1]
            changed += not torch.equal(xi, plain[i][0])
    assert changed > 0


def test_device_pipeline_resume_is_bitwise_identical(tmp_path):
    _write_cifar(tmp_path / "data")
    cfg = cifar_cfg(tmp_path / "data")
    first = fit(cfg, tmp_path / "a" / "checkpoint.pt", device=CPU, stop_after=1)
    assert first.pipeline == "device" and "augment" in first.payload()["rng"]
    resumed = fit(cfg, tmp_path / "a" / "checkpoint.pt", device=CPU)
    straight = fit(cfg, tmp_path / "b" / "checkpoint.pt", device=CPU)
    assert_nested_equal(resumed.payload()["model"], straight.payload()["model"], "model")
    assert_nested_equal(resumed.payload()["rng"], straight.payload()["rng"], "rng")


def old_layout(payload: dict) -> dict:
    """A checkpoint as the code before the device pipeline wrote it: `amp` a bool, no run
    settings in the config, RNG states torch/loader/noise only, no data_pipeline."""
    old = {k: v for k, v in payload.items() if k != "data_pipeline"}
    config = {
        k: v
        for k, v in payload["config"].items()
        if k not in ("channels_last", "compile", "data_pipeline")
    }
    old["config"] = {**config, "amp": payload["config"]["amp"] != "off"}
    old["rng"] = {k: payload["rng"][k] for k in ("torch", "loader", "noise")}
    return old


def test_a_checkpoint_of_the_dataloader_pipeline_resumes_with_it(tmp_path, caplog):
    """Written before this change (DataLoader, old layout): resumes without error and, under
    data_pipeline auto, goes on with the DataLoader exactly as an uninterrupted run does."""
    _write_cifar(tmp_path / "data")
    cfg = cifar_cfg(tmp_path / "data")
    loader_cfg = cfg.replace(data_pipeline="loader")
    path = tmp_path / "a" / "checkpoint.pt"
    fit(loader_cfg, path, device=CPU, stop_after=1)
    old = old_layout(checkpoint.load(path))
    checkpoint.save(old, path)
    checkpoint.save(old, tmp_path / "c" / "checkpoint.pt")
    resumed = fit(cfg, path, device=CPU)
    straight = fit(loader_cfg, tmp_path / "b" / "checkpoint.pt", device=CPU)
    assert resumed.pipeline == "loader" and resumed.epoch == 3
    assert_nested_equal(resumed.payload()["model"], straight.payload()["model"], "model")
    assert "different config" not in caplog.text
    explicit = fit(
        cfg.replace(data_pipeline="device"), tmp_path / "c" / "checkpoint.pt", device=CPU
    )
    assert explicit.pipeline == "device" and explicit.epoch == 3


@pytest.mark.parametrize("which", ["device", "loader"])
def test_training_batches_come_from_the_states_own_generators_alone(tmp_path, which):
    """The order and the crop/flip of every training batch are drawn from the state's loader
    and augmentation generators (restored on resume), whatever else drew from torch's global
    generator meanwhile; the pipeline built is the one the state names."""
    _write_cifar(tmp_path)
    cfg = cifar_cfg(tmp_path).replace(data_pipeline=which)
    batches = []
    for global_seed in (1, 2):
        state = build_state(cfg, CPU)
        train, _ = make_loaders(state)
        assert isinstance(train, pipeline.DeviceLoader) == (which == "device")
        torch.manual_seed(global_seed)
        batches.append([(x.clone(), idx.clone()) for x, _, idx in train])
    for (x1, i1), (x2, i2) in zip(*batches, strict=True):
        assert torch.equal(i1, i2)
        assert torch.equal(x1, x2) or which == "loader"  # torchvision's crop/flip: global
