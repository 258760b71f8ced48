"""The halving scheduler's proxy (issue 37, item 4): a trial's certified accuracy, during
training, on a validation split carved from its training set, never on the test points.

With `cfg.proxy_every` set, `proxy_points` inputs of the training split (a permutation of it
seeded by `VALIDATION_SEED`, the same for every trial of a data set, so trials are compared on
the same inputs) are held out: the trial trains on the rest (`train_subset` then takes the
first of those). Every `proxy_every` epochs the model is certified on them with CERTIFY
(`n0 = PROXY_N0` selection draws, `proxy_n` estimation draws, α = `PROXY_ALPHA`), and the
trial reports its certified accuracy at the radii `proxy_radii(σ, n)`: multiples of σ/2 up to
the largest radius `proxy_n` draws can certify. Accuracy rather than a loss: the scheduler
(sweeper's `run.halving`) compares trials of one σ at the same radii, as the envelope does.

The draws come from generators of their own, seeded by the trial's seed and the epoch, and the
model runs in eval mode under inference mode: the proxy moves no state the training resumes
from (a resumed trial is still bitwise the uninterrupted one on CPU)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, Subset

from trainables.certify_points import seed_for
from trainables.datasets import DataError, ImageTensors, IndexedFolder, load_dataset
from trainables.kernel.catalog import NUM_CLASSES
from trainables.kernel.certificates import max_radius
from trainables.kernel.config import TrialConfig, required
from trainables.smoothing import Smooth

VALIDATION_SEED = 20261130  # the carve's permutation: one per data set, whatever the trial
PROXY_N0 = 32  # CERTIFY's selection draws per validation input
PROXY_ALPHA = 0.001  # the papers' α
PROXY_BATCH = 1024  # noisy inputs per forward


def carve(size: int, points: int) -> tuple[list[int], list[int]]:
    """(training positions, validation positions) of a split of `size` inputs: the last
    `points` of a fixed permutation are held out, each list in increasing order."""
    if not 0 < points < size:
        raise DataError(
            f"proxy_points ({points}) must be below the training split's {size} inputs: "
            "lower proxy_points"
        )
    order = torch.randperm(size, generator=torch.Generator().manual_seed(VALIDATION_SEED))
    return sorted(order[: size - points].tolist()), sorted(order[size - points :].tolist())


def training_part(split: ImageTensors | IndexedFolder, cfg: TrialConfig) -> Dataset:
    """What the trial trains on: the split, without its validation inputs when the proxy is on."""
    if cfg.proxy_every is None:
        return split
    train, _ = carve(len(split), required(cfg.proxy_points, "proxy_points"))
    return Subset(split, train)


def proxy_every(cfg: TrialConfig) -> int:
    return required(cfg.proxy_every, "proxy_every")


def proxy_radii(sigma: float, n: int) -> list[float]:
    """The radii the proxy reports: 0, σ/2, σ, ... up to what n draws can certify."""
    top = float(max_radius(sigma, n, PROXY_ALPHA))
    return [k * sigma / 2 for k in range(int(top / (sigma / 2)) + 1)]


class Proxy:
    """The validation inputs of `cfg`'s data set on `device`, and a model's certified accuracy
    on them."""

    def __init__(self, cfg: TrialConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        points, n = required(cfg.proxy_points, "proxy_points"), required(cfg.proxy_n, "proxy_n")
        # without the training augmentation (whose torchvision transforms draw from the
        # global RNG): the inputs themselves, as the test points are certified
        split = load_dataset(cfg.dataset, "train", cfg.data_dir, cfg.download)
        _, held = carve(len(split), points)
        pairs = [split[i] for i in held]
        self.xs = torch.stack([torch.as_tensor(p[0]) for p in pairs]).float().to(device)
        self.ys = torch.tensor([int(p[1]) for p in pairs], device=device)
        self.n, self.radii = n, proxy_radii(cfg.sigma, n)

    def curve(self, model: torch.nn.Module, epoch: int) -> list[float]:
        """Certified accuracy at `self.radii` of `model` after `epoch` epochs."""
        smooth = Smooth(model, NUM_CLASSES[self.cfg.dataset], self.cfg.sigma)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed_for(self.cfg.seed, "proxy", epoch))
        certs = smooth.certify_batch(self.xs, PROXY_N0, self.n, PROXY_ALPHA, PROXY_BATCH, gen)
        right = [
            c.radius if c.prediction == y else -1.0
            for c, y in zip(certs, self.ys.tolist(), strict=True)
        ]
        return [sum(r >= radius for r in right) / len(right) for radius in self.radii]
