"""CPU code generation: one FusionGroup -> Python source of a Numba kernel.

A kernel loops over its space ``(shape, axes)``: the kept dimensions are the
outer loops (the first one a ``prange`` when the kernel is large enough), the
reduced dimensions the inner loops. Each reduction stage is one pass over the
reduced dimensions into an accumulator; values that depend only on the outer
indices are computed once per row, before the pass that first needs them. The
root is then written by a last pass (full-shape root) or once per row
(reduced-shape root).

Indices are affine forms over the loop variables (:class:`Lin`); movement ops
transform them (permute, expand, slice, pad) or, for reshape, decompose the
flat offset back into dimensions when the strides allow it — otherwise the
planner materializes the reshaped value (:class:`NeedsMaterialize`). Adjacent
loops that every index walks contiguously are merged, so a contiguous
elementwise kernel is a single flat loop that LLVM vectorizes.

Buffers are passed flat (1-D, C-contiguous); scalars as typed NumPy scalars, or,
for kernels with many of them (a long chain of ``x * 1.0001``), packed into one
1-D array per dtype that the kernel unpacks once.
One statement per op, each cast to its dtype (a bare literal would widen
float32 arithmetic to float64).
"""

from __future__ import annotations

import hashlib
import math

from lazyvic import dtypes as dt
from lazyvic import ops as optable
from lazyvic.lowering.fusion import FusionGroup, NeedsMaterialize
from lazyvic.lowering.kernel_cache import LIB_HASH
from lazyvic.ops.elementwise import ALIAS, const

# Smaller kernels run serially. Measured on TinyGPT's training step (2 cores; kernels of
# 131k-524k elements between BLAS calls): serial kernels with 2-thread BLAS ran the step in
# 26 ms against 35 ms with parallel kernels (whose OpenMP team waited for cores held by
# spinning BLAS threads), and a busy neighbouring process slowed parallel kernels 3x
# (each parallel region waits for a descheduled worker) but serial ones 1.4-2x.
PARALLEL_MIN_ELEMENTS = 1 << 20
PARALLEL_CHUNK_ELEMENTS = 1 << 14  # work per chunk handed to a thread
PACK_SCALARS = 8  # more scalar arguments than this are passed as arrays
# Kernels use strict IEEE arithmetic, so elementwise work rounds exactly as the NumPy
# interpreter does (no FMA contraction, no reassociation): a seeded computation gives the
# same bits whether its plan ran interpreted or compiled. Only a reduction's accumulation
# step may be reassociated, which the vectorizer needs: it is written with kernel_lib's
# acc_add / acc_max / acc_min, which put the flags on that one instruction. (Function-wide
# reassociation turned a log-softmax's (x - m) - log(s) into x - (m + log(s)), losing the
# low bits of inputs near 1e4.) The order is fixed per compiled kernel, so results are the
# same on every run and for every thread count.
FASTMATH = "False"


class Lin:
    """``sum(coef * var) + const`` over loop variables.

    Int variables are loop dimensions; str variables are values loaded in the kernel
    (a gather's index), named by the statement that holds them.
    """

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, const=0):
        self.terms = {v: c for v, c in (terms or {}).items() if c}
        self.const = const

    def __add__(self, other):
        if isinstance(other, int):
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


class KernelSource:
    """The generated source of one kernel and what it needs to run."""

    def __init__(self, name, source, sha, buffers, scalars, parallel, arg_types, packed=()):
        self.name = name
        self.source = source
        self.sha = sha
        self.buffers = buffers  # entry positions, argument order (after the output)
        self.scalars = scalars  # scalar slots passed one by one, argument order
        self.packed = packed  # ((dtype name, scalar slots), ...): arrays after the buffers
        self.parallel = parallel
        self.arg_types = arg_types  # (dtype name, is_array) per argument


class _Emitter:
    def __init__(self, entries, materialized, group: FusionGroup):
        self.e = entries
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

    # -- helpers ------------------------------------------------------------
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

    def statement(self, expr: str, dtype: dt.DType, inner: bool) -> str:
        name = self.new_tmp()
        line = f"{name} = {ALIAS[dtype.name]}({expr})"
        if inner and self.loop_lines is not None:
            self.loop_lines.append(line)
        elif self.loop_lines is not None:
            self.pending_row.append(line)
        else:
            self.row_lines.append(line)
        return name

    def buffer_name(self, i: int) -> str:
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
        op, attrs, inputs, shape, dtype = self.e[i]
        opdef = optable.OPS[op]
        if op == "scalar":
            slot = attrs[0]
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
            res = (self.statement(f"out[{self.lin_token(f, 'out')}]", dtype, True), True)
            self.loop_memo[key] = res
            return res
        if (i in self.m and not root) or op == "buffer":
            f = flat(idx, shape)
            inner = self.depends_on_inner([f]) or self.depends_on_inner([c[0] for c in conds])
            load = f"{self.buffer_name(i)}[{self.lin_token(f, self.buffer_name(i))}]"
            if conds:
                load = f"{load} if {self.cond_expr(conds)} else {const(dtype, 0)}"
            res = (self.statement(load, dtype, inner), inner)
        elif opdef.kind == "elementwise":
            args = [self.emit(j, idx, conds) for j in inputs]
            in_dtypes = [self.e[j][4] for j in inputs]
            inner = any(a[1] for a in args)
            self.ops_used.append(op)
            res = (self.statement(opdef.expr([a[0] for a in args], in_dtypes, dtype), dtype, inner), inner)
        elif opdef.kind == "movement":
            res = self.emit_movement(i, op, attrs, inputs[0], shape, idx, conds)
        elif opdef.kind == "random":
            # A counter-based generator: the value depends only on (seed, offset, element).
            seed, _ = self.emit(inputs[0], [], conds)
            offset, _ = self.emit(inputs[1], [], conds)
            f = flat(idx, shape)
            inner = self.depends_on_inner([f])
            k = self.statement(self.lin_token(f), dt.int64, inner)
            self.ops_used.append(op)
            res = (self.statement(opdef.expr([seed, offset, k], [], dtype), dtype, inner), inner)
        elif opdef.kind == "gather":
            # out[idx] = x[idx with dim replaced by index[idx]]: a load at a loaded index.
            dim = attrs["dim"]
            where, inner = self.emit(inputs[1], idx, conds)
            self.dyn_inner[where] = inner
            self.dyn_size[where] = self.e[inputs[0]][3][dim]
            x_idx = [Lin({where: 1}) if d == dim else lin for d, lin in enumerate(idx)]
            self.ops_used.append(op)
            res = self.emit(inputs[0], x_idx, conds)
        else:
            raise NeedsMaterialize(i, f"{op} cannot be inlined")
        (self.loop_memo if res[1] and self.loop_lines is not None else self.row_memo)[key] = res
        if i == self.row_cache and self.loop_lines is not None and self.is_full_index(idx) and not conds:
            self.loop_lines.append(f"out[{self.lin_token(flat(idx, shape), 'out')}] = {res[0]}")
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
            parts.append(f"({lo} <= {tok} < {hi})")
        return " and ".join(parts)

    def emit_movement(self, i, op, attrs, src, shape, idx, conds):
        in_shape = self.e[src][3]
        in_m = src in self.m or self.e[src][0] == "buffer"
        if op == "reshape":
            f = flat(idx, shape)
            if in_m and self.e[src][0] != "scalar":
                in_idx = unflatten(f, in_shape, self.sizes_all()) or None
                if in_idx is None:
                    # Loading a buffer needs only the flat offset.
                    return self.load_flat(src, f, conds)
            else:
                in_idx = unflatten(f, in_shape, self.sizes_all())
                if in_idx is None:
                    raise NeedsMaterialize(src, "reshape of a strided view")
            return self.emit(src, in_idx, conds)
        if op == "permute":
            in_idx = [None] * len(in_shape)
            for k, p in enumerate(attrs["perm"]):
                in_idx[p] = idx[k]
            return self.emit(src, in_idx, conds)
        if op == "expand":
            if not in_shape:
                return self.emit(src, [], conds)
            in_idx = [Lin() if (n == 1 and s != 1) else lin for lin, n, s in zip(idx, in_shape, shape)]
            dropped = [lin for lin, n, s in zip(idx, in_shape, shape) if n == 1 and s != 1]
            outer_dropped = any(v in self.outer for lin in dropped for v in lin.terms)
            if outer_dropped and not in_m and self._cost(src) >= 3:
                raise NeedsMaterialize(src, "broadcast of a costly value would recompute it")
            return self.emit(src, in_idx, conds)
        if op == "slice":
            in_idx = [lin.scale(st) + a for lin, a, st in zip(idx, attrs["starts"], attrs["steps"])]
            return self.emit(src, in_idx, conds)
        if op == "pad":
            in_idx = [lin + (-before) for lin, (before, _) in zip(idx, attrs["pads"])]
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
            dtype = self.e[i][4]
            inner = inner or self.depends_on_inner([c[0] for c in new])
            expr = f"{val} if {self.cond_expr(tuple(new))} else {const(dtype, 0)}"
            return self.statement(expr, dtype, inner), inner
        raise NeedsMaterialize(i, f"unknown movement op {op}")

    def load_flat(self, src, f, conds):
        dtype = self.e[src][4]
        inner = self.depends_on_inner([f]) or self.depends_on_inner([c[0] for c in conds])
        load = f"{self.buffer_name(src)}[{self.lin_token(f, self.buffer_name(src))}]"
        if conds:
            load = f"{load} if {self.cond_expr(conds)} else {const(dtype, 0)}"
        return self.statement(load, dtype, inner), inner

    def sizes_all(self):
        sizes = {d: n for d, n in enumerate(self.shape)}
        sizes.update(self.dyn_size)
        return sizes

    def _cost(self, i, limit=3):
        total, stack, seen = 0, [i], set()
        while stack and total < limit:
            j = stack.pop()
            if j in seen or j in self.m or self.e[j][0] in ("buffer", "scalar"):
                continue
            seen.add(j)
            if optable.OPS[self.e[j][0]].kind != "movement":
                total += 1
            stack.extend(self.e[j][2])
        return total

    # -- structure -------------------------------------------------------------
    def open_loop(self):
        self.loop_lines = []
        self.pending_row = []
        self.loop_memo = {}

    def close_loop(self):
        if getattr(self, "row_cache_pending", False):
            self.row_cache_stored, self.row_cache_pending = True, False
        body = self.loop_lines
        self.row_lines.extend(self.pending_row)
        self.row_lines.append(("LOOP", body))
        self.loop_lines = None
        self.pending_row = []
        self.loop_memo = {}

    def _inlined_from(self, start: int, stop: set) -> set:
        """Non-materialized nodes computed inside this kernel under ``start``."""
        seen, stack = set(), [start]
        while stack:
            j = stack.pop()
            if j in seen or j in stop or j in self.m or self.e[j][0] in ("buffer", "scalar"):
                continue
            seen.add(j)
            stack.extend(self.e[j][2])
        return seen

    def choose_row_cache(self):
        """A costly full-row value that the last pass would recompute (softmax's exp).

        Its first pass stores it in the output row, the last pass reads it back: the
        output row is written only by the last pass, at the same index.
        """
        root = self.g.root
        if not self.axes or root in self.stage_set or self.e[root][3] != tuple(self.shape):
            return None
        final = set()
        for j in self.e[root][2]:
            final |= self._inlined_from(j, self.stage_set)
        staged = set()
        for s in self.g.stages:
            staged |= self._inlined_from(self.e[s][2][0], self.stage_set)
        costly = ("exp", "log", "tanh", "sigmoid", "erf", "pow")
        best = None
        for j in final & staged:
            op, _, _, shape, dtype = self.e[j]
            if j == root or shape != tuple(self.shape) or dtype is not self.e[root][4]:
                continue
            if any(self.e[k][0] in costly for k in self._inlined_from(j, self.stage_set)):
                best = j if best is None or j > best else best
        return best

    def build(self):
        g = self.g
        root = g.root
        r_op, r_attrs, r_inputs, r_shape, r_dtype = self.e[root]
        self.row_cache = self.choose_row_cache()
        self.row_cache_stored = False
        for s in g.stages:
            sop, sattrs, sinputs, sshape, sdtype = self.e[s]
            opdef = optable.OPS[sop]
            acc = f"a{len(self.stage_result)}"
            inits = opdef.reduce_init(self.e[sinputs[0]][4])
            names = [acc + suffix for suffix, _ in inits]
            for name, (_, lit) in zip(names, inits):
                self.row_lines.append(f"{name} = {lit}")
            self.open_loop()
            v, _ = self.emit(sinputs[0], self.full_index(), ())
            r_flat = flat(
                [Lin({d: 1}) if self.shape[d] != 1 else Lin() for d in self.axes], [self.shape[d] for d in self.axes]
            )
            self.loop_lines.extend(opdef.reduce_combine(names, v, self.lin_token(r_flat), self.e[sinputs[0]][4]))
            self.close_loop()
            self.stage_result[s] = names[0]
            self.ops_used.append(sop)
        for k, extra in enumerate(g.extra_roots):
            # Another output of this loop, computed first; the root's expression then
            # reads the value instead of loading the buffer being written.
            idx = self.full_index()
            v, inner = self.emit(extra, idx, (), root=True)
            name = f"out{k + 1}"
            self.row_lines.append(f"{name}[{self.lin_token(flat(idx, self.e[extra][3]), name)}] = {v}")
            self.row_memo[(extra, tuple(l.key() for l in idx), ())] = (v, inner)
            self.ops_used.append(self.e[extra][0])
        full_root = r_shape == tuple(self.shape) and (not self.axes or root not in self.stage_set)
        if root in self.stage_set:
            value = self.stage_result[root]
            store = flat(self.reduced_index_for(r_shape), r_shape)
            self.row_lines.append(f"out[{self.lin_token(store, 'out')}] = {value}")
        elif full_root and self.axes:
            self.open_loop()
            idx = self.full_index()
            v, _ = self.emit(root, idx, (), root=True)
            self.loop_lines.append(f"out[{self.lin_token(flat(idx, r_shape), 'out')}] = {v}")
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
            self.row_lines.append(f"out[{self.lin_token(flat(idx, r_shape), 'out')}] = {v}")

    # -- loop merging and rendering --------------------------------------------
    def merge_loops(self):
        """Merge adjacent loops (same class) that every index walks contiguously."""
        sizes = {d: n for d, n in enumerate(self.shape)}
        groups = []
        for cls in (self.outer, self.inner):
            merged = list(cls)
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
            parts.append(name if c == 1 else f"{name} * {c}")
        if lin.const or not parts:
            parts.append(str(lin.const))
        return " + ".join(parts)


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
        slot_dtype = {e[1][0]: e[4].name for e in entries if e[0] == "scalar"}
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
    )
    return text, buffers, scalar_slots, packed, args


def generate(entries, materialized, group: FusionGroup) -> KernelSource:
    """Generate the kernel for ``group``; raises NeedsMaterialize to ask for a buffer."""
    em = _Emitter(entries, materialized, group)
    em.build()
    em.merge_loops()
    numel = math.prod(group.space_shape)
    parallel = bool(em.outer) and numel >= PARALLEL_MIN_ELEMENTS

    def render(lines, depth):
        out = []
        for line in lines:
            if isinstance(line, tuple):
                ind = "    " * depth
                d = depth
                for v in em.inner:
                    out.append(f"{'    ' * d}for i{v} in range({em.loop_sizes[v]}):")
                    d += 1
                if not em.inner:
                    out.append(f"{ind}if True:")
                    d += 1
                out.extend(render(line[1], d))
            else:
                out.append("    " * depth + line)
        return out

    # A parallel kernel's serial body runs outer rows [lo, hi). Arrays whose index moves
    # by a fixed stride with the outer variable are passed as views starting at row lo and
    # indexed from ii = 0: an index that LLVM cannot prove non-negative keeps NumPy's
    # negative-index wraparound in the loop and blocks vectorization.
    rebased: dict = {}
    if parallel:
        v0 = em.outer[0]
        coefs: dict = {}
        for lin, buf in zip(em.lins, em.lin_buf):
            if buf is not None:
                coefs.setdefault(buf, set()).add((lin.terms.get(v0, 0), lin.const >= 0))
        rebased = {b: next(iter(c))[0] for b, c in coefs.items() if len(c) == 1 and next(iter(c))[1]}
    body = []
    depth = 1
    for k, v in enumerate(em.outer):
        if k == 0 and parallel:
            body.append("    for ii in range(hi - lo):")
            body.append(f"        i{v} = lo + ii")
        else:
            body.append(f"{'    ' * depth}for i{v} in range({em.loop_sizes[v]}):")
        depth += 1
    body.extend(render(em.row_lines, depth))
    text = "\n".join(body)
    for n, (lin, buf) in enumerate(zip(em.lins, em.lin_buf)):
        text = text.replace(f"\x00{n}\x00", em.render_lin(lin, em.outer[0] if buf in rebased else None))

    text, buffers, scalar_slots, packed, args = kernel_arguments(em, entries, group, text)
    fastmath = FASTMATH
    options = "cache=True, nogil=True, error_model='numpy', boundscheck=False"
    if parallel:
        # Loops inside a prange body are lowered as a parfor gufunc and vectorized poorly
        # (a softmax ran 4x slower than the same loops serial): the parallel kernel only
        # splits the outer loop into chunks and calls the serial body on each.
        n_outer = em.loop_sizes[em.outer[0]]
        per_row = max(1, numel // max(n_outer, 1))
        chunk = max(1, min(n_outer, -(-PARALLEL_CHUNK_ELEMENTS // per_row)))
        n_chunks = -(-n_outer // chunk)
        chunk_args = [f"{a}[lo * {rebased[a]}:]" if rebased.get(a) else a for a in args]
        source = "\n".join(
            [
                f"@njit(fastmath={fastmath}, {options})",
                f"def KERNEL_NAME_rows({', '.join(args + ['lo', 'hi'])}):",
                text,
                "",
                "",
                f"@njit(parallel=True, {options})",
                f"def KERNEL_NAME({', '.join(args)}):",
                f"    for c in prange({n_chunks}):",
                f"        lo = c * {chunk}",
                f"        KERNEL_NAME_rows({', '.join(chunk_args)}, lo, min(lo + {chunk}, {n_outer}))",
                "",
            ]
        )
    else:
        source = "\n".join([f"@njit(fastmath={fastmath}, {options})", f"def KERNEL_NAME({', '.join(args)}):", text, ""])
    # The library version is part of the identity: a new kernel_lib never reuses old files.
    sha = hashlib.sha1((LIB_HASH + source).encode()).hexdigest()
    ops = [o for o in dict.fromkeys(em.ops_used)][:4]
    name = "k_" + "_".join(ops or [entries[group.root][0]]) + "_" + sha[:12]
    source = source.replace("KERNEL_NAME", name)
    arg_types = (
        [(entries[group.root][4].name, True)]
        + [(entries[x][4].name, True) for x in group.extra_roots]
        + [(entries[b][4].name, True) for b in buffers]
    )
    return KernelSource(name, source, sha, buffers, scalar_slots, parallel, arg_types, packed)
