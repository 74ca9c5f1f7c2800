"""The thread count of the BLAS libraries loaded in this process, set for the length of a call.

CPU plans and the interpreter run their products on one BLAS thread (``lowering/cpu/plan.py``:
``CpuPlan.blas_threads``, large ones in pieces on Numba's threads; ``runtime/interpreter.py``),
and the LSTM recurrence (``ops/recurrent.py``) runs its small per-step products on one thread
in its reference and in its plan step alike: OpenBLAS's idle threads spin, and on a busy or
virtual machine waking them cost up to half a millisecond per product (a 35-step two-layer LSTM
language model's step: 70 ms instead of 10), and one thread gives the same bits wherever the
loop runs.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from lazyvic.ops.gemm_choice import own_kind_of


class _BLASThreads:
    """Sets the number of threads of the BLAS libraries loaded in this process (through
    threadpoolctl, found once) for the duration of a plan run.

    The setting is process-wide: runs in several threads share it, counted, so the first run to
    limit saves the setting and the last one to finish restores it (a plain save/restore per run
    would leave BLAS limited when two runs overlap)."""

    def __init__(self):
        self.libs = None
        self.lock = threading.Lock()
        self.users = 0
        self.saved: list = []

    def _find(self) -> list:
        """``(get, set)`` of each BLAS library's thread count: OpenBLAS's own functions, called
        directly (through threadpoolctl's controller, a limit and restore cost ~4 us per plan
        run: a tenth of a small training step), else the controller's methods."""
        try:
            from threadpoolctl import ThreadpoolController

            controllers = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
        except Exception:  # noqa: BLE001 - no threadpoolctl, or a library it cannot drive: leave BLAS alone
            return []
        found = []
        for lib in controllers:
            get = put = None
            if lib.internal_api == "openblas" and getattr(lib, "threading_layer", None) != "openmp":
                try:  # (OpenBLAS over OpenMP: its limit is per thread, threadpoolctl's path)
                    get = lib._get_symbol("openblas_get_num_threads")
                    put = lib._get_symbol("openblas_set_num_threads")
                except Exception:  # noqa: BLE001 - another threadpoolctl: its public methods
                    get = put = None
            if get is None or put is None:
                found.append((lambda lib=lib: lib.num_threads, lib.set_num_threads))
            else:
                found.append((get, put))
        return found

    def limit(self, n: int) -> None:
        with self.lock:
            if self.libs is None:
                self.libs = self._find()
            if self.users == 0:
                self.saved = []
                for get, put in self.libs:
                    k = get()
                    if k != n:
                        put(n)
                        self.saved.append((put, k))
            self.users += 1

    def restore(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                for put, k in self.saved:
                    put(k)


blas_threads = _BLASThreads()


@contextlib.contextmanager
def one_thread():
    """BLAS on one thread inside the block (counted with the plans' limits: see _BLASThreads)."""
    blas_threads.limit(1)
    try:
        yield
    finally:
        blas_threads.restore()


# How a product is split into pieces that a thread team runs side by side (product_pieces).
# Measured on 2 cores (float32, one OpenBLAS thread per piece, MobileNetV2's 1x1 convolutions
# at batch 1 as (O x C) @ (C x H*W), 15 shapes): 2.98 ms for the 15 as single products,
# 1.59 ms as pieces on two threads, 3.02 ms as the same pieces on one thread; with another
# process holding a core, 3.23 ms. Splitting the rows keeps each piece's output rows its own:
# column pieces of 196-pixel rows wrote cache lines both threads held, and ran slower on two
# threads than on one (384 x 64 @ 64 x 196: 303 against 110 us).
PIECE_WORK = 1 << 18  # multiply-adds per piece, at least (M*N*K over the pieces)
MAX_PIECES = 8
MIN_PIECE_ROWS = 16
MIN_PIECE_COLUMNS = 64


def product_pieces(m: int, n: int, k: int, max_pieces: int = MAX_PIECES) -> list:
    """The pieces ``(row0, row1, col0, col1)`` of the output that an (m x k) @ (k x n) product
    is computed in: one BLAS call each, on one thread. A power of two of pieces, at most
    ``max_pieces``, each of at least PIECE_WORK multiply-adds; split by rows when each piece keeps
    MIN_PIECE_ROWS of them, else by columns (multiples of 16) when each keeps MIN_PIECE_COLUMNS,
    else not at all. Fixed by the shape alone, never by the threads or the load, so a product
    rounds the same wherever and however it runs (the NumPy reference runs the same pieces)."""
    p = 1
    while 2 * p <= max_pieces and m * n * k >= 2 * p * PIECE_WORK:
        p *= 2
    while p > 1:
        if m >= MIN_PIECE_ROWS * p:
            h = -(-m // p)
            return [(i, min(m, i + h), 0, n) for i in range(0, m, h)]
        if n >= MIN_PIECE_COLUMNS * p:
            w = -(-n // (16 * p)) * 16
            return [(0, m, j, min(n, j + w)) for j in range(0, n, w)]
        p //= 2
    return [(0, m, 0, n)]


# A matrix product (the matmul op, 2-D float operands) in pieces that a plan's thread team runs
# side by side (lowering/cpu/steps.MatmulStep), where the plan runs BLAS on one thread: the
# products of a TinyGPT training step, (1024 x 128) @ (128 x 512) and the like, 21 of its 31 ms,
# ran on one core of two. Pieces of at least MATMUL_PIECE_WORK multiply-adds, at most
# MATMUL_MAX_PIECES (the plans run BLAS on one thread, lowering/cpu/plan.py). Split by rows when
# the output has at least as many rows as columns (each piece packs all of b: a weight), else by
# columns (each packs all of a: a weight gradient's (128 x 1024) @ (1024 x 512) in 16-row pieces
# packed its 2 MB b eight times). Fixed by the shape alone, in the NumPy reference too
# (ops/matmul.py).
MATMUL_PIECE_WORK = 1 << 21
MATMUL_MAX_PIECES = 4


def matmul_pieces(m: int, n: int, k: int) -> list:
    """The pieces ``(row0, row1, col0, col1)`` of the output of an (m x k) @ (k x n) matmul
    (see MATMUL_PIECE_WORK): one BLAS call each; ``[(0, m, 0, n)]`` for one."""
    work = m * n * k
    p = 1
    while 2 * p <= MATMUL_MAX_PIECES and work >= 2 * p * MATMUL_PIECE_WORK:
        p *= 2
    while p > 1:
        if m >= n and m >= MIN_PIECE_ROWS * p:
            h = -(-m // p)
            return [(i, min(m, i + h), 0, n) for i in range(0, m, h)]
        if m < n and n >= MIN_PIECE_COLUMNS * p:
            w = -(-n // (16 * p)) * 16
            return [(0, m, j, min(n, j + w)) for j in range(0, n, w)]
        p //= 2
    return [(0, m, 0, n)]


def in_pieces(m: int, n: int, k: int) -> bool:
    """Whether an (m x k) @ (k x n) matmul runs in more than one piece (:func:`matmul_pieces`):
    the question the NumPy reference, the plan's step and its native segments all ask."""
    return len(matmul_pieces(m, n, k)) > 1


def matmul_views(a, b, out) -> list:
    """``(a, b, out)`` views of each piece (:func:`matmul_pieces`) of ``out = a @ b``, 2-D."""
    return [
        (a[r0:r1], b[:, c0:c1], out[r0:r1, c0:c1])
        for r0, r1, c0, c1 in matmul_pieces(a.shape[0], b.shape[1], a.shape[1])
    ]


def product_views(a, b, out, max_pieces: int = MAX_PIECES) -> list:
    """``(a, b, out)`` views of each piece (:func:`product_pieces`) of ``out = a @ b``, 2-D."""
    return [
        (a[r0:r1], b[:, c0:c1], out[r0:r1, c0:c1])
        for r0, r1, c0, c1 in product_pieces(a.shape[0], b.shape[1], a.shape[1], max_pieces)
    ]


def group_products(a, b, out, max_pieces: int = MAX_PIECES) -> list:
    """``(a, b, out)`` views of the pieces of ``out[g] = a[g] @ b[g]`` for each group g (3-D
    operands), up to ``max_pieces`` in all (whole products when there are more groups)."""
    per = max(1, max_pieces // max(1, a.shape[0]))
    return [v for g in range(a.shape[0]) for v in product_views(a[g], b[g], out[g], per)]


def run_products(views, bases: tuple = (), key=None) -> None:
    """``np.matmul(a, b, out=out)`` for each ``(a, b, out)`` of ``views`` (a list, or a function
    making it), in order: the NumPy reference of the pieces a compiled step runs on its thread
    team. ``bases`` (the C-contiguous arrays the views are of: a's, b's, out's) and ``key`` (what,
    with their shapes, fixes the views) are for the step's runner (lowering/cpu/team.Team), which
    takes the same arguments and makes the same BLAS calls."""
    for a, b, out in views() if callable(views) else views:
        matmul_into(a, b, out)


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` as every tier runs a product (one numerics): a float32 product that
    :func:`own_kind_of` gives a kernel runs on ops/gemm's (each matrix of a batch too: its
    matrices share their strides), anything else is ``np.matmul``. ``out`` has the result's
    shape; the kernels take batch dimensions equal (broadcast views allowed), as the matmul op
    has them (others go to NumPy)."""
    if a.dtype == _F32 and b.dtype == _F32 and out.dtype == _F32 and a.ndim == b.ndim == out.ndim >= 2:
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        kind = own_kind_of(m, k, n, a.strides[-2:], b.strides[-2:], out.strides[-2:])
        if kind:
            from lazyvic.ops.gemm import product_2d, product_4d  # (Numba: imported at the first such product)

            if out.ndim == 2:
                product_2d(a, b, out, kind)
            elif out.ndim <= 4:
                lead = (None,) * (4 - out.ndim)
                product_4d(a[lead], b[lead], out[lead], kind)
            else:
                for i in np.ndindex(*out.shape[:-4]):
                    product_4d(a[i], b[i], out[i], kind)
            return
    np.matmul(a, b, out=out)


_F32 = np.dtype(np.float32)
