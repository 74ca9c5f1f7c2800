"""Reductions and scans: ``sum``, ``mean``, ``var``, ``std``, ``amax``/``amin``, ``max``/``min``,
``argmax``/``argmin``, ``logsumexp``, ``softmax``/``log_softmax``, ``prod``, ``cumsum``/``cumprod``,
``all``/``any``, ``count_nonzero`` (PyTorch's names, signatures and dtypes).

Written over the tensors they are handed (their methods, and ``_reduce`` for the ``sum``, ``max``,
``min``, ``argmax`` and ``prod`` primitives), so this module sits below :mod:`lazyvic.tensor`, whose
methods these functions are (``Tensor.sum is reductions.sum``). Several names here are Python
builtins (``sum``, ``max``, ``min``, ``all``, ``any``); the module reaches the builtins through
:mod:`builtins`.
"""

from __future__ import annotations

import builtins
import math
from collections import namedtuple

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import DTypeError
from lazyvic.shapes import norm_axes, norm_axis
from lazyvic.trace.composite import mark

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def _reduced(x, opname: str, dim, keepdim: bool):
    """Primitive reduction ``opname`` over ``dim`` (None: all axes), dropping them unless ``keepdim``."""
    axes = norm_axes(dim, x.ndim, opname)
    if not axes:
        return x
    out = x._reduce(opname, axes)
    if not keepdim:
        out = out.apply("reshape", out, shape=tuple([s for i, s in enumerate(x.shape) if i not in axes]))
    return out


def _integral_as_int64(x, dtype):
    """``x`` cast to ``dtype``, or bool and integer inputs to int64 (PyTorch's sum, prod, cumsum)."""
    if dtype is not None:
        return x.to(dtype)
    return x.to(dt.int64) if x.dtype.category < 2 else x


def sum(x, dim=None, keepdim: bool = False, dtype=None):  # noqa: A001
    """Sum over ``dim`` (int, tuple, or None for all). Bool and integer inputs sum as int64."""
    return _reduced(_integral_as_int64(x, dtype), "sum", dim, keepdim)


def mean(x, dim=None, keepdim: bool = False, dtype=None):
    """Mean over ``dim`` (int, tuple, or None for all); ``dtype`` casts first.

    Raises:
        DTypeError: an integer or bool input without a floating ``dtype`` (as PyTorch).
    """
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"mean: expected a floating-point input, got {x.dtype.name}")
    axes = norm_axes(dim, x.ndim, "mean")
    n = math.prod(x.shape[a] for a in axes)
    return x.sum(dim, keepdim) * (1.0 / n if n else float("nan"))


def var(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Variance over ``dim`` with Bessel's ``correction`` (default 1; ``unbiased=False`` is 0), as
    PyTorch's ``var(dim, unbiased, keepdim)`` and ``var(dim, *, correction, keepdim)``."""
    if correction is None:
        correction = 1 if unbiased is None else int(bool(unbiased))
    axes = norm_axes(dim, x.ndim, "var")
    n = math.prod(x.shape[a] for a in axes)
    centered = x - x.mean(axes, keepdim=True)
    return (centered * centered).sum(axes, keepdim) * (
        1.0 / builtins.max(n - correction, 0) if n > correction else float("nan")
    )


def std(x, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    """Standard deviation: ``var(...).sqrt()`` (same arguments)."""
    return var(x, dim, unbiased, keepdim, correction=correction).sqrt()


def amax(x, dim=None, keepdim: bool = False):
    """Maximum over ``dim`` (a tied maximum shares the gradient, as PyTorch's amax)."""
    return _reduced(x, "max", dim, keepdim)


def amin(x, dim=None, keepdim: bool = False):
    return _reduced(x, "min", dim, keepdim)


def max(x, dim=None, keepdim: bool = False):  # noqa: A001
    """``max()`` -> tensor; ``max(dim)`` -> (values, indices) as in PyTorch; ``max(other)`` -> maximum."""
    if _is_tensor(dim):
        return x.maximum(dim)
    if dim is None:
        return x.amax()
    return _selected(x, dim, keepdim, x.argmax, "max")


def min(x, dim=None, keepdim: bool = False):  # noqa: A001
    """``min()`` -> tensor; ``min(dim)`` -> (values, indices); ``min(other)`` -> minimum."""
    if _is_tensor(dim):
        return x.minimum(dim)
    if dim is None:
        return x.amin()
    return _selected(x, dim, keepdim, x.argmin, "min")


def _selected(x, dim, keepdim: bool, arg, name: str) -> ValuesIndices:
    """``max(dim)`` / ``min(dim)``: the values gathered at the index ``arg`` (argmax or argmin)
    finds, so that, as in PyTorch, the whole gradient goes to the returned index (``amax``
    shares it among ties). A 0-d ``x`` (dim 0 or -1) is its own value, at index 0."""
    if x.ndim == 0:
        norm_axis(dim, 1, name)
        return ValuesIndices(x.clone(), arg())
    index = arg(dim, True)
    dim = norm_axis(dim, x.ndim, name)
    values = x.gather(dim, index)
    if not keepdim:
        values, index = values.squeeze(dim), index.squeeze(dim)
    return ValuesIndices(values, index)


def argmax(x, dim=None, keepdim: bool = False):
    """Index of the first maximum along ``dim`` (of the flattened tensor when None), int64.

    Raises:
        DTypeError: a bool tensor (as PyTorch).
    """
    if x.dtype is dt.bool_:
        raise DTypeError("argmax: bool tensors are not supported; cast to an integer dtype first")
    if dim is None:
        return x.reshape(-1).argmax(0, keepdim=False)
    return _reduced(x, "argmax", norm_axis(dim, x.ndim, "argmax"), keepdim)


def argmin(x, dim=None, keepdim: bool = False):
    """Index of the first minimum along ``dim`` (of the flattened tensor when None), int64: the
    first maximum of an order-reversing map that cannot overflow (``-1 - x`` for signed
    integers, ``max - x`` for unsigned ones, ``-x`` for floats).

    Raises:
        DTypeError: a bool tensor (as PyTorch).
    """
    if x.dtype is dt.bool_:
        raise DTypeError("argmin: bool tensors are not supported; cast to an integer dtype first")
    if x.dtype.category == 1:
        flipped = (int(np.iinfo(x.dtype.np).max) - x) if not x.dtype.signed else (-1 - x)
    else:
        flipped = -x
    return flipped.argmax(dim, keepdim)


def _stable_max(x, dim: int):
    """The shift of a stable ``log(sum(exp))`` along ``dim``: the maximum, but 0 where it is
    infinite (PyTorch's rule: ``inf - inf`` would be NaN) and for an empty axis (no maximum)."""
    if x.shape[dim] == 0:
        return x.new_zeros(*x.shape[:dim], 1, *x.shape[dim + 1 :])
    m = x.amax(dim, keepdim=True).detach()
    return m.where(m.abs() != math.inf, 0.0) if x.dtype.is_floating_point else m


def logsumexp(x, dim, keepdim: bool = False):
    """``log(sum(exp(x)))`` over ``dim`` (an int or a tuple), computed as ``m + log(sum(exp(x - m)))``
    with ``m`` the maximum (0 where it is infinite): ``logsumexp([inf, 1]) = inf``,
    ``logsumexp([-inf, -inf]) = -inf`` and an empty axis gives ``-inf``, as in PyTorch."""
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    dims = tuple(norm_axis(d, x.ndim, "logsumexp") for d in dims)
    if len(dims) > 1:  # one axis: the moved-together reduced axes
        rest = [d for d in range(x.ndim) if d not in dims]
        moved = x.permute(*rest, *dims).reshape(*[x.shape[d] for d in rest], math.prod(x.shape[d] for d in dims))
        out = logsumexp(moved, -1)
        if keepdim:
            out = out.reshape(*[1 if d in dims else x.shape[d] for d in range(x.ndim)])
        return out
    d = dims[0]
    m = _stable_max(x, d)
    out = (x - m).exp().sum(d, keepdim=True).log() + m
    return out if keepdim else out.squeeze(d)


def softmax(x, dim: int, dtype=None):
    """``exp(x - max) / sum(exp(x - max))`` along ``dim`` (numerically stable); ``dtype`` casts first."""
    if dtype is not None:
        x = x.to(dtype)
    dim = norm_axis(dim, x.ndim, "softmax")
    m = x.amax(dim, keepdim=True).detach() if x.shape[dim] else 0.0  # an empty axis: an empty result
    e = (x - m).exp()
    return mark(e / e.sum(dim, keepdim=True), "Softmax", (x,), axis=dim)


def log_softmax(x, dim: int, dtype=None):
    """``x - logsumexp(x)`` along ``dim``; ``dtype`` casts first."""
    if dtype is not None:
        x = x.to(dtype)
    dim = norm_axis(dim, x.ndim, "log_softmax")
    m = x.amax(dim, keepdim=True).detach() if x.shape[dim] else 0.0  # an empty axis: an empty result
    shifted = x - m
    return mark(shifted - shifted.exp().sum(dim, keepdim=True).log(), "LogSoftmax", (x,), axis=dim)


def prod(x, dim=None, keepdim: bool = False, dtype=None):
    """Product over ``dim`` (an int, or None for all elements: a 0-d result). Bool and integer
    inputs multiply as int64, as in PyTorch. The gradient is the product of the other elements
    (right with zeros in the input, as PyTorch's)."""
    x = _integral_as_int64(x, dtype)
    if dim is None:
        return _reduced(x, "prod", None, False)
    return _reduced(x, "prod", norm_axis(dim, x.ndim, "prod"), keepdim)


def _scan(x, dim: int, combine, identity, opname: str):
    """Inclusive scan along ``dim`` in ceil(log2(n)) steps (Hillis and Steele, 1986): step k
    combines each element with the one 2**k places before it (``identity`` before the start).
    Movement and elementwise ops only, so it fuses and differentiates like any composite."""
    d = norm_axis(dim, x.ndim, opname)
    if x.ndim == 0:
        return x + 0 if x.dtype is not dt.bool_ else x
    n, k, y = x.shape[d], 1, x
    while k < n:
        pads = tuple((k, 0) if i == d else (0, 0) for i in range(x.ndim))
        shifted = y.narrow(d, 0, n - k)._pad(pads)
        if identity != 0:
            inside = shifted.new_ones(*shifted.shape[:d], n - k, *shifted.shape[d + 1 :]).bool()._pad(pads)
            shifted = shifted.where(inside, identity)
        y = _materialized(combine(y, shifted))
        k *= 2
    return y if n > 1 else y + 0


def _materialized(y):
    """``y`` itself, read from a buffer: a sum over a new size-1 axis (a reduction ends its kernel).
    Inlined instead, each scan step would read the previous one twice, and the kernel of an
    n-element scan would grow as n (measured: 22 s to compile for n = 40, 81 s for 80)."""
    return y.reshape(*y.shape, 1)._reduce("sum", (y.ndim,)).reshape(*y.shape)


def cumsum(x, dim: int, dtype=None):
    """Inclusive cumulative sum along ``dim``; bool and integer inputs sum as int64 (PyTorch).
    Floating results may differ from a left-to-right sum in the last bits (the order is a tree)."""
    return _scan(_integral_as_int64(x, dtype), dim, lambda a, b: a + b, 0, "cumsum")


def cumprod(x, dim: int, dtype=None):
    """Inclusive cumulative product along ``dim``; bool and integer inputs multiply as int64."""
    return _scan(_integral_as_int64(x, dtype), dim, lambda a, b: a * b, 1, "cumprod")


def all(x, dim=None, keepdim: bool = False):  # noqa: A001
    """True where every element along ``dim`` (None: all) is non-zero; a bool tensor."""
    return (x == 0).sum(dim, keepdim) == 0


def any(x, dim=None, keepdim: bool = False):  # noqa: A001
    """True where some element along ``dim`` (None: all) is non-zero (NaN counts); a bool tensor."""
    return (x != 0).sum(dim, keepdim) > 0


def count_nonzero(x, dim=None):
    """Number of non-zero elements along ``dim`` (None: all), int64."""
    return (x != 0).sum(dim)


# Composites computed in float32 on half tensors and rounded once (PyTorch's opmath).
dt.widen_halves(globals(), ("mean", "var", "std", "logsumexp", "softmax", "log_softmax", "cumsum", "cumprod"))
