"""The executor: binds a plan's inputs, runs its steps, hands back the outputs."""

from __future__ import annotations

import sys
import time

import numpy as np

from lazyvic.runtime.buffers import aligned_empty, take


def _prepare(plan) -> None:
    """Allocate the plan's pool once and precompute the view of every intermediate."""
    mem = plan.memory
    plan.pool = [aligned_empty((n,), np.uint8) for n in mem.slot_bytes]
    plan.views = {}
    for pos, slot in mem.slot_of.items():
        op, attrs, inputs, shape, dtype = plan.entries[pos]
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        plan.views[pos] = plan.pool[slot][:n].view(dtype.np).reshape(shape)


def execute(plan, inputs: list, scalars: list, debug: int = 0) -> list:
    if plan.pool is None:
        _prepare(plan)
    env = dict(plan.views)
    for pos, slot in plan.input_pos:
        env[pos] = inputs[slot]
    svals = [t(v) for t, v in zip(plan.scalar_dtypes, scalars)]
    entries = plan.entries
    outs = []
    for kind, pos, dtype in plan.outputs:
        if kind == "buffer" and pos not in env:
            env[pos] = take(entries[pos][3], dtype.np)
    if debug >= 4:
        for step in plan.steps:
            t0 = time.perf_counter()
            step(env, svals)
            print(f"[lazyvic]   {step.name}: {1e6 * (time.perf_counter() - t0):.1f} us", file=sys.stderr)
    else:
        for step in plan.steps:
            step(env, svals)
    for kind, pos, dtype in plan.outputs:
        if kind == "scalar":
            outs.append(np.array(svals[pos], dtype=dtype.np))
        elif entries[pos][0] == "buffer":
            outs.append(np.array(env[pos], copy=True))  # an output folded onto an input
        else:
            outs.append(env[pos])
    return outs
