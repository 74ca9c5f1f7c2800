"""Device functions that generated CUDA kernels call: the kernel language of
``lowering/kernel_lib.py`` on the GPU.

Kernels from ``lowering/codegen_cuda.py`` use the same scalar expressions as the
CPU kernels (the op table's ``expr``), so this module defines the same names:

- casts ``b1, f32, f64, i32, i64`` (NumPy scalar types, as on the CPU);
- ``exp_f32, log_f32, tanh_f32, sigmoid_f32, sigmoid_f64, erf_f32``: CUDA's
  libdevice functions (``expf`` ... through ``math.*``), not the CPU's polynomial
  approximations: on a GPU they are fast already. Results differ from the CPU's in
  the last bits (both are within a few ulp of the exact value);
- ``fmax, fmin``: NaN-propagating maximum and minimum (``torch.maximum``);
- ``rand_f32, rand_f64``: word ``offset + k`` of the Philox4x32-10 stream of
  ``seed``, turned into [0, 1) as ``lazyvic.ops.source`` does. ``philox_word`` is
  ``kernel_lib.philox_word``'s own Python body compiled for the device, so the CPU
  and the GPU draw bit-identical numbers from one implementation.

It also holds the fixed kernels of the CUDA plans: ``gather_copy`` (an operand read
through movement ops, or im2col, made contiguous through an index map) and
``matmul_kernel`` (a tiled product, used when CuPy is absent).

The guards on out-of-range arguments (``exp`` of a large value, ``log`` of zero or a
negative number) give the IEEE results where Python's ``math`` would raise: Numba's
CUDA simulator runs kernels as Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from lazyvic.lowering import kernel_lib
from lazyvic.lowering.kernel_lib import b1, f32, f64, i32, i64

__all__ = ["b1", "f32", "f64", "i32", "i64", "exp_f32", "log_f32", "tanh_f32", "sigmoid_f32", "sigmoid_f64",
           "erf_f32", "fmax", "fmin", "acc_add", "acc_max", "acc_min", "philox_word", "rand_f32", "rand_f64",
           "max_pool2d_kernel"]

_EXP_HI = f32(88.72283905206835)
_EXP_LO = f32(-103.97208)  # below: the float32 result underflows to zero
_ZERO = f32(0.0)
_ONE = f32(1.0)
_INF = f32(np.inf)
_NAN = f32(np.nan)
_SH8 = np.uint64(8)
_TWO_M24 = f32(1.0 / 16777216.0)
_TWO_M32 = f64(1.0 / 4294967296.0)


@cuda.jit(device=True)
def exp_f32(x):
    if x > _EXP_HI:
        return _INF
    if x < _EXP_LO:
        return _ZERO
    return f32(math.exp(x))


@cuda.jit(device=True)
def log_f32(x):
    if x != x or x < _ZERO:
        return _NAN
    if x == _ZERO:
        return -_INF
    if x == _INF:
        return _INF
    return f32(math.log(x))


@cuda.jit(device=True)
def tanh_f32(x):
    return f32(math.tanh(x))


@cuda.jit(device=True)
def sigmoid_f32(x):
    return _ONE / (_ONE + exp_f32(-x))


@cuda.jit(device=True)
def sigmoid_f64(x):
    if x < -700.0:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


@cuda.jit(device=True)
def erf_f32(x):
    return f32(math.erf(x))


@cuda.jit(device=True)
def fmax(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


@cuda.jit(device=True)
def fmin(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a <= b else b


@cuda.jit
def max_pool2d_kernel(out, x, h, w, oh, ow, kh, kw, sh, sw, ph, pw):
    """One output per thread (grid-stride), NCHW flat arrays. Each window is scanned in row-major
    order keeping the first of equal maxima and the first NaN, as ``ops/pool.py``'s reference;
    padding is skipped (implicit -inf)."""
    i = cuda.grid(1)
    while i < out.size:
        ox = i % ow
        t = i // ow
        oy = t % oh
        base = (t // oh) * h * w
        best = x[base]  # replaced by the first element inside the window
        found = False
        for dy in range(kh):
            y = oy * sh - ph + dy
            if y < 0 or y >= h or (found and best != best):
                continue
            for dx in range(kw):
                xx = ox * sw - pw + dx
                if xx < 0 or xx >= w:
                    continue
                v = x[base + y * w + xx]
                if not found or v > best or (v != v and best == best):
                    best = v
                    found = True
                if best != best:
                    break
        out[i] = best
        i += cuda.gridsize(1)


@cuda.jit(device=True)
def acc_add(a, b):
    return a + b


acc_max, acc_min = fmax, fmin  # the CPU's reassociable accumulation steps; the tree fixes the order here

philox_word = cuda.jit(device=True)(kernel_lib.philox_word.py_func)


@cuda.jit(device=True)
def rand_f32(seed, offset, k):
    return f32(philox_word(seed, offset + k) >> _SH8) * _TWO_M24


@cuda.jit(device=True)
def rand_f64(seed, offset, k):
    return f64(philox_word(seed, offset + k)) * _TWO_M32


# -- library kernels ------------------------------------------------------------------


@cuda.jit(cache=True)
def gather_copy(out, src, index, zero):
    """``out[n] = src[index[n]]`` (``zero`` where the index is -1): a movement-op chain
    (permute, slice, expand, pad, reshape) made contiguous for a library call."""
    for n in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        j = index[n]
        out[n] = src[j] if j >= 0 else zero


_matmul_kernels: dict = {}


def matmul_kernel(tile: int, dtype):
    """A tiled batched product ``c[b] = a[b] @ b[b]`` of flat C-contiguous (B, M, K) and
    (B, K, N) operands, for blocks of ``(tile, tile)`` threads on a ``(ceil(N / tile),
    ceil(M / tile), B)`` grid: the fallback when CuPy (cuBLAS) is absent.

    Each output element adds its K products in order, one tile of K at a time: the same
    order for every tile size and launch.
    """
    key = (tile, np.dtype(dtype).name)
    kernel = _matmul_kernels.get(key)
    if kernel is not None:
        return kernel
    zero = np.dtype(dtype).type(0)

    def matmul_tiled(c, a, b, m, k, n):
        sa = cuda.shared.array((tile, tile), dtype)
        sb = cuda.shared.array((tile, tile), dtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * tile + ty
        col = cuda.blockIdx.x * tile + tx
        a0 = cuda.blockIdx.z * m * k
        b0 = cuda.blockIdx.z * k * n
        acc = zero
        for t in range((k + tile - 1) // tile):
            ka = t * tile + tx
            sa[ty, tx] = a[a0 + row * k + ka] if row < m and ka < k else zero
            kb = t * tile + ty
            sb[ty, tx] = b[b0 + kb * n + col] if kb < k and col < n else zero
            cuda.syncthreads()
            for j in range(min(tile, k - t * tile)):
                acc = acc + sa[ty, j] * sb[j, tx]
            cuda.syncthreads()
        if row < m and col < n:
            c[cuda.blockIdx.z * m * n + row * n + col] = acc

    kernel = _matmul_kernels[key] = cuda.jit(matmul_tiled)
    return kernel


# == autocast precisions (lazyvic/amp.py; issue 7 item 5) =================================
# ``round_f16_*`` / ``round_bf16_*``: the CPU's kernel_lib functions of the same names, for
# the device. Written with arithmetic and math.frexp/ldexp instead of bit casts (libdevice's
# bit casts do not run under the CUDA simulator): the magnitude, in float64 (where every
# float32 and its rounding constant are exact), gets added and removed a power of two whose
# ulp is the target format's spacing at that magnitude, so the FPU rounds to nearest even.
# Bit-identical with the CPU (tests/cuda/test_amp_cuda.py); NaN is returned unchanged.

_F16_INF_FROM = 65520.0  # ties to even above 65504 (odd mantissa) round to 2**16: infinity
_BF16_INF_FROM = (2.0 - 2.0**-8) * 2.0**127  # likewise above the largest bfloat16


@cuda.jit(device=True)
def _round_magnitude(a, emin, mbits):
    """Finite float64 ``a >= 0`` rounded (ties to even) to a binary format with ``mbits``
    stored mantissa bits and smallest normal exponent ``emin`` (no overflow check)."""
    e = math.frexp(a)[1] - 1  # a in [2**e, 2**(e+1))
    big = math.ldexp(1.0, max(e, emin) - mbits + 52)
    return (a + big) - big


@cuda.jit(device=True)
def round_f16_f64(x):
    if x != x:
        return x
    a = abs(x)
    y = math.inf if a >= _F16_INF_FROM else _round_magnitude(a, -14, 10)
    return math.copysign(y, x)


@cuda.jit(device=True)
def round_f16_f32(x):
    if x != x:
        return x
    a = f64(abs(x))
    y = math.inf if a >= _F16_INF_FROM else _round_magnitude(a, -14, 10)
    return f32(math.copysign(y, f64(x)))


@cuda.jit(device=True)
def round_bf16_f32(x):
    if x != x:
        return x
    a = f64(abs(x))
    y = math.inf if a >= _BF16_INF_FROM else _round_magnitude(a, -126, 7)
    return f32(math.copysign(y, f64(x)))


@cuda.jit(device=True)
def round_bf16_f64(x):
    if x != x:
        return x
    if abs(x) >= _BF16_INF_FROM:
        # Before the float32 cast, which would overflow: under the simulator that warns, and a
        # warning adds __warningregistry__ to this module while other threads read its globals.
        return math.copysign(math.inf, x)
    return f64(round_bf16_f32(f32(x)))
