"""Elementwise primitives.

All inputs of an elementwise primitive have the same dtype and the same shape,
except that a 0-d input (a Python scalar operand, which never needs a gradient)
broadcasts to the others; the front end inserts every other broadcast and cast. ``expr`` returns a scalar expression
in the kernel language of ``lowering/kernel_lib.py``: float32 transcendentals
use its vectorizable approximations (``exp_f32`` ...), float64 ones call libm. The NumPy
references compute the same bits (``ops/numerics.py``): the approximations in NumPy, the libm
calls through the same C functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops import numerics
from lazyvic.ops.opdef import OnnxNode, OpDef, onnx_node, register

# The kernel language's type of each dtype's values: the half types compute in float32
# (a statement of a half type rounds its value: lowering/emitter.py).
ALIAS = {
    "bool": "b1",
    "uint8": "u8",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f32",
    "bfloat16": "f32",
    "float32": "f32",
    "float64": "f64",
}


def const(dtype: dt.DType, value) -> str:
    """A typed literal in the kernel language (a bare literal would widen float32 to float64)."""
    if dtype.category == 2:
        value = float(value)
    elif dtype.category == 1:
        value = int(value)
    else:
        value = bool(value)
    return f"{ALIAS[dtype.name]}({value!r})"


def _max(dtype) -> str:
    """The kernel language's max: NaN-propagating and vectorizable for floats."""
    return "fmax" if dtype.is_floating_point else "max"


def _min(dtype) -> str:
    return "fmin" if dtype.is_floating_point else "min"


def _same(opname):
    def infer(shapes, dtypes, attrs):
        # Equal shapes; a 0-d input (a Python scalar operand) broadcasts to the others.
        s0, d0 = shapes[0], dtypes[0]
        for s in shapes[1:]:
            if s != s0:
                if s0 == ():
                    s0 = s
                elif s != ():
                    raise ShapeError(f"{opname}: inputs must have equal shapes, got {shapes}")
        for d in dtypes[1:]:
            if d is not d0:
                raise DTypeError(f"{opname}: inputs must have equal dtypes, got {[x.name for x in dtypes]}")
        return s0, d0

    return infer


def _float_only(opname):
    base = _same(opname)

    def infer(shapes, dtypes, attrs):
        s, d = base(shapes, dtypes, attrs)
        if not d.is_floating_point:
            raise DTypeError(f"{opname}: expected a floating-point input, got {d.name}")
        return s, d

    return infer


def _compare(opname):
    base = _same(opname)

    def infer(shapes, dtypes, attrs):
        s, _ = base(shapes, dtypes, attrs)
        return s, dt.bool_

    return infer


def _no_bool(opname, base, hint="the - operator is not supported on bool tensors; use ~ or logical_not"):
    """PyTorch rejects ``-`` (and ``**`` of two tensors) on bool tensors (NumPy would fail only
    when the trace runs)."""

    def infer(shapes, dtypes, attrs):
        s, d = base(shapes, dtypes, attrs)
        if d is dt.bool_:
            raise DTypeError(f"{opname}: {hint}")
        return s, d

    return infer


def _fn(name_f32: str, name_f64: str):
    """Expression for a unary transcendental: approximation for f32, libm for f64."""

    def expr(a, din, dout):
        return f"{name_f32 if dout.compute is dt.float32 else name_f64}({a[0]})"

    return expr


def unary(name, reference, expr, vjp, float_only=True, infer=None, onnx=None):
    infer = infer or (_float_only(name) if float_only else _same(name))
    return register(OpDef(name, "elementwise", 1, infer, lambda x, attrs: reference(x[0]), expr, vjp, onnx=onnx))


def binary(name, reference, expr, vjp, infer=None, onnx=None):
    return register(
        OpDef(
            name, "elementwise", 2, infer or _same(name), lambda x, attrs: reference(x[0], x[1]), expr, vjp, onnx=onnx
        )
    )


def _kernel_ref(approx_f32, libm_f64: str):
    """The reference of a transcendental: the kernels' float32 approximation (in NumPy) or their
    float64 libm call (``ops/numerics.py``)."""

    def reference(x):
        x = np.asarray(x)
        if x.dtype == np.float32:
            return approx_f32(x)
        return numerics.libm(libm_f64)(x.astype(np.float64, copy=False))

    return reference


def _libm_ref(name: str, guard=None):
    """A reference calling C library function ``name`` as the kernels do; ``guard(x, y)`` applies
    the special cases the kernel expression writes around the call."""

    def reference(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            y = numerics.libm(name)(x)
            return y if guard is None else guard(x, y)

    return reference


# --- unary -----------------------------------------------------------------
unary(
    "neg",
    np.negative,
    lambda a, di, do: f"-{a[0]}",
    lambda g, x, out, at: (-g,),
    infer=_no_bool("neg", _same("neg")),
    onnx=onnx_node("Neg", since=(6, 13)),
)
unary(
    "exp",
    _kernel_ref(numerics.exp_f32, "exp"),
    _fn("exp_f32", "math.exp"),
    lambda g, x, out, at: (g * out,),
    onnx=onnx_node("Exp", since=(6, 13)),
)
unary(
    "log",
    _kernel_ref(numerics.log_f32, "log"),
    _fn("log_f32", "math.log"),
    lambda g, x, out, at: (g / x[0],),
    onnx=onnx_node("Log", since=(6, 13)),
)
unary(
    "sqrt",
    np.sqrt,
    lambda a, di, do: f"math.sqrt({a[0]})",
    lambda g, x, out, at: (g * 0.5 / out,),
    onnx=onnx_node("Sqrt", since=(6, 13)),
)
unary(
    "tanh",
    _kernel_ref(numerics.tanh_f32, "tanh"),
    _fn("tanh_f32", "math.tanh"),
    lambda g, x, out, at: (g * (1.0 - out * out),),
    onnx=onnx_node("Tanh", since=(6, 13)),
)
unary(
    "sigmoid",
    _kernel_ref(numerics.sigmoid_f32, "sigmoid"),
    _fn("sigmoid_f32", "sigmoid_f64"),
    lambda g, x, out, at: (g * out * (1.0 - out),),
    onnx=onnx_node("Sigmoid", since=(6, 13)),
)
unary(
    "erf",
    _kernel_ref(numerics.erf_f32, "erf"),
    _fn("erf_f32", "math.erf"),
    lambda g, x, out, at: (g * (2.0 / math.sqrt(math.pi)) * (-(x[0] * x[0])).exp(),),
    onnx=onnx_node("Erf", since=(9, 13)),
)
unary(
    "relu",
    lambda x: np.maximum(x, 0).astype(x.dtype),
    lambda a, di, do: f"{_max(do)}({a[0]}, {const(do, 0)})",
    lambda g, x, out, at: (g * (x[0] > 0).to(g.dtype),),
    float_only=False,
    onnx=onnx_node("Relu", since=(6, 13, 14)),
)
unary(
    "abs",
    np.abs,
    lambda a, di, do: f"abs({a[0]})",
    lambda g, x, out, at: (g * ((x[0] > 0).to(g.dtype) - (x[0] < 0).to(g.dtype)),),
    float_only=False,
    onnx=onnx_node("Abs", since=(6, 13)),
)


# --- trigonometric, rounding, log1p / expm1 --------------------------------
# libm calls in both kernel kinds (``math.*``: Numba's CPU and CUDA targets, and the CUDA simulator,
# which runs kernels as Python); the guards give the IEEE results where Python's ``math`` raises.
def _inf(dtype, sign="") -> str:
    return f"{ALIAS[dtype.name]}({sign}np.inf)"


def _nan(dtype) -> str:
    return f"{ALIAS[dtype.name]}(np.nan)"


def _trig_expr(fn: str):
    def expr(a, di, do):
        return f"math.{fn}({a[0]}) if abs({a[0]}) < {_inf(do)} else {_nan(do)}"

    return expr


def _log1p_expr(a, di, do):
    x = a[0]
    return f"math.log1p({x}) if {x} > {const(do, -1)} else ({_inf(do, '-')} if {x} == {const(do, -1)} else {_nan(do)})"


# The largest float64 whose expm1 is finite (1.797e308): above it C's expm1 overflows to inf
# and Python's math.expm1 (the CUDA simulator's) raises, hence the guard. It was 709.0, which
# gave inf for finite results (expm1(709.5) = 1.355e308). float32 overflows far below it.
EXPM1_FINITE_UP_TO = 709.782712893384


def _expm1_expr(a, di, do):
    return f"{_inf(do)} if {a[0]} > {const(do, EXPM1_FINITE_UP_TO)} else math.expm1({a[0]})"


# 2**23 (float32) and 2**52 (float64): from there on every value is an integer, and below it
# ``(|x| + 2**p) - 2**p`` is |x| rounded to an integer, half to even (IEEE addition rounds to
# nearest even; the kernels are strict: no reassociation). Only arithmetic, comparisons and
# copysign, so one expression serves the CPU, CUDA and the simulator, and keeps the sign of zero.
_INTEGRAL_FROM = {"float32": 8388608.0, "float64": 4503599627370496.0}


def _rounding_expr(floor: bool):
    def expr(a, di, do):
        x, big, one = a[0], const(do, _INTEGRAL_FROM[do.compute.name]), const(do, 1)
        q = f"(abs({x}) + {big} - {big})"
        if floor:  # floor(x) = -ceil(|x|) below zero, trunc(|x|) above
            q = f"(({q} + {one} if {q} < abs({x}) else {q}) if {x} < 0 else ({q} - {one} if {q} > abs({x}) else {q}))"
        return f"{x} if not (abs({x}) < {big}) else {ALIAS[do.name]}(math.copysign({q}, {x}))"

    return expr


def _round_reference(x):
    return np.round(x)  # half to even, as PyTorch's round


def _add_const_onnx(op_before: str | None, op_after: str | None, value):
    """``op_after(op_before(x) + value)`` in ONNX (log1p: Log(x + 1); expm1: Exp(x) - 1)."""

    def rule(b, names, at, shape, dtype):
        x = b.node(op_before, names) if op_before else names[0]
        y = b.node("Add", [x, b.const(np.asarray(value, dtype=dtype.np))])
        return b.node(op_after, [y]) if op_after else y

    return rule


unary(
    "sin",
    _libm_ref("sin", lambda x, y: np.where(np.abs(x) < np.inf, y, np.nan)),
    _trig_expr("sin"),
    lambda g, x, out, at: (g * x[0].cos(),),
    onnx=onnx_node("Sin", since=(7, 22)),
)
unary(
    "cos",
    _libm_ref("cos", lambda x, y: np.where(np.abs(x) < np.inf, y, np.nan)),
    _trig_expr("cos"),
    lambda g, x, out, at: (-g * x[0].sin(),),
    onnx=onnx_node("Cos", since=(7, 22)),
)
# floor and round are step functions: their gradient is zero, as in PyTorch (ceil, trunc and frac
# are built on floor in the front end).
unary(
    "floor",
    np.floor,
    _rounding_expr(True),
    lambda g, x, out, at: (g.zeros_like(),),
    onnx=onnx_node("Floor", since=(6, 13)),
)
unary(
    "round",
    _round_reference,
    _rounding_expr(False),
    lambda g, x, out, at: (g.zeros_like(),),
    onnx=onnx_node("Round", since=(11, 22)),
)
unary(
    "log1p",
    _libm_ref("log1p", lambda x, y: np.where(x > -1, y, np.where(x == -1, -np.inf, np.nan))),
    _log1p_expr,
    lambda g, x, out, at: (g / (x[0] + 1.0),),
    onnx=_add_const_onnx(None, "Log", 1),
)
unary(
    "expm1",
    _libm_ref("expm1", lambda x, y: np.where(x > EXPM1_FINITE_UP_TO, np.inf, y)),
    _expm1_expr,
    lambda g, x, out, at: (g * (out + 1.0),),
    onnx=_add_const_onnx("Exp", None, -1),
)


# --- inverse trigonometric and hyperbolic functions ---------------------------
# libm calls, as sin: ``math.asin`` of a float32 is ``asinf`` on the CPU (libdevice's ``__nv_asinf`` on
# CUDA), and the references call the same C functions (ops/libm.py). The guards give the C results
# where Python's ``math`` raises instead (the CUDA simulator runs kernels as Python): outside the
# domain (NaN; atanh(+-1) is +-inf) and where sinh/cosh overflow. Each guard agrees with libm, so
# it changes no value; the references apply the same guards.
#
# The largest |x| whose sinh and cosh are finite (the C library's; tests/test_trig.py checks them).
_HYPERBOLIC_MAX = {"float32": 89.41598510742188, "float64": 710.4758600739439}


def _guarded(fn: str, guard):
    """``math.fn(x)`` where it is defined, else the C result: ``guard(x, dtype)`` gives the
    kernel-language condition and the value where it fails."""

    def expr(a, di, do):
        cond, other = guard(a[0], do)
        return f"math.{fn}({a[0]}) if {cond} else {other}"

    return expr


def _in_unit_interval(x, do):
    return f"abs({x}) <= {const(do, 1)}", _nan(do)


def _hyperbolic_finite(odd: bool):
    def guard(x, do):
        big = const(do, _HYPERBOLIC_MAX[do.compute.name])
        overflow = f"({_inf(do)} if {x} > {const(do, 0)} else {_inf(do, '-')})" if odd else _inf(do)
        return f"not (abs({x}) > {big})", overflow

    return guard


def _hyperbolic_ref(name: str, odd: bool):
    def guard(x, y):
        big = _HYPERBOLIC_MAX[x.dtype.name] if x.dtype.name in _HYPERBOLIC_MAX else np.inf
        return np.where(np.abs(x) > big, np.copysign(np.inf, x) if odd else np.inf, y)

    return _libm_ref(name, guard)


def _atanh_expr(a, di, do):
    x, one = a[0], const(do, 1)
    edge = f"({_inf(do)} if {x} == {one} else ({_inf(do, '-')} if {x} == {const(do, -1)} else {_nan(do)}))"
    return f"math.atanh({x}) if abs({x}) < {one} else {edge}"


def _atanh_guard(x, y):
    return np.where(np.abs(x) < 1, y, np.where(np.abs(x) == 1, np.copysign(np.inf, x), np.nan))


def _unit_interval_ref(name: str):
    return _libm_ref(name, lambda x, y: np.where(np.abs(x) <= 1, y, np.nan))


unary(
    "atan",
    _libm_ref("atan"),
    lambda a, di, do: f"math.atan({a[0]})",
    lambda g, x, out, at: (g / (x[0] * x[0] + 1.0),),
    onnx=onnx_node("Atan", since=(7, 22)),
)
unary(
    "asin",
    _unit_interval_ref("asin"),
    _guarded("asin", _in_unit_interval),
    lambda g, x, out, at: (g / (1.0 - x[0] * x[0]).sqrt(),),
    onnx=onnx_node("Asin", since=(7, 22)),
)
unary(
    "acos",
    _unit_interval_ref("acos"),
    _guarded("acos", _in_unit_interval),
    lambda g, x, out, at: (-g / (1.0 - x[0] * x[0]).sqrt(),),
    onnx=onnx_node("Acos", since=(7, 22)),
)
unary(
    "sinh",
    _hyperbolic_ref("sinh", odd=True),
    _guarded("sinh", _hyperbolic_finite(odd=True)),
    lambda g, x, out, at: (g * x[0].cosh(),),
    onnx=onnx_node("Sinh", since=(9, 22)),
)
unary(
    "cosh",
    _hyperbolic_ref("cosh", odd=False),
    _guarded("cosh", _hyperbolic_finite(odd=False)),
    lambda g, x, out, at: (g * x[0].sinh(),),
    onnx=onnx_node("Cosh", since=(9, 22)),
)
unary(
    "asinh",
    _libm_ref("asinh"),
    lambda a, di, do: f"math.asinh({a[0]})",
    lambda g, x, out, at: (g / (x[0] * x[0] + 1.0).sqrt(),),
    onnx=onnx_node("Asinh", since=(9, 22)),
)
unary(
    "acosh",
    _libm_ref("acosh", lambda x, y: np.where(x >= 1, y, np.nan)),
    _guarded("acosh", lambda x, do: (f"{x} >= {const(do, 1)}", _nan(do))),
    lambda g, x, out, at: (g / (x[0] * x[0] - 1.0).sqrt(),),
    onnx=onnx_node("Acosh", since=(9, 22)),
)
unary(
    "atanh",
    _libm_ref("atanh", _atanh_guard),
    _atanh_expr,
    lambda g, x, out, at: (g / (1.0 - x[0] * x[0]),),
    onnx=onnx_node("Atanh", since=(9, 22)),
)


def _not_infer(shapes, dtypes, attrs):
    if dtypes[0] is not dt.bool_:
        raise DTypeError(f"logical_not: expected a bool input, got {dtypes[0].name}")
    return shapes[0], dt.bool_


register(
    OpDef(
        "logical_not",
        "elementwise",
        1,
        _not_infer,
        lambda x, at: np.logical_not(x[0]),
        lambda a, di, do: f"not {a[0]}",
        None,
        differentiable=False,
        onnx=onnx_node("Not", since=(1,)),
    )
)


def _cast_infer(shapes, dtypes, attrs):
    return shapes[0], attrs["dtype"]


def _cast_vjp(g, x, out, attrs):
    return (g.to(x[0].dtype),) if x[0].dtype.is_floating_point else (None,)


def _cast_onnx(b, names, at, shape, dtype):
    return b.node("Cast", names, to=b.onnx_dtype(dtype))


def _via_int64(src: dt.DType, dst: dt.DType) -> bool:
    """A float -> integer cast narrower than 64 bits goes through int64 and wraps (what PyTorch
    gives on x86: ``tensor(200.).to(int8)`` is -56, ``tensor(-1.).to(uint8)`` is 255); to uint64,
    negative values do (-1.0 is 2**64 - 1), others convert directly (up to 2**64)."""
    return src.category == 2 and dst.category == 1 and (dst.bits < 64 or dst is dt.uint64)


def _cast_reference(x, at):
    """Casts as the kernels compute them: to a half type through float32 (as PyTorch's
    ``c10::Half(double)`` does: float64 -> float32 -> float16 rounds twice), float to a narrow
    integer through int64 (wrapping)."""
    d = at["dtype"]
    x = np.asarray(x[0])
    if d.is_half:
        return x.astype(np.float32).astype(d.np)
    if x.dtype.kind == "f" and d is dt.uint64:
        return np.where(x >= 0, x.astype(np.uint64), x.astype(np.int64).astype(np.uint64))
    if x.dtype.kind == "f" and _via_int64(dt.float32, d):
        return x.astype(np.int64).astype(d.np)
    return x.astype(d.np)


def _cast_expr(a, di, do):
    if _via_int64(di[0], do) and do is dt.uint64:
        return f"u64({a[0]}) if {a[0]} >= 0 else u64(i64({a[0]}))"
    if _via_int64(di[0], do):
        return f"{ALIAS[do.name]}(i64({a[0]}))"
    return f"{ALIAS[do.name]}({a[0]})"


register(
    OpDef(
        "cast",
        "elementwise",
        1,
        _cast_infer,
        _cast_reference,
        _cast_expr,
        _cast_vjp,
        onnx=_cast_onnx,
    )
)

# --- binary ----------------------------------------------------------------
binary(
    "add",
    np.add,
    lambda a, di, do: f"{a[0]} + {a[1]}",
    lambda g, x, out, at: (g, g),
    onnx=onnx_node("Add", since=(7, 13, 14)),
)
binary(
    "sub",
    np.subtract,
    lambda a, di, do: f"{a[0]} - {a[1]}",
    lambda g, x, out, at: (g, -g),
    infer=_no_bool("sub", _same("sub")),
    onnx=onnx_node("Sub", since=(7, 13, 14)),
)
binary(
    "mul",
    np.multiply,
    lambda a, di, do: f"{a[0]} * {a[1]}",
    lambda g, x, out, at: (g * x[1], g * x[0]),
    onnx=onnx_node("Mul", since=(7, 13, 14)),
)


def _div_infer(shapes, dtypes, attrs):
    s, d = _same("div")(shapes, dtypes, attrs)
    if not d.is_floating_point:
        raise DTypeError(f"div: expected floating-point inputs (true division), got {d.name}")
    return s, d


binary(
    "div",
    np.divide,
    lambda a, di, do: f"{a[0]} / {a[1]}",
    lambda g, x, out, at: (g / x[1], -g * out / x[1]),
    infer=_div_infer,
    onnx=onnx_node("Div"),  # export only: ONNX's integer Div truncates (a converter of its own)
)


def _pow_reference(a, b):
    if np.asarray(a).dtype.kind in "iu":
        return numerics.int_power(a, b)
    return numerics.libm("power")(a, b)


def _pow_expr(a, di, do):
    if do is dt.uint64:
        return f"ipow_u64({a[0]}, {a[1]})"
    if do.category == 1:
        return f"ipow(i64({a[0]}), i64({a[1]}))"
    return f"{a[0]} ** {a[1]}"


binary(
    "pow",
    _pow_reference,
    _pow_expr,
    lambda g, x, out, at: (g * x[1] * x[0] ** (x[1] - 1.0), g * out * x[0].log()),
    infer=_no_bool("pow", _same("pow"), "bool tensors have no power; cast to an integer or float dtype first"),
    onnx=onnx_node("Pow"),  # export only: ONNX's Pow takes integer bases (a converter of its own)
)


# Integer division, exact (PyTorch's integer ``//`` and ``div(rounding_mode="trunc")``): in
# int64 (uint64 for uint64), the caller's dtype wraps the result (int8 -128 // -1 is -128).
# Division by zero gives 0 (NumPy's integer rule; PyTorch raises ZeroDivisionError), and
# INT64_MIN // -1 wraps to INT64_MIN instead of trapping.
def _integer_only(opname):
    def infer(shapes, dtypes, attrs):
        s, d = _same(opname)(shapes, dtypes, attrs)
        if d.category != 1:
            raise DTypeError(f"{opname}: expected integer inputs, got {d.name}")
        return s, d

    return infer


def _wide_int(x):
    x = np.asarray(x)
    return x.astype(np.uint64 if x.dtype == np.uint64 else np.int64)


def _floordiv_int_reference(a, b):
    a, b = np.broadcast_arrays(_wide_int(a), _wide_int(b))
    safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        if a.dtype == np.int64:
            minus_one = b == -1
            safe = np.where(minus_one, 1, safe)
            q = np.floor_divide(a, safe)
            q = np.where(minus_one, (~a) + 1, q)  # -a, wrapping: INT64_MIN // -1 is INT64_MIN
        else:
            q = np.floor_divide(a, safe)
    return np.where(b == 0, 0, q)


def _truncdiv_int_reference(a, b):
    q = _floordiv_int_reference(a, b)
    a, b = np.broadcast_arrays(_wide_int(a), _wide_int(b))
    if a.dtype == np.int64:
        with np.errstate(all="ignore"):
            inexact = (b != 0) & (b != -1) & (q * b != a) & ((a < 0) != (b < 0))
        q = np.where(inexact, q + 1, q)
    return q


def _floordiv_int_expr(a, di, do):
    if do is dt.uint64:
        return f"{a[0]} // {a[1]} if {a[1]} != 0 else u64(0)"
    x, y = f"i64({a[0]})", f"i64({a[1]})"
    return f"(i64(0) - {x} if {y} == -1 else ({x} // {y} if {y} != 0 else i64(0)))"


def _truncdiv_int_expr(a, di, do):
    if do is dt.uint64:
        return _floordiv_int_expr(a, di, do)
    x, y = f"i64({a[0]})", f"i64({a[1]})"
    q = f"({x} // {y})"
    return (
        f"(i64(0) - {x} if {y} == -1 else ((({q} + 1) if ({q} * {y} != {x} and (({x} < 0) != ({y} < 0))) else {q})"
        f" if {y} != 0 else i64(0)))"
    )


for _name, _ref, _expr in (
    ("floordiv_int", _floordiv_int_reference, _floordiv_int_expr),
    ("truncdiv_int", _truncdiv_int_reference, _truncdiv_int_expr),
):
    register(
        OpDef(
            _name,
            "elementwise",
            2,
            _integer_only(_name),
            (lambda f: lambda x, at: f(x[0], x[1]))(_ref),
            _expr,
            None,
            differentiable=False,
        )
    )


# Floating-point fmod and remainder, exact, as PyTorch computes them (ATen's binary kernels:
# fmod is C's fmod; remainder is fmod plus b where the result and b have opposite signs, so
# its zero keeps fmod's sign). C's fmod never rounds, so kernels and NumPy agree bit for bit.
# Integer operands use floordiv_int / truncdiv_int (lazyvic/pointwise.py).
def _float_only(opname):
    def infer(shapes, dtypes, attrs):
        s, d = _same(opname)(shapes, dtypes, attrs)
        if not d.is_floating_point:
            raise DTypeError(f"{opname}: expected floating-point inputs, got {d.name}")
        return s, d

    return infer


def _remainder_reference(a, b):
    with np.errstate(all="ignore"):
        r = np.fmod(a, b)
        return np.where((r != 0) & ((b < 0) != (r < 0)), r + b, r)


def _fmod_reference(a, b):
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


def _remainder_onnx(builder, names, at, shape, dtype):
    r = builder.node("Mod", names, fmod=1)
    zero = builder.const(np.zeros((), dtype=dtype.np), "zero")
    flip = builder.node("Xor", [builder.node("Less", [names[1], zero]), builder.node("Less", [r, zero])])
    fix = builder.node("And", [builder.node("Not", [builder.node("Equal", [r, zero])]), flip])
    return builder.node("Where", [fix, builder.node("Add", [r, names[1]]), r])


binary(
    "fmod",
    _fmod_reference,
    lambda a, di, do: f"fmod_c({a[0]}, {a[1]})",
    # PyTorch's fmod_backward: d/db is -trunc(a / b) (the rounded quotient, as there).
    lambda g, x, out, at: (g, -g * (x[0] / x[1]).trunc()),
    infer=_float_only("fmod"),
    onnx=onnx_node("Mod", fmod=1),  # export only: the importer's Mod handles integers too
)
binary(
    "remainder",
    _remainder_reference,
    lambda a, di, do: f"remainder_c({a[0]}, {a[1]})",
    # PyTorch's remainder_backward: d/db is -(a // b), the exact floor quotient.
    lambda g, x, out, at: (g, -g * x[0].floor_divide(x[1])),
    infer=_float_only("remainder"),
    onnx=_remainder_onnx,
)


def _atan2_reference(y, x):
    with np.errstate(all="ignore"):
        return numerics.libm("atan2")(y, x)


def _atan2_vjp(g, x, out, at):
    # PyTorch's atan2_backward: d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2).
    y, x_ = x
    scale = g / (x_ * x_ + y * y)
    return scale * x_, -scale * y


# atan2(y, x): C's atan2 (the signs of zeros and infinities as C99 Annex F), no guard needed (Python's
# math.atan2 raises for no input). ONNX has no Atan2: no export.
binary(
    "atan2",
    _atan2_reference,
    lambda a, di, do: f"math.atan2({a[0]}, {a[1]})",
    _atan2_vjp,
    infer=_float_only("atan2"),
)


# Bitwise and / or / xor of integer tensors (two's complement bits, as PyTorch's and NumPy's);
# bool tensors' &, |, ^ stay where/!= in the front end (lazyvic/tensor.py). ONNX's BitwiseAnd /
# Or / Xor (opset 18, integer types only) are these primitives both ways.
def _infix(name: str, infer, ufunc, symbol: str, onnx) -> None:
    """Register a binary primitive without a gradient that is one infix operator in the kernel
    language (``a < b``, ``a & b``) and one NumPy ufunc in the reference."""
    register(
        OpDef(
            name,
            "elementwise",
            2,
            infer,
            lambda x, at: ufunc(x[0], x[1]),
            lambda a, di, do: f"{a[0]} {symbol} {a[1]}",
            None,
            differentiable=False,
            onnx=onnx,
        )
    )


for _name, _np, _sym, _onnx in (
    ("bitwise_and", np.bitwise_and, "&", "BitwiseAnd"),
    ("bitwise_or", np.bitwise_or, "|", "BitwiseOr"),
    ("bitwise_xor", np.bitwise_xor, "^", "BitwiseXor"),
):
    _infix(_name, _integer_only(_name), _np, _sym, onnx_node(_onnx, since=(18,)))


def _minmax_vjp(first_wins):
    def vjp(g, x, out, at):
        a, b = x
        win = (a > b) if first_wins else (a < b)
        tie = (a == b).to(g.dtype) * 0.5
        wa = win.to(g.dtype) + tie
        return g * wa, g * (1.0 - wa)

    return vjp


# Max and Min export only: ONNX's take 1 to N inputs (converters of their own).
binary("maximum", np.maximum, lambda a, di, do: f"{_max(do)}({a[0]}, {a[1]})", _minmax_vjp(True), onnx=onnx_node("Max"))
binary(
    "minimum", np.minimum, lambda a, di, do: f"{_min(do)}({a[0]}, {a[1]})", _minmax_vjp(False), onnx=onnx_node("Min")
)


def _ne_onnx(b, names, at, shape, dtype):
    return b.node("Not", [b.node("Equal", names)])


for _name, _np, _sym, _onnx in (
    ("eq", np.equal, "==", onnx_node("Equal", since=(7, 11, 13, 19))),
    ("ne", np.not_equal, "!=", _ne_onnx),
    ("lt", np.less, "<", onnx_node("Less", since=(7, 9, 13))),
    ("le", np.less_equal, "<=", onnx_node("LessOrEqual", since=(12, 16))),
    ("gt", np.greater, ">", onnx_node("Greater", since=(7, 9, 13))),
    ("ge", np.greater_equal, ">=", onnx_node("GreaterOrEqual", since=(12, 16))),
):
    _infix(_name, _compare(_name), _np, _sym, _onnx)


# --- ternary ---------------------------------------------------------------
def _where_infer(shapes, dtypes, attrs):
    full = [s for s in shapes if s != ()]
    if any(s != full[0] for s in full):
        raise ShapeError(f"where: inputs must have equal shapes, got {shapes}")
    if dtypes[0] is not dt.bool_:
        raise DTypeError(f"where: condition must be bool, got {dtypes[0].name}")
    if dtypes[1] is not dtypes[2]:
        raise DTypeError(f"where: branches must have equal dtypes, got {dtypes[1].name} and {dtypes[2].name}")
    return (full[0] if full else ()), dtypes[1]


@dataclass(frozen=True)
class _WhereOnnx(OnnxNode):
    """ONNX's Where, except for bool values (the front end's ``&``, ``|``, ``^`` and ``~`` of bool
    tensors are wheres over bools): onnxruntime's CPU Where has no bool kernel, so those are
    written as the logic they are, ``(c and x) or (not c and y)``."""

    def __call__(self, builder, names, at, shape, dtype):
        if dtype is not dt.bool_:
            return super().__call__(builder, names, at, shape, dtype)
        c, x, y = names
        return builder.node("Or", [builder.node("And", [c, x]), builder.node("And", [builder.node("Not", [c]), y])])


def _where_vjp(g, x, out, at):
    # Tensor.where(condition, other) is PyTorch's "self where condition else other".
    zero = g.zeros_like()
    return None, g.where(x[0], zero), zero.where(x[0], g)


register(
    OpDef(
        "where",
        "elementwise",
        3,
        _where_infer,
        lambda x, at: np.where(x[0], x[1], x[2]),
        lambda a, di, do: f"{a[1]} if {a[0]} else {a[2]}",
        _where_vjp,
        onnx=_WhereOnnx("Where", since=(9, 16)),
    )
)


# --- autocast precisions ---------------------------------------------------
# Round to the nearest float16 / bfloat16 value and keep the dtype: lazyvic has no half
# storage, so lazyvic.autocast (lazyvic/amp.py) rounds matmul/conv operands with these and
# multiplies in float32. Round-half-to-even; NaN is returned unchanged (payload included).
# Kernels: kernel_lib.round_f16_* / round_bf16_* (CPU, bit tricks) and the lowering/cuda/kernel_lib
# functions of the same names; both bit-identical with these references.
def round_float16_reference(x: np.ndarray) -> np.ndarray:
    """IEEE 754 binary16 rounding (NumPy's ``astype(np.float16)``: overflow to +-inf from
    65520 on, subnormals below 2**-14), returned in ``x``'s dtype."""
    with np.errstate(over="ignore"):
        r = x.astype(np.float16).astype(x.dtype)
    return np.where(np.isnan(x), x, r)


def round_bfloat16_reference(x: np.ndarray) -> np.ndarray:
    """bfloat16 rounding (Google Brain's format; PyTorch's ``c10::BFloat16``): the float32
    bit pattern rounded to its top 16 bits, ties to even. float64 is rounded to float32
    first, as PyTorch converts. Returned in ``x``'s dtype."""
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = x.astype(np.float32)
    bits = x32.view(np.uint32)
    r = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return np.where(np.isnan(x), x, r.view(np.float32).astype(x.dtype))


def _round_vjp(opname):
    # A cast to half and back rounds the gradient too: small gradients underflow to zero,
    # which is what a loss scaler (lazyvic.amp.GradScaler) prevents.
    def vjp(g, x, out, at):
        return (g.apply(opname, g),)

    return vjp


def _round_onnx(half_type: int, min_opset: int):
    """Cast to the half type (a TensorProto enum) and back; None below ``min_opset``."""

    def rule(b, names, at, shape, dtype):
        if b.opset < min_opset:
            return None
        return b.node("Cast", [b.node("Cast", names, to=half_type)], to=b.onnx_dtype(dtype))

    return rule


unary(
    "round_float16",
    round_float16_reference,
    lambda a, di, do: f"round_f16_{ALIAS[do.name]}({a[0]})",
    _round_vjp("round_float16"),
    onnx=_round_onnx(10, 1),
)  # TensorProto.FLOAT16
unary(
    "round_bfloat16",
    round_bfloat16_reference,
    lambda a, di, do: f"round_bf16_{ALIAS[do.name]}({a[0]})",
    _round_vjp("round_bfloat16"),
    onnx=_round_onnx(16, 13),
)  # BFLOAT16: Cast-13
