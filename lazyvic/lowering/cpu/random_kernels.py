"""``rand`` on the CPU: a plan's uniform draws, four words per generator block (a library step).

Element ``k`` of ``rand``'s output is word ``offset + k`` of the Philox4x32-10 stream keyed by
``seed`` (``lazyvic/ops/source.py``), turned into [0, 1). One block of the generator, ten
rounds on a 64-bit counter, gives four consecutive words. Fused into a kernel, each element
computed its block for its own word and dropped the other three. Here every block is computed
once and its four words stored, in a loop over blocks that LLVM vectorizes. The kernel that
reads the draws (dropout's mask) reads them from this buffer.

Same bits: the same words (``kernel_lib.philox_block``) and the same exact conversions
(``kernel_lib.uniform_f32`` / ``uniform_f64``) as the NumPy reference (``ops/source._uniform``);
which thread fills which blocks does not change a word.

Measured (2 cores, float32, (64, 9216), the MNIST CNN's first dropout): the draws alone, 2,185
us in a loop of per-element draws on two threads, 101 us here (203 on one thread). In the MNIST
step's plan that dropout's kernel took 2,280 us; now its draws take 138 and its mask's kernel
148. The README's TinyGPT step (dropout 0.1) spent 4.7 ms of 25 in its seven dropout kernels;
its draws now take about 0.4 ms.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from lazyvic.lowering.kernel_files import inlined_sources_hash, stamp_with
from lazyvic.lowering.kernel_lib import philox_block, uniform_f32, uniform_f64

_U64 = np.uint64


@njit(inline="always")
def _edge(out, seed, offset, b, wide):
    """Block ``b``, partly outside ``out``: the words of its elements inside (element k: word
    ``offset + k``)."""
    n = out.size
    w = philox_block(seed, _U64(b))
    for j in range(4):
        k = 4 * b - offset + j
        if 0 <= k < n:
            out[k] = uniform_f64(w[j]) if wide else uniform_f32(w[j])


@njit(inline="always")
def _whole_blocks(whole, seed, first, count, uniform):
    """Blocks ``first`` .. ``first + count - 1`` into ``whole`` from its element 0 (its indices
    counted from 0, so that LLVM vectorizes the loop: a store at an index that could be negative
    keeps Numba's wraparound branch, which did not, 5x slower); ``uniform`` turns a word into
    the output's dtype."""
    for j in range(count):
        w0, w1, w2, w3 = philox_block(seed, _U64(first + j))
        whole[4 * j] = uniform(w0)
        whole[4 * j + 1] = uniform(w1)
        whole[4 * j + 2] = uniform(w2)
        whole[4 * j + 3] = uniform(w3)


@njit(inline="always")
def _fill_blocks(out, seed, offset, lo, hi, wide):
    """Blocks ``lo`` .. ``hi - 1`` (absolute counters) of the stream into the elements of the
    flat ``out`` they hold: the whole blocks in a view from the first of them, the partial ones
    apart."""
    n = out.size
    first = max(lo, -(-offset // 4))  # the first block whose four words are all inside
    last = max(first, min(hi, (offset + n) // 4))  # past the last such block
    for b in range(lo, min(first, hi)):
        _edge(out, seed, offset, b, wide)
    whole = out[4 * first - offset :] if last > first else out[:0]
    if wide:
        _whole_blocks(whole, seed, first, last - first, uniform_f64)
    else:
        _whole_blocks(whole, seed, first, last - first, uniform_f32)
    for b in range(max(last, lo), hi):
        _edge(out, seed, offset, b, wide)


@njit(cache=True, nogil=True, boundscheck=False)
def blocks(n, offset):
    """(first block, last block + 1) of the words ``offset`` .. ``offset + n - 1``."""
    if n == 0:
        return 0, 0
    return offset >> 2, ((offset + n - 1) >> 2) + 1


@njit(cache=True, nogil=True, boundscheck=False)
def fill(out, seed, offset):
    """``out`` (flat float32 or float64) = ``rand``'s draws for ``seed`` and ``offset``, on the
    calling thread."""
    lo, hi = blocks(out.size, offset)
    _fill_blocks(out, seed, offset, lo, hi, out.itemsize == 8)


@njit(cache=True, nogil=True, boundscheck=False, parallel=True)
def fill_parallel(out, seed, offset, threads):
    """:func:`fill`, the blocks in ``threads`` ranges run on Numba's threads."""
    lo, hi = blocks(out.size, offset)
    per = -(-(hi - lo) // threads)
    wide = out.itemsize == 8
    for t in prange(threads):
        start = lo + t * per
        _fill_blocks(out, seed, offset, start, min(hi, start + per), wide)


# The fills inline kernel_lib's Philox and uniform conversions: their cache entries follow it.
stamp_with(inlined_sources_hash(), blocks, fill, fill_parallel)
