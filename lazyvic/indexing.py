"""Indexing, slicing and joining: ``x[...]`` read and written, ``nonzero``, ``cat``, ``stack``.

PyTorch's rules: integer and slice indices first (basic indexing, a view), then the index tensors
(lists, arrays, integer tensors) broadcast together; their axes replace the indexed ones where they
stand when the tensors index adjacent axes, else they go first. A boolean mask stands for the
integer positions of its true elements: its count is data, so a mask read (``x[x > 0]``) is a sync
point (the mask is computed, then the rows are gathered). A write ``x[index] = value`` is lazy: the
new value is a ``where`` over the old one (basic indices, scalar values under a mask) or a scatter
at the flat positions of the indexed elements, rebound in place through ``Tensor._assign``, with
PyTorch's gradients for an in-place op on a non-leaf tensor.

Written over the tensors they are handed (their methods: ``_slice``, ``_pad``, ``reshape``,
``index_select``, ``new_tensor``, ``_scatter_add`` ...), so this module sits below
:mod:`lazyvic.tensor` (``Tensor.__getitem__`` calls :func:`getitem`) and never imports it.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.ops.join import MIN_PIECES
from lazyvic.shapes import broadcast_shapes, norm_axis
from lazyvic.trace.composite import mark


def _is_tensor(value) -> bool:
    """A lazyvic Tensor (checked by its node: this module cannot import the class)."""
    return hasattr(value, "_node")


def _host_data(t):
    """The NumPy value of a realized CPU tensor, else None (a pending or device value)."""
    node = t._node
    return node.data if node.op == "buffer" and node.device != "cuda" else None


def _is_int(ix) -> bool:
    return isinstance(ix, (int, np.integer)) and not isinstance(ix, (bool, np.bool_))


def _as_index(x, ix):
    """A list / array index as a CPU tensor (int64, or bool for masks); tensors as they are."""
    if _is_tensor(ix):
        return ix
    arr = np.asarray(ix)
    if arr.dtype == np.bool_:
        return x.new_tensor(arr, dtype=dt.bool_, device="cpu")
    if arr.size and arr.dtype.kind not in "iu":
        raise LIndexError(f"__getitem__: index arrays must hold integers or bools, got {arr.dtype}")
    return x.new_tensor(arr.astype(np.int64), dtype=dt.int64, device="cpu")


def nonzero(x, as_tuple: bool = False):
    """Indices of the non-zero elements, in row-major order: a (count, ndim) int64 tensor, or one
    1-D tensor per axis with ``as_tuple``. A sync point: the count is data."""
    data = np.asarray(x.numpy())
    found = np.nonzero(data) if data.ndim else np.nonzero(data.reshape(1))
    cols = [x.new_tensor(np.ascontiguousarray(c, dtype=np.int64), dtype=dt.int64) for c in found]
    if as_tuple:
        return tuple(cols)
    return x.new_tensor(np.stack(found, axis=1).astype(np.int64), dtype=dt.int64)


def _expand_masks(x, index: tuple, opname: str) -> tuple:
    """Each boolean mask (a bool tensor, array or list of k dims) replaced by k integer index
    tensors, its true positions (a sync point for a pending mask); ellipses expanded."""
    out, axis = [], 0
    n_real = sum(
        (ix.ndim if _is_tensor(ix) and ix.dtype is dt.bool_ else 1)
        for ix in index
        if ix is not None and ix is not Ellipsis
    )
    if sum(1 for ix in index if ix is Ellipsis) > 1:
        raise LIndexError(f"{opname}: an index can only have a single ellipsis")
    for ix in index:
        if ix is Ellipsis:
            k = max(x.ndim - n_real, 0)
            out.extend([slice(None)] * k)
            axis += k
        elif _is_tensor(ix) and ix.dtype is dt.bool_:
            want = x.shape[axis : axis + ix.ndim]
            if ix.shape != want:
                raise LIndexError(
                    f"{opname}: the boolean mask of shape {ix.shape} does not match the indexed "
                    f"dimensions {want} of shape {x.shape} (from dimension {axis})"
                )
            out.extend(nonzero(ix, as_tuple=True) if ix.ndim else [])
            axis += ix.ndim
        else:
            out.append(ix)
            axis += ix is not None
    return tuple(out)


def _basic_plan(shape: tuple, index: tuple, opname: str):
    """Basic indexing of ``shape`` by ints, slices and None (index tensors stand as full slices):
    (starts, stops, steps, out_shape, tensor_axes) where ``tensor_axes`` maps each index tensor's
    position in ``index`` to its axis in the result."""
    n_real = sum(1 for ix in index if ix is not None)
    if n_real > len(shape):
        raise LIndexError(f"{opname}: too many indices ({n_real}) for tensor of shape {shape}")
    index = index + (slice(None),) * (len(shape) - n_real)
    starts, stops, steps, out_shape, tensor_axes = [], [], [], [], {}
    axis = 0
    for k, ix in enumerate(index):
        if ix is None:
            out_shape.append(1)
            continue
        n = shape[axis]
        if _is_tensor(ix):
            tensor_axes[k] = len(out_shape)
            ix = slice(None)
        if isinstance(ix, slice):
            if ix.step is not None and int(ix.step) <= 0:
                raise ArgumentError(f"{opname}: slice step must be positive, got {ix.step}")
            a, b, s = ix.indices(n)
            b = max(b, a)
            starts.append(a)
            stops.append(b)
            steps.append(s)
            out_shape.append(max(0, -(-(b - a) // s)))
        elif _is_int(ix):
            i = int(ix)
            if not -n <= i < n:
                raise LIndexError(f"{opname}: index {i} is out of bounds for dimension {axis} with size {n}")
            i %= n
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        else:
            raise LIndexError(f"{opname}: unsupported index {ix!r} of type {type(ix).__name__}")
        axis += 1
    return starts, stops, steps, tuple(out_shape), tensor_axes


def _wrap_negative_index(idx, shape: tuple, axis: int, opname: str = "__getitem__"):
    """Python's negative indices for an index tensor (index_select and gather take only 0..n-1)."""
    if idx.dtype.category != 1:
        raise LIndexError(f"{opname}: index tensors must be integer or bool, got {idx.dtype.name}")
    n = shape[axis]
    # A pending index, or one in device memory, is wrapped lazily (the index op checks its range when it runs).
    data = _host_data(idx)
    if data is None:
        negative = idx < 0
        return (idx + n).where(negative, idx)
    bad = data[(data < -n) | (data >= n)]
    if bad.size:
        raise LIndexError(
            f"{opname}: index {int(bad.ravel()[0])} is out of bounds for dimension {axis} "
            f"with size {n} (indexed shape {shape})"
        )
    if not (data < 0).any():
        return idx
    return idx.new_tensor(np.where(data < 0, data + n, data), device="cpu")


def _advanced(y, axes: list, indices: list, opname: str):
    """``y`` indexed on ``axes`` by integer tensors broadcast together (PyTorch's advanced
    indexing): the broadcast shape replaces the axes where the first stands when they are
    adjacent, else it goes first."""
    idx = []
    for a, t in zip(axes, indices):
        t = _wrap_negative_index(t, y.shape, a, opname)
        idx.append(t if t.device == y.device else t.to(y.device))
    shape = idx[0].shape
    for t in idx[1:]:
        shape = broadcast_shapes(shape, t.shape, opname)
    if len(axes) == 1:
        a, t = axes[0], idx[0]
        flat = y.index_select(a, t.reshape(-1))
        return flat.reshape(*flat.shape[:a], *t.shape, *flat.shape[a + 1 :])
    rest = [i for i in range(y.ndim) if i not in axes]
    sizes = [y.shape[a] for a in axes]
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    datas = [_host_data(t) for t in idx]
    if all(d is not None for d in datas):  # known now: one realized flat index (a load in the kernel)
        flat_np = sum(np.asarray(d, dtype=np.int64) * s for d, s in zip(datas, strides))
        linear = y.new_tensor(np.broadcast_to(flat_np, shape).reshape(-1), dtype=dt.int64)
    else:
        linear = None
        for t, s in zip(idx, strides):
            term = t.to(dt.int64) * s if s != 1 else t.to(dt.int64)
            linear = term if linear is None else linear + term
        linear = linear.expand(*shape).reshape(-1)
    moved = y.permute(*axes, *rest)
    flat = moved.reshape(math.prod(sizes), *moved.shape[len(axes) :])
    out = flat.index_select(0, linear).reshape(*shape, *moved.shape[len(axes) :])
    first = axes[0]
    if axes == list(range(first, first + len(axes))) and first:
        # Adjacent index tensors: their broadcast axes stand where the indexed axes stood.
        n = len(shape)
        out = out.permute(*range(n, n + first), *range(n), *range(n + first, out.ndim))
    return out


def getitem(x, index):
    """``x[index]`` with PyTorch's indexing: ints (negative ones count from the end), slices with
    positive steps, ``None`` (a new axis of size 1), one ``...``; integer tensors, lists or
    arrays on any axes (broadcast together; negative indices wrap); boolean masks (a sync point:
    their count is data).

    Raises:
        lazyvic.errors.IndexError: an index out of bounds, too many indices, two ellipses, a
            mask whose shape does not match the indexed dimensions.
        ValueError: a slice step that is not positive.
    """
    if not isinstance(index, tuple):
        index = (index,)
    if any(isinstance(ix, (list, np.ndarray)) or _is_tensor(ix) for ix in index):
        index = tuple(_as_index(x, ix) if isinstance(ix, (list, np.ndarray)) else ix for ix in index)
        index = _expand_masks(x, index, "__getitem__")
    elif sum(1 for ix in index if ix is Ellipsis) > 1:
        raise LIndexError("__getitem__: an index can only have a single ellipsis")
    else:
        n_real = sum(1 for ix in index if ix is not None and ix is not Ellipsis)
        expanded = []
        for ix in index:
            expanded.extend([slice(None)] * max(x.ndim - n_real, 0) if ix is Ellipsis else [ix])
        index = tuple(expanded)
    starts, stops, steps, out_shape, tensor_axes = _basic_plan(x.shape, index, "__getitem__")
    out = x._slice(starts, stops, steps).reshape(*out_shape)
    if not tensor_axes:
        return out
    positions = sorted(tensor_axes)
    return _advanced(out, [tensor_axes[k] for k in positions], [index[k] for k in positions], "__getitem__")


# ------------------------------------------------------------------- writes
def _value_for(x, value, shape: tuple, opname: str = "__setitem__"):
    """``value`` as a tensor of ``x``'s dtype broadcast to ``shape``.

    Raises:
        ShapeError: a value whose shape does not broadcast to ``shape``."""
    if not _is_tensor(value):
        if isinstance(value, (bool, int, float, np.number, np.bool_)):
            return x.new_full((), value.item() if isinstance(value, np.generic) else value).expand(*shape)
        value = x.new_tensor(value)
    if value.dtype is not x.dtype:
        value = value.to(x.dtype)
    if value.device != x.device:
        value = value.to(x.device)
    try:
        target = broadcast_shapes(value.shape, shape, opname)
    except ShapeError:
        target = None
    if target != tuple(shape):
        raise ShapeError(
            f"{opname}: a value of shape {value.shape} cannot be broadcast to the indexed shape {tuple(shape)}"
        )
    return value.expand(*shape) if value.shape != tuple(shape) else value


def _shaped(v, shape: tuple):
    """``v`` reshaped to ``shape``; a 0-d value is expanded instead (the lowering cannot compile a
    reshape of a scalar input followed by a pad)."""
    return v.expand(*shape) if v.ndim == 0 else v.reshape(*shape)


def _embed(t, shape: tuple, starts, stops, steps):
    """``t`` (the shape of the basic-indexed region) placed at those positions of a zero tensor of
    ``shape``: per axis, a zero-padded stride (a size-1 axis beside it, padded to ``step``) and
    zeros before and after."""
    for d, (a, _, s) in enumerate(zip(starts, stops, steps)):
        n, length = shape[d], t.shape[d]
        if s > 1 and length:
            lead, tail = t.shape[:d], t.shape[d + 1 :]
            spread = t.reshape(*lead, length, 1, *tail)._pad(
                tuple((0, s - 1) if i == d + 1 else (0, 0) for i in range(t.ndim + 1))
            )
            t = spread.reshape(*lead, length * s, *tail)
        length = t.shape[d]
        after = n - a - length
        t = t._pad(tuple((a, max(after, 0)) if i == d else (0, 0) for i in range(t.ndim)))
        if after < 0:
            t = t.narrow(d, 0, n)
    return t


def _scatter_flat(x, linear, values, unique: bool):
    """``x`` with the elements at flat positions ``linear`` (1-D int64) replaced by ``values``
    (1-D). With positions that may repeat, a repeated position gets the mean of its values
    (PyTorch leaves the result of a repeated index undefined; ``x[i] += v`` stays exact)."""
    shape, n = x.shape, x.numel()
    flat = x.reshape(n)
    work = values.to(dt.int64) if x.dtype is dt.bool_ else values
    sums = work.new_zeros(n)._scatter_add(linear, work, 0)
    counts = linear.new_zeros(n)._scatter_add(linear, linear.ones_like(), 0)
    hit = counts > 0
    if not unique:
        sums = sums / counts.to(sums.dtype) if sums.dtype.is_floating_point else sums.floor_divide(counts)
    new = sums.to(x.dtype).where(hit, flat)
    return new.reshape(*shape)


def setitem(x, index, value) -> None:
    """``x[index] = value``: rebinds ``x`` in place (``Tensor._assign``) to a lazy new value.

    Basic indices (ints, slices, None, ``...``) write through a ``where`` over the old value; a
    boolean mask over leading axes with a one-element value is a ``where`` too (no sync); integer
    index tensors (and masks with tensor values, a sync point) scatter at the flat positions of
    the indexed elements. ``value`` (a number or a tensor) is cast to ``x``'s dtype and broadcast
    to the indexed shape. Repeated positions in index tensors known now keep the last value, as
    PyTorch does on the CPU; in pending index tensors they get the mean of their values.

    Raises:
        lazyvic.errors.IndexError: an index out of range (as ``getitem``).
        ShapeError: a value that does not broadcast to the indexed shape.
        RuntimeError: ``x`` is a leaf that requires grad (outside ``no_grad``).
    """
    if not isinstance(index, tuple):
        index = (index,)
    index = tuple(_as_index(x, ix) if isinstance(ix, (list, np.ndarray)) else ix for ix in index)
    masks = [ix for ix in index if _is_tensor(ix) and ix.dtype is dt.bool_]
    scalar_value = not _is_tensor(value) and np.ndim(value) == 0 or _is_tensor(value) and value.numel() == 1
    if len(index) == 1 and masks and scalar_value and masks[0].shape == x.shape[: masks[0].ndim]:
        mask = masks[0]
        mask = mask if mask.device == x.device else mask.to(x.device)
        mask = mask.reshape(*mask.shape, *(1,) * (x.ndim - mask.ndim)).expand(*x.shape)
        v = value.reshape(()) if _is_tensor(value) else value
        x._assign(_value_for(x, v, x.shape).where(mask, x))
        return
    if masks or any(_is_tensor(ix) for ix in index):
        index = _expand_masks(x, index, "__setitem__")
    else:
        n_real = sum(1 for ix in index if ix is not None and ix is not Ellipsis)
        if sum(1 for ix in index if ix is Ellipsis) > 1:
            raise LIndexError("__setitem__: an index can only have a single ellipsis")
        expanded = []
        for ix in index:
            expanded.extend([slice(None)] * max(x.ndim - n_real, 0) if ix is Ellipsis else [ix])
        index = tuple(expanded)
    starts, stops, steps, out_shape, tensor_axes = _basic_plan(x.shape, index, "__setitem__")
    if not tensor_axes:
        region = tuple(max(0, -(-(b - a) // s)) for a, b, s in zip(starts, stops, steps))
        v = _shaped(_value_for(x, value, out_shape), region)
        inside = v.new_full((), True).to(dt.bool_).expand(*region)
        x._assign(_embed(v, x.shape, starts, stops, steps).where(_embed(inside, x.shape, starts, stops, steps), x))
        return
    linear, keep = _flat_positions(x, index, starts, stops, steps, out_shape, tensor_axes)
    v = _shaped(_value_for(x, value, tuple(linear.shape)), (-1,) if linear.ndim else (1,))
    if keep is None:
        x._assign(_scatter_flat(x, linear.reshape(-1), v, unique=False))
        return
    flat = linear.reshape(-1)
    if keep.size != flat.size:  # a repeated position keeps its last value
        v = v.index_select(0, x.new_tensor(keep, dtype=dt.int64, device=v.device))
        flat = flat[keep]
    x._assign(_scatter_flat(x, x.new_tensor(flat, dtype=dt.int64), v, unique=True))


def _flat_positions(x, index, starts, stops, steps, out_shape, tensor_axes):
    """The flat positions in ``x`` of the elements ``x[index]`` reads, in its result's shape, and
    where each distinct position last occurs among them (sorted).

    Index tensors known now: both in NumPy (an arange of ``x``'s size indexed the same way; ints
    first, then the index arrays, which NumPy places as PyTorch does once the ints are gone).
    Pending ones: a lazy tensor from ``getitem`` itself, applied to a lazy arange of ``x``'s shape
    (a broadcast sum of one small arange per axis), and None."""
    strides = [math.prod(x.shape[d + 1 :]) for d in range(x.ndim)]
    indices = [index[k] for k in sorted(tensor_axes)]
    if all(_host_data(t) is not None for t in indices):
        grid = np.arange(x.numel(), dtype=np.int64).reshape(x.shape)
        view = grid[tuple(slice(a, b, s) for a, b, s in zip(starts, stops, steps))]
        view = view.reshape(out_shape)
        adv = [slice(None)] * view.ndim
        for k in sorted(tensor_axes):
            a = tensor_axes[k]
            data = np.asarray(_host_data(index[k]), dtype=np.int64)
            n = view.shape[a]
            bad = data[(data < -n) | (data >= n)]
            if bad.size:
                raise LIndexError(
                    f"__setitem__: index {int(bad.ravel()[0])} is out of bounds for dimension {a} "
                    f"with size {n} (indexed shape {view.shape})"
                )
            adv[a] = np.where(data < 0, data + n, data)
        linear = view[tuple(adv)]
        flat = linear.reshape(-1)
        _, last_rev = np.unique(flat[::-1], return_index=True)
        keep = np.sort(flat.size - 1 - last_rev)
        return np.ascontiguousarray(linear), keep
    grid = None
    for d, n in enumerate(x.shape):
        axis = x.new_tensor(np.arange(n, dtype=np.int64) * strides[d], dtype=dt.int64)
        term = axis.reshape(*(1,) * d, n, *(1,) * (x.ndim - d - 1))
        grid = term if grid is None else grid + term
    grid = x.new_zeros(()).to(dt.int64) if grid is None else grid
    return getitem(grid.expand(*x.shape), index), None


# ------------------------------------------------------------------ joining
def _cat_tree(pieces: list, axis: int, logical: bool):
    """The pieces joined along ``axis`` as a balanced tree of two-way joins, each the sum (or
    for bool the or) of the two halves zero-padded to their joint size. In the fused kernel an
    element then goes through about 2*log2(k) padding tests for k pieces; a chain of k padded
    pieces made it k (stacking an LSTM's 35 step outputs: 35 tests per element)."""
    if len(pieces) == 1:
        return pieces[0]
    half = len(pieces) // 2
    left, right = _cat_tree(pieces[:half], axis, logical), _cat_tree(pieces[half:], axis, logical)
    a, b = left.shape[axis], right.shape[axis]
    left = left._pad(tuple((0, b) if i == axis else (0, 0) for i in range(left.ndim)))
    right = right._pad(tuple((a, 0) if i == axis else (0, 0) for i in range(right.ndim)))
    return left | right if logical else left + right


def cat(tensors: Sequence, dim: int = 0):
    """Concatenate along ``dim``: four or more pieces are copied into place (the ``cat``
    primitive, ops/join.py); fewer are zero-padded and summed in a balanced tree, which fuses
    into one kernel with their producers and consumers.

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
    pieces = [t.to(d) for t in tensors]
    if len(pieces) >= MIN_PIECES:
        return pieces[0].apply("cat", *pieces, axis=axis)
    out = _cat_tree(pieces, axis, d is dt.bool_)
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
