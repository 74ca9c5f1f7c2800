"""Which float32 products ops/gemm's kernels run: fixed by shapes and strides alone, asked by
every tier (``ops/blas.matmul_into``, ``lowering/cpu/native``), so each gives the same answer.
No Numba here: deciding does not import it (ops/gemm compiles its kernels when imported)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# ops/gemm's kernels (see its docstring): ROWS (b's rows contiguous) and DOTS (a's rows and b's
# columns contiguous along the inner dimension: x @ w^T), their tile widths, and their limits.
ROWS, DOTS = 1, 2
LANES = 16
# The products they run at most (multiply-adds): the kernels do not block for caches, and past
# this OpenBLAS's packing wins (1024^3 float32 on one core: 19 against 17 ms; 512^3: 1.4 against
# 2.1). A product split into pieces (matmul_pieces) asks for each piece.
MAX_WORK = 1 << 26


def own_kind(m: int, n: int, k: int, sa: tuple, sb: tuple, so: tuple) -> int:
    """Which of ops/gemm's kernels runs the float32 product (m x k) @ (k x n) whose operands and
    output have element strides ``sa`` (a's rows, columns), ``sb``, ``so``: ROWS, DOTS, or 0 (a
    BLAS call, NumPy's matmul). Fixed by the shapes and strides alone, so every tier asks and
    gets the same answer. ROWS runs whole 16-column vectors only (n a multiple of 16)."""
    if so[1] != 1 or min(m, n, k) == 0 or m * n * k > MAX_WORK:
        return 0
    if sb[1] == 1 and n % 16 == 0:
        return ROWS
    if sb[0] == 1 and sa[1] == 1 and k >= LANES:
        return DOTS
    return 0


def _element_strides(rows: int, cols: int, s: tuple) -> tuple:
    """Element strides of a float32 matrix with byte strides ``s`` (an axis of length 1 has no
    stride that matters: NumPy gives it any value)."""
    return (s[0] // 4 if rows > 1 else 0, s[1] // 4 if cols > 1 else 1)


def own_kind_of(m: int, k: int, n: int, sa: tuple, sb: tuple, so: tuple) -> int:
    """:func:`own_kind` of (m x k) @ (k x n) float32 views with byte strides ``sa``, ``sb``, ``so``."""
    if any(s % 4 for s in sa + sb + so):
        return 0
    return own_kind(m, n, k, _element_strides(m, k, sa), _element_strides(k, n, sb), _element_strides(m, n, so))


def own_header(kind: int, m: int, k: int, n: int, sa: tuple, sb: tuple, so: tuple) -> tuple:
    """The integers ops/gemm.product takes after its arrays for such a product (byte strides):
    (kind, m, n, k, a's two strides, b's stride along k (ROWS) or n (DOTS), out's row stride),
    in elements."""
    ea, eb, eo = _element_strides(m, k, sa), _element_strides(k, n, sb), _element_strides(m, n, so)
    return (kind, m, n, k, ea[0], ea[1], eb[0] if kind == ROWS else eb[1], eo[0])


@functools.cache
def gemm_source_hash() -> str:
    """SHA-1 (16 hex digits) of ops/gemm.py's source: part of the identity of compiled code that
    inlines its kernels (native segments' files, and the cache entries of lowering/cpu/team.py's
    and recurrent_kernels.py's loops: lowering/kernel_files.stamp_with). Numba's disk cache keys
    a function by its own file's time stamp alone, so a loop compiled before gemm.py changed kept
    the old kernels: a stale entry ran a 16-column product 10x slower than the new code."""
    return hashlib.sha1((Path(__file__).parent / "gemm.py").read_bytes()).hexdigest()[:16]
