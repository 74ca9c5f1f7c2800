"""2-D max pooling, NCHW, as one primitive.

    max_pool2d(x; kernel, stride, padding)
        x (N, C, H, W) -> (N, C, oH, oW), the maximum over each kH x kW window of x padded
        with -inf by padding (pH, pW) on both sides; oH = (H + 2*pH - kH) // sH + 1

A primitive because, built from kH*kW strided views (stack and amax, or a chain of
maximum), the fused kernel re-evaluated its producer (ResNet's stem: bias, relu, padding
tests) once per window: 640 us for the stem pool at batch 32 against a window loop over
the materialized input (lowering/cpu/pool_kernels.py). The maximum rounds nothing, and the
kernel and the NumPy reference scan each window in the same order (the first of equal
maxima kept, the first NaN winning), so they give the same bits.

The VJP splits the gradient of each window evenly between its tied maxima (the rule of
amax, which the composite max_pool2d had), written with lazy ops: each window's mask
``x == out``, divided by the window's count of maxima, placed back by the VJP of a slice.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic.dtypes import bool_, get_dtype
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops.opdef import OPS, OpDef, register


def _infer(shapes, dtypes, at):
    (xs,) = shapes
    (kh, kw), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    if len(xs) != 4:
        raise ShapeError(f"max_pool2d: expected input (N, C, H, W), got shape {xs}")
    if min(kh, kw, sh, sw) < 1 or 2 * ph > kh or 2 * pw > kw or min(ph, pw) < 0:
        raise ShapeError(f"max_pool2d: invalid kernel {at['kernel']}, stride {at['stride']} or padding {at['padding']}")
    oh, ow = (xs[2] + 2 * ph - kh) // sh + 1, (xs[3] + 2 * pw - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"max_pool2d: kernel {at['kernel']} larger than the padded input {xs}")
    if not dtypes[0].is_floating_point:
        raise DTypeError(f"max_pool2d: expected a floating-point input, got {dtypes[0].name}")
    return (xs[0], xs[1], oh, ow), dtypes[0]


def _views(xp, at, out_hw):
    """The kH*kW strided windows (N, C, oH, oW) of the padded input, as slice attributes."""
    (kh, kw), (sh, sw), (oh, ow) = at["kernel"], at["stride"], out_hw
    n, c = xp.shape[:2]
    for i in range(kh):
        for j in range(kw):
            yield dict(
                starts=(0, 0, i, j), stops=(n, c, i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1), steps=(1, 1, sh, sw)
            )


def _reference(arrays, at):
    (x,) = arrays
    (ph, pw) = at["padding"]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    shape, _ = _infer((x.shape,), (_dt(x),), at)
    windows = [
        xp[tuple(slice(a, b, s) for a, b, s in zip(v["starts"], v["stops"], v["steps"]))]
        for v in _views(xp, at, shape[2:])
    ]
    # Row-major scan, the first of equal maxima kept and the first NaN winning, as the compiled
    # kernel (lowering/cpu/pool_kernels.py): the same bits, signed zeros and NaN payloads included
    # (np.max's SIMD reduction picks among -0.0 and 0.0 by lane).
    out = windows[0].copy()
    for v in windows[1:]:
        np.copyto(out, v, where=(v > out) | (np.isnan(v) & ~np.isnan(out)))
    return out


def _dt(a):
    return get_dtype(a.dtype)


def _vjp(g, x, out, at):
    (inp,) = x
    ph, pw = at["padding"]
    pads = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    xp = inp._pad(pads)
    if ph or pw:
        inside = np.pad(np.ones(inp.shape[2:], dtype=bool), pads[2:])
        xp = xp.where(xp.new_tensor(inside, dtype=bool_), -math.inf)
    masks = [(xp._slice(**v) == out).to(g.dtype) for v in _views(xp, at, out.shape[2:])]
    share = g / sum(masks[1:], masks[0])
    slice_vjp = OPS["slice"].vjp
    grad = None
    for v, mask in zip(_views(xp, at, out.shape[2:]), masks):
        (part,) = slice_vjp(mask * share, (xp,), None, v)
        grad = part if grad is None else grad + part
    crop = dict(
        starts=(0, 0, ph, pw),
        stops=(inp.shape[0], inp.shape[1], ph + inp.shape[2], pw + inp.shape[3]),
        steps=(1, 1, 1, 1),
    )
    return (grad._slice(**crop),)


def _onnx(b, names, at, shape, dtype):
    (ph, pw) = at["padding"]
    return b.node(
        "MaxPool", list(names), kernel_shape=list(at["kernel"]), strides=list(at["stride"]), pads=[ph, pw, ph, pw]
    )


register(OpDef("max_pool2d", "pool", 1, _infer, _reference, vjp=_vjp, onnx=_onnx))
