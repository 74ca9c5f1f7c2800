"""The steps of a CPU plan, each run over an environment of arrays indexed by entry position.

:class:`KernelStep` calls a generated Numba kernel, :class:`MatmulStep` calls BLAS through
NumPy's matmul into a pooled buffer, :class:`ConvStep` copies im2col columns and calls BLAS
(a conv2d; :class:`DirectConvStep` a depthwise or 1x1 one without im2col; :class:`ConvWeightStep`
conv2d's weight gradient from the same columns),
:class:`ConvTransposeStep` calls BLAS and adds its columns back (col2im), :class:`PoolStep`
runs a max_pool2d or max_pool2d_indices kernel, :class:`AvgPoolStep` an average pool's or its
transpose's, :class:`ScatterAddStep` a compiled scatter_add, :class:`CatStep` copies a cat's pieces,
:class:`RecurrentStep` runs an LSTM or GRU recurrence (a product and a cell kernel per time
step), :class:`IndexCheckStep` checks a gather's indices, and ``ReferenceStep``
(``lowering/reference.py``) runs an op's NumPy reference (ops with no kernel yet: the plan's
reported fallbacks).
Operands of library steps are ``lowering.pipeline.Operand``: a buffer or a scalar read
through its movement ops as NumPy views.
"""

from __future__ import annotations

import math
import operator
import threading
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from lazyvic.errors import IndexError as LIndexError
from lazyvic.lowering.cpu import im2col as kernels
from lazyvic.lowering.cpu import random_kernels
from lazyvic.lowering.cpu.load import shared
from lazyvic.lowering.reference import ReferenceStep, view
from lazyvic.ops.blas import MATMUL_PIECE_WORK, in_pieces, matmul_into, matmul_views, run_products
from lazyvic.ops.index import index_error
from lazyvic.ops.recurrent import split_lengths
from lazyvic.trace.symbolic import Sym

# Scratch sets a conv step keeps between runs (as many as threads ran it at once, or as sizes
# a plan of symbolic sizes ran it at), up to this; the oldest go first.
MAX_FREE_SCRATCH = 4
_scratch_lock = threading.Lock()


def _take_scratch(free: list, shapes: tuple):
    """A scratch set made for ``shapes`` from a step's free list, or None (see ConvStep)."""
    with _scratch_lock:
        for k, (made_for, _) in enumerate(free):
            if made_for == shapes:
                return free.pop(k)[1]
    return None


def _give_scratch(free: list, shapes: tuple, scratch) -> None:
    with _scratch_lock:
        free.append((shapes, scratch))
        if len(free) > MAX_FREE_SCRATCH:
            free.pop(0)


__all__ = [
    "AvgPoolStep",
    "CatStep",
    "ConvStep",
    "ConvTransposeStep",
    "ConvWeightStep",
    "DirectConvStep",
    "IndexCheckStep",
    "KernelStep",
    "MatmulStep",
    "PoolStep",
    "RecurrentStep",
    "ReferenceStep",
    "ScatterAddStep",
    "view",
]


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
    sizes: tuple = ()  # the values (ints, or Syms until bound) of the kernel's size arguments
    zs: np.ndarray = field(default=None, init=False, repr=False, compare=False)  # sizes as passed

    def __post_init__(self):
        if self.sizes and Sym not in map(type, self.sizes):  # (made per binding: C-speed test)
            self.zs = np.array(self.sizes, dtype=np.int64)
        # The arrays' positions, read in one C call per run (a plan runs dozens of these steps
        # per call: the Python around each kernel call is part of every step's time).
        self._arrays = operator.itemgetter(self.out, *self.extra_outs, *self.buffers, -1)

    def reads(self):
        return self.buffers

    def writes(self):
        return (self.out,) + self.extra_outs

    def arguments(self, flat, scalars) -> tuple:
        """The arguments the kernel is called with: its arrays, scalars, packed scalars and sizes."""
        arrays = self._arrays(flat)[:-1]  # (the -1 makes a tuple of one array a tuple too)
        if self.scalars or self.packed:
            arrays += (
                *[t(scalars[s]) for s, t in self.scalars],
                *[np.array([scalars[s] for s in slots], dtype=d) for d, slots in self.packed],
            )
        return arrays if self.zs is None else (*arrays, self.zs)

    def __call__(self, env, flat, scalars):
        self.fn(*self.arguments(flat, scalars))


@dataclass
class MatmulStep:
    name: str
    out: int
    a: tuple  # lowering.pipeline.Operand
    b: tuple
    k: int = 0  # inner dimension (for the plan's BLAS policy)
    # Per operand: its buffer is one of the plan's pooled temporaries (CpuPlan marks them), whose
    # arrays a run state keeps from run to run: the operand's view is then made once per array
    # and kept (``memo``), not rebuilt through its movement ops at every run. Inputs' views are
    # not kept: that would keep a caller's old array alive after the caller dropped it.
    pooled: tuple = (False, False)
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # A float product in pieces (2-D: ops/blas.matmul_pieces, as the NumPy reference; batched: a
    # matrix per call), by ``run``: the backend's lowering/cpu/team.Team, on Numba's threads where
    # the plan runs BLAS on one.
    run: object = field(default=run_products, repr=False)
    split: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # shapes -> split_kind
    in_pieces: bool = False  # at the sizes the plan is lowered with (whether it needs the plan's team)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.a, self.b) if c.kind == "buffer")

    def _operand(self, i, chain, env, scalars):
        if not self.pooled[i]:
            return view(env, scalars, chain)
        return kept_view(self.memo, i, env, scalars, chain)

    def __call__(self, env, flat, scalars):
        a, b, out = self._operand(0, self.a, env, scalars), self._operand(1, self.b, env, scalars), env[self.out]
        if out.dtype in _PIECE_DTYPES:
            split = self.split.get((a.shape, b.shape))
            if split is None:
                split = self.split[(a.shape, b.shape)] = split_kind(a.shape, b.shape)
            if split:
                views = (lambda: matmul_views(a, b, out)) if split == 1 else (lambda: _matrices(a, b, out))
                bases = (_base(env, self.a, a), _base(env, self.b, b), out)
                self.run(views, bases, _layout(bases, (a, b, out)))
                return
        matmul_into(a, b, out)


_PIECE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def kept_view(kept: dict, k, env, scalars, chain, contiguous: bool = False) -> np.ndarray:
    """Operand ``chain``, a pooled temporary of the plan (whose array a run state keeps from
    run to run), through its movement ops (made C-contiguous when ``contiguous``): made once per
    array and kept in ``kept[k]``. Only a view of the temporary's memory is kept, not a copy (a
    reshape of a non-contiguous view makes one), whose numbers would go stale. One tuple: a
    thread reads a whole pair or the previous one."""
    base, got = env[chain.base], kept.get(k)
    if got is not None and got[0] is base:
        return got[1]
    v = view(env, scalars, chain)
    if contiguous:
        v = np.ascontiguousarray(v)
    if v.base is not None and v.base is base.base:
        kept[k] = (base, v)
    return v


def _base(env, chain, v: np.ndarray) -> np.ndarray:
    """The buffer operand ``v`` (of ``chain``) is a view of (NumPy's ``v.base`` is the memory's
    owner, an aligned buffer's raw bytes: lowering/memory.aligned_empty)."""
    return env[chain.base] if chain.kind == "buffer" else v


def _layout(bases: tuple, views: tuple) -> tuple:
    """What fixes ``views``' BLAS calls besides their bases' shapes: their strides and addresses
    relative to their bases."""
    out = []
    for base, v in zip(bases, views):
        out += [v.strides, v.__array_interface__["data"][0] - base.__array_interface__["data"][0]]
    return tuple(out)


def split_kind(a_shape: tuple, b_shape: tuple) -> int:
    """How a float product of these shapes runs: 0 one ``np.matmul``; 1 in the pieces of
    ops/blas.matmul_pieces (2-D: as the NumPy reference); 2 one BLAS call per matrix of the batch,
    the calls NumPy's matmul makes (so the same bits), when there are at least two and
    2 * MATMUL_PIECE_WORK multiply-adds in all."""
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    if len(a_shape) == 2:
        return 1 if in_pieces(m, n, k) else 0
    batch = math.prod(a_shape[:-2])
    return 2 if batch >= 2 and batch * m * n * k >= 2 * MATMUL_PIECE_WORK else 0


def _matrices(a, b, out) -> list:
    """``(a[i], b[i], out[i])`` for each matrix i of a batched product."""
    return [(a[i], b[i], out[i]) for i in np.ndindex(*out.shape[:-2])]


@dataclass
class ConvStep:
    """conv2d (ops/conv.py): zero padding (split by column phase, so that every output row of a
    tap is one contiguous run) and im2col over the live kernel taps into scratch buffers (Numba
    kernels, lowering/cpu/im2col.py), then the BLAS products (``ops.conv.conv_gemm``, shared with
    the NumPy reference, in the same chunks of images and pieces, so both round alike) by ``run``
    (lowering/cpu/team.Team: on Numba's threads in a plan whose BLAS runs on one thread, where
    the copies run there too).

    The scratch buffers (columns, product, padded input) belong to one run at a time: each call
    takes a set from the step's free list (made at a first run, or when every set is in use by
    a run in another thread) and puts it back after, so a plan runs in several threads at once.
    They are outside the memory plan's accounting (the columns are C*T times the output's
    spatial size per image)."""

    name: str
    out: int
    x: tuple  # operand chains, as MatmulStep's
    w: tuple
    attrs: dict
    im2col: object  # lowering.cpu.im2col.im2col
    pad_into: object  # lowering.cpu.im2col.pad_into
    gemm: object  # ops.conv.conv_gemm
    taps: object  # ops.conv.taps
    tap_weights: object  # ops.conv.tap_weights
    images_per_chunk: object  # ops.conv.images_per_chunk
    k: int = 0  # inner dimension of the product (for the plan's BLAS policy)
    scratch: list = field(default_factory=list, repr=False)  # free (shapes, scratch set) pairs (see above)
    run: object = field(default=run_products, repr=False)  # runs the products (the backend's: lowering/cpu/team.Team)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.w) if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        x = np.ascontiguousarray(view(env, scalars, self.x))
        w = view(env, scalars, self.w)
        out = env[self.out]
        # A set made for this run's shapes (a plan of symbolic sizes runs one step at many).
        shapes = (x.shape, w.shape, out.shape)
        scratch = _take_scratch(self.scratch, shapes)
        if scratch is None:
            scratch = self._scratch(x.shape, w.shape, out)
        try:
            self._conv(x, w, out, scratch)
        finally:
            _give_scratch(self.scratch, shapes, scratch)

    def _layout(self, x_shape, w_shape, out_shape, itemsize) -> tuple:
        """(padded buffer's shape or None, tap offsets, strides, live tap rows and columns,
        images per chunk, column rows) of a run at these shapes."""
        n, o, oh, ow = out_shape
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
            # Split by column phase (lowering/cpu/im2col.pad_into): each output row of a tap is
            # one contiguous run of the buffer, whatever the stride.
            hp, wq = h + pt + pb, -(-(wd + pl + pr) // sw)
            padded = (n, c, hp, sw, wq)
            offsets = [(i * dh * sw + (j * dw) % sw) * wq + (j * dw) // sw for i in rows for j in cols]
            strides = (c * hp * sw * wq, sh * sw * wq, 1)
        offsets = np.array(offsets, dtype=np.int64)
        r = c * offsets.size
        return padded, offsets, strides, rows, cols, self.images_per_chunk(n, r, oh * ow, itemsize), r

    def scratch_bytes(self, x_shape, w_shape, out_shape, itemsize) -> int:
        """Bytes of a run's scratch buffers at these shapes (the plan's memory report counts them)."""
        padded, _, _, _, _, step, r = self._layout(x_shape, w_shape, out_shape, itemsize)
        per_image = out_shape[2] * out_shape[3]
        elements = r * step * per_image + (out_shape[1] * step * per_image if step > 1 else 0)
        return itemsize * (elements + (int(np.prod(padded)) if padded is not None else 0))

    def _pad(self, x, padded):
        """x copied into the interior of the zero-bordered ``padded`` (its border stays zero)."""
        (pt, _, pl, _) = self.attrs["padding"]
        shared(
            getattr(self.run, "team", False), self.pad_into, kernels.pad_into_parallel, padded.size, x, padded, pt, pl
        )
        return padded

    def _conv(self, x, w, out, scratch) -> None:
        n, o, oh, ow = out.shape
        at = self.attrs
        cols_flat, prod_flat, padded, offsets, strides, tap_rows, tap_cols, step, r = scratch
        if padded is not None:
            x = self._pad(x, padded)
        src = x.reshape(-1)
        image_stride, row_stride, col_stride = strides
        w = self.tap_weights(w, tap_rows, tap_cols)
        for n0 in range(0, n, step):
            m = (min(n, n0 + step) - n0) * oh * ow
            cols = cols_flat[: r * m].reshape(r, m)
            args = (src[n0 * image_stride :], cols, offsets, image_stride, row_stride, col_stride, oh, ow)
            shared(getattr(self.run, "team", False), self.im2col, kernels.im2col_parallel, cols.size, *args)
            prod = prod_flat[: o * m].reshape(o, m) if prod_flat is not None and m > oh * ow else None
            self.gemm(cols, w, at["groups"], out[n0 : n0 + step], prod, self.run)

    def _scratch(self, x_shape, w_shape, out) -> list:
        return self._column_set(x_shape, w_shape, out.shape, out.dtype)

    def _column_set(self, x_shape, w_shape, out_shape, dtype) -> list:
        """The scratch set of a run: columns, the (O, n*oH*oW) product of a chunk of n > 1
        images, the padded input, and the layout (see _layout)."""
        layout = self._layout(x_shape, w_shape, out_shape, dtype.itemsize)
        padded_shape, offsets, strides, rows, cols, step, r = layout
        n, o, oh, ow = out_shape
        per_image = oh * ow
        padded = None if padded_shape is None else np.zeros(padded_shape, dtype=dtype)
        return [
            np.empty(r * step * per_image, dtype=dtype),
            np.empty(o * step * per_image, dtype=dtype) if step > 1 else None,
            padded,
            offsets,
            strides,
            rows,
            cols,
            step,
            r,
        ]


@dataclass
class DirectConvStep:
    """A conv2d without im2col: ``kernel(x, w, out, *args)`` on the C-contiguous operands. A
    depthwise one (ops/conv.is_depthwise) runs lowering/cpu/direct_conv.depthwise, a 1x1 one
    (ops/conv.is_pointwise) ops.conv.pointwise_product, one product per image."""

    name: str
    out: int
    x: tuple  # operand chains, as MatmulStep's
    w: tuple
    kernel: object
    args: tuple
    k: int = 0  # inner dimension of its products, 0: none (for the plan's BLAS policy)
    scratch: int = 0  # bytes the kernel allocates per call (the plan's memory report counts them)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.w) if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        x = np.ascontiguousarray(view(env, scalars, self.x))
        w = np.ascontiguousarray(view(env, scalars, self.w))
        self.kernel(x, w, env[self.out], *self.args)


@dataclass
class ConvWeightStep(ConvStep):
    """conv2d_weight (ops/conv.py): a conv2d's weight gradient from its input ``x`` and output
    gradient (the ``w`` field here, (N, O, oH, oW)). The forward's padding and im2col (the same
    kernels, chunks and live taps as :class:`ConvStep`), then per chunk one BLAS product of the
    gradient and the columns (``gemm``: ops.conv.weight_gemm, shared with the NumPy reference),
    accumulated; ``spread`` puts the live taps' sums in the (O, C/groups, kH, kW) output
    (``tap_weights`` is not used)."""

    spread: object = None  # ops.conv.spread_taps

    def _conv(self, x, g, out, scratch) -> None:
        o, cg = out.shape[:2]
        n = g.shape[0]
        at = self.attrs
        cols_flat, g_flat, padded, offsets, strides, tap_rows, tap_cols, step, r = scratch[:9]
        acc_flat, prod_flat = scratch[9:]
        if padded is not None:
            x = self._pad(x, padded)
        src = x.reshape(-1)
        image_stride, row_stride, col_stride = strides
        groups = at["groups"]
        t = len(tap_rows) * len(tap_cols)
        acc = acc_flat[: o * cg * t].reshape(groups, cg * t, o // groups)
        if n == 0:  # no chunk: a zero gradient
            acc[...] = 0
        oh, ow = g.shape[2], g.shape[3]
        for n0 in range(0, n, step):
            m = (min(n, n0 + step) - n0) * oh * ow
            cols = cols_flat[: r * m].reshape(r, m)
            args = (src[n0 * image_stride :], cols, offsets, image_stride, row_stride, col_stride, oh, ow)
            shared(getattr(self.run, "team", False), self.im2col, kernels.im2col_parallel, cols.size, *args)
            self.gemm(cols, g[n0 : n0 + step], groups, acc, n0 == 0, (g_flat, prod_flat), self.run)
        self.spread(acc, out, tap_rows, tap_cols)

    def _scratch(self, x_shape, g_shape, out) -> list:
        # The forward's set (its (O, n*oH*oW) product buffer holds g's chunk, transposed), then
        # the accumulated (G, Cg*T, O/G) sums and a later chunk's product.
        found = self._column_set(x_shape, out.shape, g_shape, out.dtype)
        step, r = found[7], found[8]
        found.append(np.empty(g_shape[1] * r // self.attrs["groups"], dtype=out.dtype))
        found.append(np.empty(out.size, dtype=out.dtype) if step < g_shape[0] else None)
        return found

    def scratch_bytes(self, x_shape, w_shape, out_shape, itemsize) -> int:
        """Bytes of a run's scratch at these shapes (here ``w_shape`` is the output gradient's
        and ``out_shape`` the weight's)."""
        padded, _, _, rows, cols, step, r = self._layout(x_shape, out_shape, w_shape, itemsize)
        per_image = w_shape[2] * w_shape[3]
        elements = r * step * per_image + (w_shape[1] * step * per_image if step > 1 else 0)
        elements += 2 * int(np.prod(out_shape))
        return itemsize * (elements + (int(np.prod(padded)) if padded is not None else 0))


@dataclass
class ConvTransposeStep:
    """conv_transpose2d (ops/conv_transpose.py): per chunk of images (``ops.conv.images_per_chunk``,
    as the reference), x as a (C_in, n*H*W) matrix, one BLAS product into the columns
    (``ops.conv_transpose.transposed_columns``, shared with the reference) and col2im (a Numba
    kernel, lowering/cpu/im2col.col2im) into the output. Scratch buffers as ConvStep's."""

    name: str
    out: int
    x: tuple  # operand chains, as MatmulStep's
    w: tuple
    attrs: dict
    columns: object  # ops.conv_transpose.transposed_columns
    col2im: object  # lowering.cpu.im2col.col2im
    images_per_chunk: object  # ops.conv.images_per_chunk
    k: int = 0  # flops / (2 * output elements) (for the plan's BLAS policy)
    scratch: list = field(default_factory=list, repr=False)  # free (shapes, (columns, x matrix)) pairs
    run: object = field(default=run_products, repr=False)  # runs the products (the backend's: lowering/cpu/team.Team)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.w) if c.kind == "buffer")

    def scratch_bytes(self, x_shape, w_shape, out_shape, itemsize) -> int:
        """Bytes of a run's scratch buffers (columns and x as a matrix) at these shapes."""
        n, cin, h, wd = x_shape
        rows, per_image = out_shape[1] * w_shape[2] * w_shape[3], h * wd
        step = self.images_per_chunk(n, rows, per_image, itemsize)
        return itemsize * (rows + cin) * step * per_image

    def __call__(self, env, flat, scalars):
        x = np.ascontiguousarray(view(env, scalars, self.x))
        w = np.ascontiguousarray(view(env, scalars, self.w))
        out = env[self.out]
        n, cin, h, wd = x.shape
        kh, kw = w.shape[2:]
        rows, per_image = out.shape[1] * kh * kw, h * wd
        step = self.images_per_chunk(n, rows, per_image, x.dtype.itemsize)
        shapes = (x.shape, w.shape, out.shape)
        scratch = _take_scratch(self.scratch, shapes)
        if scratch is None:
            scratch = (np.empty(rows * step * per_image, x.dtype), np.empty(cin * step * per_image, x.dtype))
        try:
            at = self.attrs
            (sh, sw), (pt, pl), (dh, dw) = at["stride"], at["padding"], at["dilation"]
            for n0 in range(0, n, step):
                chunk = x[n0 : n0 + step]
                cols = scratch[0][: rows * chunk.shape[0] * per_image].reshape(rows, -1)
                self.columns(chunk, w, at["groups"], cols, scratch[1], self.run)
                args = (cols, out[n0 : n0 + step], h, wd, kh, kw, sh, sw, dh, dw, pt, pl)
                shared(getattr(self.run, "team", False), self.col2im, kernels.col2im_parallel, cols.size, *args)
        finally:
            _give_scratch(self.scratch, shapes, scratch)


@dataclass
class PoolStep:
    """max_pool2d (ops/pool.py): one Numba kernel (lowering/cpu/pool_kernels.py) over the
    materialized input; max_pool2d_indices also reads the pooled values (``values``)."""

    name: str
    out: int
    x: tuple  # operand chain, as MatmulStep's
    attrs: dict
    kernel: object
    values: tuple = None  # max_pool2d_indices: the values' operand chain

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.values) if c is not None and c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        (kh, kw), (sh, sw), (ph, pw) = self.attrs["kernel"], self.attrs["stride"], self.attrs["padding"]
        x = np.ascontiguousarray(view(env, scalars, self.x))
        if self.values is None:
            self.kernel(x, env[self.out], kh, kw, sh, sw, ph, pw)
        else:
            values = np.ascontiguousarray(view(env, scalars, self.values))
            self.kernel(x, values, env[self.out], kh, kw, sh, sw, ph, pw)


@dataclass
class RecurrentStep:
    """lstm_scan, gru_scan, rnn_scan or their backwards (ops/recurrent.py): the op's loop over the
    time steps (``loop``, shared with its NumPy reference) with a compiled cell kernel (``cell``,
    lowering/cpu/recurrent_kernels.py; for rnn_scan whether the nonlinearity is relu) over
    C-contiguous copies of its operands (the optional int64 lengths passed as ``lengths``)."""

    name: str
    out: int
    args: tuple  # operand chains, as MatmulStep's
    loop: object
    cell: object
    reverse: bool = False
    scratch: int = 0  # bytes the loop makes per call (recurrent_kernels.scratch_bytes)
    # A forward's groups of units run on Numba's threads (recurrent_kernels.forward_loop_parallel):
    # set by CpuBackend where that is the plan's one thread team, as for lowering/cpu/team.py.
    team: bool = False
    padded: list = field(default_factory=list, repr=False, compare=False)  # free (key, zeroed buffer) pairs
    # Operands made of a scalar input (an initial state of zeros: h0 = zeros expanded, sliced
    # and reshaped), per position in args: (the scalar's value, its bits, the array made of it).
    # Not an init field: the step a plan of symbolic sizes makes per binding of its sizes
    # (dataclasses.replace) starts with its own, so an array of one batch size never serves another.
    filled: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Per operand: a pooled temporary of the plan (CpuPlan marks them, as MatmulStep's): its
    # contiguous view (the input projection reshaped to (T, N, G*H)) is kept per array (kept_view).
    pooled: tuple = ()
    kept: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in self.args if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        taken = []
        try:
            operands = [self._operand(env, scalars, c, taken, k) for k, c in enumerate(self.args)]
            arrays, lengths = split_lengths(operands)
            self._run(env, arrays, lengths)
        finally:
            for key, buf in taken:
                _give_scratch(self.padded, key, buf)

    def _operand(self, env, scalars, chain, taken: list, k: int = -1) -> np.ndarray:
        """The C-contiguous operand of ``chain`` (``k``-th of args). One that ends in a pad (a
        backward's cotangent of y: the gradient of its h columns, zeros beside them) is copied
        into a zeroed buffer the step keeps, whose zeros stay: NumPy's pad made the (35, 20, 768)
        cotangent of an LSTM language model's layer anew at every call, 400 us of its 2 ms. One
        made of a scalar input is made again only when the scalar's value changes (the loops
        never write their operands): an LSTM's zero initial states, through NumPy's
        broadcast_to, slice, reshape and a copy, took 10-25 us each a call, a fifth of a
        35-step layer's time at batch 1."""
        if chain.kind == "scalar":
            value = scalars[chain.base]
            made = self.filled.get(k)
            if made is None or made[0] is not value:
                bits = np.asarray(value, dtype=chain.dtype).tobytes()  # -0.0 is not 0.0
                if made is None or made[1] != bits:
                    made = (value, bits, np.ascontiguousarray(view(env, scalars, chain)))
                else:
                    made = (value, bits, made[2])
                self.filled[k] = made
            return made[2]
        ops = chain.ops
        if ops and ops[-1][0].name == "pad" and all(isinstance(v, int) for p in ops[-1][1]["pads"] for v in p):
            inner = view(env, scalars, chain._replace(ops=ops[:-1]))
            pads = tuple(tuple(p) for p in ops[-1][1]["pads"])
            key = (inner.shape, pads, inner.dtype.str)
            buf = _take_scratch(self.padded, key)
            if buf is None:
                buf = np.zeros(tuple(n + b + a for n, (b, a) in zip(inner.shape, pads)), dtype=inner.dtype)
            taken.append((key, buf))
            buf[tuple(slice(b, b + n) for n, (b, _) in zip(inner.shape, pads))] = inner
            return buf
        if k < len(self.pooled) and self.pooled[k]:
            return kept_view(self.kept, k, env, scalars, chain, contiguous=True)
        return np.ascontiguousarray(view(env, scalars, chain))

    def _run(self, env, arrays, lengths) -> None:
        if self.team:
            self.loop(*arrays, env[self.out], self.cell, self.reverse, lengths, team=True)
        else:
            self.loop(*arrays, env[self.out], self.cell, self.reverse, lengths)


@dataclass
class AvgPoolStep:
    """avg_pool2d, adaptive_avg_pool2d or their transposes (ops/avg_pool.py): one Numba kernel
    (lowering/cpu/pool_kernels.py) over the materialized input, with the windows' tables made
    once per (input, output) size by ``tables(x_hw, out_hw, dtype)``."""

    name: str
    out: int
    x: tuple  # operand chain, as MatmulStep's
    kernel: object
    tables: object
    made: dict = field(default_factory=dict, repr=False, compare=False)  # sizes -> table arguments

    def writes(self):
        return (self.out,)

    def reads(self):
        return (self.x.base,) if self.x.kind == "buffer" else ()

    def __call__(self, env, flat, scalars):
        x = np.ascontiguousarray(view(env, scalars, self.x))
        out = env[self.out]
        key = (x.shape[2:], out.shape[2:], x.dtype)
        args = self.made.get(key)
        if args is None:
            args = self.made[key] = self.tables(*key)
        self.kernel(x, out, *args)


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
        return tuple(c.base for c in self.args if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        base, index, src = [view(env, scalars, c) for c in self.args]
        out = env[self.out]
        np.copyto(out, base)
        last = out.ndim - 1
        if out.ndim > 2 and self.dim == last and index.ndim == out.ndim and index.shape[:last] == out.shape[:last]:
            # along the last axis with whole leading axes (max_pool2d's gradient): rows of one
            # 2-D scatter, the same adds in the same order
            rows = math.prod(out.shape[:last])
            m = index.shape[last]
            args = (
                out.reshape(rows, out.shape[last]),
                index.reshape(rows, m),
                src[tuple(slice(0, k) for k in index.shape)].reshape(rows, m),
            )
            bad = scatter_add_2d(*args, 1)
        elif out.ndim == 2 and index.ndim == 2:
            bad = scatter_add_2d(out, index, src, self.dim)
        else:
            bad = self.kernel(out, index, src, self.dim)
        if bad != -1:
            raise LIndexError(f"scatter_add: index {int(bad)} out of range for dimension of size {out.shape[self.dim]}")


@dataclass
class RandStep:
    """``rand``'s draws, four words per generator block (lowering/cpu/random_kernels.py): the
    (seed, offset) operands are its scalar inputs. On Numba's threads in a plan whose thread
    team it is (``team``, set by CpuBackend), while no other process is busy; the same words
    whichever thread draws them. A half-type output (``half``) gets float32 draws rounded to it
    as the NumPy reference rounds them (``astype``), through a float32 scratch buffer of
    ``scratch`` bytes (at the sizes the plan is lowered with)."""

    name: str
    out: int
    seed: tuple  # operand chains of the int64 (seed, offset) inputs
    offset: tuple
    team: bool = False
    half: bool = False
    scratch: int = 0

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.seed, self.offset) if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        seed, offset = (int(view(env, scalars, c)) for c in (self.seed, self.offset))
        out = flat[self.out]
        draws = np.empty(out.size, np.float32) if self.half else out
        shared(self.team, random_kernels.fill, random_kernels.fill_parallel, draws.size, draws, seed, offset)
        if self.half:
            whole = env[self.out]
            whole.reshape(-1)[...] = draws.astype(whole.dtype)


@dataclass
class CatStep:
    """cat (ops/join.py): each piece copied into its range of the output's axis (NumPy copies,
    the pieces read through their movement ops as views)."""

    name: str
    out: int
    args: tuple  # the pieces' operand chains, as MatmulStep's
    axis: int

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in self.args if c.kind == "buffer")

    def __call__(self, env, flat, scalars):
        out = env[self.out]
        lead = (slice(None),) * self.axis
        start = 0
        for c in self.args:
            piece = view(env, scalars, c)
            stop = start + piece.shape[self.axis]
            out[lead + (slice(start, stop),)] = piece
            start = stop


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
    asked_by: str | None = None  # the op a class index is checked for (ops/index.py)

    def writes(self):
        return ()

    def reads(self):
        return (self.index.base,)

    def __post_init__(self):
        # An index read through reshapes and expands only (an embedding's (N, 1) -> (N, D)):
        # its buffer holds the same values in the same order, without the repeats. Checking the
        # buffer (contiguous, as every plan buffer) spares copying the expanded view: 1,024 x
        # 128 indices took 80-110 us per check in TinyGPT's step, the buffer's 1,024 about 1.
        chain = self.index
        self.whole_buffer = chain.kind == "buffer" and all(op.name in _SAME_VALUES for op, _ in chain.ops)
        self.empty = (
            self.whole_buffer
            and bool(chain.ops)
            and any(d == 0 for d in chain.ops[-1][1]["shape"] if isinstance(d, int))
        )

    def __call__(self, env, flat, scalars):
        if self.whole_buffer:
            if self.empty:
                return
            idx = env[self.index.base]
        else:
            idx = view(env, scalars, self.index)
        if idx.size and not _in_range(idx.reshape(-1), self.size):
            bad = idx[(idx < 0) | (idx >= self.size)].ravel()[0]
            raise index_error(self.op, bad, self.size, self.asked_by)


_SAME_VALUES = ("reshape", "expand")  # movement ops whose result has every value of their input, in order


@njit(cache=True, nogil=True)
def scatter_add_2d(out, index, src, dim):
    """``kernel_lib.scatter_add_into`` for a 2-D ``out``: the same adds in the same order
    (row-major over ``index``'s positions), so the same bits, without the general loop's
    per-element offset arithmetic (an embedding gradient, 1,024 x 128 rows into 65: 340 us in
    general, about 90 here)."""
    n = out.shape[dim]
    rows, cols = index.shape
    for p in range(rows):
        for q in range(cols):
            j = index[p, q]
            if j < 0 or j >= n:
                return j
            if dim == 0:
                out[j, q] += src[p, q]
            else:
                out[p, j] += src[p, q]
    return -1


@njit(cache=True, nogil=True)
def _in_range(idx, size) -> bool:
    """Every index in ``0 .. size - 1`` (one compiled pass: NumPy's min and max of a
    64-token batch cost more than the gather they guard)."""
    for v in idx:
        if v < 0 or v >= size:
            return False
    return True
