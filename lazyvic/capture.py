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

Symbolic sizes (automatic dynamic shapes, as torch.compile's after a recompile): when a call
with other input sizes records again and the plan cache serves that recording with a plan of
symbolic sizes whose every symbol is a dim of an argument (``lazyvic.runtime.families``), and
the recording's Python scalars are those of the previous recording (no value of the call
followed the sizes, as ``1 / n`` in a mean would), later calls of other sizes replay that plan
with their sizes bound, checked by its guards, without recording. The contract then extends to
sizes: the call records the same program for every size its plan admits (a Python branch on a
size, ``if T > 32``, breaks it: compile such a function per size class, or not at all).
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
from lazyvic.runtime.executor import execute
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.sync import live, sync, trace_flags, traces_run
from lazyvic.tensor import Tensor
from lazyvic.trace import family
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


class _SymbolicReplay:
    """How a call with other input sizes replays a plan of symbolic sizes: where each size symbol
    is read (argument, axis) and which other argument dims the plan takes as given."""

    __slots__ = ("plan", "reads", "checks")

    def __init__(self, plan, reads: list, checks: list):
        self.plan, self.reads, self.checks = plan, reads, checks

    def sizes(self, args) -> tuple | None:
        """The values of the plan's symbols for ``args``, or None when they do not fit."""
        sizes = [args[a].shape[axis] for a, axis, _ in self.reads]
        if any(v < lower for v, (_, _, lower) in zip(sizes, self.reads)):
            return None
        for a, axis, expected in self.checks:
            want = expected if isinstance(expected, int) else expected(sizes)
            if args[a].shape[axis] != want:
                return None
        sizes = tuple(sizes)
        return sizes if self.plan.admits(sizes) else None


def _symbolic_replay(trace, slots, entry) -> _SymbolicReplay | None:
    """The symbolic replay of a recording whose trace a plan of symbolic sizes served, when every
    symbol of the plan is a dim of an argument (not of a captured constant, nor an attribute)."""
    template = entry.template
    by_site = {  # input site -> (argument, axis), for the arguments' dims
        site: (slots[slot][1], axis)
        for site, (slot, axis) in family.input_sites(trace.key[0]).items()
        if slots[slot][0] == "arg"
    }
    reads = []
    for sym_site, lower in template.symbols:
        if sym_site not in by_site:
            return None  # a symbol read from an attribute or a constant: the call must record again
        reads.append((*by_site[sym_site], lower))
    checks = [(*by_site[s], template.exprs[s]) for s in by_site if template.exprs[s] is not None]
    return _SymbolicReplay(entry.plan, reads, checks)


class Compiled:
    """A module or function whose calls replay recorded plans (see the module docstring).

    Attributes:
        replays, recordings, fallbacks: counts of calls by path (also in ``lazyvic.metrics``
            as ``capture_replays`` ...).
    """

    def __init__(self, fn):
        self.fn = fn
        self._entries: dict = {}
        # Per call structure (sizes left out): the last recording, and a symbolic replay once two
        # recordings of other sizes gave one plan of symbolic sizes and the same scalars.
        self._structures: dict = {}
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
        modes_key = (grad, module.training if module is not None else None, config.deterministic)
        key = (tuple(key_args),) + modes_key
        entry = self._entries.get(key)
        if entry is False:
            return self._fallback(args)
        if entry is not None and entry.valid():
            return self._replay(entry, args)
        structure = self._structures.get((_structure(key_args),) + modes_key)
        if entry is None and structure is not None and structure[1] is not None and structure[0].valid():
            sizes = structure[1].sizes(args)
            if sizes is not None:
                return self._replay(structure[0], args, structure[1], sizes)
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

    def _replay(self, entry: _Entry, args, symbolic: _SymbolicReplay | None = None, sizes: tuple = ()):
        pending = [a for a in args if isinstance(a, Tensor) and a._node.pending]
        if pending:
            sync(*pending)
        inputs = [args[src]._node.data if kind == "arg" else src for kind, src in entry.slots]
        if symbolic is None:
            arrays = run(entry.trace, inputs, list(entry.scalars))
        else:  # other sizes: the plan of symbolic sizes, bound to them (no trace, no key)
            arrays = execute(symbolic.plan, inputs, list(entry.scalars), config.debug, sizes)
            metrics.add("capture_symbolic_replays")
        self.replays += 1
        metrics.add("capture_replays")
        trace = entry.trace
        outs = [
            Tensor(_node=Node.buffer(a, _dtype(a), entry.device, a.shape if symbolic else trace.entry(o).shape))
            for a, o in zip(arrays, trace.outputs)
        ]
        return _restructure(entry, outs)

    def _record(self, key, args):
        sync()  # pending work from before the call is not part of it
        traces_before = traces_run()  # this thread's: another thread's syncs do not count
        out = self.fn(*args)
        synced = traces_run() != traces_before
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
        self._note_structure(key, entry)
        self.recordings += 1
        metrics.add("capture_recordings")
        return out

    def _note_structure(self, key, entry: _Entry) -> None:
        """Remember this recording for its call structure; after a second recording of other sizes,
        when a plan of symbolic sizes served it and the scalars are the same (no Python value of the
        call followed the sizes: a ``1 / n`` would), later calls of other sizes replay that plan."""
        skey = (_structure(key[0]),) + key[1:]
        served = plan_cache.last
        symbolic = None
        previous = self._structures.get(skey)
        if (
            previous is not None
            and previous[0].scalars == entry.scalars
            and served is not None
            and served.plan is not None
            and served.plan.symbols
            and served.template is not None
            and entry.device == "cpu"
        ):
            symbolic = _symbolic_replay(entry.trace, entry.slots, served)
        self._structures[skey] = (entry, symbolic)


def _structure(key_args) -> tuple:
    """The arguments' part of a call key without the tensors' sizes (their ranks kept)."""
    return tuple(("T", len(k[1]), k[2], k[3]) if k[0] == "T" else k for k in key_args)


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
