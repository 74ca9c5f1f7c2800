"""What a converter is handed: the node being imported (:class:`NodeContext`) and its values.

A value while an imported graph runs is either a *known constant* (a NumPy array: Constant
nodes, integer and bool initializers, shapes, and what folds from them) or a lazy ``Tensor``
(graph inputs, floating-point initializers, and everything computed from them). The element
types lazyvic has are listed here once, for the loader and the converters.

Every NumPy array a run makes (folded constants, the index and weight tables some converters
build) counts against the run's :class:`~lazyvic.interop.format_v1.LoadBudget`
(:data:`RUN_BUDGET`, set by ``OnnxModule.forward``): converters call :meth:`NodeContext.reserve`
with the shape before making an array whose size the model chooses (a shape or a count read from
a constant, a broadcast, a product), so a model of a few hundred bytes cannot make gigabytes.
"""

from __future__ import annotations

import contextvars
import math

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.creation import tensor
from lazyvic.errors import DTypeError, OnnxError
from lazyvic.interop.format_v1 import LoadBudget, load_limit
from lazyvic.interop.onnx.builder import ONNX_DTYPES
from lazyvic.tensor import Tensor

# ONNX TensorProto element types lazyvic has (the thirteen of lazyvic.dtypes; the enum values are
# the exporter's ONNX_DTYPES). The others (FLOAT8*, FLOAT4E2M1, INT4/UINT4, INT2/UINT2,
# COMPLEX64/128, STRING) are refused with SUPPORTED_TYPES_TEXT.
ELEM_DTYPES = {code: dt.get_dtype(name) for name, code in ONNX_DTYPES.items()}
SUPPORTED_TYPES_TEXT = (
    "FLOAT (float32), DOUBLE (float64), FLOAT16, BFLOAT16, INT8, INT16, INT32, INT64, UINT8, UINT16, "
    "UINT32, UINT64 and BOOL"
)
SUPPORTED_TYPES_NOTE = "lazyvic supports " + SUPPORTED_TYPES_TEXT


# The allocation budget of the OnnxModule run in progress (None outside a run).
RUN_BUDGET: contextvars.ContextVar = contextvars.ContextVar("lazyvic_onnx_run_budget", default=None)


def run_budget(limit: float, source: str) -> LoadBudget:
    """A budget for one run of an imported graph (see the module docstring)."""
    return LoadBudget(limit, source, OnnxError, scope="one run of this model may make in constants")


def elem_name(elem_type: int) -> str:
    """The TensorProto name of an element type (``FLOAT16``), for messages."""
    try:
        from onnx import TensorProto

        return TensorProto.DataType.Name(elem_type)
    except Exception:
        return f"element type {elem_type}"


def tensor_array(t) -> np.ndarray:
    """The NumPy array of a ``TensorProto`` of a type lazyvic has (``ELEM_DTYPES``), in that type's
    NumPy dtype: ``onnx.numpy_helper.to_array``, except that BFLOAT16 is decoded here from its bit
    patterns into an ``ml_dtypes.bfloat16`` array (onnx releases differ there: recent ones give
    ml_dtypes arrays, older ones uint16 bit patterns or float32 values)."""
    from onnx import TensorProto, numpy_helper

    if t.data_type != TensorProto.BFLOAT16:
        return np.asarray(numpy_helper.to_array(t))
    shape = tuple(int(n) for n in t.dims)
    if t.HasField("raw_data"):
        bits = np.frombuffer(t.raw_data, dtype="<u2")
    else:  # int32_data holds one bit pattern per element in its low 16 bits
        bits = np.asarray(t.int32_data, dtype=np.int64)
        if bits.size and (bits.min() < 0 or bits.max() > 0xFFFF):
            raise ValueError("BFLOAT16 int32_data holds a value that is not a 16-bit pattern")
        bits = bits.astype(np.uint16)
    if bits.size != math.prod(shape):
        raise ValueError(f"{bits.size} values for shape {shape}")
    return bits.astype(np.uint16).view(dt.bfloat16.np).reshape(shape)


def lazyvic_dtype(np_dtype) -> dt.DType | None:
    """The lazyvic dtype of a NumPy dtype, or None when lazyvic has none."""
    try:
        return dt.get_dtype(np.dtype(np_dtype))
    except (DTypeError, TypeError):
        return None


def is_const(v) -> bool:
    return isinstance(v, np.ndarray)


def shape_of(v) -> tuple:
    return tuple(v.shape)


def dtype_np(v) -> np.dtype:
    """The NumPy dtype of a constant or a Tensor."""
    return v.dtype if isinstance(v, np.ndarray) else v.dtype.np


def const_tensor(data, dtype=None, device=None) -> Tensor:
    """A realized tensor of ``data`` on the running model's device (constants made while a graph runs)."""
    return tensor(data, dtype=dtype, device=device or NodeContext.device)


class NodeContext:
    """One graph node ready to run: its attributes parsed once, errors that name it.

    Attributes:
        op: the ONNX op type; ``version``: the since-version of its schema at the model's opset
            (set at load time); ``attrs``: attribute name -> Python value (strings decoded);
        inputs, outputs: value names ("" for an omitted optional one).
    """

    # The device of the running OnnxModule (set by its forward): constants are made there.
    device = "cpu"

    def __init__(self, proto, version: int, source: str, index: int):
        from onnx import helper

        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.version = version
        self.source = source
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)
        self.attrs = {}
        for a in proto.attribute:
            value = helper.get_attribute_value(a)
            if isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode() for v in value]
            self.attrs[a.name] = value

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def attr_input(self, name: str, value, since: int, dtype=np.int64):
        """An input that older versions of the op take as an attribute: ``value`` (the input) from
        version ``since`` on, before it the attribute ``name`` as an array of ``dtype`` (None when
        absent). Squeeze's axes before 13, Slice's starts/ends/axes before 10, Pad's pads before 11."""
        if self.version >= since:
            return value
        attr = self.attrs.get(name)
        return None if attr is None else np.asarray(attr, dtype=dtype)

    def label(self) -> str:
        return f"{self.source}: node '{self.name}' ({self.op})"

    def error(self, message: str) -> OnnxError:
        return OnnxError(f"{self.label()}: {message}")

    def wants_output(self, i: int) -> bool:
        return i < len(self.outputs) and self.outputs[i] != ""

    def reserve(self, shape, dtype, what: str = "the result") -> None:
        """Count a NumPy array of ``shape`` and ``dtype`` (or an itemsize) that this node is about to
        make against the run's budget, before making it; OnnxError naming the node past the limit
        or for a negative dimension. Outside a run, one array may take the default load limit."""
        dims = tuple(int(n) for n in shape)
        if any(n < 0 for n in dims):
            raise self.error(f"{what} would have a negative dimension: shape {dims}")
        itemsize = dtype if isinstance(dtype, int) else np.dtype(dtype).itemsize
        budget = RUN_BUDGET.get() or run_budget(load_limit(0), self.source)
        budget.charge(math.prod(dims) * itemsize, f"node '{self.name}' ({self.op}): {what} of shape {dims}")

    def reserve_broadcast(self, arrays, what: str = "the broadcast result") -> tuple:
        """:meth:`reserve` for the broadcast of ``arrays`` (at their largest itemsize); returns its shape."""
        present = [a for a in arrays if a is not None]
        try:
            shape = tuple(np.broadcast_shapes(*[a.shape for a in present]))
        except ValueError:
            shapes = ", ".join(str(a.shape) for a in present)
            raise self.error(f"input shapes {shapes} cannot be broadcast together") from None
        self.reserve(shape, max(np.dtype(dtype_np(a)).itemsize for a in present), what)
        return shape

    # ---------------------------------------------------------------- values
    def tensor(self, value) -> Tensor:
        """A lazy Tensor for an input (constants become realized tensors of their dtype)."""
        if isinstance(value, Tensor):
            return value
        arr = np.asarray(value)
        if lazyvic_dtype(arr.dtype) is None:
            raise self.error(f"lazyvic has no {arr.dtype} (it supports {SUPPORTED_TYPES_TEXT})")
        return const_tensor(arr, dtype=arr.dtype, device=NodeContext.device)

    def const(self, value, what: str) -> np.ndarray:
        """A constant's array; a Tensor that holds data gives its data; a pending one is synced."""
        if isinstance(value, np.ndarray):
            return value
        if isinstance(value, Tensor):
            return np.asarray(value.numpy())
        raise self.error(f"{what} is missing")

    def ints(self, value, what: str) -> list:
        arr = self.const(value, what)
        if arr.dtype.kind not in "iu":
            raise self.error(f"{what} must be an integer tensor, got {arr.dtype}")
        return [int(v) for v in arr.reshape(-1)]

    def axis(self, axis: int, ndim: int, what: str = "axis") -> int:
        if not -ndim <= axis < max(ndim, 1):
            raise self.error(f"{what} {axis} is out of range for rank {ndim}")
        return axis % ndim if ndim else 0


def broadcast_fold(fold):
    """Wrap a fold whose result has its inputs' broadcast shape so that it reserves that first."""

    def reserving(ctx: NodeContext, *arrays):
        ctx.reserve_broadcast(arrays)
        return fold(ctx, *arrays)

    return reserving
