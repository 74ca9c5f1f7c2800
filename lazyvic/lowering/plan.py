"""Plan: what the runtime executes for one trace key.

A plan is a sequence of steps over an environment of arrays indexed by entry
position: :class:`KernelStep` calls a generated Numba kernel,
:class:`MatmulStep` calls BLAS through NumPy's matmul into a pooled buffer,
:class:`ConvStep` copies im2col columns and calls BLAS (a conv2d), :class:`PoolStep`
runs a max_pool2d kernel, and
:class:`ReferenceStep` runs an op's NumPy reference (ops with no kernel yet:
these are the plan's reported fallbacks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lazyvic.errors import IndexError as LIndexError

# Products below this many flops run on one BLAS thread in plans with parallel kernels
# (a TinyGPT step's largest, 1024x128 @ 128x512, is 1.3e8).
SINGLE_THREAD_BLAS_MAX_FLOPS = 1 << 28
# Plans with convolutions whose products are all below this many flops run BLAS on one
# thread even without parallel kernels: at ResNet-18 batch 1 (products of at most 1.2e6
# flops) two OpenBLAS threads gained nothing on a quiet machine and, with another process
# busy, made a forward pass 12 ms instead of 1.3 ms (a descheduled spinning worker).
SINGLE_THREAD_BLAS_CONV_MAX_FLOPS = 1 << 24


@dataclass
class KernelStep:
    name: str
    fn: object
    out: int
    buffers: tuple
    scalars: tuple  # (slot, NumPy scalar type) passed one by one
    packed: tuple = ()  # (NumPy dtype, slots): passed as one array each
    source: str = field(repr=False, default="")
    extra_outs: tuple = ()  # more outputs of the same loop
    parallel: bool = False  # runs on Numba's thread pool

    def reads(self):
        return self.buffers

    def writes(self):
        return (self.out,) + self.extra_outs

    def __call__(self, env, flat, scalars):
        self.fn(
            flat[self.out],
            *[flat[o] for o in self.extra_outs],
            *[flat[b] for b in self.buffers],
            *[t(scalars[s]) for s, t in self.scalars],
            *[np.array([scalars[s] for s in slots], dtype=d) for d, slots in self.packed],
        )


def _view(env, scalars, chain):
    """An operand: a buffer (or a scalar input) with its movement ops applied as NumPy views."""
    kind, base, ops, dtype = chain
    a = env[base] if kind == "buffer" else np.asarray(scalars[base], dtype=dtype)
    for ref, attrs in ops:
        a = ref([a], attrs)
    return a


@dataclass
class MatmulStep:
    name: str
    out: int
    a: tuple  # ("buffer" | "scalar", position | slot, [(reference, attrs) movement ops], dtype)
    b: tuple
    k: int = 0  # inner dimension (for the plan's BLAS policy)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in (self.a, self.b) if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        np.matmul(_view(env, scalars, self.a), _view(env, scalars, self.b), out=env[self.out])


@dataclass
class ConvStep:
    """conv2d (ops/conv.py): zero padding (split by column phase, so that every output row of a
    tap is one contiguous run) and im2col over the live kernel taps into scratch buffers (Numba
    kernels, lowering/im2col.py), then one BLAS product (``ops.conv.conv_gemm``, shared with the
    NumPy reference, in the same chunks of images, so both round alike).

    The scratch buffers (columns, product, padded input) belong to the step, made on its
    first run and kept with the plan: plans run one at a time. They are outside the memory
    plan's accounting (the columns are C*T times the output's spatial size per image)."""

    name: str
    out: int
    x: tuple  # operand chains, as MatmulStep's
    w: tuple
    attrs: dict
    im2col: object  # lowering.im2col.im2col
    pad_into: object  # lowering.im2col.pad_into
    gemm: object  # ops.conv.conv_gemm
    taps: object  # ops.conv.taps
    tap_weights: object  # ops.conv.tap_weights
    images_per_chunk: object  # ops.conv.images_per_chunk
    k: int = 0  # inner dimension of the product (for the plan's BLAS policy)
    scratch: list = field(default=None, repr=False)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in (self.x, self.w) if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        x = np.ascontiguousarray(_view(env, scalars, self.x))
        w = _view(env, scalars, self.w)
        out = env[self.out]
        n, o, oh, ow = out.shape
        at = self.attrs
        if self.scratch is None:
            self.scratch = self._scratch(x.shape, w.shape, out)
        cols_flat, prod_flat, padded, offsets, strides, tap_rows, tap_cols, step, r = self.scratch
        if padded is not None:
            self.pad_into(x, padded, at["padding"][0], at["padding"][2])  # the border stays zero
            x = padded
        src = x.reshape(-1)
        image_stride, row_stride, col_stride = strides
        w = self.tap_weights(w, tap_rows, tap_cols)
        for n0 in range(0, n, step):
            m = (min(n, n0 + step) - n0) * oh * ow
            cols = cols_flat[: r * m].reshape(r, m)
            self.im2col(src[n0 * image_stride :], cols, offsets, image_stride, row_stride, col_stride, oh, ow)
            prod = prod_flat[: o * m].reshape(o, m) if prod_flat is not None and m > oh * ow else None
            self.gemm(cols, w, at["groups"], out[n0 : n0 + step], prod)

    def _scratch(self, x_shape, w_shape, out) -> list:
        n, o, oh, ow = out.shape
        at = self.attrs
        (sh, sw), (pt, pb, pl, pr), (dh, dw) = at["stride"], at["padding"], at["dilation"]
        c, h, wd = x_shape[1:]
        rows, cols = self.taps(x_shape, w_shape, at, (oh, ow))
        # The live taps may read inside x only (1x1 inputs, stride-2 1x1 convolutions):
        # then im2col reads x itself, at offsets shifted by the padding.
        inside = (
            rows[0] * dh - pt >= 0
            and rows[-1] * dh + (oh - 1) * sh - pt < h
            and cols[0] * dw - pl >= 0
            and cols[-1] * dw + (ow - 1) * sw - pl < wd
        )
        if inside:
            padded = None
            offsets = [i * dh * wd + j * dw - pt * wd - pl for i in rows for j in cols]
            strides = (c * h * wd, sh * wd, sw)
        else:
            # Split by column phase (lowering/im2col.pad_into): each output row of a tap is
            # one contiguous run of the buffer, whatever the stride.
            hp, wq = h + pt + pb, -(-(wd + pl + pr) // sw)
            padded = np.zeros((n, c, hp, sw, wq), dtype=out.dtype)
            offsets = [(i * dh * sw + (j * dw) % sw) * wq + (j * dw) // sw for i in rows for j in cols]
            strides = (c * hp * sw * wq, sh * sw * wq, 1)
        offsets = np.array(offsets, dtype=np.int64)
        r, per_image = c * offsets.size, oh * ow
        step = self.images_per_chunk(n, r, per_image, out.dtype.itemsize)
        return [
            np.empty(r * step * per_image, dtype=out.dtype),
            np.empty(o * step * per_image, dtype=out.dtype) if step > 1 else None,
            padded,
            offsets,
            strides,
            rows,
            cols,
            step,
            r,
        ]


@dataclass
class PoolStep:
    """max_pool2d (ops/pool.py): one Numba kernel (lowering/pool_kernels.py) over the
    materialized input."""

    name: str
    out: int
    x: tuple  # operand chain, as MatmulStep's
    attrs: dict
    kernel: object

    def writes(self):
        return (self.out,)

    def reads(self):
        return (self.x[1],) if self.x[0] == "buffer" else ()

    def __call__(self, env, flat, scalars):
        (kh, kw), (sh, sw), (ph, pw) = self.attrs["kernel"], self.attrs["stride"], self.attrs["padding"]
        self.kernel(np.ascontiguousarray(_view(env, scalars, self.x)), env[self.out], kh, kw, sh, sw, ph, pw)


@dataclass
class ReferenceStep:
    name: str
    op: str
    out: int
    args: tuple  # operand chains, as MatmulStep's
    reference: object
    attrs: dict
    dtype: object

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in self.args if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        vals = [_view(env, scalars, c) for c in self.args]
        with np.errstate(all="ignore"):
            out = np.asarray(self.reference(vals, self.attrs), dtype=self.dtype.np)
        np.copyto(env[self.out], out)


@dataclass
class ScatterAddStep:
    """scatter_add through a compiled kernel (lowering/kernel_lib.scatter_add_into)."""

    name: str
    out: int
    args: tuple  # base, index, src operand chains, as MatmulStep's
    dim: int
    kernel: object

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c[1] for c in self.args if c[0] == "buffer")

    def __call__(self, env, flat, scalars):
        base, index, src = [_view(env, scalars, c) for c in self.args]
        out = env[self.out]
        np.copyto(out, base)
        bad = self.kernel(out, index, src, self.dim)
        if bad != -1:
            raise LIndexError(f"scatter_add: index {int(bad)} out of range for dimension of size {out.shape[self.dim]}")


@dataclass
class IndexCheckStep:
    """Range check of a gather index that a kernel reads without checking.

    The index was realized before the trace, but its data could have been changed
    through a shared ``.numpy()`` view since: check it on every run, before the kernel.
    """

    name: str
    index: tuple  # operand chain, as MatmulStep's
    size: int  # valid indices are 0 .. size - 1
    op: str
    out: object = None

    def writes(self):
        return ()

    def reads(self):
        return (self.index[1],)

    def __call__(self, env, flat, scalars):
        idx = _view(env, scalars, self.index)
        if idx.size and (idx.min() < 0 or idx.max() >= self.size):
            bad = idx[(idx < 0) | (idx >= self.size)].ravel()[0]
            raise LIndexError(f"{self.op}: index {int(bad)} out of range for dimension of size {self.size}")


@dataclass
class Plan:
    """A compiled plan: steps, their memory plan, and where inputs and outputs go."""

    name: str
    entries: list = field(repr=False)
    steps: list = field(repr=False)
    input_pos: list = field(repr=False)  # (entry position, input slot)
    outputs: list = field(repr=False)  # per trace output: ("buffer", pos) | ("scalar", slot)
    memory: object = None
    groups: list = field(default_factory=list, repr=False)
    fallbacks: tuple = ()
    stats: dict = field(default_factory=dict)
    # BLAS threads while the plan runs (None: leave BLAS alone); see single_thread_blas().
    blas_threads: int | None = None
    pool: list = field(default=None, repr=False)  # runtime state: set by the executor
    env_template: list = field(default=None, repr=False)
    flat_template: list = field(default=None, repr=False)

    def single_thread_blas(self) -> bool:
        """True when BLAS should run on one thread while this plan runs.

        Numba's OpenMP workers and OpenBLAS's threads both busy-wait after their work;
        on a 2-core machine a plan that alternates parallel kernels and BLAS calls had
        each pool waiting for the other's spinning threads (about 8 ms, a scheduler slice,
        per kernel: a TinyGPT step took 440 ms instead of 40). One pool at a time fixes it.
        Plans whose products are large keep multithreaded BLAS, where its speed-up is
        worth more than the contention costs.
        """
        flops = [
            2 * math.prod(self.entries[s.out][3]) * s.k for s in self.steps if isinstance(s, (MatmulStep, ConvStep))
        ]
        if (
            any(isinstance(s, ConvStep) for s in self.steps)
            and flops
            and max(flops) < SINGLE_THREAD_BLAS_CONV_MAX_FLOPS
        ):
            return True
        if not any(isinstance(s, KernelStep) and s.parallel for s in self.steps):
            return False
        return bool(flops) and max(flops) < SINGLE_THREAD_BLAS_MAX_FLOPS

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if isinstance(s, KernelStep)]
