"""Shape arithmetic shared by the front end: axis normalization, shape arguments, broadcasting.

Pure functions of Python ints and tuples (no tensors), so every layer may use them. Errors name
the op that asked (``ShapeError``, ``lazyvic.errors.IndexError``).
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import IndexError as LIndexError
from lazyvic.errors import ShapeError


def norm_axis(axis: int, ndim: int, opname: str) -> int:
    """``axis`` as a non-negative axis of a ``ndim``-dimensional tensor (Python's negative
    indexing; a 0-d tensor accepts 0 and -1, as in PyTorch).

    Raises:
        TypeError: ``axis`` is not an int.
        IndexError: ``axis`` is out of range.
    """
    if axis.__class__ is int:  # the common case first (a plain int in range)
        n = ndim if ndim > 0 else 1
        if -n <= axis < n:
            return axis % n
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{opname}: dim must be an int, got {type(axis).__name__}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise LIndexError(f"{opname}: dim {axis} out of range for a tensor of {ndim} dimensions")
    return int(axis) % max(ndim, 1)


def norm_axes(dim, ndim: int, opname: str) -> tuple:
    """Sorted non-negative axes for ``dim`` (an int, a sequence of ints, or None for all).

    Raises:
        ShapeError: an axis is repeated. TypeError / IndexError: as :func:`norm_axis`.
    """
    if dim is None:
        return tuple(range(ndim))
    if dim.__class__ is int:
        return (norm_axis(dim, ndim, opname),)
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    axes = sorted({norm_axis(d, ndim, opname) for d in dims})
    if len(axes) != len(dims):
        raise ShapeError(f"{opname}: dim {dim} repeats an axis")
    return tuple(axes)


def shape_arg(args) -> tuple:
    """A shape from ``f(2, 3)``-style or ``f((2, 3))``-style arguments; -1 is kept (reshape).

    Raises:
        ShapeError: a negative size other than -1.
    """
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for s in args:  # the common case: plain ints, none below -1
        if s.__class__ is not int or s < -1:
            break
    else:
        return args if args.__class__ is tuple else tuple(args)
    shape = tuple(int(s) for s in args)
    if any(s < 0 for s in shape if s != -1):
        raise ShapeError(f"negative dimension in shape {shape}")
    return shape


def broadcast_shapes(a: tuple, b: tuple, opname: str = "broadcast") -> tuple:
    """NumPy broadcasting of two shapes; raises ShapeError naming the op."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"{opname}: shapes {tuple(a)} and {tuple(b)} cannot be broadcast together")
        out.append(y if x == 1 else x)
    return tuple(out)
