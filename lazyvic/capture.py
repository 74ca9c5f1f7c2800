"""``lazyvic.compile``: record a call once, then replay its plan without running the Python again.

Every lazyvic call records its ops and cuts a trace at the sync point; the plan cache makes
the second and later runs cheap, but the recording and the cut still cost Python time on
every call (about 2.5 ms for a ResNet-18 forward: more than PyTorch eager spends on the
whole of it at batch 1). A compiled callable records the first call for each set of guards,
keeps the trace, and on later calls feeds the new input arrays straight to the cached plan:
what ``torch.compile(mode="reduce-overhead")`` and CUDA graphs do, and tinygrad's TinyJit.

Guards (a new recording when any differs): the shape and dtype of every tensor argument, the
other arguments (hashable values), grad mode, the module's training flag, deterministic
mode, and, for a module, the identity of each parameter and buffer value (an optimizer step
or ``load_state_dict`` makes a new value, so the next call records again).

Replay is used only where it is exact; otherwise the call runs as usual:
    - grad mode with any argument or parameter requiring grad (outputs need autograd history);
    - random ops in the trace (dropout in training mode: each call needs new numbers);
    - calls with side effects (pending tensors the outputs do not need, such as batch norm's
      running statistics in training mode) or a sync point inside the call;
    - outputs that are not Tensors (a Tensor, or a tuple/list of them).
The contract, as for ``torch.jit.trace``: with the same guards the call records the same
program. Python values the call reads from elsewhere (a global, an attribute changed between
calls) are frozen at the recording; tensors a plain function closes over are captured by
value.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes
from lazyvic.nn.module import Module
from lazyvic.runtime import buffers, metrics, run
from lazyvic.runtime.config import config
from lazyvic.sync import live, sync, trace_flags
from lazyvic.tensor import Tensor
from lazyvic.trace.cut import cut
from lazyvic.trace.node import Node


class _Entry:
    """One recording: the trace and where each of its input slots comes from."""

    __slots__ = ("trace", "slots", "scalars", "watched", "out_nodes_index", "structure", "n_outputs", "device")

    def __init__(self, trace, slots, scalars, watched, structure, n_outputs, device: str = "cpu"):
        self.trace = trace
        self.device = device  # where the outputs live
        self.slots = slots  # per input slot: ("arg", index) or ("const", array)
        self.scalars = scalars
        self.watched = watched  # [(weakref to Tensor, Node)]: values the replay assumes unchanged
        self.structure = structure  # "tensor", "tuple" or "list"
        self.n_outputs = n_outputs

    def valid(self) -> bool:
        for ref, node in self.watched:
            t = ref()
            if t is None or t._node is not node:
                return False
        return True


class Compiled:
    """A module or function whose calls replay recorded plans (see the module docstring).

    Attributes:
        replays, recordings, fallbacks: counts of calls by path (also in ``lazyvic.metrics``
            as ``capture_replays`` ...).
    """

    def __init__(self, fn):
        self.fn = fn
        self._entries: dict = {}
        self.replays = self.recordings = self.fallbacks = 0
        functools.update_wrapper(self, fn, updated=())

    def __getattr__(self, name):  # a compiled module still has its attributes (state_dict, eval ...)
        return getattr(self.__dict__["fn"], name)

    def _module(self):
        return self.fn if isinstance(self.fn, Module) else None

    def __call__(self, *args):
        args = tuple(Tensor(a) if isinstance(a, np.ndarray) else a for a in args)  # arrays are tensor inputs
        tensors, key_args = [], []
        for a in args:
            if isinstance(a, Tensor):
                tensors.append(a)
                key_args.append(("T", a.shape, a.dtype.name, a.device))
            else:
                try:
                    hash(a)
                except TypeError:
                    return self._fallback(args)  # lists and other unhashable values
                key_args.append(("V", a))
        module = self._module()
        grad = modes.is_grad_enabled()
        if grad and (
            any(t.requires_grad for t in tensors)
            or (module is not None and any(p.requires_grad for p in module.parameters()))
        ):
            return self._fallback(args)
        key = (tuple(key_args), grad, module.training if module is not None else None, config.deterministic)
        entry = self._entries.get(key)
        if entry is False:
            return self._fallback(args)
        if entry is not None and entry.valid():
            return self._replay(entry, args)
        return self._record(key, args)

    # -- paths -------------------------------------------------------------------------------
    def _refuse(self, key, out):
        """Remember that calls with these guards run normally (``out`` is this call's result)."""
        self._entries[key] = False
        self.fallbacks += 1
        metrics.add("capture_fallbacks")
        return out

    def _fallback(self, args):
        self.fallbacks += 1
        metrics.add("capture_fallbacks")
        return self.fn(*args)

    def _replay(self, entry: _Entry, args):
        pending = [a for a in args if isinstance(a, Tensor) and a._node.pending]
        if pending:
            sync(*pending)
        inputs = [args[src]._node.data if kind == "arg" else src for kind, src in entry.slots]
        arrays = run(entry.trace, inputs, list(entry.scalars))
        self.replays += 1
        metrics.add("capture_replays")
        trace = entry.trace
        outs = [
            Tensor(_node=Node.buffer(a, _dtype(a), entry.device, trace.entry(o).shape))
            for a, o in zip(arrays, trace.outputs)
        ]
        return _restructure(entry, outs)

    def _record(self, key, args):
        sync()  # pending work from before the call is not part of it
        traces_before = metrics.counters["traces"]
        out = self.fn(*args)
        synced = metrics.counters["traces"] != traces_before
        items = out if isinstance(out, (tuple, list)) else (out,)
        if synced or not items or not all(isinstance(t, Tensor) for t in items):
            return self._refuse(key, out)
        roots = [t._node for t in items if t._node.pending]
        devices = {n.device or "cpu" for n in roots}
        if len(devices) > 1:
            return self._refuse(key, out)  # outputs on two devices: two traces
        device = devices.pop() if devices else "cpu"
        side_effects = {id(t) for t in live.pending()} - {id(t) for t in items}
        if (
            len(roots) != len(items)
            or len({id(n) for n in roots}) != len(roots)
            or _has_side_effects(side_effects, roots)
        ):
            return self._refuse(key, out)  # outputs that are inputs or constants, or updates beside them
        trace, arrays, scalars, out_nodes = cut(roots, _flags(device))
        if any(e.op in ("rand", "randn") for e in trace.named):
            _realize(out_nodes, run(trace, arrays, scalars), device)
            sync()
            return self._refuse(key, out)
        by_id = {}
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                by_id.setdefault(id(a._node.data), i)
        slots = [("arg", by_id[id(a)]) if id(a) in by_id else ("const", a) for a in arrays]
        module = self._module()
        watched = []
        if module is not None:
            state = [*module.parameters(), *module.buffers()]
            watched = [(weakref.ref(t), t._node) for t in state if isinstance(t, Tensor)]
        structure = "tensor" if isinstance(out, Tensor) else type(out).__name__
        entry = _Entry(trace, slots, tuple(scalars), watched, structure, len(items), device)
        arrays_out = run(trace, arrays, scalars)
        _realize(out_nodes, arrays_out, device)
        sync()  # anything else pending (nothing, unless the call left unrelated work)
        self._entries[key] = entry
        self.recordings += 1
        metrics.add("capture_recordings")
        return out


def _has_side_effects(live_ids: set, roots: list) -> bool:
    """Whether pending tensors other than the outputs exist that the outputs do not compute
    (an in-place update of a buffer, for instance): replaying would skip them."""
    if not live_ids:
        return False
    reachable, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if id(n) in reachable:
            continue
        reachable.add(id(n))
        stack.extend(i for i in n.inputs if i.pending)
    return any(id(t._node) not in reachable for t in live.pending() if id(t) in live_ids)


def _realize(nodes, arrays, device: str) -> None:
    for node, array in zip(nodes, arrays):
        node.realize(array)
        node.device = device
        if device == "cpu":
            buffers.track(node, array)


def _restructure(entry: _Entry, outs: list):
    if entry.structure == "tensor":
        return outs[0]
    return tuple(outs) if entry.structure == "tuple" else list(outs)


def _dtype(array):
    return dt.get_dtype(array.dtype)


def _flags(device: str = "cpu") -> tuple:
    return trace_flags(device)


def compile(model_or_fn):  # noqa: A001 - PyTorch's name
    """Return a callable that replays the recorded plan of ``model_or_fn`` (a module or function).

    See :mod:`lazyvic.capture` for the guards and when a call runs normally instead.
    The first call for each guard set records and runs as usual (outputs are realized);
    later calls skip Python recording and the cut. Outputs are realized Tensors without
    autograd history. ``Compiled.replays`` / ``recordings`` / ``fallbacks`` count the paths.
    """
    if not callable(model_or_fn):
        raise TypeError(f"lazyvic.compile: expected a module or a function, got {type(model_or_fn).__name__}")
    return Compiled(model_or_fn)
