"""Indexing, slicing and joining: ``x[...]``, ``cat``, ``stack``.

Written over the tensors they are handed (their methods: ``_slice``, ``reshape``,
``index_select``, ``new_tensor``, ``_pad`` ...), so this module sits below
:mod:`lazyvic.tensor` (``Tensor.__getitem__`` calls :func:`getitem`) and never imports it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import IndexError as LIndexError
from lazyvic.errors import ShapeError, UnsupportedOpError
from lazyvic.shapes import norm_axis
from lazyvic.trace.composite import mark


def _is_tensor(value) -> bool:
    """A lazyvic Tensor (checked by its node: this module cannot import the class)."""
    return hasattr(value, "_node")


def _wrap_negative_index(idx, shape: tuple, axis: int):
    """Python's negative indices for an index tensor (index_select and gather take only 0..n-1)."""
    if idx.dtype.category != 1 or axis >= len(shape):
        return idx  # the index op names the problem
    n = shape[axis]
    # A pending index, or one in device memory, is wrapped lazily (the index op checks its range when it runs).
    data = idx._node.data if idx._node.op == "buffer" and idx._node.device != "cuda" else None
    if data is None:
        negative = idx < 0
        return (idx + n).where(negative, idx)
    bad = data[(data < -n) | (data >= n)]
    if bad.size:
        raise LIndexError(
            f"__getitem__: index {int(bad.ravel()[0])} is out of bounds for dimension {axis} "
            f"with size {n} (indexed shape {shape})"
        )
    if not (data < 0).any():
        return idx
    return idx.new_tensor(np.where(data < 0, data + n, data), device="cpu")


def getitem(x, index):
    """``x[index]`` with NumPy/PyTorch basic indexing: ints (negative ones count from the end),
    slices with positive steps, ``None`` (a new axis of size 1), one ``...``; and one integer
    tensor, list or array on one axis (an ``index_select``; negative indices wrap).

    Raises:
        lazyvic.errors.IndexError: an index out of bounds, too many indices, two ellipses.
        UnsupportedOpError: more than one index tensor, or a boolean mask (a data-dependent shape).
        ValueError: a slice step that is not positive.
    """
    if not isinstance(index, tuple):
        index = (index,)
    # A single integer tensor / list on one axis -> index_select.
    tensor_axes = [i for i, ix in enumerate(index) if _is_tensor(ix) or isinstance(ix, (list, np.ndarray))]
    if tensor_axes:
        if len(tensor_axes) > 1 or any(ix is None or ix is Ellipsis for ix in index):
            raise UnsupportedOpError("__getitem__: advanced indexing supports one integer tensor on one axis")
        k = tensor_axes[0]
        idx = index[k] if _is_tensor(index[k]) else x.new_tensor(index[k], dtype=dt.int64, device="cpu")
        if idx.dtype is dt.bool_:
            raise UnsupportedOpError("__getitem__: boolean masks give data-dependent shapes; use where() instead")
        rest = x[index[:k] + (slice(None),) * (x.ndim - k)] if k else x
        # Integer indices before the tensor drop their axes.
        axis = k - sum(1 for ix in index[:k] if not isinstance(ix, slice))
        idx = _wrap_negative_index(idx, rest.shape, axis)
        if not _is_tensor(index[k]):
            idx = idx.to(x.device)  # list or array indices join the indexed tensor's device
        if idx.ndim != 1:
            flat = rest.index_select(axis, idx.reshape(-1))
            return flat.reshape(*flat.shape[:axis], *idx.shape, *flat.shape[axis + 1 :])
        out = rest.index_select(axis, idx)
        tail = index[k + 1 :]
        return out[(slice(None),) * (axis + 1) + tail] if tail else out
    n_real = sum(1 for ix in index if ix is not None and ix is not Ellipsis)
    if n_real > x.ndim:
        raise LIndexError(f"__getitem__: too many indices ({n_real}) for tensor of shape {x.shape}")
    if sum(1 for ix in index if ix is Ellipsis) > 1:
        raise LIndexError("__getitem__: an index can only have a single ellipsis")
    expanded = []
    for ix in index:
        if ix is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(ix)
    expanded.extend([slice(None)] * (x.ndim - sum(1 for ix in expanded if ix is not None)))
    starts, stops, steps, out_shape = [], [], [], []
    axis = 0
    for ix in expanded:
        if ix is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(ix, slice):
            if ix.step is not None and int(ix.step) <= 0:
                raise ValueError(f"__getitem__: slice step must be positive, got {ix.step}")
            a, b, s = ix.indices(n)
            b = max(b, a)
            starts.append(a)
            stops.append(b)
            steps.append(s)
            out_shape.append(max(0, -(-(b - a) // s)))
        elif isinstance(ix, (int, np.integer)) and not isinstance(ix, bool):
            i = int(ix)
            if not -n <= i < n:
                raise LIndexError(f"__getitem__: index {i} is out of bounds for dimension {axis} with size {n}")
            i %= n
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        else:
            raise LIndexError(f"__getitem__: unsupported index {ix!r} of type {type(ix).__name__}")
        axis += 1
    out = x._slice(starts, stops, steps)
    return out.reshape(*out_shape)


def cat(tensors: Sequence, dim: int = 0):
    """Concatenate along ``dim`` (as zero-padding plus sums, which fuse into one kernel).

    Dtypes promote as in PyTorch; shapes must agree outside ``dim``.

    Raises:
        ShapeError: an empty list, or shapes that differ outside ``dim``.
    """
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: expected a non-empty list of tensors")
    d = dt.promote(tensors[0].dtype, tensors[0].dtype)
    for t in tensors[1:]:
        d = dt.promote(d, t.dtype)
    ref = tensors[0]
    axis = norm_axis(dim, ref.ndim, "cat")
    for t in tensors[1:]:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref.shape)) if i != axis):
            raise ShapeError(f"cat: shapes {[x.shape for x in tensors]} differ outside dim {dim}")
    total = sum(t.shape[axis] for t in tensors)
    out, start, pieces = None, 0, []
    for t in tensors:
        t = t.to(d)
        pieces.append(t)
        n = t.shape[axis]
        pads = tuple((start, total - start - n) if i == axis else (0, 0) for i in range(t.ndim))
        piece = t._pad(pads)
        out = piece if out is None else (out + piece if d is not dt.bool_ else out | piece)
        start += n
    return mark(out, "Concat", tuple(pieces), axis=axis)


def stack(tensors: Sequence, dim: int = 0):
    """Join same-shape tensors along a new axis ``dim``.

    Raises:
        ShapeError: an empty list, or tensors of different shapes.
    """
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: expected a non-empty list of tensors")
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all tensors must have the same shape, got {[t.shape for t in tensors]}")
    d = norm_axis(dim, tensors[0].ndim + 1, "stack")
    return cat([t.unsqueeze(d) for t in tensors], d)
