"""The dtypes lazyvic supports and the promotion rule between them.

Promotion follows PyTorch: a higher category (bool < integer < floating) wins;
inside one category the wider type wins. Python scalars never widen a tensor
(``int32_tensor + 1`` stays int32, ``float32_tensor * 2.0`` stays float32), and
a float scalar with an integer tensor gives the default float dtype (float32).
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import DTypeError


class DType:
    """A tensor element type. Instances are singletons: compare with ``is`` or ``==``."""

    __slots__ = ("name", "np", "itemsize", "category", "rank")

    def __init__(self, name: str, np_dtype, category: int, rank: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.category = category  # 0 bool, 1 integer, 2 floating
        self.rank = rank

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    def __repr__(self) -> str:
        return f"lazyvic.{self.name}"

    def __reduce__(self):
        return (get_dtype, (self.name,))


bool_ = DType("bool", np.bool_, 0, 0)
int32 = DType("int32", np.int32, 1, 1)
int64 = DType("int64", np.int64, 1, 2)
float32 = DType("float32", np.float32, 2, 3)
float64 = DType("float64", np.float64, 2, 4)

ALL = (bool_, int32, int64, float32, float64)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float": float32, "double": float64, "long": int64, "int": int32})
_BY_NP = {d.np: d for d in ALL}

default_float = float32


def get_dtype(x) -> DType:
    """Return the lazyvic DType for a DType, a name, a NumPy dtype or a Python type.

    Raises:
        DTypeError: for dtypes lazyvic does not support (complex, strings, float16, ...).
    """
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    if x is bool:
        return bool_
    if x is int:
        return int64
    if x is float:
        return float32
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NP:
        return _BY_NP[npd]
    half = npd.name if npd is not None else x if isinstance(x, str) else getattr(x, "name", None)
    if half in ("float16", "bfloat16"):  # lazyvic.float16 / bfloat16 (lazyvic/amp.py) or their names
        raise DTypeError(
            f"{half} is an autocast precision only: lazyvic has no {half} tensors (it supports "
            + ", ".join(d.name for d in ALL)
            + f"); use lazyvic.autocast(dtype=lazyvic.{half}) to round matmul/conv inputs to it"
        )
    raise DTypeError(f"unsupported dtype {x!r}: lazyvic supports " + ", ".join(d.name for d in ALL))


def promote(a: DType, b: DType) -> DType:
    """PyTorch-style promotion of two tensor dtypes."""
    if a is b:
        return a
    return a if a.rank > b.rank else b


def scalar_dtype_for(tensor_dtype: DType, value) -> DType:
    """The dtype a Python scalar takes when combined with a tensor of ``tensor_dtype``."""
    if isinstance(value, bool):
        return tensor_dtype
    if isinstance(value, int):
        return tensor_dtype if tensor_dtype.category >= 1 else int64
    if isinstance(value, float):
        return tensor_dtype if tensor_dtype.category == 2 else default_float
    raise DTypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")
