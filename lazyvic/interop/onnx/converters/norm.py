"""Normalizations: BatchNormalization InstanceNormalization LayerNormalization GroupNormalization
RMSNormalization LpNormalization MeanVarianceNormalization.
"""

from __future__ import annotations

import numpy as np

from lazyvic import functional as F
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import where


@register("BatchNormalization", since=(7, 9, 14, 15))
def batch_normalization(ctx, a, scale, bias, mean, var):
    """Inference: normalize with the running statistics. Training: BatchNormalization-14/-15 with
    ``training_mode=1`` (outputs Y and the updated running mean and variance), and -7/-9 asked for
    more than Y (their training form has five outputs: Y, the running mean and variance updated,
    the batch mean and, as onnxruntime computes it, the batch's inverse standard deviation
    1 / sqrt(var + epsilon)). BatchNormalization-7 with ``spatial=0`` normalizes every activation
    on its own: its statistics and parameters have the input's shape without the batch axis."""
    x = ctx.tensor(a)
    eps = float(ctx.attr("epsilon", 1e-5))
    spatial = ctx.version >= 9 or bool(ctx.attr("spatial", 1))
    training = bool(ctx.attr("training_mode", 0)) if ctx.version >= 14 else len(ctx.outputs) > 1
    if spatial and not training:
        return F.batch_norm(
            x, ctx.tensor(mean), ctx.tensor(var), ctx.tensor(scale), ctx.tensor(bias), training=False, eps=eps
        )
    # Statistics over the batch (and, spatially, the spatial axes); the biased batch variance.
    axes = (0, *range(2, x.ndim)) if spatial else (0,)
    view = (x.shape[1],) + (1,) * (x.ndim - 2) if spatial else x.shape[1:]
    params = [ctx.tensor(v).reshape(*view) for v in (scale, bias, mean, var)]
    if not training:
        w, b, m, v = params
        return (x - m) * (v + eps).rsqrt() * w + b
    batch_mean = x.mean(axes, keepdim=True)
    xc = x - batch_mean
    batch_var = (xc * xc).mean(axes, keepdim=True)
    inv_std = (batch_var + eps).rsqrt()
    y = xc * inv_std * params[0] + params[1]
    # The running statistics: input * momentum + batch * (1 - momentum), as the spec writes.
    momentum = float(ctx.attr("momentum", 0.9))
    stat_shape = ctx.tensor(mean).shape
    running_mean = ctx.tensor(mean) * momentum + batch_mean.reshape(*stat_shape) * (1.0 - momentum)
    running_var = ctx.tensor(var) * momentum + batch_var.reshape(*stat_shape) * (1.0 - momentum)
    if ctx.version >= 14:
        return y, running_mean, running_var
    return y, running_mean, running_var, batch_mean.reshape(*stat_shape), inv_std.reshape(*stat_shape)


@register("InstanceNormalization", since=(6, 22))
def instance_normalization(ctx, a, scale, bias):
    x = ctx.tensor(a)
    axes = tuple(range(2, x.ndim))
    view = (x.shape[1],) + (1,) * (x.ndim - 2)
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    y = xc * ((xc * xc).mean(axes, keepdim=True) + float(ctx.attr("epsilon", 1e-5))).rsqrt()
    return y * ctx.tensor(scale).reshape(*view) + ctx.tensor(bias).reshape(*view)


@register("LayerNormalization", since=(17,))
def layer_normalization(ctx, a, scale, bias=None):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    eps = float(ctx.attr("epsilon", 1e-5))
    w = ctx.tensor(scale)
    b = None if bias is None else ctx.tensor(bias)
    normalized = x.shape[axis:]
    if not (ctx.wants_output(1) or ctx.wants_output(2)):
        return F.layer_norm(x, normalized, w, b, eps)
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axes, keepdim=True)
    xc = x - mean
    inv_std = ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    y = xc * inv_std * w
    if b is not None:
        y = y + b
    return y, mean, inv_std


@register("GroupNormalization", since=(18, 21))
def group_normalization(ctx, a, scale, bias):
    x = ctx.tensor(a)
    groups = int(ctx.attr("num_groups"))
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise ctx.error(f"num_groups {groups} must divide the {c} channels of input {x.shape}")
    g = x.reshape(n, groups, -1)
    mean = g.mean(2, keepdim=True)
    gc = g - mean
    y = (gc * ((gc * gc).mean(2, keepdim=True) + float(ctx.attr("epsilon", 1e-5))).rsqrt()).reshape(*x.shape)
    w, b = ctx.tensor(scale), ctx.tensor(bias)
    if ctx.version < 21:  # GroupNormalization-18: scale and bias per group, not per channel
        per_channel = const_tensor(np.repeat(np.arange(groups, dtype=np.int64), c // groups))
        w, b = w.index_select(0, per_channel), b.index_select(0, per_channel)
    view = (c,) + (1,) * (x.ndim - 2)
    return y * w.reshape(*view) + b.reshape(*view)


@register("RMSNormalization", since=(23,))
def rms_normalization(ctx, a, scale):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    axes = tuple(range(axis, x.ndim))
    y = x * ((x * x).mean(axes, keepdim=True) + float(ctx.attr("epsilon", 1e-5))).rsqrt()
    return y * ctx.tensor(scale)


@register("LpNormalization", since=(1, 22))
def lp_normalization(ctx, a):
    x = ctx.tensor(a)
    axis = ctx.axis(int(ctx.attr("axis", -1)), x.ndim)
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = x.abs().sum(axis, keepdim=True)
    elif p == 2:
        norm = (x * x).sum(axis, keepdim=True).sqrt()
    else:
        raise ctx.error(f"p must be 1 or 2, got {p}")
    return where(norm == 0, 0.0, x / norm)


@register("MeanVarianceNormalization", since=(9, 13))
def mean_variance_normalization(ctx, a):
    x = ctx.tensor(a)
    axes = tuple(sorted({ctx.axis(int(v), x.ndim, "axes entry") for v in ctx.attr("axes", [0, 2, 3])}))
    xc = x - x.mean(axes, keepdim=True)
    return xc / (xc * xc).mean(axes, keepdim=True).sqrt()
