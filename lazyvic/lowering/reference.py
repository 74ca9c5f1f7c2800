"""Operands on the host and the NumPy reference step, shared by the backends.

A library step's operand (``lowering.pipeline.Operand``) is a buffer or a scalar input read
through its movement ops; on the host those ops are NumPy views (:func:`view`, each op's own
reference). :class:`ReferenceStep` runs an op that has no kernel yet through its NumPy
reference: a CPU plan runs it as it is, a CUDA plan on host copies of its operands (its
HostStep). Either way the op is one of the plan's reported fallbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lazyvic import dtypes as dt
from lazyvic import ops as optable


def run_reference(reference, arrays: list, attrs, dtype: dt.DType) -> np.ndarray:
    """``reference(arrays, attrs)`` as a ``dtype`` array, computed as kernels compute: half-type
    operands widen to float32 (exactly), the op runs in float32 and a half-type result is
    rounded once, from float32 (``DType.compute``)."""
    if dtype.is_half or any(getattr(a, "dtype", None) in dt.HALF_NP for a in arrays):
        arrays = [a.astype(np.float32) if getattr(a, "dtype", None) in dt.HALF_NP else a for a in arrays]
    with np.errstate(all="ignore"):
        out = np.asarray(reference(arrays, attrs))
        if out.dtype != dtype.np:
            if dtype.is_half and out.dtype != np.float32:
                out = out.astype(np.float32)
            out = out.astype(dtype.np)
    return out


def view(env, scalars, chain):
    """An operand (``lowering.pipeline.Operand``): a buffer, or a scalar input, with its
    movement ops applied as NumPy views (each op's reference)."""
    kind, base, ops, dtype = chain
    a = env[base] if kind == "buffer" else np.asarray(scalars[base], dtype=dtype)
    for opdef, attrs in ops:
        a = opdef.reference([a], attrs)
    return a


def reference_step(entries, pos: int, args) -> "ReferenceStep":
    """The ReferenceStep of entry ``pos`` (an op with neither a kernel nor a library step)
    over its operands ``args``; the backends' ``reference_step`` (CUDA wraps it in a HostStep)."""
    e = entries[pos]
    return ReferenceStep(f"{e.op}{e.shape}", e.op, pos, tuple(args), optable.OPS[e.op].reference, e.attrs, e.dtype)


@dataclass
class ReferenceStep:
    """``out = reference(operands, attrs)``, cast to ``dtype``, into the plan's buffer."""

    name: str
    op: str
    out: int
    args: tuple  # Operands
    reference: object
    attrs: dict
    dtype: object

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in self.args if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        vals = [view(env, scalars, c) for c in self.args]
        np.copyto(env[self.out], run_reference(self.reference, vals, self.attrs, self.dtype))
