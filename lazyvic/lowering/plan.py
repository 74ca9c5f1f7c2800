"""Plan: what the runtime executes for one trace key.

A plan is a sequence of steps over an environment of arrays indexed by entry
position: :class:`KernelStep` calls a generated Numba kernel,
:class:`MatmulStep` calls BLAS through NumPy's matmul into a pooled buffer, and
:class:`ReferenceStep` runs an op's NumPy reference (ops with no kernel yet:
these are the plan's reported fallbacks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lazyvic.errors import IndexError as LIndexError

# Products below this many flops run on one BLAS thread in plans with parallel kernels
# (a TinyGPT step's largest, 1024x128 @ 128x512, is 1.3e8).
SINGLE_THREAD_BLAS_MAX_FLOPS = 1 << 28


@dataclass
class KernelStep:
    name: str
    fn: object
    out: int
    buffers: tuple
    scalars: tuple  # (slot, NumPy scalar type) passed one by one
    packed: tuple = ()  # (NumPy dtype, slots): passed as one array each
    source: str = field(repr=False, default="")
    extra_outs: tuple = ()  # more outputs of the same loop
    parallel: bool = False  # runs on Numba's thread pool

    def reads(self):
        return self.buffers

    def writes(self):
        return (self.out,) + self.extra_outs

    def __call__(self, env, flat, scalars):
        self.fn(flat[self.out], *[flat[o] for o in self.extra_outs], *[flat[b] for b in self.buffers],
                *[t(scalars[s]) for s, t in self.scalars],
                *[np.array([scalars[s] for s in slots], dtype=d) for d, slots in self.packed])


def _view(env, scalars, chain):
    """An operand: a buffer (or a scalar input) with its movement ops applied as NumPy views."""
    kind, base, ops, dtype = chain
    a = env[base] if kind == "buffer" else np.asarray(scalars[base], dtype=dtype)
    for ref, attrs in ops:
        a = ref([a], attrs)
    return a


@dataclass
class MatmulStep:
    name: str
    out: int
    a: tuple  # ("buffer" | "scalar", position | slot, [(reference, attrs) movement ops], dtype)
    b: tuple
    k: int = 0  # inner dimension (for the plan's BLAS policy)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in (self.a, self.b) if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        np.matmul(_view(env, scalars, self.a), _view(env, scalars, self.b), out=env[self.out])


@dataclass
class ReferenceStep:
    name: str
    op: str
    out: int
    args: tuple  # operand chains, as MatmulStep's
    reference: object
    attrs: dict
    dtype: object

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in self.args if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        vals = [_view(env, scalars, c) for c in self.args]
        with np.errstate(all="ignore"):
            out = np.asarray(self.reference(vals, self.attrs), dtype=self.dtype.np)
        np.copyto(env[self.out], out)


@dataclass
class ScatterAddStep:
    """scatter_add through a compiled kernel (lowering/kernel_lib.scatter_add_into)."""

    name: str
    out: int
    args: tuple  # base, index, src operand chains, as MatmulStep's
    dim: int
    kernel: object

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in self.args if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        base, index, src = [_view(env, scalars, c) for c in self.args]
        out = env[self.out]
        np.copyto(out, base)
        bad = self.kernel(out, index, src, self.dim)
        if bad != -1:
            raise LIndexError(f"scatter_add: index {int(bad)} out of range for dimension of size "
                              f"{out.shape[self.dim]}")


@dataclass
class IndexCheckStep:
    """Range check of a gather index that a kernel reads without checking.

    The index was realized before the trace, but its data could have been changed
    through a shared ``.numpy()`` view since: check it on every run, before the kernel.
    """

    name: str
    index: tuple  # operand chain, as MatmulStep's
    size: int  # valid indices are 0 .. size - 1
    op: str
    out: object = None

    def writes(self):
        return ()

    def reads(self):
        return (self.index[1],)

    def __call__(self, env, flat, scalars):
        idx = _view(env, scalars, self.index)
        if idx.size and (idx.min() < 0 or idx.max() >= self.size):
            bad = idx[(idx < 0) | (idx >= self.size)].ravel()[0]
            raise LIndexError(f"{self.op}: index {int(bad)} out of range for dimension of size {self.size}")


@dataclass
class Plan:
    """A compiled plan: steps, their memory plan, and where inputs and outputs go."""

    name: str
    entries: list = field(repr=False)
    steps: list = field(repr=False)
    input_pos: list = field(repr=False)  # (entry position, input slot)
    outputs: list = field(repr=False)  # per trace output: ("buffer", pos) | ("scalar", slot)
    memory: object = None
    groups: list = field(default_factory=list, repr=False)
    fallbacks: tuple = ()
    stats: dict = field(default_factory=dict)
    # BLAS threads while the plan runs (None: leave BLAS alone); see single_thread_blas().
    blas_threads: int | None = None
    pool: list = field(default=None, repr=False)  # runtime state: set by the executor
    env_template: list = field(default=None, repr=False)
    flat_template: list = field(default=None, repr=False)

    def single_thread_blas(self) -> bool:
        """True when BLAS should run on one thread while this plan runs.

        Numba's OpenMP workers and OpenBLAS's threads both busy-wait after their work;
        on a 2-core machine a plan that alternates parallel kernels and BLAS calls had
        each pool waiting for the other's spinning threads (about 8 ms, a scheduler slice,
        per kernel: a TinyGPT step took 440 ms instead of 40). One pool at a time fixes it.
        Plans whose products are large keep multithreaded BLAS, where its speed-up is
        worth more than the contention costs.
        """
        if not any(isinstance(s, KernelStep) and s.parallel for s in self.steps):
            return False
        flops = [2 * math.prod(self.entries[s.out][3]) * s.k for s in self.steps if isinstance(s, MatmulStep)]
        return bool(flops) and max(flops) < SINGLE_THREAD_BLAS_MAX_FLOPS

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, KernelStep)]
