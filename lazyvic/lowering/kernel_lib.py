"""Scalar functions that generated kernels call (the kernel language's library).

The PyPI llvmlite has no SVML, so ``math.exp`` in a Numba loop is a scalar libm
call that blocks vectorization. These float32 versions use only arithmetic,
comparisons and bit casts, which LLVM vectorizes. They are compiled as functions
of their own that LLVM inlines into the kernel loops: a layer norm + gelu kernel ran 1.5x
faster than with Numba's IR-level ``inline="always"``. Like the kernels, they are strict IEEE
float32 arithmetic (no FMA contraction): ``lazyvic/ops/numerics.py`` computes the same
operations with NumPy for the interpreter, bit for bit, on any CPU (its constants are these).

Sources and measured maximum errors (tests/lowering/test_kernel_lib.py checks
them against float64 libm over dense grids):

- ``exp_f32``: Cody-Waite reduction by ln 2 and the degree-6 minimax polynomial
  of Cephes ``expf`` (S. Moshier); max relative error 2 ulp on [-87, 88].
- ``log_f32``: frexp-style split at sqrt(2)/2 and the polynomial of Cephes
  ``logf``; max absolute error 2e-7 near 1, relative 2 ulp elsewhere.
- ``tanh_f32``: odd Taylor polynomial for |x| < 0.0625, else
  ``(1 - e) / (1 + e)`` with ``e = exp(-2|x|)``; max abs error 4e-7, max relative
  error 5e-7 (the cancellation in 1 - e just above the Taylor range).
- ``sigmoid_f32``: ``1 / (1 + exp(-x))``; max relative error 3 ulp.
- ``philox_block``: four words of the Philox4x32-10 stream of ``seed`` (Salmon et al.,
  SC'11), as ``lazyvic.ops.source`` computes it in NumPy; ``uniform_f32`` / ``uniform_f64`` turn
  a word into ``rand``'s [0, 1) exactly as there: bit-identical to the interpreter
  (``lowering/cpu/random_kernels.py`` fills ``rand``'s outputs with them).
- ``erf_f32``: ``x * P(x^2) / Q(x^2)`` on [-4, 4], the rational minimax
  coefficients of Eigen's ``generic_fast_erf_float``; max abs error 4.2e-7,
  max relative error 2.2e-7 near 0.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

f32 = np.float32
f64 = np.float64
i32 = np.int32
i64 = np.int64
b1 = np.bool_
u8 = np.uint8
i8 = np.int8
i16 = np.int16
u16 = np.uint16
u32 = np.uint32
u64 = np.uint64


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


def _binary_float_intrinsic(llvm_name: str, doc: str):
    @intrinsic
    def fn(typingctx, a, b):
        if a != b or not isinstance(a, types.Float):
            return None

        def codegen(context, builder, signature, args):
            ty = args[0].type
            suffix = "f32" if ty == ir.FloatType() else "f64"
            decl = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ty, [ty, ty]), f"{llvm_name}.{suffix}"
            )
            return builder.call(decl, args)

        return a(a, b), codegen

    fn.__doc__ = doc
    return fn


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (IEEE fusedMultiplyAdd, LLVM's ``llvm.fma``): the FMA
    instruction where the CPU has one, the C library's ``fma`` elsewhere, the same bits either
    way (``ops/numerics.py`` computes it exactly in NumPy). The approximations' Horner steps use
    it explicitly; kernels never contract ``a * b + c`` themselves."""
    if not (a == b == c and isinstance(a, types.Float)):
        return None

    def codegen(context, builder, signature, args):
        ty = args[0].type
        suffix = "f32" if ty == ir.FloatType() else "f64"
        decl = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty, [ty, ty, ty]), f"llvm.fma.{suffix}")
        return builder.call(decl, args)

    return a(a, b, c), codegen


# Python's max() on floats compiles to a compare-and-branch that LLVM does not vectorize
# as a reduction (a row max ran 8x slower than a row sum here); these intrinsics do.
fmax = _binary_float_intrinsic("llvm.maximum", "Maximum that propagates NaN (torch.maximum), vectorizable.")
fmin = _binary_float_intrinsic("llvm.minimum", "Minimum that propagates NaN (torch.minimum), vectorizable.")
_maxnum = _binary_float_intrinsic("llvm.maxnum", "IEEE maxNum: the non-NaN operand.")
_minnum = _binary_float_intrinsic("llvm.minnum", "IEEE minNum: the non-NaN operand.")


def _accumulate_intrinsic(llvm_name: str | None, doc: str):
    """A float accumulation step whose instruction alone may be reassociated (``reassoc nsz``).

    Kernels are compiled without function-wide fast math, so everything else rounds as the
    NumPy interpreter does (``(x - m) - log(s)`` in a log-softmax stays that, instead of
    ``x - (m + log(s))``, which loses the low bits of large inputs); the loop vectorizer needs
    the flag only on the reduction's own add or maximum, and gets it here.
    """

    @intrinsic
    def fn(typingctx, a, b):
        if a != b or not isinstance(a, types.Float):
            return None

        def codegen(context, builder, signature, args):
            if llvm_name is None:
                return builder.fadd(args[0], args[1], flags=("reassoc", "nsz"))
            ty = args[0].type
            suffix = "f32" if ty == ir.FloatType() else "f64"
            decl = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ty, [ty, ty]), f"{llvm_name}.{suffix}"
            )
            return builder.call(decl, args, fastmath=("reassoc", "nsz"))

        return a(a, b), codegen

    fn.__doc__ = doc
    return fn


acc_add = _accumulate_intrinsic(None, "a + b for a sum's accumulator (reassociable, so it vectorizes).")
acc_max = _accumulate_intrinsic("llvm.maximum", "fmax for a max reduction's accumulator (reassociable).")
acc_min = _accumulate_intrinsic("llvm.minimum", "fmin for a min reduction's accumulator (reassociable).")

from lazyvic.ops import numerics as _nm  # noqa: E402 - the constants, shared with the NumPy mirrors

_LOG2E, _LN2_HI, _LN2_LO, _EXP_HI, _EXP_LO = _nm.LOG2E, _nm.LN2_HI, _nm.LN2_LO, _nm.EXP_HI, _nm.EXP_LO
_E0, _E1, _E2, _E3, _E4, _E5 = _nm.EXP_POLY
_ONE, _HALF, _ZERO, _TWO, _INF, _NAN = _nm.ONE, _nm.HALF, _nm.ZERO, _nm.TWO, _nm.INF, _nm.NAN


@njit(error_model="numpy", cache=True)
def exp_f32(x):
    xc = _minnum(_maxnum(x, _EXP_LO), _EXP_HI)
    # Below _EXP_LO the result is zero (set at the end); compute exp(0) meanwhile: the clamped
    # value would make a subnormal 2**n * y, and each subnormal product stalls the core (a
    # causal mask's -inf half of the scores made a softmax 4.5x slower).
    xc = _ZERO if x < _EXP_LO else xc
    # Round to nearest through a truncating int conversion (vectorizes; floorf is a libm call).
    t = xc * _LOG2E
    ni = i32(t + _HALF) if t >= _ZERO else i32(t - _HALF)
    n = f32(ni)
    r = xc - n * _LN2_HI
    r = r - n * _LN2_LO
    p = fma(fma(fma(fma(fma(_E0, r, _E1), r, _E2), r, _E3), r, _E4), r, _E5)
    y = p * r * r + r + _ONE
    # 2**n built from its exponent bits; n in [-126, 128): split to stay normal.
    scale = bits_to_f32(i32((ni + 127) << 23)) if ni > -127 else bits_to_f32(i32(1 << 23)) * _ZERO
    out = y * scale if ni < 128 else y * bits_to_f32(i32(254 << 23)) * _TWO
    out = _INF if x > _EXP_HI else out
    out = _ZERO if x < _EXP_LO else out
    return x if x != x else out


_SQRTH, _LN2, _TINY, _TWO23 = _nm.SQRTH, _nm.LN2, _nm.TINY, _nm.TWO23
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8 = _nm.LOG_POLY


@njit(error_model="numpy", cache=True)
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
    p = fma(fma(fma(fma(fma(fma(fma(fma(_L0, f, _L1), f, _L2), f, _L3), f, _L4), f, _L5), f, _L6), f, _L7), f, _L8)
    ef = f32(e) - (f32(23.0) if sub else _ZERO)
    y = f * z * p - _HALF * z
    out = f + y + ef * _LN2
    out = -_INF if x == _ZERO else out
    out = _NAN if x < _ZERO else out
    out = x if x == _INF else out
    return x if x != x else out


_T3, _T5, _T7 = _nm.TANH_POLY
_TANH_SMALL = _nm.TANH_SMALL


@njit(error_model="numpy", cache=True)
def tanh_f32(x):
    a = abs(x)
    e = exp_f32(-_TWO * a)
    big = (_ONE - e) / (_ONE + e)
    big = -big if x < _ZERO else big
    z = x * x
    small = x + x * z * (_T3 + z * (_T5 + z * _T7))
    return small if a < _TANH_SMALL else big


@njit(error_model="numpy", cache=True)
def sigmoid_f32(x):
    return _ONE / (_ONE + exp_f32(-x))


@njit(inline="always", cache=True)
def sigmoid_f64(x):
    return 1.0 / (1.0 + math.exp(-x))


# erf(x) ~ x * P(x^2) / Q(x^2) on [-4, 4] (erf(4) = 1 - 1.5e-8): the rational
# minimax coefficients of Eigen's generic_fast_erf_float. No exp, one division.
_ERF_CLAMP = _nm.ERF_CLAMP
_A13, _A11, _A9, _A7, _A5, _A3, _A1 = _nm.ERF_P
_B8, _B6, _B4, _B2, _B0 = _nm.ERF_Q


@njit(error_model="numpy", cache=True)
def erf_f32(x):
    xc = _minnum(_maxnum(x, -_ERF_CLAMP), _ERF_CLAMP)
    z = xc * xc
    p = fma(fma(fma(fma(fma(fma(_A13, z, _A11), z, _A9), z, _A7), z, _A5), z, _A3), z, _A1) * xc
    q = fma(fma(fma(fma(_B8, z, _B6), z, _B4), z, _B2), z, _B0)
    return x if x != x else p / q


_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_PM0 = _U64(0xD2511F53)
_PM1 = _U64(0xCD9E8D57)
_PW0 = _U64(0x9E3779B9)
_PW1 = _U64(0xBB67AE85)
_SH32 = _U64(32)
_SH8 = _U64(8)
_TWO_M24 = f32(1.0 / 16777216.0)
_TWO_M32 = f64(1.0 / 4294967296.0)


@njit(inline="always", cache=True)
def philox_block(seed, block):
    """Words ``4 * block`` .. ``4 * block + 3`` of the Philox4x32-10 stream keyed by ``seed``
    (int64; ``block`` uint64): the generator's ten rounds on the counter ``block``, as four
    uint64 (each below 2^32)."""
    c0 = block & _MASK32
    c1 = block >> _SH32
    c2 = _U64(0)
    c3 = _U64(0)
    k0 = _U64(seed) & _MASK32
    k1 = (_U64(seed) >> _SH32) & _MASK32
    for _ in range(10):
        p0 = c0 * _PM0
        p1 = c2 * _PM1
        n0 = (p1 >> _SH32) ^ c1 ^ k0
        n2 = (p0 >> _SH32) ^ c3 ^ k1
        c1 = p1 & _MASK32
        c3 = p0 & _MASK32
        c0 = n0
        c2 = n2
        k0 = (k0 + _PW0) & _MASK32
        k1 = (k1 + _PW1) & _MASK32
    return c0, c1, c2, c3


@njit(inline="always", cache=True)
def uniform_f32(word):
    """A stream word as ``rand``'s float32 in [0, 1): its 24 high bits times 2^-24 (exact)."""
    return f32(word >> _SH8) * _TWO_M24


@njit(inline="always", cache=True)
def uniform_f64(word):
    """A stream word as ``rand``'s float64 in [0, 1): the word times 2^-32 (exact)."""
    return f64(word) * _TWO_M32


@njit(cache=True, error_model="numpy")
def scatter_add_into(out, index, src, dim):
    """``out[..., index[p], ...] += src[p]`` for every position p of ``index`` (PyTorch's
    scatter_add along ``dim``); ``out`` is C-contiguous, ``index``/``src`` any strides.

    Serial, in the order of ``index``'s positions: duplicates add in a fixed order.
    Returns the first out-of-range index found (then nothing more is added), or -1.
    """
    n = out.shape[dim]
    flat = out.reshape(-1)
    for pos in np.ndindex(index.shape):
        j = index[pos]
        if j < 0 or j >= n:
            return j
        off = 0
        stride = 1
        for d in range(out.ndim - 1, -1, -1):
            off += (j if d == dim else pos[d]) * stride
            stride *= out.shape[d]
        flat[off] += src[pos]
    return -1


# -- autocast precisions: round to the nearest float16 / bfloat16, keep the dtype ------------
# lazyvic has no half storage: ``lazyvic.autocast`` rounds matmul/conv operands with these and
# multiplies in float32 (lazyvic/amp.py). Round-half-to-even on the bit pattern, as the
# hardware conversions do; bit-identical with ops/elementwise.py's NumPy reference
# (tests/test_amp.py). NaN is returned unchanged.
#
# - float16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits; max 65504, smallest
#   normal 2**-14, subnormals spaced 2**-24). Normal magnitudes drop the low 13 (float32)
#   or 42 (float64) mantissa bits, a carry moving into the exponent; below 2**-14 the value
#   is rounded to a multiple of 2**-24 by adding and removing a constant whose ulp is 2**-24
#   (the FPU rounds to nearest even); a rounded magnitude of 2**16 or more (from 65520 on)
#   is infinity. float64 rounds directly to binary16 (NumPy's ``astype(np.float16)``).
# - bfloat16: the top 16 bits of the float32 pattern (Google Brain's format; PyTorch's
#   ``c10::BFloat16`` round_to_nearest_even): same exponent range as float32, 7 mantissa
#   bits. float64 goes through float32 first, as PyTorch's conversion does.


@intrinsic
def bits_to_f64(typingctx, x):
    """Reinterpret an int64 as float64."""
    if x != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def f64_to_bits(typingctx, x):
    """Reinterpret a float64 as int64."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


_F16_MIN_NORMAL = f32(2.0**-14)
_F16_OVERFLOW = f32(65536.0)  # a rounded magnitude this large is past the largest binary16 (65504)
_F16_SUBNORMAL_F32 = f32(0.5)  # ulp(0.5) = 2**-24 in float32
_F16_SUBNORMAL_F64 = f64(2.0**28)  # ulp(2**28) = 2**-24 in float64
_INF64 = f64(np.inf)


@njit(error_model="numpy", cache=True)
def round_f16_f32(x):
    """float32 ``x`` rounded to the nearest binary16 value (ties to even), as float32."""
    bits = f32_to_bits(x)
    mag = bits & i32(0x7FFFFFFF)
    normal = bits_to_f32(i32((mag + 0x0FFF + ((mag >> 13) & 1)) & -0x2000))
    a = bits_to_f32(i32(mag))
    sub = (a + _F16_SUBNORMAL_F32) - _F16_SUBNORMAL_F32
    y = sub if a < _F16_MIN_NORMAL else normal
    y = _INF if y >= _F16_OVERFLOW else y
    y = -y if bits < 0 else y
    return x if x != x else y


@njit(error_model="numpy", cache=True)
def round_f16_f64(x):
    """float64 ``x`` rounded to the nearest binary16 value (ties to even), as float64."""
    bits = f64_to_bits(x)
    mag = bits & i64(0x7FFFFFFFFFFFFFFF)
    normal = bits_to_f64(i64((mag + ((1 << 41) - 1) + ((mag >> 42) & 1)) & -(1 << 42)))
    a = bits_to_f64(i64(mag))
    sub = (a + _F16_SUBNORMAL_F64) - _F16_SUBNORMAL_F64
    y = sub if a < f64(_F16_MIN_NORMAL) else normal
    y = _INF64 if y >= f64(_F16_OVERFLOW) else y
    y = -y if bits < 0 else y
    return x if x != x else y


@njit(error_model="numpy", cache=True)
def round_bf16_f32(x):
    """float32 ``x`` rounded to the nearest bfloat16 value (ties to even), as float32."""
    bits = f32_to_bits(x)
    mag = bits & i32(0x7FFFFFFF)
    y = bits_to_f32(i32((mag + 0x7FFF + ((mag >> 16) & 1)) & -0x10000))
    y = -y if bits < 0 else y
    return x if x != x else y


@njit(error_model="numpy", cache=True)
def round_bf16_f64(x):
    """float64 ``x`` rounded to float32, then to the nearest bfloat16 value, as float64."""
    return x if x != x else f64(round_bf16_f32(f32(x)))


# -- half storage ------------------------------------------------------------------------------
# float16 and bfloat16 tensors reach kernels as their uint16 bits (Numba types neither). A load
# widens the bits to float32 (exact); ops compute in float32 and round each result with
# round_f16_f32 / round_bf16_f32; a store turns a float32 into the bits of the nearest half
# value, ties to even: NumPy's ``astype(np.float16)`` and ml_dtypes' ``astype(bfloat16)``,
# which the interpreter uses (NaN stays NaN; its payload is not kept).
_F16_SUBNORMAL_SCALE = f32(2.0**-24)  # the binary16 subnormal quantum


@njit(error_model="numpy", cache=True)
def ld_f16(h):
    """The float32 value of binary16 bits ``h`` (a uint16), exactly."""
    h = i32(h)
    e = h & 0x7C00
    m = h & 0x03FF
    normal = bits_to_f32(i32(((h & 0x7FFF) << 13) + (112 << 23)))
    sub = f32(m) * _F16_SUBNORMAL_SCALE
    special = bits_to_f32(i32(0x7F800000 | (m << 13)))
    y = sub if e == 0 else (special if e == 0x7C00 else normal)
    return -y if (h & 0x8000) != 0 else y


@njit(error_model="numpy", cache=True)
def ld_bf16(h):
    """The float32 value of bfloat16 bits ``h`` (a uint16): the top half of its bits."""
    return bits_to_f32(i32(i32(h) << 16))


@njit(error_model="numpy", cache=True)
def st_f16(x):
    """The binary16 bits (uint16) of float32 ``x`` rounded to nearest, ties to even."""
    bits = f32_to_bits(x)
    sign = (bits >> 16) & 0x8000
    mag = bits & i32(0x7FFFFFFF)
    normal = ((mag + 0x0FFF + ((mag >> 13) & 1)) >> 13) - (112 << 10)
    # Below 2**-14: a + 0.5 rounds a to a multiple of 2**-24 (the float32 ulp of [0.5, 1)), and its
    # mantissa bits are that multiple: the subnormal's bits, with integer operations only.
    sub = f32_to_bits(bits_to_f32(i32(mag)) + _F16_SUBNORMAL_F32) - i32(0x3F000000)
    h = sub if mag < 0x38800000 else normal
    h = 0x7C00 if mag >= 0x477FF000 else h
    h = 0x7E00 if mag > 0x7F800000 else h
    return u16(h | sign)


@njit(error_model="numpy", cache=True)
def st_bf16(x):
    """The bfloat16 bits (uint16) of float32 ``x`` rounded to nearest, ties to even."""
    bits = f32_to_bits(x)
    sign = (bits >> 16) & 0x8000
    mag = bits & i32(0x7FFFFFFF)
    h = (mag + 0x7FFF + ((mag >> 16) & 1)) >> 16
    h = 0x7FC0 if mag > 0x7F800000 else h
    return u16(h | sign)


# -- integer powers ------------------------------------------------------------------------------
# PyTorch's integer pow: square and multiply, wrapping on overflow; a negative exponent gives
# 1 for base 1, +-1 for base -1, else 0 (the integer part of 1 / a**-b). ops/numerics.py's
# int_power computes the same in NumPy.


@njit(error_model="numpy", cache=True)
def fmod_c(a, b):
    """C's ``fmod``: ``a - trunc(a / b) * b`` computed exactly (the result is representable, so
    IEEE fmod never rounds); NaN for ``b == 0`` or an infinite ``a``. Numba has no ``math.fmod``;
    NumPy's ``fmod`` is the C library's, as the interpreter's ``np.fmod``."""
    return np.fmod(a, b)


@njit(error_model="numpy", cache=True)
def remainder_c(a, b):
    """PyTorch's float remainder: ``fmod(a, b)``, plus ``b`` where that and ``b`` have opposite
    signs (so the result has the sign of ``b``; a zero keeps fmod's sign)."""
    r = np.fmod(a, b)
    if r != 0 and (b < 0) != (r < 0):
        return r + b
    return r


@njit(error_model="numpy", cache=True)
def ipow(a, b):
    """int64 ``a ** b`` (the caller narrows the result to its dtype: the wrap commutes)."""
    if b < 0:
        if a == 1:
            return i64(1)
        if a == -1:
            return i64(1) - i64(2) * (b & 1)
        return i64(0)
    r = i64(1)
    while b != 0:
        if b & 1:
            r = r * a
        b = b >> 1
        a = a * a
    return r


@njit(error_model="numpy", cache=True)
def ipow_u64(a, b):
    """uint64 ``a ** b``, wrapping modulo 2**64."""
    r = u64(1)
    while b != u64(0):
        if b & u64(1):
            r = r * a
        b = b >> u64(1)
        a = a * a
    return r
