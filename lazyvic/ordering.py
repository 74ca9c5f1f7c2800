"""Sorting and order statistics: ``argsort``, ``sort``, ``msort``, ``topk``, ``kthvalue``, ``median``.

Each is the ``argsort`` primitive (lazyvic/ops/sort.py: stable, NaN largest, -0.0 equal to 0.0,
as PyTorch orders) followed by a gather of the values, so the values' gradient goes back to the
positions they came from. The results are PyTorch's (values, indices) named tuples. Where PyTorch
leaves the order of equal elements open (``topk``), the order here is the stable one.

Written over the tensors they are handed, so this module sits below :mod:`lazyvic.tensor`, whose
methods these functions are.
"""

from __future__ import annotations

from lazyvic.errors import IndexError as LIndexError
from lazyvic.reductions import ValuesIndices
from lazyvic.shapes import norm_axis


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """int64 indices that sort ``x`` along ``dim`` (ascending unless ``descending``). The sort is
    always stable (``stable`` is accepted for PyTorch's signature); NaN sorts as the largest value."""
    d = norm_axis(dim, x.ndim, "argsort")
    return x.apply("argsort", x, dim=d, descending=bool(descending))


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    """(values, indices) of ``x`` sorted along ``dim``; stable, NaN last (first when descending)."""
    indices = x.argsort(dim, descending)
    if x.ndim == 0:
        return ValuesIndices(x.clone(), indices)
    return ValuesIndices(x.gather(norm_axis(dim, x.ndim, "sort"), indices), indices)


def msort(x):
    """``x`` sorted along its first dimension (values only)."""
    return x.sort(0).values


def _k_checked(opname: str, x, k: int, d: int, first: int) -> int:
    n = x.shape[d] if x.ndim else 1
    if not first <= k <= n:
        raise LIndexError(f"{opname}: k={k} is out of range for dimension {d} of size {n} (shape {x.shape})")
    return int(k)


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, in sorted order
    (also when ``sorted=False``, which leaves the order open in PyTorch).

    Raises:
        lazyvic.errors.IndexError: ``k`` is negative or larger than the dimension.
    """
    d = norm_axis(dim, x.ndim, "topk")
    k = _k_checked("topk", x, k, d, 0)
    if x.ndim == 0:
        return ValuesIndices(x.clone(), x.argsort(0))
    indices = x.argsort(d, descending=largest).narrow(d, 0, k)
    return ValuesIndices(x.gather(d, indices), indices)


def kthvalue(x, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The k-th smallest element along ``dim`` (k counts from 1) and its index; among equal
    elements, the k-th in their order (stable), as PyTorch.

    Raises:
        lazyvic.errors.IndexError: ``k`` is not in 1..size of ``dim``.
    """
    d = norm_axis(dim, x.ndim, "kthvalue")
    k = _k_checked("kthvalue", x, k, d, 1)
    if x.ndim == 0:
        return ValuesIndices(x.clone(), x.argsort(0))
    indices = x.argsort(d).narrow(d, k - 1, 1)
    values = x.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return ValuesIndices(values, indices)


def median(x, dim=None, keepdim: bool = False):
    """The lower median (the ``(n - 1) // 2``-th smallest) along ``dim``, as (values, indices);
    of all elements (a 0-d value) when ``dim`` is None. A slice holding NaN has median NaN, with
    the index of its first NaN, as PyTorch.

    Raises:
        lazyvic.errors.IndexError: an empty dimension.
    """
    if dim is None:
        return x.reshape(-1).median(0).values
    return sorted_pick(x, dim, keepdim, "median", _median_position)


def _median_position(x, order, d: int, n: int):
    if x.dtype.is_floating_point:
        # NaNs sort last: the first of them is at position n - (number of NaNs).
        nans = (x != x).sum(d, keepdim=True)
        return (n - nans).where(nans > 0, (n - 1) // 2)
    return order.narrow(d, 0, 1).zeros_like() + (n - 1) // 2


def sorted_pick(x, dim: int, keepdim: bool, name: str, position) -> ValuesIndices:
    """The element of each slice along ``dim`` at ``position(x, order, d, n)`` (an int64 tensor of
    x's shape with ``dim`` of size 1: a place in the slice sorted ascending, ``order`` its
    ``argsort``), as (values, indices into ``x``): the medians' common part. A 0-d ``x`` is its
    own value, at index 0.

    Raises:
        lazyvic.errors.IndexError: an empty dimension (naming ``name``).
    """
    d = norm_axis(dim, x.ndim, name)
    if x.ndim == 0:
        return ValuesIndices(x.clone(), x.argsort(0))
    n = x.shape[d]
    if n == 0:
        raise LIndexError(f"{name}: cannot take the median of an empty dimension {d} (shape {x.shape})")
    order = x.argsort(d)
    indices = order.gather(d, position(x, order, d, n))
    values = x.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return ValuesIndices(values, indices)
