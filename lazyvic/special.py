"""``lazyvic.special``: the functions of PyTorch's ``torch.special`` that lazyvic has, under their
names there (``expit`` is ``sigmoid``, ``logit`` its inverse). Each takes and returns tensors of
any shape, elementwise unless it names a ``dim``, with the dtype rules and gradients of the
function it is."""

from __future__ import annotations

from lazyvic.functional.activation import sigmoid
from lazyvic.functions import expm1, log1p, log_softmax, logsumexp, softmax  # (lazyvic's own, as torch.special's)
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
    """``log(p / (1 - p))``; with ``eps``, p clamped to [eps, 1 - eps] first (PyTorch's rule)."""
    p = input if eps is None else input.clamp(eps, 1.0 - eps)
    return (p / (1.0 - p)).log()


def xlogy(input, other) -> Tensor:  # noqa: A002
    """``x * log(y)``, 0 where x is 0 (also where y is 0 or nan there, as PyTorch)."""
    x = input if isinstance(input, Tensor) else Tensor(input)
    y = other if isinstance(other, Tensor) else Tensor(other)
    safe = y.where(x != 0, 1.0)
    return (x * safe.log()).where(x != 0, 0.0)


__all__ = ["expit", "erf", "erfc", "logit", "xlogy", "expm1", "log1p", "logsumexp", "softmax", "log_softmax"]
