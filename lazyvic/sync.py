"""The live-tensor registry and the sync: cut -> plan-cache key -> run (one owner).

As PyTorch's ``LazyGraphExecutor``: every tensor made pending is registered here (weakly); a
sync point (``Tensor.numpy()``, ``.item()``, ``print``, :func:`sync`) cuts the pending graph of
the requested tensors *and* every other live pending tensor into one trace
(``lazyvic.trace.cut``), finds or compiles its plan in the plan cache and runs it
(``lazyvic.runtime.run``), then writes the results back into the nodes. A size limit on the
pending graph (``LAZYVIC_MAX_PENDING``) forces a sync, so memory stays bounded.

Threads: the registry is per thread. A sync realizes the tensors it is asked for (whichever
thread recorded them) and the *calling thread's* other live pending tensors, never another
thread's; the size limit counts the calling thread's pending tensors. The cut and the write-back
hold one process-wide lock (:data:`graph_lock`: a node is never read half-realized), the plan
runs outside it, so threads that train their own models sync and run at the same time. A pending
tensor synced by two threads at once may be computed by both (with the same result); the first
write-back wins.

Finding the plan: the nodes the calling thread recorded since its last sync hashed their
structure when they were made (its tape, ``lazyvic.trace.tape``). A sync whose tape is whole and
whose roots are all on it looks its plan up by the tape's key (hash, node count, the roots'
positions, flags) without cutting (``runtime.run_hashed``); the first sync of a tape key cuts as
before and teaches the plan cache where that trace's inputs sit among the tape's leaves. A tape
that is broken, or a plan not compiled yet, goes through the cut.

A failed run (an index out of range found while the plan runs) is retried with only the
tensors the sync was asked for: a sync of ``b`` does not fail because some other pending
tensor ``a`` has a bad index; ``a`` stays pending, is no longer swept into later syncs, and
raises at its own sync.

This module works on the tensors' nodes and never builds a tensor: it sits below
``lazyvic.tensor``, which calls it.
"""

from __future__ import annotations

import threading
import weakref

from lazyvic.runtime import buffers, plan_cache, run, run_hashed
from lazyvic.runtime.config import config
from lazyvic.trace import scope as _scope
from lazyvic.trace.cut import cut
from lazyvic.trace.tape import Tape

# Held while a pending graph is cut and while its results are written back into the nodes.
graph_lock = threading.Lock()


class LiveTensors(threading.local):
    """Weak references to the tensors the calling thread made pending since its last sync, in
    creation order (one list per thread: a ``threading.local``).

    A list of ``weakref.ref`` costs a fraction of a WeakValueDictionary per op; a tensor
    updated in place is added again and counted once at the cut.
    """

    def __init__(self):
        self.refs: list = []
        self.traces = 0  # traces this thread's syncs have run (see traces_run)

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
        # A new tape: what is recorded from now on is hashed afresh (the old one lets its
        # leaves go: leaf nodes and their tape refer to each other).
        state = _scope.local.state
        old = state.tape
        old.broken = True
        old.leaves = []
        state.tape = Tape()


live = LiveTensors()


def track(t) -> None:
    """Register a tensor whose node was just made pending; past ``config.max_pending`` pending
    tensors in this thread since its last sync, sync now (the size limit of the pending graph)."""
    refs = live.refs  # one thread-local read per op
    refs.append(weakref.ref(t))
    if len(refs) > config.max_pending:
        sync()


def pending_count() -> int:
    """The tensors the calling thread made pending since its last sync (what the size limit counts)."""
    return len(live.refs)


def traces_run() -> int:
    """The traces the calling thread's syncs have run so far: whether a call synced, unaffected
    by other threads (``metrics.snapshot()["traces"]`` counts every thread's)."""
    return live.traces


def sync(*tensors) -> None:
    """Sync point ("mark step"): realize ``tensors`` and every other live pending tensor of the
    calling thread in one trace.

    When the run fails (an index out of range found while the plan runs) and other pending
    tensors were swept in, the tensors asked for are realized alone; only their own failure
    raises (see the module docstring).
    """
    asked = [t._node for t in tensors if t._node.pending]
    roots = asked + [t._node for t in live.pending()]
    if not roots:
        live.clear()
        return
    try:
        tape = _scope.local.state.tape
        if tape.broken or not _run_taped(tape, roots):
            _realize(roots)
    except Exception:
        # The failing tensors stay pending (a sync on one of them raises again), but they are
        # no longer swept into every later sync, so one bad op does not poison the session.
        live.clear()
        asked = [n for n in asked if n.pending]
        if not asked or len(set(roots)) == len(set(asked)):
            raise
        _realize(asked)  # what was asked for, without the tensors swept in: raises on its own failure
    live.clear()


def _run_taped(tape: Tape, roots: list) -> bool:
    """Run ``roots`` (all pending) through the plan found by ``tape``'s key; on the first sync of
    that key cut, run and teach it to the plan cache. False (nothing run) when a root is not on the
    tape."""
    out_nodes = list(dict.fromkeys(roots))  # the cut's outputs: the roots without duplicates, in order
    positions = []
    for n in out_nodes:
        if n.tape is not tape:
            return False
        positions.append(n.tpos)
    key = (tape.h, tape.n, len(tape.leaves), tuple(positions), trace_flags())
    arrays = run_hashed(key, tape.leaves)
    if arrays is None:
        input_nodes, scalar_nodes = [], []
        with graph_lock:
            trace, inputs, scalars, cut_nodes = cut(out_nodes, trace_flags(), scalar_nodes, input_nodes)
        if len(cut_nodes) != len(out_nodes):
            return False  # another thread realized a root meanwhile
        slots = tape.leaf_slots(input_nodes, scalar_nodes)
        if config.check:
            _check_tape_key(key, trace, slots)
        arrays = run(trace, inputs, scalars)
        entry = plan_cache.last
        if slots is not None and entry is not None and entry.key == trace.key and not tape.broken:
            plan_cache.learn(key, entry, *slots)
    _write_back(out_nodes, arrays, "cpu")
    return True


def _write_back(out_nodes: list, arrays: list, device: str) -> None:
    """The results of a run into its output nodes (now buffers on ``device``)."""
    live.traces += 1
    with graph_lock:
        for node, array in zip(out_nodes, arrays):
            if node.op == "buffer":
                continue  # realized by another thread's sync meanwhile: the first write wins
            node.realize(array)
            node.device = device
            if device == "cpu":
                buffers.track(node, array)


def _check_tape_key(key, trace, slots) -> None:
    """``LAZYVIC_CHECK``: a tape key already learned must name this trace and these slots (else
    two structures share a 64-bit hash, and the lookup by tape would have run the wrong plan)."""
    known = plan_cache.by_tape.get(key)
    if known is None or slots is None:
        return
    entry, input_leaves, scalar_leaves = known
    if entry.key != trace.key or (input_leaves, scalar_leaves) != slots:
        raise RuntimeError(
            "lazyvic internal error (LAZYVIC_CHECK): two different traces share the tape key "
            f"{key[:3]}; please report it"
        )


def _realize(roots: list) -> None:
    # One trace per device (no pending graph spans two: copies are eager). CUDA first: a
    # constant without a device (made of Python scalars only) that a CUDA op reads is then
    # computed inside the CUDA trace, not copied there; if it is itself synced, it is
    # computed (again) on the CPU.
    if all(n.device != "cuda" for n in roots):
        groups = [("cpu", roots)]
    else:
        groups = [(d, [n for n in roots if (n.device or "cpu") == d]) for d in ("cuda", "cpu")]
    for device, group in groups:
        with graph_lock:
            # (The cut skips roots another thread has realized meanwhile.)
            trace, inputs, scalars, out_nodes = cut(group, trace_flags(device))
        if not out_nodes:
            continue
        _write_back(out_nodes, run(trace, inputs, scalars), device)


def trace_flags(device: str = "cpu") -> tuple:
    """The flags that enter every trace key: the device and the mode."""
    return (device, "deterministic" if config.deterministic else "default")


def use_deterministic_algorithms(mode: bool) -> None:
    """Deterministic mode (PyTorch's name): see ``LAZYVIC_DETERMINISTIC`` in
    :mod:`lazyvic.runtime.config` — every plan compiled at first sight, fixed reduction order."""
    config.deterministic = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return config.deterministic
