"""Plan: what the runtime executes for one trace key.

A plan is a sequence of steps over an environment of arrays indexed by entry
position: :class:`KernelStep` calls a generated Numba kernel,
:class:`MatmulStep` calls BLAS through NumPy's matmul into a pooled buffer, and
:class:`ReferenceStep` runs an op's NumPy reference (ops with no kernel yet:
these are the plan's reported fallbacks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class KernelStep:
    name: str
    fn: object
    out: int
    buffers: tuple
    scalars: tuple  # scalar slots
    source: str = field(repr=False, default="")

    def reads(self):
        return self.buffers

    def __call__(self, env, flat, svals):
        self.fn(flat[self.out], *[flat[b] for b in self.buffers], *[svals[s] for s in self.scalars])


def _view(env, chain):
    base, ops = chain
    a = env[base]
    for ref, attrs in ops:
        a = ref([a], attrs)
    return a


@dataclass
class MatmulStep:
    name: str
    out: int
    a: tuple  # (base position, [(reference, attrs) movement ops applied in order])
    b: tuple

    def reads(self):
        return (self.a[0], self.b[0])

    def __call__(self, env, flat, svals):
        np.matmul(_view(env, self.a), _view(env, self.b), out=env[self.out])


@dataclass
class ReferenceStep:
    name: str
    op: str
    out: int
    args: tuple  # operand chains (or ("scalar", slot))
    reference: object
    attrs: dict
    dtype: object

    def reads(self):
        return tuple(c[0] for c in self.args if c[0] != "scalar")

    def __call__(self, env, flat, svals):
        vals = [svals[c[1]] if c[0] == "scalar" else _view(env, c) for c in self.args]
        with np.errstate(all="ignore"):
            out = np.asarray(self.reference(vals, self.attrs), dtype=self.dtype.np)
        np.copyto(env[self.out], out)


@dataclass
class Plan:
    """A compiled plan: steps, their memory plan, and where inputs and outputs go."""

    name: str
    entries: list = field(repr=False)
    steps: list = field(repr=False)
    input_pos: list = field(repr=False)  # (entry position, input slot)
    scalar_dtypes: list = field(repr=False)  # numpy scalar type per scalar slot
    outputs: list = field(repr=False)  # per trace output: ("buffer", pos) | ("scalar", slot)
    memory: object = None
    groups: list = field(default_factory=list, repr=False)
    fallbacks: tuple = ()
    stats: dict = field(default_factory=dict)
    pool: list = field(default=None, repr=False)  # runtime state: set by the executor
    env_template: list = field(default=None, repr=False)
    flat_template: list = field(default=None, repr=False)

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, KernelStep)]
