"""The CPU backend: Numba kernels (``lowering/cpu/codegen.py``), BLAS through NumPy, a CpuPlan.

Library groups: matmul (BLAS), conv2d and its weight gradient (im2col copies and one BLAS
product), max_pool2d and the average pools (window kernels), scatter_add (a compiled kernel),
cat (NumPy copies of the pieces), the LSTM and GRU recurrences (a BLAS product and a cell
kernel per time step) and the linear-algebra decompositions (LAPACK through NumPy); any other op without a kernel runs its NumPy reference inside the plan
and is reported as a fallback.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Callable

import numba
import numpy as np

from lazyvic import ops as optable
from lazyvic.lowering import kernel_lib
from lazyvic.lowering.backend import Backend
from lazyvic.lowering.cpu import codegen, direct_conv, kernel_cache
from lazyvic.lowering.cpu.plan import CpuPlan, allocate_output
from lazyvic.lowering.cpu.steps import (
    AvgPoolStep,
    CatStep,
    ConvStep,
    ConvTransposeStep,
    ConvWeightStep,
    DirectConvStep,
    IndexCheckStep,
    KernelStep,
    MatmulStep,
    PoolStep,
    RandStep,
    RecurrentStep,
    ReferenceStep,
    ScatterAddStep,
    split_kind,
)
from lazyvic.lowering.cpu.team import Team
from lazyvic.lowering.pipeline import gathers, plan_in_place
from lazyvic.lowering.reference import reference_step
from lazyvic.ops import avg_pool
from lazyvic.trace import symbolic


def _matmul_step(lowered, root: int, args: list) -> MatmulStep | None:
    e = lowered.entries[root]
    if not e.dtype.is_floating_point:
        return None  # an integer product: NumPy's exact integer matmul (a reference step; no BLAS)
    a, b = (tuple(symbolic.hint(v) for v in lowered.entries[i].shape) for i in e.inputs)
    step = MatmulStep(f"matmul{e.shape}", root, args[0], args[1], lowered.entries[e.inputs[0]].shape[-1], run=Team())
    step.in_pieces = split_kind(a, b) != 0
    return step


def _scratch_bytes(entries, steps) -> int:
    """Bytes of the scratch buffers the plan's convolution, recurrent and half-type rand steps
    use per run, at the sizes the plan is lowered with (a symbolic size at its hint)."""
    total = 0
    for st in steps:
        if isinstance(st, (DirectConvStep, RecurrentStep, RandStep)):
            total += st.scratch
        elif isinstance(st, (ConvStep, ConvTransposeStep)):
            e = entries[st.out]
            x_shape, w_shape = (tuple(symbolic.hint(v) for v in entries[i].shape) for i in e.inputs)
            total += st.scratch_bytes(x_shape, w_shape, tuple(symbolic.hint(v) for v in e.shape), e.dtype.itemsize)
    return total


def _conv_transpose_step(lowered, root: int, args: list) -> ConvTransposeStep:
    """A conv_transpose2d: one BLAS product and col2im (a serial Numba kernel) per chunk of images;
    a depthwise one (C_in groups of one channel each) a direct kernel (direct_conv.depthwise_transpose)."""
    from lazyvic.lowering.cpu import im2col
    from lazyvic.ops import conv, conv_transpose

    entries = lowered.entries
    e = entries[root]
    x_shape, w_shape = entries[e.inputs[0]].shape, entries[e.inputs[1]].shape
    cin, cog, kh, kw = w_shape
    if cog == 1 and e.attrs["groups"] == cin:  # depthwise: a direct kernel, no columns
        at = e.attrs
        (sh, sw), (pt, pl), (dh, dw) = at["stride"], at["padding"], at["dilation"]
        kernel_args = (sh, sw, pt, pl, dh, dw)
        return DirectConvStep(
            f"depthwise_conv_transpose2d{e.shape}",
            root,
            args[0],
            args[1],
            direct_conv.DepthwiseTranspose(),
            kernel_args,
        )
    # flops = 2 * N*H*W * C_in * C_out/G * T, given to the plan's BLAS policy as k per output element
    per_out = (x_shape[2] * x_shape[3] * (cin // e.attrs["groups"]) * cog * kh * kw) // max(
        1, e.shape[1] * e.shape[2] * e.shape[3]
    )
    return ConvTransposeStep(
        f"conv_transpose2d{e.shape}",
        root,
        args[0],
        args[1],
        e.attrs,
        conv_transpose.transposed_columns,
        im2col.col2im,
        conv.images_per_chunk,
        max(1, per_out),
        run=Team(),
    )


def _conv_step(lowered, root: int, args: list) -> ConvStep:
    """A conv2d: zero padding and im2col (Numba kernels) and BLAS products in pieces
    (lowering/cpu/team.py); a 1x1 one products alone, a depthwise one a direct kernel.

    The copies and products run on Numba's threads only in plans whose BLAS runs on one thread
    (``make_plan``: one thread team); elsewhere the copies are serial: a parallel im2col beside
    multithreaded BLAS fought with its spinning threads (ResNet-18 batch 32, 2 cores: the 7x7
    stem convolution took 6.3 ms with a parallel im2col against 1.4 ms serial)."""
    from lazyvic.ops import conv

    entries = lowered.entries
    e = entries[root]
    if e.op == "conv_transpose2d":
        return _conv_transpose_step(lowered, root, args)
    x_shape, w_shape = entries[e.inputs[0]].shape, entries[e.inputs[1]].shape
    if e.op == "conv2d_weight":  # w_shape is the output gradient's (N, O, oH, oW)
        rows, cols = conv.taps(x_shape, e.shape, e.attrs, w_shape[2:])
        # flops = 2 * N*oH*oW * O * Cg*T: the plan's BLAS policy reads k per output element
        k = max(1, (w_shape[0] * w_shape[2] * w_shape[3] * len(rows) * len(cols)) // (e.shape[2] * e.shape[3]))
        name = f"conv2d_weight{e.shape}"
        return _im2col_step(ConvWeightStep, name, root, args, e.attrs, conv.weight_gemm, k, spread=conv.spread_taps)
    if conv.is_depthwise(x_shape, w_shape, e.attrs):
        (sh, sw), (pt, _, pl, _), (dh, dw) = e.attrs["stride"], e.attrs["padding"], e.attrs["dilation"]
        live = tuple(np.array(t, dtype=np.int64) for t in conv.taps(x_shape, w_shape, e.attrs, e.shape[2:]))
        kernel_args = (*live, sh, sw, pt, pl, dh, dw)
        hinted = [tuple(symbolic.hint(v) for v in shape) for shape in (x_shape, w_shape, e.shape)]
        scratch = direct_conv.depthwise_scratch(*hinted, e.attrs) * e.dtype.itemsize
        return DirectConvStep(
            f"depthwise_conv2d{e.shape}", root, args[0], args[1], direct_conv.Depthwise(), kernel_args, 0, scratch
        )
    if conv.is_pointwise(x_shape, w_shape, e.attrs):
        kernel_args = (e.attrs["groups"], Team())
        return DirectConvStep(
            f"conv2d_1x1{e.shape}", root, args[0], args[1], conv.pointwise_product, kernel_args, w_shape[1]
        )
    rows, cols = conv.taps(x_shape, w_shape, e.attrs, e.shape[2:])
    k = w_shape[1] * len(rows) * len(cols)
    return _im2col_step(ConvStep, f"conv2d{e.shape}", root, args, e.attrs, conv.conv_gemm, k)


def _im2col_step(cls, name: str, root: int, args: list, attrs: dict, gemm, k: int, **extra):
    """A ConvStep (or ConvWeightStep): the padding and im2col kernels, ``gemm`` and the shared layout functions."""
    from lazyvic.lowering.cpu import im2col
    from lazyvic.ops import conv

    return cls(
        name,
        root,
        args[0],
        args[1],
        attrs,
        im2col.im2col,
        im2col.pad_into,
        gemm,
        conv.taps,
        conv.tap_weights,
        conv.images_per_chunk,
        k,
        run=Team(),
        **extra,
    )


def _pool_step(lowered, root: int, args: list) -> PoolStep | AvgPoolStep:
    from lazyvic.lowering.cpu import pool_kernels

    e = lowered.entries[root]
    average = avg_pool.AVERAGE_POOLS.get(e.op)
    if average is not None:
        windows, transposed = average
        kernel = pool_kernels.avg_pool2d_backward if transposed else pool_kernels.avg_pool2d
        tables = functools.partial(pool_kernels.avg_pool_arguments, windows, transposed, e.attrs)
        return AvgPoolStep(f"{e.op}{e.shape}", root, args[0], kernel, tables)
    if e.op == "max_pool2d_indices":
        return PoolStep(f"{e.op}{e.shape}", root, args[0], e.attrs, pool_kernels.max_pool2d_indices, args[1])
    return PoolStep(f"{e.op}{e.shape}", root, args[0], e.attrs, pool_kernels.max_pool2d)


def _recurrent_step(lowered, root: int, args: list) -> RecurrentStep:
    from lazyvic.lowering.cpu import recurrent_kernels

    e = lowered.entries[root]
    loop, cell = {
        "lstm_scan": (recurrent_kernels.lstm_forward, recurrent_kernels.lstm_forward_cell),
        "lstm_scan_backward": (recurrent_kernels.lstm_backward, recurrent_kernels.lstm_backward_cell),
        "gru_scan": (recurrent_kernels.gru_forward, recurrent_kernels.gru_forward_cell),
        "gru_scan_backward": (recurrent_kernels.gru_backward, recurrent_kernels.gru_backward_cell),
        # an Elman RNN's loops take the nonlinearity where the others take their cell
        "rnn_scan": (recurrent_kernels.rnn_forward, None),
        "rnn_scan_backward": (recurrent_kernels.rnn_backward, None),
    }[e.op]
    if cell is None:
        cell = e.attrs["nonlinearity"] == "relu"
    hinted = [tuple(symbolic.hint(v) for v in lowered.entries[i].shape) for i in e.inputs]
    out_shape = tuple(symbolic.hint(v) for v in e.shape)
    scratch = recurrent_kernels.scratch_bytes(e.op, hinted, out_shape, e.dtype.itemsize)
    # an operand ending in a pad is copied into a zeroed buffer the step keeps (RecurrentStep)
    scratch += sum(
        math.prod(hinted[i]) * e.dtype.itemsize for i, c in enumerate(args) if c.ops and c.ops[-1][0].name == "pad"
    )
    return RecurrentStep(f"{e.op}{e.shape}", root, tuple(args), loop, cell, e.attrs["reverse"], scratch)


def _scatter_step(lowered, root: int, args: list) -> ScatterAddStep:
    e = lowered.entries[root]
    return ScatterAddStep(f"{e.op}{e.shape}", root, tuple(args), e.attrs["dim"], kernel_lib.scatter_add_into)


def _random_step(lowered, root: int, args: list) -> RandStep | None:
    """rand into a float buffer (random_kernels.py; the half types through float32 scratch);
    randn runs its NumPy reference (None)."""
    e = lowered.entries[root]
    if e.op != "rand" or e.dtype.category != 2:
        return None
    step = RandStep(f"{e.op}{e.shape}", root, args[0], args[1], half=e.dtype.is_half)
    if step.half:
        step.scratch = 4 * math.prod(symbolic.hint(v) for v in e.shape)
    return step


def _cat_step(lowered, root: int, args: list) -> CatStep:
    e = lowered.entries[root]
    return CatStep(f"{e.op}{e.shape}", root, tuple(args), e.attrs["axis"])


# Elementwise kernels write over a buffer that dies in them (pipeline.plan_in_place).
IN_PLACE = True

# Library step of each op kind the CPU has one for (the others run their NumPy reference).
LIBRARY_STEPS = {
    "matmul": _matmul_step,
    "conv": _conv_step,
    "pool": _pool_step,
    "scatter": _scatter_step,
    "join": _cat_step,
    "recurrent": _recurrent_step,
    "random": _random_step,
    # A collective is its reference (it sends through lazyvic.distributed's transport): a step of
    # its own, not a fallback.
    "collective": lambda lowered, root, args: reference_step(lowered.entries, root, args),
    # Decompositions and solvers (ops/linalg.py): LAPACK through NumPy is their implementation, so
    # their reference is their step, not a fallback.
    "linalg": lambda lowered, root, args: reference_step(lowered.entries, root, args),
}


class CpuBackend(Backend):
    """Lowers traces to :class:`~lazyvic.lowering.cpu.plan.CpuPlan`.

    ``allocate(shape, dtype, aligned)`` makes a plan's output arrays (the runtime hands its
    buffer pool, ``lazyvic.runtime.buffers.take``; by default a fresh 64-byte aligned array).
    """

    device = "cpu"
    plan_prefix = "plan_"

    def __init__(
        self,
        allocate: Callable = allocate_output,
        max_kernels: int | None = None,
        native_after: int = 0,
        native_background: bool = False,
    ):
        self.allocate = allocate
        self.max_kernels = max_kernels  # compiled kernels kept loaded (None: no bound)
        self.native_after = native_after  # runs after which a plan runs native segments (0: never)
        self.native_background = native_background  # their compile in a worker process

    def default_cache_dir(self):
        return Path.home() / ".cache" / "lazyvic"

    def generate(self, entries, materialized, group, alias=frozenset()):
        return codegen.generate(entries, materialized, group, alias)

    def prepare(self, lowered) -> None:
        if IN_PLACE:
            plan_in_place(lowered, self.generate)
        scalar_dtypes = lowered.scalar_dtypes
        kernels = [
            (ks, [scalar_dtypes[s].compute.name for s in ks.scalars])
            for ks in (lowered.sources.get(g.root) for g in lowered.groups)
            if ks is not None
        ]
        kernel_cache.prefetch(kernels, lowered.cache_dir, lowered.stats, self.max_kernels)

    def kernel_steps(self, lowered, group, ks) -> list:
        steps = [
            IndexCheckStep(f"check {op} index", index, size, op, asked_by=asked_by)
            for op, index, _, size, asked_by in gathers(lowered, group)
        ]
        scalar_dtypes = lowered.scalar_dtypes
        fn = kernel_cache.load(
            ks, lowered.cache_dir, [scalar_dtypes[s].compute.name for s in ks.scalars], lowered.stats, self.max_kernels
        )
        steps.append(
            KernelStep(
                ks.name,
                fn,
                group.root,
                tuple(ks.buffers),
                tuple((s, scalar_dtypes[s].compute.np.type) for s in ks.scalars),
                tuple((np.dtype(d), slots) for d, slots in ks.packed),
                ks.source,
                tuple(group.extra_roots),
                ks.parallel,
                tuple(ks.sizes),
            )
        )
        return steps

    def describe_kernel(self, ks, group) -> str:
        return (
            f"kernel {ks.name}: space {group.space_shape} reduce {group.space_axes} "
            f"stages {len(group.stages)} ops {len(group.members)}"
        )

    def library_step(self, lowered, group, args):
        make = LIBRARY_STEPS.get(optable.OPS[lowered.entries[group.root].op].kind)
        return make(lowered, group.root, args) if make is not None else None

    def reference_step(self, lowered, group, args) -> ReferenceStep:
        return reference_step(lowered.entries, group.root, args)

    def make_plan(self, lowered, name, steps, input_pos, out_specs, memory, fallbacks, seconds) -> CpuPlan:
        plan = CpuPlan(
            name,
            lowered.entries,
            steps,
            input_pos,
            out_specs,
            memory,
            lowered.groups,
            fallbacks,
            lowered.stats,
            allocate=self.allocate,
            native_after=self.native_after,
            native_background=self.native_background,
            cache_dir=lowered.cache_dir,
        )
        # BLAS on one thread wherever a step calls it, products large enough for two threads in
        # pieces on Numba's (the comment above plan.BLAS_KINDS): whatever the sizes, the machine
        # or its load, so a plan of symbolic sizes makes no choice of threads per binding.
        # Products in pieces and depthwise convolutions run on that one thread team
        # (lowering/cpu/team.py); a depthwise one then has scratch per thread.
        teams = _teams(steps)
        blas = (MatmulStep, ConvStep, ConvTransposeStep, RecurrentStep)
        uses_blas = any(isinstance(s, blas) for s in steps) or any(isinstance(t, Team) for _, t in teams)
        plan.blas_threads = 1 if uses_blas else None
        if teams:
            plan.team = True
            for st, t in teams:
                t.team = True
                if isinstance(t, direct_conv.Depthwise):
                    st.scratch *= numba.config.NUMBA_NUM_THREADS
        scratch = _scratch_bytes(lowered.entries, steps)
        if scratch:
            plan.memory = dataclasses.replace(memory, scratch_bytes=scratch)
        return plan


def _teams(steps) -> list:
    """``(step, runner)`` of each step that can run on Numba's threads: its products' Team
    (lowering/cpu/team.py), its depthwise kernel (lowering/cpu/direct_conv.Depthwise), a
    recurrent forward (its groups of units: recurrent_kernels.forward_loop_parallel) or an LSTM's
    backward (recurrent_kernels.lstm_backward_loop_parallel), rand's draws (RandStep)."""
    found = []
    for st in steps:
        if isinstance(getattr(st, "run", None), Team) and getattr(st, "in_pieces", True):
            found.append((st, st.run))  # (a product too small for pieces needs no team)
        if isinstance(st, DirectConvStep):
            runners = (Team, direct_conv.Depthwise, direct_conv.DepthwiseTranspose)
            found += [(st, t) for t in (st.kernel, *st.args) if isinstance(t, runners)]
        if isinstance(st, RecurrentStep) and not st.name.startswith(("gru_scan_backward", "rnn_scan_backward")):
            found.append((st, st))
        if isinstance(st, RandStep):
            found.append((st, st))
    return found


def compile_trace(trace, cache_dir=None, debug: int = 0) -> CpuPlan:
    """Lower ``trace`` for the CPU with a backend of default settings (outputs are fresh
    arrays, not the runtime's pool); the runtime's own backend is ``runtime.executor.backend``."""
    return CpuBackend().compile(trace, cache_dir, debug)
