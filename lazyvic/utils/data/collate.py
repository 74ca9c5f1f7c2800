"""Collation (PyTorch's ``torch.utils.data._utils.collate``): a list of samples -> one batch.

:func:`default_collate` follows PyTorch's rules, recursively over the structure of the first
sample:

- lazyvic Tensors -> stacked along a new first axis (same shape required);
- NumPy arrays -> tensors of their dtype, stacked; NumPy scalars -> a 1-D tensor of their dtype;
- Python floats -> float64, ints -> int64, bools -> bool (1-D tensors);
- str and bytes -> the list as it is;
- mappings -> the same mapping type of collated values; namedtuples -> the same namedtuple;
  tuples -> a list of collated fields; other sequences -> the same sequence type.

Tensors realized on the CPU (the usual dataset sample) are stacked now into a new realized tensor;
pending ones are computed first, together (a sync point, as reading a batch is in PyTorch);
tensors on CUDA are stacked lazily on the device.
"""

from __future__ import annotations

import collections.abc
import copy

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.creation import from_numpy, tensor
from lazyvic.errors import ShapeError
from lazyvic.indexing import stack
from lazyvic.sync import sync
from lazyvic.tensor import Tensor

_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _is_text(a: np.ndarray) -> bool:
    return a.dtype.kind in "OSUV"


def collate_tensor_fn(batch, *, collate_fn_map=None) -> Tensor:
    """Stack same-shape tensors along a new first axis (dtypes promote as in ``lazyvic.stack``).

    Raises ShapeError for tensors of different shapes, DeviceError for tensors on two devices."""
    shapes = {t.shape for t in batch}
    if len(shapes) != 1:
        raise ShapeError(
            f"default_collate: stack expects each tensor to be equal size, got shapes {[t.shape for t in batch]}"
        )
    if any(t.device == "cuda" for t in batch):
        return stack(batch, 0)
    pending = [t for t in batch if t.is_lazy]
    if pending:
        sync(*pending)
    d = batch[0].dtype
    for t in batch[1:]:
        d = dt.promote(d, t.dtype)
    return from_numpy(np.stack([t.numpy() for t in batch]).astype(d.np, copy=False))


def collate_numpy_array_fn(batch, *, collate_fn_map=None) -> Tensor:
    if _is_text(batch[0]):
        raise TypeError(_ERROR.format(batch[0].dtype))
    return collate([from_numpy(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None) -> Tensor:
    return from_numpy(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None) -> Tensor:
    return tensor(batch, dtype=dt.float64)


def collate_int_fn(batch, *, collate_fn_map=None) -> Tensor:
    return tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


# Element type -> collate function; checked first by exact type, then by isinstance in this order.
default_collate_fn_map: dict = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def collate(batch, *, collate_fn_map: dict | None = None):
    """Collate ``batch`` (a list of samples) by the structure of its first sample, with
    ``collate_fn_map`` (element type -> function) for the leaves (PyTorch's ``collate``).

    Raises TypeError for a leaf type the map does not know, ShapeError for sequences of
    different lengths."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for kind, fn in collate_fn_map.items():
            if isinstance(elem, kind):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        fields = {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(fields)
                return clone
            return elem_type(fields)
        except TypeError:  # a mapping type that cannot be rebuilt this way
            return fields
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a namedtuple
        return elem_type(*(collate(list(samples), collate_fn_map=collate_fn_map) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise ShapeError(
                f"default_collate: each element in list of batch should be of equal size, got lengths {[len(e) for e in batch]}"
            )
        fields = [collate(list(samples), collate_fn_map=collate_fn_map) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return fields  # a list, as PyTorch returns for tuples
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, f in enumerate(fields):
                    clone[i] = f
                return clone
            return elem_type(fields)
        except TypeError:
            return fields
    raise TypeError(_ERROR.format(elem_type))


def default_collate(batch):
    """Put a list of samples into one batch (rules in the module docstring): e.g. a list of
    ``(image (1, 28, 28) float32, label int)`` tuples -> ``[images (B, 1, 28, 28) float32,
    labels (B,) int64]``.

    Raises:
        TypeError: an element type it cannot collate (e.g. an object, a NumPy array of strings).
        ShapeError: tensors or sequences of different sizes within the batch.
        DTypeError: a NumPy dtype lazyvic has no tensors of (float16, complex ...).
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)


def default_convert(data):
    """Without batching (``batch_size=None``): NumPy arrays and scalars in ``data`` become tensors,
    recursively through mappings, namedtuples and sequences; everything else is left as it is
    (tuples become lists, as in PyTorch)."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        if isinstance(data, np.ndarray) and _is_text(data):
            return data
        return from_numpy(np.asarray(data))  # a 0-d array for a NumPy scalar
    if isinstance(data, collections.abc.Mapping):
        fields = {key: default_convert(data[key]) for key in data}
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update(fields)
                return clone
            return type(data)(fields)
        except TypeError:
            return fields
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        fields = [default_convert(d) for d in data]
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, f in enumerate(fields):
                    clone[i] = f
                return clone
            return type(data)(fields)
        except TypeError:
            return fields
    return data


__all__ = ["collate", "default_collate", "default_collate_fn_map", "default_convert"]
