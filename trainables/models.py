"""Base classifiers. Every model starts with a `NormalizeLayer`, so inputs, noise and
certified radii live in [0, 1] pixel space (as in Cohen et al. and SmoothAdv); its statistics
(`input_statistics`) make it a standardization, a centering or the identity."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torchvision
from torch import nn

from trainables.kernel.catalog import ARCHS


class NormalizeLayer(nn.Module):
    """Per-channel standardization (x − μ_c) / s_c, the model's first layer.

    The statistics are buffers, so they travel with the checkpoint. With every s_c = 1 it is
    SmoothAdv's `InputCenterLayer` (x − μ_c; dividing by 1 is exact), with μ_c = 0 as well the
    identity: one layout (state dict keys) for all three."""

    means: torch.Tensor
    sds: torch.Tensor

    def __init__(self, means: Sequence[float], sds: Sequence[float]):
        super().__init__()
        self.register_buffer("means", torch.tensor(means, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("sds", torch.tensor(sds, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.means) / self.sds


class BasicBlock(nn.Module):
    """The CIFAR ResNet basic block of the reference code (bearpaw/pytorch-classification)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + residual)


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 32×32 inputs: 16/32/64 channels, n basic blocks per stage
    (n = 18 for ResNet-110), global average pooling, one linear layer."""

    def __init__(self, depth: int, num_classes: int = 10):
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 (got {depth})")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._stage(16, 16, n, 1)
        self.layer2 = self._stage(16, 32, n, 2)
        self.layer3 = self._stage(32, 64, n, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @staticmethod
    def _stage(inplanes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(inplanes, planes, stride)]
        layers += [BasicBlock(planes, planes) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class LeNet(nn.Module):
    """LeNet-5 for 28×28 single-channel inputs (MNIST)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class DigitsCNN(nn.Module):
    """A small CNN for scikit-learn's 8×8 digits; trains in seconds on a CPU core."""

    def __init__(self, num_classes: int = 10, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * 16, 128), nn.ReLU(), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


_BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "cifar_resnet20": lambda k: CifarResNet(20, k),
    "cifar_resnet56": lambda k: CifarResNet(56, k),
    "cifar_resnet110": lambda k: CifarResNet(110, k),
    "resnet50": lambda k: torchvision.models.resnet50(weights=None, num_classes=k),
    "lenet": LeNet,
    "digits_cnn": DigitsCNN,
}
assert tuple(_BUILDERS) == ARCHS, "model registry and catalog.ARCHS disagree"


def input_statistics(
    normalize: bool | None, scale: bool | None, means: Sequence[float], sds: Sequence[float]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The (means, sds) a model's `NormalizeLayer` holds, from a data set's channel statistics
    and a trial's `normalize_input` and `scale_input`: (means, sds) standardizes (SmoothAdv's
    `NormalizeLayer`); scale false gives (means, 1): x − μ, its `InputCenterLayer`; normalize
    false gives (0, 1): x itself (MACER's model, which has no input layer)."""
    ones = (1.0,) * len(means)
    if not normalize:
        return (0.0,) * len(means), ones
    return tuple(means), (tuple(sds) if scale is not False else ones)


def build_model(
    arch: str, num_classes: int, means: Sequence[float], sds: Sequence[float]
) -> nn.Sequential:
    """`NormalizeLayer(means, sds)` followed by the named architecture (random weights)."""
    if arch not in _BUILDERS:
        raise ValueError(f"unknown arch {arch!r} (valid: {', '.join(ARCHS)})")
    return nn.Sequential(NormalizeLayer(means, sds), _BUILDERS[arch](num_classes))


def transfer_weights(model: nn.Module, pretrained: dict[str, torch.Tensor]) -> list[str]:
    """Load a pre-trained state dict into `model` for fine-tuning, keeping the model's own
    input normalization (its data set's statistics) and its freshly initialized last linear
    (logit) layer, as in SmoothAdv's ImageNet32 → CIFAR-10 transfer. Returns the names kept.
    Raises ValueError when any other tensor is missing or has another shape (other arch)."""
    last = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)][-1]
    own = model.state_dict()
    kept = [
        k for k in own if k.startswith(f"{last}.") or isinstance(_module(model, k), NormalizeLayer)
    ]
    wrong = [
        k
        for k in own
        if k not in kept and (k not in pretrained or pretrained[k].shape != own[k].shape)
    ]
    if wrong:
        raise ValueError(
            f"pre-trained weights do not fit this architecture ({len(wrong)} tensors differ, "
            f"e.g. {wrong[0]})"
        )
    model.load_state_dict({k: (own[k] if k in kept else pretrained[k]) for k in own})
    return kept


def _module(model: nn.Module, key: str) -> nn.Module:
    return model.get_submodule(key.rsplit(".", 1)[0]) if "." in key else model
