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
