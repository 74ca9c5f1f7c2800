"""PyTorch's legacy and deprecated creation API, kept because real scripts still call it:
the typed constructors ``FloatTensor``, ``DoubleTensor``, ``HalfTensor``, ``BFloat16Tensor``,
``LongTensor``, ``IntTensor``, ``ShortTensor``, ``CharTensor``, ``ByteTensor``, ``BoolTensor``,
and ``range`` (an inclusive end, with PyTorch's deprecation warning).

A typed constructor is not a class of its own here (every lazyvic tensor is a
:class:`lazyvic.Tensor`), but it answers ``isinstance`` as PyTorch's does: ``isinstance(x,
lazyvic.FloatTensor)`` is true for a float32 tensor; ``x.type(lazyvic.LongTensor)`` casts and
``x.type()`` names it (``"torch.FloatTensor"``).
"""

from __future__ import annotations

import builtins
import math
import numbers
import warnings

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.creation import zeros
from lazyvic.errors import ArgumentError, DTypeError
from lazyvic.size import Size
from lazyvic.tensor import Tensor
from lazyvic.transfer import device_arg, placed


class _TypedConstructor(type):
    """The metaclass of the typed constructors: calling one makes a Tensor of its dtype;
    ``isinstance`` checks the dtype (PyTorch's ``torch.tensortype``)."""

    legacy_dtype: dt.DType

    def __call__(cls, *args, device=None):
        name = cls.__name__
        d = cls.legacy_dtype
        if len(args) == 1 and isinstance(args[0], Size):
            args = tuple(args[0])
        if not args:
            return placed(zeros(0, dtype=d), device_arg(device, name))
        if builtins.all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
            if builtins.any(a < 0 for a in args):
                raise ArgumentError(f"{name}: sizes must be non-negative, got {args}")
            # PyTorch leaves the memory uninitialized; lazyvic has none, so zeros (as lazyvic.empty).
            return zeros(*[int(a) for a in args], dtype=d, device=device)
        if len(args) > 1:
            raise TypeError(f"{name}(): expected sizes (ints) or one sequence of data, got {args!r}")
        data = args[0]
        if isinstance(data, Tensor):
            if data.dtype is not d:
                raise DTypeError(f"{name}(): expected a tensor of dtype {d.name}, got {data.dtype.name}")
            return data
        if isinstance(data, numbers.Number):
            raise TypeError(f"{name}(): data must be a sequence (got {type(data).__name__})")
        array = np.asarray(data)
        if d.category < 2 and array.dtype.kind == "f":
            array = np.trunc(array)  # PyTorch truncates floats given to an integer constructor
        return placed(Tensor(array.astype(d.np), dtype=d), device_arg(device, name))

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.legacy_dtype

    def __repr__(cls) -> str:
        return f"<class 'torch.{cls.__name__}'>"


def _typed(d: dt.DType) -> type:
    name = dt.LEGACY_TENSOR_TYPES[d]
    doc = (
        f"``torch.{name}``: ``{name}(*sizes)`` a tensor of those sizes (zeros: PyTorch's are "
        f"uninitialized), ``{name}(data)`` a copy of a sequence or array as {d.name} (floats "
        f"truncated for an integer type), ``{name}()`` an empty (0,) tensor; ``isinstance(x, {name})`` "
        f"is true for {d.name} tensors.\n\nRaises:\n    TypeError: a single number as data, or mixed "
        f"sizes and data. DTypeError: a tensor of another dtype. ArgumentError: a negative size."
    )
    return _TypedConstructor(name, (), {"legacy_dtype": d, "dtype": d, "is_cuda": False, "__doc__": doc})


FloatTensor = _typed(dt.float32)
DoubleTensor = _typed(dt.float64)
HalfTensor = _typed(dt.float16)
BFloat16Tensor = _typed(dt.bfloat16)
LongTensor = _typed(dt.int64)
IntTensor = _typed(dt.int32)
ShortTensor = _typed(dt.int16)
CharTensor = _typed(dt.int8)
ByteTensor = _typed(dt.uint8)
BoolTensor = _typed(dt.bool_)


def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A001
    """``torch.range``, deprecated in PyTorch: values from ``start`` to ``end`` INCLUSIVE by
    ``step``, ``floor((end - start) / step) + 1`` of them, computed as ``start + i * step`` in
    float64 and rounded to ``dtype`` (the default float dtype, also for integer arguments).
    Warns as PyTorch does (a UserWarning); use :func:`lazyvic.arange`.

    Raises:
        ArgumentError: ``step`` is 0, or has the wrong sign for ``start`` and ``end``.
    """
    warnings.warn(
        "torch.range is deprecated and will be removed in a future release because its behavior is "
        "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values in "
        "[start, end).",
        UserWarning,
        stacklevel=2,
    )
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ArgumentError("range: step must be nonzero")
    if (end - start) * step < 0:
        raise ArgumentError(
            f"range: upper bound and larger bound inconsistent with step sign (start={start}, end={end}, step={step})"
        )
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    n = int(math.floor((end - start) / step)) + 1
    values = float(start) + np.arange(n, dtype=np.float64) * float(step)
    t = placed(Tensor(values.astype(d.np), dtype=d), device_arg(device, "range"))
    return t.requires_grad_(True) if requires_grad else t


__all__ = [
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
    "range",
]
