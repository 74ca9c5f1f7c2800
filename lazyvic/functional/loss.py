"""Loss functions with PyTorch's names, arguments, defaults and reductions.

Formulas are those of PyTorch's documentation of each function (``torch.nn.NLLLoss``,
``CrossEntropyLoss``, ``BCELoss``, ``BCEWithLogitsLoss``, ``L1Loss``, ``MSELoss``,
``SmoothL1Loss``, ``HuberLoss``, ``KLDivLoss``, ``MarginRankingLoss``, ``HingeEmbeddingLoss``,
``SoftMarginLoss``, ``MultiLabelSoftMarginLoss``, ``MultiMarginLoss``, ``GaussianNLLLoss``,
``PoissonNLLLoss``) and of its implementation where the documentation leaves a choice open
(``aten/src/ATen/native/Loss.cpp``, ``LossNLL.cpp``, ``LossMultiMargin.cpp``): the weighted mean
divides by the sum of the weights of the counted targets; the logarithms of BCE are clamped at
-100. ``reduction`` is ``'none'``, ``'mean'`` or ``'sum'`` (``kl_div`` adds ``'batchmean'``); the
deprecated ``size_average``/``reduce`` map to it as PyTorch's ``legacy_get_string`` does.
"""

from __future__ import annotations

import math
import warnings

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.functional.activation import logsigmoid
from lazyvic.functional.sparse import checked_classes, one_hot_checked, values_now
from lazyvic.shapes import broadcast_shapes
from lazyvic.tensor import Tensor, where

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(name: str, size_average, reduce, reduction: str, allowed: tuple = _REDUCTIONS) -> str:
    """The reduction, from the deprecated ``size_average``/``reduce`` when either is given."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = ("mean" if size_average else "sum") if reduce else "none"
        warnings.warn(
            f"size_average and reduce args will be deprecated, please use reduction='{reduction}' instead.",
            stacklevel=3,
        )
    if reduction not in allowed:
        raise ValueError(f"{name}: reduction must be one of {', '.join(map(repr, allowed))}, got {reduction!r}")
    return reduction


def _reduce(losses: Tensor, reduction: str) -> Tensor:
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return losses.mean()
    return losses


def _check_float(name: str, what: str, t: Tensor) -> None:
    if not isinstance(t, Tensor):
        raise DTypeError(f"{name}: {what} must be a lazyvic.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise DTypeError(f"{name}: {what} must be a floating-point tensor, got {t.dtype.name}")


# ================================================================= class targets
def _check_targets(name: str, given: Tensor, target: Tensor, classes: int, ignore_index: int) -> Tensor:
    """``target`` (the rows of the ``given`` target), its class indices checked to lie in
    [0, classes) or equal ``ignore_index`` (PyTorch raises IndexError "Target out of bounds"):
    now when its values are known (realized, or views of a realized tensor), else when the plan
    runs (``lazyvic.functional.sparse.checked_classes``)."""
    data = values_now(given)
    if data is not None:
        bad = data[((data < 0) | (data >= classes)) & (data != ignore_index)]
        if bad.size:
            raise LIndexError(
                f"{name}: target {int(bad.ravel()[0])} is out of bounds for {classes} classes "
                f"(target shape {given.shape}, ignore_index={ignore_index})"
            )
        return target
    return checked_classes(name, target, classes, ignore_index)


def _class_rows(name: str, input: Tensor, target: Tensor) -> tuple:
    """(N, C, d1, ...) scores and (N, d1, ...) targets as (M, C) rows and (M,) targets (classes last,
    so the row kernels of log_softmax fuse), the (C,) / () unbatched case as one row, and the
    shape a ``'none'`` result takes."""
    if input.ndim == 0:
        raise ShapeError(f"{name}: expected input (N, C, ...) or (C,), got a 0-d tensor")
    if target.dtype.category != 1:
        raise DTypeError(f"{name}: target must be an integer tensor of class indices, got {target.dtype.name}")
    if input.ndim == 1:
        if target.shape != ():
            raise ShapeError(f"{name}: expected a 0-d target for input {input.shape} (C,), got {target.shape}")
        return input.reshape(1, -1), target.reshape(1), ()
    expected = input.shape[:1] + input.shape[2:]
    if target.shape != expected:
        raise ShapeError(
            f"{name}: expected input (N, C, d1, ...) and target (N, d1, ...) = {expected}, "
            f"got {input.shape} and {target.shape}"
        )
    if input.ndim > 2:
        c = input.shape[1]
        input = input.permute(0, *range(2, input.ndim), 1).reshape(-1, c)
        target = target.reshape(-1)
    return input, target, expected


def _class_weight(name: str, weight, classes: int, input: Tensor):
    if weight is None:
        return None
    _check_float(name, "weight", weight)
    if weight.shape != (classes,):
        raise ShapeError(f"{name}: weight shape {weight.shape} must be ({classes},) for input {input.shape}")
    return weight.to(input.dtype) if weight.dtype is not input.dtype else weight


def _nll_rows(logp: Tensor, target: Tensor, weight, ignore_index: int) -> tuple:
    """Per-row losses ``-w[t] * logp[t]`` (0 for ignored rows) and the per-row weights that a mean
    divides by. The one-hot compare is elementwise, so picking the target fuses into the row kernel."""
    oh = one_hot_checked(target, logp.shape[1], logp.dtype)
    valid = (target != ignore_index).to(logp.dtype)
    if weight is None:
        return -(logp * oh).sum(1) * valid, valid
    ohw = oh * weight
    return -(logp * ohw).sum(1) * valid, ohw.sum(1) * valid


def _reduce_rows(losses: Tensor, counts: Tensor, reduction: str, shape: tuple) -> Tensor:
    if reduction == "none":
        return losses.reshape(*shape)
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / counts.sum()


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log likelihood, as ``torch.nn.functional.nll_loss``: ``l_n = -w[y_n] * x[n, y_n]``.

    input (N, C) or (N, C, d1, ...) log-probabilities, or (C,); target (N,) / (N, d1, ...) / () int
    class indices; weight (C,). Targets equal to ``ignore_index`` count nowhere. ``'mean'`` divides
    by the sum of ``w[y_n]`` over counted targets (PyTorch's rule: NaN when none counts).

    Raises ShapeError for mismatched shapes, DTypeError for non-integer targets, IndexError for a
    (computed) target outside [0, C) that is not ``ignore_index``.
    """
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    rows, target_rows, shape = _class_rows("nll_loss", input, target)
    weight = _class_weight("nll_loss", weight, rows.shape[1], input)
    target = _check_targets("nll_loss", target, target_rows, rows.shape[1], ignore_index)
    losses, counts = _nll_rows(rows, target, weight, ignore_index)
    return _reduce_rows(losses, counts, reduction, shape)


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of logits, as ``torch.nn.functional.cross_entropy``.

    input (N, C), (N, C, d1, ...) or (C,) logits. target: int class indices (N,) / (N, d1, ...) /
    (), or class probabilities of the input's shape (a floating target). weight (C,).

    Class indices: ``l_n = (1 - e) * w[y_n] * -logp[n, y_n] + (e / C) * sum_c w[c] * -logp[n, c]``
    with ``e = label_smoothing``; ``'mean'`` divides by the sum of ``w[y_n]`` over the targets that
    are not ``ignore_index`` (PyTorch's ``cross_entropy_loss_label_smoothing``). Probabilities:
    ``l_n = -sum_c w[c] * q[n, c] * logp[n, c]`` with ``q = (1 - e) * target + e / C``; ``'mean'``
    divides by N * d1 * ... (``cross_entropy_loss_prob_target``).

    Raises ShapeError for mismatched shapes, DTypeError for a target of another kind, IndexError
    for a (computed) class index out of range, ValueError for ``label_smoothing`` outside [0, 1].
    """
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
    if isinstance(target, Tensor) and target.dtype.is_floating_point:
        if target.shape != input.shape:  # PyTorch then reads it as class indices, and refuses the dtype
            raise DTypeError(
                f"cross_entropy: expected integer class indices, or class probabilities of the input's shape "
                f"{input.shape}; got a {target.dtype.name} target of shape {target.shape}"
            )
        return _cross_entropy_probabilities(input, target, weight, reduction, label_smoothing)
    rows, target_rows, shape = _class_rows("cross_entropy", input, target)
    c = rows.shape[1]
    weight = _class_weight("cross_entropy", weight, c, input)
    target = _check_targets("cross_entropy", target, target_rows, c, ignore_index)
    logp = rows.log_softmax(1)
    losses, counts = _nll_rows(logp, target, weight, ignore_index)
    if label_smoothing:
        valid = (target != ignore_index).to(logp.dtype)
        smooth = -(logp if weight is None else logp * weight).sum(1) * valid
        losses = (1 - label_smoothing) * losses + (label_smoothing / c) * smooth
    return _reduce_rows(losses, counts, reduction, shape)


def _cross_entropy_probabilities(input, target, weight, reduction: str, label_smoothing: float) -> Tensor:
    if input.ndim == 0:
        raise ShapeError("cross_entropy: expected input (N, C, ...) or (C,), got a 0-d tensor")
    class_dim = 0 if input.ndim == 1 else 1
    c = input.shape[class_dim]
    weight = _class_weight("cross_entropy", weight, c, input)
    if target.dtype is not input.dtype:
        target = target.to(input.dtype)
    logp = input.log_softmax(class_dim)
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / c
    prod = logp * target
    if weight is not None:
        prod = prod * weight.reshape(c, *([1] * (input.ndim - class_dim - 1)))
    if reduction == "none":
        return -prod.sum(class_dim)
    if reduction == "sum":
        return -prod.sum()
    return -prod.sum() * (1.0 / (input.numel() // c) if input.numel() else float("nan"))


# ================================================================= binary targets
def _same_shape(name: str, input: Tensor, target: Tensor) -> None:
    if not isinstance(target, Tensor):
        raise DTypeError(f"{name}: target must be a lazyvic.Tensor, got {type(target).__name__}")
    if target.shape != input.shape:
        raise ShapeError(f"{name}: target size {target.shape} must be the same as input size {input.shape}")


def _elementwise_weight(name: str, weight, shape: tuple, what: str = "weight"):
    if weight is None:
        return None
    _check_float(name, what, weight)
    try:
        broadcast_shapes(weight.shape, shape)
    except ShapeError:
        raise ShapeError(f"{name}: {what} shape {weight.shape} does not broadcast to the input shape {shape}") from None
    return weight


def _log_clamped(x: Tensor) -> Tensor:
    """``max(log(x), -100)`` (PyTorch's BCE clamp), with a zero gradient and no NaN at x <= 0."""
    positive = x > 0
    lx = where(positive, where(positive, x, 1.0).log(), -100.0)
    return where(lx < -100.0, -100.0, lx)


def binary_cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    """Binary cross-entropy of probabilities, as ``torch.nn.functional.binary_cross_entropy``:
    ``l_n = -w_n * (y_n * log(x_n) + (1 - y_n) * log(1 - x_n))`` with each log clamped at -100
    (PyTorch's rule, so a probability of 0 or 1 gives a finite loss).

    input and target of one shape (probabilities in [0, 1]; values outside give NaN, where PyTorch
    raises); weight broadcasts to it. Raises ShapeError for different shapes, DTypeError for a
    non-floating target.
    """
    reduction = _reduction("binary_cross_entropy", size_average, reduce, reduction)
    _check_float("binary_cross_entropy", "input", input)
    _same_shape("binary_cross_entropy", input, target)
    _check_float("binary_cross_entropy", "target", target)
    weight = _elementwise_weight("binary_cross_entropy", weight, input.shape)
    losses = (target - 1.0) * _log_clamped(1.0 - input) - target * _log_clamped(input)
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Binary cross-entropy of logits, as ``torch.nn.functional.binary_cross_entropy_with_logits``:
    ``l_n = -w_n * (p * y_n * log(sigmoid(x_n)) + (1 - y_n) * log(1 - sigmoid(x_n)))``, computed as
    ``w_n * ((1 - y_n) * x_n - (1 + (p - 1) * y_n) * logsigmoid(x_n))`` (stable for any logit).

    input and target of one shape; weight broadcasts to it; pos_weight (the weight p of positive
    examples, e.g. (C,) for the last axis) broadcasts to it. Raises ShapeError for different or
    non-broadcasting shapes, DTypeError for a non-floating target.
    """
    name = "binary_cross_entropy_with_logits"
    reduction = _reduction(name, size_average, reduce, reduction)
    _check_float(name, "input", input)
    _same_shape(name, input, target)
    _check_float(name, "target", target)
    weight = _elementwise_weight(name, weight, input.shape)
    pos_weight = _elementwise_weight(name, pos_weight, input.shape, "pos_weight")
    log_weight = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    losses = (1.0 - target) * input - log_weight * logsigmoid(input)
    if weight is not None:
        losses = losses * weight
    return _reduce(losses, reduction)


# ================================================================= regression
def _check_pair(name: str, input: Tensor, target: Tensor, stacklevel: int = 3) -> None:
    """Shapes that differ but broadcast warn (they will broadcast, as in PyTorch); others raise."""
    if not isinstance(target, Tensor):
        raise DTypeError(f"{name}: target must be a lazyvic.Tensor, got {type(target).__name__}")
    if target.shape != input.shape:
        try:
            broadcast_shapes(input.shape, target.shape)
        except ShapeError:
            raise ShapeError(
                f"{name}: input shape {input.shape} and target shape {target.shape} differ and do not broadcast"
            ) from None
        warnings.warn(
            f"{name}: using a target size {target.shape} that is different to the input size {input.shape}. "
            "This will likely lead to incorrect results due to broadcasting. Please ensure they have the same size.",
            stacklevel=stacklevel,
        )


def _pointwise(name: str, input: Tensor, target: Tensor) -> Tensor:
    """``input - target`` after :func:`_check_pair`."""
    _check_pair(name, input, target, stacklevel=4)
    return input - target


def _weighted(name: str, losses: Tensor, weight, input: Tensor, reduction: str, mean_by_weight: bool) -> Tensor:
    if weight is None:
        return _reduce(losses, reduction)
    if weight.shape != input.shape:
        raise ShapeError(f"{name}: weight shape {weight.shape} must be the input's shape {input.shape}")
    losses = losses * weight
    if reduction == "mean" and mean_by_weight:
        return losses.sum() / weight.sum()
    return _reduce(losses, reduction)


def mse_loss(
    input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean", weight=None
) -> Tensor:
    """Mean squared error, as ``torch.nn.functional.mse_loss``: ``l_n = w_n * (x_n - y_n)^2``;
    with a ``weight`` (the input's shape) ``'mean'`` divides by ``sum(weight)``. Shapes that differ
    but broadcast warn and broadcast, as PyTorch; others raise ShapeError."""
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    d = _pointwise("mse_loss", input, target)
    return _weighted("mse_loss", d * d, weight, input, reduction, True)


def l1_loss(
    input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean", weight=None
) -> Tensor:
    """Mean absolute error, as ``torch.nn.functional.l1_loss``: ``l_n = w_n * |x_n - y_n|``; with a
    ``weight`` ``'mean'`` divides by ``sum(weight)``. Shapes as :func:`mse_loss`."""
    reduction = _reduction("l1_loss", size_average, reduce, reduction)
    d = _pointwise("l1_loss", input, target)
    return _weighted("l1_loss", d.abs(), weight, input, reduction, True)


def smooth_l1_loss(
    input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0
) -> Tensor:
    """Smooth L1, as ``torch.nn.functional.smooth_l1_loss``: ``0.5 * d^2 / beta`` where
    ``|d| < beta``, else ``|d| - 0.5 * beta`` (``d = x - y``); beta 0 is the L1 loss. Raises
    ValueError for a negative beta; shapes as :func:`mse_loss`."""
    reduction = _reduction("smooth_l1_loss", size_average, reduce, reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    d = _pointwise("smooth_l1_loss", input, target)
    a = d.abs()
    if beta == 0:
        return _reduce(a, reduction)
    return _reduce(where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0, weight=None) -> Tensor:
    """Huber loss, as ``torch.nn.functional.huber_loss``: ``0.5 * d^2`` where ``|d| < delta``, else
    ``delta * (|d| - 0.5 * delta)``; times ``weight`` (the input's shape) when given, whose
    ``'mean'`` is the plain mean (PyTorch's rule). Raises ValueError for delta <= 0."""
    reduction = _reduction("huber_loss", None, None, reduction)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    d = _pointwise("huber_loss", input, target)
    a = d.abs()
    losses = where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)
    return _weighted("huber_loss", losses, weight, input, reduction, False)


def kl_div(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """Kullback-Leibler divergence, as ``torch.nn.functional.kl_div``, with ``input`` the
    log-probabilities: ``l = y * (log y - x)`` (0 where y = 0), or ``exp(y) * (y - x)`` with
    ``log_target``. ``'batchmean'`` divides the sum by ``input.shape[0]`` (the mathematical KL);
    ``'mean'`` by the number of elements (PyTorch warns). Shapes as :func:`mse_loss`."""
    reduction = _reduction("kl_div", size_average, reduce, reduction, _REDUCTIONS + ("batchmean",))
    if size_average is None and reduce is None and reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support size."
            "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
            "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
            stacklevel=2,
        )
    _check_pair("kl_div", input, target)
    if log_target:
        losses = target.exp() * (target - input)
    else:
        positive = target > 0
        # xlogy(y, y): the log of a safe value where y <= 0, so its gradient is never NaN.
        losses = where(positive, target * where(positive, target, 1.0).log(), 0.0) - target * input
    if reduction == "batchmean":
        s = losses.sum()
        return s * (1.0 / input.shape[0]) if input.ndim else s
    return _reduce(losses, reduction)


# ================================================================= margins
def _broadcast(name: str, **tensors: Tensor) -> tuple:
    """The broadcast shape of ``tensors`` (keyword: its name in the message); each must be a
    lazyvic.Tensor. Raises DTypeError for a non-tensor, ShapeError naming every shape."""
    shape: tuple = ()
    for what, t in tensors.items():
        if not isinstance(t, Tensor):
            raise DTypeError(f"{name}: {what} must be a lazyvic.Tensor, got {type(t).__name__}")
        try:
            shape = broadcast_shapes(shape, t.shape)
        except ShapeError:
            shapes = ", ".join(f"{k} {v.shape}" for k, v in tensors.items())
            raise ShapeError(f"{name}: shapes do not broadcast together: {shapes}") from None
    return shape


def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Margin ranking loss, as ``torch.nn.functional.margin_ranking_loss``:
    ``l_n = max(0, -y_n * (x1_n - x2_n) + margin)``, with ``y`` 1 where ``x1`` should rank higher
    and -1 where ``x2`` should.

    input1, input2 floating and target (float or integer) of the same number of dimensions, whose
    shapes broadcast (the result has the broadcast shape). Raises ShapeError for different numbers
    of dimensions or shapes that do not broadcast, DTypeError for a non-floating input.
    """
    name = "margin_ranking_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    _check_float(name, "input1", input1)
    _check_float(name, "input2", input2)
    if not isinstance(target, Tensor):
        raise DTypeError(f"{name}: target must be a lazyvic.Tensor, got {type(target).__name__}")
    if not input1.ndim == input2.ndim == target.ndim:
        raise ShapeError(
            f"{name}: all input tensors should have the same number of dimensions, got input1 {input1.shape}, "
            f"input2 {input2.shape} and target {target.shape}"
        )
    _broadcast(name, input1=input1, input2=input2, target=target)
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0.0), reduction)


def hinge_embedding_loss(
    input: Tensor, target: Tensor, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"
) -> Tensor:
    """Hinge embedding loss, as ``torch.nn.functional.hinge_embedding_loss``: ``l_n = x_n`` where
    ``y_n = 1`` and ``max(0, margin - x_n)`` where ``y_n = -1``; as PyTorch's ``Loss.cpp``, a target
    that is neither adds both terms.

    input floating (typically distances), target (1 / -1, float or integer); their shapes broadcast.
    Raises ShapeError for shapes that do not broadcast, DTypeError for a non-floating input.
    """
    name = "hinge_embedding_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    _broadcast(name, input=input, target=target)
    _check_float(name, "input", input)
    hinge = where(target != 1, (margin - input).clamp_min(0.0), 0.0)
    return _reduce(hinge + where(target != -1, input, 0.0), reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """Two-class soft-margin (logistic) loss, as ``torch.nn.functional.soft_margin_loss``:
    ``l_n = log(1 + exp(-y_n * x_n))``, computed as ``-logsigmoid(y_n * x_n)``: equal wherever
    PyTorch's value is finite, and finite (with a finite gradient) where PyTorch's ``exp``
    overflows (``y * x < -88`` in float32).

    input floating; target (1 / -1, float or integer) broadcasts to the input's shape, which the
    result keeps (PyTorch writes into an input-shaped output). Raises ShapeError otherwise,
    DTypeError for a non-floating input.
    """
    name = "soft_margin_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    if _broadcast(name, input=input, target=target) != input.shape:
        raise ShapeError(f"{name}: target shape {target.shape} does not broadcast to the input shape {input.shape}")
    _check_float(name, "input", input)
    return _reduce(-logsigmoid(input * target), reduction)


def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Multi-label one-versus-all logistic loss, as ``torch.nn.functional.multilabel_soft_margin_loss``:
    ``l_n = -(1/C) * sum_c w_c * (y_nc * logsigmoid(x_nc) + (1 - y_nc) * logsigmoid(-x_nc))``.

    input (N, C) or (C,) (any rank >= 1: the classes are its last axis); target (0 / 1 labels, float
    or integer) and weight broadcast with it. The class sum runs over the input's last axis of the
    broadcast losses, as PyTorch's; ``'none'`` gives (N,) (or () for a (C,) input). Raises
    ShapeError for a 0-d input or shapes that do not broadcast, DTypeError for a non-floating input
    or weight.
    """
    name = "multilabel_soft_margin_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    tensors = {"input": input, "target": target} | ({} if weight is None else {"weight": weight})
    _broadcast(name, **tensors)
    _check_float(name, "input", input)
    if input.ndim == 0:
        raise ShapeError(f"{name}: expected input (N, C) or (C,) with the classes last, got a 0-d tensor")
    losses = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        _check_float(name, "weight", weight)
        losses = losses * weight
    return _reduce(losses.sum(input.ndim - 1) * (1.0 / input.shape[-1]), reduction)


def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Multi-class margin (hinge) loss, as ``torch.nn.functional.multi_margin_loss``:
    ``l_n = (1/C) * sum_{i != y_n} w[y_n] * max(0, margin - x[n, y_n] + x[n, i])^p``, p 1 or 2
    (PyTorch's ``LossMultiMargin.cpp``: a term at exactly 0 has no gradient).

    input (N, C), (C,) or () floating scores; target (N,) or () int class indices ((1,) or () for an
    unbatched input); weight (C,). ``'none'`` gives (N,), or () for a 0-d target; ``'mean'``
    divides by N (0 for an empty batch, as PyTorch).

    Raises ArgumentError (a ValueError) for p other than 1 and 2, ShapeError for an input of
    another rank or with no classes, a target whose size is not N or a weight that is not (C,),
    DTypeError for a non-integer target, IndexError for a (computed) class index outside [0, C).
    """
    name = "multi_margin_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    if p not in (1, 2):
        raise ArgumentError(f"{name}: only p == 1 and p == 2 are supported, got p={p!r}")
    _check_float(name, "input", input)
    if not isinstance(target, Tensor):
        raise DTypeError(f"{name}: target must be a lazyvic.Tensor, got {type(target).__name__}")
    if input.ndim > 2 or 0 in input.shape[1:] or (input.ndim == 1 and input.shape[0] == 0):
        raise ShapeError(
            f"{name}: expected a non-empty vector (C,) or matrix (N, C) (N may be 0), got input {input.shape}"
        )
    n, c = (input.shape[0], input.shape[1]) if input.ndim == 2 else (1, max(input.numel(), 1))
    if target.dtype.category != 1:
        raise DTypeError(f"{name}: target must be an integer tensor of class indices, got {target.dtype.name}")
    if target.ndim > 1 or target.numel() != n:
        raise ShapeError(
            f"{name}: expected a target of {n} class indices ((N,) or ()), got target {target.shape} "
            f"for input {input.shape}"
        )
    if weight is not None:
        _check_float(name, "weight", weight)
        if weight.ndim != 1 or weight.shape[0] != c:
            raise ShapeError(f"{name}: weight shape {weight.shape} must be ({c},) for input {input.shape}")
        weight = weight.to(input.dtype) if weight.dtype is not input.dtype else weight
    rows = input.reshape(n, c)
    classes = checked_classes(name, target.reshape(n), c)
    oh = one_hot_checked(classes, c, input.dtype)
    is_target = oh > 0  # where(), not a product with oh: an infinite score elsewhere must not give NaN
    z = margin - where(is_target, rows, 0.0).sum(1, keepdim=True) + rows
    h = where((z > 0) & ~is_target, z, 0.0)
    h = h if p == 1 else h * h
    losses = h.sum(1) * (1.0 / c)
    if weight is not None:
        losses = losses * (oh * weight).sum(1)
    if reduction == "none":
        return losses if target.ndim else losses.reshape(())
    if reduction == "sum" or n == 0:
        return losses.sum()
    return losses.sum() * (1.0 / n)


# ================================================================= likelihoods
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_nll_loss(
    input: Tensor, target: Tensor, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"
) -> Tensor:
    """Gaussian negative log likelihood, as ``torch.nn.functional.gaussian_nll_loss``:
    ``l = 0.5 * (log(max(var, eps)) + (x - y)^2 / max(var, eps))``, plus ``0.5 * log(2 * pi)`` with
    ``full``. As PyTorch, the clamp at ``eps`` is invisible to autograd (the gradient of the
    clamped variance passes to ``var`` as it is).

    input (N, *) floating expectations; target broadcasts with it; var a number, or a tensor of the
    input's shape, of that shape without its last axis (one variance per row: it is unsqueezed), or
    of the input's rank with exactly one axis of size 1 where the input's differs (PyTorch's rule).

    Raises ShapeError for a var of another shape or shapes that do not broadcast, DTypeError for a
    non-floating input or var, ValueError for a bad reduction, ArgumentError (a ValueError) for a
    negative variance when its values are known now (a number, or a realized tensor); a computed
    negative variance gives NaN there (checking it would be a sync point, where PyTorch raises).
    """
    name = "gaussian_nll_loss"
    reduction = _reduction(name, None, None, reduction)
    _check_float(name, "input", input)
    if isinstance(var, (int, float)) and not isinstance(var, bool):
        if var < 0:
            raise ArgumentError(f"{name}: var has negative entry/entries (var={var})")
        _broadcast(name, input=input, target=target)
        var = max(float(var), eps)
        losses = 0.5 * (math.log(var) + (input - target).square() * (1.0 / var))
        return _reduce(losses + _HALF_LOG_2PI if full else losses, reduction)
    _check_float(name, "var", var)
    known = values_now(var)
    if known is not None and (known < 0).any():
        raise ArgumentError(f"{name}: var has negative entry/entries (var shape {var.shape})")
    if var.shape != input.shape:
        if input.shape[:-1] == var.shape:
            var = var.unsqueeze(-1)
        elif not (input.ndim == var.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):
            raise ShapeError(
                f"{name}: var shape {var.shape} is of incorrect size for input {input.shape}: expected the input's "
                "shape, the input's shape without its last dimension, or one dimension of size 1 where they differ"
            )
    _broadcast(name, input=input, target=target, var=var)
    # max(var, eps) with the gradient of the identity (PyTorch clamps under no_grad): var - var is 0.
    clamped = where(var < eps, (var - var.detach()) + eps, var)
    losses = 0.5 * (clamped.log() + (input - target).square() / clamped)
    if full:
        losses = losses + _HALF_LOG_2PI
    if known is None:
        losses = where(var < 0, math.nan, losses)
    return _reduce(losses, reduction)


def poisson_nll_loss(
    input: Tensor,
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average=None,
    eps: float = 1e-8,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Poisson negative log likelihood, as ``torch.nn.functional.poisson_nll_loss``:
    ``l = exp(x) - y * x`` with ``log_input`` (x the log of the rate), else ``x - y * log(x + eps)``;
    with ``full`` plus Stirling's approximation of ``log(y!)``,
    ``y * log(y) - y + 0.5 * log(2 * pi * y)``, where ``y > 1`` (0 elsewhere; PyTorch's ``Loss.cpp``).

    input floating; target (counts, float or integer) broadcasts with it. Raises ShapeError for
    shapes that do not broadcast, DTypeError for a non-floating input.
    """
    name = "poisson_nll_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    _broadcast(name, input=input, target=target)
    _check_float(name, "input", input)
    if target.dtype is not input.dtype and not target.dtype.is_floating_point:
        target = target.to(input.dtype)
    if log_input:
        losses = input.exp() - target * input
    else:
        losses = input - target * (input + eps).log()
    if full:
        small = target <= 1
        y = where(small, 1.0, target)  # a safe log where the term is dropped: no NaN, no gradient
        stirling = y * y.log() - y + 0.5 * (y * (2 * math.pi)).log()
        losses = losses + where(small, 0.0, stirling)
    return _reduce(losses, reduction)


# Composites computed in float32 on half tensors and rounded once (PyTorch's opmath).
dt.widen_halves(
    globals(),
    (
        "nll_loss", "cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss",
        "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "margin_ranking_loss", "hinge_embedding_loss",
        "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss", "gaussian_nll_loss",
        "poisson_nll_loss",
    ),
)  # fmt: skip


def multilabel_margin_loss(
    input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean"
) -> Tensor:
    """Multi-label margin (hinge) loss, as ``torch.nn.functional.multilabel_margin_loss``:
    ``l_n = (1/C) * sum_{j} sum_{i not a target} max(0, 1 - (x[n, y[n, j]] - x[n, i]))``, where
    ``j`` runs over the target indices of row n up to its first -1 (the rest of the row is
    ignored; a repeated index counts again, as in PyTorch's kernel).

    input (N, C) or (C,) floating; target of the same shape, integer class indices padded with
    -1. ``'none'`` gives (N,), or () for an unbatched input; ``'mean'`` divides by N.

    Raises ShapeError for an input that is not (C,) or (N, C) or a target of another shape,
    DTypeError for a non-integer target, IndexError for an index outside [-1, C).
    """
    name = "multilabel_margin_loss"
    reduction = _reduction(name, size_average, reduce, reduction)
    _check_float(name, "input", input)
    if not isinstance(target, Tensor) or target.dtype.category != 1:
        what = target.dtype.name if isinstance(target, Tensor) else type(target).__name__
        raise DTypeError(f"{name}: target must be an integer tensor of class indices, got {what}")
    if input.ndim not in (1, 2) or input.shape[-1] == 0 or target.shape != input.shape:
        raise ShapeError(
            f"{name}: expected a non-empty input (C,) or (N, C) and a target of its shape, "
            f"got input {input.shape} and target {target.shape}"
        )
    c = input.shape[-1]
    rows, t = input.reshape(-1, c), target.reshape(-1, c)
    # Positions before the first -1 are the row's targets; -1 itself is mapped to class 0 and masked.
    valid = (t == -1).to(dt.int64).cumsum(1) == 0
    classes = checked_classes(name, where(valid, t, 0).reshape(-1), c).reshape(t.shape)
    oh = one_hot_checked(classes, c, input.dtype) > 0  # (M, J, C)
    is_target = (oh & valid.unsqueeze(2)).any(1)  # (M, C)
    scores = rows.gather(1, classes)  # (M, J): x[y_j]
    z = 1.0 - scores.unsqueeze(2) + rows.unsqueeze(1)  # (M, J, C)
    h = where((z > 0) & valid.unsqueeze(2) & ~is_target.unsqueeze(1), z, 0.0)
    losses = h.sum((1, 2)) * (1.0 / c)
    if reduction == "none":
        return losses if input.ndim == 2 else losses.reshape(())
    return _reduce(losses, reduction)
