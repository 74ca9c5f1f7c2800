"""Lowering: canonical trace -> Plan, for one device at a time.

Shared by every backend:
    pipeline.py      the compile loop: passes -> fusion -> kernels -> steps -> memory plan -> Plan
    passes.py        graph passes over the trace's named entries (identities, folding, CSE, DCE)
    fusion.py        which nodes get a buffer, which kernel computes each of the others
    memory.py        liveness, pooled slots, peak bytes; 64-byte aligned arrays
    emitter.py       the kernel emitter: index math (Lin), movement ops through the op table
    kernel_lib.py    the kernel language: scalar types and functions kernels call (CPU versions)
    kernel_files.py  kernel identity (library hash), generated headers, checked atomic writes
    backend.py       the Backend and Plan interfaces
One folder per backend: ``cpu/`` (Numba, BLAS) and ``cuda/`` (numba-cuda, cuBLAS), each with
a Backend whose ``compile(trace)`` returns a Plan with ``run(inputs, scalars)``. The runtime
makes them (``lazyvic.runtime.executor.backend``); the backends import Numba, so this package
re-exports only the interfaces.
"""

from lazyvic.lowering.backend import Backend, Plan

__all__ = ["Backend", "Plan"]
