"""Indexing primitives along one dimension (PyTorch semantics).

gather(x, index; dim[, asked_by])   out[..i..] = x[..index[..i..]..]   (index int64, shape of out)
scatter_add(base, index, src; dim)   base with src added at index positions

A gather checks its indices: the reference raises IndexError for one out of range (the
interpreter); a compiled plan inlines every gather in a kernel and checks its index before that
kernel runs (an index computed in the trace is stored first, then checked). Ops whose inputs are class indices (``one_hot``,
``cross_entropy``, ``nll_loss``: ``lazyvic.functional.sparse.checked_classes``) read a pending
target through a gather from ``arange(C)``, so its check runs when the plan runs; the optional
``asked_by`` attribute names that op in the error.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.ops.opdef import OpDef, register


def _check_index(opname, x_shape, idx_shape, idx_dtype, dim):
    if idx_dtype is not dt.int64 and idx_dtype is not dt.int32:
        raise DTypeError(f"{opname}: index must be int64 or int32, got {idx_dtype.name}")
    if len(idx_shape) != len(x_shape):
        raise ShapeError(f"{opname}: index shape {idx_shape} must have the rank of input shape {x_shape}")
    if not 0 <= dim < len(x_shape):
        raise LIndexError(f"{opname}: dim {dim} out of range for shape {x_shape}")
    for i, (n, m) in enumerate(zip(x_shape, idx_shape)):
        if i != dim and m > n:
            raise ShapeError(f"{opname}: index shape {idx_shape} larger than input shape {x_shape} at dim {i}")


def _gather_infer(shapes, dtypes, at):
    _check_index("gather", shapes[0], shapes[1], dtypes[1], at["dim"])
    return shapes[1], dtypes[0]


def index_error(opname: str, bad: int, n: int, asked_by: str | None = None) -> LIndexError:
    """The error of an index ``bad`` outside ``0 .. n - 1``, the same from the reference, a CPU
    plan's check and a CUDA plan's error buffer: naming ``asked_by`` (``cross_entropy``...) for
    a class index checked through a gather (see the module docstring), else the op."""
    if asked_by is not None:
        return LIndexError(f"{asked_by}: class index {int(bad)} is out of range [0, {n})")
    return LIndexError(f"{opname}: index {int(bad)} out of range for dimension of size {n}")


def _bounds(opname, idx, n, asked_by=None):
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise index_error(opname, idx[(idx < 0) | (idx >= n)].ravel()[0], n, asked_by)


def _gather_ref(x, at):
    src, idx = x
    dim = at["dim"]
    _bounds("gather", idx, src.shape[dim], at.get("asked_by"))
    src = src[tuple(slice(0, m) if i != dim else slice(None) for i, m in enumerate(idx.shape))]
    return np.take_along_axis(src, idx.astype(np.int64), axis=dim)


def _gather_vjp(g, x, out, at):
    base = x[0].zeros_like()
    return base._scatter_add(x[1], g, at["dim"]), None


def _scatter_infer(shapes, dtypes, at):
    _check_index("scatter_add", shapes[0], shapes[1], dtypes[1], at["dim"])
    if shapes[1] != shapes[2]:
        raise ShapeError(f"scatter_add: index shape {shapes[1]} and src shape {shapes[2]} must be equal")
    if dtypes[0] is not dtypes[2]:
        raise DTypeError(f"scatter_add: base {dtypes[0].name} and src {dtypes[2].name} must have equal dtypes")
    return shapes[0], dtypes[0]


def _scatter_ref(x, at):
    base, idx, src = x
    dim = at["dim"]
    _bounds("scatter_add", idx, base.shape[dim])
    out = np.array(base, copy=True)
    grids = np.indices(idx.shape, sparse=True)
    where = tuple(idx.astype(np.int64) if i == dim else grids[i] for i in range(idx.ndim))
    # One element at a time in the order of index's positions, in the output's dtype: the order
    # and the rounding of the compiled kernel (lowering/kernel_lib.scatter_add_into), so both
    # give the same bits. (Summing duplicates in float64 with bincount, as before, rounded
    # otherwise: LAZYVIC_CHECK flagged embedding and max-pool gradients 1 ulp apart. NumPy 2's
    # add.at is as fast: 3.8 ms against 5.3 ms for 1024 x 128 rows into 1000.)
    np.add.at(out, where, src)
    return out


def _scatter_vjp(g, x, out, at):
    return g, None, g._gather(x[1], at["dim"])


def _index_onnx(b, names, at):
    if b.dtype_of(names[1]) != "int64":
        names = [names[0], b.node("Cast", [names[1]], to=b.onnx_dtype("int64"))] + names[2:]
    return names


def _scatter_add_onnx(b, names, at, shape, dtype):
    if b.opset < 16:
        return None  # ScatterElements has reduction="add" from opset 16 on
    return b.node("ScatterElements", _index_onnx(b, names, at), axis=at["dim"], reduction="add")


register(
    OpDef(
        "gather",
        "gather",
        2,
        _gather_infer,
        _gather_ref,
        vjp=_gather_vjp,
        onnx=lambda b, names, at, shape, dtype: b.node("GatherElements", _index_onnx(b, names, at), axis=at["dim"]),
    )
)
register(OpDef("scatter_add", "scatter", 3, _scatter_infer, _scatter_ref, vjp=_scatter_vjp, onnx=_scatter_add_onnx))
