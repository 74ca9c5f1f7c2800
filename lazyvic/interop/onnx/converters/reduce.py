"""Reductions: ReduceSum ReduceMean ReduceMax ReduceMin ReduceSumSquare ReduceL1 ReduceL2
ReduceLogSum ReduceLogSumExp ArgMax ArgMin CumSum.

The reduced axes are an input from ReduceSum-13 and from version 18 of the others (before, an
attribute: versions 1, 11 (negative axes) and 12 (ReduceMax/Min of 8-bit integers) read it so);
``noop_with_empty_axes`` with no axes reduces nothing (the elementwise part, x*x or
|x|, still applies, as in the onnx reference implementation). lazyvic cannot reduce an empty
axis: such a reduction is its identity, computed with NumPy.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.registry import register


def _axes(ctx, ndim: int, axes_value, input_since: int) -> tuple | None:
    """Axes to reduce (a tuple), or None for 'return the input' (noop_with_empty_axes)."""
    if ctx.version >= input_since:
        axes = None if axes_value is None else ctx.ints(axes_value, "axes")
    else:
        axes = ctx.attr("axes")
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(ndim))
    return tuple(sorted({ctx.axis(int(a), ndim, "axes entry") for a in axes}))


def _keep(ctx) -> bool:
    return bool(ctx.attr("keepdims", 1))


def _empty(x, axes) -> bool:
    return any(x.shape[i] == 0 for i in axes)


def _numpy_fold(reduce, input_since: int = 18, identity=None):
    """The fold of a reduction: ``reduce(a, axes, keepdims)`` in NumPy, in the input's dtype;
    ``identity(dtype)`` fills an empty max / min (NumPy has none)."""

    def fold(ctx, a, axes_value=None):
        axes = _axes(ctx, a.ndim, axes_value, input_since) or ()
        keep = _keep(ctx)
        if identity is not None and _empty(a, axes):
            shape = tuple(1 if i in axes else s for i, s in enumerate(a.shape) if keep or i not in axes)
            return np.full(shape, identity(a.dtype), dtype=a.dtype)
        with np.errstate(all="ignore"):
            return np.asarray(reduce(a, axes, keep)).astype(a.dtype)

    return fold


def _lowest(dtype):
    """The spec's identity of an empty max: -inf; the lowest integer; False for bool."""
    return -np.inf if dtype.kind == "f" else False if dtype.kind == "b" else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if dtype.kind == "f" else True if dtype.kind == "b" else np.iinfo(dtype).max


def _zeros(x) -> np.ndarray:
    return np.zeros(x.shape, dtype=x.dtype.np)


_fold_sum = _numpy_fold(lambda a, axes, keep: np.sum(a, axis=axes, keepdims=keep), input_since=13)
_fold_mean = _numpy_fold(lambda a, axes, keep: np.mean(a, axis=axes, keepdims=keep))
_fold_max = _numpy_fold(lambda a, axes, keep: np.max(a, axis=axes, keepdims=keep), identity=_lowest)
_fold_min = _numpy_fold(lambda a, axes, keep: np.min(a, axis=axes, keepdims=keep), identity=_highest)
_fold_sum_square = _numpy_fold(lambda a, axes, keep: np.sum(a * a, axis=axes, keepdims=keep))
_fold_l1 = _numpy_fold(lambda a, axes, keep: np.sum(np.abs(a), axis=axes, keepdims=keep))
_fold_l2 = _numpy_fold(lambda a, axes, keep: np.sqrt(np.sum(a.astype(np.float64) ** 2, axis=axes, keepdims=keep)))
_fold_log_sum = _numpy_fold(lambda a, axes, keep: np.log(np.sum(a, axis=axes, keepdims=keep)))
_fold_log_sum_exp = _numpy_fold(
    lambda a, axes, keep: np.log(np.sum(np.exp(a.astype(np.float64)), axis=axes, keepdims=keep))
)


@register("ReduceSum", since=(1, 11, 13), fold=_fold_sum)
def reduce_sum(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _axes(ctx, x.ndim, axes_value, input_since=13)
    if axes is None:
        return x
    if _empty(x, axes):
        return _fold_sum(ctx, _zeros(x), axes_value)
    return x.sum(axes, keepdim=_keep(ctx), dtype=x.dtype)


@register("ReduceMean", since=(1, 11, 13, 18), fold=_fold_mean)
def reduce_mean(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _axes(ctx, x.ndim, axes_value, input_since=18)
    if axes is None:
        return x
    if _empty(x, axes):
        return _fold_mean(ctx, _zeros(x), axes_value)
    if x.dtype.category != 2:
        return x.to(dt.float64).mean(axes, keepdim=_keep(ctx)).to(x.dtype)
    return x.mean(axes, keepdim=_keep(ctx))


@register("ReduceMax", since=(1, 11, 12, 13, 18, 20), fold=_fold_max)
def reduce_max(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _axes(ctx, x.ndim, axes_value, input_since=18)
    if axes is None:
        return x
    if _empty(x, axes):
        return _fold_max(ctx, _zeros(x), axes_value)
    if x.dtype is dt.bool_:
        return x.to(dt.int32).amax(axes, keepdim=_keep(ctx)).to(dt.bool_)
    return x.amax(axes, keepdim=_keep(ctx))


@register("ReduceMin", since=(1, 11, 12, 13, 18, 20), fold=_fold_min)
def reduce_min(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _axes(ctx, x.ndim, axes_value, input_since=18) or ()
    if _empty(x, axes):
        return _fold_min(ctx, _zeros(x), axes_value)
    if not axes:
        return x
    if x.dtype is dt.bool_:
        return x.to(dt.int32).amin(axes, keepdim=_keep(ctx)).to(dt.bool_)
    return x.amin(axes, keepdim=_keep(ctx))


def _sum_of(ctx, x, term, axes_value, fold, finish=None):
    """``finish(the sum of term over the axes)`` in x's dtype; ``term`` (x * x, |x|, ...) is
    computed from x by the caller, in float64 where an integer x would lose the result."""
    axes = _axes(ctx, x.ndim, axes_value, input_since=18) or ()  # (): noop_with_empty_axes
    if _empty(x, axes):
        return fold(ctx, _zeros(x), axes_value)
    out = term.sum(axes, keepdim=_keep(ctx), dtype=term.dtype) if axes else term
    if finish is not None:
        out = finish(out)
    return out.to(x.dtype)


@register("ReduceSumSquare", since=(1, 11, 13, 18), fold=_fold_sum_square)
def reduce_sum_square(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    return _sum_of(ctx, x, x * x, axes_value, _fold_sum_square)


@register("ReduceL1", since=(1, 11, 13, 18), fold=_fold_l1)
def reduce_l1(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    return _sum_of(ctx, x, x.abs(), axes_value, _fold_l1)


def _as_float(x):
    return x if x.dtype.is_floating_point else x.to(dt.float64)


@register("ReduceL2", since=(1, 11, 13, 18), fold=_fold_l2)
def reduce_l2(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    xf = _as_float(x)
    return _sum_of(ctx, x, xf * xf, axes_value, _fold_l2, finish=lambda s: s.sqrt())


@register("ReduceLogSum", since=(1, 11, 13, 18), fold=_fold_log_sum)
def reduce_log_sum(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    return _sum_of(ctx, x, _as_float(x), axes_value, _fold_log_sum, finish=lambda s: s.log())


@register("ReduceLogSumExp", since=(1, 11, 13, 18), fold=_fold_log_sum_exp)
def reduce_log_sum_exp(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _axes(ctx, x.ndim, axes_value, input_since=18) or ()
    if _empty(x, axes):
        return _fold_log_sum_exp(ctx, _zeros(x), axes_value)
    if not axes:
        return x
    m = x.amax(axes, keepdim=True).detach()  # log(sum(exp(x - m))) + m: no overflow
    out = (x - m).exp().sum(axes, keepdim=True).log() + m
    return out if _keep(ctx) else out.squeeze(axes)


# ------------------------------------------------------------------ arg reductions, CumSum
@register("ArgMax", since=(1, 11, 12, 13))
def arg_max(ctx, a):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", 0)), x.ndim)
    keep = _keep(ctx)
    if x.dtype is dt.bool_:
        x = x.to(dt.int32)
    if ctx.attr("select_last_index", 0):
        n = x.shape[axis]
        flipped = x.index_select(axis, const_tensor(np.arange(n - 1, -1, -1, dtype=np.int64)))
        return (n - 1) - flipped.argmax(axis, keepdim=keep)
    return x.argmax(axis, keepdim=keep)


@register("ArgMin", since=(1, 11, 12, 13))
def arg_min(ctx, a):
    x = ctx.tensor(a)
    x = x.to(dt.int32) if x.dtype is dt.bool_ else x
    # argmin(x) is argmax(-x); for integers the lowest value has no negation, so compare as float64.
    neg = -(x if x.dtype.is_floating_point else x.to(dt.float64))
    return arg_max(ctx, neg)


def _cumsum_matrix(n: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """T with (x @ T)[i] = the (exclusive / reversed) running sum of x up to i."""
    j, i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    if reverse:
        return (j > i) if exclusive else (j >= i)
    return (j < i) if exclusive else (j <= i)


@register("CumSum", since=(11, 14))
def cum_sum(ctx, a, axis_value):
    # A running sum is a matmul with a triangular 0/1 matrix (lazyvic has no scan primitive).
    x = ctx.tensor(a)
    axis = ctx.axis(ctx.ints(axis_value, "axis")[0], x.ndim)
    n = x.shape[axis]
    work = x if x.dtype.is_floating_point else x.to(dt.float64)  # exact integer sums below 2**53
    moved = work.transpose(axis, -1) if axis != x.ndim - 1 else work
    ctx.reserve((3, n, n), np.int64, "the running-sum matrix and its index grids")  # n x n: quadratic in the axis
    tri = _cumsum_matrix(n, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))).astype(work.dtype.np)
    out = moved @ const_tensor(tri)
    out = out.transpose(axis, -1) if axis != x.ndim - 1 else out
    return out.to(x.dtype)
