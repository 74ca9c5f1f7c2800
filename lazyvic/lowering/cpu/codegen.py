"""CPU code generation: one FusionGroup -> Python source of a Numba kernel.

The shared emitter (``lowering/emitter.py``) builds the kernel's statements and loops; this
module lays them out for Numba: the kept dimensions are the outer loops, the first one
split into chunks run by ``prange`` when the kernel is large enough, the reduced
dimensions the inner loops (``range(0, n)``, which LLVM vectorizes). Each kernel's source
is named by its hash and loaded from a file (``lowering/cpu/kernel_cache.py``).
"""

from __future__ import annotations

import hashlib
import re

from lazyvic.lowering.emitter import Emitter, argument_types, kernel_arguments, size_unpacking
from lazyvic.lowering.fusion import FusionGroup
from lazyvic.lowering.kernel_files import LIB_HASH
from lazyvic.ops.elementwise import ALIAS
from lazyvic.ops.numerics import LANES
from lazyvic.trace import symbolic

# Smaller kernels run serially. Measured on TinyGPT's training step (2 cores; kernels of
# 131k-524k elements between BLAS calls): when its products ran on OpenBLAS's own threads, serial
# kernels ran the step in 26 ms against 35 ms with parallel ones (whose OpenMP team waited for
# cores held by spinning BLAS threads), so the bound was 2^20. Since every plan runs BLAS on one
# thread and its parallel kernels on the calling thread while other processes are busy
# (lowering/cpu/plan.py), 2^17 (captured step, alternated, 2026-11-26): 19.7-19.9 ms against
# 21.8-22.0 quiet, 32.4-32.6 against 32.4-32.6 (min) with another process busy; EfficientNet-B0
# at batch 1 10.1-10.5 against 11.3-11.8 ms, the MNIST CNN step 40-42 against 42-45 ms,
# ResNet-18's step and MobileNetV2 unchanged; 2^16 and 2^18 no better than 2^17.
PARALLEL_MIN_ELEMENTS = 1 << 17
PARALLEL_CHUNK_ELEMENTS = 1 << 14  # work per chunk handed to a thread
# Kernels use strict IEEE arithmetic, so elementwise work rounds exactly as the NumPy
# interpreter does (no FMA contraction, no reassociation): a seeded computation gives the
# same bits whether its plan ran interpreted or compiled, on any CPU. A float sum is written
# in the lane order of ops/numerics.py (render_lanes below), which the interpreter reproduces;
# max and min reductions keep kernel_lib's acc_max / acc_min, whose reassociable step gives
# the same result in any order. (Function-wide reassociation turned a log-softmax's
# (x - m) - log(s) into x - (m + log(s)), losing the low bits of inputs near 1e4.)
FASTMATH = "False"
_SIZE_ARG = re.compile(r"\bz\d+\b")


def _plain(c):
    """A coefficient as a dict key: a Sym by its expression (its == would record a guard)."""
    return c.poly if isinstance(c, symbolic.Sym) else c


class KernelSource:
    """The generated source of one kernel and what it needs to run."""

    def __init__(
        self, name, source, sha, buffers, scalars, parallel, arg_types, packed=(), sizes=(), identity_reads=()
    ):
        self.name = name
        self.source = source
        self.sha = sha
        self.buffers = buffers  # entry positions, argument order (after the output)
        self.scalars = scalars  # scalar slots passed one by one, argument order
        self.packed = packed  # ((dtype name, scalar slots), ...): arrays after the buffers
        self.parallel = parallel
        self.arg_types = arg_types  # (dtype name, is_array) per argument
        self.sizes = sizes  # the values (ints, Syms) of the size arguments, passed last as one int64 array
        # Buffers read only at the element the kernel stores (Emitter.identity_reads): where one
        # dies here, the kernel may be made again to write over it (pipeline.plan_in_place).
        self.identity_reads = identity_reads


# Whole blocks of LANES elements a lane-ordered sum takes per step of its main loop.
LANE_GROUP = 4


# Rows of a lane-ordered sum at most this long (and of a size known when the kernel is made)
# are summed without the lane array: the loop over the lanes, their zeroing and the halving
# loop cost more than the row's additions. Batch norm's statistics over ResNet's 8x8 planes,
# rows of 8: a compiled call summing (32, 16, 8, 8) over (0, 2, 3) took 78 us with the lanes, 17 us so.
SHORT_ROW_MAX = 16
# ... when the row's body, written once per element, stays within this many lines.
SHORT_ROW_MAX_LINES = 256


def _lane_tree(names: list, alias: str) -> str:
    """The halving tree of ops/numerics.py over lanes holding ``names`` (the lanes past them
    hold +0.0 and are never added), as one expression."""
    lanes, m, h = list(names), len(names), LANES // 2
    while h > 0:
        for q in range(m - h):
            lanes[q] = f"{alias}({lanes[q]} + {lanes[q + h]})"
        m, h = min(m, h), h // 2
    return lanes[0]


def _stores(lines) -> bool:
    """Whether a loop body (kernel source lines, nested passes as tuples) stores into an array."""
    for line in lines:
        if isinstance(line, tuple):
            if _stores([x for x in line[1:] if isinstance(x, list) for x in x]):
                return True
        elif "[" in line.split(" = ", 1)[0]:
            return True
    return False


def generate(entries, materialized, group: FusionGroup, alias=frozenset()) -> KernelSource:
    """Generate the kernel for ``group``; raises NeedsMaterialize to ask for a buffer. The
    buffers in ``alias`` (some of a first source's ``identity_reads``) share the output's
    storage: the kernel reads them from ``out``."""
    em = Emitter(entries, materialized, group, generic=True, alias=alias)
    em.build()
    identity_reads = em.identity_reads()
    em.merge_loops()
    numel = symbolic.prod(group.space_shape)
    # With symbolic sizes, serial or parallel is decided for the sizes the plan is lowered at,
    # not guarded: either computes the same bits, and a guard here split the plans of a loop
    # over 20 batch sizes at each threshold a kernel crossed (a CNN training step: 6 plans and
    # 13 plan-cache misses in 30 steps, then its family gave up on symbolic sizes).
    parallel = bool(em.outer) and symbolic.hint(numel) >= PARALLEL_MIN_ELEMENTS

    lane_arrays: list = []  # (accumulator, dtype alias) of each lane-ordered sum
    lanes_text: list = []  # the size argument holding numerics.LANES (one per kernel)

    def render_lanes(line, depth):
        """A float sum in the lane order of ``ops/numerics.py``: along the last reduced loop,
        element k adds into lane k % LANES (in blocks of LANES, the last one shorter), the lanes
        are combined by a halving tree; over the other reduced loops each such partial is added
        in order to the accumulator. The body is written once (compile time grows with it),
        except in a short row (below), written once per element. LANES comes in as a size
        argument: with a constant trip count LLVM unrolls the lane loop into scalars instead of
        vectorizing it."""
        _, body, acc, value, dtype = line
        *outer_red, last = em.inner
        out, d = [], depth
        for v in outer_red:
            out.append(f"{'    ' * d}for i{v} in range({em.size(em.loop_sizes[v])}):")
            d += 1
        ind = "    " * d
        size = em.loop_sizes[last]
        short = not isinstance(size, symbolic.Sym) and 0 < size <= SHORT_ROW_MAX
        if short and size * len(render(body, d)) > SHORT_ROW_MAX_LINES:
            short = False  # a long body written out per element would compile slowly
        if short:
            # A short row of known length: its elements in locals, combined by the lanes'
            # halving tree written out. The lanes add each element to +0.0 first, this tree
            # does not: the two differ only in the sign of a zero partial, and the accumulator
            # starts at +0.0 and is never -0.0 (round to nearest), so its value is the same.
            alias = ALIAS[dtype.name]
            names = []
            for k in range(size):
                out.append(f"{ind}i{last} = {k}")
                out += render(body, d)
                names.append(f"{acc}_v{k}")
                out.append(f"{ind}{names[-1]} = {alias}({value})")
            return out + [f"{ind}{acc} = {acc} + {_lane_tree(names, alias)}"]
        if not lanes_text:
            lanes_text.append(em.size(LANES))
        lanes = lanes_text[0]
        lane_arrays.append((acc, ALIAS[dtype.name]))
        n_last = em.size(size)
        # Lanes past the row's end get nothing and stay +0.0; a lane is never -0.0 (its sum
        # starts at +0.0, round to nearest), so adding one of them changes no bit: a row shorter
        # than LANES zeroes and adds only its ``_m`` lanes that may hold something (a softmax
        # row of 10: 9 adds in the tree instead of 31).
        out += [f"{ind}{acc}_n = {n_last}", f"{ind}{acc}_m = min({acc}_n, {lanes})"]
        out += [f"{ind}for {acc}_q in range(max({acc}_m, 1)):", f"{ind}    {acc}_l[{acc}_q] = 0"]
        group = f"{acc}_n // ({lanes} * {LANE_GROUP})"
        if not _stores(body):
            # Groups of LANE_GROUP whole blocks: each lane adds its element of every block of the
            # group in block order into a local, stored once per group (the same order as block
            # after block; LLVM unrolls the short constant loop and vectorizes across the lanes).
            # A row of 1024 in L1: 0.083 -> 0.040 ns per element (the reassociated sum: 0.020).
            # Not with a store in the body: LLVM then left the unrolled loop scalar (4.5x slower).
            out += [f"{ind}for {acc}_g in range({group}):", f"{ind}    for {acc}_q in range({lanes}):"]
            out += [f"{ind}        {acc}_s = {acc}_l[{acc}_q]", f"{ind}        for {acc}_u in range({LANE_GROUP}):"]
            out += [f"{ind}            i{last} = ({acc}_g * {LANE_GROUP} + {acc}_u) * {lanes} + {acc}_q"]
            out += render(body, d + 3)
            out += [f"{ind}            {acc}_s = {acc}_s + {value}", f"{ind}        {acc}_l[{acc}_q] = {acc}_s"]
            first = f"({group}) * {LANE_GROUP}"
        else:
            first = "0"
        # The blocks after the last whole group, the last one shorter.
        out += [f"{ind}for {acc}_b in range({first}, ({acc}_n + {lanes} - 1) // {lanes}):"]
        out += [f"{ind}    for {acc}_q in range(min({lanes}, {acc}_n - {acc}_b * {lanes})):"]
        out += [f"{ind}        i{last} = {acc}_b * {lanes} + {acc}_q"]
        out += render(body, d + 2)
        out += [f"{ind}        {acc}_l[{acc}_q] = {acc}_l[{acc}_q] + {value}", f"{ind}{acc}_h = {lanes} // 2"]
        out += [f"{ind}while {acc}_h > 0:", f"{ind}    for {acc}_q in range({acc}_m - {acc}_h):"]
        out += [f"{ind}        {acc}_l[{acc}_q] = {acc}_l[{acc}_q] + {acc}_l[{acc}_q + {acc}_h]"]
        out += [f"{ind}    {acc}_m = min({acc}_m, {acc}_h)", f"{ind}    {acc}_h = {acc}_h // 2"]
        out += [f"{ind}{acc} = {acc} + {acc}_l[0]"]
        return out

    def render(lines, depth):
        out = []
        for line in lines:
            if isinstance(line, tuple) and line[0] == "LANES":
                out.extend(render_lanes(line, depth))
            elif isinstance(line, tuple):
                ind = "    " * depth
                d = depth
                for v in em.inner:
                    out.append(f"{'    ' * d}for i{v} in range({em.size(em.loop_sizes[v])}):")
                    d += 1
                if not em.inner:
                    out.append(f"{ind}if True:")
                    d += 1
                out.extend(render(line[1], d))
            else:
                out.append("    " * depth + line)
        return out

    # A parallel kernel's serial body runs outer rows [lo, hi). Arrays whose index moves
    # by a fixed stride with the outer variable are passed as views starting at row lo and
    # indexed from ii = 0: an index that LLVM cannot prove non-negative keeps NumPy's
    # negative-index wraparound in the loop and blocks vectorization.
    rebased: dict = {}
    if parallel:
        v0 = em.outer[0]
        coefs: dict = {}
        for lin, buf in zip(em.lins, em.lin_buf):
            if buf is not None:
                coefs.setdefault(buf, set()).add((lin.terms.get(v0, 0), lin.const >= 0))
        rebased = {b: next(iter(c))[0] for b, c in coefs.items() if len(c) == 1 and next(iter(c))[1]}
    body = []
    depth = 1
    for k, v in enumerate(em.outer):
        if k == 0 and parallel:
            body.append("    for ii in range(hi - lo):")
            body.append(f"        i{v} = lo + ii")
        else:
            body.append(f"{'    ' * depth}for i{v} in range({em.size(em.loop_sizes[v])}):")
        depth += 1
    body.extend(render(em.row_lines, depth))
    # Each lane-ordered sum's lanes: allocated once per call (per chunk in a parallel kernel).
    body[0:0] = [f"    {acc}_l = np.empty({lanes_text[0]}, {alias})" for acc, alias in lane_arrays]
    text = "\n".join(body)
    rendered: dict = {}
    for n, (lin, buf) in enumerate(zip(em.lins, em.lin_buf)):
        # The same index into the same array is written once (the same size arguments): a loop
        # that reads an element and writes it back (a softmax's in-place division) is then
        # seen by LLVM to touch one address, and vectorizes; two arguments of equal value would
        # look like two strides that may overlap (a softmax ran 1.8x slower).
        key = (
            buf,
            buf in rebased,
            tuple((v, _plain(c)) for v, c in sorted(lin.terms.items(), key=str)),
            _plain(lin.const),
        )
        index = rendered.get(key) if buf is not None else None
        if index is None:
            index = em.render_lin(lin, em.outer[0] if buf in rebased else None)
            if buf is not None and _SIZE_ARG.search(index):
                # An array index with a size argument in it: LLVM cannot prove it non-negative,
                # so NumPy's negative-index wraparound would stay in the loop and block
                # vectorization. Indices are never negative here: unsigned, no check.
                index = f"np.uint64({index})"
            rendered[key] = index
        text = text.replace(f"\x00{n}\x00", index)

    if parallel:
        # Loops inside a prange body are lowered as a parfor gufunc and vectorized poorly
        # (a softmax ran 4x slower than the same loops serial): the parallel kernel only
        # splits the outer loop into chunks and calls the serial body on each. The chunk
        # length is a heuristic (from the sizes' hints); the number of chunks follows the size.
        n_outer = em.loop_sizes[em.outer[0]]
        hint_outer = symbolic.hint(n_outer)
        per_row = max(1, symbolic.hint(numel) // max(hint_outer, 1))
        chunk = max(1, min(hint_outer, -(-PARALLEL_CHUNK_ELEMENTS // per_row)))
        n_chunks_text, n_outer_text = em.size(-(-n_outer // chunk)), em.size(n_outer)
        chunk_text = em.size(chunk)
        rebased_text = {a: em.size(c) for a, c in rebased.items()}
    text, buffers, scalar_slots, packed, args = kernel_arguments(em, entries, group, text)
    fastmath = FASTMATH
    options = "cache=True, nogil=True, error_model='numpy', boundscheck=False"
    if parallel:
        chunk_args = [
            f"{a}[lo * {rebased_text[a]}:]" if rebased.get(a) is not None and not _zero(rebased[a]) else a for a in args
        ]
        source = "\n".join(
            [
                f"@njit(fastmath={fastmath}, {options})",
                f"def KERNEL_NAME_rows({', '.join(args + ['lo', 'hi'])}):",
                text,
                "",
                "",
                f"@njit(parallel=True, {options})",
                f"def KERNEL_NAME({', '.join(args)}):",
                *([size_unpacking(len(em.size_list))] if em.size_list else []),
                f"    for c in prange({n_chunks_text}):",
                f"        lo = c * {chunk_text}",
                f"        KERNEL_NAME_rows({', '.join(chunk_args)}, lo, min(lo + {chunk}, {n_outer_text}))",
                "",
            ]
        )
    else:
        source = "\n".join([f"@njit(fastmath={fastmath}, {options})", f"def KERNEL_NAME({', '.join(args)}):", text, ""])
    # The library version is part of the identity: a new kernel_lib never reuses old files.
    sha = hashlib.sha1((LIB_HASH + source).encode()).hexdigest()
    ops = [o for o in dict.fromkeys(em.ops_used)][:4]
    name = "k_" + "_".join(ops or [entries[group.root].op]) + "_" + sha[:12]
    source = source.replace("KERNEL_NAME", name)
    arg_types = argument_types(entries, group, buffers)
    return KernelSource(
        name, source, sha, buffers, scalar_slots, parallel, arg_types, packed, tuple(em.sizes()), identity_reads
    )


def _zero(c) -> bool:
    return not isinstance(c, symbolic.Sym) and c == 0
