"""Creation functions: ``tensor``, ``zeros``, ``ones``, ``full``, ``arange``, ``eye`` ... (PyTorch's
names and defaults: Python floats become float32, Python ints int64).

Data given as lists or arrays is copied into a realized tensor now (on ``device``); constant
fills (``zeros``, ``full``) stay lazy, with the value as a scalar input, so a new value reuses
the plan. Integer ``arange`` and the band masks behind ``tril``/``triu`` carry ONNX recipes
(``lazyvic.trace.composite.recipe``): an export with dynamic axes computes them in the graph.
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError
from lazyvic.shapes import shape_arg
from lazyvic.shaping import arange_onnx, with_band_mask_recipe
from lazyvic.tensor import Tensor, check_int_range, full_tensor
from lazyvic.trace.composite import recipe
from lazyvic.transfer import device_arg, placed


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (lazy; the value is a scalar input).

    ``device``: ``"cpu"`` (default) or ``"cuda"``; raises DeviceError for others, ArgumentError for
    a negative size, DTypeError for an integer ``fill_value`` the dtype cannot hold."""
    shape = shape_arg((size,) if isinstance(size, int) else tuple(size))
    if any(n < 0 for n in shape):
        raise ArgumentError(f"full: sizes must be non-negative, got {shape}")
    if dtype is None:
        dtype = (
            dt.bool_ if isinstance(fill_value, bool) else dt.int64 if isinstance(fill_value, int) else dt.default_float
        )
    d = dt.get_dtype(dtype)
    check_int_range("full", fill_value, d)
    out = full_tensor(shape, fill_value, d, device_arg(device, "full"))
    if requires_grad:
        out.requires_grad_(True)
    return out


def _sizes(sizes: tuple, size) -> tuple:
    """The shape from ``*sizes`` or PyTorch's keyword ``size=`` (``torch.empty(size=(2, 3))``)."""
    if size is not None:
        if sizes:
            raise ArgumentError(f"sizes given twice: positionally {sizes} and as size={size}")
        sizes = (size,)
    return shape_arg(sizes)


def zeros(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(_sizes(sizes, size), 0, dtype=dtype or dt.default_float, requires_grad=requires_grad, device=device)


def ones(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(_sizes(sizes, size), 1, dtype=dtype or dt.default_float, requires_grad=requires_grad, device=device)


def empty(*sizes, size=None, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """``zeros`` (lazyvic has no uninitialized memory); sizes positionally or as ``size=``."""
    return zeros(*sizes, size=size, dtype=dtype, requires_grad=requires_grad, device=device)


def full_like(x: Tensor, fill_value, dtype=None, device=None) -> Tensor:
    """``full`` with ``x``'s shape, and its dtype and device unless given."""
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device)


def zeros_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return full_like(x, 0, dtype, device)


def ones_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return full_like(x, 1, dtype, device)


def tensor(data, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor holding a copy of ``data`` (nested lists, NumPy arrays, scalars, tensors).

    Python floats become float32, Python ints int64, NumPy arrays and NumPy scalars keep their
    dtype (``np.float64(3)`` is float64, as in PyTorch).
    ``device``: ``"cpu"`` (default) or ``"cuda"`` (the copy goes straight there).
    Raises DTypeError for unsupported dtypes (complex, strings, float16) and for values the
    dtype cannot hold (``2**63``, a uint64 ``2**64 - 1``: lazyvic has no uint64; inf or NaN to
    an integer dtype), DeviceError for an unknown or unavailable device.
    """
    if isinstance(data, np.generic):  # a NumPy scalar: its dtype, as a 0-d array's
        data = np.asarray(data)
    if type(data) is int and dtype is None:  # (Tensor(5) alone is PyTorch's legacy sizes form)
        dtype = dt.int64
    return placed(Tensor(data, dtype=dtype, requires_grad=requires_grad), device_arg(device, "tensor"))


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor with the dtype of ``array`` (copied into C-contiguous storage)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(array).__name__}")
    return Tensor(array)


def arange(start, end=None, step=1, dtype=None, device=None) -> Tensor:
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 for ints, else float32."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ArgumentError("arange: step must be non-zero")
    is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    d = dt.get_dtype(dtype) if dtype is not None else (dt.int64 if is_int else dt.default_float)
    place = device_arg(device, "arange")
    t = Tensor(np.arange(start, end, step, dtype=np.float64 if not is_int else np.int64).astype(d.np), dtype=d)
    t = placed(t, place)
    if is_int:
        recipe(t, arange_onnx, start=int(start), end=int(end), step=int(step), dtype=d.name)
    return t


def band_mask(rows: int, cols: int, diagonal: int = 0, lower: bool = True, device=None) -> "Tensor":
    """(rows, cols) bool: ``j - i <= diagonal`` (lower, as ``tril``) or ``>= diagonal`` (upper).

    A constant with an ONNX recipe (Range, Sub, LessOrEqual), so exports whose sizes follow a
    dynamic axis (a causal mask over the sequence) compute it in the graph."""
    make = np.tril if lower else np.triu
    mask = placed(Tensor(make(np.ones((rows, cols), dtype=bool), diagonal)), device_arg(device, "band_mask"))
    return with_band_mask_recipe(mask, rows, cols, diagonal, lower)


def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    return placed(Tensor(np.eye(n, m, dtype=dt.get_dtype(dtype or dt.default_float).np)), device_arg(device, "eye"))


def empty_like(x: Tensor, dtype=None, device=None) -> Tensor:
    """``zeros_like`` (lazyvic has no uninitialized memory)."""
    return full_like(x, 0, dtype, device)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` (both included), float32 unless
    ``dtype`` says otherwise. Computed in float64 as ``start + i * (end - start) / (steps - 1)``
    (NumPy's linspace; PyTorch's differs in the last bit for some values), then rounded.

    Raises:
        ValueError: negative ``steps``.
    """
    if steps < 0:
        raise ArgumentError(f"linspace: number of steps must be non-negative, got {steps}")
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    values = np.linspace(float(start), float(end), int(steps), dtype=np.float64)
    if d.category < 2:
        values = np.trunc(values)
    t = placed(Tensor(values.astype(d.np), dtype=d), device_arg(device, "linspace"))
    return t.requires_grad_(True) if requires_grad else t


def logspace(
    start, end, steps: int, base: float = 10.0, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    """``base ** linspace(start, end, steps)``, computed in float64 and rounded once."""
    if steps < 0:
        raise ArgumentError(f"logspace: number of steps must be non-negative, got {steps}")
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    values = float(base) ** np.linspace(float(start), float(end), int(steps), dtype=np.float64)
    t = placed(Tensor(values.astype(d.np), dtype=d), device_arg(device, "logspace"))
    return t.requires_grad_(True) if requires_grad else t


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``data`` as a tensor: a tensor of that dtype and device is returned as it is (no copy, as
    PyTorch); anything else is converted as by :func:`tensor`."""
    if isinstance(data, Tensor):
        out = data
        if dtype is not None and dt.get_dtype(dtype) is not out.dtype:
            out = out.to(dtype)
        return out if device is None else out.to(device)
    return tensor(data, dtype=dtype, device=device)


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two axes, zeros above (``Tensor.tril``)."""
    return x.tril(diagonal)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two axes, zeros below (``Tensor.triu``)."""
    return x.triu(diagonal)
