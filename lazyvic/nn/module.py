"""nn.Module and nn.Parameter, with PyTorch's registration and state_dict rules."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Iterator

import numpy as np

from lazyvic import dtypes, modes, recording
from lazyvic.errors import CheckpointError
from lazyvic.runtime.device import canonical
from lazyvic.sync import live
from lazyvic.tensor import Tensor
from lazyvic.trace import scope
from lazyvic.trace.node import parameter_nodes
from lazyvic.transfer import parse_to_args


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter (``requires_grad=True`` by default)."""

    __slots__ = ()
    _is_parameter = True

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            data = np.zeros((0,), dtype=np.float32)
        node = data._node if isinstance(data, Tensor) else Tensor(data)._node
        super().__init__(requires_grad=requires_grad, _node=node)
        parameter_nodes.add(node)
        if node.op != "buffer":
            live.add(self)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo) -> "Parameter":
        # A copy of the value (a pending one keeps its recipe) registered as a parameter, and live
        # while pending, as one made by the constructor (nn.TransformerEncoder clones its layer).
        if id(self) in memo:
            return memo[id(self)]
        new = Parameter(Tensor._wrap(copy.deepcopy(self._node, memo)), self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        return new


class RemovableHandle:
    """What ``register_forward_hook`` and ``register_forward_pre_hook`` return (PyTorch's
    ``torch.utils.hooks.RemovableHandle``): ``remove()`` drops the hook; also a context manager
    that removes it on exit."""

    _next_id = 0

    def __init__(self, module: "Module", store: str):
        RemovableHandle._next_id += 1
        self.id = RemovableHandle._next_id
        self._module, self._store = module, store

    def remove(self) -> None:
        hooks = self._module.__dict__.get(self._store)
        if hooks is not None:
            hooks.pop(self.id, None)
            if not hooks:  # (no hooks left: calls take the plain path again)
                del self._module.__dict__[self._store]

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class Module:
    """Base class of every layer and model.

    Assigning a Parameter, a Module or (with ``register_buffer``) a Tensor as an
    attribute registers it; ``named_parameters`` and ``state_dict`` list them with
    dotted names in registration order, as PyTorch does.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError("cannot assign before Module.__init__() call")
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        # PyTorch's rules. A Parameter or Module registers and replaces a plain attribute of
        # that name (else the instance attribute would shadow it); a registered name keeps
        # its kind, so a value of the wrong type raises instead of silently unregistering.
        if isinstance(value, (Parameter, Module)):
            d.pop(name, None)
            for store in (params, buffers, modules):
                store.pop(name, None)
            (params if isinstance(value, Parameter) else modules)[name] = value
        elif name in params or name in modules:
            kind = "parameter" if name in params else "child module"
            if value is not None:
                expected = "lazyvic.nn.Parameter" if name in params else "lazyvic.nn.Module"
                raise TypeError(
                    f"cannot assign {type(value).__name__} as {kind} {name!r} ({expected} or None expected)"
                )
            (params if name in params else modules)[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                return
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._buffers[name] = tensor
        if not persistent:
            self.__dict__.setdefault("_non_persistent", set()).add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._parameters[name] = param

    def add_module(self, name: str, module: "Module") -> None:
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The module at dotted path ``target`` ("" is this one); AttributeError naming the
        missing part otherwise, as PyTorch."""
        mod = self
        for part in target.split(".") if target else ():
            child = mod._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(mod).__name__} has no submodule {part!r} (looking up {target!r})")
            mod = child
        return mod

    def get_parameter(self, target: str) -> "Parameter":
        """The parameter at dotted path ``target`` (``"layer.0.weight"``); AttributeError
        otherwise."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._parameters or mod._parameters[name] is None:
            raise AttributeError(f"{type(mod).__name__} has no parameter {name!r} (looking up {target!r})")
        return mod._parameters[name]

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        # The nodes recorded inside carry this module's dotted path (lazyvic.trace.scope).
        if recording.active:  # a captured step: its modules' tensors are read at each replay
            recording.note_module(self)
        d = self.__dict__
        if "_forward_pre_hooks" in d or "_forward_hooks" in d:
            return self._call_with_hooks(args, kwargs)
        prev = scope.enter_module(self)
        try:
            return self.forward(*args, **kwargs)
        finally:
            scope.leave_module(prev)

    # ------------------------------------------------------------ hooks
    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False) -> "RemovableHandle":
        """Call ``hook(module, args)`` before each ``forward`` (``with_kwargs``:
        ``hook(module, args, kwargs)``); a result other than None replaces the arguments (a
        tuple, or one value; with kwargs an ``(args, kwargs)`` pair), as in PyTorch. Hooks run
        in registration order (``prepend``: first). Returns a handle whose ``remove()`` drops it.
        A call or step through ``lazyvic.compile`` that reaches a module with hooks runs normally
        (a replay runs no Python: its hooks would not run), counted in ``Compiled.reasons``."""
        return self._add_hook("_forward_pre_hooks", (hook, with_kwargs, False), prepend)

    def register_forward_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ) -> "RemovableHandle":
        """Call ``hook(module, args, output)`` after each ``forward`` (``with_kwargs``:
        ``hook(module, args, kwargs, output)``); a result other than None replaces the output.
        ``always_call``: also called when ``forward`` raised (the error is raised after).
        Returns a handle whose ``remove()`` drops it (see :meth:`register_forward_pre_hook`)."""
        return self._add_hook("_forward_hooks", (hook, with_kwargs, always_call), prepend)

    def _add_hook(self, store: str, entry: tuple, prepend: bool) -> "RemovableHandle":
        hooks = self.__dict__.setdefault(store, OrderedDict())
        handle = RemovableHandle(self, store)
        hooks[handle.id] = entry
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    def _call_with_hooks(self, args: tuple, kwargs: dict):
        rec = recording.current()
        if rec is not None:  # a captured call replays no Python: the hooks would not run
            hooks = [
                *self.__dict__.get("_forward_pre_hooks", {}).values(),
                *self.__dict__.get("_forward_hooks", {}).values(),
            ]
            # (A hook marked ``_lazyvic_pure`` only records ops on the module's tensors, which the
            # trace then holds: weight_norm's.)
            if not all(getattr(h[0], "_lazyvic_pure", False) for h in hooks):
                rec.refuse(f"a forward hook on {type(self).__name__} (Python that runs at every call)")
        for hook, with_kwargs, _ in list(self.__dict__.get("_forward_pre_hooks", {}).values()):
            if with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), got {result!r}"
                        )
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        post = list(self.__dict__.get("_forward_hooks", {}).values())
        prev = scope.enter_module(self)
        try:
            out = self.forward(*args, **kwargs)
        except BaseException:
            for hook, with_kwargs, always in post:
                if always:
                    hook(self, args, kwargs, None) if with_kwargs else hook(self, args, None)
            raise
        finally:
            scope.leave_module(prev)
        for hook, with_kwargs, _ in post:
            result = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            if result is not None:
                out = result
        return out

    # ------------------------------------------------------------ traversal
    def named_modules(self, prefix: str = "", memo=None) -> Iterator:
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self):
        return (m for _, m in self.named_modules())

    def children(self):
        return (m for m in self._modules.values() if m is not None)

    def named_children(self):
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator:
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for name, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mp}.{name}" if mp else name), p

    def parameters(self, recurse: bool = True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = ""):
        for mp, m in self.named_modules(prefix):
            for name, b in m._buffers.items():
                if b is not None:
                    yield (f"{mp}.{name}" if mp else name), b

    def buffers(self):
        return (b for _, b in self.named_buffers())

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------- modes
    def train(self, mode: bool = True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = p.grad.zeros_like()

    def to(self, *args, **kwargs):
        """Move and/or cast every parameter and buffer in place, as ``torch.nn.Module.to``:
        ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` or keywords.
        Parameters stay the same objects (an optimizer made before keeps working); their
        ``.grad`` moves with them. A dtype applies to floating-point tensors only. Device
        copies happen now (see ``Tensor.to``); returns ``self``.

        Raises:
            DeviceError: an unknown or unavailable device.
        """
        device, dtype, _ = parse_to_args("Module.to", args, kwargs)
        target = canonical(device, "Module.to") if device is not None else None
        with modes.no_grad():
            for t in list(self.parameters()) + [b for b in self.buffers() if b is not None]:
                value = t
                if target is not None and t.device != target:
                    value = value.to(target)
                    if t.grad is not None:
                        t.grad = t.grad.to(target)
                if dtype is not None and t.dtype.is_floating_point:
                    value = value.to(dtype)
                if value is not t:
                    t._node = value._node
                    if t._is_parameter:
                        parameter_nodes.add(t._node)
                    if t._node.op != "buffer":
                        live.add(t)
        return self

    def cuda(self, device=None):
        """Move every parameter and buffer to ``"cuda"`` (see :meth:`to`)."""
        return self.to("cuda" if device is None else device if isinstance(device, str) else f"cuda:{device}")

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def half(self):
        """Cast floating-point parameters and buffers to float16 (see :meth:`to`)."""
        return self.to(dtypes.float16)

    def bfloat16(self):
        """Cast floating-point parameters and buffers to bfloat16 (see :meth:`to`)."""
        return self.to(dtypes.bfloat16)

    def cpu(self):
        """Move every parameter and buffer to the CPU (see :meth:`to`)."""
        return self.to("cpu")

    # ----------------------------------------------------------- state_dict
    def state_dict(self, prefix: str = "") -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name (detached, same values)."""
        out = OrderedDict()
        for mp, m in self.named_modules(prefix.rstrip(".")):
            skip = m.__dict__.get("_non_persistent", set())
            for name, p in m._parameters.items():
                if p is not None:
                    out[f"{mp}.{name}" if mp else name] = p.detach()
            for name, b in m._buffers.items():
                if b is not None and name not in skip:
                    out[f"{mp}.{name}" if mp else name] = b.detach()
        return out

    def load_state_dict(self, state_dict, strict: bool = True):
        """Copy values from ``state_dict`` (tensors or NumPy arrays) into parameters and buffers.

        Everything is validated before anything is assigned. Raises CheckpointError
        listing every missing key, unexpected key (when ``strict``) and shape mismatch
        with both shapes. Values are cast to the dtype of the parameter or buffer they
        replace. Returns ``(missing_keys, unexpected_keys)``.
        """
        for prefix, m in self.named_modules():  # lazy modules (nn.LazyLinear) take the checkpoint's shapes
            materialize = getattr(m, "_materialize_from_state_dict", None)
            if materialize is not None and m.has_uninitialized_params():
                materialize(state_dict, f"{prefix}." if prefix else "")
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        problems = []
        for k, target in own.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            shape = tuple(getattr(v, "shape", ()))
            if shape != target.shape:
                problems.append(f"size mismatch for {k}: checkpoint shape {shape}, model shape {target.shape}")
        if problems or (strict and (missing or unexpected)):
            lines = []
            if strict and missing:
                lines.append("missing keys: " + ", ".join(f"{k} {own[k].shape}" for k in missing))
            if strict and unexpected:
                lines.append(
                    "unexpected keys: "
                    + ", ".join(f"{k} {tuple(getattr(state_dict[k], 'shape', ()))}" for k in unexpected)
                )
            lines.extend(problems)
            raise CheckpointError(
                f"load_state_dict for {type(self).__name__}: nothing was loaded:\n  " + "\n  ".join(lines)
            )
        targets = {}
        for mp, m in self.named_modules():
            for name in list(m._parameters) + list(m._buffers):
                targets[f"{mp}.{name}" if mp else name] = (m, name)
        with modes.no_grad():
            for k, v in state_dict.items():
                if k not in own:  # unexpected (strict=False), incl. None parameters and non-persistent buffers
                    continue
                m, name = targets[k]
                cur = m._parameters.get(name) if name in m._parameters else m._buffers.get(name)
                value = v if isinstance(v, Tensor) else Tensor(np.asarray(v))
                if value.dtype is not cur.dtype:
                    value = value.to(cur.dtype)
                if value.device != cur.device:
                    value = value.to(cur.device)  # PyTorch copies into the parameter's device
                cur._node = value._node
                if cur._is_parameter:
                    parameter_nodes.add(cur._node)
                if cur._node.op != "buffer":
                    live.add(cur)
        return missing, unexpected

    # ----------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}" + ("" if self._modules else ")")]
        if self._modules:
            for name, m in self._modules.items():
                sub = repr(m).replace("\n", "\n  ")
                lines.append(f"  ({name}): {sub}")
            lines.append(")")
        return "\n".join(lines)
