"""Splits and stacks along a fixed axis, NumPy's way: ``hsplit``, ``vsplit``, ``dsplit``,
``column_stack``, ``row_stack``, and ``narrow_copy``, ``combinations`` (PyTorch's names,
signatures and errors). Each piece is a slice (``tensor_split``) or a concatenation of the
tensors it is handed, so it is lazy and differentiable. Written over those tensors, so this
module sits below :mod:`lazyvic.tensor`, whose methods the splits are.
"""

from __future__ import annotations

import itertools

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.indexing import cat


def _split_at(x, indices_or_sections, dim: int, least: int, name: str) -> tuple:
    if x.ndim < least:
        raise ShapeError(
            f"torch.{name} requires a tensor with at least {least} dimension, but got a tensor with "
            f"{x.ndim} dimensions!"
        )
    if isinstance(indices_or_sections, (int, np.integer)) and not isinstance(indices_or_sections, bool):
        n, k = x.shape[dim], int(indices_or_sections)
        if k == 0 or n % k:
            raise ArgumentError(
                f"torch.{name} attempted to split along dimension {dim}, but the size of the dimension {n} "
                f"is not divisible by the split_size {k}!"
            )
    return x.tensor_split(indices_or_sections, dim)


def hsplit(x, indices_or_sections) -> tuple:
    """``tensor_split`` along axis 1 (axis 0 of a 1-D tensor); a number of sections must divide
    the axis (``torch.hsplit``, ``np.hsplit``).

    Raises:
        ShapeError: a 0-d input. ArgumentError: sections that do not divide the axis."""
    return _split_at(x, indices_or_sections, 0 if x.ndim == 1 else 1, 1, "hsplit")


def vsplit(x, indices_or_sections) -> tuple:
    """``tensor_split`` along axis 0 of a tensor of at least 2 dimensions (``torch.vsplit``).

    Raises:
        ShapeError: fewer than 2 dimensions. ArgumentError: sections that do not divide the axis."""
    return _split_at(x, indices_or_sections, 0, 2, "vsplit")


def dsplit(x, indices_or_sections) -> tuple:
    """``tensor_split`` along axis 2 of a tensor of at least 3 dimensions (``torch.dsplit``).

    Raises:
        ShapeError: fewer than 3 dimensions. ArgumentError: sections that do not divide the axis."""
    return _split_at(x, indices_or_sections, 2, 3, "dsplit")


def narrow_copy(x, dim: int, start: int, length: int):
    """A copy of ``x.narrow(dim, start, length)`` (``torch.narrow_copy``)."""
    return x.narrow(dim, start, length).clone()


def column_stack(tensors):
    """Concatenation along axis 1 with 0-d and 1-D (n,) tensors taken as (n, 1) columns
    (``torch.column_stack``, ``np.column_stack``); dtypes promote as ``cat``.

    Raises:
        ShapeError: no tensors, or shapes that differ outside axis 1."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("column_stack expects a non-empty TensorList")
    return cat([t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors], 1)


def row_stack(tensors):
    """``vstack`` (``torch.row_stack``): concatenation along axis 0, 1-D tensors taken as rows."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("row_stack expects a non-empty TensorList")
    return cat([t.reshape(1, -1) if t.ndim <= 1 else t for t in tensors], 0)


def combinations(x, r: int = 2, with_replacement: bool = False):
    """The length-``r`` combinations of the elements of the 1-D ``x`` (``torch.combinations``,
    Python's ``itertools.combinations`` / ``combinations_with_replacement``): (count, r), row
    ``i`` the i-th combination in lexicographic order of positions; ``r = 0`` gives an empty (0,)
    tensor. A gather of ``x`` (differentiable).

    Raises:
        ShapeError: ``x`` not 1-D. ArgumentError: a negative ``r``."""
    if x.ndim != 1:
        raise ShapeError(f"combinations: Expect a 1D vector, but got shape {list(x.shape)}")
    if r < 0:
        raise ArgumentError(f"combinations: Expect a non-negative number, but got {r}")
    if r == 0:
        return x.new_zeros(0)
    make = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = np.array(list(make(range(x.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    index = x.new_tensor(rows.reshape(-1), dtype=dt.int64)
    return x.index_select(0, index).reshape(rows.shape[0], r)
