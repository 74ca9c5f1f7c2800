"""Gathers and scatters along one axis, and the selections whose size is data: ``scatter`` (src and
value forms, ``reduce="add"``), ``index_add``, ``index_fill``, ``index_copy``, ``take``,
``take_along_dim``, ``masked_select``, ``unique`` (PyTorch's names, signatures and errors).

Scatters are compositions of the ``scatter_add`` primitive and ``where``: the positions written are
those an ``scatter_add`` of ones reaches. Where PyTorch leaves the result of a repeated index
undefined (``scatter``, ``index_copy``), a repeated position gets the mean of its values.
``masked_select`` and ``unique`` are sync points (their output size is data). Written over the
tensors they are handed, so this module sits below :mod:`lazyvic.tensor`, whose methods these
functions are.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, ShapeError, UnsupportedOpError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.indexing import _host_data, _wrap_negative_index
from lazyvic.shapes import broadcast_shapes, norm_axis


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def _long(x, index, opname: str):
    if not _is_tensor(index):
        index = x.new_tensor(np.asarray(index, dtype=np.int64), dtype=dt.int64)
    if index.dtype.category != 1:
        raise LIndexError(f"{opname}: index must be an integer tensor, got {index.dtype.name}")
    return index if index.dtype is dt.int64 else index.to(dt.int64)


def _check_range(opname: str, index, n: int, d: int, shape: tuple) -> None:
    data = _host_data(index)
    if data is None or not data.size:
        return
    bad = data[(data < 0) | (data >= n)]
    if bad.size:
        raise LIndexError(
            f"{opname}: index {int(bad.ravel()[0])} is out of range for dimension {d} with size {n} "
            f"(input shape {shape}, index shape {index.shape})"
        )


def check_index_bounds(opname: str, index, shape: tuple, dim: int) -> None:
    """Raise at the op for a realized index out of range (a pending index is checked when it runs)."""
    data = index._node.data if index._node.op == "buffer" and index._node.device == "cpu" else None
    if data is None or not data.size or data.dtype.kind not in "iu":
        return
    n = shape[dim]
    bad = data[(data < 0) | (data >= n)]
    if bad.size:
        raise LIndexError(
            f"{opname}: index {int(bad.ravel()[0])} is out of range for dimension {dim} "
            f"with size {n} (input shape {shape}, index shape {index.shape})"
        )


def _operand(x, value, dtype):
    """A tensor as it is; lists and arrays as a new tensor of ``dtype`` on ``x``'s device."""
    return value if _is_tensor(value) else x.new_tensor(value, dtype=dtype)


def gather(x, dim: int, index):
    """``out[i][j] = x[index[i][j]][j]`` for dim 0 (PyTorch semantics); ``index`` int64 (or int32),
    of ``x``'s rank, no larger than ``x`` outside ``dim``.

    Raises:
        lazyvic.errors.IndexError: a realized index out of range (a pending one when it runs).
        ShapeError / DTypeError: an index of another rank or dtype.
    """
    index = _operand(x, index, dt.int64)
    d = norm_axis(dim, x.ndim, "gather")
    check_index_bounds("gather", index, x.shape, d)
    return x._gather(index, d)


def scatter_add(x, dim: int, index, src):
    """``x`` with ``src[i][j]`` added at ``[index[i][j]][j]`` (dim 0); repeated indices add up.

    Raises:
        lazyvic.errors.IndexError: a realized index out of range. ShapeError: ``index`` and
        ``src`` of different shapes.
    """
    index = _operand(x, index, dt.int64)
    d = norm_axis(dim, x.ndim, "scatter_add")
    check_index_bounds("scatter_add", index, x.shape, d)
    return x._scatter_add(index, _operand(x, src, x.dtype), d)


def index_select(x, dim: int, index):
    """The slices of ``x`` along ``dim`` at a 1-D integer ``index`` (repeats allowed).

    Raises:
        ShapeError: an index that is not 1-D. lazyvic.errors.IndexError: an index out of range.
    """
    index = _operand(x, index, dt.int64)
    if index.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got shape {index.shape}")
    d = norm_axis(dim, x.ndim, "index_select")
    check_index_bounds("index_select", index, x.shape, d)
    shape = x.shape[:d] + (index.shape[0],) + x.shape[d + 1 :]
    view = (1,) * d + (index.shape[0],) + (1,) * (x.ndim - d - 1)
    return x._gather(index.reshape(*view).expand(*shape), d)


def _hits(x, index, d: int):
    """int64 counts of how often each element of ``x`` is reached by ``index`` along ``d``."""
    return x.new_zeros(*x.shape).to(dt.int64)._scatter_add(index, index.ones_like(), d)


def scatter(x, dim: int, index, src=None, *, value=None, reduce=None):
    """``x`` with ``out[index[i][j]][j] = src[i][j]`` (dim 0; PyTorch's scatter): ``src`` a tensor
    (read over ``index``'s shape) or a number (``value``); ``reduce="add"`` adds instead.

    Raises:
        lazyvic.errors.IndexError: an index out of range. ShapeError: an index larger than ``x``
        or ``src``. UnsupportedOpError: ``reduce="multiply"``.
    """
    if src is None:
        src = value
    if src is None:
        raise ArgumentError("scatter: expected src or value")
    d = norm_axis(dim, x.ndim, "scatter")
    index = _long(x, index, "scatter")
    if index.ndim != x.ndim:
        raise ShapeError(f"scatter: index shape {index.shape} must have the rank of input shape {x.shape}")
    _check_range("scatter", index, x.shape[d], d, x.shape)
    if reduce not in (None, "add"):
        raise UnsupportedOpError(f"scatter: reduce={reduce!r} is not supported (only 'add')")
    if _is_tensor(src):
        if src.ndim != index.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
            raise ShapeError(f"scatter: index shape {index.shape} is larger than src shape {src.shape}")
        src = src._slice([0] * src.ndim, list(index.shape), [1] * src.ndim).to(x.dtype)
    else:
        src = x.new_full((), src).expand(*index.shape)
    if reduce == "add":
        return x.scatter_add(d, index, src)
    counts = _hits(x, index, d)
    work = src.to(dt.int64) if x.dtype is dt.bool_ else src
    sums = work.new_zeros(*x.shape)._scatter_add(index, work, d)
    mean = sums / counts.to(sums.dtype) if sums.dtype.is_floating_point else sums.floor_divide(counts)
    return mean.to(x.dtype).where(counts > 0, x)


def _along(x, index, source, d: int, opname: str):
    """A 1-D ``index`` along ``d`` broadcast to ``source``'s shape (index_add, index_copy)."""
    index = _long(x, index, opname)
    if index.ndim != 1:
        raise ShapeError(f"{opname}: index must be 1-D, got shape {index.shape}")
    want = x.shape[:d] + (index.shape[0],) + x.shape[d + 1 :]
    if tuple(source.shape) != want:
        raise ShapeError(f"{opname}: source shape {source.shape} must be {want} (input {x.shape}, index {index.shape})")
    view = (1,) * d + (index.shape[0],) + (1,) * (x.ndim - d - 1)
    return index.reshape(*view).expand(*want)


def index_add(x, dim: int, index, source, *, alpha=1):
    """``x`` with ``alpha * source[..., i, ...]`` added at ``x[..., index[i], ...]`` along ``dim``
    (repeated indices add up).

    Raises:
        ShapeError: ``source`` not of ``x``'s shape with ``len(index)`` along ``dim``.
        lazyvic.errors.IndexError: an index out of range.
    """
    d = norm_axis(dim, x.ndim, "index_add")
    full = _along(x, index, source, d, "index_add")
    return x.scatter_add(d, full, source if alpha == 1 else source * alpha)


def index_copy(x, dim: int, index, source):
    """``x`` with ``source[..., i, ...]`` written at ``x[..., index[i], ...]`` along ``dim``."""
    d = norm_axis(dim, x.ndim, "index_copy")
    return x.scatter(d, _along(x, index, source, d, "index_copy"), source)


def index_fill(x, dim: int, index, value):
    """``x`` with the slices at ``index`` along ``dim`` set to ``value`` (a number or a 0-d tensor)."""
    d = norm_axis(dim, x.ndim, "index_fill")
    index = _long(x, index, "index_fill").reshape(-1)
    n = x.shape[d]
    _check_range("index_fill", index, n, d, x.shape)
    hit = index.new_zeros(n)._scatter_add(index, index.ones_like(), 0) > 0
    hit = hit.reshape(*(1,) * d, n, *(1,) * (x.ndim - d - 1))
    if _is_tensor(value):
        value = value.reshape(()).to(x.dtype)
    return x.where(~hit, value).to(x.dtype)


def take(x, index):
    """The elements of the flattened ``x`` at ``index`` (any shape; negative indices wrap)."""
    index = _long(x, index, "take")
    flat = x.reshape(-1)
    index = _wrap_negative_index(index, flat.shape, 0, "take")
    return flat.index_select(0, index.reshape(-1)).reshape(*index.shape)


def take_along_dim(x, indices, dim=None):
    """``gather`` along ``dim`` after broadcasting ``x`` and ``indices`` over the other axes; the
    flattened ``x`` at the flattened ``indices`` when ``dim`` is None.

    Raises:
        ShapeError: ``indices`` of another rank, or shapes that do not broadcast.
    """
    indices = _long(x, indices, "take_along_dim")
    if dim is None:
        return x.reshape(-1).gather(0, indices.reshape(-1))
    d = norm_axis(dim, x.ndim, "take_along_dim")
    if indices.ndim != x.ndim:
        raise ShapeError(f"take_along_dim: indices shape {indices.shape} must have the rank of input shape {x.shape}")
    rest = broadcast_shapes(
        x.shape[:d] + (1,) + x.shape[d + 1 :], indices.shape[:d] + (1,) + indices.shape[d + 1 :], "take_along_dim"
    )
    xs = rest[:d] + (x.shape[d],) + rest[d + 1 :]
    ix = rest[:d] + (indices.shape[d],) + rest[d + 1 :]
    return x.expand(*xs).gather(d, indices.expand(*ix))


def masked_select(x, mask):
    """The elements of ``x`` where ``mask`` (broadcast with it) is true, as a 1-D tensor in
    row-major order. A sync point: the mask is computed first (the count is data).

    Raises:
        ShapeError: shapes that do not broadcast.
    """
    if not _is_tensor(mask):
        mask = x.new_tensor(np.asarray(mask, dtype=bool), dtype=dt.bool_)
    shape = broadcast_shapes(x.shape, mask.shape, "masked_select")
    flat_mask = mask.bool().expand(*shape).reshape(-1)
    positions = np.flatnonzero(np.asarray(flat_mask.numpy()))
    return x.expand(*shape).reshape(-1).index_select(0, x.new_tensor(positions.astype(np.int64), dtype=dt.int64))


def unique(x, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim=None):  # noqa: A002
    """The distinct values of ``x`` (sorted; of the flattened tensor, or the distinct slices along
    ``dim``), with the inverse indices (``x``'s shape) and counts when asked. A sync point: the
    number of distinct values is data."""
    data = np.asarray(x.numpy())
    axis = None if dim is None else norm_axis(dim, x.ndim, "unique")
    values, inverse, counts = np.unique(data, return_inverse=True, return_counts=True, axis=axis)
    out = [x.new_tensor(values)]
    if return_inverse:
        shape = data.shape if axis is None else (data.shape[axis],)
        out.append(x.new_tensor(np.asarray(inverse, dtype=np.int64).reshape(shape), dtype=dt.int64))
    if return_counts:
        out.append(x.new_tensor(np.asarray(counts, dtype=np.int64), dtype=dt.int64))
    return out[0] if len(out) == 1 else tuple(out)
