"""Converters derived from the op table: the primitives that are one ONNX node.

A primitive declared with ``onnx=onnx_node(op_type, since=...)`` in ``lazyvic/ops/`` (an
:class:`~lazyvic.ops.opdef.OnnxNode`) is exported as that node and imported from it through the
same declaration: no converter is written for it here. Today that is Neg Abs Relu Sqrt Exp Log
Sigmoid Tanh Erf Not Add Sub Mul Equal Less LessOrEqual Greater GreaterOrEqual Where MatMul
Transpose Sin Cos Floor Round Atan Asin Acos Sinh Cosh Asinh Acosh Atanh Det (``supported_ops()`` lists
them with their versions).

How a derived node runs depends on the primitive's kind:

- elementwise: the inputs are promoted to one dtype within each ONNX type constraint (inputs
  whose schema type string is the same, e.g. ``T`` for both of Add's inputs but not Where's
  ``B`` condition) and broadcast together (ONNX's multidirectional broadcasting, NumPy's rule);
- matmul: ONNX MatMul is NumPy's matmul (1-D operands, broadcast batch axes), which the front
  end's ``matmul`` implements in front of the primitive (with autocast, and one BLAS call for a
  2-D right operand); integer operands are multiplied in floating point and cast back;
- movement: the primitive's attributes come from the rule's ``from_onnx`` (Transpose's perm);
- linalg: the primitive on its one input (Det).

When every input is a constant the node folds with the primitive's NumPy reference
(``OpDef.reference``) instead, as the interpreter runs it (``lowering.reference.run_reference``:
float16 and bfloat16 operands computed in float32, the result rounded once). Fixed attributes of
a rule (``onnx_node(op_type, name=value)``) are checked at load time: a node with another value
is refused.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.interop.onnx.context import NodeContext, lazyvic_dtype, shape_of
from lazyvic.interop.onnx.registry import Converter, add
from lazyvic.lowering.reference import run_reference
from lazyvic.ops import OPS
from lazyvic.ops.opdef import OnnxNode, OpDef
from lazyvic.tensor import Tensor, matmul


@lru_cache(maxsize=None)
def _type_groups(op_type: str, version: int) -> tuple:
    """Input positions sharing one type constraint in the schema: ``((0, 1),)`` for Add."""
    import onnx

    groups: dict = {}
    for i, formal in enumerate(onnx.defs.get_schema(op_type, version, "").inputs):
        groups.setdefault(formal.type_str, []).append(i)
    return tuple(tuple(g) for g in groups.values())


def _common_dtypes(ctx: NodeContext, dtypes: list) -> list:
    """Each input's dtype after promotion within its type constraint (the front end's rule)."""
    out = list(dtypes)
    for group in _type_groups(ctx.op, ctx.version):
        members = [i for i in group if i < len(out)]
        if not members:
            continue
        common = out[members[0]]
        for i in members[1:]:
            common = dt.promote(common, out[i])
        for i in members:
            out[i] = common
    return out


def _broadcast_shape(ctx: NodeContext, shapes: list) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ctx.error(f"input shapes {', '.join(map(str, shapes))} cannot be broadcast together") from None


def _elementwise(ctx: NodeContext, op: OpDef, values: tuple, attrs: dict) -> Tensor:
    tensors = [ctx.tensor(v) for v in values]
    dtypes = _common_dtypes(ctx, [t.dtype for t in tensors])
    tensors = [t if t.dtype is d else t.to(d) for t, d in zip(tensors, dtypes)]
    shape = _broadcast_shape(ctx, [t.shape for t in tensors])
    tensors = [t if t.shape == shape else t.expand(*shape) for t in tensors]
    return Tensor.apply(op, *tensors, **attrs)


def _fold_elementwise(ctx: NodeContext, op: OpDef, arrays: tuple, attrs: dict) -> np.ndarray:
    dtypes = _common_dtypes(ctx, [lazyvic_dtype(a.dtype) for a in arrays])
    shape = ctx.reserve_broadcast(arrays)  # the broadcast result, before any array that size exists
    arrays = [a if a.dtype == d.np else a.astype(d.np) for a, d in zip(arrays, dtypes)]
    arrays = np.broadcast_arrays(*arrays)
    _, out_dtype = op.infer(tuple(shape for _ in arrays), tuple(dtypes), attrs)
    # As the interpreter runs it: half-type operands widen to float32, a half result is rounded once.
    return run_reference(op.reference, list(arrays), attrs, out_dtype)


def _matmul(ctx: NodeContext, op: OpDef, values: tuple, attrs: dict) -> Tensor:
    return matmul_keeping_dtype(ctx.tensor(values[0]), ctx.tensor(values[1]))


def matmul_keeping_dtype(x: Tensor, y: Tensor) -> Tensor:
    """``x @ y`` (NumPy's matmul rules) in ``x``'s dtype: integer products are taken in floating
    point by the front end and cast back, as ONNX's integer MatMul keeps the type."""
    out = matmul(x, y)
    return out.to(x.dtype) if x.dtype.category != 2 else out


def _fold_as_given(ctx: NodeContext, op: OpDef, arrays: tuple, attrs: dict) -> np.ndarray:
    """The reference on the constants as they are: MatMul's (NumPy's matmul broadcasts itself),
    Transpose's. A product's result is reserved first: ``(n, 1) @ (1, n)`` is n times its inputs."""
    if op.kind == "matmul":
        ctx.reserve(_matmul_shape(ctx, *(a.shape for a in arrays)), arrays[0].dtype)
    return run_reference(op.reference, list(arrays), attrs, lazyvic_dtype(arrays[0].dtype))


def _matmul_shape(ctx: NodeContext, a: tuple, b: tuple) -> tuple:
    """The shape of NumPy's ``matmul`` of shapes ``a`` and ``b`` (1-D operands, broadcast batch axes)."""
    if not a or not b:
        raise ctx.error(f"MatMul of a 0-d operand (shapes {a} and {b})")
    a2, b2 = (a if len(a) > 1 else (1, *a)), (b if len(b) > 1 else (*b, 1))
    if a2[-1] != b2[-2]:
        raise ctx.error(f"MatMul of shapes {a} and {b}: inner dimensions differ")
    batch = _broadcast_shape(ctx, [a2[:-2], b2[:-2]])
    return (*batch, *a2[-2:-1][: len(a) - 1], *b2[-1:][: len(b) - 1])


def _movement(ctx: NodeContext, op: OpDef, values: tuple, attrs: dict) -> Tensor:
    return Tensor.apply(op, ctx.tensor(values[0]), **attrs)


# kind -> (run on Tensors, fold on constants)
_BY_KIND = {
    "elementwise": (_elementwise, _fold_elementwise),
    "matmul": (_matmul, _fold_as_given),
    "movement": (_movement, _fold_as_given),
    "linalg": (_movement, _fold_as_given),  # Det: one input, no attributes
}


def _attrs(rule: OnnxNode, ctx: NodeContext, values: tuple) -> dict:
    """The primitive's attributes for this node."""
    if rule.from_onnx is not None:
        return rule.from_onnx(ctx.attrs, [shape_of(v) for v in values])
    return {k: tuple(ctx.attrs[k]) if isinstance(ctx.attrs[k], list) else ctx.attrs[k] for k in rule.carried}


def _fixed_attrs_check(rule: OnnxNode, op: OpDef):
    """A load-time check that the node's attributes (their schema defaults when absent) are the rule's."""

    def check(ctx: NodeContext):
        import onnx
        from onnx import helper

        schema = onnx.defs.get_schema(ctx.op, ctx.version, "")
        for name, value in rule.attrs:
            if name in ctx.attrs:
                got = ctx.attrs[name]
            else:
                default = schema.attributes[name].default_value
                got = helper.get_attribute_value(default) if default.name else None
            if got != value:
                return f"{ctx.op} with {name}={got!r} (lazyvic's {op.name} is {rule.op_type} with {name}={value!r})"
        return None

    return check


def derived_converter(op: OpDef, rule: OnnxNode) -> Converter:
    """The converter of ``rule.op_type`` that records primitive ``op``."""
    run, fold = _BY_KIND[op.kind]

    def convert(ctx: NodeContext, *values):
        return run(ctx, op, values, _attrs(rule, ctx, values))

    def fold_constants(ctx: NodeContext, *arrays):
        return fold(ctx, op, arrays, _attrs(rule, ctx, arrays))

    check = _fixed_attrs_check(rule, op) if rule.attrs else None
    return Converter(rule.op_type, convert, tuple(sorted(rule.since)), fold=fold_constants, check=check)


for _op in OPS.values():
    if isinstance(_op.onnx, OnnxNode) and _op.onnx.since:
        add(derived_converter(_op, _op.onnx))

__all__ = ["derived_converter", "matmul_keeping_dtype"]
