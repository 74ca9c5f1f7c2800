"""The max_pool2d step's kernel (ops/pool.py), in Numba.

One pass over the output; each window is clipped to the input (the -inf padding is never
read) and scanned in row-major order, the first of equal maxima kept and the first NaN
winning, as the NumPy reference (ops/pool.py): the same bits, signed zeros and NaN payloads
included.

NaN handling makes every comparison a branch, so the kernel counts the NaNs of x first (a
vectorized pass, 5 us for ResNet's stem pool) and only an input with some takes the
NaN-aware loop. The NaN-free loop is branch-free selects (compiled to ``maxss``), with
3-wide windows away from the left and right edges unrolled. Measured on ResNet-18's stem pool
at batch 32 (3x3 stride 2 over (32, 16, 16, 16), 2 cores, in the compiled forward pass): 340-365
us with the NaN-aware loop alone, 120 us now. Still latency-bound (about 10 cycles per output):
a separable pass (rows, then columns) measured 70 us where W == sW*oW, left for later. Indices
are unsigned (signed ones cost a wraparound test each).
Serial, for the reason given in lowering/cpu/backend._conv_step.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64


@njit(cache=True, error_model="numpy", boundscheck=False)
def max_pool2d(x, out, kh, kw, sh, sw, ph, pw):
    """out (N, C, oH, oW) = the window maxima of x (N, C, H, W), both C-contiguous."""
    xf = x.reshape(-1)
    nans = 0
    for k in range(uint64(xf.size)):
        v = xf[k]
        nans += v != v
    if nans:
        _max_pool2d_nan(x, out, kh, kw, sh, sw, ph, pw)
    else:
        _max_pool2d_finite(x, out, kh, kw, sh, sw, ph, pw)


@njit(cache=True, error_model="numpy", boundscheck=False)
def _max_pool2d_finite(x, out, kh, kw, sh, sw, ph, pw):
    """max_pool2d of a NaN-free x."""
    n_img, c_in, h_in, w_in = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    # Output columns qa .. qb-1 have their whole window inside x's columns.
    qa = min(ow, (pw + sw - 1) // sw)
    qb = max(qa, min(ow, (w_in - kw + pw) // sw + 1))
    one, two = uint64(1), uint64(2)
    for plane in range(n_img * c_in):
        base, obase = plane * h_in * w_in, plane * oh * ow
        for p in range(oh):
            h0 = p * sh - ph
            i0, i1 = max(0, -h0), min(kh, h_in - h0)
            r0 = base + (h0 + i0) * w_in - pw
            o0 = uint64(obase + p * ow)
            for q in range(ow):
                s = uint64(r0 + q * sw)
                m = -np.inf
                if kw == 3 and qa <= q < qb:
                    for i in range(i1 - i0):
                        row = s + uint64(i * w_in)
                        a, b, c = xf[row], xf[row + one], xf[row + two]
                        ab = b if b > a else a
                        r = c if c > ab else ab
                        m = r if r > m else m
                else:
                    w0 = q * sw - pw
                    j0, j1 = max(0, -w0), min(kw, w_in - w0)
                    for i in range(i1 - i0):
                        row = s + uint64(i * w_in)
                        for j in range(uint64(j0), uint64(j1)):
                            v = xf[row + j]
                            m = v if v > m else m
                of[o0 + q] = m


@njit(cache=True, error_model="numpy", boundscheck=False)
def _max_pool2d_nan(x, out, kh, kw, sh, sw, ph, pw):
    """max_pool2d of an x with NaNs: a window's first NaN is its maximum."""
    n_img, c_in, h_in, w_in = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    for plane in range(n_img * c_in):
        base, obase = plane * h_in * w_in, plane * oh * ow
        for p in range(oh):
            h0 = p * sh - ph
            i0, i1 = max(0, -h0), min(kh, h_in - h0)
            for q in range(ow):
                w0 = q * sw - pw
                j0, j1 = max(0, -w0), min(kw, w_in - w0)
                m = -np.inf
                for i in range(i0, i1):
                    row = base + (h0 + i) * w_in + w0
                    for j in range(j0, j1):
                        v = xf[row + j]
                        if v > m or v != v:
                            m = v
                        if m != m:
                            break
                    if m != m:
                        break
                of[obase + p * ow + q] = m


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def max_pool2d_indices(x, values, out, kh, kw, sh, sw, ph, pw):
    """out (N, C, oH, oW) int64 = the position h*W + w in its plane of each window's maximum:
    the first position inside x, in row-major order, whose element equals the window's value
    (``values`` = max_pool2d(x)), or is a NaN where the value is (ops/pool.indices_reference).
    Stops at the first match (a scan keeping a running maximum was a chain of dependent
    compares: 10.5 ms for MNIST's 2x2 pool of 64 images of 64 24x24 planes)."""
    n_img, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, vf, of = x.reshape(-1), values.reshape(-1), out.reshape(-1)
    for plane in range(n_img * c):
        base = plane * h * w
        for oy in range(oh):
            for ox in range(ow):
                k = (plane * oh + oy) * ow + ox
                m = vf[k]
                nan = m != m
                at = -1
                for dy in range(kh):
                    y = oy * sh - ph + dy
                    if y < 0 or y >= h:
                        continue
                    for dx in range(kw):
                        xx = ox * sw - pw + dx
                        if xx < 0 or xx >= w:
                            continue
                        v = xf[base + y * w + xx]
                        if v == m or (nan and v != v):
                            at = y * w + xx
                            break
                    if at >= 0:
                        break
                of[k] = at
