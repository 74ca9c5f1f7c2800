"""Non-linear activations (``torch.nn.functional``'s names, arguments and defaults).

Each one is a short composition of elementwise primitives (fusion makes it one loop). Formulas
and the gradient at the kinks follow PyTorch's documentation and its CPU kernels
(``aten/src/ATen/native/cpu/Activation.cpp``): a branch is chosen with ``where``, so the
gradient is that of the branch taken, and the input of a branch that is not taken is clamped
to a safe range first, so an overflow there (``exp`` of a large input) cannot turn the zero
cotangent it receives into NaN.

``inplace=True`` updates ``input`` in place (PyTorch's semantics: the tensor the caller holds
sees the new value, and is returned), through ``Tensor._assign`` as the other in-place methods;
a leaf that requires grad refuses it (RuntimeError), as in PyTorch.
"""

from __future__ import annotations

import math
import warnings

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.random import rand
from lazyvic.shapes import norm_axis
from lazyvic.tensor import Tensor, where
from lazyvic.trace.composite import mark

# SELU's constants (Klambauer et al. 2017, "Self-Normalizing Neural Networks"), as PyTorch.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _inplace(input: Tensor, result: Tensor, inplace: bool) -> Tensor:
    return input._assign(result) if inplace else result


def _float_input(name: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise DTypeError(f"{name}: expected a lazyvic.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{name}: expected a floating-point input, got {x.dtype.name}")
    return x


# Below these magnitudes the series of log1p / expm1 (6 terms) replaces log(1 + u) / exp(x) - 1,
# whose rounding (one ulp of 1) would dominate a small result; the series' truncation error is
# below the dtype's precision there.
_SERIES_CUTOFF = {"float64": 1e-3}
_SERIES_CUTOFF_DEFAULT = 0.06  # float32 and the half types (computed in float32)


def log1p(u: Tensor) -> Tensor:
    """``log(1 + u)`` accurate for small ``|u|`` (a 6-term series there), for u > -1."""
    cutoff = _SERIES_CUTOFF.get(u.dtype.name, _SERIES_CUTOFF_DEFAULT)
    small = u.abs() < cutoff
    s = where(small, u, 0.0)
    series = s * (1.0 - s * (1.0 / 2 - s * (1.0 / 3 - s * (1.0 / 4 - s * (1.0 / 5 - s * (1.0 / 6))))))
    return where(small, series, (where(small, 1.0, u) + 1.0).log())


def expm1(x: Tensor) -> Tensor:
    """``exp(x) - 1`` accurate for small ``|x|`` (a 6-term series there)."""
    cutoff = _SERIES_CUTOFF.get(x.dtype.name, _SERIES_CUTOFF_DEFAULT)
    small = x.abs() < cutoff
    s = where(small, x, 0.0)
    series = s * (1.0 + s * (1.0 / 2 + s * (1.0 / 6 + s * (1.0 / 24 + s * (1.0 / 120 + s * (1.0 / 720))))))
    return where(small, series, x.exp() - 1.0)


# ============================================================== piecewise linear
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)``; the gradient is 0 at 0 (PyTorch)."""
    return _inplace(input, input.relu(), inplace)


def relu_(input: Tensor) -> Tensor:
    """In-place :func:`relu`."""
    return relu(input, inplace=True)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """``clamp(x, min_val, max_val)``; the gradient is 1 strictly inside, 0 on and outside the bounds
    (PyTorch's ``hardtanh_backward``). Raises ValueError when ``min_val > max_val``."""
    if min_val > max_val:
        raise ArgumentError(f"hardtanh: min_val {min_val} must not be greater than max_val {max_val}")
    y = where(input <= min_val, min_val, where(input >= max_val, max_val, input))
    return _inplace(input, y, inplace)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)`` (``hardtanh(x, 0, 6)``, as PyTorch)."""
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` for x > 0, else ``negative_slope * x``."""
    return _inplace(input, where(input > 0, input, input * negative_slope), inplace)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return leaky_relu(input, negative_slope, inplace=True)


def _threshold(input: Tensor, bound: float, value: float, inplace: bool) -> Tensor:
    return _inplace(input, where(input > bound, input, value), inplace)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, else ``value``."""
    return _threshold(input, threshold, value, inplace)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return _threshold(input, threshold, value, True)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` for x > 0, else ``weight * x``, with one slope per channel (axis 1) or one shared.

    input (N, C, ...) or (C,) ... ; weight (1,) or (C,) with C = ``input.shape[1]`` (``input.shape[0]``
    for a 1-D input). Raises ShapeError when the number of slopes does not fit the channels."""
    if weight.ndim != 1 and weight.numel() != 1:
        raise ShapeError(f"prelu: weight must be 1-D (num_parameters,), got shape {weight.shape}")
    n = weight.numel()
    if n != 1:
        channels = input.shape[1] if input.ndim >= 2 else (input.shape[0] if input.ndim == 1 else 1)
        if input.ndim == 0 or n != channels:
            raise ShapeError(
                f"prelu: {n} slopes (weight {weight.shape}) do not fit input {input.shape} "
                f"({channels} channels on axis {1 if input.ndim >= 2 else 0})"
            )
        if input.ndim >= 2:
            weight = weight.reshape(n, *([1] * (input.ndim - 2)))
    else:
        weight = weight.reshape(())
    return where(input > 0, input, weight * input)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``; the gradient is 1/6 strictly inside (-3, 3), else 0."""
    y = where(input <= -3.0, 0.0, where(input >= 3.0, 1.0, input * (1.0 / 6) + 0.5))
    return _inplace(input, y, inplace)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6`` (Howard et al. 2019, "Searching for MobileNetV3")."""
    y = where(input < -3.0, 0.0, where(input <= 3.0, input * (input + 3.0) * (1.0 / 6), input))
    return _inplace(input, y, inplace)


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    return input - input.tanh()


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return input / (input.abs() + 1.0)


# ============================================================== smooth
def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (the swish of Ramachandran et al. 2017)."""
    return _inplace(input, input * input.sigmoid(), inplace)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: ``x * Phi(x)`` (exact, with erf) or the tanh approximation (Hendrycks & Gimpel 2016)."""
    x = input
    if approximate == "tanh":
        y = 0.5 * x * (1.0 + (math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    elif approximate == "none":
        y = x * 0.5 * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
    else:
        raise ArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return mark(y, "Gelu", (x,), min_opset=20, approximate=approximate)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold`` (PyTorch's rule)."""
    x = _float_input("softplus", input)
    z = x * beta
    linear = z > threshold
    soft = log1p(where(linear, threshold, z).exp())
    return where(linear, x, soft * (1.0 / beta) if beta != 1 else soft)


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|))`` (stable for any x)."""
    x = _float_input("logsigmoid", input)
    neg, pos = x.clamp(max=0.0), x.clamp(min=0.0)
    return where(x < 0, neg - log1p(neg.exp()), -log1p((-pos).exp()))


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` for x > 0, else ``alpha * (exp(x) - 1)`` (Clevert et al. 2015)."""
    x = _float_input("elu", input)
    return _inplace(input, where(x > 0, x, alpha * expm1(x.clamp(max=0.0))), inplace)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return elu(input, alpha, inplace=True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (Barron 2017). Raises ValueError for alpha 0."""
    if alpha == 0:
        raise ArgumentError("celu: alpha must not be 0")
    x = _float_input("celu", input)
    return _inplace(input, where(x > 0, x, alpha * expm1(x.clamp(max=0.0) * (1.0 / alpha))), inplace)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return celu(input, alpha, inplace=True)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * (max(0, x) + min(0, alpha * (exp(x) - 1)))`` with Klambauer et al.'s alpha and scale."""
    x = _float_input("selu", input)
    y = where(x > 0, x * SELU_SCALE, (SELU_ALPHA * SELU_SCALE) * expm1(x.clamp(max=0.0)))
    return _inplace(input, y, inplace)


def selu_(input: Tensor) -> Tensor:
    return selu(input, inplace=True)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))`` (Misra 2019)."""
    x = _float_input("mish", input)
    return _inplace(input, x * softplus(x).tanh(), inplace)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """Gated linear unit: ``a * sigmoid(b)`` where ``a, b`` are the halves of ``input`` along ``dim``
    (Dauphin et al. 2016). Raises ShapeError for a 0-d input or an odd size along ``dim``."""
    if input.ndim == 0:
        raise ShapeError("glu: does not support 0-d (scalar) inputs")
    d = norm_axis(dim, input.ndim, "glu")
    if input.shape[d] % 2:
        raise ShapeError(f"glu: the size {input.shape[d]} of dim {dim} of input {input.shape} must be even")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


# ============================================================== softmax family
def _softmax_dim(name: str, ndim: int, dim) -> int:
    if dim is not None:
        return dim
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        UserWarning,
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def _cast(x: Tensor, dtype) -> Tensor:
    return x if dtype is None else x.to(dt.get_dtype(dtype))


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (numerically stable; ``Tensor.softmax``).
    ``dtype`` casts the input first. ``dim=None`` picks PyTorch's deprecated implicit dimension."""
    return _cast(input, dtype).softmax(_softmax_dim("softmax", input.ndim, dim))


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``x - logsumexp(x)`` along ``dim`` (``Tensor.log_softmax``)."""
    return _cast(input, dtype).log_softmax(_softmax_dim("log_softmax", input.ndim, dim))


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``softmax(-x)`` along ``dim``."""
    return (-_cast(input, dtype)).softmax(_softmax_dim("softmin", input.ndim, dim))


# Composites computed in float32 on half tensors and rounded once (PyTorch's opmath).
dt.widen_halves(
    globals(),
    (
        "hardsigmoid", "hardswish", "tanhshrink", "softsign", "silu", "gelu", "softplus", "logsigmoid",
        "elu", "celu", "selu", "mish", "glu", "softmax", "log_softmax", "softmin",
    ),
)  # fmt: skip


def rrelu(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False
) -> Tensor:
    """Randomized leaky ReLU (Xu et al. 2015, "Empirical Evaluation of Rectified Activations"), as
    ``torch.nn.functional.rrelu``: ``x`` for x >= 0, else ``a * x``. When ``training``, ``a`` is
    drawn per element from U(lower, upper) by lazyvic's seeded generator (the same seed gives the
    same slopes, inside ``lazyvic.compile``d steps too; PyTorch's generator draws other numbers);
    otherwise ``a = (lower + upper) / 2``, PyTorch's bits. Any shape, floating point.

    Raises:
        ArgumentError: ``lower > upper``. DTypeError: a non-floating input.
    """
    if lower > upper:
        raise ArgumentError(f"rrelu: lower bound {lower} must be at most upper bound {upper}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"rrelu: expected a floating-point input, got {input.dtype.name}")
    if not training:
        return _inplace(input, where(input >= 0, input, input * ((lower + upper) / 2)), inplace)
    slope = rand(*input.shape, dtype=input.dtype, device=input.device) * (upper - lower) + lower
    return _inplace(input, where(input >= 0, input, input * slope), inplace)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False) -> Tensor:
    """In-place :func:`rrelu`."""
    return rrelu(input, lower, upper, training, inplace=True)
