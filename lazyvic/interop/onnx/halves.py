"""float16 and bfloat16 nodes of composite ops, computed in float32 and rounded once.

lazyvic rounds the result of each primitive of a half type to that type (``lazyvic.dtypes``). An
ONNX node whose converter is a composition of primitives (Softmax, LayerNormalization, Gelu,
Attention, LSTM, Resize ...) would then round every intermediate result: ``x - max``, the sum of
``exp``, a variance. The ONNX reference and onnxruntime compute such a node in float32 and round
its outputs once (as PyTorch's CPU kernels compute in float32, "opmath"), and so does the importer:
for the op types in :data:`HALF_IN_FLOAT32`, inputs of a half type are widened to float32 (exact),
the converter runs, and each output whose schema type parameter is that of a half input (``T``
for LayerNormalization's ``Y``, not ``U`` for its float32 ``Mean``) is rounded back to the input's
type. One-primitive ops (Add, Exp, MatMul, ReduceSum ...) already round once; data movement
(Reshape, Gather, Concat ...) does not round at all; both run as they are.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.interop.onnx.context import NodeContext
from lazyvic.tensor import Tensor

HALF_IN_FLOAT32 = frozenset(
    {
        # activation.py
        "LeakyRelu", "PRelu", "Softplus", "Softsign", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
        "Mish", "Swish", "SwiGLU", "Gelu",
        # conv.py, einsum.py (not Attention: its spec rounds QK^T to T, softmax_precision chooses the rest)
        "Conv", "ConvTranspose", "Einsum",
        # elementwise.py: Mean is a sum and a scale, Mod of floats a quotient and a product
        "Mean", "Mod",
        # nn.py
        "Gemm", "Softmax", "LogSoftmax", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss",
        # norm.py
        "BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization",
        "RMSNormalization", "LpNormalization", "MeanVarianceNormalization",
        # pool.py, recurrent.py, resize.py
        "AveragePool", "LpPool", "GlobalAveragePool", "RNN", "GRU", "LSTM", "Resize", "Upsample",
        # reduce.py
        "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "CumSum",
    }
)  # fmt: skip


@lru_cache(maxsize=None)
def _type_params(op_type: str, version: int) -> tuple:
    """``(input type parameters, output type parameters, last input variadic, last output variadic)``."""
    import onnx

    schema = onnx.defs.get_schema(op_type, version, "")
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    ins, outs = list(schema.inputs), list(schema.outputs)
    return (
        tuple(f.type_str for f in ins),
        tuple(f.type_str for f in outs),
        bool(ins) and ins[-1].option == variadic,
        bool(outs) and outs[-1].option == variadic,
    )


def _param(params: tuple, variadic: bool, i: int):
    if i < len(params):
        return params[i]
    return params[-1] if variadic and params else None


def _half_of(value) -> dt.DType | None:
    if isinstance(value, Tensor):
        return value.dtype if value.dtype.is_half else None
    if isinstance(value, np.ndarray):
        d = next((h for h in dt.HALF if h.np == value.dtype), None)
        return d
    return None


def _widen(value):
    return value.to(dt.float32) if isinstance(value, Tensor) else value.astype(np.float32)


def _narrow(value, half: dt.DType | None):
    if half is None or value is None:
        return value
    if isinstance(value, Tensor):
        return value.to(half) if value.dtype is dt.float32 else value
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(half.np)
    return value


def convert_widened(ctx: NodeContext, convert, args: list):
    """``convert(ctx, *args)`` with half-type inputs widened to float32 and the outputs of their
    type parameters rounded back (module docstring); as it is when no input has a half type."""
    halves = {}  # type parameter -> the half dtype of its inputs
    widened = list(args)
    ins, outs, ins_variadic, outs_variadic = _type_params(ctx.op, ctx.version)
    for i, a in enumerate(args):
        half = _half_of(a)
        if half is not None:
            halves.setdefault(_param(ins, ins_variadic, i), half)
            widened[i] = _widen(a)
    if not halves:
        return convert(ctx, *args)
    out = convert(ctx, *widened)
    items = out if isinstance(out, tuple) else (out,)
    rounded = tuple(_narrow(v, halves.get(_param(outs, outs_variadic, j))) for j, v in enumerate(items))
    return rounded if isinstance(out, tuple) else rounded[0]
