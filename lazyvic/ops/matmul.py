"""Batched matrix product: (..., M, K) @ (..., K, N) -> (..., M, N), equal batch dims.

The front end handles 1-D operands and broadcasts batch dimensions before
recording the op. Floating-point products are a BLAS call (NumPy's matmul on OpenBLAS; the
half types in float32, lazyvic/tensor.py); integer products stay integer and wrap on overflow,
as PyTorch's, through NumPy's exact integer matmul.
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import DTypeError, ShapeError
from lazyvic.ops.blas import in_pieces, matmul_into, matmul_views, run_products
from lazyvic.ops.movement import swap_last_two
from lazyvic.ops.opdef import OpDef, onnx_node, register


def _infer(shapes, dtypes, at):
    a, b = shapes
    if len(a) < 2 or len(a) != len(b) or a[:-2] != b[:-2] or a[-1] != b[-2]:
        raise ShapeError(f"matmul: shapes {a} and {b} do not fit (expected (..., M, K) @ (..., K, N))")
    if dtypes[0] is not dtypes[1] or dtypes[0].category == 0:
        raise DTypeError(f"matmul: expected equal numeric dtypes, got {dtypes[0].name} and {dtypes[1].name}")
    return a[:-1] + (b[-1],), dtypes[0]


def _swaps_last_two(t) -> bool:
    """Whether tensor ``t`` is a view swapping the last two axes of another (``w.T`` of a 2-D
    weight, ``k.transpose(-1, -2)``)."""
    node = t._node
    return node.op == "permute" and t.ndim >= 2 and tuple(dict(node.attrs)["perm"]) == swap_last_two(t.ndim)


def reference(x, at) -> np.ndarray:
    """``ops/blas.matmul_into`` (float32: ops/gemm's kernels where they apply, else NumPy's
    matmul); a 2-D float32/float64 product in the pieces of ``ops/blas.matmul_pieces`` (one call
    each, in order), as the CPU plans run it (their thread team may run the pieces side by side:
    the same calls, so the same bits)."""
    a, b = x
    if a.dtype == b.dtype and a.dtype in (np.float32, np.float64):
        out = np.empty(a.shape[:-1] + b.shape[-1:], dtype=a.dtype)
        if a.ndim == 2 and in_pieces(a.shape[0], b.shape[1], a.shape[1]):
            run_products(matmul_views(a, b, out))
        else:
            matmul_into(a, b, out)
        return out
    return np.matmul(a, b)


def _vjp(g, x, out, at):
    a, b = x
    ga = g @ b.transpose(-1, -2)
    if _swaps_last_two(b):
        # b = w^T (nn.Linear, an RNN's h @ w_hh^T): w's gradient is g^T a, computed as such, so
        # that its consumers (the optimizer, the sum over an unrolled loop's steps) read it
        # contiguously: the transposed product a^T g read back transposed made a 35-step LSTM's
        # sum of w_hh's gradients 3.6 ms, strided reads.
        return ga, (g.transpose(-1, -2) @ a).transpose(-1, -2)
    return ga, a.transpose(-1, -2) @ g


register(
    OpDef(
        "matmul",
        "matmul",
        2,
        _infer,
        reference,
        vjp=_vjp,
        onnx=onnx_node("MatMul", since=(1, 9, 13)),
    )
)
