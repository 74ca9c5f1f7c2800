"""Elementwise ops written by hand: Div Pow Mod Reciprocal Clip Max Min Sum Mean And Or Xor IsNaN
IsInf Identity Dropout Cast CastLike Ceil.

Versions before 13 differ from 13 in the element types they allow, except Clip-6 (bounds as
attributes) and Dropout-7/-10 (ratio attribute, no training mode; Dropout-7's mask has the
input's type); Max-6, Min-6, Sum-6 and Mean-6 do not broadcast (same-shape inputs, which the
broadcasting code handles alike).

Add, Sub, Mul, Relu, Exp, Equal, Where, Floor, Round, Sin, Cos ... are not here: they come from the op table
(``converters/optable.py``). Div, Pow, Max and Min have primitives too, but their ONNX semantics
differ from the primitive's, so they keep a converter (each says why). Folds that broadcast
(``broadcast_fold``) and casts reserve their result's size first (``NodeContext.reserve``).
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import functional as F
from lazyvic.creation import full
from lazyvic.interop.onnx.context import (
    ELEM_DTYPES,
    SUPPORTED_TYPES_NOTE,
    SUPPORTED_TYPES_TEXT,
    broadcast_fold,
    dtype_np,
    elem_name,
    is_const,
    lazyvic_dtype,
)
from lazyvic.interop.onnx.registry import register
from lazyvic.ops import OPS
from lazyvic.tensor import Tensor, where


# ------------------------------------------------------------------ Div, Pow, Mod
def _operand(ctx, v, other):
    """A binary operand: a 0-d constant of the other side's dtype stays a Python scalar."""
    if is_const(v) and v.ndim == 0 and isinstance(other, Tensor) and v.dtype == other.dtype.np:
        return v.item()
    return ctx.tensor(v)


def _binary_pair(ctx, a, b):
    if isinstance(a, Tensor) or not isinstance(b, Tensor):
        return ctx.tensor(a), _operand(ctx, b, a if isinstance(a, Tensor) else None)
    return _operand(ctx, a, b), b


def int_div(a: Tensor, b, dtype: dt.DType) -> Tensor:
    """ONNX integer division: truncated toward zero, as C does (a float64 quotient cast back truncates)."""
    b = b.to(dt.float64) if isinstance(b, Tensor) else float(b)
    return (a.to(dt.float64) / b).to(dtype)


def _fold_div(ctx, a, b):
    with np.errstate(all="ignore"):
        out = np.trunc(a / b) if a.dtype.kind in "iu" else a / b
    return np.asarray(out).astype(a.dtype)


@register("Div", since=(7, 13, 14), fold=broadcast_fold(_fold_div))
def div(ctx, a, b):
    # Not derived from div's onnx_node("Div"): the primitive is true division of floats, and
    # ONNX's integer Div truncates.
    x, y = _binary_pair(ctx, a, b)
    t = x if isinstance(x, Tensor) else y
    if t.dtype.category != 2:
        if not isinstance(x, Tensor):
            x = ctx.tensor(np.asarray(x, dtype=t.dtype.np))
        return int_div(x, y, t.dtype)
    return x / y


def _fold_pow(ctx, a, b):
    return np.asarray(np.power(a.astype(np.float64), b)).astype(a.dtype)


@register("Pow", since=(7, 12, 13, 15), fold=broadcast_fold(_fold_pow))
def pow_(ctx, a, b):
    # Not derived from pow's onnx_node("Pow"): Pow's base and exponent types may differ and the
    # base may be an integer; the result has the base's type.
    x = ctx.tensor(a)
    base = x if x.dtype.is_floating_point else x.to(dt.float64)
    if is_const(b) and b.ndim == 0:
        e = b.item()
    else:
        e = ctx.tensor(b)
        e = e if e.dtype is base.dtype else e.to(base.dtype)
    y = base**e
    if not x.dtype.is_floating_point:
        # Integer powers: round the float64 result (exact below 2**53) before casting back.
        y = where(y < 0, y - 0.5, y + 0.5)
    return y.to(x.dtype)


def _fold_mod(ctx, a, b):
    with np.errstate(all="ignore"):
        return np.asarray(np.fmod(a, b) if ctx.attr("fmod", 0) else np.mod(a, b)).astype(a.dtype)


@register("Mod", since=(10, 13), fold=broadcast_fold(_fold_mod))
def mod(ctx, a, b):
    x, y = ctx.tensor(a), ctx.tensor(b)
    if x.dtype.is_floating_point:
        if not ctx.attr("fmod", 0):
            raise ctx.error("fmod must be 1 for floating-point inputs")
        return x.fmod(y)  # C's fmod, exact
    r = x - int_div(x, y, x.dtype) * y  # C remainder: the sign of x
    if ctx.attr("fmod", 0):
        return r
    return where((r != 0) & ((r < 0) != (y < 0)), r + y, r)  # Python's: the sign of y


@register("Reciprocal", since=(6, 13), fold=lambda ctx, a: _fold_unary(np.reciprocal, a))
def reciprocal(ctx, a):
    return ctx.tensor(a).reciprocal()


def _fold_unary(fn, a):
    with np.errstate(all="ignore"):
        return np.asarray(fn(a)).astype(a.dtype)


@register("Clip", since=(6, 11, 12, 13))
def clip(ctx, a, lo=None, hi=None):
    """Clip-11 and later take min and max as optional inputs; Clip-6 as float attributes
    (absent: no bound)."""
    x = ctx.tensor(a)
    if ctx.version < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
        return x if lo is None and hi is None else x.clamp(lo, hi)
    lo = None if lo is None else ctx.const(lo, "min").reshape(()).item()
    hi = None if hi is None else ctx.const(hi, "max").reshape(()).item()
    if lo is None and hi is None:
        return x
    return x.clamp(lo, hi)


# ------------------------------------------------------------------ variadic: Max Min Sum Mean
# Max and Min are not derived from maximum's / minimum's onnx_node: they take 1 to N inputs.
def _variadic(ctx, values, combine, mean: bool = False):
    tensors = [ctx.tensor(v) for v in values if v is not None]
    out = tensors[0]
    for t in tensors[1:]:
        out = combine(out, t)
    if mean and len(tensors) > 1:
        out = out * (1.0 / len(tensors))
    elif len(tensors) == 1:
        out = out + 0 if out.dtype is not dt.bool_ else out
    return out


def _fold_variadic(arrays, combine, mean: bool = False):
    with np.errstate(all="ignore"):
        out = arrays[0]
        for a in arrays[1:]:
            out = combine(out, a)
        if mean:
            out = out / len(arrays)
    return np.asarray(out).astype(arrays[0].dtype)


@register("Max", since=(6, 8, 12, 13), fold=broadcast_fold(lambda ctx, *arrays: _fold_variadic(arrays, np.maximum)))
def max_(ctx, *values):
    return _variadic(ctx, values, lambda out, t: out.maximum(t))


@register("Min", since=(6, 8, 12, 13), fold=broadcast_fold(lambda ctx, *arrays: _fold_variadic(arrays, np.minimum)))
def min_(ctx, *values):
    return _variadic(ctx, values, lambda out, t: out.minimum(t))


@register("Sum", since=(6, 8, 13), fold=broadcast_fold(lambda ctx, *arrays: _fold_variadic(arrays, np.add)))
def sum_(ctx, *values):
    return _variadic(ctx, values, lambda out, t: out + t)


@register("Mean", since=(6, 8, 13), fold=broadcast_fold(lambda ctx, *arrays: _fold_variadic(arrays, np.add, mean=True)))
def mean(ctx, *values):
    return _variadic(ctx, values, lambda out, t: out + t, mean=True)


# ------------------------------------------------------------------ logic
@register("And", since=(7,), fold=broadcast_fold(lambda ctx, a, b: np.asarray(np.logical_and(a, b))))
def and_(ctx, a, b):
    return ctx.tensor(a) & ctx.tensor(b)


@register("Or", since=(7,), fold=broadcast_fold(lambda ctx, a, b: np.asarray(np.logical_or(a, b))))
def or_(ctx, a, b):
    return ctx.tensor(a) | ctx.tensor(b)


@register("Xor", since=(7,), fold=broadcast_fold(lambda ctx, a, b: np.asarray(np.logical_xor(a, b))))
def xor(ctx, a, b):
    return ctx.tensor(a) != ctx.tensor(b)  # Xor of bools


def _fold_isnan(ctx, a):
    return np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, dtype=bool)


@register("IsNaN", since=(9, 13, 20), fold=_fold_isnan)
def isnan(ctx, a):
    x = ctx.tensor(a)
    if not x.dtype.is_floating_point:
        return full(x.shape, False, dtype=dt.bool_)
    return x != x


def _fold_isinf(ctx, a):
    if a.dtype.kind != "f":
        return np.zeros(a.shape, dtype=bool)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    return (np.isposinf(a) & bool(pos)) | (np.isneginf(a) & bool(neg))


@register("IsInf", since=(10, 20), fold=_fold_isinf)
def isinf(ctx, a):
    x = ctx.tensor(a)
    if not x.dtype.is_floating_point:
        return full(x.shape, False, dtype=dt.bool_)
    out = None
    if ctx.attr("detect_positive", 1):
        out = x == math.inf
    if ctx.attr("detect_negative", 1):
        neg = x == -math.inf
        out = neg if out is None else out | neg
    return out if out is not None else full(x.shape, False, dtype=dt.bool_)


# ------------------------------------------------------------------ Identity, Dropout
@register("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25), fold=lambda ctx, a: a)
def identity(ctx, a):
    return a


@register("Dropout", since=(7, 10, 12, 13, 22))
def dropout(ctx, a, ratio=None, training_mode=None):
    """Dropout-12 and later: ratio and training_mode are optional inputs (training only when
    training_mode is true). Dropout-7 and -10 have a ``ratio`` attribute and no training mode: they
    are identities. The optional mask (every element kept outside training) is bool, except
    Dropout-7's, which has the input's type (ones); onnxruntime writes zeros there, the onnx
    reference ones."""
    x = ctx.tensor(a)
    training = training_mode is not None and bool(ctx.const(training_mode, "training_mode").reshape(()).item())
    p = 0.5 if ratio is None else float(ctx.const(ratio, "ratio").reshape(()).item())
    if training and p > 0:
        y = F.dropout(x, p, training=True)
        mask = y != 0
    else:
        y, mask = x, None
        if ctx.wants_output(1):
            mask_dtype = np.bool_ if ctx.version >= 10 else x.dtype.np
            ctx.reserve(x.shape, mask_dtype, "the mask")
            mask = np.ones(x.shape, dtype=mask_dtype)
    return (y, mask) if ctx.wants_output(1) else y


# ------------------------------------------------------------------ casts
def _cast_check(ctx):
    to = ctx.attr("to")
    if to not in ELEM_DTYPES:
        return f"Cast to {elem_name(to)} ({SUPPORTED_TYPES_NOTE})"
    return None


def cast_array(a: np.ndarray, target: dt.DType) -> np.ndarray:
    """``a`` cast to ``target`` as lazyvic's cast computes it (its reference): float64 to a half type
    through float32 (as PyTorch and onnxruntime convert), float to an integer through int64."""
    with np.errstate(all="ignore"):
        return np.asarray(OPS["cast"].reference([a], {"dtype": target}))


def _fold_cast(ctx, a):
    target = ELEM_DTYPES[ctx.attr("to")]
    ctx.reserve(a.shape, target.np)  # bool -> float64 is 8 times the input
    return cast_array(a, target)


@register("Cast", since=(6, 9, 13, 19, 21, 23, 24, 25, 28), fold=_fold_cast, check=_cast_check)
def cast(ctx, a):
    # Not derived from the cast primitive: its ONNX form carries the target as a TensorProto enum,
    # and a target lazyvic lacks is refused at load time (_cast_check).
    return ctx.tensor(a).to(ELEM_DTYPES[ctx.attr("to")])


def _cast_like_target(ctx, like) -> dt.DType:
    target = lazyvic_dtype(dtype_np(like))
    if target is None:
        raise ctx.error(f"lazyvic has no {dtype_np(like)} (it supports {SUPPORTED_TYPES_TEXT})")
    return target


def _fold_cast_like(ctx, a, like):
    target = _cast_like_target(ctx, like)
    ctx.reserve(a.shape, target.np)
    return cast_array(a, target)


@register("CastLike", since=(15, 19, 21, 23, 24, 25), fold=_fold_cast_like)
def cast_like(ctx, a, like):
    return ctx.tensor(a).to(_cast_like_target(ctx, like))


# ------------------------------------------------------------------ rounding
# Floor, Round, Sin and Cos are primitives (their converters come from the op table);
# Ceil is -floor(-x).
@register("Ceil", since=(6, 13), fold=lambda ctx, a: _fold_unary(np.ceil, a))
def ceil(ctx, a):
    return ctx.tensor(a).ceil()
