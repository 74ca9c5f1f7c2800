"""CUDA code generation against the CPU plans, under Numba's CUDA simulator.

Each case builds a real lazy graph, cuts it into a trace and runs the trace
through the CPU's NumPy interpreter (``runtime.interpreter.interpret``, which gives the CPU
plans' bits: tests/test_numerics.py; compiling the CPU plans here cost CI a cold compile of
every case's kernels) and through the runtime's
CUDA backend (``runtime.executor.backend("cuda").compile(...).run``). The simulator needs ``NUMBA_ENABLE_CUDASIM=1``
before Numba is first imported, so the cases run in one subprocess (this file run
as a script) that reports each case as one JSON line; the tests here read them.
Shapes are tiny: the simulator runs every CUDA thread as a Python thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _simulator import SIMULATED, simulator_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RTOL, ATOL = 2e-5, 2e-6


# -- the cases (run in the subprocess) -----------------------------------------------------
# Each returns (outputs, "close" | "exact"): a list of tensors (one trace) or a list of such
# lists (one trace each). Exact outputs must match bit for bit.


def _data(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def case_elementwise_broadcast(lv):
    x = lv.tensor(_data(4, 5))
    b = lv.tensor(_data(5, seed=1))
    c = lv.tensor(_data(4, 1, seed=2))
    y = ((x + b) * c.sigmoid() - (x * 0.5).relu()).tanh()
    z = ((x.abs() + 1.0).log() + (x * 0.3).exp() - x.erf()).maximum(b * 0.1)
    w = (x > b).where(x.square(), -x) / (c.abs() + 1.0) + (x.abs() + 0.5) ** 1.5
    return [y, z, w], "close"


def case_every_elementwise_op(lv):
    """Each elementwise primitive of the op table, float32 and float64 (one kernel each)."""
    from lazyvic import ops as optable

    outs = []
    for dtype in (np.float32, np.float64):
        x = lv.tensor(np.abs(_data(3, 7, dtype=dtype)) + 0.1)  # in every op's domain
        y = lv.tensor(np.abs(_data(3, 7, seed=1, dtype=dtype)) + 0.2)
        cond = x > y
        for name, op in sorted(optable.OPS.items()):
            if op.kind != "elementwise":
                continue
            if name in ("floordiv_int", "truncdiv_int", "bitwise_and", "bitwise_or", "bitwise_xor"):
                continue  # integer inputs only: case_integer_and_float64
            if name == "cast":
                outs.append(lv.Tensor.apply(name, x, dtype=lv.int32))
            elif name == "logical_not":
                outs.append(lv.Tensor.apply(name, cond))
            else:
                outs.append(lv.Tensor.apply(name, *((x,), (x, y), (cond, x, y))[op.arity - 1]))
    return outs, "close"


def case_integer_and_float64(lv):
    i = lv.tensor(np.arange(12, dtype=np.int64).reshape(3, 4))
    d = lv.tensor(_data(3, 4, dtype=np.float64))
    q = lv.div(i - 5, 3, rounding_mode="trunc")
    bits = [(i & 6) ^ (i | 1), ~i]
    return [
        i * 3 - (i > 5).long(),
        (d * 2.0).exp() + d.sigmoid(),
        (i == 4) | (d > 0.0),
        (i - 5) // -3,
        q,
        *bits,
    ], "close"


def case_movement(lv):
    x = lv.tensor(_data(4, 6))
    t = lv.tensor(_data(2, 3, 4, seed=3))
    a = x.T * 2.0 + 1.0
    s = x[1:4, ::2].exp()
    p = lv.functional.pad(x, (1, 2, 0, 1)) + 1.0
    e = x[:, :1].expand(4, 6) * x
    r = t.permute(2, 0, 1).reshape(4, 6) - x
    c = lv.cat([x, x * 2.0], dim=1).reshape(2, 24) + 0.5
    return [a, s, p, e, r, c], "close"


def case_reductions(lv):
    x = lv.tensor(_data(6, 40))
    t = lv.tensor(_data(3, 5, 7, seed=4))
    outs = [
        x.sum(1),
        x.sum(0),
        x.sum(),
        x.amax(1),
        x.amax(0),
        x.amin(1),
        t.mean((1, 2)),
        t.sum(1) * 2.0,
        x - x.mean(1, keepdim=True),
        t.amax(2, keepdim=True).exp(),
        lv.functional.softmax(lv.tensor(_data(2, 300, seed=11)), 1),
    ]  # 256 threads, 2 elements each
    return outs, "close"


def case_argmax(lv):
    a = _data(5, 37)
    a[1, 3] = a[1, 30] = 9.0  # ties: the first maximum wins
    a[2, 7] = np.nan  # the first NaN wins
    a[3, :] = 1.0
    x = lv.tensor(a)
    long_row = _data(1, 300, seed=9)  # 256 threads reduce 2 elements each
    long_row[0, [40, 290]] = 7.0
    return [x.argmax(1), x.argmax(0), lv.tensor(long_row).argmax(1)], "exact"


def case_softmax_layer_norm(lv):
    x = lv.tensor(_data(5, 24))
    w = lv.tensor(_data(24, seed=5))
    b = lv.tensor(_data(24, seed=6))
    f = lv.functional
    # One trace each: together they would share the row max (one buffer read by several kernels).
    return [
        [f.softmax(x, 1)],
        [f.log_softmax(x, 1)],
        [f.softmax(x, 0)],
        [f.layer_norm(x, (24,), w, b)],
        [f.layer_norm(x, (24,)).relu()],
    ], "close"


def case_cross_entropy(lv):
    logits = lv.tensor(_data(6, 10))
    target = lv.tensor(np.array([0, 3, 9, 2, 2, 7], dtype=np.int64))
    f = lv.functional
    return [
        f.cross_entropy(logits, target),
        f.cross_entropy(logits, target, reduction="none"),
        f.cross_entropy(logits * 2.0, target, label_smoothing=0.1),
    ], "close"


def case_gather_embedding(lv):
    x = lv.tensor(_data(4, 6))
    idx = lv.tensor(np.array([[0, 5], [1, 1], [4, 2], [3, 0]], dtype=np.int64))
    weight = lv.tensor(_data(7, 5, seed=7))
    ids = lv.tensor(np.array([[1, 6, 0], [2, 2, 5]], dtype=np.int64))
    computed = x.argmax(1, keepdim=True) + 0  # an index computed in the trace: stored, checked, inlined
    return [x.gather(1, idx) * 2.0, lv.functional.embedding(ids, weight) + 1.0, x.gather(1, computed)], "close"


def case_random_dropout(lv):
    lv.manual_seed(1234)
    x = lv.tensor(_data(6, 9))
    u = lv.rand(5, 7)
    d = lv.functional.dropout(x, 0.3)
    u64 = lv.rand(3, 4, dtype=lv.float64)
    return [u, d, u64, (lv.rand(4, 4) < 0.5)], "exact"


def case_matmul(lv):
    a = lv.tensor(_data(5, 7))
    b = lv.tensor(_data(7, 6, seed=1))
    p = lv.tensor(_data(2, 3, 4, seed=2))
    q = lv.tensor(_data(2, 4, 5, seed=3))
    # An empty batch: nothing to write (the tiled kernel's grid once wrote out of bounds).
    return [(a @ b).relu(), p @ q, a.T @ a[:, :3], (a[:, 1:] @ b[1:, ::2]) * 0.5, p[:0] @ q[:0]], "close"


def case_mlp_train_step(lv):
    f = lv.functional
    x = lv.tensor(_data(8, 12))
    y = lv.tensor(np.array([0, 1, 2, 3, 0, 1, 2, 3], dtype=np.int64))
    w1 = lv.tensor(_data(12, 16, seed=1) * 0.3, requires_grad=True)
    b1 = lv.tensor(np.zeros(16, np.float32), requires_grad=True)
    w2 = lv.tensor(_data(16, 4, seed=2) * 0.3, requires_grad=True)
    b2 = lv.tensor(np.zeros(4, np.float32), requires_grad=True)
    loss = f.cross_entropy((x @ w1 + b1).relu() @ w2 + b2, y)
    loss.backward()
    lr = 0.1
    return [loss] + [p.detach() - lr * p.grad for p in (w1, b1, w2, b2)], "close"


def case_multi_output_and_packed_scalars(lv):
    v = lv.tensor(_data(3, 5))
    g = lv.tensor(_data(3, 5, seed=1))
    w = lv.tensor(_data(3, 5, seed=2))
    v2 = v * 0.9 + g
    w2 = w - v2 * 0.01
    chain = w
    for k in range(12):  # more scalars than a kernel takes one by one
        chain = chain * (1.0 + k / 100.0) + k / 10.0
    return [v2, w2, chain], "close"


def case_conv2d(lv):
    f = lv.functional
    if not hasattr(f, "conv2d"):
        return None, "skip: no conv2d primitive"
    x = lv.tensor(_data(2, 4, 5, 6))
    w = lv.tensor(_data(3, 4, 3, 3, seed=1), requires_grad=True)
    b = lv.tensor(_data(3, seed=2))
    wg = lv.tensor(_data(4, 2, 2, 3, seed=3))
    y = f.conv2d(x, w, b, padding=1).relu()
    (y * y).sum().backward()  # the VJPs are conv2d too: weight gradient, strided views
    return [
        [y],
        [f.conv2d(x.permute(0, 1, 3, 2), wg, stride=2, padding=(1, 0), dilation=(1, 2), groups=2)],
        [w.grad],
    ], "close"


def case_pooling_and_batch_norm(lv):
    """max_pool2d and avg_pool2d (device kernels) and batch norm: equal to the CPU plan."""
    f = lv.functional
    if not all(hasattr(f, n) for n in ("max_pool2d", "avg_pool2d", "batch_norm")):
        return None, "skip: no pooling or batch_norm in lazyvic.functional"
    x = lv.tensor(_data(2, 3, 6, 6))
    return [
        [f.max_pool2d(x, 2)],
        [f.avg_pool2d(x, 3, stride=2, padding=1)],
        [f.batch_norm(x, None, None, training=True).relu()],
    ], "close"


def case_max_pool_ties_and_nan(lv):
    """max_pool2d's window rule on the device: first of equal maxima (signed zeros), last NaN."""
    x = np.array(
        [0.0, -0.0, 1.0, 1.0, np.nan, 2.0, -np.inf, 3.0, -0.0, 0.0, np.nan, -1.0, 5.0, 5.0, -2.0, np.inf],
        dtype=np.float32,
    ).reshape(1, 1, 4, 4)
    f = lv.functional
    return [[f.max_pool2d(lv.tensor(x), 2)], [f.max_pool2d(lv.tensor(x), 3, stride=1, padding=1)]], "exact"


def case_gather_computed_index(lv):
    """Gathers whose index is computed in the trace (device gather steps): through an expand
    (index_select), along dim 0 of a permuted input, and a 3-D gather along the middle axis."""
    x = lv.tensor(_data(4, 6))
    w = lv.tensor(_data(7, 5, seed=1))
    t = lv.tensor(_data(3, 4, 5, seed=2))
    rows = (x.argmax(1) + 1).clamp(max=6)  # (4,): the embedding's index_select, computed
    down = (x.T.argmin(1, keepdim=True) + 0).expand(6, 3)  # (6, 3) rows of x.T, one per column
    mid = (t.argmax(1, keepdim=True) + 2).clamp(max=3).expand(3, 2, 5)
    return [w.index_select(0, rows) * 2.0, x.T.gather(0, down), t.gather(1, mid)], "exact"


def case_scatter_add(lv):
    """scatter_add on the device, bit for bit the CPU's serial order: duplicates of widely
    different magnitudes (the order changes the rounding), the embedding backward (an index
    repeated along the columns), an index broadcast along a leading axis, one narrower than
    the output, a general 3-D index, sources and bases read through movement ops, integers."""
    f = lv.functional
    big = np.array([1e8, 1.0, -1e8, 3.0, 0.5, -2.0, 7.0, 1e-3], dtype=np.float32)
    src = lv.tensor(np.stack([big, big[::-1] * 0.5, big * -0.25]).astype(np.float32))
    base = lv.tensor(_data(4, 8))
    dup = lv.tensor(np.array([[0, 2, 0, 0, 2, 3, 0, 1]] * 3, dtype=np.int64))
    w = lv.tensor(_data(9, 6, seed=1), requires_grad=True)
    ids = lv.tensor(np.array([[1, 8, 1, 0, 4], [4, 4, 1, 7, 1], [0, 1, 1, 8, 3]], dtype=np.int64))
    c = lv.tensor(_data(3, 5, 6, seed=2) * 1000.0)
    (f.embedding(ids, w) * c).sum().backward()
    lead = lv.tensor(np.array([[2, 0, 2, 1, 2, 0, 2, 2]], dtype=np.int64)).expand(3, 8)
    b3 = lv.tensor(_data(3, 4, 5, seed=3))
    i3 = lv.tensor(np.random.default_rng(4).integers(0, 4, (2, 6, 4)))
    s3 = lv.tensor(_data(4, 6, 2, seed=5))  # read permuted: (2, 6, 4)
    ib = lv.tensor(np.arange(12, dtype=np.int64).reshape(3, 4))
    return [
        [
            base._scatter_add(dup, src * 3.0, 0)[:3] * 1.0,
            base[:3]._scatter_add(lead, src, 1),
            base[:3].T._scatter_add(lead.T, src.T, 0),
            base[:3].T._scatter_add(lead.T, src.T, 1),
            ib._scatter_add(lv.tensor(np.array([[2, 2, 0, 1]], dtype=np.int64)), ib[:1] * 5, 0),
            base._scatter_add(lv.tensor(np.array([[3], [3]], dtype=np.int64)).expand(2, 5), src[:2, 1:6], 0),
        ],
        [w.grad],
        [
            b3._scatter_add(i3, s3.permute(2, 1, 0), 1),
            b3.permute(1, 0, 2)._scatter_add(i3.permute(1, 0, 2), s3.permute(1, 2, 0), 0),
        ],
    ], "exact"


def case_randn(lv):
    """randn on the device: the CPU's Philox words and Box-Muller (odd sizes: a last half pair)."""
    lv.manual_seed(77)
    return [lv.randn(5, 7), lv.randn(3, 3) * 2.0 + 1.0, lv.randn(1)], "exact"


def case_randn_float64(lv):
    """float64 randn: libdevice's log/cos/sin may round the last bit otherwise than the host's."""
    lv.manual_seed(78)
    return [lv.randn(4, 5, dtype=lv.float64)], "close"


def case_max_pool_of_a_view(lv):
    """max_pool2d of an input read through movement ops: one gather, then the device kernel."""
    x = lv.tensor(_data(2, 3, 5, 6))
    return [
        lv.functional.max_pool2d(x.permute(0, 1, 3, 2), 2),
        lv.functional.max_pool2d(x[:, :, 1:, ::2], 2, stride=1),
    ], "exact"


def case_avg_pool_of_a_view(lv):
    """avg_pool2d (ceil_mode) and adaptive_avg_pool2d of inputs read through movement ops, and a
    transpose: one gather, then the device kernels, with the CPU's bits."""
    x = lv.tensor(_data(2, 3, 5, 6), requires_grad=True)
    y = lv.functional.avg_pool2d(x.permute(0, 1, 3, 2), 3, 2, 1, ceil_mode=True, count_include_pad=False)
    z = lv.functional.adaptive_avg_pool2d(x[:, :, 1:, ::2], (2, 3))
    (y.sum() + z.sum()).backward()
    return [y, z, x.grad], "exact"


def case_matmul_of_a_constant(lv):
    """A broadcast Python number as a matmul operand (the gradient of a sum) is filled on the device."""
    x = lv.tensor(_data(5, 7))
    w = lv.tensor(_data(7, 3, seed=1), requires_grad=True)
    (x @ w).sum().backward()
    return [[w.grad], [lv.full((4, 5), 0.5) @ x]], "close"


def case_conv_of_a_constant(lv):
    """conv2d with a broadcast Python number as an operand: a constant image, and the gradients
    of a sum (their output gradient is a broadcast 1)."""
    f = lv.functional
    x = lv.tensor(_data(1, 2, 5, 5), requires_grad=True)
    w = lv.tensor(_data(2, 2, 3, 3, seed=1), requires_grad=True)
    f.conv2d(x, w, stride=2, padding=1).sum().backward()
    return [[f.conv2d(lv.full((1, 2, 4, 4), 0.5), w, padding=1)], [x.grad, w.grad]], "close"


def case_weight_gradient_of_a_padded_constant(lv):
    """conv2d_weight whose input is a broadcast Python number read through a pad (-1 entries:
    zeros): the weight gradient of conv_transpose2d under a slice of a sum's gradient."""
    f = lv.functional
    x = lv.tensor(_data(1, 2, 3, 3))
    w = lv.tensor(_data(2, 3, 3, 3, seed=1), requires_grad=True)
    f.conv_transpose2d(x, w, stride=2)[..., 1:, 2:].sum().backward()
    return [w.grad], "close"


def case_max_pool_of_a_constant(lv):
    """max_pool2d of a broadcast Python number has no device step: a host step (a counted fallback)."""
    return [lv.functional.max_pool2d(lv.full((1, 2, 4, 4), 0.5), 2)], "exact"


CASES = [name for name in list(globals()) if name.startswith("case_")]


# -- index errors (run in the subprocess) ---------------------------------------------------
# Each builds a trace with valid indices, then runs the CPU plan and the CUDA plan with index
# inputs replaced by out-of-range ones: both must raise lazyvic's IndexError with the same
# message. The CUDA plan reads the bad indices (clamped: the simulator would raise on an
# out-of-bounds access) and raises after its last step; run again with the good indices, it
# gives the CPU's results. Returns a list of problems.


def _errors_alike(trace, inputs, scalars, *replaced) -> list:
    """``replaced``: pairs (a good index input, the bad array put in its place)."""
    import lazyvic as lv
    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.runtime.executor import backend, execute

    bad_inputs = list(inputs)
    for index, bad in replaced:
        (slot,) = [k for k, a in enumerate(inputs) if a.dtype == index.dtype and np.array_equal(a, index)]
        bad_inputs[slot] = bad
    plan = backend("cuda").compile(trace)
    messages = []
    for run in (
        lambda: execute(compile_trace(trace), bad_inputs, scalars),
        lambda: plan.run(bad_inputs, scalars, to_host=True),
        lambda: plan.run(bad_inputs, scalars, to_host=True),
    ):
        try:
            run()
            messages.append(None)
        except lv.errors.IndexError as e:
            messages.append(str(e))
    if messages[0] is None or messages.count(messages[0]) != 3:
        return [f"CPU raised {messages[0]!r}, CUDA {messages[1]!r} then {messages[2]!r}"]
    expected, got = execute(compile_trace(trace), inputs, scalars), plan.run(inputs, scalars, to_host=True)
    if not all(np.allclose(g, e, rtol=RTOL, atol=ATOL) for e, g in zip(expected, got)):
        return ["good indices after bad ones: other results than the CPU's"]
    return []


def check_index_errors(lv):
    from lazyvic.trace.cut import cut

    problems = []
    w = lv.tensor(_data(7, 5))
    ids = np.array([[1, 6, 0], [2, 2, 5]], dtype=np.int64)
    trace, inputs, scalars, _ = cut([lv.functional.embedding(lv.tensor(ids), w)._node])
    for bad in ([[1, 6, 0], [2, 9, -1]], [[-3, 6, 0], [2, 7, 5]], [[1, 10**6, 0], [2, 2, 5]]):
        problems += _errors_alike(trace, inputs, scalars, (ids, np.array(bad, dtype=np.int64)))  # first in C order
    # Two failing checks in one plan: the first in plan order is named, as on the CPU.
    ids2 = np.array([[0, 3], [4, 4]], dtype=np.int64)
    trace, inputs, scalars, _ = cut(
        [(lv.functional.embedding(lv.tensor(ids), w).sum(1) + lv.functional.embedding(lv.tensor(ids2), w).sum(1))._node]
    )
    problems += _errors_alike(
        trace, inputs, scalars, (ids, np.array([[1, 6, 0], [2, 8, 5]])), (ids2, np.array([[0, 3], [-2, 4]]))
    )
    x = lv.tensor(_data(4, 6))
    idx = np.array([[0, 5], [1, 1], [4, 2], [3, 0]], dtype=np.int64)
    trace, inputs, scalars, _ = cut([x.T.gather(0, lv.tensor(idx).T * 1)._node])  # a computed index
    problems += _errors_alike(trace, inputs, scalars, (idx, np.array([[0, 5], [1, 1], [4, 2], [3, 6]])))
    base = lv.tensor(_data(4, 8))
    sidx = np.array([[0, 2, 0, 3, 1, 1, 0, 2]], dtype=np.int64)
    trace, inputs, scalars, _ = cut([base._scatter_add(lv.tensor(sidx).expand(3, 8), base[:3] * 2.0, 0)._node])
    problems += _errors_alike(trace, inputs, scalars, (sidx, np.array([[0, 2, 0, 3, 4, 1, -1, 2]])))
    sidx = np.array([[0, 2, 0], [3, 1, 1]], dtype=np.int64)
    trace, inputs, scalars, _ = cut([base._scatter_add(lv.tensor(sidx), base[:2, :3] * 2.0, 1)._node])
    problems += _errors_alike(trace, inputs, scalars, (sidx, np.array([[0, 2, 0], [3, 8, 11]])))
    return problems


def check_one_error_copy_per_run(lv):
    """However many index checks a plan has, one copy of its error buffer comes back per run
    (after the last step), besides the outputs."""
    from lazyvic.runtime.executor import backend
    from lazyvic.trace.cut import cut

    problems = []
    x = lv.tensor(_data(4, 6))
    for n in (1, 4):
        outs = [x.gather(1, lv.tensor(np.full((4, 2), k, np.int64))) * 2.0 for k in range(n)]
        outs.append(x.gather(1, x.argmax(1, keepdim=True) + 0))  # a computed index: a device gather step
        trace, inputs, scalars, _ = cut([t._node for t in outs])
        plan = backend("cuda").compile(trace)
        if len(plan.checks) != n + 1:
            problems.append(f"{len(plan.checks)} checks, expected {n + 1}")
        for _ in range(2):
            before = dict(plan.stats)
            plan.run(inputs, scalars, to_host=True)
            copies, sent = (plan.stats[k] - before.get(k, 0) for k in ("device_to_host", "device_to_host_bytes"))
            if (copies, sent) != (len(outs) + 1, 4 * 2 * 4 * n + 4 * 4 + 24 * (n + 1)):
                problems.append(f"{n + 1} checks: {copies} copies, {sent} bytes back in a run")
    return problems


def check_bad_index_raises_after_the_plan(lv):
    """Through the runtime on the "cuda" device: an out-of-range index computed in the trace (the
    front end cannot check it) raises the CPU's IndexError from the compiled plan, after its last
    step; the output stays pending and raises again at the next sync; the same plan with good
    indices then gives the CPU's results."""
    from lazyvic.runtime.config import config

    x, w = _data(4, 6), _data(7, 5, seed=1)
    rows = x.argmax(1)

    def build(device, shift):
        xs, ws = lv.tensor(x, device=device), lv.tensor(w, device=device)
        index = xs.argmax(1) + lv.tensor(np.full(4, shift, np.int64), device=device)
        return ws.index_select(0, index) * 2.0 + 1.0

    problems, saved = [], config.compile
    config.compile = "always"
    try:
        shift = 7 - int(rows.max())  # the first row reaching the largest argmax is out of range
        messages = {}
        for device in ("cpu", "cuda"):
            y = build(device, shift)
            for attempt in range(2):
                before = lv.metrics.snapshot()
                try:
                    y.numpy()
                    messages[device, attempt] = None
                except lv.errors.IndexError as e:
                    messages[device, attempt] = str(e)
                back = lv.metrics.snapshot()["device_to_host_copies"] - before["device_to_host_copies"]
                if device == "cuda" and back != 1:
                    problems.append(f"{back} copies to the host in a failing run, expected 1 (the error buffer)")
                if not y.is_lazy:
                    problems.append(f"{device}: the output of a failing run is not pending")
        expected = f"gather: index {int(rows.max()) + shift} out of range for dimension of size 7"
        if set(messages.values()) != {expected}:
            problems.append(f"messages {messages}, expected {expected!r}")
        compiled = lv.metrics.snapshot()["plans_compiled"]
        good = {device: build(device, 0).numpy() for device in ("cpu", "cuda")}
        if not np.allclose(good["cuda"], good["cpu"], rtol=RTOL, atol=ATOL):
            problems.append("good indices after bad ones: other results than the CPU's")
        if not np.allclose(good["cpu"], w[rows] * 2.0 + 1.0, rtol=RTOL, atol=ATOL):
            problems.append("the CPU's results are not the reference")
        if lv.metrics.snapshot()["plans_compiled"] != compiled:
            problems.append("the good run compiled a new plan instead of running the failed one again")
    finally:
        config.compile = saved
    return problems


def check_packed_scalars_are_sent_when_they_change(lv):
    """A kernel's packed scalars (more than PACK_SCALARS: an optimizer's constants) go to the
    device at the first run and again only when their values change."""
    from numba import cuda

    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.runtime.executor import backend, execute
    from lazyvic.trace.cut import cut

    y = lv.tensor(_data(3, 5))
    for k in range(12):
        y = y * (1.0 + k / 100.0) + k / 10.0
    trace, inputs, scalars, _ = cut([y._node])
    plan = backend("cuda").compile(trace)
    groups = sum(len(s.packed) for s in plan.kernels)
    device_inputs = [cuda.to_device(a) for a in inputs]  # not counted: only the plan's own copies
    problems = [] if groups else ["no packed scalars"]
    changed = [v * 1.5 for v in scalars]
    for values, sends in ((scalars, groups), (scalars, 0), (changed, groups), (changed, 0), (scalars, groups)):
        before = plan.stats.get("host_to_device", 0)
        got = plan.run(device_inputs, values, to_host=True)
        if plan.stats.get("host_to_device", 0) - before != sends:
            problems.append(f"{plan.stats.get('host_to_device', 0) - before} copies to the device, expected {sends}")
        (expected,) = execute(compile_trace(trace), inputs, values)
        if not np.allclose(got[0], expected, rtol=RTOL, atol=ATOL):
            problems.append("results differ from the CPU plan's with the same scalars")
    return problems


def check_scatter_layout(lv):
    """An embedding's backward sorts its N ids once for all D columns: N keys, N map entries
    (not N * D), one thread per (run of equal ids, column)."""
    from lazyvic.lowering.cuda.index_steps import CudaScatterAddStep
    from lazyvic.runtime.executor import backend
    from lazyvic.trace.cut import cut

    w = lv.tensor(_data(9, 6), requires_grad=True)
    ids = lv.tensor(np.array([[1, 8, 1, 0, 4], [4, 4, 1, 7, 1]], dtype=np.int64))
    lv.functional.embedding(ids, w).sum().backward()
    trace, _, _, _ = cut([w.grad._node])
    (step,) = [s for s in backend("cuda").compile(trace).steps if isinstance(s, CudaScatterAddStep)]
    layout = (step.key_view.n, step.col_out.size, None if step.view.rmap is None else step.view.rmap.size)
    return [] if layout == (10, 6, None) else [f"keys, columns, map entries: {layout}, expected (10, 6, None)"]


def check_conv_has_no_column_map(lv):
    """conv2d's im2col kernel computes each source address: besides the operands, only its 15
    sizes go to the device (no int64 map of the columns' size, 36 x 60 here)."""
    from lazyvic.runtime.executor import backend
    from lazyvic.trace.cut import cut

    x, w = _data(2, 4, 5, 6), _data(3, 4, 3, 3, seed=1)
    trace, inputs, scalars, _ = cut([lv.functional.conv2d(lv.tensor(x), lv.tensor(w), padding=1)._node])
    plan = backend("cuda").compile(trace)
    plan.run(inputs, scalars, to_host=True)
    sent = plan.stats["host_to_device_bytes"]
    return [] if sent == x.nbytes + w.nbytes + 15 * 8 else [f"{sent} bytes sent to the device"]


CHECKS = [name for name in list(globals()) if name.startswith("check_")]


# Cases also run with other launch sizes (grid, elementwise block, matmul tile): same bits.
LAUNCH_CASES = (
    "case_reductions",
    "case_argmax",
    "case_matmul",
    "case_mlp_train_step",
    "case_gather_computed_index",
    "case_scatter_add",
)


def _other_launch(plan, inputs, scalars, got) -> list:
    from lazyvic.lowering.cuda import target

    saved = target.SIMULATOR_MAX_BLOCKS, target.SIMULATOR_THREADS, target.SIMULATOR_MATMUL_TILE
    target.SIMULATOR_MAX_BLOCKS, target.SIMULATOR_THREADS, target.SIMULATOR_MATMUL_TILE = 3, 64, 4
    try:
        other = plan.run(inputs, scalars, to_host=True)
    finally:
        target.SIMULATOR_MAX_BLOCKS, target.SIMULATOR_THREADS, target.SIMULATOR_MATMUL_TILE = saved
    return [
        f"output {k}: other bits with another launch configuration"
        for k, (g, o) in enumerate(zip(got, other))
        if g.tobytes() != o.tobytes()
    ]


def _on_device(plan, inputs, scalars, got) -> list:
    """Inputs given as device arrays, outputs kept on the device: the same bits."""
    from numba import cuda

    from lazyvic.runtime.device import to_host

    outs = plan.run([cuda.to_device(a) for a in inputs], scalars)
    return [
        f"output {k}: other bits with device inputs and outputs"
        for k, (g, o) in enumerate(zip(got, outs))
        if g.tobytes() != to_host(o, g.shape).tobytes()  # a Numba or a CuPy device array
    ]


def _compare(expected, got, again, how) -> list:
    problems = []
    for k, (e, g, g2) in enumerate(zip(expected, got, again)):
        if e.shape != g.shape or e.dtype != g.dtype:
            problems.append(f"output {k}: {g.shape} {g.dtype} != expected {e.shape} {e.dtype}")
        elif how == "exact" and not np.array_equal(e, g, equal_nan=True):
            problems.append(f"output {k}: not bit-identical: {g.ravel()[:8]} vs {e.ravel()[:8]}")
        elif not np.allclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True):
            err = float(np.nanmax(np.abs(g.astype(np.float64) - e)))
            problems.append(f"output {k}: max abs error {err:.3g}")
        if g.tobytes() != g2.tobytes():
            problems.append(f"output {k}: a second run of the same plan gave other bits")
    return problems


def _run_cases() -> None:
    """Subprocess side: run every case, print one JSON line per case."""
    import lazyvic as lv
    from lazyvic.lowering.cuda import CudaPlan
    from lazyvic.runtime.device import simulated
    from lazyvic.runtime.executor import backend
    from lazyvic.runtime.interpreter import interpret
    from lazyvic.trace.cut import cut

    # The simulator's barrier polls its threads: switch between them often.
    sys.setswitchinterval(1e-5)
    print(json.dumps({"case": "_probe", "simulated": simulated()}), flush=True)
    for name in CASES:
        rec = {"case": name}
        try:
            outs, how = globals()[name](lv)
            if outs is None:
                rec["skip"] = how
                print(json.dumps(rec), flush=True)
                continue
            problems, kernels, steps, host_steps, fallbacks, stats, out_bytes = [], [], [], [], [], {}, 0
            runs = out_copies = 0
            for trace_outs in outs if isinstance(outs[0], list) else [outs]:
                trace, inputs, scalars, _ = cut([t._node for t in trace_outs])
                expected = interpret(trace, inputs, scalars)
                plan: CudaPlan = backend("cuda").compile(trace)
                got = plan.run(inputs, scalars, to_host=True)
                again = plan.run(inputs, scalars, to_host=True)
                out_bytes += sum(g.nbytes for g in got + again)
                runs, out_copies = runs + 2, out_copies + len(got + again)
                problems += _compare(expected, got, again, how)
                if name in LAUNCH_CASES:
                    problems += _other_launch(plan, inputs, scalars, got)
                    problems += _on_device(plan, inputs, scalars, got)
                kernels += plan.kernels
                steps += [s.name for s in plan.steps]
                host_steps += [s.name for s in plan.host_steps]
                fallbacks += plan.fallbacks
                for k, v in plan.stats.items():
                    stats[k] = stats.get(k, 0) + v
            rec.update(
                problems=problems,
                kernels=[s.name for s in kernels],
                steps=steps,
                rows_kernels=sum(s.kind == "rows" for s in kernels),
                kinds=[s.kind for s in kernels],
                host_steps=host_steps,
                fallbacks=fallbacks,
                stats=stats,
                output_bytes=out_bytes,
                plan_runs=runs,
                output_copies=out_copies,
            )
        except Exception:  # noqa: BLE001 - reported to the parent test
            rec["error"] = traceback.format_exc()
        print(json.dumps(rec), flush=True)
    for name in CHECKS:
        rec = {"case": name}
        try:
            rec["problems"] = globals()[name](lv)
        except Exception:  # noqa: BLE001 - reported to the parent test
            rec["error"] = traceback.format_exc()
        print(json.dumps(rec), flush=True)


# -- the tests (pytest side) ----------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    proc = subprocess.run(
        [sys.executable, __file__], cwd=ROOT, env=simulator_env(), capture_output=True, text=True, timeout=300
    )
    recs = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            recs[rec["case"]] = rec
    if "_probe" not in recs:
        pytest.skip(f"the CUDA simulator could not start (rc {proc.returncode}): {proc.stderr[-2000:]}")
    recs["_stderr"] = proc.stderr
    return recs


def test_simulator_is_used(results):
    assert results["_probe"]["simulated"] is SIMULATED


@pytest.mark.parametrize("case", CASES)
def test_cuda_plan_matches_cpu_plan(results, case):
    rec = results.get(case)
    assert rec is not None, f"{case} did not report (subprocess stderr):\n{results['_stderr'][-4000:]}"
    if "skip" in rec:
        pytest.skip(rec["skip"])
    assert "error" not in rec, rec["error"]
    assert not rec["problems"], rec
    assert rec["steps"], rec


def test_row_patterns_are_single_row_kernels(results):
    """softmax, log-softmax and layer norm are one kernel each, on the device: block-per-row
    along the 24-long last axis, thread-per-row along the 5-long first axis."""
    rec = results["case_softmax_layer_norm"]
    assert "error" not in rec, rec.get("error")
    assert rec["rows_kernels"] == 4 and len(rec["kernels"]) == 5 and not rec["host_steps"], rec


def test_reduction_layouts(results):
    """Rows longer than SERIAL_ROW_MAX get a block each (a shared-memory tree), shorter ones
    a thread each; both give the CPU's results (test_cuda_plan_matches_cpu_plan)."""
    rec = results["case_reductions"]
    assert "error" not in rec, rec.get("error")
    assert {"rows", "thread_rows"} <= set(rec["kinds"]), rec


def test_fallbacks_are_counted(results):
    """A max_pool2d of a constant (a broadcast scalar) has no device step: a counted host step."""
    rec = results["case_max_pool_of_a_constant"]
    assert "error" not in rec, rec.get("error")
    assert rec["fallbacks"] == ["max_pool2d"] and any("max_pool2d" in s for s in rec["host_steps"]), rec


@pytest.mark.parametrize(
    "case",
    [
        "case_gather_embedding",
        "case_gather_computed_index",
        "case_scatter_add",
        "case_randn",
        "case_randn_float64",
        "case_max_pool_of_a_view",
        "case_avg_pool_of_a_view",
        "case_matmul_of_a_constant",
        "case_conv_of_a_constant",
        "case_weight_gradient_of_a_padded_constant",
    ],
)
def test_indices_random_and_pool_views_run_on_the_device(results, case):
    """gathers (index computed in the trace or not), their range checks, scatter_add, randn,
    max_pool2d and the average pools of a view and products of constants have device steps: no
    host step, no fallback."""
    rec = results[case]
    assert "error" not in rec, rec.get("error")
    assert not rec["host_steps"] and not rec["fallbacks"] and "host_steps_run" not in rec["stats"], rec


def test_index_checks_bring_back_one_copy_per_run(results):
    """Each gather's range check runs on the device into the plan's error buffer (24 bytes per
    check), which comes back in one copy per run: the other copies to the host are the outputs
    (3 checks, 2 runs). The index computed in the trace is checked too, and its gather inlined."""
    rec = results["case_gather_embedding"]
    assert rec["steps"].count("check gather index") == 3 and "gather(4, 1)" not in rec["steps"], rec
    assert rec["stats"]["device_to_host"] == rec["output_copies"] + rec["plan_runs"], rec
    assert rec["stats"]["device_to_host_bytes"] == rec["output_bytes"] + rec["plan_runs"] * 3 * 24, rec


@pytest.mark.parametrize(
    "check",
    [
        "check_one_error_copy_per_run",
        "check_bad_index_raises_after_the_plan",
        "check_packed_scalars_are_sent_when_they_change",
    ],
)
def test_device_copies_and_deferred_index_errors(results, check):
    rec = results[check]
    assert "error" not in rec, rec.get("error")
    assert not rec["problems"], rec


@pytest.mark.parametrize("check", ["check_scatter_layout", "check_conv_has_no_column_map"])
def test_device_layouts(results, check):
    rec = results[check]
    assert "error" not in rec, rec.get("error")
    assert not rec["problems"], rec


def test_index_errors_match_the_cpu(results):
    """Out-of-range indices found on the device raise lazyvic's IndexError with the CPU plan's
    message (the first bad index in C order): inlined and computed gathers, scatter_add."""
    rec = results["check_index_errors"]
    assert "error" not in rec, rec.get("error")
    assert not rec["problems"], rec


def test_conv2d_runs_on_the_device(results):
    rec = results["case_conv2d"]
    if "skip" in rec:
        pytest.skip(rec["skip"])
    assert "error" not in rec, rec.get("error")
    assert not rec["host_steps"] and not rec["fallbacks"], rec


def test_kernels_are_compiled_once_per_source(results):
    """The cross-entropy trace uses one kernel source twice: it is compiled once and reused."""
    rec = results["case_cross_entropy"]
    assert "error" not in rec, rec.get("error")
    names = rec["kernels"]
    assert len(set(names)) < len(names), names
    assert rec["stats"]["kernels_reused"] >= len(names) - len(set(names)), rec["stats"]
    assert rec["stats"]["kernels_compiled"] <= len(set(names)), rec["stats"]


def test_transfers_are_counted(results):
    """Host steps copy their operands to the host and their results back, counted per plan."""
    stats = results["case_max_pool_of_a_constant"]["stats"]
    assert stats["host_steps_run"] >= 2 and stats["device_to_host"] >= 2 and stats["host_to_device"] >= 2, stats


def test_codegen_cuda_source_is_stable():
    """Generating twice gives the same source (kernels are keyed and cached by it); runs
    without the simulator: code generation does not import numba.cuda."""
    import lazyvic as lv
    from lazyvic.lowering.cuda import codegen
    from lazyvic.lowering.fusion import is_library, plan_groups
    from lazyvic.trace.cut import cut

    x = lv.tensor(_data(4, 16))
    trace, _, _, _ = cut([lv.functional.softmax(x * 2.0, 1)._node])
    entries = list(trace.named)
    groups, m, _ = plan_groups(entries, list(trace.outputs))
    (g,) = [g for g in groups if not is_library(entries, g.root)]
    a, b = codegen.generate(entries, m, g), codegen.generate(entries, m, g)
    assert a.source == b.source and a.name == b.name and a.kind == "rows" and a.threads == 32
    assert "cuda.syncthreads()" in a.source and np.prod(g.space_shape) == 64


def test_debug_prints_kernel_source(capfd):
    """LAZYVIC_DEBUG=3 prints each generated kernel (compiling a plan needs no GPU: numba-cuda
    compiles a kernel at its first launch)."""
    import lazyvic as lv
    from lazyvic.runtime.executor import backend
    from lazyvic.trace.cut import cut

    x = lv.tensor(_data(3, 12))
    trace, _, _, _ = cut([lv.functional.layer_norm(x, (12,))._node])
    plan = backend("cuda").compile(trace, debug=3)
    err = capfd.readouterr().err
    (kernel,) = plan.kernels
    assert f"def {kernel.name}(out, in0" in err and "@cuda.jit" in err and kernel.kind == "rows"


if __name__ == "__main__":
    _run_cases()


def test_max_pool_runs_on_the_device(results):
    """max_pool2d and avg_pool2d have device kernels: the pooling case needs no host step."""
    rec = results["case_pooling_and_batch_norm"]
    assert "error" not in rec, rec.get("error")
    for op in ("max_pool2d", "avg_pool2d"):
        assert not any(op in s for s in rec["host_steps"]) and op not in rec["fallbacks"], rec
    assert results["case_max_pool_ties_and_nan"]["steps"] == ["max_pool2d(1, 1, 2, 2)", "max_pool2d(1, 1, 4, 4)"]


def test_kernel_header_names_the_device_library():
    """A CUDA kernel file imports the kernel language's names that the device library defines
    (lowering/kernel_files.py derives them; nothing lists them by hand)."""
    pytest.importorskip("numba.cuda")
    from lazyvic.lowering.cuda import kernel_lib
    from lazyvic.lowering.cuda.loader import kernel_header

    header = kernel_header()
    assert "from lazyvic.lowering.cuda.kernel_lib import (" in header
    for name in ("f32", "b1", "exp_f32", "sigmoid_f64", "fmin", "acc_max", "uniform_f64", "round_bf16_f32"):
        assert name in header and hasattr(kernel_lib, name)
    assert "scatter_add_into" not in header  # a CPU plan's kernel, not in the device library
