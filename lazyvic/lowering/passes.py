"""Graph passes over a trace's entries: Trace-shaped tuples in, new tuples out.

- identity elimination: reshape/expand/permute/cast/slice/pad that change nothing;
- movement folding: reshape of reshape, permute of permute;
- transposed matmul: ``permute(a @ b)`` swapping the last two axes becomes
  ``b^T @ a^T`` (BLAS reads transposed operands for free; the copy disappears);
- common-subexpression elimination: equal (op, attrs, inputs) computed once;
- dead-code elimination: only entries reachable from the outputs survive.

An entry is ``(op, attrs, inputs, shape, dtype)`` with ``attrs`` a dict here.
"""

from __future__ import annotations


def _is_identity(op, attrs, in_entry, shape, dtype) -> bool:
    if op in ("reshape", "expand"):
        return in_entry[3] == shape
    if op == "permute":
        return tuple(attrs["perm"]) == tuple(range(len(shape)))
    if op == "cast":
        return in_entry[4] is dtype
    if op == "slice":
        return in_entry[3] == shape and set(attrs["steps"]) <= {1}
    if op == "pad":
        return all(b == 0 and a == 0 for b, a in attrs["pads"])
    return False


def transpose_matmuls(entries: list, outputs: list) -> tuple[list, list]:
    """``permute(matmul(a, b))`` swapping the last two axes -> ``matmul(b^T, a^T)``.

    Only when the matmul has no other consumer (else it would be computed twice).
    """
    uses = [0] * len(entries)
    for e in entries:
        for j in e[2]:
            uses[j] += 1
    for o in outputs:
        uses[o] += 1
    out, remap = [], []
    for op, attrs, inputs, shape, dtype in entries:
        inputs = tuple(remap[i] for i in inputs)
        if op == "permute" and len(shape) >= 2:
            n = len(shape)
            swap = tuple(range(n - 2)) + (n - 1, n - 2)
            src = out[inputs[0]]
            if tuple(attrs["perm"]) == swap and src[0] == "matmul" and uses[_orig(remap, inputs[0])] == 1:
                a, b = src[2]
                pb = len(out)
                out.append(("permute", {"perm": swap}, (b,), out[b][3][:-2] + out[b][3][::-1][:2], dtype))
                pa = len(out)
                out.append(("permute", {"perm": swap}, (a,), out[a][3][:-2] + out[a][3][::-1][:2], dtype))
                remap.append(len(out))
                out.append(("matmul", {}, (pb, pa), shape, dtype))
                continue
        remap.append(len(out))
        out.append((op, attrs, inputs, shape, dtype))
    return out, [remap[o] for o in outputs]


def _orig(remap: list, new_pos: int) -> int:
    return remap.index(new_pos)


def simplify(entries: list, outputs: list) -> tuple[list, list]:
    """Identity elimination, movement folding and CSE in one forward sweep, then DCE."""
    remap: list[int] = []
    new: list = []
    seen: dict = {}
    for op, attrs, inputs, shape, dtype in entries:
        inputs = tuple(remap[i] for i in inputs)
        if op in ("buffer", "scalar"):
            remap.append(len(new))
            new.append((op, attrs, inputs, shape, dtype))
            continue
        if len(inputs) == 1 and _is_identity(op, attrs, new[inputs[0]], shape, dtype):
            remap.append(inputs[0])
            continue
        if len(inputs) == 1:
            src = new[inputs[0]]
            if op == "reshape" and src[0] == "reshape":
                inputs = src[2]
                if new[inputs[0]][3] == shape:
                    remap.append(inputs[0])
                    continue
            elif op == "permute" and src[0] == "permute":
                inner = src[1]["perm"]
                attrs = {"perm": tuple(inner[p] for p in attrs["perm"])}
                inputs = src[2]
                if attrs["perm"] == tuple(range(len(shape))):
                    remap.append(inputs[0])
                    continue
        key = (op, tuple(sorted(attrs.items())), inputs)
        hit = seen.get(key)
        if hit is not None:
            remap.append(hit)
            continue
        seen[key] = len(new)
        remap.append(len(new))
        new.append((op, attrs, inputs, shape, dtype))
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
        stack.extend(entries[i][2])
    remap = {}
    out = []
    for i, e in enumerate(entries):
        if live[i] or e[0] in ("buffer", "scalar"):  # inputs keep their slots
            remap[i] = len(out)
            op, attrs, inputs, shape, dtype = e
            out.append((op, attrs, tuple(remap[j] for j in inputs), shape, dtype))
    return out, [remap[o] for o in outputs]
