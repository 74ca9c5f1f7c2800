"""Elementwise functions written as compositions of primitives: ``logit`` (with ``eps``),
``xlogy``, ``sinc``, ``copysign``, ``signbit`` and ``isin`` (PyTorch's names, signatures,
dtypes, NaN rules and gradients). Written over the tensors they are handed, so this module
sits below :mod:`lazyvic.tensor`, whose methods these functions are.
"""

from __future__ import annotations

import math
import numbers

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def _float(x):
    return x if x.dtype.is_floating_point else x.to(dt.default_float)


def logit(x, eps=None):
    """``log(p / (1 - p))`` (``torch.logit``); with ``eps``, ``p`` is ``x`` clamped to
    [eps, 1 - eps] (its gradient 0 outside). Integer inputs give the default float dtype;
    0 gives -inf, 1 gives inf, outside [0, 1] NaN."""
    p = _float(x)
    if eps is not None:
        p = p.clamp(float(eps), 1.0 - float(eps))
    return (p / (1.0 - p)).log()


def _number(like, value):
    """A Python number as a 0-d tensor of the dtype it takes beside the tensor ``like``."""
    if not isinstance(value, numbers.Number):
        raise DTypeError(f"expected a tensor or a Python number, got {type(value).__name__}")
    return like.new_tensor(value, dtype=dt.scalar_dtype_for(like.dtype, value))


def _pair(x, other, opname: str):
    """Both operands as tensors of their promoted floating dtype (a Python number joins the tensor)."""
    if not _is_tensor(x) and not _is_tensor(other):
        raise DTypeError(
            f"{opname}: expected at least one tensor operand, got {type(x).__name__} and {type(other).__name__}"
        )
    if not _is_tensor(x):
        x = _number(other, x)
    if not _is_tensor(other):
        other = _number(x, other)
    d = dt.promote(x.dtype, other.dtype)
    d = d if d.is_floating_point else dt.default_float
    return x.to(d), other.to(d)


def xlogy(x, other):
    """``x * log(other)`` elementwise, broadcast (``torch.xlogy``): 0 where ``x`` is 0, NaN where
    ``other`` is NaN (also where ``x`` is 0), as PyTorch. One operand may be a Python number;
    integer operands give the default float dtype.

    Raises:
        ShapeError: shapes that do not broadcast. DTypeError: no tensor operand."""
    x, y = _pair(x, other, "xlogy")
    zero = (x == 0) & (y == y)
    safe = y.where(~zero, 1.0)
    return (x * safe.log()).where(~zero, 0.0)


def sinc(x):
    """The normalized sinc ``sin(pi x) / (pi x)``, 1 at 0 (``torch.sinc``), with gradient 0 at
    0. Integer inputs give the default float dtype."""
    x = _float(x)
    zero = x == 0
    scaled = x.where(~zero, 1.0) * math.pi
    return (scaled.sin() / scaled).where(~zero, 1.0)


def signbit(x):
    """True where the sign bit is set (``torch.signbit``): negative numbers and -0.0; bool.
    Limitation: the sign bit of a NaN is not read (no bit-level view of floats here), so a
    negative NaN gives False where PyTorch gives True."""
    if x.dtype is dt.bool_ or (x.dtype.category == 1 and not x.dtype.signed):
        return x.zeros_like().to(dt.bool_)
    if not x.dtype.is_floating_point:
        return x < 0
    # -0.0: its reciprocal is -inf
    return (x < 0) | ((x == 0) & ((1.0 / x) < 0))


def copysign(x, other):
    """``|x|`` with the sign of ``other`` (broadcast; ``torch.copysign``): -0.0 counts as
    negative. ``other`` may be a Python number; integer operands give the default float dtype.
    The gradient with respect to ``x`` is ``sign(result) * sign(x)`` (0 at 0), and 0 with respect
    to ``other``, as PyTorch's.

    Raises:
        ShapeError: shapes that do not broadcast."""
    if not _is_tensor(other):
        negative = math.copysign(1.0, float(other)) < 0
        x = _float(x)
        return -x.abs() if negative else x.abs()
    x, y = _pair(x, other, "copysign")
    magnitude = x.abs()
    return (-magnitude).where(signbit(y), magnitude)


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    """True where an element of ``elements`` is in ``test_elements`` (``torch.isin``): either may
    be a Python number; bool of ``elements``' shape (``invert``: the negation). Compared after
    promotion, as ``==``; NaN is in nothing. Memory of ``elements.numel() * test_elements.numel()``
    (every pair is compared).

    Raises:
        DTypeError: no tensor argument."""
    if not _is_tensor(elements) and not _is_tensor(test_elements):
        raise DTypeError("isin: expected elements or test_elements to be a Tensor")
    if not _is_tensor(elements):
        elements = _number(test_elements, elements)
    if not _is_tensor(test_elements):
        test_elements = _number(elements, test_elements)
    found = (elements.unsqueeze(-1) == test_elements.reshape(-1)).any(-1)
    return ~found if invert else found
