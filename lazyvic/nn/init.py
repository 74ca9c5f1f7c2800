"""Parameter initializers (``torch.nn.init``): PyTorch's formulas, drawn from lazyvic's seeded
generator (``lazyvic.manual_seed``), so a seeded run initializes the same bits every time.

Every function updates its tensor in place without recording history and returns it. The
random ones record lazy ops (nothing runs until the next sync) except :func:`orthogonal_`,
whose QR decomposition runs in NumPy on the drawn values (a sync point).

Raises (every function): ShapeError (a ValueError) naming the function when the tensor has too
few dimensions for it; ValueError for an unknown mode or nonlinearity; UnsupportedOpError for a
``generator=`` argument (PyTorch's signatures take one; lazyvic draws from its default generator).
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic import autograd
from lazyvic.creation import eye
from lazyvic.errors import ShapeError, UnsupportedOpError
from lazyvic.random import rand, randn
from lazyvic.tensor import Tensor, where


def _calculate_fan_in_and_fan_out(tensor: Tensor, fn: str = "_calculate_fan_in_and_fan_out") -> tuple:
    """``(fan_in, fan_out)``: ``shape[1] * receptive field`` and ``shape[0] * receptive field``,
    the receptive field being the product of the dims after the first two (PyTorch's rule)."""
    if tensor.ndim < 2:
        raise ShapeError(f"{fn}: fan in and fan out need a tensor with at least 2 dims, got shape {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str, fn: str = "_calculate_correct_fan") -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{fn}: mode {mode!r} not supported, please use one of 'fan_in', 'fan_out'")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, fn)
    return fan_in if mode == "fan_in" else fan_out


_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table): 1 for linear/conv/sigmoid,
    5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (slope ``param``,
    default 0.01), 3/4 for selu.

    Raises:
        ValueError: an unknown nonlinearity, or a slope that is not a number.
    """
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _default_generator_only(fn: str, generator) -> None:
    if generator is not None:
        raise UnsupportedOpError(
            f"{fn}: generator= is not supported; lazyvic draws from its seeded default generator "
            f"(set it with lazyvic.manual_seed)"
        )


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with U(a, b)."""
    _default_generator_only("uniform_", generator)
    with autograd.no_grad():
        return tensor._assign(rand(*tensor.shape, dtype=tensor.dtype, device=tensor.device) * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with N(mean, std^2)."""
    _default_generator_only("normal_", generator)
    with autograd.no_grad():
        return tensor._assign(randn(*tensor.shape, dtype=tensor.dtype, device=tensor.device) * std + mean)


def zeros_(tensor: Tensor) -> Tensor:
    with autograd.no_grad():
        return tensor.zero_()


def ones_(tensor: Tensor) -> Tensor:
    with autograd.no_grad():
        return tensor.fill_(1.0)


def constant_(tensor: Tensor, val: float) -> Tensor:
    with autograd.no_grad():
        return tensor.fill_(val)


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (ones on the diagonal of a rectangle, as ``torch.eye``).

    Raises:
        ShapeError: ``tensor`` is not 2-D.
    """
    if tensor.ndim != 2:
        raise ShapeError(f"eye_: only tensors with 2 dimensions are supported, got shape {tensor.shape}")
    with autograd.no_grad():
        return tensor._assign(eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D convolution weight with the Dirac delta: each of the first
    ``min(out_channels // groups, in_channels)`` output channels of every group copies its input
    channel through the kernel's centre, so the convolution is the identity there.

    Raises:
        ShapeError: ``tensor`` is not 3-, 4- or 5-D, or its first dim is not divisible by groups.
    """
    if tensor.ndim not in (3, 4, 5):
        raise ShapeError(f"dirac_: only tensors with 3, 4, or 5 dimensions are supported, got shape {tensor.shape}")
    if groups < 1 or tensor.shape[0] % groups:
        raise ShapeError(f"dirac_: dim 0 of shape {tensor.shape} must be divisible by groups={groups}")
    per_group = tensor.shape[0] // groups
    value = np.zeros(tensor.shape, dtype=tensor.dtype.np)
    centre = tuple(s // 2 for s in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, tensor.shape[1])):
            value[(g * per_group + d, d) + centre] = 1
    with autograd.no_grad():
        return tensor._assign(tensor.new_tensor(value))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot & Bengio 2010: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot & Bengio 2010: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, "xavier_normal_")
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
) -> Tensor:
    """He et al. 2015: U(-b, b) with b = gain * sqrt(3 / fan)."""
    fan = _calculate_correct_fan(tensor, mode, "kaiming_uniform_")
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", generator=None
) -> Tensor:
    """He et al. 2015: N(0, std^2) with std = gain / sqrt(fan)."""
    fan = _calculate_correct_fan(tensor, mode, "kaiming_normal_")
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def trunc_normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, generator=None
) -> Tensor:
    """Fill with N(mean, std^2) truncated to [a, b] (bounds in absolute values, as PyTorch).

    PyTorch's method: inverse transform sampling. Draw u ~ U(2 Phi(alpha) - 1, 2 Phi(beta) - 1)
    with alpha = (a - mean) / std, beta = (b - mean) / std, and return
    mean + std * sqrt(2) * erfinv(u), clamped to [a, b]. erfinv is Giles's single-precision
    approximation (see :func:`_erfinv`), so float64 tensors get float32-accurate samples.
    """
    _default_generator_only("trunc_normal_", generator)
    lo, hi = _norm_cdf((a - mean) / std), _norm_cdf((b - mean) / std)
    with autograd.no_grad():
        u = rand(*tensor.shape, dtype=tensor.dtype, device=tensor.device) * (2 * hi - 2 * lo) + (2 * lo - 1)
        value = _erfinv(u) * (std * math.sqrt(2.0)) + mean
        return tensor._assign(value.clamp(a, b))


def _norm_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


# Giles, "Approximating the erfinv function", GPU Computing Gems Jade Edition (2011), single
# precision: a polynomial in w = -log(1 - x^2) on each side of w = 5.
_ERFINV_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_ERFINV_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


def _erfinv(x: Tensor) -> Tensor:
    """The inverse error function on (-1, 1), elementwise, from lazy primitives (relative error
    about 4e-7, Giles 2011); +-inf at +-1."""
    w = -((1.0 - x) * (1.0 + x)).log()
    central, tail = w - 2.5, w.sqrt() - 3.0
    p = central * _ERFINV_CENTRAL[0] + _ERFINV_CENTRAL[1]
    for c in _ERFINV_CENTRAL[2:]:
        p = p * central + c
    q = tail * _ERFINV_TAIL[0] + _ERFINV_TAIL[1]
    for c in _ERFINV_TAIL[2:]:
        q = q * tail + c
    return where(w < 5.0, p, q) * x


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix (Saxe et al. 2013), as PyTorch: the tensor is seen
    as ``(shape[0], numel // shape[0])``; a matrix of N(0, 1) draws (transposed when it is
    wide) is QR-decomposed, Q's columns are multiplied by the signs of R's diagonal (so Q is
    uniformly distributed), Q is transposed back when wide and scaled by ``gain``.

    The normal draws come from lazyvic's seeded generator; the QR runs in NumPy (float64, a
    sync point).

    Raises:
        ShapeError: ``tensor`` has fewer than 2 dims.
    """
    _default_generator_only("orthogonal_", generator)
    if tensor.ndim < 2:
        raise ShapeError(f"orthogonal_: only tensors with 2 or more dimensions are supported, got {tensor.shape}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = randn(rows, cols, dtype=tensor.dtype).numpy().astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with autograd.no_grad():
        value = tensor.new_tensor((q * gain).reshape(tensor.shape).astype(tensor.dtype.np))
        return tensor._assign(value)


__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
]
