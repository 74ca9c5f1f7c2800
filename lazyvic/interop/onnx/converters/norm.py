"""Normalizations: BatchNormalization InstanceNormalization LayerNormalization GroupNormalization
RMSNormalization LpNormalization MeanVarianceNormalization.
"""

from __future__ import annotations

import numpy as np

from lazyvic import functional as F
from lazyvic.interop.onnx.context import const_tensor
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import where


@register("BatchNormalization", since=(9, 14, 15))
def batch_normalization(ctx, a, scale, bias, mean, var):
    x = ctx.tensor(a)
    eps = float(ctx.attr("epsilon", 1e-5))
    if not (ctx.version >= 14 and ctx.attr("training_mode", 0)):
        return F.batch_norm(
            x, ctx.tensor(mean), ctx.tensor(var), ctx.tensor(scale), ctx.tensor(bias), training=False, eps=eps
        )
    # training_mode=1: normalize with the batch statistics (biased variance); the optional outputs are
    # the updated running statistics, input * momentum + batch * (1 - momentum), as the spec writes.
    axes = (0, *range(2, x.ndim))
    view = (x.shape[1],) + (1,) * (x.ndim - 2)
    batch_mean = x.mean(axes, keepdim=True)
    xc = x - batch_mean
    batch_var = (xc * xc).mean(axes, keepdim=True)
    y = xc * (batch_var + eps).rsqrt() * ctx.tensor(scale).reshape(*view) + ctx.tensor(bias).reshape(*view)
    momentum = float(ctx.attr("momentum", 0.9))
    running_mean = ctx.tensor(mean) * momentum + batch_mean.reshape(x.shape[1]) * (1.0 - momentum)
    running_var = ctx.tensor(var) * momentum + batch_var.reshape(x.shape[1]) * (1.0 - momentum)
    return y, running_mean, running_var


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


@register("MeanVarianceNormalization", since=(13,))
def mean_variance_normalization(ctx, a):
    x = ctx.tensor(a)
    axes = tuple(sorted({ctx.axis(int(v), x.ndim, "axes entry") for v in ctx.attr("axes", [0, 2, 3])}))
    xc = x - x.mean(axes, keepdim=True)
    return xc / (xc * xc).mean(axes, keepdim=True).sqrt()
