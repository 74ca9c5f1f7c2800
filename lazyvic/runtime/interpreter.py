"""The NumPy reference interpreter: runs any trace with the op table's references.

It is the oracle of the tests, the first run of a plan in ``hot`` mode, and the
fallback for what the code generator cannot compile.
"""

from __future__ import annotations

import numpy as np

from lazyvic import ops as optable
from lazyvic.dtypes import get_dtype


def interpret(trace, inputs: list, scalars: list) -> list[np.ndarray]:
    values: list = [None] * len(trace.entries)
    dtypes = trace.dtypes
    for i, (op, attrs, args, _, _) in enumerate(trace.entries):
        if op == "buffer":
            values[i] = inputs[attrs[0]]
        elif op == "scalar":
            values[i] = dtypes[i].np.type(scalars[attrs[0]])
        else:
            opdef = optable.OPS[op]
            with np.errstate(all="ignore"):
                out = opdef.reference([values[j] for j in args], dict(attrs))
            out = np.asarray(out)
            if out.dtype != dtypes[i].np:
                out = out.astype(dtypes[i].np)
            values[i] = out
    results = []
    for o in trace.outputs:
        v = values[o]
        # Owned, writeable, contiguous storage (a reference may return a read-only view).
        results.append(np.ascontiguousarray(v) if v.shape and v.flags.writeable else np.array(v))
    return results


__all__ = ["interpret", "get_dtype"]
