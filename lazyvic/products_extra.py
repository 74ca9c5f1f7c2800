"""More of PyTorch's products: ``addbmm``, ``addr``, ``chain_matmul``, written with the products of
:mod:`lazyvic.products` (so they lower to its matmul and differentiate as it does). Written over
the tensors they are handed, so this module sits below :mod:`lazyvic.tensor`, whose methods
``addbmm`` and ``addr`` are.
"""

from __future__ import annotations

import warnings

from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.products import _scaled_sum


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])`` for (b, n, m) and (b, m, p)
    batches (``torch.addbmm``): (n, p), ``input`` broadcast to it; ``beta = 0`` does not read
    ``input``. Computed as one (n, b*m) @ (b*m, p) product.

    Raises:
        ShapeError: batches that are not 3-D or do not match."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise ShapeError(f"addbmm: batch1 and batch2 must be 3-D tensors, got {batch1.shape} and {batch2.shape}")
    b, n, m = batch1.shape
    if batch2.shape[0] != b or batch2.shape[1] != m:
        raise ShapeError(f"addbmm: batch1 {batch1.shape} and batch2 {batch2.shape} do not match (b, n, m) @ (b, m, p)")
    p = batch2.shape[2]
    product = batch1.permute(1, 0, 2).reshape(n, b * m).mm(batch2.reshape(b * m, p))
    return _scaled_sum("addbmm", input, product, beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * input + alpha * outer(vec1, vec2)`` (``torch.addr``): (n, m), ``input``
    broadcast to it; ``beta = 0`` does not read ``input``.

    Raises:
        ShapeError: vectors that are not 1-D."""
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise ShapeError(f"addr: expected 1-D vectors, got {vec1.shape} and {vec2.shape}")
    return _scaled_sum("addr", input, vec1.outer(vec2), beta, alpha)


def chain_matmul(*matrices):
    """The product of the 2-D ``matrices`` from left to right (``torch.chain_matmul``,
    deprecated in PyTorch for ``torch.linalg.multi_dot``; it warns as PyTorch does). One matrix
    gives a copy of it.

    Raises:
        ArgumentError: no matrices. ShapeError: a matrix that is not 2-D, or sizes that do not chain."""
    warnings.warn(
        "torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
        "torch.linalg.multi_dot instead, which accepts a list of two or more tensors rather than "
        "multiple parameters.",
        UserWarning,
        stacklevel=2,
    )
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    if not matrices:
        raise ArgumentError("chain_matmul(): Expected one or more matrices")
    for i, m in enumerate(matrices):
        if m.ndim != 2:
            raise ShapeError(
                f"chain_matmul(): Tensor dimension is {m.ndim}, expected 2 instead (matrix {i}, shape {m.shape})"
            )
    out = matrices[0].clone() if len(matrices) == 1 else matrices[0]
    for m in matrices[1:]:
        out = out.mm(m)
    return out
