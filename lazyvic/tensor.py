"""Tensor: the user-facing lazy tensor (PyTorch names and semantics).

Every method is thin: it checks and broadcasts its arguments, then records one
primitive from the op table with :func:`_apply`. Nothing is computed until a
sync point (``numpy()``, ``item()``, ``tolist()``, ``bool()``/``int()``/
``float()``/``index()``, ``__array__``, ``repr``/``str``, or ``lazyvic.sync``),
which cuts every live pending tensor into one trace and runs its plan.
"""

from __future__ import annotations

import math
import numbers
import weakref
from collections import namedtuple
from typing import Sequence

import numpy as np

from lazyvic import autograd
from lazyvic import dtypes as dt
from lazyvic import ops as optable
from lazyvic.errors import DeviceError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.errors import IndexError as LIndexError
from lazyvic.runtime import device as _dev
from lazyvic.runtime.config import config
from lazyvic.trace.composite import mark, recipe
from lazyvic.trace.node import Node, live_nodes_count, parameter_nodes


# Tensors whose node is pending, by creation id (weak: a dropped tensor is not computed).
class _LiveTensors:
    """Weak references to the tensors made pending since the last cut, in creation order.

    A list of ``weakref.ref`` costs a fraction of a WeakValueDictionary per op; a tensor
    updated in place is added again and counted once at the cut.
    """

    __slots__ = ("refs",)

    def __init__(self):
        self.refs: list = []

    def add(self, t) -> None:
        self.refs.append(weakref.ref(t))

    def pending(self) -> list:
        out, seen = [], set()
        for r in self.refs:
            t = r()
            if t is not None and t._node.pending and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def clear(self) -> None:
        self.refs = []


_live_pending = _LiveTensors()

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _norm_axis(axis: int, ndim: int, opname: str) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{opname}: dim must be an int, got {type(axis).__name__}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise LIndexError(f"{opname}: dim {axis} out of range for a tensor of {ndim} dimensions")
    return int(axis) % max(ndim, 1)


def _norm_axes(dim, ndim: int, opname: str) -> tuple:
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    axes = sorted({_norm_axis(d, ndim, opname) for d in dims})
    if len(axes) != len(dims):
        raise ShapeError(f"{opname}: dim {dim} repeats an axis")
    return tuple(axes)


def _shape_arg(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
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


def _apply(opname: str, inputs: tuple, _device: str | None = None, **attrs) -> "Tensor":
    """Record one primitive: infer shape and dtype now, compute nothing.

    The result is on its inputs' device; ``_device`` places an op without tensor inputs (a
    random source). An op on Python scalars only (a broadcast constant) has no device yet
    (None): it joins the trace of the op that reads it, and is computed on the CPU if it
    is itself synced. Inputs on two devices raise DeviceError."""
    opdef = optable.OPS[opname]
    nodes = tuple([t._node for t in inputs])
    device = _device
    for n in nodes:
        d = n.device
        if d is not None and d != device:
            if device is not None:
                _device_mismatch(opname, nodes, _device)
            device = d
    shape, dtype = opdef.infer(tuple([n.shape for n in nodes]), tuple([n.dtype for n in nodes]), attrs)
    node = Node(opname, nodes, tuple(sorted(attrs.items())) if attrs else (), shape, dtype, device)
    out = Tensor._from_node(node)
    # Integer and bool results carry no gradient (PyTorch: x.long() does not require grad).
    for t in inputs:
        if t.requires_grad:
            if opdef.differentiable and dtype.category == 2 and autograd.is_grad_enabled():
                out.requires_grad = True
                out._ctx = (opdef, inputs, nodes, attrs, node)
                for u in inputs:
                    if u._ctx is not None:  # a non-leaf input: remember who reads it
                        if u._users is None:
                            u._users = []
                        u._users.append(weakref.ref(out))
            break
    return out


def _device_mismatch(opname: str, nodes: tuple, placed: str | None):
    found = ", ".join(f"{n.device} {n.shape}" for n in nodes if n.device is not None)
    where = f" (the op was asked to run on {placed})" if placed is not None else ""
    raise DeviceError(
        f"{opname}: expected all tensors on one device, got {found}{where}; "
        f"move them with .to(device), .cuda() or .cpu()"
    )


# Binary primitives whose result has the operands' dtype and shape (no rule to run).
_SAME_DTYPE_BINARY = frozenset({"add", "sub", "mul", "maximum", "minimum"})


def _detach_history(t: "Tensor") -> None:
    """Before ``t`` is rebound in place: every autograd context that read ``t`` (in the
    expression of the new value, or in ops recorded earlier) must keep pointing at the
    value it read, not at ``t``, which is about to carry a new context. (Without this,
    ``h += 1`` on a non-leaf made a cycle that lost the gradient.)"""
    if not t._users:
        return
    old = Tensor._wrap(t._node)
    old.requires_grad, old._ctx = t.requires_grad, t._ctx
    for ref in t._users:
        u = ref()
        if u is None or u._ctx is None:
            continue
        opdef, inputs, nodes, attrs, node = u._ctx
        if inputs is not None and any(i is t for i in inputs):  # None: freed by a backward
            u._ctx = (opdef, tuple(old if i is t else i for i in inputs), nodes, attrs, node)
    old._users, t._users = t._users, None


def _scalar_operand(value, dtype: dt.DType) -> "Tensor":
    """A Python scalar operand: a scalar input slot that elementwise ops broadcast.

    An internal node (the user never holds it): no live tracking, no autograd.
    """
    return Tensor._wrap(Node.scalar(value, dtype))


class Tensor:
    """A lazy n-dimensional array.

    Construct with :func:`lazyvic.tensor`; ``Tensor(data, dtype=None,
    requires_grad=False)`` is the same. Shapes are tuples of ints; dtypes are
    ``lazyvic.float32`` (default for Python floats), ``float64``, ``int32``,
    ``int64`` (default for Python ints) and ``bool``.
    """

    # _users: weak references to the tensors whose autograd context reads this one
    # (kept for non-leaf tensors only, so an in-place update can re-point them).
    __slots__ = ("_node", "requires_grad", "grad", "_ctx", "_users", "__weakref__")
    __hash__ = object.__hash__
    __array_priority__ = 1000  # NumPy defers to our reflected operators
    _is_parameter = False  # nn.Parameter: its values are counted as parameters in memory plans

    def __init__(self, data=None, dtype=None, requires_grad: bool = False, _node: Node | None = None):
        if _node is None:
            _node = Node.buffer(*_to_array(data, dtype))
        self._node = _node
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._ctx = None
        self._users = None
        if requires_grad and not _node.dtype.is_floating_point:
            raise DTypeError(f"only floating-point tensors can require grad, got {_node.dtype.name}")

    @classmethod
    def _from_node(cls, node: Node) -> "Tensor":
        t = cls.__new__(cls)
        t._node = node
        t.requires_grad = False
        t.grad = None
        t._ctx = None
        t._users = None
        if node.op != "buffer" and node.op != "scalar":
            _live_pending.refs.append(weakref.ref(t))
            if live_nodes_count() > config.max_pending:
                sync()
        return t

    @classmethod
    def _wrap(cls, node: Node) -> "Tensor":
        """A handle on a node that is not tracked as live (used for saved values in VJPs)."""
        t = cls.__new__(cls)
        t._node = node
        t.requires_grad = False
        t.grad = None
        t._ctx = None
        t._users = None
        return t

    # ------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple:
        return self._node.shape

    @property
    def dtype(self) -> dt.DType:
        return self._node.dtype

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda"`` (see :meth:`to`)."""
        return self._node.device or "cpu"

    @property
    def is_cuda(self) -> bool:
        return self._node.device == "cuda"

    @property
    def is_lazy(self) -> bool:
        """True while the value is pending (not computed yet)."""
        return self._node.op != "buffer"

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self):
        return None if self._ctx is None else self._ctx[0].name

    @property
    def T(self) -> "Tensor":
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> "Tensor":
        return self.transpose(-2, -1)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[_norm_axis(dim, self.ndim, "size")]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ----------------------------------------------------------- sync points
    def numpy(self) -> np.ndarray:
        """Sync point: compute and return the value as a NumPy array.

        On the CPU the array shares the tensor's memory. On CUDA it is a host copy (as
        tinygrad's ``numpy()``; PyTorch asks for ``.cpu().numpy()``), counted in
        ``lazyvic.metrics`` as device-to-host bytes."""
        node = self._node
        if node.op == "scalar":
            node.realize(np.array(node.value, dtype=node.dtype.np))
        elif node.op != "buffer":
            sync(self)
        if node.device == "cuda":
            return _dev.to_host(node.data, node.shape)
        return node.data

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        if dtype is not None:
            return a.astype(dtype, copy=bool(copy))
        return a.copy() if copy else a

    def item(self):
        """Sync point: the value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise ShapeError(
                f"item: only one-element tensors can be converted to Python scalars, got shape {self.shape}"
            )
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ShapeError(f"bool: the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.category != 1:
            raise DTypeError(f"__index__: only integer tensors can be used as an index, got {self.dtype.name}")
        return int(self.item())

    def __repr__(self) -> str:
        a = self.numpy()
        body = np.array2string(a, separator=", ", prefix="tensor(", threshold=1000)
        extra = ""
        if self.dtype not in (dt.float32, dt.int64, dt.bool_):
            extra += f", dtype={self.dtype!r}"
        if self.device == "cuda":
            extra += ", device='cuda:0'"
        if self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    __str__ = __repr__

    # --------------------------------------------------------------- autograd
    def backward(self, gradient=None, retain_graph: bool = False) -> None:
        """Accumulate gradients into the leaves' ``.grad`` (lazy: adds nodes, computes nothing)."""
        autograd.backward(self, gradient, retain_graph)

    def detach(self) -> "Tensor":
        """The same value, cut from the autograd graph (no copy)."""
        return Tensor._from_node(self._node)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if requires_grad and not self.dtype.is_floating_point:
            raise DTypeError(f"only floating-point tensors can require grad, got {self.dtype.name}")
        self.requires_grad = requires_grad
        return self

    def clone(self) -> "Tensor":
        return self + 0 if self.dtype is not dt.bool_ else self.where(self, False)

    def contiguous(self) -> "Tensor":
        return self

    # ----------------------------------------------------------------- in place
    def _assign(self, value: "Tensor") -> "Tensor":
        """In-place update: this tensor now refers to ``value``'s node."""
        if self.requires_grad and self._ctx is None and autograd.is_grad_enabled():
            raise RuntimeError("a leaf tensor that requires grad cannot be updated in place; use no_grad()")
        if value.shape != self.shape:
            value = value.expand(*self.shape)
        if value.dtype is not self.dtype:
            value = value.to(self.dtype)
        if self._node.device is not None and value._node.device not in (self._node.device, None):
            value = value.to(self.device)  # copy_ across devices, as in PyTorch
        if value.requires_grad and autograd.is_grad_enabled():
            _detach_history(self)
            self._node = value._node
            self._ctx, self.requires_grad = value._ctx, True
        else:
            self._node = value._node
        if self._is_parameter:
            parameter_nodes.add(self._node)
        if self._node.op != "buffer":
            _live_pending.add(self)
        return self

    def copy_(self, src) -> "Tensor":
        # A new node: the copy must not share storage with src once computed.
        src = _as_tensor(src, self.dtype)
        return self._assign(src.where(True, src) if src.dtype is dt.bool_ else src + 0)

    def zero_(self) -> "Tensor":
        return self._assign(full_like(self, 0))

    def fill_(self, value) -> "Tensor":
        return self._assign(full_like(self, value))

    def add_(self, other, alpha=1) -> "Tensor":
        return self._assign(self + (other * alpha if alpha != 1 else other))

    def sub_(self, other, alpha=1) -> "Tensor":
        return self._assign(self - (other * alpha if alpha != 1 else other))

    def mul_(self, other) -> "Tensor":
        return self._assign(self * other)

    def div_(self, other) -> "Tensor":
        return self._assign(self / other)

    def clamp_(self, min=None, max=None) -> "Tensor":
        return self._assign(self.clamp(min, max))

    def __iadd__(self, other):
        return self._assign(self + other)

    def __isub__(self, other):
        return self._assign(self - other)

    def __imul__(self, other):
        return self._assign(self * other)

    def __itruediv__(self, other):
        return self._assign(self / other)

    # ------------------------------------------------------------ elementwise
    def _binary(self, opname: str, other, reverse: bool = False) -> "Tensor":
        cls = other.__class__
        if cls is float or cls is int:
            # Fast path for the most common case, a Python number operand (a scalar input).
            node = self._node
            d = node.dtype
            if d.category != 2:
                d = dt.scalar_dtype_for(d, other)
            if d is node.dtype and not self.requires_grad and opname in _SAME_DTYPE_BINARY:
                s = Node.scalar(other, d)
                return Tensor._from_node(
                    Node(opname, (s, node) if reverse else (node, s), (), node.shape, d, node.device)
                )
            a = self if self.dtype is d else self.to(d)
            b = _scalar_operand(other, d)
            return _apply(opname, (b, a) if reverse else (a, b))
        a, b = _promote_pair(self, other, opname)
        if reverse:
            a, b = b, a
        if a.shape != b.shape:
            shape = broadcast_shapes(a.shape, b.shape, opname)
            a, b = a._broadcast_to(shape), b._broadcast_to(shape)
        return _apply(opname, (a, b))

    def _broadcast_to(self, shape: tuple) -> "Tensor":
        if self.shape == shape:
            return self
        if self.ndim == 0:
            return _apply("expand", (self,), shape=shape)
        t = self
        if t.ndim < len(shape):
            t = _apply("reshape", (t,), shape=(1,) * (len(shape) - t.ndim) + t.shape)
        return t if t.shape == shape else _apply("expand", (t,), shape=shape)

    def __add__(self, other):
        return self._binary("add", other)

    def __radd__(self, other):
        return self._binary("add", other, True)

    def __sub__(self, other):
        return self._binary("sub", other)

    def __rsub__(self, other):
        return self._binary("sub", other, True)

    def __mul__(self, other):
        return self._binary("mul", other)

    def __rmul__(self, other):
        return self._binary("mul", other, True)

    def __truediv__(self, other):
        return self._float()._binary("div", other)

    def __rtruediv__(self, other):
        return self._float()._binary("div", other, True)

    def __pow__(self, exponent):
        # Small integer powers become multiplications (exact and vectorizable).
        if isinstance(exponent, numbers.Number) and not isinstance(exponent, bool):
            if exponent == 2:
                return self * self
            if exponent == 1:
                return self + 0
            if exponent == 0.5 and self.dtype.is_floating_point:
                return self.sqrt()
            if self.dtype.category == 1 and isinstance(exponent, numbers.Integral) and exponent >= 0:
                return self._integer_power(int(exponent))
        return self._float()._binary("pow", exponent)

    def _integer_power(self, exponent: int) -> "Tensor":
        # PyTorch keeps int ** int integral; square-and-multiply is exact.
        result, base = None, self
        while exponent:
            if exponent & 1:
                result = base if result is None else result * base
            exponent >>= 1
            if exponent:
                base = base * base
        return result if result is not None else full_like(self, 1)

    def __rpow__(self, base):
        return self._float()._binary("pow", base, True)

    def pow(self, exponent):
        return self.__pow__(exponent)

    def __neg__(self):
        return _apply("neg", (self,))

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __eq__(self, other):  # noqa: D105 (elementwise, like PyTorch)
        return self._binary("eq", other)

    def __ne__(self, other):
        return self._binary("ne", other)

    def __lt__(self, other):
        return self._binary("lt", other)

    def __le__(self, other):
        return self._binary("le", other)

    def __gt__(self, other):
        return self._binary("gt", other)

    def __ge__(self, other):
        return self._binary("ge", other)

    def __invert__(self):
        if self.dtype is not dt.bool_:
            raise DTypeError(f"~: expected a bool tensor, got {self.dtype.name}")
        return _apply("logical_not", (self,))

    def _logical_operands(self, other, opname: str):
        other = _as_tensor(other, dt.bool_)
        for t in (self, other):
            if t.dtype is not dt.bool_:
                raise UnsupportedOpError(
                    f"{opname}: bitwise operations on {t.dtype.name} tensors are not supported (bool tensors only)"
                )
        return other

    def __and__(self, other):
        other = self._logical_operands(other, "&")
        return self.where(other, False)

    def __or__(self, other):
        other = self._logical_operands(other, "|")
        return where(self, True, other)

    __rand__ = __and__
    __ror__ = __or__

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def neg(self):
        return -self

    def _float(self) -> "Tensor":
        return self if self.dtype.is_floating_point else self.to(dt.default_float)

    def exp(self):
        return _apply("exp", (self._float(),))

    def log(self):
        return _apply("log", (self._float(),))

    def sqrt(self):
        return _apply("sqrt", (self._float(),))

    def rsqrt(self):
        return 1.0 / self.sqrt()

    def reciprocal(self):
        return 1.0 / self._float()

    def tanh(self):
        return _apply("tanh", (self._float(),))

    def sigmoid(self):
        return _apply("sigmoid", (self._float(),))

    def erf(self):
        return _apply("erf", (self._float(),))

    def relu(self):
        return _apply("relu", (self,))

    def abs(self):
        return _apply("abs", (self,))

    def square(self):
        return self * self

    def sign(self):
        return (self > 0).to(self.dtype) - (self < 0).to(self.dtype)

    def maximum(self, other):
        return self._binary("maximum", other)

    def minimum(self, other):
        return self._binary("minimum", other)

    def clamp(self, min=None, max=None):
        """Clamp to [min, max]; either bound may be None (``clip`` is an alias)."""
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        # where(), not maximum/minimum: a value on a bound keeps its whole gradient, as in PyTorch
        # (maximum would split it with the bound).
        out = self
        if min is not None:
            out = where(out < min, min, out)
        if max is not None:
            out = where(out > max, max, out)
        return out

    clip = clamp

    def where(self, condition, other):
        """PyTorch's ``x.where(condition, y)``: x where condition is true, else y."""
        return where(condition, self, other)

    def masked_fill(self, mask, value):
        return where(mask, value, self)

    def to(self, *args, **kwargs) -> "Tensor":
        """PyTorch's forms: ``.to(dtype)``, ``.to(device)``, ``.to(device, dtype)``,
        ``.to(other)`` (its device and dtype), and the keywords ``device=``, ``dtype=``,
        ``non_blocking=`` (ignored) and ``copy=``.

        A cast is lazy. A device change (``"cpu"`` <-> ``"cuda"``, see
        :mod:`lazyvic.runtime.device`) copies the value now: a pending source is computed
        first (a sync point for it), the copy is counted in ``lazyvic.metrics``, and the
        result is a realized tensor on the new device, differentiable (its gradient is copied
        back). Returns ``self`` when nothing changes and ``copy`` is false.

        Raises:
            DeviceError: an unknown or unavailable device.
            DTypeError: an unsupported dtype.
        """
        device, dtype, copy = _to_args("to", args, kwargs)
        out = self
        if device is not None:
            target = _dev.canonical(device, "to")
            if target != self.device:
                out = _transfer(self, target)
        if dtype is not None:
            d = dt.get_dtype(dtype)
            if d is not out.dtype:
                out = _apply("cast", (out,), dtype=d)
        if copy and out is self:
            out = self.clone()
        return out

    def cuda(self, device=None) -> "Tensor":
        """A copy on ``"cuda"`` (``self`` if it is there already); see :meth:`to`."""
        return self.to("cuda" if device is None else device if isinstance(device, str) else f"cuda:{device}")

    def cpu(self) -> "Tensor":
        """A copy on the CPU (``self`` if it is there already); see :meth:`to`."""
        return self.to("cpu")

    def type(self, dtype):
        return self.to(dtype)

    def float(self):
        return self.to(dt.float32)

    def double(self):
        return self.to(dt.float64)

    def long(self):
        return self.to(dt.int64)

    def int(self):
        return self.to(dt.int32)

    def bool(self):
        return self != 0 if self.dtype is not dt.bool_ else self

    # -------------------------------------------------------------- reductions
    def _reduce(self, opname: str, axes: tuple) -> "Tensor":
        """Primitive reduction over ``axes`` keeping them as size 1."""
        return _apply(opname, (self,), axes=tuple(axes))

    def _reduced(self, opname: str, dim, keepdim: bool) -> "Tensor":
        axes = _norm_axes(dim, self.ndim, opname)
        if not axes:
            return self
        out = self._reduce(opname, axes)
        if not keepdim:
            out = out.reshape(*(s for i, s in enumerate(self.shape) if i not in axes))
        return out

    def sum(self, dim=None, keepdim: bool = False, dtype=None) -> "Tensor":
        """Sum over ``dim`` (int, tuple, or None for all). Bool and int32 inputs sum as int64."""
        x = self
        if dtype is not None:
            x = x.to(dtype)
        elif x.dtype.category < 2:
            x = x.to(dt.int64)
        return x._reduced("sum", dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False) -> "Tensor":
        if not self.dtype.is_floating_point:
            raise DTypeError(f"mean: expected a floating-point input, got {self.dtype.name}")
        axes = _norm_axes(dim, self.ndim, "mean")
        n = math.prod(self.shape[a] for a in axes)
        return self.sum(dim, keepdim) * (1.0 / n if n else float("nan"))

    def var(self, dim=None, keepdim: bool = False, correction: int = 1, unbiased=None) -> "Tensor":
        if unbiased is not None:
            correction = int(unbiased)
        axes = _norm_axes(dim, self.ndim, "var")
        n = math.prod(self.shape[a] for a in axes)
        centered = self - self.mean(axes, keepdim=True)
        return (centered * centered).sum(axes, keepdim) * (
            1.0 / max(n - correction, 0) if n > correction else float("nan")
        )

    def std(self, dim=None, keepdim: bool = False, correction: int = 1, unbiased=None) -> "Tensor":
        return self.var(dim, keepdim, correction, unbiased).sqrt()

    def amax(self, dim=None, keepdim: bool = False) -> "Tensor":
        return self._reduced("max", dim, keepdim)

    def amin(self, dim=None, keepdim: bool = False) -> "Tensor":
        return self._reduced("min", dim, keepdim)

    def max(self, dim=None, keepdim: bool = False):
        """``max()`` -> tensor; ``max(dim)`` -> (values, indices) as in PyTorch; ``max(other)`` -> maximum."""
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        if dim is None:
            return self.amax()
        return ValuesIndices(self.amax(dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:
            return self.amin()
        return ValuesIndices(self.amin(dim, keepdim), self.argmin(dim, keepdim))

    def argmax(self, dim=None, keepdim: bool = False) -> "Tensor":
        """Index of the first maximum along ``dim`` (of the flattened tensor when None), int64."""
        if dim is None:
            return self.reshape(-1).argmax(0, keepdim=False)
        return self._reduced("argmax", _norm_axis(dim, self.ndim, "argmax"), keepdim)

    def argmin(self, dim=None, keepdim: bool = False) -> "Tensor":
        return (-self).argmax(dim, keepdim)

    def logsumexp(self, dim, keepdim: bool = False) -> "Tensor":
        m = self.amax(dim, keepdim=True).detach()
        out = (self - m).exp().sum(dim, keepdim=True).log() + m
        return out if keepdim else out.squeeze(dim)

    def softmax(self, dim: int) -> "Tensor":
        from lazyvic import functional

        return functional.softmax(self, dim)

    def log_softmax(self, dim: int) -> "Tensor":
        from lazyvic import functional

        return functional.log_softmax(self, dim)

    # ---------------------------------------------------------------- movement
    def reshape(self, *shape) -> "Tensor":
        """Same elements in row-major order with a new shape; one entry may be -1."""
        shape = _shape_arg(shape)
        if shape.count(-1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {shape}")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) to {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if shape == self.shape:
            return self
        return _apply("reshape", (self,), shape=shape)

    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def permute(self, *dims) -> "Tensor":
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        perm = tuple(_norm_axis(d, self.ndim, "permute") for d in dims)
        if len(perm) != self.ndim:
            raise ShapeError(f"permute: got {len(perm)} dims for a tensor of shape {self.shape}")
        if perm == tuple(range(self.ndim)):
            return self
        return _apply("permute", (self,), perm=perm)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        a, b = _norm_axis(dim0, self.ndim, "transpose"), _norm_axis(dim1, self.ndim, "transpose")
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

    def t(self) -> "Tensor":
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor with <= 2 dimensions, got shape {self.shape}")
        return self.T

    def expand(self, *sizes) -> "Tensor":
        """Repeat size-1 dims without copying; -1 keeps a size; new leading dims allowed."""
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"expand: cannot expand shape {self.shape} to {sizes}")
        lead = len(sizes) - self.ndim
        shape = tuple((self.shape[i - lead] if s == -1 else s) if i >= lead else s for i, s in enumerate(sizes))
        for i in range(self.ndim):
            if self.shape[i] != 1 and self.shape[i] != shape[i + lead]:
                raise ShapeError(f"expand: cannot expand shape {self.shape} to {sizes}")
        return self._broadcast_to(shape)

    def expand_as(self, other):
        return self.expand(*other.shape)

    def broadcast_to(self, shape):
        return self.expand(*shape)

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            return self.reshape(*(s for s in self.shape if s != 1))
        axes = _norm_axes(dim, self.ndim, "squeeze")
        return self.reshape(*(s for i, s in enumerate(self.shape) if not (i in axes and s == 1)))

    def unsqueeze(self, dim: int) -> "Tensor":
        d = _norm_axis(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(*self.shape[:d], 1, *self.shape[d:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        if self.ndim == 0:
            return self.reshape(1)
        s = _norm_axis(start_dim, self.ndim, "flatten")
        e = _norm_axis(end_dim, self.ndim, "flatten")
        if s > e:
            raise ShapeError(f"flatten: start_dim {start_dim} after end_dim {end_dim}")
        return self.reshape(*self.shape[:s], math.prod(self.shape[s : e + 1]), *self.shape[e + 1 :])

    def unflatten(self, dim: int, sizes) -> "Tensor":
        d = _norm_axis(dim, self.ndim, "unflatten")
        return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])

    def _slice(self, starts, stops, steps) -> "Tensor":
        if tuple(starts) == (0,) * self.ndim and tuple(stops) == self.shape and set(steps) <= {1}:
            return self
        return _apply("slice", (self,), starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))

    def _pad(self, pads) -> "Tensor":
        pads = tuple((int(b), int(a)) for b, a in pads)
        if all(b == 0 and a == 0 for b, a in pads):
            return self
        return _apply("pad", (self,), pads=pads)

    def __getitem__(self, index) -> "Tensor":
        return _getitem(self, index)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def split(self, split_size, dim: int = 0):
        d = _norm_axis(dim, self.ndim, "split")
        n = self.shape[d]
        sizes = (
            [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
            if isinstance(split_size, int)
            else list(split_size)
        )
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to {n} along dim {dim} of {self.shape}")
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(d, start, s))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0):
        n = self.shape[_norm_axis(dim, self.ndim, "chunk")]
        return self.split(-(-n // chunks), dim)

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        d = _norm_axis(dim, self.ndim, "narrow")
        if start < 0:
            start += self.shape[d]
        if not (0 <= start and start + length <= self.shape[d]):
            raise LIndexError(f"narrow: range {start}:{start + length} out of bounds for dim {dim} of {self.shape}")
        starts = [0] * self.ndim
        stops = list(self.shape)
        starts[d], stops[d] = start, start + length
        return self._slice(starts, stops, [1] * self.ndim)

    # -------------------------------------------------------------- indexing ops
    def _gather(self, index: "Tensor", dim: int) -> "Tensor":
        return _apply("gather", (self, index), dim=dim)

    def _scatter_add(self, index: "Tensor", src: "Tensor", dim: int) -> "Tensor":
        return _apply("scatter_add", (self, index, src), dim=dim)

    def gather(self, dim: int, index: "Tensor") -> "Tensor":
        """``out[i][j] = self[index[i][j]][j]`` for dim 0 (PyTorch semantics); index int64."""
        index = _as_tensor(index, dt.int64)
        d = _norm_axis(dim, self.ndim, "gather")
        _check_index_bounds("gather", index, self.shape, d)
        return self._gather(index, d)

    def scatter_add(self, dim: int, index: "Tensor", src: "Tensor") -> "Tensor":
        index = _as_tensor(index, dt.int64)
        d = _norm_axis(dim, self.ndim, "scatter_add")
        _check_index_bounds("scatter_add", index, self.shape, d)
        return self._scatter_add(index, _as_tensor(src, self.dtype), d)

    def index_select(self, dim: int, index) -> "Tensor":
        """Rows (along ``dim``) picked by a 1-D int64 ``index``."""
        index = _as_tensor(index, dt.int64)
        if index.ndim != 1:
            raise ShapeError(f"index_select: index must be 1-D, got shape {index.shape}")
        d = _norm_axis(dim, self.ndim, "index_select")
        _check_index_bounds("index_select", index, self.shape, d)
        shape = self.shape[:d] + (index.shape[0],) + self.shape[d + 1 :]
        view = (1,) * d + (index.shape[0],) + (1,) * (self.ndim - d - 1)
        return self._gather(index.reshape(*view).expand(*shape), d)

    # ------------------------------------------------------------------ matmul
    def matmul(self, other) -> "Tensor":
        return matmul(self, other)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(_as_tensor(other, self.dtype), self)

    # ------------------------------------------------------------- creation
    def zeros_like(self) -> "Tensor":
        return full_like(self, 0)

    def ones_like(self) -> "Tensor":
        return full_like(self, 1)

    def new_zeros(self, *size):
        return zeros(*size, dtype=self.dtype, device=self.device)

    def new_ones(self, *size):
        return ones(*size, dtype=self.dtype, device=self.device)

    def new_full(self, size, value):
        return full(size, value, dtype=self.dtype, device=self.device)

    def new_tensor(self, data, dtype=None) -> "Tensor":
        """A realized copy of ``data`` on this tensor's device, with this tensor's dtype unless
        ``dtype`` is given (PyTorch's ``Tensor.new_tensor``)."""
        return tensor(data, dtype=self.dtype if dtype is None else dtype, device=self.device)

    @classmethod
    def apply(cls, op, *inputs: "Tensor", device: str | None = None, **attrs) -> "Tensor":
        """Record primitive ``op`` (its name in the op table, or its ``OpDef``) on ``inputs``.

        The op table's VJPs build their nodes through this (``g.apply("conv2d", g, w, ...)``),
        so no module of ``lazyvic.ops`` imports the front end. Shape and dtype are inferred now
        (``ShapeError`` / ``DTypeError`` name the op); nothing is computed. The result is on its
        inputs' device; ``device`` places an op without tensor inputs (a random source).

        Raises:
            DeviceError: inputs on two devices.
        """
        return _apply(op if isinstance(op, str) else op.name, inputs, device, **attrs)


# ============================================================ module functions
_DTYPE_NAMES = frozenset(dt._BY_NAME) | {"float16", "half", "bfloat16"}  # "float16": autocast's DTypeError


def _to_args(opname: str, args: tuple, kwargs: dict) -> tuple:
    """``(device, dtype, copy)`` from the arguments of ``Tensor.to`` / ``Module.to`` (PyTorch's
    forms: a device, a dtype, both, a tensor whose device and dtype are taken, keywords)."""
    kwargs = dict(kwargs)
    dtype, device, copy = kwargs.pop("dtype", None), kwargs.pop("device", None), kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"{opname}: unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif a is None:
            continue
        elif (isinstance(a, str) and a not in _DTYPE_NAMES) or isinstance(getattr(a, "type", None), str):
            device = a  # "cuda", "cuda:0", a device object such as torch.device (others: DeviceError)
        else:
            dtype = a
    return device, dtype, copy


class _DeviceCopy:
    """The autograd record of a copy between devices: its VJP copies the gradient back."""

    name = "to_device"
    differentiable = True

    @staticmethod
    def vjp(g, inputs, out, attrs):
        return (g.to(attrs["device"]),)


def _transfer(t: Tensor, target: str) -> Tensor:
    """``t``'s value copied to device ``target`` now (computing a pending ``t`` first)."""
    node = t._node
    if node.pending:
        sync(t)
    if node.op == "scalar":
        host = np.array(node.value, dtype=node.dtype.np)
    elif node.device == "cuda":
        host = _dev.to_host(node.data, node.shape)
    else:
        host = node.data
    if target == "cuda":
        out_node = Node.buffer(_dev.to_device(host), node.dtype, "cuda", node.shape)
    else:
        out_node = Node.buffer(host, node.dtype)
    out = Tensor._from_node(out_node)
    if t.requires_grad and autograd.is_grad_enabled():
        out.requires_grad = True
        out._ctx = (_DeviceCopy, (t,), (node,), {"device": t.device}, out_node)
        if t._ctx is not None:
            if t._users is None:
                t._users = []
            t._users.append(weakref.ref(out))
    return out


def _device_arg(device, opname: str) -> str:
    return "cpu" if device is None else _dev.canonical(device, opname)


def _placed(t: Tensor, device: str) -> Tensor:
    """A realized CPU tensor made by a creation function, moved to ``device`` (a leaf)."""
    if device == "cpu":
        return t
    out = Tensor._from_node(Node.buffer(_dev.to_device(t._node.data), t.dtype, device, t.shape))
    out.requires_grad = t.requires_grad
    return out


def _check_index_bounds(opname: str, index: Tensor, shape: tuple, dim: int) -> None:
    """Raise at the op for a realized index out of range (a pending index is checked when it runs)."""
    data = index._node.data if index._node.op == "buffer" and index._node.device == "cpu" else None
    if data is None or not data.size or data.dtype.kind not in "iu":
        return
    n = shape[dim]
    bad = data[(data < 0) | (data >= n)]
    if bad.size:
        raise LIndexError(
            f"{opname}: index {int(bad.ravel()[0])} is out of range for dimension {dim} "
            f"with size {n} (input shape {shape}, index shape {index.shape})"
        )


def _to_array(data, dtype) -> tuple:
    if isinstance(data, Tensor):
        arr = data.numpy()
    elif isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            arr = np.array(data)
        except Exception as e:  # ragged lists etc.
            raise ShapeError(f"tensor: cannot build a tensor from {type(data).__name__}: {e}") from None
        if dtype is None and arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # Python floats -> default float dtype
    if arr.dtype.kind in "OUSVcM" or arr.dtype == np.float16:
        raise DTypeError(
            f"tensor: unsupported dtype {arr.dtype} (lazyvic supports bool, int32, int64, float32, float64)"
        )
    d = dt.get_dtype(dtype) if dtype is not None else dt.get_dtype(arr.dtype) if arr.dtype in dt._BY_NP else None
    if d is None:
        if arr.dtype.kind in "iu":
            d = dt.int64
        elif arr.dtype.kind == "f":
            d = dt.float32
        else:
            raise DTypeError(f"tensor: unsupported dtype {arr.dtype}")
    arr = np.array(arr, dtype=d.np, order="C", copy=True)
    return arr, d


def _as_tensor(x, dtype: dt.DType) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        if isinstance(x, np.generic):
            x = x.item()
        return Tensor._from_node(Node.scalar(x, dtype))
    return Tensor(x, dtype=dtype)


def _promote_pair(a: Tensor, b, opname: str) -> tuple:
    if isinstance(b, Tensor):
        d = dt.promote(a.dtype, b.dtype)
        return (a if a.dtype is d else a.to(d)), (b if b.dtype is d else b.to(d))
    if isinstance(b, np.generic):
        b = b.item()
    if isinstance(b, (bool, int, float)):
        d = dt.scalar_dtype_for(a.dtype, b)
        a = a if a.dtype is d else a.to(d)
        return a, Tensor._from_node(Node.scalar(b, d))
    if isinstance(b, (list, tuple, np.ndarray)):
        t = _placed(Tensor(b), a.device)  # array data joins the tensor's device
        return _promote_pair(a, t, opname)
    raise DTypeError(f"{opname}: unsupported operand of type {type(b).__name__}")


def where(condition, input, other) -> Tensor:
    """``input`` where ``condition`` is true, else ``other`` (broadcast together)."""
    cond = _as_tensor(condition, dt.bool_)
    if isinstance(input, Tensor):
        a, b = _promote_pair(input, other, "where")
    elif isinstance(other, Tensor):
        b, a = _promote_pair(other, input, "where")
    else:
        d = dt.float32 if isinstance(input, float) or isinstance(other, float) else dt.int64
        a, b = _as_tensor(input, d), _as_tensor(other, d)
    if not isinstance(condition, Tensor) and cond._node.op == "buffer":
        # Array data as the condition joins the values' device, as array operands do (_promote_pair).
        device = a._node.device or b._node.device
        if device is not None:
            cond = _placed(cond, device)
    if cond.dtype is not dt.bool_:
        cond = cond.bool()
    shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape, "where"), b.shape, "where")
    return _apply("where", (cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)))


def matmul(a, b) -> Tensor:
    """Matrix product with PyTorch's rules for 1-D operands and batch broadcasting.

    Shapes: (..., M, K) @ (..., K, N) -> (..., M, N). Raises ShapeError when K differs.
    """
    if not isinstance(a, Tensor):
        a = _as_tensor(a, b.dtype)
    b = _as_tensor(b, a.dtype)
    shape_a, shape_b = a.shape, b.shape
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dimension, got {a.shape} and {b.shape}")
    a, b = _promote_pair(a._float(), b._float(), "matmul")
    from lazyvic.amp import autocast_operands  # lazyvic.autocast: operands rounded to half (lazyvic/amp.py)

    a, b = autocast_operands(a, b)
    squeeze_a = squeeze_b = False
    if a.ndim == 1:
        a, squeeze_a = a.reshape(1, a.shape[0]), True
    if b.ndim == 1:
        b, squeeze_b = b.reshape(b.shape[0], 1), True
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(
            f"matmul: shapes {shape_a} and {shape_b} cannot be multiplied ({a.shape[-1]} != {b.shape[-2]})"
        )
    if b.ndim == 2 and a.ndim > 2:
        # (..., M, K) @ (K, N): one (prod(...) * M, K) @ (K, N) product. One BLAS call
        # instead of one per batch item, and the VJP for b is one product over all rows
        # instead of a batched product followed by a sum over the batch.
        out = _apply("matmul", (a.reshape(-1, a.shape[-1]), b)).reshape(*a.shape[:-1], b.shape[-1])
        return out.reshape(*out.shape[:-1]) if squeeze_b else out
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], "matmul")
    except ShapeError:
        raise ShapeError(
            f"matmul: batch dimensions of shapes {shape_a} and {shape_b} cannot be broadcast together"
        ) from None
    a = a._broadcast_to(batch + a.shape[-2:])
    b = b._broadcast_to(batch + b.shape[-2:])
    out = _apply("matmul", (a, b))
    if squeeze_a:
        out = out.reshape(*out.shape[:-2], out.shape[-1])
    if squeeze_b:
        out = out.reshape(*out.shape[:-1]) if not squeeze_a else out.reshape(*out.shape[:-1])
    return out


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim`` (as zero-padding plus sums, which fuse into one kernel)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("cat: expected a non-empty list of tensors")
    d = dt.promote(tensors[0].dtype, tensors[0].dtype)
    for t in tensors[1:]:
        d = dt.promote(d, t.dtype)
    ref = tensors[0]
    axis = _norm_axis(dim, ref.ndim, "cat")
    for t in tensors[1:]:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref.shape)) if i != axis):
            raise ShapeError(f"cat: shapes {[x.shape for x in tensors]} differ outside dim {dim}")
    total = sum(t.shape[axis] for t in tensors)
    out, start, pieces = None, 0, []
    for t in tensors:
        t = t.to(d)
        pieces.append(t)
        n = t.shape[axis]
        pads = tuple((start, total - start - n) if i == axis else (0, 0) for i in range(t.ndim))
        piece = t._pad(pads)
        out = piece if out is None else (out + piece if d is not dt.bool_ else out | piece)
        start += n
    return mark(out, "Concat", tuple(pieces), axis=axis)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: expected a non-empty list of tensors")
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all tensors must have the same shape, got {[t.shape for t in tensors]}")
    d = _norm_axis(dim, tensors[0].ndim + 1, "stack")
    return cat([t.unsqueeze(d) for t in tensors], d)


def _wrap_negative_index(idx: Tensor, shape: tuple, axis: int) -> Tensor:
    """Python's negative indices for an index tensor (index_select and gather take only 0..n-1)."""
    if idx.dtype.category != 1 or axis >= len(shape):
        return idx  # the index op names the problem
    n = shape[axis]
    # A pending index, or one in device memory, is wrapped lazily (the index op checks its range when it runs).
    data = idx._node.data if idx._node.op == "buffer" and idx._node.device != "cuda" else None
    if data is None:
        return where(idx < 0, idx + n, idx)
    bad = data[(data < -n) | (data >= n)]
    if bad.size:
        raise LIndexError(
            f"__getitem__: index {int(bad.ravel()[0])} is out of bounds for dimension {axis} "
            f"with size {n} (indexed shape {shape})"
        )
    return Tensor(np.where(data < 0, data + n, data), dtype=idx.dtype) if (data < 0).any() else idx


def _getitem(x: Tensor, index) -> Tensor:
    if not isinstance(index, tuple):
        index = (index,)
    # A single integer tensor / list on one axis -> index_select.
    tensor_axes = [i for i, ix in enumerate(index) if isinstance(ix, (Tensor, list, np.ndarray))]
    if tensor_axes:
        if len(tensor_axes) > 1 or any(ix is None or ix is Ellipsis for ix in index):
            raise UnsupportedOpError("__getitem__: advanced indexing supports one integer tensor on one axis")
        k = tensor_axes[0]
        idx = _as_tensor(index[k], dt.int64)
        if idx.dtype is dt.bool_:
            raise UnsupportedOpError("__getitem__: boolean masks give data-dependent shapes; use where() instead")
        rest = x[index[:k] + (slice(None),) * (x.ndim - k)] if k else x
        # Integer indices before the tensor drop their axes.
        axis = k - sum(1 for ix in index[:k] if not isinstance(ix, slice))
        idx = _wrap_negative_index(idx, rest.shape, axis)
        if not isinstance(index[k], Tensor):
            idx = _placed(idx, x.device)  # list or array indices join the indexed tensor's device
        if idx.ndim != 1:
            flat = rest.index_select(axis, idx.reshape(-1))
            return flat.reshape(*flat.shape[:axis], *idx.shape, *flat.shape[axis + 1 :])
        out = rest.index_select(axis, idx)
        tail = index[k + 1 :]
        return out[(slice(None),) * (axis + 1) + tail] if tail else out
    n_real = sum(1 for ix in index if ix is not None and ix is not Ellipsis)
    if n_real > x.ndim:
        raise LIndexError(f"__getitem__: too many indices ({n_real}) for tensor of shape {x.shape}")
    if sum(1 for ix in index if ix is Ellipsis) > 1:
        raise LIndexError("__getitem__: an index can only have a single ellipsis")
    expanded = []
    for ix in index:
        if ix is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(ix)
    expanded.extend([slice(None)] * (x.ndim - sum(1 for ix in expanded if ix is not None)))
    starts, stops, steps, out_shape = [], [], [], []
    axis = 0
    for ix in expanded:
        if ix is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(ix, slice):
            if ix.step is not None and int(ix.step) <= 0:
                raise ValueError(f"__getitem__: slice step must be positive, got {ix.step}")
            a, b, s = ix.indices(n)
            b = max(b, a)
            starts.append(a)
            stops.append(b)
            steps.append(s)
            out_shape.append(max(0, -(-(b - a) // s)))
        elif isinstance(ix, (int, np.integer)) and not isinstance(ix, bool):
            i = int(ix)
            if not -n <= i < n:
                raise LIndexError(f"__getitem__: index {i} is out of bounds for dimension {axis} with size {n}")
            i %= n
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        else:
            raise LIndexError(f"__getitem__: unsupported index {ix!r} of type {type(ix).__name__}")
        axis += 1
    out = x._slice(starts, stops, steps)
    return out.reshape(*out_shape)


# ------------------------------------------------------------------ creation
class _Generator:
    """Global (seed, offset) of the counter-based generator."""

    default_seed = 67280421310721  # PyTorch's default initial seed

    def __init__(self):
        self.seed = self.default_seed
        self.offset = 0

    def take(self, n: int) -> tuple:
        off = self.offset
        self.offset += (n + 3) // 4 * 4
        return self.seed, off


_generator = _Generator()


def manual_seed(seed: int) -> None:
    """Seed the global generator: the same seed gives the same random numbers, bit for bit."""
    _generator.seed = int(seed) & 0x7FFFFFFFFFFFFFFF
    _generator.offset = 0


def initial_seed() -> int:
    return _generator.seed


def get_rng_state() -> Tensor:
    """The global generator's state: an int64 tensor ``[seed, offset]`` (offset counts the
    32-bit Philox words drawn so far). Save it with a checkpoint to resume exactly."""
    return Tensor(np.array([_generator.seed, _generator.offset], dtype=np.int64))


def set_rng_state(state) -> None:
    """Restore a state from :func:`get_rng_state` (a tensor, array or pair of ints).

    Raises ValueError for anything but two non-negative integers."""
    arr = np.asarray(state.numpy() if isinstance(state, Tensor) else state)
    if arr.shape != (2,) or arr.dtype.kind not in "iu" or (arr < 0).any() or int(arr[0]) >= 1 << 63:
        raise ValueError(
            f"set_rng_state: expected [seed, offset] as two non-negative integers with seed < 2**63, got {arr!r}"
        )
    _generator.seed, _generator.offset = int(arr[0]), int(arr[1])


def use_deterministic_algorithms(mode: bool) -> None:
    """Deterministic mode (PyTorch's name): see ``LAZYVIC_DETERMINISTIC`` in
    :mod:`lazyvic.runtime.config` — every plan compiled at first sight, fixed reduction order."""
    config.deterministic = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return config.deterministic


def _float_dtype(dtype) -> dt.DType:
    d = dt.get_dtype(dtype) if dtype is not None else dt.default_float
    if not d.is_floating_point:
        raise DTypeError(f"expected a floating-point dtype, got {d.name}")
    return d


def _random(opname: str, shape: tuple, dtype, requires_grad: bool, device) -> Tensor:
    d = _float_dtype(dtype)
    place = _device_arg(device, opname)
    seed, offset = _generator.take(math.prod(shape) + 1)
    s = Tensor._from_node(Node.scalar(seed, dt.int64))
    o = Tensor._from_node(Node.scalar(offset, dt.int64))
    out = _apply(opname, (s, o), _device=place, shape=shape, dtype=d)
    out.requires_grad = requires_grad
    return out


def rand(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Uniform [0, 1) numbers from the seeded Philox stream (lazy; the same numbers on
    every device)."""
    return _random("rand", _shape_arg(size), dtype, requires_grad, device)


def randn(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Standard normal numbers (Box-Muller over the seeded Philox stream; lazy)."""
    return _random("randn", _shape_arg(size), dtype, requires_grad, device)


def rand_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return rand(*x.shape, dtype=dtype or x.dtype, device=device or x.device)


def randn_like(x: Tensor, dtype=None, device=None) -> Tensor:
    return randn(*x.shape, dtype=dtype or x.dtype, device=device or x.device)


def randint(low: int, high: int | None = None, size=(), dtype=None, device=None) -> Tensor:
    """Integers uniform in [low, high) (int64 by default)."""
    if high is None:
        low, high = 0, low
    u = rand(*size, dtype=dt.float64, device=device)
    return (u * (high - low)).to(dt.int64).clamp(max=high - low - 1).to(dtype or dt.int64) + low


def randperm(n: int, dtype=None, device=None) -> Tensor:
    """A random permutation of 0..n-1 from the seeded stream (computed now: its order is data)."""
    from lazyvic.ops.source import uniform_bits

    place = _device_arg(device, "randperm")
    seed, offset = _generator.take(n)
    keys = uniform_bits(n, seed, offset)
    perm = np.argsort(keys, kind="stable").astype(np.int64)
    return _placed(Tensor(perm, dtype=dtype or dt.int64), place)


def full(size, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (lazy; the value is a scalar input).

    ``device``: ``"cpu"`` (default) or ``"cuda"``; raises DeviceError for others."""
    shape = _shape_arg((size,) if isinstance(size, int) else tuple(size))
    if dtype is None:
        dtype = (
            dt.bool_ if isinstance(fill_value, bool) else dt.int64 if isinstance(fill_value, int) else dt.default_float
        )
    d = dt.get_dtype(dtype)
    place = _device_arg(device, "full")
    out = Tensor._from_node(Node.scalar(fill_value, d))
    if place == "cpu":
        out = out._broadcast_to(shape)
    else:
        out = _apply("expand", (out,), _device=place, shape=shape)
    if requires_grad:
        out.requires_grad_(True)
    return out


def zeros(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(_shape_arg(size), 0, dtype=dtype or dt.default_float, requires_grad=requires_grad, device=device)


def ones(*size, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    return full(_shape_arg(size), 1, dtype=dtype or dt.default_float, requires_grad=requires_grad, device=device)


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
    return _placed(Tensor(data, dtype=dtype, requires_grad=requires_grad), _device_arg(device, "tensor"))


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
    place = _device_arg(device, "arange")
    t = Tensor(np.arange(start, end, step, dtype=np.float64 if not is_int else np.int64).astype(d.np), dtype=d)
    t = _placed(t, place)
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
    mask = _placed(Tensor(make(np.ones((rows, cols), dtype=bool), diagonal)), _device_arg(device, "band_mask"))
    return recipe(mask, _band_mask_onnx, rows=rows, cols=cols, diagonal=diagonal, lower=lower)


def _band_mask_onnx(b, names, at) -> str:
    i = b.node("Unsqueeze", [_arange_onnx(b, [], dict(start=0, end=at["rows"], step=1, dtype="int64")), b.ints([1])])
    j = b.node("Unsqueeze", [_arange_onnx(b, [], dict(start=0, end=at["cols"], step=1, dtype="int64")), b.ints([0])])
    offset = b.node("Sub", [j, i])
    diagonal = b.const(np.asarray(at["diagonal"], dtype=np.int64))
    return b.node("LessOrEqual" if at["lower"] else "GreaterOrEqual", [offset, diagonal])


def eye(n: int, m: int | None = None, dtype=None, device=None) -> Tensor:
    return _placed(Tensor(np.eye(n, m, dtype=dt.get_dtype(dtype or dt.default_float).np)), _device_arg(device, "eye"))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    r, c = x.shape[-2:]
    return where(band_mask(r, c, diagonal, lower=True, device=x.device), x, 0 if x.dtype.category < 2 else 0.0)


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    r, c = x.shape[-2:]
    return where(band_mask(r, c, diagonal, lower=False, device=x.device), x, 0 if x.dtype.category < 2 else 0.0)


# ---------------------------------------------------------------- sync
def sync(*tensors: Tensor) -> None:
    """Sync point ("mark step"): realize ``tensors`` and every other live pending tensor in one trace."""
    from lazyvic.runtime import buffers, run
    from lazyvic.trace.cut import cut

    roots = [t._node for t in tensors if t._node.pending]
    live = _live_pending.pending()
    roots.extend(t._node for t in live)
    if not roots:
        _live_pending.clear()
        return
    # One trace per device (no pending graph spans two: copies are eager). CUDA first: a
    # constant without a device (made of Python scalars only) that a CUDA op reads is then
    # computed inside the CUDA trace, not copied there; if it is itself synced, it is
    # computed (again) on the CPU.
    if all(n.device != "cuda" for n in roots):
        groups = [("cpu", roots)]
    else:
        groups = [(d, [n for n in roots if (n.device or "cpu") == d]) for d in ("cuda", "cpu")]
    try:
        for device, group in groups:
            if not group:
                continue
            trace, inputs, scalars, out_nodes = cut(group, _trace_flags(device))
            arrays = run(trace, inputs, scalars)
            for node, array in zip(out_nodes, arrays):
                node.realize(array)
                node.device = device
                if device == "cpu":
                    buffers.track(node, array)
    except Exception:
        # The failing tensors stay pending (a sync on one of them raises again), but they are
        # no longer swept into every later sync, so one bad op does not poison the session.
        _live_pending.clear()
        raise
    _live_pending.clear()


def _trace_flags(device: str = "cpu") -> tuple:
    """The flags that enter every trace key: the device and the mode."""
    return (device, "deterministic" if config.deterministic else "default")
