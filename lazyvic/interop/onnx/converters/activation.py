"""Activations: LeakyRelu PRelu Sign Softplus Softsign Elu Selu Celu HardSigmoid HardSwish
ThresholdedRelu Mish Swish SwiGLU Shrink Gelu.

Each is a short composition of primitives (Relu, Sigmoid and Tanh themselves come from the op
table: ``converters/optable.py``).
"""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.interop.onnx.registry import register
from lazyvic.tensor import Tensor, where


def softplus(x: Tensor) -> Tensor:
    """log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))."""
    return x.relu() + ((-x.abs()).exp() + 1.0).log()


@register("LeakyRelu", since=(6, 16))
def leaky_relu(ctx, a):
    return F.leaky_relu(ctx.tensor(a), float(ctx.attr("alpha", 0.01)))


@register("PRelu", since=(7, 9, 16))
def prelu(ctx, a, slope):
    x, s = ctx.tensor(a), ctx.tensor(slope)
    return where(x < 0, x * s, x)


@register("Sign", since=(9, 13))
def sign(ctx, a):
    return ctx.tensor(a).sign()


@register("Softplus", since=(1, 22))
def softplus_(ctx, a):
    return softplus(ctx.tensor(a))


@register("Softsign", since=(1, 22))
def softsign(ctx, a):
    x = ctx.tensor(a)
    return x / (x.abs() + 1.0)


def _elu(x: Tensor, alpha: float) -> Tensor:
    return where(x > 0, x, (x.exp() - 1.0) * alpha)


@register("Elu", since=(6, 22))
def elu(ctx, a):
    return _elu(ctx.tensor(a), float(ctx.attr("alpha", 1.0)))


@register("Selu", since=(6, 22))
def selu(ctx, a):
    y = _elu(ctx.tensor(a), float(ctx.attr("alpha", 1.67326319217681884765625)))
    return y * float(ctx.attr("gamma", 1.05070102214813232421875))


@register("Celu", since=(12, 28))
def celu(ctx, a):
    x = ctx.tensor(a)
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        return x.relu() + ((x * (1.0 / alpha)).exp() - 1.0).minimum(0.0) * alpha
    return x.relu() + (x.exp() - 1.0).minimum(0.0)


@register("HardSigmoid", since=(6, 22))
def hard_sigmoid(ctx, a):
    x = ctx.tensor(a)
    return (x * float(ctx.attr("alpha", 0.2)) + float(ctx.attr("beta", 0.5))).clamp(0.0, 1.0)


@register("HardSwish", since=(14, 22))
def hard_swish(ctx, a):
    x = ctx.tensor(a)
    return x * (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)


@register("ThresholdedRelu", since=(10, 22))
def thresholded_relu(ctx, a):
    x = ctx.tensor(a)
    return where(x > float(ctx.attr("alpha", 1.0)), x, 0.0)


@register("Mish", since=(18, 22))
def mish(ctx, a):
    x = ctx.tensor(a)
    return x * softplus(x).tanh()


@register("Swish", since=(24,))
def swish(ctx, a):
    x = ctx.tensor(a)
    alpha = float(ctx.attr("alpha", 1.0))
    return x * (x * alpha if alpha != 1.0 else x).sigmoid()


@register("SwiGLU", since=(28,))
def swiglu(ctx, a, b):
    gate, value = ctx.tensor(a), ctx.tensor(b)
    if gate.shape != value.shape:
        raise ctx.error(f"A {gate.shape} and B {value.shape} must have the same shape")
    alpha = float(ctx.attr("alpha", 1.0))
    return gate * (gate * alpha if alpha != 1.0 else gate).sigmoid() * value


@register("Shrink", since=(9,))
def shrink(ctx, a):
    x = ctx.tensor(a)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    out = where(x < -lambd, x + bias, where(x > lambd, x - bias, 0.0))
    return out.to(x.dtype)


@register("Gelu", since=(20,))
def gelu(ctx, a):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(ctx.tensor(a), approximate=approximate)
