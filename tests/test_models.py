"""Base classifiers: shapes, the NormalizeLayer front, CIFAR ResNet structure, registries."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainables import methods, models
from trainables.datasets import INFO
from trainables.kernel.catalog import ARCHS, DATASETS, DEFAULT_ARCH
from trainables.methods import METHODS
from trainables.models import BasicBlock, CifarResNet, NormalizeLayer, build_model

# the data set whose input shape each architecture takes
ARCH_DATASET = {
    "cifar_resnet20": "cifar10",
    "cifar_resnet56": "cifar10",
    "cifar_resnet110": "cifar10",
    "resnet50": "imagenet",
    "lenet": "mnist",
    "digits_cnn": "digits",
}

# (blocks per stage, parameters with 10 classes) of the CIFAR ResNets
CIFAR_RESNETS = {
    "cifar_resnet20": (3, 272_474),
    "cifar_resnet56": (9, 855_770),
    "cifar_resnet110": (18, 1_730_714),
}


def _build(arch: str, num_classes: int = 10) -> nn.Sequential:
    info = INFO[ARCH_DATASET[arch]]
    return build_model(arch, num_classes, info.mean, info.std)


def _num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_every_arch_has_an_input_shape():
    assert set(ARCH_DATASET) == set(ARCHS)
    for dataset, arch in DEFAULT_ARCH.items():
        # imagenet32 pre-trains CIFAR-10's ResNet-110 on inputs of the same 3x32x32 shape
        assert INFO[ARCH_DATASET[arch]].shape == INFO[dataset].shape


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_shape(arch: str):
    torch.manual_seed(0)
    model = _build(arch, num_classes=7).eval()
    batch = 1 if arch == "resnet50" else 3  # resnet50 at 224x224 is slow on a CPU core
    x = torch.rand(batch, *INFO[ARCH_DATASET[arch]].shape)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (batch, 7)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_first_module_is_normalize_layer_with_dataset_stats(arch: str):
    model = _build(arch)
    info = INFO[ARCH_DATASET[arch]]
    assert isinstance(model[0], NormalizeLayer)
    assert model[0].means.flatten().tolist() == pytest.approx(info.mean)
    assert model[0].sds.flatten().tolist() == pytest.approx(info.std)
    state = model.state_dict()
    assert "0.means" in state and "0.sds" in state, "stats must travel with the checkpoint"


def test_normalize_layer_standardizes_each_channel():
    means, sds = (0.1, 0.5, 0.9), (0.2, 0.25, 0.5)
    layer = NormalizeLayer(means, sds)
    x = torch.rand(4, 3, 5, 6)
    out = layer(x)
    assert out.shape == x.shape
    for c in range(3):
        expected = (x[:, c].double() - means[c]) / sds[c]
        torch.testing.assert_close(out[:, c].double(), expected, rtol=0, atol=1e-6)
    # inputs at mean + k * sd come out exactly as k, per channel
    k = torch.tensor([-2.0, 0.0, 1.0]).view(1, 3, 1, 1)
    x = torch.tensor(means).view(1, 3, 1, 1) + k * torch.tensor(sds).view(1, 3, 1, 1)
    torch.testing.assert_close(layer(x), k, rtol=0, atol=1e-6)


def test_normalize_layer_single_channel():
    layer = NormalizeLayer((0.5,), (0.25,))
    x = torch.tensor([0.0, 0.5, 1.0]).view(1, 1, 1, 3)
    assert layer(x).flatten().tolist() == [-2.0, 0.0, 2.0]
    assert not list(layer.parameters()), "statistics are buffers, not trained"


@pytest.mark.parametrize("arch", CIFAR_RESNETS)
def test_cifar_resnet_stages(arch: str):
    blocks, n_params = CIFAR_RESNETS[arch]
    net = _build(arch)[1]
    assert isinstance(net, CifarResNet)
    for stage, channels in ((net.layer1, 16), (net.layer2, 32), (net.layer3, 64)):
        assert len(stage) == blocks
        assert all(isinstance(b, BasicBlock) for b in stage)
        assert {b.conv1.out_channels for b in stage} == {channels}
        assert {b.conv2.out_channels for b in stage} == {channels}
    # stages 2 and 3 halve the resolution in their first block
    strides = [s[0].conv1.stride for s in (net.layer1, net.layer2, net.layer3)]
    assert strides == [(1, 1), (2, 2), (2, 2)]
    assert net.fc.in_features == 64
    assert _num_params(net) == n_params


def test_resnet110_has_about_1_7m_parameters():
    n = _num_params(_build("cifar_resnet110"))
    assert 1.7e6 < n < 1.75e6
    assert n == CIFAR_RESNETS["cifar_resnet110"][1]


def test_cifar_resnet_feature_resolutions():
    net = _build("cifar_resnet20")[1].eval()
    shapes = {}
    for name in ("layer1", "layer2", "layer3"):
        getattr(net, name).register_forward_hook(
            lambda _m, _i, out, name=name: shapes.__setitem__(name, tuple(out.shape))
        )
    with torch.no_grad():
        net(torch.rand(2, 3, 32, 32))
    assert shapes == {"layer1": (2, 16, 32, 32), "layer2": (2, 32, 16, 16), "layer3": (2, 64, 8, 8)}


def test_cifar_resnet_depth_must_be_6n_plus_2():
    with pytest.raises(ValueError, match="6n\\+2"):
        CifarResNet(21)


def test_unknown_arch_lists_valid_names():
    with pytest.raises(ValueError) as e:
        build_model("vgg16", 10, (0.5,), (0.25,))
    msg = str(e.value)
    assert "vgg16" in msg and all(arch in msg for arch in ARCHS)


def test_registries_agree_with_config():
    assert tuple(models._BUILDERS) == ARCHS
    assert tuple(INFO) == DATASETS
    assert tuple(methods.REGISTRY) == METHODS
    assert set(DEFAULT_ARCH) == set(DATASETS)
    assert set(DEFAULT_ARCH.values()) <= set(ARCHS)


# ------------------------------------------------ the input layer of SmoothAdv's models (§5)
# Hadisalman/smoothing-adversarial code/datasets.py (HEAD, l. 66-70 and 171-190), transcribed:
# its statistics and both of its input layers, as written (repeat, then permute).
REFERENCE_CIFAR10 = ([0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010])


def reference_input_center_layer(x: torch.Tensor, means: list[float]) -> torch.Tensor:
    """InputCenterLayer.forward: `input - means`, the means repeated to the batch's shape."""
    batch_size, _, height, width = x.shape
    repeated = torch.tensor(means).repeat((batch_size, height, width, 1)).permute(0, 3, 1, 2)
    return x - repeated


def reference_normalize_layer(
    x: torch.Tensor, means: list[float], sds: list[float]
) -> torch.Tensor:
    """NormalizeLayer.forward: `(input - means) / sds`, both repeated to the batch's shape."""
    batch_size, _, height, width = x.shape
    m = torch.tensor(means).repeat((batch_size, height, width, 1)).permute(0, 3, 1, 2)
    s = torch.tensor(sds).repeat((batch_size, height, width, 1)).permute(0, 3, 1, 2)
    return (x - m) / s


def _cifar_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (4, 3, 32, 32), generator=g).float() / 255


def test_cifar10_statistics_are_the_references():
    info = INFO["cifar10"]
    assert (list(info.mean), list(info.std)) == REFERENCE_CIFAR10


@pytest.mark.parametrize(
    ("normalize", "scale", "layer"),
    [
        (True, True, "normalize"),
        (True, None, "normalize"),
        (True, False, "center"),
        (False, None, "identity"),
        (False, True, "identity"),
    ],
)
def test_input_statistics_give_the_references_layers_bit_for_bit(normalize, scale, layer):
    """(means, sds) standardizes as the reference's NormalizeLayer, (means, 1) centers as its
    InputCenterLayer, (0, 1) is the identity (MACER's model): equal, not close."""
    means, sds = models.input_statistics(normalize, scale, *REFERENCE_CIFAR10)
    x = _cifar_input()
    ours = NormalizeLayer(means, sds)(x)
    expected = {
        "normalize": lambda: reference_normalize_layer(x, *REFERENCE_CIFAR10),
        "center": lambda: reference_input_center_layer(x, REFERENCE_CIFAR10[0]),
        "identity": lambda: x,
    }[layer]()
    assert torch.equal(ours, expected)


def test_a_centered_models_checkpoint_has_the_same_layout_and_loads_as_it_trained():
    """The centered model is the standardized one's layout (state dict keys and shapes); its
    statistics are buffers, so a model built with the data set's statistics (as
    checkpoint.load_model builds it) and loaded from the state dict centers again."""
    torch.manual_seed(0)
    centered = build_model(
        "cifar_resnet20", 10, *models.input_statistics(True, False, *REFERENCE_CIFAR10)
    ).eval()
    loaded = build_model("cifar_resnet20", 10, *REFERENCE_CIFAR10).eval()
    state = centered.state_dict()
    assert {k: v.shape for k, v in state.items()} == {
        k: v.shape for k, v in loaded.state_dict().items()
    }
    loaded.load_state_dict(state)
    x = _cifar_input()
    with torch.no_grad():
        assert torch.equal(loaded(x), centered(x))
        assert torch.equal(loaded[0](x), reference_input_center_layer(x, REFERENCE_CIFAR10[0]))


def test_fine_tuning_keeps_the_models_own_input_layer():
    """transfer_weights from a standardizing parent into a centering child (or back) keeps
    the child's statistics: each model's input layer is its own trial's."""
    parent = build_model("cifar_resnet20", 10, *REFERENCE_CIFAR10)
    child = build_model(
        "cifar_resnet20", 10, *models.input_statistics(True, False, *REFERENCE_CIFAR10)
    )
    kept = models.transfer_weights(child, parent.state_dict())
    assert {"0.means", "0.sds"} <= set(kept)
    assert child[0].sds.flatten().tolist() == [1.0, 1.0, 1.0]
    assert torch.equal(child[1].conv1.weight, parent[1].conv1.weight)


@pytest.mark.parametrize(
    ("fields", "sds"),
    [
        ({}, [1.0, 1.0, 1.0]),
        ({"scale_input": True}, REFERENCE_CIFAR10[1]),
        ({"init_from": "0123456789ab"}, REFERENCE_CIFAR10[1]),
    ],
)
def test_a_smoothadv_trial_builds_the_input_layer_its_config_resolves(fields, sds):
    """From scratch on CIFAR-10: x − μ (the reference's InputCenterLayer); fine-tuned, or with
    scale_input true: (x − μ)/s."""
    from trainables.kernel.config import TrialConfig
    from trainables.train_state import build_state

    cfg = TrialConfig(dataset="cifar10", method="smoothadv", arch="cifar_resnet20", **fields)
    layer = build_state(cfg, torch.device("cpu")).model[0]
    assert layer.means.flatten().tolist() == pytest.approx(REFERENCE_CIFAR10[0])
    assert layer.sds.flatten().tolist() == pytest.approx(sds)
