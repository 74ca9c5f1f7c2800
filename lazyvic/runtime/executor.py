"""The executor: binds a plan's inputs, runs its steps, hands back the outputs.

The environment is a list indexed by entry position, holding each buffer both
shaped (for BLAS and reference steps) and flat (kernels take 1-D arrays). The
plan's pooled temporaries are allocated and viewed once, on its first run.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from lazyvic.runtime.buffers import aligned_empty, take


def _prepare(plan) -> None:
    mem = plan.memory
    plan.pool = [aligned_empty((n,), np.uint8) for n in mem.slot_bytes]
    n = len(plan.entries)
    env, flat = [None] * n, [None] * n
    for pos, slot in mem.slot_of.items():
        shape, dtype = plan.entries[pos][3], plan.entries[pos][4]
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        env[pos] = plan.pool[slot][:nbytes].view(dtype.np).reshape(shape)
        flat[pos] = env[pos].reshape(-1)
    plan.env_template, plan.flat_template = env, flat


class _BLASThreads:
    """Sets the number of threads of the BLAS libraries loaded in this process (through
    threadpoolctl, found once) for the duration of a plan run."""

    def __init__(self):
        self.libs = None

    def _find(self) -> list:
        try:
            from threadpoolctl import ThreadpoolController

            return [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
        except Exception:  # noqa: BLE001 - no threadpoolctl, or a library it cannot drive: leave BLAS alone
            return []

    def limit(self, n: int) -> list:
        if self.libs is None:
            self.libs = self._find()
        saved = []
        for lib in self.libs:
            saved.append(lib.num_threads)
            lib.set_num_threads(n)
        return saved

    def restore(self, saved: list) -> None:
        for lib, n in zip(self.libs, saved):
            lib.set_num_threads(n)


blas_threads = _BLASThreads()


def execute(plan, inputs: list, scalars: list, debug: int = 0) -> list:
    if plan.blas_threads is None:
        return _execute(plan, inputs, scalars, debug)
    saved = blas_threads.limit(plan.blas_threads)
    try:
        return _execute(plan, inputs, scalars, debug)
    finally:
        blas_threads.restore(saved)


def _execute(plan, inputs: list, scalars: list, debug: int = 0) -> list:
    if plan.pool is None:
        _prepare(plan)
    env = plan.env_template[:]
    flat = plan.flat_template[:]
    for pos, slot in plan.input_pos:
        a = inputs[slot]
        env[pos] = a
        flat[pos] = a.reshape(-1)
    entries = plan.entries
    for kind, pos, dtype in plan.outputs:
        if kind == "buffer" and env[pos] is None:
            a = take(entries[pos][3], dtype.np, entries[pos][0] in ("matmul", "conv2d"))  # BLAS writes them
            env[pos] = a
            flat[pos] = a.reshape(-1)
    if debug >= 4:
        for step in plan.steps:
            t0 = time.perf_counter()
            step(env, flat, scalars)
            print(f"[lazyvic]   {step.name}: {1e6 * (time.perf_counter() - t0):.1f} us", file=sys.stderr)
    else:
        for step in plan.steps:
            step(env, flat, scalars)
    outs, given = [], set()
    for kind, pos, dtype in plan.outputs:
        if kind == "scalar":
            outs.append(np.array(scalars[pos], dtype=dtype.np))
        elif entries[pos][0] == "buffer" or pos in given:
            # An output folded onto an input, or two outputs merged by CSE: each tensor
            # gets storage of its own.
            outs.append(np.array(env[pos], copy=True))
        else:
            outs.append(env[pos])
            given.add(pos)
    return outs
