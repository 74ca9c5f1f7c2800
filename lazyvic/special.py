"""``lazyvic.special``: the functions of PyTorch's ``torch.special`` that lazyvic has, under their
names there (``expit`` is ``sigmoid``, ``logit`` its inverse). Each takes and returns tensors of
any shape, elementwise unless it names a ``dim``, with the dtype rules and gradients of the
function it is."""

from __future__ import annotations

from lazyvic.functional.activation import sigmoid
from lazyvic.functions import expm1, log1p, log_softmax, logsumexp, softmax  # (lazyvic's own, as torch.special's)
from lazyvic.functions import xlogy as _xlogy
from lazyvic.tensor import Tensor


def expit(input: Tensor) -> Tensor:  # noqa: A002
    """The logistic sigmoid ``1 / (1 + exp(-x))`` (``torch.special.expit``)."""
    return sigmoid(input)


def erf(input: Tensor) -> Tensor:  # noqa: A002
    """The error function (the kernels' approximation, as ``Tensor.erf``)."""
    return input.erf()


def erfc(input: Tensor) -> Tensor:  # noqa: A002
    """``1 - erf(x)``, computed as that difference (no extra accuracy for large x)."""
    return 1.0 - input.erf()


def logit(input: Tensor, eps: float | None = None) -> Tensor:  # noqa: A002
    """``log(p / (1 - p))``; with ``eps``, p clamped to [eps, 1 - eps] first (``Tensor.logit``)."""
    return input.logit(eps)


def xlogy(input, other) -> Tensor:  # noqa: A002
    """``x * log(y)``: 0 where x is 0, NaN where y is NaN (``lazyvic.xlogy``, PyTorch's rule)."""
    return _xlogy(input, other)


__all__ = ["expit", "erf", "erfc", "logit", "xlogy", "expm1", "log1p", "logsumexp", "softmax", "log_softmax"]
