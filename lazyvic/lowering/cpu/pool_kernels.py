"""The pooling steps' kernels, in Numba: max_pool2d (ops/pool.py) and the average pools and
their transposes (ops/avg_pool.py; at the end of this file).

One pass over the output; each window is clipped to the input (the -inf padding is never
read) and scanned in row-major order, the first of equal maxima kept and the last NaN
winning (PyTorch's rule), as the NumPy reference (ops/pool.py): the same bits, signed zeros and NaN payloads
included.

NaN handling makes every comparison a branch, so the kernel counts the NaNs of x first (a
vectorized pass, 5 us for ResNet's stem pool) and only an input with some takes the
NaN-aware loop. The NaN-free loop is branch-free selects (``maxss``/``vmaxps``); the 2x2 and
3x3 windows wholly inside x have their folds unrolled over unsigned offsets (signed ones cost
a wraparound test each), a loop over the row's outputs that vectorizes. Measured on 2 cores,
the values and the indices: MNIST's 2x2 pool of (64, 64, 24, 24) 3.7 and 7.7 ms before, 0.85
and 1.4 ms now; ResNet-18's 3x3 stride-2 stem pool of (32, 16, 16, 16) 150 and 520 us before,
120 and 230 us now.
Serial, for the reason given in lowering/cpu/backend._conv_step.
"""

from __future__ import annotations

import numpy as np
from numba import int64, njit, uint64

from lazyvic.ops.avg_pool import covering


@njit(cache=True, inline="always")
def _has_nan(flat) -> bool:
    """Whether the 1-D array ``flat`` holds a NaN: a count over every element (a vectorized
    pass, no early exit)."""
    nans = 0
    for k in range(uint64(flat.size)):
        v = flat[k]
        nans += v != v
    return nans > 0


@njit(cache=True, error_model="numpy", boundscheck=False)
def max_pool2d(x, out, kh, kw, sh, sw, ph, pw):
    """out (N, C, oH, oW) = the window maxima of x (N, C, H, W), both C-contiguous."""
    if _has_nan(x.reshape(-1)):
        _max_pool2d_nan(x, out, kh, kw, sh, sw, ph, pw)
    else:
        _max_pool2d_finite(x, out, kh, kw, sh, sw, ph, pw)


@njit(cache=True, inline="always")
def _inner_columns(w_in, ow, kw, sw, pw):
    """(qa, qb): output columns qa .. qb-1 have their whole window inside x's w_in columns."""
    qa = min(ow, (pw + sw - 1) // sw)
    return qa, max(qa, min(ow, (w_in - kw + pw) // sw + 1))


@njit(cache=True, inline="always")
def _later(m, v):
    """The maximum of an earlier m and a later v, the earlier kept when equal (NaN-free)."""
    return v if v > m else m


@njit(cache=True, error_model="numpy", boundscheck=False)
def _max_pool2d_finite(x, out, kh, kw, sh, sw, ph, pw):
    """max_pool2d of a NaN-free x. A window's maximum is a left-to-right fold of its rows'
    maxima, each a left-to-right fold of its elements (``_later``), so equal maxima (+0 and -0)
    keep the first; the 2x2 and 3x3 windows inside x have their folds unrolled."""
    n_img, c_in, h_in, w_in = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    qa, qb = _inner_columns(w_in, ow, kw, sw, pw)
    for plane in range(n_img * c_in):
        base, obase = plane * h_in * w_in, plane * oh * ow
        for p in range(oh):
            h0 = p * sh - ph
            i0, i1 = max(0, -h0), min(kh, h_in - h0)
            r0 = base + (h0 + i0) * w_in - pw
            o0 = obase + p * ow
            full = i1 - i0 == kh
            # Unsigned offsets: no wraparound test per access, so the unrolled loops vectorize
            # (MNIST's 2x2 pool of 64 images of 64 24x24 planes: 0.5 ms, 2.0 with signed ones).
            u0, uo, usw, uw = uint64(r0), uint64(o0), uint64(sw), uint64(w_in)
            one, two = uint64(1), uint64(2)
            if full and kh == 2 and kw == 2:
                for q in range(uint64(qa), uint64(qb)):
                    s = u0 + q * usw
                    t = s + uw
                    of[uo + q] = _later(_later(xf[s], xf[s + one]), _later(xf[t], xf[t + one]))
            elif full and kh == 3 and kw == 3:
                for q in range(uint64(qa), uint64(qb)):
                    s = u0 + q * usw
                    t, u = s + uw, s + two * uw
                    a = _later(_later(xf[s], xf[s + one]), xf[s + two])
                    b = _later(_later(xf[t], xf[t + one]), xf[t + two])
                    c = _later(_later(xf[u], xf[u + one]), xf[u + two])
                    of[uo + q] = _later(_later(a, b), c)
            else:
                for q in range(qa, qb):
                    of[o0 + q] = _window_max(xf, r0 + q * sw, i1 - i0, w_in, 0, kw)
            for e in range(qa + ow - qb):  # the edge columns
                q = e if e < qa else qb + e - qa
                w0 = q * sw - pw
                of[o0 + q] = _window_max(xf, r0 + pw + w0, i1 - i0, w_in, max(0, -w0), min(kw, w_in - w0))


@njit(cache=True, inline="always")
def _window_max(xf, s, rows, w_in, j0, j1):
    """The maximum of xf[s + i*w_in + j] for i < rows, j0 <= j < j1, folded in row-major order
    from -inf (NaN-free)."""
    m = -np.inf
    for i in range(rows):
        row = s + i * w_in
        for j in range(j0, j1):
            m = _later(m, xf[row + j])
    return m


@njit(cache=True, error_model="numpy", boundscheck=False)
def _max_pool2d_nan(x, out, kh, kw, sh, sw, ph, pw):
    """max_pool2d of an x with NaNs: a window's last NaN is its maximum (PyTorch's rule)."""
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
                of[obase + p * ow + q] = m


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def max_pool2d_indices(x, values, out, kh, kw, sh, sw, ph, pw):
    """out (N, C, oH, oW) int64 = the position h*W + w in its plane of each window's maximum:
    the first position inside x, in row-major order, whose element equals the window's value
    (``values`` = max_pool2d(x)), or the last NaN where the value is one
    (ops/pool.indices_reference).

    The 2x2 and 3x3 windows inside x compare their elements with the value in reverse order,
    each a select (the last kept is the first match): no early exit, no chain of branches, and
    the loop over columns vectorizes (MNIST's 2x2 pool of 64 images of 64 24x24 planes: 7.7 ms
    with a scan per window that stopped at its first match). Other windows, and those whose
    value is NaN (found by a count over ``values`` first), are scanned alone (``_first_index``)."""
    n_img, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, vf, of = x.reshape(-1), values.reshape(-1), out.reshape(-1)
    qa, qb = _inner_columns(w, ow, kw, sw, pw)
    usw, uw, one, two = uint64(sw), uint64(w), uint64(1), uint64(2)
    for plane in range(n_img * c):
        base = plane * h * w
        for oy in range(oh):
            h0 = oy * sh - ph
            i0, i1 = max(0, -h0), min(kh, h - h0)
            o0 = (plane * oh + oy) * ow
            p0 = (h0 + i0) * w - pw  # the plane position of column 0's window corner
            full = i1 - i0 == kh
            ub, uo, up = uint64(base), uint64(o0), uint64(p0)
            if full and kh == 2 and kw == 2:
                for q in range(uint64(qa), uint64(qb)):
                    m = vf[uo + q]
                    a = up + q * usw
                    b = a + uw
                    at = int64(b + one) if xf[ub + b + one] == m else -1
                    at = int64(b) if xf[ub + b] == m else at
                    at = int64(a + one) if xf[ub + a + one] == m else at
                    of[uo + q] = int64(a) if xf[ub + a] == m else at
            elif full and kh == 3 and kw == 3:
                for q in range(uint64(qa), uint64(qb)):
                    m = vf[uo + q]
                    at = int64(-1)
                    for i in range(3):
                        a = up + q * usw + uint64(2 - i) * uw
                        at = int64(a + two) if xf[ub + a + two] == m else at
                        at = int64(a + one) if xf[ub + a + one] == m else at
                        at = int64(a) if xf[ub + a] == m else at
                    of[uo + q] = at
            else:
                for q in range(qa, qb):
                    of[o0 + q] = _first_index(xf, base, vf[o0 + q], oy, q, h, w, kh, kw, sh, sw, ph, pw)
            for e in range(qa + ow - qb):  # the edge columns
                q = e if e < qa else qb + e - qa
                of[o0 + q] = _first_index(xf, base, vf[o0 + q], oy, q, h, w, kh, kw, sh, sw, ph, pw)
    if _has_nan(vf):  # windows whose value is NaN: their last NaN
        for k in range(vf.size):
            if vf[k] != vf[k]:
                plane, rest = divmod(k, oh * ow)
                oy, ox = divmod(rest, ow)
                of[k] = _first_index(xf, plane * h * w, vf[k], oy, ox, h, w, kh, kw, sh, sw, ph, pw)


@njit(cache=True, error_model="numpy", boundscheck=False, nogil=True)
def _first_index(xf, base, m, oy, ox, h, w, kh, kw, sh, sw, ph, pw):
    """One window's index (see max_pool2d_indices): its scan in row-major order."""
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
            if nan:
                if v != v:
                    at = y * w + xx  # the last NaN wins: scan on
            elif v == m:
                return y * w + xx
    return at


# -- average pooling (ops/avg_pool.py) -------------------------------------------------------
# avg_pool2d and adaptive_avg_pool2d read their windows from per-axis tables (ops/avg_pool.Windows)
# and add them in the reference's order: each window from +0.0, its rows in order and each row
# left to right. One accumulator per output column lets the columns whose windows are evenly
# spaced and of one width (the "band": all but the clipped edges of a plain pool) be added one
# window offset at a time, a loop over columns that vectorizes (contiguous at stride 1); the
# other columns add their own window. The transposes gather the same way over the windows
# covering each input position (evenly spaced at stride 1, one and the same at a global pool),
# or, where every input column is covered by as many windows (non-overlapping windows, the
# adaptive pools that tile), through one indexed loop per covering window.
# Measured on 2 cores (serial, as max_pool2d): 3x3 stride 1 over (32, 64, 28, 28) 10.4 ms with
# the strided loop alone, 3.9 ms with the contiguous one; the transpose of adaptive 56 -> 7 at
# (8, 64) 3.2 ms with the per-column loops, 1.4 ms with the indexed one.


def band(start: np.ndarray, end: np.ndarray) -> tuple:
    """(qa, qb, a, s, k): the longest run of windows qa .. qb-1 whose starts are a + q*s and whose
    widths are k (the kernels add those with one loop per window offset); (0, 0, 0, 0, 0) if none."""
    n = len(start)
    if n == 0:
        return (0, 0, 0, 0, 0)
    width = end - start
    best, i = (0, 1), 0
    while i < n - 1:
        j, s = i + 1, start[i + 1] - start[i]
        while j < n and width[j] == width[i] and start[j] - start[j - 1] == s:
            j += 1
        if j - i > best[1] - best[0]:
            best = (i, j)
        i = max(j - 1, i + 1)
    qa, qb = best
    s = int(start[qa + 1] - start[qa]) if qb - qa > 1 else 0
    return (qa, qb, int(start[qa]) - qa * s, s, int(width[qa]))


# Planes a global average pool sums side by side: each plane's sum is one chain of dependent
# adds (the reference's order), so one plane at a time waits on the add's latency; eight chains
# at once keep the adder busy. (n, 64, 16, 16) at n = 24, in a plan: 1,350 -> about 230 us.
GLOBAL_PLANES = 8


@njit(cache=True, error_model="numpy", boundscheck=False, inline="always")
def _global_sums(xf, of, planes, size, divisor):
    """of[p] = the sum of plane p of xf (``size`` elements each) from +0.0 in order, / divisor,
    GLOBAL_PLANES planes at a time."""
    z = of.dtype.type(0)
    p = 0
    while p + GLOBAL_PLANES <= planes:
        b = uint64(p * size)
        n = uint64(size)
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = z
        for e in range(n):
            a0 += xf[b + e]
            a1 += xf[b + n + e]
            a2 += xf[b + 2 * n + e]
            a3 += xf[b + 3 * n + e]
            a4 += xf[b + 4 * n + e]
            a5 += xf[b + 5 * n + e]
            a6 += xf[b + 6 * n + e]
            a7 += xf[b + 7 * n + e]
        of[p], of[p + 1], of[p + 2], of[p + 3] = a0 / divisor, a1 / divisor, a2 / divisor, a3 / divisor
        of[p + 4], of[p + 5], of[p + 6], of[p + 7] = a4 / divisor, a5 / divisor, a6 / divisor, a7 / divisor
        p += GLOBAL_PLANES
    for q in range(p, planes):
        acc = z
        for e in range(size):
            acc += xf[q * size + e]
        of[q] = acc / divisor


@njit(cache=True, error_model="numpy", boundscheck=False)
def avg_pool2d(x, out, r0, r1, c0, c1, divisor, qa, qb, a, s, k):
    """out (N, C, oH, oW) = the sum of each window of x (N, C, H, W) over rows r0[p] .. r1[p]-1
    and columns c0[q] .. c1[q]-1, from +0.0 in row-major order, divided by divisor[p, q] (of x's
    dtype); columns qa .. qb-1 have windows a + q*s .. a + q*s + k - 1 (see ``band``). Both
    arrays C-contiguous. A window that is the whole plane (a global pool) sums several planes
    side by side (:func:`_global_sums`: the same order per plane)."""
    n_img, c_in, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    if oh == 1 and ow == 1 and r0[0] == 0 and r1[0] == h and c0[0] == 0 and c1[0] == w:
        _global_sums(xf, of, n_img * c_in, h * w, divisor[0, 0])
        return
    acc = np.zeros(ow, dtype=out.dtype)
    nb = qb - qa
    band_acc = acc[qa:qb]
    for plane in range(n_img * c_in):
        base, obase = plane * h * w, plane * oh * ow
        for p in range(oh):
            for q in range(ow):
                acc[q] = 0.0
            for i in range(r1[p] - r0[p]):
                row = base + (r0[p] + i) * w
                for q in range(qa):
                    for j in range(c1[q] - c0[q]):
                        acc[q] += xf[row + c0[q] + j]
                if s == 1:
                    for j in range(k):
                        src = xf[row + a + qa + j : row + a + qa + j + nb]
                        for t in range(nb):
                            band_acc[t] += src[t]
                else:
                    for j in range(k):
                        at = row + a + qa * s + j
                        for t in range(nb):
                            band_acc[t] += xf[at + t * s]
                for q in range(qb, ow):
                    for j in range(c1[q] - c0[q]):
                        acc[q] += xf[row + c0[q] + j]
            o = obase + p * ow
            for q in range(ow):
                of[o + q] = acc[q] / divisor[p, q]


@njit(cache=True, error_model="numpy", boundscheck=False)
def avg_pool2d_backward(g, out, p0, p1, q0, q1, divisor, xa, xb, a, s, k, kc):
    """out (N, C, H, W): at each input position (y, x), g / divisor of the windows covering it
    (rows p0[y] .. p1[y]-1, columns q0[x] .. q1[x]-1 of g (N, C, oH, oW)) added from +0.0 in
    row-major window order. ``kc`` > 0: every column is covered by kc windows; else input columns
    xa .. xb-1 are covered by windows a + x*s .. + k - 1 (see ``band``). Both arrays C-contiguous."""
    n_img, c_in, oh, ow = g.shape
    h, w = out.shape[2], out.shape[3]
    gf, of = g.reshape(-1), out.reshape(-1)
    df = divisor.reshape(-1)
    if oh == 1 and ow == 1 and p1[0] - p0[0] == 1 and p1[h - 1] - p0[h - 1] == 1 and kc == 1:
        # a global pool's transpose: every input position under the one window, +0.0 + g / divisor
        z = of.dtype.type(0)
        size = uint64(h * w)
        for plane in range(n_img * c_in):
            v = z + gf[plane] / df[0]
            o = uint64(plane) * size
            for e in range(size):
                of[o + e] = v
        return
    t = np.empty(oh * ow, dtype=out.dtype)
    acc = np.zeros(w, dtype=out.dtype)
    nb = xb - xa
    band_acc = acc[xa:xb]
    for plane in range(n_img * c_in):
        gbase, obase = plane * oh * ow, plane * h * w
        for m in range(oh * ow):
            t[m] = gf[gbase + m] / df[m]
        for y in range(h):
            for x in range(w):
                acc[x] = 0.0
            for i in range(p1[y] - p0[y]):
                row = (p0[y] + i) * ow
                if kc > 0:
                    trow = t[row : row + ow]
                    for j in range(kc):
                        for x in range(w):
                            acc[x] += trow[q0[x] + j]
                    continue
                for x in range(xa):
                    for j in range(q1[x] - q0[x]):
                        acc[x] += t[row + q0[x] + j]
                if s == 1:
                    for j in range(k):
                        src = t[row + a + xa + j : row + a + xa + j + nb]
                        for u in range(nb):
                            band_acc[u] += src[u]
                elif s == 0:
                    for j in range(k):
                        v = t[row + a + j]
                        for u in range(nb):
                            band_acc[u] += v
                else:
                    for j in range(k):
                        at = row + a + xa * s + j
                        for u in range(nb):
                            band_acc[u] += t[at + u * s]
                for x in range(xb, w):
                    for j in range(q1[x] - q0[x]):
                        acc[x] += t[row + q0[x] + j]
            o = obase + y * w
            for x in range(w):
                of[o + x] = acc[x]


def avg_pool_arguments(windows, transposed: bool, attrs: dict, x_hw: tuple, out_hw: tuple, dtype) -> tuple:
    """The table arguments of ``avg_pool2d`` (or, ``transposed``, ``avg_pool2d_backward``) after
    (x, out), from ``windows(attrs, pooled input (H, W), pooled output (oH, oW))`` (ops/avg_pool.py)."""
    in_hw, pooled_hw = (out_hw, x_hw) if transposed else (x_hw, out_hw)
    win = windows(attrs, in_hw, pooled_hw)
    divisor = win.divisor.astype(dtype)
    if not transposed:
        return (win.row_start, win.row_end, win.col_start, win.col_end, divisor, *band(win.col_start, win.col_end))
    p0, p1 = covering(win.row_start, win.row_end, in_hw[0])
    q0, q1 = covering(win.col_start, win.col_end, in_hw[1])
    cover = q1 - q0
    kc = int(cover[0]) if cover.size and cover.min() == cover.max() else 0
    return (p0, p1, q0, q1, divisor, *band(q0, q1), kc)
