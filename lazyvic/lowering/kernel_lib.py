"""Scalar functions that generated kernels call (the kernel language's library).

The PyPI llvmlite has no SVML, so ``math.exp`` in a Numba loop is a scalar libm
call that blocks vectorization. These float32 versions use only arithmetic,
comparisons and bit casts, which LLVM vectorizes; they are inlined into kernels.

Sources and measured maximum errors (tests/lowering/test_kernel_lib.py checks
them against float64 libm over dense grids):

- ``exp_f32``: Cody-Waite reduction by ln 2 and the degree-6 minimax polynomial
  of Cephes ``expf`` (S. Moshier); max relative error 2 ulp on [-87, 88].
- ``log_f32``: frexp-style split at sqrt(2)/2 and the polynomial of Cephes
  ``logf``; max absolute error 2e-7 near 1, relative 2 ulp elsewhere.
- ``tanh_f32``: odd Taylor polynomial for |x| < 0.0625, else
  ``(1 - e) / (1 + e)`` with ``e = exp(-2|x|)``; max abs error 4e-7.
- ``sigmoid_f32``: ``1 / (1 + exp(-x))``; max relative error 3 ulp.
- ``erf_f32``: Taylor series for |x| < 0.25, else ``1 - erfc`` with the
  Chebyshev-fitted erfc of Numerical Recipes 2nd ed. section 6.2 (``erfcc``,
  fractional error < 1.2e-7) evaluated in float32; max abs error 4e-7.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

f32 = np.float32
f64 = np.float64
i32 = np.int32
i64 = np.int64
b1 = np.bool_


@intrinsic
def bits_to_f32(typingctx, x):
    """Reinterpret an int32 as float32 (a bit cast, vectorizable)."""
    if x != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def f32_to_bits(typingctx, x):
    """Reinterpret a float32 as int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


_LOG2E = f32(1.44269504088896341)
_LN2_HI = f32(0.693359375)
_LN2_LO = f32(-2.12194440e-4)
_EXP_HI = f32(88.72283905206835)
_EXP_LO = f32(-87.33654475055310)
_E0 = f32(1.9875691500e-4)
_E1 = f32(1.3981999507e-3)
_E2 = f32(8.3334519073e-3)
_E3 = f32(4.1665795894e-2)
_E4 = f32(1.6666665459e-1)
_E5 = f32(5.0000001201e-1)
_ONE = f32(1.0)
_HALF = f32(0.5)
_ZERO = f32(0.0)
_TWO = f32(2.0)
_INF = f32(np.inf)
_NAN = f32(np.nan)


@njit(inline="always", fastmath={"contract"})
def exp_f32(x):
    xc = min(max(x, _EXP_LO), _EXP_HI)
    n = math.floor(xc * _LOG2E + _HALF)
    r = xc - n * _LN2_HI
    r = r - n * _LN2_LO
    p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
    y = p * r * r + r + _ONE
    # 2**n built from its exponent bits; n in [-126, 128): split to stay normal.
    ni = i32(n)
    scale = bits_to_f32(i32((ni + 127) << 23)) if ni > -127 else bits_to_f32(i32(1 << 23)) * _ZERO
    out = y * scale if ni < 128 else y * bits_to_f32(i32(254 << 23)) * _TWO
    out = _INF if x > _EXP_HI else out
    out = _ZERO if x < _EXP_LO else out
    return x if x != x else out


_SQRTH = f32(0.707106781186547524)
_L0 = f32(7.0376836292e-2)
_L1 = f32(-1.1514610310e-1)
_L2 = f32(1.1676998740e-1)
_L3 = f32(-1.2420140846e-1)
_L4 = f32(1.4249322787e-1)
_L5 = f32(-1.6668057665e-1)
_L6 = f32(2.0000714765e-1)
_L7 = f32(-2.4999993993e-1)
_L8 = f32(3.3333331174e-1)
_LN2 = f32(0.693147180559945309)
_TINY = f32(1.17549435e-38)
_TWO23 = f32(8388608.0)


@njit(inline="always", fastmath={"contract"})
def log_f32(x):
    sub = x < _TINY
    xs = x * _TWO23 if sub else x  # subnormals: scale into the normal range
    bits = f32_to_bits(xs)
    e = ((bits >> 23) & 0xFF) - 126
    m = bits_to_f32(i32((bits & 0x007FFFFF) | 0x3F000000))  # mantissa in [0.5, 1)
    small = m < _SQRTH
    e = e - 1 if small else e
    m = m + m if small else m
    f = m - _ONE
    z = f * f
    p = ((((((((_L0 * f + _L1) * f + _L2) * f + _L3) * f + _L4) * f + _L5) * f + _L6) * f + _L7) * f + _L8)
    ef = f32(e) - (f32(23.0) if sub else _ZERO)
    y = f * z * p - _HALF * z
    out = f + y + ef * _LN2
    out = -_INF if x == _ZERO else out
    out = _NAN if x < _ZERO else out
    out = x if x == _INF else out
    return x if x != x else out


_T3 = f32(-1.0 / 3.0)
_T5 = f32(2.0 / 15.0)
_T7 = f32(-17.0 / 315.0)
_TANH_SMALL = f32(0.0625)


@njit(inline="always", fastmath={"contract"})
def tanh_f32(x):
    a = abs(x)
    e = exp_f32(-_TWO * a)
    big = (_ONE - e) / (_ONE + e)
    big = -big if x < _ZERO else big
    z = x * x
    small = x + x * z * (_T3 + z * (_T5 + z * _T7))
    return small if a < _TANH_SMALL else big


@njit(inline="always", fastmath={"contract"})
def sigmoid_f32(x):
    return _ONE / (_ONE + exp_f32(-x))


@njit(inline="always")
def sigmoid_f64(x):
    return 1.0 / (1.0 + math.exp(-x))


_ERF_C = f32(1.1283791670955126)  # 2/sqrt(pi)
_ERF_SMALL = f32(0.25)
_R0 = f32(-1.26551223)
_R1 = f32(1.00002368)
_R2 = f32(0.37409196)
_R3 = f32(0.09678418)
_R4 = f32(-0.18628806)
_R5 = f32(0.27886807)
_R6 = f32(-1.13520398)
_R7 = f32(1.48851587)
_R8 = f32(-0.82215223)
_R9 = f32(0.17087277)
_S3 = f32(-1.0 / 3.0)
_S5 = f32(1.0 / 10.0)
_S7 = f32(-1.0 / 42.0)
_S9 = f32(1.0 / 216.0)


@njit(inline="always", fastmath={"contract"})
def erf_f32(x):
    a = abs(x)
    t = _ONE / (_ONE + _HALF * a)
    poly = _R0 + t * (_R1 + t * (_R2 + t * (_R3 + t * (_R4 + t * (_R5 + t * (_R6 + t * (_R7 + t * (_R8 + t * _R9))))))))
    erfc = t * exp_f32(-a * a + poly)
    big = _ONE - erfc
    big = -big if x < _ZERO else big
    z = x * x
    small = _ERF_C * x * (_ONE + z * (_S3 + z * (_S5 + z * (_S7 + z * _S9))))
    out = small if a < _ERF_SMALL else big
    return x if x != x else out
