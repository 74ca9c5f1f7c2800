"""Device functions that generated CUDA kernels call: the kernel language of
``lowering/kernel_lib.py`` on the GPU.

Kernels from ``lowering/cuda/codegen.py`` use the same scalar expressions as the
CPU kernels (the op table's ``expr``), so this module defines the same names:

- casts ``b1, f32, f64, i32, i64`` (NumPy scalar types, as on the CPU);
- ``exp_f32, log_f32, tanh_f32, sigmoid_f32, sigmoid_f64, erf_f32``: CUDA's
  libdevice functions (``expf`` ... through ``math.*``), not the CPU's polynomial
  approximations: on a GPU they are fast already. Results differ from the CPU's in
  the last bits (both are within a few ulp of the exact value);
- ``fmax, fmin``: NaN-propagating maximum and minimum (``torch.maximum``);
- ``philox_block``, ``uniform_f32``, ``uniform_f64``: ``kernel_lib``'s own Python bodies compiled
  for the device (``philox_word`` picks one word of a block: the rand and randn kernels draw a
  word per thread), so the CPU and the GPU draw bit-identical numbers from one implementation.

It also holds the fixed kernels of the CUDA plans: ``gather_copy`` (an operand read
through movement ops, or im2col, made contiguous through an index map),
``matmul_kernel`` (a tiled product, used when CuPy is absent), the range check of
indices (``index_check``: into the plan's error buffer, read once after the plan's last
step), ``gather_dim`` (a gather at an index computed in the trace),
scatter_add in a fixed order without atomics (``scatter_keys``, ``scatter_add_sorted``),
a cat's pieces placed in the output (``place_copy``),
the average pools and their transposes (``avg_pool2d_kernel``, ``avg_pool2d_backward_kernel``),
``rand_kernel_f32``, ``rand_kernel_f64`` and ``randn_kernel``.

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

__all__ = [
    "b1",
    "f32",
    "f64",
    "i32",
    "i64",
    "exp_f32",
    "log_f32",
    "tanh_f32",
    "sigmoid_f32",
    "sigmoid_f64",
    "erf_f32",
    "fmod_c",
    "remainder_c",
    "fmax",
    "fmin",
    "acc_add",
    "acc_max",
    "acc_min",
    "philox_block",
    "philox_word",
    "uniform_f32",
    "uniform_f64",
    "max_pool2d_kernel",
]

_EXP_HI = f32(88.72283905206835)
_EXP_LO = f32(-103.97208)  # below: the float32 result underflows to zero
_ZERO = f32(0.0)
_ONE = f32(1.0)
_INF = f32(np.inf)
_NAN = f32(np.nan)
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
def fmod_c(a, b):
    # C's fmod (exact). Its NaN cases first: the simulator runs this as Python, whose math.fmod
    # raises on them; (a - a) / (a - a) is a NaN of a's type.
    if b == 0 or b != b or not (abs(a) < math.inf):
        return (a - a) / (a - a)
    return math.fmod(a, b)


@cuda.jit(device=True)
def remainder_c(a, b):
    r = fmod_c(a, b)
    if r != 0 and (b < 0) != (r < 0):
        return r + b
    return r


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
def max_pool2d_kernel(out, x, h, w, oh, ow, kh, kw, sh, sw, ph, pw, index):
    """One output per thread (grid-stride), NCHW flat arrays. Each window is scanned in row-major
    order keeping the first of equal maxima and the last NaN (PyTorch's rule), as
    ``ops/pool.py``'s reference;
    padding is skipped (implicit -inf). ``index`` nonzero: out (int64) gets the maximum's
    position y*W + x in its plane (max_pool2d_indices) instead of its value."""
    i = cuda.grid(1)
    while i < out.size:
        ox = i % ow
        t = i // ow
        oy = t % oh
        base = (t // oh) * h * w
        best = x[base]  # replaced by the first element inside the window
        found = False
        at = 0
        for dy in range(kh):
            y = oy * sh - ph + dy
            if y < 0 or y >= h:
                continue
            for dx in range(kw):
                xx = ox * sw - pw + dx
                if xx < 0 or xx >= w:
                    continue
                v = x[base + y * w + xx]
                if not found or v > best or v != v:
                    best = v
                    at = y * w + xx
                    found = True
        if index:
            out[i] = at
        else:
            out[i] = best
        i += cuda.gridsize(1)


@cuda.jit(cache=True)
def avg_pool2d_kernel(out, x, h, w, oh, ow, r0, r1, c0, c1, divisor, zero):
    """One output per thread (grid-stride), NCHW flat arrays: the sum of window (p, q), rows
    r0[p] .. r1[p]-1 and columns c0[q] .. c1[q]-1 of its plane of x, from ``zero`` in row-major
    order, divided by divisor[p*oW + q] (of x's dtype): ``ops/avg_pool.py``'s windows and order,
    as the CPU kernel (lowering/cpu/pool_kernels.avg_pool2d)."""
    i = cuda.grid(1)
    while i < out.size:
        q = i % ow
        t = i // ow
        p = t % oh
        base = (t // oh) * h * w
        acc = zero
        for y in range(r0[p], r1[p]):
            row = base + y * w
            for xx in range(c0[q], c1[q]):
                acc += x[row + xx]
        out[i] = acc / divisor[p * ow + q]
        i += cuda.gridsize(1)


@cuda.jit(cache=True)
def avg_pool2d_backward_kernel(out, g, h, w, oh, ow, p0, p1, q0, q1, divisor, zero):
    """One input position per thread (grid-stride), NCHW flat arrays: g / divisor of the windows
    covering position (y, x), rows p0[y] .. p1[y]-1 and columns q0[x] .. q1[x]-1 of its plane of
    g, added from ``zero`` in row-major window order (the transposes of ``ops/avg_pool.py``; a
    gather, so no two threads write one element)."""
    i = cuda.grid(1)
    while i < out.size:
        xx = i % w
        t = i // w
        y = t % h
        base = (t // h) * oh * ow
        acc = zero
        for p in range(p0[y], p1[y]):
            for q in range(q0[xx], q1[xx]):
                acc += g[base + p * ow + q] / divisor[p * ow + q]
        out[i] = acc
        i += cuda.gridsize(1)


@cuda.jit(device=True)
def acc_add(a, b):
    return a + b


acc_max, acc_min = fmax, fmin  # the CPU's reassociable accumulation steps; the tree fixes the order here

philox_block = cuda.jit(device=True)(kernel_lib.philox_block.py_func)
uniform_f32 = cuda.jit(device=True)(kernel_lib.uniform_f32.py_func)
uniform_f64 = cuda.jit(device=True)(kernel_lib.uniform_f64.py_func)


@cuda.jit(device=True)
def philox_word(seed, index):
    """Word ``index`` of the Philox stream keyed by ``seed`` (both int64), as uint64: lane
    ``index % 4`` of block ``index // 4``."""
    c0, c1, c2, c3 = philox_block(seed, np.uint64(index) >> np.uint64(2))
    lane = index & 3
    return c0 if lane == 0 else c1 if lane == 1 else c2 if lane == 2 else c3


# -- library kernels ------------------------------------------------------------------


@cuda.jit(cache=True)
def gather_copy(out, src, index, zero):
    """``out[n] = src[index[n]]`` (``zero`` where the index is -1): a movement-op chain
    (permute, slice, expand, pad, reshape) made contiguous for a library call."""
    for n in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        j = index[n]
        out[n] = src[j] if j >= 0 else zero


# -- indices, scatter_add, randn ------------------------------------------------------
# An index (or scatter source) read through movement ops is described by a *view*: its shape,
# the strides of each axis in a reduced map (0 on the axes that a broadcast makes constant)
# and that map (flat positions in the base buffer, -1 for a pad's zero; empty when the
# reduced positions are the base buffer's own). An embedding's (N,) ids expanded to (N, D)
# is thus read through N map entries, not N * D.


@cuda.jit(device=True)
def view_value(index, rmap, q):
    """Element ``q`` of a reduced view (``rmap`` empty: the buffer's own element ``q``)."""
    if rmap.size == 0:
        return index[q]
    j = rmap[q]
    if j < 0:
        return 0  # a pad's zero
    return index[j]


@cuda.jit(cache=True)
def copy_view(out, src, src_map, zero):
    """``out[n] = src[src_map[n]]`` (``zero`` where the map is -1; ``src[n]`` when the map is
    empty): an operand through movement ops, or a plain copy, into contiguous ``out``."""
    for n in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        if src_map.size == 0:
            out[n] = src[n]
        else:
            j = src_map[n]
            out[n] = src[j] if j >= 0 else zero


@cuda.jit(cache=True)
def fill(out, value):
    for n in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[n] = value


@cuda.jit(device=True)
def clamp_index(v, size):
    """``v`` clamped into ``[0, size)``: kernels read indices before the plan has seen their range
    check (the CUDA plan raises after its last step), so a bad one must still read in bounds."""
    return min(max(v, 0), size - 1)


@cuda.jit(cache=True)
def index_check(errors, at, index, rmap, n, size):
    """``errors[at] = min(errors[at], q)`` for each reduced position ``q < n`` whose index is
    outside ``[0, size)``: the first bad index in C order (an integer minimum: the same whatever
    order the threads run in). ``errors[at]`` is ``n`` before (see index_check_value)."""
    for q in range(cuda.grid(1), n, cuda.gridsize(1)):
        v = view_value(index, rmap, q)
        if v < 0 or v >= size:
            cuda.atomic.min(errors, at, q)


@cuda.jit(cache=True)
def index_check_value(errors, at, index, rmap, n):
    """One thread, after index_check, while the index is still there: ``errors[at + 2]`` = the
    position ``errors[at]`` it found (``n``: none) and ``errors[at + 1]`` the index there;
    ``errors[at]`` is set back to ``n`` for the next run."""
    if cuda.grid(1) == 0:
        q = errors[at]
        errors[at + 2] = q
        if q < n:
            errors[at + 1] = view_value(index, rmap, q)
        errors[at] = n


@cuda.jit(cache=True)
def gather_dim(out, x, x_map, index, rmap, shape, rstrides, xstrides, dim, size, zero):
    """gather along ``dim`` (ops/index.py): ``out[p] = x[p with its coordinate at dim replaced by
    index[p]]``; ``out`` has the index view's ``shape``, ``x`` (through ``x_map`` when not empty)
    the C strides ``xstrides`` and ``size > 0`` elements along ``dim``. Indices are checked by
    index_check, and clamped here (clamp_index)."""
    for p in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        q = 0
        xo = 0
        r = p
        for d in range(shape.size - 1, -1, -1):
            c = r % shape[d]
            r //= shape[d]
            q += c * rstrides[d]
            if d != dim:
                xo += c * xstrides[d]
        xo += clamp_index(view_value(index, rmap, q), size) * xstrides[dim]
        if x_map.size:
            xo = x_map[xo]
        out[p] = x[xo] if xo >= 0 else zero


@cuda.jit(cache=True)
def scatter_keys(keys, index, rmap, shape, rstrides, ostrides, dim, size):
    """``keys[p]``: the flat output position that position ``p`` of scatter_add's index view adds
    to (its coordinate at ``dim`` replaced by the index, clamped into the output's ``size > 0``
    elements along ``dim``: see clamp_index), with the output's C strides."""
    for p in range(cuda.grid(1), keys.size, cuda.gridsize(1)):
        q = 0
        o = 0
        r = p
        for d in range(shape.size - 1, -1, -1):
            c = r % shape[d]
            r //= shape[d]
            q += c * rstrides[d]
            if d != dim:
                o += c * ostrides[d]
        keys[p] = o + clamp_index(view_value(index, rmap, q), size) * ostrides[dim]


@cuda.jit(cache=True)
def scatter_add_sorted(out, src, src_map, order, skeys, col_out, col_src, row_stride, zero):
    """scatter_add's additions, deterministic and without atomics.

    ``order`` lists rows (index positions, or index rows along ``dim`` shared by every
    column) stably sorted by their key ``skeys`` (output position, or its row's offset), so
    the rows adding to one output are one run, in their original order. One thread per
    (run, column) adds the run's sources to the output in that order: the order and the
    roundings of the CPU's serial kernel (kernel_lib.scatter_add_into). Threads of the
    same run are neighbours (column-major inside a run): coalesced loads of a row's source.
    """
    ncol = col_out.size
    for t in range(cuda.grid(1), order.size * ncol, cuda.gridsize(1)):
        k = t // ncol
        if k > 0 and skeys[k] == skeys[k - 1]:
            continue
        c = t - k * ncol
        o = skeys[k] + col_out[c]
        acc = out[o]
        e = k
        while e < order.size and skeys[e] == skeys[k]:
            s = order[e] * row_stride + col_src[c]
            if src_map.size:
                s = src_map[s]
            acc = acc + (src[s] if s >= 0 else zero)
            e += 1
        out[o] = acc


@cuda.jit(cache=True)
def im2col_kernel(cols, x, x_map, dims, zero):
    """conv2d's columns ``(G, Cg*kH*kW, N*oH*oW)`` of NCHW ``x`` (through ``x_map`` when not
    empty; ``zero`` where a tap reads padding), each element's source computed from its
    indices: no index map of the columns' size. ``dims``: (N, C, H, W, Cg, kH, kW, oH, oW,
    sH, sW, pad top, pad left, dH, dW)."""
    n, c, h, w, cg, kh, kw, oh, ow = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8]
    sh, sw, pt, pl, dh, dw = dims[9], dims[10], dims[11], dims[12], dims[13], dims[14]
    for p in range(cuda.grid(1), cols.size, cuda.gridsize(1)):
        t = p
        owi = t % ow
        t //= ow
        ohi = t % oh
        t //= oh
        ni = t % n
        t //= n
        kwi = t % kw
        t //= kw
        khi = t % kh
        t //= kh
        ci = t % cg
        gi = t // cg
        ih = ohi * sh - pt + khi * dh
        iw = owi * sw - pl + kwi * dw
        if ih < 0 or ih >= h or iw < 0 or iw >= w:
            cols[p] = zero
            continue
        j = ((ni * c + gi * cg + ci) * h + ih) * w + iw
        if x_map.size:
            j = x_map[j]
        cols[p] = x[j] if j >= 0 else zero


@cuda.jit(cache=True)
def conv_output_kernel(out, product, n, hw):
    """conv2d's output ``(N, O, oH, oW)`` from the grouped product ``(G, O/G, N, oH*oW)``."""
    o = out.size // (n * hw)
    for p in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        s = p % hw
        oc = (p // hw) % o
        ni = p // (hw * o)
        out[p] = product[(oc * n + ni) * hw + s]


@cuda.jit(cache=True)
def channels_first_kernel(out, x, x_map, n, c, hw, zero):
    """conv_transpose2d's product operand: x (N, C, H*W) (through ``x_map`` when not empty)
    as the matrix (C, N*H*W)."""
    for p in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        s = p % hw
        ni = (p // hw) % n
        ci = p // (hw * n)
        j = (ni * c + ci) * hw + s
        if x_map.size:
            j = x_map[j]
        out[p] = x[j] if j >= 0 else zero


@cuda.jit(cache=True)
def transpose_groups_kernel(out, w, k, m):
    """``out (G, m, k)``: each group's ``(k, m)`` block of ``w`` transposed."""
    for p in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        kk = p % k
        mm = (p // k) % m
        g = p // (k * m)
        out[p] = w[(g * k + kk) * m + mm]


@cuda.jit(cache=True)
def col2im_kernel(out, cols, dims, zero):
    """conv_transpose2d's output ``(N, C_out, oH, oW)`` from the columns ``(C_out*kH*kW,
    N*H*W)``: each element sums the taps that reach it in row-major order, as the host's col2im
    adds them (lowering/cpu/im2col.col2im). ``dims``: (N, C_in, H, W, C_out, kH, kW, oH, oW, sH,
    sW, top, left, dH, dW)."""
    n, h, w, cout, kh, kw, oh, ow = dims[0], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8]
    sh, sw, pt, pl, dh, dw = dims[9], dims[10], dims[11], dims[12], dims[13], dims[14]
    for p in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        xo = p % ow
        yo = (p // ow) % oh
        o = (p // (ow * oh)) % cout
        ni = p // (ow * oh * cout)
        acc = zero
        for i in range(kh):
            a = yo + pt - i * dh
            if a < 0 or a % sh != 0 or a // sh >= h:
                continue
            for j in range(kw):
                b = xo + pl - j * dw
                if b < 0 or b % sw != 0 or b // sw >= w:
                    continue
                acc += cols[((o * kh + i) * kw + j) * (n * h * w) + (ni * h + a // sh) * w + b // sw]
        out[p] = acc


_TWO_PI = f64(2.0 * np.pi)
_INV_2P32_P1 = f64(1.0 / 4294967297.0)


@cuda.jit(cache=True)
def rand_kernel_f32(out, seed, offset):
    """rand (ops/source.py) into float32 ``out``: element k is word ``offset + k`` of the Philox
    stream of ``seed`` in [0, 1), one thread per element: the CPU's bits."""
    for k in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[k] = uniform_f32(philox_word(seed, offset + k))


@cuda.jit(cache=True)
def rand_kernel_f64(out, seed, offset):
    """:func:`rand_kernel_f32` into float64 ``out``."""
    for k in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[k] = uniform_f64(philox_word(seed, offset + k))


@cuda.jit(cache=True)
def randn_kernel(out, seed, offset):
    """randn (ops/source.py): Box-Muller on words ``offset + 2m`` and ``offset + 2m + 1`` of the
    Philox stream of ``seed``, in float64 as the reference, rounded to ``out``'s dtype: one
    thread per pair. libdevice's float64 log/cos/sin may differ from the host's libm in the
    last bit of the float64 value; the float32 results are the reference's."""
    n = out.size
    for m in range(cuda.grid(1), (n + 1) // 2, cuda.gridsize(1)):
        u1 = (f64(philox_word(seed, offset + 2 * m)) + 1.0) * _INV_2P32_P1
        u2 = f64(philox_word(seed, offset + 2 * m + 1)) * _TWO_M32
        r = math.sqrt(-2.0 * math.log(u1))
        out[2 * m] = r * math.cos(_TWO_PI * u2)
        if 2 * m + 1 < n:
            out[2 * m + 1] = r * math.sin(_TWO_PI * u2)


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


def matmul_rows_kernel(dtype):
    """The batched product of :func:`matmul_kernel` with one thread per output element and no
    shared memory (a grid-stride loop over the ``total`` = B * M * N outputs), for the CUDA
    simulator: it runs every thread as a Python thread and every ``syncthreads`` as a wait of
    all of a block's threads (the tiled kernel took 13.4 of the 28.3 s of the ResNet-18
    parity group's kernels, this one 2.9). Each output adds its K products in order, as the
    tiled kernel does: the same bits (tests/cuda/test_codegen_cuda.py runs both).
    """
    key = ("rows", np.dtype(dtype).name)
    kernel = _matmul_kernels.get(key)
    if kernel is not None:
        return kernel
    zero = np.dtype(dtype).type(0)

    def matmul_rows(c, a, b, m, k, n, total):
        for e in range(cuda.grid(1), total, cuda.gridsize(1)):
            z = e // (m * n)
            row = (e // n) % m
            col = e % n
            a0 = z * m * k + row * k
            b0 = z * k * n + col
            acc = zero
            for j in range(k):
                acc = acc + a[a0 + j] * b[b0 + j * n]
            c[e] = acc

    kernel = _matmul_kernels[key] = cuda.jit(matmul_rows)
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
def _round_signed(x, inf_from, emin, mbits):
    """Float64 ``x`` (not NaN) rounded as :func:`_round_magnitude`, infinite from ``inf_from``
    on, with its sign."""
    a = abs(x)
    y = math.inf if a >= inf_from else _round_magnitude(a, emin, mbits)
    return math.copysign(y, x)


@cuda.jit(device=True)
def round_f16_f64(x):
    if x != x:
        return x
    return _round_signed(x, _F16_INF_FROM, -14, 10)


@cuda.jit(device=True)
def round_f16_f32(x):
    if x != x:
        return x
    return f32(_round_signed(f64(x), _F16_INF_FROM, -14, 10))


@cuda.jit(device=True)
def round_bf16_f32(x):
    if x != x:
        return x
    return f32(_round_signed(f64(x), _BF16_INF_FROM, -126, 7))


@cuda.jit(device=True)
def round_bf16_f64(x):
    if x != x:
        return x
    if abs(x) >= _BF16_INF_FROM:
        # Before the float32 cast, which would overflow: under the simulator that warns, and a
        # warning adds __warningregistry__ to this module while other threads read its globals.
        return math.copysign(math.inf, x)
    return f64(round_bf16_f32(f32(x)))


@cuda.jit(cache=True)
def place_copy(out, src, index, mapped, zero, count, width, out_width, offset):
    """One piece of a cat placed in its range of the output: the piece's element n (``src[n]``,
    or ``src[index[n]]`` when ``mapped``, ``zero`` where that index is -1) goes to row
    n // width, column offset + n % width of the output seen as rows of ``out_width``."""
    for n in range(cuda.grid(1), count, cuda.gridsize(1)):
        j = index[n] if mapped else n
        out[(n // width) * out_width + offset + n % width] = src[j] if j >= 0 else zero
