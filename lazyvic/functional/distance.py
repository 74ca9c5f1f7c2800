"""Distances and the losses built on them: ``cosine_similarity``, ``pairwise_distance``, ``cdist``,
``cosine_embedding_loss``, ``triplet_margin_loss``.

Formulas are those of PyTorch's documentation of each function (``torch.nn.functional.
cosine_similarity``, ``pairwise_distance``, ``torch.cdist``, ``torch.nn.CosineEmbeddingLoss``,
``TripletMarginLoss``) and of its implementation where the documentation leaves a choice open
(``aten/src/ATen/native/Distance.cpp``, ``Loss.cpp``): where ``eps`` goes, and the gradient at a
zero norm, which PyTorch's norm backward and ``_cdist_backward`` define as 0. Each is a
composite of reductions and elementwise ops, so autograd and fusion need nothing of their own.
Float16 and bfloat16 inputs are computed in float32 and rounded once (PyTorch's opmath).
"""

from __future__ import annotations

import math

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.functional.loss import _reduce, _reduction
from lazyvic.shapes import broadcast_shapes, norm_axis
from lazyvic.tensor import Tensor, where

_COMPUTE_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def _check_tensor(name: str, what: str, t) -> None:
    if not isinstance(t, Tensor):
        raise DTypeError(f"{name}: {what} must be a lazyvic.Tensor, got {type(t).__name__}")


def _opmath(name: str, *tensors: Tensor) -> tuple:
    """The tensors in their common (PyTorch-promoted) dtype, float32 for the half types, and
    that common dtype (the result's). Raises DTypeError when it is not floating-point."""
    common = tensors[0].dtype
    for t in tensors[1:]:
        common = dt.promote(common, t.dtype)
    if not common.is_floating_point:
        dtypes = ", ".join(t.dtype.name for t in tensors)
        raise DTypeError(f"{name}: expected floating-point inputs (or a floating common dtype), got {dtypes}")
    compute = dt.float32 if common.is_half else common
    return tuple(t if t.dtype is compute else t.to(compute) for t in tensors), common


def _rounded(out: Tensor, common) -> Tensor:
    return out.to(common) if out.dtype is not common else out


def _sqrt_zero_grad(s: Tensor) -> Tensor:
    """``sqrt(s)`` of ``s >= 0`` whose gradient at ``s == 0`` is 0 (not inf * 0 = NaN), as
    PyTorch's norm backward masks a zero norm. NaN stays NaN."""
    zero = s == 0
    return where(zero, 0.0, where(zero, 1.0, s).sqrt())


def _root_zero_grad(s: Tensor, q: float) -> Tensor:
    """``s ** q`` of ``s >= 0`` with gradient 0 at ``s == 0`` (see :func:`_sqrt_zero_grad`)."""
    zero = s == 0
    return where(zero, 0.0, where(zero, 1.0, s) ** q)


def _vector_norm(x: Tensor, p: float, axis: int, keepdim: bool = False) -> Tensor:
    """``||x||_p`` over ``axis`` with the values and gradients of PyTorch's ``norm``: ``p`` 0 counts
    the non-zeros (gradient 0), inf / -inf take the largest / smallest ``|x|`` (tied extremes
    share the gradient), other ``p`` are ``(sum |x|^p)^(1/p)``; the gradient where the norm (or,
    for p < 1, an element) is 0 is 0."""
    if x.ndim == 0:  # PyTorch reduces a 0-d tensor over dim 0 or -1 to a 0-d tensor
        return _vector_norm(x.reshape(1), p, 0)
    a = x.abs()
    if p == 0:
        # 1 where |x| != 0, else |x| itself (= 0): the count, with a (zero) gradient, as PyTorch.
        return where(a != 0, 1.0, a).sum(axis, keepdim)
    if p == math.inf:
        return a.amax(axis, keepdim)
    if p == -math.inf:
        return a.amin(axis, keepdim)
    if p == 1:
        return a.sum(axis, keepdim)
    if p == 2:
        return _sqrt_zero_grad((x * x).sum(axis, keepdim))
    if p < 0:  # |0|^p = inf, and the norm 0: no gradient to guard
        return (a**p).sum(axis, keepdim) ** (1.0 / p)
    zero = a == 0
    powered = where(zero, 0.0, where(zero, 1.0, a) ** p)  # p < 1: |x|^(p-1) at 0 would be inf
    return _root_zero_grad(powered.sum(axis, keepdim), 1.0 / p)


# ================================================================= similarity and distances
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine similarity along ``dim``, as ``torch.nn.functional.cosine_similarity``:
    ``sum(x1 / max(||x1||_2, eps) * x2 / max(||x2||_2, eps))`` over ``dim``.

    Each norm is clamped separately (the formula of PyTorch >= 1.12's documentation and
    ``Distance.cpp``, which keeps the result in [-1, 1]); as there, the clamp is applied without
    gradient, so the gradient is that of the unclamped norm (0 at a zero vector).

    x1 and x2 broadcast to a common shape; ``dim`` is an axis of it and is removed from the
    result. Integer inputs are promoted with the other's floating dtype (PyTorch's
    ``result_type``). Raises ShapeError for shapes that do not broadcast, DTypeError when the
    common dtype is not floating-point, IndexError for ``dim`` out of range.
    """
    name = "cosine_similarity"
    _check_tensor(name, "x1", x1)
    _check_tensor(name, "x2", x2)
    shape = broadcast_shapes(x1.shape, x2.shape, name)
    axis = norm_axis(dim, len(shape), name)
    (x1, x2), common = _opmath(name, x1, x2)
    if not shape:
        x1, x2, axis = x1.reshape(1), x2.reshape(1), 0
    else:
        x1, x2 = x1.broadcast_to(shape), x2.broadcast_to(shape)

    def clamped_norm(x: Tensor) -> Tensor:
        norm = _sqrt_zero_grad((x * x).sum(axis, keepdim=True))
        # PyTorch clamps a clone of the norm in place under no_grad: the forward value is
        # max(norm, eps) while the gradient flows as through the unclamped norm.
        return norm + (norm.clamp(min=eps) - norm).detach()

    return _rounded(((x1 / clamped_norm(x1)) * (x2 / clamped_norm(x2))).sum(axis), common)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """The p-norm distance of the vectors in the last axis, as
    ``torch.nn.functional.pairwise_distance``: ``||x1 - x2 + eps||_p`` (``eps`` is added to each
    difference, as PyTorch's ``at::norm(x1 - x2 + eps, p, -1)``).

    x1 (..., D) and x2 broadcast together; the result drops the last axis (keeps it as 1 with
    ``keepdim``). ``p`` may be any real or +-inf: 0 counts the non-zero differences, inf / -inf
    take the largest / smallest. The gradient where the distance is 0 is 0, as PyTorch. Raises
    ShapeError for shapes that do not broadcast, DTypeError for bool inputs.
    """
    name = "pairwise_distance"
    _check_tensor(name, "x1", x1)
    _check_tensor(name, "x2", x2)
    broadcast_shapes(x1.shape, x2.shape, name)
    if x1.dtype is dt.bool_ or x2.dtype is dt.bool_:
        raise DTypeError(f"{name}: bool inputs are not supported (x1 {x1.dtype.name}, x2 {x2.dtype.name})")
    diff = x1 - x2 + eps  # a float eps makes integer inputs float32, as in PyTorch
    (diff,), common = _opmath(name, diff)
    return _rounded(_vector_norm(diff, p, -1, keepdim), common)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """The p-norm distance between each pair of rows of x1 and x2, as ``torch.cdist``:
    ``out[..., i, j] = ||x1[..., i, :] - x2[..., j, :]||_p``.

    x1 (B..., P, M) and x2 (B'..., R, M), of one floating dtype, batch axes broadcasting ->
    (broadcast(B, B')..., P, R); 2-D inputs give (P, R). ``p`` >= 0: 0 counts the differing
    features, inf takes the largest difference. Gradients are those of PyTorch's
    ``_cdist_backward`` (0 where a distance is 0), except that tied largest differences share an
    inf-norm gradient (PyTorch gives each the whole gradient).

    ``compute_mode`` is checked and otherwise ignored: the distances are always computed from the
    differences, as PyTorch's ``'donot_use_mm_for_euclid_dist'`` (its matrix-product route for
    p = 2, the default when P or R > 25, differs from that by rounding only).

    Raises ShapeError for inputs of fewer than 2 axes, different M or batch axes that do not
    broadcast; DTypeError for non-floating or different dtypes; ArgumentError (a ValueError) for
    a negative ``p`` or an unknown ``compute_mode``.
    """
    name = "cdist"
    if compute_mode not in _COMPUTE_MODES:
        raise ArgumentError(
            f"{name}: {compute_mode!r} is not a valid value for compute_mode (expected one of "
            f"{', '.join(map(repr, _COMPUTE_MODES))})"
        )
    _check_tensor(name, "x1", x1)
    _check_tensor(name, "x2", x2)
    for what, t in (("x1", x1), ("x2", x2)):
        if t.ndim < 2:
            raise ShapeError(f"{name}: expected {what} of at least 2 dimensions (..., points, features), got {t.shape}")
        if not t.dtype.is_floating_point:
            raise DTypeError(f"{name}: only floating-point inputs are supported, {what} is {t.dtype.name}")
    if x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(
            f"{name}: x1 {x1.shape} and x2 {x2.shape} must have the same number of columns "
            f"({x1.shape[-1]} != {x2.shape[-1]})"
        )
    if x1.dtype is not x2.dtype:
        raise DTypeError(f"{name}: x1 and x2 must have the same dtype, got {x1.dtype.name} and {x2.dtype.name}")
    if not p >= 0:
        raise ArgumentError(f"{name}: only non-negative p values are supported, got p={p}")
    broadcast_shapes(x1.shape[:-2], x2.shape[:-2], f"{name} (batch axes of {x1.shape} and {x2.shape})")
    (x1, x2), common = _opmath(name, x1, x2)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, R, M)
    if x1.shape[-1] == 0:  # no features: every distance is 0 (an inf-norm has nothing to take)
        return _rounded(diff.sum(-1), common)
    return _rounded(_vector_norm(diff, p, -1), common)


# ================================================================= losses
def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Cosine embedding loss, as ``torch.nn.functional.cosine_embedding_loss``:
    ``l_n = 1 - cos(x1_n, x2_n)`` where ``y_n = 1``, ``max(0, cos(x1_n, x2_n) - margin)`` where
    ``y_n = -1``, and 0 for any other target value; with PyTorch's
    ``cos = <x1, x2> / sqrt((||x1||^2 + 1e-12) * (||x2||^2 + 1e-12))`` (``Loss.cpp``).

    input1 and input2 (N, D) with target (N,), or (D,) with a 0-d target; the inputs broadcast
    together. Raises ShapeError for other ranks or shapes that do not broadcast, ValueError for
    an unknown reduction.
    """
    name = "cosine_embedding_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    for what, t in (("input1", input1), ("input2", input2), ("target", target)):
        _check_tensor(name, what, t)
    if target.ndim not in (0, 1):
        raise ShapeError(f"{name}: expected a 0-d or 1-d target (multi-target is not supported), got {target.shape}")
    rank = target.ndim + 1
    if input1.ndim != rank or input2.ndim != rank:
        raise ShapeError(
            f"{name}: a {target.ndim}-d target {target.shape} expects {rank}-d inputs, "
            f"got {input1.shape} and {input2.shape}"
        )
    rows = broadcast_shapes(input1.shape, input2.shape, name)[:-1]
    try:
        broadcast_shapes(rows, target.shape)
    except ShapeError:
        raise ShapeError(
            f"{name}: target {target.shape} does not fit inputs {input1.shape} and {input2.shape}"
        ) from None
    (input1, input2), common = _opmath(name, input1, input2)
    axis = target.ndim
    prod = (input1 * input2).sum(axis)
    mag1 = (input1 * input1).sum(axis) + 1e-12
    mag2 = (input2 * input2).sum(axis) + 1e-12
    cos = prod / (mag1 * mag2).sqrt()
    losses = where(target == 1, 1.0 - cos, 0.0) + where(target == -1, (cos - margin).clamp(min=0.0), 0.0)
    return _rounded(_reduce(losses, reduction), common)


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Triplet margin loss (Schroff et al. 2015), as ``torch.nn.functional.triplet_margin_loss``:
    ``l_n = max(margin + d(a_n, p_n) - d(a_n, n_n), 0)`` with ``d`` the :func:`pairwise_distance`
    of norm ``p`` and ``eps``; with ``swap`` (Balntas et al. 2016) ``d(a_n, n_n)`` is replaced by
    ``min(d(a_n, n_n), d(p_n, n_n))``.

    anchor, positive, negative (N, D) or (D,) (any equal rank; they broadcast, distances over the
    last axis). Raises ShapeError for different ranks, ArgumentError (a ValueError) for
    ``margin <= 0``, ValueError for an unknown reduction.
    """
    name = "triplet_margin_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    if not margin > 0:
        raise ArgumentError(f"{name}: margin must be greater than 0, got {margin}")
    for what, t in (("anchor", anchor), ("positive", positive), ("negative", negative)):
        _check_tensor(name, what, t)
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise ShapeError(
            f"{name}: anchor, positive and negative must have the same number of dimensions, got "
            f"{anchor.shape}, {positive.shape} and {negative.shape}"
        )
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0.0), reduction)
