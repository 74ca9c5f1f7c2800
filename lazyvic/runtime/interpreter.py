"""The NumPy reference interpreter: runs any trace with the op table's references.

It is the oracle of the tests, the first run of a plan in ``hot`` mode, and the
fallback for what the code generator cannot compile. It reads the trace's named entries one
at a time (``Trace.entry``). Its products run on one BLAS thread, as the compiled plans' do
(``lowering/cpu/plan.py``): OpenBLAS may round a product on two threads otherwise than on
one (with its Haswell kernels, most float32 products of 100 x 100 x 100 and more).
"""

from __future__ import annotations

import numpy as np

from lazyvic import ops as optable
from lazyvic.dtypes import get_dtype, scalar_value
from lazyvic.lowering.passes import transpose_matmuls
from lazyvic.lowering.reference import run_reference
from lazyvic.ops.blas import one_thread


def _rewritten(trace) -> tuple:
    """``(entry(i), n, outputs)``: the trace as the interpreter runs it. The compiled plan computes
    permute(a @ b) as b^T @ a^T (lowering/passes.py); BLAS rounds the two differently, so the
    interpreter runs the same rewritten trace."""
    if any(e[0] == "matmul" for e in trace.entries):
        rewritten, outputs = transpose_matmuls(list(trace.named), list(trace.outputs))
        return rewritten.__getitem__, len(rewritten), outputs
    return trace.entry, len(trace.entries), trace.outputs


def _evaluate(entry, n: int, inputs: list, scalars: list) -> list:
    with one_thread():
        return _evaluate_entries(entry, n, inputs, scalars)


def _evaluate_entries(entry, n: int, inputs: list, scalars: list) -> list:
    values: list = [None] * n
    for i in range(n):
        e = entry(i)  # one at a time: a run keeps nothing of the trace's
        if e.op == "buffer":
            values[i] = inputs[e.slot]
        elif e.op == "scalar":
            values[i] = scalar_value(scalars[e.slot], e.dtype)
        else:
            opdef = optable.OPS[e.op]
            v = run_reference(opdef.reference, [values[j] for j in e.inputs], e.attrs, e.dtype)
            # A computed value in row-major order, as a compiled plan's buffer holds it: NumPy
            # keeps the layout of its operands (an elementwise op on a transposed view is
            # column-major), and a product of a column-major operand by a vector runs another
            # BLAS gemv than the buffer's (other bits). Movement ops stay views, as in plans.
            if opdef.kind != "movement" and v.ndim > 1 and not v.flags.c_contiguous:
                v = np.ascontiguousarray(v)
            values[i] = v
    return values


def interpret(trace, inputs: list, scalars: list) -> list[np.ndarray]:
    """Run ``trace`` on host ``inputs`` (per input slot) and ``scalars`` (per scalar slot);
    returns per output a NumPy array the caller owns."""
    entry, n, outputs = _rewritten(trace)
    values = _evaluate(entry, n, inputs, scalars)
    results = []
    for o in outputs:
        v = values[o]
        # Owned, writeable, contiguous storage (a reference may return a read-only view).
        results.append(np.ascontiguousarray(v) if v.shape and v.flags.writeable else np.array(v))
    return results


def interpret_all(trace, inputs: list, scalars: list) -> dict:
    """Every value of ``trace`` run on the interpreter, by the trace position it comes from
    (``Entry.origin``: a plan's entries keep theirs through the graph passes); for checking."""
    entry, n, _ = _rewritten(trace)
    values = _evaluate(entry, n, inputs, scalars)
    return {entry(i).origin: v for i, v in enumerate(values)}


def interpret_cuda(trace, inputs: list, scalars: list) -> list:
    """A CUDA trace on the interpreter: host copies in, device copies out (counted). An input
    may already be a host array (a constant made of Python numbers, realized on the CPU
    earlier in the same sync), as a CUDA plan also takes."""
    from lazyvic.runtime import device

    shapes = [None] * trace.n_inputs
    for i in range(len(trace.entries)):
        e = trace.entry(i)
        if e.op == "buffer":
            shapes[e.slot] = e.shape
    host = [a if isinstance(a, np.ndarray) else device.to_host(a, shape) for a, shape in zip(inputs, shapes)]
    return [device.to_device(o) for o in interpret(trace, host, scalars)]


__all__ = ["interpret", "interpret_cuda", "get_dtype"]
