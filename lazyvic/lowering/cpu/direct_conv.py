"""Direct convolution kernels of a CPU plan, in Numba (lowering/cpu/steps.DepthwiseConvStep).

``depthwise``: a conv2d whose output channel k reads input channel k alone (ops/conv.is_depthwise:
MobileNet's and EfficientNet's depthwise layers). As im2col
and a product per group, each group is a one-row product over a copy of kH*kW times its input.
Here each input plane is copied into a zero-bordered plane, and each live tap adds its weight
times the shifted plane into an accumulator plane. At stride 1 the accumulator has the padded
plane's width, so a tap is one contiguous loop over the whole plane (the columns past oW are
computed and dropped): per-row loops of 28 elements left LLVM's vector loop (32 elements wide
with its unrolling) unused. Taps are added in row-major order, as
ops/conv.depthwise_reference adds them: the same bits. Measured on 2 cores (float32, one 3x3
layer with padding 1, in a compiled plan; as im2col + products, then direct): 144 channels at
56x56, batch 1: 2,036 -> 411 us (stride 2: 599 -> 376 us); 96 channels at 28x28, batch 32:
7,312 -> 2,716 us; 960 channels at 7x7, batch 1: 218 -> 115 us. The taps then went in runs of
9 or 3 per pass over the accumulator (``_add_taps``) and stride 2's two column phases are
copied in one loop: kernel alone, float32, batch 1, MobileNetV2's 32 channels at 112x112
368 -> 196 us, 96 at 112x112 stride 2 601 -> 351 us, EfficientNet-B0's 5x5 672 channels at
14x14 336 -> 252 us; MobileNetV2's depthwise layers at batch 1 3.1-3.6 -> 2.1 ms of a 12 ms
call. Serial (see lowering/cpu/backend._conv_step).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from lazyvic.lowering.cpu.load import shared
from lazyvic.ops.conv_transpose import tap_range


@njit(cache=True)
def _padded_plane(h, wd, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw):
    """(rows, phase width) of depthwise's zero-bordered plane (see ``depthwise``)."""
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wq = -(-max(wd + pl, (ow - 1) * sw + (kw - 1) * dw + 1) // sw)
    return hp, wq


@njit(cache=True)
def _phase_planes(h, wd, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw):
    """(rows, columns) of each of a strided depthwise's sH * sW phase planes (see ``_strided``)."""
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(wd + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    return -(-hp // sh), -(-wp // sw)


def depthwise_scratch(x_shape: tuple, w_shape: tuple, out_shape: tuple, at: dict) -> int:
    """Elements ``depthwise`` allocates per call (its padded plane and accumulator), for the
    plan's memory report (a symbolic batch size does not change it)."""
    (sh, sw), (pt, _, pl, _), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    oh, ow = out_shape[2], out_shape[3]
    args = (x_shape[2], x_shape[3], oh, ow, w_shape[2], w_shape[3], sh, sw, pt, pl, dh, dw)
    if sh == sw == 1:
        hp, wq = _padded_plane(*args)
        return hp * wq + wq + oh * wq
    hq, wq = _phase_planes(*args)
    return sh * sw * hq * wq + wq + oh * wq


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, inline="always")
def _add_taps(acc, padded, wf, wb, taps, offsets, n, z):
    """acc[u] = the sum over the taps t of wf[wb + taps[t]] * padded[offsets[t] + u], for u < n,
    added one tap at a time in order from ``z`` (+0): the reference's order, so its bits. The
    taps go in runs of 9 or 3 per pass over acc (each run's adds unrolled, acc[u] kept in a
    register), not one pass each: a 3x3 layer reads and writes acc once instead of 9 times."""
    ntap = taps.size
    t = 0
    while t < ntap:
        first = t == 0
        if ntap - t >= 9:
            w0, w1, w2 = wf[wb + taps[t]], wf[wb + taps[t + 1]], wf[wb + taps[t + 2]]
            w3, w4, w5 = wf[wb + taps[t + 3]], wf[wb + taps[t + 4]], wf[wb + taps[t + 5]]
            w6, w7, w8 = wf[wb + taps[t + 6]], wf[wb + taps[t + 7]], wf[wb + taps[t + 8]]
            o0, o1, o2 = offsets[t], offsets[t + 1], offsets[t + 2]
            o3, o4, o5 = offsets[t + 3], offsets[t + 4], offsets[t + 5]
            o6, o7, o8 = offsets[t + 6], offsets[t + 7], offsets[t + 8]
            for u in range(n):
                a = z if first else acc[u]
                a += w0 * padded[o0 + u]
                a += w1 * padded[o1 + u]
                a += w2 * padded[o2 + u]
                a += w3 * padded[o3 + u]
                a += w4 * padded[o4 + u]
                a += w5 * padded[o5 + u]
                a += w6 * padded[o6 + u]
                a += w7 * padded[o7 + u]
                a += w8 * padded[o8 + u]
                acc[u] = a
            t += 9
        elif ntap - t >= 3:
            w0, w1, w2 = wf[wb + taps[t]], wf[wb + taps[t + 1]], wf[wb + taps[t + 2]]
            o0, o1, o2 = offsets[t], offsets[t + 1], offsets[t + 2]
            for u in range(n):
                a = z if first else acc[u]
                a += w0 * padded[o0 + u]
                a += w1 * padded[o1 + u]
                a += w2 * padded[o2 + u]
                acc[u] = a
            t += 3
        else:
            w0, o0 = wf[wb + taps[t]], offsets[t]
            for u in range(n):
                a = z if first else acc[u]
                a += w0 * padded[o0 + u]
                acc[u] = a
            t += 1


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, inline="always")
def _store_plane(of, acc, dst, oh, ow, wq):
    """The oH x oW outputs of one plane from the accumulator's rows of wq (columns past oW dropped)."""
    for y in range(oh):
        d, s = uint64(dst + y * ow), uint64(y * wq)
        for q in range(uint64(ow)):
            of[d + q] = acc[s + q]


@njit(cache=True)
def _tap_table(tap_rows, tap_cols, kw, sh, sw, sub, wq, dh, dw):
    """(offsets, taps): where live tap t reads the padded plane(s) (its phase plane, row and
    column; ``sub`` the size of a phase plane) and its weight's place in a channel's kH * kW."""
    ntap = tap_rows.size * tap_cols.size
    offsets = np.empty(ntap, np.uint64)
    taps = np.empty(ntap, np.int64)
    t = 0
    for i in tap_rows:
        for j in tap_cols:
            offsets[t] = uint64((((i * dh) % sh) * sw + (j * dw) % sw) * sub + (i * dh) // sh * wq + (j * dw) // sw)
            taps[t] = i * kw + j
            t += 1
    return offsets, taps


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def depthwise(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw):
    """out (N, C, oH, oW) = the depthwise conv2d of x (N, C, H, W) by w (C, 1, kH, kW), all
    C-contiguous, over the live taps ``tap_rows`` x ``tap_cols`` (ops/conv.taps), on the
    calling thread.

    The padded plane is split by column phase (as lowering/cpu/im2col.pad_into): padded column
    u is at ``[row, u % sW, u // sW]``, so every tap reads each output row as one contiguous
    run whatever the stride. Indices are unsigned (signed ones kept LLVM from vectorizing)."""
    _planes(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw, 0, x.shape[0] * x.shape[1])


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, parallel=True)
def depthwise_parallel(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw, threads):
    """``depthwise`` on ``threads`` of Numba's threads (``numba.get_num_threads()``: read in
    Python, as compiled code reading it cannot be cached): each takes an equal share of the
    (image, channel) planes, with scratch of its own. A plane's result does not depend on who
    computes it: the same bits."""
    planes = x.shape[0] * x.shape[1]
    parts = max(1, min(threads, planes))
    for p in prange(parts):
        _planes(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw, p * planes // parts, (p + 1) * planes // parts)


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _planes(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw, first_plane, end_plane):
    """``depthwise`` of the (image, channel) planes ``first_plane`` to ``end_plane`` (image-major)."""
    if sh != 1 or sw != 1:
        _strided(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw, first_plane, end_plane)
        return
    c, h, wd = x.shape[1:]
    oh, ow = out.shape[2], out.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    hp, wq = _padded_plane(h, wd, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw)
    # The padded plane, and past its end the columns the last row's dropped outputs read.
    padded = np.zeros(hp * wq + wq, x.dtype)
    acc = np.empty(oh * wq, x.dtype)  # one loop over the plane per run of taps, wq wide
    n_acc = uint64(acc.size)
    z = padded[0]  # +0 of x's dtype
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    offsets, taps = _tap_table(tap_rows, tap_cols, kw, 1, 1, 0, wq, dh, dw)
    for plane in range(first_plane, end_plane):
        ic = plane % c
        src = plane * h * wd
        for r in range(h):
            d, s = uint64((pt + r) * wq + pl), uint64(src + r * wd)
            for q in range(uint64(wd)):
                padded[d + q] = xf[s + q]
        _add_taps(acc, padded, wf, ic * kh * kw, taps, offsets, n_acc, z)
        _store_plane(of, acc, plane * oh * ow, oh, ow, wq)


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _strided(x, w, out, tap_rows, tap_cols, sh, sw, pt, pl, dh, dw, first_plane, end_plane):
    """``depthwise`` at a stride above 1: the zero-bordered plane is split by row and column
    phase into sH * sW planes (padded row r, column u at plane (r % sH, u % sW), row r // sH,
    column u // sW), so that a tap reads one phase plane at a fixed offset for every output and
    is one contiguous loop over oH rows of the plane's width, as at stride 1 (the columns past oW
    are computed and dropped). Taps in row-major order: the reference's bits. With per-row loops
    of oW elements over a plane split by column phase alone (a scattering copy) it took up to
    2.5x as long, kernel alone, float32, batch 1: MobileNetV2's 96-channel 3x3 layer at 112x112
    733-824 -> 604 us, its 576 channels at 14x14 238-262 -> 132 us, EfficientNet-B0's 5x5
    240 channels at 28x28 478-533 -> 203 us; 96 channels at 56x56, batch 32, 8.7-9.3 -> 6.7 ms."""
    c, h, wd = x.shape[1:]
    oh, ow = out.shape[2], out.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    hq, wq = _phase_planes(h, wd, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw)
    sub = hq * wq
    # the phase planes one after another; past the last, the columns the dropped outputs read
    padded = np.zeros(sh * sw * sub + wq, x.dtype)
    acc = np.empty(oh * wq, x.dtype)
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    offsets, taps = _tap_table(tap_rows, tap_cols, kw, sh, sw, sub, wq, dh, dw)
    z = padded[0]  # +0 of x's dtype
    # input column q lands in column phase (pl + q) % sW: the first such q, how many, and where
    first = np.empty(sw, np.int64)
    count = np.empty(sw, np.int64)
    for b in range(sw):
        first[b] = (b - pl) % sw
        count[b] = (wd - first[b] + sw - 1) // sw if first[b] < wd else 0
    step = uint64(sw)
    n_acc = uint64(oh * wq)
    for plane in range(first_plane, end_plane):
        ic = plane % c
        src = plane * h * wd
        for r in range(h):
            pr = pt + r
            row = ((pr % sh) * sw) * sub + (pr // sh) * wq
            s = uint64(src + r * wd)
            done = uint64(0)
            if sw == 2:  # both column phases in one loop: one read of the row, vectorized
                e0, e1 = (0, 1) if first[0] == 0 else (1, 0)  # the phases of even / odd columns
                d0 = uint64(row + e0 * sub + (pl + first[e0]) // sw)
                d1 = uint64(row + e1 * sub + (pl + first[e1]) // sw)
                done = uint64(min(count[0], count[1]))
                for v in range(done):
                    padded[d0 + v] = xf[s + v * step]
                    padded[d1 + v] = xf[s + v * step + uint64(1)]
            for b in range(sw):
                d = uint64(row + b * sub + (pl + first[b]) // sw)
                s0 = s + uint64(first[b])
                for v in range(done, uint64(count[b])):
                    padded[d + v] = xf[s0 + v * step]
        _add_taps(acc, padded, wf, ic * kh * kw, taps, offsets, n_acc, z)
        _store_plane(of, acc, plane * oh * ow, oh, ow, wq)


class Depthwise:
    """The kernel of a depthwise conv2d step (lowering/cpu/steps.DirectConvStep):
    :func:`depthwise_parallel` or :func:`depthwise` as lowering/cpu/load.shared chooses (``team``
    is set by ``CpuBackend`` where the plan runs BLAS on one thread, so that Numba's threads are
    its only team). The same bits either way."""

    def __init__(self):
        self.team = False

    def __call__(self, x, w, out, *args):
        shared(self.team, depthwise, depthwise_parallel, out.size, x, w, out, *args)


# -- the transpose of a depthwise convolution (its input gradient at a stride above 1) ---------
@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _transpose_planes(x, w, out, rows, cols, sh, sw, pt, pl, dh, dw, first_plane, end_plane):
    """``depthwise_transpose`` of the (image, channel) planes ``first_plane`` to ``end_plane``;
    ``rows[i]`` and ``cols[j]``: the input range ``[lo, hi)`` whose tap i (j) lands inside the
    output (ops/conv_transpose.tap_range)."""
    c, h, wd = x.shape[1:]
    oh, ow = out.shape[2], out.shape[3]
    kh, kw = w.shape[2], w.shape[3]
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    z = of.dtype.type(0)
    plane_out = oh * ow
    for plane in range(first_plane, end_plane):
        ob = uint64(plane * plane_out)
        for e in range(uint64(plane_out)):
            of[ob + e] = z
        src = plane * h * wd
        wb = (plane % c) * kh * kw
        for i in range(kh):
            p0, p1 = rows[i, 0], rows[i, 1]
            for j in range(kw):
                q0, q1 = cols[j, 0], cols[j, 1]
                wv = wf[wb + i * kw + j]
                n = uint64(q1 - q0)
                step = uint64(sw)
                for p in range(p0, p1):
                    d = ob + uint64((p * sh + i * dh - pt) * ow + q0 * sw + j * dw - pl)
                    s = uint64(src + p * wd + q0)
                    for q in range(n):
                        of[d + q * step] += wv * xf[s + q]


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def depthwise_transpose(x, w, out, rows, cols, sh, sw, pt, pl, dh, dw):
    """out (N, C, oH, oW) = conv_transpose2d of x (N, C, H, W) by a depthwise weight w (C, 1, kH,
    kW) (groups = C: each output channel from its own input channel), all C-contiguous, on the
    calling thread: each tap's products w * x added into the zeroed output tap by tap in
    row-major order, as the reference (ops/conv_transpose.transposed_columns, then col2im: one
    product per column, added in that order), so the same bits. The per-group products of the
    general path have an inner dimension of 1 and write kH*kW columns per input element (a
    MobileNet block's stride-2 depthwise input gradient, (24, 32, 32, 32): 3.7-5.7 ms)."""
    _transpose_planes(x, w, out, rows, cols, sh, sw, pt, pl, dh, dw, 0, x.shape[0] * x.shape[1])


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, parallel=True)
def depthwise_transpose_parallel(x, w, out, rows, cols, sh, sw, pt, pl, dh, dw, threads):
    """``depthwise_transpose`` on ``threads`` of Numba's threads, a share of the planes each."""
    planes = x.shape[0] * x.shape[1]
    parts = max(1, min(threads, planes))
    for p in prange(parts):
        _transpose_planes(x, w, out, rows, cols, sh, sw, pt, pl, dh, dw, p * planes // parts, (p + 1) * planes // parts)


class DepthwiseTranspose:
    """The kernel of a depthwise conv_transpose2d step (a DirectConvStep), on Numba's threads as
    :class:`Depthwise` (``team``, lowering/cpu/load.shared): the same bits either way. Called with
    (sH, sW, pT, pL, dH, dW); the taps' input ranges come from ops/conv_transpose.tap_range, as
    the reference's col2im takes them, made once per shape."""

    def __init__(self):
        self.team = False
        self.ranges: dict = {}

    def __call__(self, x, w, out, sh, sw, pt, pl, dh, dw):
        key = (x.shape[2:], w.shape[2:], out.shape[2:])
        found = self.ranges.get(key)
        if found is None:
            (h, wd), (kh, kw), (oh, ow) = key
            rows = np.array([tap_range(i, dh, sh, pt, h, oh) for i in range(kh)], dtype=np.int64).reshape(kh, 2)
            cols = np.array([tap_range(j, dw, sw, pl, wd, ow) for j in range(kw)], dtype=np.int64).reshape(kw, 2)
            found = self.ranges[key] = (rows, cols)
        args = (x, w, out, *found, sh, sw, pt, pl, dh, dw)
        shared(self.team, depthwise_transpose, depthwise_transpose_parallel, out.size, *args)
