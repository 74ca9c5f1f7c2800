"""Elementwise functions built on the op table's primitives: rounding (``floor``, ``ceil``,
``trunc``, ``frac``, ``round``), ``sign``, trigonometry (``sin``, ``cos``, ``tan``, the inverse
and hyperbolic functions, ``atan2``, ``deg2rad``, ``rad2deg``), logarithms and exponentials
(``log1p``, ``expm1``, ``log2``, ``log10``, ``exp2``, ``logaddexp``, ``logaddexp2``), ``clamp``,
floor division and remainders, tests (``isnan``, ``isinf``, ``isfinite``, ``isclose``),
``nan_to_num``, the logical functions, and ``lerp``, ``hypot``, ``heaviside`` (PyTorch's names,
dtypes and special values).

Written over the tensors they are handed (their methods and ``Tensor.apply``), so this module sits
below :mod:`lazyvic.tensor`, whose methods these functions are. ``floor``, ``round``, ``sin``,
``cos``, ``log1p``, ``expm1``, ``atan``, ``asin``, ``acos``, ``sinh``, ``cosh``, ``asinh``, ``acosh``,
``atanh`` and ``atan2`` are primitives (lazyvic/ops/elementwise.py); the rest are
compositions that fusion turns back into one loop.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError
from lazyvic.shapes import broadcast_shapes


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def _float(x):
    return x if x.dtype.is_floating_point else x.to(dt.default_float)


def _unchanged_if_integral(x):
    """Rounding an integer or bool tensor gives a copy of it (PyTorch keeps the dtype)."""
    return x.clone()


# ------------------------------------------------------------------ rounding
def floor(x):
    """Largest integer <= x, elementwise (same dtype; integer inputs are returned as a copy)."""
    return x.apply("floor", x) if x.dtype.is_floating_point else _unchanged_if_integral(x)


def ceil(x):
    """Smallest integer >= x: ``-floor(-x)`` (exact, and -0.0 where PyTorch gives it)."""
    return -(-x).floor() if x.dtype.is_floating_point else _unchanged_if_integral(x)


def trunc(x):
    """x rounded toward zero: ``ceil`` below zero, ``floor`` above."""
    if not x.dtype.is_floating_point:
        return _unchanged_if_integral(x)
    return x.ceil().where(x < 0, x.floor())


fix = trunc


def frac(x):
    """Fractional part ``x - trunc(x)`` (sign of x; NaN for infinities, as PyTorch).

    Raises:
        DTypeError: an integer input (PyTorch has no integer frac).
    """
    if not x.dtype.is_floating_point:
        raise DTypeError(f"frac: expected a floating-point input, got {x.dtype.name}")
    return x - x.trunc()


def round(x, decimals: int = 0):  # noqa: A001
    """Round half to even (``round(2.5) == 2``, as PyTorch and IEEE 754); with ``decimals``,
    ``round(x * 10**decimals) / 10**decimals`` as PyTorch computes it."""
    if not x.dtype.is_floating_point:
        return _unchanged_if_integral(x)
    if decimals == 0:
        return x.apply("round", x)
    scale = 10.0**decimals
    return (x * scale).round() / scale


def sign(x):
    """-1, 0 or 1 elementwise, in x's dtype; ``sign(-0.0)`` and ``sign(nan)`` are 0, as PyTorch
    computes ``(0 < x) - (x < 0)``.

    Raises:
        DTypeError: a bool input.
    """
    if x.dtype is dt.bool_:
        raise DTypeError("sign: bool tensors have no sign; cast to an integer or float dtype first")
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


sgn = sign


def pow(x, exponent):  # noqa: A001
    """``x ** exponent`` (tensor or number, either side broadcast). Integer powers 0, 1 and 2, and
    0.5, are exact products or ``sqrt``; an integer tensor to a non-negative integer power stays
    integral (square and multiply), as in PyTorch, and so does an integer tensor to an integer
    tensor power (wrapping; a negative exponent gives 0 except for bases 1 and -1, as PyTorch);
    otherwise the result is floating."""
    if isinstance(exponent, numbers.Number) and not isinstance(exponent, bool):
        if x.dtype is dt.bool_ and isinstance(exponent, numbers.Integral):
            x = x.to(dt.int64)  # bool ** 2 is int64 in PyTorch (bool with a Python int)
        if exponent == 2:
            return x * x
        if exponent == 1:
            return x + 0
        if exponent == 0.5 and x.dtype.is_floating_point:
            return x.sqrt()
        if x.dtype.category == 1 and isinstance(exponent, numbers.Integral) and exponent >= 0:
            return _integer_power(x, int(exponent))
    e_dtype = getattr(exponent, "dtype", None)
    if x.dtype.category == 1 and e_dtype is not None and e_dtype.category == 1:
        return x._binary("pow", exponent)
    if x.dtype is dt.bool_ and e_dtype is dt.bool_:
        raise DTypeError("pow: bool tensors have no power; cast to an integer or float dtype first")
    return _float(x)._binary("pow", exponent)


def _integer_power(x, exponent: int):
    # Square and multiply: exact for integers.
    result, base = None, x
    while exponent:
        if exponent & 1:
            result = base if result is None else result * base
        exponent >>= 1
        if exponent:
            base = base * base
    return result if result is not None else x.ones_like()


# -------------------------------------------------------- trigonometry, logs
def sin(x):
    """Sine (radians); integer inputs give the default float dtype."""
    x = _float(x)
    return x.apply("sin", x)


def cos(x):
    """Cosine (radians); integer inputs give the default float dtype."""
    x = _float(x)
    return x.apply("cos", x)


def tan(x):
    """Tangent: ``sin(x) / cos(x)`` (within a few ulp of libm's tan away from its poles)."""
    x = _float(x)
    return x.sin() / x.cos()


def _libm_unary(op: str, doc: str):
    """The function recording unary primitive ``op`` (integer and bool inputs give the default
    float dtype, as PyTorch's)."""

    def function(x):
        x = _float(x)
        return x.apply(op, x)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = doc + " (C's ``" + op + "``; integer and bool inputs give the default float dtype)."
    return function


atan = arctan = _libm_unary("atan", "Inverse tangent, in (-pi/2, pi/2)")
asin = arcsin = _libm_unary("asin", "Inverse sine, in [-pi/2, pi/2]; NaN outside [-1, 1]")
acos = arccos = _libm_unary("acos", "Inverse cosine, in [0, pi]; NaN outside [-1, 1]")
sinh = _libm_unary("sinh", "Hyperbolic sine; +-inf where it overflows")
cosh = _libm_unary("cosh", "Hyperbolic cosine; +inf where it overflows")
asinh = arcsinh = _libm_unary("asinh", "Inverse hyperbolic sine")
acosh = arccosh = _libm_unary("acosh", "Inverse hyperbolic cosine; NaN below 1")
atanh = arctanh = _libm_unary("atanh", "Inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1]")


def deg2rad(x):
    """Degrees to radians: ``x * (pi / 180)`` (integer and bool inputs give the default float dtype)."""
    return _float(x) * (math.pi / 180.0)


def rad2deg(x):
    """Radians to degrees: ``x * (180 / pi)`` (integer and bool inputs give the default float dtype)."""
    return _float(x) * (180.0 / math.pi)


def log1p(x):
    """``log(1 + x)``, accurate for small x (libm's log1p)."""
    x = _float(x)
    return x.apply("log1p", x)


def expm1(x):
    """``exp(x) - 1``, accurate for small x (libm's expm1)."""
    x = _float(x)
    return x.apply("expm1", x)


def _log_base(x, base: float):
    # float32 is computed in float64 and rounded once, so exact powers of the base give integers.
    x = _float(x)
    if x.dtype is dt.float32:
        return (x.to(dt.float64).log() / math.log(base)).to(dt.float32)
    return x.log() / math.log(base)


def log2(x):
    """Base-2 logarithm (float32 inputs are computed in float64: ``log2(8.0) == 3.0``)."""
    return _log_base(x, 2.0)


def log10(x):
    """Base-10 logarithm (float32 inputs are computed in float64: ``log10(1000.0) == 3.0``)."""
    return _log_base(x, 10.0)


def exp2(x):
    """``2 ** x`` (libm's pow: exact for integral x)."""
    return 2.0 ** _float(x)


# ------------------------------------------------------------ clamp, division
def clamp(x, min=None, max=None):  # noqa: A002
    """Clamp to [min, max] (numbers or tensors); either bound may be None (``clip`` is an alias).

    A value on a bound keeps its whole gradient, as in PyTorch.

    Raises:
        ValueError: both bounds are None.
    """
    if min is None and max is None:
        raise ArgumentError("clamp: at least one of min and max must be given")
    # where(), not maximum/minimum: maximum would split a tie's gradient with the bound; and NaN
    # stays NaN (a comparison with NaN is false).
    out = x
    if min is not None:
        out = out.where(~(out < min), min)
    if max is not None:
        out = out.where(~(out > max), max)
    return out


def clamp_min(x, min):  # noqa: A002
    return clamp(x, min=min)


def clamp_max(x, max):  # noqa: A002
    return clamp(x, max=max)


def _integral_pair(x, other) -> bool:
    if _is_tensor(other):
        return x.dtype.category < 2 and other.dtype.category < 2
    return x.dtype.category < 2 and isinstance(other, (int, np.integer)) and not isinstance(other, bool)


def _rounded_quotient(x, other, rounding, int_op: str):
    """``rounding(x / other)``; integer operands stay integral, divided exactly by the primitive
    ``int_op`` (``floordiv_int`` / ``truncdiv_int``: x // 0 is 0 there, where PyTorch raises)."""
    if _integral_pair(x, other):
        if x.dtype is dt.bool_ and (not _is_tensor(other) or other.dtype is dt.bool_):
            if not _is_tensor(other):
                return x.to(dt.int64)._binary(int_op, other)  # bool // 2 is int64, as in PyTorch
            raise DTypeError(f"{int_op}: bool tensors have no integer division; cast to an integer dtype first")
        return x._binary(int_op, other)
    if int_op == "floordiv_int":
        return _floor_quotient(x, other)
    return rounding(x / other)


def _floor_quotient(x, other):
    """Floating-point ``x // other`` exactly as PyTorch's ``div_floor`` (and CPython's float ``//``)
    compute it: from the exact remainder ``fmod(x, other)``, not by flooring the rounded quotient
    (``1.0 // 0.1`` is 9, where ``floor(1.0 / 0.1)`` is 10)."""
    if isinstance(other, np.generic):
        other = other.item()
    q = x / other  # the promoted, broadcast quotient
    x = x if x.dtype is q.dtype else x.to(q.dtype)
    mod = x._binary("fmod", other)
    # tensors for a tensor ``other``, Python bools for a number
    negative, zero = (other < 0, other == 0) if _is_tensor(other) else (bool(other < 0), bool(other == 0))
    div = (x - mod) / other
    # fmod has the sign of x; where it and other differ, the quotient went one too far
    # (signs compared as numbers: != and & of bool tensors are Wheres over bools, which
    # onnxruntime's CPU Where lacks)
    off = (mod > 0) if negative is True else (mod < 0) if negative is False else mod.sign() != other.sign()
    div = (div - 1.0).where(off, div).where(mod != 0, div)  # (no & of bool tensors: see above)
    down = div.floor()
    down = down.where(~(div - down > 0.5), down + 1.0)
    out = down.where(div != 0, q * 0.0)  # a zero quotient takes the sign of x / other
    if zero is False:
        return out
    return q if zero is True else out.where(~zero, q)  # x // 0 is x / 0: +-inf or NaN


def floor_divide(x, other):
    """``floor(x / other)`` elementwise (Python's ``//``); integer operands stay integral (exact;
    x // 0 is 0, where PyTorch raises ZeroDivisionError). Floating-point operands are divided
    exactly (PyTorch's ``div_floor``: see :func:`_floor_quotient`)."""
    return _rounded_quotient(x, other, lambda q: q.floor(), "floordiv_int")


def divide(x, other, *, rounding_mode=None):
    """``x / other``; ``rounding_mode="floor"`` rounds the quotient down (``//``), ``"trunc"``
    toward zero, and integer operands then stay integral, as PyTorch's ``div``.

    Raises:
        ValueError: another rounding mode."""
    if rounding_mode is None:
        return x / other
    if rounding_mode == "floor":
        return _rounded_quotient(x, other, lambda q: q.floor(), "floordiv_int")
    if rounding_mode == "trunc":
        return _rounded_quotient(x, other, lambda q: q.trunc(), "truncdiv_int")
    raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")


def remainder(x, other):
    """``x - floor(x / other) * other`` (Python's ``%``: the result has the sign of ``other``),
    exact: integers through the exact floor division, floats as PyTorch's remainder (``fmod``,
    plus ``other`` where the signs differ; NaN for ``other == 0``)."""
    if _integral_pair(x, other):
        return x - x.floor_divide(other) * other
    return _float(x)._binary("remainder", other)


def fmod(x, other):
    """``x - trunc(x / other) * other`` (C's fmod: the result has the sign of ``x``), exact:
    integers through the exact truncated division, floats as C's ``fmod`` (NaN for ``other == 0``)."""
    if _integral_pair(x, other):
        return x - _rounded_quotient(x, other, lambda q: q.trunc(), "truncdiv_int") * other
    return _float(x)._binary("fmod", other)


# ------------------------------------------------------------------- tests
def isnan(x):
    """True where x is NaN (a bool tensor; never for integer inputs)."""
    return x != x


def isinf(x):
    """True where x is +inf or -inf."""
    return x.abs() == math.inf if x.dtype.is_floating_point else x != x


def isposinf(x):
    return x == math.inf if x.dtype.is_floating_point else x != x


def isneginf(x):
    return x == -math.inf if x.dtype.is_floating_point else x != x


def isfinite(x):
    """True where x is neither infinite nor NaN (``x - x == 0``)."""
    return (x - x) == 0 if x.dtype.is_floating_point else x == x


def nan_to_num(x, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None):
    """NaN -> ``nan``, +inf -> ``posinf`` (default: the dtype's largest value), -inf -> ``neginf``
    (default: the lowest); integer inputs are returned as a copy."""
    if not x.dtype.is_floating_point:
        return x.clone()
    info = np.finfo(x.dtype.np)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = x.where(x == x, nan)
    out = out.where(out != math.inf, posinf)
    return out.where(out != -math.inf, neginf)


def isclose(x, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """``|x - other| <= atol + rtol * |other|`` elementwise, or equal (infinities); with
    ``equal_nan`` two NaNs are close. Integer operands are compared in float64."""
    if not _is_tensor(other):
        other = x.new_tensor(other)
    if x.dtype.category < 2 or other.dtype.category < 2:
        x, other = x.to(dt.float64), other.to(dt.float64)
    close = (x == other) | ((x - other).abs() <= atol + rtol * other.abs())
    if equal_nan:
        close = close | ((x != x) & (other != other))
    return close


# ----------------------------------------------------------------- logical
def logical_not(x):
    """``x == 0`` as a bool tensor."""
    return ~x.bool()


def logical_and(x, other):
    return x.bool() & (other.bool() if _is_tensor(other) else bool(other))


def logical_or(x, other):
    return x.bool() | (other.bool() if _is_tensor(other) else bool(other))


def logical_xor(x, other):
    return x.bool() != (other.bool() if _is_tensor(other) else bool(other))


# ------------------------------------------------- lerp, hypot, heaviside
def _same_dtype_tensor(opname: str, argname: str, x, other) -> None:
    if not _is_tensor(other):
        raise DTypeError(f"{opname}: argument '{argname}' must be a Tensor, not {type(other).__name__}")
    if other.dtype is not x.dtype:
        raise DTypeError(f"{opname}: expected dtype {x.dtype.name} for '{argname}', got {other.dtype.name}")


@dt.half_in_float32
def lerp(x, end, weight):
    """``x + weight * (end - x)``, elementwise (``torch.lerp``); ``x``, ``end`` and a tensor
    ``weight`` broadcast together. As PyTorch's kernel (ATen/native/Lerp.h), a weight with
    ``|weight| >= 0.5`` (or NaN) uses ``end - (end - x) * (1 - weight)`` instead, so that
    ``weight == 1`` gives ``end`` exactly. float16/bfloat16 are computed in float32.

    ``weight`` is a Python number, a 0-d tensor (any dtype, taken as a number), or a tensor of the
    dtype of ``x``. Gradients: ``1 - weight`` for ``x``, ``weight`` for ``end``, ``end - x`` for
    ``weight``.

    Raises:
        DTypeError: a non-floating ``x``, ``end`` of another dtype or not a tensor, a dimensioned
            ``weight`` of another dtype.
    """
    if not x.dtype.is_floating_point:
        raise DTypeError(f"lerp: expected a floating-point input, got {x.dtype.name}")
    _same_dtype_tensor("lerp", "end", x, end)
    shape = broadcast_shapes(x.shape, end.shape, "lerp")
    if not _is_tensor(weight):
        if not isinstance(weight, numbers.Real):
            raise DTypeError(f"lerp: weight must be a number or a Tensor, not {type(weight).__name__}")
        w = float(weight)
        if abs(w) < 0.5:
            return x + (end - x) * w
        return end - (end - x) * (1.0 - w)
    if weight.ndim == 0:
        weight = weight.to(x.dtype)
    _same_dtype_tensor("lerp", "weight", x, weight)
    broadcast_shapes(shape, weight.shape, "lerp")
    diff = end - x
    small = x + weight * diff
    large = end - diff * (1.0 - weight)
    return small.where(weight.abs() < 0.5, large)


def _result_dtype(a, b) -> dt.DType:
    # lazyvic.tensor.result_dtype (this module sits below it): a 0-d tensor beside a dimensioned
    # one counts only when its category is higher.
    if (a.ndim == 0) != (b.ndim == 0):
        dim, zero = (b, a) if a.ndim == 0 else (a, b)
        if zero.dtype.category <= dim.dtype.category:
            return dim.dtype
    return dt.promote(a.dtype, b.dtype)


def hypot(x, other):
    """``sqrt(x**2 + other**2)`` elementwise without overflow or underflow (C's ``hypot``,
    ``torch.hypot``); the operands broadcast and promote (a floating result dtype is required).
    float32 and half operands are squared and summed in float64 and rounded once; float64 ones are
    scaled by the larger magnitude. An infinite operand gives +inf, even beside NaN.

    Raises:
        DTypeError: ``other`` not a tensor, or integer/bool operands (PyTorch has no integer hypot).
    """
    if not _is_tensor(other):
        raise DTypeError(f"hypot: argument 'other' must be a Tensor, not {type(other).__name__}")
    broadcast_shapes(x.shape, other.shape, "hypot")
    d = _result_dtype(x, other)
    if not d.is_floating_point:
        raise DTypeError(f"hypot: expected floating-point operands, got {x.dtype.name} and {other.dtype.name}")
    a, b = x.to(d).abs(), other.to(d).abs()
    if d is dt.float64:
        big, small = a.maximum(b), a.minimum(b)
        ratio = small / big.where(big > 0, 1.0)
        out = big * (1.0 + ratio * ratio).sqrt()
    else:
        a64, b64 = a.to(dt.float64), b.to(dt.float64)
        out = (a64 * a64 + b64 * b64).sqrt().to(d)
    return out.where(~((a == math.inf) | (b == math.inf)), math.inf)


def _float_pair(opname: str, x, other, integers: bool):
    """``x`` and tensor ``other`` broadcast-checked and cast to their promoted dtype (the default
    float dtype for integer or bool operands when ``integers``, else a DTypeError)."""
    if not _is_tensor(other):
        raise DTypeError(f"{opname}: argument 'other' must be a Tensor, not {type(other).__name__}")
    broadcast_shapes(x.shape, other.shape, opname)
    d = _result_dtype(x, other)
    if not d.is_floating_point:
        if not integers:
            raise DTypeError(f"{opname}: expected floating-point operands, got {x.dtype.name} and {other.dtype.name}")
        d = dt.default_float
    return x.to(d), other.to(d)


def atan2(x, other):
    """The angle of the point ``(other, x)``: ``atan(x / other)`` in the right quadrant, in [-pi, pi]
    (C's ``atan2``, with its signs of zeros and infinities: ``atan2(0.0, -0.0)`` is pi,
    ``atan2(-0.0, -0.0)`` is -pi). The operands broadcast and promote; integer and bool operands
    give the default float dtype (``torch.atan2``).

    Raises:
        DTypeError: ``other`` not a tensor.
    """
    y, x_ = _float_pair("atan2", x, other, integers=True)
    return y._binary("atan2", x_)


arctan2 = atan2


def _logaddexp(opname: str, x, other, base2: bool):
    # PyTorch's kernel (ATen/native/cpu/BinaryOpsKernel.cpp): max(a, b) + log1p(exp(-|a - b|)), and
    # a where a == b is infinite (inf - inf would be NaN).
    a, b = _float_pair(opname, x, other, integers=False)
    top, gap = a.maximum(b), -(a - b).abs()
    if base2:
        out = top + (2.0**gap).log1p() * (1.0 / math.log(2.0))
    else:
        out = top + gap.exp().log1p()
    return out.where(~((a == b) & (a.abs() == math.inf)), a)


def logaddexp(x, other):
    """``log(exp(x) + exp(other))`` without overflow, elementwise (``torch.logaddexp``); the
    operands broadcast and promote. Gradients: ``sigmoid(x - other)`` and ``sigmoid(other - x)``.

    Raises:
        DTypeError: ``other`` not a tensor, or integer/bool operands (as PyTorch).
    """
    return _logaddexp("logaddexp", x, other, base2=False)


def logaddexp2(x, other):
    """``log2(2**x + 2**other)`` without overflow, elementwise (``torch.logaddexp2``); the operands
    broadcast and promote.

    Raises:
        DTypeError: ``other`` not a tensor, or integer/bool operands (as PyTorch).
    """
    return _logaddexp("logaddexp2", x, other, base2=True)


def heaviside(x, values):
    """The Heaviside step function of ``x``: 0 where ``x < 0``, ``values`` where ``x == 0``, 1
    where ``x > 0`` (and 0 for NaN, as PyTorch), broadcast with ``values`` (``torch.heaviside``).

    Raises:
        DTypeError: ``values`` not a tensor, or of a dtype other than that of ``x``.
    """
    _same_dtype_tensor("heaviside", "values", x, values)
    broadcast_shapes(x.shape, values.shape, "heaviside")
    step = (x > 0).to(x.dtype)
    return step.where(x != 0, values)
