"""The CUDA plan's steps that read indices: range checks, gathers at computed indices, scatter_add.

Index range checks do not stall the device: every check of a plan (an inlined gather's, a
computed gather's, scatter_add's) writes the first bad position in C order, and the index
there, into one small error buffer of the plan (``CudaPlan.errors``), and the kernels that
read indices clamp them into range (no out-of-bounds access, whatever the data). After the
last step the plan copies the buffer back once and raises lazyvic's IndexError for the first
failing check in plan order, with the CPU plan's message.

An index operand read through movement ops is an :class:`_IndexView`: its reduced map (axes
along which a broadcast repeats an element have stride 0) and strides, sent once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lazyvic.lowering.cuda.steps import c_strides, device_int64, operand_map, source


@dataclass(frozen=True)
class _IndexView:
    """An integer operand read through movement ops, as the device kernels of indices read it
    (see lowering/cuda/kernel_lib.py, "indices, scatter_add, randn"): element ``p`` of the view (C order
    over ``shape``) is element ``sum(coord_d * rstrides[d])`` of the reduced map ``rmap``
    (None: of the base itself). Axes along which a broadcast repeats the same element have
    stride 0, so an expanded index costs no map of its expanded size."""

    shape: tuple
    rstrides: tuple
    rmap: np.ndarray | None
    n: int  # elements of the reduced view


def index_view(entries, chain, shape) -> _IndexView:
    kind, base, ops, _ = chain
    if not ops:
        strides = tuple(0 if n == 1 else s for n, s in zip(shape, c_strides(shape)))
        return _IndexView(tuple(shape), strides, None, math.prod(shape))
    base_shape = () if kind == "scalar" else entries[base].shape
    a = np.arange(math.prod(base_shape), dtype=np.int64).reshape(base_shape) + 1
    for opdef, attrs in ops:
        a = opdef.reference([a], attrs)
    a = np.asarray(a, dtype=np.int64) - 1
    constant = [a.shape[d] == 1 or bool(np.all(a == a.take([0], axis=d))) for d in range(a.ndim)]
    reduced = np.ascontiguousarray(a[tuple(0 if c else slice(None) for c in constant)]).reshape(-1)
    kept = c_strides([n for n, c in zip(a.shape, constant) if not c])
    it = iter(kept)
    rstrides = tuple(0 if c else next(it) for c in constant)
    if kind == "buffer" and reduced.size == math.prod(base_shape) and np.array_equal(reduced, np.arange(reduced.size)):
        reduced = None
    return _IndexView(
        tuple(a.shape), rstrides, reduced, int(math.prod(a.shape[d] for d in range(a.ndim) if not constant[d]))
    )


class _DeviceIndex:
    """An :class:`_IndexView` on the device, and its range check."""

    def __init__(self, view: _IndexView, plan):
        self.view = view
        self.rmap = device_int64(view.rmap if view.rmap is not None else np.zeros(0, np.int64), plan)
        self.shape = device_int64(view.shape, plan)
        self.rstrides = device_int64(view.rstrides, plan)

    def check(self, plan, index, size: int, check: int) -> None:
        """Find the first index outside ``[0, size)`` in C order of the view, as the CPU plan's
        check does, into check ``check`` of the plan's error buffer; nothing comes back now
        (see ``CudaPlan.raise_index_error``)."""
        from lazyvic.lowering.cuda.kernel_lib import index_check, index_check_value

        n = np.int64(self.view.n)
        if not n:
            return
        at = np.int64(plan.ERROR_WORDS * check)
        blocks, threads = plan.target.launch(int(n))
        index_check[blocks, threads](plan.errors, at, index, self.rmap, n, np.int64(size))
        index_check_value[1, 1](plan.errors, at, index, self.rmap, n)


@dataclass
class CudaIndexCheckStep:
    """Range check of a gather index on the device, before the kernel that reads it (clamped:
    see lowering/cuda/codegen.py); the CPU's IndexCheckStep's rule and message, raised after the plan's
    last step."""

    name: str
    index: tuple  # lowering.pipeline.Operand
    size: int  # valid indices are 0 .. size - 1
    op: str
    view: _IndexView = field(repr=False)
    device: _DeviceIndex = field(default=None, repr=False)
    check: int = -1  # its place in the plan's error buffer (set by _compile)
    asked_by: str | None = None  # the op a class index is checked for (ops/index.py)

    def writes(self):
        return ()

    def reads(self):
        return (self.index.base,) if self.index.kind == "buffer" else ()

    def index_check(self) -> tuple:
        return self.op, self.size, self.view.n, self.asked_by

    def __call__(self, plan, env, scalars):
        if self.device is None:
            self.device = _DeviceIndex(self.view, plan)
        self.device.check(plan, source(self.index, env, scalars, plan), self.size, self.check)


@dataclass
class CudaGatherStep:
    """A gather whose index is computed in the same trace (fusion makes it a library op): the
    range check, then one thread per output element (the CUDA library's gather_dim, clamping the
    indices)."""

    name: str
    out: int
    x: tuple  # lowering.pipeline.Operand
    index: tuple
    dim: int
    size: int  # x's size along dim
    x_shape: tuple  # of x's view
    x_map: np.ndarray | None = field(repr=False)
    view: _IndexView = field(repr=False)
    scratch: list = field(default=None, repr=False)
    check: int = -1  # its place in the plan's error buffer (set by _compile)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.x, self.index) if c.kind == "buffer")

    def index_check(self) -> tuple:
        return "gather", self.size, self.view.n, None

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import gather_dim

        if self.scratch is None:
            self.scratch = [
                _DeviceIndex(self.view, plan),
                device_int64(self.x_map if self.x_map is not None else (), plan),
                device_int64(c_strides(self.x_shape), plan),
            ]
        index_dev, x_map, x_strides = self.scratch
        index = source(self.index, env, scalars, plan)
        index_dev.check(plan, index, self.size, self.check)
        out = env[self.out]
        if not self.size:  # nothing to read: a non-empty index fails its check
            return
        blocks, threads = plan.target.launch(out.size)
        gather_dim[blocks, threads](
            out,
            source(self.x, env, scalars, plan),
            x_map,
            index,
            index_dev.rmap,
            index_dev.shape,
            index_dev.rstrides,
            x_strides,
            np.int64(self.dim),
            np.int64(self.size),
            np.dtype(self.x.dtype).type(0),
        )


@dataclass
class CudaScatterAddStep:
    """scatter_add on the device, deterministic and bit-identical to the CPU's serial kernel
    (``kernel_lib.scatter_add_into``): each output adds its sources in the order of the
    index's positions, with no atomics.

    1. the output is a copy of the base; the indices are range-checked (as on the CPU, but
       raised after the plan's last step: the keys clamp the indices into range);
    2. a key per *row*: the output position each index position adds to; or, when the
       index repeats along every axis but ``dim`` (an embedding's (N,) ids expanded to
       (N, D)), one key per index row along ``dim``, shared by the D *columns*;
    3. the rows are stably sorted by key: CuPy (a device sort) when importable, else on the
       host (only the keys travel: N int64 for an embedding);
    4. one thread per (run of equal keys, column) adds the run's sources in order
       (the CUDA library's scatter_add_sorted): O(N * D) work for an embedding's backward.
    """

    name: str
    out: int
    base: tuple  # lowering.pipeline.Operand
    index: tuple
    src: tuple
    dim: int
    size: int  # the output's size along dim
    base_map: np.ndarray | None = field(repr=False)
    src_map: np.ndarray | None = field(repr=False)
    view: _IndexView = field(repr=False)
    key_view: _IndexView = field(repr=False)  # the positions that get a key (rows)
    out_strides: tuple = ()
    row_stride: int = 1  # a row's stride in the source (columns * ... when shared)
    col_out: np.ndarray = field(default=None, repr=False)  # per column: output offset
    col_src: np.ndarray = field(default=None, repr=False)  # per column: source offset
    scratch: list = field(default=None, repr=False)
    check: int = -1  # its place in the plan's error buffer (set by _compile)

    def writes(self):
        return (self.out,)

    def reads(self):
        return tuple(c.base for c in (self.base, self.index, self.src) if c.kind == "buffer")

    def index_check(self) -> tuple:
        return "scatter_add", self.size, self.view.n, None

    def _prepare(self, plan):
        cuda = plan.target.cuda
        rows = math.prod(self.key_view.shape)
        check = _DeviceIndex(self.view, plan)
        self.scratch = [
            check,
            check if self.key_view is self.view else _DeviceIndex(self.key_view, plan),
            device_int64(self.base_map if self.base_map is not None else (), plan),
            device_int64(self.src_map if self.src_map is not None else (), plan),
            device_int64(self.out_strides, plan),
            device_int64(self.col_out, plan),
            device_int64(self.col_src, plan),
            cuda.device_array(rows, np.int64),
            cuda.device_array(rows, np.int64),
            cuda.device_array(rows, np.int64),
        ]

    def _sort(self, plan, keys, order, skeys):
        """``order``: the rows stably sorted by ``keys``; ``skeys``: the keys in that order."""
        cupy = plan.target.cupy
        if cupy is not None:
            k = cupy.asarray(keys)
            perm = cupy.argsort(k)  # CuPy's sorts are stable (thrust)
            return perm, k[perm]
        host = plan.to_host(keys, (keys.size,))
        perm = np.argsort(host, kind="stable")
        plan.stats["host_sorts"] = plan.stats.get("host_sorts", 0) + 1
        for d, a in ((order, perm), (skeys, host[perm])):
            plan.count("host_to_device", a.nbytes)
            d.copy_to_device(np.ascontiguousarray(a, dtype=np.int64))
        return order, skeys

    def __call__(self, plan, env, scalars):
        from lazyvic.lowering.cuda.kernel_lib import copy_view, fill, scatter_add_sorted, scatter_keys

        if self.scratch is None:
            self._prepare(plan)
        check, keyed, base_map, src_map, out_strides, col_out, col_src, keys, order, skeys = self.scratch
        out, zero = env[self.out], np.dtype(self.src.dtype).type(0)
        blocks, threads = plan.target.launch(out.size)
        if self.base.kind == "scalar" and (self.base_map is None or not (self.base_map < 0).any()):
            fill[blocks, threads](out, np.dtype(self.base.dtype).type(scalars[self.base.base]))
        else:
            copy_view[blocks, threads](out, source(self.base, env, scalars, plan), base_map, zero)
        index = source(self.index, env, scalars, plan)
        check.check(plan, index, self.size, self.check)
        if not keys.size or not self.size:  # nothing to add to: a non-empty index fails its check
            return
        blocks, threads = plan.target.launch(keys.size)
        scatter_keys[blocks, threads](
            keys, index, keyed.rmap, keyed.shape, keyed.rstrides, out_strides, np.int64(self.dim), np.int64(self.size)
        )
        order, skeys = self._sort(plan, keys, order, skeys)
        blocks, threads = plan.target.launch(keys.size * self.col_out.size)
        scatter_add_sorted[blocks, threads](
            out,
            source(self.src, env, scalars, plan),
            src_map,
            order,
            skeys,
            col_out,
            col_src,
            np.int64(self.row_stride),
            zero,
        )


def scatter_add_step(entries, root: int, args: list) -> CudaScatterAddStep:
    e = entries[root]
    op, out_shape = e.op, e.shape
    dim, shape = e.attrs["dim"], entries[e.inputs[1]].shape
    view = index_view(entries, args[1], shape)
    out_strides = c_strides(out_shape)
    if all(s == 0 for d, s in enumerate(view.rstrides) if d != dim):
        # The index repeats along every other axis: rows along dim, shared by the columns.
        key_shape = tuple(n if d == dim else 1 for d, n in enumerate(shape))
        key_view = _IndexView(key_shape, view.rstrides, view.rmap, view.n)
        col_shape = tuple(1 if d == dim else n for d, n in enumerate(shape))
        coords = np.indices(col_shape).reshape(len(shape), -1)
        col_out = (coords * np.array(out_strides, dtype=np.int64)[:, None]).sum(0)
        col_src = (coords * np.array(c_strides(shape), dtype=np.int64)[:, None]).sum(0)
        row_stride = math.prod(shape[dim + 1 :])
    else:
        key_view, col_out, col_src, row_stride = view, np.zeros(1, np.int64), np.zeros(1, np.int64), 1
    return CudaScatterAddStep(
        f"{op}{out_shape}",
        root,
        args[0],
        args[1],
        args[2],
        dim,
        out_shape[dim],
        operand_map(entries, args[0]),
        operand_map(entries, args[2]),
        view,
        key_view,
        out_strides,
        row_stride,
        col_out.astype(np.int64),
        col_src.astype(np.int64),
    )
