"""Fusion: which nodes get a buffer, and which kernel computes each of the others.

A node is *materialized* (written to a buffer) when it is a trace input or
output, a library op (matmul, gather/scatter, random) or an operand of one, a
reduction that no kernel can absorb, or an elementwise value that several
kernels need and that is too costly to recompute. Every other node is inlined
into the kernels that read it: elementwise chains become one loop body and
movement ops become index math.

A kernel (:class:`FusionGroup`) has an iteration *space* ``(shape, axes)``: it
loops over ``shape`` and reduces over ``axes`` (empty for pure elementwise
kernels). Reductions over the same space whose results are only used inside one
kernel become *stages* of it: softmax, log-softmax, layer norm and
cross-entropy rows are each one kernel that loops over the row several times,
and a reduced-shape consumer (``mean = sum * 1/n``) is fused behind its reduction.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from lazyvic import ops as optable
from lazyvic.trace.symbolic import identical as same

LIBRARY_KINDS = ("matmul", "conv", "pool", "scatter", "random", "sort", "join", "collective", "recurrent", "linalg")
# The most ops one kernel computes. Numba/LLVM compile time grows faster than the body: a
# 640-op elementwise chain compiled in 3.4 s, a 3,300-op one in 41 s (12 ms per op). Longer
# chains are cut into kernels of at most this many ops (the cut values get buffers).
MAX_KERNEL_OPS = 256
# Waves of plan_groups' materialization decided exactly (see there); the README's TinyGPT step
# takes 8, an unrolled loop about two per step.
EXACT_WAVES = 16


@dataclass(frozen=True)
class FusionGroup:
    """One kernel: ``root`` is the node it writes; ``stages`` the reductions it computes inside."""

    root: int
    space_shape: tuple
    space_axes: tuple
    stages: tuple
    members: tuple  # every node computed inside (for debug output and the visualizer)
    extra_roots: tuple = ()  # more outputs written by the same loop (see merge_outputs)


class NeedsMaterialize(Exception):
    """Raised by code generation: node ``node`` must get a buffer; the planner retries."""

    def __init__(self, node: int, why: str):
        super().__init__(f"node {node}: {why}")
        self.node = node
        self.why = why


def kind(entry) -> str:
    try:
        return _kinds[entry.op]
    except KeyError:
        k = _kinds[entry.op] = optable.OPS[entry.op].kind
        return k


_kinds: dict = {}  # op name -> its kind (fusion asks millions of times for a long trace)


def is_library(entries, i) -> bool:
    """Runs as a library step (BLAS, or its NumPy reference) rather than inside a kernel.

    A gather is never one: it is inlined in a kernel as a load at a loaded index, after a
    range check of its index (``IndexCheckStep`` on the CPU, the device error buffer on CUDA).
    An index computed in the same trace is materialized first (``initial_materialized``), so
    the check reads it before the kernel that gathers.
    """
    return kind(entries[i]) in LIBRARY_KINDS


def _operand_base(entries, m, i) -> int:
    """The buffer a library step reads for its input ``i``: down the movement chain to the first
    node with a buffer (lowering.pipeline.operand stops there), not past it. (merge_outputs went
    past a materialized expand of a scalar, h0 = zeros(...) kept alive, so a GRU's first product
    read it before the kernel that merge_outputs had moved its store into ran: NaN.)"""
    while i not in m and kind(entries[i]) == "movement":
        i = entries[i].inputs[0]
    return i


def movement_base(entries, i) -> int:
    """The first non-movement node under a chain of movement ops."""
    while kind(entries[i]) == "movement":
        i = entries[i].inputs[0]
    return i


def initial_materialized(entries, outputs, forced) -> set:
    m = set(outputs) | set(forced)
    for i, e in enumerate(entries):
        k = kind(e)
        library = is_library(entries, i)
        if k in ("source", "reduce") or library:
            m.add(i)
        if k == "gather":  # its index is range-checked before the kernel runs: stored first
            m.add(movement_base(entries, e.inputs[1]))
        if library:
            for j in e.inputs:
                m.add(movement_base(entries, j))
    return m


def library_operand_chains(entries, m) -> set:
    """Movement nodes read by library ops through NumPy views (not part of any kernel)."""
    chain = set()
    for i, e in enumerate(entries):
        if is_library(entries, i):
            for j in e.inputs:
                while j not in m and kind(entries[j]) == "movement":
                    chain.add(j)
                    j = entries[j].inputs[0]
    return chain


def _roots(entries, m, chain):
    return [i for i in sorted(m) if kind(entries[i]) != "source" and not is_library(entries, i) and i not in chain]


def consumers_of(entries) -> list:
    """Per entry, the entries that read it (with repeats)."""
    readers: list = [[] for _ in entries]
    for c, e in enumerate(entries):
        for i in e.inputs:
            readers[i].append(c)
    return readers


def reach(entries, m, roots, stages_of, consumers=None) -> dict:
    """node -> set of kernel roots that inline it: the roots from which it is reached going down
    through nodes without buffers (a kernel computes every such node), and a reduction stage's
    own kernel. One pass from the last entry to the first (inputs come before their readers): a
    node without a buffer is in the kernels of each reader that is a kernel root, and in those
    of each reader without a buffer. (It was a search down from every root: on an LSTM language
    model's unrolled training step, with fusion's waves, 19 of 33 s of lowering.)"""
    if consumers is None:
        consumers = consumers_of(entries)
    r: dict = {}
    _reach_into(r, range(len(entries) - 1, -1, -1), m, set(roots), stages_of, consumers)
    return r


def _update_reach(entries, m, root_set: set, stages_of: dict, consumers: list, r: dict, nodes: set) -> None:
    """Recompute :func:`reach`'s entries of ``nodes`` in place, by its rule, after buffers were
    added above them: ``nodes`` must hold every node whose kernels changed (those below a new
    buffer, down to the buffers); every other entry of ``r`` is still right, so the result equals
    a fresh :func:`reach`."""
    _reach_into(r, sorted(nodes, reverse=True), m, root_set, stages_of, consumers)


def _reach_into(r: dict, order, m, root_set: set, stages_of: dict, consumers: list) -> None:
    """:func:`reach`'s rule for the nodes of ``order`` (readers before the nodes they read), their
    entries of ``r`` made anew from their readers' entries."""
    stage_of: dict = {}
    for k in root_set:
        for s in stages_of.get(k, ()):
            stage_of.setdefault(s, set()).add(k)
    for i in order:
        r.pop(i, None)
        ks = set(stage_of[i]) if i in stage_of else None
        if i in m:
            if ks is not None:
                r[i] = ks
            continue
        for c in consumers[i]:
            if c in root_set:
                found = (c,)
            elif c in m:
                continue
            else:
                found = r.get(c)
                if not found:
                    continue
            if ks is None:
                ks = set()
            ks.update(found)
        if ks is not None:
            r[i] = ks


def _below(entries, m, tops) -> set:
    """The nodes inlined below any of ``tops`` (down to buffers): their regions' union, in one
    pass."""
    out: set = set()
    stack = [j for i in tops for j in entries[i].inputs]
    while stack:
        j = stack.pop()
        if j in out or j in m:
            continue
        out.add(j)
        stack.extend(entries[j].inputs)
    return out


def _region(entries, m, i, include_root: bool = True) -> set:
    """Node i and the nodes inlined below it (down to buffers)."""
    out = _below(entries, m, (i,))
    if include_root:
        out.add(i)
    return out


def _cost(entries, m, i, limit=8) -> int:
    """Number of non-movement ops inlined under node i (stops at buffers), capped."""
    total, stack, seen = 0, [i], set()
    while stack and total < limit:
        j = stack.pop()
        if j in seen or j in m:
            continue
        seen.add(j)
        if kind(entries[j]) != "movement":
            total += 1
        stack.extend(entries[j].inputs)
    return total


def plan_groups(entries, outputs, forced=frozenset()) -> tuple[list, set, set]:
    """Decide buffers and kernels. Returns (groups in execution order, materialized set, chain set)."""
    m = initial_materialized(entries, outputs, forced)
    chain = library_operand_chains(entries, m)
    readers = consumers_of(entries)

    space = {}
    for k in _roots(entries, m, chain):
        e = entries[k]
        space[k] = (entries[e.inputs[0]].shape, tuple(e.attrs["axes"])) if kind(e) == "reduce" else (e.shape, ())
    stages_of: dict = {}
    stage_owner: dict = {}

    # Absorb reductions into the one kernel that uses them. One pass, consumers first:
    # absorbing a reduction changes only the reach of nodes below it, so the decisions
    # already taken for the reductions above stay valid, and the reach is updated in place.
    fixed = set(outputs) | set(forced)
    # A library op (matmul, conv2d) reads its operands' buffers: a reduction under one may
    # not become a kernel's stage, even when a kernel is its only other reader.
    fixed |= {
        movement_base(entries, j) for i in range(len(entries)) if is_library(entries, i) for j in entries[i].inputs
    }
    # Nor may a gather's index: its range is checked before the kernel that gathers runs, so it
    # must be in a buffer by then (x.gather(1, x.argmax(1, keepdim=True)) read a missing buffer).
    fixed |= {movement_base(entries, e.inputs[1]) for e in entries if kind(e) == "gather"}
    r = reach(entries, m, _roots(entries, m, chain), stages_of, readers)
    for red in sorted((i for i in m if kind(entries[i]) == "reduce" and i not in fixed), reverse=True):
        users = set()
        for c in readers[red]:
            users |= {c} if c in m else r.get(c, {None})
        if len(users) != 1:
            continue
        (k,) = users
        if k is None or k == red or k not in space or is_library(entries, k) or k in chain:
            continue
        e = entries[red]
        rspace = (entries[e.inputs[0]].shape, tuple(e.attrs["axes"]))
        kshape, kaxes = space[k]
        if kaxes:
            if not same((kshape, kaxes), rspace):
                continue
        else:
            full, reduced = rspace[0], e.shape
            squeezed = tuple(n for d, n in enumerate(full) if d not in rspace[1])
            if not (same(kshape, full) or same(kshape, reduced) or same(kshape, squeezed)):
                continue
            if kind(entries[k]) == "reduce":
                continue
        space[k] = rspace
        m.discard(red)
        inner = stages_of.pop(red, ())
        for s in inner:
            stage_owner[s] = k
        stages_of[k] = tuple(sorted(set(stages_of.get(k, ())) | set(inner) | {red}))
        stage_owner[red] = k
        space.pop(red, None)
        # red's region (and red itself) is now computed by k.
        for i in _region(entries, m, red):
            ks = r.setdefault(i, set())
            ks.discard(red)
            ks.add(k)

    # Values needed by several kernels: materialize unless cheap to recompute. Waves,
    # consumers first; a candidate below one picked in the same wave waits for the next
    # wave (the pick may leave it with a single kernel). Kernels that merge_outputs will run
    # as one loop count as one (an LSTM cell's c and h read the gates in one loop).
    # A value of at most one op stays so as buffers are added (its region only shrinks): it is
    # set aside once, not weighed again at every wave (an LSTM's unrolled step had a thousand).
    # A value's cost is weighed only once it is read by several loops (the cheaper test).
    cheap: set = set()

    def costly(i: int) -> bool:
        if _cost(entries, m, i) > 1:
            return True
        cheap.add(i)
        return False

    # Past EXACT_WAVES waves (a long unrolled loop: a recurrence's values wait one wave per
    # step, each wave a pass over the whole trace), a wave materializes every candidate, the
    # shadowed too: a few buffers more than the waves would leave, in a few waves.
    library = {i for i in m if is_library(entries, i)}
    waves = 0
    while True:
        several = [i for i, ks in r.items() if len(ks) > 1 and i not in stage_owner and i not in m and i not in cheap]
        if not several:
            break
        loop = _loops(entries, m, r, space, library)
        multi = sorted((i for i in several if _several_loops(r[i], loop) and costly(i)), reverse=True)
        if not multi:
            break
        waves += 1
        exact = waves <= EXACT_WAVES
        shadowed: set = set()
        for i in multi:
            if exact and i in shadowed:
                continue
            m.add(i)
            space[i] = (entries[i].shape, ())
            if exact:
                shadowed |= _region(entries, m, i, include_root=False)
            r.pop(i, None)  # a buffer now: reach keeps no entry for it
        if not exact:
            shadowed = _below(entries, m, multi)
        # Only the nodes below a new buffer change kernels: update those (a full reach per wave
        # was quadratic in an unrolled loop's length, whose waves grow with its steps).
        _update_reach(entries, m, set(_roots(entries, m, chain)), stages_of, readers, r, shadowed)
    r = _split_large(
        entries, m, space, r, stage_owner, lambda: reach(entries, m, _roots(entries, m, chain), stages_of, readers)
    )
    for s in stage_owner:
        users = r.get(s, set())
        if len(users) > 1:
            raise NeedsMaterialize(s, "reduction used by several kernels")

    groups = []
    roots = _roots(entries, m, chain)
    r = reach(entries, m, roots, stages_of, readers)
    members: dict = {}
    for i, ks in r.items():
        for k in ks:
            members.setdefault(k, []).append(i)
    for k in sorted(set(roots) | {i for i in m if is_library(entries, i)}):
        if is_library(entries, k):
            groups.append(FusionGroup(k, entries[k].shape, (), (), ()))
            continue
        shape, axes = space.get(k, (entries[k].shape, ()))
        stages = tuple(sorted(stages_of.get(k, ())))
        if kind(entries[k]) == "reduce":
            stages = tuple(sorted(set(stages) | {k}))
        groups.append(FusionGroup(k, shape, axes, stages, tuple(sorted(set(members.get(k, ())) | {k}))))
    return merge_outputs(entries, groups, m), m, chain


def _loops(entries, m, r, space, library: set):
    """kernel root -> the root of the loop that will compute it: merge_outputs' rule, foreseen
    before the groups exist (an elementwise kernel goes into its first reader when that reader
    is an elementwise kernel of the same shape reading it at its own index). A wrong guess costs
    a value computed in two kernels, never a wrong result."""
    readers: dict = {}
    for j, ks in r.items():
        for i in entries[j].inputs:
            if i in space:
                readers.setdefault(i, set()).update(ks)
    for k in space:  # kernels (``library``: the library ops, all among the buffers)
        for i in entries[k].inputs:
            if i in space:
                readers.setdefault(i, set()).add(k)
    for k in library:
        for i in entries[k].inputs:
            i = _operand_base(entries, m, i)
            if i in space:
                readers.setdefault(i, set()).add(k)
    size: Counter = Counter()  # kernel -> the non-movement ops it inlines
    for j, ks in r.items():
        if kind(entries[j]) != "movement":
            size.update(ks)  # (counted in C: a long unrolled trace's kernels inline many nodes)
    into: dict = {}
    for a, ks in readers.items():
        c = min(ks)
        (a_shape, a_axes), (c_shape, c_axes) = space[a], space.get(c, ((), (0,)))
        if (
            a_axes
            or c_axes
            or c <= a
            or is_library(entries, c)
            or not same(a_shape, c_shape)
            or not same(entries[a].shape, c_shape)
            or size.get(a, 0) + size.get(c, 0) + 2 > MAX_KERNEL_OPS  # merge_outputs' cap
            or not _elementwise_path_only(entries, m, c, a)
        ):
            continue
        into[a] = c

    # Chains are followed, although merge_outputs absorbs a kernel only into one that is not
    # absorbed itself: where that leaves two loops, the value is computed in both, which for a
    # few ops costs less than a buffer (an LSTM language model's training step, paired runs of
    # its plan: 17.0 and 18.4 ms with each step's gates computed in its c and h kernels, 17.4
    # and 19.0 ms with them stored between; 691 steps against 761).
    # Memoized with path compression: a wave asks for the loops of every kernel reaching every
    # candidate, and an unrolled recurrence makes the chains long (time_sequence_prediction's
    # 100-step LSTMCell loop: 73 million steps along chains in 11 s of 110 s of lowering).
    ends: dict = {}

    def loop(k: int) -> int:
        path = []
        while k in into:
            end = ends.get(k)
            if end is not None:
                k = end
                break
            path.append(k)
            k = into[k]
        for j in path:
            ends[j] = k
        return k

    return loop


def _several_loops(kernels: set, loop) -> bool:
    """Whether the ``kernels`` run in more than one loop (stops at the second: a node low in an
    unrolled recurrence is inlined by hundreds of kernels)."""
    first = None
    for k in kernels:
        end = loop(k)
        if first is None:
            first = end
        elif end != first:
            return True
    return False


def _split_large(entries, m, space, r, stage_owner, recompute) -> dict:
    """Cut kernels of more than :data:`MAX_KERNEL_OPS` ops: materialize, in each, the elementwise
    node whose region below it is the largest that fits, until every kernel fits (or has no
    such node: a node above a reduction stage stays with its stage). Returns the new reach."""
    stuck: set = set()
    while True:
        regions: dict = {}  # kernel root -> the nodes it inlines, ascending
        for i in sorted(r):
            for k in r[i]:
                regions.setdefault(k, []).append(i)
        big = [k for k, nodes in regions.items() if _ops(entries, nodes) + 1 > MAX_KERNEL_OPS and k not in stuck]
        if not big:
            return r
        for k in big:
            cut = _cut_point(entries, regions[k], stage_owner)
            if cut is None:
                stuck.add(k)
                continue
            m.add(cut)
            space[cut] = (entries[cut].shape, ())
        r = recompute()


def _cut_point(entries, region: list, stage_owner) -> int | None:
    """The elementwise node of ``region`` (node positions, ascending: inputs first) whose
    inlined region below it is the largest of at most MAX_KERNEL_OPS ops and holds no
    reduction stage; None when there is none."""
    inside = set(region)
    bits: dict = {}
    staged: set = set()
    best, best_n = None, 0
    for pos, i in enumerate(region):
        b = 0 if kind(entries[i]) == "movement" else 1 << pos
        for j in entries[i].inputs:
            if j in inside:
                b |= bits[j]
                if j in staged:
                    staged.add(i)
        if i in stage_owner:
            staged.add(i)
        bits[i] = b
        n = b.bit_count()
        if n <= MAX_KERNEL_OPS and n > best_n and i not in staged and kind(entries[i]) == "elementwise":
            best, best_n = i, n
    return best


def _ops(entries, members) -> int:
    return sum(1 for i in members if kind(entries[i]) != "movement")


def _elementwise_path_only(entries, m, root: int, target: int) -> bool:
    """Every path from ``root`` down to ``target`` (inside the kernel) is elementwise ops only,
    so the kernel reads ``target`` exactly at its own iteration index."""
    if kind(entries[root]) != "elementwise":
        # The root itself reads its inputs at other indices (a gather: flip, index_select):
        # it would read the target's buffer while the same loop is writing it.
        return False
    stack, seen = [root], set()
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        for i in entries[j].inputs:
            if i == target:
                if kind(entries[j]) != "elementwise":
                    return False
            elif i not in m:
                if kind(entries[i]) != "elementwise":
                    if _reaches(entries, m, i, target):
                        return False
                    continue
                stack.append(i)
    return True


def _reaches(entries, m, start: int, target: int) -> bool:
    stack, seen = [start], set()
    while stack:
        j = stack.pop()
        if j == target:
            return True
        if j in seen or (j in m and j != start):
            continue
        seen.add(j)
        stack.extend(entries[j].inputs)
    return False


def merge_outputs(entries, groups: list, m: set) -> list:
    """Multi-output kernels: an elementwise kernel A whose buffer is read by a later
    elementwise kernel C over the same shape, at C's own index, and by nothing that runs
    before C, is computed inside C's loop, which writes both (an optimizer update writes
    its state and the parameter in one pass instead of one pass each)."""
    position = {g.root: n for n, g in enumerate(groups)}
    readers: dict = {}
    for n, g in enumerate(groups):
        if is_library(entries, g.root):  # operands through movement chains (NumPy views)
            reads = {_operand_base(entries, m, i) for i in entries[g.root].inputs}
        else:
            reads = {i for j in g.members for i in entries[j].inputs if i in m and i != j}
        for i in reads:
            readers.setdefault(i, set()).add(n)
    merged: dict = {}  # absorbed root -> absorbing group position
    out = list(groups)
    for n in range(len(groups) - 1, -1, -1):
        c = groups[n]
        if c.space_axes or c.stages or is_library(entries, c.root) or c.root in merged:
            continue
        extras, size = [], _ops(entries, c.members)
        for i in sorted({i for j in c.members for i in entries[j].inputs if i in position and i in m}):
            a = groups[position[i]]
            if (
                a.space_axes
                or a.stages
                or a.extra_roots
                or is_library(entries, a.root)
                or i in merged
                or not same(a.space_shape, c.space_shape)
                or not same(entries[i].shape, c.space_shape)
            ):
                continue
            if any(r < n and r != position[i] for r in readers.get(i, ())):
                continue  # a step before c reads it
            if not _elementwise_path_only(entries, m, c.root, i):
                continue
            if size + _ops(entries, a.members) > MAX_KERNEL_OPS:
                continue  # cut by _split_large: merged, the loop would compile as slowly
            size += _ops(entries, a.members)
            extras.append(i)
            merged[i] = n
        if extras:
            out[n] = FusionGroup(
                c.root,
                c.space_shape,
                c.space_axes,
                c.stages,
                tuple(sorted(set(c.members) | {j for i in extras for j in groups[position[i]].members})),
                tuple(extras),
            )
    return [g for g in out if g.root not in merged]
