"""Names every layout shares: the data set, the architecture, the split certified, m_train.

cifar10, imagenet, mnist                                   dataset
resnet110, cifar_resnet20, resnet50, lenet, densenet40, ...   arch (resnet20/56/110 ->
                                                           cifar_*, the CIFAR variants)
test, train                                                the split certified
<m>-multitrain, num_<m>, num_noise_vec_<m>, m<m>, m_train_<m>   m_train (SmoothAdv's
                                                           `<m>-multitrain`, the jh-jeong
                                                           code's `num_<m>`, ...)
"""

from __future__ import annotations

import re
from collections.abc import Callable

from trainables.kernel.catalog import ARCHS, DATASETS

NUM = r"(\d+(?:\.\d*)?|\.\d+)"  # a number as a directory name spells it: 0.25, 1., .5, 256
Handler = Callable[[re.Match], dict]


def number(key: str, scale: float = 1.0) -> Handler:
    """The name's first group as a float, divided by `scale`."""
    return lambda m: {key: float(m.group(1)) / scale}


def first_int(key: str) -> Handler:
    """The first group of the name that matched, as an int (for alternatives)."""
    return lambda m: {key: int(next(g for g in m.groups() if g is not None))}


def _arch(m: re.Match) -> dict:
    name = m.group(0).lower()
    return {"arch": f"cifar_{name}" if f"cifar_{name}" in ARCHS else name}


PATTERNS: list[tuple[str, Handler]] = [
    (r"(\d+)-multitrain|num_(?:noise_vec_)?(\d+)|m(?:_train_)?(\d+)", first_int("m_train")),
    (r"train|test", lambda m: {"_split": m.group(0).lower()}),
    ("|".join(DATASETS), lambda m: {"dataset": m.group(0).lower()}),
    (r"(?:cifar_)?(?:resnet\d+|densenet\d+|wrn[\w-]*|vgg\d+|lenet|digits_cnn)", _arch),
]
