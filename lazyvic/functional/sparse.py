"""Lookups: ``one_hot`` and ``embedding`` (PyTorch's "sparse functions")."""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.creation import arange
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.tensor import Tensor, check_index_bounds, where
from lazyvic.trace.composite import mark


def one_hot(tensor: Tensor, num_classes: int = -1, dtype=dt.float32) -> Tensor:
    """(...) integer class indices -> (..., num_classes), 1 at each index (an elementwise compare).

    ``num_classes=-1`` takes ``max + 1`` (a sync point: the indices are computed). The result is
    ``dtype`` (float32 by default, where PyTorch returns int64). Raises DTypeError for a
    non-integer input."""
    target = tensor
    if target.dtype.category != 1:
        raise DTypeError(f"one_hot: expected an integer tensor of class indices, got {target.dtype.name}")
    if num_classes == -1:
        num_classes = int(target.amax().item()) + 1 if target.numel() else 0
    classes = arange(num_classes, device=target.device)
    return (target.unsqueeze(-1) == classes).to(dtype)


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by the integer ``input`` (any
    shape); the result has shape ``input.shape + (embedding_dim,)``. The VJP is a scatter-add
    into ``weight``'s rows; the row ``padding_idx`` gets no gradient (PyTorch's rule).

    ``max_norm``: the rows that ``input`` picks and whose ``norm_type``-norm exceeds it are first
    rescaled in ``weight`` itself, in place and without gradient, to norm ``max_norm`` (PyTorch's
    ``embedding_renorm_``, scale ``max_norm / (norm + 1e-7)``). ``scale_grad_by_freq``: each row's
    gradient is divided by how often its index occurs in ``input``. ``sparse=True`` is accepted and
    gives the same (dense) gradient.

    Raises DTypeError for a non-integer index and IndexError for an index out of range
    (at the op when the index is already computed, else when the plan runs).
    """
    if not isinstance(input, Tensor):
        input = Tensor(np.asarray(input))  # keep the dtype: float indices are refused, not truncated
    if input.dtype.category != 1:
        raise DTypeError(f"embedding: indices must be int32 or int64, got {input.dtype.name}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got {weight.shape}")
    if input.dtype is not dt.int64:
        input = input.long()
    check_index_bounds("embedding", input, weight.shape, 0)
    flat = input.reshape(-1)
    if padding_idx is not None and not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for {weight.shape[0]} embeddings")
    if max_norm is not None:
        _renorm_rows(weight, flat, float(max_norm), float(norm_type))
    rows = weight.index_select(0, flat)
    if padding_idx is not None and weight.requires_grad:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        rows = where((flat == padding_idx).unsqueeze(1), weight.detach().index_select(0, flat), rows)
    if scale_grad_by_freq and weight.requires_grad:
        counts = weight.new_zeros(weight.shape[0])._scatter_add(flat, flat.ones_like().to(weight.dtype), 0)
        # The value stays rows (r - r is exactly 0); the gradient of rows is scaled by 1 / count.
        frozen = rows.detach()
        rows = frozen + (rows - frozen) * (1.0 / counts.index_select(0, flat)).unsqueeze(1)
    return mark(rows.reshape(*input.shape, weight.shape[1]), "Gather", (weight, input), axis=0)


def _renorm_rows(weight: Tensor, flat: Tensor, max_norm: float, norm_type: float) -> None:
    """PyTorch's ``embedding_renorm_``: the picked rows of norm > max_norm scaled to max_norm, in place."""
    with modes.no_grad():
        w = weight.detach()
        a = w.abs()
        norm = (a * a).sum(1).sqrt() if norm_type == 2 else (a**norm_type).sum(1) ** (1.0 / norm_type)
        picked = weight.new_zeros(weight.shape[0])._scatter_add(flat, flat.ones_like().to(weight.dtype), 0) > 0
        scale = where(picked & (norm > max_norm), max_norm / (norm + 1e-7), 1.0)
        weight._assign(w * scale.unsqueeze(1))
