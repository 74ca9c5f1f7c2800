"""Gathers and scatters: Gather GatherElements GatherND ScatterND ScatterElements (reduction none
and add) Scatter OneHot.

Versions before 13 differ in the element types they allow and in where negative indices are
allowed (Gather from 11, OneHot from 11 in the spec): negative indices count from the end in
every version here, as onnxruntime reads them. Scatter-9 is ScatterElements.

Constant indices are checked and made non-negative with NumPy; indices computed from data stay
lazy where the op allows it (Gather, GatherElements).
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.interop.onnx.context import const_tensor, is_const
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import where


def _gather_indices(ctx, idx: np.ndarray, n: int) -> np.ndarray:
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise ctx.error(f"index {int(bad.reshape(-1)[0])} is out of range for an axis of size {n}")
    return np.where(idx < 0, idx + n, idx).astype(np.int64)


def _fold_gather(ctx, a, idx):
    axis = ctx.axis(int(ctx.attr("axis", 0)), a.ndim)
    ctx.reserve((*a.shape[:axis], *idx.shape, *a.shape[axis + 1 :]), a.dtype)  # indices may repeat rows
    return np.take(a, _gather_indices(ctx, idx, a.shape[axis]), axis=axis)


@register("Gather", since=(1, 11, 13), fold=_fold_gather)
def gather(ctx, a, idx):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", 0)), x.ndim)
    n = x.shape[axis]
    if is_const(idx) or not idx.is_lazy:
        arr = _gather_indices(ctx, np.asarray(ctx.const(idx, "indices")), n)
        if arr.ndim == 0:
            return x[(slice(None),) * axis + (int(arr),)]
        index = const_tensor(arr.reshape(-1))
        shape = arr.shape
    else:
        index = idx.to(dt.int64)
        index = where(index < 0, index + n, index)
        shape = index.shape
        index = index.reshape(-1)
    out = x.index_select(axis, index)
    return out.reshape(*x.shape[:axis], *shape, *x.shape[axis + 1 :])


@register("GatherElements", since=(11, 13))
def gather_elements(ctx, a, idx):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", 0)), x.ndim)
    n = x.shape[axis]
    if is_const(idx) or not idx.is_lazy:
        index = const_tensor(_gather_indices(ctx, np.asarray(ctx.const(idx, "indices")), n))
    else:
        index = idx.to(dt.int64)
        index = where(index < 0, index + n, index)
    return x.gather(axis, index)


@register("GatherND", since=(11, 12, 13))
def gather_nd(ctx, a, indices):
    x = ctx.tensor(a)
    index = ctx.const(indices, "indices").astype(np.int64)
    batch = int(ctx.attr("batch_dims", 0))
    k = index.shape[-1]
    lead, head, rest = x.shape[:batch], x.shape[batch : batch + k], x.shape[batch + k :]
    if index.shape[:batch] != lead or k > len(x.shape) - batch:
        raise ctx.error(f"indices shape {index.shape} does not fit data shape {x.shape} (batch_dims={batch})")
    tuples = index.reshape(math.prod(lead), -1, k)
    tuples = np.where(tuples < 0, tuples + np.array(head), tuples)
    if ((tuples < 0) | (tuples >= np.array(head))).any():
        raise ctx.error(f"an index tuple is out of range for data shape {x.shape}")
    # Each tuple picks a slice of the flattened (batch, *head) axis of data.
    flat = (
        np.arange(math.prod(lead))[:, None] * math.prod(head)
        + (np.ravel_multi_index(tuple(np.moveaxis(tuples, -1, 0)), head) if k else 0)
    ).reshape(-1)
    picked = x.reshape(math.prod(lead) * math.prod(head), *rest).index_select(0, const_tensor(flat))
    return picked.reshape(*index.shape[:-1], *rest)


# ------------------------------------------------------------------ scatter
def _scatter_check(ctx):
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add"):
        return f"{ctx.op} with reduction={reduction!r} (lazyvic imports 'none' and 'add')"
    return None


def _element_positions(ctx, shape, indices: np.ndarray) -> np.ndarray:
    """ScatterElements: the flat position in data (row-major) of every update element."""
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
    n = shape[axis]
    if ((indices < -n) | (indices >= n)).any():
        raise ctx.error(f"an index is out of range for axis {axis} of size {n}")
    grid = list(np.indices(indices.shape))
    grid[axis] = np.where(indices < 0, indices + n, indices)
    return np.ravel_multi_index(tuple(grid), shape)


def _nd_positions(ctx, shape, indices: np.ndarray) -> np.ndarray:
    """ScatterND: each index tuple addresses a slice data[i0, ..., ik-1]; the flat position in data
    of every update element, shaped like ``updates``."""
    k = indices.shape[-1]
    head, rest = shape[:k], shape[k:]
    tuples = indices.reshape(-1, k)
    if ((tuples < -np.array(head)) | (tuples >= np.array(head))).any():
        raise ctx.error(f"an index tuple is out of range for data shape {shape}")
    tuples = np.where(tuples < 0, tuples + np.array(head), tuples)
    base = np.ravel_multi_index(tuple(tuples.T), head) if k else np.zeros(len(tuples), dtype=np.int64)
    inner = math.prod(rest)
    flat = base[:, None] * inner + np.arange(inner)[None, :]
    return flat.reshape(indices.shape[:-1] + rest)


def _scatter(ctx, data, indices, updates, positions_of):
    """Constant indices: each update element's flat position in data is computed with NumPy; 'none'
    is a select from the updates (the last duplicate wins, in index order), 'add' a scatter_add."""
    x, u = ctx.tensor(data), ctx.tensor(updates)
    index = ctx.const(indices, "indices")
    if index.dtype.kind not in "iu":
        raise ctx.error(f"indices must be an integer tensor, got {index.dtype}")
    positions = positions_of(ctx, tuple(x.shape), index.astype(np.int64))
    if positions.shape != u.shape:
        raise ctx.error(f"updates shape {u.shape} does not fit the indices (expected {positions.shape})")
    flat_x, flat_u = x.reshape(-1), u.reshape(-1)
    if ctx.attr("reduction", "none") == "add":
        return flat_x.scatter_add(0, const_tensor(positions.reshape(-1)), flat_u).reshape(*x.shape)
    source = np.full(math.prod(x.shape), -1, dtype=np.int64)
    source[positions.reshape(-1)] = np.arange(positions.size)
    picked = flat_u.index_select(0, const_tensor(np.maximum(source, 0))) if positions.size else flat_x
    return where(const_tensor(source >= 0), picked, flat_x).reshape(*x.shape)


@register("ScatterND", since=(11, 13, 16, 18), check=_scatter_check)
def scatter_nd(ctx, data, indices, updates):
    return _scatter(ctx, data, indices, updates, _nd_positions)


@register("ScatterElements", since=(11, 13, 16, 18), check=_scatter_check)
def scatter_elements(ctx, data, indices, updates):
    return _scatter(ctx, data, indices, updates, _element_positions)


# Scatter-9 is ScatterElements under its older name (its schema at 11 only marks it deprecated, and
# onnxruntime refuses it there).
register("Scatter", since=(9,), check=_scatter_check)(scatter_elements)


@register("OneHot", since=(9, 11))
def one_hot(ctx, indices, depth, values):
    depth = int(ctx.const(depth, "depth").reshape(-1)[0])
    vals = ctx.const(values, "values").reshape(-1)
    if vals.size != 2:
        raise ctx.error(f"values must hold [off_value, on_value], got {vals.size} values")
    idx = ctx.tensor(indices)
    idx = idx.to(dt.int64) if idx.dtype is not dt.int64 else idx  # float indices truncate, as the spec casts
    idx = where(idx < 0, idx + depth, idx)
    axis = ctx.axis(int(ctx.attr("axis", -1)), idx.ndim + 1)
    classes = const_tensor(np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (idx.ndim - axis)))
    hot = idx.unsqueeze(axis) == classes
    off, on = (const_tensor(v) for v in (vals[0], vals[1]))
    return where(hot, on, off)
