"""Shapes and constants: Shape Size Constant ConstantOfShape Range EyeLike.

Their results are constants whatever their inputs (lazyvic shapes are static), so chains such as
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` fold when the module runs and feed
Reshape's shape as plain ints. ConstantOfShape, Range and EyeLike reserve their result first
(``NodeContext.reserve``): its size comes from the model. A tensor attribute is read from the
model only: one that still refers to external data is refused (``reader.py`` resolves external
data against the model's folder when the file is read).
"""

from __future__ import annotations

import math

import numpy as np

from lazyvic.interop.onnx.context import ELEM_DTYPES, SUPPORTED_TYPES_NOTE, dtype_np, elem_name, shape_of, tensor_array
from lazyvic.interop.onnx.registry import register


def _shape(ctx, v):
    shape = shape_of(v)
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    return np.array(shape[slice(start, None if end is None else int(end))], dtype=np.int64)


register("Shape", since=(1, 13, 15, 19, 21, 23, 24, 25), fold=_shape, constant=True)(_shape)


def _size(ctx, v):
    return np.array(math.prod(shape_of(v)), dtype=np.int64)


register("Size", since=(1, 13, 19, 21, 23, 24, 25), fold=_size, constant=True)(_size)


def _tensor_attr_array(ctx, tensor_proto) -> np.ndarray:
    from onnx import TensorProto

    if tensor_proto.data_type not in ELEM_DTYPES:
        raise ctx.error(f"a constant of type {elem_name(tensor_proto.data_type)} ({SUPPORTED_TYPES_NOTE})")
    if tensor_proto.data_location == TensorProto.EXTERNAL:  # never resolved against the working directory
        raise ctx.error("a constant that refers to external data which was not read from the model's folder")
    return tensor_array(tensor_proto)


def _constant_check(ctx):
    for key in ("sparse_value", "value_string", "value_strings"):
        if key in ctx.attrs:
            return f"Constant with {key}"
    if "value" in ctx.attrs and ctx.attrs["value"].data_type not in ELEM_DTYPES:
        return f"Constant of type {elem_name(ctx.attrs['value'].data_type)} ({SUPPORTED_TYPES_NOTE})"
    return None


def _constant(ctx):
    a = ctx.attrs
    if "value" in a:
        return _tensor_attr_array(ctx, a["value"])
    if "value_float" in a:
        return np.array(a["value_float"], dtype=np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], dtype=np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], dtype=np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], dtype=np.int64)
    raise ctx.error("Constant has no value attribute")


register(
    "Constant", since=(1, 9, 11, 12, 13, 19, 21, 23, 24, 25), fold=_constant, check=_constant_check, constant=True
)(_constant)


def _constant_of_shape_check(ctx):
    value = ctx.attrs.get("value")
    if value is not None and value.data_type not in ELEM_DTYPES:
        return f"ConstantOfShape of type {elem_name(value.data_type)} ({SUPPORTED_TYPES_NOTE})"
    return None


def _constant_of_shape(ctx, s):
    shape = ctx.ints(s, "shape")
    value = ctx.attrs.get("value")
    fill = np.zeros((1,), dtype=np.float32) if value is None else _tensor_attr_array(ctx, value)
    ctx.reserve(shape, fill.dtype)
    return np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)


register(
    "ConstantOfShape",
    since=(9, 20, 21, 23, 24, 25),
    fold=_constant_of_shape,
    check=_constant_of_shape_check,
    constant=True,
)(_constant_of_shape)


def _range(ctx, start, limit, delta):
    s, lim, d = (ctx.const(v, w).reshape(()) for v, w in ((start, "start"), (limit, "limit"), (delta, "delta")))
    if d == 0:
        raise ctx.error("delta must not be 0")
    n = max(int(math.ceil((lim.item() - s.item()) / d.item())), 0)
    ctx.reserve((n,), s.dtype)
    return (s + np.arange(n, dtype=s.dtype) * d).astype(s.dtype)


register("Range", since=(11, 27), fold=_range, constant=True)(_range)


def _eye_like_check(ctx):
    to = ctx.attr("dtype")
    return None if to is None or to in ELEM_DTYPES else f"EyeLike of type {elem_name(to)}"


def _eye_like(ctx, a):
    shape = shape_of(a)
    if len(shape) != 2:
        raise ctx.error(f"input must be 2-D, got shape {shape}")
    to = ctx.attr("dtype")
    dtype = ELEM_DTYPES[to].np if to in ELEM_DTYPES else dtype_np(a)
    ctx.reserve(shape, dtype)
    return np.eye(shape[0], shape[1], k=int(ctx.attr("k", 0)), dtype=dtype)


register("EyeLike", since=(9, 22), fold=_eye_like, check=_eye_like_check, constant=True)(_eye_like)
