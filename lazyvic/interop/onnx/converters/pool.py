"""Pooling: MaxPool (also its Indices output) AveragePool LpPool GlobalAveragePool GlobalMaxPool.

MaxPool and AveragePool take any number of spatial axes, pads, auto_pad, ceil_mode and dilations.
The common 1-D/2-D case (symmetric padding of at most half the kernel, no dilation, no Indices;
for MaxPool no ceil_mode) is functional.max_pool2d / avg_pool2d (primitives); every other case
pads explicitly (-inf for max, 0 for average) and reduces the strided window views.

Older versions lack attributes that later ones add, whose defaults they mean: MaxPool-1 has no
Indices output, storage_order, ceil_mode or dilations (Indices and storage_order from 8, ceil_mode
and dilations from 10), AveragePool-7 no ceil_mode (10), LpPool-2 neither ceil_mode nor dilations
(18); MaxPool-11/-12 and AveragePool-11 only reworded the padding text.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from lazyvic import functional as F
from lazyvic.indexing import stack
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.converters.movement import pad_axes
from lazyvic.interop.onnx.converters.windows import spatial_attrs, spatial_pads
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor


def _window_offsets(kernel, dilations):
    """Each kernel position's offset per spatial axis, row-major over the kernel."""
    return list(itertools.product(*[[i * d for i in range(k)] for k, d in zip(kernel, dilations)]))


def _pooled_sizes(sizes, kernel, strides, dilations) -> list:
    return [(n - ((k - 1) * d + 1)) // s + 1 for n, k, s, d in zip(sizes, kernel, strides, dilations)]


def _window_views(x: Tensor, kernel, strides, dilations) -> list:
    """The strided views of padded x (N, C, *spatial) for every kernel position, each (N, C, *out)."""
    out = _pooled_sizes(x.shape[2:], kernel, strides, dilations)
    views = []
    for offs in _window_offsets(kernel, dilations):
        spans = tuple(slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offs, out, strides))
        views.append(x[(slice(None), slice(None)) + spans])
    return views


def _np_window_sum(a: np.ndarray, kernel, strides, dilations) -> np.ndarray:
    out = _pooled_sizes(a.shape, kernel, strides, dilations)
    total = np.zeros(out, dtype=np.float64)
    for offs in _window_offsets(kernel, dilations):
        total += a[tuple(slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offs, out, strides))]
    return total


def _geometry(ctx, x: Tensor) -> tuple:
    """``(kernel, strides, dilations, pairs, extra)`` of a MaxPool / AveragePool node on ``x``."""
    n_spatial = x.ndim - 2
    kernel = list(ctx.attr("kernel_shape"))
    if n_spatial < 1:
        raise ctx.error(f"input shape {x.shape} has no spatial axes (expected (N, C, ...))")
    strides, dilations = spatial_attrs(ctx, n_spatial, kernel)
    pairs, extra = spatial_pads(ctx, x.shape[2:], kernel, strides, dilations, bool(ctx.attr("ceil_mode", 0)))
    return kernel, strides, dilations, pairs, extra


def _fits_pool2d(x: Tensor, kernel, dilations, pairs, extra) -> bool:
    return (
        x.ndim - 2 <= 2
        and set(dilations) == {1}
        and not any(extra)
        and all(p == q and 2 * p <= k for (p, q), k in zip(pairs, kernel))
    )


def _pool2d(pool, x: Tensor, kernel, strides, pairs) -> Tensor:
    """``pool(x, kernel, stride, padding)`` of functional's 2-D pools; a 1-D input gets a unit height."""
    one_d = x.ndim == 3
    x2 = x.unsqueeze(2) if one_d else x
    lead = [1] if one_d else []
    k2, s2, p2 = lead + kernel, lead + strides, [0] * one_d + [p for p, _ in pairs]
    y = pool(x2, tuple(k2), tuple(s2), tuple(p2))
    return y.squeeze(2) if one_d else y


def _max_pool_indices(x: Tensor, views: list, pairs, kernel, strides, dilations, column_major: bool) -> Tensor:
    """MaxPool's Indices output: the flat index into x of each window's first maximum (spatial axes
    row-major, or column-major for storage_order=1)."""
    spatial = x.shape[2:]
    out = _pooled_sizes([n + b + e for n, (b, e) in zip(spatial, pairs)], kernel, strides, dilations)
    # table[k, n, c, *o]: the flat input index of kernel position k for output cell o of plane (n, c).
    grids = np.meshgrid(*[np.arange(m) * s for m, s in zip(out, strides)], indexing="ij")
    planes = (np.arange(x.shape[0] * x.shape[1]) * math.prod(spatial)).reshape(x.shape[0], x.shape[1], *[1] * len(out))
    table = []
    for offs in _window_offsets(kernel, dilations):
        flat = np.zeros(out, dtype=np.int64)
        axes = list(range(len(spatial)))
        for axis in reversed(axes) if column_major else axes:
            flat = flat * spatial[axis] + (grids[axis] + offs[axis] - pairs[axis][0])
        table.append(planes + flat)
    which = stack(views, 0).argmax(0, keepdim=True)  # (1, N, C, *out): first maximum
    return const_tensor(np.stack(table), device=which.device).gather(0, which).reshape(*which.shape[1:])


@register("MaxPool", since=(1, 8, 10, 11, 12, 22))
def max_pool(ctx, a):
    x = ctx.tensor(a)
    kernel, strides, dilations, pairs, extra = _geometry(ctx, x)
    indices = ctx.wants_output(1)
    # functional.max_pool2d takes floating-point inputs (MaxPool-12 allows int8 and uint8 too:
    # those reduce the window views below, padded with the type's lowest value).
    if not indices and x.dtype.is_floating_point and _fits_pool2d(x, kernel, dilations, pairs, extra):
        return _pool2d(F.max_pool2d, x, kernel, strides, pairs)
    full_pairs = [(p, q + e) for (p, q), e in zip(pairs, extra)]
    low = -math.inf if x.dtype.is_floating_point else np.iinfo(x.dtype.np).min
    views = _window_views(pad_axes(x, full_pairs, low), kernel, strides, dilations)
    y = stack(views, 0).amax(0)
    if not indices:
        return y
    return y, _max_pool_indices(x, views, full_pairs, kernel, strides, dilations, bool(ctx.attr("storage_order", 0)))


@register("AveragePool", since=(7, 10, 11, 19, 22))
def average_pool(ctx, a):
    x = ctx.tensor(a)
    kernel, strides, dilations, pairs, extra = _geometry(ctx, x)
    include_pad = bool(ctx.attr("count_include_pad", 0))
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    # ceil_mode's extra windows are the primitive's: the same rule (the last one starts inside the
    # input or the left padding) and the same divisor (the overhang past the padding not counted).
    if _fits_pool2d(x, kernel, dilations, pairs, [0] * len(extra) if ceil_mode else extra):

        def avg_pool2d(x2, k, s, p):
            return F.avg_pool2d(x2, k, s, p, ceil_mode=ceil_mode, count_include_pad=include_pad)

        return _pool2d(avg_pool2d, x, kernel, strides, pairs)
    full_pairs = [(p, q + e) for (p, q), e in zip(pairs, extra)]
    total = stack(_window_views(pad_axes(x, full_pairs, 0), kernel, strides, dilations), 0).sum(0)
    # The divisor per output cell: the input cells (and, with count_include_pad, the explicit
    # padding but not the ceil_mode overhang) that its window covers.
    mask = np.ones(x.shape[2:])
    if include_pad:
        mask = np.pad(np.pad(mask, pairs, constant_values=1.0), [(0, e) for e in extra])
    else:
        mask = np.pad(mask, full_pairs)
    count = _np_window_sum(mask, kernel, strides, dilations)
    return total * (1.0 / np.maximum(count, 1)).astype(x.dtype.np)


@register("LpPool", since=(2, 11, 18, 22))
def lp_pool(ctx, a):
    """(sum over the window of |x|^p)^(1/p), zero padding (ceil_mode and dilations from LpPool-18)."""
    x = ctx.tensor(a)
    kernel = list(ctx.attr("kernel_shape"))
    strides, dilations = spatial_attrs(ctx, x.ndim - 2, kernel)
    ceil = bool(ctx.attr("ceil_mode", 0)) if ctx.version >= 18 else False
    pairs, extra = spatial_pads(ctx, x.shape[2:], kernel, strides, dilations, ceil)
    p = float(ctx.attr("p", 2))
    powered = x * x if p == 2 else x.abs() if p == 1 else x.abs() ** p
    padded = pad_axes(powered, [(b, e + x_) for (b, e), x_ in zip(pairs, extra)], 0)
    total = stack(_window_views(padded, kernel, strides, dilations), 0).sum(0)
    return total.sqrt() if p == 2 else total if p == 1 else total ** (1.0 / p)


@register("GlobalAveragePool", since=(1, 22))
def global_average_pool(ctx, a):
    x = ctx.tensor(a)
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@register("GlobalMaxPool", since=(1, 22))
def global_max_pool(ctx, a):
    x = ctx.tensor(a)
    return x.amax(tuple(range(2, x.ndim)), keepdim=True)
