"""Lookups: ``one_hot`` and ``embedding`` (PyTorch's "sparse functions")."""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic import ops as optable
from lazyvic.creation import arange
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.functions import searchsorted
from lazyvic.tensor import Tensor, check_index_bounds, where
from lazyvic.trace.composite import mark


def values_now(t: Tensor) -> np.ndarray | None:
    """The values of ``t`` when they are known without running a plan: a realized CPU tensor, or
    movement ops (reshape, slice, permute, expand, ...) and casts of one, applied now through
    their NumPy references (views, or small copies); else None."""
    node, chain = t._node, []
    while node.op != "buffer":
        opdef = optable.OPS.get(node.op)
        if opdef is None or len(node.inputs) != 1 or (opdef.kind != "movement" and node.op != "cast"):
            return None
        chain.append((opdef, dict(node.attrs), node.dtype))
        node = node.inputs[0]
    if node.device != "cpu":
        return None
    a = node.data
    for opdef, attrs, dtype in reversed(chain):
        a = np.asarray(opdef.reference([a], attrs), dtype=dtype.np)
    return a


def checked_classes(name: str, target: Tensor, classes: int, ignore_index: int | None = None) -> Tensor:
    """``target``, integer class indices, checked to lie in ``[0, classes)`` (or to equal
    ``ignore_index``); returns the target the op should read.

    A target whose values are known now (realized on the CPU, or views of such a tensor: the
    reshaped or sliced targets of a batch, see :func:`values_now`) is checked now. Any other
    (computed in the trace that computes the op; or on CUDA) is read through a ``gather`` from
    ``arange(classes)``, an
    identity on valid indices whose index check is the op table's (``ops/index.py``): it runs
    when the plan runs, so the error comes at the sync, as a gather's does.

    Raises:
        lazyvic.errors.IndexError: naming ``name``, the first bad index and the range.
    """
    data = values_now(target)
    if data is not None:
        bad = (data < 0) | (data >= classes)
        if ignore_index is not None:
            bad &= data != ignore_index
        if bad.any():
            also = "" if ignore_index is None else f", or ignore_index={ignore_index}"
            raise LIndexError(
                f"{name}: class index {int(data[bad].ravel()[0])} is out of range [0, {classes}){also} "
                f"(target shape {target.shape})"
            )
        return target
    index = target if ignore_index is None else where(target == ignore_index, 0, target)
    if index.dtype is not dt.int64 and index.dtype is not dt.int32:
        index = index.long()
    table = arange(classes, dtype=index.dtype, device=target.device)
    picked = Tensor.apply("gather", table, index.reshape(-1), dim=0, asked_by=name).reshape(*target.shape)
    picked = picked if picked.dtype is target.dtype else picked.to(target.dtype)
    return picked if ignore_index is None else where(target == ignore_index, target, picked)


def one_hot(tensor: Tensor, num_classes: int = -1, dtype=dt.float32) -> Tensor:
    """(...) integer class indices -> (..., num_classes), 1 at each index (an elementwise compare).

    ``num_classes=-1`` takes ``max + 1`` (a sync point: the indices are computed). The result is
    ``dtype`` (float32 by default, where PyTorch returns int64).

    Raises DTypeError for a non-integer input, IndexError for an index outside
    ``[0, num_classes)`` (at the op when the indices are already computed, else when the plan
    runs: see :func:`checked_classes`; PyTorch raises RuntimeError)."""
    target = tensor
    if target.dtype.category != 1:
        raise DTypeError(f"one_hot: expected an integer tensor of class indices, got {target.dtype.name}")
    if num_classes == -1:
        num_classes = int(target.amax().item()) + 1 if target.numel() else 0
    return one_hot_checked(checked_classes("one_hot", target, num_classes), num_classes, dtype)


def one_hot_checked(target: Tensor, num_classes: int, dtype=dt.float32) -> Tensor:
    """:func:`one_hot` of indices already checked (:func:`checked_classes`): 1 at each index in
    ``[0, num_classes)``, a row of zeros for any other."""
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


def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """Sums, means or maxima of bags of embeddings (``torch.nn.functional.embedding_bag``) ->
    (B, embedding_dim). ``input`` (B, N): B bags of N indices; or 1-D with ``offsets`` (B,) (with
    ``include_last_offset``: B + 1, the last the input's length), bag b holding
    ``input[offsets[b]:offsets[b + 1]]``. ``per_sample_weights`` (``input``'s shape; "sum" only)
    scale each embedding; indices equal to ``padding_idx`` are left out (of the count of a mean
    too); an empty bag gives zeros. ``max_norm``, ``norm_type`` and ``scale_grad_by_freq`` as
    :func:`embedding`. Computed as the lookup, then an index_add into the bags (``max``: a masked
    maximum over a (B, total) mask). Raises ShapeError for inputs or offsets of other ranks,
    ValueError for a bad ``mode``, per-sample weights outside "sum", or realized offsets that do
    not start at 0 and increase."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise ValueError(f"embedding_bag: per_sample_weights is only supported for mode='sum', got {mode!r}")
    if not isinstance(input, Tensor):
        input = Tensor(np.asarray(input))
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None when input is 2-D (B, N)")
        bags, per = input.shape
        seg = Tensor(np.repeat(np.arange(bags, dtype=np.int64), per)).to(input.device)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("embedding_bag: a 1-D input needs offsets")
        off = offsets if isinstance(offsets, Tensor) else Tensor(np.asarray(offsets, dtype=np.int64))
        if off.ndim != 1:
            raise ShapeError(f"embedding_bag: offsets must be 1-D, got shape {off.shape}")
        starts = off[:-1] if include_last_offset else off
        known = off._node.data if off._node.op == "buffer" and off.device == "cpu" else None
        if known is not None and len(known) and (known[0] != 0 or np.any(np.diff(known) < 0)):
            raise ValueError(f"embedding_bag: offsets must start at 0 and not decrease, got {known.tolist()[:8]}")
        bags = starts.shape[0]
        seg = searchsorted(starts, arange(input.shape[0], device=input.device), right=True) - 1  # each position's bag
    else:
        raise ShapeError(f"embedding_bag: input must be 1-D (with offsets) or 2-D, got shape {input.shape}")
    flat = input.reshape(-1)
    rows = embedding(flat, weight, None, max_norm, norm_type, scale_grad_by_freq)
    keep = None if padding_idx is None else flat != (padding_idx % weight.shape[0])
    dim = weight.shape[1]
    if mode == "max":
        mask = seg.unsqueeze(0) == arange(bags, device=input.device).unsqueeze(1)  # (B, total)
        if keep is not None:
            mask = mask & keep.unsqueeze(0)
        picked = where(mask.unsqueeze(2), rows.unsqueeze(0), -np.inf).amax(1)
        return where(mask.any(1).unsqueeze(1), picked, 0.0)
    scale = None if keep is None else keep.to(weight.dtype)
    if per_sample_weights is not None:
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ShapeError(
                f"embedding_bag: per_sample_weights {per_sample_weights.shape} must have the input's shape {input.shape}"
            )
        psw = per_sample_weights.reshape(-1).to(weight.dtype)
        scale = psw if scale is None else scale * psw
    if scale is not None:
        rows = rows * scale.unsqueeze(1)
    total = weight.new_zeros(bags, dim).index_add(0, seg, rows)
    if mode == "sum":
        return total
    ones = flat.ones_like().to(weight.dtype) if keep is None else keep.to(weight.dtype)
    count = weight.new_zeros(bags).index_add(0, seg, ones)
    return total / count.clamp(min=1.0).unsqueeze(1)


def _renorm_rows(weight: Tensor, flat: Tensor, max_norm: float, norm_type: float) -> None:
    """PyTorch's ``embedding_renorm_``: the picked rows of norm > max_norm scaled to max_norm, in place."""
    with modes.no_grad():
        w = weight.detach()
        a = w.abs()
        norm = (a * a).sum(1).sqrt() if norm_type == 2 else (a**norm_type).sum(1) ** (1.0 / norm_type)
        picked = weight.new_zeros(weight.shape[0])._scatter_add(flat, flat.ones_like().to(weight.dtype), 0) > 0
        scale = where(picked & (norm > max_norm), max_norm / (norm + 1e-7), 1.0)
        weight._assign(w * scale.unsqueeze(1))
