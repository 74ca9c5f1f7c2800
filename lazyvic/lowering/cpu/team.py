"""BLAS products run in pieces on Numba's thread team (the convolution steps of lowering/cpu/steps.py).

A plan runs BLAS on one thread (``CpuPlan.blas_threads``: two spinning thread teams, OpenBLAS's
and Numba's, waited for each other, and on a busy machine a product's second half waited for a
descheduled thread). Its products then used one core of two.
Here a product is split into pieces (``ops/blas.product_pieces``, fixed by its shape), and a
parallel Numba loop calls OpenBLAS once per piece (on one thread each, the calls NumPy's
``matmul`` makes: ``native.matmul_call``), so the plan keeps one thread team: Numba's.

Same bits: the NumPy reference runs the same pieces with ``np.matmul`` (``ops/blas.run_products``),
and which thread runs a piece does not change what it computes. Measured (2 cores, float32,
MobileNetV2's 1x1 convolutions at batch 1, kernel alone): 1.59 ms on two threads against 2.98
ms as single products on one; with another process holding a core, 3.23 ms. So while other
processes are busy (lowering/cpu/load.py) the pieces run on the calling thread. The same plans
run the convolutions' copies (lowering/cpu/im2col.py) and depthwise convolutions
(lowering/cpu/direct_conv.py) on Numba's threads by the same rule.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from lazyvic.lowering.cpu import native
from lazyvic.lowering.cpu.load import on_team
from lazyvic.lowering.kernel_files import inlined_sources_hash, stamp_with
from lazyvic.ops.blas import run_products

native.blas()  # NumPy's OpenBLAS bound as the symbols the loops call (any process)

# A table row: the call's header (8 integers, native._GEMM's or _GEMV's order, or
# ops/gemm_choice.own_header's), the
# element offsets of a, b and out in their flat arrays, and the kind (0 gemm, 1 gemv over b, 2
# ops/gemm's kernel).
_ROW = 12
_KINDS = {"gemm": 0, "gemv": 1, "own": 2}  # native.product's kinds
# Tables a kernel keeps, per shapes (a plan of symbolic sizes runs one step at many).
MAX_TABLES = 64


@njit(cache=True, parallel=True, nogil=True)
def _run_parallel(a, b, c, table):
    for p in prange(table.shape[0]):
        h = table[p]
        native.product(a, h[8], b, h[9], c, h[10], h[11], h)


@njit(cache=True, nogil=True)
def _run_serial(a, b, c, table):
    for p in range(table.shape[0]):
        h = table[p]
        native.product(a, h[8], b, h[9], c, h[10], h[11], h)


stamp_with(inlined_sources_hash(), _run_parallel, _run_serial)  # (they inline native.product)


def _offset(v: np.ndarray, base: np.ndarray) -> int | None:
    """Element offset of view ``v`` in C-contiguous ``base``, or None when it is not inside it."""
    off = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if off % base.itemsize or not 0 <= off < max(1, base.nbytes):
        return None
    return off // base.itemsize


def product_table(views: list, bases: tuple) -> np.ndarray | None:
    """The rows (see _ROW) of the products ``(a, b, out)`` (2-D views into the C-contiguous
    ``bases`` (a's, b's, out's)), or None when NumPy's ``matmul`` would run one of them other
    than as one gemm, or one gemv over b (then the caller runs them with NumPy)."""
    rows = np.zeros((len(views), _ROW), dtype=np.int64)
    for row, (a, b, out) in zip(rows, views):
        call = native.matmul_call(a, b, out)
        if call is None or (call[0], call[1]) not in (("gemm", "ab"), ("gemv", "ba"), ("own", "ab")):
            return None
        offsets = [_offset(v, base) for v, base in zip((a, b, out), bases)]
        if None in offsets:
            return None
        header = call[2]
        row[: len(header)] = header
        row[8:11] = offsets
        row[11] = _KINDS[call[0]]
    return rows


class Team:
    """A step's runner of products in pieces: called as ``ops/blas.run_products`` is (the ops'
    ``run`` argument: ``views``, a function making the ``(a, b, out)`` views, ``bases``, the
    C-contiguous arrays they are of, and ``key``), it makes the same BLAS calls, from a table
    kept per key and base shapes: on Numba's threads when ``team`` is set (the plan runs BLAS
    on one thread or none: ``CpuBackend`` sets it), else on the calling thread. Anything it
    cannot call the same way (bases not C-contiguous, a product NumPy would not run as one gemm
    or one gemv over b) runs ``run_products``."""

    def __init__(self):
        self.team = False
        self.tables: dict = {}

    def __call__(self, views, bases: tuple, key=None) -> None:
        a, b, c = bases
        if not (a.flags.c_contiguous and b.flags.c_contiguous and c.flags.c_contiguous):
            run_products(views)
            return
        full = (key, a.shape, b.shape, c.shape, c.dtype.str)
        table = self.tables.get(full, False)
        if table is False:
            if len(self.tables) >= MAX_TABLES:
                self.tables.clear()
            table = self.tables[full] = product_table(views() if callable(views) else views, bases)
        if table is None:
            run_products(views)
        elif len(table) > 1 and on_team(self.team):
            _run_parallel(a.reshape(-1), b.reshape(-1), c.reshape(-1), table)
        else:
            _run_serial(a.reshape(-1), b.reshape(-1), c.reshape(-1), table)
