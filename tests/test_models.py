"""Base classifiers: shapes, the NormalizeLayer front, CIFAR ResNet structure, registries."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainables import methods, models
from trainables.catalog import ARCHS, DATASETS, DEFAULT_ARCH
from trainables.datasets import INFO
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
