"""The named IR: one :class:`Entry` per trace position, immutable, carrying where it came from.

A trace's key (``Trace.entries``) is a tuple of plain tuples ``(op, attrs, inputs, shape,
dtype_name)``: cheap to build at every sync and cheap to hash. Everything that reads a trace
(the lowering, the interpreter, the tools) reads its named entries instead, built from the key
when asked for: all of them, kept with the trace object (``Trace.named``: the lowering, the
tools), or one at a time, kept by nobody (``Trace.entry(i)``: the interpreter, which then
allocates nothing that outlives a step). On a plan-cache hit nothing is built.

The lowering's passes keep an entry's ``scope`` and ``origin`` when they rewrite it
(``entry._replace(...)``), so a plan's entries still say which module recorded them and
which trace position they compute.
"""

from __future__ import annotations

from typing import NamedTuple

from lazyvic.dtypes import DType, get_dtype


class Attrs(dict):
    """An op's attributes: a read-only dict (``attrs["perm"]``), hashable.

    Buffer and scalar entries hold their input slot as ``{"slot": n}``.
    """

    __slots__ = ()

    def _read_only(self, *args, **kwargs):
        raise TypeError("Attrs are read-only: make a new Attrs (or a dict) instead")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.items())))

    def __reduce__(self):
        return Attrs, (dict(self),)

    def __copy__(self) -> "Attrs":
        return self

    def __deepcopy__(self, memo) -> "Attrs":
        return self


class Entry(NamedTuple):
    """One op of a trace (or of a plan, after the lowering's passes).

    Attributes:
        op: the op's name in the op table (``"buffer"``, ``"scalar"`` for inputs).
        attrs: its attributes (:class:`Attrs`); ``{"slot": n}`` for inputs.
        inputs: positions of the entries it reads, in the same list.
        shape: its output shape.
        dtype: its output :class:`~lazyvic.dtypes.DType`.
        scope: the module scope that recorded it (``lazyvic.trace.scope``), None for inputs.
        origin: the trace position it computes, or was made for by a pass (None: made by a
            pass from nothing in the trace).
    """

    op: str
    attrs: Attrs
    inputs: tuple
    shape: tuple
    dtype: DType
    scope: str | None = None
    origin: int | None = None

    @property
    def slot(self) -> int:
        """The input slot of a ``buffer`` or ``scalar`` entry."""
        return self.attrs["slot"]

    @property
    def is_input(self) -> bool:
        """A buffer or scalar: data handed to the trace, not computed by it."""
        return self.op == "buffer" or self.op == "scalar"


def named_entry(key_entry: tuple, dtype: DType | None, scope: str | None, origin: int) -> Entry:
    """The :class:`Entry` of a plain key entry ``(op, attrs, inputs, shape, dtype_name)`` at
    trace position ``origin`` (``dtype`` None: looked up by name)."""
    op, attrs, inputs, shape, dtype_name = key_entry
    attrs = Attrs(slot=attrs[0]) if op == "buffer" or op == "scalar" else Attrs(attrs)
    return Entry(op, attrs, inputs, shape, dtype if dtype is not None else get_dtype(dtype_name), scope, origin)


def named_entries(entries: tuple, dtypes: tuple, scopes: tuple) -> tuple:
    """The :class:`Entry` of each plain key entry; ``dtypes``, ``scopes``: those of each entry
    (or empty: dtypes looked up by name, no scopes)."""
    nd, ns = len(dtypes), len(scopes)
    return tuple(
        named_entry(e, dtypes[i] if i < nd else None, scopes[i] if i < ns else None, i) for i, e in enumerate(entries)
    )
