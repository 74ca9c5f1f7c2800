"""The compile loop, one for every backend: trace -> passes -> fusion -> kernels -> steps -> Plan.

:func:`compile_plan` lowers a canonical trace for a backend (``lowering/backend.py``):

1. the graph passes (``lowering/passes.py``) over the trace's named entries;
2. fusion (``lowering/fusion.py``) and one kernel source per fused group from the backend's
   code generator; a group that cannot be emitted without a materialized intermediate raises
   NeedsMaterialize and the fusion is planned again (:func:`lower`);
3. the backend's steps: for each kernel group its kernel (and the range checks of the
   indices it gathers with), for each library group (matmul, conv2d, ...) the backend's
   library step, or its NumPy reference step when it has none (the plan's ``fallbacks``);
4. the memory plan of the steps (``lowering/memory.py``) and where inputs and outputs go
   (:func:`plan_layout`), then the backend's Plan.

``LAZYVIC_DEBUG=2`` prints each kernel's group, ``3`` its source.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from lazyvic import ops as optable
from lazyvic.lowering.fusion import NeedsMaterialize, is_library, plan_groups
from lazyvic.lowering.memory import plan_memory
from lazyvic.lowering.passes import simplify, transpose_matmuls
from lazyvic.trace import symbolic

MAX_REPLANS = 200


class Operand(NamedTuple):
    """An operand of a library step, read through NumPy views: its base (a buffer's entry
    position or a scalar's slot) and the movement ops applied to it, innermost first."""

    kind: str  # "buffer" | "scalar"
    base: int
    ops: list  # [(OpDef, attrs)]
    dtype: object  # NumPy dtype


def operand(entries, j: int, links) -> Operand:
    """Node j as an :class:`Operand`; ``links(j)`` says whether node j is a movement op read
    through a view (the walk stops at the first that is not)."""
    ops = []
    while links(j):
        e = entries[j]
        ops.append((optable.OPS[e.op], e.attrs))
        j = e.inputs[0]
    base = entries[j]
    if base.op == "scalar":
        return Operand("scalar", base.slot, list(reversed(ops)), base.dtype.np)
    return Operand("buffer", j, list(reversed(ops)), base.dtype.np)


def is_movement(entries):
    """``links`` for :func:`operand`: every movement op is read through a view."""
    return lambda j: optable.OPS[entries[j].op].kind == "movement"


@dataclass
class Lowered:
    """A trace after the backend-neutral half of lowering (see :func:`lower`); what a backend's
    step builders read."""

    trace: object
    entries: list  # named entries after the graph passes (lazyvic.trace.entry.Entry)
    outputs: list  # entry positions of the trace's outputs
    groups: list  # FusionGroups in run order
    materialized: set
    chain_nodes: set  # movement nodes read by library steps through views
    sources: dict  # group root -> the backend's kernel source (library groups have none)
    scalar_dtypes: dict  # scalar slot -> DType
    cache_dir: object
    debug: int
    stats: dict
    # group root -> the buffer it is written over (plan_in_place; the memory plan shares their slot)
    inplace: dict = field(default_factory=dict)


def _force(forced: set, e: NeedsMaterialize) -> None:
    if e.node in forced:
        raise RuntimeError(f"lowering: could not materialize node {e.node} ({e.why})")
    forced.add(e.node)


def lower(trace, generate, cache_dir=None, debug: int = 0, named=None) -> Lowered:
    """Passes, fusion and one kernel source per fused group.

    ``generate(entries, m, group)`` is a backend's code generator; a group it cannot emit
    without a materialized intermediate raises NeedsMaterialize and the fusion is planned
    again, with every node asked for in one round materialized at once. ``named``: the trace's
    entries with symbolic sizes (``lazyvic.trace.family.symbolize``) for a plan that serves every
    size its guards admit; by default the trace's own (``trace.named``).
    """
    # Folding first: a product transposed twice (a weight's gradient g^T a, transposed by the VJP
    # of w.T and back) is the product itself, not a transposed product read transposed.
    folded = simplify(list(trace.named if named is None else named), list(trace.outputs))
    entries, outputs = simplify(*transpose_matmuls(*folded))
    forced: set = set()
    made: dict = {}  # _source_key -> the kernel source generated for it in an earlier round
    for _ in range(MAX_REPLANS):
        try:
            groups, m, chain_nodes = plan_groups(entries, outputs, frozenset(forced))
        except NeedsMaterialize as e:
            _force(forced, e)
            continue
        # Generate every kernel, collecting all the nodes that need a buffer, then plan
        # again once (not once per node: a large training step would plan many times). A
        # group that a new round left as it was keeps the source made for it.
        sources, wanted = {}, []
        for g in groups:
            if is_library(entries, g.root):
                continue
            key = _source_key(entries, m, g)
            ks = made.get(key)
            if ks is None:
                try:
                    ks = made[key] = generate(entries, m, g)
                except NeedsMaterialize as e:
                    wanted.append(e)
                    continue
            sources[g.root] = ks
        if not wanted:
            break
        for e in {e.node: e for e in wanted}.values():
            _force(forced, e)
    else:
        raise RuntimeError("lowering: fusion did not converge")
    scalar_dtypes = {e.slot: e.dtype for e in entries if e.op == "scalar"}
    return Lowered(trace, entries, outputs, groups, m, chain_nodes, sources, scalar_dtypes, cache_dir, debug, {})


def _library_operands(lowered: Lowered, group) -> list:
    """The operands of a library group's step: its inputs, read through the views of
    ``lowered.chain_nodes``."""
    entries = lowered.entries
    return [operand(entries, j, lowered.chain_nodes.__contains__) for j in entries[group.root].inputs]


def _reads(lowered: Lowered, group) -> set:
    """The buffers the steps of ``group`` read: its kernel's, or its library step's operands'."""
    ks = lowered.sources.get(group.root)
    if ks is not None:
        return set(ks.buffers)
    return {c.base for c in _library_operands(lowered, group) if c.kind == "buffer"}


def plan_in_place(lowered: Lowered, generate) -> None:
    """Let elementwise kernels write over a buffer that dies in them (a product's output
    read by its bias add, an activation's input): ``lowered.inplace[root] = buffer`` and the
    kernel made again by ``generate(entries, m, group, alias)`` to read that buffer from its
    output. Only where the buffer is one of the kernel's ``identity_reads`` (read only at the
    element the loop stores, same dtype and shape), both are pooled temporaries (not inputs
    or outputs of the plan), and no later step reads the buffer. The memory plan then gives
    both one slot (``plan_memory``'s ``inplace``): one buffer fewer, and the store goes where
    the loaded element already is in cache. As XLA's buffer assignment shares an operand's
    buffer with an elementwise op's output. (A kernel with the two as separate arguments that
    alias runs its scalar loop: LLVM's runtime overlap check fails; 150 us against 40 for a
    (700, 512) bias add.)"""
    entries, groups = lowered.entries, lowered.groups
    pooled = {g.root for g in groups} | {x for g in groups for x in g.extra_roots}
    pooled -= set(lowered.outputs)
    pooled -= {i for i, e in enumerate(entries) if e.op == "buffer"}
    last: dict = {}
    for s, g in enumerate(groups):
        for p in _reads(lowered, g):
            last[p] = s
    taken: set = set()
    for s, g in enumerate(groups):
        ks = lowered.sources.get(g.root)
        if ks is None or g.root not in pooled:
            continue
        for q in ks.identity_reads:
            if q in pooled and q not in taken and last.get(q) == s:
                lowered.sources[g.root] = generate(entries, lowered.materialized, g, alias=frozenset([q]))
                lowered.inplace[g.root] = q
                taken.add(q)
                break
    if lowered.inplace:
        lowered.stats["kernels_in_place"] = len(lowered.inplace)


def _check_in_place(lowered: Lowered, steps: list) -> None:
    """Each in-place kernel's buffer is read by no step after it (what plan_in_place read
    off the groups, checked against the steps built): else the lowering is wrong, never the
    results."""
    # One pass over the steps (a search per in-place kernel was quadratic: 5 of 24 s lowering an
    # unrolled 100-step LSTMCell loop, 834 kernels in place among 3,600).
    first_write: dict = {}
    last_read: dict = {}
    for k, st in enumerate(steps):
        for w in st.writes():
            first_write.setdefault(w, k)
        for q in st.reads():
            last_read[q] = k
    for root, q in lowered.inplace.items():
        at = first_write[root]
        if last_read.get(q, -1) > at or q in steps[at].writes():
            later = [st.name for st in steps[at + 1 :] if q in st.reads()]
            raise RuntimeError(f"lowering: kernel writing node {root} over node {q}, read later by {later}")


def _source_key(entries, m, group) -> tuple:
    """What a group's generated kernel depends on besides the (fixed) entries: the group, and
    which of the nodes it computes and reads have buffers. Between two rounds of planning a
    group with the same key gets the same source: the TinyGPT training step planned four times
    generated 505 kernel sources for about 130 kernels (a third of its lowering time)."""
    nodes = {group.root, *group.members, *group.stages, *group.extra_roots}
    near = nodes.union(*(entries[i].inputs for i in nodes))
    return group, frozenset(near.intersection(m))


def gathers(lowered: Lowered, group) -> list:
    """The inlined gathers of a kernel group, whose indices need a range check before it runs:
    ``(op, index operand, index shape, size of the gathered dimension, asked_by)`` each
    (``asked_by``: the op a class index is checked for, named in the error; or None)."""
    entries = lowered.entries
    out = []
    for j in group.members:
        e = entries[j]
        if optable.OPS[e.op].kind == "gather":
            x, index = e.inputs
            chain = operand(entries, index, is_movement(entries))
            out.append((e.op, chain, entries[index].shape, entries[x].shape[e.attrs["dim"]], e.attrs.get("asked_by")))
    return out


def plan_layout(lowered: Lowered, steps: list) -> tuple:
    """What every backend's plan needs once its steps are built: ``(out_specs, input_pos,
    memory)`` — per trace output ``("scalar", slot, dtype)`` or ``("buffer", pos, dtype)``,
    the ``(entry position, input slot)`` of each input, and the memory plan of the steps."""
    entries, outputs, groups = lowered.entries, lowered.outputs, lowered.groups
    out_specs = []
    for o in outputs:
        e = entries[o]
        if e.op == "scalar":
            out_specs.append(("scalar", e.slot, e.dtype))
        else:
            out_specs.append(("buffer", o, e.dtype))
    input_pos = [(i, e.slot) for i, e in enumerate(entries) if e.op == "buffer"]
    out_set = {o for o in outputs if not entries[o].is_input}
    temporaries = {g.root for g in groups} | {x for g in groups for x in g.extra_roots}
    temporaries -= out_set
    steps_io = [(s.writes(), s.reads()) for s in steps]
    memory = plan_memory(
        entries,
        steps_io,
        temporaries,
        out_set,
        {p for p, _ in input_pos},
        frozenset(p for p, slot in input_pos if slot in lowered.trace.param_slots),
        lowered.inplace,
    )
    return out_specs, input_pos, memory


def compile_plan(trace, backend, cache_dir, debug: int, named=None, symbols=()):
    """Lower canonical ``trace`` to ``backend``'s Plan (see the module docstring).

    For a plan that serves every size of a family of traces, ``named`` are the trace's entries
    with symbolic sizes (``lazyvic.trace.family.symbolize``) and ``symbols`` the names of their
    size symbols, in the order a run binds them; the plan then holds ``guards``: the
    predicates over the symbols its lowering relied on (``lazyvic.trace.symbolic``)."""
    # Code generation recurses along fused chains: a 1,000-op chain is a few thousand frames.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(trace.entries) + 1000))
    try:
        if named is None:
            return _compile(trace, backend, cache_dir, debug)
        with symbolic.recording() as guards:
            plan = _compile(trace, backend, cache_dir, debug, named)
        plan.bind_symbols(tuple(symbols), tuple(guards))
        return plan
    finally:
        sys.setrecursionlimit(limit)


def _compile(trace, backend, cache_dir, debug: int, named=None):
    t0 = time.perf_counter()
    lowered = lower(trace, backend.generate, cache_dir, debug, named)
    entries = lowered.entries
    backend.prepare(lowered)
    steps, fallbacks = [], []
    for g in lowered.groups:
        ks = lowered.sources.get(g.root)
        if ks is not None:
            steps.extend(backend.kernel_steps(lowered, g, ks))
            if debug >= 2:
                print(f"[lazyvic] {backend.describe_kernel(ks, g)}", file=sys.stderr)
            if debug >= 3:
                print(ks.source, file=sys.stderr)
            continue
        e = entries[g.root]
        args = _library_operands(lowered, g)
        step = backend.library_step(lowered, g, args)
        if step is None:
            step = backend.reference_step(lowered, g, args)
            fallbacks.append(e.op)
        steps.append(step)
    _check_in_place(lowered, steps)
    out_specs, input_pos, memory = plan_layout(lowered, steps)
    name = backend.plan_prefix + hashlib.sha1(repr(trace.key).encode()).hexdigest()[:12]
    if named is not None:
        name += "_sym"
    return backend.make_plan(
        lowered, name, steps, input_pos, out_specs, memory, tuple(fallbacks), time.perf_counter() - t0
    )
