"""Parameter initializers (PyTorch's formulas, drawn from lazyvic's seeded generator)."""

from __future__ import annotations

import math

from lazyvic import autograd
from lazyvic.random import rand, randn
from lazyvic.tensor import Tensor


def _fans(t: Tensor) -> tuple:
    if t.ndim < 2:
        raise ValueError(f"fan in/out need a tensor with >= 2 dims, got shape {t.shape}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def calculate_gain(nonlinearity: str, param=None) -> float:
    if nonlinearity in ("linear", "sigmoid", "conv1d", "conv2d", "conv3d"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    with autograd.no_grad():
        return t._assign(rand(*t.shape, dtype=t.dtype) * (b - a) + a)


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    with autograd.no_grad():
        return t._assign(randn(*t.shape, dtype=t.dtype) * std + mean)


def zeros_(t: Tensor) -> Tensor:
    with autograd.no_grad():
        return t.zero_()


def ones_(t: Tensor) -> Tensor:
    with autograd.no_grad():
        return t.fill_(1.0)


def constant_(t: Tensor, value: float) -> Tensor:
    with autograd.no_grad():
        return t.fill_(value)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He et al. 2015: U(-b, b) with b = gain * sqrt(3 / fan)."""
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot & Bengio 2010: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
