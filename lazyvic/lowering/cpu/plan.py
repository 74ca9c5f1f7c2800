"""The CPU plan: steps (``lowering/cpu/steps.py``), their memory plan, and :meth:`CpuPlan.run`.

A run binds the input arrays, takes the output arrays from the allocator the runtime handed
the backend (``lazyvic.runtime.buffers.take``: a pool of large outputs), runs the steps and
hands back the outputs. The environment is a list indexed by entry position, holding each
buffer both shaped (for BLAS and reference steps) and flat (kernels take 1-D arrays).

Hot plans: once a plan has run ``native_after`` times, its runs of kernels and BLAS products run
as native segments (``lowering/cpu/native.py``: one generated Numba call each, same bits).
Outputs: small output arrays a run made two runs before are written again when nothing refers
to them any more (a training step's previous parameters and gradients), the others are new.

Threads: a plan's buffers belong to one run at a time. Each run takes a set of pooled
temporaries (a :class:`RunState`: the pool and the environment viewing it, allocated once) from
the plan's free list and puts it back after, so the same plan runs in several threads at once,
each on storage of its own (``concurrent_runs``); a run state recycles only its own outputs.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numba
import numpy as np

from lazyvic import dtypes as dt
from lazyvic import ops as optable
from lazyvic.lowering.backend import Plan
from lazyvic.lowering.cpu import load, native
from lazyvic.lowering.cpu.steps import (
    KernelStep,
    MatmulStep,
    RecurrentStep,
)
from lazyvic.lowering.memory import aligned_empty, slot_sizes
from lazyvic.ops.blas import blas_threads
from lazyvic.trace import symbolic
from lazyvic.trace.entry import Entry

# A plan that calls BLAS runs it on one thread (CpuPlan.blas_threads): its products large enough to
# gain from two threads run in pieces on the plan's thread team instead (ops/blas.matmul_pieces,
# product_pieces; lowering/cpu/team.py), the team its kernels use, so no two spinning pools wait
# for each other, and while other processes are busy the pieces run on the calling thread
# (lowering/cpu/load.py). Which thread runs a piece does not change its bits: a seeded run gives
# the same bits on a quiet machine and a busy one.
# Measured (lazyvic.compile, 2 cores, steady-state medians; before 2026-11-26 plans with a product
# of 2^28 flops or more kept OpenBLAS's two threads whole and ran their kernels on one thread):
# - MobileNetV2 / EfficientNet-B0 inference at batch 32, 224px: 196-203 / 260-318 ms a call
#   against 221-237 / 430-515; with another process busy, 438-542 / 689-739 against 586-664 /
#   1,002-1,063 (benchmarks/convnets.py, alternated);
# - the pytorch/examples MNIST CNN training step (a 32->64 3x3 convolution of 64 26x26 images,
#   1.4e9 flops): 46 ms against 52-76 quiet, 89-113 against 122-221 busy;
# - BERT-style / GPT-2-style inference at batch 8 (products up to 2.4e9 flops): 44-47 / 177-191
#   ms against 41-103 / 174-194 quiet, 76-80 / 333-374 against 84-85 / 402-407 busy
#   (benchmarks/onnx_transformers.py).
# Small products never gained from a second thread: the digits MLP step (products of at most
# 2.1e6 flops) ran at 6,690 steps/s with two OpenBLAS threads and 7,070 with one on a quiet
# machine, and with another process busy at 3,150 against 7,140 (benchmarks/captured_steps.py);
# at ResNet-18 batch 1 two OpenBLAS threads made a forward pass 12 ms instead of 1.3 ms with
# another process busy.
BLAS_KINDS = ("matmul", "conv")  # their outputs are written by BLAS: 64-byte aligned
# Sets of temporaries a plan keeps between runs: as many as threads ran it at once, up to this.
MAX_FREE_RUN_STATES = 4
# Bindings of its size symbols a plan of symbolic sizes keeps made (their entries, steps and, per
# run state, views of the pool: no memory of their own), the oldest dropped first. With 8, a
# TinyGPT training loop over 20 lengths made every binding again at every step (5.3 ms of a
# 23 ms step).
MAX_BINDINGS = 64
# Outputs smaller than this are used again by a later run once nothing refers to them
# (CpuPlan._outputs); larger ones come back through the runtime's buffer pool.
RECYCLE_MAX_BYTES = 1 << 20


@dataclass
class _Binding:
    """A plan of symbolic sizes made concrete for one binding, shared by the runs of every
    thread (read only): its entries and steps with their sizes substituted (kernels' size
    arguments too), the outputs a run makes, the bytes each pool slot needs."""

    entries: list
    steps: list
    new_outputs: list
    needed: list
    native: object = None  # its steps with native segments (lowering/cpu/native.py); False: none
    runs: int = 0  # runs at this binding (its native segments are made after native_after of them)
    layout: int = 0  # the same for bindings whose pooled temporaries have the same shapes


_layout_ids = itertools.count(1)
_SHAPE = Entry._fields.index("shape")


def _symbolic_fields(step) -> tuple:
    """The names of ``step``'s fields that hold symbolic sizes (run-time state excepted)."""
    return tuple(
        f.name for f in dataclasses.fields(step) if f.init and symbolic.contains_symbols(getattr(step, f.name))
    )


def _replaced(step, changes: dict):
    """``dataclasses.replace(step, **changes)`` for a step dataclass, in a fifth of its time: a
    shallow copy with ``changes`` set, its fields outside ``__init__`` made anew (a binding's
    step starts with its own run-time state, as ``replace`` makes it), then ``__post_init__``."""
    new = object.__new__(type(step))
    d = new.__dict__
    d.update(step.__dict__)
    d.update(changes)
    for name, make in _fresh_fields(type(step)):
        if make is None:
            d.pop(name, None)
        else:
            d[name] = make()
    post = getattr(new, "__post_init__", None)
    if post is not None:
        post()
    return new


@functools.cache
def _fresh_fields(cls) -> tuple:
    """``(name, maker)`` of each field of dataclass ``cls`` that ``__init__`` does not take: its
    default factory, a function of its default, or None when it has neither (left unset)."""
    out = []
    for f in dataclasses.fields(cls):
        if f.init:
            continue
        if f.default_factory is not dataclasses.MISSING:
            out.append((f.name, f.default_factory))
        elif f.default is not dataclasses.MISSING:
            out.append((f.name, lambda v=f.default: v))
        else:
            out.append((f.name, None))
    return tuple(out)


_U16 = np.dtype(np.uint16)


def kernel_view(a: np.ndarray) -> np.ndarray:
    """The flat array a kernel gets for C-contiguous ``a``: itself, or for a half type its uint16
    bits (which Numba can type; kernel_lib's ld_/st_ functions convert)."""
    f = a.ravel()  # (a view of a C-contiguous array, as reshape(-1), in a third of its time)
    return f.view(_U16) if f.dtype in dt.HALF_NP else f


def allocate_output(shape, dtype, aligned: bool = True) -> np.ndarray:
    """The output allocator of a plan compiled without one from the runtime: 64-byte aligned
    arrays (BLAS writes into them), plain ``np.empty`` ones otherwise."""
    return aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)


class RunState:
    """The storage one run works in: the pooled temporaries (``pool``) and the environment
    lists viewing them, shaped (``env``) and flat (``flat``); copied at each run. A plan of
    symbolic sizes keeps its views per layout of its bindings (``views``: ``_Binding.layout`` ->
    (env, flat))."""

    __slots__ = ("pool", "env", "flat", "views", "recent")

    def __init__(self, pool: list, env: list, flat: list):
        self.pool, self.env, self.flat = pool, env, flat
        self.views: dict = {}
        # The small outputs this state's last two runs made (see CpuPlan._outputs).
        self.recent: list = [None, None]


def _unheld(a: np.ndarray) -> bool:
    """Whether nothing but the caller's list refers to output array ``a`` and its allocation:
    no tensor, no ``.numpy()`` result, no view of it (each view refers to the allocation)."""
    # getrefcount counts its argument; ``a`` is also in the caller's list, in its frame and here.
    if sys.getrefcount(a) != 4:
        return False
    base = a.base
    return base is None or (base.base is None and sys.getrefcount(base) == 3)  # a.base, ``base``, the argument


_binding_lock = threading.Lock()  # making a binding of a plan of symbolic sizes
_native_lock = threading.Lock()  # making a plan's native segments


@dataclass
class CpuPlan(Plan):
    """A compiled CPU plan: steps, their memory plan, and where inputs and outputs go."""

    name: str
    entries: list = field(repr=False)  # lazyvic.trace.entry.Entry, after the graph passes
    steps: list = field(repr=False)
    input_pos: list = field(repr=False)  # (entry position, input slot)
    outputs: list = field(repr=False)  # per trace output: ("buffer", pos, dtype) | ("scalar", slot, dtype)
    memory: object = None
    groups: list = field(default_factory=list, repr=False)
    fallbacks: tuple = ()
    stats: dict = field(default_factory=dict)
    # BLAS threads while the plan runs: 1 where a step calls BLAS (a product, a convolution, a
    # recurrent loop), None (BLAS left alone) where none does. Numba's OpenMP workers and
    # OpenBLAS's threads both busy-wait after their work; on a 2-core machine a plan that
    # alternated parallel kernels and BLAS calls had each pool waiting for the other's spinning
    # threads (about 8 ms, a scheduler slice, per kernel: a TinyGPT step took 440 ms instead of
    # 40). One pool, Numba's, runs both the kernels and the products' pieces (the comment
    # above BLAS_KINDS).
    blas_threads: int | None = None
    # Steps run products in pieces or depthwise convolutions on Numba's threads (lowering/cpu/team.py).
    team: bool = False
    # (shape, NumPy dtype, aligned) -> a new output array; the runtime's buffer pool.
    allocate: Callable = field(default=allocate_output, repr=False)
    free_states: list = field(default_factory=list, repr=False)  # RunStates not in use by a run
    new_outputs: list = field(default=None, repr=False)  # (pos, shape, NumPy dtype, aligned) made per run
    bindings: dict = field(default=None, repr=False)  # run state per binding of the size symbols
    _symbolic_entries: list = field(default=None, repr=False)
    _symbolic_steps: list = field(default=None, repr=False)
    _sym_values: dict = field(default=None, repr=False)  # poly -> Sym of the parts above
    _layouts: dict = field(default_factory=dict, repr=False)  # temporaries' shapes -> _Binding.layout
    _marked: bool = field(default=False, repr=False)  # matmul operands marked (_mark_pooled_operands)
    # Runs after which the plan's kernels and products run as native segments (0: never); where
    # their files go (lowering/cpu/native.py). ``native``: the steps with segments, once made
    # (False: none to make); a plan of symbolic sizes keeps them per binding.
    native_after: int = 0
    native_background: bool = False  # compile them in a worker process (native.NativeSegment.load)
    cache_dir: object = field(default=None, repr=False)
    native: object = field(default=None, repr=False)
    runs: int = 0

    device = "cpu"
    concurrent_runs = True  # runs may overlap (lazyvic.runtime.executor): see the module docstring

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, KernelStep)]

    @cached_property
    def parallel(self) -> bool:
        """Whether a kernel of the plan (or a step's products in pieces, lowering/cpu/team.py)
        runs on Numba's thread pool (its threading layer decides whether two such plans may
        run at once: ``lazyvic.runtime.executor``)."""
        return self.team or any(isinstance(s, KernelStep) and s.parallel for s in self.steps)

    def run(self, inputs: list, scalars: list, debug: int = 0, sizes: tuple = (), observe=None) -> list:
        """Run the plan: ``inputs`` per input slot (C-contiguous NumPy arrays), ``scalars`` per
        scalar slot (Python numbers); for a plan lowered for symbolic sizes, ``sizes`` gives the
        value of each of its ``symbols`` (its guards must hold: the plan cache checks them).
        Returns per trace output a NumPy array the caller owns. ``debug >= 4`` prints each
        step's time; ``observe(step, env, entries)``, if given, is called after each step (the
        checking mode, ``runtime/check.py``). Thread-safe (see the module docstring)."""
        if not self._marked:
            self._mark_pooled_operands()
        if self.new_outputs is None and not self.symbols:
            # Outputs computed by the plan get new arrays at each run; BLAS writes some of them.
            # (Two threads may both compute this at a first run: the same list.)
            self.new_outputs = [
                (pos, self.entries[pos].shape, dtype.np, optable.OPS[self.entries[pos].op].kind in BLAS_KINDS)
                for kind, pos, dtype in self.outputs
                if kind == "buffer" and pos not in self.memory.slot_of
            ]
        self.runs += 1
        free = self.free_states
        try:
            state = free.pop()  # atomic: no two runs get the same state
        except IndexError:  # a first run, or every state in use by runs in other threads
            state = self._new_state()
        # While other processes are busy, the parallel kernels run on the calling thread too, as
        # the team's steps do (lowering/cpu/load.py): each parallel region otherwise waited for
        # a thread on a core another process held (the MNIST CNN training step: 96-132 ms
        # against 69 with another process busy, 42 quiet). Their chunks are fixed by the sizes,
        # so the bits are the same on one thread (numba.set_num_threads is per calling thread).
        threads = numba.get_num_threads() if self.parallel and load.other_load() else 1
        if threads > 1:
            numba.set_num_threads(1)
        if self.blas_threads is not None:
            blas_threads.limit(self.blas_threads)
        try:
            return self._run(state, inputs, scalars, debug, sizes, observe)
        finally:
            if self.blas_threads is not None:
                blas_threads.restore()
            if threads > 1:
                numba.set_num_threads(threads)
            if len(free) < MAX_FREE_RUN_STATES:
                free.append(state)

    def _mark_pooled_operands(self) -> None:
        """Tell each matrix product and recurrent loop which of its operands are pooled
        temporaries (MatmulStep, RecurrentStep)."""
        pooled = self.memory.slot_of
        for st in self.steps:
            if isinstance(st, MatmulStep):
                st.pooled = tuple(c.kind == "buffer" and c.base in pooled for c in (st.a, st.b))
            elif isinstance(st, RecurrentStep):
                st.pooled = tuple(c.kind == "buffer" and c.base in pooled for c in st.args)
        self._marked = True

    def _new_state(self) -> RunState:
        """A set of temporaries for one run: the memory plan's slots, and views of them."""
        mem = self.memory
        if self.symbols:  # storage sized at the first binding it runs (see _bound_views)
            return RunState([], None, None)
        pool = [aligned_empty((n,), np.uint8) for n in mem.slot_bytes]
        env, flat = self._layout(self.entries, pool)
        return RunState(pool, env, flat)

    def _layout(self, entries, pool) -> tuple:
        """The environment's pooled temporaries, shaped and flat views of ``pool``, for
        ``entries`` with concrete shapes."""
        mem = self.memory
        n = len(entries)
        env, flat = [None] * n, [None] * n
        for pos, slot in mem.slot_of.items():
            e = entries[pos]
            dtype = e.dtype
            f = pool[slot][: math.prod(e.shape) * dtype.itemsize].view(dtype.np)
            env[pos] = f.reshape(e.shape)
            flat[pos] = f.view(_U16) if dtype.np in dt.HALF_NP else f
        return env, flat

    def _bound(self, sizes: tuple) -> _Binding:
        """The plan made concrete for one binding of its size symbols (the last few kept)."""
        b = self.bindings.get(sizes) if self.bindings is not None else None
        if b is not None:
            return b
        with _binding_lock:
            if self.bindings is None:
                self._symbolic_parts()
                self.bindings = {}
            b = self.bindings.get(sizes)
            if b is not None:
                return b
            env = dict(zip(self.symbols, sizes))
            vals = {poly: sym.evaluate(env) for poly, sym in self._sym_values.items()}
            entries = list(self.entries)
            for pos, shape in self._symbolic_entries:
                e = entries[pos]  # (e._replace(shape=...) in a third of its time)
                entries[pos] = tuple.__new__(type(e), (*e[:_SHAPE], shape(vals), *e[_SHAPE + 1 :]))
            steps = list(self.steps)
            for k, fields in self._symbolic_steps:
                steps[k] = _replaced(steps[k], {name: make(vals) for name, make in fields})
            # Outputs computed by the plan get new arrays at each run; BLAS writes some of them.
            new_outputs = [
                (pos, entries[pos].shape, dtype.np, optable.OPS[entries[pos].op].kind in BLAS_KINDS)
                for kind, pos, dtype in self.outputs
                if kind == "buffer" and pos not in self.memory.slot_of
            ]
            # The slots' sizes from the entries made concrete above (no symbolic products).
            b = _Binding(entries, steps, new_outputs, slot_sizes(self.memory, entries, env))
            # Bindings whose temporaries have the same shapes share their views (a slice's
            # moving start is a symbol of its own: every step of a word_language_model loop
            # was a new binding, and made its 126 views again, 0.2 ms).
            shapes = tuple(entries[pos].shape for pos in self.memory.slot_of)
            if len(self._layouts) >= 4 * MAX_BINDINGS:
                self._layouts.clear()
            b.layout = self._layouts.setdefault(shapes, next(_layout_ids))
            if len(self.bindings) >= MAX_BINDINGS:
                self.bindings.pop(next(iter(self.bindings)))
            self.bindings[sizes] = b
            return b

    def _bound_views(self, state: RunState, sizes: tuple, b: _Binding) -> tuple:
        """The environment of ``state``'s storage for one binding: the pool grows to the largest
        binding it ran (the views of a smaller pool are dropped), views are kept per layout
        (bindings whose temporaries have the same shapes share them)."""
        pool = state.pool  # (aligned_empty's arrays: nbytes is the size asked for, alignment aside)
        if len(pool) != len(b.needed) or any(n > p.nbytes for n, p in zip(b.needed, pool)):
            state.pool = [
                p if k < len(pool) and n <= p.nbytes else aligned_empty((n,), np.uint8)
                for k, (n, p) in enumerate(zip(b.needed, pool + [None] * len(b.needed)))
            ]
            state.views = {}
        views = state.views.get(b.layout)
        if views is None:
            if len(state.views) >= MAX_BINDINGS:
                state.views.pop(next(iter(state.views)))
            views = state.views[b.layout] = self._layout(b.entries, state.pool)
        return views

    def _symbolic_parts(self) -> None:
        """Which entries (pooled temporaries and outputs) and which steps have symbolic sizes:
        the parts a new binding makes concrete, each with its ``symbolic.substituter`` (the
        Syms they hold in ``_sym_values``, evaluated once per binding)."""
        found: dict = {}
        wanted = set(self.memory.slot_of) | {pos for kind, pos, _ in self.outputs if kind == "buffer"}
        self._symbolic_entries = [
            (p, symbolic.substituter(self.entries[p].shape, found))
            for p in sorted(wanted)
            if any(isinstance(d, symbolic.Sym) for d in self.entries[p].shape)
        ]
        steps = []
        for k, st in enumerate(self.steps):
            fields = [(name, symbolic.substituter(getattr(st, name), found)) for name in _symbolic_fields(st)]
            if fields:
                steps.append((k, fields))
        self._symbolic_steps = steps
        self._sym_values = found

    def _outputs(self, state: RunState, new_outputs: list, env: list, flat: list) -> None:
        """The arrays this run writes its outputs into: small ones made two runs ago by this run
        state are used again when nothing refers to them any more (a training step's parameters,
        gradients and optimizer state of the step before last: no allocation, and memory still in
        cache); others are new arrays from the runtime's allocator."""
        old, made = state.recent[0], []
        for k, (pos, shape, dtype, aligned) in enumerate(new_outputs):
            if env[pos] is not None:  # an input handed back as an output
                made.append(None)
                continue
            a = old[k] if old is not None else None
            if a is None or not _unheld(a):
                a = self.allocate(shape, dtype, aligned)
            env[pos] = a
            flat[pos] = kernel_view(a)
            made.append(a if a.nbytes < RECYCLE_MAX_BYTES else None)
        if old is not None:
            old.clear()  # (before ``made`` is kept: no reference of ours outlives this run's)
        state.recent = [state.recent[1], made]

    def _native(self, holder, steps: list, entries: list, flat: list, scalars: list, debug: int):
        """``holder``'s (the plan's, or a binding's) steps with native segments, made and compiled
        once (False when there are none to make)."""
        with _native_lock:
            if holder.native is None:
                segs = native.segments(steps, entries, self.cache_dir)
                for seg in segs or ():
                    if isinstance(seg, native.NativeSegment):
                        seg.load(flat, scalars, self.stats, debug, self.native_background)
                holder.native = segs or False
        return holder.native

    def _run(self, state: RunState, inputs: list, scalars: list, debug: int, sizes: tuple = (), observe=None) -> list:
        if self.symbols:
            holder = b = self._bound(tuple(sizes))
            b.runs += 1  # (not atomic: two threads may count one run; only the time of making segments moves)
            env, flat = self._bound_views(state, tuple(sizes), b)
            env, flat, new_outputs, steps, entries = env[:], flat[:], b.new_outputs, b.steps, b.entries
        else:
            holder = self
            env, flat, new_outputs, steps, entries = (
                state.env[:],
                state.flat[:],
                self.new_outputs,
                self.steps,
                self.entries,
            )
        for pos, slot in self.input_pos:
            a = inputs[slot]
            env[pos] = a
            flat[pos] = kernel_view(a)
        if self.symbols:
            for pos, shape, dtype, aligned in new_outputs:
                if env[pos] is None:  # not an input handed back as an output
                    a = self.allocate(shape, dtype, aligned)
                    env[pos] = a
                    flat[pos] = kernel_view(a)
        else:
            self._outputs(state, new_outputs, env, flat)
        if observe is not None:
            for step in steps:
                step(env, flat, scalars)
                observe(step, env, entries)
        elif debug >= 4:  # each step's time: the steps one by one, never native segments
            for step in steps:
                t0 = time.perf_counter()
                step(env, flat, scalars)
                print(f"[lazyvic]   {step.name}: {1e6 * (time.perf_counter() - t0):.1f} us", file=sys.stderr)
        elif holder.native or (holder.native is None and 0 < self.native_after <= holder.runs):
            # Counted per binding: a plan of symbolic sizes run once at each of many sizes (a
            # context growing by a token per call) would make and load segments that run once
            # (TinyGPT's forward: 7.5 ms per token without them, 10.4 with).
            for step in holder.native or self._native(holder, steps, entries, flat, scalars, debug) or steps:
                step(env, flat, scalars)
        else:
            for step in steps:
                step(env, flat, scalars)
        outs, given = [], set()
        for kind, pos, dtype in self.outputs:
            if kind == "scalar":
                outs.append(np.array(scalars[pos], dtype=dtype.np))
            elif entries[pos].op == "buffer" or pos in given:
                # An output folded onto an input, or two outputs merged by CSE: each tensor
                # gets storage of its own.
                outs.append(np.array(env[pos], copy=True))
            else:
                outs.append(env[pos])
                given.add(pos)
        return outs
