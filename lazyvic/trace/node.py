"""Node: one vertex of the pending (lazy) graph.

A node is either pending (``op`` with ``inputs``) or realized (``op ==
"buffer"`` with ``data``: a C-contiguous NumPy array on the CPU, a flat device array
on CUDA, see :mod:`lazyvic.runtime.device`), or a Python scalar (``op == "scalar"``
with ``value``). ``device`` is ``"cpu"`` or ``"cuda"`` (None for a scalar, which goes
with any device); every input of a pending node is on its device. When a cut realizes a pending node it is
turned into a buffer in place and drops its inputs, so the graph behind it is
freed and every later op that refers to the node sees the data.

Thread safety: a node is made by one thread and read by any; :meth:`Node.realize` is the only
change to a node, and it sets the data before the node reads as a buffer (the sync realizes
under its graph lock, see ``lazyvic.sync``). The module scope a node records is the making
thread's (``lazyvic.trace.scope.local``).
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from lazyvic.trace import scope as _scope

_new_object = object.__new__
_counter = itertools.count()  # next() on it is atomic: node ids stay unique across threads
_scope_local = _scope.local  # .state: the calling thread's module scope (lazyvic.trace.scope)


# Realized nodes that hold a parameter's value (``nn.Parameter`` marks them): the memory
# plan counts them apart from the other inputs. Weak, so marking keeps nothing alive.
parameter_nodes: "weakref.WeakSet[Node]" = weakref.WeakSet()


class Node:
    __slots__ = (
        "op",
        "inputs",
        "attrs",
        "shape",
        "dtype",
        "data",
        "value",
        "id",
        "scope",
        "device",
        "tape",
        "tpos",
        "__weakref__",
    )

    def __init__(self, op: str, inputs: tuple, attrs: tuple, shape: tuple, dtype, device: str | None = "cpu"):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs  # sorted tuple of (name, value) pairs: hashable, part of the plan key
        self.shape = shape
        self.dtype = dtype
        self.data = None
        self.value = None
        self.id = next(_counter)
        self.device = device
        state = _scope_local.state
        self.scope = state.current  # the module path that recorded it (lazyvic.trace.scope); not in any key
        # A pending op (leaves are made by buffer() and scalar()). Its structural hash is made
        # now (lazyvic.trace.tape), so the sync finds the plan without a cut.
        tape = self.tape = state.tape
        if tape.broken:
            self.tpos = 0
            return
        if device != "cpu" and device is not None:
            tape.broken = True
        # An input is its position on the tape; a leaf's first use is what the key holds of it
        # (a scalar's dtype, a buffer's shape, dtype and parameter mark: Tape.leaf). One and two
        # inputs unrolled: this runs for every op recorded.
        n = len(inputs)
        try:
            if n == 2:
                a, b = inputs
                ra = a.tpos if a.tape is tape else tape.leaf(a, parameter_nodes)
                rb = b.tpos if b.tape is tape else tape.leaf(b, parameter_nodes)
                tape.h = hash((tape.h, op, attrs, ra, rb))
            elif n == 1:
                a = inputs[0]
                ra = a.tpos if a.tape is tape else tape.leaf(a, parameter_nodes)
                tape.h = hash((tape.h, op, attrs, ra))
            else:
                refs = tuple([i.tpos if i.tape is tape else tape.leaf(i, parameter_nodes) for i in inputs])
                tape.h = hash((tape.h, op, attrs, refs))
        except TypeError:  # an attribute that cannot be hashed: this tape gives no key
            tape.broken = True
        self.tpos = tape.n
        tape.n += 1

    @classmethod
    def buffer(cls, array: np.ndarray, dtype, device: str = "cpu", shape: tuple | None = None) -> "Node":
        """A realized node; on ``"cuda"`` ``array`` is flat and ``shape`` gives the shape. It joins
        a tape at its first use (``Tape.leaf``)."""
        n = _new_object(cls)
        n.op = "buffer"
        n.inputs = n.attrs = ()
        n.shape = tuple(array.shape) if shape is None else tuple(shape)
        n.dtype = dtype
        n.data = array
        n.value = None
        n.id = next(_counter)
        n.device = device
        n.scope = _scope_local.state.current
        n.tape = None
        return n

    @classmethod
    def scalar(cls, value, dtype) -> "Node":
        # Made field by field, not through __init__: one per Python-number operand of an op.
        n = _new_object(cls)
        n.op = "scalar"
        n.inputs = n.attrs = n.shape = ()
        n.dtype = dtype
        n.data = None
        n.value = value
        n.id = next(_counter)
        n.device = None
        state = _scope_local.state
        n.scope = state.current
        # Joins the making thread's tape now (its first use is nearly always the next op):
        # its dtype enters the hash here, and the op that reads it finds its position.
        tape = n.tape = state.tape
        leaves = tape.leaves
        n.tpos = ~len(leaves)
        leaves.append(n)
        tape.h = hash((tape.h, dtype))
        return n

    @property
    def pending(self) -> bool:
        return self.op != "buffer" and self.op != "scalar"

    def realize(self, array) -> None:
        """Turn this pending node into a buffer holding ``array`` (drops the graph behind it;
        a NumPy array on the CPU, a flat device array on CUDA). The data is set first, so a reader
        in another thread never sees a buffer without data."""
        self.data = array
        self.op = "buffer"
        self.inputs = ()
        self.attrs = ()
        if self.tape is not None:  # the structure its tape hashed has changed under it
            self.tape.broken = True

    def attr(self, name):
        for k, v in self.attrs:
            if k == name:
                return v
        raise KeyError(name)

    def __repr__(self) -> str:
        where = "" if self.device in ("cpu", None) else f", device={self.device}"
        return f"Node({self.op}, shape={self.shape}, dtype={self.dtype.name}{where})"
