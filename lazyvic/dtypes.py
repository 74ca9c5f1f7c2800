"""The dtypes lazyvic supports and the promotion rule between them.

Thirteen dtypes, with PyTorch's names: ``bool``; the integers ``uint8``, ``int8``, ``int16``,
``int32``, ``int64`` and the "limited support" unsigned ``uint16``, ``uint32``, ``uint64``;
the floating types ``float16`` (IEEE 754 binary16), ``bfloat16`` (Google Brain's format,
through ``ml_dtypes``), ``float32``, ``float64``.

Promotion follows PyTorch (``torch.promote_types``, checked against a PyTorch-made table in
``tests/fixtures/torch_dtypes/promotion.json``): a higher category (bool < integer < floating)
wins; inside one category the wider type wins, uint8 with a signed type gives the smallest
signed type that holds both (uint8 + int8 -> int16), float16 with bfloat16 gives float32, and
uint16/uint32/uint64 do not promote with another integer type or bool (DTypeError, as PyTorch raises).
Python scalars never widen a tensor (``int32_tensor + 1`` stays int32, ``float16_tensor * 2.0``
stays float16), and a float scalar with an integer tensor gives the default float dtype.

Half types (float16, bfloat16) are storage types: ops compute in float32 and round each op's
result to the half type (what PyTorch does on the CPU), in the interpreter and in kernels alike
(``DType.compute``). Integer ops wrap modulo 2**bits, as PyTorch's do.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from lazyvic.errors import DTypeError


class DType:
    """A tensor element type. Instances are singletons: compare with ``is`` or ``==``.

    Attributes:
        name: PyTorch's name (``"float16"``, ``"uint8"`` ...).
        np: the NumPy dtype of the stored elements (``ml_dtypes.bfloat16`` for bfloat16).
        itemsize: bytes per element.
        category: 0 bool, 1 integer, 2 floating point.
        compute: the dtype ops compute in (float32 for the half types, else the dtype itself).
        kernel_np: the NumPy dtype a compiled kernel sees the storage as (uint16 bits for the
            half types, which Numba cannot type; else ``np``).
    """

    __slots__ = ("name", "np", "itemsize", "category", "compute", "kernel_np", "bits", "signed")

    def __init__(self, name: str, np_dtype, category: int, compute: "DType | None" = None):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.category = category  # 0 bool, 1 integer, 2 floating
        self.compute = compute or self
        self.kernel_np = np.dtype(np.uint16) if compute is not None else self.np
        self.bits = 8 * self.itemsize
        self.signed = category == 2 or (category == 1 and self.np.kind == "i")

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    @property
    def is_signed(self) -> bool:
        """PyTorch's ``dtype.is_signed``."""
        return self.signed

    @property
    def is_half(self) -> bool:
        """A half storage type (float16, bfloat16): computed in float32, stored rounded."""
        return self.compute is not self

    def __repr__(self) -> str:
        return f"lazyvic.{self.name}"

    def __reduce__(self):
        return (get_dtype, (self.name,))


bool_ = DType("bool", np.bool_, 0)
uint8 = DType("uint8", np.uint8, 1)
int8 = DType("int8", np.int8, 1)
int16 = DType("int16", np.int16, 1)
int32 = DType("int32", np.int32, 1)
int64 = DType("int64", np.int64, 1)
uint16 = DType("uint16", np.uint16, 1)
uint32 = DType("uint32", np.uint32, 1)
uint64 = DType("uint64", np.uint64, 1)
float32 = DType("float32", np.float32, 2)
float64 = DType("float64", np.float64, 2)
float16 = DType("float16", np.float16, 2, float32)
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, 2, float32)

ALL = (bool_, uint8, int8, int16, int32, int64, uint16, uint32, uint64, float16, bfloat16, float32, float64)
HALF = (float16, bfloat16)
HALF_NP = frozenset(d.np for d in HALF)  # their NumPy dtypes (ml_dtypes' bfloat16 has kind "V")
_BY_NAME = {d.name: d for d in ALL}
# PyTorch's aliases (torch.half, torch.short, ...).
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32, "short": int16})
_BY_NP = {d.np: d for d in ALL}

default_float = float32

# Unsigned types PyTorch gives "limited support": no promotion with other integer types.
_LIMITED = (uint16, uint32, uint64)


def get_dtype(x) -> DType:
    """Return the lazyvic DType for a DType, a name, a NumPy dtype or a Python type.

    Raises:
        DTypeError: for dtypes lazyvic does not support (complex, strings, float8 ...).
    """
    if isinstance(x, DType):
        return x
    if isinstance(x, np.dtype):  # an array's own (a plan's outputs, at every replay): a lookup
        d = _BY_NP.get(x)
        if d is not None:
            return d
    if isinstance(x, str):
        d = _BY_NAME.get(x[6:] if x.startswith("torch.") else x)
        if d is not None:
            return d
    if x is bool:
        return bool_
    if x is int:
        return int64
    if x is float:
        return float32
    name = getattr(x, "name", None)  # lazyvic.amp precisions, torch dtypes' str
    if isinstance(name, str) and name in _BY_NAME and not isinstance(x, np.dtype):
        return _BY_NAME[name]
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NP:
        return _BY_NP[npd]
    raise DTypeError(f"unsupported dtype {x!r}: lazyvic supports " + ", ".join(d.name for d in ALL))


def promote(a: DType, b: DType) -> DType:
    """PyTorch-style promotion of two tensor dtypes (``torch.promote_types``).

    Raises:
        DTypeError: for uint16/uint32/uint64 with another integer type (PyTorch raises too).
    """
    if a is b:
        return a
    if a.category != b.category and (a.category == 2 or b.category == 2 or (a not in _LIMITED and b not in _LIMITED)):
        return a if a.category > b.category else b
    if a.category == 2:
        if a.is_half and b.is_half:
            return float32
        return a if a.itemsize > b.itemsize else b
    if a in _LIMITED or b in _LIMITED:  # with another integer type or bool (PyTorch 2.13 raises)
        raise DTypeError(
            f"promotion of {a.name} with {b.name} is not supported (as in PyTorch, uint16, uint32 and "
            "uint64 promote only with floating types); cast one operand first"
        )
    if a.signed == b.signed:
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if a.signed else (b, a)  # unsigned is uint8 here
    return signed if signed.itemsize > unsigned.itemsize else int16


def scalar_dtype_for(tensor_dtype: DType, value) -> DType:
    """The dtype a Python scalar takes when combined with a tensor of ``tensor_dtype``."""
    if isinstance(value, bool):
        return tensor_dtype
    if isinstance(value, int):
        return tensor_dtype if tensor_dtype.category >= 1 else int64
    if isinstance(value, float):
        return tensor_dtype if tensor_dtype.category == 2 else default_float
    raise DTypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")


def wrap_int(value: int, dtype: DType) -> int:
    """``value`` modulo 2**bits of integer ``dtype``, as a Python int in its range (how PyTorch
    converts a Python int operand of an op: ``int8_tensor + 1000`` adds -24)."""
    v = int(value) & ((1 << dtype.bits) - 1)
    return v - (1 << dtype.bits) if dtype.signed and v >= 1 << (dtype.bits - 1) else v


def scalar_value(value, dtype: DType):
    """A Python number as an operand of ``dtype`` (a NumPy scalar of its compute dtype): ints wrap
    into the integer range, floats stay float32 for the half types (PyTorch computes
    ``float16_tensor * 1.0004`` with the float32 scalar, not a rounded one)."""
    d = dtype.compute
    if d.category == 1:
        return d.np.type(wrap_int(value, d))
    return d.np.type(value)


# ------------------------------------------------- composites on half types
def _upcast(v, half: DType):
    return v.to(float32) if getattr(v, "dtype", None) is half and hasattr(v, "_node") else v


def _downcast(out, half: DType):
    if getattr(out, "dtype", None) is float32 and hasattr(out, "_node"):
        return out.to(half)
    if isinstance(out, tuple):
        items = [_downcast(v, half) for v in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    return out


def half_in_float32(fn):
    """Run composite ``fn`` (softmax, layer_norm, gelu, a loss ...) on float16/bfloat16 tensors in
    float32 and round its result once, as PyTorch's CPU kernels compute these ops (in float32,
    "opmath"): rounding each of its primitives' results would lose what ``1 + erf(x)`` or
    ``x - max`` keeps. The first argument decides; other tensors of the same half dtype are
    widened too; float32 results are rounded back (indices and other dtypes are left alone).
    An explicit ``dtype=`` or ``inplace=True`` call runs ``fn`` as it is.
    """

    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        half = getattr(x, "dtype", None)
        if not isinstance(half, DType) or not half.is_half or kwargs.get("dtype") is not None or kwargs.get("inplace"):
            return fn(x, *args, **kwargs)
        out = fn(
            _upcast(x, half), *[_upcast(a, half) for a in args], **{k: _upcast(v, half) for k, v in kwargs.items()}
        )
        return _downcast(out, half)

    return wrapper


def widen_halves(namespace: dict, names: tuple) -> None:
    """Wrap the functions ``names`` of a module's ``namespace`` with :func:`half_in_float32`."""
    for name in names:
        namespace[name] = half_in_float32(namespace[name])


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
    """The name of a lazyvic dtype or a dtype name; raises DTypeError naming ``opname`` for
    anything else."""
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

    ``finfo(type=None)``: ``lazyvic.float32`` (also the default), ``float64``, ``float16`` and
    ``bfloat16``. Fields (PyTorch's): ``bits``; ``eps``, the gap
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
    dtype (``lazyvic.uint8``, ``int8``, ``int16``, ``int32``, ``int64``, ``uint16``, ``uint32``,
    ``uint64``; values from ``numpy.iinfo``).

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


# PyTorch's legacy tensor type names (``x.type()``, ``torch.FloatTensor`` ...: lazyvic/legacy.py).
LEGACY_TENSOR_TYPES = {
    float32: "FloatTensor",
    float64: "DoubleTensor",
    float16: "HalfTensor",
    bfloat16: "BFloat16Tensor",
    int64: "LongTensor",
    int32: "IntTensor",
    int16: "ShortTensor",
    int8: "CharTensor",
    uint8: "ByteTensor",
    bool_: "BoolTensor",
}
