"""OpDef: the declaration of one primitive, and the table ``OPS`` that holds them.

Each family module of :mod:`lazyvic.ops` registers its primitives here; every other layer
reads ``OPS`` (through :mod:`lazyvic.ops`). This module imports nothing of lazyvic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

OPS: dict[str, "OpDef"] = {}


@dataclass(frozen=True)
class OpDef:
    """Declaration of one primitive op.

    Attributes:
        name: op name, as it appears in traces and kernel names.
        kind: one of the kinds listed in the module docstring.
        arity: number of tensor inputs.
        infer: ``(shapes, dtypes, attrs) -> (shape, dtype)``; raises ShapeError/DTypeError.
        reference: ``(arrays, attrs) -> np.ndarray``, the NumPy reference.
        expr: elementwise only: ``(arg_names, in_dtypes, out_dtype) -> str``, a scalar
            expression in the kernel language (see lowering/kernel_lib.py).
        vjp: ``(g, inputs, out, attrs) -> tuple`` of input cotangents (lazy tensors or None).
        reduce_init: reduce only: the identity as a function of the dtype.
        reduce_combine: reduce only: ``(acc, value) -> str`` accumulation statement.
        onnx: the ONNX export rule, ``(builder, names, attrs, shape, dtype) -> str``: emits the
            nodes computing this op from the input value ``names`` through
            ``lazyvic.interop.onnx_export.GraphBuilder`` and returns the output's value name, or
            None when the op has no ONNX form at the builder's opset; ``onnx=None`` means no ONNX
            form at all. Either way the exporter raises UnsupportedOpError naming the op.
        index_map: movement only: ``(index, attrs, in_shape, shape) -> in_index``, the input
            index that output element ``index`` reads. Indices are lists of affine forms, one
            per axis: any objects with ``+ int`` and ``.scale(k)`` (the lowering's ``Lin``);
            code generation reads movement ops through it instead of copying data.
        reads_outside: movement only: ``index_map`` may map outside the input, where the value
            is zero (pad): code generation guards those reads.
        flat_index: movement only: the op keeps the row-major order of the elements, so an
            output element reads the input element at the same flat offset (reshape); code
            generation re-decomposes the flat offset into the input's axes.
        is_identity: movement only: ``(attrs, in_shape, shape) -> bool``, true when the op
            returns its input unchanged (the graph passes drop it).
        fold: movement only: ``(inner_attrs, outer_attrs) -> attrs``, the one op equal to this
            op applied to the output of the same op (the graph passes fold the two).
    """

    name: str
    kind: str
    arity: int
    infer: Callable
    reference: Callable
    expr: Callable | None = None
    vjp: Callable | None = None
    reduce_init: Callable | None = None
    reduce_combine: Callable | None = None
    differentiable: bool = True
    onnx: Callable | None = None
    index_map: Callable | None = None
    reads_outside: bool = False
    flat_index: bool = False
    is_identity: Callable | None = None
    fold: Callable | None = None


def onnx_node(op_type: str, **attrs) -> Callable:
    """The ONNX export rule of a primitive that is one ONNX node with fixed attributes."""

    def rule(builder, names, at, shape, dtype):
        return builder.node(op_type, names, **attrs)

    return rule


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    return OPS[name]
