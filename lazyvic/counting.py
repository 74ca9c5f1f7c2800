"""Counting values: ``bincount``, ``histc``, ``histogram`` and ``unique_consecutive`` (PyTorch's
names, signatures and dtypes).

The counts are a ``scatter_add`` of ones (or weights) at each value's bin, so they stay lazy
unless the number of bins is data: ``bincount`` reads its input's maximum (a sync point),
``histogram`` with a range taken from the data reads the minimum and maximum (a sync point:
PyTorch's bin edges are computed on the host from them), and ``unique_consecutive`` is a sync
point (its output size is data). Written over the tensors they are handed, so this module sits
below :mod:`lazyvic.tensor`, whose methods these functions are.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.shapes import norm_axis

Histogram = namedtuple("histogram", ["hist", "bin_edges"])


def _is_tensor(value) -> bool:
    return hasattr(value, "_node")


def bincount(x, weights=None, minlength: int = 0):
    """The number of occurrences of each value 0, 1, ... in the 1-D non-negative integer tensor
    ``x`` (``torch.bincount``): int64 of length ``max(x.max() + 1, minlength)``; with
    ``weights`` (the shape of ``x``) the sum of the weights of each value, float32 for float32
    weights and float64 for any other weights, as PyTorch. A sync point: the length is data
    (reading ``x`` to check it and find its maximum). The gradient of weighted counts goes back
    to the weights (a gather).

    Raises:
        ShapeError: ``x`` not 1-D, ``weights`` not of ``x``'s shape. DTypeError: ``x`` not an
            integer tensor. ArgumentError: a negative value, a negative ``minlength``.
    """
    if x.ndim != 1:
        raise ShapeError(f"bincount only supports 1-d non-negative integral inputs, got shape {x.shape}")
    if x.dtype.category != 1:
        raise DTypeError(f"bincount only supports 1-d non-negative integral inputs, got dtype {x.dtype.name}")
    if minlength < 0:
        raise ArgumentError(f"bincount: minlength should be >= 0, got {minlength}")
    if weights is not None and (not _is_tensor(weights) or weights.shape != x.shape):
        shape = weights.shape if _is_tensor(weights) else type(weights).__name__
        raise ShapeError(
            f"bincount: weights should be 1-d and have the same length as input, got {shape} for input {x.shape}"
        )
    values = np.asarray(x.numpy())
    if values.size and values.min() < 0:
        raise ArgumentError(
            f"bincount only supports 1-d non-negative integral inputs, got the value {int(values.min())}"
        )
    length = max(int(values.max()) + 1 if values.size else 0, int(minlength))
    index = x.to(dt.int64)
    if weights is None:
        return index.new_zeros(length).scatter_add(0, index, index.ones_like())
    d = dt.float32 if weights.dtype is dt.float32 else dt.float64
    w = weights.to(d)
    return w.new_zeros(length).scatter_add(0, index, w)


def _counts(x, bins: int, index, inside, weight=None):
    """(bins,) of ``x``'s dtype: the sum over elements ``inside`` of 1 (or ``weight``) at ``index``."""
    ones = x.ones_like() if weight is None else weight.to(x.dtype)
    contribution = ones.where(inside, 0).reshape(-1)
    return x.new_zeros(bins).scatter_add(0, index.where(inside, 0).reshape(-1), contribution)


def histc(x, bins: int = 100, min=0, max=0):  # noqa: A002 (PyTorch's argument names)
    """The histogram of ``x`` in ``bins`` equal bins over [min, max] (``torch.histc``): (bins,) of
    ``x``'s (floating) dtype. ``min == max`` (the default 0, 0) takes the range from the data (its
    minimum and maximum, lazily); a range of one value is widened to [v - 1, v + 1]. Elements
    outside the range (and NaN) are not counted; ``max`` counts in the last bin. The bin of an
    element is ``floor((x - min) * bins / (max - min))`` in ``x``'s dtype, as PyTorch's CPU kernel.

    Raises:
        DTypeError: an integer input. ArgumentError: ``bins`` not positive, ``min > max``.
    """
    if not x.dtype.is_floating_point:
        raise DTypeError(f"histc: \"histogram_cpu\" not implemented for '{x.dtype.name}' (expected a float tensor)")
    if bins <= 0:
        raise ArgumentError(f"histc: bins must be > 0, but got {bins}")
    if min > max:
        raise ArgumentError(f"histc: max must be larger than min, got min={min} and max={max}")
    if min == max and x.numel():
        lo, hi = x.amin(), x.amax()
    else:
        lo, hi = x.new_full((), float(min)), x.new_full((), float(max))
    same = lo == hi
    lo, hi = lo.where(~same, lo - 1), hi.where(~same, hi + 1)
    inside = (x >= lo) & (x <= hi)
    index = ((x - lo) * float(bins) / (hi - lo)).where(inside, 0.0).to(dt.int64).clamp_max(bins - 1)
    return _counts(x, bins, index, inside)


def _linspace_like_torch(lo: float, hi: float, steps: int, d: dt.DType) -> np.ndarray:
    """PyTorch's CPU ``linspace`` in dtype ``d``: the first half counted up from ``lo``, the second
    half down from ``hi`` (so both ends are exact)."""
    t = d.np.type if d in (dt.float32, dt.float64) else np.float32
    lo_, hi_ = t(lo), t(hi)
    step = (hi_ - lo_) / t(steps - 1) if steps > 1 else t(0)
    i = np.arange(steps)
    half = steps // 2
    out = np.where(i < half, lo_ + step * i.astype(t), hi_ - step * (steps - 1 - i).astype(t))
    return out.astype(t)


def histogram(x, bins=100, *, range=None, weight=None, density: bool = False) -> Histogram:  # noqa: A002
    """(hist, bin_edges) (``torch.histogram``, NumPy's ``np.histogram``): ``bins`` an int (equal
    bins over ``range``, default the data's minimum and maximum, read with a sync) or a 1-D
    tensor of increasing edges. An element ``v`` falls in the bin ``i`` with
    ``edges[i] <= v < edges[i + 1]``, the last bin closed; elements outside (and NaN) are not
    counted. ``weight`` (``x``'s shape) weighs each element; ``density`` divides by the total and
    the bin widths. Float inputs; ``hist`` and ``bin_edges`` of ``x``'s dtype.

    Raises:
        DTypeError: an integer input, edges or weights of another dtype. ArgumentError: ``bins``
            not positive, ``range`` with min > max. ShapeError: edges not 1-D, ``weight`` of
            another shape.
    """
    if not x.dtype.is_floating_point:
        raise DTypeError(
            f"histogram: input tensor and bins tensors should have the same dtype (a float), got {x.dtype.name}"
        )
    if weight is not None:
        if weight.shape != x.shape:
            raise ShapeError(
                f"histogram: expected weight to have the same shape as input {x.shape}, got {weight.shape}"
            )
        if weight.dtype is not x.dtype:
            raise DTypeError(f"histogram: expected weight of dtype {x.dtype.name}, got {weight.dtype.name}")
    if _is_tensor(bins):
        if bins.ndim != 1 or bins.shape[0] < 1:
            raise ShapeError(f"histogram: bins tensor should have one dimension and at least 1 entry, got {bins.shape}")
        if bins.dtype is not x.dtype:
            raise DTypeError(f"histogram: input and bins must have one dtype, got {x.dtype.name} and {bins.dtype.name}")
        edges = bins
    else:
        if int(bins) <= 0:
            raise ArgumentError(f"histogram(): bins must be > 0, but got {bins}")
        if range is not None:
            lo, hi = float(range[0]), float(range[1])
        elif x.numel():
            lo, hi = float(x.amin().item()), float(x.amax().item())
        else:
            lo, hi = 0.0, 0.0
        if lo > hi:
            raise ArgumentError(f"histogram(): min should not exceed max, got min {lo} max {hi}")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5  # PyTorch's (NumPy's) widening of an empty range
        edges = x.new_tensor(_linspace_like_torch(lo, hi, int(bins) + 1, x.dtype).astype(x.dtype.np))
    n = edges.shape[0] - 1
    flat = x.reshape(-1, 1)
    # the bin: the number of edges at most v, minus one; v equal to the last edge: the last bin
    index = (edges.reshape(1, -1) <= flat).to(dt.int64).sum(-1) - 1
    inside = (flat.reshape(-1) >= edges[0]) & (flat.reshape(-1) <= edges[-1])
    index = index.clamp(0, max(n - 1, 0))
    hist = _counts(x.reshape(-1), max(n, 0), index, inside, None if weight is None else weight.reshape(-1))
    if density:
        widths = edges[1:] - edges[:-1]
        hist = hist / (hist.sum() * widths)
    return Histogram(hist, edges)


def unique_consecutive(x, return_inverse: bool = False, return_counts: bool = False, dim=None):
    """``x`` with each run of equal consecutive elements (slices along ``dim``; of the flattened
    tensor when None) kept once (``torch.unique_consecutive``), with the inverse indices (int64,
    ``x``'s shape, or (size of dim,)) and the run lengths (int64) when asked. NaNs are never
    equal. A sync point: the number of runs is data.

    Raises:
        lazyvic.errors.IndexError: ``dim`` out of range."""
    data = np.asarray(x.numpy())
    if dim is None:
        flat = data.reshape(-1)
        keep = np.ones(flat.shape[0], dtype=bool)
        keep[1:] = flat[1:] != flat[:-1]
        values = flat[keep]
        shape = data.shape
    else:
        axis = norm_axis(dim, x.ndim, "unique_consecutive")
        moved = np.moveaxis(data, axis, 0)
        keep = np.ones(moved.shape[0], dtype=bool)
        if moved.shape[0] > 1:
            keep[1:] = (moved[1:] != moved[:-1]).reshape(moved.shape[0] - 1, -1).any(1)
        values = np.moveaxis(moved[keep], 0, axis)
        shape = (moved.shape[0],)
    out = [x.new_tensor(np.ascontiguousarray(values))]
    if return_inverse:
        inverse = (np.cumsum(keep) - 1).astype(np.int64).reshape(shape)
        out.append(x.new_tensor(inverse, dtype=dt.int64))
    if return_counts:
        starts = np.flatnonzero(keep)
        counts = np.diff(np.append(starts, keep.shape[0])).astype(np.int64)
        out.append(x.new_tensor(counts, dtype=dt.int64))
    return out[0] if len(out) == 1 else tuple(out)
