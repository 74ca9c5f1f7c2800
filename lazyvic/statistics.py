"""Statistics over tensors: ``aminmax``, ``cov``, ``corrcoef``, ``quantile`` / ``nanquantile``,
``nanmedian``, ``mode``, ``dist``, ``renorm``, the scans ``cummax`` / ``cummin`` /
``logcumsumexp`` (PyTorch's names, signatures, dtypes and NaN rules).

Each is a composition of existing ops (sort, gather, the scans of :mod:`lazyvic.reductions`,
elementwise ops), so it is lazy, fuses and differentiates where PyTorch's does. Written over the
tensors they are handed, so this module sits below :mod:`lazyvic.tensor`, whose methods these
functions are.
"""

from __future__ import annotations

import math
import numbers
from collections import namedtuple

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.indexing import _host_data
from lazyvic.linalg import vector_norm
from lazyvic.ordering import sorted_pick
from lazyvic.reductions import ValuesIndices, _scan
from lazyvic.shapes import norm_axis

MinMax = namedtuple("aminmax", ["min", "max"])

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def aminmax(x, *, dim=None, keepdim: bool = False) -> MinMax:
    """(min, max) of all elements (``dim`` None) or along ``dim``, as ``amin`` and ``amax``
    (``torch.aminmax``); a named tuple with fields ``min`` and ``max``.

    Raises:
        lazyvic.errors.IndexError: ``dim`` out of range. ShapeError: an empty input without ``dim``.
    """
    if dim is None:
        if x.numel() == 0:
            raise ShapeError(f"aminmax: cannot compute aminmax over an empty input of shape {x.shape}")
        if keepdim:
            axes = tuple(range(x.ndim))
            return MinMax(x.amin(axes, keepdim=True), x.amax(axes, keepdim=True))
        return MinMax(x.amin(), x.amax())
    d = norm_axis(dim, x.ndim, "aminmax")
    return MinMax(x.amin(d, keepdim), x.amax(d, keepdim))


# ------------------------------------------------------------------ covariance
def cov(x, *, correction: int = 1, fweights=None, aweights=None):
    """The covariance matrix of the variables in the rows of ``x`` (V, N) (one variable: a 1-D
    (N,) tensor), observations in the columns (``torch.cov``, NumPy's ``np.cov``): (V, V), or
    0-d for one variable. ``correction``: 1 (Bessel's, the default) or 0; ``fweights`` (N,)
    integer frequency weights, ``aweights`` (N,) float observation weights. Integer inputs give
    the default float dtype. A non-positive number of degrees of freedom gives inf / NaN (PyTorch
    also warns).

    Raises:
        ShapeError: ``x`` of more than 2 dimensions, weights that are not (N,).
        DTypeError: ``fweights`` that are not integers, ``aweights`` that are not floats.
    """
    if x.ndim > 2:
        raise ShapeError(f"cov: expected input to have two or fewer dimensions but got an input of shape {x.shape}")
    if not x.dtype.is_floating_point:
        x = x.to(dt.default_float)
    obs = x.reshape(1, -1) if x.ndim < 2 else x
    n = obs.shape[1]
    w = None
    for name, weights, integral in (("fweights", fweights, True), ("aweights", aweights, False)):
        if weights is None:
            continue
        if weights.ndim > 1 or (weights.ndim == 1 and weights.shape[0] != n):
            raise ShapeError(f"cov: expected {name} to have one dimension of size {n}, got shape {weights.shape}")
        if integral and weights.dtype.category != 1:
            raise DTypeError(f"cov: expected fweights to have an integral dtype, got {weights.dtype.name}")
        if not integral and not weights.dtype.is_floating_point:
            raise DTypeError(f"cov: expected aweights to have a floating point dtype, got {weights.dtype.name}")
        weights = weights.to(obs.dtype)
        w = weights if w is None else w * weights
    if w is None:
        avg = obs.mean(1, keepdim=True)
        norm = float(n - correction)
        centered = obs - avg
        c = (centered @ centered.t()) / (norm if norm > 0 else 0.0)
    else:
        w_sum = w.sum()
        avg = (obs * w).sum(1, keepdim=True) / w_sum
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = w_sum - correction
        else:
            norm = w_sum - correction * (w * aweights.to(obs.dtype)).sum() / w_sum
        norm = norm.clamp_min(0.0)
        centered = obs - avg
        c = ((centered * w) @ centered.t()) / norm
    return c.squeeze()


def corrcoef(x):
    """Pearson's correlation coefficients of the variables in the rows of ``x`` (V, N) or (N,)
    (``torch.corrcoef``, ``np.corrcoef``): the covariance divided by the outer product of the
    standard deviations, clipped to [-1, 1]. (V, V), or 0-d (1, or NaN) for one variable.

    Raises:
        ShapeError: ``x`` of more than 2 dimensions."""
    if x.ndim > 2:
        raise ShapeError(f"corrcoef: expected input to have two or fewer dimensions but got {x.shape}")
    c = cov(x)
    if c.ndim == 0:
        return c / c
    std = c.diagonal().sqrt()
    c = c / std.unsqueeze(1)
    c = c / std.unsqueeze(0)
    return c.clamp(-1.0, 1.0)


# ------------------------------------------------------------------- quantiles
def _quantile(opname: str, x, q, dim, keepdim: bool, interpolation: str, ignore_nan: bool):
    if x.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"{opname}() input tensor must be either float or double dtype, got {x.dtype.name}")
    if interpolation not in _INTERPOLATIONS:
        raise ArgumentError(
            f"{opname}() interpolation must be one of linear, lower, higher, midpoint or nearest. Got {interpolation!r}"
        )
    if x.numel() == 0:
        raise ShapeError(f"{opname}() input tensor must be non-empty, got shape {x.shape}")
    if _is_tensor(q):
        if q.dtype is not x.dtype:
            raise DTypeError(
                f"{opname}() q tensor must be same dtype as the input tensor, got {q.dtype.name} and {x.dtype.name}"
            )
        if q.ndim > 1:
            raise ShapeError(f"{opname}() q must be a scalar or 1D tensor, got shape {q.shape}")
        qs = _host_data(q)
    else:
        qs = np.asarray(q, dtype=np.float64)
        if qs.ndim > 1:
            raise ShapeError(f"{opname}() q must be a scalar or 1D tensor, got shape {qs.shape}")
        q = x.new_tensor(qs.astype(x.dtype.np), dtype=x.dtype)
    if qs is not None and qs.size and not ((qs >= 0) & (qs <= 1)).all():
        raise ArgumentError(f"{opname}() q values must be in the range [0, 1], got {qs.tolist()}")
    scalar_q = q.ndim == 0
    if dim is None:
        moved = x.reshape(-1)
        out_shape = [1] * x.ndim if keepdim else []
    else:
        d = norm_axis(dim, x.ndim, opname)
        moved = x.movedim(d, -1) if x.ndim else x.reshape(1)
        out_shape = [1 if i == d else s for i, s in enumerate(x.shape)] if keepdim else moved.shape[:-1]
    values = moved.sort(-1).values  # NaN last
    n = values.shape[-1]
    qv = q.reshape(-1)
    if ignore_nan:
        # the rank among the values that are not NaN; an all-NaN slice: rank 0, a NaN
        ranks = qv * ((values == values).sum(-1, keepdim=True).to(x.dtype) - 1)
        ranks = ranks.where(ranks >= 0, 0.0)
    else:
        # a slice holding NaN: the last rank, a NaN
        has_nan = (values != values).any(-1, keepdim=True)
        ranks = (qv * float(n - 1)).where(~has_nan, float(n - 1))
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.to(dt.int64)
    out = values.gather(-1, below)
    if interpolation in ("linear", "midpoint"):
        weights = ranks - below.to(x.dtype) if interpolation == "linear" else ranks.zeros_like() + 0.5
        above = values.gather(-1, ranks.ceil().to(dt.int64))
        out = out.lerp(above, weights)
    if scalar_q:
        return out.squeeze(-1).reshape(*out_shape)
    return out.movedim(-1, 0).reshape(qv.shape[0], *out_shape)


def quantile(x, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    """The ``q``-th quantiles of ``x`` along ``dim`` (of all elements when None) (``torch.quantile``):
    ``q`` a number or a 0-d / 1-D tensor in [0, 1] of ``x``'s dtype. Float32 and float64 only. The
    rank ``q * (n - 1)`` of the sorted values is interpolated by ``interpolation``: ``linear``,
    ``lower``, ``higher``, ``midpoint`` or ``nearest`` (ties to even). A slice holding NaN gives NaN.
    Shape: the reduced shape (``keepdim`` keeps the axis as 1), with a leading axis of len(q) for a
    1-D ``q``. Differentiable (the gradient goes to the elements interpolated).

    Raises:
        DTypeError: another dtype, or a ``q`` tensor of another dtype. ArgumentError: ``q`` outside
            [0, 1] (checked where its values are known without a sync), an unknown interpolation.
        ShapeError: an empty input, a ``q`` of more than one dimension.
    """
    return _quantile("quantile", x, q, dim, keepdim, interpolation, False)


def nanquantile(x, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    """``quantile`` ignoring NaN values (``torch.nanquantile``): the rank counts only the values
    that are not NaN; a slice of NaNs only gives NaN. Same arguments, shapes and errors."""
    return _quantile("nanquantile", x, q, dim, keepdim, interpolation, True)


def nanmedian(x, dim=None, keepdim: bool = False):
    """The lower median ignoring NaN values (``torch.nanmedian``): of all elements (a 0-d value)
    when ``dim`` is None, else (values, indices) along ``dim``, the index the position of the
    median in ``x``. A slice of NaNs only gives NaN (index: its middle one, ``(n - 1) // 2``, as PyTorch).

    Raises:
        lazyvic.errors.IndexError: an empty dimension."""
    if dim is None:
        return nanmedian(x.reshape(-1), 0).values
    if not x.dtype.is_floating_point:
        return x.median(dim, keepdim)
    return sorted_pick(x, dim, keepdim, "nanmedian", _nanmedian_position)


def _nanmedian_position(x, order, d: int, n: int):
    count = (x == x).sum(d, keepdim=True)  # NaNs sort last, after the count numbers
    return ((count - 1) // 2).where(count > 0, (n - 1) // 2)  # all NaN: the middle one, as PyTorch


def mode(x, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The most frequent value along ``dim`` and an index of it (``torch.mode``): among values
    equally frequent, the smallest; the index is the last position of that value in ``x`` (as
    PyTorch's CPU kernel). Computed by comparing every pair of elements along ``dim``
    (memory of ``numel * size(dim)``). Not differentiable in PyTorch; here the values' gradient
    goes to the indexed position.

    Raises:
        lazyvic.errors.IndexError: ``dim`` out of range or empty."""
    d = norm_axis(dim, x.ndim, "mode")
    if x.ndim == 0:
        return ValuesIndices(x.clone(), x.argsort(0))
    if x.shape[d] == 0:
        raise LIndexError(f"mode: cannot compute the mode of an empty dimension {d} (shape {x.shape})")
    moved = x.movedim(d, -1)
    order = moved.argsort(-1)
    s = moved.gather(-1, order)
    same = s.unsqueeze(-1) == s.unsqueeze(-2)
    counts = same.to(dt.int64).sum(-1)
    first = counts.argmax(-1, keepdim=True)  # sorted ascending: the smallest of the most frequent
    last = first + counts.gather(-1, first) - 1  # its run ends at the last position of the value
    indices = order.gather(-1, last).movedim(-1, d)
    values = x.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return ValuesIndices(values, indices)


# --------------------------------------------------------------------- scans
def _cumulative_extreme(x, dim: int, largest: bool, opname: str) -> ValuesIndices:
    d = norm_axis(dim, x.ndim, opname)
    if x.ndim == 0:
        return ValuesIndices(x.clone(), x.new_zeros().to(dt.int64))
    if x.dtype is dt.bool_:
        x_cmp = x.to(dt.uint8)
    else:
        x_cmp = x
    if x_cmp.dtype.is_floating_point:
        identity = -math.inf if largest else math.inf
    else:
        info = np.iinfo(x_cmp.dtype.np)
        identity = int(info.min if largest else info.max)
    nan_first = (lambda a, b: a.maximum(b)) if largest else (lambda a, b: a.minimum(b))
    running = _scan(x_cmp.detach(), d, nan_first, identity, opname)
    # the running extreme was (re)reached at a position where the element equals it (or is NaN);
    # the index is the last such position so far (PyTorch takes the last of equal elements)
    reached = x_cmp.detach() == running
    if x_cmp.dtype.is_floating_point:
        reached = reached | x_cmp.isnan()
    steps = [1] * x.ndim
    steps[d] = x.shape[d]
    positions = x.new_tensor(np.arange(x.shape[d], dtype=np.int64).reshape(steps), dtype=dt.int64)
    indices = _scan(positions.where(reached, 0), d, lambda a, b: a.maximum(b), 0, opname)
    return ValuesIndices(x.gather(d, indices), indices)


def cummax(x, dim: int):
    """(values, indices): the running maximum along ``dim`` and the index where it was reached,
    the last of equal elements (``torch.cummax``); NaN propagates, its index the last NaN's. The
    values' gradient goes to those indices."""
    return _cumulative_extreme(x, dim, True, "cummax")


def cummin(x, dim: int):
    """(values, indices): the running minimum along ``dim`` (``torch.cummin``; see ``cummax``)."""
    return _cumulative_extreme(x, dim, False, "cummin")


def _log_add_exp(a, b):
    """``log(exp(a) + exp(b))``, stably: ``max + log1p(exp(min - max))`` (equal infinities kept)."""
    hi, lo = a.maximum(b), a.minimum(b)
    out = hi + (lo - hi).exp().log1p()
    return out.where(~((hi == lo) & hi.isinf()), hi)


def logcumsumexp(x, dim: int):
    """``log(cumsum(exp(x)))`` along ``dim`` (``torch.logcumsumexp``), stable for large and
    small values: a scan of the pairwise ``log(exp(a) + exp(b))``. Integer inputs give the default
    float dtype."""
    if not x.dtype.is_floating_point:
        x = x.to(dt.default_float)
    return _scan(x, dim, _log_add_exp, -math.inf, "logcumsumexp")


# ------------------------------------------------------------------- norms
def dist(x, other, p=2):
    """The ``p``-norm of ``x - other`` (broadcast together), a 0-d tensor (``torch.dist``): ``p``
    a number, ``inf`` or ``-inf`` (0 counts the elements that differ).

    Raises:
        ShapeError: shapes that do not broadcast. DTypeError: non-float inputs."""
    if not _is_tensor(other):
        raise DTypeError(f"dist: argument 'other' must be a Tensor, not {type(other).__name__}")
    if not (x.dtype.is_floating_point and other.dtype.is_floating_point):
        raise DTypeError(f"dist: expected floating-point inputs, got {x.dtype.name} and {other.dtype.name}")
    return vector_norm(x - other, p)


def renorm(x, p, dim: int, maxnorm):
    """Each slice of ``x`` along ``dim`` (``x.select(dim, i)``) whose ``p``-norm exceeds
    ``maxnorm`` scaled to norm ``maxnorm`` (``torch.renorm``: by ``maxnorm / (norm + 1e-7)``);
    the others unchanged. Float inputs; same shape.

    Raises:
        ArgumentError: ``p`` not positive, ``maxnorm`` negative. ShapeError: a 0-d input.
        DTypeError: an integer input."""
    if not x.dtype.is_floating_point:
        raise DTypeError(f"renorm: expected a floating-point input, got {x.dtype.name}")
    if not isinstance(p, numbers.Number) or p <= 0:
        raise ArgumentError(f"renorm: non-positive-norm not supported, got p={p}")
    if maxnorm < 0:
        raise ArgumentError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if x.ndim == 0:
        raise ShapeError("renorm: input needs at least 1 dimension, got a 0-d tensor")
    d = norm_axis(dim, x.ndim, "renorm")
    others = tuple(i for i in range(x.ndim) if i != d)
    norms = vector_norm(x, p, others, keepdim=True) if others else x.abs()
    scale = (maxnorm / (norms + 1e-7)).where(norms > maxnorm, 1.0)
    return x * scale
