"""Source ops: leaves of a trace.

``buffer`` holds realized data (an input slot of the trace), ``scalar`` a Python
number passed at run time (a scalar input slot, so new values do not recompile),
and ``rand``/``randn`` draw from the counter-based Philox4x32-10 generator
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) keyed by
(seed, offset) scalar inputs: a seeded program gives the same bits on every run.
"""

from __future__ import annotations

import numpy as np

from lazyvic.ops.opdef import OpDef, register

_PHILOX_M0 = np.uint64(0xD2511F53)
_PHILOX_M1 = np.uint64(0xCD9E8D57)
_PHILOX_W0 = np.uint32(0x9E3779B9)
_PHILOX_W1 = np.uint32(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter_lo: np.ndarray, counter_hi: np.ndarray, seed: int) -> np.ndarray:
    """Philox4x32-10 on counters (lo, hi, 0, 0) with key from ``seed``; returns (n, 4) uint32."""
    c0 = counter_lo.astype(np.uint32)
    c1 = counter_hi.astype(np.uint32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    k0 = np.uint32(seed & 0xFFFFFFFF)
    k1 = np.uint32(seed >> 32)
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0 = c0.astype(np.uint64) * _PHILOX_M0
            p1 = c2.astype(np.uint64) * _PHILOX_M1
            hi0 = (p0 >> np.uint64(32)).astype(np.uint32)
            lo0 = (p0 & _MASK32).astype(np.uint32)
            hi1 = (p1 >> np.uint64(32)).astype(np.uint32)
            lo1 = (p1 & _MASK32).astype(np.uint32)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            k0 = np.uint32(k0 + _PHILOX_W0)
            k1 = np.uint32(k1 + _PHILOX_W1)
    return np.stack([c0, c1, c2, c3], axis=-1)


def uniform_bits(n: int, seed: int, offset: int) -> np.ndarray:
    """``n`` uint32 words: word ``offset + i`` of the stream for ``seed``."""
    first = int(offset) // 4
    last = (int(offset) + n + 3) // 4 + 1
    counters = np.arange(first, last, dtype=np.uint64)
    words = philox4x32(counters & _MASK32, counters >> np.uint64(32), seed).reshape(-1)
    start = int(offset) - first * 4
    return words[start : start + n]


def _uniform(n: int, seed: int, offset: int, dtype: np.dtype) -> np.ndarray:
    bits = uniform_bits(n, seed, offset)
    if np.dtype(dtype) == np.float64:
        # 53 random bits from two words would need twice the stream; 32 bits is
        # what PyTorch's CPU generator also uses for most float64 draws.
        return bits.astype(np.float64) * (1.0 / 4294967296.0)
    # 24 high bits -> exactly representable in float32, in [0, 1).
    return ((bits >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)).astype(dtype)


def _rand_ref(inputs, attrs):
    seed, offset = int(inputs[0]), int(inputs[1])
    shape, dtype = attrs["shape"], attrs["dtype"]
    n = int(np.prod(shape, dtype=np.int64))
    return _uniform(n, seed, offset, dtype.np).reshape(shape)


def _randn_ref(inputs, attrs):
    # Box-Muller on pairs of uniforms; computed in float64 so every backend
    # rounds the same float64 value to the output dtype.
    seed, offset = int(inputs[0]), int(inputs[1])
    shape, dtype = attrs["shape"], attrs["dtype"]
    n = int(np.prod(shape, dtype=np.int64))
    m = (n + 1) // 2
    bits = uniform_bits(2 * m, seed, offset).astype(np.float64)
    u1 = (bits[0::2] + 1.0) * (1.0 / 4294967297.0)  # (0, 1]: log is finite
    u2 = bits[1::2] * (1.0 / 4294967296.0)
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.empty(2 * m, dtype=np.float64)
    z[0::2] = r * np.cos(2.0 * np.pi * u2)
    z[1::2] = r * np.sin(2.0 * np.pi * u2)
    return z[:n].astype(dtype.np).reshape(shape)


def _random_infer(shapes, dtypes, attrs):
    return tuple(attrs["shape"]), attrs["dtype"]


def _no_infer(shapes, dtypes, attrs):
    raise AssertionError("source nodes are built directly, not through infer")


register(OpDef("buffer", "source", 0, _no_infer, lambda inputs, attrs: None, differentiable=False))
register(OpDef("scalar", "source", 0, _no_infer, lambda inputs, attrs: None, differentiable=False))


# Library ops: the CPU fills rand's output four words per generator block
# (lowering/cpu/random_kernels.py), CUDA one word per thread (lowering/cuda/kernel_lib.rand_kernel_f32).
register(OpDef("rand", "random", 2, _random_infer, _rand_ref, differentiable=False))
register(OpDef("randn", "random", 2, _random_infer, _randn_ref, differentiable=False))

# Words of the stream used per element, so the front end can advance the offset.
RANDOM_WORDS_PER_ELEMENT = {"rand": 1, "randn": 1}
