"""The op table: one declaration per primitive, read by every layer.

Each :class:`OpDef` carries the shape/dtype rule, the NumPy reference (the
interpreter and the test oracle), the scalar expression the code generators
inline (elementwise ops), and the vector-Jacobian product written with lazy
tensor ops. Adding a primitive means adding one entry in one of the modules
below plus its tests; tracing, fusion, the interpreter and autograd then pick it
up without other changes.

Kinds:
    source       leaves: realized buffers, Python scalars, random numbers
    elementwise  same-shape inputs, one output element per input element
    reduce       reduces a set of axes; the output keeps them as size 1
    movement     reshape / permute / expand / slice / pad (views: index math)
    matmul       batched matrix product (a BLAS call)
    gather       gather along one dimension (a load at a computed index)
    scatter      scatter_add along one dimension
    conv         2-D convolution (im2col gathers + one BLAS call; ops/conv.py)
    pool         2-D max pooling (a window kernel; ops/pool.py)

Each entry may also carry its ONNX export rule (``onnx``), which lazyvic/interop/onnx_export.py
calls; composites built from primitives mark their ONNX node in lazyvic/trace/composite.py.
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


# Registration happens on import of each family.
from lazyvic.ops import conv, elementwise, index, matmul, movement, pool, reduce, source  # noqa: E402,F401
