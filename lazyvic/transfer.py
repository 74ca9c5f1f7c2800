"""Copies between devices and the arguments of ``.to()``.

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
from lazyvic.runtime import device as _dev
from lazyvic.sync import sync
from lazyvic.trace.node import Node

_DTYPE_NAMES = frozenset(dt._BY_NAME) | {"float16", "half", "bfloat16"}  # "float16": autocast's DTypeError


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
