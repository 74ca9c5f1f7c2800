"""float32 matrix products of our own: register-tiled Numba kernels for the products BLAS runs slowly here.

Every 2-D float32 product whose output rows are contiguous runs here when one of two layouts
fits (``ops/gemm_choice.own_kind``, which has no Numba: importing lazyvic does not import
it), in the NumPy reference, in a plan's steps, in its thread team's pieces and
in its native segments alike (``ops/blas.matmul_into``, ``lowering/cpu/native.product``), so
there is one numerics:

- ``ROWS``: b's rows contiguous, n a multiple of 16 (``x @ w``, ``g @ w``, ``a^T @ g``): C[i, j] = sum over p of
  A[i, p] * B[p, j], each output element summed in order p = 0, 1, ... with one fused
  multiply-add per term (IEEE fusedMultiplyAdd, no other rounding), so a value's bits do not
  depend on how the output is tiled, split into pieces or run on threads. Register tiles of
  ``ROWS_MR`` x ``ROWS_NR`` outputs: each B row vector loaded once feeds ``ROWS_MR`` FMAs.
- ``DOTS``: a's and b's columns contiguous along the inner dimension (``x @ w^T``, nn.Linear's
  forward and an RNN's ``h @ w_hh^T``): each output is a dot product over p in ``LANES`` partial
  sums (term p into sum p mod LANES, in order, by FMA), then the partial sums added in a fixed
  tree (lanes 0..7 + 8..15, then 0..3 + 4..7, 0..1 + 2..3, 0 + 1). Register tiles of
  ``DOTS_MR`` x ``DOTS_NR`` outputs.

Why: NumPy's OpenBLAS runs its Haswell (AVX2) kernels on this machine (``OPENBLAS_CORETYPE``,
set by its owner). One core, float32, these kernels against ``np.matmul``: (20 x 128) @ (128 x
512) 11.6 against 31.2 us, (64 x 64) @ (64 x 32) 2.4 against 4.3, (1024 x 128) @ (128 x 512)
0.71 against 1.05 ms (ROWS); (20 x 128) @ (512 x 128)^T 15 against 29 us, (1024 x 128) @ (128 x
128)^T 0.18-0.23 against 0.27 ms (DOTS); and a small product pays no BLAS call overhead. They
do not block for caches: past ops/gemm_choice.MAX_WORK multiply-adds (1024^3: 19 against 17 ms)
OpenBLAS keeps the product. Products of other dtypes and layouts stay BLAS calls. Where LLVM's
target has no 16-lane FMA (AVX2), the vector operations are split by LLVM: the same bits.

The kernels read raw pointers (an array's data plus an element offset, strides in elements):
an ndarray's own indexing wraps negative indices, which kept LLVM from proving a row contiguous
(it gathered element by element, 9 GFLOP/s).
"""

from __future__ import annotations

import warnings

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from lazyvic.ops.gemm_choice import LANES, ROWS

ROWS_MR, ROWS_NR = 4, 64
DOTS_MR, DOTS_NR = 4, 4  # (DOTS_NR: _sum4x16's width)
assert DOTS_MR * DOTS_NR * LANES == 256  # the DOTS tile's stack size (_stack takes a literal)


@intrinsic
def _at(typingctx, arr, off):
    """A pointer to element ``off`` of a C-contiguous 1-D array's data."""
    if not isinstance(arr, types.Array) or not isinstance(off, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.gep(a.data, [args[1]])

    return types.CPointer(arr.dtype)(arr, off), codegen


@intrinsic
def _stack(typingctx, n):
    """``n`` float32 on the stack (a tile's accumulators: LLVM keeps them in registers when the
    loops over them have constant trip counts)."""
    if not isinstance(n, types.IntegerLiteral):
        return None

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.FloatType(), size=n.literal_value)

    return types.CPointer(types.float32)(n), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (``llvm.fma.f32``, vectorized by LLVM)."""
    if not (a == b == c == types.float32):
        return None

    def codegen(context, builder, signature, args):
        f = ir.FloatType()
        decl = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f, [f, f, f]), "llvm.fma.f32")
        return builder.call(decl, args)

    return types.float32(types.float32, types.float32, types.float32), codegen


@intrinsic
def _fma16(typingctx, acc, so, a, ao, b, bo):
    """``acc[so:so+16] = fma(a[ao:ao+16], b[bo:bo+16], acc[so:so+16])`` as one 16-lane vector
    operation (``llvm.fma.v16f32``: LLVM did not vectorize this loop written in Python)."""
    f32p = types.CPointer(types.float32)
    if not (acc == a == b == f32p) or not all(isinstance(x, types.Integer) for x in (so, ao, bo)):
        return None

    def codegen(context, builder, signature, args):
        vec = ir.VectorType(ir.FloatType(), 16)
        ptrs = [builder.bitcast(builder.gep(args[i], [args[i + 1]]), vec.as_pointer()) for i in (0, 2, 4)]
        s_, x, y = (builder.load(q, align=4) for q in ptrs)
        decl = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]), "llvm.fma.v16f32")
        builder.store(builder.call(decl, [x, y, s_]), ptrs[0], align=4)
        return context.get_dummy_value()

    return types.void(acc, so, a, ao, b, bo), codegen


@intrinsic
def _sum16(typingctx, acc, so):
    """The sum of ``acc[so:so+16]`` in the fixed tree of the module docstring (halves added
    lane by lane: 16 -> 8 -> 4 -> 2 -> 1), in vector registers."""
    if acc != types.CPointer(types.float32) or not isinstance(so, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        f = ir.FloatType()
        v = builder.load(builder.bitcast(builder.gep(args[0], [args[1]]), ir.VectorType(f, 16).as_pointer()), align=4)
        width = 16
        while width > 1:
            half = width // 2
            mask = ir.VectorType(ir.IntType(32), half)
            lo = builder.shuffle_vector(v, v, ir.Constant(mask, list(range(half))))
            hi = builder.shuffle_vector(v, v, ir.Constant(mask, list(range(half, width))))
            v, width = builder.fadd(lo, hi), half
        return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))

    return types.float32(acc, so), codegen


def _four_sums(builder, v: list):
    """The sums of four 16-lane vectors as one 4-lane vector, each in the tree of :func:`_sum16`
    (lanes l + (l + 8), then l + (l + 4), l + (l + 2), l + (l + 1)), the four side by side:
    shuffles pair the halves of two vectors at a time."""
    i32 = ir.IntType(32)

    def pair_sum(x, y, lo, hi):
        mask = ir.VectorType(i32, len(lo))
        a = builder.shuffle_vector(x, y, ir.Constant(mask, lo))
        return builder.fadd(a, builder.shuffle_vector(x, y, ir.Constant(mask, hi)))

    h8 = list(range(8)) + list(range(16, 24)), list(range(8, 16)) + list(range(24, 32))
    u01, u23 = pair_sum(v[0], v[1], *h8), pair_sum(v[2], v[3], *h8)
    q = [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27]
    w = pair_sum(u01, u23, q, [i + 4 for i in q])
    x = pair_sum(w, w, [0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15])
    return pair_sum(x, x, [0, 2, 4, 6], [1, 3, 5, 7])


def _store4(builder, value, ptr, offset) -> None:
    """Stores a 4-lane float vector at ``ptr[offset:]``."""
    dst = builder.bitcast(builder.gep(ptr, [offset]), ir.VectorType(ir.FloatType(), 4).as_pointer())
    builder.store(value, dst, align=4)


@intrinsic
def _sum4x16(typingctx, acc, so, out, oo):
    """``out[oo + c] = sum of acc[so + 16c : so + 16c + 16]`` for c = 0..3 (:func:`_four_sums`)."""
    f32p = types.CPointer(types.float32)
    if not (acc == out == f32p) or not isinstance(so, types.Integer) or not isinstance(oo, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        vec16 = ir.VectorType(ir.FloatType(), 16)

        def load(c):
            off = builder.add(args[1], ir.Constant(args[1].type, 16 * c))
            return builder.load(builder.bitcast(builder.gep(args[0], [off]), vec16.as_pointer()), align=4)

        _store4(builder, _four_sums(builder, [load(c) for c in range(4)]), args[2], args[3])
        return context.get_dummy_value()

    return types.void(acc, so, out, oo), codegen


_VEC = ir.VectorType(ir.FloatType(), 16)
_I64 = ir.IntType(64)


def _vector_fma(builder):
    """``llvm.fma.v16f32`` declared in the builder's module."""
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3), "llvm.fma.v16f32")


def _open_loop(builder, name: str, accumulators: int, end):
    """The head of a loop over p = 0, step, ... while p < ``end`` that carries ``accumulators``
    16-lane float vectors (zero on entry) as SSA values (phi nodes: vector registers); leaves
    the builder in its body. Returns (p, the accumulators, the head block, the exit block)."""
    pre = builder.block
    head, body, done = (builder.append_basic_block(f"{name}.{part}") for part in ("head", "body", "done"))
    builder.branch(head)
    builder.position_at_end(head)
    p = builder.phi(_I64)
    accs = [builder.phi(_VEC) for _ in range(accumulators)]
    p.add_incoming(ir.Constant(_I64, 0), pre)
    for a in accs:
        a.add_incoming(ir.Constant(_VEC, None), pre)
    builder.cbranch(builder.icmp_signed("<", p, end), body, done)
    builder.position_at_end(body)
    return p, accs, head, done


def _close_loop(builder, p, accs: list, new: list, step: int, head, done) -> None:
    """The end of :func:`_open_loop`'s body: p += step, the accumulators take ``new``; leaves the
    builder at the loop's exit."""
    block = builder.block
    p.add_incoming(builder.add(p, ir.Constant(_I64, step)), block)
    for a, v in zip(accs, new):
        a.add_incoming(v, block)
    builder.branch(head)
    builder.position_at_end(done)


def _dots_block_intrinsic(mr: int):
    """An intrinsic ``(pa, ao, sam, pb, bo, sbn, kfull, acc, pc, co, scm, finish)``: the ``mr`` x
    DOTS_NR tile's partial sums over p < ``kfull`` (a multiple of LANES): for each (r, c), lane l
    sums a[ao + r*sam + p] * b[bo + c*sbn + p] over p = l (mod LANES), in order, by FMA; stored
    to ``acc[(r*DOTS_NR + c)*LANES:]``, or, when ``finish`` (no terms left past kfull), summed
    (:func:`_four_sums`) and stored to row r of c (``pc[co + r*scm:]``). Written as a loop whose
    accumulators are SSA values (vector registers), which LLVM did not make of the same loop
    written in Python (its accumulators went through the stack at every step). mr 4, and 1 for
    the rows past the last whole tile (a vector times a matrix: an LSTM's step at batch 1)."""

    def typer(typingctx, pa, ao, sam, pb, bo, sbn, kfull, acc, pc, co, scm, finish):
        f32p = types.CPointer(types.float32)
        ints = (ao, sam, bo, sbn, kfull, co, scm)
        if not (pa == pb == acc == pc == f32p) or not all(isinstance(x, types.Integer) for x in ints):
            return None
        if finish != types.boolean:
            return None

        def codegen(context, builder, signature, args):
            vpa, vao, vsam, vpb, vbo, vsbn, vk, vacc, vpc, vco, vscm, vfinish = args
            i64, vec, fma = _I64, _VEC, _vector_fma(builder)
            n_acc = mr * DOTS_NR
            p, accs, head, done = _open_loop(builder, "dots", n_acc, vk)

            def load(ptr, base, stride, i):
                off = builder.add(builder.add(base, builder.mul(stride, ir.Constant(i64, i))), p)
                return builder.load(builder.bitcast(builder.gep(ptr, [off]), vec.as_pointer()), align=4)

            rows = [load(vpa, vao, vsam, r) for r in range(mr)]
            cols = [load(vpb, vbo, vsbn, c) for c in range(DOTS_NR)]
            new = [builder.call(fma, [rows[t // DOTS_NR], cols[t % DOTS_NR], accs[t]]) for t in range(n_acc)]
            _close_loop(builder, p, accs, new, LANES, head, done)
            with builder.if_else(vfinish) as (summed, kept):
                with summed:
                    for r in range(mr):
                        row = builder.add(vco, builder.mul(vscm, ir.Constant(i64, r)))
                        _store4(builder, _four_sums(builder, accs[r * DOTS_NR : (r + 1) * DOTS_NR]), vpc, row)
                with kept:
                    for t, a in enumerate(accs):
                        dst = builder.bitcast(builder.gep(vacc, [ir.Constant(i64, t * LANES)]), vec.as_pointer())
                        builder.store(a, dst, align=4)
            return context.get_dummy_value()

        return types.void(pa, ao, sam, pb, bo, sbn, kfull, acc, pc, co, scm, finish), codegen

    typer.__name__ = f"_dots_block_{mr}"
    return intrinsic(typer)


_dots_block_4, _dots_block_1 = _dots_block_intrinsic(DOTS_MR), _dots_block_intrinsic(1)


def _rows_block_intrinsic(mr: int, nv: int):
    """An intrinsic ``(pa, ao, sam, sak, pb, bo, sbk, k, pc, co, scm)`` computing the ``mr`` x
    ``16 * nv`` tile of a ROWS product at a[ao:], b[bo:], c[co:] (element strides): accumulators
    as SSA values (vector registers), term p of each output added in order by one FMA
    (c[r, j] = fma(a[r, p], b[p, j], c[r, j]) from 0), stored once at the end."""

    def typer(typingctx, pa, ao, sam, sak, pb, bo, sbk, k, pc, co, scm):
        f32p = types.CPointer(types.float32)
        if not (pa == pb == pc == f32p) or not all(
            isinstance(x, types.Integer) for x in (ao, sam, sak, bo, sbk, k, co, scm)
        ):
            return None

        def codegen(context, builder, signature, args):
            vpa, vao, vsam, vsak, vpb, vbo, vsbk, vk, vpc, vco, vscm = args
            i64, vec, fma = _I64, _VEC, _vector_fma(builder)
            p, accs, head, done = _open_loop(builder, "rows", mr * nv, vk)
            brow = builder.add(vbo, builder.mul(p, vsbk))
            bs = [
                builder.load(
                    builder.bitcast(builder.gep(vpb, [builder.add(brow, ir.Constant(i64, 16 * v))]), vec.as_pointer()),
                    align=4,
                )
                for v in range(nv)
            ]
            new = []
            for r in range(mr):
                at = builder.add(builder.add(vao, builder.mul(vsam, ir.Constant(i64, r))), builder.mul(p, vsak))
                a = builder.load(builder.gep(vpa, [at]))
                splat = builder.insert_element(ir.Constant(vec, None), a, ir.Constant(ir.IntType(32), 0))
                splat = builder.shuffle_vector(splat, splat, ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16))
                new += [builder.call(fma, [splat, bs[v], accs[r * nv + v]]) for v in range(nv)]
            _close_loop(builder, p, accs, new, 1, head, done)
            for r in range(mr):
                crow = builder.add(vco, builder.mul(vscm, ir.Constant(i64, r)))
                for v in range(nv):
                    dst = builder.gep(vpc, [builder.add(crow, ir.Constant(i64, 16 * v))])
                    builder.store(accs[r * nv + v], builder.bitcast(dst, vec.as_pointer()), align=4)
            return context.get_dummy_value()

        return types.void(pa, ao, sam, sak, pb, bo, sbk, k, pc, co, scm), codegen

    typer.__name__ = f"_rows_block_{mr}x{nv}"
    return intrinsic(typer)


_rows_4x4, _rows_1x4, _rows_4x1, _rows_1x1 = (_rows_block_intrinsic(r, v) for r, v in ((4, 4), (1, 4), (4, 1), (1, 1)))


_OPTS = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}


@njit(**_OPTS)
def rows_product(pa, sam, sak, pb, sbk, pc, scm, m, n, k):
    """C = A @ B with B's rows and C's rows contiguous (element strides: A (sam, sak), B (sbk, 1),
    C (scm, 1)); A (m x k), B (k x n), n a multiple of 16 (gemm_choice.own_kind). Column panels
    of 64 (then 16) outside, so a panel of B stays in cache while every row of A passes; tiles of
    ROWS_MR rows, then single rows."""
    mfull = m - m % ROWS_MR
    nfull = n - n % ROWS_NR
    for j0 in range(0, nfull, ROWS_NR):
        for i0 in range(0, mfull, ROWS_MR):
            _rows_4x4(pa, i0 * sam, sam, sak, pb, j0, sbk, k, pc, i0 * scm + j0, scm)
        for i in range(mfull, m):
            _rows_1x4(pa, i * sam, sam, sak, pb, j0, sbk, k, pc, i * scm + j0, scm)
    for j0 in range(nfull, n, 16):
        for i0 in range(0, mfull, ROWS_MR):
            _rows_4x1(pa, i0 * sam, sam, sak, pb, j0, sbk, k, pc, i0 * scm + j0, scm)
        for i in range(mfull, m):
            _rows_1x1(pa, i * sam, sam, sak, pb, j0, sbk, k, pc, i * scm + j0, scm)


@njit(inline="always", **_OPTS)
def _dots_tile(pa, sam, pb, sbn, pc, scm, i0, j0, k, mr, nr, acc):
    """C[i0:i0+mr, j0:j0+nr] of a DOTS product (mr <= DOTS_MR, nr <= DOTS_NR)."""
    kfull = k - k % LANES
    if nr == DOTS_NR and (mr == DOTS_MR or mr == 1):
        if mr == DOTS_MR:
            _dots_block_4(pa, i0 * sam, sam, pb, j0 * sbn, sbn, kfull, acc, pc, i0 * scm + j0, scm, kfull == k)
        else:
            _dots_block_1(pa, i0 * sam, sam, pb, j0 * sbn, sbn, kfull, acc, pc, i0 * scm + j0, scm, kfull == k)
        if kfull == k:
            return
        kfull_ = 0
    else:
        for t in range(DOTS_MR * DOTS_NR * LANES):
            acc[t] = np.float32(0.0)
        kfull_ = kfull
    for p0 in range(0, kfull_, LANES):
        for r in range(mr):
            ap = (i0 + r) * sam + p0
            for c in range(nr):
                bp = (j0 + c) * sbn + p0
                _fma16(acc, (r * DOTS_NR + c) * LANES, pa, ap, pb, bp)
    for r in range(mr):
        for c in range(nr):
            s = (r * DOTS_NR + c) * LANES
            for p in range(kfull, k):
                acc[s + p - kfull] = _fma(pa[(i0 + r) * sam + p], pb[(j0 + c) * sbn + p], acc[s + p - kfull])
        if nr == DOTS_NR:
            _sum4x16(acc, r * DOTS_NR * LANES, pc, (i0 + r) * scm + j0)
        else:
            for c in range(nr):
                pc[(i0 + r) * scm + j0 + c] = _sum16(acc, (r * DOTS_NR + c) * LANES)


@njit(**_OPTS)
def dots_product(pa, sam, pb, sbn, pc, scm, m, n, k):
    """C = A @ B with A's rows, B's columns and C's rows contiguous (element strides: A (sam, 1),
    B (1, sbn), C (scm, 1)); A (m x k), B (k x n): B is a transposed row-major matrix (w^T)."""
    acc = _stack(256)  # DOTS_MR * DOTS_NR * LANES
    mfull, nfull = m - m % DOTS_MR, n - n % DOTS_NR
    for i0 in range(0, mfull, DOTS_MR):
        for j0 in range(0, nfull, DOTS_NR):
            _dots_tile(pa, sam, pb, sbn, pc, scm, i0, j0, k, DOTS_MR, DOTS_NR, acc)
        for j in range(nfull, n):
            _dots_tile(pa, sam, pb, sbn, pc, scm, i0, j, k, DOTS_MR, 1, acc)
    for i in range(mfull, m):
        for j0 in range(0, nfull, DOTS_NR):
            _dots_tile(pa, sam, pb, sbn, pc, scm, i, j0, k, 1, DOTS_NR, acc)
        for j in range(nfull, n):
            _dots_tile(pa, sam, pb, sbn, pc, scm, i, j, k, 1, 1, acc)


@njit(inline="always", **_OPTS)
def product(kind, a, ao, b, bo, c, co, m, n, k, sam, sak, sb, scm):
    """``c[co:] = a[ao:] @ b[bo:]`` (flat C-contiguous float32 arrays, element offsets) by kernel
    ``kind`` (ROWS or DOTS, as :func:`kind` chose); ``sb``: b's stride along k for ROWS, along n
    for DOTS (its other stride is 1). Compiled code's entry (lowering/cpu/native.product)."""
    if kind == ROWS:
        rows_product(_at(a, ao), sam, sak, _at(b, bo), sb, _at(c, co), scm, m, n, k)
    else:
        dots_product(_at(a, ao), sam, _at(b, bo), sb, _at(c, co), scm, m, n, k)


@intrinsic
def _data(typingctx, arr):
    """A float32 array's data pointer (its first element)."""
    if not isinstance(arr, types.Array) or arr.dtype != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, args[0]).data

    return types.CPointer(types.float32)(arr), codegen


_MATRIX = types.Array(types.float32, 2, "A")
_READONLY = types.Array(types.float32, 2, "A", readonly=True)


@njit(**_OPTS)
def product_2d(a, b, c, kind):
    """``c = a @ b`` for 2-D float32 arrays (any strides, writable or read-only operands: one
    compiled signature, so a new layout never compiles) by kernel ``kind``
    (ops/gemm_choice.own_kind_of's answer): the NumPy reference's and a plan step's entry. No
    checks here: the caller passes arrays that kind was chosen for (ops/blas.matmul_into)."""
    m, k = a.shape
    n = b.shape[1]
    sam, sak = a.strides[0] // 4, a.strides[1] // 4
    sbk, sbn, scm = b.strides[0] // 4, b.strides[1] // 4, c.strides[0] // 4
    if kind == ROWS:
        rows_product(_data(a), sam, sak, _data(b), sbk, _data(c), scm, m, n, k)
    else:
        dots_product(_data(a), sam, _data(b), sbn, _data(c), scm, m, n, k)


_BATCH = types.Array(types.float32, 4, "A")
_BATCH_READONLY = types.Array(types.float32, 4, "A", readonly=True)


@njit(**_OPTS)
def product_4d(a, b, c, kind):
    """``c[i, j] = a[i, j] @ b[i, j]`` for 4-D float32 arrays (batch dimensions equal or
    broadcast, any strides) by kernel ``kind``, every matrix as :func:`product_2d` runs it: a
    batched product in one call (a Python call per matrix cost more than attention's products)."""
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            ia, ja = min(i, a.shape[0] - 1), min(j, a.shape[1] - 1)
            ib, jb = min(i, b.shape[0] - 1), min(j, b.shape[1] - 1)
            product_2d(a[ia, ja], b[ib, jb], c[i, j], kind)


def _compile() -> None:
    """Compiles :func:`product_2d`'s one signature (read-only operands take writable arrays too),
    from Numba's disk cache when it can be read; when it cannot (a truncated or corrupt entry:
    a crash, a full disk), in memory, after a warning, as lowering/kernel_files does for kernels."""
    sig = types.void(_READONLY, _READONLY, _MATRIX, types.int64)
    sig4 = types.void(_BATCH_READONLY, _BATCH_READONLY, _BATCH, types.int64)
    try:
        product_2d.compile(sig)
        product_4d.compile(sig4)
    except Exception as e:  # noqa: BLE001 - any failure of the cache: compile in memory
        from numba.core.caching import NullCache

        warnings.warn(
            f"lazyvic: Numba's cache (NUMBA_CACHE_DIR) cannot be used for ops/gemm's kernels "
            f"({type(e).__name__}: {e}); they are compiled in this process only.",
            RuntimeWarning,
            stacklevel=2,
        )
        for d in (rows_product, dots_product, product_2d, product_4d):
            d._cache = NullCache()
        product_2d.compile(sig)
        product_4d.compile(sig4)
    product_2d.disable_compile()  # a layout of its own never compiles another signature
    product_4d.disable_compile()


_compile()
