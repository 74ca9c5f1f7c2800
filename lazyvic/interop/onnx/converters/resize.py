"""Resize (nearest, linear, cubic; every coordinate_transformation_mode, antialias,
exclude_outside, axes and keep_aspect_ratio_policy from Resize-18) and Upsample.

Resize-10 (inputs X and scales) and Upsample-7 (scales attribute) / -9 (scales input) have only
the nearest and linear modes, with what Resize-11 calls the ``asymmetric`` coordinate
transformation (source x = output x / scale) and, for nearest, onnxruntime's "simple" rounding
(its Upsample kernel serves all three; the spec leaves it open): down when enlarging, up when
shrinking (Resize-10 only: Upsample's scales are at least 1); output sizes are floor(size * scale). Resize-11 is Resize-13 with roi and scales required (either may be empty).

Separable: each resized axis is a constant (m, n) interpolation matrix built with NumPy from the
spec's coordinate and kernel formulas, applied as an index_select (nearest) or a matmul.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import where

_RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _modes(ctx, legacy: bool) -> tuple:
    """(coordinate_transformation_mode, nearest_mode): the attributes, or for Upsample and
    Resize-10 (``legacy``), which have neither, asymmetric coordinates and onnxruntime's "simple"
    rounding (floor when enlarging, ceil when shrinking)."""
    if legacy:
        return "asymmetric", "simple"
    return ctx.attr("coordinate_transformation_mode", "half_pixel"), ctx.attr("nearest_mode", "round_prefer_floor")


def _upsample_check(ctx):
    return _modes_check(ctx, legacy=True)


def _resize_check(ctx):
    return _modes_check(ctx, legacy=ctx.version < 11)


def _modes_check(ctx, legacy: bool):
    mode = ctx.attr("mode", "nearest")
    if legacy and mode not in ("nearest", "linear"):
        return f"{ctx.op}-{ctx.version} with mode={mode!r} (nearest and linear only)"
    coords, nearest = _modes(ctx, legacy)
    known = _RESIZE_COORDINATES + (("half_pixel_symmetric",) if ctx.version >= 19 else ())
    if mode not in ("nearest", "linear", "cubic"):
        return f"Resize with mode={mode!r}"
    if coords not in known:
        return f"Resize with coordinate_transformation_mode={coords!r}"
    if nearest not in _NEAREST_MODES and not legacy:
        return f"Resize with nearest_mode={ctx.attr('nearest_mode')!r}"
    if mode == "nearest" and ctx.attr("antialias", 0):
        return "Resize with mode='nearest' and antialias=1"
    return None


def _resize_source_coords(mode: str, m: int, n: int, scale: float, roi) -> tuple:
    """Source coordinate of each of the m output positions along an axis of n inputs (the spec's
    coordinate_transformation_mode formulas), and the tf_crop_and_resize extrapolation mask."""
    y = np.arange(m, dtype=np.float64)
    width = scale * n  # the output width before rounding
    outside = None
    if mode == "align_corners":
        x = np.zeros(m) if width == 1 else y * (n - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        x = np.full(m, (end - start) * (n - 1) / 2) if width == 1 else y * (end - start) * (n - 1) / (width - 1)
        x = x + start * (n - 1)
        outside = (x < 0) | (x > n - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(m, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        x = n / 2 * (1 - m / width) + (y + 0.5) / scale - 0.5
    else:  # half_pixel
        x = (y + 0.5) / scale - 0.5
    return x, outside


def _resize_taps(ctx, ratio: np.ndarray, scale: float, rule: str) -> tuple:
    """(first tap offset from x0, coefficients (m, taps)) of the interpolation kernel, for source
    coordinates x = x0 + ratio with ratio in (0, 1] (an integer x is x0 + 1)."""
    mode = ctx.attr("mode", "nearest")
    if mode == "nearest":
        if rule == "simple":
            rule = "ceil" if scale < 1.0 else "floor"
        if rule == "round_prefer_floor":
            right = ratio > 0.5
        elif rule == "round_prefer_ceil":
            right = ratio >= 0.5
        else:
            right = np.full(ratio.shape, rule == "ceil")
        right = right | (ratio == 1.0)  # an integer source coordinate is x0 + 1
        return 0, np.stack([~right, right], 1).astype(np.float64)
    antialias = ctx.attr("antialias", 0) and scale < 1.0
    s = min(scale, 1.0) if antialias else 1.0
    reach = 1 if mode == "linear" else 2
    first = int(np.floor(-reach / s) + 1) if antialias else 1 - reach
    offsets = np.arange(first, 1 - first + 1)  # symmetric around the (x0, x0 + 1) gap
    dist = np.abs(offsets[None, :] - ratio[:, None]) * s
    if mode == "linear":
        coeffs = np.clip(1.0 - dist, 0.0, None)
    else:  # Keys' cubic convolution kernel with parameter a
        a = float(ctx.attr("cubic_coeff_a", -0.75))
        d2, d3 = dist * dist, dist * dist * dist
        coeffs = np.where(
            dist <= 1,
            (a + 2) * d3 - (a + 3) * d2 + 1,
            np.where(dist < 2, a * d3 - 5 * a * d2 + 8 * a * dist - 4 * a, 0.0),
        )
    if antialias:
        coeffs = coeffs / coeffs.sum(1, keepdims=True)
    return first, coeffs


def _resize_matrix(ctx, m: int, n: int, scale: float, roi, modes: tuple) -> tuple:
    """The (m, n) interpolation matrix of one axis and its extrapolation mask (or None)."""
    x, outside = _resize_source_coords(modes[0], m, n, scale, roi)
    x0 = np.ceil(x).astype(np.int64) - 1
    first, coeffs = _resize_taps(ctx, x - x0, scale, modes[1])
    index = x0[:, None] + first + np.arange(coeffs.shape[1])[None, :]
    if ctx.attr("exclude_outside", 0):
        coeffs = np.where((index < 0) | (index >= n), 0.0, coeffs)
        total = coeffs.sum(1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    weights = np.zeros((m, n))
    np.add.at(
        weights, (np.repeat(np.arange(m), coeffs.shape[1]), np.clip(index, 0, n - 1).reshape(-1)), coeffs.reshape(-1)
    )  # taps past an edge repeat the edge value
    return weights, outside


def _resize_plan(ctx, shape, roi, scales, sizes) -> tuple:
    """Per axis: (output size, scale, (roi start, roi end)), from scales or sizes (with axes and
    keep_aspect_ratio_policy from Resize-18)."""
    r = len(shape)
    axes = list(range(r))
    if ctx.version >= 18 and ctx.attr("axes") is not None:
        axes = [ctx.axis(int(a), r, "axes entry") for a in ctx.attr("axes")]
    roi_values = None if roi is None else ctx.const(roi, "roi").astype(np.float64).reshape(-1)
    bounds = [(0.0, 1.0)] * r
    if roi_values is not None and roi_values.size:
        if roi_values.size != 2 * len(axes):
            raise ctx.error(f"roi has {roi_values.size} values for {len(axes)} axes")
        for i, a in enumerate(axes):
            bounds[a] = (float(roi_values[i]), float(roi_values[i + len(axes)]))
    scale_values = None if scales is None else ctx.const(scales, "scales").astype(np.float64).reshape(-1)
    if scale_values is not None and scale_values.size:
        if scale_values.size != len(axes):
            raise ctx.error(f"scales has {scale_values.size} values for {len(axes)} axes")
        factors = [1.0] * r
        for i, a in enumerate(axes):
            factors[a] = float(scale_values[i])
        out = [int(f * n) for f, n in zip(factors, shape)]
    else:
        if sizes is None:
            raise ctx.error("one of scales and sizes must be given")
        size_values = ctx.ints(sizes, "sizes")
        if len(size_values) != len(axes):
            raise ctx.error(f"sizes has {len(size_values)} values for {len(axes)} axes")
        out = list(shape)
        for i, a in enumerate(axes):
            out[a] = size_values[i]
        factors = [o / n if n else 1.0 for o, n in zip(out, shape)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch") if ctx.version >= 18 else "stretch"
        if policy != "stretch":
            common = (min if policy == "not_larger" else max)(factors[a] for a in axes)
            factors = [common if a in axes else 1.0 for a in range(r)]
            out = [int(common * shape[a] + 0.5) if a in axes else shape[a] for a in range(r)]
    return axes, out, factors, bounds


@register("Resize", since=(10, 11, 13, 18, 19), check=_resize_check)
def resize(ctx, a, roi=None, scales=None, sizes=None):
    """Separable: each resized axis is a constant (m, n) interpolation matrix built from the spec's
    coordinate and kernel formulas — an index_select for nearest, a matmul for linear and cubic."""
    if ctx.version < 11:  # Resize-10: (X, scales)
        roi, scales = None, roi
    return _resize(ctx, ctx.tensor(a), roi, scales, sizes, _modes(ctx, ctx.version < 11))


@register("Upsample", since=(7, 9), check=_upsample_check)
def upsample(ctx, a, scales=None):
    """Upsample-7: the scales attribute (floats); Upsample-9: the scales input."""
    x = ctx.tensor(a)
    scales = np.asarray(ctx.attr("scales", []), dtype=np.float32) if ctx.version < 9 else scales
    if scales is None or ctx.const(scales, "scales").size != x.ndim:
        raise ctx.error(f"scales must have one value per input axis ({x.ndim})")
    if (ctx.const(scales, "scales") < 1).any():
        raise ctx.error(f"scales must be at least 1 (got {ctx.const(scales, 'scales').tolist()}; Resize shrinks)")
    return _resize(ctx, x, None, scales, None, _modes(ctx, legacy=True))


def _resize(ctx, x, roi, scales, sizes, modes: tuple):
    axes, out, factors, bounds = _resize_plan(ctx, x.shape, roi, scales, sizes)
    y = x
    extrapolation = float(ctx.attr("extrapolation_value", 0.0))
    for axis in axes:
        n, m = y.shape[axis], out[axis]
        if math.isclose(factors[axis], 1.0) and m == n and bounds[axis] == (0.0, 1.0):
            continue
        if m == 0 or n == 0:
            raise ctx.error(f"cannot resize axis {axis} from {n} to {m} elements")
        ctx.reserve((2, m, n), np.float64, f"the interpolation matrix of axis {axis}")  # m from the model's scales
        weights, outside = _resize_matrix(ctx, m, n, factors[axis], bounds[axis], modes)
        if ctx.attr("mode", "nearest") == "nearest":
            y = y.index_select(axis, const_tensor(weights.argmax(1).astype(np.int64)))
        else:
            work = y if y.dtype.is_floating_point else y.to(dt.float64)
            moved = work.transpose(axis, -1)
            y = (moved @ const_tensor(weights.T.astype(work.dtype.np))).transpose(axis, -1)
        if outside is not None and outside.any():
            mask = outside.reshape((m,) + (1,) * (y.ndim - axis - 1))
            y = where(const_tensor(mask), extrapolation, y)
    if not x.dtype.is_floating_point and y.dtype is not x.dtype:
        y = where(y < 0, y - 0.5, y + 0.5).to(x.dtype)
    return y
