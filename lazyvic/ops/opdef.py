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
            ``lazyvic.interop.onnx.builder.GraphBuilder`` and returns the output's value name, or
            None when the op has no ONNX form at the builder's opset; ``onnx=None`` means no ONNX
            form at all. Either way the exporter raises UnsupportedOpError naming the op. A
            primitive that is one ONNX node declares it with :func:`onnx_node`, which the
            importer reads too (``lazyvic/interop/onnx/converters/optable.py``).
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


@dataclass(frozen=True)
class OnnxNode:
    """A primitive that is one ONNX node: one declaration read by the exporter and the importer.

    Called as an export rule (``OpDef.onnx``), it writes ``op_type`` with the fixed attributes and
    the carried ones. The importer (``lazyvic/interop/onnx/converters/optable.py``) turns a node of
    ``op_type`` at one of the ``since`` versions into this primitive, its inputs broadcast by
    ONNX's rules, and folds it with ``OpDef.reference`` when every input is a constant.

    Attributes:
        op_type: the ONNX op type (default domain).
        attrs: the fixed ONNX attributes, ``((name, value), ...)``; on import, a node whose
            attributes differ is refused at load time.
        carried: primitive attributes written as ONNX attributes of the same name (export).
        since: the since-versions of ``op_type``'s schema (``onnx.defs.get_schema(op_type,
            opset).since_version``) whose semantics are this primitive's; empty: export only (the
            importer has a hand-written converter for ``op_type``, e.g. integer Div).
        from_onnx: ``(onnx_attrs, input_shapes) -> attrs``, the primitive's attributes of an
            imported node (ONNX defaults included); None: no attributes.
    """

    op_type: str
    attrs: tuple = ()
    carried: tuple = ()
    since: tuple = ()
    from_onnx: Callable | None = None

    def __call__(self, builder, names, at, shape, dtype):
        carried = {k: list(at[k]) if isinstance(at[k], tuple) else at[k] for k in self.carried}
        return builder.node(self.op_type, names, **dict(self.attrs), **carried)


def onnx_node(
    op_type: str, *, since: tuple = (), carried: tuple = (), from_onnx: Callable | None = None, **attrs
) -> OnnxNode:
    """The ONNX rule of a primitive that is one ONNX node with fixed attributes (see :class:`OnnxNode`)."""
    return OnnxNode(op_type, tuple(sorted(attrs.items())), tuple(carried), tuple(since), from_onnx)


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def get(name: str) -> OpDef:
    return OPS[name]
