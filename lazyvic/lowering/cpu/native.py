"""One native call per plan: a CPU plan's kernels and BLAS products run by one generated Numba function.

A plan's steps are Python objects, each called from :meth:`CpuPlan._run` (one Python call, the
argument tuple built and the Numba dispatcher entered per kernel; ``np.matmul`` with its operand
views per product). Once a plan has run ``native_after`` times (``LAZYVIC_NATIVE``, the
backend's setting; 0, the default: never; a plan of symbolic sizes counts the runs of each
binding of its sizes, whose steps are its own) it is *hot*: each maximal run of steps that can be
native (kernels; float32/float64 products whose operands are strided views NumPy hands to BLAS
as they are) becomes one :class:`NativeSegment`, a generated ``@njit`` function that calls the
kernels' compiled code and OpenBLAS's ``cblas_?gemm`` / ``cblas_?gemv`` in sequence. A plan of
kernels and products only is then one Python call and one native call per run. The other steps
(convolutions, pooling, scatter_add, a gather's index check, NumPy references) stay Python steps
between the segments.

Same bits: a float32 product that ``ops/gemm`` runs (``ops/blas.matmul_into`` in the other
tiers) calls the same compiled kernel (``ops/gemm.product``); the others call the very OpenBLAS
function NumPy's ``matmul`` calls (found in the
library NumPy loaded, by threadpoolctl), with the arguments NumPy's ``matmul`` inner loop passes
it (``numpy/_core/src/umath/matmul.c.src``: gemm for matrices, gemv for a row or column vector,
the order, transpose flags, leading dimensions and increments from the operands' strides, one
call per matrix of a batch). A product NumPy runs another way (a 1x1 result: dot; an inner
dimension of 1 or a dimension of 0: its own loop; an operand that is neither C- nor F-blasable,
which it copies first; one buffer times its transpose at one address: syrk) stays a Python step.
Kernels are the same compiled functions. So a hot plan gives the same bits as before it was hot
(``tests/lowering/test_native.py`` checks).

The generated source names no size and no kernel: a kernel's size arguments, a product's
dimensions, strides and batch offsets, and the kernels' addresses (``call_kernel``) are arrays
the segment takes, so one compiled function serves every binding of a plan of symbolic sizes and
every run of kernels with the same argument types. Files: ``$LAZYVIC_CACHE_DIR/plans/<name>.py``
(named by the SHA-1 of the source, which holds the kernel library's hash), compiled into Numba's
disk cache like the kernels.

Cost: Numba types and optimizes every call of a segment, about 60 ms per call the first time
(TinyGPT's training step, 223 steps in 7 segments: 12-14 s; the digits MLP's, 22 steps: 0.7 s),
then 0.06 s from the disk cache in later processes; the gain is 1-2 us per step and run (the
captured digits MLP step: 160 -> 135 us; TinyGPT's: 29 -> 28 ms). So only plans of at most
:data:`MAX_CALLS` such steps go native (small steps, where Python's share is large), and the
runtime's plans (``native_background``) hand a segment missing from the disk cache to a worker
process (``compile_workers.Worker``) and go on running their steps; the first run after the
worker is done loads it. Without workers (``LAZYVIC_COMPILE_WORKERS=0``, one CPU) it compiles in
the run.

A segment that cannot be compiled (an unexpected Numba error) runs its steps one by one from
then on (said on stderr under ``LAZYVIC_DEBUG``): never a wrong answer, never a failed run.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import importlib.util
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import types
from numba.core.errors import NumbaError
from numba.extending import overload

from lazyvic.lowering.cpu.steps import KernelStep, MatmulStep
from lazyvic.lowering.kernel_files import LIB_HASH, load_checked, without_disk_cache
from lazyvic.lowering.reference import view
from lazyvic.ops.blas import in_pieces
from lazyvic.ops.gemm_choice import gemm_source_hash, own_header, own_kind_of
from lazyvic.trace import symbolic

# Bumped when the generated source's meaning changes without its text changing (the products'
# code generation below): part of every plan file's identity.
NATIVE_VERSION = "2"
_CBLAS_ROW_MAJOR, _CBLAS_COL_MAJOR, _CBLAS_NO_TRANS, _CBLAS_TRANS = 101, 102, 111, 112
# Plans with more steps than this that could be native stay steps: their compile (~60 ms a call,
# in a worker process that takes a core meanwhile) would outlast many processes (TinyGPT's step,
# 223 calls: 13 s; a 12-block residual MLP's took a core for each benchmark process's whole life,
# which ran at 0.68x of its speed with another process busy, against 0.91x without), and their
# Python overhead per step is a small part of it (TinyGPT: 1 ms of 28). The digits MLP's: 22.
MAX_CALLS = 64
# Per product, the header in a segment's ``mo`` array: transpose flags, M, P, N, leading
# dimensions, then the range of batch-offset triples (a, b, out) that follows the headers.
_HEADER = 10


# ---------------------------------------------------------------- OpenBLAS, NumPy's own
class _Blas:
    """``cblas_?gemm`` / ``cblas_?gemv`` of the OpenBLAS NumPy loaded, bound as LLVM symbols
    (``lazyvic_cblas_<s|d><gemm|gemv>_i<bits>``) that generated code calls; ``int_bits`` is its integer
    width (64 for an ILP64 build). ``ok`` is False when NumPy's BLAS is not an OpenBLAS found
    in NumPy's own directory (then products stay NumPy calls)."""

    def __init__(self):
        self.ok, self.int_bits, self.reason, self.path = False, 0, "", ""
        try:
            self._bind()
        except Exception as e:  # noqa: BLE001 - any failure: products stay NumPy calls
            self.ok, self.reason = False, f"{type(e).__name__}: {e}"

    def _bind(self) -> None:
        import llvmlite.binding as llvm
        from threadpoolctl import ThreadpoolController

        # NumPy's wheels keep their OpenBLAS in numpy.libs beside the package (Linux, Windows)
        # or inside it (macOS): not SciPy's, which another wheel may have loaded too.
        package = Path(np.__file__).resolve().parent
        homes = (package, package.parent / "numpy.libs")
        found = [
            lib
            for lib in ThreadpoolController().lib_controllers
            if lib.internal_api == "openblas" and any(Path(lib.filepath).resolve().is_relative_to(h) for h in homes)
        ]
        if len(found) != 1:
            self.reason = f"{len(found)} OpenBLAS libraries in NumPy's directories (one expected)"
            return
        self.path = found[0].filepath
        lib = ctypes.CDLL(found[0].filepath)
        for prefix, suffix, bits in (("scipy_", "64_", 64), ("", "64_", 64), ("scipy_", "", 32), ("", "", 32)):
            names = {f"{t}{r}": f"{prefix}cblas_{t}{r}{suffix}" for t in "sd" for r in ("gemm", "gemv")}
            if all(hasattr(lib, n) for n in names.values()):
                for routine, n in names.items():
                    llvm.add_symbol(
                        f"lazyvic_cblas_{routine}_i{bits}", ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
                    )
                self.ok, self.int_bits = True, bits
                return
        self.reason = f"no cblas_?gemm/cblas_?gemv symbols in {found[0].filepath}"


_blas: _Blas | None = None
_blas_lock = threading.Lock()


def blas() -> _Blas:
    """NumPy's OpenBLAS, bound once per process."""
    global _blas
    with _blas_lock:
        if _blas is None:
            _blas = _Blas()
    return _blas


def _blas_intrinsic(routine: str, float_bits: int, int_bits: int, params: tuple):
    """A Numba intrinsic calling ``lazyvic_cblas_<s|d><routine>_i<int_bits>`` (alpha 1, beta 0).

    Its arguments are three (array, element offset) pairs, then integers; ``params`` lays out the
    C call: ``("ptr", k)`` the address of pair k's array at its offset, ``("i32", j)`` /
    ``("int", j)`` integer argument j as a C int / a BLAS integer, ``("const", v)`` the C int v,
    ``"alpha"`` / ``"beta"``."""
    from llvmlite import ir
    from numba.core import cgutils
    from numba.extending import intrinsic

    symbol = f"lazyvic_cblas_{'s' if float_bits == 32 else 'd'}{routine}_i{int_bits}"

    def typed(args):
        def codegen(context, builder, signature, values):
            i32, iw = ir.IntType(32), ir.IntType(int_bits)
            fl = ir.FloatType() if float_bits == 32 else ir.DoubleType()
            ptr = ir.IntType(8).as_pointer()

            def width(v, ty):
                return builder.trunc(v, ty) if ty.width < v.type.width else v

            c_args, c_types = [], []
            for p in params:
                if p == "alpha" or p == "beta":
                    c_args.append(ir.Constant(fl, 1.0 if p == "alpha" else 0.0))
                    c_types.append(fl)
                elif p[0] == "ptr":
                    k = p[1]
                    arr = context.make_array(signature.args[2 * k])(context, builder, values[2 * k])
                    c_args.append(builder.bitcast(builder.gep(arr.data, [values[2 * k + 1]]), ptr))
                    c_types.append(ptr)
                elif p[0] == "const":
                    c_args.append(ir.Constant(i32, p[1]))
                    c_types.append(i32)
                else:
                    ty = i32 if p[0] == "i32" else iw
                    c_args.append(width(values[p[1]], ty))
                    c_types.append(ty)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), c_types), symbol)
            builder.call(fn, c_args)
            return context.get_dummy_value()

        return types.void(*args), codegen

    # (Numba's intrinsic reads the typing function's parameters: one per argument, named.)
    if routine == "gemm":

        def call(typingctx, a, ao, b, bo, c, co, h0, h1, h2, h3, h4, h5, h6, h7):
            return typed((a, ao, b, bo, c, co, h0, h1, h2, h3, h4, h5, h6, h7))

    else:

        def call(typingctx, a, ao, b, bo, c, co, h0, h1, h2, h3, h4, h5):
            return typed((a, ao, b, bo, c, co, h0, h1, h2, h3, h4, h5))

    call.__name__ = f"{routine}_f{float_bits}_i{int_bits}"
    return intrinsic(call)


# cblas_?gemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc): the header
# gives (transA, transB, M, N, K, lda, ldb, ldc); the pairs are A, B, C.
_GEMM = (
    ("const", _CBLAS_ROW_MAJOR), ("i32", 6), ("i32", 7), ("int", 8), ("int", 9), ("int", 10), "alpha",
    ("ptr", 0), ("int", 11), ("ptr", 1), ("int", 12), "beta", ("ptr", 2), ("int", 13),
)  # fmt: skip
# cblas_?gemv(order, trans, M, N, alpha, A, lda, X, incX, beta, Y, incY), always transposed as
# NumPy calls it: the header gives (order, M, N, lda, incX, incY); the pairs are A, X, Y.
_GEMV = (
    ("i32", 6), ("const", _CBLAS_TRANS), ("int", 7), ("int", 8), "alpha", ("ptr", 0), ("int", 9),
    ("ptr", 1), ("int", 10), "beta", ("ptr", 2), ("int", 11),
)  # fmt: skip
gemm_f32_i32 = _blas_intrinsic("gemm", 32, 32, _GEMM)
gemm_f64_i32 = _blas_intrinsic("gemm", 64, 32, _GEMM)
gemm_f32_i64 = _blas_intrinsic("gemm", 32, 64, _GEMM)
gemm_f64_i64 = _blas_intrinsic("gemm", 64, 64, _GEMM)
gemv_f32_i32 = _blas_intrinsic("gemv", 32, 32, _GEMV)
gemv_f64_i32 = _blas_intrinsic("gemv", 64, 32, _GEMV)
gemv_f32_i64 = _blas_intrinsic("gemv", 32, 64, _GEMV)
gemv_f64_i64 = _blas_intrinsic("gemv", 64, 64, _GEMV)


def product(a, ao, b, bo, c, co, kind, h):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(product, inline="always")
def _product_typed(a, ao, b, bo, c, co, kind, h):
    """c[co:] = a[ao:] @ b[bo:] as the other tiers run it (:func:`matmul_call`): kind 0 a gemm
    (header h of 8), 1 a gemv over b ("ba", header of 6), 2 ops/gemm's kernel (float32, its
    header of 8: ops/gemm_choice.own_header)."""
    wide, bits = a.dtype == types.float64, blas().int_bits
    gemm = globals()[f"gemm_f{64 if wide else 32}_i{bits}"]
    gemv = globals()[f"gemv_f{64 if wide else 32}_i{bits}"]
    if wide:

        def impl(a, ao, b, bo, c, co, kind, h):
            if kind == 0:
                gemm(a, ao, b, bo, c, co, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
            else:
                gemv(b, bo, a, ao, c, co, h[0], h[1], h[2], h[3], h[4], h[5])

        return impl

    from lazyvic.ops.gemm import product as own_product  # (its module compiles a kernel when imported)

    def impl32(a, ao, b, bo, c, co, kind, h):
        if kind == 0:
            gemm(a, ao, b, bo, c, co, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7])
        elif kind == 1:
            gemv(b, bo, a, ao, c, co, h[0], h[1], h[2], h[3], h[4], h[5])
        else:
            own_product(h[0], a, ao, b, bo, c, co, h[1], h[2], h[3], h[4], h[5], h[6], h[7])

    return impl32


def _call_kernel():
    """A Numba intrinsic ``call_kernel(address, (arg, ...))``: a call of the compiled kernel at
    ``address`` (its native entry point, Numba's calling convention, taking these arguments'
    types) through a pointer. The segment is not linked with its kernels: its compile does not
    generate their code again (linked, TinyGPT's segments took 18 s to compile, its kernels 5 s),
    one compiled segment serves every set of kernels of the same argument types, and the
    addresses, an argument, are found again in each process (so the segment's disk cache entry
    holds none). The status a kernel returns is not read: kernels raise nothing (NumPy's error
    model, no bounds checks)."""

    from numba.core import cgutils
    from numba.extending import intrinsic

    def call_kernel(typingctx, address, args):
        def codegen(context, builder, signature, values):
            where, packed = values
            argtys = list(signature.args[1].types)
            vals = [builder.extract_value(packed, i) for i in range(len(argtys))]
            cc = context.call_conv
            fnty = cc.get_function_type(types.none, argtys)
            fn = builder.inttoptr(where, fnty.as_pointer())
            retty = cc.get_return_type(types.none).pointee
            ret = cgutils.alloca_once(builder, retty)
            builder.store(cgutils.get_null_value(retty), ret)
            excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
            builder.call(fn, [ret, excinfo, *cc._get_arg_packer(argtys).as_arguments(builder, vals)])
            return context.get_dummy_value()

        return types.void(address, args), codegen

    return intrinsic(call_kernel)


call_kernel = _call_kernel()


def _entry_point(fn, args: tuple) -> int:
    """The address of kernel dispatcher ``fn``'s compiled code for ``args``' types (compiled, or
    loaded from Numba's disk cache, if it is not yet). Kept per dispatcher and argument kinds:
    a plan of symbolic sizes asks again at each new binding (Numba's typeof of every argument
    took 4 ms per binding of a TinyGPT forward)."""
    known = _entry_points.get(fn)
    if known is None:
        known = _entry_points[fn] = {}
    kinds = tuple(_arg_kind(a) for a in args)
    found = known.get(kinds)
    if found is None:
        from numba import typeof

        sig = tuple(typeof(a) for a in args)
        fn.compile(sig)
        cres = fn.overloads[sig]
        found = known[kinds] = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return found


# dispatcher -> {argument kinds: address of its compiled code}; weak, so an evicted kernel
# (LAZYVIC_KERNEL_CACHE_SIZE) is not kept alive here (a segment's plan keeps its own kernels).
_entry_points: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_signatures: dict = {}  # (segment name, argument kinds) -> Numba signature (NativeSegment.load)


def _arg_kind(a):
    """What Numba's type of ``a`` depends on: for an array its dtype, dimensions, layout,
    alignment and writability; else its Python (or NumPy scalar) type."""
    if isinstance(a, np.ndarray):
        f = a.flags
        layout = "C" if f.c_contiguous else "F" if f.f_contiguous else "A"
        return (a.dtype.str, a.ndim, layout, f.aligned, f.writeable)
    return type(a)


# ---------------------------------------------------------------- products as NumPy runs them
def _blasable(s_slow: int, s_fast: int, d_fast: int, itemsize: int) -> bool:
    """NumPy's ``is_blasable2d`` (matmul.c.src): the fast axis contiguous, the slow one's stride a
    whole number of items at least the fast axis's length."""
    return s_fast == itemsize and s_slow % itemsize == 0 and s_slow // itemsize >= d_fast


@dataclass
class _Product:
    """A product as NumPy's ``matmul`` inner loop runs it (``numpy/_core/src/umath/matmul.c.src``):
    ``routine`` "gemm" (pairs a, b, out) or "gemv" with ``order`` saying which operand is the
    matrix ("ab": a, "ba": b); ``header`` the integers of the BLAS call (see _GEMM, _GEMV);
    ``offsets`` the (a, b, out) element offsets of each matrix of the batch."""

    routine: str
    order: str
    header: tuple
    offsets: list


def _operand_view(c, entries, dtype):
    """``(view, element offset)`` of operand ``c`` over a C-contiguous buffer of its base's shape,
    or None when its movement ops copy (a reshape of a non-contiguous view)."""
    e = entries[c.base]
    if e.dtype.np != dtype or symbolic.contains_symbols(e.shape):
        return None
    base = np.empty(e.shape, dtype)
    v = view({c.base: base}, (), c)
    root = v
    while root.base is not None:
        root = root.base
    sz = dtype.itemsize
    off = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if root is not base or v.ndim < 2 or v.dtype != dtype or off % sz or any(s % sz for s in v.strides):
        return None
    return v, off // sz


def _product(step: MatmulStep, entries) -> _Product | None:
    """How NumPy's ``matmul`` runs ``step`` (concrete shapes), when that is one gemm or one gemv
    per matrix of the batch on the operands as they are; None when NumPy does anything else:
    a dot (a 1x1 result), its own loop (a dimension of 0, or an inner dimension of 1), copies of
    operands that are not blasable, or syrk (one buffer times its transpose, at one address)."""
    out_e = entries[step.out]
    dtype = out_e.dtype.np
    if dtype not in (np.float32, np.float64) or any(c.kind != "buffer" for c in (step.a, step.b)):
        return None
    if symbolic.contains_symbols(out_e.shape):
        return None
    views = [_operand_view(c, entries, dtype) for c in (step.a, step.b)]
    if None in views:
        return None
    (va, oa), (vb, ob) = views
    sz = dtype.itemsize
    m, n = va.shape[-2:]
    n2, p = vb.shape[-2:]
    batch = tuple(out_e.shape)[:-2]
    if n != n2 or tuple(out_e.shape)[-2:] != (m, p) or min(m, n, p) == 0 or n == 1:
        return None
    if not batch and in_pieces(m, p, n):
        return None  # in pieces (ops/blas.matmul_pieces): the step's runner makes those calls
    is1_m, is1_n = va.strides[-2:]
    is2_n, is2_p = vb.strides[-2:]
    offsets = []
    for idx in np.ndindex(*batch) if batch else [()]:
        row = []
        for v, off in ((va, oa), (vb, ob)):
            lead = len(batch) - (v.ndim - 2)
            for k, (d, s) in enumerate(zip(v.shape[:-2], v.strides[:-2])):
                if d != 1:  # (a dimension of 1 is broadcast: its stride is never used)
                    off += idx[lead + k] * (s // sz)
            row.append(off)
        row.append((int(np.ravel_multi_index(idx, batch)) if batch else 0) * m * p)
        offsets.append(row)
    call = _call(m, n, p, (is1_m, is1_n), (is2_n, is2_p), (p * sz, sz), sz)
    if call is None:
        return None
    routine, order, header = call
    if routine == "gemm":
        ta, tb = header[:2]
        syrk = m == p and is1_m == is2_p and is1_n == is2_n and ta != tb
        if syrk and step.a.base == step.b.base and any(r[0] == r[1] for r in offsets):
            return None
    return _Product(routine, order, header, offsets)


def _call(m: int, n: int, p: int, sa: tuple, sb: tuple, so: tuple, sz: int) -> tuple | None:
    """``(routine, order, header)`` of one (m, n) @ (n, p) product with byte strides ``sa``,
    ``sb`` and ``so`` (the output's) as ``ops/blas.matmul_into`` runs it: "own", ops/gemm's
    kernel (float32, where ops/gemm_choice.own_kind_of says so), else NumPy's ``matmul`` inner
    loop: one gemm, or one gemv (``order``: which operand is the matrix, see _Product); None when NumPy
    does anything else (a dot, its own loop, a copy of an operand that is not blasable; syrk is
    the caller's)."""
    (is1_m, is1_n), (is2_n, is2_p), (os_m, os_p) = sa, sb, so
    if sz == 4:
        own = own_kind_of(m, n, p, sa, sb, so)
        if own:
            return "own", "ab", own_header(own, m, n, p, sa, sb, so)
    if min(m, n, p) == 0 or n == 1 or not _blasable(os_m, os_p, p, sz):
        return None
    i1 = (_blasable(is1_m, is1_n, n, sz), _blasable(is1_n, is1_m, m, sz))  # C-, F-blasable
    i2 = (_blasable(is2_n, is2_p, p, sz), _blasable(is2_p, is2_n, n, sz))
    if m > 1 and p > 1:
        if not any(i1) or not any(i2):
            return None  # NumPy copies the operand first
        ta, lda = (_CBLAS_NO_TRANS, is1_m // sz) if i1[0] else (_CBLAS_TRANS, is1_n // sz)
        tb, ldb = (_CBLAS_NO_TRANS, is2_n // sz) if i2[0] else (_CBLAS_TRANS, is2_p // sz)
        return "gemm", "ab", (ta, tb, m, p, n, lda, ldb, os_m // sz)
    if m == 1 and p > 1:  # vector @ matrix: gemv over b, transposed
        if not any(i2) or not (is1_n // sz >= 1):
            return None
        order, lda = (_CBLAS_COL_MAJOR, is2_p // sz) if i2[1] else (_CBLAS_ROW_MAJOR, is2_n // sz)
        return "gemv", "ba", (order, n, p, lda, is1_n // sz, os_p // sz)
    if p == 1 and m > 1:  # matrix @ vector: gemv over a
        if not any(i1) or not (is2_n // sz >= 1):
            return None
        order, lda = (_CBLAS_COL_MAJOR, is1_m // sz) if i1[0] else (_CBLAS_ROW_MAJOR, is1_n // sz)
        return "gemv", "ab", (order, n, m, lda, is2_n // sz, os_m // sz)
    return None


def matmul_call(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple | None:
    """How ``np.matmul(a, b, out=out)`` of 2-D float32/float64 arrays calls OpenBLAS, for code
    that makes the same call itself (the recurrent loops, ``recurrent_kernels.py``):
    ``(routine, order, header)`` as :func:`_call`, the header as an int64 array; None when NumPy's
    OpenBLAS is not bound (:func:`blas`) or NumPy does something else."""
    sz = a.dtype.itemsize
    if not blas().ok or a.dtype != b.dtype or a.dtype != out.dtype or a.dtype not in (np.float32, np.float64):
        return None
    (m, n), p = a.shape, b.shape[1]
    if b.shape[0] != n or out.shape != (m, p) or any(s % sz for s in a.strides + b.strides + out.strides):
        return None
    call = _call(m, n, p, a.strides, b.strides, out.strides, sz)
    if call is None:
        return None
    return call[0], call[1], np.array(call[2], dtype=np.int64)


# ---------------------------------------------------------------- segments
@dataclass
class NativeSegment:
    """Consecutive steps of a plan run by one generated Numba function (see the module docstring).

    ``positions``: the environment entries the function takes (flat arrays, argument order);
    ``scalar_groups``: per NumPy dtype, the scalar slots passed as one array; ``zs``: the kernels'
    size arguments, concatenated; ``mo``: the products' headers and batch offsets. ``steps`` are
    the steps it replaces, run one by one if the function cannot be compiled."""

    name: str
    source: str = field(repr=False)
    kernels: list = field(repr=False)  # the KernelSteps it calls, in order (their entry points: ``fp``)
    positions: tuple = ()
    scalar_groups: tuple = ()
    zs: np.ndarray = field(default=None, repr=False)
    mo: np.ndarray = field(default=None, repr=False)
    steps: list = field(default_factory=list, repr=False)
    cache_dir: object = None
    fn: object = field(default=None, repr=False)
    fp: np.ndarray = field(default=None, repr=False)  # the kernels' entry points, found by load()
    failed: bool = False
    # Compiling in a worker process (``load(background=True)``): ``ready`` once it is in Numba's
    # disk cache, then loaded by the next run; ``stats``/``debug`` of the plan, for that load.
    pending: bool = False
    ready: bool = False
    stats: dict = field(default=None, repr=False)
    debug: int = 0

    def writes(self):
        return tuple(p for s in self.steps for p in s.writes())

    def reads(self):
        return tuple(p for s in self.steps for p in s.reads())

    def _args(self, flat, scalars) -> list:
        args = [self.fp]
        args += [flat[p] for p in self.positions]
        args += [np.array([scalars[s] for s in slots], dtype=d) for d, slots in self.scalar_groups]
        args += [self.zs, self.mo]
        return args

    def __call__(self, env, flat, scalars):
        fn = self.fn
        if fn is None and self.ready and not self.failed:  # compiled by a worker: load it now
            self.load(flat, scalars, self.stats, self.debug)
            fn = self.fn
        if fn is not None:
            try:
                fn(*self._args(flat, scalars))
                return
            except NumbaError:  # arguments of new types that fail to compile: before any step ran
                self.fn, self.failed = None, True
        for st in self.steps:  # not compiled (load failed): the steps it replaces, one by one
            st(env, flat, scalars)

    def load(self, flat, scalars, stats: dict, debug: int = 0, background: bool = False) -> bool:
        """Write, import and compile the segment's function for the argument types of this run
        (once; ``stats`` counts ``native_segments`` and ``native_seconds``, and ``native_new`` the
        same since the runtime last took them into ``lazyvic.metrics``). False when that fails
        (the segment then runs its steps) or, with ``background``, when the function is not in
        Numba's disk cache yet: a worker process compiles it there while the segment runs its
        steps, and the first run after that loads it (``ready``)."""
        with _load_lock:
            if self.fn is not None or self.failed or (self.pending and not self.ready):
                return self.fn is not None
            from numba import typeof

            self.stats, self.debug = stats, debug
            t0 = time.perf_counter()
            try:
                self.fp = np.array([_entry_point(st.fn, st.arguments(flat, scalars)) for st in self.kernels], np.int64)
                args = self._args(flat, scalars)
                kinds = (self.name, tuple(_arg_kind(a) for a in args))
                sig = _signatures.get(kinds)
                if sig is None:
                    if len(_signatures) > 4096:  # (names of segments of plans long gone)
                        _signatures.clear()
                    sig = _signatures[kinds] = tuple(typeof(a) for a in args)
                if background and not self.ready and self._send_to_worker(args, sig):
                    return False
                fn = load_checked(
                    Path(self.cache_dir) / "plans",
                    self.name,
                    self.source,
                    lambda path, cached: self._import(path, cached, sig),
                    keep=(NumbaError,),
                )
            except Exception as e:  # noqa: BLE001 - never fail a run for the fast path: its steps run instead
                self.failed = True
                if debug:
                    print(f"[lazyvic] native segment {self.name} not used: {type(e).__name__}: {e}", file=sys.stderr)
                return False
            dt = time.perf_counter() - t0
            stats["native_segments"] = stats.get("native_segments", 0) + 1
            stats["native_seconds"] = stats.get("native_seconds", 0.0) + dt
            new = stats.setdefault("native_new", [0, 0.0])  # for the runtime's counters
            new[0] += 1
            new[1] += dt
            self.fn = fn
            return True

    def _send_to_worker(self, args: list, sig: tuple) -> bool:
        """When the function is not in Numba's disk cache: hand its compile to the worker and
        return True (``ready`` is set when it is done); False to compile or load it here."""
        from lazyvic.lowering.cpu import compile_workers
        from lazyvic.lowering.kernel_files import write_checked

        if compile_workers.worker_count() == 0 or any(getattr(t, "readonly", False) for t in sig):
            return False
        directory = Path(self.cache_dir) / "plans"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.py"
        write_checked(path, self.source)
        fn = self._import(path, True, None)
        if sig in fn.overloads:  # compiled or loaded in this process already (another binding's)
            return False
        cres = fn._cache.load_overload(sig, fn.targetctx)
        if cres is not None:  # compiled by an earlier process: load it here
            return False
        job = {
            "path": str(path),
            "module": f"lazyvic_plans.{self.name}",
            "name": self.name,
            "sig": [[a.dtype.name for a in args], [], [], False],
        }
        self.pending = True
        _background.submit(job, self)
        return True

    def _import(self, path: Path, cached: bool, sig: tuple | None):
        """Import the segment's file and compile its function for ``sig`` (from and into Numba's
        disk cache when ``cached``). A source already imported in this process (another plan's
        segment, or a binding's of the same plan) is not imported again."""
        fn = _imported.get((self.name, cached))
        if fn is not None:
            if sig is not None:
                fn.compile(sig)
            return fn
        modname = f"lazyvic_plans.{self.name}"
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        # Registered as the kernels' modules are: Numba finds a function's module by name (to
        # cache it, and to rebuild its environment when loading it from the disk cache).
        sys.modules[modname] = module
        spec.loader.exec_module(module)
        fn = getattr(module, self.name)
        if not cached:
            without_disk_cache(fn)
        if sig is not None:
            fn.compile(sig)
        _imported[(self.name, cached)] = fn
        return fn


class _Background:
    """One worker process (``compile_workers``) and a thread feeding it the segments to compile
    into Numba's disk cache, one at a time; each segment is marked ``ready`` (or ``failed``)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs: list = []
        self.thread = None
        self.worker = None
        self.pid = None  # the process that started the worker

    def submit(self, job: dict, seg: "NativeSegment") -> None:
        with self.lock:
            self.jobs.append((job, seg))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._feed, name="lazyvic-native-compile", daemon=True)
                self.thread.start()

    def _feed(self) -> None:
        from lazyvic.lowering.cpu import compile_workers

        while True:
            with self.lock:
                if not self.jobs:
                    self.thread = None
                    return
                job, seg = self.jobs.pop(0)
            try:
                # (A forked process does not share its parent's worker: the pipe is the parent's.)
                if self.worker is None or not self.worker.alive() or self.pid != os.getpid():
                    self.worker, self.pid = compile_workers.Worker(), os.getpid()
                ok = self.worker.compile(job)
            except Exception:  # noqa: BLE001 - a worker that cannot start: the steps stay
                ok = False
            if ok:
                seg.ready = True
            else:
                seg.failed = True

    def close(self) -> None:
        if self.worker is not None and self.pid == os.getpid():
            self.worker.close()


_background = _Background()
atexit.register(_background.close)


_load_lock = threading.Lock()
_imported: dict = {}  # (segment name, from the disk cache) -> its dispatcher


def _native_step(step, entries, use_blas: bool):
    """("kernel", step) or ("product", step, _Product) when ``step`` can run in a segment, else None."""
    if isinstance(step, KernelStep):
        return ("kernel", step) if step.sizes == () or step.zs is not None else None
    if use_blas and isinstance(step, MatmulStep):
        g = _product(step, entries)
        return ("product", step, g) if g is not None else None
    return None


def segments(steps: list, entries, cache_dir) -> list | None:
    """``steps`` with each run of two or more steps that can be native replaced by a
    :class:`NativeSegment` (not compiled yet: the first run of each compiles it); None when no run
    is long enough to gain, or when more than :data:`MAX_CALLS` steps would be native."""
    # Kernels first (a products' analysis is longer): a plan of symbolic sizes asks again at each
    # new binding, and TinyGPT's training step (150 kernels) spent 4.6 ms finding it too long.
    if sum(1 for st in steps if _native_step(st, entries, False) is not None) > MAX_CALLS:
        return None
    b = blas()
    use_blas = b.ok
    items = [_native_step(st, entries, use_blas) for st in steps]
    if sum(n is not None for n in items) > MAX_CALLS:
        return None
    out, run = [], []

    def flush():
        if len(run) >= 2:
            out.append(_segment(run, b.int_bits, cache_dir))
        else:
            out.extend(r[1] for r in run)
        run.clear()

    for st, n in zip(steps, items):
        if n is None:
            flush()
            out.append(st)
        else:
            run.append(n)
    flush()
    if not any(isinstance(s, NativeSegment) for s in out):
        return None
    return out


def _segment(run: list, int_bits: int, cache_dir) -> NativeSegment:
    """The generated function of one run of native steps."""
    positions: dict = {}  # entry position -> argument name

    def arg(pos: int) -> str:
        if pos not in positions:
            positions[pos] = f"e{pos}"
        return positions[pos]

    groups: dict = {}  # NumPy dtype -> scalar slots

    def scalar_at(dtype, slot) -> str:
        slots = groups.setdefault(np.dtype(dtype), [])
        slots.append(slot)
        return f"s_{np.dtype(dtype).name}[{len(slots) - 1}]"

    def scalars_range(dtype, slots) -> str:
        have = groups.setdefault(np.dtype(dtype), [])
        start = len(have)
        have.extend(slots)
        return f"s_{np.dtype(dtype).name}[{start}:{len(have)}]"

    zs, headers, triples, kernels, body = [], [], [], [], []
    for item in run:
        if item[0] == "kernel":
            st = item[1]
            args = [arg(p) for p in (st.out, *st.extra_outs, *st.buffers)]
            args += [scalar_at(t, s) for s, t in st.scalars]
            args += [scalars_range(d, slots) for d, slots in st.packed]
            if st.zs is not None:
                args.append(f"zs[{len(zs)}:{len(zs) + len(st.zs)}]")
                zs.extend(int(z) for z in st.zs)
            body.append(f"    call_kernel(fp[{len(kernels)}], ({', '.join(args)},))")
            kernels.append(st)
        else:
            st, g = item[1], item[2]
            h = _HEADER * len(headers)
            headers.append([*g.header, *[0] * (8 - len(g.header)), len(triples), len(triples) + len(g.offsets)])
            triples.extend(g.offsets)
            pair = {"a": (arg(st.a.base), 0), "b": (arg(st.b.base), 1)}
            (x, i), (y, j) = pair[g.order[0]], pair[g.order[1]]
            if g.routine == "own":  # ops/gemm.product(kind, a, ao, b, bo, c, co, m, n, k, strides)
                call, ints = f"own(mo[{h}], ", range(1, len(g.header))
            else:
                call, ints = f"{g.routine}_f{32 if st.a.dtype == np.float32 else 64}_i{int_bits}(", range(len(g.header))
            body.append(f"    for q in range(mo[{h + 8}], mo[{h + 9}]):")
            body.append(
                f"        {call}{x}, mo[t + 3 * q + {i}], {y}, mo[t + 3 * q + {j}], {arg(st.out)}, mo[t + 3 * q + 2], "
                + ", ".join(f"mo[{h + k}]" for k in ints)
                + ")"
            )
    t0 = _HEADER * len(headers)
    mo = np.array([v for hd in headers for v in hd] + [v for row in triples for v in row], dtype=np.int64)
    names = ["fp"] + list(positions.values()) + [f"s_{d.name}" for d in groups] + ["zs", "mo"]
    lines = [f"    t = {t0}"] if headers else []
    text = "\n".join(
        [
            "# Generated by lazyvic.lowering.cpu.native: do not edit.",
            f"# kernel_lib {LIB_HASH}, native {NATIVE_VERSION}, gemm {gemm_source_hash()}",
            "# The kernels are called through their addresses (fp): any kernels of these argument types.",
            "from numba import njit",
            "",
            "from lazyvic.lowering.cpu.native import blas, call_kernel, "
            + ", ".join(f"{r}_f{f}_i{int_bits}" for r in ("gemm", "gemv") for f in (32, 64)),
            *(["from lazyvic.ops.gemm import product as own"] if any(" own(" in line for line in body) else []),
            "",
            "blas()  # NumPy's OpenBLAS, bound as the symbols the products call (in any process)",
            "",
            "",
            "@njit(cache=True, nogil=True, boundscheck=False)",
            f"def SEGMENT_NAME({', '.join(names)}):",
            *lines,
            *body,
            "",
        ]
    )
    sha = hashlib.sha1(text.encode()).hexdigest()
    name = f"plan_{sha[:16]}"
    return NativeSegment(
        name,
        text.replace("SEGMENT_NAME", name),
        kernels,
        tuple(positions),
        tuple((d, tuple(slots)) for d, slots in groups.items()),
        np.array(zs, dtype=np.int64),
        mo,
        [item[1] for item in run],
        cache_dir,
    )
