"""A collective inside a plan: what a captured data-parallel training step runs between ranks.

    collective(x, *after; collective, reduce, src, group)
        x (any shape) -> x's shape and dtype: the all-reduce (``reduce``: a ReduceOp name) or the
        broadcast from rank ``src`` of x over the process group ``group``

``after`` are earlier collectives' outputs, read only for their order: every rank must run its
collectives in one order, and a data dependency makes every schedule of the plan (compiled or
interpreted) keep the order in which they were recorded.

The reference sends through the transport that ``lazyvic.distributed`` registered for the group
(:data:`transports`; this layer imports nothing above it), so the interpreter and the compiled
plan run the same code and give the same bits. Not differentiable; no ONNX mapping (a collective
is not part of an exported model).

Outside a captured step, collectives are not traced: ``lazyvic.distributed``'s functions run them
at once, as sync points of their own kind (see lazyvic/distributed/collectives.py).
"""

from __future__ import annotations

from typing import Callable

from lazyvic.errors import DistributedError
from lazyvic.ops.opdef import OpDef, register

COLLECTIVE_KIND = "collective"

# group key -> send(array, attrs) -> array: set by lazyvic.distributed for each live group.
transports: dict[int, Callable] = {}


def _infer(shapes, dtypes, at):
    return shapes[0], dtypes[0]


def _reference(arrays, at):
    send = transports.get(at["group"])
    if send is None:
        raise DistributedError(
            f"{at['collective']}: this plan was recorded in process group {at['group']}, which is not "
            f"initialized any more (destroy_process_group ends it); record the step again"
        )
    a = arrays[0]
    return send(a if a.flags.c_contiguous else a.copy(), at)  # (np.ascontiguousarray makes 0-d 1-d)


register(OpDef("collective", COLLECTIVE_KIND, -1, _infer, _reference, differentiable=False))
