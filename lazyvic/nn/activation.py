"""Activation modules (PyTorch's names, arguments and defaults); each calls its ``F.`` function.

``inplace=True`` updates the input in place, as ``F.relu(x, inplace=True)`` does.
"""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.creation import full
from lazyvic.errors import ShapeError
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor


class _Inplace(Module):
    """An activation with an ``inplace`` flag and no other argument."""

    _fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class _Plain(Module):
    """An activation without arguments."""

    _fn = None

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input)


class ReLU(_Inplace):
    """``max(x, 0)`` (``F.relu``)."""

    _fn = F.relu


class ReLU6(_Inplace):
    """``min(max(x, 0), 6)`` (``F.relu6``)."""

    _fn = F.relu6


class SELU(_Inplace):
    """Scaled ELU (``F.selu``)."""

    _fn = F.selu


class SiLU(_Inplace):
    """``x * sigmoid(x)`` (``F.silu``)."""

    _fn = F.silu


class Mish(_Inplace):
    """``x * tanh(softplus(x))`` (``F.mish``)."""

    _fn = F.mish


class Hardswish(_Inplace):
    """``x * relu6(x + 3) / 6`` (``F.hardswish``)."""

    _fn = F.hardswish


class Hardsigmoid(_Inplace):
    """``relu6(x + 3) / 6`` (``F.hardsigmoid``)."""

    _fn = F.hardsigmoid


class Sigmoid(_Plain):
    _fn = F.sigmoid


class Tanh(_Plain):
    _fn = F.tanh


class LogSigmoid(_Plain):
    """``log(sigmoid(x))`` (``F.logsigmoid``)."""

    _fn = F.logsigmoid


class Tanhshrink(_Plain):
    """``x - tanh(x)`` (``F.tanhshrink``)."""

    _fn = F.tanhshrink


class Softsign(_Plain):
    """``x / (1 + |x|)`` (``F.softsign``)."""

    _fn = F.softsign


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class ELU(Module):
    """``x`` for x > 0, else ``alpha * (exp(x) - 1)`` (``F.elu``)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (``F.celu``)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.celu(input, self.alpha, self.inplace)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class Hardtanh(Module):
    """``clamp(x, min_val, max_val)`` (``F.hardtanh``); ``min_value``/``max_value`` are PyTorch's
    deprecated spellings."""

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ):
        super().__init__()
        self.min_val = min_val if min_value is None else min_value
        self.max_val = max_val if max_value is None else max_value
        self.inplace = inplace
        if self.max_val <= self.min_val:
            raise ValueError(f"Hardtanh: max_val {self.max_val} must be greater than min_val {self.min_val}")

    def forward(self, input: Tensor) -> Tensor:
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value`` (``F.threshold``)."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold`` (``F.softplus``)."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class PReLU(Module):
    """``x`` for x > 0, else ``weight * x`` with a learned slope per channel (``F.prelu``).

    Parameter ``weight`` (num_parameters,) filled with ``init`` (0.25), as PyTorch;
    ``num_parameters`` is 1 or the number of channels (axis 1 of the input)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), float(init), dtype=dtype, device=device))

    def forward(self, input: Tensor) -> Tensor:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    """Gated linear unit along ``dim`` (``F.glu``)."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, self.dim)


class Softmin(Softmax):
    def forward(self, input: Tensor) -> Tensor:
        return F.softmin(input, self.dim)


class Softmax2d(Module):
    """Softmax over the channels of each location, as ``torch.nn.Softmax2d``: input (N, C, H, W) or
    (C, H, W) -> the same shape, ``F.softmax(input, dim=-3)``. Raises ShapeError for other ranks."""

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):
            raise ShapeError(f"Softmax2d: expected input (N, C, H, W) or (C, H, W), got shape {input.shape}")
        return F.softmax(input, -3)


class RReLU(Module):
    """Randomized leaky ReLU (``F.rrelu``; Xu et al. 2015): in training each negative element is
    multiplied by a slope drawn from U(lower, upper) with lazyvic's seeded generator; in eval mode
    by (lower + upper) / 2. Any shape."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")
