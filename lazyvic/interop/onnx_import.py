"""ONNX import: ``lazyvic.onnx.load(path) -> OnnxModule``.

Semantics follow the ONNX operator specification (https://onnx.ai/onnx/operators/), each op at
the version the model's default-domain opset selects. Every supported node becomes lazyvic
Tensor / functional calls, so an imported graph is traced, cached, fused and differentiated like
any other lazyvic code.

Values while a graph runs are either a *known constant* (a NumPy array) or a lazy ``Tensor``:

- constants are the ``Constant`` nodes, the integer and bool initializers, the results of
  ``Shape`` / ``Size`` (lazyvic shapes are static), and the result of any node whose inputs are
  all constants and whose op has a NumPy fold below (Gather, Unsqueeze, Concat, Reshape, Slice,
  Cast, ConstantOfShape, Range, arithmetic, ...). So ``Shape -> Gather -> Unsqueeze -> Concat
  -> Reshape`` chains are folded when the module runs and feed Reshape's shape as plain ints;
- floating-point initializers are ``nn.Parameter`` s and graph inputs are Tensors, so they never
  fold: the computation on data stays lazy.

Ops (``supported_ops()`` lists each with the schema versions it handles):

- elementwise: Add Sub Mul Div Pow Mod Sqrt Reciprocal Exp Log Neg Abs Sign Erf Tanh Sigmoid Relu
  LeakyRelu PRelu Elu Selu Celu HardSigmoid HardSwish Swish SwiGLU Softplus Softsign Mish
  ThresholdedRelu Shrink Gelu Clip Min Max Sum Mean; Equal Less LessOrEqual Greater GreaterOrEqual
  Not And Or Xor Where IsNaN IsInf; Cast CastLike Identity Dropout;
- layers: Softmax LogSoftmax MatMul Gemm; Conv and ConvTranspose (1-D and 2-D); MaxPool (also its
  Indices output) and AveragePool (any number of spatial axes; pads, auto_pad, ceil_mode,
  dilations); LpPool GlobalAveragePool GlobalMaxPool; BatchNormalization (also training_mode=1)
  InstanceNormalization LayerNormalization GroupNormalization RMSNormalization LpNormalization
  MeanVarianceNormalization; NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss; RNN GRU LSTM
  (unrolled over the sequence); Attention (GQA, KV cache, causal, softcap); RotaryEmbedding;
- movement: Flatten Reshape Transpose Concat Split Slice Gather GatherElements GatherND Unsqueeze
  Squeeze Expand Tile Pad (constant, edge, reflect, wrap) Trilu DepthToSpace SpaceToDepth
  CenterCropPad ReverseSequence ScatterND ScatterElements (reduction none / add) Resize (nearest,
  linear, cubic; every coordinate mode, antialias, exclude_outside);
- reductions: ReduceSum ReduceMean ReduceMax ReduceMin ReduceSumSquare ReduceL1 ReduceL2
  ReduceLogSum ReduceLogSumExp ArgMax ArgMin CumSum; Einsum (with ellipsis, diagonals, any number of
  operands);
- shapes and constants: Shape Size Constant ConstantOfShape Range EyeLike OneHot; Floor Ceil Round
  Sin Cos of constants only (lazyvic has no such primitive; a graph applying them to computed
  tensors is refused at load time).

The module (:class:`OnnxModule`) holds floating-point initializers as ``nn.Parameter`` s and integer
and bool ones as buffers, under ``state_dict`` keys equal to the initializer names when those are
dotted identifiers (``layer1.0.conv1.weight`` -> nested submodules), else sanitized
(:func:`state_dict_keys`). Its ``config`` is ``{"model": base64 of the ModelProto with the
initializers' data stripped, "source": file name}``, so ``OnnxModule(**config)`` rebuilds the same
structure with zero-filled parameters and lazyvic format v1 (``lazyvic.save`` / ``lazyvic.load``)
round-trips it.

Inputs that the spec calls tensors but that lazyvic needs as Python values (Reshape's shape,
Slice's starts/ends, the axes of Squeeze/Unsqueeze/Reduce*, Split's split, Clip's bounds, ...)
are read from constants, or from a Tensor that already holds data (no sync); a Tensor still
pending there (a shape computed from data) is computed first with ``.numpy()`` (a sync point).
"""

from __future__ import annotations

import base64
import itertools
import math
import os
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

import lazyvic
from lazyvic import dtypes as dt
from lazyvic import functional as F
from lazyvic.errors import DTypeError, LazyvicError, OnnxError, UnsupportedOpError
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor

# The default-domain opsets this importer reads. Below 13 the semantics of Softmax, Split,
# Squeeze, ReduceSum, ... differ; above MAX_OPSET (the newest opset of the onnx release these
# converters were checked against) an op may have semantics we have not read.
MIN_OPSET = 13
MAX_OPSET = 28

_DEFAULT_DOMAINS = ("", "ai.onnx")

# ONNX TensorProto element types lazyvic has.
_ELEM_DTYPES = {1: dt.float32, 6: dt.int32, 7: dt.int64, 9: dt.bool_, 11: dt.float64}
_SUPPORTED_TYPES_TEXT = "FLOAT (float32), DOUBLE (float64), INT32, INT64 and BOOL"


def _elem_name(elem_type: int) -> str:
    try:
        from onnx import TensorProto

        return TensorProto.DataType.Name(elem_type)
    except Exception:
        return f"element type {elem_type}"


# ============================================================== the converter table
@dataclass(frozen=True)
class _Converter:
    """How one ONNX op type becomes lazyvic calls.

    ``convert(ctx, *inputs)`` gets each input as a NumPy constant, a Tensor, or None (an omitted
    optional input) and returns one value or a tuple (one per output). ``fold(ctx, *arrays)``,
    when given, evaluates the node with NumPy when every input is a constant. ``versions`` are the
    op's since-versions (``onnx.defs.get_schema(op, opset).since_version``) whose semantics this
    converter implements; versions after 18 are listed only where the schema change touches
    element types lazyvic does not have (float16, bfloat16, float8, int4, ...) or is handled.
    ``check(ctx)`` returns a reason when a node uses a feature the converter lacks (load time).
    ``fold_only`` ops (Floor, Sin, ...: no lazyvic primitive) import only where their inputs are
    constants, which the load-time check decides (see ``OnnxModule._build``).
    """

    convert: Callable
    versions: frozenset
    fold: Callable | None = None
    check: Callable | None = None
    fold_only: bool = False


_CONVERTERS: dict[str, _Converter] = {}


def _register(op_types: str, versions, fold=None, check=None, fold_only=False):
    def decorate(fn):
        for op in op_types.split():
            _CONVERTERS[op] = _Converter(fn, frozenset(versions), fold, check, fold_only)
        return fn

    return decorate


def supported_ops() -> dict[str, tuple[int, ...]]:
    """Op type -> the since-versions of its schema that the importer handles."""
    return {op: tuple(sorted(c.versions)) for op, c in sorted(_CONVERTERS.items())}


# ============================================================== per-node context
def _tensor(data, dtype=None, device=None) -> Tensor:
    """``lazyvic.tensor`` on the running model's device (constants made while a graph runs)."""
    return lazyvic.tensor(data, dtype=dtype, device=device or _NodeContext.device)


class _NodeContext:
    """One graph node ready to run: its attributes parsed once, errors that name it."""

    # The device of the running OnnxModule (set by its forward): constants are made there.
    device = "cpu"

    def __init__(self, proto, version: int, source: str, index: int):
        from onnx import helper

        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.version = version
        self.source = source
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {}
        for a in proto.attribute:
            value = helper.get_attribute_value(a)
            if isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode() for v in value]
            self.attrs[a.name] = value

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def label(self) -> str:
        return f"{self.source}: node '{self.name}' ({self.op})"

    def error(self, message: str) -> OnnxError:
        return OnnxError(f"{self.label()}: {message}")

    def wants_output(self, i: int) -> bool:
        return i < len(self.outputs) and self.outputs[i] != ""

    # ---------------------------------------------------------------- values
    def tensor(self, value) -> Tensor:
        """A lazy Tensor for an input (constants become realized tensors of their dtype)."""
        if isinstance(value, Tensor):
            return value
        arr = np.asarray(value)
        if _lazyvic_dtype(arr.dtype) is None:
            raise self.error(f"lazyvic has no {arr.dtype} (it supports {_SUPPORTED_TYPES_TEXT})")
        return _tensor(arr, dtype=arr.dtype, device=_NodeContext.device)

    def const(self, value, what: str) -> np.ndarray:
        """A constant's array; a Tensor that holds data gives its data; a pending one is synced."""
        if isinstance(value, np.ndarray):
            return value
        if isinstance(value, Tensor):
            return np.asarray(value.numpy())
        raise self.error(f"{what} is missing")

    def ints(self, value, what: str) -> list:
        arr = self.const(value, what)
        if arr.dtype.kind not in "iu":
            raise self.error(f"{what} must be an integer tensor, got {arr.dtype}")
        return [int(v) for v in arr.reshape(-1)]

    def axis(self, axis: int, ndim: int, what: str = "axis") -> int:
        if not -ndim <= axis < max(ndim, 1):
            raise self.error(f"{what} {axis} is out of range for rank {ndim}")
        return axis % ndim if ndim else 0


def _lazyvic_dtype(np_dtype) -> dt.DType | None:
    try:
        return dt.get_dtype(np.dtype(np_dtype))
    except (DTypeError, TypeError):
        return None


def _is_const(v) -> bool:
    return isinstance(v, np.ndarray)


def _shape_of(v) -> tuple:
    return tuple(v.shape)


def _dtype_np(v) -> np.dtype:
    return v.dtype if isinstance(v, np.ndarray) else v.dtype.np


# ============================================================== elementwise
def _operand(ctx: _NodeContext, v, other):
    """A binary operand: a 0-d constant of the other side's dtype stays a Python scalar."""
    if _is_const(v) and v.ndim == 0 and isinstance(other, Tensor) and v.dtype == other.dtype.np:
        return v.item()
    return ctx.tensor(v)


def _binary_pair(ctx, a, b):
    if isinstance(a, Tensor) or not isinstance(b, Tensor):
        return ctx.tensor(a), _operand(ctx, b, a if isinstance(a, Tensor) else None)
    return _operand(ctx, a, b), b


def _int_div(a: Tensor, b, dtype: dt.DType) -> Tensor:
    # ONNX integer Div truncates toward zero, as C does; a float64 quotient cast back truncates.
    b = b.to(dt.float64) if isinstance(b, Tensor) else float(b)
    return (a.to(dt.float64) / b).to(dtype)


def _convert_binary(ctx, a, b):
    x, y = _binary_pair(ctx, a, b)
    op = ctx.op
    if op == "Add":
        return x + y
    if op == "Sub":
        return x - y
    if op == "Mul":
        return x * y
    # Div
    t = x if isinstance(x, Tensor) else y
    if t.dtype.category != 2:
        if not isinstance(x, Tensor):
            x = ctx.tensor(np.asarray(x, dtype=t.dtype.np))
        return _int_div(x, y, t.dtype)
    return x / y


def _fold_binary(ctx, a, b):
    with np.errstate(all="ignore"):
        if ctx.op == "Add":
            out = a + b
        elif ctx.op == "Sub":
            out = a - b
        elif ctx.op == "Mul":
            out = a * b
        elif a.dtype.kind in "iu":
            out = np.trunc(a / b)
        else:
            out = a / b
    return np.asarray(out).astype(a.dtype)


_register("Add Sub Mul Div", (13, 14), fold=_fold_binary)(_convert_binary)


@_register("Pow", (13, 15), fold=lambda ctx, a, b: np.asarray(np.power(a.astype(np.float64), b)).astype(a.dtype))
def _pow(ctx, a, b):
    # Pow's base and exponent types may differ; the result has the base's type.
    x = ctx.tensor(a)
    base = x if x.dtype.is_floating_point else x.to(dt.float64)
    if _is_const(b) and b.ndim == 0:
        e = b.item()
    else:
        e = ctx.tensor(b)
        e = e if e.dtype is base.dtype else e.to(base.dtype)
    y = base**e
    if not x.dtype.is_floating_point:
        # Integer powers: round the float64 result (exact below 2**53) before casting back.
        y = lazyvic.where(y < 0, y - 0.5, y + 0.5)
    return y.to(x.dtype)


_UNARY_FOLDS = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Sqrt": np.sqrt,
    "Reciprocal": np.reciprocal,
    "Exp": np.exp,
    "Log": np.log,
    "Not": np.logical_not,
    "Relu": lambda a: np.maximum(a, 0).astype(a.dtype),
}


def _fold_unary(ctx, a):
    with np.errstate(all="ignore"):
        return np.asarray(_UNARY_FOLDS[ctx.op](a)).astype(a.dtype)


@_register("Relu", (13, 14), fold=_fold_unary)
@_register("Neg Abs", (13,), fold=_fold_unary)
@_register("Sqrt Reciprocal Exp Log", (13,), fold=_fold_unary)
@_register("Sigmoid Tanh Erf", (13,))
@_register("Not", (1,), fold=_fold_unary)
def _unary(ctx, a):
    x = ctx.tensor(a)
    op = ctx.op
    if op == "Neg":
        return -x
    if op == "Abs":
        return x.abs()
    if op == "Relu":
        return x.relu()
    if op == "Not":
        return ~x
    if op == "Reciprocal":
        return x.reciprocal()
    return getattr(x, op.lower())()


@_register("LeakyRelu", (6, 16))
def _leaky_relu(ctx, a):
    return F.leaky_relu(ctx.tensor(a), float(ctx.attr("alpha", 0.01)))


@_register("Clip", (13,))
def _clip(ctx, a, lo=None, hi=None):
    x = ctx.tensor(a)
    lo = None if lo is None else ctx.const(lo, "min").reshape(()).item()
    hi = None if hi is None else ctx.const(hi, "max").reshape(()).item()
    if lo is None and hi is None:
        return x
    return x.clamp(lo, hi)


def _compare_fold(ctx, a, b):
    fn = {"Equal": np.equal, "Less": np.less, "Greater": np.greater}[ctx.op]
    return np.asarray(fn(a, b))


@_register("Equal", (13, 19), fold=_compare_fold)
@_register("Less Greater", (13,), fold=_compare_fold)
def _compare(ctx, a, b):
    x, y = _binary_pair(ctx, a, b)
    if ctx.op == "Equal":
        return x == y if isinstance(x, Tensor) else y == x
    if ctx.op == "Less":
        return x < y if isinstance(x, Tensor) else y > x
    return x > y if isinstance(x, Tensor) else y < x


@_register("Where", (9, 16), fold=lambda ctx, c, a, b: np.where(c, a, b))
def _where(ctx, c, a, b):
    cond = ctx.tensor(c)
    x, y = ctx.tensor(a), ctx.tensor(b)
    return lazyvic.where(cond, x, y)


@_register("Identity", (13, 14, 16, 19, 21, 23, 24, 25), fold=lambda ctx, a: a)
def _identity(ctx, a):
    return a


@_register("Dropout", (13, 22))
def _dropout(ctx, a, ratio=None, training_mode=None):
    x = ctx.tensor(a)
    training = training_mode is not None and bool(ctx.const(training_mode, "training_mode").reshape(()).item())
    p = 0.5 if ratio is None else float(ctx.const(ratio, "ratio").reshape(()).item())
    if training and p > 0:
        y = F.dropout(x, p, training=True)
        mask = y != 0
    else:
        y, mask = x, np.ones(x.shape, dtype=bool)
    return (y, mask) if ctx.wants_output(1) else y


# ============================================================== casts
_CAST_CHECK_SUPPORTED = "lazyvic supports " + _SUPPORTED_TYPES_TEXT


def _cast_check(ctx):
    to = ctx.attr("to")
    if to not in _ELEM_DTYPES:
        return f"Cast to {_elem_name(to)} ({_CAST_CHECK_SUPPORTED})"
    return None


@_register(
    "Cast",
    (13, 19, 21, 23, 24, 25, 28),
    fold=lambda ctx, a: a.astype(_ELEM_DTYPES[ctx.attr("to")].np),
    check=_cast_check,
)
def _cast(ctx, a):
    return ctx.tensor(a).to(_ELEM_DTYPES[ctx.attr("to")])


def _cast_like_target(ctx, like) -> dt.DType:
    target = _lazyvic_dtype(_dtype_np(like))
    if target is None:
        raise ctx.error(f"lazyvic has no {_dtype_np(like)} (it supports {_SUPPORTED_TYPES_TEXT})")
    return target


@_register("CastLike", (15, 19, 21, 23, 24, 25), fold=lambda ctx, a, like: a.astype(_cast_like_target(ctx, like).np))
def _cast_like(ctx, a, like):
    return ctx.tensor(a).to(_cast_like_target(ctx, like))


# ============================================================== matmul, gemm
def _matmul_like(x: Tensor, y: Tensor) -> Tensor:
    out = x @ y
    return out.to(x.dtype) if x.dtype.category != 2 else out


@_register("MatMul", (13,))
def _matmul(ctx, a, b):
    return _matmul_like(ctx.tensor(a), ctx.tensor(b))


@_register("Gemm", (13,))
def _gemm(ctx, a, b, c=None):
    x, y = ctx.tensor(a), ctx.tensor(b)
    if x.ndim != 2 or y.ndim != 2:
        raise ctx.error(f"A and B must be 2-D, got shapes {x.shape} and {y.shape}")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if (
        ctx.attr("transB", 0)
        and not ctx.attr("transA", 0)
        and alpha == 1.0
        and beta == 1.0
        and x.dtype.is_floating_point
        and x.dtype == y.dtype
        and (c is None or ctx.tensor(c).ndim == 1)
    ):
        # A linear layer (PyTorch's exporters write nn.Linear this way): through F.linear, so a
        # re-export writes one Gemm again.
        return F.linear(x, y, None if c is None else ctx.tensor(c))
    if ctx.attr("transA", 0):
        x = x.T
    if ctx.attr("transB", 0):
        y = y.T
    out = _matmul_like(x, y)
    if alpha != 1.0:
        out = out * alpha
    if c is not None:
        bias = ctx.tensor(c)
        out = out + (bias * beta if beta != 1.0 else bias)
    return out


# ============================================================== softmax family
@_register("Softmax LogSoftmax", (13,))
def _softmax(ctx, a):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    return F.softmax(x, axis) if ctx.op == "Softmax" else F.log_softmax(x, axis)


@_register("Gelu", (20,))
def _gelu(ctx, a):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(ctx.tensor(a), approximate=approximate)


@_register("LayerNormalization", (17,))
def _layer_norm(ctx, a, scale, bias=None):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    eps = float(ctx.attr("epsilon", 1e-5))
    w = ctx.tensor(scale)
    b = None if bias is None else ctx.tensor(bias)
    normalized = x.shape[axis:]
    if not (ctx.wants_output(1) or ctx.wants_output(2)):
        return F.layer_norm(x, normalized, w, b, eps)
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    inv_std = ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    y = xc * inv_std * w
    if b is not None:
        y = y + b
    return y, mean, inv_std


# ============================================================== convolution and pooling
def _spatial_pads(ctx, sizes, kernel, strides, dilations, ceil_mode=False):
    """Begin/end padding per spatial axis from ``pads`` / ``auto_pad``, and the extra end padding
    that ``ceil_mode`` needs (windows that start in the right padding are dropped, as the spec
    says and onnxruntime does)."""
    n = len(sizes)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = list(ctx.attr("pads", [0] * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads {pads} must have {2 * n} entries for {n} spatial axes")
        pairs = [(pads[i], pads[i + n]) for i in range(n)]
    elif auto == "VALID":
        pairs = [(0, 0)] * n
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        pairs = []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            pairs.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    else:
        raise ctx.error(f"unknown auto_pad {auto!r}")
    extra = [0] * n
    if ceil_mode:
        for i, (size, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
            b, e = pairs[i]
            span = (k - 1) * d + 1
            out = -(-(size + b + e - span) // s) + 1
            if (out - 1) * s >= size + b:
                out -= 1
            extra[i] = max((out - 1) * s + span - (size + b + e), 0)
    return pairs, extra


def _pad_spatial(x: Tensor, pairs, value) -> Tensor:
    """Pad the trailing len(pairs) axes with ``value``; ``pairs`` are (begin, end) in axis order."""
    if not any(b or e for b, e in pairs):
        return x
    return F.pad(x, [v for b, e in reversed(pairs) for v in (b, e)], value=value)


def _window_offsets(kernel, dilations):
    """Each kernel position's offset per spatial axis, row-major over the kernel."""
    return list(itertools.product(*[[i * d for i in range(k)] for k, d in zip(kernel, dilations)]))


def _pooled_sizes(sizes, kernel, strides, dilations) -> list:
    return [(n - ((k - 1) * d + 1)) // s + 1 for n, k, s, d in zip(sizes, kernel, strides, dilations)]


def _window_views(x: Tensor, kernel, strides, dilations) -> list:
    """The strided views of padded x (N, C, *spatial) for every kernel position, each (N, C, *out)."""
    out = _pooled_sizes(x.shape[2:], kernel, strides, dilations)
    views = []
    for offs in _window_offsets(kernel, dilations):
        spans = tuple(slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offs, out, strides))
        views.append(x[(slice(None), slice(None)) + spans])
    return views


def _np_window_sum(a: np.ndarray, kernel, strides, dilations) -> np.ndarray:
    out = _pooled_sizes(a.shape, kernel, strides, dilations)
    total = np.zeros(out, dtype=np.float64)
    for offs in _window_offsets(kernel, dilations):
        total += a[tuple(slice(o, o + (m - 1) * s + 1, s) for o, m, s in zip(offs, out, strides))]
    return total


def _spatial_rank_check(ctx):
    kernel = ctx.attr("kernel_shape")
    if kernel is not None and len(kernel) not in (1, 2):
        return f"{ctx.op} with {len(kernel)} spatial axes (lazyvic has 1-D and 2-D {ctx.op})"
    return None


def _to_2d(ctx, x: Tensor, what: str):
    """(N, C, L) -> (N, C, 1, L) so 1-D ops run as 2-D ones; (N, C, H, W) unchanged."""
    if x.ndim == 3:
        return x.unsqueeze(2), True
    if x.ndim == 4:
        return x, False
    raise UnsupportedOpError(f"{ctx.label()}: {what} shape {x.shape}: lazyvic imports 1-D and 2-D {ctx.op} only")


def _spatial_attrs(ctx, n_spatial: int, kernel):
    strides = list(ctx.attr("strides", [1] * n_spatial))
    dilations = list(ctx.attr("dilations", [1] * n_spatial))
    if len(strides) != n_spatial or len(dilations) != n_spatial or len(kernel) != n_spatial:
        raise ctx.error(
            f"kernel {list(kernel)}, strides {strides} and dilations {dilations} must have {n_spatial} entries"
        )
    return strides, dilations


def _lift_1d(values, fill):
    return [fill, *values]


def _conv_operands(ctx, a, w, b):
    """Conv and ConvTranspose inputs as 2-D: ``(x, weight, bias, one_d, n_spatial, kernel)``;
    a 1-D convolution gets a unit height (``one_d``)."""
    x, weight = ctx.tensor(a), ctx.tensor(w)
    bias = None if b is None else ctx.tensor(b)
    if weight.ndim != x.ndim:
        raise ctx.error(f"weight shape {weight.shape} does not fit input {x.shape}")
    x, one_d = _to_2d(ctx, x, "input")
    if one_d:
        weight = weight.unsqueeze(2)
    n_spatial = 1 if one_d else 2
    kernel = list(ctx.attr("kernel_shape", weight.shape[4 - n_spatial :]))
    return x, weight, bias, one_d, n_spatial, kernel


@_register("Conv", (11, 22), check=_spatial_rank_check)
def _conv(ctx, a, w, b=None):
    x, weight, bias, one_d, n_spatial, kernel = _conv_operands(ctx, a, w, b)
    if tuple(kernel) != tuple(weight.shape[4 - n_spatial :]):
        raise ctx.error(f"kernel_shape {kernel} does not match weight shape {weight.shape}")
    strides, dilations = _spatial_attrs(ctx, n_spatial, kernel)
    pairs, _ = _spatial_pads(ctx, x.shape[4 - n_spatial :], kernel, strides, dilations)
    if one_d:
        kernel, strides, dilations, pairs = (
            _lift_1d(kernel, 1),
            _lift_1d(strides, 1),
            _lift_1d(dilations, 1),
            [(0, 0), *pairs],
        )
    padding = [0, 0]
    if all(p == q for p, q in pairs):
        padding = [p for p, _ in pairs]
    else:
        x = _pad_spatial(x, pairs, 0)
    y = F.conv2d(
        x,
        weight,
        bias,
        stride=tuple(strides),
        padding=tuple(padding),
        dilation=tuple(dilations),
        groups=int(ctx.attr("group", 1)),
    )
    return y.squeeze(2) if one_d else y


def _conv_transpose_pads(ctx, sizes, kernel, strides, dilations):
    """(begin, end) padding per spatial axis and output_padding, from pads / output_shape / auto_pad
    (the spec's ConvTranspose formulas)."""
    n = len(sizes)
    out_pad = list(ctx.attr("output_padding", [0] * n))
    auto = ctx.attr("auto_pad", "NOTSET")
    target = ctx.attr("output_shape")
    if target is not None:
        target = list(target)[-n:]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [size * s for size, s in zip(sizes, strides)]
    if target is None:
        pads = [0] * (2 * n) if auto == "VALID" else list(ctx.attr("pads", [0] * (2 * n)))
        return [(pads[i], pads[i + n]) for i in range(n)], out_pad
    pairs = []
    for size, k, s, d, op, t in zip(sizes, kernel, strides, dilations, out_pad, target):
        total = s * (size - 1) + op + (k - 1) * d + 1 - t
        half = total // 2
        pairs.append((half, total - half) if auto == "SAME_UPPER" else (total - half, half))
    return pairs, out_pad


@_register("ConvTranspose", (11, 22), check=_spatial_rank_check)
def _conv_transpose(ctx, a, w, b=None):
    """The gradient of a convolution: spread the input by the strides (zeros between elements),
    pad by the dilated kernel extent less ``pads`` (plus output_padding at the end), and convolve
    with the spatially flipped kernel whose in/out channels are swapped within each group."""
    x, weight, bias, one_d, n_spatial, kernel = _conv_operands(ctx, a, w, b)
    strides, dilations = _spatial_attrs(ctx, n_spatial, kernel)
    pairs, out_pad = _conv_transpose_pads(ctx, x.shape[4 - n_spatial :], kernel, strides, dilations)
    if one_d:
        kernel, strides, dilations = _lift_1d(kernel, 1), _lift_1d(strides, 1), _lift_1d(dilations, 1)
        pairs, out_pad = [(0, 0), *pairs], [0, *out_pad]
    groups = int(ctx.attr("group", 1))
    n, c, h, wd = x.shape
    if weight.shape[0] != c or c % groups:
        raise ctx.error(f"weight shape {weight.shape} does not fit input {x.shape} with group={groups}")
    sh, sw = strides
    if sh > 1 or sw > 1:  # zeros between the input elements
        spread = x.reshape(n, c, h, 1, wd, 1)
        spread = _pad_spatial(spread.permute(0, 1, 2, 4, 3, 5), [(0, sh - 1), (0, sw - 1)], 0)
        spread = spread.permute(0, 1, 2, 4, 3, 5).reshape(n, c, h * sh, wd * sw)
        x = spread[:, :, : (h - 1) * sh + 1, : (wd - 1) * sw + 1]
    edges = []
    for (pb, pe), k, d, op in zip(pairs, kernel, dilations, out_pad):
        edges.append(((k - 1) * d - pb, (k - 1) * d - pe + op))
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0)) for (lo, hi), size in zip(edges, x.shape[2:]))
    x = _pad_spatial(x[(slice(None), slice(None)) + crop], [(max(lo, 0), max(hi, 0)) for lo, hi in edges], 0)
    m_per_group = weight.shape[1]
    kh, kw = weight.shape[2:]
    flipped = weight.index_select(2, _tensor(np.arange(kh - 1, -1, -1), device=weight.device)).index_select(
        3, _tensor(np.arange(kw - 1, -1, -1), device=weight.device)
    )
    w2 = flipped.reshape(groups, c // groups, m_per_group, kh, kw).transpose(1, 2)
    w2 = w2.reshape(groups * m_per_group, c // groups, kh, kw)
    y = F.conv2d(x, w2, bias, stride=1, padding=0, dilation=tuple(dilations), groups=groups)
    return y.squeeze(2) if one_d else y


def _max_pool_indices(x: Tensor, views: list, pairs, kernel, strides, dilations, column_major: bool) -> Tensor:
    """MaxPool's Indices output: the flat index into x of each window's first maximum (spatial axes
    row-major, or column-major for storage_order=1)."""
    spatial = x.shape[2:]
    out = _pooled_sizes([n + b + e for n, (b, e) in zip(spatial, pairs)], kernel, strides, dilations)
    # table[k, n, c, *o]: the flat input index of kernel position k for output cell o of plane (n, c).
    grids = np.meshgrid(*[np.arange(m) * s for m, s in zip(out, strides)], indexing="ij")
    planes = (np.arange(x.shape[0] * x.shape[1]) * math.prod(spatial)).reshape(x.shape[0], x.shape[1], *[1] * len(out))
    table = []
    for offs in _window_offsets(kernel, dilations):
        flat = np.zeros(out, dtype=np.int64)
        axes = list(range(len(spatial)))
        for axis in reversed(axes) if column_major else axes:
            flat = flat * spatial[axis] + (grids[axis] + offs[axis] - pairs[axis][0])
        table.append(planes + flat)
    which = lazyvic.stack(views, 0).argmax(0, keepdim=True)  # (1, N, C, *out): first maximum
    return _tensor(np.stack(table), device=which.device).gather(0, which).reshape(*which.shape[1:])


@_register("MaxPool", (12, 22))
@_register("AveragePool", (11, 19, 22))
def _pool(ctx, a):
    """N-D pooling. The common 1-D/2-D case (symmetric padding of at most half the kernel, no
    dilation, no ceil_mode, no Indices) is functional.max_pool2d / avg_pool2d; every other case pads
    explicitly (-inf for max, 0 for average) and reduces the strided window views."""
    x = ctx.tensor(a)
    n_spatial = x.ndim - 2
    kernel = list(ctx.attr("kernel_shape"))
    if n_spatial < 1:
        raise ctx.error(f"input shape {x.shape} has no spatial axes (expected (N, C, ...))")
    strides, dilations = _spatial_attrs(ctx, n_spatial, kernel)
    pairs, extra = _spatial_pads(ctx, x.shape[2:], kernel, strides, dilations, bool(ctx.attr("ceil_mode", 0)))
    indices = ctx.op == "MaxPool" and ctx.wants_output(1)
    simple = (
        n_spatial <= 2
        and not indices
        and set(dilations) == {1}
        and not any(extra)
        and all(p == q and 2 * p <= k for (p, q), k in zip(pairs, kernel))
    )
    if simple:
        one_d = n_spatial == 1
        x2 = x.unsqueeze(2) if one_d else x
        lead = [1] if one_d else []
        k2, s2, p2 = lead + kernel, lead + strides, [0] * one_d + [p for p, _ in pairs]
        if ctx.op == "MaxPool":
            y = F.max_pool2d(x2, tuple(k2), tuple(s2), tuple(p2))
        else:
            y = F.avg_pool2d(
                x2, tuple(k2), tuple(s2), tuple(p2), count_include_pad=bool(ctx.attr("count_include_pad", 0))
            )
        return y.squeeze(2) if one_d else y
    full_pairs = [(p, q + e) for (p, q), e in zip(pairs, extra)]
    if ctx.op == "MaxPool":
        low = -math.inf if x.dtype.is_floating_point else np.iinfo(x.dtype.np).min
        views = _window_views(_pad_spatial(x, full_pairs, low), kernel, strides, dilations)
        y = lazyvic.stack(views, 0).amax(0)
        if not indices:
            return y
        return y, _max_pool_indices(
            x, views, full_pairs, kernel, strides, dilations, bool(ctx.attr("storage_order", 0))
        )
    total = lazyvic.stack(_window_views(_pad_spatial(x, full_pairs, 0), kernel, strides, dilations), 0).sum(0)
    # The divisor per output cell: the input cells (and, with count_include_pad, the explicit
    # padding but not the ceil_mode overhang) that its window covers.
    mask = np.ones(x.shape[2:])
    if ctx.attr("count_include_pad", 0):
        mask = np.pad(np.pad(mask, pairs, constant_values=1.0), [(0, e) for e in extra])
    else:
        mask = np.pad(mask, full_pairs)
    count = _np_window_sum(mask, kernel, strides, dilations)
    return total * (1.0 / np.maximum(count, 1)).astype(x.dtype.np)


@_register("LpPool", (11, 18, 22))
def _lp_pool(ctx, a):
    """(sum over the window of |x|^p)^(1/p), zero padding (ceil_mode and dilations from LpPool-18)."""
    x = ctx.tensor(a)
    kernel = list(ctx.attr("kernel_shape"))
    strides, dilations = _spatial_attrs(ctx, x.ndim - 2, kernel)
    ceil = bool(ctx.attr("ceil_mode", 0)) if ctx.version >= 18 else False
    pairs, extra = _spatial_pads(ctx, x.shape[2:], kernel, strides, dilations, ceil)
    p = float(ctx.attr("p", 2))
    powered = x * x if p == 2 else x.abs() if p == 1 else x.abs() ** p
    padded = _pad_spatial(powered, [(b, e + x_) for (b, e), x_ in zip(pairs, extra)], 0)
    total = lazyvic.stack(_window_views(padded, kernel, strides, dilations), 0).sum(0)
    return total.sqrt() if p == 2 else total if p == 1 else total ** (1.0 / p)


@_register("GlobalAveragePool", (1, 22))
def _global_average_pool(ctx, a):
    x = ctx.tensor(a)
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@_register("BatchNormalization", (9, 14, 15))
def _batch_norm(ctx, a, scale, bias, mean, var):
    x = ctx.tensor(a)
    eps = float(ctx.attr("epsilon", 1e-5))
    if not (ctx.version >= 14 and ctx.attr("training_mode", 0)):
        return F.batch_norm(
            x, ctx.tensor(mean), ctx.tensor(var), ctx.tensor(scale), ctx.tensor(bias), training=False, eps=eps
        )
    # training_mode=1: normalize with the batch statistics (biased variance); the optional outputs are
    # the updated running statistics, input * momentum + batch * (1 - momentum), as the spec writes.
    axes = (0, *range(2, x.ndim))
    view = (x.shape[1],) + (1,) * (x.ndim - 2)
    batch_mean = x.mean(axes, keepdim=True)
    xc = x - batch_mean
    batch_var = (xc * xc).mean(axes, keepdim=True)
    y = xc * (batch_var + eps).rsqrt() * ctx.tensor(scale).reshape(*view) + ctx.tensor(bias).reshape(*view)
    momentum = float(ctx.attr("momentum", 0.9))
    running_mean = ctx.tensor(mean) * momentum + batch_mean.reshape(x.shape[1]) * (1.0 - momentum)
    running_var = ctx.tensor(var) * momentum + batch_var.reshape(x.shape[1]) * (1.0 - momentum)
    return y, running_mean, running_var


# ============================================================== movement
def _reshape_target(ctx, shape: tuple, target: list) -> tuple:
    allowzero = ctx.attr("allowzero", 0) if ctx.version >= 14 else 0
    out = []
    for i, s in enumerate(target):
        if s == 0 and not allowzero:
            if i >= len(shape):
                raise ctx.error(f"shape {target} copies dimension {i} (a 0) of an input of rank {len(shape)}")
            s = shape[i]
        out.append(s)
    if out.count(-1) > 1:
        raise ctx.error(f"shape {target} has more than one -1")
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        total = math.prod(shape)
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape an input of shape {shape} to {target}")
        out[out.index(-1)] = total // known
    if math.prod(out) != math.prod(shape) or any(s < 0 for s in out):
        raise ctx.error(f"cannot reshape an input of shape {shape} ({math.prod(shape)} elements) to {target}")
    return tuple(out)


_RESHAPE_VERSIONS = (13, 14, 19, 21, 23, 24, 25)


@_register(
    "Reshape", _RESHAPE_VERSIONS, fold=lambda ctx, a, s: a.reshape(_reshape_target(ctx, a.shape, ctx.ints(s, "shape")))
)
def _reshape(ctx, a, s):
    x = ctx.tensor(a)
    return x.reshape(*_reshape_target(ctx, x.shape, ctx.ints(s, "shape")))


def _flatten_shape(ctx, shape):
    axis = int(ctx.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise ctx.error(f"axis {axis} is out of range for rank {len(shape)}")
    if axis < 0:
        axis += len(shape)
    return math.prod(shape[:axis]), math.prod(shape[axis:])


@_register("Flatten", (13, 21, 23, 24, 25), fold=lambda ctx, a: a.reshape(_flatten_shape(ctx, a.shape)))
def _flatten(ctx, a):
    x = ctx.tensor(a)
    return x.reshape(*_flatten_shape(ctx, x.shape))


def _perm(ctx, ndim):
    perm = ctx.attr("perm")
    perm = list(reversed(range(ndim))) if perm is None else [ctx.axis(int(p), ndim, "perm entry") for p in perm]
    if sorted(perm) != list(range(ndim)):
        raise ctx.error(f"perm {perm} is not a permutation of the {ndim} axes")
    return perm


@_register("Transpose", (13, 21, 23, 24, 25), fold=lambda ctx, a: np.transpose(a, _perm(ctx, a.ndim)))
def _transpose(ctx, a):
    x = ctx.tensor(a)
    return x.permute(*_perm(ctx, x.ndim))


def _unsqueeze_shape(ctx, shape, axes_value):
    axes = ctx.ints(axes_value, "axes")
    rank = len(shape) + len(axes)
    axes = sorted(ctx.axis(a, rank, "axes entry") for a in axes)
    if len(set(axes)) != len(axes):
        raise ctx.error(f"axes {axes} has duplicates")
    out = list(shape)
    for a in axes:
        out.insert(a, 1)
    return tuple(out)


_SQUEEZE_VERSIONS = (13, 21, 23, 24, 25)


@_register("Unsqueeze", _SQUEEZE_VERSIONS, fold=lambda ctx, a, axes: a.reshape(_unsqueeze_shape(ctx, a.shape, axes)))
def _unsqueeze(ctx, a, axes):
    x = ctx.tensor(a)
    return x.reshape(*_unsqueeze_shape(ctx, x.shape, axes))


def _squeeze_shape(ctx, shape, axes_value):
    if axes_value is None:
        return tuple(s for s in shape if s != 1)
    axes = {ctx.axis(a, len(shape), "axes entry") for a in ctx.ints(axes_value, "axes")}
    for a in axes:
        if shape[a] != 1:
            raise ctx.error(f"cannot squeeze axis {a} of size {shape[a]} (input shape {shape})")
    return tuple(s for i, s in enumerate(shape) if i not in axes)


@_register("Squeeze", _SQUEEZE_VERSIONS, fold=lambda ctx, a, axes=None: a.reshape(_squeeze_shape(ctx, a.shape, axes)))
def _squeeze(ctx, a, axes=None):
    x = ctx.tensor(a)
    return x.reshape(*_squeeze_shape(ctx, x.shape, axes))


def _concat_axis(ctx, values):
    ndim = len(_shape_of(values[0]))
    return ctx.axis(int(ctx.attr("axis")), ndim)


@_register("Concat", (13,), fold=lambda ctx, *vs: np.concatenate(vs, axis=_concat_axis(ctx, vs)))
def _concat(ctx, *values):
    values = [v for v in values if v is not None]
    axis = _concat_axis(ctx, values)
    tensors = [ctx.tensor(v) for v in values]
    nonempty = [t for t in tensors if t.shape[axis] != 0]
    tensors = nonempty or tensors[:1]
    return tensors[0] if len(tensors) == 1 else lazyvic.cat(tensors, axis)


def _split_sizes(ctx, shape, split_value) -> tuple:
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
    n = shape[axis]
    if split_value is not None:
        sizes = ctx.ints(split_value, "split")
    else:
        parts = int(ctx.attr("num_outputs", 0)) if ctx.version >= 18 else 0
        parts = parts or len(ctx.outputs)
        if ctx.version >= 18 and ctx.attr("num_outputs") is not None:
            chunk = -(-n // parts)
            sizes = [min(chunk, n - i * chunk) for i in range(parts)]
        else:
            if n % parts:
                raise ctx.error(f"cannot split an axis of size {n} into {parts} equal parts")
            sizes = [n // parts] * parts
    if sum(sizes) != n or any(s < 0 for s in sizes):
        raise ctx.error(f"split sizes {sizes} do not add up to {n} (axis {axis} of shape {shape})")
    return axis, sizes


def _fold_split(ctx, a, split=None):
    axis, sizes = _split_sizes(ctx, a.shape, split)
    return tuple(np.split(a, np.cumsum(sizes)[:-1], axis=axis))


@_register("Split", (13, 18), fold=_fold_split)
def _split(ctx, a, split=None):
    x = ctx.tensor(a)
    axis, sizes = _split_sizes(ctx, x.shape, split)
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(axis, start, s))
        start += s
    return tuple(out)


def _slice_plan(ctx, shape, starts, ends, axes, steps):
    """Per axis: a Python slice (positive steps) or an index array (negative steps)."""
    starts, ends = ctx.ints(starts, "starts"), ctx.ints(ends, "ends")
    axes = list(range(len(starts))) if axes is None else ctx.ints(axes, "axes")
    steps = [1] * len(starts) if steps is None else ctx.ints(steps, "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    plan = [slice(None)] * len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = ctx.axis(axis, len(shape), "axes entry")
        n = shape[axis]
        if step == 0:
            raise ctx.error("steps must not be 0")
        start = start + n if start < 0 else start
        end = end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            plan[axis] = slice(start, max(start, end), step)
        else:
            start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
            plan[axis] = np.arange(start, end, step, dtype=np.int64)
    return plan


def _fold_slice(ctx, a, starts, ends, axes=None, steps=None):
    out = a
    for axis, p in enumerate(_slice_plan(ctx, a.shape, starts, ends, axes, steps)):
        if isinstance(p, slice):
            out = out[(slice(None),) * axis + (p,)]
        else:
            out = np.take(out, p, axis=axis)
    return out


@_register("Slice", (13,), fold=_fold_slice)
def _slice(ctx, a, starts, ends, axes=None, steps=None):
    x = ctx.tensor(a)
    plan = _slice_plan(ctx, x.shape, starts, ends, axes, steps)
    x = x[tuple(p if isinstance(p, slice) else slice(None) for p in plan)]
    for axis, p in enumerate(plan):
        if not isinstance(p, slice):  # negative step: pick the indices in order
            x = x.index_select(axis, _tensor(p)) if p.size else _empty_along(x, axis)
    return x


def _empty_along(x: Tensor, axis: int) -> Tensor:
    return x.narrow(axis, 0, 0)


def _gather_indices(ctx, idx: np.ndarray, n: int) -> np.ndarray:
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise ctx.error(f"index {int(bad.reshape(-1)[0])} is out of range for an axis of size {n}")
    return np.where(idx < 0, idx + n, idx).astype(np.int64)


def _fold_gather(ctx, a, idx):
    axis = ctx.axis(int(ctx.attr("axis", 0)), a.ndim)
    return np.take(a, _gather_indices(ctx, idx, a.shape[axis]), axis=axis)


@_register("Gather", (13,), fold=_fold_gather)
def _gather(ctx, a, idx):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", 0)), x.ndim)
    n = x.shape[axis]
    if _is_const(idx) or not idx.is_lazy:
        arr = _gather_indices(ctx, np.asarray(ctx.const(idx, "indices")), n)
        if arr.ndim == 0:
            return x[(slice(None),) * axis + (int(arr),)]
        index = _tensor(arr.reshape(-1))
        shape = arr.shape
    else:
        index = idx.to(dt.int64)
        index = lazyvic.where(index < 0, index + n, index)
        shape = index.shape
        index = index.reshape(-1)
    out = x.index_select(axis, index)
    return out.reshape(*x.shape[:axis], *shape, *x.shape[axis + 1 :])


def _expand_shape(ctx, shape, target_value):
    target = ctx.ints(target_value, "shape")
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError:
        raise ctx.error(f"cannot broadcast an input of shape {tuple(shape)} to shape {tuple(target)}") from None


@_register("Expand", (13,), fold=lambda ctx, a, s: np.broadcast_to(a, _expand_shape(ctx, a.shape, s)).copy())
def _expand(ctx, a, s):
    x = ctx.tensor(a)
    return x.expand(*_expand_shape(ctx, x.shape, s))


# ============================================================== shapes and constants
def _shape_value(ctx, v):
    shape = _shape_of(v)
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    return np.array(shape[slice(start, None if end is None else int(end))], dtype=np.int64)


_SHAPE_VERSIONS = (13, 15, 19, 21, 23, 24, 25)
_register("Shape", _SHAPE_VERSIONS, fold=_shape_value)(_shape_value)

_size_value = lambda ctx, v: np.array(math.prod(_shape_of(v)), dtype=np.int64)  # noqa: E731
_register("Size", (13, 19, 21, 23, 24, 25), fold=_size_value)(_size_value)


def _tensor_attr_array(ctx, tensor_proto) -> np.ndarray:
    from onnx import numpy_helper

    if tensor_proto.data_type not in _ELEM_DTYPES:
        raise ctx.error(f"a constant of type {_elem_name(tensor_proto.data_type)} ({_CAST_CHECK_SUPPORTED})")
    return np.asarray(numpy_helper.to_array(tensor_proto))


def _constant_check(ctx):
    for key in ("sparse_value", "value_string", "value_strings"):
        if key in ctx.attrs:
            return f"Constant with {key}"
    if "value" in ctx.attrs and ctx.attrs["value"].data_type not in _ELEM_DTYPES:
        return f"Constant of type {_elem_name(ctx.attrs['value'].data_type)} ({_CAST_CHECK_SUPPORTED})"
    return None


def _constant(ctx):
    a = ctx.attrs
    if "value" in a:
        return _tensor_attr_array(ctx, a["value"])
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64)
    raise ctx.error("Constant has no value attribute")


_register("Constant", (13, 19, 21, 23, 24, 25), fold=_constant, check=_constant_check)(_constant)


def _constant_of_shape_check(ctx):
    value = ctx.attrs.get("value")
    if value is not None and value.data_type not in _ELEM_DTYPES:
        return f"ConstantOfShape of type {_elem_name(value.data_type)} ({_CAST_CHECK_SUPPORTED})"
    return None


def _constant_of_shape(ctx, s):
    shape = ctx.ints(s, "shape")
    value = ctx.attrs.get("value")
    fill = np.zeros((1,), dtype=np.float32) if value is None else _tensor_attr_array(ctx, value)
    return np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)


_register("ConstantOfShape", (9, 20, 21, 23, 24, 25), fold=_constant_of_shape, check=_constant_of_shape_check)(
    _constant_of_shape
)


def _range(ctx, start, limit, delta):
    s, lim, d = (ctx.const(v, w).reshape(()) for v, w in ((start, "start"), (limit, "limit"), (delta, "delta")))
    if d == 0:
        raise ctx.error("delta must not be 0")
    n = max(int(math.ceil((lim.item() - s.item()) / d.item())), 0)
    return (s + np.arange(n, dtype=s.dtype) * d).astype(s.dtype)


_register("Range", (11, 27), fold=_range)(_range)


# ============================================================== reductions
def _reduce_axes(ctx, ndim, axes_value):
    """Axes to reduce (a tuple), or None for 'return the input' (noop_with_empty_axes)."""
    input_from = 13 if ctx.op == "ReduceSum" else 18
    if ctx.version >= input_from:
        axes = None if axes_value is None else ctx.ints(axes_value, "axes")
    else:
        axes = ctx.attr("axes")
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(ndim))
    return tuple(sorted({ctx.axis(int(a), ndim, "axes entry") for a in axes}))


# NumPy forms of the reductions (constant folding, and empty reductions, which lazyvic cannot run).
_NP_REDUCE = {
    "ReduceSum": lambda a, axes, keep: np.sum(a, axis=axes, keepdims=keep),
    "ReduceSumSquare": lambda a, axes, keep: np.sum(a * a, axis=axes, keepdims=keep),
    "ReduceMean": lambda a, axes, keep: np.mean(a, axis=axes, keepdims=keep),
    "ReduceMax": lambda a, axes, keep: np.max(a, axis=axes, keepdims=keep),
    "ReduceMin": lambda a, axes, keep: np.min(a, axis=axes, keepdims=keep),
    "ReduceL1": lambda a, axes, keep: np.sum(np.abs(a), axis=axes, keepdims=keep),
    "ReduceL2": lambda a, axes, keep: np.sqrt(np.sum(a.astype(np.float64) ** 2, axis=axes, keepdims=keep)),
    "ReduceLogSum": lambda a, axes, keep: np.log(np.sum(a, axis=axes, keepdims=keep)),
    "ReduceLogSumExp": lambda a, axes, keep: np.log(np.sum(np.exp(a.astype(np.float64)), axis=axes, keepdims=keep)),
}


def _reduce_fold(ctx, a, axes_value=None):
    # noop_with_empty_axes reduces over no axis: the elementwise part still applies (x*x for
    # ReduceSumSquare, |x| for ReduceL1, ...), as in the onnx reference implementation.
    axes = _reduce_axes(ctx, a.ndim, axes_value) or ()
    keep = bool(ctx.attr("keepdims", 1))
    if ctx.op in ("ReduceMax", "ReduceMin") and any(a.shape[i] == 0 for i in axes):
        # The spec's identity of an empty max (min): -inf (+inf); the extreme integer; False (True) for bool.
        if a.dtype.kind == "f":
            fill = -np.inf if ctx.op == "ReduceMax" else np.inf
        elif a.dtype.kind == "b":
            fill = ctx.op == "ReduceMin"
        else:
            fill = np.iinfo(a.dtype).min if ctx.op == "ReduceMax" else np.iinfo(a.dtype).max
        shape = tuple(1 if i in axes else s for i, s in enumerate(a.shape) if keep or i not in axes)
        return np.full(shape, fill, dtype=a.dtype)
    with np.errstate(all="ignore"):
        return np.asarray(_NP_REDUCE[ctx.op](a, axes, keep)).astype(a.dtype)


@_register("ReduceSum", (13,), fold=_reduce_fold)
@_register("ReduceMean", (13, 18), fold=_reduce_fold)
@_register("ReduceMax", (13, 18, 20), fold=_reduce_fold)
def _reduce(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _reduce_axes(ctx, x.ndim, axes_value)
    if axes is None:
        return x
    keep = bool(ctx.attr("keepdims", 1))
    if any(x.shape[a] == 0 for a in axes):  # lazyvic cannot reduce an empty axis: the result is the identity
        empty = np.zeros(x.shape, dtype=x.dtype.np)
        return _reduce_fold(ctx, empty, axes_value)
    if ctx.op == "ReduceSum":
        return x.sum(axes, keepdim=keep, dtype=x.dtype)
    if ctx.op == "ReduceMean":
        if x.dtype.category != 2:
            return x.to(dt.float64).mean(axes, keepdim=keep).to(x.dtype)
        return x.mean(axes, keepdim=keep)
    if x.dtype is dt.bool_:
        return x.to(dt.int32).amax(axes, keepdim=keep).to(dt.bool_)
    return x.amax(axes, keepdim=keep)


@_register("ArgMax", (13,))
def _argmax(ctx, a):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", 0)), x.ndim)
    keep = bool(ctx.attr("keepdims", 1))
    if x.dtype is dt.bool_:
        x = x.to(dt.int32)
    if ctx.attr("select_last_index", 0):
        n = x.shape[axis]
        flipped = x.index_select(axis, _tensor(np.arange(n - 1, -1, -1, dtype=np.int64)))
        return (n - 1) - flipped.argmax(axis, keepdim=keep)
    return x.argmax(axis, keepdim=keep)


# ============================================================== more ops (beyond the issue's list)
def _fold_variadic(ctx, *arrays):
    with np.errstate(all="ignore"):
        if ctx.op in ("Min", "Max"):
            fn = np.minimum if ctx.op == "Min" else np.maximum
            out = arrays[0]
            for a in arrays[1:]:
                out = fn(out, a)
        else:
            out = sum(arrays[1:], arrays[0])
            if ctx.op == "Mean":
                out = out / len(arrays)
    return np.asarray(out).astype(arrays[0].dtype)


@_register("Min Max", (12, 13), fold=_fold_variadic)
@_register("Sum Mean", (13,), fold=_fold_variadic)
def _variadic(ctx, *values):
    tensors = [ctx.tensor(v) for v in values if v is not None]
    out = tensors[0]
    for t in tensors[1:]:
        if ctx.op == "Min":
            out = out.minimum(t)
        elif ctx.op == "Max":
            out = out.maximum(t)
        else:
            out = out + t
    if ctx.op == "Mean" and len(tensors) > 1:
        out = out * (1.0 / len(tensors))
    elif len(tensors) == 1:
        out = out + 0 if out.dtype is not dt.bool_ else out
    return out


def _fold_mod(ctx, a, b):
    with np.errstate(all="ignore"):
        return np.asarray(np.fmod(a, b) if ctx.attr("fmod", 0) else np.mod(a, b)).astype(a.dtype)


@_register("Mod", (13,), fold=_fold_mod)
def _mod(ctx, a, b):
    x, y = ctx.tensor(a), ctx.tensor(b)
    if x.dtype.is_floating_point:
        if not ctx.attr("fmod", 0):
            raise ctx.error("fmod must be 1 for floating-point inputs")
        q = (x / y).to(dt.int64).to(x.dtype)  # truncated quotient (|x / y| < 2**63)
        return x - q * y
    r = x - _int_div(x, y, x.dtype) * y  # C remainder: the sign of x
    if ctx.attr("fmod", 0):
        return r
    return lazyvic.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)  # Python's: the sign of y


def _fold_logic(ctx, a, b):
    fn = {
        "LessOrEqual": np.less_equal,
        "GreaterOrEqual": np.greater_equal,
        "And": np.logical_and,
        "Or": np.logical_or,
        "Xor": np.logical_xor,
    }[ctx.op]
    return np.asarray(fn(a, b))


@_register("LessOrEqual GreaterOrEqual", (12, 16), fold=_fold_logic)
@_register("And Or Xor", (7,), fold=_fold_logic)
def _logic(ctx, a, b):
    x, y = ctx.tensor(a), ctx.tensor(b)
    op = ctx.op
    if op == "LessOrEqual":
        return x <= y
    if op == "GreaterOrEqual":
        return x >= y
    if op == "And":
        return x & y
    if op == "Or":
        return x | y
    return x != y  # Xor of bools


def _softplus(x: Tensor) -> Tensor:
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|)).
    return x.relu() + ((-x.abs()).exp() + 1.0).log()


@_register("Sign", (13,))
@_register("Softplus Softsign", (1, 22))
@_register("Elu Selu HardSigmoid", (6, 22))
@_register("Celu", (12, 28))
@_register("HardSwish", (14, 22))
@_register("ThresholdedRelu", (10, 22))
@_register("Mish", (18, 22))
def _activation(ctx, a):
    x = ctx.tensor(a)
    op = ctx.op
    if op == "Sign":
        return x.sign()
    if op == "Softplus":
        return _softplus(x)
    if op == "Softsign":
        return x / (x.abs() + 1.0)
    if op in ("Elu", "Selu"):
        alpha = float(ctx.attr("alpha", 1.0 if op == "Elu" else 1.67326319217681884765625))
        y = lazyvic.where(x > 0, x, (x.exp() - 1.0) * alpha)
        return y * float(ctx.attr("gamma", 1.05070102214813232421875)) if op == "Selu" else y
    if op == "Celu":
        alpha = float(ctx.attr("alpha", 1.0))
        return (
            x.relu() + ((x * (1.0 / alpha)).exp() - 1.0).minimum(0.0) * alpha
            if alpha != 1.0
            else x.relu() + (x.exp() - 1.0).minimum(0.0)
        )
    if op == "HardSigmoid":
        return (x * float(ctx.attr("alpha", 0.2)) + float(ctx.attr("beta", 0.5))).clamp(0.0, 1.0)
    if op == "HardSwish":
        return x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)
    if op == "ThresholdedRelu":
        return lazyvic.where(x > float(ctx.attr("alpha", 1.0)), x, 0.0)
    return x * _softplus(x).tanh()  # Mish


@_register("PRelu", (9, 16))
def _prelu(ctx, a, slope):
    x, s = ctx.tensor(a), ctx.tensor(slope)
    return lazyvic.where(x < 0, x * s, x)


def _fold_is(ctx, a):
    if a.dtype.kind != "f":
        return np.zeros(a.shape, dtype=bool)
    if ctx.op == "IsNaN":
        return np.isnan(a)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    return (np.isposinf(a) & bool(pos)) | (np.isneginf(a) & bool(neg))


@_register("IsNaN", (13, 20), fold=_fold_is)
@_register("IsInf", (10, 20), fold=_fold_is)
def _is(ctx, a):
    x = ctx.tensor(a)
    if not x.dtype.is_floating_point:
        return lazyvic.full(x.shape, False, dtype=dt.bool_)
    if ctx.op == "IsNaN":
        return x != x
    out = None
    if ctx.attr("detect_positive", 1):
        out = x == math.inf
    if ctx.attr("detect_negative", 1):
        neg = x == -math.inf
        out = neg if out is None else out | neg
    return out if out is not None else lazyvic.full(x.shape, False, dtype=dt.bool_)


@_register("ReduceMin", (13, 18, 20), fold=_reduce_fold)
@_register("ReduceSumSquare ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp", (13, 18), fold=_reduce_fold)
def _reduce_more(ctx, a, axes_value=None):
    x = ctx.tensor(a)
    axes = _reduce_axes(ctx, x.ndim, axes_value) or ()  # () for noop_with_empty_axes: elementwise only
    keep = bool(ctx.attr("keepdims", 1))
    if any(x.shape[i] == 0 for i in axes):
        return _reduce_fold(ctx, np.zeros(x.shape, dtype=x.dtype.np), axes_value)
    op = ctx.op
    if op == "ReduceMin":
        if not axes:
            return x
        if x.dtype is dt.bool_:
            return x.to(dt.int32).amin(axes, keepdim=keep).to(dt.bool_)
        return x.amin(axes, keepdim=keep)
    if op == "ReduceLogSumExp":
        if not axes:
            return x
        m = x.amax(axes, keepdim=True).detach()  # log(sum(exp(x - m))) + m: no overflow
        out = (x - m).exp().sum(axes, keepdim=True).log() + m
        return out if keep else out.squeeze(axes)
    xf = x if x.dtype.is_floating_point or op in ("ReduceSumSquare", "ReduceL1") else x.to(dt.float64)
    term = {"ReduceSumSquare": xf * xf, "ReduceL1": xf.abs(), "ReduceL2": xf * xf, "ReduceLogSum": xf}[op]
    out = term.sum(axes, keepdim=keep, dtype=xf.dtype) if axes else term
    if op == "ReduceL2":
        out = out.sqrt()
    elif op == "ReduceLogSum":
        out = out.log()
    return out.to(x.dtype)


@_register("ArgMin", (13,))
def _argmin(ctx, a):
    x = ctx.tensor(a)
    x = x.to(dt.int32) if x.dtype is dt.bool_ else x
    # argmin(x) is argmax(-x); for integers the lowest value has no negation, so compare as float64.
    neg = -(x if x.dtype.is_floating_point else x.to(dt.float64))
    return _argmax(ctx, neg)


def _pad_check(ctx):
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect") and not (mode == "wrap" and ctx.version >= 19):
        return f"Pad with mode={mode!r}"
    return None


def _pad_indices(mode: str, n: int, before: int, after: int) -> np.ndarray:
    """Source index of every output position along one axis for edge / reflect / wrap padding."""
    idx = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(idx, 0, n - 1)
    if mode == "wrap":
        return np.mod(idx, n)
    period = 2 * (n - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    idx = np.mod(idx, period) if period else np.zeros_like(idx)
    return np.where(idx >= n, period - idx, idx)


def _pad_plan(ctx, shape, pads_value, axes_value):
    pads = ctx.ints(pads_value, "pads")
    axes = (
        list(range(len(shape)))
        if axes_value is None
        else [ctx.axis(a, len(shape), "axes entry") for a in ctx.ints(axes_value, "axes")]
    )
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must have 2 entries per padded axis ({len(axes)} axes)")
    plan = [(0, 0)] * len(shape)
    for i, a in enumerate(axes):
        plan[a] = (pads[i], pads[i + len(axes)])
    return plan


def _pad_value(ctx, value, dtype) -> object:
    if value is None:
        return np.zeros((), dtype=dtype).item()
    return ctx.const(value, "constant_value").reshape(-1)[0].item() if ctx.const(value, "constant_value").size else 0


def _fold_pad(ctx, a, pads, value=None, axes=None):
    plan = _pad_plan(ctx, a.shape, pads, axes)
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(plan, a.shape))
    widths = [(max(b, 0), max(e, 0)) for b, e in plan]
    mode = ctx.attr("mode", "constant")
    if mode != "constant":
        return np.pad(a[crop], widths, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode])
    return np.pad(a[crop], widths, constant_values=_pad_value(ctx, value, a.dtype))


@_register("Pad", (13, 18, 19, 21, 23, 24, 25), fold=_fold_pad, check=_pad_check)
def _pad(ctx, a, pads, value=None, axes=None):
    x = ctx.tensor(a)
    plan = _pad_plan(ctx, x.shape, pads, axes)
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(plan, x.shape))]  # negative pads crop
    plan = [(max(b, 0), max(e, 0)) for b, e in plan]
    mode = ctx.attr("mode", "constant")
    if mode == "constant":
        return _pad_spatial(x, plan, _pad_value(ctx, value, x.dtype.np))
    for axis, (b, e) in enumerate(plan):
        if b or e:
            if x.shape[axis] == 0 or (mode == "reflect" and max(b, e) >= x.shape[axis]):
                raise ctx.error(f"cannot {mode}-pad axis {axis} of size {x.shape[axis]} by {(b, e)}")
            x = x.index_select(axis, _tensor(_pad_indices(mode, x.shape[axis], b, e)))
    return x


def _tile_repeats(ctx, shape, repeats_value):
    repeats = ctx.ints(repeats_value, "repeats")
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise ctx.error(f"repeats {repeats} must be {len(shape)} non-negative ints (input shape {tuple(shape)})")
    return repeats


@_register("Tile", (13,), fold=lambda ctx, a, r: np.tile(a, _tile_repeats(ctx, a.shape, r)))
def _tile(ctx, a, r):
    x = ctx.tensor(a)
    repeats = _tile_repeats(ctx, x.shape, r)
    # (a, b) tiled (r1, r2): view as (1, a, 1, b), expand to (r1, a, r2, b), flatten pairs.
    inter = [v for s in x.shape for v in (1, s)]
    big = [v for rep, s in zip(repeats, x.shape) for v in (rep, s)]
    return x.reshape(*inter).expand(*big).reshape(*[rep * s for rep, s in zip(repeats, x.shape)])


@_register("GatherElements", (13,))
def _gather_elements(ctx, a, idx):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", 0)), x.ndim)
    n = x.shape[axis]
    if _is_const(idx) or not idx.is_lazy:
        index = _tensor(_gather_indices(ctx, np.asarray(ctx.const(idx, "indices")), n))
    else:
        index = idx.to(dt.int64)
        index = lazyvic.where(index < 0, index + n, index)
    return x.gather(axis, index)


@_register("Trilu", (14,))
def _trilu(ctx, a, k=None):
    x = ctx.tensor(a)
    diagonal = 0 if k is None else ctx.ints(k, "k")[0]
    if x.shape[-2] == 0 or x.shape[-1] == 0:
        return x
    return lazyvic.triu(x, diagonal) if ctx.attr("upper", 1) else lazyvic.tril(x, diagonal)


@_register("GlobalMaxPool", (1, 22))
def _global_max_pool(ctx, a):
    x = ctx.tensor(a)
    return x.amax(tuple(range(2, x.ndim)), keepdim=True)


@_register("InstanceNormalization", (6, 22))
def _instance_norm(ctx, a, scale, bias):
    x = ctx.tensor(a)
    axes = tuple(range(2, x.ndim))
    view = (x.shape[1],) + (1,) * (x.ndim - 2)
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    y = xc * ((xc * xc).mean(axes, keepdim=True) + float(ctx.attr("epsilon", 1e-5))).rsqrt()
    return y * ctx.tensor(scale).reshape(*view) + ctx.tensor(bias).reshape(*view)


@_register("DepthToSpace", (13, 28))
def _depth_to_space(ctx, a):
    x = ctx.tensor(a)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if c % (b * b):
        raise ctx.error(f"channels {c} are not a multiple of blocksize**2 = {b * b}")
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@_register("SpaceToDepth", (13, 28))
def _space_to_depth(ctx, a):
    x = ctx.tensor(a)
    b = int(ctx.attr("blocksize"))
    n, c, h, w = x.shape
    if h % b or w % b:
        raise ctx.error(f"height {h} and width {w} must be multiples of blocksize {b}")
    y = x.reshape(n, c, h // b, b, w // b, b)
    # Output channels ordered (block row, block column, channel) for DCR, the only order before version 28.
    y = y.permute(0, 3, 5, 1, 2, 4) if ctx.attr("mode", "DCR") == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _cumsum_matrix(n: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """T with (x @ T)[i] = the (exclusive / reversed) running sum of x up to i."""
    j, i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    if reverse:
        return (j > i) if exclusive else (j >= i)
    return (j < i) if exclusive else (j <= i)


@_register("CumSum", (11, 14))
def _cumsum(ctx, a, axis_value):
    # A running sum is a matmul with a triangular 0/1 matrix (lazyvic has no scan primitive).
    x = ctx.tensor(a)
    axis = ctx.axis(ctx.ints(axis_value, "axis")[0], x.ndim)
    n = x.shape[axis]
    work = x if x.dtype.is_floating_point else x.to(dt.float64)  # exact integer sums below 2**53
    moved = work.transpose(axis, -1) if axis != x.ndim - 1 else work
    tri = _cumsum_matrix(n, bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))).astype(work.dtype.np)
    out = moved @ _tensor(tri)
    out = out.transpose(axis, -1) if axis != x.ndim - 1 else out
    return out.to(x.dtype)


@_register("OneHot", (11,))
def _one_hot(ctx, indices, depth, values):
    depth = int(ctx.const(depth, "depth").reshape(-1)[0])
    vals = ctx.const(values, "values").reshape(-1)
    if vals.size != 2:
        raise ctx.error(f"values must hold [off_value, on_value], got {vals.size} values")
    idx = ctx.tensor(indices)
    idx = idx.to(dt.int64) if idx.dtype is not dt.int64 else idx  # float indices truncate, as the spec casts
    idx = lazyvic.where(idx < 0, idx + depth, idx)
    axis = ctx.axis(int(ctx.attr("axis", -1)), idx.ndim + 1)
    classes = _tensor(np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (idx.ndim - axis)))
    hot = idx.unsqueeze(axis) == classes
    off, on = (_tensor(v) for v in (vals[0], vals[1]))
    return lazyvic.where(hot, on, off)


@_register("GroupNormalization", (18, 21))
def _group_norm(ctx, a, scale, bias):
    x = ctx.tensor(a)
    groups = int(ctx.attr("num_groups"))
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise ctx.error(f"num_groups {groups} must divide the {c} channels of input {x.shape}")
    g = x.reshape(n, groups, -1)
    mean = g.mean(2, keepdim=True)
    gc = g - mean
    y = (gc * ((gc * gc).mean(2, keepdim=True) + float(ctx.attr("epsilon", 1e-5))).rsqrt()).reshape(*x.shape)
    w, b = ctx.tensor(scale), ctx.tensor(bias)
    if ctx.version < 21:  # GroupNormalization-18: scale and bias per group, not per channel
        per_channel = _tensor(np.repeat(np.arange(groups, dtype=np.int64), c // groups))
        w, b = w.index_select(0, per_channel), b.index_select(0, per_channel)
    view = (c,) + (1,) * (x.ndim - 2)
    return y * w.reshape(*view) + b.reshape(*view)


@_register("LpNormalization", (1, 22))
def _lp_norm(ctx, a):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = x.abs().sum(axis, keepdim=True)
    elif p == 2:
        norm = (x * x).sum(axis, keepdim=True).sqrt()
    else:
        raise ctx.error(f"p must be 1 or 2, got {p}")
    return lazyvic.where(norm == 0, 0.0, x / norm)


@_register("MeanVarianceNormalization", (13,))
def _mvn(ctx, a):
    x = ctx.tensor(a)
    axes = tuple(sorted({ctx.axis(int(v), x.ndim, "axes entry") for v in ctx.attr("axes", [0, 2, 3])}))
    xc = x - x.mean(axes, keepdim=True)
    return xc / (xc * xc).mean(axes, keepdim=True).sqrt()


# Ops lazyvic has no primitive for: NumPy on constants only (shape arithmetic, position tables).
_FOLD_ONLY = {"Floor": np.floor, "Ceil": np.ceil, "Round": np.round, "Sin": np.sin, "Cos": np.cos}


def _fold_only(ctx, a):
    with np.errstate(all="ignore"):
        return np.asarray(_FOLD_ONLY[ctx.op](a)).astype(a.dtype)


def _no_primitive(ctx, a):
    raise UnsupportedOpError(f"{ctx.label()}: lazyvic has no {ctx.op} primitive; it folds {ctx.op} of constants only")


_register("Floor Ceil", (13,), fold=_fold_only, fold_only=True)(_no_primitive)
_register("Round", (11, 22), fold=_fold_only, fold_only=True)(_no_primitive)
_register("Sin Cos", (7, 22), fold=_fold_only, fold_only=True)(_no_primitive)

# Ops whose result is a constant whatever their inputs (shapes are static).
_ALWAYS_CONSTANT = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike"})


@_register("RMSNormalization", (23,))
def _rms_norm(ctx, a, scale):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    axes = tuple(range(axis, x.ndim))
    y = x * ((x * x).mean(axes, keepdim=True) + float(ctx.attr("epsilon", 1e-5))).rsqrt()
    return y * ctx.tensor(scale)


@_register("Swish", (24,))
def _swish(ctx, a):
    x = ctx.tensor(a)
    alpha = float(ctx.attr("alpha", 1.0))
    return x * (x * alpha if alpha != 1.0 else x).sigmoid()


@_register("Shrink", (9,))
def _shrink(ctx, a):
    x = ctx.tensor(a)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    out = lazyvic.where(x < -lambd, x + bias, lazyvic.where(x > lambd, x - bias, 0.0))
    return out.to(x.dtype)


def _eye_like(ctx, a):
    shape = _shape_of(a)
    if len(shape) != 2:
        raise ctx.error(f"input must be 2-D, got shape {shape}")
    to = ctx.attr("dtype")
    dtype = _ELEM_DTYPES[to].np if to in _ELEM_DTYPES else _dtype_np(a)
    return np.eye(shape[0], shape[1], k=int(ctx.attr("k", 0)), dtype=dtype)


def _eye_like_check(ctx):
    to = ctx.attr("dtype")
    return None if to is None or to in _ELEM_DTYPES else f"EyeLike of type {_elem_name(to)}"


_register("EyeLike", (9, 22), fold=_eye_like, check=_eye_like_check)(_eye_like)


def _nll(ctx, logp: Tensor, labels, weights) -> tuple:
    """Per-element losses -logp[n, label, ...] * weight[label] (0 where label == ignore_index) and
    the per-element weights (the divisor of the mean)."""
    target = ctx.tensor(labels)
    target = target if target.dtype is dt.int64 else target.to(dt.int64)
    if logp.ndim != target.ndim + 1 or logp.shape[:1] + logp.shape[2:] != target.shape:
        raise ctx.error(f"input shape {logp.shape} does not fit labels shape {target.shape}")
    ignore = ctx.attr("ignore_index")
    keep = None if ignore is None else target != int(ignore)
    safe = target if keep is None else lazyvic.where(keep, target, 0)  # the ignored label may be out of range
    picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weights is not None:
        w = ctx.tensor(weights).index_select(0, safe.reshape(-1)).reshape(*target.shape)
    else:
        w = lazyvic.ones(*target.shape, dtype=logp.dtype)
    if keep is not None:
        w = lazyvic.where(keep, w, 0.0)
    return -picked * w, w


def _reduce_loss(ctx, losses: Tensor, w: Tensor) -> Tensor:
    reduction = ctx.attr("reduction", "mean")
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / w.sum()


def _loss_check(ctx):
    reduction = ctx.attr("reduction", "mean")
    return None if reduction in ("none", "sum", "mean") else f"{ctx.op} with reduction={reduction!r}"


@_register("NegativeLogLikelihoodLoss", (13, 22), check=_loss_check)
def _nll_loss(ctx, a, labels, weights=None):
    losses, w = _nll(ctx, ctx.tensor(a), labels, weights)
    return _reduce_loss(ctx, losses, w)


@_register("SoftmaxCrossEntropyLoss", (13,), check=_loss_check)
def _softmax_cross_entropy(ctx, a, labels, weights=None):
    logp = F.log_softmax(ctx.tensor(a), 1)
    losses, w = _nll(ctx, logp, labels, weights)
    loss = _reduce_loss(ctx, losses, w)
    return (loss, logp) if ctx.wants_output(1) else loss


def _attention_check(ctx):
    precision = ctx.attr("softmax_precision")
    if precision is not None and precision not in (1, 11):
        return f"Attention with softmax_precision={_elem_name(precision)}"
    return None


def _split_heads(ctx, t: Tensor, heads, what: str) -> Tensor:
    """(B, S, heads * D) -> (B, heads, S, D) for the 3-D layout."""
    if heads is None:
        raise ctx.error(f"3-D {what} needs the q_num_heads and kv_num_heads attributes")
    b, seq, hidden = t.shape
    if hidden % int(heads):
        raise ctx.error(f"{what} hidden size {hidden} is not a multiple of {heads} heads")
    return t.reshape(b, seq, int(heads), hidden // int(heads)).transpose(1, 2)


@_register("Attention", (23, 24), check=_attention_check)
def _attention(ctx, q, k, v, mask=None, past_key=None, past_value=None, nonpad=None):
    """Scaled dot-product attention as the spec draws it: Q and K scaled by sqrt(scale), QK^T,
    softcap, + the bias of attn_mask / is_causal (bottom-right) / nonpad_kv_seqlen, softmax (a fully
    masked row gives zeros), @ V; K/V heads repeated for grouped-query attention."""
    query, key, value = ctx.tensor(q), ctx.tensor(k), ctx.tensor(v)
    three_d = query.ndim == 3
    if three_d:
        query = _split_heads(ctx, query, ctx.attr("q_num_heads"), "Q")
        key = _split_heads(ctx, key, ctx.attr("kv_num_heads"), "K")
        value = _split_heads(ctx, value, ctx.attr("kv_num_heads"), "V")
    past = 0
    if past_key is not None and past_value is not None:
        past = ctx.tensor(past_key).shape[2]
        key = lazyvic.cat([ctx.tensor(past_key), key], 2)
        value = lazyvic.cat([ctx.tensor(past_value), value], 2)
    present_key, present_value = key, value
    b, hq, sq, d = query.shape
    hk, total = key.shape[1], key.shape[2]
    if hq != hk:
        if hq % hk:
            raise ctx.error(f"{hq} query heads are not a multiple of {hk} key/value heads")
        rep = hq // hk
        key = key.unsqueeze(2).expand(b, hk, rep, total, d).reshape(b, hq, total, d)
        value = value.unsqueeze(2).expand(b, hk, rep, total, value.shape[-1]).reshape(b, hq, total, value.shape[-1])
    scale = ctx.attr("scale")
    root = math.sqrt(float(scale) if scale is not None else 1.0 / math.sqrt(d))
    scores = (query * root) @ (key * root).transpose(-2, -1)  # (B, Hq, Sq, total)
    qk = [scores]
    softcap = float(ctx.attr("softcap", 0.0))
    if softcap > 0:
        scores = (scores * (1.0 / softcap)).tanh() * softcap
    qk.append(scores)
    # Positions a query may not attend: causal (offset by the cached keys) and past nonpad_kv_seqlen.
    allowed = np.ones((1, 1, sq, total), dtype=bool)
    valid = None if nonpad is None else ctx.ints(nonpad, "nonpad_kv_seqlen")
    j = np.arange(total)[None, None, None, :]
    if ctx.attr("is_causal", 0):
        offset = np.array([past] if valid is None else [n - sq for n in valid])[:, None, None, None]
        allowed = allowed & (j <= np.arange(sq)[None, None, :, None] + offset)
    if valid is not None:
        allowed = allowed & (j < np.array(valid)[:, None, None, None])
    if not allowed.all():
        scores = scores + _tensor(np.where(allowed, 0.0, -np.inf).astype(scores.dtype.np))
    if mask is not None:
        m = ctx.tensor(mask)
        if m.shape[-1] < total:  # a mask may stop at the longest nonpad_kv_seqlen
            fill = m.dtype is dt.bool_
            m = _pad_spatial(m, [(0, total - m.shape[-1])], fill if fill else 0.0)
        scores = scores + (lazyvic.where(m, 0.0, -math.inf).to(scores.dtype) if m.dtype is dt.bool_ else m)
    qk.append(scores)
    work = scores.to(dt.float64) if ctx.attr("softmax_precision") == 11 else scores
    dead = work.amax(-1, keepdim=True) == -math.inf  # every key masked: a zero row, not NaN
    probs = lazyvic.where(dead, 0.0, F.softmax(lazyvic.where(dead, 0.0, work), -1)).to(query.dtype)
    qk.append(probs)
    y = probs @ value
    if three_d:
        y = y.transpose(1, 2).reshape(b, sq, hq * value.shape[-1])
    return y, present_key, present_value, qk[int(ctx.attr("qk_matmul_output_mode", 0))]


@_register("SwiGLU", (28,))
def _swiglu(ctx, a, b):
    gate, value = ctx.tensor(a), ctx.tensor(b)
    if gate.shape != value.shape:
        raise ctx.error(f"A {gate.shape} and B {value.shape} must have the same shape")
    alpha = float(ctx.attr("alpha", 1.0))
    return gate * (gate * alpha if alpha != 1.0 else gate).sigmoid() * value


@_register("RotaryEmbedding", (23,))
def _rotary_embedding(ctx, a, cos_cache, sin_cache, position_ids=None):
    """RoPE as the spec's reference writes it: rotate the first rotary_embedding_dim features of every
    head by the cached (cos, sin) of the token's position, in halves or interleaved pairs."""
    x = ctx.tensor(a)
    cos, sin = ctx.tensor(cos_cache), ctx.tensor(sin_cache)
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        work = x.transpose(1, 2)
    else:
        heads = ctx.attr("num_heads")
        if not heads:
            raise ctx.error("a 3-D input needs the num_heads attribute")
        work = x.reshape(x.shape[0], x.shape[1], int(heads), x.shape[2] // int(heads))
    b, seq, _, d = work.shape
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or d
    if position_ids is not None:
        ids = ctx.tensor(position_ids).to(dt.int64)
        cos = cos.index_select(0, ids.reshape(-1)).reshape(*ids.shape, cos.shape[-1])
        sin = sin.index_select(0, ids.reshape(-1)).reshape(*ids.shape, sin.shape[-1])
    if cos.shape[-1] != rot // 2 or sin.shape[-1] != rot // 2:
        raise ctx.error(f"cos/sin caches {cos.shape} / {sin.shape} must end in rotary_embedding_dim/2 = {rot // 2}")
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # (B, S, 1, rot/2)
    head = work[:, :, :, :rot]
    if ctx.attr("interleaved", 0):
        x1, x2 = head[:, :, :, 0::2], head[:, :, :, 1::2]
    else:
        x1, x2 = head[:, :, :, : rot // 2], head[:, :, :, rot // 2 :]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if ctx.attr("interleaved", 0):
        rotated = lazyvic.stack([real, imag], -1).reshape(*head.shape)
    else:
        rotated = lazyvic.cat([real, imag], -1)
    out = lazyvic.cat([rotated, work[:, :, :, rot:]], -1) if rot < d else rotated
    return out.transpose(1, 2) if x.ndim == 4 else out.reshape(*x.shape)


@_register("GatherND", (13,))
def _gather_nd(ctx, a, indices):
    x = ctx.tensor(a)
    index = ctx.const(indices, "indices").astype(np.int64)
    batch = int(ctx.attr("batch_dims", 0))
    k = index.shape[-1]
    lead, head, rest = x.shape[:batch], x.shape[batch : batch + k], x.shape[batch + k :]
    if index.shape[:batch] != lead or k > len(x.shape) - batch:
        raise ctx.error(f"indices shape {index.shape} does not fit data shape {x.shape} (batch_dims={batch})")
    tuples = index.reshape(math.prod(lead), -1, k)
    tuples = np.where(tuples < 0, tuples + np.array(head), tuples)
    if ((tuples < 0) | (tuples >= np.array(head))).any():
        raise ctx.error(f"an index tuple is out of range for data shape {x.shape}")
    # Each tuple picks a slice of the flattened (batch, *head) axis of data.
    flat = (
        np.arange(math.prod(lead))[:, None] * math.prod(head)
        + (np.ravel_multi_index(tuple(np.moveaxis(tuples, -1, 0)), head) if k else 0)
    ).reshape(-1)
    picked = x.reshape(math.prod(lead) * math.prod(head), *rest).index_select(0, _tensor(flat))
    return picked.reshape(*index.shape[:-1], *rest)


@_register("CenterCropPad", (18,))
def _center_crop_pad(ctx, a, shape):
    x = ctx.tensor(a)
    target = ctx.ints(shape, "shape")
    axes = (
        list(range(x.ndim))
        if ctx.attr("axes") is None
        else [ctx.axis(int(v), x.ndim, "axes entry") for v in ctx.attr("axes")]
    )
    if len(target) != len(axes):
        raise ctx.error(f"shape {target} has {len(target)} entries for {len(axes)} axes")
    for axis, size in zip(axes, target):
        n = x.shape[axis]
        if size < n:  # crop: the window starts at floor((n - size) / 2)
            x = x.narrow(axis, (n - size) // 2, size)
        elif size > n:  # pad: the odd pixel goes to the end
            before = (size - n) // 2
            pads = [(0, 0)] * x.ndim
            pads[axis] = (before, size - n - before)
            x = _pad_spatial(x, pads, 0)
    return x


@_register("ReverseSequence", (10, 28))
def _reverse_sequence(ctx, a, lengths):
    x = ctx.tensor(a)
    t_axis, b_axis = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    lens = ctx.ints(lengths, "sequence_lens")
    t, b = x.shape[t_axis], x.shape[b_axis]
    # index[t, b] (laid out along the time and batch axes): reversed within each batch's length.
    grid = np.tile(np.arange(t)[:, None], (1, b))
    for j, n in enumerate(lens):
        grid[:n, j] = np.arange(n)[::-1]
    shape = [1] * x.ndim
    shape[t_axis], shape[b_axis] = t, b
    index = grid if t_axis < b_axis else grid.T
    index = np.broadcast_to(index.reshape(shape), x.shape)
    return x.gather(t_axis, _tensor(np.ascontiguousarray(index)))


# ------------------------------------------------------------------ recurrent layers (unrolled)
# name -> (number of alpha/beta parameters it takes from activation_alpha/beta, function, defaults)
_RNN_ACTIVATIONS = {
    "sigmoid": (0, lambda x, a, b: x.sigmoid(), ()),
    "tanh": (0, lambda x, a, b: x.tanh(), ()),
    "relu": (0, lambda x, a, b: x.relu(), ()),
    "softsign": (0, lambda x, a, b: x / (x.abs() + 1.0), ()),
    "softplus": (0, lambda x, a, b: _softplus(x), ()),
    "leakyrelu": (1, lambda x, a, b: lazyvic.where(x >= 0, x, x * a), (0.01,)),
    "thresholdedrelu": (1, lambda x, a, b: lazyvic.where(x >= a, x, 0.0), (1.0,)),
    "elu": (1, lambda x, a, b: lazyvic.where(x >= 0, x, (x.exp() - 1.0) * a), (1.0,)),
    "affine": (2, lambda x, a, b: x * a + b, (1.0, 0.0)),
    "scaledtanh": (2, lambda x, a, b: (x * b).tanh() * a, (1.0, 1.0)),
    "hardsigmoid": (2, lambda x, a, b: (x * a + b).clamp(0.0, 1.0), (0.2, 0.5)),
}
_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _rnn_check(ctx):
    if ctx.attr("clip") is not None:
        return f"{ctx.op} with clip"
    if ctx.op == "LSTM" and ctx.attr("input_forget", 0):
        return "LSTM with input_forget=1"
    unknown = [a for a in ctx.attr("activations") or [] if a.lower() not in _RNN_ACTIVATIONS]
    return f"{ctx.op} with activation {unknown[0]!r}" if unknown else None


def _rnn_activations(ctx, directions: int) -> list:
    """Per direction, the activation callables (f; f, g; or f, g, h) with their alpha/beta bound."""
    per = len(_RNN_DEFAULT_ACTIVATIONS[ctx.op])
    names = ctx.attr("activations") or _RNN_DEFAULT_ACTIVATIONS[ctx.op] * directions
    if len(names) != per * directions:
        raise ctx.error(f"activations {names} must name {per} functions per direction ({directions})")
    alphas, betas = list(ctx.attr("activation_alpha", [])), list(ctx.attr("activation_beta", []))
    bound = []
    for name in names:
        count, fn, defaults = _RNN_ACTIVATIONS[name.lower()]
        a = alphas.pop(0) if count >= 1 and alphas else (defaults[0] if count >= 1 else None)
        b = betas.pop(0) if count >= 2 and betas else (defaults[1] if count >= 2 else None)
        bound.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [bound[d * per : (d + 1) * per] for d in range(directions)]


@_register("RNN GRU LSTM", (7, 14, 22), check=_rnn_check)
def _recurrent(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, peepholes=None):
    """RNN / GRU / LSTM unrolled over the (static) sequence length with the spec's equations; the
    input projection of every step is one matmul up front. Steps past a batch entry's sequence_lens
    leave its state unchanged and output zeros."""
    xs, weight, recur = ctx.tensor(x), ctx.tensor(w), ctx.tensor(r)
    layout = int(ctx.attr("layout", 0)) if ctx.version >= 14 else 0
    if layout:
        xs = xs.transpose(0, 1)  # (batch, seq, input) -> (seq, batch, input)
    steps, batch, _ = xs.shape
    gates = _RNN_GATES[ctx.op]
    hidden = int(ctx.attr("hidden_size", recur.shape[-1]))
    direction = ctx.attr("direction", "forward")
    directions = 2 if direction == "bidirectional" else 1
    if weight.shape[:2] != (directions, gates * hidden) or recur.shape[1:] != (gates * hidden, hidden):
        raise ctx.error(f"W {weight.shape} and R {recur.shape} do not fit hidden_size={hidden}, direction={direction}")
    bias = ctx.tensor(b) if b is not None else lazyvic.zeros(directions, 2 * gates * hidden, dtype=xs.dtype)

    def state(value):
        if value is None:
            return lazyvic.zeros(directions, batch, hidden, dtype=xs.dtype)
        t = ctx.tensor(value)
        return t.transpose(0, 1) if layout else t

    h0, c0 = state(initial_h), state(initial_c)
    valid = None
    if sequence_lens is not None:
        lens = np.array(ctx.ints(sequence_lens, "sequence_lens"))
        if not (lens == steps).all():
            valid = np.arange(steps)[:, None, None] < lens[None, :, None]  # (seq, batch, 1)
    acts = _rnn_activations(ctx, directions)
    outputs, finals, cells = [], [], []
    for d in range(directions):
        f, *rest = acts[d]
        wd, rd = weight[d], recur[d]
        wb, rb = bias[d, : gates * hidden], bias[d, gates * hidden :]
        projected = (xs.reshape(steps * batch, -1) @ wd.T + wb).reshape(steps, batch, gates * hidden)
        h, c = h0[d], c0[d]
        ys = [None] * steps
        reverse = direction == "reverse" or d == 1
        for t in range(steps - 1, -1, -1) if reverse else range(steps):
            xt = projected[t]
            if ctx.op == "RNN":
                hn, cn = f(xt + h @ rd.T + rb), c
            elif ctx.op == "GRU":  # gates z, r, h
                g = rest[0]
                hr = h @ rd[: 2 * hidden].T + rb[: 2 * hidden]
                z = f(xt[:, :hidden] + hr[:, :hidden])
                reset = f(xt[:, hidden : 2 * hidden] + hr[:, hidden:])
                rh, bh = rd[2 * hidden :], rb[2 * hidden :]
                if ctx.attr("linear_before_reset", 0):
                    cand = g(xt[:, 2 * hidden :] + reset * (h @ rh.T + bh))
                else:
                    cand = g(xt[:, 2 * hidden :] + (reset * h) @ rh.T + bh)
                hn, cn = (1.0 - z) * cand + z * h, c
            else:  # LSTM: gates i, o, f, c; peepholes i, o, f
                g, hact = rest
                pre = xt + h @ rd.T + rb
                gi, go, gf, gc = (pre[:, k * hidden : (k + 1) * hidden] for k in range(4))
                if peepholes is not None:
                    pd = ctx.tensor(peepholes)[d]
                    gi, gf = gi + pd[:hidden] * c, gf + pd[2 * hidden :] * c
                cn = f(gf) * c + f(gi) * g(gc)
                if peepholes is not None:
                    go = go + ctx.tensor(peepholes)[d][hidden : 2 * hidden] * cn
                hn = f(go) * hact(cn)
            if valid is not None:
                keep = _tensor(valid[t])
                ys[t] = lazyvic.where(keep, hn, 0.0)
                h, c = lazyvic.where(keep, hn, h), lazyvic.where(keep, cn, c)
            else:
                ys[t], h, c = hn, hn, cn
        outputs.append(lazyvic.stack(ys, 0))
        finals.append(h)
        cells.append(c)
    y = lazyvic.stack(outputs, 1)  # (seq, directions, batch, hidden)
    y_h, y_c = lazyvic.stack(finals, 0), lazyvic.stack(cells, 0)
    if layout:
        y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
    return (y, y_h, y_c) if ctx.op == "LSTM" else (y, y_h)


# ------------------------------------------------------------------ Einsum
def _einsum_terms(ctx, ranks) -> tuple:
    """Operand terms and output term with every "..." replaced by digit placeholders (right-aligned,
    so broadcast ellipses line up); implicit output: ellipsis, then letters used once, sorted."""
    equation = ctx.attr("equation", "").replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",") if lhs or len(ranks) != 1 else [""]
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} has {len(terms)} terms for {len(ranks)} inputs")
    width = max((rank - (len(t) - 3) for t, rank in zip(terms, ranks) if "..." in t), default=0)
    if width > 10:
        raise ctx.error("an ellipsis of more than 10 axes is not supported")
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            term = term.replace("...", "".join(str(i) for i in range(width - n, width)))
        if len(term) != rank:
            raise ctx.error(f"term {term!r} of equation {equation!r} does not fit an input of rank {rank}")
        expanded.append(term)
    ellipsis = "".join(str(i) for i in range(width))
    if arrow:
        out = rhs.replace("...", ellipsis)
    else:
        letters = "".join(expanded)
        out = ellipsis + "".join(sorted(c for c in set(letters) if c.isalpha() and letters.count(c) == 1))
    return expanded, out


def _einsum_prepare(t: Tensor, term: str, keep: set) -> tuple:
    """Take the diagonal of repeated letters, then sum the axes no later term needs."""
    while len(set(term)) < len(term):
        c = next(ch for ch in term if term.count(ch) > 1)
        i = term.index(c)
        j = term.index(c, i + 1)
        n = t.shape[i]
        order = [k for k in range(t.ndim) if k not in (i, j)] + [i, j]
        t = t.permute(*order).reshape(*[t.shape[k] for k in order[:-2]], n * n)
        t = t.index_select(t.ndim - 1, _tensor(np.arange(n, dtype=np.int64) * (n + 1)))
        term = "".join(term[k] for k in order[:-2]) + c
    unused = tuple(k for k, c in enumerate(term) if c not in keep)
    if unused:
        t = t.sum(unused, dtype=t.dtype)
        term = "".join(c for c in term if c in keep)
    return t, term


def _einsum_pair(a: Tensor, ta: str, b: Tensor, tb: str, keep: set) -> tuple:
    """Contract two operands with one batched matmul: (batch, free_a, k) @ (batch, k, free_b)."""
    shared = [c for c in ta if c in tb]
    batch = [c for c in shared if c in keep]
    contract = [c for c in shared if c not in keep]
    free_a, free_b = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    a = a.permute(*[ta.index(c) for c in batch + free_a + contract]) if ta else a
    b = b.permute(*[tb.index(c) for c in batch + contract + free_b]) if tb else b
    nb = len(batch)
    sizes_b = [max(a.shape[i], b.shape[i]) for i in range(nb)]
    a = a.expand(*sizes_b, *a.shape[nb:]) if nb else a
    b = b.expand(*sizes_b, *b.shape[nb:]) if nb else b
    sizes_fa, sizes_fb = a.shape[nb : nb + len(free_a)], b.shape[nb + len(contract) :]
    k = math.prod(a.shape[nb + len(free_a) :])
    out = a.reshape(math.prod(sizes_b), math.prod(sizes_fa), k) @ b.reshape(math.prod(sizes_b), k, math.prod(sizes_fb))
    return out.reshape(*sizes_b, *sizes_fa, *sizes_fb), "".join(batch + free_a + free_b)


@_register("Einsum", (12, 28))
def _einsum(ctx, *values):
    tensors = [ctx.tensor(v) for v in values]
    terms, out = _einsum_terms(ctx, [t.ndim for t in tensors])
    dtype = tensors[0].dtype
    if not dtype.is_floating_point:  # matmul is floating point: integers go through float64
        tensors = [t.to(dt.float64) for t in tensors]
    missing = set(out) - set("".join(terms))
    if missing:
        raise ctx.error(f"output letters {sorted(missing)} appear in no input term")
    later = [set("".join(terms[i + 1 :])) | set(out) for i in range(len(terms))]
    cur, cur_term = _einsum_prepare(tensors[0], terms[0], later[0])
    for i in range(1, len(tensors)):
        nxt, nxt_term = _einsum_prepare(tensors[i], terms[i], later[i] | set(cur_term))
        cur, cur_term = _einsum_pair(cur, cur_term, nxt, nxt_term, later[i])
        cur, cur_term = _einsum_prepare(cur, cur_term, later[i])
    if cur_term:
        cur = cur.permute(*[cur_term.index(c) for c in out])
    return cur.to(dtype)


# ------------------------------------------------------------------ scatter
def _scatter_check(ctx):
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add"):
        return f"{ctx.op} with reduction={reduction!r} (lazyvic imports 'none' and 'add')"
    return None


def _scatter_positions(ctx, shape, indices: np.ndarray) -> np.ndarray:
    """The flat position in data (row-major) of every update element, shaped like ``updates``."""
    shape = tuple(shape)
    if ctx.op == "ScatterElements":
        axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
        n = shape[axis]
        if ((indices < -n) | (indices >= n)).any():
            raise ctx.error(f"an index is out of range for axis {axis} of size {n}")
        grid = list(np.indices(indices.shape))
        grid[axis] = np.where(indices < 0, indices + n, indices)
        return np.ravel_multi_index(tuple(grid), shape)
    k = indices.shape[-1]  # ScatterND: each index tuple addresses a slice data[i0, ..., ik-1]
    head, rest = shape[:k], shape[k:]
    tuples = indices.reshape(-1, k)
    if ((tuples < -np.array(head)) | (tuples >= np.array(head))).any():
        raise ctx.error(f"an index tuple is out of range for data shape {shape}")
    tuples = np.where(tuples < 0, tuples + np.array(head), tuples)
    base = np.ravel_multi_index(tuple(tuples.T), head) if k else np.zeros(len(tuples), dtype=np.int64)
    inner = math.prod(rest)
    flat = base[:, None] * inner + np.arange(inner)[None, :]
    return flat.reshape(indices.shape[:-1] + rest)


@_register("ScatterND ScatterElements", (13, 16, 18), check=_scatter_check)
def _scatter(ctx, data, indices, updates):
    """Constant indices: each update element's flat position in data is computed with NumPy; 'none'
    is a select from the updates (the last duplicate wins, in index order), 'add' a scatter_add."""
    x, u = ctx.tensor(data), ctx.tensor(updates)
    index = ctx.const(indices, "indices")
    if index.dtype.kind not in "iu":
        raise ctx.error(f"indices must be an integer tensor, got {index.dtype}")
    positions = _scatter_positions(ctx, x.shape, index.astype(np.int64))
    if positions.shape != u.shape:
        raise ctx.error(f"updates shape {u.shape} does not fit the indices (expected {positions.shape})")
    flat_x, flat_u = x.reshape(-1), u.reshape(-1)
    if ctx.attr("reduction", "none") == "add":
        return flat_x.scatter_add(0, _tensor(positions.reshape(-1)), flat_u).reshape(*x.shape)
    source = np.full(math.prod(x.shape), -1, dtype=np.int64)
    source[positions.reshape(-1)] = np.arange(positions.size)
    picked = flat_u.index_select(0, _tensor(np.maximum(source, 0))) if positions.size else flat_x
    return lazyvic.where(_tensor(source >= 0), picked, flat_x).reshape(*x.shape)


# ------------------------------------------------------------------ Resize
_RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_check(ctx):
    mode = ctx.attr("mode", "nearest")
    coords = ctx.attr("coordinate_transformation_mode", "half_pixel")
    known = _RESIZE_COORDINATES + (("half_pixel_symmetric",) if ctx.version >= 19 else ())
    if mode not in ("nearest", "linear", "cubic"):
        return f"Resize with mode={mode!r}"
    if coords not in known:
        return f"Resize with coordinate_transformation_mode={coords!r}"
    if ctx.attr("nearest_mode", "round_prefer_floor") not in _NEAREST_MODES:
        return f"Resize with nearest_mode={ctx.attr('nearest_mode')!r}"
    if mode == "nearest" and ctx.attr("antialias", 0):
        return "Resize with mode='nearest' and antialias=1"
    return None


def _resize_source_coords(ctx, m: int, n: int, scale: float, roi) -> tuple:
    """Source coordinate of each of the m output positions along an axis of n inputs (the spec's
    coordinate_transformation_mode formulas), and the tf_crop_and_resize extrapolation mask."""
    mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    y = np.arange(m, dtype=np.float64)
    width = scale * n  # the output width before rounding
    outside = None
    if mode == "align_corners":
        x = np.zeros(m) if width == 1 else y * (n - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        x = np.full(m, (end - start) * (n - 1) / 2) if width == 1 else y * (end - start) * (n - 1) / (width - 1)
        x = x + start * (n - 1)
        outside = (x < 0) | (x > n - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(m, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        x = n / 2 * (1 - m / width) + (y + 0.5) / scale - 0.5
    else:  # half_pixel
        x = (y + 0.5) / scale - 0.5
    return x, outside


def _resize_taps(ctx, ratio: np.ndarray, scale: float) -> tuple:
    """(first tap offset from x0, coefficients (m, taps)) of the interpolation kernel, for source
    coordinates x = x0 + ratio with ratio in (0, 1] (an integer x is x0 + 1)."""
    mode = ctx.attr("mode", "nearest")
    if mode == "nearest":
        rule = ctx.attr("nearest_mode", "round_prefer_floor")
        if rule == "round_prefer_floor":
            right = ratio > 0.5
        elif rule == "round_prefer_ceil":
            right = ratio >= 0.5
        else:
            right = np.full(ratio.shape, rule == "ceil")
        right = right | (ratio == 1.0)
        return 0, np.stack([~right, right], 1).astype(np.float64)
    antialias = ctx.attr("antialias", 0) and scale < 1.0
    s = min(scale, 1.0) if antialias else 1.0
    reach = 1 if mode == "linear" else 2
    first = int(np.floor(-reach / s) + 1) if antialias else 1 - reach
    offsets = np.arange(first, 1 - first + 1)  # symmetric around the (x0, x0 + 1) gap
    dist = np.abs(offsets[None, :] - ratio[:, None]) * s
    if mode == "linear":
        coeffs = np.clip(1.0 - dist, 0.0, None)
    else:  # Keys' cubic convolution kernel with parameter a
        a = float(ctx.attr("cubic_coeff_a", -0.75))
        d2, d3 = dist * dist, dist * dist * dist
        coeffs = np.where(
            dist <= 1,
            (a + 2) * d3 - (a + 3) * d2 + 1,
            np.where(dist < 2, a * d3 - 5 * a * d2 + 8 * a * dist - 4 * a, 0.0),
        )
    if antialias:
        coeffs = coeffs / coeffs.sum(1, keepdims=True)
    return first, coeffs


def _resize_matrix(ctx, m: int, n: int, scale: float, roi) -> tuple:
    """The (m, n) interpolation matrix of one axis and its extrapolation mask (or None)."""
    x, outside = _resize_source_coords(ctx, m, n, scale, roi)
    x0 = np.ceil(x).astype(np.int64) - 1
    first, coeffs = _resize_taps(ctx, x - x0, scale)
    index = x0[:, None] + first + np.arange(coeffs.shape[1])[None, :]
    if ctx.attr("exclude_outside", 0):
        coeffs = np.where((index < 0) | (index >= n), 0.0, coeffs)
        total = coeffs.sum(1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    weights = np.zeros((m, n))
    np.add.at(
        weights, (np.repeat(np.arange(m), coeffs.shape[1]), np.clip(index, 0, n - 1).reshape(-1)), coeffs.reshape(-1)
    )  # taps past an edge repeat the edge value
    return weights, outside


def _resize_plan(ctx, shape, roi, scales, sizes) -> tuple:
    """Per axis: (output size, scale, (roi start, roi end)), from scales or sizes (with axes and
    keep_aspect_ratio_policy from Resize-18)."""
    r = len(shape)
    axes = list(range(r))
    if ctx.version >= 18 and ctx.attr("axes") is not None:
        axes = [ctx.axis(int(a), r, "axes entry") for a in ctx.attr("axes")]
    roi_values = None if roi is None else ctx.const(roi, "roi").astype(np.float64).reshape(-1)
    bounds = [(0.0, 1.0)] * r
    if roi_values is not None and roi_values.size:
        if roi_values.size != 2 * len(axes):
            raise ctx.error(f"roi has {roi_values.size} values for {len(axes)} axes")
        for i, a in enumerate(axes):
            bounds[a] = (float(roi_values[i]), float(roi_values[i + len(axes)]))
    scale_values = None if scales is None else ctx.const(scales, "scales").astype(np.float64).reshape(-1)
    if scale_values is not None and scale_values.size:
        if scale_values.size != len(axes):
            raise ctx.error(f"scales has {scale_values.size} values for {len(axes)} axes")
        factors = [1.0] * r
        for i, a in enumerate(axes):
            factors[a] = float(scale_values[i])
        out = [int(f * n) for f, n in zip(factors, shape)]
    else:
        if sizes is None:
            raise ctx.error("one of scales and sizes must be given")
        size_values = ctx.ints(sizes, "sizes")
        if len(size_values) != len(axes):
            raise ctx.error(f"sizes has {len(size_values)} values for {len(axes)} axes")
        out = list(shape)
        for i, a in enumerate(axes):
            out[a] = size_values[i]
        factors = [o / n if n else 1.0 for o, n in zip(out, shape)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch") if ctx.version >= 18 else "stretch"
        if policy != "stretch":
            common = (min if policy == "not_larger" else max)(factors[a] for a in axes)
            factors = [common if a in axes else 1.0 for a in range(r)]
            out = [int(common * shape[a] + 0.5) if a in axes else shape[a] for a in range(r)]
    return axes, out, factors, bounds


@_register("Resize", (13, 18, 19), check=_resize_check)
def _resize(ctx, a, roi=None, scales=None, sizes=None):
    """Separable: each resized axis is a constant (m, n) interpolation matrix built from the spec's
    coordinate and kernel formulas — an index_select for nearest, a matmul for linear and cubic."""
    x = ctx.tensor(a)
    axes, out, factors, bounds = _resize_plan(ctx, x.shape, roi, scales, sizes)
    y = x
    extrapolation = float(ctx.attr("extrapolation_value", 0.0))
    for axis in axes:
        n, m = y.shape[axis], out[axis]
        if math.isclose(factors[axis], 1.0) and m == n and bounds[axis] == (0.0, 1.0):
            continue
        if m == 0 or n == 0:
            raise ctx.error(f"cannot resize axis {axis} from {n} to {m} elements")
        weights, outside = _resize_matrix(ctx, m, n, factors[axis], bounds[axis])
        if ctx.attr("mode", "nearest") == "nearest":
            y = y.index_select(axis, _tensor(weights.argmax(1).astype(np.int64)))
        else:
            work = y if y.dtype.is_floating_point else y.to(dt.float64)
            moved = work.transpose(axis, -1)
            y = (moved @ _tensor(weights.T.astype(work.dtype.np))).transpose(axis, -1)
        if outside is not None and outside.any():
            mask = outside.reshape((m,) + (1,) * (y.ndim - axis - 1))
            y = lazyvic.where(_tensor(mask), extrapolation, y)
    if not x.dtype.is_floating_point and y.dtype is not x.dtype:
        y = lazyvic.where(y < 0, y - 0.5, y + 0.5).to(x.dtype)
    return y


# ============================================================== model reading
def _read_model(model) -> tuple:
    """(ModelProto with external data loaded, a name for error messages)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model, f"<ModelProto {model.graph.name or 'unnamed'}>"
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"onnx.load: expected a path or an onnx.ModelProto, got {type(model).__name__}")
    path = os.fspath(model)
    source = os.path.basename(path) or path
    if not os.path.exists(path):
        raise OnnxError(f"{path}: no such file")
    if os.path.isdir(path):
        raise OnnxError(f"{path}: is a directory, not an ONNX file")
    try:
        with open(path, "rb") as f:
            proto = onnx.ModelProto()
            proto.ParseFromString(f.read())
    except Exception as e:
        raise OnnxError(
            f"{path}: not a valid ONNX file (truncated or not ONNX): cannot parse the protobuf: {type(e).__name__}"
        ) from None
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.opset_import:
        raise OnnxError(f"{path}: not an ONNX model (no IR version, graph or opset import; truncated or not ONNX)")
    try:
        from onnx.external_data_helper import load_external_data_for_model, uses_external_data

        if any(uses_external_data(t) for t in proto.graph.initializer):
            load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
    except Exception as e:
        raise OnnxError(
            f"{path}: cannot load the external data of its initializers (expected next to the model "
            f"in {os.path.dirname(os.path.abspath(path))}): {type(e).__name__}: {e}"
        ) from None
    return proto, source


def _initializer_arrays(proto, source: str) -> dict:
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data

    arrays = {}
    for t in proto.graph.initializer:
        if uses_external_data(t):
            raise OnnxError(
                f"{source}: initializer '{t.name}' refers to external data that was not loaded; "
                f"load from the file path so lazyvic reads it from the model's directory"
            )
        if t.data_type not in _ELEM_DTYPES:
            raise OnnxError(
                f"{source}: initializer '{t.name}' has type {_elem_name(t.data_type)} "
                f"(lazyvic supports {_SUPPORTED_TYPES_TEXT})"
            )
        try:
            arr = np.asarray(numpy_helper.to_array(t))
        except Exception as e:
            raise OnnxError(
                f"{source}: initializer '{t.name}' (shape {tuple(t.dims)}) has missing or bad data: "
                f"{type(e).__name__}: {e}"
            ) from None
        if arr.shape != tuple(t.dims):
            raise OnnxError(f"{source}: initializer '{t.name}' has {arr.size} values for shape {tuple(t.dims)}")
        arrays[t.name] = arr
    return arrays


def _strip_initializers(proto):
    """A copy of the model whose initializers keep name, dims and type but no data."""
    import onnx

    stripped = onnx.ModelProto()
    stripped.CopyFrom(proto)
    for t in stripped.graph.initializer:
        for field in (
            "raw_data",
            "float_data",
            "int32_data",
            "int64_data",
            "double_data",
            "uint64_data",
            "string_data",
            "external_data",
        ):
            t.ClearField(field)
        t.data_location = 0
    return stripped


# ============================================================== state_dict names
_NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z|[0-9]+\Z")


def state_dict_keys(names) -> dict:
    """Initializer name -> ``state_dict`` key, deterministic in the names' order.

    A name whose "."-separated parts are all Python identifiers or digit strings (``layer1.0.conv1.
    weight``, as lazyvic's and PyTorch's exporters write) is kept: it becomes nested submodules. Any
    other name (``onnx::MatMul_123``, ``/fc/Gemm_output``), and a name that is also the prefix of
    another kept name, becomes a flat key: every character outside ``[A-Za-z0-9_]`` is replaced by
    ``_``, a leading digit gets a ``_`` prefix, and a clash with a kept name, a submodule name or an
    earlier flat key gets ``_2``, ``_3``, ... appended (``onnx::MatMul_123`` -> ``onnx__MatMul_123``).
    """
    names = list(names)
    dotted = [n for n in names if all(_NAME_PART.match(p) for p in n.split("."))]
    prefixes = {".".join(n.split(".")[:i]) for n in dotted for i in range(1, n.count(".") + 1)}
    keys = {n: n for n in dotted if n not in prefixes}
    taken = set(keys.values()) | prefixes
    for n in names:
        if n in keys:
            continue
        base = re.sub(r"[^A-Za-z0-9_]", "_", n) or "_"
        if base[0].isdigit():
            base = "_" + base
        key, i = base, 1
        while key in taken:
            i += 1
            key = f"{base}_{i}"
        keys[n] = key
        taken.add(key)
    return keys


class OnnxSubmodule(Module):
    """A namespace module that holds the parameters under one dotted prefix of an imported graph."""

    def forward(self, *args):
        raise TypeError("an OnnxSubmodule only holds parameters; call the OnnxModule that owns it")


# ============================================================== the module
class OnnxModule(Module):
    """An ONNX graph as a lazyvic module (build with :func:`load`).

    ``OnnxModule(model=..., source=...)`` rebuilds the structure from ``config`` (see
    :func:`load`) with zero-filled parameters; ``lazyvic.load`` then fills them. Attributes:
    ``input_names`` / ``output_names`` (graph order), ``opset`` (default domain),
    ``initializer_keys`` (initializer name -> state_dict key), ``config`` (JSON-able).
    """

    def __init__(self, model: str, source: str = "<ModelProto>"):
        import onnx

        super().__init__()
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(base64.b64decode(model))
        except Exception as e:
            raise OnnxError(f"{source}: the stored graph cannot be parsed: {type(e).__name__}") from None
        object.__setattr__(self, "config", {"model": model, "source": source})
        self._build(proto, source)

    # ---------------------------------------------------------------- build
    def _build(self, proto, source: str) -> None:
        graph = proto.graph
        opsets = {o.domain: o.version for o in proto.opset_import}
        opset = opsets.get("", opsets.get("ai.onnx"))
        if opset is None:
            raise UnsupportedOpError(f"{source}: the model imports no default-domain (ai.onnx) opset")
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise UnsupportedOpError(
                f"{source}: opset {opset} is not supported (lazyvic imports default-domain "
                f"opsets {MIN_OPSET} to {MAX_OPSET}; convert older models with "
                f"onnx.version_converter.convert_version(model, 17))"
            )
        if graph.sparse_initializer:
            raise UnsupportedOpError(
                f"{source}: sparse initializers "
                f"({', '.join(repr(t.values.name) for t in graph.sparse_initializer)}) "
                f"are not supported"
            )
        init_names = [t.name for t in graph.initializer]
        init_set = set(init_names)
        inputs = [vi for vi in graph.input if vi.name not in init_set]
        steps, unsupported = [], {}
        defined = set(init_names) | {vi.name for vi in inputs}
        undefined = []
        # Which values are known constants when the graph runs (see the module docstring): it decides
        # whether a fold_only op (Floor, Sin, ...) can be imported.
        constants = {t.name for t in graph.initializer if t.data_type not in (1, 11)}
        for i, node in enumerate(graph.node):
            ctx = _NodeContext(node, 0, source, i)
            problem = self._node_problem(ctx, opsets)
            conv = _CONVERTERS.get(ctx.op)
            if conv is not None and (
                ctx.op in _ALWAYS_CONSTANT or (conv.fold is not None and all(n in constants for n in node.input if n))
            ):
                constants.update(n for n in node.output if n)
            elif conv is not None and conv.fold_only and problem is None:
                problem = (
                    f"{ctx.op} of a computed tensor (lazyvic has no {ctx.op} primitive: it folds {ctx.op} "
                    f"of constants only, as in shape arithmetic)"
                )
            if problem is not None:
                unsupported.setdefault(problem, []).append(ctx.name)
            for name in node.input:
                if name and name not in defined:
                    undefined.append((ctx, name))
            defined.update(n for n in node.output if n)
            steps.append(ctx)
        if unsupported:
            lines = [f"{what}: nodes {', '.join(repr(n) for n in names)}" for what, names in unsupported.items()]
            raise UnsupportedOpError(
                f"{source}: {len(unsupported)} unsupported op type(s):\n  "
                + "\n  ".join(lines)
                + f"\n(lazyvic imports {', '.join(sorted(_CONVERTERS))})"
            )
        if undefined:
            ctx, name = undefined[0]
            raise OnnxError(
                f"{ctx.label()}: input '{name}' is not defined (not a graph input, an initializer or "
                f"the output of an earlier node; a missing initializer?)"
                + (f"; {len(undefined) - 1} more undefined inputs" if len(undefined) > 1 else "")
            )
        for out in graph.output:
            if out.name not in defined:
                raise OnnxError(f"{source}: graph output '{out.name}' is not produced by any node")
        for vi in inputs:
            elem = vi.type.tensor_type.elem_type
            if not vi.type.HasField("tensor_type"):
                raise UnsupportedOpError(
                    f"{source}: graph input '{vi.name}' is not a tensor (sequences, maps and "
                    f"optionals are not supported)"
                )
            if elem not in _ELEM_DTYPES:
                raise OnnxError(
                    f"{source}: graph input '{vi.name}' has type {_elem_name(elem)} "
                    f"(lazyvic supports {_SUPPORTED_TYPES_TEXT})"
                )
        keys = state_dict_keys(init_names)
        slots = {}
        for t in graph.initializer:
            if t.data_type not in _ELEM_DTYPES:
                raise OnnxError(
                    f"{source}: initializer '{t.name}' has type {_elem_name(t.data_type)} "
                    f"(lazyvic supports {_SUPPORTED_TYPES_TEXT})"
                )
            d = _ELEM_DTYPES[t.data_type]
            owner, attr = self._owner(keys[t.name])
            zeros = np.zeros(tuple(t.dims), dtype=d.np)
            if d.is_floating_point:
                owner.register_parameter(attr, Parameter(zeros))
            else:
                owner.register_buffer(attr, _tensor(zeros, dtype=d))
            slots[t.name] = (owner, attr, d.is_floating_point)
        d = self.__dict__
        d["opset"] = opset
        d["input_names"] = [vi.name for vi in inputs]
        d["output_names"] = [o.name for o in graph.output]
        d["initializer_keys"] = keys
        d["_onnx_source"] = source
        d["_onnx_inputs"] = [(vi.name, vi.type.tensor_type) for vi in inputs]
        d["_onnx_outputs"] = [(o.name, o.type.tensor_type) for o in graph.output]
        d["_onnx_steps"] = steps
        d["_onnx_slots"] = slots

    @staticmethod
    def _node_problem(ctx: _NodeContext, opsets: dict):
        import onnx

        domain = ctx.proto.domain
        if domain not in _DEFAULT_DOMAINS:
            return f"{ctx.op} (domain {domain!r}, lazyvic imports the default ai.onnx domain only)"
        conv = _CONVERTERS.get(ctx.op)
        if conv is None:
            return ctx.op
        opset = opsets.get("", opsets.get("ai.onnx"))
        try:
            ctx.version = onnx.defs.get_schema(ctx.op, opset, "").since_version
        except Exception:
            return f"{ctx.op} (no schema at opset {opset})"
        if ctx.version not in conv.versions:
            return (
                f"{ctx.op} version {ctx.version} (at opset {opset}; lazyvic handles versions "
                f"{', '.join(map(str, sorted(conv.versions)))})"
            )
        if conv.check is not None:
            return conv.check(ctx)
        return None

    def _owner(self, key: str):
        owner = self
        *path, attr = key.split(".")
        for part in path:
            child = owner._modules.get(part)
            if child is None:
                child = OnnxSubmodule()
                owner.add_module(part, child)
            owner = child
        return owner, attr

    # ---------------------------------------------------------------- run
    def _bind_input(self, name: str, type_proto, value) -> Tensor:
        source = self._onnx_source
        expected = _ELEM_DTYPES[type_proto.elem_type]
        if isinstance(value, Tensor):
            t = value
        else:
            arr = np.asarray(value)
            if _lazyvic_dtype(arr.dtype) is None:
                raise OnnxError(
                    f"{source}: graph input '{name}' got an array of dtype {arr.dtype} "
                    f"(lazyvic supports {_SUPPORTED_TYPES_TEXT})"
                )
            t = _tensor(arr, dtype=arr.dtype, device=_NodeContext.device)
        if t.dtype is not expected:
            raise OnnxError(f"{source}: graph input '{name}' expects {expected.name}, got {t.dtype.name}")
        if type_proto.HasField("shape"):
            dims = type_proto.shape.dim
            declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
            fits = len(dims) == t.ndim and all(
                not d.HasField("dim_value") or d.dim_value == s for d, s in zip(dims, t.shape)
            )
            if not fits:
                raise OnnxError(
                    f"{source}: graph input '{name}' has shape {t.shape}, but the graph declares {declared}"
                )
        return t

    def forward(self, *inputs):
        """Run the graph on ``inputs`` (lazyvic Tensors or NumPy arrays, in graph-input order).

        Returns one Tensor for a single-output graph, else a tuple in graph-output order.
        Raises OnnxError for a wrong number of inputs, a shape or dtype that does not fit the
        graph's declaration, or a node whose input shapes do not fit (naming the node).
        """
        source = self._onnx_source
        if len(inputs) != len(self._onnx_inputs):
            raise OnnxError(
                f"{source}: the graph takes {len(self._onnx_inputs)} inputs "
                f"({', '.join(self.input_names)}), got {len(inputs)}"
            )
        previous = _NodeContext.device
        _NodeContext.device = next((p.device for p in self.parameters()), "cpu")  # where .to() put the model
        try:
            env = {}
            for (name, type_proto), value in zip(self._onnx_inputs, inputs):
                env[name] = self._bind_input(name, type_proto, value)
            for name, (owner, attr, is_param) in self._onnx_slots.items():
                if is_param:
                    env[name] = owner._parameters[attr]
                else:  # integer initializers are constants: shape arithmetic folds through them
                    env[name] = np.asarray(owner._buffers[attr].numpy())
            for ctx in self._onnx_steps:
                self._run_node(ctx, env)
            outs = []
            for name, type_proto in self._onnx_outputs:
                value = env[name]
                t = (
                    value
                    if isinstance(value, Tensor)
                    else _tensor(value, dtype=value.dtype, device=_NodeContext.device)
                )
                self._check_output(name, type_proto, t)
                outs.append(t)
        finally:
            _NodeContext.device = previous
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _check_output(self, name, type_proto, t: Tensor) -> None:
        if not type_proto.HasField("shape"):
            return
        dims = type_proto.shape.dim
        if len(dims) != t.ndim or any(d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, t.shape)):
            declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
            raise OnnxError(
                f"{self._onnx_source}: graph output '{name}' has shape {t.shape}, but the graph "
                f"declares {declared} (inconsistent shapes in the model)"
            )

    @staticmethod
    def _run_node(ctx: _NodeContext, env: dict) -> None:
        conv = _CONVERTERS[ctx.op]
        args = [env[name] if name else None for name in ctx.inputs]
        try:
            present = [a for a in args if a is not None]
            if conv.fold is not None and all(_is_const(a) for a in present):
                out = conv.fold(ctx, *args)
            else:
                out = conv.convert(ctx, *args)
        except (OnnxError, UnsupportedOpError):
            raise
        except (LazyvicError, ValueError, IndexError, TypeError, ZeroDivisionError) as e:
            raise ctx.error(
                f"{type(e).__name__}: {e} (input shapes "
                f"{', '.join(str(_shape_of(a)) if a is not None else '-' for a in args)})"
            ) from None
        outs = out if isinstance(out, tuple) else (out,)
        for i, name in enumerate(ctx.outputs):
            if not name:
                continue
            if i >= len(outs):
                raise ctx.error(f"output {i} ('{name}') is not produced by lazyvic's converter")
            value = outs[i]
            if isinstance(value, np.ndarray) or np.isscalar(value):
                value = np.asarray(value)
            env[name] = value

    def extra_repr(self) -> str:
        return (
            f"source={self._onnx_source!r}, opset={self.opset}, inputs={self.input_names}, "
            f"outputs={self.output_names}, nodes={len(self._onnx_steps)}"
        )


# ============================================================== entry point
def load(model, *, name: str | None = None) -> OnnxModule:
    """Import an ONNX model as a lazyvic module.

    Args:
        model: a path (str or os.PathLike) of a ``.onnx`` file — initializers stored as external
            data (``model.onnx.data`` next to it, as PyTorch's exporter writes) are read from the
            model's directory — or an ``onnx.ModelProto`` (with its data loaded).
        name: what error messages call the model (default: the file's name, or
            ``<ModelProto graph-name>``); useful with a ModelProto read from a file.

    Returns:
        An :class:`OnnxModule`. Calling it with the graph inputs (Tensors or NumPy arrays, in
        graph-input order; initializers listed as graph inputs are not user inputs) returns a
        Tensor, or a tuple for several graph outputs. Floating-point initializers are
        ``nn.Parameter`` s (trainable; autograd flows through the graph), integer and bool ones are
        buffers; their ``state_dict`` keys follow :func:`state_dict_keys`. Element types: float32,
        float64, int32, int64, bool. Shapes are static (known when the module is called).

    Semantics: the ONNX operator specification (https://onnx.ai/onnx/operators/) at the model's
    default-domain opset, 13 to 28. Each op is read at its schema version for that opset
    (``onnx.defs.get_schema(op, opset).since_version``): ReduceSum's axes are an input from 13,
    ReduceMean/Max/Min's from 18; Split's ``split`` is an input from 13 and ``num_outputs`` exists
    from 18; Reshape's ``allowzero`` from 14; Squeeze/Unsqueeze take axes as an input (13); Softmax
    is per-axis (13). :func:`supported_ops` lists every op and the versions handled; versions after
    18 are included where the schema change concerns only element types lazyvic lacks (checked by
    comparing the schemas' inputs, outputs and attributes), or is implemented (AveragePool-19
    dilations, Pad-19 ``wrap``, SpaceToDepth-28 ``mode``). Conv is 1-D or 2-D; MaxPool and
    AveragePool take any number of spatial axes.

    Raises:
        OnnxError: a missing, truncated or non-ONNX file, missing external data or initializer
            data, a node input no earlier node, initializer or graph input defines, an
            unsupported element type; when called, inputs that do not fit the graph and nodes whose
            shapes do not fit (the message names the file, the node and its op type).
        UnsupportedOpError: (at load time) every op type lazyvic cannot import, each with its node
            names, listed at once: unknown ops, other domains (e.g. ``com.microsoft``), op
            versions outside the handled ones, unsupported features (e.g. Conv with 3 spatial
            axes, Pad's wrap mode before Pad-19, Cast to float16), or an opset outside 13..28.
    """
    proto, source = _read_model(model)
    source = name or source
    arrays = _initializer_arrays(proto, source)
    structure = base64.b64encode(_strip_initializers(proto).SerializeToString()).decode("ascii")
    module = OnnxModule(structure, source=source)
    keys = module.initializer_keys
    module.load_state_dict({keys[init]: arr for init, arr in arrays.items()})
    return module


__all__ = ["load", "OnnxModule", "OnnxSubmodule", "state_dict_keys", "supported_ops", "MIN_OPSET", "MAX_OPSET"]
