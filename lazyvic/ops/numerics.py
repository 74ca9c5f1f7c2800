"""One numerics: the compiled kernels' arithmetic, reproduced in NumPy for the interpreter.

A trace gives the same bits whether it runs on the NumPy interpreter (a first run in ``hot``
mode, a fallback) or as a compiled plan, on every machine with the same library versions. Three
things make that so, and this module is the NumPy half of each:

1. **float32 transcendentals.** Kernels call the vectorizable approximations of
   ``lowering/kernel_lib.py`` (``exp_f32``, ``log_f32``, ``tanh_f32``, ``sigmoid_f32``,
   ``erf_f32``; sources and errors there). Both sides are strict IEEE float32 arithmetic (no FMA
   contraction, no reassociation; the Horner steps are explicit fused multiply-adds, computed
   exactly here by :func:`fma`), so the same operations in the same order round the same way;
   the constants live here and ``kernel_lib`` imports them. The functions below are those
   approximations written with NumPy array operations, step for step.
2. **libm calls.** What the kernels compute with the C library (``math.sin`` of float32 is
   ``sinf``, float64 ``exp`` is ``exp`` ...) the interpreter computes with the same C functions,
   through Numba ufuncs (``ops/libm.py``): NumPy's own SIMD versions differ in the
   last bit. (A Numba built with Intel's SVML would vectorize those calls differently; the
   PyPI builds have none.)
3. **Reduction order.** A float sum has one order, fixed by the source and not by the
   compiler's vector width (:func:`lane_sum`): along its innermost reduced axis of size > 1,
   element ``k`` goes to lane ``k % LANES``; each lane adds its elements in order from 0.0; the
   lanes are combined in a fixed halving tree (lane ``i`` += lane ``i + h`` for h = 16, 8, 4,
   2, 1) into the row's partial sum. Over the other reduced axes (row-major), these partial
   sums are added in order to an accumulator that starts at 0.0. ``prod`` multiplies in
   row-major order from 1; ``max``/``min`` have one answer whatever the order (NaN wins; +0.0
   is above -0.0, as LLVM's ``maximum``/``minimum``).

NaN payloads (the sign bit of a NaN) are not part of the promise.
"""

from __future__ import annotations

import numpy as np

f32 = np.float32
i32 = np.int32

#: Lanes of a float sum (see the module docstring); a kernel reads it as a size argument, so
#: LLVM vectorizes the lane loop instead of unrolling it into scalars.
LANES = 32

# -- constants of the float32 approximations (kernel_lib.py imports them) -------------------
# exp: Cody-Waite reduction by ln 2, the degree-6 polynomial of Cephes expf (S. Moshier).
LOG2E = f32(1.44269504088896341)
LN2_HI = f32(0.693359375)
LN2_LO = f32(-2.12194440e-4)
EXP_HI = f32(88.72283905206835)
EXP_LO = f32(-87.33654475055310)
EXP_POLY = tuple(f32(v) for v in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2))
EXP_POLY += (f32(1.6666665459e-1), f32(5.0000001201e-1))
ONE = f32(1.0)
HALF = f32(0.5)
ZERO = f32(0.0)
TWO = f32(2.0)
INF = f32(np.inf)
NAN = f32(np.nan)
# log: frexp-style split at sqrt(2)/2, the polynomial of Cephes logf.
SQRTH = f32(0.707106781186547524)
LOG_POLY = tuple(
    f32(v)
    for v in (
        7.0376836292e-2,
        -1.1514610310e-1,
        1.1676998740e-1,
        -1.2420140846e-1,
        1.4249322787e-1,
        -1.6668057665e-1,
        2.0000714765e-1,
        -2.4999993993e-1,
        3.3333331174e-1,
    )
)
LN2 = f32(0.693147180559945309)
TINY = f32(1.17549435e-38)
TWO23 = f32(8388608.0)
# tanh: odd Taylor polynomial below 0.0625.
TANH_POLY = (f32(-1.0 / 3.0), f32(2.0 / 15.0), f32(-17.0 / 315.0))
TANH_SMALL = f32(0.0625)
# erf: x * P(x^2) / Q(x^2) on [-4, 4], the coefficients of Eigen's generic_fast_erf_float.
ERF_CLAMP = f32(4.0)
ERF_P = tuple(
    f32(v)
    for v in (
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    )
)
ERF_Q = tuple(
    f32(v) for v in (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03)
) + (f32(-1.42647390514189e-02),)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=f32)


def _bits_to_f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.int64).astype(i32).view(f32)


_LOW29 = (1 << 29) - 1  # the float64 fraction bits a float32 drops
_MIDPOINT = 1 << 28
_EXPONENT = 0x7FF << 52
_F32_NORMAL = (1023 - 126) << 52  # the float64 exponent field of 2**-126


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` of float32 arrays rounded once, as ``kernel_lib.fma`` (IEEE fusedMultiplyAdd).

    The product is exact in float64 (24 + 24 bits); the float64 sum is made round-to-odd (its
    error from TwoSum, Knuth; when inexact and even, moved one ulp toward the exact value), and
    rounding a round-to-odd float64 to float32 gives the correctly rounded result (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
    odd", IEEE Trans. Computers 57(4), 2008)."""
    with np.errstate(all="ignore"):
        p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
        cd = np.asarray(c, np.float64)
        s = np.asarray(p + cd)
        # Rounding the float64 sum to float32 gives the correctly rounded result wherever that
        # sum is not a float32 midpoint: the midpoints are float64 numbers, and rounding to
        # float64 keeps the exact sum on its side of each one. A midpoint has its low 29 fraction
        # bits 1 then 28 zeros; below float32's normal range (the spacing is wider) every
        # nonzero sum is taken as in doubt (no test has found such a case; the bit test holds
        # in the normal range only). Only where some element is in doubt is the round-to-odd
        # sum made: the interpreter's exp_f32 of 131,072 elements took 19.4 ms, now 7.3 ms.
        bits = s.view(np.int64)
        doubt = (bits & _LOW29) == _MIDPOINT
        doubt |= ((bits & _EXPONENT) < _F32_NORMAL) & (s != 0)
        if not doubt.any():
            return s.astype(f32)
        t = s - p
        err = (p - (s - t)) + (cd - t)
        even = (np.asarray(s).view(np.int64) & 1) == 0
        fix = (err != 0) & even & np.isfinite(s)
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(f32)


def exp_f32(x) -> np.ndarray:
    """``kernel_lib.exp_f32`` on a float32 array (the same float32 operations, in order)."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        xc = np.fmin(np.fmax(x, EXP_LO), EXP_HI)  # LLVM minnum/maxnum: NaN gives the other operand
        xc = np.where(x < EXP_LO, ZERO, xc)
        t = xc * LOG2E
        ni = np.where(t >= ZERO, t + HALF, t - HALF).astype(i32)  # truncation, as fptosi
        n = ni.astype(f32)
        r = xc - n * LN2_HI
        r = r - n * LN2_LO
        e0, e1, e2, e3, e4, e5 = EXP_POLY
        p = fma(fma(fma(fma(fma(e0, r, e1), r, e2), r, e3), r, e4), r, e5)
        y = p * r * r + r + ONE
        ni64 = ni.astype(np.int64)
        scale = np.where(ni > -127, _bits_to_f32((ni64 + 127) << 23), _bits_to_f32(1 << 23) * ZERO)
        out = np.where(ni < 128, y * scale, y * _bits_to_f32(254 << 23) * TWO)
        out = np.where(x > EXP_HI, INF, out)
        out = np.where(x < EXP_LO, ZERO, out)
        return np.where(x != x, x, out).astype(f32)


def log_f32(x) -> np.ndarray:
    """``kernel_lib.log_f32`` on a float32 array."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        sub = x < TINY
        xs = np.where(sub, x * TWO23, x)
        bits = xs.view(i32).astype(np.int64)
        e = ((bits >> 23) & 0xFF) - 126
        m = _bits_to_f32((bits & 0x007FFFFF) | 0x3F000000)
        small = m < SQRTH
        e = np.where(small, e - 1, e)
        m = np.where(small, m + m, m)
        f = m - ONE
        z = f * f
        p = LOG_POLY[0]
        for c in LOG_POLY[1:]:
            p = fma(p, f, c)
        ef = e.astype(f32) - np.where(sub, f32(23.0), ZERO)
        y = f * z * p - HALF * z
        out = f + y + ef * LN2
        out = np.where(x == ZERO, -INF, out)
        out = np.where(x < ZERO, NAN, out)
        out = np.where(x == INF, x, out)
        return np.where(x != x, x, out).astype(f32)


def tanh_f32(x) -> np.ndarray:
    """``kernel_lib.tanh_f32`` on a float32 array."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        a = np.abs(x)
        e = exp_f32(-TWO * a)
        big = (ONE - e) / (ONE + e)
        big = np.where(x < ZERO, -big, big)
        z = x * x
        t3, t5, t7 = TANH_POLY
        small = x + x * z * (t3 + z * (t5 + z * t7))
        return np.where(a < TANH_SMALL, small, big).astype(f32)


def sigmoid_f32(x) -> np.ndarray:
    """``kernel_lib.sigmoid_f32`` on a float32 array."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        return (ONE / (ONE + exp_f32(-x))).astype(f32)


def erf_f32(x) -> np.ndarray:
    """``kernel_lib.erf_f32`` on a float32 array."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        xc = np.fmin(np.fmax(x, -ERF_CLAMP), ERF_CLAMP)
        z = xc * xc
        p = ERF_P[0]
        for c in ERF_P[1:]:
            p = fma(p, z, c)
        p = p * xc
        q = ERF_Q[0]
        for c in ERF_Q[1:]:
            q = fma(q, z, c)
        return np.where(x != x, x, p / q).astype(f32)


# -- reductions -----------------------------------------------------------------------------
def _reduced_last(x: np.ndarray, axes) -> tuple:
    """``x`` with its reduced axes of size > 1 moved last (in order): (array, kept shape, those sizes)."""
    red = [a for a in axes if x.shape[a] != 1]
    keep = [a for a in range(x.ndim) if a not in red]
    y = np.transpose(x, keep + red)
    return y, tuple(x.shape[a] for a in keep), tuple(x.shape[a] for a in red)


def _keepdims(r: np.ndarray, x: np.ndarray, axes) -> np.ndarray:
    return r.reshape(tuple(1 if a in axes else n for a, n in enumerate(x.shape)))


def lane_sum(x: np.ndarray, axes) -> np.ndarray:
    """The sum of float array ``x`` over ``axes`` (kept, size 1) in the kernels' order (see the
    module docstring); the result has ``x``'s dtype."""
    dtype = x.dtype
    zero = dtype.type(0)
    y, kept, red = _reduced_last(x, axes)
    with np.errstate(all="ignore"):
        if not red:  # nothing to add: 0.0 + x (as the kernel: -0.0 becomes +0.0)
            return _keepdims(zero + y, x, axes).astype(dtype)
        n = red[-1]
        outer = int(np.prod(red[:-1], dtype=np.int64))
        if outer == 0 or n == 0:  # an empty reduction: 0.0
            return _keepdims(np.zeros(kept, dtype), x, axes)
        y = y.reshape(kept + (outer, n))
        nb = -(-n // LANES)
        if nb * LANES != n:  # lanes past the end get nothing: adding +0.0 to them is exact
            y = np.concatenate([y, np.zeros(kept + (outer, nb * LANES - n), dtype)], axis=-1)
        # np.add.accumulate is sequential by definition (out[k] = out[k-1] + in[k]); its missing
        # leading 0.0 only changes the sign of an all -0.0 prefix, which the + 0.0 after it
        # restores (a sum started at +0.0 is never -0.0 in round-to-nearest).
        blocks = y.reshape(kept + (outer, nb, LANES))
        lanes = np.add.accumulate(blocks, axis=-2, dtype=dtype)[..., -1, :] + zero
        h = LANES // 2
        while h:
            lanes[..., :h] += lanes[..., h : 2 * h]
            h //= 2
        total = np.add.accumulate(lanes[..., 0], axis=-1, dtype=dtype)[..., -1] + zero
    return _keepdims(np.asarray(total, dtype), x, axes)


def ordered_prod(x: np.ndarray, axes) -> np.ndarray:
    """The product over ``axes`` in row-major order from 1 (the kernels' order)."""
    y, kept, red = _reduced_last(x, axes)
    n = int(np.prod(red, dtype=np.int64))
    y = y.reshape(kept + (n,))
    with np.errstate(all="ignore"):  # sequential by definition; 1 * v0 is v0, -0.0 included
        total = np.multiply.accumulate(y, axis=-1, dtype=x.dtype)[..., -1] if n else np.ones(kept, x.dtype)
    return _keepdims(np.asarray(total, x.dtype), x, axes)


def extreme(x: np.ndarray, axes, largest: bool) -> np.ndarray:
    """max (``largest``) or min over ``axes``, keepdims, with the kernels' signed zeros: +0.0 is
    above -0.0 (LLVM's ``maximum``/``minimum``); NaN propagates."""
    r = (np.max if largest else np.min)(x, axis=tuple(axes), keepdims=True)
    if x.dtype.kind == "f" and r.size and np.any(r == 0):
        zeros = x == 0
        if largest:  # +0.0 if any +0.0 is among the zeros
            pick = np.any(zeros & ~np.signbit(x), axis=tuple(axes), keepdims=True)
        else:  # -0.0 if any -0.0 is
            pick = ~np.any(zeros & np.signbit(x), axis=tuple(axes), keepdims=True)
        signed = np.where(pick, x.dtype.type(0.0), x.dtype.type(-0.0))
        r = np.where(r == 0, signed, r)
    return r


# -- libm calls -------------------------------------------------------------------------------
def libm(name: str):
    """The Numba ufunc calling C library function ``name`` as the kernels do (compiled on first
    use, cached on disk): see ``ops/libm.py``. Numba is imported on first use only."""
    from lazyvic.ops import libm as ufuncs

    return getattr(ufuncs, name)


def int_power(a, b) -> np.ndarray:
    """PyTorch's integer ``a ** b`` as kernel_lib's ``ipow``/``ipow_u64``: square and multiply in
    int64 (uint64 for uint64), wrapping; a negative exponent gives 1 for base 1, +-1 for base -1,
    else 0. Returns the wide array (the caller narrows it to the dtype)."""
    wide = np.uint64 if np.asarray(a).dtype == np.uint64 else np.int64
    a, b = np.broadcast_arrays(np.asarray(a).astype(wide), np.asarray(b).astype(wide))
    r, base, e = np.ones(a.shape, wide), a.copy(), np.where(b > 0, b, 0).astype(wide)
    with np.errstate(all="ignore"):
        while np.any(e != 0):
            r = np.where((e & 1) != 0, r * base, r)
            e = e >> wide(1)
            base = base * base
    if wide is np.int64:
        negative = np.where(a == 1, 1, np.where(a == -1, 1 - 2 * (b & 1), 0))
        r = np.where(b < 0, negative, r)
    return r
