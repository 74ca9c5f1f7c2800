"""2-D convolution (cross-correlation), NCHW, as one primitive.

    conv2d(x, w; stride, padding, dilation, groups)
        x (N, C, H, W), w (O, C/groups, kH, kW) -> (N, O, oH, oW)
        padding (top, bottom, left, right): zeros around x (asymmetric: the input VJP needs it)
        oH = (H + top + bottom - dH*(kH-1) - 1) // sH + 1, likewise oW

It stays a primitive (DESIGN.md: matmul and conv lower to library calls). The front end
(``functional.conv2d``) adds the bias as an elementwise op, so it fuses into the epilogue
kernel with the batch norm and activation after it.

Both the reference and the compiled step (``lowering/cpu/steps.ConvStep``) compute the same
im2col matrix ``cols (C*T, N*oH*oW)`` over the T kernel taps that read some input (``taps``)
and the same BLAS products ``w (G, O/G, Cg*T) @ cols (G, Cg*T, N*oH*oW)`` with ``conv_gemm``
below, in the same pieces (ops/blas.product_pieces, fixed by the shapes; the compiled step may
run them on several threads), so an interpreted and a compiled run give the same bits; only
the im2col copy differs (NumPy views here, a Numba kernel there).

The VJP: the input gradient is the transposed convolution of the output gradient by the same
weights (the conv_transpose2d primitive, ops/conv_transpose.py: a product and a col2im, no
zeros inserted by the stride), and the weight gradient is the primitive

    conv2d_weight(x, g; kernel, stride, padding, dilation, groups)
        x (N, C, H, W), g (N, O, oH, oW) -> (O, C/groups, kH, kW)

the forward's im2col columns of x times g, one BLAS product per chunk of images (the chunks
of the forward) accumulated in chunk order: ``dW^T (G, Cg*T, O/G) += cols (G, Cg*T, n*oH*oW)
@ g^T`` (``weight_gemm``; the product of Caffe's and PyTorch's CPU convolution backward),
zero at the taps that read padding only. CUDA runs the same product through cuBLAS
(lowering/cuda/steps.CudaConvWeightStep); depthwise convolutions keep their tap by tap sums.
Measured (benchmarks/resnet18.py --quick, 2 cores): a 3x3 64->64 convolution of 32 32x32
images, forward and both gradients, 655 -> 904 images/s against the convolution of the input
(channels as the batch) by the output gradient that computed it before.
"""

from __future__ import annotations

import numpy as np

from lazyvic.dtypes import get_dtype
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops.blas import MAX_PIECES, group_products, run_products
from lazyvic.ops.join import MIN_PIECES
from lazyvic.ops.opdef import OpDef, register


def out_size(size: int, kernel: int, stride: int, before: int, after: int, dilation: int) -> int:
    return (size + before + after - dilation * (kernel - 1) - 1) // stride + 1


def _infer(shapes, dtypes, at):
    xs, ws = shapes
    if len(xs) != 4 or len(ws) != 4:
        raise ShapeError(f"conv2d: expected input (N, C, H, W) and weight (O, C/groups, kH, kW), got {xs} and {ws}")
    if ws[0] < 1:  # as PyTorch: "expected weight to be at least 1 at dimension 0"
        raise ShapeError(f"conv2d: weight {ws} must have at least one output channel")
    g = at["groups"]
    if g < 1 or xs[1] != ws[1] * g or ws[0] % g:
        raise ShapeError(f"conv2d: input {xs} and weight {ws} do not fit groups={g}")
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    if min(sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ShapeError(f"conv2d: invalid stride {at['stride']}, padding {at['padding']} or dilation {at['dilation']}")
    oh = out_size(xs[2], ws[2], sh, pt, pb, dh)
    ow = out_size(xs[3], ws[3], sw, pl, pr, dw)
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"conv2d: kernel {ws[2:]} (dilation {at['dilation']}) larger than the padded input "
            f"{xs} (padding {at['padding']})"
        )
    if dtypes[0] is not dtypes[1] or not dtypes[0].is_floating_point:
        raise DTypeError(f"conv2d: expected equal floating-point dtypes, got {dtypes[0].name} and {dtypes[1].name}")
    return (xs[0], ws[0], oh, ow), dtypes[0]


def live_taps(size: int, kernel: int, stride: int, before: int, dilation: int, out: int) -> list:
    """Kernel offsets along one axis that read at least one input element, not only padding.

    The im2col rows of the other taps are all zeros, so they are left out of the product
    (here and in the compiled step alike): at 32x32 inputs ResNet-18's last stage is 1x1, and
    8 of the 9 taps of its 3x3 convolutions read padding only. (A non-finite weight on such a
    tap then meets no 0 * inf.)

    Output p reads input i * dilation + p * stride - before, increasing with p: the tap is live
    when the first output that reads at or past 0 exists and reads before ``size``. (Two
    comparisons per tap: with symbolic sizes they are guards that hold for every larger size.)"""
    live = []
    for i in range(kernel):
        start = i * dilation - before  # what output 0 reads
        first = 0 if start >= 0 else -(start // stride)  # the first output reading >= 0
        if first < out and start + first * stride < size:
            live.append(i)
    return live


def taps(x_shape: tuple, w_shape: tuple, at: dict, out_hw: tuple) -> tuple:
    """(live kernel rows, live kernel columns) of a conv2d (see live_taps)."""
    (sh, sw), (pt, _, pl, _), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    rows = live_taps(x_shape[2], w_shape[2], sh, pt, dh, out_hw[0])
    cols = live_taps(x_shape[3], w_shape[3], sw, pl, dw, out_hw[1])
    if not rows or not cols:  # every output reads padding only (zeros): keep the taps, they cost nothing here
        return list(range(w_shape[2])), list(range(w_shape[3]))
    return rows, cols


def tap_weights(w: np.ndarray, rows: list, cols: list) -> np.ndarray:
    """The weights of the live taps, (O, C/groups, len(rows), len(cols)), C-contiguous."""
    o, c, kh, kw = w.shape
    if len(rows) == kh and len(cols) == kw:
        return np.ascontiguousarray(w)
    # One strided column copy per tap: NumPy copies a view whose last axes are 2 wide element
    # by element (221 us for the 2x2 live taps of a (128, 128, 3, 3) weight, 30 us this way).
    src = w.reshape(o * c, kh * kw)
    out = np.empty((o * c, len(rows) * len(cols)), dtype=w.dtype)
    for a, i in enumerate(rows):
        for b, j in enumerate(cols):
            out[:, a * len(cols) + b] = src[:, i * kw + j]
    return out.reshape(o, c, len(rows), len(cols))


def im2col_reference(x: np.ndarray, tap_rows: list, tap_cols: list, at: dict, out_hw: tuple) -> np.ndarray:
    """cols (C*T, N*oH*oW) over the T live taps: row (c, i, j), column (n, p, q) holds the
    padded x[n, c, i*dH + p*sH, j*dW + q*sW]."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    (oh, ow), (n, c) = out_hw, x.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    cols = np.empty((c, len(tap_rows), len(tap_cols), n, oh, ow), dtype=x.dtype)
    for a, i in enumerate(tap_rows):
        for b, j in enumerate(tap_cols):
            h0, w0 = i * dh, j * dw
            cols[:, a, b] = xp[:, :, h0 : h0 + (oh - 1) * sh + 1 : sh, w0 : w0 + (ow - 1) * sw + 1 : sw].transpose(
                1, 0, 2, 3
            )
    return cols.reshape(c * len(tap_rows) * len(tap_cols), n * oh * ow)


def conv_gemm(cols, w, groups: int, out, scratch, run=run_products) -> None:
    """out (N, O, oH, oW) = the product of the weights and cols per group, in pieces
    (ops/blas.group_products) by ``run`` (as pointwise_product's). ``scratch`` holds the
    (O, N*oH*oW) product when N > 1 (then transposed into out). All C-contiguous."""
    n, o, oh, ow = out.shape
    wmat = w.reshape(groups, o // groups, w[0].size)
    colsg = cols.reshape(groups, cols.shape[0] // groups, cols.shape[1])
    if n == 1:  # (O, 1, P) is already out's layout
        target = out.reshape(groups, o // groups, oh * ow)
    else:
        if scratch is None:
            scratch = np.empty((o, cols.shape[1]), dtype=out.dtype)
        target = scratch.reshape(groups, o // groups, cols.shape[1])
    run(lambda: group_products(wmat, colsg, target), (wmat, colsg, target), "conv")
    if n > 1:
        np.copyto(out.reshape(n, o, oh * ow), scratch.reshape(o, n, oh * ow).transpose(1, 0, 2))


# A column matrix above CHUNK_BYTES is built and multiplied CHUNK_COLUMNS columns (whole images)
# at a time, in cache: a 3x3 64->64 convolution of 32 32x32 images (a 75 MB matrix) took 23.4 ms
# in one piece and 19.2 ms in 1024-column chunks (2 cores). The threshold is a core's L2 (1 MiB
# here): ResNet-18 at 32x32 inputs, batch 32, in a compiled forward pass, whose stem matrix
# (147 x 8192, 4.8 MB) was written out of cache and read back by the product: the stem took
# 540 us in 1024-column chunks against 740 us in one piece, and its 3x3 16-channel layers
# (144 x 2048) 150 us against 160-200.
CHUNK_BYTES = 1 << 20
CHUNK_COLUMNS = 1024


def images_per_chunk(n: int, rows: int, columns_per_image: int, itemsize: int) -> int:
    """How many images one im2col + product chunk covers (the reference and the step agree, so
    their BLAS calls have the same shapes and round alike)."""
    if rows * n * columns_per_image * itemsize <= CHUNK_BYTES:
        return max(n, 1)
    return max(1, min(n, CHUNK_COLUMNS // columns_per_image))


def is_depthwise(x_shape: tuple, w_shape: tuple, at: dict) -> bool:
    """Output channel k reads input channel k alone (groups == C, weight (C, 1, kH, kW)):
    MobileNet's and EfficientNet's depthwise convolutions. These are computed directly
    (``depthwise_reference``, lowering/cpu/direct_conv.py), not as im2col and one one-row
    product per group. (With a channel multiplier, C*m output channels, im2col and products
    measured faster: a one-channel 28x28 input to 32 channels at batch 64 took 631 us against
    1,081 us direct.)"""
    return w_shape[1] == 1 and at["groups"] == x_shape[1] == w_shape[0]


# A 1x1 convolution (stride 1, no padding) over planes of at least this many pixels is one
# product per image and group, straight from x into the output (is_pointwise). Measured with
# one BLAS thread, (32, 64, H*W) to 128 channels: 57 -> 32 us at 2x2, 271 -> 75 us at 4x4,
# 401 -> 236 us at 8x8 against im2col (a transposing copy), one product and the transposing
# copy back; at 1x1 the one product of im2col won (12 against 15 us).
POINTWISE_MIN_PIXELS = 4


def is_pointwise(x_shape: tuple, w_shape: tuple, at: dict) -> bool:
    """A 1x1 convolution, stride 1, no padding, over planes of POINTWISE_MIN_PIXELS or more:
    ``pointwise_product``, no im2col."""
    return (
        w_shape[2] == w_shape[3] == 1
        and tuple(at["stride"]) == (1, 1)
        and not any(at["padding"])
        and x_shape[2] * x_shape[3] >= POINTWISE_MIN_PIXELS
    )


def pointwise_products(x: np.ndarray, w: np.ndarray, out: np.ndarray, groups: int) -> list:
    """The BLAS products of a 1x1 convolution (see is_pointwise): ``(a, b, out)`` 2-D views, per
    image and group ``out (O/G, H*W) = w (O/G, C/G) @ x (C/G, H*W)``, each in pieces
    (ops/blas.product_pieces) when there are fewer than MAX_PIECES of them: up to MAX_PIECES
    pieces in all (a batch of 32 is 32 whole products, as before pieces). x, w and out
    C-contiguous (N, C, H, W), (O, C/G, 1, 1), (N, O, H, W)."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    xs = x.reshape(n, groups, c // groups, h * wd)
    ws = w.reshape(groups, o // groups, c // groups)
    outs = out.reshape(n, groups, o // groups, h * wd)
    return [piece for i in range(n) for piece in group_products(ws, xs[i], outs[i], max(1, MAX_PIECES // n))]


def pointwise_product(x: np.ndarray, w: np.ndarray, out: np.ndarray, groups: int, run=run_products) -> None:
    """out (N, O, H, W) = w (O, C/G, 1, 1) times x (N, C, H, W) per image and group, in the
    pieces of ``pointwise_products``, by ``run`` (ops/blas.run_products, or a compiled step's
    runner making the same BLAS calls on its thread team: lowering/cpu/team.py). x and w
    C-contiguous."""
    run(lambda: pointwise_products(x, w, out, groups), (w, x, out), ("pointwise", groups))


def depthwise_reference(x: np.ndarray, w: np.ndarray, out: np.ndarray, at: dict) -> None:
    """out (N, O, oH, oW) of a depthwise conv2d (see is_depthwise): zero, then for each live tap
    (``taps``) in row-major order its weight times the zero-padded input's window added in. The
    compiled kernel adds the same terms in the same order: the same bits."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    o, (oh, ow) = out.shape[1], out.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    rows, cols = taps(x.shape, w.shape, at, (oh, ow))
    out[...] = 0
    for i in rows:
        for j in cols:
            window = xp[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
            out += w[:, 0, i, j].reshape(1, o, 1, 1) * window


def _reference(arrays, at):
    x, w = arrays
    (shape, _) = _infer((x.shape, w.shape), (_dt(x), _dt(w)), at)
    if is_depthwise(x.shape, w.shape, at):
        out = np.empty(shape, dtype=x.dtype)
        depthwise_reference(x, w, out, at)
        return out
    if is_pointwise(x.shape, w.shape, at):
        out = np.empty(shape, dtype=x.dtype)
        pointwise_product(np.ascontiguousarray(x), np.ascontiguousarray(w), out, at["groups"])
        return out
    rows, cols = taps(x.shape, w.shape, at, shape[2:])
    out = np.empty(shape, dtype=x.dtype)
    wt = tap_weights(w, rows, cols)
    step = images_per_chunk(shape[0], x.shape[1] * len(rows) * len(cols), shape[2] * shape[3], x.dtype.itemsize)
    for n0 in range(0, shape[0], step):
        chunk = im2col_reference(x[n0 : n0 + step], rows, cols, at, shape[2:])
        conv_gemm(chunk, wt, at["groups"], out[n0 : n0 + step], None)
    return out


def _dt(a):
    return get_dtype(a.dtype)


# ------------------------------------------------------------------------------- VJP
def _conv(x, w, stride, padding, dilation, groups):
    return x.apply(
        "conv2d", x, w, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), groups=groups
    )


def _crop_or_pad(t, axis: int, before: int, after: int):
    """Negative amounts crop ``t`` along ``axis``; returns (t, max(before, 0), max(after, 0))."""
    if before < 0 or after < 0:
        start, stop = max(-before, 0), t.shape[axis] - max(-after, 0)
        t = t.narrow(axis, start, stop - start)
    return t, max(before, 0), max(after, 0)


def _input_grad(g, w, x_shape, at):
    """The transposed convolution of g by the same weights (ops/conv_transpose.py), onto x's
    positions: x[r] received g[p] * w[i] where r = p*s + i*d - top."""
    (sh, sw), (pt, _, pl, _), (dh, dw), groups = at["stride"], at["padding"], at["dilation"], at["groups"]
    return g.apply(
        "conv_transpose2d",
        g,
        w,
        stride=(sh, sw),
        padding=(pt, pl),
        dilation=(dh, dw),
        groups=groups,
        out_hw=tuple(x_shape[2:]),
    )


def _depthwise_grad(g, x, w_shape, at):
    """A depthwise convolution's weight gradient (``_depthwise_weight_grad``) after trimming the
    input rows and columns no window reads."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    _, _, kh, kw = w_shape
    pads = []
    for axis, s, d, k, before, after in ((2, sh, dh, kh, pt, pb), (3, sw, dw, kw, pl, pr)):
        # Padded rows past d*(k-1) + s*(oH-1) are never read: trim them (and the input's).
        unused = x.shape[axis] + before + after - (d * (k - 1) + s * (g.shape[axis] - 1) + 1)
        x, lo, hi = _crop_or_pad(x, axis, before, after - unused)
        pads += [lo, hi]
    return _depthwise_weight_grad(g, x, w_shape, pads, at)


def _depthwise_weight_grad(g, x, w_shape, pads, at):
    """A depthwise convolution's weight gradient, tap by tap: w[c, 0, i, j] receives the sum over
    images and output positions of g times the input window the tap read. (As conv2d_weight, a
    product per group of one row: 960 for MobileNetV2's last depthwise layer.) x is already
    trimmed to what the windows read; ``pads`` its zero border."""
    (sh, sw), (dh, dw) = at["stride"], at["dilation"]
    c, _, kh, kw = w_shape
    n, oh, ow = g.shape[0], g.shape[2], g.shape[3]
    xp = x._pad(((0, 0), (0, 0), (pads[0], pads[1]), (pads[2], pads[3])))
    parts = []
    for i in range(kh):
        for j in range(kw):
            starts = (0, 0, i * dh, j * dw)
            stops = (n, c, i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1)
            window = xp._slice(starts, stops, (1, 1, sh, sw))
            parts.append((g * window).sum((0, 2, 3)).reshape(1, c))
    return _concat0(parts).permute(1, 0).reshape(c, 1, kh, kw)


def _concat0(parts):
    """``cat(parts, 0)`` as the front end records it: the cat primitive (ops/join.py) for
    MIN_PIECES parts or more, else each part zero-padded to the whole and summed (one fused kernel)."""
    if len(parts) >= MIN_PIECES:
        return parts[0].apply("cat", *parts, axis=0)
    total = sum(p.shape[0] for p in parts)
    out, start = None, 0
    for p in parts:
        n = p.shape[0]
        piece = p._pad(((start, total - start - n),) + ((0, 0),) * (p.ndim - 1))
        out = piece if out is None else out + piece
        start += n
    return out


def _vjp(g, x, out, at):
    inp, w = x
    return _input_grad(g, w, inp.shape, at), weight_grad(g, inp, w.shape, at)


def weight_grad(g, x, w_shape, at):
    """The weight gradient of conv2d(x, w; at) given its output gradient g: conv2d_weight, or
    for a depthwise convolution the tap by tap sums of ``_depthwise_weight_grad``."""
    if is_depthwise(x.shape, w_shape, at):
        return _depthwise_grad(g, x, w_shape, at)
    return g.apply("conv2d_weight", x, g, kernel=tuple(w_shape[2:]), **at)


# ------------------------------------------------------------------- weight gradient
def _weight_infer(shapes, dtypes, at):
    xs, gs = shapes
    if len(xs) != 4 or len(gs) != 4 or len(at["kernel"]) != 2:
        raise ShapeError(
            f"conv2d_weight: expected input (N, C, H, W), output gradient (N, O, oH, oW) and a (kH, kW) "
            f"kernel, got {xs}, {gs} and {at['kernel']}"
        )
    kh, kw = at["kernel"]
    groups = at["groups"]
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    if groups < 1 or min(sh, sw, dh, dw, kh, kw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ShapeError(
            f"conv2d_weight: invalid groups {groups}, kernel {at['kernel']}, stride {at['stride']}, "
            f"padding {at['padding']} or dilation {at['dilation']}"
        )
    if xs[0] != gs[0] or xs[1] % groups or gs[1] % groups:
        raise ShapeError(f"conv2d_weight: input {xs} and output gradient {gs} do not fit groups={groups}")
    if (out_size(xs[2], kh, sh, pt, pb, dh), out_size(xs[3], kw, sw, pl, pr, dw)) != tuple(gs[2:]):
        raise ShapeError(f"conv2d_weight: output gradient {gs} is not the conv2d output of input {xs}")
    if dtypes[0] is not dtypes[1] or not dtypes[0].is_floating_point:
        raise DTypeError(
            f"conv2d_weight: expected equal floating-point dtypes, got {dtypes[0].name} and {dtypes[1].name}"
        )
    return (gs[1], xs[1] // groups, kh, kw), dtypes[0]


def weight_gemm(cols, g, groups: int, acc, first: bool, scratch, run=run_products) -> None:
    """acc (G, Cg*T, O/G) = (first chunk) or += (later chunks) the product of a chunk's im2col
    columns cols (C*T, n*oH*oW) and its output gradient g (n, O, oH, oW) transposed, per group,
    in pieces (ops/blas.group_products) by ``run`` (as pointwise_product's). (cols @ g^T, not
    g @ cols^T: OpenBLAS packed the transposed 2048-row columns of ResNet's 16-channel 8x8
    layers at batch 32 slowly, 195 us a product against 123 us this way.) ``scratch``: (g as
    (O, n*oH*oW) when n > 1, the product when not ``first``), each None to allocate."""
    n, o = g.shape[:2]
    m = cols.shape[1]
    if n == 1 and g.flags.c_contiguous:
        gm = g.reshape(o, m)
    else:
        gm = np.empty((o, m), dtype=g.dtype) if scratch[0] is None else scratch[0][: o * m].reshape(o, m)
        # Straight from g's own strides (a reshape of a strided view would copy it first).
        np.copyto(gm.reshape((o, *g.shape[:1], *g.shape[2:])), g.transpose(1, 0, 2, 3))
    colsg = cols.reshape(groups, cols.shape[0] // groups, m)
    gmg = gm.reshape(groups, o // groups, m).transpose(0, 2, 1)
    if first:
        target = acc
    else:
        target = np.empty(acc.shape, acc.dtype) if scratch[1] is None else scratch[1][: acc.size].reshape(acc.shape)
    run(lambda: group_products(colsg, gmg, target), (colsg, gm, target), "weight")
    if not first:
        acc += target


def spread_taps(acc: np.ndarray, out: np.ndarray, rows: list, cols: list) -> None:
    """out (O, Cg, kH, kW) = the live taps' gradients from acc (G, Cg*T, O/G) (weight_gemm's),
    zero at the taps that read padding only."""
    o, cg, kh, kw = out.shape
    groups = acc.shape[0]
    if len(rows) == kh and len(cols) == kw:
        np.copyto(out.reshape(groups, o // groups, cg * kh * kw), acc.transpose(0, 2, 1))
        return
    # Tap by tap (fancy indexing took 200 us for the center tap of a (128, 128, 3, 3) weight).
    out[...] = 0
    by_tap = acc.reshape(groups, cg, len(rows) * len(cols), o // groups)
    taps_out = out.reshape(groups, o // groups, cg, kh, kw)
    for a, i in enumerate(rows):
        for b, j in enumerate(cols):
            np.copyto(taps_out[:, :, :, i, j], by_tap[:, :, a * len(cols) + b].transpose(0, 2, 1))


def _weight_reference(arrays, at):
    x, g = arrays
    (shape, _) = _weight_infer((x.shape, g.shape), (_dt(x), _dt(g)), at)
    o, cg, kh, kw = shape
    groups = at["groups"]
    rows, cols = taps(x.shape, shape, at, g.shape[2:])
    t = len(rows) * len(cols)
    acc = np.empty((groups, cg * t, o // groups), dtype=x.dtype)
    step = images_per_chunk(g.shape[0], x.shape[1] * t, g.shape[2] * g.shape[3], x.dtype.itemsize)
    acc[...] = 0  # an empty batch: no chunk, a zero gradient
    for n0 in range(0, g.shape[0], step):
        chunk = im2col_reference(x[n0 : n0 + step], rows, cols, at, g.shape[2:])
        weight_gemm(chunk, g[n0 : n0 + step], groups, acc, n0 == 0, (None, None))
    out = np.empty(shape, dtype=x.dtype)
    spread_taps(acc, out, rows, cols)
    return out


def _weight_vjp(gw, x, out, at):
    """conv2d_weight is linear in each input: x's cotangent is the transposed convolution of g
    by gw, g's the convolution of x by gw (with the forward's attributes)."""
    inp, g = x
    groups = at["groups"]
    conv_at = {k: at[k] for k in ("stride", "padding", "dilation", "groups")}
    return (
        _input_grad(g, gw, inp.shape, conv_at),
        _conv(inp, gw, at["stride"], at["padding"], at["dilation"], groups),
    )


def _onnx(b, names, at, shape, dtype):
    pt, pb, pl, pr = at["padding"]
    return b.node(
        "Conv",
        list(names),
        strides=list(at["stride"]),
        pads=[pt, pl, pb, pr],
        dilations=list(at["dilation"]),
        group=at["groups"],
    )


register(OpDef("conv2d", "conv", 2, _infer, _reference, vjp=_vjp, onnx=_onnx))
register(OpDef("conv2d_weight", "conv", 2, _weight_infer, _weight_reference, vjp=_weight_vjp))
