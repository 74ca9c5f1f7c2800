"""Lowering: trace -> Plan (graph passes, fusion, memory plan, CPU code generation)."""

from __future__ import annotations

import sys

from lazyvic import ops as optable
from lazyvic.lowering import codegen_cpu, kernel_cache
from lazyvic.lowering.fusion import LIBRARY_KINDS, NeedsMaterialize, plan_groups
from lazyvic.lowering.memory import plan_memory
from lazyvic.lowering.passes import simplify
from lazyvic.lowering.plan import KernelStep, MatmulStep, Plan, ReferenceStep

MAX_REPLANS = 200


def _chain(entries, j, chain_nodes):
    ops = []
    while j in chain_nodes:
        op, attrs, inputs, shape, dtype = entries[j]
        ops.append((optable.OPS[op].reference, attrs))
        j = inputs[0]
    return (j, list(reversed(ops)))


def compile_trace(trace, cache_dir=None, debug: int = 0) -> Plan:
    """Lower a canonical trace to an executable :class:`Plan`."""
    if cache_dir is None:
        from pathlib import Path

        cache_dir = Path.home() / ".cache" / "lazyvic"
    entries = [
        (op, attrs if op in ("buffer", "scalar") else dict(attrs), inputs, shape, trace.dtypes[i])
        for i, (op, attrs, inputs, shape, _) in enumerate(trace.entries)
    ]
    entries, outputs = simplify(entries, list(trace.outputs))
    forced: set = set()
    for _ in range(MAX_REPLANS):
        try:
            groups, m, chain_nodes = plan_groups(entries, outputs, frozenset(forced))
            sources = {g.root: codegen_cpu.generate(entries, m, g)
                       for g in groups if optable.OPS[entries[g.root][0]].kind not in LIBRARY_KINDS}
            break
        except NeedsMaterialize as e:
            if e.node in forced:
                raise RuntimeError(f"lowering: could not materialize node {e.node} ({e.why})") from None
            forced.add(e.node)
    else:
        raise RuntimeError("lowering: fusion did not converge")

    scalar_dtypes = {}
    for op, attrs, inputs, shape, dtype in entries:
        if op == "scalar":
            scalar_dtypes[attrs[0]] = dtype
    stats: dict = {}
    steps, fallbacks = [], []
    for g in groups:
        op, attrs, inputs, shape, dtype = entries[g.root]
        kind = optable.OPS[op].kind
        if g.root in sources:
            ks = sources[g.root]
            fn = kernel_cache.load(ks, cache_dir, [scalar_dtypes[s].name for s in ks.scalars], stats)
            steps.append(KernelStep(ks.name, fn, g.root, tuple(ks.buffers), tuple(ks.scalars), ks.source))
            if debug >= 2:
                print(f"[lazyvic] kernel {ks.name}: space {g.space_shape} reduce {g.space_axes} "
                      f"stages {len(g.stages)} ops {len(g.members)}", file=sys.stderr)
            if debug >= 3:
                print(ks.source, file=sys.stderr)
            continue
        args = []
        for j in inputs:
            if entries[j][0] == "scalar":
                args.append(("scalar", entries[j][1][0]))
            else:
                args.append(_chain(entries, j, chain_nodes))
        if kind == "matmul":
            steps.append(MatmulStep(f"matmul{shape}", g.root, args[0], args[1]))
        else:
            steps.append(ReferenceStep(f"{op}{shape}", op, g.root, tuple(args), optable.OPS[op].reference,
                                       attrs, dtype))
            fallbacks.append(op)

    out_specs = []
    for o in outputs:
        if entries[o][0] == "scalar":
            out_specs.append(("scalar", entries[o][1][0], entries[o][4]))
        else:
            out_specs.append(("buffer", o, entries[o][4]))
    input_pos = [(i, e[1][0]) for i, e in enumerate(entries) if e[0] == "buffer"]
    out_set = {o for o in outputs if entries[o][0] not in ("buffer", "scalar")}
    temporaries = {g.root for g in groups} - out_set
    steps_io = [((s.out,), s.reads()) for s in steps]
    memory = plan_memory(entries, steps_io, temporaries, out_set, {p for p, _ in input_pos})
    name = f"plan_{abs(hash(trace.key)) % (1 << 40):010x}"
    return Plan(name, entries, steps, input_pos, [scalar_dtypes[k].np.type for k in sorted(scalar_dtypes)]
                if scalar_dtypes and sorted(scalar_dtypes) == list(range(len(scalar_dtypes))) else
                _scalar_types(scalar_dtypes, trace.n_scalars), out_specs, memory, groups, tuple(fallbacks), stats)


def _scalar_types(scalar_dtypes: dict, n: int) -> list:
    import numpy as np

    return [scalar_dtypes[k].np.type if k in scalar_dtypes else np.float64 for k in range(n)]
