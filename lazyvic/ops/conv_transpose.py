"""2-D transposed convolution, NCHW, as one primitive: the adjoint of conv2d.

    conv_transpose2d(x, w; stride, padding, dilation, groups, out_hw)
        x (N, C_in, H, W), w (C_in, C_out/groups, kH, kW) -> (N, C_out, oH, oW) = out_hw
        out[n, g*C_out/G + o, p*sH + i*dH - top, q*sW + j*dW - left]
            += x[n, g*C_in/G + c, p, q] * w[g*C_in/G + c, o, i, j]
        padding (top, left): how far the output window starts inside the full result (negative:
        outside it); positions outside [0, oH) x [0, oW) are dropped, output elements no input
        reaches are zero (PyTorch's output_padding, ONNX's output_shape)

``torch.nn.functional.conv_transpose2d(x, w, stride=s, padding=p, output_padding=op, dilation=d)``
is this op with padding (p, p) and oH = (H - 1)*sH - 2*p + dH*(kH - 1) + op + 1. It is also the
input gradient of conv2d (the VJP below and ops/conv.py's): the same weights, no zeros inserted
between the gradient's elements and no flipped kernel, so a strided convolution's input gradient
costs what its forward costs (before: s_h*s_w times that, on the zeros).

Computed as Caffe's and PyTorch's CPU "col2im" path: one BLAS product per group (batched),
``cols (C_out*T, N*H*W) = w_g^T (C_out/G*T, C_in/G) @ x_g (C_in/G, N*H*W)`` over the T = kH*kW
taps (``transposed_columns``), then col2im adds each column into the output, tap by tap in
row-major order. The reference and the compiled step (``lowering/cpu/steps.ConvTransposeStep``,
col2im in ``lowering/cpu/im2col.col2im``) call the same product on the same chunks of images
and add the taps in the same order, so both give the same bits.
"""

from __future__ import annotations

import numpy as np

from lazyvic.dtypes import get_dtype
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops.blas import group_products, run_products
from lazyvic.ops.conv import _crop_or_pad, images_per_chunk, weight_grad
from lazyvic.ops.opdef import OpDef, register


def _infer(shapes, dtypes, at):
    xs, ws = shapes
    if len(xs) != 4 or len(ws) != 4:
        raise ShapeError(
            f"conv_transpose2d: expected input (N, C_in, H, W) and weight (C_in, C_out/groups, kH, kW), "
            f"got {xs} and {ws}"
        )
    g = at["groups"]
    if g < 1 or ws[0] != xs[1] or xs[1] % g or ws[1] < 1:
        raise ShapeError(f"conv_transpose2d: input {xs} and weight {ws} do not fit groups={g}")
    (sh, sw), (dh, dw), (oh, ow) = at["stride"], at["dilation"], at["out_hw"]
    if min(sh, sw, dh, dw) < 1 or oh < 1 or ow < 1:
        raise ShapeError(
            f"conv_transpose2d: invalid stride {at['stride']}, dilation {at['dilation']} or output size {at['out_hw']}"
        )
    if dtypes[0] is not dtypes[1] or not dtypes[0].is_floating_point:
        raise DTypeError(
            f"conv_transpose2d: expected equal floating-point dtypes, got {dtypes[0].name} and {dtypes[1].name}"
        )
    return (xs[0], ws[1] * g, oh, ow), dtypes[0]


def tap_range(i: int, dilation: int, stride: int, before: int, size_in: int, size_out: int) -> tuple:
    """The input positions ``[lo, hi)`` along one axis whose tap ``i`` lands inside the output:
    ``0 <= p*stride + i*dilation - before < size_out``."""
    lo = max(0, -((i * dilation - before) // stride))
    hi = min(size_in, (size_out - 1 + before - i * dilation) // stride + 1)
    return lo, max(lo, hi)


def transposed_columns(x, w, groups: int, cols, xmat, run=run_products) -> None:
    """cols (C_out*T, N*H*W) = the product of the weights (transposed per group) and x as a
    (C_in, N*H*W) matrix (copied into ``xmat`` when N > 1), per group, in pieces
    (ops/blas.group_products) by ``run`` (ops/blas.run_products, or a compiled step's runner
    making the same BLAS calls on its thread team: lowering/cpu/team.py). x and w C-contiguous."""
    n, cin, h, wd = x.shape
    m = n * h * wd
    if n == 1:
        xm = x.reshape(cin, m)
    else:
        xm = (np.empty(cin * m, dtype=x.dtype) if xmat is None else xmat[: cin * m]).reshape(cin, n, h * wd)
        np.copyto(xm, x.reshape(n, cin, h * wd).transpose(1, 0, 2))
        xm = xm.reshape(cin, m)
    wg = w.reshape(groups, cin // groups, w[0].size)
    wm = wg.transpose(0, 2, 1)
    xg = xm.reshape(groups, cin // groups, m)
    target = cols.reshape(groups, cols.shape[0] // groups, m)
    run(lambda: group_products(wm, xg, target), (wg, xg, target), "transposed")


def col2im_reference(cols: np.ndarray, out: np.ndarray, kernel: tuple, hw: tuple, at: dict) -> None:
    """out (n, C_out, oH, oW) = the columns (C_out*kH*kW, n*H*W) added into place, tap by tap in
    row-major order (each tap reaches an output element at most once)."""
    (sh, sw), (pt, pl), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    n, cout, oh, ow = out.shape
    (kh, kw), (h, wd) = kernel, hw
    c = cols.reshape(cout, kh, kw, n, h, wd)
    out[...] = 0
    for i in range(kh):
        p0, p1 = tap_range(i, dh, sh, pt, h, oh)
        if p0 == p1:
            continue
        y0 = p0 * sh + i * dh - pt
        for j in range(kw):
            q0, q1 = tap_range(j, dw, sw, pl, wd, ow)
            if q0 == q1:
                continue
            x0 = q0 * sw + j * dw - pl
            rows = slice(y0, y0 + (p1 - p0 - 1) * sh + 1, sh)
            columns = slice(x0, x0 + (q1 - q0 - 1) * sw + 1, sw)
            out[:, :, rows, columns] += c[:, i, j, :, p0:p1, q0:q1].transpose(1, 0, 2, 3)


def _reference(arrays, at):
    x, w = np.ascontiguousarray(arrays[0]), np.ascontiguousarray(arrays[1])
    shape, _ = _infer((x.shape, w.shape), (get_dtype(x.dtype), get_dtype(w.dtype)), at)
    n, cout = shape[:2]
    rows, per_image = cout * w.shape[2] * w.shape[3], x.shape[2] * x.shape[3]
    out = np.empty(shape, dtype=x.dtype)
    step = images_per_chunk(n, rows, per_image, x.dtype.itemsize)
    for n0 in range(0, n, step):
        chunk = x[n0 : n0 + step]
        cols = np.empty((rows, chunk.shape[0] * per_image), dtype=x.dtype)
        transposed_columns(chunk, w, at["groups"], cols, None)
        col2im_reference(cols, out[n0 : n0 + step], w.shape[2:], x.shape[2:], at)
    return out


def _vjp(g, inputs, out, at):
    x, w = inputs
    (sh, sw), (pt, pl), (dh, dw), groups = at["stride"], at["padding"], at["dilation"], at["groups"]
    kh, kw = w.shape[2:]
    # x[p] reaches out[p*s + i*d - top]: its gradient is conv2d(g) with g padded by top in front
    # and by what the last window reads past g's end (negative: g's unread rows cropped).
    pads = []
    for axis, s, d, k, before, n in ((2, sh, dh, kh, pt, x.shape[2]), (3, sw, dw, kw, pl, x.shape[3])):
        after = (n - 1) * s + d * (k - 1) - before - (g.shape[axis] - 1)
        g, lo, hi = _crop_or_pad(g, axis, before, after)
        pads += [lo, hi]
    conv_at = dict(stride=(sh, sw), padding=tuple(pads), dilation=(dh, dw), groups=groups)
    gx = g.apply("conv2d", g, w, **conv_at)
    gw = weight_grad(x, g, w.shape, conv_at)
    return gx, gw


def _onnx(b, names, at, shape, dtype):
    # ONNX's output size: s*(in - 1) + output_padding + d*(k - 1) + 1 - begin - end.
    in_hw, kernel = b.shape_of(names[0])[2:], b.shape_of(names[1])[2:]
    pads, out_pad = [], []
    for axis in (0, 1):
        s, d, before, size = at["stride"][axis], at["dilation"][axis], at["padding"][axis], at["out_hw"][axis]
        full = s * (in_hw[axis] - 1) + d * (kernel[axis] - 1) + 1
        end = full - before - size
        pads.append((before, max(end, 0)))
        out_pad.append(max(-end, 0))
    return b.node(
        "ConvTranspose",
        list(names),
        strides=list(at["stride"]),
        pads=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]],
        output_padding=out_pad,
        dilations=list(at["dilation"]),
        group=at["groups"],
    )


register(OpDef("conv_transpose2d", "conv", 2, _infer, _reference, vjp=_vjp, onnx=_onnx))
