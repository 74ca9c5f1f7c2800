"""The tape: the structural hash of what one thread records between two syncs.

As PyTorch's lazy tensor core hashes each IR node when it is made, every pending node a thread
records adds itself to its thread's tape when it is created (``Node.__init__``): a running hash
over, in creation order, each node's op, attributes and where its inputs come from. An input is
named by position, never by identity: a node of this tape by its position in it, a realized
leaf (a buffer or a Python scalar) by the order in which it joined the tape (a negative number),
described when it joins by what the cut's key holds of it (buffer: shape, dtype, whether it
holds a parameter; scalar: dtype; never a value). A buffer joins at its first use since the sync;
a scalar node when it is made (``Node.scalar``: nearly every one is read by the next op), or at
its first use on a tape that is not its maker's. A node's own shape and dtype follow
from its op, attributes and inputs (the op table's shape and dtype rules), so they add nothing.

So two recordings with the same hash, the same count of nodes and the same roots (by position)
have the same canonical trace, whatever their values: the sync looks its plan up by
``(hash, count, root positions, flags)`` (:func:`lazyvic.sync.sync`), and cuts and builds the
trace's own key only the first time (on a miss of that lookup). The hash is Python's 64-bit tuple
hash: two different structures share one with a chance of about 2**-64 per pair, the same bet
PyTorch's lazy tensor core makes (``LAZYVIC_CHECK=1`` compares the looked-up key with the cut's at
every sync).

The tape is *broken* (the sync then cuts as before, and the next tape starts whole) when the
structure reaching its nodes is not all in it: an input still pending from before the last sync
or recorded by another thread, a node realized outside this thread's sync (another thread's
sync, a scalar read with ``numpy()``), a node or leaf on a device other than the CPU, or
attributes that cannot be hashed.

Thread safety: a tape is its thread's alone (``lazyvic.trace.scope.local.state.tape``). A leaf
used by two threads' tapes is claimed by each in turn; a tape that then lists the same leaf
twice is never used to make a lookup entry (:meth:`Tape.leaf_slots`), so a wrong pairing of
inputs cannot be learned from it.
"""

from __future__ import annotations

import weakref


class Tape:
    """One thread's recording since its last sync: ``h`` the running hash, ``n`` the pending nodes
    added, ``leaves`` the realized leaves in order of first use, ``broken`` (see the module
    docstring). Each node made on it holds ``tape`` (this object) and ``tpos`` (its position; a
    leaf's is ``~k`` for the ``k``-th leaf)."""

    __slots__ = ("h", "n", "leaves", "broken", "__weakref__")

    def __init__(self):
        self.h = 0
        self.n = 0
        self.leaves: list = []
        self.broken = False

    def leaf(self, node, parameters: "weakref.WeakSet"):
        """Add ``node``, an input not on this tape, as its next leaf and return what the hash
        takes of it: a buffer's shape, dtype and whether it holds a parameter (``parameters``), a
        scalar's dtype. A pending node recorded elsewhere breaks the tape."""
        op = node.op
        if op == "buffer" and node.device == "cpu":
            what = (node.shape, node.dtype, node in parameters)
        elif op == "scalar":
            what = node.dtype
        else:
            self.broken = True
            return None
        node.tpos = ~len(self.leaves)
        node.tape = self
        self.leaves.append(node)
        return what

    def leaf_slots(self, input_nodes: list, scalar_nodes: list) -> tuple | None:
        """The leaf positions (``~tpos``) of a trace's input and scalar slots, in slot order, or
        None when this tape cannot pair them safely (a leaf listed twice, a slot's node not
        among the leaves)."""
        index = {}
        for k, node in enumerate(self.leaves):
            if id(node) in index:
                return None
            index[id(node)] = k
        try:
            return tuple(index[id(n)] for n in input_nodes), tuple(index[id(n)] for n in scalar_nodes)
        except KeyError:
            return None


__all__ = ["Tape"]
