"""Memory plan: liveness over the step sequence; intermediates share pooled storage.

Each intermediate buffer lives from the step that writes it to the last step
that reads it. Buffers whose lifetimes do not overlap share a slot of the pool
(best fit by size); the pool is allocated once per plan and reused by every run,
so a cached plan allocates nothing but its outputs in steady state. An elementwise kernel
that reads a buffer only at the element it stores, where that buffer dies, takes the buffer's
slot (``inplace``, decided by ``pipeline.plan_in_place``).

Pools and BLAS outputs start on a 64-byte boundary (:func:`aligned_empty`): OpenBLAS ran
about 800x slower into a 16-byte aligned output (measured here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lazyvic.trace import symbolic

ALIGN = 64  # slot sizes are rounded up to, and arrays start on, this many bytes


def aligned_view(raw: np.ndarray, n: int, shape, dtype) -> np.ndarray:
    """The ``n`` bytes of uint8 array ``raw`` from its first 64-byte boundary, as ``shape``/``dtype``."""
    start = (-raw.__array_interface__["data"][0]) % ALIGN
    return raw[start : start + n].view(dtype).reshape(shape)


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on a 64-byte boundary.

    Its ``base`` is the raw uint8 allocation (NumPy points every view at the owner).
    """
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    return aligned_view(np.empty(n + ALIGN, dtype=np.uint8), n, shape, dtype)


@dataclass(frozen=True)
class MemoryPlan:
    slot_of: dict  # entry position -> pool slot
    slot_bytes: tuple  # size of each pool slot
    input_bytes: int  # inputs other than parameters
    parameter_bytes: int  # inputs that hold nn.Parameter values
    output_bytes: int
    temporary_bytes: int  # sum of the pool slots
    unshared_bytes: int  # what the temporaries would take without sharing
    # Entry positions in each slot. With symbolic sizes the byte counts above are those of the
    # sizes the plan was lowered with (their hints), and a run sizes each slot for its binding:
    # the largest of its members (see slot_sizes).
    slot_members: tuple = ()
    # Scratch the plan's library steps use during a run besides the pool: im2col columns, their
    # product, zero-bordered copies of inputs (lowering/cpu/steps.ConvStep and kin), at the
    # sizes the plan was lowered with. Each step's scratch lives while the plan is cached.
    scratch_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return self.input_bytes + self.parameter_bytes + self.output_bytes + self.temporary_bytes + self.scratch_bytes

    def as_dict(self) -> dict:
        return {
            "inputs": self.input_bytes,
            "parameters": self.parameter_bytes,
            "outputs": self.output_bytes,
            "temporaries": self.temporary_bytes,
            "temporaries_unshared": self.unshared_bytes,
            "scratch": self.scratch_bytes,
            "peak": self.peak_bytes,
        }


def nbytes(entry):
    """Bytes of an entry's value: an int, or a Sym when its shape is symbolic."""
    return symbolic.prod(entry.shape) * entry.dtype.itemsize


def slot_sizes(memory: MemoryPlan, entries, env: dict) -> list:
    """Bytes each pool slot needs for binding ``env`` of a plan's size symbols (rounded up to
    ALIGN): the largest of the slot's members."""
    out = []
    for members in memory.slot_members:
        n = max(symbolic.evaluate(nbytes(entries[p]), env) for p in members)
        out.append((n + ALIGN - 1) // ALIGN * ALIGN)
    return out


def plan_memory(
    entries,
    steps_io: list,
    temporaries: set,
    outputs: set,
    inputs: set,
    parameters: frozenset = frozenset(),
    inplace: dict | None = None,
) -> MemoryPlan:
    """``steps_io``: per step, (positions written, positions read); ``parameters`` is the
    subset of ``inputs`` that holds parameter values; ``inplace`` maps a temporary to the
    temporary whose slot it must take (its writer reads the other last; see
    ``pipeline.plan_in_place``): a RuntimeError if that slot is not free then.

    Peak bytes are the planned upper bound of what one run holds at once: every input,
    parameter and output is alive for the whole run, plus the temporaries' pool.
    """
    first, last = {}, {}
    for s, (writes, reads) in enumerate(steps_io):
        for p in writes:
            first.setdefault(p, s)
            last.setdefault(p, s)
        for p in reads:
            last[p] = s
    inplace = inplace or {}
    for p, q in inplace.items():  # the kernel writing p reads q (from p's storage)
        last[q] = max(last.get(q, first.get(q, 0)), first.get(p, 0))
    order = sorted(temporaries, key=lambda p: (first.get(p, 0), p))
    # Sizes by their hints: sharing is decided for the sizes the plan is lowered with and stays
    # valid for any other binding (lifetimes do not depend on sizes); a run sizes each slot
    # for its own binding (slot_sizes).
    size_of = {p: symbolic.hint(nbytes(entries[p])) for p in set(order) | inputs | outputs}
    slot_of, slot_bytes, free_at, members = {}, [], [], []
    for p in order:
        size = (size_of[p] + ALIGN - 1) // ALIGN * ALIGN
        start = first.get(p, 0)
        best = None
        if p in inplace:
            best = slot_of.get(inplace[p])
            if best is None or free_at[best] != start or members[best][-1] != inplace[p]:
                raise RuntimeError(f"memory plan: node {p} cannot be written over node {inplace[p]}")
            slot_bytes[best] = max(slot_bytes[best], size)
        else:
            for k, (cap, busy_until) in enumerate(zip(slot_bytes, free_at)):
                if busy_until < start and cap >= size and (best is None or cap < slot_bytes[best]):
                    best = k
        if best is None:
            best = len(slot_bytes)
            slot_bytes.append(size)
            free_at.append(-1)
            members.append([])
        slot_of[p] = best
        members[best].append(p)
        free_at[best] = last.get(p, start)
    return MemoryPlan(
        slot_of=slot_of,
        slot_bytes=tuple(slot_bytes),
        input_bytes=sum(size_of[p] for p in inputs - parameters),
        parameter_bytes=sum(size_of[p] for p in parameters),
        output_bytes=sum(size_of[p] for p in outputs),
        temporary_bytes=sum(slot_bytes),
        unshared_bytes=sum(size_of[p] for p in temporaries),
        slot_members=tuple(tuple(m) for m in members),
    )
