"""The cut: pending graph reachable from a set of roots -> canonical Trace.

Canonical form: nodes in topological (post-order DFS) order from the roots in
the order given; realized leaves become numbered input slots described by shape
and dtype, Python scalars become scalar slots described by dtype. Values never
enter the key, so new data and new scalar values reuse a cached plan.

Each entry of ``Trace.entries`` is ``(op, attrs, inputs, shape, dtype_name)``
where ``inputs`` are positions of earlier entries; for ``buffer`` and ``scalar``
entries ``attrs`` is ``(slot,)``. These plain tuples are the key, built at every sync;
readers of the trace use its :class:`~lazyvic.trace.entry.Entry` objects instead
(``Trace.named``, ``Trace.entry(i)``: made when asked for, so a plan-cache hit never builds
them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from lazyvic.trace.entry import Entry, named_entries, named_entry
from lazyvic.trace.node import Node, parameter_nodes


@dataclass(frozen=True, eq=False)
class Trace:
    """A canonical trace. ``key`` is hashable and identifies the plan."""

    entries: tuple
    outputs: tuple  # entry positions of the outputs, in root order
    n_inputs: int
    n_scalars: int
    key: tuple = field(repr=False)
    dtypes: tuple = field(repr=False, default=())  # DType of each entry, for the lowering
    param_slots: frozenset = frozenset()  # input slots that hold an nn.Parameter's value
    scopes: tuple = field(repr=False, default=())  # module scope of each entry (for tools, not in the key)

    def __len__(self) -> int:
        return len(self.entries)

    @cached_property
    def named(self) -> tuple:
        """The entries as :class:`~lazyvic.trace.entry.Entry` (dtype, scope and origin included),
        built on first use and kept with the trace."""
        return named_entries(self.entries, self.dtypes, self.scopes)

    def entry(self, i: int) -> Entry:
        """Entry ``i`` as an :class:`~lazyvic.trace.entry.Entry`, made now and kept by nobody
        (``named[i]`` when all of them are built already)."""
        named = self.__dict__.get("named")
        if named is not None:
            return named[i]
        return named_entry(
            self.entries[i],
            self.dtypes[i] if i < len(self.dtypes) else None,
            self.scopes[i] if i < len(self.scopes) else None,
            i,
        )

    @property
    def flags(self) -> tuple:
        """The flags the trace was cut with, part of its key (the front end's: device, mode)."""
        return self.key[2]

    @property
    def device(self) -> str:
        """``"cuda"`` when the first of its flags says so, else ``"cpu"``."""
        return "cuda" if self.flags[:1] == ("cuda",) else "cpu"


def cut(
    roots: list[Node], flags: tuple = (), scalar_nodes: list | None = None, input_nodes: list | None = None
) -> tuple[Trace, list, list, list[Node]]:
    """Build the trace that computes every pending node in ``roots``.

    Returns ``(trace, input_arrays, scalar_values, output_nodes)``; outputs are
    the pending roots without duplicates, in the order given. ``scalar_nodes``, when given, gets
    the scalar node of each scalar slot (a captured step feeds some of them anew at replay);
    ``input_nodes`` the buffer node of each input slot.
    """
    pos: dict[Node, int] = {}
    entries: list = []
    dtypes: list = []
    inputs: list = []
    scalars: list = []
    outputs: list[int] = []
    out_nodes: list[Node] = []
    params: list[int] = []
    scopes: list = []
    append_entry, append_dtype, append_scope = entries.append, dtypes.append, scopes.append
    pos_get = pos.get
    for root in roots:
        if root in pos:
            if root.op != "buffer" and root.op != "scalar" and pos[root] not in outputs:
                outputs.append(pos[root])
                out_nodes.append(root)
            continue
        if root.op == "buffer" or root.op == "scalar":
            continue
        # Iterative post-order DFS from the roots: graphs from long training scripts are
        # deep. The order follows the graph's structure, not creation order: state made
        # lazily at the first step (optimizer buffers) must not reorder later traces.
        stack = [root]
        while stack:
            node = stack[-1]
            if node in pos:
                stack.pop()
                continue
            waiting = False
            ins = []  # the inputs' positions, complete when nothing is waiting
            for i in node.inputs:
                p = pos_get(i)
                if p is None:
                    if i.inputs:
                        stack.append(i)
                        waiting = True
                        continue
                    # A leaf: its entry is made now, without a trip through the stack.
                    p = pos[i] = len(entries)
                    if i.op == "buffer":
                        if i in parameter_nodes:
                            params.append(len(inputs))
                        append_entry(("buffer", (len(inputs),), (), i.shape, i.dtype.name))
                        append_scope(None)
                        inputs.append(i.data)
                        if input_nodes is not None:
                            input_nodes.append(i)
                    elif i.op == "scalar":
                        append_entry(("scalar", (len(scalars),), (), (), i.dtype.name))
                        append_scope(None)
                        scalars.append(i.value)
                        if scalar_nodes is not None:
                            scalar_nodes.append(i)
                    else:  # a pending op without inputs
                        append_entry((i.op, i.attrs, (), i.shape, i.dtype.name))
                        append_scope(i.scope)
                    append_dtype(i.dtype)
                ins.append(p)
            if waiting:
                continue
            stack.pop()
            pos[node] = len(entries)
            append_entry((node.op, node.attrs, tuple(ins), node.shape, node.dtype.name))
            append_dtype(node.dtype)
            append_scope(node.scope)
        outputs.append(pos[root])
        out_nodes.append(root)
    entries_t = tuple(entries)
    outputs_t = tuple(outputs)
    param_slots = frozenset(params)
    trace = Trace(
        entries_t,
        outputs_t,
        len(inputs),
        len(scalars),
        (entries_t, outputs_t, flags, param_slots),
        tuple(dtypes),
        param_slots,
        tuple(scopes),
    )
    return trace, inputs, scalars, out_nodes
