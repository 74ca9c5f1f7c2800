"""The checking mode (``LAZYVIC_CHECK=1``): every compiled CPU plan also runs on the interpreter.

lazyvic promises one numerics (``lazyvic/ops/numerics.py``): a plan gives the same bits compiled
or interpreted. In this mode each compiled run of a CPU plan is followed by an interpreted run of
the same trace on the same inputs, and the outputs are compared bit for bit (any NaN equals any
NaN: payloads are not promised). On a difference the plan is run again step by step, each step's
result compared with the interpreter's value of the trace entry it computes, and
:class:`~lazyvic.errors.CheckError` names the first step that differs: the kernel (its fused
ops, the scope of the value it writes, its source), the entry (op, shape, dtype) and the first
differing element with both values and their bits. Runs are counted as ``checked_runs``.

The mode is slow (every plan runs twice, the second time on NumPy); it is for tests and for
hunting a numerics bug. CUDA plans are not checked (their reductions have an order of their own).
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import CheckError
from lazyvic.runtime import metrics
from lazyvic.runtime.interpreter import interpret, interpret_all


def _differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element of two arrays of one shape and dtype: do their bits differ (any NaN equal to
    any NaN)?"""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    words = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    differ = a.view(words) != b.view(words)
    if a.dtype.kind == "f" or a.dtype in dt.HALF_NP:  # ml_dtypes' bfloat16 has kind "V"
        differ &= ~(np.isnan(a) & np.isnan(b))
    return differ


def same_bits(a, b) -> bool:
    """``a`` and ``b`` hold the same bits (shapes and dtypes equal; any NaN equal to any NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and not _differing(a, b).any()


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"compiled {got.dtype}{got.shape}, interpreted {want.dtype}{want.shape}"
    k = int(np.argmax(_differing(got, want).reshape(-1)))
    g, w = np.ascontiguousarray(got).reshape(-1)[k : k + 1], np.ascontiguousarray(want).reshape(-1)[k : k + 1]
    where = tuple(int(i) for i in np.unravel_index(k, got.shape)) if got.shape else ()
    bits, ref_bits = (f"0x{v.view(np.uint8)[::-1].tobytes().hex()}" for v in (g, w))
    return f"element {where}: compiled {g[0]!r} ({bits}), interpreted {w[0]!r} ({ref_bits})"


def check_run(plan, trace, inputs: list, scalars: list, outputs: list, sizes: tuple = ()) -> None:
    """Compare a compiled run's ``outputs`` with the interpreter's; raises CheckError naming the
    first step that differs."""
    if plan.device != "cpu":
        return
    reference = interpret(trace, inputs, scalars)
    bad = [k for k, (got, want) in enumerate(zip(outputs, reference)) if not same_bits(got, want)]
    metrics.add("checked_runs")
    if not bad:
        return
    raise CheckError(_diagnose(plan, trace, inputs, scalars, sizes, bad[0], outputs[bad[0]], reference[bad[0]]))


def _diagnose(plan, trace, inputs, scalars, sizes, k, got, want) -> str:
    values = interpret_all(trace, inputs, scalars)
    found: list = []

    def observe(step, env, entries):
        if found:
            return
        for pos in step.writes():
            e = entries[pos]
            ref = values.get(e.origin)
            val = env[pos]
            if ref is None or val is None or np.shape(ref) != np.shape(val) or np.asarray(ref).dtype != val.dtype:
                continue  # an entry made by a pass (a transposed operand): no value to compare
            if not same_bits(val, ref):
                found.append((step, e, _first_difference(np.asarray(val), np.asarray(ref))))
                return

    plan.run(inputs, scalars, 0, sizes, observe=observe)
    head = (
        f"LAZYVIC_CHECK: output {k} of a compiled plan ({len(plan.steps)} steps) differs from the "
        f"interpreter's: {_first_difference(np.asarray(got), np.asarray(want))}."
    )
    if not found:
        return head + " No single step's result differs from the interpreter's value of its entry."
    step, e, diff = found[0]
    source = getattr(step, "source", "") or "(a library step: no generated source)"
    return (
        f"{head}\nFirst step that differs: {step.name}, writing entry {e.op}{tuple(e.shape)} "
        f"{e.dtype.name} (scope {e.scope or '-'}, trace position {e.origin}): {diff}.\n"
        f"Kernel source:\n{source}"
    )
