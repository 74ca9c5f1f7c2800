"""``torch.sparse_coo_tensor``, ``torch.spmm`` and ``lazyvic.sparse.mm`` / ``addmm``, DENSE-BACKED.

lazyvic has no sparse layout: every tensor is dense. A COO tensor built here is the dense
tensor it stands for (duplicate indices summed, as ``coalesce()`` would), made lazily as a
``scatter_add`` of the values into zeros, so the gradient with respect to ``values`` works (a
gather). The sparse products are the dense ones; ``Tensor.to_sparse()`` / ``to_dense()`` /
``coalesce()`` return the tensor itself and ``is_sparse`` is False. Scripts written for sparse
tensors (graph convolutions over an adjacency matrix) run unchanged with the memory and time of
dense matrices: an (N, N) adjacency costs N * N elements.
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.tensor import Tensor
from lazyvic.transfer import device_arg


def _as_tensor(data, dtype=None) -> Tensor:
    return data if isinstance(data, Tensor) else Tensor(np.asarray(data), dtype=dtype)


def sparse_coo_tensor(
    indices,
    values,
    size=None,
    *,
    dtype=None,
    device=None,
    requires_grad: bool = False,
    check_invariants=None,
    is_coalesced=None,
) -> Tensor:
    """The dense tensor of the COO entries ``values[k]`` at ``indices[:, k]`` (``torch.sparse_coo_tensor``,
    dense-backed: see the module's docstring). ``indices``: (sparse_dim, nnz) integers (a tensor,
    array or list); ``values``: (nnz, *dense_dims); ``size``: the sparse sizes followed by the
    dense dims (default: each index's maximum + 1, read with a sync, and the values' trailing
    dims). Repeated indices add up. ``dtype`` casts the values (the result's dtype, default the
    values'). Differentiable with respect to ``values``; ``requires_grad=True`` makes the result
    a leaf that requires grad.

    Raises:
        ShapeError: indices not 2-D, a number of values other than the indices' columns, a ``size``
            of another rank than sparse_dim + dense dims or with trailing sizes other than the values'.
        DTypeError: indices that are not integers.
        ArgumentError: a negative index, or an index outside ``size``.
    """
    index = _as_tensor(indices)
    vals = _as_tensor(values)
    if index.dtype.category != 1:
        raise DTypeError(f"sparse_coo_tensor: indices must be an int64 tensor, got {index.dtype.name}")
    if index.ndim != 2:
        raise ShapeError(f"sparse_coo_tensor: indices must be sparse_dim x nnz, but got: {list(index.shape)}")
    sparse_dim, nnz = index.shape
    if vals.ndim == 0 or vals.shape[0] != nnz:
        raise ShapeError(
            f"sparse_coo_tensor: number of nnz in indices ({nnz}) must match the first dimension of values "
            f"(shape {vals.shape})"
        )
    if dtype is not None:
        vals = vals.to(dtype)
    dense_dims = tuple(vals.shape[1:])
    host = np.asarray(index.numpy()).astype(np.int64)  # a sync for a pending index: its range is checked
    if host.size and host.min() < 0:
        raise ArgumentError(f"sparse_coo_tensor: found negative index {int(host.min())}")
    if size is None:
        sparse_sizes = tuple(int(v) + 1 for v in host.max(1)) if nnz else (0,) * sparse_dim
        size = sparse_sizes + dense_dims
    size = tuple(int(s) for s in size)
    if len(size) != sparse_dim + len(dense_dims) or size[sparse_dim:] != dense_dims:
        raise ShapeError(
            f"sparse_coo_tensor: size {size} does not fit {sparse_dim} sparse dims and values of shape {vals.shape}"
        )
    for k in range(sparse_dim):
        if nnz and host[k].max() >= size[k]:
            raise ArgumentError(
                f"sparse_coo_tensor: size is inconsistent with indices: for dim {k}, size is {size[k]} but found "
                f"index {int(host[k].max())}"
            )
    strides = (
        np.cumprod((size[1:sparse_dim] + (1,))[::-1])[::-1].astype(np.int64) if sparse_dim else np.zeros(0, np.int64)
    )
    flat = (host * strides.reshape(-1, 1)).sum(0) if sparse_dim else np.zeros(nnz, np.int64)
    place = device_arg(device, "sparse_coo_tensor") if device is not None else vals.device
    vals = vals.to(place)
    position = vals.new_tensor(flat.astype(np.int64), dtype=dt.int64)
    dense = vals.new_zeros(math.prod(size[:sparse_dim]), *dense_dims).index_add(0, position, vals).reshape(*size)
    if requires_grad:
        dense = dense.detach().requires_grad_(True)
    return dense


def mm(mat1: Tensor, mat2: Tensor) -> Tensor:
    """``torch.sparse.mm``: the matrix product (dense-backed: ``mat1.mm(mat2)``)."""
    return mat1.mm(mat2)


def spmm(mat1: Tensor, mat2: Tensor) -> Tensor:
    """``torch.spmm``: the matrix product of a (dense-backed) sparse matrix and a dense one, ``mm``."""
    return mat1.mm(mat2)


def addmm(mat: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1) -> Tensor:
    """``torch.sparse.addmm``: ``beta * mat + alpha * mat1 @ mat2`` (dense-backed ``addmm``)."""
    return mat.addmm(mat1, mat2, beta=beta, alpha=alpha)


__all__ = ["sparse_coo_tensor", "spmm", "mm", "addmm"]
