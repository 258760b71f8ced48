"""Reading the pickled CIFAR-10 batches without running code from them.

`pickle.load` calls whatever callable a file names, so a crafted `test_batch` runs code at load
time. `load_plain` unpickles with a restricted unpickler instead: besides the pickle format's
own containers and scalars (dict, list, tuple, str, bytes, int, float, bool, None) it admits
only the callables that rebuild a numpy array (`numpy._core.multiarray._reconstruct` /
`numpy.core.multiarray._reconstruct`, `numpy.ndarray`, `numpy.dtype`, protocol 5's
`numpy._core.numeric._frombuffer`) and `_codecs.encode` to latin-1 (how Python 3 writes bytes
in protocol 2). Any other global is refused before it is looked up, let alone called.

Those numpy callables are wrapped, so that an array is checked before any memory is given to
it: numbers only (bool, integers, floats of at most 8 bytes; an object array built over raw
bytes is a pointer dereference, a segfault), at most a batch's shape of values (`MAX_VALUES`:
10,000 images of 3072), `numpy.ndarray` never called directly (numpy's own pickles call
`_reconstruct`, whose array is filled by `__setstate__`, checked too).

Where a file has the official name and size of a batch of the CIFAR-10 python version, its MD5
must also be the one torchvision lists for it (`torchvision.datasets.CIFAR10.train_list` /
`test_list`): a damaged or altered official file is named, not read. Other files (smaller
copies, re-pickled ones, the tests' miniatures) rely on the restricted unpickler alone.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np

# Sizes in bytes of the official files (cifar-10-python.tar.gz as published, md5 c58f3010...).
CIFAR_OFFICIAL_SIZES = {
    "data_batch_1": 31_035_704,
    "data_batch_2": 31_035_320,
    "data_batch_3": 31_035_999,
    "data_batch_4": 31_035_696,
    "data_batch_5": 31_035_623,
    "test_batch": 31_035_526,
}


def _latin1_encode(obj: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    if encoding.lower().replace("-", "") != "latin1":
        raise pickle.UnpicklingError(f"refused _codecs.encode to {encoding!r} (only latin-1)")
    return codecs.encode(obj, "latin1", errors)


# A CIFAR-10 batch's `data`: 10,000 rows of 3072 values. No array of a data file is larger.
MAX_VALUES = 10_000 * 3072
NUMBER_KINDS = "biuf"  # bool, signed and unsigned integers, floats


def _dtype_problem(dtype: Any) -> str | None:
    if not isinstance(dtype, np.dtype):
        return f"refused array dtype {type(dtype).__name__}: not a numpy dtype"
    if dtype.kind not in NUMBER_KINDS or dtype.hasobject or dtype.itemsize > 8:
        return f"refused array dtype {dtype.str}: a data file's arrays hold numbers only"
    return None


def _checked(shape: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an array a data file may hold; UnpicklingError before any memory is
    given to one that is not."""
    dims = (shape,) if isinstance(shape, int) else shape
    if not isinstance(dims, tuple) or not all(type(d) is int and d >= 0 for d in dims):
        raise pickle.UnpicklingError(f"refused array shape {shape!r}")
    if (problem := _dtype_problem(dtype)) is not None:
        raise pickle.UnpicklingError(problem)
    if math.prod(dims) > MAX_VALUES:
        raise pickle.UnpicklingError(
            f"refused an array of shape {dims}: more than a CIFAR-10 batch's {MAX_VALUES:,} values"
        )
    return dims, dtype


class CheckedArray(np.ndarray):
    """What `_reconstruct` makes: an ndarray whose `__setstate__` (the pickle's BUILD) checks
    the shape, dtype and data before numpy fills it. `np.asarray` of one is a plain array."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError("refused an array state that is not numpy's")
        shape, dtype, _, data = state[-4:]
        dims, dtype = _checked(shape, dtype)
        size = math.prod(dims) * dtype.itemsize  # Python 2's str arrives as str (latin-1)
        if not isinstance(data, (bytes, bytearray, str)) or len(data) != size:
            raise pickle.UnpicklingError(f"refused array data that does not fill shape {dims}")
        super().__setstate__(state)


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> CheckedArray:
    if subtype is not _ndarray:
        raise pickle.UnpicklingError("refused an array of a type other than numpy.ndarray")
    if isinstance(dtype, bytes):
        dtype = dtype.decode("latin1")
    dims, checked = _checked(shape, np.dtype(dtype) if isinstance(dtype, str) else dtype)
    return np.ndarray.__new__(CheckedArray, dims, checked)


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    dims, checked = _checked(shape, dtype)
    return np.frombuffer(buffer, dtype=checked).reshape(dims, order=order)


def _ndarray(*args: Any, **kwargs: Any) -> Any:
    """`numpy.ndarray` as a pickle names it: an argument of `_reconstruct`, never called."""
    raise pickle.UnpicklingError("refused numpy.ndarray called directly (numpy's pickles never do)")


def _dtype(spec: Any, align: bool = False, copy: bool = False) -> np.dtype:
    dtype = np.dtype(spec, align, copy)
    if (problem := _dtype_problem(dtype)) is not None:
        raise pickle.UnpicklingError(problem)
    return dtype


WRAPPED = {
    "_reconstruct": _reconstruct,
    "_frombuffer": _frombuffer,
    "ndarray": _ndarray,
    "dtype": _dtype,
}
ALLOWED = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


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
        return WRAPPED[name]

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
