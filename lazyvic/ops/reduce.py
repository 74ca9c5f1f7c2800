"""Reduction primitives.

``axes`` is a sorted tuple of axes; the output keeps them with size 1 (the
front end reshapes when ``keepdim=False``). Code generation reads ``reduce_init``
(``dtype -> [(accumulator suffix, initial literal)]``) and ``reduce_combine``
(``(accumulators, value, flat_r_index, dtype) -> statements``); the result is the
first accumulator, or the one named by the op.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.ops import numerics
from lazyvic.ops.elementwise import const
from lazyvic.ops.opdef import OpDef, register


def _reduce_infer(opname):
    def infer(shapes, dtypes, attrs):
        shape = shapes[0]
        axes = attrs["axes"]
        for a in axes:
            if not 0 <= a < len(shape):
                raise LIndexError(f"{opname}: axis {a} out of range for shape {shape}")
        if opname in ("max", "min", "argmax") and any(shape[a] == 0 for a in axes):
            raise LIndexError(f"{opname}: cannot reduce over an empty axis of shape {shape}")
        out = tuple(1 if i in axes else s for i, s in enumerate(shape))
        d = dtypes[0]
        if opname == "argmax":
            return out, dt.int64
        if d is dt.bool_:
            raise DTypeError(f"{opname}: bool input; cast it first (e.g. .long())")
        return out, d

    return infer


def _lowest(d: dt.DType):
    if d is dt.bool_:
        return False
    return -np.inf if d.is_floating_point else int(np.iinfo(d.np).min)


def _highest(d: dt.DType):
    if d is dt.bool_:
        return True
    return np.inf if d.is_floating_point else int(np.iinfo(d.np).max)


def _lit(d, v):
    if isinstance(v, float) and np.isinf(v):
        return f"{'f32' if d.compute is dt.float32 else 'f64'}({'-' if v < 0 else ''}np.inf)"
    return const(d, v)


def _reduce_onnx(op_type: str, axes_input_since: int):
    """ONNX Reduce* keeping the reduced axes; ``axes`` is an input from ``axes_input_since`` on."""

    def rule(b, names, at, shape, dtype):
        axes = list(at["axes"])
        if not axes:
            return b.node("Identity", names)
        if b.opset >= axes_input_since:
            return b.node(op_type, [names[0], b.ints(axes, "axes")], keepdims=1)
        return b.node(op_type, names, axes=axes, keepdims=1)

    return rule


def _accumulate(d, float_fn: str, other: str):
    """The accumulation call of a reduction: the reassociable kernel_lib step for floats."""
    return float_fn if d.is_floating_point else other


def _sum_ref(x, at):
    a = np.asarray(x[0])
    if a.dtype.kind == "f":  # the kernels' lane order (ops/numerics.py)
        return numerics.lane_sum(a, at["axes"])
    return np.sum(a, axis=at["axes"], keepdims=True, dtype=a.dtype)


def _prod_ref(x, at):
    a = np.asarray(x[0])
    if a.dtype.kind == "f":  # row-major order, as the kernels multiply
        return numerics.ordered_prod(a, at["axes"])
    return np.prod(a, axis=at["axes"], keepdims=True, dtype=a.dtype)


def _sum_vjp(g, x, out, attrs):
    return (g.expand(x[0].shape),)


def _extreme_vjp(g, x, out, attrs):
    # Ties share the gradient equally (PyTorch's amax/amin rule).
    mask = (x[0] == out.expand(x[0].shape)).to(g.dtype)
    count = mask._reduce("sum", attrs["axes"])
    return ((g / count).expand(x[0].shape) * mask,)


register(
    OpDef(
        "sum",
        "reduce",
        1,
        _reduce_infer("sum"),
        _sum_ref,
        vjp=_sum_vjp,
        reduce_init=lambda d: [("", const(d, 0))],
        reduce_combine=lambda acc, v, r, d: [
            f"{acc[0]} = acc_add({acc[0]}, {v})" if d.is_floating_point else f"{acc[0]} = {acc[0]} + {v}"
        ],
        onnx=_reduce_onnx("ReduceSum", 13),
    )
)
register(
    OpDef(
        "max",
        "reduce",
        1,
        _reduce_infer("max"),
        lambda x, at: numerics.extreme(x[0], at["axes"], largest=True),
        vjp=_extreme_vjp,
        reduce_init=lambda d: [("", _lit(d, _lowest(d)))],
        reduce_combine=lambda acc, v, r, d: [f"{acc[0]} = {_accumulate(d, 'acc_max', 'max')}({acc[0]}, {v})"],
        onnx=_reduce_onnx("ReduceMax", 18),
    )
)
register(
    OpDef(
        "min",
        "reduce",
        1,
        _reduce_infer("min"),
        lambda x, at: numerics.extreme(x[0], at["axes"], largest=False),
        vjp=_extreme_vjp,
        reduce_init=lambda d: [("", _lit(d, _highest(d)))],
        reduce_combine=lambda acc, v, r, d: [f"{acc[0]} = {_accumulate(d, 'acc_min', 'min')}({acc[0]}, {v})"],
        onnx=_reduce_onnx("ReduceMin", 18),
    )
)


def _shift_in_one(t, toward_end: bool):
    """``t`` moved one place along its last axis (toward its end, or its start), a 1 coming in."""
    n, lead = t.shape[-1], ((0, 0),) * (t.ndim - 1)
    one = t.new_ones(*t.shape[:-1], 1)
    if n == 1:
        return one
    if toward_end:
        return one._pad(lead + ((0, n - 1),)) + t.narrow(-1, 0, n - 1)._pad(lead + ((1, 0),))
    return t.narrow(-1, 1, n - 1)._pad(lead + ((0, 1),)) + one._pad(lead + ((n - 1, 0),))


def _exclusive_products(y):
    """Along the last axis of ``y``: the product of every other element, from cumulative products
    from both ends (no division, so zeros in ``y`` are right)."""
    before = _shift_in_one(y.cumprod(-1), toward_end=True)
    after = _shift_in_one(y.flip(-1).cumprod(-1).flip(-1), toward_end=False)
    return before * after


def _prod_vjp(g, x, out, attrs):
    # d prod / d x_i = the product of the other elements of x_i's group (PyTorch's rule, zeros included).
    a, axes = x[0], attrs["axes"]
    keep = [i for i in range(a.ndim) if i not in axes]
    perm = keep + list(axes)
    moved = a.permute(*perm)
    grouped = moved.reshape(*moved.shape[: len(keep)], -1)
    others = _exclusive_products(grouped).reshape(*moved.shape)
    inverse = [perm.index(i) for i in range(a.ndim)]
    return ((g.expand(*a.shape).permute(*perm) * others).permute(*inverse),)


register(
    OpDef(
        "prod",
        "reduce",
        1,
        _reduce_infer("prod"),
        _prod_ref,
        vjp=_prod_vjp,
        reduce_init=lambda d: [("", const(d, 1))],
        reduce_combine=lambda acc, v, r, d: [f"{acc[0]} = {acc[0]} * {v}"],
        onnx=_reduce_onnx("ReduceProd", 18),
    )
)


def _argmax_ref(x, at):
    (axis,) = at["axes"]
    return np.argmax(x[0], axis=axis, keepdims=True).astype(np.int64)


def _argmax_init(d):
    return [("_i", "i64(0)"), ("_v", _lit(d, _lowest(d)))]


def _argmax_combine(acc, v, r, d):
    # Strict '>' keeps the first maximum; for floats the first NaN wins and stays, as in
    # NumPy and PyTorch.
    cond = f"{v} > {acc[1]}"
    if d.is_floating_point:
        cond = f"{cond} or ({v} != {v} and {acc[1]} == {acc[1]})"
    return [f"if {cond}:", f"    {acc[1]} = {v}", f"    {acc[0]} = {r}"]


register(
    OpDef(
        "argmax",
        "reduce",
        1,
        _reduce_infer("argmax"),
        _argmax_ref,
        differentiable=False,
        reduce_init=_argmax_init,
        reduce_combine=_argmax_combine,
        onnx=lambda b, names, at, shape, dtype: b.node("ArgMax", names, axis=at["axes"][0], keepdims=1),
    )
)
