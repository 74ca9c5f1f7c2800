"""Graph passes over a trace's named entries: a list of Entry in, a new list out.

- identity elimination: movement ops that change nothing (each op's ``OpDef.is_identity``)
  and casts to the same dtype;
- movement folding: an op applied to the output of the same op, when the op table says how
  the two fold into one (``OpDef.fold``: reshape of reshape, permute of permute);
- transposed matmul: ``permute(a @ b)`` swapping the last two axes becomes
  ``b^T @ a^T`` (BLAS reads transposed operands for free; the copy disappears);
- common-subexpression elimination: equal (op, attrs, inputs) computed once;
- dead-code elimination: only entries reachable from the outputs survive.

Entries are :class:`lazyvic.trace.entry.Entry`; a rewritten entry keeps its ``scope`` and
``origin`` (entries made for a rewrite take those of the entry they replace), so tools can
say where each plan entry came from.
"""

from __future__ import annotations

from lazyvic import ops as optable
from lazyvic.ops.movement import swap_last_two
from lazyvic.trace.entry import Attrs, Entry


def _is_identity(e: Entry, src: Entry) -> bool:
    """Entry ``e``, reading ``src``, returns its input unchanged."""
    if e.op == "cast":  # an elementwise op: the one identity that is not a movement's
        return src.dtype is e.dtype
    is_identity = optable.OPS[e.op].is_identity
    return is_identity is not None and is_identity(e.attrs, src.shape, e.shape)


def transpose_matmuls(entries: list, outputs: list) -> tuple[list, list]:
    """``permute(matmul(a, b))`` swapping the last two axes -> ``matmul(b^T, a^T)``.

    Only when the matmul has no other consumer (else it would be computed twice). The new
    entries take the scope and origin of the permute they replace.
    """
    uses = [0] * len(entries)
    for e in entries:
        for j in e.inputs:
            uses[j] += 1
    for o in outputs:
        uses[o] += 1
    out, remap = [], []
    for e in entries:
        e = e._replace(inputs=tuple(remap[i] for i in e.inputs))
        shape = e.shape
        if e.op == "permute" and len(shape) >= 2:
            swap = swap_last_two(len(shape))
            src = out[e.inputs[0]]
            if tuple(e.attrs["perm"]) == swap and src.op == "matmul" and uses[_orig(remap, e.inputs[0])] == 1:
                a, b = src.inputs
                perm = Attrs(perm=swap)
                pb = len(out)
                out.append(e._replace(attrs=perm, inputs=(b,), shape=_swapped(out[b].shape)))
                pa = len(out)
                out.append(e._replace(attrs=perm, inputs=(a,), shape=_swapped(out[a].shape)))
                remap.append(len(out))
                out.append(e._replace(op="matmul", attrs=Attrs(), inputs=(pb, pa)))
                continue
        remap.append(len(out))
        out.append(e)
    return out, [remap[o] for o in outputs]


def _swapped(shape: tuple) -> tuple:
    return shape[:-2] + shape[::-1][:2]


def _orig(remap: list, new_pos: int) -> int:
    return remap.index(new_pos)


def simplify(entries: list, outputs: list) -> tuple[list, list]:
    """Identity elimination, movement folding and CSE in one forward sweep, then DCE."""
    remap: list[int] = []
    new: list = []
    seen: dict = {}
    for e in entries:
        e = e._replace(inputs=tuple(remap[i] for i in e.inputs))
        if e.is_input:
            remap.append(len(new))
            new.append(e)
            continue
        if len(e.inputs) == 1 and _is_identity(e, new[e.inputs[0]]):
            remap.append(e.inputs[0])
            continue
        if len(e.inputs) == 1:
            src = new[e.inputs[0]]
            fold = optable.OPS[e.op].fold
            if fold is not None and src.op == e.op:
                e = e._replace(attrs=Attrs(fold(src.attrs, e.attrs)), inputs=src.inputs)
                if _is_identity(e, new[e.inputs[0]]):
                    remap.append(e.inputs[0])
                    continue
        key = (e.op, tuple(sorted(e.attrs.items())), e.inputs)
        hit = seen.get(key)
        if hit is not None:
            remap.append(hit)
            continue
        seen[key] = len(new)
        remap.append(len(new))
        new.append(e)
    outs = [remap[o] for o in outputs]
    return dead_code_elimination(new, outs)


def dead_code_elimination(entries: list, outputs: list) -> tuple[list, list]:
    live = [False] * len(entries)
    stack = list(outputs)
    while stack:
        i = stack.pop()
        if live[i]:
            continue
        live[i] = True
        stack.extend(entries[i].inputs)
    remap = {}
    out = []
    for i, e in enumerate(entries):
        if live[i] or e.is_input:  # inputs keep their slots
            remap[i] = len(out)
            out.append(e._replace(inputs=tuple(remap[j] for j in e.inputs)))
    return out, [remap[o] for o in outputs]
