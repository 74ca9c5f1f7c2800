"""Lowering: trace -> Plan (graph passes, fusion, memory plan, CPU code generation)."""

from __future__ import annotations

import hashlib
import sys

import numpy as np

from lazyvic import ops as optable
from lazyvic.lowering import codegen_cpu, kernel_cache, kernel_lib
from lazyvic.lowering.fusion import NeedsMaterialize, is_library, plan_groups
from lazyvic.lowering.memory import plan_memory
from lazyvic.lowering.passes import simplify, transpose_matmuls
from lazyvic.lowering.plan import (
    ConvStep,
    IndexCheckStep,
    KernelStep,
    MatmulStep,
    Plan,
    PoolStep,
    ReferenceStep,
    ScatterAddStep,
)

MAX_REPLANS = 200


def _chain(entries, j, links):
    """An operand read through NumPy views: its base (buffer position or scalar slot) and
    the movement ops above it. ``links(j)`` says whether node j is such a movement op."""
    ops = []
    while links(j):
        op, attrs, inputs, shape, dtype = entries[j]
        ops.append((optable.OPS[op].reference, attrs))
        j = inputs[0]
    if entries[j][0] == "scalar":
        return ("scalar", entries[j][1][0], list(reversed(ops)), entries[j][4].np)
    return ("buffer", j, list(reversed(ops)), entries[j][4].np)


def _conv_step(entries, root: int, args: list) -> ConvStep:
    """A conv2d: zero padding and im2col (serial Numba kernels) and one BLAS product.

    The copies stay serial: a parallel im2col made the plan's BLAS single-threaded or, left
    multithreaded, fought with its spinning threads (ResNet-18 batch 32, 2 cores: the 7x7
    stem convolution took 6.3 ms with a parallel im2col against 1.4 ms serial)."""
    from lazyvic.lowering import im2col
    from lazyvic.ops import conv

    op, attrs, inputs, shape, dtype = entries[root]
    x_shape, w_shape = entries[inputs[0]][3], entries[inputs[1]][3]
    rows, cols = conv.taps(x_shape, w_shape, attrs, shape[2:])
    return ConvStep(
        f"conv2d{shape}",
        root,
        args[0],
        args[1],
        attrs,
        im2col.im2col,
        im2col.pad_into,
        conv.conv_gemm,
        conv.taps,
        conv.tap_weights,
        conv.images_per_chunk,
        w_shape[1] * len(rows) * len(cols),
    )


def _force(forced: set, e: NeedsMaterialize) -> None:
    if e.node in forced:
        raise RuntimeError(f"lowering: could not materialize node {e.node} ({e.why})")
    forced.add(e.node)


def fuse_and_generate(trace, generate) -> tuple:
    """The backend-neutral half of lowering: passes, fusion and one kernel source per fused group.

    ``generate(entries, m, group)`` is a backend's code generator (``codegen_cpu.generate``,
    ``codegen_cuda.generate``); a group it cannot emit without a materialized intermediate raises
    NeedsMaterialize and the fusion is planned again. Returns ``(entries, outputs, groups, m,
    chain_nodes, sources)`` with ``sources`` keyed by group root (library groups have none).
    """
    entries = [
        (op, attrs if op in ("buffer", "scalar") else dict(attrs), inputs, shape, trace.dtypes[i])
        for i, (op, attrs, inputs, shape, _) in enumerate(trace.entries)
    ]
    entries, outputs = simplify(*transpose_matmuls(entries, list(trace.outputs)))
    forced: set = set()
    for _ in range(MAX_REPLANS):
        try:
            groups, m, chain_nodes = plan_groups(entries, outputs, frozenset(forced))
        except NeedsMaterialize as e:
            _force(forced, e)
            continue
        # Generate every kernel, collecting all the nodes that need a buffer, then plan
        # again once (not once per node: a large training step would plan many times).
        sources, wanted = {}, []
        for g in groups:
            if is_library(entries, g.root):
                continue
            try:
                sources[g.root] = generate(entries, m, g)
            except NeedsMaterialize as e:
                wanted.append(e)
        if not wanted:
            break
        for e in {e.node: e for e in wanted}.values():
            _force(forced, e)
    else:
        raise RuntimeError("lowering: fusion did not converge")
    return entries, outputs, groups, m, chain_nodes, sources


def plan_layout(trace, entries, outputs, groups, steps) -> tuple:
    """What every backend's plan needs once its steps are built: ``(out_specs, input_pos,
    memory)`` — per trace output ``("scalar", slot, dtype)`` or ``("buffer", pos, dtype)``,
    the ``(entry position, input slot)`` of each input, and the memory plan of the steps."""
    out_specs = []
    for o in outputs:
        if entries[o][0] == "scalar":
            out_specs.append(("scalar", entries[o][1][0], entries[o][4]))
        else:
            out_specs.append(("buffer", o, entries[o][4]))
    input_pos = [(i, e[1][0]) for i, e in enumerate(entries) if e[0] == "buffer"]
    out_set = {o for o in outputs if entries[o][0] not in ("buffer", "scalar")}
    temporaries = {g.root for g in groups} | {x for g in groups for x in g.extra_roots}
    temporaries -= out_set
    steps_io = [(s.writes(), s.reads()) for s in steps]
    memory = plan_memory(
        entries,
        steps_io,
        temporaries,
        out_set,
        {p for p, _ in input_pos},
        frozenset(p for p, slot in input_pos if slot in trace.param_slots),
    )
    return out_specs, input_pos, memory


def compile_trace(trace, cache_dir=None, debug: int = 0) -> Plan:
    """Lower a canonical trace to an executable :class:`Plan`."""
    # Code generation recurses along fused chains: a 1,000-op chain is a few thousand frames.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(trace.entries) + 1000))
    try:
        return _compile(trace, cache_dir, debug)
    finally:
        sys.setrecursionlimit(limit)


def _compile(trace, cache_dir, debug: int) -> Plan:
    if cache_dir is None:
        from pathlib import Path

        cache_dir = Path.home() / ".cache" / "lazyvic"
    entries, outputs, groups, m, chain_nodes, sources = fuse_and_generate(trace, codegen_cpu.generate)

    scalar_dtypes = {}
    for op, attrs, _, _, dtype in entries:
        if op == "scalar":
            scalar_dtypes[attrs[0]] = dtype
    stats: dict = {}
    steps, fallbacks = [], []
    for g in groups:
        op, attrs, inputs, shape, dtype = entries[g.root]
        kind = optable.OPS[op].kind
        if g.root in sources:
            ks = sources[g.root]
            for j in g.members:
                if optable.OPS[entries[j][0]].kind == "gather":
                    x, index = entries[j][2]
                    steps.append(
                        IndexCheckStep(
                            f"check {entries[j][0]} index",
                            _chain(entries, index, lambda j: optable.OPS[entries[j][0]].kind == "movement"),
                            entries[x][3][entries[j][1]["dim"]],
                            entries[j][0],
                        )
                    )
            fn = kernel_cache.load(ks, cache_dir, [scalar_dtypes[s].name for s in ks.scalars], stats)
            steps.append(
                KernelStep(
                    ks.name,
                    fn,
                    g.root,
                    tuple(ks.buffers),
                    tuple((s, scalar_dtypes[s].np.type) for s in ks.scalars),
                    tuple((np.dtype(d), slots) for d, slots in ks.packed),
                    ks.source,
                    tuple(g.extra_roots),
                    ks.parallel,
                )
            )
            if debug >= 2:
                print(
                    f"[lazyvic] kernel {ks.name}: space {g.space_shape} reduce {g.space_axes} "
                    f"stages {len(g.stages)} ops {len(g.members)}",
                    file=sys.stderr,
                )
            if debug >= 3:
                print(ks.source, file=sys.stderr)
            continue
        args = [_chain(entries, j, chain_nodes.__contains__) for j in inputs]
        if kind == "matmul":
            steps.append(MatmulStep(f"matmul{shape}", g.root, args[0], args[1], entries[inputs[0]][3][-1]))
        elif kind == "conv":
            steps.append(_conv_step(entries, g.root, args))
        elif kind == "pool":
            from lazyvic.lowering import pool_kernels

            steps.append(PoolStep(f"{op}{shape}", g.root, args[0], attrs, pool_kernels.max_pool2d))
        elif kind == "scatter":
            steps.append(ScatterAddStep(f"{op}{shape}", g.root, tuple(args), attrs["dim"], kernel_lib.scatter_add_into))
        else:
            steps.append(
                ReferenceStep(f"{op}{shape}", op, g.root, tuple(args), optable.OPS[op].reference, attrs, dtype)
            )
            fallbacks.append(op)

    out_specs, input_pos, memory = plan_layout(trace, entries, outputs, groups, steps)
    name = "plan_" + hashlib.sha1(repr(trace.key).encode()).hexdigest()[:12]
    plan = Plan(name, entries, steps, input_pos, out_specs, memory, groups, tuple(fallbacks), stats)
    # Deterministic mode: multithreaded OpenBLAS gives other last bits than one thread
    # (measured on TinyGPT's products), so BLAS runs on one thread whatever the machine.
    deterministic = "deterministic" in trace.key[2]
    plan.blas_threads = 1 if deterministic or plan.single_thread_blas() else None
    return plan
