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


# ------------------------------------------------------------- finfo / iinfo
def _bfloat16_info() -> tuple:
    # bfloat16: float32's 8 exponent bits, 7 stored mantissa bits (Google Brain's format).
    return 16, 2.0**-7, float((2.0 - 2.0**-7) * 2.0**127), 2.0**-126, 0.01


_FLOAT_INFO = {
    name: (int(fi.bits), float(fi.eps), float(fi.max), float(fi.smallest_normal), 10.0 ** -int(fi.precision))
    for name, fi in (
        ("float16", np.finfo(np.float16)),
        ("float32", np.finfo(np.float32)),
        ("float64", np.finfo(np.float64)),
    )
}
_FLOAT_INFO["bfloat16"] = _bfloat16_info()


def _dtype_name(opname: str, type_) -> str:
    """The name of a lazyvic dtype, an autocast precision (``lazyvic.float16``/``bfloat16``) or a
    dtype name; raises DTypeError naming ``opname`` for anything else."""
    if isinstance(type_, DType):
        return type_.name
    name = type_ if isinstance(type_, str) else getattr(type_, "name", None)
    if name in _BY_NAME:
        return _BY_NAME[name].name
    if name in _FLOAT_INFO:
        return name
    raise DTypeError(f"{opname}: expected a lazyvic dtype, got {type_!r}")


class finfo:  # noqa: N801 - PyTorch's name
    """PyTorch's ``torch.finfo``: the numerical properties of a floating-point dtype.

    ``finfo(type=None)``: ``lazyvic.float32`` (also the default), ``float64``, and the autocast
    precisions ``lazyvic.float16`` and ``bfloat16``. Fields (PyTorch's): ``bits``; ``eps``, the gap
    between 1 and the next number; ``max`` and ``min`` (= -max), the largest and smallest finite
    numbers; ``tiny`` = ``smallest_normal``, the smallest positive normal number; ``resolution``,
    ``10 ** -floor(mantissa_bits * log10(2))``; ``dtype``, the dtype's name. Values from
    ``numpy.finfo`` (IEEE 754) and, for bfloat16, its format (8 exponent, 7 mantissa bits).

    Raises DTypeError (a TypeError, as in PyTorch) for an integer, bool or unknown dtype.
    """

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")

    def __init__(self, type=None):  # noqa: A002 - PyTorch's argument name
        name = _dtype_name("finfo", default_float if type is None else type)
        if name not in _FLOAT_INFO:
            raise DTypeError(f"finfo: requires a floating-point dtype, got {name}; use lazyvic.iinfo for integers")
        self.bits, self.eps, self.max, self.tiny, self.resolution = _FLOAT_INFO[name]
        self.min, self.smallest_normal, self.dtype = -self.max, self.tiny, name

    def __repr__(self) -> str:
        return (
            f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
            f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})"
        )


class iinfo:  # noqa: N801 - PyTorch's name
    """PyTorch's ``torch.iinfo``: ``bits``, ``max``, ``min`` and ``dtype`` (its name) of an integer
    dtype (``lazyvic.int32``, ``int64``).

    Raises DTypeError (a TypeError, as in PyTorch) for a floating-point, bool or unknown dtype.
    """

    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, type):  # noqa: A002 - PyTorch's argument name
        name = _dtype_name("iinfo", type)
        if name == "bool":
            raise DTypeError("iinfo: lazyvic.bool is not supported by iinfo")
        if name not in _BY_NAME or _BY_NAME[name].category != 1:
            raise DTypeError(f"iinfo: requires an integer dtype, got {name}; use lazyvic.finfo for floating point")
        info = np.iinfo(_BY_NAME[name].np)
        self.bits, self.max, self.min, self.dtype = int(info.bits), int(info.max), int(info.min), name

    def __repr__(self) -> str:
        return f"iinfo(min={float(self.min):g}, max={float(self.max):g}, dtype={self.dtype})"
