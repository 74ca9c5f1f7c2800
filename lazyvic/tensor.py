"""Tensor: the user-facing lazy tensor (PyTorch names and semantics).

Every method is thin: it checks and broadcasts its arguments, then records one
primitive from the op table with :meth:`Tensor.apply`, or is a composite written in
a room of its own below this module, over the tensors it is handed. Nothing is
computed until a sync point (``numpy()``, ``item()``, ``tolist()``,
``bool()``/``int()``/``float()``/``index()``, ``__array__``, ``repr``/``str``/
``format``, the data-dependent ``nonzero``/``unique``/``masked_select``/boolean-mask
indexing, or ``lazyvic.sync``), which cuts every live pending tensor into one trace
and runs its plan (:mod:`lazyvic.sync`).

The composites' rooms (each a set of methods, as ``Tensor.sum is reductions.sum``):
:mod:`lazyvic.reductions` (sum, mean, max, prod, cumsum ...), :mod:`lazyvic.pointwise`
(rounding, trigonometry, ``//``, ``%``, isnan ...), :mod:`lazyvic.ordering` (sort, topk,
median ...), :mod:`lazyvic.products` (matmul, mm, einsum ...), :mod:`lazyvic.linalg`
(norms), :mod:`lazyvic.shaping` (squeeze, split, flip, roll, repeat, diag ...),
:mod:`lazyvic.selection` (gather, scatter, index_add ...) and :mod:`lazyvic.indexing`
(``x[...]`` read and written). The rest of the front end: :mod:`lazyvic.creation`
(``tensor``, ``zeros``, ``arange`` ...), :mod:`lazyvic.random`, :mod:`lazyvic.sync`,
:mod:`lazyvic.autograd`, :mod:`lazyvic.modes`; :mod:`lazyvic.functions` (above this
module) holds the module-level twins (``lazyvic.exp(x)`` ...). This module keeps the
class and the functions its methods need: ``where``, ``to_operand``, ``full_tensor``.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from lazyvic import (
    autograd,
    counting,
    indexing,
    linalg,
    modes,
    ordering,
    pointwise,
    products,
    products_extra,
    recording,
    reductions,
    selection,
    shaping,
    splitting,
    statistics,
    transfer,
)
from lazyvic import dtypes as dt
from lazyvic import generator as _rng  # the seeded stream of the in-place random methods
from lazyvic import ops as optable
from lazyvic import pointwise_composites as pc
from lazyvic.errors import ArgumentError, DeviceError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.products import autocast_operands, matmul  # noqa: F401 (re-exported: lazyvic.tensor.matmul)
from lazyvic.reductions import ValuesIndices  # noqa: F401 (lazyvic.tensor.ValuesIndices, as before)
from lazyvic.runtime import device as _dev
from lazyvic.runtime.config import config as _config
from lazyvic.selection import check_index_bounds  # noqa: F401 (re-exported for lazyvic.functional)
from lazyvic.shapes import broadcast_shapes, norm_axis, shape_arg
from lazyvic.size import Size
from lazyvic.sync import live, sync
from lazyvic.trace.node import Node, parameter_nodes

_weakref_ref = weakref.ref
_new_tensor = object.__new__


def _apply(opname: str, inputs: tuple, _device: str | None = None, **attrs) -> "Tensor":
    """Record one primitive: infer shape and dtype now, compute nothing.

    The result is on its inputs' device; ``_device`` places an op without tensor inputs (a
    random source). An op on Python scalars only (a broadcast constant) has no device yet
    (None): it joins the trace of the op that reads it, and is computed on the CPU if it
    is itself synced. Inputs on two devices raise DeviceError."""
    opdef = _OPS[opname]
    # One and two inputs (nearly every op) unrolled: this is the most frequent call of recording.
    n = len(inputs)
    if n == 1:
        n0 = inputs[0]._node
        nodes, shapes, in_dtypes = (n0,), (n0.shape,), (n0.dtype,)
        device = n0.device if _device is None else _device
        if n0.device is not None and n0.device != device:
            _device_mismatch(opname, nodes, _device)
    elif n == 2:
        n0, n1 = inputs[0]._node, inputs[1]._node
        nodes, shapes, in_dtypes = (n0, n1), (n0.shape, n1.shape), (n0.dtype, n1.dtype)
        device = _device
        for d in (n0.device, n1.device):
            if d is not None and d != device:
                if device is not None:
                    _device_mismatch(opname, nodes, _device)
                device = d
    else:
        nodes = tuple([t._node for t in inputs])
        shapes, in_dtypes = tuple([n.shape for n in nodes]), tuple([n.dtype for n in nodes])
        device = _device
        for nd in nodes:
            d = nd.device
            if d is not None and d != device:
                if device is not None:
                    _device_mismatch(opname, nodes, _device)
                device = d
    if opdef.kind in _WIDENED_KINDS and any(d.is_half for d in in_dtypes):
        halves = {d for d in in_dtypes if d.category == 2}
        if len(halves) == 1:
            return _widened(opname, inputs, _device, attrs, halves.pop())
    shape, dtype = opdef.infer(shapes, in_dtypes, attrs)
    if not attrs:
        at = ()
    elif len(attrs) == 1:
        at = tuple(attrs.items())
    else:
        at = tuple(sorted(attrs.items()))
    node = Node(opname, nodes, at, shape, dtype, device)
    out = _pending(node)
    # Integer and bool results carry no gradient (PyTorch: x.long() does not require grad).
    for t in inputs:
        if t.requires_grad:
            if opdef.differentiable and dtype.category == 2 and _grad_enabled():
                _record_history(out, opdef, inputs, nodes, attrs, node)
            break
    return out


def _record_history(out: "Tensor", opdef, inputs: tuple, nodes: tuple, attrs: dict, node: Node) -> None:
    """Make ``out`` (op ``opdef`` of ``inputs``, recorded as ``node``) require grad, with the
    autograd context its VJP reads; each non-leaf input remembers that ``out`` reads it."""
    out.requires_grad = True
    out._ctx = (opdef, inputs, nodes, attrs, node)
    for u in inputs:
        if u._ctx is not None:  # a non-leaf input: remember who reads it
            if u._users is None:
                u._users = []
            u._users.append(_weakref_ref(out))


_OPS = optable.OPS
_grad_enabled = modes.is_grad_enabled


def _pending(node: Node) -> "Tensor":
    """A Tensor on pending ``node``, registered as live (lazyvic.sync.track inlined: the most
    frequent call of recording; one thread-local read, the registry is per thread); past
    ``config.max_pending`` pending tensors in this thread, sync now."""
    t = _new_tensor(Tensor)
    t._node = node
    t.requires_grad = False
    t.grad = t._ctx = t._users = None
    refs = live.refs
    refs.append(_weakref_ref(t))
    if len(refs) > _config.max_pending:
        sync()
    return t


# Ops without half-type kernels (BLAS, convolution, pooling, scatter_add): on float16/bfloat16
# operands they run in float32 and round the result once, as PyTorch's CPU kernels accumulate
# in float32.
_WIDENED_KINDS = frozenset({"matmul", "conv", "pool", "scatter"})


def _widened(opname: str, inputs: tuple, device, attrs: dict, half: dt.DType) -> "Tensor":
    wide = tuple(t.to(dt.float32) if t.dtype is half else t for t in inputs)
    out = _apply(opname, wide, device, **attrs)
    return out.to(half) if out.dtype is dt.float32 else out


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


def _in_place(name: str):
    """The in-place twin ``name_`` of method ``name``: the tensor rebound to ``self.name(...)``."""

    def method(self, *args, **kwargs):
        return self._assign(getattr(self, name)(*args, **kwargs))

    method.__name__ = method.__qualname__ = f"{name}_"
    method.__doc__ = f"In place: this tensor rebound to ``self.{name}(...)`` (see ``_assign``)."
    return method


def _unary(op: str, floating: bool = True):
    """The method recording unary primitive ``op`` (integer inputs cast to the default float
    dtype first when ``floating``)."""

    def method(self):
        return _apply(op, (self._float() if floating else self,))

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"The ``{op}`` primitive, elementwise (lazyvic/ops/elementwise.py)."
    return method


def _scalar_operand(value, dtype: dt.DType) -> "Tensor":
    """A Python scalar operand: a scalar input slot that elementwise ops broadcast.

    An internal node (the user never holds it): no live tracking, no autograd.
    """
    return Tensor._wrap(Node.scalar(value, dtype))


class Tensor:
    """A lazy n-dimensional array.

    Construct with :func:`lazyvic.tensor`; ``Tensor(data, dtype=None,
    requires_grad=False)`` is the same. PyTorch's legacy sizes form ``Tensor(2, 3)`` (ints, or a
    ``Size``) makes zeros of the default float dtype of those sizes (PyTorch leaves them
    uninitialized), ``Tensor()`` an empty (0,) one. Shapes are tuples of ints; dtypes are
    ``lazyvic.float32`` (default for Python floats), ``float64``, ``float16``, ``bfloat16``,
    ``int64`` (default for Python ints), ``int32``, ``int16``, ``int8``, ``uint8``, ``uint16``,
    ``uint32``, ``uint64`` and ``bool`` (:mod:`lazyvic.dtypes`).
    """

    # _users: weak references to the tensors whose autograd context reads this one
    # (kept for non-leaf tensors only, so an in-place update can re-point them).
    __slots__ = ("_node", "requires_grad", "grad", "_ctx", "_users", "__weakref__")
    __hash__ = object.__hash__
    __array_priority__ = 1000  # NumPy defers to our reflected operators
    _is_parameter = False  # nn.Parameter: its values are counted as parameters in memory plans

    def __init__(self, data=None, *sizes, dtype=None, requires_grad: bool = False, _node: Node | None = None):
        if sizes and type(sizes[0]) is not int:  # the positional form Tensor(data, dtype[, requires_grad])
            dtype, requires_grad, sizes = sizes[0], sizes[1] if len(sizes) > 1 else requires_grad, ()
        if _node is None:
            if (type(data) is int and dtype is None) or sizes or data is None or isinstance(data, Size):
                _node = Node.buffer(*_to_array(np.zeros(_legacy_sizes(data, sizes), dt.default_float.np), None))
            else:
                _node = Node.buffer(*_to_array(data, dtype))
        self._node = _node
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._ctx = None
        self._users = None
        if requires_grad and not _node.dtype.is_floating_point:
            raise DTypeError(f"only floating-point tensors can require grad, got {_node.dtype.name}")

    @staticmethod
    def _from_node(node: Node) -> "Tensor":
        """A Tensor on ``node`` (a pending one is registered as live); always a plain Tensor."""
        if node.op != "buffer" and node.op != "scalar":
            return _pending(node)
        t = _new_tensor(Tensor)
        t._node = node
        t.requires_grad = False
        t.grad = t._ctx = t._users = None
        return t

    @staticmethod
    def _wrap(node: Node) -> "Tensor":
        """A plain Tensor handle on a node, not tracked as live (the saved values a VJP reads);
        never of a subclass (a Parameter's saved value is not a Parameter)."""
        t = Tensor.__new__(Tensor)
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
        if len(self._node.shape) == 2:  # the common case (a weight in linear), without permute's checks
            return _apply("permute", (self,), perm=(1, 0))
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> "Tensor":
        return self.transpose(-2, -1)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[norm_axis(dim, self.ndim, "size")]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return math.prod(self.shape)

    nelement = numel

    def element_size(self) -> int:
        """Bytes per element (4 for float32)."""
        return self.dtype.np.itemsize

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ----------------------------------------------------------- sync points
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """Sync point: compute and return the value as a NumPy array.

        On the CPU the array shares the tensor's memory. On CUDA it is a host copy (as
        tinygrad's ``numpy()``; PyTorch asks for ``.cpu().numpy()``), counted in
        ``lazyvic.metrics`` as device-to-host bytes. ``force`` (PyTorch's: detach and copy to
        the CPU first) is accepted: this already holds for every tensor."""
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
        if self.dtype.is_half:  # printed as PyTorch prints them: their values, at float32's precision
            a = a.astype(np.float32)
        body = np.array2string(a, separator=", ", prefix="tensor(")  # (NumPy's print options: set_printoptions)
        extra = ""
        if self.dtype not in (dt.float32, dt.int64, dt.bool_):
            extra += f", dtype={self.dtype!r}"
        if self.device == "cuda":
            extra += ", device='cuda:0'"
        if self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    __str__ = __repr__

    def __format__(self, format_spec: str) -> str:
        """A 0-d tensor formats its value (``f"{loss:.3f}"``, a sync point); others only with an
        empty format, as ``str``.

        Raises:
            TypeError: a format spec for a tensor with dimensions (as PyTorch)."""
        if self.ndim == 0:
            return self.item().__format__(format_spec)
        if format_spec:
            raise TypeError(
                f"unsupported format string {format_spec!r} passed to Tensor.__format__ (shape {self.shape})"
            )
        return str(self)

    # --------------------------------------------------------------- autograd
    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
        """Accumulate gradients into the leaves' ``.grad`` (lazy: adds nodes, computes nothing);
        PyTorch's arguments (``create_graph`` records the VJPs with history for higher-order
        gradients; ``inputs`` limits the leaves that receive ``.grad``). See
        :func:`lazyvic.autograd.backward`."""
        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

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

    # ------------------------------------------- autograd: .data, hooks, retain_grad
    @property
    def data(self) -> "Tensor":
        """The value without its history (``requires_grad=False``, a leaf), as PyTorch's
        ``Tensor.data``. It aliases this tensor: an in-place update of it (``p.data.mul_(0.5)``,
        ``p.data.copy_(w)``, ``p.data.add_(g, alpha=-lr)``) updates this tensor too, outside
        autograd, and it reads this tensor's current value."""
        return _DataView(self)

    @data.setter
    def data(self, value: "Tensor") -> None:
        """``p.data = t``: ``p`` now holds ``t``'s value (shape, dtype and device included; no
        copy, as in PyTorch), keeping its own ``requires_grad`` and history.

        Raises:
            TypeError: ``value`` is not a tensor.
            DTypeError: a non-floating value for a tensor that requires grad.
        """
        if not isinstance(value, Tensor):
            raise TypeError(f"data: expected a Tensor to assign, got {type(value).__name__}")
        if self.requires_grad and not value.dtype.is_floating_point:
            raise DTypeError(
                f"data: a tensor that requires grad must hold a floating-point value, got {value.dtype.name}"
            )
        if recording.active:
            recording.note_mutation(self)
        self._node = value._node
        if self._is_parameter:
            parameter_nodes.add(value._node)
        if value._node.op != "buffer":
            live.add(self)

    def register_hook(self, hook) -> "autograd.RemovableHandle":
        """Call ``hook(grad)`` when the backward walk computes this tensor's gradient; a returned
        tensor replaces it. Returns a handle whose ``remove()`` unregisters the hook. See
        :func:`lazyvic.autograd.engine.register_hook` (raises AutogradError when this tensor
        does not require grad)."""
        return autograd.engine.register_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook) -> "autograd.RemovableHandle":
        """Call ``hook(self)`` after a backward walk accumulated a gradient into this leaf's
        ``.grad``. See :func:`lazyvic.autograd.engine.register_post_accumulate_grad_hook`."""
        return autograd.engine.register_post_accumulate_grad_hook(self, hook)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` (a no-op on a leaf). Raises
        AutogradError when it does not require grad."""
        autograd.engine.retain_grad(self)

    @property
    def retains_grad(self) -> bool:
        """True for a non-leaf tensor on which :meth:`retain_grad` was called."""
        return autograd.engine.retains_grad(self)

    # ----------------------------------------------------------------- in place
    def _assign(self, value: "Tensor") -> "Tensor":
        """In-place update: this tensor now refers to ``value``'s node."""
        if self.requires_grad and self._ctx is None and modes.is_grad_enabled():
            raise RuntimeError("a leaf tensor that requires grad cannot be updated in place; use no_grad()")
        if value.shape != self.shape:
            value = value.expand(*self.shape)
        if value.dtype is not self.dtype:
            value = value.to(self.dtype)
        if self._node.device is not None and value._node.device not in (self._node.device, None):
            value = value.to(self.device)  # copy_ across devices, as in PyTorch
        if recording.active:  # a captured step's recording: keep the value from before
            recording.note_mutation(self._owner if type(self) is _DataView else self)
        if value.requires_grad and modes.is_grad_enabled():
            _detach_history(self)
            self._node = value._node
            self._ctx, self.requires_grad = value._ctx, True
        else:
            self._node = value._node
        if self._is_parameter:
            parameter_nodes.add(self._node)
        if self._node.op != "buffer":
            live.add(self)
        return self

    def copy_(self, src) -> "Tensor":
        # A new node: the copy must not share storage with src once computed.
        src = to_operand(src, self.dtype)
        return self._assign(src.where(True, src) if src.dtype is dt.bool_ else src + 0)

    def zero_(self) -> "Tensor":
        return self._assign(self._full_like(0))

    def fill_(self, value) -> "Tensor":
        return self._assign(self._full_like(value))

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

    def masked_fill_(self, mask, value) -> "Tensor":
        return self._assign(self.masked_fill(mask, value))

    def clip_(self, min=None, max=None) -> "Tensor":
        return self.clamp_(min, max)

    def lerp_(self, end, weight) -> "Tensor":
        return self._assign(self.lerp(end, weight))

    def triu_(self, diagonal: int = 0) -> "Tensor":
        return self._assign(self.triu(diagonal))

    def tril_(self, diagonal: int = 0) -> "Tensor":
        return self._assign(self.tril(diagonal))

    def addcmul(self, tensor1, tensor2, *, value=1) -> "Tensor":
        """``self + value * tensor1 * tensor2`` (broadcast together)."""
        return self + (tensor1 * tensor2) * value if value != 1 else self + tensor1 * tensor2

    def addcdiv(self, tensor1, tensor2, *, value=1) -> "Tensor":
        """``self + value * tensor1 / tensor2`` (broadcast together)."""
        return self + (tensor1 / tensor2) * value if value != 1 else self + tensor1 / tensor2

    def addcmul_(self, tensor1, tensor2, *, value=1) -> "Tensor":
        return self._assign(self.addcmul(tensor1, tensor2, value=value))

    def addcdiv_(self, tensor1, tensor2, *, value=1) -> "Tensor":
        return self._assign(self.addcdiv(tensor1, tensor2, value=value))

    def nansum(self, dim=None, keepdim: bool = False, *, dtype=None) -> "Tensor":
        """The sum with NaNs counted as zero."""
        x = self.where(~self.isnan(), 0) if self.dtype.is_floating_point else self
        return x.sum(dim, keepdim=keepdim, dtype=dtype)

    def nanmean(self, dim=None, keepdim: bool = False, *, dtype=None) -> "Tensor":
        """The mean of the elements that are not NaN (NaN where all are); float dtypes only."""
        if not self.dtype.is_floating_point:
            raise DTypeError(f"nanmean: expected a floating-point tensor, got {self.dtype}")
        x = self if dtype is None else self.to(dtype)
        keep = ~x.isnan()
        return x.where(keep, 0).sum(dim, keepdim=keepdim) / keep.to(x.dtype).sum(dim, keepdim=keepdim)

    def inner(self, other) -> "Tensor":
        """Sum of products over the last axis of both (``torch.inner``); a 0-d operand scales."""
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        k = self.shape[-1]
        if other.shape[-1] != k:
            raise ShapeError(f"inner: last axes differ: {self.shape} and {other.shape}")
        product = self.reshape(-1, k) @ other.reshape(-1, k).T
        return product.reshape(*self.shape[:-1], *other.shape[:-1])

    def vdot(self, other) -> "Tensor":
        """The dot product of two 1-D tensors (real: ``dot``)."""
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(f"vdot: expected 1-D tensors, got {self.shape} and {other.shape}")
        return self.dot(other)

    def rot90(self, k: int = 1, dims=(0, 1)) -> "Tensor":
        """Rotation by 90 degrees ``k`` times in the plane of ``dims``, from the first axis
        towards the second (``torch.rot90``)."""
        d0, d1 = (norm_axis(d, self.ndim, "rot90") for d in dims)
        if d0 == d1:
            raise ArgumentError(f"rot90: dims must be two different axes, got {tuple(dims)}")
        k %= 4
        if k == 1:
            return self.flip(d1).transpose(d0, d1)
        if k == 2:
            return self.flip((d0, d1))
        if k == 3:
            return self.flip(d0).transpose(d0, d1)
        return self.clone()

    def is_contiguous(self, memory_format=None) -> bool:
        """Always True: a lazy tensor has no layout of its own (its values are made C-contiguous)."""
        return True

    def stride(self, dim: int | None = None):
        """The strides, in elements, of the tensor as C-contiguous values (what ``numpy()`` gives)."""
        strides, step = [], 1
        for n in reversed(self.shape):
            strides.append(step)
            step *= max(n, 1)
        strides = tuple(reversed(strides))
        return strides if dim is None else strides[norm_axis(dim, self.ndim, "stride")]

    def ndimension(self) -> int:
        return self.ndim

    def scatter_(self, dim, index, src=None, *, value=None, reduce=None) -> "Tensor":
        return self._assign(self.scatter(dim, index, src, value=value, reduce=reduce))

    def scatter_add_(self, dim, index, src) -> "Tensor":
        return self._assign(self.scatter_add(dim, index, src))

    def index_add_(self, dim, index, source, *, alpha=1) -> "Tensor":
        return self._assign(self.index_add(dim, index, source, alpha=alpha))

    def index_fill_(self, dim, index, value) -> "Tensor":
        return self._assign(self.index_fill(dim, index, value))

    def index_copy_(self, dim, index, source) -> "Tensor":
        return self._assign(self.index_copy(dim, index, source))

    abs_, neg_, exp_, log_, sqrt_, sigmoid_, tanh_, relu_, pow_ = (
        _in_place(n) for n in ("abs", "neg", "exp", "log", "sqrt", "sigmoid", "tanh", "relu", "pow")
    )
    floor_, ceil_, round_, trunc_, sign_, sin_, cos_ = (
        _in_place(n) for n in ("floor", "ceil", "round", "trunc", "sign", "sin", "cos")
    )
    clamp_min_, clamp_max_, nan_to_num_ = (_in_place(n) for n in ("clamp_min", "clamp_max", "nan_to_num"))
    atan_, asin_, acos_, sinh_, cosh_, asinh_, acosh_, atanh_, atan2_ = (
        _in_place(n) for n in ("atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "atan2")
    )
    arctan_, arcsin_, arccos_, arctan2_ = atan_, asin_, acos_, atan2_
    arcsinh_, arccosh_, arctanh_ = asinh_, acosh_, atanh_
    hypot_, deg2rad_, rad2deg_ = (_in_place(n) for n in ("hypot", "deg2rad", "rad2deg"))

    def __setitem__(self, index, value) -> None:
        """``x[index] = value`` (and ``x[index] += v``): lazy, see :func:`lazyvic.indexing.setitem`.
        A boolean mask with a tensor value is a sync point (its count is data)."""
        indexing.setitem(self, index, value)

    def __iadd__(self, other):
        return self._assign(self + other)

    def __isub__(self, other):
        return self._assign(self - other)

    def __imul__(self, other):
        return self._assign(self * other)

    def __itruediv__(self, other):
        return self._assign(self / other)

    def __ifloordiv__(self, other):
        return self._assign(self // other)

    def __imod__(self, other):
        return self._assign(self % other)

    # ------------------------------------------------------------ elementwise
    def _binary(self, opname: str, other, reverse: bool = False) -> "Tensor":
        cls = other.__class__
        if cls is float or cls is int:
            # Fast path for the most common case, a Python number operand (a scalar input).
            node = self._node
            d = node.dtype
            if d.category != 2:
                d = dt.scalar_dtype_for(d, other)
                other = int_operand(opname, other, d)
            if d is node.dtype and opname in _SAME_DTYPE_BINARY:
                s = Node.scalar(other, d)
                n = Node(opname, (s, node) if reverse else (node, s), (), node.shape, d, node.device)
                out = _pending(n)
                if self.requires_grad and _grad_enabled():  # (d is a float dtype here)
                    st = Tensor._wrap(s)
                    _record_history(out, _OPS[opname], (st, self) if reverse else (self, st), n.inputs, {}, n)
                return out
            a = self if self.dtype is d else self.to(d)
            b = _scalar_operand(other, d)
            return _apply(opname, (b, a) if reverse else (a, b))
        if cls is Tensor and other._node.op == "scalar" and other._node.dtype is self._node.dtype:
            # A scalar input made by the caller (an optimizer's per-step value): as a number.
            return _apply(opname, (other, self) if reverse else (self, other))
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

    def __floordiv__(self, other):
        return self.floor_divide(other)

    def __rfloordiv__(self, other):
        return to_operand(other, self.dtype).floor_divide(self)

    def __mod__(self, other):
        return self.remainder(other)

    def __rmod__(self, other):
        return to_operand(other, self.dtype).remainder(self)

    __pow__ = pow = pointwise.pow  # small integer powers as products (lazyvic/pointwise.py)

    def __rpow__(self, base):
        return self._float()._binary("pow", base, True)

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
        """``~x``: logical not of a bool tensor, bitwise not of an integer one (two's complement:
        ``-1 - x``, and ``max - x`` for unsigned types; no overflow either way).

        Raises:
            DTypeError: a floating-point tensor (as PyTorch)."""
        if self.dtype is dt.bool_:
            return _apply("logical_not", (self,))
        if self.dtype.category == 1:
            return (-1 - self) if self.dtype.signed else (int(np.iinfo(self.dtype.np).max) - self)
        raise DTypeError(f"~: expected a bool or integer tensor, got {self.dtype.name}")

    def _bitwise(self, other, opname: str, primitive: str):
        """``&``, ``|``, ``^``: on bool tensors as logic (where / !=), on integer tensors bitwise
        (promoted as arithmetic; a Python int operand wraps into the dtype).

        Raises:
            UnsupportedOpError: a floating-point operand (as PyTorch)."""
        if self.dtype is dt.bool_ and (
            isinstance(other, (bool, np.bool_)) or getattr(other, "dtype", None) is dt.bool_
        ):
            other = to_operand(other, dt.bool_)
            if primitive == "bitwise_and":
                return self.where(other, False)
            if primitive == "bitwise_or":
                return where(self, True, other)
            return self != other
        for t in (self, other):
            d = getattr(t, "dtype", None)
            if (d is not None and d.category == 2) or isinstance(t, float):
                name = d.name if d is not None else "float"
                raise UnsupportedOpError(
                    f"{opname}: bitwise operations on {name} operands are not supported (bool and integer tensors only)"
                )
        a, b = self if self.dtype is not dt.bool_ else self.to(dt.int64), other
        if getattr(b, "dtype", None) is dt.bool_:
            b = b.to(a.dtype)
        return a._binary(primitive, b)

    def __and__(self, other):
        return self._bitwise(other, "&", "bitwise_and")

    def __or__(self, other):
        return self._bitwise(other, "|", "bitwise_or")

    def __xor__(self, other):
        return self._bitwise(other, "^", "bitwise_xor")

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
    mul = multiply = __mul__
    neg = negative = __neg__

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    subtract = sub

    div = divide = true_divide = pointwise.divide

    def _float(self) -> "Tensor":
        return self if self.dtype.is_floating_point else self.to(dt.default_float)

    exp, log, sqrt, tanh, sigmoid, erf = (_unary(op) for op in ("exp", "log", "sqrt", "tanh", "sigmoid", "erf"))
    relu, abs = _unary("relu", floating=False), _unary("abs", floating=False)
    absolute = abs

    def rsqrt(self):
        return 1.0 / self.sqrt()

    def reciprocal(self):
        return 1.0 / self._float()

    def square(self):
        return self * self

    def maximum(self, other):
        return self._binary("maximum", other)

    def minimum(self, other):
        return self._binary("minimum", other)

    # Compositions and the newer primitives, written over this class in lazyvic/pointwise.py.
    sign = sgn = pointwise.sign
    floor, ceil, trunc, fix, frac = pointwise.floor, pointwise.ceil, pointwise.trunc, pointwise.fix, pointwise.frac
    round, sin, cos, tan = pointwise.round, pointwise.sin, pointwise.cos, pointwise.tan
    log1p, expm1, log2, log10, exp2 = pointwise.log1p, pointwise.expm1, pointwise.log2, pointwise.log10, pointwise.exp2
    clamp = clip = pointwise.clamp
    clamp_min, clamp_max = pointwise.clamp_min, pointwise.clamp_max
    floor_divide, remainder, fmod = pointwise.floor_divide, pointwise.remainder, pointwise.fmod
    isnan, isinf, isposinf, isneginf = pointwise.isnan, pointwise.isinf, pointwise.isposinf, pointwise.isneginf
    isfinite, nan_to_num, isclose = pointwise.isfinite, pointwise.nan_to_num, pointwise.isclose
    logical_not, logical_and = pointwise.logical_not, pointwise.logical_and
    logical_or, logical_xor = pointwise.logical_or, pointwise.logical_xor
    lerp, hypot, heaviside = pointwise.lerp, pointwise.hypot, pointwise.heaviside
    atan = arctan = pointwise.atan
    asin = arcsin = pointwise.asin
    acos = arccos = pointwise.acos
    sinh, cosh = pointwise.sinh, pointwise.cosh
    asinh = arcsinh = pointwise.asinh
    acosh = arccosh = pointwise.acosh
    atanh = arctanh = pointwise.atanh
    atan2 = arctan2 = pointwise.atan2
    logaddexp, logaddexp2 = pointwise.logaddexp, pointwise.logaddexp2
    deg2rad, rad2deg = pointwise.deg2rad, pointwise.rad2deg

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
        device, dtype, copy = transfer.parse_to_args("to", args, kwargs)
        out = self
        if device is not None:
            target = _dev.canonical(device, "to")
            if target != self.device:
                out = transfer.copy_to(self, target)
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

    def pin_memory(self, device=None) -> "Tensor":
        return transfer.pin_memory(self)  # self: nothing to pin (see there)

    def type(self, dtype=None, non_blocking: bool = False):
        """``type()``: PyTorch's legacy name of this tensor's type (``"torch.FloatTensor"``);
        ``type(dtype)``: this tensor cast to a dtype, a legacy type (``lazyvic.LongTensor``) or
        its name (``"torch.LongTensor"``)."""
        if dtype is None:
            return f"torch.{dt.LEGACY_TENSOR_TYPES.get(self.dtype, self.dtype.name)}"
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            names = {v: k for k, v in dt.LEGACY_TENSOR_TYPES.items()}
            if dtype.rpartition(".")[2] not in names:
                raise DTypeError(f"type: unknown tensor type {dtype!r}")
            dtype = names[dtype.rpartition(".")[2]]
        return self.to(getattr(dtype, "legacy_dtype", dtype))

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

    def type_as(self, other) -> "Tensor":
        """This tensor cast to ``other``'s dtype."""
        return self.to(other.dtype)

    def half(self):
        """This tensor cast to float16 (IEEE 754 binary16; rounded to nearest, ties to even)."""
        return self.to(dt.float16)

    def bfloat16(self):
        """This tensor cast to bfloat16 (rounded to nearest, ties to even)."""
        return self.to(dt.bfloat16)

    def byte(self):
        """This tensor cast to uint8 (floats truncate toward zero; integers wrap modulo 256)."""
        return self.to(dt.uint8)

    def char(self):
        """This tensor cast to int8 (PyTorch's name)."""
        return self.to(dt.int8)

    def short(self):
        """This tensor cast to int16."""
        return self.to(dt.int16)

    # -------------------------------------------------------------- reductions
    def _reduce(self, opname: str, axes: tuple) -> "Tensor":
        """Primitive reduction over ``axes`` keeping them as size 1."""
        return _apply(opname, (self,), axes=tuple(axes))

    # lazyvic/reductions.py and lazyvic/ordering.py (written over this class).
    sum, mean, var, std, prod = reductions.sum, reductions.mean, reductions.var, reductions.std, reductions.prod
    amax, amin, max, min = reductions.amax, reductions.amin, reductions.max, reductions.min
    argmax, argmin, logsumexp = reductions.argmax, reductions.argmin, reductions.logsumexp
    softmax, log_softmax = reductions.softmax, reductions.log_softmax
    cumsum, cumprod, all, any, count_nonzero = (
        reductions.cumsum,
        reductions.cumprod,
        reductions.all,
        reductions.any,
        reductions.count_nonzero,
    )
    argsort, sort, msort, topk = ordering.argsort, ordering.sort, ordering.msort, ordering.topk
    kthvalue, median = ordering.kthvalue, ordering.median

    # ---------------------------------------------------------------- movement
    def reshape(self, *shape) -> "Tensor":
        """Same elements in row-major order with a new shape; one entry may be -1."""
        shape = shape_arg(shape)
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
        perm = tuple(norm_axis(d, self.ndim, "permute") for d in dims)
        if len(perm) != self.ndim:
            raise ShapeError(f"permute: got {len(perm)} dims for a tensor of shape {self.shape}")
        if perm == tuple(range(self.ndim)):
            return self
        return _apply("permute", (self,), perm=perm)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        if (
            len(self._node.shape) == 2
            and dim0.__class__ is int
            and dim1.__class__ is int
            and -2 <= dim0 < 2
            and -2 <= dim1 < 2
        ):
            # A matrix (the VJP of every product): a swap, or nothing
            return self if dim0 % 2 == dim1 % 2 else _apply("permute", (self,), perm=(1, 0))
        a, b = norm_axis(dim0, self.ndim, "transpose"), norm_axis(dim1, self.ndim, "transpose")
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

    def t(self) -> "Tensor":
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor with <= 2 dimensions, got shape {self.shape}")
        return self.T

    def expand(self, *sizes) -> "Tensor":
        """Repeat size-1 dims without copying; -1 keeps a size; new leading dims allowed."""
        sizes = shape_arg(sizes)
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

    # lazyvic/shaping.py (written over this class).
    squeeze, unsqueeze, flatten, unflatten = shaping.squeeze, shaping.unsqueeze, shaping.flatten, shaping.unflatten
    split, chunk, narrow, select, unbind = shaping.split, shaping.chunk, shaping.narrow, shaping.select, shaping.unbind
    movedim = moveaxis = shaping.movedim
    swapaxes = swapdims = shaping.swapaxes
    flip, fliplr, flipud, roll = shaping.flip, shaping.fliplr, shaping.flipud, shaping.roll
    repeat, tile = shaping.repeat, shaping.tile
    diag, diagonal, trace, tril, triu = shaping.diag, shaping.diagonal, shaping.trace, shaping.tril, shaping.triu
    diff, tensor_split, unfold = shaping.diff, shaping.tensor_split, shaping.unfold

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
        return indexing.getitem(self, index)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    # -------------------------------------------------------------- indexing ops
    def _gather(self, index: "Tensor", dim: int) -> "Tensor":
        return _apply("gather", (self, index), dim=dim)

    def _scatter_add(self, index: "Tensor", src: "Tensor", dim: int) -> "Tensor":
        return _apply("scatter_add", (self, index, src), dim=dim)

    # lazyvic/selection.py (written over this class).
    gather, scatter_add, index_select = selection.gather, selection.scatter_add, selection.index_select
    scatter, index_add, index_copy, index_fill = (
        selection.scatter,
        selection.index_add,
        selection.index_copy,
        selection.index_fill,
    )
    take, take_along_dim = selection.take, selection.take_along_dim

    # Sync points (their output size is data), defined here so that lazyvic.explain names them.
    def nonzero(self, *, as_tuple: bool = False):
        """Indices of the non-zero elements: (count, ndim) int64, or one tensor per axis. A sync point."""
        return indexing.nonzero(self, as_tuple=as_tuple)

    argwhere = nonzero

    def masked_select(self, mask) -> "Tensor":
        """The elements where ``mask`` is true, 1-D. A sync point (see lazyvic/selection.py)."""
        return selection.masked_select(self, mask)

    def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim=None):
        """Distinct values (and inverse indices, counts). A sync point (see lazyvic/selection.py)."""
        return selection.unique(self, sorted, return_inverse, return_counts, dim)

    def repeat_interleave(self, repeats, dim=None, *, output_size=None) -> "Tensor":
        """Each element repeated along ``dim``; counts in a pending tensor make it a sync point."""
        return shaping.repeat_interleave(self, repeats, dim, output_size=output_size)

    # ------------------------------------------------------------------ matmul
    def matmul(self, other) -> "Tensor":
        return matmul(self, other)

    # lazyvic/products.py and lazyvic/linalg.py (written over this class).
    mm, bmm, mv, dot, outer, ger = products.mm, products.bmm, products.mv, products.dot, products.outer, products.outer
    addmm, addmv, baddbmm = products.addmm, products.addmv, products.baddbmm
    norm = linalg.tensor_norm
    kron, cross = products.kron, linalg.tensor_cross
    inverse, det, logdet, slogdet, matrix_power = (
        linalg.inv,
        linalg.det,
        linalg.logdet,
        linalg.slogdet,
        linalg.matrix_power,
    )
    cholesky, cholesky_solve, cholesky_inverse = (
        linalg.tensor_cholesky,
        linalg.tensor_cholesky_solve,
        linalg.cholesky_inverse,
    )
    pinverse, svd, qr = linalg.tensor_pinverse, linalg.tensor_svd, linalg.tensor_qr

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(to_operand(other, self.dtype), self)

    # ------------------------------------------------------------- creation
    def _full_like(self, value) -> "Tensor":
        return full_tensor(self.shape, value, self.dtype, transfer.device_arg(self.device, "full"))

    def zeros_like(self) -> "Tensor":
        return self._full_like(0)

    def ones_like(self) -> "Tensor":
        return self._full_like(1)

    def new_zeros(self, *size):
        return full_tensor(shape_arg(size), 0, self.dtype, transfer.device_arg(self.device, "full"))

    def new_ones(self, *size):
        return full_tensor(shape_arg(size), 1, self.dtype, transfer.device_arg(self.device, "full"))

    def new_empty(self, *size):
        """A new tensor of ``size`` with this dtype and device (zeros: lazyvic has no uninitialized memory)."""
        return self.new_zeros(*size)

    def new_full(self, size, value):
        shape = shape_arg((size,) if isinstance(size, int) else tuple(size))
        return full_tensor(shape, value, self.dtype, transfer.device_arg(self.device, "full"))

    def new_tensor(self, data, dtype=None, device=None) -> "Tensor":
        """A realized copy of ``data``, with this tensor's dtype and device unless ``dtype`` or
        ``device`` is given (PyTorch's ``Tensor.new_tensor``)."""
        t = Tensor(data, dtype=self.dtype if dtype is None else dtype)
        return transfer.placed(t, transfer.device_arg(self.device if device is None else device, "new_tensor"))

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

    # ================================================== random, in place (lazyvic.generator)
    # PyTorch's in-place samplers, plus bernoulli and multinomial, drawn from lazyvic's seeded
    # Philox stream (``generator=`` a lazyvic.Generator, else the global one). The elementwise ones
    # are lazy rand/randn nodes that fuse; like every in-place method they rebind the tensor, so a
    # leaf that requires grad is filled under no_grad(). Formulas and errors: lazyvic.generator.
    def uniform_(self, from_: float = 0.0, to: float = 1.0, *, generator=None) -> "Tensor":
        """Fill with numbers uniform in ``[from_, to)`` (float tensors)."""
        return _rng.uniform_(self, from_, to, generator)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None) -> "Tensor":
        """Fill with normal numbers of mean ``mean`` and standard deviation ``std`` (float tensors)."""
        return _rng.normal_(self, mean, std, generator)

    def bernoulli_(self, p=0.5, *, generator=None) -> "Tensor":
        """Fill with 1 with probability ``p`` (a number or a float tensor), else 0 (any dtype)."""
        return self._assign(_rng.bernoulli(self, p, generator, "bernoulli_"))

    def bernoulli(self, p=None, *, generator=None) -> "Tensor":
        """0/1 draws of this shape and dtype: 1 with probability ``self`` (or ``p`` when given)."""
        return _rng.bernoulli(self, p, generator)

    def random_(self, *bounds, to=None, generator=None) -> "Tensor":
        """Fill with integers: ``random_()``, ``random_(to)`` ([0, to)), ``random_(from_, to)``."""
        return _rng.random_(self, bounds, to, generator)

    def exponential_(self, lambd: float = 1.0, *, generator=None) -> "Tensor":
        """Fill with exponential numbers of rate ``lambd`` (float tensors)."""
        return _rng.exponential_(self, lambd, generator)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None) -> "Tensor":
        """int64 category indices drawn from the rows of this (C,) or (R, C) tensor of weights (a sync point)."""
        return _rng.multinomial_(self, num_samples, replacement, generator)

    # ============================================== statistics, counting, splits (their own rooms)
    # lazyvic/statistics.py, counting.py, splitting.py, products_extra.py, pointwise_composites.py.
    logit, xlogy, sinc, copysign = pc.logit, pc.xlogy, pc.sinc, pc.copysign
    signbit = pc.signbit
    logit_, xlogy_, sinc_, copysign_ = (_in_place(n) for n in ("logit", "xlogy", "sinc", "copysign"))
    aminmax, cov, corrcoef = statistics.aminmax, statistics.cov, statistics.corrcoef
    quantile, nanquantile, nanmedian, mode = (
        statistics.quantile,
        statistics.nanquantile,
        statistics.nanmedian,
        statistics.mode,
    )
    dist, renorm = statistics.dist, statistics.renorm
    renorm_ = _in_place("renorm")
    cummax, cummin, logcumsumexp = statistics.cummax, statistics.cummin, statistics.logcumsumexp
    histc, histogram = counting.histc, counting.histogram
    hsplit, vsplit, dsplit, narrow_copy = splitting.hsplit, splitting.vsplit, splitting.dsplit, splitting.narrow_copy
    addbmm, addr = products_extra.addbmm, products_extra.addr
    addbmm_, addr_ = _in_place("addbmm"), _in_place("addr")

    def bincount(self, weights=None, minlength: int = 0) -> "Tensor":
        """Occurrences of each value 0, 1, ... (weighted). A sync point: its length is the
        maximum's (see lazyvic/counting.py)."""
        return counting.bincount(self, weights, minlength)

    def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False, dim=None):
        """Each run of equal consecutive elements once (and inverse indices, run lengths). A sync
        point (see lazyvic/counting.py)."""
        return counting.unique_consecutive(self, return_inverse, return_counts, dim)

    # lazyvic has no sparse layout (lazyvic/sparse.py): a "sparse" tensor is the dense one.
    is_sparse = False

    def to_dense(self, dtype=None, *, masked_grad=None) -> "Tensor":
        """This tensor (every lazyvic tensor is dense); ``dtype`` casts."""
        return self if dtype is None else self.to(dtype)

    def to_sparse(self, *args, **kwargs) -> "Tensor":
        """This tensor: lazyvic has no sparse layout, so the "sparse" tensor is the dense one
        (``is_sparse`` stays False; see lazyvic/sparse.py)."""
        return self

    def coalesce(self) -> "Tensor":
        """This tensor (dense: nothing to coalesce)."""
        return self

    def is_coalesced(self) -> bool:
        return True


# ============================================================ module functions
def _to_array(data, dtype) -> tuple:
    want = dt.get_dtype(dtype) if dtype is not None else None
    if isinstance(data, Tensor):
        arr = data.numpy()
    elif isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            arr = np.array(data)
        except OverflowError as e:  # a Python int beyond 64 bits next to others
            raise DTypeError(f"tensor: {e}: a value does not fit {(want or dt.int64).name}") from None
        except Exception as e:  # ragged lists etc.
            raise ShapeError(f"tensor: cannot build a tensor from {type(data).__name__}: {e}") from None
        if want is dt.uint64 and arr.dtype.kind in "fO" and arr.size and all(type(v) is int for v in _flat(data)):
            arr = np.array(_flat(data), dtype=object).reshape(arr.shape)  # exact, not through float64
        if arr.dtype == object and arr.size and all(type(v) is int for v in arr.flat):
            if want is dt.uint64 and all(0 <= v < 2**64 for v in arr.flat):
                arr = np.array(arr.tolist(), dtype=np.uint64)
            else:
                d = want or dt.int64
                info = np.iinfo(d.np) if d.category == 1 else None
                big = next(v for v in arr.flat if info is None or not info.min <= v <= info.max)
                raise DTypeError(f"tensor: value {big} does not fit {d.name}")
        if want is None and arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # Python floats -> default float dtype
        elif want is None and arr.dtype.kind in "iu":
            want = dt.int64  # Python ints -> int64, as in PyTorch
    if arr.dtype not in dt._BY_NP and (arr.dtype.kind in "OUSVcM" or want is None):
        raise DTypeError(
            f"tensor: unsupported dtype {arr.dtype} (lazyvic supports " + ", ".join(d.name for d in dt.ALL) + ")"
        )
    d = want or dt.get_dtype(arr.dtype)
    if d.category == 1 and arr.size and arr.dtype.kind in "uif" and arr.dtype != d.np:
        _check_array_range(arr, d)
    with np.errstate(over="ignore"):  # 1e5 as float16 is inf, as in PyTorch
        if d.is_half and arr.dtype != d.np and arr.dtype.kind != "b":
            arr = np.asarray(arr, dtype=np.float32)  # through float32, as the cast op rounds
        arr = np.array(arr, dtype=d.np, order="C", copy=True)
    return arr, d


def _legacy_sizes(data, sizes: tuple) -> tuple:
    """The sizes of PyTorch's legacy ``Tensor(*sizes)`` / ``Tensor(Size)`` / ``Tensor()``."""
    shape = () if data is None else tuple(data) if isinstance(data, Size) else (data, *sizes)
    if data is None and not sizes:
        shape = (0,)
    if not all(type(n) is int and n >= 0 for n in shape):
        raise ArgumentError(f"Tensor(*sizes): expected non-negative int sizes, got {shape}")
    return shape


def _flat(data) -> list:
    """The leaves of nested lists/tuples, in order."""
    if isinstance(data, (list, tuple)):
        return [v for item in data for v in _flat(item)]
    return [data]


def _check_array_range(arr: np.ndarray, d: dt.DType) -> None:
    """Raise DTypeError for a value of ``arr`` that integer dtype ``d`` cannot hold (NumPy's
    cast would wrap it: uint64 ``2**64 - 1`` to -1, ``inf`` to an arbitrary integer)."""
    info = np.iinfo(d.np)
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr < info.min) | (arr >= -float(info.min))
    elif arr.dtype.kind == "u":
        bad = arr > info.max
    else:
        bad = (arr < info.min) | (arr > info.max)
    if bad.any():
        value = arr[bad].ravel()[0]
        raise DTypeError(f"tensor: value {value.item()!r} ({arr.dtype}) does not fit {d.name} [{info.min}, {info.max}]")


def check_int_range(opname: str, value, d: dt.DType) -> None:
    """Raise DTypeError when Python int ``value`` does not fit integer dtype ``d`` (a float or
    bool dtype takes any number)."""
    if d.category == 1 and isinstance(value, int) and not isinstance(value, bool):
        info = np.iinfo(d.np)
        if not info.min <= value <= info.max:
            raise DTypeError(f"{opname}: value {value} does not fit {d.name} [{info.min}, {info.max}]")


def int_operand(opname: str, value, d: dt.DType):
    """A Python number operand of an op on a ``d`` tensor: an int wraps modulo 2**bits into an
    integer ``d`` (PyTorch: ``int8_tensor + 1000`` adds -24); only an int beyond 64 bits raises
    DTypeError, as in PyTorch."""
    if d.category == 1 and isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**64:
            raise DTypeError(f"{opname}: value {value} does not fit a 64-bit integer")
        return dt.wrap_int(value, d)
    return value


def to_operand(x, dtype: dt.DType) -> Tensor:
    """``x`` as an operand: a Tensor as it is, a Python or NumPy scalar as a scalar input of
    ``dtype`` (not a realized buffer, so its value never enters a plan key), other data (lists,
    arrays) as a new CPU tensor of ``dtype``."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        if isinstance(x, np.generic):
            x = x.item()
        check_int_range("operand", x, dtype)
        return Tensor._from_node(Node.scalar(x, dtype))
    return Tensor(x, dtype=dtype)


def result_dtype(a: Tensor, b: Tensor) -> dt.DType:
    """PyTorch's ``torch.result_type`` of two tensors: a 0-d tensor next to a dimensioned one
    counts only when its category (bool < integer < floating) is higher (``int8_tensor +
    tensor(5)`` stays int8, ``int32_tensor + tensor(2.5, dtype=float64)`` is float64); otherwise
    :func:`lazyvic.dtypes.promote`.

    Raises:
        DTypeError: dtypes PyTorch does not promote (uint16/32/64 with other integers or bool).
    """
    if (a.ndim == 0) != (b.ndim == 0):
        dim, zero = (b, a) if a.ndim == 0 else (a, b)
        if zero.dtype.category <= dim.dtype.category:
            return dim.dtype
    return dt.promote(a.dtype, b.dtype)


def _promote_pair(a: Tensor, b, opname: str, checked: bool = False) -> tuple:
    """``a`` and operand ``b`` in their promoted dtype; a Python int ``b`` wraps into an integer
    dtype (arithmetic, as PyTorch), or with ``checked`` raises DTypeError when it does not fit
    (``where``/``masked_fill``, as PyTorch)."""
    if isinstance(b, Tensor):
        if a._node.dtype is b._node.dtype:  # nothing to promote (the common case)
            return a, b
        d = result_dtype(a, b)
        return (a if a.dtype is d else a.to(d)), (b if b.dtype is d else b.to(d))
    if isinstance(b, np.generic):
        b = b.item()
    if isinstance(b, (bool, int, float)):
        d = dt.scalar_dtype_for(a.dtype, b)
        if checked:
            check_int_range(opname, b, d)
        else:
            b = int_operand(opname, b, d)
        a = a if a.dtype is d else a.to(d)
        return a, Tensor._from_node(Node.scalar(b, d))
    if isinstance(b, (list, tuple, np.ndarray)):
        t = transfer.placed(Tensor(b), a.device)  # array data joins the tensor's device
        return _promote_pair(a, t, opname)
    raise DTypeError(f"{opname}: unsupported operand of type {type(b).__name__}")


def where(condition, input, other) -> Tensor:
    """``input`` where ``condition`` is true, else ``other`` (broadcast together)."""
    cond = to_operand(condition, dt.bool_)
    if isinstance(input, Tensor):
        a, b = _promote_pair(input, other, "where", checked=True)
    elif isinstance(other, Tensor):
        b, a = _promote_pair(other, input, "where", checked=True)
    else:
        d = dt.float32 if isinstance(input, float) or isinstance(other, float) else dt.int64
        a, b = to_operand(input, d), to_operand(other, d)
    if not isinstance(condition, Tensor) and cond._node.op == "buffer":
        # Array data as the condition joins the values' device, as array operands do (_promote_pair).
        device = a._node.device or b._node.device
        if device is not None:
            cond = transfer.placed(cond, device)
    if cond.dtype is not dt.bool_:
        cond = cond.bool()
    shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape, "where"), b.shape, "where")
    return _apply("where", (cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)))


def full_tensor(shape: tuple, fill_value, dtype: dt.DType, device: str) -> Tensor:
    """A lazy tensor of ``shape`` filled with ``fill_value`` (a scalar input, so another value
    reuses the plan) on ``device`` (already canonical); ``lazyvic.full`` and the ``*_like`` /
    ``new_*`` methods build on it.

    Raises:
        DTypeError: an int ``fill_value`` that integer ``dtype`` cannot hold (as PyTorch's
            ``fill_``: no silent wrap).
    """
    check_int_range("full", fill_value, dtype)
    out = Tensor._from_node(Node.scalar(fill_value, dtype))
    if device == "cpu":
        return out._broadcast_to(shape)
    return _apply("expand", (out,), _device=device, shape=shape)


# ================================================= Tensor.data (the autograd section's alias)
class _DataView(Tensor):
    """What ``t.data`` returns: a tensor without history that reads and writes ``t``'s value.

    Lazy tensors rebind their node on an in-place update instead of writing into storage, so
    the alias holds no node of its own: it reads its owner's, and an in-place update of the alias
    rebinds the owner (PyTorch's ``.data`` shares the owner's storage)."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Tensor):
        self._owner = owner
        self.requires_grad = False
        self.grad = None
        self._ctx = None
        self._users = None

    @property
    def _node(self) -> Node:
        return self._owner._node

    @_node.setter
    def _node(self, node: Node) -> None:
        owner = self._owner
        owner._node = node
        if owner._is_parameter:
            parameter_nodes.add(node)
        if node.op != "buffer":
            live.add(owner)

    def _assign(self, value: Tensor) -> Tensor:
        with modes.no_grad():  # .data is outside autograd: its updates record no history
            return Tensor._assign(self, value)
