"""Layers: Gemm Softmax LogSoftmax NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss.

Old versions: Gemm-7/9 require C (a superset here), Gemm-11 makes it optional; Softmax and
LogSoftmax before 13 coerce the input to 2-D (see :func:`_softmax`).

MatMul comes from the op table (``converters/optable.py``); convolutions are in ``conv.py``,
pooling in ``pool.py``, normalizations in ``norm.py``.
"""

from __future__ import annotations

import math

from lazyvic import dtypes as dt
from lazyvic import functional as F
from lazyvic.creation import ones
from lazyvic.interop.onnx.converters.optable import matmul_keeping_dtype
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor, where


@register("Gemm", since=(7, 9, 11, 13))
def gemm(ctx, a, b, c=None):
    x, y = ctx.tensor(a), ctx.tensor(b)
    if x.ndim != 2 or y.ndim != 2:
        raise ctx.error(f"A and B must be 2-D, got shapes {x.shape} and {y.shape}")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if (
        ctx.attr("transB", 0)
        and not ctx.attr("transA", 0)
        and alpha == 1.0
        and beta == 1.0
        and x.dtype.is_floating_point
        and x.dtype == y.dtype
        and (c is None or ctx.tensor(c).ndim == 1)
    ):
        # A linear layer (PyTorch's exporters write nn.Linear this way): through F.linear, so a
        # re-export writes one Gemm again.
        return F.linear(x, y, None if c is None else ctx.tensor(c))
    if ctx.attr("transA", 0):
        x = x.T
    if ctx.attr("transB", 0):
        y = y.T
    out = matmul_keeping_dtype(x, y)
    if alpha != 1.0:
        out = out * alpha
    if c is not None:
        bias = ctx.tensor(c)
        out = out + (bias * beta if beta != 1.0 else bias)
    return out


def _softmax(ctx, a, fn):
    """From 13: ``fn`` along ``axis`` (default -1). Softmax-1/-11 and LogSoftmax-1/-11 (default axis
    1) coerce the input to 2-D instead: axes ``[0, axis)`` and ``[axis, n)`` each flattened into one,
    ``fn`` taken over the second (every element from ``axis`` on), the result in the input's shape."""
    x = ctx.tensor(a)
    if ctx.version >= 13:
        return fn(x, ctx.axis(int(ctx.attr("axis", -1)), x.ndim))
    axis = ctx.axis(int(ctx.attr("axis", 1)), x.ndim)
    if axis == x.ndim - 1:
        return fn(x, axis)
    return fn(x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])), 1).reshape(*x.shape)


@register("Softmax", since=(1, 11, 13))
def softmax(ctx, a):
    return _softmax(ctx, a, F.softmax)


@register("LogSoftmax", since=(1, 11, 13))
def log_softmax(ctx, a):
    return _softmax(ctx, a, F.log_softmax)


# ------------------------------------------------------------------ losses
def _nll(ctx, logp: Tensor, labels, weights) -> tuple:
    """Per-element losses -logp[n, label, ...] * weight[label] (0 where label == ignore_index) and
    the per-element weights (the divisor of the mean)."""
    target = ctx.tensor(labels)
    target = target if target.dtype is dt.int64 else target.to(dt.int64)
    if logp.ndim != target.ndim + 1 or logp.shape[:1] + logp.shape[2:] != target.shape:
        raise ctx.error(f"input shape {logp.shape} does not fit labels shape {target.shape}")
    ignore = ctx.attr("ignore_index")
    keep = None if ignore is None else target != int(ignore)
    safe = target if keep is None else where(keep, target, 0)  # the ignored label may be out of range
    picked = logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weights is not None:
        w = ctx.tensor(weights).index_select(0, safe.reshape(-1)).reshape(*target.shape)
    else:
        w = ones(*target.shape, dtype=logp.dtype)
    if keep is not None:
        w = where(keep, w, 0.0)
    return -picked * w, w


def _reduce_loss(ctx, losses: Tensor, w: Tensor) -> Tensor:
    reduction = ctx.attr("reduction", "mean")
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / w.sum()


def _loss_check(ctx):
    reduction = ctx.attr("reduction", "mean")
    return None if reduction in ("none", "sum", "mean") else f"{ctx.op} with reduction={reduction!r}"


@register("NegativeLogLikelihoodLoss", since=(12, 13, 22), check=_loss_check)
def negative_log_likelihood_loss(ctx, a, labels, weights=None):
    losses, w = _nll(ctx, ctx.tensor(a), labels, weights)
    return _reduce_loss(ctx, losses, w)


@register("SoftmaxCrossEntropyLoss", since=(12, 13), check=_loss_check)
def softmax_cross_entropy_loss(ctx, a, labels, weights=None):
    logp = F.log_softmax(ctx.tensor(a), 1)
    losses, w = _nll(ctx, logp, labels, weights)
    loss = _reduce_loss(ctx, losses, w)
    return (loss, logp) if ctx.wants_output(1) else loss
