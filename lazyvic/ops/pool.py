"""2-D max pooling, NCHW, as one primitive.

    max_pool2d(x; kernel, stride, padding)
        x (N, C, H, W) -> (N, C, oH, oW), the maximum over each kH x kW window of x padded
        with -inf by padding (pH, pW) on both sides; oH = (H + 2*pH - kH) // sH + 1

A primitive because, built from kH*kW strided views (stack and amax, or a chain of
maximum), the fused kernel re-evaluated its producer (ResNet's stem: bias, relu, padding
tests) once per window: 640 us for the stem pool at batch 32 against a window loop over
the materialized input (lowering/cpu/pool_kernels.py). The maximum rounds nothing, and the
kernel and the NumPy reference scan each window in the same order (the first of equal
maxima kept, the last NaN winning, as PyTorch's ``val > max || isnan(val)``), so they give the
same bits.

    max_pool2d_indices(x, values; kernel, stride, padding)
        x (N, C, H, W), values = max_pool2d(x) -> (N, C, oH, oW) int64: the position h*W + w in
        its (n, c) plane of the element each window's maximum is (PyTorch's
        ``return_indices=True``): the first position inside x that equals the value (or is a
        NaN where the value is), so the scan stops at the first match

The VJP adds each window's gradient at that position (scatter_add), so ties go to the first
of equal maxima, as PyTorch's: the window scan is row-major, a NaN wins (the first one), and
padding is never picked.
"""

from __future__ import annotations

import numpy as np

from lazyvic.dtypes import get_dtype, int64
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops.opdef import OpDef, register


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
    # Row-major scan, the first of equal maxima kept and the last NaN winning (PyTorch's rule), as
    # the compiled kernel (lowering/cpu/pool_kernels.py): the same bits, signed zeros and NaN payloads included
    # (np.max's SIMD reduction picks among -0.0 and 0.0 by lane).
    out = windows[0].copy()
    for v in windows[1:]:
        np.copyto(out, v, where=(v > out) | np.isnan(v))
    return out


def _dt(a):
    return get_dtype(a.dtype)


def _vjp(g, x, out, at):
    (inp,) = x
    n, c, h, w = inp.shape
    windows = out.shape[2] * out.shape[3]  # (not -1: an empty batch leaves it undetermined)
    index = inp.apply("max_pool2d_indices", inp, out, **at).reshape(n, c, windows)
    grad = inp.zeros_like().reshape(n, c, h * w)._scatter_add(index, g.reshape(n, c, windows), 2)
    return (grad.reshape(n, c, h, w),)


def indices_reference(arrays, at):
    """max_pool2d_indices: each window scanned in row-major order over its positions inside x
    (padding is never picked), keeping the first of equal maxima and the last NaN (PyTorch's
    indices), as the
    forward picks its value (and as the kernels in lowering/cpu/pool_kernels.py and the CUDA
    library do)."""
    x, values = arrays
    (kh, kw), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    n, c, h, w = x.shape
    oh, ow = values.shape[2:]
    found = np.zeros(values.shape, dtype=bool)
    index = np.zeros(values.shape, dtype=np.int64)
    for i in range(kh):
        rows = np.arange(oh) * sh - ph + i
        for j in range(kw):
            cols = np.arange(ow) * sw - pw + j
            inside = ((rows >= 0) & (rows < h))[:, None] & ((cols >= 0) & (cols < w))[None, :]
            v = x[:, :, np.clip(rows, 0, h - 1)][:, :, :, np.clip(cols, 0, w - 1)]
            take = inside & ((~found & (v == values)) | (np.isnan(v) & np.isnan(values)))
            index = np.where(take, rows[:, None] * w + cols[None, :], index)
            found |= take
    return index


def _indices_infer(shapes, dtypes, at):
    shape, _ = _infer(shapes[:1], dtypes[:1], at)
    if tuple(shapes[1]) != tuple(shape) or dtypes[1] is not dtypes[0]:
        raise ShapeError(
            f"max_pool2d_indices: expected values {shape} of dtype {dtypes[0].name} (max_pool2d of the input), "
            f"got {shapes[1]} of {dtypes[1].name}"
        )
    return shape, int64


def _onnx(b, names, at, shape, dtype):
    (ph, pw) = at["padding"]
    return b.node(
        "MaxPool", list(names), kernel_shape=list(at["kernel"]), strides=list(at["stride"]), pads=[ph, pw, ph, pw]
    )


register(OpDef("max_pool2d", "pool", 1, _infer, _reference, vjp=_vjp, onnx=_onnx))
register(OpDef("max_pool2d_indices", "pool", 2, _indices_infer, indices_reference, differentiable=False))
