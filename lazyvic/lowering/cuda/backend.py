"""The CUDA backend: trace -> :class:`~lazyvic.lowering.cuda.plan.CudaPlan` (numba-cuda kernels
on device arrays).

The trace is lowered exactly as for the CPU (``lowering/pipeline.py``): the same passes, the
same fusion groups, the same memory plan. Only code generation (``lowering/cuda/codegen.py``)
and the steps differ: generated kernels (loaded by ``lowering/cuda/loader.py``), matmul and
conv2d through ``CudaTarget.matmul``, max_pool2d, the average pools, cat, gathers at computed
indices, scatter_add, rand and randn through fixed kernels of the CUDA library; any other op runs its
NumPy reference on host copies (a HostStep, reported as a fallback).

``numba.cuda`` is imported only when a plan is compiled, so this module loads on machines
without CUDA. The runtime makes the backend with a :class:`CudaTarget` describing the device
(``lazyvic.runtime.executor.backend``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from lazyvic import ops as optable
from lazyvic.errors import DTypeError
from lazyvic.lowering.backend import Backend
from lazyvic.lowering.cuda import codegen
from lazyvic.lowering.cuda.index_steps import CudaGatherStep, CudaIndexCheckStep, index_view, scatter_add_step
from lazyvic.lowering.cuda.plan import CudaPlan
from lazyvic.lowering.cuda.steps import (
    CudaAvgPoolStep,
    CudaCatStep,
    CudaConvStep,
    CudaConvTransposeStep,
    CudaConvWeightStep,
    CudaKernelStep,
    CudaMatmulStep,
    CudaMaxPoolStep,
    CudaRandomStep,
    HostStep,
    conv_dims,
    operand_map,
)
from lazyvic.lowering.cuda.target import CudaTarget
from lazyvic.lowering.pipeline import gathers
from lazyvic.lowering.reference import reference_step
from lazyvic.ops import avg_pool


def _matmul_step(entries, root: int, args: list) -> CudaMatmulStep:
    e = entries[root]
    shape = e.shape
    return CudaMatmulStep(
        f"matmul{shape}",
        root,
        args[0],
        args[1],
        math.prod(shape[:-2]),
        shape[-2],
        entries[e.inputs[0]].shape[-1],
        shape[-1],
        (operand_map(entries, args[0]), operand_map(entries, args[1])),
    )


def _conv_transpose_step(entries, root: int, args: list) -> CudaConvTransposeStep:
    e = entries[root]
    groups, at = e.attrs["groups"], e.attrs
    n, cin, h, w = entries[e.inputs[0]].shape
    _, cog, kh, kw = entries[e.inputs[1]].shape
    (sh, sw), (pt, pl), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    dims = (n, cin, h, w, e.shape[1], kh, kw, e.shape[2], e.shape[3], sh, sw, pt, pl, dh, dw)
    return CudaConvTransposeStep(
        f"conv_transpose2d{e.shape}",
        root,
        args[0],
        args[1],
        groups,
        cog * kh * kw,
        cin // groups,
        n * h * w,
        dims,
        (operand_map(entries, args[0]), operand_map(entries, args[1])),
    )


def _conv_weight_step(entries, root: int, args: list) -> CudaConvWeightStep:
    """conv2d_weight: the gathers' maps made here, once (see CudaConvWeightStep)."""
    e = entries[root]
    groups = e.attrs["groups"]
    o, cg, kh, kw = e.shape
    n, c, h, w = entries[e.inputs[0]].shape
    g_shape = entries[e.inputs[1]].shape
    hw = g_shape[2] * g_shape[3]
    og, k = o // groups, cg * kh * kw
    at = e.attrs
    (sh, sw), (pt, _, pl, _), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    dims = (n, c, h, w, cg, kh, kw, g_shape[2], g_shape[3], sh, sw, pt, pl, dh, dw)
    # g (N, G, O/G, oH*oW), through its movement ops, read as (G, N*oH*oW, O/G).
    logical = operand_map(entries, args[1])
    if logical is None:
        logical = np.arange(n * o * hw, dtype=np.int64)
    g_map = logical.reshape(n, groups, og, hw).transpose(1, 0, 3, 2).reshape(-1)
    # The product (G, Cg*kH*kW, O/G) read as (O, Cg, kH, kW).
    out_map = np.arange(groups * k * og, dtype=np.int64).reshape(groups, k, og).transpose(0, 2, 1).reshape(-1)
    x_map = operand_map(entries, args[0])
    if args[0].kind == "scalar" and x_map is None:  # a bare number: every element reads it
        x_map = np.zeros(n * c * h * w, dtype=np.int64)
    return CudaConvWeightStep(
        f"conv2d_weight{e.shape}", root, args[0], args[1], groups, og, k, n * hw, dims, (x_map, g_map, out_map)
    )


def _conv_step(entries, root: int, args: list) -> CudaConvStep:
    e = entries[root]
    if e.op == "conv_transpose2d":
        return _conv_transpose_step(entries, root, args)
    if e.op == "conv2d_weight":
        return _conv_weight_step(entries, root, args)
    groups = e.attrs["groups"]
    o, cg, kh, kw = entries[e.inputs[1]].shape
    return CudaConvStep(
        f"conv2d{e.shape}",
        root,
        args[0],
        args[1],
        groups,
        o // groups,
        cg * kh * kw,
        e.shape[0] * e.shape[2] * e.shape[3],
        conv_dims(entries, root),
        (operand_map(entries, args[0]), operand_map(entries, args[1])),
    )


def _avg_pool_step(entries, root: int, args: list) -> CudaAvgPoolStep:
    """An average pool or its transpose: the windows' tables of ops/avg_pool.py, as the CPU's."""
    e = entries[root]
    windows, transposed = avg_pool.AVERAGE_POOLS[e.op]
    x_hw, out_hw = tuple(int(v) for v in entries[e.inputs[0]].shape[2:]), tuple(int(v) for v in e.shape[2:])
    in_hw, pooled_hw = (out_hw, x_hw) if transposed else (x_hw, out_hw)
    win = windows(e.attrs, in_hw, pooled_hw)
    tables = (win.row_start, win.row_end, win.col_start, win.col_end)
    if transposed:
        tables = (*avg_pool.covering(win.row_start, win.row_end, in_hw[0]), *avg_pool.covering(*tables[2:], in_hw[1]))
    divisor = win.divisor.astype(e.dtype.np).reshape(-1)
    return CudaAvgPoolStep(
        f"{e.op}{e.shape}",
        root,
        args[0],
        transposed,
        (*in_hw, *pooled_hw),
        (*tables, divisor),
        operand_map(entries, args[0]),
    )


def _pool_step(entries, root: int, args: list) -> CudaMaxPoolStep | CudaAvgPoolStep | None:
    e = entries[root]
    if e.op in avg_pool.AVERAGE_POOLS:
        return _avg_pool_step(entries, root, args)
    if args[0].kind != "buffer":
        return None
    (kh, kw), (sh, sw), (ph, pw) = e.attrs["kernel"], e.attrs["stride"], e.attrs["padding"]
    h, w = entries[e.inputs[0]].shape[2:]
    return CudaMaxPoolStep(
        f"{e.op}{e.shape}",
        root,
        args[0],
        (h, w, e.shape[2], e.shape[3], kh, kw, sh, sw, ph, pw),
        operand_map(entries, args[0]),
        index=e.op == "max_pool2d_indices",
    )


def _gather_step(entries, root: int, args: list) -> CudaGatherStep:
    e = entries[root]
    dim = e.attrs["dim"]
    x_shape, index_shape = entries[e.inputs[0]].shape, entries[e.inputs[1]].shape
    return CudaGatherStep(
        f"{e.op}{e.shape}",
        root,
        args[0],
        args[1],
        dim,
        x_shape[dim],
        x_shape,
        operand_map(entries, args[0]),
        index_view(entries, args[1], index_shape),
    )


def _random_step(entries, root: int, args: list) -> CudaRandomStep | None:
    e = entries[root]
    if not (args[0].kind == args[1].kind == "scalar") or e.dtype.np not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None  # the device kernels draw float32 or float64 numbers from scalar (seed, offset)
    return CudaRandomStep(f"{e.op}{e.shape}", root, args[0], args[1], normal=e.op == "randn")


def _cat_step(entries, root: int, args: list) -> CudaCatStep:
    e = entries[root]
    axis = e.attrs["axis"]
    inner = math.prod(e.shape[axis + 1 :])
    out_width = e.shape[axis] * inner
    places, start = [], 0
    for arg, j in zip(args, e.inputs):
        n = entries[j].shape[axis]
        count = math.prod(entries[j].shape)
        places.append((operand_map(entries, arg), count, n * inner, start * inner))
        start += n
    return CudaCatStep(f"{e.op}{e.shape}", root, tuple(args), tuple(places), out_width)


# Library step of each op kind CUDA has one for (None from a builder: not for these operands).
LIBRARY_STEPS = {
    "matmul": _matmul_step,
    "conv": _conv_step,
    "pool": _pool_step,
    "join": _cat_step,
    "gather": _gather_step,
    "scatter": scatter_add_step,
    "random": _random_step,
}


CUDA_DTYPES = ("bool", "int32", "int64", "float32", "float64")


class CudaBackend(Backend):
    """Lowers traces to CudaPlans running on ``target`` (see ``lowering/cuda/target.py``)."""

    device = "cuda"
    plan_prefix = "cuda_plan_"

    def __init__(self, target: CudaTarget | None = None):
        self.target = target if target is not None else CudaTarget()

    def default_cache_dir(self):
        return Path(os.environ.get("LAZYVIC_CACHE_DIR") or Path.home() / ".cache" / "lazyvic")

    def compile(self, trace, cache_dir=None, debug: int | None = None, named=None, symbols=()):
        """As :meth:`Backend.compile`; the CUDA kernels know the five original dtypes only.

        Raises:
            DTypeError: a value of another dtype (float16, bfloat16, the 8/16-bit and unsigned
                integers) in the trace: they run on the CPU for now.
        """
        for i in range(len(trace.entries)):
            d = trace.entry(i).dtype
            if d.name not in CUDA_DTYPES:
                raise DTypeError(
                    f"cuda: {d.name} tensors are not supported on the cuda device yet (it computes "
                    + ", ".join(CUDA_DTYPES)
                    + "); cast with .float() first or keep them on the cpu"
                )
        return super().compile(trace, cache_dir, debug, named, symbols)

    def default_debug(self) -> int:
        try:
            return int(os.environ.get("LAZYVIC_DEBUG", "0") or 0)
        except ValueError:
            return 0

    def generate(self, entries, materialized, group):
        return codegen.generate(entries, materialized, group)

    def kernel_steps(self, lowered, group, ks) -> list:
        from lazyvic.lowering.cuda.loader import load_kernel

        entries = lowered.entries
        steps, never_runs = [], False
        for op, index, index_shape, size, asked_by in gathers(lowered, group):
            check = CudaIndexCheckStep(
                f"check {op} index", index, size, op, index_view(entries, index, index_shape), asked_by=asked_by
            )
            never_runs |= check.size == 0 and check.view.n > 0
            steps.append(check)
        kernel = load_kernel(ks, lowered.cache_dir, lowered.stats)
        scalar_dtypes = lowered.scalar_dtypes
        steps.append(
            CudaKernelStep(
                ks.name,
                kernel,
                group.root,
                tuple(ks.buffers),
                tuple((s, scalar_dtypes[s].np.type) for s in ks.scalars),
                tuple((np.dtype(d), slots) for d, slots in ks.packed),
                ks.kind,
                ks.size,
                ks.threads,
                ks.source,
                tuple(group.extra_roots),
                never_runs,
            )
        )
        return steps

    def describe_kernel(self, ks, group) -> str:
        return (
            f"cuda kernel {ks.name} ({ks.kind}, {ks.size} x {ks.threads or 'grid-stride'}): "
            f"space {group.space_shape} reduce {group.space_axes} stages {len(group.stages)} ops {len(group.members)}"
        )

    def library_step(self, lowered, group, args):
        make = LIBRARY_STEPS.get(optable.OPS[lowered.entries[group.root].op].kind)
        return make(lowered.entries, group.root, args) if make is not None else None

    def reference_step(self, lowered, group, args) -> HostStep:
        return HostStep(reference_step(lowered.entries, group.root, args), lowered.entries)

    def make_plan(self, lowered, name, steps, input_pos, out_specs, memory, fallbacks, seconds) -> CudaPlan:
        checks = []  # the plan's error buffer: one place per index check, in plan order
        for step in steps:
            if hasattr(step, "index_check"):
                step.check = len(checks)
                checks.append(step.index_check())
        stats = lowered.stats
        stats["compile_seconds"] = seconds
        return CudaPlan(
            name,
            lowered.entries,
            steps,
            input_pos,
            out_specs,
            memory,
            lowered.groups,
            fallbacks,
            stats,
            checks=checks,
            target=self.target,
        )
