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
from lazyvic.shapes import shape_arg
from lazyvic.tensor import Tensor, full_tensor, where
from lazyvic.trace.composite import recipe
from lazyvic.transfer import device_arg, placed


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (lazy; the value is a scalar input).

    ``device``: ``"cpu"`` (default) or ``"cuda"``; raises DeviceError for others."""
    shape = shape_arg((size,) if isinstance(size, int) else tuple(size))
    if dtype is None:
        dtype = (
            dt.bool_ if isinstance(fill_value, bool) else dt.int64 if isinstance(fill_value, int) else dt.default_float
        )
    d = dt.get_dtype(dtype)
    out = full_tensor(shape, fill_value, d, device_arg(device, "full"))
    if requires_grad:
        out.requires_grad_(True)
    return out


def zeros(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(shape_arg(size), 0, dtype=dtype or dt.default_float, requires_grad=requires_grad, device=device)


def ones(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(shape_arg(size), 1, dtype=dtype or dt.default_float, requires_grad=requires_grad, device=device)


def empty(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return zeros(*size, dtype=dtype, requires_grad=requires_grad, device=device)


def full_like(x: Tensor, fill_value, dtype=None, device=None) -> Tensor:
    """``full`` with ``x``'s shape, and its dtype and device unless given."""
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device)


def zeros_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return full_like(x, 0, dtype, device)


def ones_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return full_like(x, 1, dtype, device)


def tensor(data, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor holding a copy of ``data`` (nested lists, NumPy arrays, scalars, tensors).

    Python floats become float32, Python ints int64, NumPy arrays keep their dtype.
    ``device``: ``"cpu"`` (default) or ``"cuda"`` (the copy goes straight there).
    Raises DTypeError for unsupported dtypes (complex, strings, float16), DeviceError for
    an unknown or unavailable device.
    """
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
        raise ValueError("arange: step must be non-zero")
    is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    d = dt.get_dtype(dtype) if dtype is not None else (dt.int64 if is_int else dt.default_float)
    place = device_arg(device, "arange")
    t = Tensor(np.arange(start, end, step, dtype=np.float64 if not is_int else np.int64).astype(d.np), dtype=d)
    t = placed(t, place)
    if is_int:
        recipe(t, _arange_onnx, start=int(start), end=int(end), step=int(step), dtype=d.name)
    return t


def _onnx_scalar(b, value) -> str:
    return b.node("Reshape", [b.ints([value]), b.ints([], "scalar_shape")])


def _arange_onnx(b, names, at) -> str:
    """ONNX Range for an integer arange whose bounds follow a dynamic axis."""
    out = b.node("Range", [_onnx_scalar(b, at["start"]), _onnx_scalar(b, at["end"]), _onnx_scalar(b, at["step"])])
    return out if at["dtype"] == "int64" else b.node("Cast", [out], to=b.onnx_dtype(at["dtype"]))


def band_mask(rows: int, cols: int, diagonal: int = 0, lower: bool = True, device=None) -> "Tensor":
    """(rows, cols) bool: ``j - i <= diagonal`` (lower, as ``tril``) or ``>= diagonal`` (upper).

    A constant with an ONNX recipe (Range, Sub, LessOrEqual), so exports whose sizes follow a
    dynamic axis (a causal mask over the sequence) compute it in the graph."""
    make = np.tril if lower else np.triu
    mask = placed(Tensor(make(np.ones((rows, cols), dtype=bool), diagonal)), device_arg(device, "band_mask"))
    return recipe(mask, _band_mask_onnx, rows=rows, cols=cols, diagonal=diagonal, lower=lower)


def _band_mask_onnx(b, names, at) -> str:
    i = b.node("Unsqueeze", [_arange_onnx(b, [], dict(start=0, end=at["rows"], step=1, dtype="int64")), b.ints([1])])
    j = b.node("Unsqueeze", [_arange_onnx(b, [], dict(start=0, end=at["cols"], step=1, dtype="int64")), b.ints([0])])
    offset = b.node("Sub", [j, i])
    diagonal = b.const(np.asarray(at["diagonal"], dtype=np.int64))
    return b.node("LessOrEqual" if at["lower"] else "GreaterOrEqual", [offset, diagonal])


def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    return placed(Tensor(np.eye(n, m, dtype=dt.get_dtype(dtype or dt.default_float).np)), device_arg(device, "eye"))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    r, c = x.shape[-2:]
    return where(band_mask(r, c, diagonal, lower=True, device=x.device), x, 0 if x.dtype.category < 2 else 0.0)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    r, c = x.shape[-2:]
    return where(band_mask(r, c, diagonal, lower=False, device=x.device), x, 0 if x.dtype.category < 2 else 0.0)
