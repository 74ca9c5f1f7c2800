"""Devices (``lazyvic.device``), copies between them and the arguments of ``.to()``.

A copy between ``"cpu"`` and ``"cuda"`` is eager (a pending source is synced first), counted in
``lazyvic.metrics`` (see :mod:`lazyvic.runtime.device`) and differentiable: its autograd record
copies the gradient back. Written over the tensors it is handed (this module sits below
:mod:`lazyvic.tensor` and never imports it).
"""

from __future__ import annotations

import weakref

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.errors import DeviceError
from lazyvic.runtime import device as _dev
from lazyvic.sync import sync
from lazyvic.trace.node import Node

_DTYPE_NAMES = frozenset(dt._BY_NAME) | {f"torch.{name}" for name in dt._BY_NAME}

# The device types PyTorch knows: a device object of any of them can be made (a script may build
# torch.device("mps") in an unused branch); placing a tensor on one other than cpu/cuda raises.
DEVICE_TYPES = (
    "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla",
    "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone",
)  # fmt: skip


class device:  # noqa: N801 - PyTorch's name
    """PyTorch's ``torch.device``: a device type and an optional index.

    ``device("cpu")``, ``device("cuda")``, ``device("cuda:0")``, ``device("cuda", 0)``,
    ``device(type="cuda", index=0)``, ``device(0)`` (= ``cuda:0``) or ``device(other_device)``.
    Attributes ``type`` (str) and ``index`` (int or None); ``str`` gives ``"cuda:0"``, ``repr``
    ``device(type='cuda', index=0)``. Accepted wherever a device string is: ``Tensor.to``,
    ``Module.to``, ``device=`` of the creation functions, ``map_location=``.

    lazyvic places tensors on ``"cpu"`` and on one GPU, ``"cuda"`` (= ``"cuda:0"``): another
    type or index makes a valid object, and placing a tensor there raises DeviceError.

    Two devices are equal when type and index are (``cuda`` != ``cuda:0``, as in PyTorch). While
    ``Tensor.device`` is a string (``"cpu"``/``"cuda"``), a device also equals the string of the
    same place: ``device("cpu") == "cpu"``, and ``"cuda"`` equals ``cuda`` and ``cuda:0``
    (PyTorch compares a device with a string as unequal).

    Raises:
        DeviceError: an unknown device type, a malformed string, a negative index, or an index
            given twice.
    """

    __slots__ = ("_type", "_index")

    def __init__(self, type=None, index=None):  # noqa: A002 - PyTorch's argument names
        if isinstance(type, device):
            if index is not None:
                raise DeviceError(f"device: {type!r} already has its index; got index={index!r} as well")
            self._type, self._index = type._type, type._index
            return
        if isinstance(type, int) and not isinstance(type, bool):  # an accelerator index
            type, index = "cuda", type
        if not isinstance(type, str):
            raise DeviceError(f"device: expected a device string such as 'cpu' or 'cuda:0', got {type!r}")
        kind, sep, number = type.partition(":")
        if sep:
            if index is not None:
                raise DeviceError(f"device: {type!r} has an index already; got index={index!r} as well")
            if not number.isdigit() or (len(number) > 1 and number[0] == "0"):
                raise DeviceError(f"device: invalid device string {type!r}")
            index = int(number)
        if kind not in DEVICE_TYPES:
            raise DeviceError(
                f"device: unknown device type {kind!r} in {type!r}; expected one of {', '.join(DEVICE_TYPES)}"
            )
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int):
                raise DeviceError(f"device: the index must be an int, got {index!r}")
            if index < 0:
                raise DeviceError(f"device: the index must not be negative, got {index}")
        self._type, self._index = kind, index

    @property
    def type(self) -> str:
        return self._type

    @property
    def index(self) -> int | None:
        return self._index

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        return (
            f"device(type={self._type!r})"
            if self._index is None
            else f"device(type={self._type!r}, index={self._index})"
        )

    def __eq__(self, other):
        if isinstance(other, device):
            return self._type == other._type and self._index == other._index
        if isinstance(other, str):
            try:
                other = device(other)
            except DeviceError:
                return False
            if self._type != other._type:
                return False
            one_gpu = (None, 0) if self._type == "cuda" else (None,)
            return self._index == other._index or (self._index in one_gpu and other._index in one_gpu)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))  # equal to the hash of its string ("cpu", "cuda"), which it equals

    def __reduce__(self):
        return (device, (self._type, self._index))


def parse_to_args(opname: str, args: tuple, kwargs: dict) -> tuple:
    """``(device, dtype, copy)`` from the arguments of ``Tensor.to`` / ``Module.to`` (PyTorch's
    forms: a device, a dtype, both, a tensor whose device and dtype are taken, keywords)."""
    kwargs = dict(kwargs)
    dtype, device, copy = kwargs.pop("dtype", None), kwargs.pop("device", None), kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"{opname}: unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if hasattr(a, "_node"):  # a tensor: its device and dtype
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


def copy_to(t, target: str):
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
    out = t._from_node(out_node)
    if t.requires_grad and modes.is_grad_enabled():
        out.requires_grad = True
        out._ctx = (_DeviceCopy, (t,), (node,), {"device": t.device}, out_node)
        if t._ctx is not None:
            if t._users is None:
                t._users = []
            t._users.append(weakref.ref(out))
    return out


def pin_memory(t):
    """``Tensor.pin_memory()``: ``t`` itself. PyTorch copies a CPU tensor into page-locked memory so
    that a later ``.to("cuda", non_blocking=True)`` can overlap with computation; lazyvic's host
    buffers are ordinary NumPy memory and its device copies are synchronous, so there is nothing to
    pin (``DataLoader(pin_memory=True)`` is accepted for the same reason). Raises DeviceError for a
    tensor that is not on the CPU, as PyTorch refuses to pin one."""
    if t.device != "cpu":
        raise DeviceError(
            f"pin_memory: only CPU tensors can be pinned, got a tensor of shape {t.shape} on {t.device!r}"
        )
    return t


def device_arg(device, opname: str) -> str:
    """The canonical device (``"cpu"`` or ``"cuda"``) for a creation function's ``device=``;
    None is the CPU. Raises DeviceError naming ``opname``."""
    return "cpu" if device is None else _dev.canonical(device, opname)


def placed(t, device: str):
    """A realized CPU tensor made by a creation function, moved to ``device`` (a leaf)."""
    if device == "cpu":
        return t
    out = t._from_node(Node.buffer(_dev.to_device(t._node.data), t.dtype, device, t.shape))
    out.requires_grad = t.requires_grad
    return out
