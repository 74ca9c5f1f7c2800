"""The live-tensor registry and the sync: cut -> plan-cache key -> run (one owner).

As PyTorch's ``LazyGraphExecutor``: every tensor made pending is registered here (weakly); a
sync point (``Tensor.numpy()``, ``.item()``, ``print``, :func:`sync`) cuts the pending graph of
the requested tensors *and* every other live pending tensor into one trace
(``lazyvic.trace.cut``), finds or compiles its plan in the plan cache and runs it
(``lazyvic.runtime.run``), then writes the results back into the nodes. A size limit on the
pending graph (``LAZYVIC_MAX_PENDING``) forces a sync, so memory stays bounded.

This module works on the tensors' nodes and never builds a tensor: it sits below
``lazyvic.tensor``, which calls it.
"""

from __future__ import annotations

import weakref

from lazyvic.runtime import buffers, run
from lazyvic.runtime.config import config
from lazyvic.trace.cut import cut
from lazyvic.trace.node import live_nodes_count


class LiveTensors:
    """Weak references to the tensors made pending since the last cut, in creation order.

    A list of ``weakref.ref`` costs a fraction of a WeakValueDictionary per op; a tensor
    updated in place is added again and counted once at the cut.
    """

    __slots__ = ("refs",)

    def __init__(self):
        self.refs: list = []

    def add(self, t) -> None:
        self.refs.append(weakref.ref(t))

    def pending(self) -> list:
        out, seen = [], set()
        for r in self.refs:
            t = r()
            if t is not None and t._node.pending and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def clear(self) -> None:
        self.refs = []


live = LiveTensors()


def track(t) -> None:
    """Register a tensor whose node was just made pending; past ``config.max_pending`` pending
    nodes, sync now (the size limit of the pending graph)."""
    live.refs.append(weakref.ref(t))
    if live_nodes_count() > config.max_pending:
        sync()


def sync(*tensors) -> None:
    """Sync point ("mark step"): realize ``tensors`` and every other live pending tensor in one trace."""
    roots = [t._node for t in tensors if t._node.pending]
    pending = live.pending()
    roots.extend(t._node for t in pending)
    if not roots:
        live.clear()
        return
    # One trace per device (no pending graph spans two: copies are eager). CUDA first: a
    # constant without a device (made of Python scalars only) that a CUDA op reads is then
    # computed inside the CUDA trace, not copied there; if it is itself synced, it is
    # computed (again) on the CPU.
    if all(n.device != "cuda" for n in roots):
        groups = [("cpu", roots)]
    else:
        groups = [(d, [n for n in roots if (n.device or "cpu") == d]) for d in ("cuda", "cpu")]
    try:
        for device, group in groups:
            if not group:
                continue
            trace, inputs, scalars, out_nodes = cut(group, trace_flags(device))
            arrays = run(trace, inputs, scalars)
            for node, array in zip(out_nodes, arrays):
                node.realize(array)
                node.device = device
                if device == "cpu":
                    buffers.track(node, array)
    except Exception:
        # The failing tensors stay pending (a sync on one of them raises again), but they are
        # no longer swept into every later sync, so one bad op does not poison the session.
        live.clear()
        raise
    live.clear()


def trace_flags(device: str = "cpu") -> tuple:
    """The flags that enter every trace key: the device and the mode."""
    return (device, "deterministic" if config.deterministic else "default")


def use_deterministic_algorithms(mode: bool) -> None:
    """Deterministic mode (PyTorch's name): see ``LAZYVIC_DETERMINISTIC`` in
    :mod:`lazyvic.runtime.config` — every plan compiled at first sight, fixed reduction order."""
    config.deterministic = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return config.deterministic
