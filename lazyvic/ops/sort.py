"""Ordering primitive: the stable sorting permutation along one axis.

argsort(x; dim, descending)     int64 indices that sort ``x`` along ``dim`` (same shape)

The front end builds ``sort``, ``topk``, ``kthvalue``, ``median`` and ``msort`` on it: the values
are ``x.gather(dim, indices)``, so their gradient is scattered back to the positions the values
came from (the gather's VJP). The order is PyTorch's: stable (equal elements keep their order, in
both directions), NaN greater than every number (last ascending, first descending), ``-0.0`` equal
to ``0.0``. No kernel yet: the lowering runs it as its NumPy reference (a reported step).
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import IndexError as LIndexError
from lazyvic.ops.opdef import OpDef, register


def _argsort_infer(shapes, dtypes, at):
    shape, dim = shapes[0], at["dim"]
    if not 0 <= dim < max(len(shape), 1):
        raise LIndexError(f"argsort: dim {dim} out of range for shape {shape}")
    return shape, dt.int64


def argsort_reference(x: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    """Stable argsort along ``dim`` with PyTorch's order (NaN largest, -0.0 == 0.0)."""
    if x.ndim == 0:
        return np.zeros((), dtype=np.int64)
    if not descending:
        # NumPy's stable sort already puts NaN last and keeps -0.0 and 0.0 in their order.
        return np.argsort(x, axis=dim, kind="stable").astype(np.int64)
    # Descending and stable: sort the ranks of the values (equal values, and all NaNs, share a
    # rank; NaN has the highest), negated, so ties keep their order.
    _, rank = np.unique(x, return_inverse=True)
    rank = rank.reshape(x.shape).astype(np.int64)
    return np.argsort(-rank, axis=dim, kind="stable").astype(np.int64)


def _argsort_onnx(b, names, at, shape, dtype):
    """ONNX TopK over the whole axis (sorted=1), its indices output. ONNX leaves the order of
    ties to the runtime."""
    if not shape:
        return b.const(np.zeros((), np.int64), "argsort")
    dim = at["dim"]
    values, indices = b.fresh("TopK"), b.fresh("TopK_indices")
    k = b.ints([shape[dim]])
    b.nodes.append(
        b._onnx.helper.make_node(
            "TopK", [names[0], k], [values, indices], name=values, axis=dim, largest=int(at["descending"]), sorted=1
        )
    )
    return indices


# A "sort" op is a library op (lowering/fusion.py LIBRARY_KINDS) without a kernel yet: compiled
# CPU and CUDA plans run its NumPy reference as a step, reported in the plan's fallbacks.
SORT_KIND = "sort"

register(
    OpDef(
        "argsort",
        SORT_KIND,
        1,
        _argsort_infer,
        lambda x, at: argsort_reference(x[0], at["dim"], at["descending"]),
        differentiable=False,
        onnx=_argsort_onnx,
    )
)
