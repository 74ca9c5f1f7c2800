"""The im2col copy of a conv2d step (lowering/cpu/steps.ConvStep), and the col2im sum of a
conv_transpose2d step (``col2im``, lowering/cpu/steps.ConvTransposeStep), as Numba kernels.

``cols (C*T, N*oH*oW)``: row ``(c, i, j)``, column ``(n, p, q)`` holds the zero-padded
``x[n, c, i*dH + p*sH - top, j*dW + q*sW - left]`` (``ops/conv.im2col_reference`` is the
NumPy version).

When the live taps read padding, the step first copies x into the interior of a
zero-bordered buffer (``pad_into``) that is split by column phase: padded column ``u`` goes to
``xs[n, c, h, u % sW, u // sW]``. A tap then reads each output row ``(n, p)`` as one contiguous
run of ``oW`` elements whatever the stride, and im2col is a copy of runs (``oW >= ROW_COPY_MIN``)
or, for short rows, a branch-free gather ``cols[r, u] = src[offset(r) + index[u]]`` through a
table of column offsets (ResNet's late stages have rows of 1-4 elements, where per-run loop
setup dominated). Measured at batch 32 on 2 cores (float32, kernels alone): the 7x7 stride-2
stem (3 -> 16 channels, 147 x 8192 columns) took 460 us (padding 34 + gather 426) with the
gather on the plain padded input, 160 us (split 31 + runs 127) now; a 3x3 16-channel layer
at 8x8 went from 123 us (padding 20 + gather 103) to 41 us (5 + 36).

Indices are unsigned: with signed ones Numba checks each for wraparound, which kept LLVM from
vectorizing the copies (the 3x3 run copy took 197 us signed). Each has a parallel form (the
step's share of rows, planes or output channels per thread), used where the plan's products run
on Numba's threads too (lowering/cpu/team.py: one thread team); elsewhere they are serial (see
lowering/cpu/backend._conv_step for why).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

# Output rows at least this long are copied run by run; shorter ones go through the gather
# table (3x3 convolutions at batch 32: with oW = 4 the runs took 73 us against 35 us gathered).
ROW_COPY_MIN = 8


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def pad_into(x, xs, pt, pl):
    """x (N, C, H, W) into the interior of xs (N, C, H + pt + pb, sW, Wq): x[n, c, h, w] goes to
    xs[n, c, pt + h, (pl + w) % sW, (pl + w) // sW]. xs's other elements stay as they are
    (zeros: the padding)."""
    _pad_planes(x, xs, pt, pl, 0, x.shape[0] * x.shape[1])


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, parallel=True)
def pad_into_parallel(x, xs, pt, pl, threads):
    """``pad_into`` on ``threads`` of Numba's threads, each a share of the (image, channel) planes."""
    planes = x.shape[0] * x.shape[1]
    parts = max(1, min(threads, planes))
    for k in prange(parts):
        _pad_planes(x, xs, pt, pl, k * planes // parts, (k + 1) * planes // parts)


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _pad_planes(x, xs, pt, pl, first, end):
    """``pad_into`` of the (image, channel) planes ``first`` to ``end``."""
    h_in, w_in = x.shape[2], x.shape[3]
    hp, nph, wq = xs.shape[2], xs.shape[3], xs.shape[4]
    xf, of = x.reshape(-1), xs.reshape(-1)
    if nph == 1:  # stride 1: contiguous row copies (4.5 us for 16 channels at 8x8, batch 32)
        for plane in range(first, end):
            for r in range(h_in):
                src = uint64((plane * h_in + r) * w_in)
                dst = uint64((plane * hp + pt + r) * wq + pl)
                for k in range(uint64(w_in)):
                    of[dst + k] = xf[src + k]
        return
    # Where each input column lands in its row of phases (a table: per-phase strided loops took
    # twice as long on 8-wide rows).
    land = np.empty(w_in, np.uint64)
    for w in range(w_in):
        land[w] = ((pl + w) % nph) * wq + (pl + w) // nph
    for plane in range(first, end):
        for r in range(h_in):
            src = uint64((plane * h_in + r) * w_in)
            row = uint64((plane * hp + pt + r) * nph * wq)
            for w in range(uint64(w_in)):
                of[row + land[w]] = xf[src + w]


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def im2col(src, cols, tap_offsets, image_stride, row_stride, col_stride, oh, ow):
    """cols (C*T, N*oH*oW) from the flat source ``src``: row ``c*T + t``, column ``(n, p, q)``
    reads ``src[c*plane + tap_offsets[t] + n*image_stride + p*row_stride + q*col_stride]`` with
    ``plane = image_stride // C`` (``tap_offsets[t]`` locates the t-th live kernel tap in a
    plane; ops/conv.taps)."""
    index = _gather_index(cols.shape[1], oh, ow, image_stride, row_stride, col_stride)
    _im2col_rows(src, cols, tap_offsets, image_stride, row_stride, oh, ow, index, 0, cols.shape[0])


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, parallel=True)
def im2col_parallel(src, cols, tap_offsets, image_stride, row_stride, col_stride, oh, ow, threads):
    """``im2col`` on ``threads`` of Numba's threads, each a share of the rows."""
    index = _gather_index(cols.shape[1], oh, ow, image_stride, row_stride, col_stride)
    rows = cols.shape[0]
    parts = max(1, min(threads, rows))
    for k in prange(parts):
        _im2col_rows(
            src, cols, tap_offsets, image_stride, row_stride, oh, ow, index, k * rows // parts, (k + 1) * rows // parts
        )


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _gather_index(m, oh, ow, image_stride, row_stride, col_stride):
    """The gather table of im2col's short rows (column u reads ``src[offset(r) + index[u]]``), or
    an empty one when rows are copied run by run (``oW >= ROW_COPY_MIN`` at column stride 1)."""
    if ow >= ROW_COPY_MIN and col_stride == 1:
        return np.empty(0, np.uint64)
    index = np.empty(m, np.uint64)
    for n in range(m // (oh * ow)):
        for p in range(oh):
            for q in range(ow):
                index[(n * oh + p) * ow + q] = n * image_stride + p * row_stride + q * col_stride
    return index


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _im2col_rows(src, cols, tap_offsets, image_stride, row_stride, oh, ow, index, first, end):
    """Rows ``first`` to ``end`` of ``im2col``: runs of oW, or gathers through ``index``."""
    n_taps = tap_offsets.size
    m = cols.shape[1]
    n_img = m // (oh * ow)
    plane = image_stride // (cols.shape[0] // n_taps)
    dst = cols.reshape(-1)
    if index.size == 0:
        for r in range(first, end):
            s0 = (r // n_taps) * plane + tap_offsets[r % n_taps]
            d = uint64(r * m)
            for n in range(n_img):
                s = s0 + n * image_stride
                for p in range(oh):
                    su = uint64(s + p * row_stride)
                    for q in range(uint64(ow)):
                        dst[d + q] = src[su + q]
                    d += uint64(ow)
        return
    for r in range(first, end):
        s0 = uint64((r // n_taps) * plane + tap_offsets[r % n_taps])
        d0 = uint64(r * m)
        for u in range(uint64(m)):
            dst[d0 + u] = src[s0 + index[u]]


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def col2im(cols, out, h, w, kh, kw, sh, sw, dh, dw, pt, pl):
    """out (n, C_out, oH, oW) = the columns (C_out*kH*kW, n*H*W) of a conv_transpose2d added
    into place (ops/conv_transpose.col2im_reference): column (m, p, q) of row (o, i, j) goes to
    out[m, o, p*sH + i*dH - top, q*sW + j*dW - left] when inside; each output element gets its
    taps in row-major order, as the reference adds them (the same bits)."""
    _col2im_channels(cols, out, h, w, kh, kw, sh, sw, dh, dw, pt, pl, 0, out.shape[1])


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True, parallel=True)
def col2im_parallel(cols, out, h, w, kh, kw, sh, sw, dh, dw, pt, pl, threads):
    """``col2im`` on ``threads`` of Numba's threads, each a share of the output channels (an
    element's taps still added in row-major order: the same bits)."""
    cout = out.shape[1]
    parts = max(1, min(threads, cout))
    for k in prange(parts):
        _col2im_channels(cols, out, h, w, kh, kw, sh, sw, dh, dw, pt, pl, k * cout // parts, (k + 1) * cout // parts)


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _col2im_channels(cols, out, h, w, kh, kw, sh, sw, dh, dw, pt, pl, first, end):
    """``col2im`` of the output channels ``first`` to ``end``."""
    n_img, cout, oh, ow = out.shape
    src, dst = cols.reshape(-1), out.reshape(-1)
    plane = uint64(oh * ow)
    for img in range(n_img):
        for o in range(first, end):
            base = uint64((img * cout + o) * oh * ow)
            for k in range(plane):
                dst[base + k] = 0
    m, hw = cols.shape[1], h * w
    for o in range(first, end):
        for i in range(kh):
            p0 = max(0, -((i * dh - pt) // sh))
            p1 = min(h, (oh - 1 + pt - i * dh) // sh + 1)
            for j in range(kw):
                q0 = max(0, -((j * dw - pl) // sw))
                q1 = min(w, (ow - 1 + pl - j * dw) // sw + 1)
                if p0 >= p1 or q0 >= q1:
                    continue
                r = (o * kh + i) * kw + j
                run = uint64(q1 - q0)
                for img in range(n_img):
                    for p in range(p0, p1):
                        d = uint64(((img * cout + o) * oh + p * sh + i * dh - pt) * ow + q0 * sw + j * dw - pl)
                        s = uint64(r * m + img * hw + p * w + q0)
                        if sw == 1:
                            for q in range(run):
                                dst[d + q] += src[s + q]
                        else:
                            step = uint64(sw)
                            for q in range(run):
                                dst[d + q * step] += src[s + q]
