"""The steps of a CUDA plan, each run as ``step(plan, env, scalars)`` over device arrays.

- :class:`CudaKernelStep` launches a generated kernel;
- :class:`CudaMatmulStep` multiplies through ``CudaTarget.matmul`` (cuBLAS through CuPy when
  present, else a tiled kernel); operands read through movement ops are first made
  contiguous by one gather;
- :class:`CudaConvStep` computes a conv2d as im2col columns (a kernel computing each
  source address), the same grouped product and a kernel into the output layout;
  :class:`CudaConvTransposeStep` a conv_transpose2d as a grouped product and a col2im kernel;
  :class:`CudaConvWeightStep` conv2d's weight gradient as the forward's columns times the
  gathered output gradient;
- :class:`CudaCatStep` places each piece of a cat in its range of the output;
- :class:`CudaMaxPoolStep`, :class:`CudaAvgPoolStep` and :class:`CudaRandomStep` run fixed
  kernels of the CUDA library (``lowering/cuda/kernel_lib.py``); the steps that read indices
  are in ``lowering/cuda/index_steps.py``;
- :class:`HostStep` runs a ReferenceStep (``lowering/reference.py``: an op without a CUDA
  kernel yet) on host copies of its operands and copies the result back.

Operands are ``lowering.pipeline.Operand``. Copies go through the plan (``plan.to_device``,
``plan.to_host``, ``plan.count``), which counts them; launch sizes come from the plan's
``CudaTarget``. Small host data sent at each run (packed scalars, scalar operands) is sent
again only when its bytes change (:class:`DeviceCopy`); maps and sizes are sent once, at a
step's first run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


class DeviceCopy:
    """A device copy of a small host array (a kernel's packed scalars, a scalar operand), sent
    again only when the host bytes differ from the last ones sent (each send is counted).

    The device array is rewritten in place by a blocking copy, which the device runs after the
    work queued before it (one stream), so kernels queued earlier read the earlier values.
    """

    def __init__(self):
        self.sent = None  # (dtype, bytes) of the last copy sent
        self.array = None

    def of(self, host: np.ndarray, plan):
        host = np.ascontiguousarray(host).reshape(-1)
        key = (host.dtype.str, host.tobytes())
        if key != self.sent:
            if self.array is not None and self.array.size == host.size and self.array.dtype == host.dtype:
                plan.count("host_to_device", host.nbytes)
                self.array.copy_to_device(host)
            else:
                self.array = plan.to_device(host)
            self.sent = key
        return self.array


@dataclass
class CudaKernelStep:
    name: str
    kernel: object
    out: int
    buffers: tuple
    scalars: tuple  # (slot, NumPy scalar type) passed one by one
    packed: tuple  # (NumPy dtype, slots): passed as one device array each
    kind: str  # "elementwise" | "thread_rows" | "rows" (see lowering.cuda.codegen.CudaKernelSource)
    size: int  # elements or rows
    threads: int | None  # a row kernel's block size (fixed by its source)
    source: str = field(repr=False, default="")
    extra_outs: tuple = ()
    # An inlined gather from a dimension of size 0 with a non-empty index: its check fails at
    # every run, and the kernel (which has nothing in range to read) is never launched.
    never_runs: bool = False
    sent: list = field(default=None, repr=False)  # a DeviceCopy per packed group

    def reads(self):
        return self.buffers

    def writes(self):
        return (self.out,) + self.extra_outs

    def launch(self, target) -> tuple:
        if self.kind == "rows":
            return target.row_blocks(self.size), self.threads
        return target.launch_1d(self.size)

    def __call__(self, plan, env, scalars):
        if self.never_runs:
            return
        if self.sent is None:
            self.sent = [DeviceCopy() for _ in self.packed]
        packed = [
            copy.of(np.array([scalars[s] for s in slots], dtype=d), plan)
            for copy, (d, slots) in zip(self.sent, self.packed)
        ]
        blocks, threads = self.launch(plan.target)
        self.kernel[blocks, threads](
            env[self.out],
            *[env[o] for o in self.extra_outs],
            *[env[b] for b in self.buffers],
            *[t(scalars[s]) for s, t in self.scalars],
            *packed,
        )


def operand_map(entries, chain) -> np.ndarray | None:
    """Flat positions in the base of each element of an operand read through movement ops
    (-1: a zero of a pad), computed once with the ops' own NumPy references; a scalar's base
    is one element (every position 0). None when the operand reads its buffer as it is (no
    op, or a reshape)."""
    kind, base, ops, _ = chain
    if not ops:
        return None
    shape = () if kind == "scalar" else entries[base].shape
    a = np.arange(1, math.prod(shape) + 1, dtype=np.int64).reshape(shape)
    for opdef, attrs in ops:
        a = opdef.reference([a], attrs)
    m = np.ascontiguousarray(a, dtype=np.int64).reshape(-1) - 1
    if kind == "buffer" and m.size == math.prod(shape) and np.array_equal(m, np.arange(m.size)):
        return None
    return m


def gather(plan, src, index, dense, dtype) -> None:
    """``dense[n] = src[index[n]]`` on the device (zero where the index is -1)."""
    from lazyvic.lowering.cuda.kernel_lib import gather_copy

    blocks, threads = plan.target.launch_1d(dense.size)
    gather_copy[blocks, threads](dense, src, index, np.dtype(dtype).type(0))


@dataclass
class CudaMatmulStep:
    """``out = a @ b`` over flat (batch, M, K) and (batch, K, N) device operands."""

    name: str
    out: int
    a: tuple  # lowering.pipeline.Operand
    b: tuple
    batch: int
    m: int
    k: int
    n: int
    maps: tuple = (None, None)  # index maps of the operands (see operand_map)
    scratch: list = field(default=None, repr=False)  # device: (map, contiguous copy) per operand

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.a, self.b) if c.kind == "buffer")

    def operand(self, which: int, plan, env, scalars):
        chain = (self.a, self.b)[which]
        if self.scratch is None:
            self.scratch = [None, None]
        if chain.kind == "scalar" and not any(opdef.reads_outside for opdef, _ in chain.ops):
            # A Python number broadcast by movement ops (the gradient of a sum): filled on the device.
            from lazyvic.lowering.cuda.kernel_lib import fill

            if self.scratch[which] is None:
                size = self.batch * (self.m * self.k if which == 0 else self.k * self.n)
                self.scratch[which] = (None, plan.target.cuda.device_array(size, chain.dtype))
            dense = self.scratch[which][1]
            fill[plan.target.launch(dense.size)](dense, np.dtype(chain.dtype).type(scalars[chain.base]))
            return dense
        if chain.kind == "scalar":  # a padded scalar: made on the host, sent when it changes
            from lazyvic.lowering.reference import view

            if self.scratch[which] is None:
                self.scratch[which] = DeviceCopy()
            return self.scratch[which].of(view({}, scalars, chain), plan)
        index = self.maps[which]
        if index is None:
            return env[chain.base]
        if self.scratch[which] is None:
            self.scratch[which] = (plan.to_device(index), plan.target.cuda.device_array(index.size, chain.dtype))
        dmap, dense = self.scratch[which]
        gather(plan, env[chain.base], dmap, dense, chain.dtype)
        return dense

    def __call__(self, plan, env, scalars):
        a, b = self.operand(0, plan, env, scalars), self.operand(1, plan, env, scalars)
        plan.target.matmul(env[self.out], a, b, self.batch, self.m, self.k, self.n, self.a.dtype)


def conv_dims(entries, root: int) -> tuple:
    """A conv2d's sizes as the CUDA library's im2col_kernel takes them."""
    e = entries[root]
    n, c, h, w = entries[e.inputs[0]].shape
    _, cg, kh, kw = entries[e.inputs[1]].shape
    at = e.attrs
    (sh, sw), (pt, _, pl, _), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    return (n, c, h, w, cg, kh, kw, e.shape[2], e.shape[3], sh, sw, pt, pl, dh, dw)


@dataclass
class CudaMaxPoolStep:
    """max_pool2d on the device, one thread per output (the CUDA library's max_pool2d_kernel); an
    input read through movement ops is first made contiguous by one gather."""

    name: str
    out: int
    x: tuple  # the operand chain of a buffer
    dims: tuple  # (H, W, oH, oW, kH, kW, sH, sW, pH, pW)
    x_map: np.ndarray | None = field(default=None, repr=False)  # see operand_map
    scratch: tuple = field(default=None, repr=False)  # device: (map, contiguous copy)
    index: bool = False  # max_pool2d_indices: the maxima's positions, not their values

    def writes(self):
        return (self.out,)

    def reads(self):
        return (self.x.base,)

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import max_pool2d_kernel

        out, x = env[self.out], env[self.x.base]
        if self.x_map is not None:
            if self.scratch is None:
                self.scratch = (
                    device_int64(self.x_map, plan),
                    plan.target.cuda.device_array(self.x_map.size, self.x.dtype),
                )
            gather(plan, x, self.scratch[0], self.scratch[1], self.x.dtype)
            x = self.scratch[1]
        blocks, threads = plan.target.launch_1d(out.size)
        max_pool2d_kernel[blocks, threads](out, x, *self.dims, np.int64(self.index))


@dataclass
class CudaCatStep:
    """cat (ops/join.py) on the device: each piece placed in its range of the output by one
    kernel (the CUDA library's place_copy, which computes where each element goes), read
    through its index map where movement ops view it (maps made at build time, sent at the
    first run)."""

    name: str
    out: int
    args: tuple  # the pieces' operand chains (lowering.pipeline.Operand)
    places: tuple  # per piece: (operand_map or None, elements, row width, offset in the row)
    out_width: int  # the output's row: its sizes from the cat axis on
    scratch: list = field(default=None, repr=False)  # device copies of the maps

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in self.args if c.kind == "buffer")

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import place_copy

        if self.scratch is None:
            self.scratch = [device_int64(() if p[0] is None else p[0], plan) for p in self.places]
        out = env[self.out]
        for c, (m, count, width, offset), index in zip(self.args, self.places, self.scratch):
            if not count:
                continue
            blocks, threads = plan.target.launch_1d(count)
            zero = np.dtype(c.dtype).type(0)
            src = source(c, env, scalars, plan)
            place_copy[blocks, threads](out, src, index, m is not None, zero, count, width, self.out_width, offset)


@dataclass
class CudaAvgPoolStep:
    """avg_pool2d, adaptive_avg_pool2d or their transposes (ops/avg_pool.py) on the device, one
    thread per output (the CUDA library's avg_pool2d_kernel, avg_pool2d_backward_kernel) over the
    windows' tables, made at build time and sent at the first run; an input read through
    movement ops (or a broadcast scalar) is first made contiguous by one gather."""

    name: str
    out: int
    x: tuple  # the operand chain of a buffer, or of a broadcast scalar (the gradient of a sum)
    transposed: bool  # the transpose: out is the pooled input, x the pooled output's gradient
    sizes: tuple  # (H, W, oH, oW) of the pooled input and output
    tables: tuple  # host int64 window tables (4) and the divisors of x's dtype (oH*oW)
    x_map: np.ndarray | None = field(default=None, repr=False)  # see operand_map
    scratch: tuple = field(default=None, repr=False)  # device: (tables, (map, contiguous copy) or None)

    def writes(self):
        return (self.out,)

    def reads(self):
        return (self.x.base,) if self.x.kind == "buffer" else ()

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import avg_pool2d_backward_kernel, avg_pool2d_kernel

        if self.scratch is None:
            tables = tuple(plan.to_device(np.ascontiguousarray(a)) for a in self.tables)
            dense = None
            if self.x_map is not None:
                dense = (device_int64(self.x_map, plan), plan.target.cuda.device_array(self.x_map.size, self.x.dtype))
            self.scratch = (tables, dense)
        tables, dense = self.scratch
        out, x = env[self.out], source(self.x, env, scalars, plan)
        if dense is not None:
            gather(plan, x, dense[0], dense[1], self.x.dtype)
            x = dense[1]
        kernel = avg_pool2d_backward_kernel if self.transposed else avg_pool2d_kernel
        blocks, threads = plan.target.launch_1d(out.size)
        kernel[blocks, threads](out, x, *self.sizes, *tables, np.dtype(self.x.dtype).type(0))


@dataclass
class CudaConvStep:
    """conv2d on the device: the im2col columns by one kernel that computes each element's
    source from its indices (the CUDA library's im2col_kernel: no index map of the columns'
    size), the grouped product through ``CudaTarget.matmul``, and one kernel placing the product
    in ``(N, O, oH, oW)``. An operand read through movement ops goes through its index map
    (x: inside the im2col kernel; w: one gather); a broadcast Python number (the gradient of
    a sum) is filled on the device. The scratch arrays are made once, at the first run."""

    name: str
    out: int
    x: tuple  # lowering.pipeline.Operand
    w: tuple
    groups: int
    o_per_group: int
    k: int  # Cg * kH * kW
    columns: int  # N * oH * oW
    dims: tuple = ()  # see conv_dims
    maps: tuple = field(repr=False, default=(None, None))  # x and w maps (see operand_map) or None
    scratch: list = field(default=None, repr=False)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.w) if c.kind == "buffer")

    def _prepare(self, plan):
        cuda, dtype = plan.target.cuda, self.x.dtype
        n, c, h, w = self.dims[:4]
        sizes = (n * c * h * w, self.groups * self.o_per_group * self.k)
        dense = [
            cuda.device_array(size, dtype) if chain.kind == "scalar" or (which and m is not None) else None
            for which, (chain, m, size) in enumerate(zip((self.x, self.w), self.maps, sizes))
        ]
        self.scratch = [
            [device_int64(() if m is None else m, plan) for m in self.maps],
            dense,
            device_int64(self.dims, plan),
            cuda.device_array(self.k * self.groups * self.columns, dtype),
            cuda.device_array(self.groups * self.o_per_group * self.columns, dtype),
            device_int64((), plan),
        ]  # no map: x made dense

    def operand(self, which: int, plan, env, scalars):
        """Operand ``which`` as a flat device array, and the map the im2col kernel reads x through."""
        from lazyvic.lowering.cuda.kernel_lib import copy_view, fill

        chain, maps, dense = (self.x, self.w)[which], self.scratch[0], self.scratch[1][which]
        zero = np.dtype(chain.dtype).type(0)
        if dense is None:  # a buffer (x: read through its map by the im2col kernel)
            return env[chain.base], maps[which]
        launch = plan.target.launch(dense.size)
        if chain.kind == "scalar" and (self.maps[which] is None or not (self.maps[which] < 0).any()):
            fill[launch](dense, np.dtype(chain.dtype).type(scalars[chain.base]))
        else:
            copy_view[launch](dense, source(chain, env, scalars, plan), maps[which], zero)
        return dense, self.scratch[5]

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import conv_output_kernel, im2col_kernel

        if self.scratch is None:
            self._prepare(plan)
        dtype, (_, _, dims, cols, product, _) = self.x.dtype, self.scratch
        x, x_map = self.operand(0, plan, env, scalars)
        w, _ = self.operand(1, plan, env, scalars)
        im2col_kernel[plan.target.launch(cols.size)](cols, x, x_map, dims, np.dtype(dtype).type(0))
        plan.target.matmul(product, w, cols, self.groups, self.o_per_group, self.k, self.columns, dtype)
        out = env[self.out]
        conv_output_kernel[plan.target.launch(out.size)](
            out, product, np.int64(self.dims[0]), np.int64(self.dims[7] * self.dims[8])
        )


@dataclass
class CudaConvWeightStep:
    """conv2d_weight (ops/conv.py: a conv2d's weight gradient) on the device: the forward's
    columns by the CUDA library's im2col_kernel, the output gradient gathered into (G, N*oH*oW,
    O/G) by copy_view through a map made at build time (movement ops composed in), one product
    ``cols (G, Cg*kH*kW, N*oH*oW) @ g^T`` per group through ``CudaTarget.matmul``, and a gather of
    the (G, Cg*kH*kW, O/G) product into (O, Cg, kH, kW)."""

    name: str
    out: int
    x: tuple  # lowering.pipeline.Operand
    g: tuple
    groups: int
    o_per_group: int
    k: int  # Cg * kH * kW
    columns: int  # N * oH * oW
    dims: tuple  # as conv_dims
    maps: tuple = field(repr=False, default=(None, None, None))  # x (operand_map), g and out gathers
    scratch: list = field(default=None, repr=False)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.g) if c.kind == "buffer")

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import copy_view, fill, im2col_kernel

        cuda, dtype = plan.target.cuda, np.dtype(self.x.dtype)
        zero = dtype.type(0)
        if self.scratch is None:
            n, c, h, w = self.dims[:4]
            self.scratch = [
                [device_int64(() if m is None else m, plan) for m in self.maps],
                device_int64(self.dims, plan),
                cuda.device_array(self.groups * self.k * self.columns, dtype),
                cuda.device_array(self.groups * self.columns * self.o_per_group, dtype),
                cuda.device_array(self.groups * self.k * self.o_per_group, dtype),
                cuda.device_array(n * c * h * w, dtype) if self.x.kind == "scalar" else None,
            ]
        (x_map, g_map, out_map), dims, cols, gt, product, dense = self.scratch
        out = env[self.out]
        if self.columns == 0:  # an empty batch: a zero gradient
            fill[plan.target.launch(out.size)](out, zero)
            return
        if dense is None:  # a buffer, read through its map by the im2col kernel
            x, x_cols_map = env[self.x.base], x_map
        else:  # a broadcast Python number: made dense through its map (a pad's -1 reads zero)
            src = source(self.x, env, scalars, plan)
            copy_view[plan.target.launch(dense.size)](dense, src, x_map, zero)
            x, x_cols_map = dense, x_map[:0]  # an empty int64 map: the kernel reads dense directly
        im2col_kernel[plan.target.launch(cols.size)](cols, x, x_cols_map, dims, zero)
        copy_view[plan.target.launch(gt.size)](gt, source(self.g, env, scalars, plan), g_map, zero)
        plan.target.matmul(product, cols, gt, self.groups, self.k, self.columns, self.o_per_group, dtype)
        copy_view[plan.target.launch(out.size)](out, product, out_map, zero)


@dataclass
class CudaConvTransposeStep(CudaConvStep):
    """conv_transpose2d on the device: x as a (C_in, N*H*W) matrix (one kernel, through x's
    map), the weights transposed per group (one kernel), the grouped product through
    ``CudaTarget.matmul`` into the columns (C_out*kH*kW, N*H*W), and one kernel gathering each
    output element's taps (the CUDA library's col2im_kernel). Fields as CudaConvStep's with
    ``o_per_group`` = C_out/G*kH*kW, ``k`` = C_in/G, ``columns`` = N*H*W; ``dims`` (N, C_in, H,
    W, C_out, kH, kW, oH, oW, sH, sW, top, left, dH, dW)."""

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import channels_first_kernel, col2im_kernel, transpose_groups_kernel

        if self.scratch is None:
            self._prepare(plan)  # (x matrix, columns: the base's columns and product sizes)
            self.scratch.append(plan.target.cuda.device_array(self.groups * self.o_per_group * self.k, self.x.dtype))
        dtype, (_, _, dims, xm, cols, _, wt) = self.x.dtype, self.scratch
        zero = np.dtype(dtype).type(0)
        x, x_map = self.operand(0, plan, env, scalars)
        w, _ = self.operand(1, plan, env, scalars)
        n, c, h, wd = self.dims[:4]
        channels_first_kernel[plan.target.launch(xm.size)](
            xm, x, x_map, np.int64(n), np.int64(c), np.int64(h * wd), zero
        )
        transpose_groups_kernel[plan.target.launch(wt.size)](wt, w, np.int64(self.k), np.int64(self.o_per_group))
        plan.target.matmul(cols, wt, xm, self.groups, self.o_per_group, self.k, self.columns, dtype)
        out = env[self.out]
        col2im_kernel[plan.target.launch(out.size)](out, cols, dims, zero)


@dataclass
class HostStep:
    """A host step run on host copies of its operands; its results are copied back."""

    step: object  # a lowering.reference.ReferenceStep: an op with no device step
    entries: list = field(repr=False)

    @property
    def name(self) -> str:
        return f"host {self.step.name}"

    def reads(self):
        return self.step.reads()

    def writes(self):
        return self.step.writes()

    def __call__(self, plan, env, scalars):
        host: dict = {}
        for p in self.reads():
            host[p] = plan.to_host(env[p], self.entries[p].shape)
        for p in self.writes():
            host[p] = np.empty(self.entries[p].shape, dtype=self.entries[p].dtype.np)
        plan.stats["host_steps_run"] = plan.stats.get("host_steps_run", 0) + 1
        self.step(host, None, scalars)
        for p in self.writes():
            plan.count("host_to_device", host[p].nbytes)
            env[p].copy_to_device(np.ascontiguousarray(host[p]).reshape(-1))


def c_strides(shape) -> tuple:
    strides, n = [], 1
    for size in reversed(shape):
        strides.append(n)
        n *= size
    return tuple(reversed(strides))


def device_int64(a, plan) -> object:
    """A flat device copy of host int64 data (a map, strides), made once per step (counted)."""
    return plan.to_device(np.asarray(a, dtype=np.int64))


def source(chain, env, scalars, plan):
    """The flat device array a chain reads: its buffer, or a one-element copy of its scalar
    (one per plan and scalar slot, sent when the value changes)."""
    kind, base, _, dtype = chain
    if kind == "buffer":
        return env[base]
    copy = plan.scalar_copies.setdefault((base, np.dtype(dtype).str), DeviceCopy())
    return copy.of(np.array([scalars[base]], dtype=dtype), plan)


@dataclass
class CudaRandomStep:
    """rand or randn on the device (the CUDA library's rand_kernel_f32 / _f64, randn_kernel):
    the CPU's Philox words (and Box-Muller for randn)."""

    name: str
    out: int
    seed: tuple  # operand chains of the (seed, offset) scalars
    offset: tuple
    normal: bool = True  # randn (a thread per pair of words); else rand (a thread per word)

    def writes(self):
        return (self.out,)

    def reads(self):
        return ()

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda import kernel_lib

        out = env[self.out]
        if self.normal:
            kernel, work = kernel_lib.randn_kernel, (out.size + 1) // 2
        elif out.dtype.itemsize == 8:
            kernel, work = kernel_lib.rand_kernel_f64, out.size
        else:
            kernel, work = kernel_lib.rand_kernel_f32, out.size
        blocks, threads = plan.target.launch(max(1, work))
        seed, offset = (np.dtype(c.dtype).type(scalars[c.base]) for c in (self.seed, self.offset))
        kernel[blocks, threads](out, seed, offset)
