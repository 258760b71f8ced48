"""Reading the pickled CIFAR-10 batches without running code from them.

`pickle.load` calls whatever callable a file names, so a crafted `test_batch` runs code at load
time. `load_plain` unpickles with a restricted unpickler instead: besides the pickle format's
own containers and scalars (dict, list, tuple, str, bytes, int, float, bool, None) it admits
only the callables that rebuild a numpy array (`numpy._core.multiarray._reconstruct` /
`numpy.core.multiarray._reconstruct`, `numpy.ndarray`, `numpy.dtype`, protocol 5's
`numpy._core.numeric._frombuffer`) and `_codecs.encode` to latin-1 (how Python 3 writes bytes
in protocol 2). Any other global is refused before it is looked up, let alone called.

Where a file has the official name and size of a batch of the CIFAR-10 python version, its MD5
must also be the one torchvision lists for it (`torchvision.datasets.CIFAR10.train_list` /
`test_list`): a damaged or altered official file is named, not read. Other files (smaller
copies, re-pickled ones, the tests' miniatures) rely on the restricted unpickler alone.
"""

from __future__ import annotations

import codecs
import hashlib
import importlib
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

# Sizes in bytes of the official files (cifar-10-python.tar.gz as published, md5 c58f3010...).
CIFAR_OFFICIAL_SIZES = {
    "data_batch_1": 31_035_704, "data_batch_2": 31_035_320, "data_batch_3": 31_035_999,
    "data_batch_4": 31_035_696, "data_batch_5": 31_035_623, "test_batch": 31_035_526,
}  # fmt: skip


def _latin1_encode(obj: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    if encoding.lower().replace("-", "") != "latin1":
        raise pickle.UnpicklingError(f"refused _codecs.encode to {encoding!r} (only latin-1)")
    return codecs.encode(obj, "latin1", errors)


def _numpy_core(module: str) -> Any:
    """numpy's internal module: its numpy 2 name first (numpy.core.* is a deprecated alias
    there), else the numpy 1 one."""
    modern = module.replace("numpy.core.", "numpy._core.", 1)
    try:
        return importlib.import_module(modern)
    except ImportError:
        return importlib.import_module(modern.replace("numpy._core.", "numpy.core.", 1))


ALLOWED = {
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
}  # fmt: skip


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds only data: containers, scalars and numpy arrays."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(
                f"refused global {module}.{name}: a data file may hold only numpy arrays, "
                "lists, dicts, strings and numbers"
            )
        if module == "_codecs":
            return _latin1_encode
        if module == "numpy":
            return getattr(np, name)
        return getattr(_numpy_core(module), name)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id")


def load_plain(data: bytes) -> Any:
    """Unpickle `data` (Python 2's str as latin-1, as CIFAR-10's files need) admitting only
    plain data; pickle.UnpicklingError names the refused global."""
    return PlainUnpickler(io.BytesIO(data), encoding="latin1").load()


def official_md5_problem(path: Path, data: bytes) -> str | None:
    """Why a file of an official CIFAR-10 batch's name and size is not that batch (its MD5
    differs from the one torchvision publishes), or None."""
    if CIFAR_OFFICIAL_SIZES.get(path.name) != len(data):
        return None
    from torchvision.datasets import CIFAR10

    published = dict(CIFAR10.train_list + CIFAR10.test_list)[path.name]
    actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if actual == published:
        return None
    return (
        f"it has the size of the official {path.name} but MD5 {actual}, not the published "
        f"{published}: the file is damaged or altered; download CIFAR-10 again"
    )
