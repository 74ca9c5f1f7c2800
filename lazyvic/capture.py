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
    - outputs that are not Tensors (a Tensor, or tuples/lists of them, nested or not: an
      ``nn.LSTM``'s ``(output, (h_n, c_n))`` replays with its nesting; a tensor returned twice
      is one tensor returned twice, as eager).
The contract, as for ``torch.jit.trace``: with the same guards the call records the same
program. Python values the call reads from elsewhere (a global, an attribute changed between
calls) are frozen at the recording; tensors a plain function closes over are captured by
value. What an inference call computes from those constants, parameters and buffers alone
through elementwise ops, gathers and joins (an imported LSTM's gate reorder, a weight's cast)
is computed once at the recording, not at every replay (``Compiled.hoisted``).

Training steps (a call that updates state: ``optimizer.step()``, a parameter or buffer updated
in place, ``.grad`` written by ``backward()``): the whole step is captured, as TinyJit and
``torch.compile(mode="reduce-overhead")`` capture it. Its first call runs normally and shows which
modules and optimizers it uses (their state is made then: the optimizer's moments); the second
call records it with that state as inputs and outputs; later calls replay the plan: they read the
parameters, gradients, buffers and optimizer state from where they live now (a change made outside
the step, ``p.data.mul_(0.5)``, is seen), bind the arguments, run the plan and write the new values
back (parameters in place, ``.grad`` as new tensors, optimizer state), and return the outputs
without autograd history. What changes per step without changing the program is computed again at
every replay, in the recorded order: each optimizer's bookkeeping and per-step values (step count,
learning rate, bias corrections: ``Optimizer._hyper``), a scheduler's ``step()``, the random
generator's position (dropout draws new masks). Clipping (``clip_grad_norm_``) is part of the
plan. Guards, besides the call's: the training flag of every module the step called; each
optimizer's state dicts (``load_state_dict`` records again) and hyperparameters other than the
learning rate; a ``.grad`` that was empty at the recording and that the step does not clear
(``zero_grad``) must be empty (else eager would add to it); the shape and dtype of every state
tensor read. A step runs normally, and ``Compiled.reasons`` counts why, when it syncs inside
(``loss.item()``: return the loss and call ``.item()`` outside; ``GradScaler`` syncs to find
infs), uses ``ReduceLROnPlateau``, leaves other pending tensors behind, or runs on CUDA. Python
side effects (appending to a list, printing) are not replayed, and an optimizer whose own
``step()`` reads Python values that change (a custom optimizer not built on ``Optimizer.step``)
has them frozen at the recording: the same contract as ``torch.jit.trace``.

Symbolic sizes (automatic dynamic shapes, as torch.compile's after a recompile): when a call
with other input sizes records again and the plan cache serves that recording with a plan of
symbolic sizes whose every symbol is a dim of an argument (``lazyvic.runtime.families``), and
the recording's Python scalars are those of the previous recording (no value of the call
followed the sizes, as ``1 / n`` in a mean would), later calls of other sizes replay that plan
with their sizes bound, checked by its guards, without recording. The contract then extends to
sizes: the call records the same program for every size its plan admits (a Python branch on a
size, ``if T > 32``, breaks it: compile such a function per size class, or not at all).

A training step of other sizes (a loop over sequence lengths) is recorded at its first call of
the new sizes (its state exists: no normal run first); its plan is then one of symbolic sizes,
and later sizes replay it as above, its per-step scalars left out of the comparison. Besides the
arguments' dims, the constants of a call or a step may vary when their values follow from their
sizes alone (:func:`_maker`): positions ``arange(T)``, a square causal mask, a bias gradient's
ones(1, B*T) row (its length a multiple of an argument's dim, the factor found in the examples of
the trace's family); a replay makes them at its sizes, and an inference recording does not hoist
values computed from them. Any other constant whose size varied (a value computed in Python from
a size) keeps the call recording, or the step running normally, at each new size. (nanoGPT-style
sampling through a compiled TinyGPT, the context a token longer per call: one plan, every token
a replay.)
"""

from __future__ import annotations

import collections
import functools
import math
import sys
import weakref

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import modes, recording
from lazyvic import ops as optable
from lazyvic.creation import arange_onnx
from lazyvic.nn.module import Module
from lazyvic.ops.movement import is_ones_row
from lazyvic.runtime import buffers, families, metrics, run
from lazyvic.runtime.config import config
from lazyvic.runtime.executor import execute
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.shaping import band_mask_onnx
from lazyvic.sync import live, sync, trace_flags, traces_run
from lazyvic.tensor import Tensor
from lazyvic.trace import family
from lazyvic.trace import node as _node_mod
from lazyvic.trace.composite import recipe_of
from lazyvic.trace.cut import cut
from lazyvic.trace.node import Node, parameter_nodes


class _Entry:
    """One recording: the trace and where each of its input slots comes from."""

    __slots__ = ("trace", "slots", "scalars", "watched", "structure", "items", "device", "makers")

    def __init__(self, trace, slots, scalars, watched, structure, items, device: str = "cpu", makers=None):
        self.trace = trace
        self.makers = makers or {}  # const slot -> function making it at other sizes (_maker)
        self.device = device  # where the outputs live
        self.slots = slots  # per input slot: ("arg", index) or ("const", array)
        self.scalars = scalars
        self.watched = watched  # [(weakref to Tensor, Node)]: values the replay assumes unchanged
        self.structure = structure  # how the outputs nest (_flatten)
        self.items = items  # per returned tensor, its trace output (a tensor returned twice: twice)

    def valid(self) -> bool:
        for ref, node in self.watched:
            t = ref()
            if t is None or t._node is not node:
                return False
        return True


class _SymbolicReplay:
    """How a call with other input sizes replays a plan of symbolic sizes: where each size symbol
    is read (argument, axis), which other argument dims the plan takes as given, the symbols
    that follow another by a factor (``derived``: a bias gradient's ones(1, B*T) row) and the
    constants made anew at each size (``remakes``: positions, causal masks and those rows,
    :func:`_maker`)."""

    __slots__ = ("plan", "reads", "checks", "derived", "remakes", "made")

    def __init__(self, plan, reads: list, checks: list, derived: list = (), remakes: list = ()):
        self.plan, self.reads, self.checks = plan, reads, checks
        self.derived, self.remakes = derived, remakes
        self.made: dict = {}  # sizes -> {slot: array} of the remade constants (the last few)

    def sizes(self, args) -> tuple | None:
        """The values of the plan's symbols for ``args``, or None when they do not fit."""
        sizes = [args[a].shape[axis] if a is not None else 0 for a, axis, _ in self.reads]
        for k, source, coef in self.derived:
            sizes[k] = coef * sizes[source]
        if any(v < lower for v, (_, _, lower) in zip(sizes, self.reads)):
            return None
        for a, axis, expected in self.checks:
            want = expected if isinstance(expected, int) else expected(sizes)
            if args[a].shape[axis] != want:
                return None
        sizes = tuple(sizes)
        return sizes if self.plan.admits(sizes) else None

    def constants(self, sizes: tuple) -> dict | None:
        """The constants of the call or step at ``sizes`` ({slot: array}), or None when one
        cannot be made (a causal mask that would not be square)."""
        made = self.made.get(sizes)
        if made is None:
            made = {}
            for slot, dims, make in self.remakes:
                shape = tuple(d if isinstance(d, int) else d(sizes) for d in dims)
                a = make(shape)
                if a is None:
                    return None
                made[slot] = a
            if len(self.made) >= MAX_REMADE:
                self.made.pop(next(iter(self.made)))
            self.made[sizes] = made
        return made


MAX_REMADE = 16


def _maker(node):
    """A function of a shape making the constant ``node`` holds at that shape, for the constants
    whose values follow their sizes alone: ``arange(n)`` (positions), a square causal mask
    (``band_mask(T, T)``, diagonal 0) and a bias gradient's ones row (ops/movement.py); else
    None. (A constant made otherwise might hold values of its sizes, ``1 / T``: never remade.)"""
    dtype = node.dtype.np
    made = recipe_of(node)
    if made is not None and made.op_type is arange_onnx:
        at = made.attrs
        if at["start"] == 0 and at["step"] == 1 and node.shape == (at["end"],):
            return lambda shape: np.arange(shape[0], dtype=dtype)
    if made is not None and made.op_type is band_mask_onnx:
        at = made.attrs
        if at["diagonal"] == 0 and at["lower"] and at["rows"] == at["cols"] and node.shape == (at["rows"], at["cols"]):
            return lambda shape: np.tril(np.ones(shape, dtype=bool)) if shape[0] == shape[1] else None
    if is_ones_row(node):
        return lambda shape: np.ones(shape, dtype=dtype)
    return None


def _makers(input_nodes: list, slots: list) -> dict:
    """``{slot: _maker}`` of the constant slots (``slots[k] == ("const", array)``) whose node has one."""
    found = ((k, _maker(n)) for k, n in enumerate(input_nodes) if slots[k][0] == "const")
    return {k: m for k, m in found if m is not None}


def _symbolic_replay(trace, slots, entry, makers: dict | None = None, examples: list = ()) -> _SymbolicReplay | None:
    """The symbolic replay of a recording whose trace a plan of symbolic sizes served, when every
    symbol of the plan is a dim of an argument (not of a captured constant, nor an attribute).
    Constants with a maker (``makers``: slot -> :func:`_maker`) may vary too: they are made at
    each size, and a symbol read from one of them is an argument's dim equal to it, or a
    multiple of an argument's (the factor found in the family's ``examples``, the same in each)."""
    template = entry.template
    makers = makers or {}
    sites = list(family.input_sites(trace.key[0]).items())
    remade: dict = {}  # slot -> [its sites]
    for site, (slot, axis) in sites:
        if slots[slot][0] != "arg" and not isinstance(template.exprs[site], int):
            if slot not in makers:
                return None  # a constant or a step's state whose size varied (a value hoisted from a slice by a size)
            remade.setdefault(slot, []).append((axis, site))
    remade_sites = {site for axes in remade.values() for _, site in axes}
    by_site = {  # input site -> (argument, axis), for the arguments' dims
        site: (slots[slot][1], axis) for site, (slot, axis) in sites if slots[slot][0] == "arg"
    }
    reads, derived, read_at = [], [], {}
    for k, (sym_site, lower) in enumerate(template.symbols):
        read_at[sym_site] = k
        if sym_site in by_site:
            reads.append((*by_site[sym_site], lower))
            continue
        plain = family.Expr(1, ((k, 0, 1),), 0)  # an argument's dim that is the symbol itself
        alt = next((site for site in by_site if template.exprs[site] == plain), None)
        if alt is not None and sym_site in remade_sites:
            reads.append((*by_site[alt], lower))
            continue
        factor = _factor(
            sym_site, [(j, template.symbols[j][0]) for j, r in enumerate(reads) if r[0] is not None], examples
        )
        if factor is None or sym_site not in remade_sites:
            return None  # a symbol read from an attribute or a constant: the call must record again
        reads.append((None, 0, lower))
        derived.append((k, *factor))
    checks = [(*by_site[s], template.exprs[s]) for s in by_site if template.exprs[s] is not None]
    remakes = []
    for slot, axes in remade.items():
        dims = list(slots[slot][1].shape)
        for axis, site in axes:
            if site in read_at:
                dims[axis] = _size_of(read_at[site])
            elif isinstance(template.exprs[site], family.Expr):
                dims[axis] = template.exprs[site]
            else:
                return None
        remakes.append((slot, dims, makers[slot]))
    return _SymbolicReplay(entry.plan, reads, checks, derived, remakes)


def _size_of(k: int):
    return lambda sizes: sizes[k]


def _factor(site: int, candidates: list, examples: list) -> tuple | None:
    """``(symbol, factor)``: the first candidate symbol (``(index, its site)``) whose value times
    one integer factor gives the value at ``site`` in every example (at least two), or None."""
    if len(examples) < 2:
        return None
    for k, at in candidates:
        first = examples[0]
        if first[at] <= 0 or first[site] % first[at]:
            continue
        coef = first[site] // first[at]
        if all(ex[site] == coef * ex[at] for ex in examples):
            return k, coef
    return None


class Compiled:
    """A module or function whose calls replay recorded plans (see the module docstring).

    Attributes:
        replays, recordings, fallbacks: counts of calls by path (also in ``lazyvic.metrics``
            as ``capture_replays`` ..., and ``capture_step_replays`` for training steps).
        reasons: a ``collections.Counter`` of why calls ran normally (the fallbacks).
        hoisted: values of inference recordings computed once from constants, parameters and
            buffers alone, not at every replay (``capture_hoisted``; see ``_hoist_constants``).
    """

    def __init__(self, fn):
        self.fn = fn
        self._entries: dict = {}
        # Per call structure (sizes left out): the last recording, and a symbolic replay once two
        # recordings of other sizes gave one plan of symbolic sizes and the same scalars.
        self._structures: dict = {}
        self.replays = self.recordings = self.fallbacks = self.hoisted = 0
        self.reasons: collections.Counter = collections.Counter()  # why calls ran normally
        self._refusals: dict = {}
        functools.update_wrapper(self, fn, updated=())

    def __getattr__(self, name):  # a compiled module still has its attributes (state_dict, eval ...)
        return getattr(self.__dict__["fn"], name)

    def _module(self):
        return self.fn if isinstance(self.fn, Module) else None

    def __call__(self, *args):
        if recording.current() is not None:  # inside a captured step's recording: part of it
            return self.fn(*args)
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
                    return self._fallback(args, "an argument that is not a Tensor nor hashable")
                key_args.append(("V", a))
        module = self._module()
        grad = modes.is_grad_enabled()
        if grad and (
            any(t.requires_grad for t in tensors)
            or (module is not None and any(p.requires_grad for p in module.parameters()))
        ):
            return self._fallback(args, "grad mode with tensors that require grad (the outputs need history)")
        modes_key = (grad, module.training if module is not None else None, config.deterministic)
        key = (tuple(key_args),) + modes_key
        entry = self._entries.get(key)
        if entry is False:
            return self._fallback(args, self._refusals[key])
        if isinstance(entry, _StepEntry):
            if entry.valid():
                out = self._replay_step(entry, args)
                if out is not None:
                    return out
            return self._record(key, args)  # state changed outside the step: discover it again
        if isinstance(entry, _Discovery):
            return self._record_step(key, args, entry)
        if entry is not None and entry.valid():
            return self._replay(entry, args)
        structure = self._structures.get((_structure(key_args),) + modes_key)
        if entry is None and structure is not None and structure[0].valid():
            known, replay = structure
            if replay is not None:
                sizes = replay.sizes(args)
                if sizes is not None:
                    if isinstance(known, _StepEntry):
                        out = self._replay_step(known, args, replay, sizes)
                    else:
                        out = self._replay(known, args, replay, sizes)
                    if out is not None:
                        return out
            elif isinstance(known, _StepEntry) and not known.direct:
                # A step of other sizes: its state exists, so it is recorded now (its plan then
                # one of symbolic sizes, which later sizes replay), not first run normally. Once:
                # if no such plan came of it, later sizes are first run normally again.
                return self._record_step(key, args, known.discovery, direct=True)
        return self._record(key, args)

    # -- paths -------------------------------------------------------------------------------
    def _refuse(self, key, out, reason: str = "not replayable"):
        """Remember that calls with these guards run normally (``out`` is this call's result)."""
        self._entries[key] = False
        self._refusals[key] = reason
        self._count_fallback(reason)
        return out

    def _fallback(self, args, reason: str = "not replayable"):
        self._count_fallback(reason)
        return self.fn(*args)

    def _count_fallback(self, reason: str) -> None:
        self.fallbacks += 1
        self.reasons[reason] += 1
        metrics.add("capture_fallbacks")
        if config.debug >= 1:
            print(
                f"[lazyvic] compile: {getattr(self.fn, '__name__', type(self.fn).__name__)} runs normally: {reason}",
                file=sys.stderr,
            )

    def _replay(self, entry: _Entry, args, symbolic: _SymbolicReplay | None = None, sizes: tuple = ()):
        pending = [a for a in args if isinstance(a, Tensor) and a._node.pending]
        if pending:
            sync(*pending)
        inputs = [args[src]._node.data if kind == "arg" else src for kind, src in entry.slots]
        if symbolic is not None and entry.makers:
            remade = symbolic.constants(sizes)
            if remade is None:
                return None
            for k, a in remade.items():
                inputs[k] = a
        if symbolic is None:
            arrays = run(entry.trace, inputs, list(entry.scalars))
        else:  # other sizes: the plan of symbolic sizes, bound to them (no trace, no key)
            arrays = execute(symbolic.plan, inputs, list(entry.scalars), config.debug, sizes)
            metrics.add("capture_symbolic_replays")
        self.replays += 1
        metrics.add("capture_replays")
        trace = entry.trace
        nodes = [
            Node.buffer(a, _dtype(a), entry.device, a.shape if symbolic else trace.entry(o).shape)
            for a, o in zip(arrays, trace.outputs)
        ]
        return _restructure(entry, nodes)

    def _record(self, key, args):
        sync()  # pending work from before the call is not part of it
        traces_before = traces_run()  # this thread's: another thread's syncs do not count
        mark = next(_node_mod._counter)  # nodes made from here on are the call's own
        with recording.recording() as rec:
            out = self.fn(*args)
        synced = traces_run() != traces_before
        if _is_step(rec, mark):  # a training step: recorded at its next call (see _record_step)
            if synced:
                return self._refuse(key, out, _SYNC_INSIDE)
            if rec.refused:
                return self._refuse(key, out, rec.refused)
            self._entries[key] = _Discovery(rec)
            self._count_fallback("a step's first call runs normally (its state is made)")
            return out
        if synced:
            return self._refuse(key, out, "a sync point inside the call (.item(), .numpy(), print)")
        if rec.refused:
            return self._refuse(key, out, rec.refused)
        items, structure = _flatten(out)
        if not items or structure is None:
            return self._refuse(key, out, _NOT_TENSORS)
        roots = _roots(items)
        devices = {n.device or "cpu" for n in roots}
        if len(devices) > 1:
            return self._refuse(key, out, "outputs on two devices")
        device = devices.pop() if devices else "cpu"
        side_effects = {id(t) for t in live.pending()} - {id(t) for t in items}
        if not _computed_outputs(items, roots) or _has_side_effects(side_effects, roots):
            return self._refuse(key, out, "outputs that are inputs or constants, or pending tensors beside them")
        by_id = {}
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                by_id.setdefault(id(a._node.data), i)
        if device == "cpu":
            self.hoisted += _hoist_constants(roots, by_id)
        input_nodes: list = []
        trace, arrays, scalars, out_nodes = cut(roots, _flags(device), None, input_nodes)
        if any(e.op in _RANDOM_OPS for e in trace.named):
            _realize(out_nodes, run(trace, arrays, scalars), device)
            sync()
            return self._refuse(key, out, "random ops in an inference call")
        slots = [("arg", by_id[id(a)]) if id(a) in by_id else ("const", a) for a in arrays]
        module = self._module()
        watched = []
        if module is not None:
            state = [*module.parameters(), *module.buffers()]
            watched = [(weakref.ref(t), t._node) for t in state if isinstance(t, Tensor)]
        makers = _makers(input_nodes, slots) if device == "cpu" else {}
        entry = _Entry(trace, slots, tuple(scalars), watched, structure, _layout(items, out_nodes), device, makers)
        arrays_out = run(trace, arrays, scalars)
        _realize(out_nodes, arrays_out, device)
        sync()  # anything else pending (nothing, unless the call left unrelated work)
        self._entries[key] = entry
        self._note_structure(key, entry)
        self.recordings += 1
        metrics.add("capture_recordings")
        return out

    def _record_step(self, key, args, discovery: _Discovery, direct: bool = False):
        """Record a training step (its second call: its state exists now), run it, and keep what a
        replay needs: the trace; where each input comes from (an argument, a cell, a constant); the
        per-step scalar inputs and the functions that give their next values; which cell each
        output goes to; and the guards (module training flags, optimizer state and
        hyperparameters, cells that must be empty)."""
        sync()
        mark = next(_node_mod._counter)
        cells = _step_cells(discovery.rec, mark)
        start = [c.get() for c in cells]
        start_nodes = [None if t is None else t._node for t in start]
        traces_before = traces_run()
        with recording.recording() as rec:
            out = self.fn(*args)
        if traces_run() != traces_before:
            return self._refuse(key, out, _SYNC_INSIDE)
        if rec.refused:
            return self._refuse(key, out, rec.refused)
        if set(rec.modules) - set(discovery.rec.modules) or set(rec.optimizers) - set(discovery.rec.optimizers):
            self._entries[key] = _Discovery(rec)  # other modules or optimizers than the first call's
            self._count_fallback("the step used other modules or optimizers than at its first call")
            return out
        known = {id(c.holder) for c in cells if c.kind == "obj"}
        for t, node in rec.mutated.values():  # tensors first updated by this call
            if node.id < mark and id(t) not in known:
                cells.append(_Cell("obj", t))
                start.append(t)
                start_nodes.append(node)
        items, structure = _flatten(out)
        if structure is None:
            return self._refuse(key, out, _NOT_TENSORS)
        ends = [c.get() for c in cells]
        if any(t is not None and (t.device != "cpu") for t in (*ends, *items)):
            return self._refuse(key, out, "a step on a device other than the CPU (not captured yet)")
        roots = _roots(items)
        if not _computed_outputs(items, roots):
            return self._refuse(key, out, "outputs that are inputs or constants (return tensors the step computes)")
        for t, node in zip(ends, start_nodes):
            if t is not None and t._node.pending:
                roots.append(t._node)
            elif t is not None and t._node is not node:
                return self._refuse(key, out, "a state tensor replaced by another existing value")
        held = {id(t) for t in (*items, *ends) if t is not None}
        if _has_side_effects({id(t) for t in live.pending()} - held, roots):
            return self._refuse(key, out, "pending tensors the step leaves beside its outputs and state")
        scalar_nodes, input_nodes = [], []
        trace, arrays, scalars, out_nodes = cut(roots, _flags(), scalar_nodes, input_nodes)
        source = {}
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                source.setdefault(id(a._node.data), ("arg", i))
        for j, node in enumerate(start_nodes):
            if node is not None and node.op == "buffer":
                source.setdefault(id(node.data), ("cell", j))
        entry = _StepEntry()
        entry.trace = trace
        entry.slots = [source.get(id(a), ("const", a)) for a in arrays]
        entry.shapes = [(a.shape, a.dtype) for a in arrays]
        entry.makers = _makers(input_nodes, entry.slots)  # the constants a call of other sizes makes anew
        entry.scalars = tuple(scalars)
        slot_of = {id(n): k for k, n in enumerate(scalar_nodes)}
        entry.events = [(tuple(slot_of.get(id(n)) for n in nodes), fn) for nodes, fn in rec.events]
        where = {id(n): k for k, n in enumerate(out_nodes)}
        entry.cells = cells
        entry.writes = [
            (j, None if t is None else where[id(t._node)])
            for j, (t, node) in enumerate(zip(ends, start_nodes))
            if (t is None and node is not None) or (t is not None and id(t._node) in where)
        ]
        entry.items = _layout(items, out_nodes)
        # A gradient empty at the recording and not cleared by the step must be empty at a replay
        # (else eager would add to it).
        entry.must_be_none = [
            j
            for j, (c, t) in enumerate(zip(cells, start))
            if t is None and not (c.kind == "attr" and id(c.holder) in rec.cleared)
        ]
        entry.modules = list(rec.modules.values())
        entry.training = tuple(m.training for m in entry.modules)
        entry.optimizers = list(rec.optimizers.values())
        entry.guards = [_optimizer_guard(o) for o in entry.optimizers]
        entry.structure = structure
        entry.plan = None
        entry.out_shapes = [(trace.entry(o).shape, trace.dtypes[o]) for o in trace.outputs]
        # The outputs the buffer pool may take back when their tensor dies (the large ones).
        entry.tracked = [
            k
            for k, (shape, dtype) in enumerate(entry.out_shapes)
            if math.prod(shape) * dtype.itemsize >= buffers.MIN_BYTES
        ]
        entry.discovery, entry.direct = discovery, direct
        arrays_out = run(trace, arrays, scalars, at_once=True)  # compiled from its first run
        entry.plan = _served_plan()
        _realize(out_nodes, arrays_out, "cpu")
        self._entries[key] = entry
        self._note_structure(key, entry)
        self.recordings += 1
        metrics.add("capture_recordings")
        return _restructure(entry, out_nodes)

    def _replay_step(self, entry: _StepEntry, args, symbolic: _SymbolicReplay | None = None, sizes: tuple = ()):
        """Run a recorded step on the current arguments and state; None when a cell does not hold
        what the recording read (the caller records again). With ``symbolic``, the arguments have
        other sizes (``sizes``, the values of the symbols of ``symbolic.plan``, which runs)."""
        if any(isinstance(a, Tensor) and a._node.pending for a in args):
            sync()
        remade = {}
        if symbolic is not None:
            remade = symbolic.constants(sizes)
            if remade is None:
                return None
        inputs = []
        for k, ((kind, src), (shape, dtype)) in enumerate(zip(entry.slots, entry.shapes)):
            if kind == "const":
                inputs.append(remade.get(k, src))
                continue
            t = args[src] if kind == "arg" else entry.cells[src].get()
            if t is None:
                return None
            if t._node.pending:
                sync()
            a = t._node.data
            if (a.shape != shape and (symbolic is None or kind != "arg")) or a.dtype != dtype:
                return None  # (an argument's sizes: symbolic.sizes checked them)
            inputs.append(a)
        scalars = list(entry.scalars)
        for slots, fn in entry.events:  # the optimizers' bookkeeping, the schedulers, the RNG
            values = fn()
            for k, v in zip(slots, values or ()):
                if k is not None:
                    scalars[k] = v
        if symbolic is not None:
            arrays = execute(symbolic.plan, inputs, scalars, config.debug, sizes)
            metrics.add("capture_symbolic_replays")
            nodes = [Node.buffer(a, dtype, "cpu", a.shape) for a, (_, dtype) in zip(arrays, entry.out_shapes)]
            tracked = [k for k, a in enumerate(arrays) if a.nbytes >= buffers.MIN_BYTES]
        else:
            if entry.plan is not None:
                arrays = execute(entry.plan, inputs, scalars, config.debug)
            else:
                arrays = run(entry.trace, inputs, scalars, at_once=True)
                entry.plan = _served_plan()
            nodes = [Node.buffer(a, dtype, "cpu", shape) for a, (shape, dtype) in zip(arrays, entry.out_shapes)]
            tracked = entry.tracked
        for k in tracked:
            buffers.track(nodes[k], arrays[k])
        for j, k in entry.writes:
            entry.cells[j].put(None if k is None else nodes[k])
        self.replays += 1
        metrics.add("capture_replays")
        metrics.add("capture_step_replays")
        return _restructure(entry, nodes)

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
            and type(previous[0]) is type(entry)
            and _fixed_scalars(previous[0]) == _fixed_scalars(entry)
            and served is not None
            and served.plan is not None
            and served.plan.symbols
            and served.template is not None
            and getattr(entry, "device", "cpu") == "cpu"  # (a step runs on the CPU)
        ):
            examples = families.examples(entry.trace)
            symbolic = _symbolic_replay(entry.trace, entry.slots, served, entry.makers, examples)
        self._structures[skey] = (entry, symbolic)


# ---------------------------------------------------------------- captured training steps
class _Cell:
    """A place that holds a tensor from one step to the next: a slot of a dict (a module's
    parameter or buffer, an optimizer's state entry), a parameter's ``.grad``, or a tensor object
    updated in place. A replay reads its inputs from cells and writes its results into them."""

    __slots__ = ("kind", "holder", "key")

    def __init__(self, kind: str, holder, key=None):
        self.kind, self.holder, self.key = kind, holder, key

    def get(self):
        if self.kind == "obj":
            return self.holder
        if self.kind == "slot":
            return self.holder.get(self.key)
        return self.holder.grad

    def put(self, node: Node | None) -> None:
        """Make the cell hold ``node``'s value: in place for a tensor it holds (a parameter keeps
        its identity), a new tensor for ``.grad`` (as a backward after ``zero_grad`` makes)."""
        if self.kind == "attr":
            self.holder.grad = None if node is None else Tensor._wrap(node)  # a realized node
            return
        t = self.get()
        if node is None:
            if self.kind == "slot":
                self.holder[self.key] = None
            return
        if t is None:
            self.holder[self.key] = Tensor(_node=node)
            return
        if t._node is node:  # one tensor reached through two cells (a module's, an optimizer's)
            return
        t._node = node
        if t._is_parameter:
            parameter_nodes.add(node)


def _step_cells(rec: recording.StepRecorder, mark: int) -> list:
    """The cells of a step: the parameters, buffers and gradients of the modules it called, the
    parameters, gradients and state of the optimizers it used, and the tensors made before the
    call that it updated in place (node ids below ``mark``)."""
    cells, seen = [], set()

    def add(kind, holder, key=None):
        k = (kind, id(holder), key)
        if k not in seen:
            seen.add(k)
            cells.append(_Cell(kind, holder, key))

    for m in rec.modules.values():
        for name, t in m._parameters.items():
            if t is not None:
                add("slot", m._parameters, name)
                add("attr", t)
        for name, t in m._buffers.items():
            if t is not None:
                add("slot", m._buffers, name)
    for opt in rec.optimizers.values():
        for p in opt._params():
            add("obj", p)
            add("attr", p)
            st = opt.state.get(p)
            for k, v in (st or {}).items():
                if isinstance(v, Tensor):
                    add("slot", st, k)
    for t, node in rec.mutated.values():
        if node.id < mark:
            add("obj", t)
    return cells


def _optimizer_guard(opt) -> tuple:
    """What a replay of ``opt``'s update assumes unchanged: its state dicts (``load_state_dict``
    makes new ones) and every hyperparameter but the learning rate (read anew at each replay)."""
    # (Each group copied with its parameters and learning rate blanked: compared in C, a tenth of
    # a small step's replay spent here before.)
    groups = [{**g, "params": None, "lr": None, "param_names": None} for g in opt.param_groups]
    return id(opt.state), tuple(map(id, map(opt.state.get, opt._params()))), groups


class _Discovery:
    """A step's first call ran normally; the next records it with these cells."""

    __slots__ = ("rec",)

    def __init__(self, rec):
        self.rec = rec


class _StepEntry:
    """A recorded training step (see ``Compiled._record_step``)."""

    __slots__ = (
        "trace",
        "slots",
        "scalars",
        "events",
        "cells",
        "writes",
        "items",
        "must_be_none",
        "shapes",
        "modules",
        "training",
        "optimizers",
        "guards",
        "structure",
        "plan",
        "out_shapes",
        "tracked",
        "discovery",  # the _Discovery it was recorded with (a step of other sizes records with it)
        "makers",  # slot -> function making that constant at other sizes (_maker)
        "direct",  # recorded at a call of new sizes without a first normal run
    )

    def valid(self) -> bool:
        if tuple(m.training for m in self.modules) != self.training:
            return False
        if any(_optimizer_guard(o) != g for o, g in zip(self.optimizers, self.guards)):
            return False
        return all(self.cells[j].get() is None for j in self.must_be_none)


def _fixed_scalars(entry) -> tuple:
    """The scalar inputs of a recording that no per-step event (an optimizer's step count, the
    RNG) sets at a replay: two recordings of other sizes share a plan only if these agree."""
    events = {k for slots, _ in getattr(entry, "events", ()) for k in slots if k is not None}
    return tuple(v for k, v in enumerate(entry.scalars) if k not in events)


def _served_plan():
    """The compiled plan of fixed sizes that served the last run, or None: a replay runs it
    directly, without the plan cache's key (hashing a step's key costs ~0.5 ms)."""
    last = plan_cache.last
    if last is None or last.plan is None or last.sizes or config.compile == "never":
        return None
    return last.plan


def _is_step(rec: recording.StepRecorder, mark: int) -> bool:
    """Whether a call updated state (a tensor made before it, or an optimizer's): a step."""
    return bool(rec.optimizers) or any(node.id < mark for _, node in rec.mutated.values())


def _structure(key_args) -> tuple:
    """The arguments' part of a call key without the tensors' sizes (their ranks kept)."""
    return tuple(("T", len(k[1]), k[2], k[3]) if k[0] == "T" else k for k in key_args)


_SYNC_INSIDE = "a sync point inside the step (.item(), .numpy(), print)"


def _roots(items) -> list:
    """The outputs' pending nodes, each once (a tensor returned twice is one output of the trace)."""
    return list({id(t._node): t._node for t in items if t._node.pending}.values())


def _computed_outputs(items, roots: list) -> bool:
    """Whether every output is computed by the call (``roots``: the outputs' pending nodes), not
    an input or a constant. One tensor may be returned more than once."""
    return len(roots) == len({id(t._node) for t in items})


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


# Ops whose values computed from constants alone a recording computes once (_hoist_constants):
# the exact ones (elementwise ops round as in any plan, gathers and joins copy), never products,
# reductions or random draws.
_HOISTABLE = frozenset(("elementwise", "gather", "join", "movement"))
# An inference call that draws random numbers is not replayed (each call draws anew).
_RANDOM_OPS = frozenset(("rand", "randn"))


def _hoist_constants(roots: list, arg_data: dict) -> int:
    """Compute, once at an inference recording, the values of ``roots``' graph that depend on no
    argument (``arg_data``: the ids of the arguments' arrays): the call's constants, parameters
    and buffers through elementwise ops, gathers and joins (an imported LSTM's gate reorder, a
    weight's cast). Each such value that an argument-dependent op reads becomes a realized buffer,
    a constant input of the recorded trace, so replays no longer compute it (the recording is
    valid only while the parameters and buffers are the ones it read: ``_Entry.valid``). Views
    (movement ops) of constants stay in the trace, as do values larger than every constant they
    are made of (a broadcast) and the call's outputs: the values they are made of are kept
    instead. Returns how many were computed (none for a call that draws random numbers: it is
    refused, so nothing would be reused). The same bits as computing them in the plan: the same
    ops, each rounding as it does there."""
    const: dict = {}  # pending node -> the largest constant (elements) it reads, when argument-free
    stack = list(roots)
    while stack:  # post-order over pending nodes
        node = stack[-1]
        if node in const:
            stack.pop()
            continue
        waiting = [i for i in node.inputs if i.pending and i not in const]
        if waiting:
            stack.extend(waiting)
            continue
        stack.pop()
        if node.op in _RANDOM_OPS:
            return 0
        largest = 0 if node.inputs and optable.OPS[node.op].kind in _HOISTABLE else None
        for i in node.inputs:
            if largest is None:
                break
            if i.pending:
                largest = None if const[i] is None else max(largest, const[i])
            elif i.op == "buffer":
                # (A constant a replay at other sizes makes anew, _maker, follows the sizes as an
                # argument does: a position embedding stays in the trace.)
                varies = id(i.data) in arg_data or _maker(i) is not None
                largest = None if varies else max(largest, math.prod(i.shape))
        const[node] = largest

    outputs = set(roots)

    def computed(node):  # the argument-free values to keep: below views, broadcasts and outputs
        found, todo = [], [node]
        while todo:
            n = todo.pop()
            if n not in outputs and optable.OPS[n.op].kind != "movement" and math.prod(n.shape) <= const[n]:
                found.append(n)
            else:
                todo.extend(i for i in n.inputs if i.pending)
        return found

    wanted: dict = {}
    for node, largest in const.items():
        if largest is None:
            for i in node.inputs:
                if i.pending and const[i] is not None:
                    wanted.update(dict.fromkeys(computed(i)))
    if not wanted:
        return 0
    nodes = list(wanted)
    trace, arrays, scalars, out_nodes = cut(nodes, _flags("cpu"))
    _realize(out_nodes, run(trace, arrays, scalars), "cpu")
    metrics.add("capture_hoisted", len(out_nodes))
    return len(out_nodes)


def _realize(nodes, arrays, device: str) -> None:
    for node, array in zip(nodes, arrays):
        node.realize(array)
        node.device = device
        if device == "cpu":
            buffers.track(node, array)


def _layout(items, out_nodes) -> list:
    """Per returned tensor: (its trace output, the earlier position of the same tensor or -1)."""
    where = {id(n): k for k, n in enumerate(out_nodes)}
    first: dict = {}
    layout = []
    for i, t in enumerate(items):
        layout.append((where[id(t._node)], first.get(id(t), -1)))
        first.setdefault(id(t), i)
    return layout


def _restructure(entry: _Entry, nodes: list):
    """The call's result from its outputs' nodes: a tensor per returned item, one tensor for an
    item returned twice (as eager), nested as the recorded call's result."""
    outs: list = []
    for k, j in entry.items:
        outs.append(outs[j] if j >= 0 else Tensor(_node=nodes[k]))
    return _rebuild(entry.structure, iter(outs))


_NOT_TENSORS = "outputs that are not a Tensor or (nested) tuples or lists of Tensors"


def _flatten(out) -> tuple:
    """(the Tensors of a Tensor or of nested tuples and lists of them, depth-first; the nesting,
    for :func:`_rebuild`), or ([], None) when something else is inside (an nn.LSTM's
    ``(output, (h_n, c_n))`` is three tensors)."""
    if isinstance(out, Tensor):
        return [out], "tensor"
    if not isinstance(out, (tuple, list)):
        return [], None
    items, inner = [], []
    for o in out:
        got, spec = _flatten(o)
        if spec is None:
            return [], None
        items += got
        inner.append(spec)
    return items, ("tuple" if isinstance(out, tuple) else "list", tuple(inner))


def _rebuild(spec, outs):
    """The nesting ``spec`` of :func:`_flatten` filled from the iterator ``outs``."""
    if spec == "tensor":
        return next(outs)
    kind, inner = spec
    values = [_rebuild(s, outs) for s in inner]
    return tuple(values) if kind == "tuple" else values


def _dtype(array):
    return dt.get_dtype(array.dtype)


def _flags(device: str = "cpu") -> tuple:
    return trace_flags(device)


def compile(model_or_fn):  # noqa: A001 - PyTorch's name
    """Return a callable that replays the recorded plan of ``model_or_fn`` (a module or function:
    an inference call, or a whole training step with ``backward()`` and ``optimizer.step()``).
    Usable as a decorator, as ``torch.compile`` is.

    See :mod:`lazyvic.capture` for the guards and when a call runs normally instead.
    The first call for each guard set records and runs as usual (outputs are realized; a training
    step records at its second call); later calls skip Python recording and the cut. Outputs are
    realized Tensors without autograd history. ``Compiled.replays`` / ``recordings`` /
    ``fallbacks`` count the paths and ``Compiled.reasons`` why calls ran normally
    (``LAZYVIC_DEBUG=1`` prints each reason).

    Raises:
        TypeError: ``model_or_fn`` is not callable.
    """
    if not callable(model_or_fn):
        raise TypeError(f"lazyvic.compile: expected a module or a function, got {type(model_or_fn).__name__}")
    return Compiled(model_or_fn)
