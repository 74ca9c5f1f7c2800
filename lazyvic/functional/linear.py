"""Linear and dropout functions (``torch.nn.functional.linear``, ``bilinear``, ``dropout``, ``dropout1d/2d/3d``)."""

from __future__ import annotations

from lazyvic import dtypes as dt
from lazyvic.errors import ShapeError
from lazyvic.random import rand
from lazyvic.tensor import Tensor, where
from lazyvic.trace.composite import mark


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``; x (..., in), weight (out, in), bias (out,). Raises ShapeError when
    ``in`` differs."""
    x = input
    if x.shape[-1:] != weight.shape[-1:]:
        raise ShapeError(f"linear: input shape {x.shape} does not fit weight shape {weight.shape}")
    y = x @ weight.T
    y = y + bias if bias is not None else y
    if x.ndim == 2 and weight.ndim == 2 and x.dtype.is_floating_point:
        return mark(y, "Gemm", (x, weight, bias), transB=1)
    return y


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y[..., o] = sum_ij x1[..., i] * weight[o, i, j] * x2[..., j] + bias[o]``
    (``torch.nn.functional.bilinear``); x1 (..., in1), x2 (..., in2) with the same leading axes,
    weight (out, in1, in2), bias (out,) -> (..., out). Computed as one product
    x1 @ weight (in1, out * in2), then a sum of products with x2 over in2. Raises ShapeError for
    operands that do not fit."""
    if weight.ndim != 3:
        raise ShapeError(f"bilinear: expected a weight of shape (out, in1, in2), got {weight.shape}")
    out, n1, n2 = weight.shape
    if input1.shape[-1:] != (n1,) or input2.shape[-1:] != (n2,) or input1.shape[:-1] != input2.shape[:-1]:
        raise ShapeError(
            f"bilinear: inputs {input1.shape} and {input2.shape} do not fit weight {weight.shape} "
            "(expected (..., in1) and (..., in2) with the same leading axes)"
        )
    lead = input1.shape[:-1]
    x1, x2 = input1.reshape(-1, n1), input2.reshape(-1, n2)
    t = (x1 @ weight.permute(1, 0, 2).reshape(n1, out * n2)).reshape(-1, out, n2)
    y = (t * x2.unsqueeze(1)).sum(-1)
    y = y + bias if bias is not None else y
    return y.reshape(*lead, out)


def _check_p(name: str, p: float) -> None:
    if not 0 <= p <= 1:
        raise ValueError(f"{name}: dropout probability has to be between 0 and 1, but got {p}")


def _dropped(name: str, input: Tensor, p: float, training: bool, inplace: bool, mask_shape: tuple) -> Tensor:
    """Zero elements with probability ``p`` (whole slices where ``mask_shape`` has 1s) and scale the
    rest by ``1 / (1 - p)``; the mask is drawn from lazyvic's seeded generator."""
    _check_p(name, p)
    if not training or p == 0:
        return input
    if p == 1:
        y = input * 0.0
    else:
        keep = rand(*mask_shape, dtype=input.dtype, device=input.device) >= p
        y = where(keep, input * (1.0 / (1.0 - p)), 0.0)
    return input._assign(y) if inplace else y


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)`` when
    ``training`` (Srivastava et al. 2014); the identity otherwise. Raises ValueError for p outside [0, 1]."""
    return _dropped("dropout", input, p, training, inplace, input.shape)


def _channel_dropout(name: str, input: Tensor, p: float, training: bool, inplace: bool, nd: int) -> Tensor:
    if input.ndim not in (nd + 1, nd + 2):
        raise ShapeError(
            f"{name}: expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) input, got shape {input.shape}"
        )
    lead = input.ndim - nd
    return _dropped(name, input, p, training, inplace, input.shape[:lead] + (1,) * nd)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels: input (N, C, L) or (C, L); each (n, c) row is dropped with probability p."""
    return _channel_dropout("dropout1d", input, p, training, inplace, 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels: input (N, C, H, W) or (C, H, W) (Tompson et al. 2015)."""
    return _channel_dropout("dropout2d", input, p, training, inplace, 2)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero whole channels: input (N, C, D, H, W) or (C, D, H, W)."""
    return _channel_dropout("dropout3d", input, p, training, inplace, 3)


# On half tensors: the product and the bias in float32, rounded once (PyTorch's addmm).
dt.widen_halves(globals(), ("linear",))


# SELU's saturation value -scale * alpha (Klambauer et al. 2017), PyTorch's constant in Dropout.cpp.
_ALPHA_PRIME = 1.7580993408473766


def _alpha_dropped(name: str, input: Tensor, p: float, training: bool, inplace: bool, mask_shape: tuple) -> Tensor:
    """PyTorch's ``_dropout_impl`` with alpha: keep with probability 1 - p, set dropped elements to
    SELU's saturation ``-alpha'``, then the affine map ``a * x + b`` that restores zero mean and
    unit variance: ``a = ((1 - p) (1 + p alpha'^2))^-1/2``, ``b = a alpha' p`` (``y = a x + b`` where
    kept, ``a alpha' (p - 1)`` where dropped)."""
    _check_p(name, p)
    if not training or p == 0 or input.numel() == 0:
        return input
    if p == 1:
        y = input * 0.0
    else:
        a = 1.0 / ((_ALPHA_PRIME * _ALPHA_PRIME * p + 1) * (1 - p)) ** 0.5
        keep = rand(*mask_shape, dtype=input.dtype, device=input.device) >= p
        y = where(keep, input * a + _ALPHA_PRIME * a * p, _ALPHA_PRIME * a * (p - 1))
    return input._assign(y) if inplace else y


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Alpha dropout (Klambauer et al. 2017, "Self-Normalizing Neural Networks"), as
    ``torch.nn.functional.alpha_dropout``: when ``training``, each element is dropped with
    probability ``p`` to SELU's saturation value, then all are scaled and shifted so that a
    zero-mean unit-variance input keeps its mean and variance (see ``_alpha_dropped``); the identity
    otherwise (PyTorch's default ``training=False``). Any shape; the mask comes from lazyvic's seeded
    generator. Raises ValueError for p outside [0, 1]."""
    return _alpha_dropped("alpha_dropout", input, p, training, inplace, input.shape)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """:func:`alpha_dropout` of whole channels, as ``torch.nn.functional.feature_alpha_dropout``:
    input (N, C, *) with at least 2 axes; one draw per (n, c). Raises ShapeError for fewer axes,
    ValueError for p outside [0, 1]."""
    if input.ndim < 2:
        raise ShapeError(f"feature_alpha_dropout: expected an input (N, C, *) of at least 2-D, got shape {input.shape}")
    mask = input.shape[:2] + (1,) * (input.ndim - 2)
    return _alpha_dropped("feature_alpha_dropout", input, p, training, inplace, mask)
