"""The kernel emitter shared by the code generators: one FusionGroup -> the statements of its loops.

A kernel loops over its space ``(shape, axes)``: the kept dimensions are the
outer loops, the reduced dimensions the inner loops. Each reduction stage is one
pass over the reduced dimensions into an accumulator; values that depend only on
the outer indices are computed once per row, before the pass that first needs
them. The root is then written by a last pass (full-shape root) or once per row
(reduced-shape root).

Indices are affine forms over the loop variables (:class:`Lin`); movement ops
transform them through their op-table index maps (``OpDef.index_map``: permute,
expand, slice, pad) or, for ops that keep the element order (``OpDef.flat_index``:
reshape), decompose the flat offset back into dimensions when the strides allow it —
otherwise the planner materializes the value (:class:`NeedsMaterialize`). Adjacent
loops that every index walks contiguously are merged, so a contiguous elementwise
kernel is a single flat loop that LLVM vectorizes.

:class:`Emitter` builds the statements (one per op, each cast to its dtype: a bare
literal would widen float32 arithmetic to float64) and the loop structure; each
backend lays them out as a kernel: ``lowering/cpu/codegen.py`` (Numba loops) and
``lowering/cuda/codegen.py`` (grid-stride loops and one block per row).
Buffers are passed flat (1-D, C-contiguous); scalars as typed NumPy scalars, or,
for kernels with many of them (a long chain of ``x * 1.0001``), packed into one
1-D array per dtype that the kernel unpacks once (:func:`kernel_arguments`). The CPU's kernels
are shape-generic: their sizes come in one int64 array ``zs`` (:meth:`Emitter.size`).
"""

from __future__ import annotations

from lazyvic import dtypes as dt
from lazyvic import ops as optable
from lazyvic.lowering.fusion import FusionGroup, NeedsMaterialize
from lazyvic.ops.elementwise import ALIAS, const
from lazyvic.trace.symbolic import Sym, identical

# Half storage types in kernels (kernel_lib): values are float32 rounded to the type, arrays
# hold the uint16 bits.
ROUND = {"float16": "round_f16_f32", "bfloat16": "round_bf16_f32"}
LOAD = {"float16": "ld_f16", "bfloat16": "ld_bf16"}
STORE = {"float16": "st_f16", "bfloat16": "st_bf16"}

PACK_SCALARS = 8  # more scalar arguments than this are passed as arrays
# Shape-generic kernels (the CPU's): sizes, strides and offsets of magnitude above this are
# kernel arguments, not literals, so one kernel serves every size (a smaller last batch, an
# evaluation batch, a plan of symbolic sizes reuse the first plan's kernels). Smaller ones stay
# literal: a short inner loop of known trip count unrolls, and a small size rarely varies.
SPECIALIZE_MAX = 16


class Lin:
    """``sum(coef * var) + const`` over loop variables.

    Int variables are loop dimensions; str variables are values loaded in the kernel
    (a gather's index), named by the statement that holds them. Coefficients and the constant
    are ints, or :class:`~lazyvic.trace.symbolic.Sym` sizes in a plan lowered for symbolic
    sizes (rendered as the kernel's size arguments, see :meth:`Emitter.size`).
    """

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms = {v: c for v, c in (terms or {}).items() if c}
        self.const = const

    def __add__(self, other):
        if not isinstance(other, Lin):  # an int or a symbolic size
            return Lin(self.terms, self.const + other)
        t = dict(self.terms)
        for v, c in other.terms.items():
            t[v] = t.get(v, 0) + c
        return Lin(t, self.const + other.const)

    def scale(self, k: int) -> "Lin":
        return Lin({v: c * k for v, c in self.terms.items()}, self.const * k)

    def key(self):
        return (tuple(sorted(self.terms.items(), key=str)), self.const)

    def bounds(self, sizes) -> tuple:
        lo = hi = self.const
        for v, c in self.terms.items():
            span = c * (sizes[v] - 1)
            if span < 0:
                lo += span
            else:
                hi += span
        return lo, hi


def contiguous_strides(shape) -> list:
    strides, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= shape[d]
    return strides


def flat(idx, shape) -> Lin:
    out = Lin()
    for lin, s in zip(idx, contiguous_strides(shape)):
        out = out + lin.scale(s)
    return out


def unflatten(f: Lin, shape, sizes):
    """Split a flat offset into per-dimension indices of ``shape``, or None if it would carry."""
    if 0 in shape:
        return None  # nothing is loaded from an empty shape; let the caller use the flat offset
    strides = contiguous_strides(shape)
    dims = [Lin() for _ in shape]
    maxes = [0] * len(shape)
    c = f.const
    for d, (n, s) in enumerate(zip(shape, strides)):
        if n == 0:
            return None
        digit = (c // s) % n if d else c // s
        dims[d] = dims[d] + digit
        maxes[d] += digit
    for v, coef in f.terms.items():
        if coef < 0:
            return None
        placed = False
        for d, s in enumerate(strides):
            if shape[d] == 1:
                continue
            if coef % s == 0 and (d == 0 or coef < strides[d - 1]):
                dims[d] = dims[d] + Lin({v: coef // s})
                maxes[d] += coef // s * (sizes[v] - 1)
                placed = True
                break
        if not placed:
            return None
    if any(mx >= n for mx, n in zip(maxes[1:], shape[1:])):
        return None
    return dims


class Emitter:
    """Builds the statements and loops of one fusion group's kernel (see the module docstring)."""

    def __init__(self, entries, materialized, group: FusionGroup, generic: bool = False, alias=frozenset()):
        self.e = entries
        # Buffers that share the output's storage (lowering/pipeline.plan_in_place): read as
        # ``out`` at the element the loop then stores, so LLVM sees one array, one address.
        self.alias = alias
        self.generic = generic  # sizes above SPECIALIZE_MAX as arguments (see size())
        self.m = materialized
        self.g = group
        self.stage_set = set(group.stages)
        shape, axes = group.space_shape, group.space_axes
        self.shape, self.axes = shape, axes
        # One loop per dimension of size != 1: kept dimensions outside, reduced inside.
        self.outer = [d for d in range(len(shape)) if d not in axes and shape[d] != 1]
        self.inner = [d for d in axes if shape[d] != 1]
        self.lins: list = []
        self.lin_buf: list = []
        self.dyn_inner: dict = {}  # loaded index variable -> depends on the reduced loops
        self.dyn_size: dict = {}  # loaded index variable -> its range (the gathered dim)
        self.bufs: dict = {}
        self.scals: dict = {}
        self.tmp = 0
        self.row_lines: list = []
        self.loop_lines = None
        self.pending_row: list = []
        self.row_memo: dict = {}
        self.loop_memo: dict = {}
        self.stage_result: dict = {}
        self.row_cache = None
        self.row_cache_stored = False
        self.row_cache_pending = False
        self.ops_used: list = []
        self.size_args: dict = {}  # symbolic size (a Sym) -> the kernel's argument holding it
        self.size_list: list = []  # generic: the value (int or Sym) of each size argument, in order
        # Float sums in the fixed lane order of ops/numerics.py (the CPU's kernels): their reduced
        # loops stay one per dimension (merged loops would change which elements share a lane).
        self.lane_sums = generic and any(
            entries[s].op == "sum" and entries[entries[s].inputs[0]].dtype.is_floating_point for s in group.stages
        )

    # -- helpers ------------------------------------------------------------
    def size(self, n) -> str:
        """Source text of a size, stride or offset: an int's literal, or the name of the size
        argument that carries it (``z0``, ``z1``, ... in order of use).

        Generic (the CPU's kernels): every symbolic size and every int of magnitude above
        SPECIALIZE_MAX gets an argument of its own at each use — not one per value, so that the
        source depends on the kernel's structure only: a plan for batch 128 (where the batch
        and a hidden size of 128 coincide) and a plan of a symbolic batch make the same source.
        Otherwise (CUDA) ints are literals and each symbolic size one argument (first use)."""
        if self.generic:
            if not isinstance(n, Sym) and -SPECIALIZE_MAX <= n <= SPECIALIZE_MAX:
                return str(n)
            self.size_list.append(n)
            return f"z{len(self.size_list) - 1}"
        if not isinstance(n, Sym):
            return str(n)
        name = self.size_args.get(n.poly)
        if name is None:
            name = self.size_args[n.poly] = (f"z{len(self.size_args)}", n)
        return name[0]

    def sizes(self) -> list:
        """The sizes (ints, or Syms) the kernel takes as arguments, in argument order."""
        if self.generic:
            return list(self.size_list)
        return [sym for _, sym in self.size_args.values()]

    def full_index(self):
        return [Lin({d: 1}) if n != 1 else Lin() for d, n in enumerate(self.shape)]

    def lin_token(self, lin: Lin, buf: str | None = None) -> str:
        """A placeholder for an index, rendered after loop merging; ``buf`` names the array it indexes."""
        self.lins.append(lin)
        self.lin_buf.append(buf)
        return f"\x00{len(self.lins) - 1}\x00"

    def depends_on_inner(self, lins) -> bool:
        inner = set(self.inner)
        return any(v in inner or self.dyn_inner.get(v, False) for lin in lins for v in lin.terms)

    def new_tmp(self) -> str:
        self.tmp += 1
        return f"t{self.tmp - 1}"

    def statement(self, expr: str, dtype: dt.DType, inner: bool, exact: bool = False) -> str:
        """A new variable holding ``expr`` as a ``dtype`` value. A half type's value is its
        float32 rounded to the half type (every op rounds its result, as the interpreter does),
        unless ``exact`` (a loaded value, already one)."""
        name = self.new_tmp()
        fn = ROUND.get(dtype.name, ALIAS[dtype.name]) if not exact else ALIAS[dtype.name]
        line = f"{name} = {fn}({expr})"
        if inner and self.loop_lines is not None:
            self.loop_lines.append(line)
        elif self.loop_lines is not None:
            self.pending_row.append(line)
        else:
            self.row_lines.append(line)
        return name

    def load(self, array: str, index: str, dtype: dt.DType) -> str:
        """The expression of one element of ``array`` as a ``dtype`` value (a half type's
        storage is its uint16 bits: kernel_lib's ``ld_f16`` / ``ld_bf16`` widen them)."""
        load = f"{array}[{index}]"
        return f"{LOAD[dtype.name]}({load})" if dtype.name in LOAD else load

    def store(self, array: str, index: str, value: str, dtype: dt.DType) -> str:
        """The statement storing ``value`` (a ``dtype`` value) into one element of ``array``."""
        return (
            f"{array}[{index}] = {STORE[dtype.name]}({value})" if dtype.name in STORE else f"{array}[{index}] = {value}"
        )

    def buffer_name(self, i: int) -> str:
        if i in self.alias:
            return "out"
        if i not in self.bufs:
            self.bufs[i] = f"in{len(self.bufs)}"
        return self.bufs[i]

    # -- expressions ---------------------------------------------------------
    def emit(self, i: int, idx: list, conds: tuple, root: bool = False):
        """Name of a variable holding node i at index ``idx``; returns (name, depends_on_inner)."""
        key = (i, tuple(l.key() for l in idx), tuple((c[0].key(), c[1], c[2]) for c in conds))
        hit = self.loop_memo.get(key) or self.row_memo.get(key)
        if hit is not None:
            return hit
        e = self.e[i]
        op, shape, dtype = e.op, e.shape, e.dtype
        opdef = optable.OPS[op]
        if op == "scalar":
            slot = e.slot
            if slot not in self.scals:
                self.scals[slot] = f"s{len(self.scals)}"
            return self.scals[slot], False
        if i in self.stage_set and not root:
            want = self.reduced_index_for(shape)
            if [l.key() for l in idx] != [l.key() for l in want]:
                raise NeedsMaterialize(i, "reduction read at another index than its row")
            return self.stage_result[i], False
        if i == self.row_cache and self.row_cache_stored and self.is_full_index(idx) and not conds:
            f = flat(idx, shape)
            res = (self.statement(self.load("out", self.lin_token(f, "out"), dtype), dtype, True, exact=True), True)
            self.loop_memo[key] = res
            return res
        if (i in self.m and not root) or op == "buffer":
            f = flat(idx, shape)
            inner = self.depends_on_inner([f]) or self.depends_on_inner([c[0] for c in conds])
            load = self.load(self.buffer_name(i), self.lin_token(f, self.buffer_name(i)), dtype)
            if conds:
                load = f"{load} if {self.cond_expr(conds)} else {const(dtype, 0)}"
            res = (self.statement(load, dtype, inner, exact=True), inner)
        elif opdef.kind == "elementwise":
            args = [self.emit(j, idx, conds) for j in e.inputs]
            in_dtypes = [self.e[j].dtype for j in e.inputs]
            inner = any(a[1] for a in args)
            self.ops_used.append(op)
            res = (self.statement(opdef.expr([a[0] for a in args], in_dtypes, dtype), dtype, inner), inner)
        elif opdef.kind == "movement":
            res = self.emit_movement(i, idx, conds)
        elif opdef.kind == "gather":
            # out[idx] = x[idx with dim replaced by index[idx]]: a load at a loaded index.
            dim = e.attrs["dim"]
            x, index = e.inputs
            where, inner = self.emit(index, idx, conds)
            self.dyn_inner[where] = inner
            self.dyn_size[where] = self.e[x].shape[dim]
            x_idx = [Lin({where: 1}) if d == dim else lin for d, lin in enumerate(idx)]
            self.ops_used.append(op)
            res = self.emit(x, x_idx, conds)
        else:
            raise NeedsMaterialize(i, f"{op} cannot be inlined")
        (self.loop_memo if res[1] and self.loop_lines is not None else self.row_memo)[key] = res
        if i == self.row_cache and self.loop_lines is not None and self.is_full_index(idx) and not conds:
            self.loop_lines.append(self.store("out", self.lin_token(flat(idx, shape), "out"), res[0], dtype))
            self.row_cache_pending = True
        return res

    def is_full_index(self, idx) -> bool:
        return [l.key() for l in idx] == [l.key() for l in self.full_index()]

    def reduced_index_for(self, shape):
        return [Lin() if (d in self.axes or n == 1) else Lin({d: 1}) for d, n in enumerate(shape)]

    def cond_expr(self, conds) -> str:
        parts = []
        for lin, lo, hi in conds:
            tok = self.lin_token(lin)
            parts.append(f"({self.size(lo)} <= {tok} < {self.size(hi)})")
        return " and ".join(parts)

    def emit_movement(self, i: int, idx: list, conds: tuple):
        """Movement node i read at ``idx``: its input read at the index that the op's declaration
        in the op table maps ``idx`` to (``OpDef.index_map``, ``flat_index``, ``reads_outside``)."""
        e = self.e[i]
        opdef = optable.OPS[e.op]
        src = e.inputs[0]
        in_shape = self.e[src].shape
        in_m = src in self.m or self.e[src].op == "buffer"
        if opdef.flat_index:
            f = flat(idx, e.shape)
            if all(isinstance(n, int) and n == 1 for n in in_shape):
                # A one-element input (0-d, or every dim 1): every index reads its element. (The
                # flat index may still name loop variables, held at 0 by a pad's conditions, which
                # would not unflatten.)
                return self.emit(src, [Lin() for _ in in_shape], conds)
            if in_m and self.e[src].op != "scalar":
                in_idx = unflatten(f, in_shape, self.sizes_all()) or None
                if in_idx is None:
                    # Loading a buffer needs only the flat offset.
                    return self.load_flat(src, f, conds)
            else:
                in_idx = unflatten(f, in_shape, self.sizes_all())
                if in_idx is None:
                    raise NeedsMaterialize(src, f"{e.op} of a strided view")
            return self.emit(src, in_idx, conds)
        if opdef.index_map is None:
            raise NeedsMaterialize(i, f"unknown movement op {e.op}")
        in_idx = opdef.index_map(idx, e.attrs, in_shape, e.shape)
        if in_idx and not in_m:
            # Outer loops the input no longer depends on (a broadcast) would compute it again
            # for every value of theirs.
            kept = {v for lin in in_idx for v in lin.terms}
            dropped = any(v in self.outer and v not in kept for lin in idx for v in lin.terms)
            if dropped and self._cost(src) >= 3:
                raise NeedsMaterialize(src, "broadcast of a costly value would recompute it")
        if not opdef.reads_outside:
            return self.emit(src, in_idx, conds)
        # Reads outside the input give zero: guard the axes whose index can leave it.
        sizes = self.sizes_all()
        new = []
        for lin, n in zip(in_idx, in_shape):
            lo, hi = lin.bounds(sizes)
            if lo < 0 or hi >= n:
                new.append((lin, 0, n))
        all_conds = conds + tuple(new)
        val, inner = self.emit(src, in_idx, all_conds)
        if not new:
            return val, inner
        inner = inner or self.depends_on_inner([c[0] for c in new])
        expr = f"{val} if {self.cond_expr(tuple(new))} else {const(e.dtype, 0)}"
        return self.statement(expr, e.dtype, inner, exact=True), inner

    def load_flat(self, src, f, conds):
        dtype = self.e[src].dtype
        inner = self.depends_on_inner([f]) or self.depends_on_inner([c[0] for c in conds])
        load = self.load(self.buffer_name(src), self.lin_token(f, self.buffer_name(src)), dtype)
        if conds:
            load = f"{load} if {self.cond_expr(conds)} else {const(dtype, 0)}"
        return self.statement(load, dtype, inner, exact=True), inner

    def sizes_all(self):
        sizes = {d: n for d, n in enumerate(self.shape)}
        sizes.update(self.dyn_size)
        return sizes

    def _cost(self, i, limit=3):
        total, stack, seen = 0, [i], set()
        while stack and total < limit:
            j = stack.pop()
            if j in seen or j in self.m or self.e[j].is_input:
                continue
            seen.add(j)
            if optable.OPS[self.e[j].op].kind != "movement":
                total += 1
            stack.extend(self.e[j].inputs)
        return total

    # -- structure -------------------------------------------------------------
    def open_loop(self):
        self.loop_lines = []
        self.pending_row = []
        self.loop_memo = {}

    def close_loop(self, lanes=None):
        """End the pass over the reduced loops. ``lanes``: ``(accumulator, value, dtype)`` of a
        float sum whose accumulation the code generator writes in the lane order of
        ``ops/numerics.py`` (the pass is then ``("LANES", body, accumulator, value, dtype)``)."""
        if getattr(self, "row_cache_pending", False):
            self.row_cache_stored, self.row_cache_pending = True, False
        body = self.loop_lines
        self.row_lines.extend(self.pending_row)
        self.row_lines.append(("LOOP", body) if lanes is None else ("LANES", body, *lanes))
        self.loop_lines = None
        self.pending_row = []
        self.loop_memo = {}

    def _inlined_from(self, start: int, stop: set) -> set:
        """Non-materialized nodes computed inside this kernel under ``start``."""
        seen, stack = set(), [start]
        while stack:
            j = stack.pop()
            if j in seen or j in stop or j in self.m or self.e[j].is_input:
                continue
            seen.add(j)
            stack.extend(self.e[j].inputs)
        return seen

    def choose_row_cache(self):
        """A costly full-row value that the last pass would recompute (softmax's exp).

        Its first pass stores it in the output row, the last pass reads it back: the
        output row is written only by the last pass, at the same index. (Shapes are compared as
        expressions: a row that matches for some sizes only is not cached, rather than guarded.)
        """
        root = self.g.root
        if not self.axes or root in self.stage_set or not identical(self.e[root].shape, tuple(self.shape)):
            return None
        final = set()
        for j in self.e[root].inputs:
            final |= self._inlined_from(j, self.stage_set)
        staged = set()
        for s in self.g.stages:
            staged |= self._inlined_from(self.e[s].inputs[0], self.stage_set)
        costly = ("exp", "log", "tanh", "sigmoid", "erf", "pow")
        best = None
        for j in final & staged:
            e = self.e[j]
            if j == root or not identical(e.shape, tuple(self.shape)) or e.dtype is not self.e[root].dtype:
                continue
            if any(self.e[k].op in costly for k in self._inlined_from(j, self.stage_set)):
                best = j if best is None or j > best else best
        return best

    def build(self):
        g = self.g
        root = g.root
        r_shape = self.e[root].shape
        self.row_cache = self.choose_row_cache()
        self.row_cache_stored = False
        for s in g.stages:
            sop, sinputs = self.e[s].op, self.e[s].inputs
            opdef = optable.OPS[sop]
            acc = f"a{len(self.stage_result)}"
            inits = opdef.reduce_init(self.e[sinputs[0]].dtype)
            names = [acc + suffix for suffix, _ in inits]
            for name, (_, lit) in zip(names, inits):
                self.row_lines.append(f"{name} = {lit}")
            self.open_loop()
            v, _ = self.emit(sinputs[0], self.full_index(), ())
            if self.generic and self.row_cache_pending:
                # The row cache is stored in this pass: the accumulation goes to a pass of its
                # own that reads it back. A loop that stores and accumulates is vectorized
                # behind a runtime check of the arrays' addresses (Numba's arrays may alias),
                # so its sum would be added in one order or another depending on where the
                # buffers lie; a loop that only loads is always vectorized the same way.
                self.close_loop()
                self.open_loop()
                v, _ = self.emit(sinputs[0], self.full_index(), ())
            in_dtype = self.e[sinputs[0]].dtype
            if self.lane_sums and sop == "sum" and in_dtype.is_floating_point and self.inner:
                # One order for every machine (ops/numerics.py): the generator writes the lanes.
                self.close_loop(lanes=(names[0], v, in_dtype))
            elif self.lane_sums and sop == "sum" and in_dtype.is_floating_point:
                # Reduced axes of size 1 only: the element added to +0.0 with strict IEEE rules, as
                # the lanes add it (acc_add's no-signed-zeros flag kept a -0.0 the interpreter's
                # +0.0 + -0.0 turns into +0.0).
                self.loop_lines.append(f"{names[0]} = {names[0]} + {v}")
                self.close_loop()
            else:
                r_flat = flat(
                    [Lin({d: 1}) if self.shape[d] != 1 else Lin() for d in self.axes],
                    [self.shape[d] for d in self.axes],
                )
                self.loop_lines.extend(opdef.reduce_combine(names, v, self.lin_token(r_flat), in_dtype))
                self.close_loop()
            if self.e[s].dtype.name in ROUND:  # the reduction's value, as the interpreter has it
                self.row_lines.append(f"{names[0]} = {ROUND[self.e[s].dtype.name]}({names[0]})")
            self.stage_result[s] = names[0]
            self.ops_used.append(sop)
        for k, extra in enumerate(g.extra_roots):
            # Another output of this loop, computed first; the root's expression then
            # reads the value instead of loading the buffer being written.
            idx = self.full_index()
            v, inner = self.emit(extra, idx, (), root=True)
            name = f"out{k + 1}"
            self.row_lines.append(
                self.store(name, self.lin_token(flat(idx, self.e[extra].shape), name), v, self.e[extra].dtype)
            )
            self.row_memo[(extra, tuple(l.key() for l in idx), ())] = (v, inner)
            self.ops_used.append(self.e[extra].op)
        # (As expressions: a tuple's == compares elements even when the lengths differ, and the
        # root's dims are the space's own or 1 at reduced axes.)
        full_root = identical(r_shape, tuple(self.shape)) and (not self.axes or root not in self.stage_set)
        if root in self.stage_set:
            value = self.stage_result[root]
            store = flat(self.reduced_index_for(r_shape), r_shape)
            self.row_lines.append(self.store("out", self.lin_token(store, "out"), value, self.e[root].dtype))
        elif full_root and self.axes:
            self.open_loop()
            idx = self.full_index()
            v, _ = self.emit(root, idx, (), root=True)
            self.loop_lines.append(self.store("out", self.lin_token(flat(idx, r_shape), "out"), v, self.e[root].dtype))
            self.close_loop()
        else:
            if full_root:
                idx = self.full_index()
            elif len(r_shape) == len(self.shape):
                idx = self.reduced_index_for(r_shape)
            else:  # reduced shape with the reduced axes squeezed away
                kept = [d for d in range(len(self.shape)) if d not in self.axes]
                idx = [Lin({d: 1}) if self.shape[d] != 1 else Lin() for d in kept]
            v, _ = self.emit(root, idx, (), root=True)
            self.row_lines.append(self.store("out", self.lin_token(flat(idx, r_shape), "out"), v, self.e[root].dtype))

    def identity_reads(self) -> tuple:
        """The buffers this kernel reads only at the element it stores, each of the output's
        dtype and shape (so at the same offset): any one of them may share the output's
        storage. Empty for a kernel with reductions, more outputs or a row cache (they read or
        store elsewhere than the element of the iteration)."""
        if self.g.stages or self.g.extra_roots or self.row_cache is not None:
            return ()
        stores = {lin.key() for lin, buf in zip(self.lins, self.lin_buf) if buf == "out"}
        if len(stores) != 1:
            return ()
        names = {name: pos for pos, name in self.bufs.items()}
        keys: dict = {}
        for lin, buf in zip(self.lins, self.lin_buf):
            if buf in names:
                keys.setdefault(names[buf], set()).add(lin.key())
        root = self.e[self.g.root]
        return tuple(
            p
            for p, k in keys.items()
            if k == stores and self.e[p].dtype == root.dtype and identical(self.e[p].shape, root.shape)
        )

    # -- loop merging and rendering --------------------------------------------
    def merge_loops(self):
        """Merge adjacent loops (same class) that every index walks contiguously."""
        sizes = {d: n for d, n in enumerate(self.shape)}
        groups = []
        for cls in (self.outer, self.inner):
            merged = list(cls)
            if cls is self.inner and self.lane_sums:
                groups.append(merged)
                continue
            i = 0
            while i + 1 < len(merged):
                a, b = merged[i], merged[i + 1]
                if all(lin.terms.get(a, 0) == lin.terms.get(b, 0) * sizes[b] for lin in self.lins):
                    # coef_a * i_a + coef_b * i_b == coef_b * (i_a * size_b + i_b): keep b, drop a.
                    for lin in self.lins:
                        lin.terms.pop(a, None)
                    sizes[b] = sizes[a] * sizes[b]
                    merged.pop(i)
                else:
                    i += 1
            groups.append(merged)
        self.outer, self.inner = groups
        self.loop_sizes = sizes

    def render_lin(self, lin: Lin, local: int | None = None) -> str:
        """``local``: the chunked outer variable, written as ``ii`` (the array view starts at the chunk)."""
        parts = []
        for v, c in sorted(lin.terms.items(), key=str):
            name = v if isinstance(v, str) else "ii" if v == local else f"i{v}"
            parts.append(name if _is_one(c) else f"{name} * {self.size(c)}")
        if not _is_zero(lin.const) or not parts:
            parts.append(self.size(lin.const))
        return " + ".join(parts)


def _is_one(c) -> bool:
    return not isinstance(c, Sym) and c == 1


def _is_zero(c) -> bool:
    return not isinstance(c, Sym) and c == 0


def kernel_arguments(em, entries, group, text: str) -> tuple:
    """A kernel's parameters: ``(text, buffers, scalar_slots, packed, args)``.

    Outputs, then input buffers, then scalars; with more than PACK_SCALARS scalars they come
    as one array per dtype (``packed``: ``((dtype name, slots), ...)``), unpacked at the top of
    ``text``. Shared by the CPU and CUDA generators (a CUDA kernel's parameters are limited).
    """
    buffers = list(em.bufs)
    scalar_slots = list(em.scals)
    packed = ()
    if len(scalar_slots) > PACK_SCALARS:
        slot_dtype = {e.slot: e.dtype.compute.name for e in entries if e.op == "scalar"}
        by_dtype: dict = {}
        for slot in scalar_slots:
            by_dtype.setdefault(slot_dtype[slot], []).append(slot)
        packed = tuple((d, tuple(slots)) for d, slots in sorted(by_dtype.items()))
        unpack = []
        for d, slots in packed:
            unpack += [f"    {em.scals[slot]} = sp_{ALIAS[d]}[{k}]" for k, slot in enumerate(slots)]
        text = "\n".join(unpack + [text])
        scalar_slots = []
    outs = ["out"] + [f"out{k + 1}" for k in range(len(group.extra_roots))]
    args = (
        outs
        + [em.bufs[b] for b in buffers]
        + [em.scals[s] for s in scalar_slots]
        + [f"sp_{ALIAS[d]}" for d, _ in packed]
        + [name for name, _ in em.size_args.values()]  # symbolic sizes, int64, last
    )
    if em.size_list:  # generic sizes: one int64 array, unpacked once at the top
        text = "\n".join([size_unpacking(len(em.size_list)), text])
        args.append("zs")
    return text, buffers, scalar_slots, packed, args


def size_unpacking(n: int, indent: str = "    ") -> str:
    """The lines that read a generic kernel's ``n`` size arguments from its array ``zs``."""
    return "\n".join(f"{indent}z{k} = zs[{k}]" for k in range(n))


def argument_types(entries, group, buffers) -> list:
    """``(dtype name, is_array)`` of a kernel's array arguments: its outputs, then ``buffers``."""
    return (
        [(entries[group.root].dtype.kernel_np.name, True)]
        + [(entries[x].dtype.kernel_np.name, True) for x in group.extra_roots]
        + [(entries[b].dtype.kernel_np.name, True) for b in buffers]
    )
