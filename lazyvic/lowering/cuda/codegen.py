"""CUDA code generation: one FusionGroup -> Python source of a numba-cuda kernel.

The same fusion groups as the CPU get the same kernel body: the shared
emitter (``lowering/emitter.py``) builds it (index algebra, movement ops as index math, one typed
statement per op, row caches, multi-output loops) and this module only lays it
out for a GPU:

- *elementwise* groups (no reduced axes): a grid-stride loop over the flat
  iteration space; each element's loop indices are decoded from the flat index.
- *row* groups (reductions, and the last-axis row patterns fused around them:
  softmax, log-softmax, layer norm, cross-entropy): one block per row (a
  grid-stride loop over rows when there are more rows than blocks). Each pass
  over the reduced dimensions is split among the block's threads; a reduction's
  per-thread partial results are then combined by a shared-memory tree and every
  thread reads the row's result back. Rows of at most ``SERIAL_ROW_MAX`` elements
  are reduced by one thread each instead (a grid-stride loop over rows).

Deterministic reductions: the block size of a row kernel is part of its source
(a function of the row length only), thread ``t`` reduces the elements
``t, t + T, t + 2T, ...`` of the row in order (neighbouring threads read
neighbouring elements: coalesced loads), and the tree combines neighbours
pairwise (0+1, 2+3, then pairs of pairs). The order of every operation is thus
fixed by the source, whatever the grid, the number of rows per block or the GPU.
A partial result is merged into its left neighbour with the op's own
``reduce_combine`` (the right partial's value as the value, its index as the
index). Arg-reductions (several accumulators: argmax's index and value) need
the partials in index order to keep the first maximum on ties, as the CPU does:
their kernels give thread ``t`` the contiguous chunk ``[t * C, (t + 1) * C)``
instead, so the tree always merges an earlier range with a later one, with no
rule outside the op table.

Buffers are passed flat (1-D device arrays) and scalars as typed NumPy scalars
(or packed into one device array per dtype), exactly as to the CPU kernels.

Memory safety of inlined gathers: the range check of a gather's index runs on the device
without waiting for its result (``lowering/cuda/plan.py``: the plan raises after its last step), so
the kernel reading the index may see an out-of-range one. Each loaded index is clamped
into ``[0, size)`` right where it is loaded: no out-of-bounds access, and a result that
is never seen (the run raises). Valid indices are unchanged.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from lazyvic import ops as optable
from lazyvic.lowering.emitter import Emitter, argument_types, kernel_arguments
from lazyvic.lowering.fusion import FusionGroup
from lazyvic.lowering.kernel_files import LIB_HASH
from lazyvic.ops.elementwise import ALIAS

# Row kernels: threads per block, from the row length (a power of two, so the tree is
# complete). 32 is one warp; 256 threads reduce a 4096-long row in 16-element chunks.
MIN_ROW_THREADS = 32
MAX_ROW_THREADS = 256
# Rows this short are reduced by one thread each, in order, with no shared memory or barrier
# (a column sum of a (B, 6) batch: one block per 6-element row would leave most threads idle).
SERIAL_ROW_MAX = 8

# The device library (lowering/cuda/kernel_lib.py) is part of a kernel's identity, as
# kernel_lib is for CPU kernels.
CUDA_LIB_HASH = hashlib.sha1((LIB_HASH + Path(__file__).with_name("kernel_lib.py").read_text()).encode()).hexdigest()[
    :16
]

_NP_OF_ALIAS = {alias: name for name, alias in ALIAS.items()}


class CudaKernelSource:
    """The generated source of one CUDA kernel and what launching it needs.

    ``kind`` is ``"elementwise"`` (any launch: grid-stride over ``size`` elements),
    ``"thread_rows"`` (any launch: grid-stride over ``size`` short rows, one per thread) or
    ``"rows"`` (blocks of exactly ``threads`` threads; grid-stride over ``size`` rows).
    """

    def __init__(self, name, source, sha, buffers, scalars, packed, arg_types, kind, size, threads):
        self.name = name
        self.source = source
        self.sha = sha
        self.buffers = buffers  # entry positions, argument order (after the outputs)
        self.scalars = scalars  # scalar slots passed one by one, argument order
        self.packed = packed  # ((dtype name, scalar slots), ...): device arrays after the buffers
        self.arg_types = arg_types  # (dtype name, is_array) per array argument
        self.kind = kind
        self.size = size
        self.threads = threads


def row_threads(row_length: int) -> int:
    """Threads per block of a row kernel: the power of two covering the row, clamped."""
    n = 1 << max(0, row_length - 1).bit_length()
    return max(MIN_ROW_THREADS, min(MAX_ROW_THREADS, n))


def _decode(var: str, dims: list, sizes: dict, indent: str) -> list:
    """Statements setting the loop index of each of ``dims`` from the flat index ``var``."""
    lines = []
    for k, d in enumerate(dims):
        below = math.prod(sizes[e] for e in dims[k + 1 :])
        expr = var if below == 1 else f"{var} // {below}"
        if k:
            expr = f"{expr} % {sizes[d]}"
        lines.append(f"{indent}i{d} = {expr}")
    return lines


class _Layout:
    """Lays the emitter's row statements out as the body of a row kernel."""

    def __init__(self, em: Emitter, entries, group: FusionGroup):
        self.em = em
        self.reduce_len = math.prod(em.loop_sizes[d] for d in em.inner)
        self.serial = self.reduce_len <= SERIAL_ROW_MAX  # one thread per row
        self.threads = 1 if self.serial else row_threads(self.reduce_len)
        self.chunk = max(1, -(-self.reduce_len // self.threads))
        # Build() makes one pass per stage, in order, with accumulators a<k><suffix>.
        self.stage_accs = []
        for k, s in enumerate(group.stages):
            opdef = optable.OPS[entries[s].op]
            in_dtype = entries[entries[s].inputs[0]].dtype
            accs = [
                (f"a{k}{suffix}", _NP_OF_ALIAS[lit[: lit.index("(")]]) for suffix, lit in opdef.reduce_init(in_dtype)
            ]
            self.stage_accs.append((opdef, accs, in_dtype))
        # Arg-reductions merge partials in index order: contiguous chunks (see the module docstring).
        self.chunked = any(len(accs) > 1 for _, accs, _ in self.stage_accs)

    def shared_decls(self, indent: str) -> list:
        return [
            f"{indent}sh_{name} = cuda.shared.array({self.threads}, {ALIAS[dtype]})"
            for _, accs, _ in self.stage_accs
            for name, dtype in accs
        ]

    def render(self, lines, indent: str) -> list:
        out, npass = [], 0
        for line in lines:
            if isinstance(line, tuple):
                out += self.render_pass(line[1], npass, indent)
                npass += 1
            elif line.startswith("out") and not self.serial:
                # A value of the row (a reduction's result): one thread stores it.
                out += [f"{indent}if tid == 0:", f"{indent}    {line}"]
            else:
                out.append(f"{indent}{line}")
        return out

    def render_pass(self, body, npass: int, indent: str) -> list:
        em, inner = self.em, indent + "    "
        if self.serial:
            out = [f"{indent}for r in range({self.reduce_len}):"]
        elif self.chunked and self.chunk > 1:
            first = f"tid * {self.chunk}"
            out = [f"{indent}for r in range({first}, min({first} + {self.chunk}, {self.reduce_len})):"]
        else:
            out = [f"{indent}for r in range(tid, {self.reduce_len}, {self.threads}):"]
        out += _decode("r", em.inner, em.loop_sizes, inner)
        out += [inner + line for line in body] or [inner + "pass"]
        if npass < len(self.stage_accs) and not self.serial:
            out += self.render_tree(npass, indent)
        return out

    def render_tree(self, k: int, indent: str) -> list:
        """Combine the threads' partial results of stage ``k``; every thread gets the row's.

        A reduction's accumulators list its result first and, for an arg-reduction, the
        running value last (argmax: index, value): the right partial enters the op's
        ``reduce_combine`` with its last accumulator as the value and its first as the index.
        """
        opdef, accs, in_dtype = self.stage_accs[k]
        names = [name for name, _ in accs]
        i1, i2 = indent + "    ", indent + "        "
        out = [f"{indent}sh_{n}[tid] = {n}" for n in names]
        out += [
            f"{indent}cuda.syncthreads()",
            f"{indent}width = 1",
            f"{indent}while width < {self.threads}:",
            f"{i1}if tid % (2 * width) == 0:",
        ]
        out += [f"{i2}b_{n} = sh_{n}[tid + width]" for n in names]
        out += [i2 + line for line in opdef.reduce_combine(names, f"b_{names[-1]}", f"b_{names[0]}", in_dtype)]
        out += [f"{i2}sh_{n}[tid] = {n}" for n in names]
        out += [f"{i1}width *= 2", f"{i1}cuda.syncthreads()"]
        out += [f"{indent}{n} = sh_{n}[0]" for n in names]
        out.append(f"{indent}cuda.syncthreads()")  # before the next row overwrites slot 0
        return out


class _GatherRanges(dict):
    """The emitter's ``dyn_size`` (loaded index variable -> the range it indexes), also keeping
    each variable's smallest range: one index gathering from two dimensions of different
    sizes is valid (the run does not raise) only below both."""

    def __init__(self):
        super().__init__()
        self.smallest: dict = {}

    def __setitem__(self, var, size):
        self.smallest[var] = min(size, self.smallest.get(var, size))
        super().__setitem__(var, size)


def _clamp_gather_indices(lines: list, ranges: dict, clamped: set) -> list:
    """``lines`` (strings, and ``(tag, body)`` passes) with each loaded gather index clamped
    into its range on the line after its statement (see the module docstring); the clamped
    variables are added to ``clamped``."""
    out = []
    for line in lines:
        if isinstance(line, tuple):
            out.append((line[0], _clamp_gather_indices(line[1], ranges, clamped)))
            continue
        out.append(line)
        var, _, expr = line.partition(" = ")
        if var in ranges:
            cast = expr[: expr.index("(")]  # the statement's own type: the variable keeps it
            out.append(f"{var} = {cast}(min(max({var}, 0), {max(ranges[var] - 1, 0)}))")
            clamped.add(var)
    return out


def generate(entries, materialized, group: FusionGroup) -> CudaKernelSource:
    """Generate the CUDA kernel for ``group``; raises NeedsMaterialize to ask for a buffer
    (for the same reasons, at the same nodes, as ``lowering.cpu.codegen.generate``)."""
    em = Emitter(entries, materialized, group)
    em.dyn_size = _GatherRanges()
    em.build()
    em.merge_loops()
    clamped: set = set()
    em.row_lines = _clamp_gather_indices(em.row_lines, em.dyn_size.smallest, clamped)
    if clamped != set(em.dyn_size.smallest):  # an index loaded otherwise than by one statement
        raise RuntimeError(
            f"lowering.cuda.codegen: gather indices {sorted(set(em.dyn_size.smallest) - clamped)} "
            f"of group {group.root} could not be clamped"
        )
    rows = any(isinstance(line, tuple) for line in em.row_lines)
    outer_size = math.prod(em.loop_sizes[d] for d in em.outer)

    body = []
    layout = _Layout(em, entries, group) if rows else None
    if layout is not None and layout.serial:
        body.append(f"    for row in range(cuda.grid(1), {outer_size}, cuda.gridsize(1)):")
        body += _decode("row", em.outer, em.loop_sizes, "        ")
        body += layout.render(em.row_lines, "        ")
        kind, threads = "thread_rows", None
    elif layout is not None:
        body.append("    tid = cuda.threadIdx.x")
        body += layout.shared_decls("    ")
        body.append(f"    for row in range(cuda.blockIdx.x, {outer_size}, cuda.gridDim.x):")
        body += _decode("row", em.outer, em.loop_sizes, "        ")
        body += layout.render(em.row_lines, "        ")
        kind, threads = "rows", layout.threads
    else:
        body.append(f"    for n in range(cuda.grid(1), {outer_size}, cuda.gridsize(1)):")
        body += _decode("n", em.outer, em.loop_sizes, "        ")
        body += ["        " + line for line in em.row_lines]
        kind, threads = "elementwise", None
    text = "\n".join(body)
    for n, lin in enumerate(em.lins):
        text = text.replace(f"\x00{n}\x00", em.render_lin(lin))

    text, buffers, scalar_slots, packed, args = kernel_arguments(em, entries, group, text)
    # No fastmath: elementwise results round as the CPU's strict kernels do, and the
    # reduction order is the source's own.
    source = "\n".join(["@cuda.jit(cache=True)", f"def KERNEL_NAME({', '.join(args)}):", text, ""])
    sha = hashlib.sha1((CUDA_LIB_HASH + source).encode()).hexdigest()
    ops = list(dict.fromkeys(em.ops_used))[:4]
    name = "kcu_" + "_".join(ops or [entries[group.root].op]) + "_" + sha[:12]
    source = source.replace("KERNEL_NAME", name)
    arg_types = argument_types(entries, group, buffers)
    return CudaKernelSource(name, source, sha, buffers, scalar_slots, packed, arg_types, kind, outer_size, threads)
