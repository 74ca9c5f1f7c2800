"""Movement: Reshape Flatten Unsqueeze Squeeze Concat Split Slice Expand Tile Pad (constant, edge,
reflect, wrap) Trilu DepthToSpace SpaceToDepth CenterCropPad ReverseSequence.

Older versions take as attributes what later ones take as inputs (``NodeContext.attr_input``):
Unsqueeze's and Squeeze's ``axes`` before 13, Split's ``split`` before 13, Slice's ``starts``,
``ends`` and ``axes`` before 10 (Slice-1 has no steps), Pad's ``pads`` and ``value`` before 11.
The other versions before 13 differ only in the element types they allow or in allowing negative
axes (Concat, Flatten, Squeeze, Unsqueeze and Split from 11), which every version here reads.

Transpose comes from the op table (``converters/optable.py``). Shapes, starts/ends, axes,
repeats and pads are inputs in ONNX and Python values in lazyvic: they are read from constants
(``ctx.ints``), and each op folds with NumPy when its data is a constant too. Folds that can
grow their input (Concat, Expand, Tile, Pad) and Pad's index tables reserve their result's size
first (``NodeContext.reserve``): the sizes come from the model.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import functional as F
from lazyvic.creation import tril, triu
from lazyvic.indexing import cat
from lazyvic.interop.onnx.context import const_tensor, shape_of
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor


def pad_axes(x: Tensor, pairs, value) -> Tensor:
    """Pad the trailing len(pairs) axes with ``value``; ``pairs`` are (begin, end) in axis order."""
    if not any(b or e for b, e in pairs):
        return x
    return F.pad(x, [v for b, e in reversed(pairs) for v in (b, e)], value=value)


# ------------------------------------------------------------------ reshapes
def _reshape_target(ctx, shape: tuple, target: list) -> tuple:
    allowzero = ctx.attr("allowzero", 0) if ctx.version >= 14 else 0
    out = []
    for i, s in enumerate(target):
        if s == 0 and not allowzero:
            if i >= len(shape):
                raise ctx.error(f"shape {target} copies dimension {i} (a 0) of an input of rank {len(shape)}")
            s = shape[i]
        out.append(s)
    if out.count(-1) > 1:
        raise ctx.error(f"shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        total = math.prod(shape)
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape an input of shape {shape} to {target}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(shape) or any(s < 0 for s in out):
        raise ctx.error(f"cannot reshape an input of shape {shape} ({math.prod(shape)} elements) to {target}")
    return tuple(out)


@register(
    "Reshape",
    since=(5, 13, 14, 19, 21, 23, 24, 25),
    fold=lambda ctx, a, s: a.reshape(_reshape_target(ctx, a.shape, ctx.ints(s, "shape"))),
)
def reshape(ctx, a, s):
    x = ctx.tensor(a)
    return x.reshape(*_reshape_target(ctx, x.shape, ctx.ints(s, "shape")))


def _flatten_shape(ctx, shape):
    axis = int(ctx.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise ctx.error(f"axis {axis} is out of range for rank {len(shape)}")
    if axis < 0:
        axis += len(shape)
    return math.prod(shape[:axis]), math.prod(shape[axis:])


@register("Flatten", since=(1, 9, 11, 13, 21, 23, 24, 25), fold=lambda ctx, a: a.reshape(_flatten_shape(ctx, a.shape)))
def flatten(ctx, a):
    x = ctx.tensor(a)
    return x.reshape(*_flatten_shape(ctx, x.shape))


def _unsqueeze_shape(ctx, shape, axes_value):
    axes = ctx.ints(ctx.attr_input("axes", axes_value, 13), "axes")
    rank = len(shape) + len(axes)
    axes = sorted(ctx.axis(a, rank, "axes entry") for a in axes)
    if len(set(axes)) != len(axes):
        raise ctx.error(f"axes {axes} has duplicates")
    out = list(shape)
    for a in axes:
        out.insert(a, 1)
    return tuple(out)


_SQUEEZE_VERSIONS = (1, 11, 13, 21, 23, 24, 25)


@register(
    "Unsqueeze",
    since=_SQUEEZE_VERSIONS,
    fold=lambda ctx, a, axes=None: a.reshape(_unsqueeze_shape(ctx, a.shape, axes)),
)
def unsqueeze(ctx, a, axes=None):
    x = ctx.tensor(a)
    return x.reshape(*_unsqueeze_shape(ctx, x.shape, axes))


def _squeeze_shape(ctx, shape, axes_value):
    axes_value = ctx.attr_input("axes", axes_value, 13)
    if axes_value is None:
        return tuple(s for s in shape if s != 1)
    axes = {ctx.axis(a, len(shape), "axes entry") for a in ctx.ints(axes_value, "axes")}
    for a in axes:
        if shape[a] != 1:
            raise ctx.error(f"cannot squeeze axis {a} of size {shape[a]} (input shape {shape})")
    return tuple(s for i, s in enumerate(shape) if i not in axes)


@register(
    "Squeeze",
    since=_SQUEEZE_VERSIONS,
    fold=lambda ctx, a, axes=None: a.reshape(_squeeze_shape(ctx, a.shape, axes)),
)
def squeeze(ctx, a, axes=None):
    x = ctx.tensor(a)
    return x.reshape(*_squeeze_shape(ctx, x.shape, axes))


# ------------------------------------------------------------------ joining and splitting
def _concat_axis(ctx, values):
    ndim = len(shape_of(values[0]))
    return ctx.axis(int(ctx.attr("axis")), ndim)


def _fold_concat(ctx, *values):
    values = [v for v in values if v is not None]
    axis = _concat_axis(ctx, values)
    shape = list(values[0].shape)
    shape[axis] = sum(v.shape[axis] if v.ndim == len(shape) else 0 for v in values)
    ctx.reserve(shape, max(v.dtype.itemsize for v in values))
    return np.concatenate(values, axis=axis)


@register("Concat", since=(4, 11, 13), fold=_fold_concat)
def concat(ctx, *values):
    values = [v for v in values if v is not None]
    axis = _concat_axis(ctx, values)
    tensors = [ctx.tensor(v) for v in values]
    nonempty = [t for t in tensors if t.shape[axis] != 0]
    tensors = nonempty or tensors[:1]
    return tensors[0] if len(tensors) == 1 else cat(tensors, axis)


def _split_sizes(ctx, shape, split_value) -> tuple:
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
    n = shape[axis]
    split_value = ctx.attr_input("split", split_value, 13)
    if split_value is not None:
        sizes = ctx.ints(split_value, "split")
    else:
        parts = int(ctx.attr("num_outputs", 0)) if ctx.version >= 18 else 0
        parts = parts or len(ctx.outputs)
        if ctx.version >= 18 and ctx.attr("num_outputs") is not None:
            chunk = -(-n // parts)
            sizes = [min(chunk, n - i * chunk) for i in range(parts)]
        else:
            if n % parts:
                raise ctx.error(f"cannot split an axis of size {n} into {parts} equal parts")
            sizes = [n // parts] * parts
    if sum(sizes) != n or any(s < 0 for s in sizes):
        raise ctx.error(f"split sizes {sizes} do not add up to {n} (axis {axis} of shape {shape})")
    return axis, sizes


def _fold_split(ctx, a, sizes=None):
    axis, sizes = _split_sizes(ctx, a.shape, sizes)
    return tuple(np.split(a, np.cumsum(sizes)[:-1], axis=axis))


@register("Split", since=(2, 11, 13, 18), fold=_fold_split)
def split(ctx, a, sizes=None):
    x = ctx.tensor(a)
    axis, sizes = _split_sizes(ctx, x.shape, sizes)
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(axis, start, s))
        start += s
    return tuple(out)


# ------------------------------------------------------------------ Slice
def _slice_plan(ctx, shape, starts, ends, axes, steps):
    """Per axis: a Python slice (positive steps) or an index array (negative steps)."""
    starts, ends = ctx.attr_input("starts", starts, 10), ctx.attr_input("ends", ends, 10)
    starts, ends, axes = ctx.ints(starts, "starts"), ctx.ints(ends, "ends"), ctx.attr_input("axes", axes, 10)
    axes = list(range(len(starts))) if axes is None else ctx.ints(axes, "axes")
    steps = [1] * len(starts) if steps is None else ctx.ints(steps, "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    plan = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = ctx.axis(axis, len(shape), "axes entry")
        n = shape[axis]
        if step == 0:
            raise ctx.error("steps must not be 0")
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            plan[axis] = slice(start, max(start, end), step)
        else:
            start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
            plan[axis] = np.arange(start, end, step, dtype=np.int64)
    return plan


def _fold_slice(ctx, a, starts=None, ends=None, axes=None, steps=None):
    out = a
    for axis, p in enumerate(_slice_plan(ctx, a.shape, starts, ends, axes, steps)):
        if isinstance(p, slice):
            out = out[(slice(None),) * axis + (p,)]
        else:
            out = np.take(out, p, axis=axis)
    return out


@register("Slice", since=(1, 10, 11, 13), fold=_fold_slice)
def slice_(ctx, a, starts=None, ends=None, axes=None, steps=None):
    x = ctx.tensor(a)
    plan = _slice_plan(ctx, x.shape, starts, ends, axes, steps)
    x = x[tuple(p if isinstance(p, slice) else slice(None) for p in plan)]
    for axis, p in enumerate(plan):
        if not isinstance(p, slice):  # negative step: pick the indices in order
            x = x.index_select(axis, const_tensor(p)) if p.size else x.narrow(axis, 0, 0)
    return x


# ------------------------------------------------------------------ Expand, Tile
def _expand_shape(ctx, shape, target_value):
    target = ctx.ints(target_value, "shape")
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError:
        raise ctx.error(f"cannot broadcast an input of shape {tuple(shape)} to shape {tuple(target)}") from None


def _fold_expand(ctx, a, s):
    shape = _expand_shape(ctx, a.shape, s)
    ctx.reserve(shape, a.dtype)
    return np.broadcast_to(a, shape).copy()


@register("Expand", since=(8, 13), fold=_fold_expand)
def expand(ctx, a, s):
    x = ctx.tensor(a)
    return x.expand(*_expand_shape(ctx, x.shape, s))


def _tile_repeats(ctx, shape, repeats_value):
    repeats = ctx.ints(repeats_value, "repeats")
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise ctx.error(f"repeats {repeats} must be {len(shape)} non-negative ints (input shape {tuple(shape)})")
    return repeats


def _fold_tile(ctx, a, r):
    repeats = _tile_repeats(ctx, a.shape, r)
    ctx.reserve([rep * n for rep, n in zip(repeats, a.shape)], a.dtype)
    return np.tile(a, repeats)


@register("Tile", since=(6, 13), fold=_fold_tile)
def tile(ctx, a, r):
    x = ctx.tensor(a)
    repeats = _tile_repeats(ctx, x.shape, r)
    # (a, b) tiled (r1, r2): view as (1, a, 1, b), expand to (r1, a, r2, b), flatten pairs.
    inter = [v for s in x.shape for v in (1, s)]
    big = [v for rep, s in zip(repeats, x.shape) for v in (rep, s)]
    return x.reshape(*inter).expand(*big).reshape(*[rep * s for rep, s in zip(repeats, x.shape)])


# ------------------------------------------------------------------ Pad
def _pad_check(ctx):
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect") and not (mode == "wrap" and ctx.version >= 19):
        return f"Pad with mode={mode!r}"
    return None


def _pad_indices(mode: str, n: int, before: int, after: int) -> np.ndarray:
    """Source index of every output position along one axis for edge / reflect / wrap padding."""
    idx = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(idx, 0, n - 1)
    if mode == "wrap":
        return np.mod(idx, n)
    period = 2 * (n - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    idx = np.mod(idx, period) if period else np.zeros_like(idx)
    return np.where(idx >= n, period - idx, idx)


def _pad_plan(ctx, shape, pads_value, axes_value):
    pads = ctx.ints(ctx.attr_input("pads", pads_value, 11), "pads")
    axes = (
        list(range(len(shape)))
        if axes_value is None
        else [ctx.axis(a, len(shape), "axes entry") for a in ctx.ints(axes_value, "axes")]
    )
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must have 2 entries per padded axis ({len(axes)} axes)")
    plan = [(0, 0)] * len(shape)
    for i, a in enumerate(axes):
        plan[a] = (pads[i], pads[i + len(axes)])
    return plan


def _pad_value(ctx, value, dtype) -> object:
    if ctx.version < 11:  # Pad-2: a float attribute
        return np.asarray(ctx.attr("value", 0.0)).astype(dtype).item()
    if value is None:
        return np.zeros((), dtype=dtype).item()
    return ctx.const(value, "constant_value").reshape(-1)[0].item() if ctx.const(value, "constant_value").size else 0


def _fold_pad(ctx, a, pads=None, value=None, axes=None):
    plan = _pad_plan(ctx, a.shape, pads, axes)
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(plan, a.shape))
    widths = [(max(b, 0), max(e, 0)) for b, e in plan]
    cropped = [max(n - max(-b, 0) - max(-e, 0), 0) for (b, e), n in zip(plan, a.shape)]
    ctx.reserve([n + b + e for n, (b, e) in zip(cropped, widths)], a.dtype)
    mode = ctx.attr("mode", "constant")
    if mode != "constant":
        return np.pad(a[crop], widths, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode])
    return np.pad(a[crop], widths, constant_values=_pad_value(ctx, value, a.dtype))


@register("Pad", since=(2, 11, 13, 18, 19, 21, 23, 24, 25), fold=_fold_pad, check=_pad_check)
def pad(ctx, a, pads=None, value=None, axes=None):
    x = ctx.tensor(a)
    plan = _pad_plan(ctx, x.shape, pads, axes)
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(plan, x.shape))]  # negative pads crop
    plan = [(max(b, 0), max(e, 0)) for b, e in plan]
    mode = ctx.attr("mode", "constant")
    if mode == "constant":
        return pad_axes(x, plan, _pad_value(ctx, value, x.dtype.np))
    for axis, (b, e) in enumerate(plan):
        if b or e:
            if x.shape[axis] == 0 or (mode == "reflect" and max(b, e) >= x.shape[axis]):
                raise ctx.error(f"cannot {mode}-pad axis {axis} of size {x.shape[axis]} by {(b, e)}")
            ctx.reserve([x.shape[axis] + b + e], np.int64, f"the index table of axis {axis}")
            x = x.index_select(axis, const_tensor(_pad_indices(mode, x.shape[axis], b, e)))
    return x


@register("CenterCropPad", since=(18,))
def center_crop_pad(ctx, a, shape):
    x = ctx.tensor(a)
    target = ctx.ints(shape, "shape")
    axes = (
        list(range(x.ndim))
        if ctx.attr("axes") is None
        else [ctx.axis(int(v), x.ndim, "axes entry") for v in ctx.attr("axes")]
    )
    if len(target) != len(axes):
        raise ctx.error(f"shape {target} has {len(target)} entries for {len(axes)} axes")
    for axis, size in zip(axes, target):
        n = x.shape[axis]
        if size < n:  # crop: the window starts at floor((n - size) / 2)
            x = x.narrow(axis, (n - size) // 2, size)
        elif size > n:  # pad: the odd pixel goes to the end
            before = (size - n) // 2
            pads = [(0, 0)] * x.ndim
            pads[axis] = (before, size - n - before)
            x = pad_axes(x, pads, 0)
    return x


# ------------------------------------------------------------------ rearrangements
@register("Trilu", since=(14,))
def trilu(ctx, a, k=None):
    x = ctx.tensor(a)
    diagonal = 0 if k is None else ctx.ints(k, "k")[0]
    if x.shape[-2] == 0 or x.shape[-1] == 0:
        return x
    return triu(x, diagonal) if ctx.attr("upper", 1) else tril(x, diagonal)


@register("DepthToSpace", since=(1, 11, 13, 28))
def depth_to_space(ctx, a):
    x = ctx.tensor(a)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if c % (b * b):
        raise ctx.error(f"channels {c} are not a multiple of blocksize**2 = {b * b}")
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@register("SpaceToDepth", since=(1, 13, 28))
def space_to_depth(ctx, a):
    x = ctx.tensor(a)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if h % b or w % b:
        raise ctx.error(f"height {h} and width {w} must be multiples of blocksize {b}")
    y = x.reshape(n, c, h // b, b, w // b, b)
    # Output channels ordered (block row, block column, channel) for DCR, the only order before version 28.
    y = y.permute(0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@register("ReverseSequence", since=(10, 28))
def reverse_sequence(ctx, a, lengths):
    x = ctx.tensor(a)
    t_axis, b_axis = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    lens = ctx.ints(lengths, "sequence_lens")
    t, b = x.shape[t_axis], x.shape[b_axis]
    # index[t, b] (laid out along the time and batch axes): reversed within each batch's length.
    grid = np.tile(np.arange(t)[:, None], (1, b))
    for j, n in enumerate(lens):
        grid[:n, j] = np.arange(n)[::-1]
    shape = [1] * x.ndim
    shape[t_axis], shape[b_axis] = t, b
    index = grid if t_axis < b_axis else grid.T
    index = np.broadcast_to(index.reshape(shape), x.shape)
    return x.gather(t_axis, const_tensor(np.ascontiguousarray(index)))
