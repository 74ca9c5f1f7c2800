"""Fusion decisions and tricky lowering paths, each checked against NumPy."""

import gc
import math

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.lowering.cpu.steps import IndexCheckStep, KernelStep, MatmulStep
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import plan_cache


@pytest.fixture(autouse=True)
def always_compile():
    # Each test checks the plan of its own sizes: no plan of symbolic sizes from a family of
    # traces another test made (tests/lowering/test_symbolic.py covers those).
    prev = config.compile, config.dynamic
    # Pending tensors another test of this worker left (garbage not collected yet) would join
    # this test's trace and its plan: flush them first.
    gc.collect()
    lv.sync()
    config.compile, config.dynamic = "always", False
    lv.metrics.reset()
    yield
    config.compile, config.dynamic = prev


def _last_plan():
    plan = plan_cache.last.plan if plan_cache.last is not None else None
    assert plan is not None, "no plan was compiled"
    return plan


def _compiled(fn, *arrays):
    outs = fn(*[lv.tensor(a) for a in arrays])
    outs = outs if isinstance(outs, tuple) else (outs,)
    lv.sync(*outs)
    assert lv.metrics.snapshot()["fallbacks"] == 0
    return [o.numpy() for o in outs], _last_plan()


def _kernels(plan):
    return [s for s in plan.steps if isinstance(s, KernelStep)]


rng = np.random.default_rng(0)
X = rng.standard_normal((6, 10)).astype(np.float32)


def test_elementwise_chain_is_one_kernel():
    (y,), plan = _compiled(lambda x: ((x * 2.0 + 1.0).tanh() * x).sigmoid(), X)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-(np.tanh(X * 2 + 1) * X))), rtol=1e-6, atol=1e-6)
    assert len(plan.steps) == 1


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "logsumexp"])
def test_row_patterns_are_one_kernel(name):
    def f(x):
        if name == "layer_norm":
            return lv.functional.layer_norm(x, (10,))
        if name == "logsumexp":
            return x.logsumexp(1)
        return getattr(x, name)(1)

    (y,), plan = _compiled(f, X)
    m = X.max(1, keepdims=True)
    lse = np.log(np.exp(X - m).sum(1, keepdims=True)) + m
    ref = {
        "softmax": np.exp(X - lse),
        "log_softmax": X - lse,
        "logsumexp": lse[:, 0],
        "layer_norm": (X - X.mean(1, keepdims=True)) / np.sqrt(X.var(1, keepdims=True) + 1e-5),
    }[name]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert len(_kernels(plan)) == 1, [k.name for k in _kernels(plan)]


def test_cross_entropy_forward_is_one_row_kernel_plus_mean():
    t = rng.integers(0, 10, 6)
    (loss,), plan = _compiled(lambda x, t: lv.functional.cross_entropy(x, t), X, t)
    m = X.max(1, keepdims=True)
    logp = X - (np.log(np.exp(X - m).sum(1, keepdims=True)) + m)
    np.testing.assert_allclose(loss, -logp[np.arange(6), t].mean(), rtol=1e-5)
    assert len(_kernels(plan)) <= 3


def test_matmul_with_fused_epilogue():
    w = rng.standard_normal((4, 10)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    (y,), plan = _compiled(lambda x, w, b: (x @ w.T + b).relu(), X, w, b)
    np.testing.assert_allclose(y, np.maximum(X @ w.T + b, 0), rtol=1e-5, atol=1e-6)
    kinds = [type(s).__name__ for s in plan.steps]
    assert kinds == ["MatmulStep", "KernelStep"]


def test_batched_broadcast_matmul():
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 6)).astype(np.float32)
    (y,), plan = _compiled(lambda a, b: a @ b, a, b)
    np.testing.assert_allclose(y, a @ b, rtol=1e-5, atol=1e-5)
    assert any(isinstance(s, MatmulStep) for s in plan.steps)


def test_reshape_of_transposed_value_materializes():
    (y,), _ = _compiled(lambda x: (x.T * 2.0).reshape(5, 12) + 1.0, X)
    np.testing.assert_allclose(y, (X.T * 2).reshape(5, 12) + 1, rtol=1e-6)


def test_reductions_over_middle_and_all_axes():
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    (s1, s2, s3, am), _ = _compiled(lambda a: (a.sum(1), a.amax((0, 2)), a.mean(), a.argmax(2)), a)
    np.testing.assert_allclose(s1, a.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s2, a.max((0, 2)))
    np.testing.assert_allclose(s3, a.mean(), rtol=1e-5)
    np.testing.assert_array_equal(am, a.argmax(2))


def test_cat_slice_pad_paths():
    (y,), _ = _compiled(lambda x: lv.cat([x[:, 1::3].exp(), x[2:5, 1:4] - 1.0], dim=0), X)
    np.testing.assert_allclose(y, np.concatenate([np.exp(X[:, 1::3]), X[2:5, 1:4] - 1]), rtol=1e-6)


def test_int_and_bool_dtypes():
    a = rng.integers(-5, 5, (4, 6)).astype(np.int64)
    (s, m, b), _ = _compiled(lambda a: ((a * 3 - 1).sum(1), a.amax(0), (a > 0) & (a < 3)), a)
    np.testing.assert_array_equal(s, (a * 3 - 1).sum(1))
    np.testing.assert_array_equal(m, a.max(0))
    np.testing.assert_array_equal(b, (a > 0) & (a < 3))
    assert s.dtype == np.int64 and b.dtype == np.bool_


def test_zero_size_and_scalar_outputs():
    e = np.zeros((0, 3), np.float32)
    (z, s), _ = _compiled(lambda e: (e * 2.0, e.sum(0)), e)
    assert z.shape == (0, 3)
    np.testing.assert_array_equal(s, np.zeros(3, np.float32))


def test_large_parallel_kernel(monkeypatch):
    from lazyvic.lowering.cpu import codegen

    monkeypatch.setattr(codegen, "PARALLEL_MIN_ELEMENTS", 1 << 15)  # parallel at a small size
    big = rng.standard_normal((256, 300)).astype(np.float32)
    (y,), plan = _compiled(lambda x: (x * 0.5).tanh() + x.sum(1, keepdim=True), big)
    np.testing.assert_allclose(y, np.tanh(big * 0.5) + big.sum(1, keepdims=True), rtol=1e-5, atol=1e-4)
    assert any("prange" in k.source for k in _kernels(plan))


def test_memory_plan_shares_temporaries():
    a = rng.standard_normal((64, 64)).astype(np.float32)

    def f(x):
        for _ in range(4):
            x = (x @ x).tanh() * 0.5
        return x

    (y,), plan = _compiled(f, a)
    ref = a
    for _ in range(4):
        ref = np.tanh(ref @ ref) * 0.5
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    mem = plan.memory
    assert mem.temporary_bytes < mem.unshared_bytes
    assert mem.peak_bytes == mem.input_bytes + mem.parameter_bytes + mem.output_bytes + mem.temporary_bytes
    assert math.prod(a.shape) * 4 == mem.input_bytes


def _interpreted(fn, *arrays):
    config.compile = "never"
    try:
        outs = fn(*[lv.tensor(a) for a in arrays])
        return [o.numpy() for o in (outs if isinstance(outs, tuple) else (outs,))]
    finally:
        config.compile = "always"


def test_an_elementwise_kernel_writes_over_the_product_it_reads():
    """The bias add and ReLU after a product write over the product's output, which dies in
    them (pipeline.plan_in_place): one pool slot for both, the kernel reads it as ``out``, and
    the bits are the interpreter's."""
    w, b = rng.standard_normal((16, 10)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    w2 = rng.standard_normal((8, 16)).astype(np.float32)
    F = lv.functional

    def f(x, w, b, w2):
        return F.linear(F.linear(x, w, b).relu(), w2)

    (y,), plan = _compiled(f, X, w, b, w2)
    assert np.array_equal(y, _interpreted(f, X, w, b, w2)[0])
    assert plan.stats["kernels_in_place"] == 1
    (kernel,) = _kernels(plan)
    product = next(s for s in plan.steps if isinstance(s, MatmulStep) and kernel.out not in s.reads())
    assert product.out not in kernel.buffers and "out[" in kernel.source.split("=", 1)[1]
    slots = plan.memory.slot_of
    assert slots[product.out] == slots[kernel.out]
    assert (plan.memory.temporary_bytes, plan.memory.unshared_bytes) == (6 * 16 * 4, 2 * 6 * 16 * 4)


def test_a_buffer_read_after_the_kernel_is_not_written_over():
    """A product's output that a later step reads again keeps its own storage."""
    w, b = rng.standard_normal((16, 10)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    w2 = rng.standard_normal((16, 16)).astype(np.float32)

    def f(x, w, b, w2):
        y = x @ w.T
        z = (y + b).relu() @ w2
        return z @ y.T  # y read again, by a product after the kernel

    (out,), plan = _compiled(f, X, w, b, w2)
    assert np.array_equal(out, _interpreted(f, X, w, b, w2)[0])
    assert "kernels_in_place" not in plan.stats
    (kernel,) = _kernels(plan)
    assert len(kernel.buffers) == 2  # the product and the bias


def test_the_memory_plan_refuses_a_slot_still_in_use():
    from types import SimpleNamespace

    from lazyvic.lowering.memory import plan_memory

    e = SimpleNamespace(shape=(4,), dtype=np.dtype(np.float32))
    # step 0 writes 0; step 1 writes 1 (over 0); step 2 reads 0: 0 is still needed
    steps_io = [((0,), ()), ((1,), ()), ((2,), (0, 1))]
    with pytest.raises(RuntimeError, match="cannot be written over node 0"):
        plan_memory([e, e, e], steps_io, {0, 1}, {2}, set(), inplace={1: 0})
    mem = plan_memory([e, e, e], steps_io[:2] + [((2,), (1,))], {0, 1}, {2}, set(), inplace={1: 0})
    assert mem.slot_of[0] == mem.slot_of[1] and len(mem.slot_bytes) == 1


def test_gather_with_a_realized_index_is_a_load_in_the_kernel():
    idx = rng.integers(0, 10, (6, 3))
    (y,), plan = _compiled(lambda x, i: (x.gather(1, i) * 2.0).exp(), X, idx)
    np.testing.assert_allclose(y, np.exp(np.take_along_axis(X, idx, 1) * 2), rtol=1e-6)
    assert len(_kernels(plan)) == 1 and not plan.fallbacks


def test_embedding_lookup_compiles():
    table = rng.standard_normal((20, 4)).astype(np.float32)
    ids = rng.integers(0, 20, 9)
    (y,), plan = _compiled(lambda w, i: w.index_select(0, i) + 1.0, table, ids)
    np.testing.assert_allclose(y, table[ids] + 1, rtol=1e-6)
    assert not plan.fallbacks


def test_gather_at_an_index_computed_in_the_trace_compiles():
    """An index computed in the same trace (positions = offset + arange, an argmax) is stored,
    range-checked and read by the gathering kernel: no NumPy fallback (it was one), and an
    index out of range still raises the gather's IndexError when the plan runs."""
    table = rng.standard_normal((20, 4)).astype(np.float32)
    ids = rng.integers(0, 16, 9)
    (y,), plan = _compiled(lambda w, i: w.index_select(0, i + 3) * 2.0, table, ids)
    np.testing.assert_allclose(y, table[ids + 3] * 2, rtol=1e-6)
    assert not plan.fallbacks and any(isinstance(s, IndexCheckStep) for s in plan.steps)
    with pytest.raises(lv.errors.IndexError, match="gather: index [0-9]+ out of range for dimension of size 20"):
        _compiled(lambda w, i: w.index_select(0, i + 30) * 2.0, table, ids)


def test_an_embedding_checks_and_scatters_its_index_unexpanded():
    """An embedding's index reaches its gather expanded to (N, D): the range check reads the
    index buffer itself (no copy of the expanded view), and the gradient's scatter_add runs
    the 2-D kernel. Both give what they gave before: the weight gradient adds duplicate rows
    in index order (np.add.at's order, bit for bit), and a bad index written into the index
    buffer after it was recorded still raises the gather's IndexError, naming the value."""
    table = rng.standard_normal((50, 16)).astype(np.float32)
    ids = rng.integers(0, 50, 300)  # many duplicates: the order of their adds shows in the bits
    g = rng.standard_normal((300, 16)).astype(np.float32)
    w, idx = lv.tensor(table, requires_grad=True), lv.tensor(ids)

    def step(bad=None):
        y = lv.nn.functional.embedding(idx, w) * 2.0
        (y * lv.tensor(g)).sum().backward()
        if bad is not None:  # recorded with good indices, run with a bad one
            idx.numpy()[7] = bad
        lv.sync(y, w.grad)
        out = y.numpy(), w.grad.numpy()
        w.grad = None
        return out

    expected = np.zeros_like(table)
    np.add.at(expected, ids, g * np.float32(2.0))
    for _ in range(2):  # the second: the same plan again
        y, grad = step()
        np.testing.assert_array_equal(y, table[ids] * 2)
        np.testing.assert_array_equal(grad, expected)
        checks = [s for s in _last_plan().steps if isinstance(s, IndexCheckStep)]
        assert checks and all(s.whole_buffer for s in checks)
    with pytest.raises(lv.errors.IndexError, match="^gather: index 57 out of range for dimension of size 50"):
        step(bad=57)


@pytest.mark.parametrize("busy", [False, True])
def test_rand_draws_are_bit_identical_to_the_interpreter(monkeypatch, busy):
    """rand runs as its own step (four words per Philox block, random_kernels.py), on the plan's
    thread team or, while other processes are busy, on the calling thread: the interpreter's
    bits either way, at offsets that are not multiples of four."""
    from lazyvic.lowering.cpu import load
    from lazyvic.lowering.cpu.steps import RandStep

    lv.sync()
    monkeypatch.setattr(load, "other_load", lambda: busy)

    def run(mode):
        config.compile = mode
        lv.manual_seed(1234)
        a = lv.rand(37, 53)  # 1,961 words: the next draw starts inside a block
        b = lv.rand(1000, 40, dtype=lv.float64) * 2.0
        c = lv.functional.dropout(lv.ones(300, 300), 0.3)  # large: on the team's threads
        lv.sync(a, b, c)
        return [t.numpy().copy() for t in (a, b, c)]

    expected = run("never")
    lv.metrics.reset()
    got = run("always")
    assert lv.metrics.snapshot()["fallbacks"] == 0
    assert sum(isinstance(s, RandStep) for s in _last_plan().steps) == 3
    assert not any("rand" in getattr(s, "source", "") for s in _last_plan().steps)  # in no kernel
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
    assert abs((got[2] == 0).mean() - 0.3) < 0.01


def test_rand_of_half_types_rounds_as_the_interpreter():
    """float16 and bfloat16 draws: float32 draws rounded as the reference rounds them, by the
    step (no fallback), with their float32 scratch in the plan's memory report."""
    from lazyvic.lowering.cpu.steps import RandStep

    def run(mode):
        config.compile = mode
        lv.manual_seed(77)
        a, b = lv.rand(33, 7, dtype=lv.float16), lv.rand(5, 9, dtype=lv.bfloat16)
        lv.sync(a, b)
        return [t.numpy().astype(np.float32) for t in (a, b)]

    expected = run("never")
    lv.metrics.reset()
    got = run("always")
    assert lv.metrics.snapshot()["fallbacks"] == 0
    plan = _last_plan()
    assert [s.half for s in plan.steps if isinstance(s, RandStep)] == [True, True]
    assert plan.memory.scratch_bytes == 4 * (33 * 7 + 5 * 9)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
    assert len(np.unique(got[0])) > 100  # draws, not one rounded value


def test_rand_blocks_cover_every_offset_and_size():
    """The fill kernels against the NumPy stream: partial first and last blocks, outputs shorter
    than a block, float32 and float64, on one thread and split among several."""
    from lazyvic.dtypes import float32, float64
    from lazyvic.lowering.cpu import random_kernels
    from lazyvic.ops.source import _rand_ref

    for dtype in (float32, float64):
        for n in (0, 1, 2, 3, 4, 5, 7, 8, 9, 61):
            for offset in (0, 1, 2, 3, 5, 6, 2**40 + 7):
                want = _rand_ref([987654321012, offset], {"shape": (n,), "dtype": dtype})
                for threads in (1, 2, 3):
                    out = np.full(n, -1.0, dtype.np)
                    if threads == 1:
                        random_kernels.fill(out, 987654321012, offset)
                    else:
                        random_kernels.fill_parallel(out, 987654321012, offset, threads)
                    np.testing.assert_array_equal(out, want, err_msg=f"{dtype} n={n} offset={offset} threads={threads}")


def test_compiled_argmax_keeps_the_first_nan():
    a = np.array([[1, np.nan, 3, 2], [5, 1, 7, np.nan]], np.float32)
    (am, mx), _ = _compiled(lambda a: (a.argmax(1), a.max(1).indices), a)
    np.testing.assert_array_equal(am, [1, 3])
    np.testing.assert_array_equal(mx, [1, 3])


def test_outputs_merged_by_cse_get_their_own_storage():
    x = lv.tensor(np.arange(4, dtype=np.float32))
    a, b = x.exp(), x.exp()
    lv.sync(a, b)
    a.numpy()[0] = 100.0
    assert b.numpy()[0] == 1.0


def test_zero_size_reshape_compiles():
    (y,), plan = _compiled(lambda z: z.reshape(0, 4) * 2.0, np.zeros((4, 0), np.float32))
    assert y.shape == (0, 4) and not plan.fallbacks


def test_gather_index_changed_after_recording_is_checked_at_run_time():
    x = lv.tensor(np.arange(10, dtype=np.float32))
    idx = lv.tensor(np.array([1, 2, 3]))
    view = idx.numpy()
    y = x.gather(0, idx) * 1.0
    view[0] = 1_000_000  # through the shared NumPy view, after the op checked the range
    with pytest.raises(IndexError, match="out of range"):
        y.numpy()


def test_embedding_backward_scatter_add_is_compiled():
    table = rng.standard_normal((20, 4)).astype(np.float32)
    ids = np.array([3, 5, 3, 0, 19, 3])
    w = lv.tensor(table, requires_grad=True)
    e = w.index_select(0, lv.tensor(ids))
    (e * e).sum().backward()
    w.grad.numpy()
    expected = np.zeros_like(table)
    np.add.at(expected, ids, 2 * table[ids])
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-6)
    assert lv.metrics.snapshot()["fallbacks"] == 0


def test_compiled_scatter_add_checks_indices():
    base = lv.zeros(3, 2)
    idx = lv.tensor(np.array([[0, 1], [2, 0]]))
    view = idx.numpy()
    out = base.scatter_add(0, idx, lv.ones(2, 2))
    view[1, 1] = 7  # out of range, written through the shared NumPy view after the op
    with pytest.raises(IndexError, match="out of range"):
        out.numpy()


def test_long_chains_are_cut_into_kernels_of_bounded_size(monkeypatch):
    # Compile time grows faster than a kernel's body (lazyvic/lowering/fusion.py MAX_KERNEL_OPS):
    # a long chain is cut into kernels of at most that many ops, which the multi-output merge
    # does not join again. Adds and multiplies round exactly as NumPy's float32 ones.
    from lazyvic.lowering import fusion

    monkeypatch.setattr(fusion, "MAX_KERNEL_OPS", 6)

    def chain(x, n=20):
        for _ in range(n):
            x = x * 1.5 + 0.25
        return x

    (y,), plan = _compiled(chain, X)
    ref = X
    for _ in range(20):
        ref = ref * np.float32(1.5) + np.float32(0.25)
    np.testing.assert_array_equal(y, ref)
    kernels = _kernels(plan)
    assert len(kernels) >= 40 // 6
    assert all(k.source.count(" = f32(") <= 6 + 1 for k in kernels)  # its ops and one load


def test_lstm_cell_is_one_kernel_per_step():
    """The gates (the projected input plus h @ W_hh^T) are read by the kernels of c and h,
    which merge_outputs runs as one loop: they are computed inside it, not stored by a kernel
    of their own first (lowering/fusion._loops). Six steps of an LSTMCell (nn.LSTM runs its
    recurrence as one primitive instead: ops/recurrent.py): no step but the last (whose c and h
    are outputs too) stores its gates."""
    cell = lv.nn.LSTMCell(8, 8)
    lv.sync(*cell.parameters())  # the initial weights' random draws: a plan of their own
    x = lv.tensor(rng.standard_normal((6, 2, 8)).astype(np.float32))

    def run():
        h = c = lv.zeros(2, 8)
        outs = []
        for t in range(6):
            h, c = cell(x[t], (h, c))
            outs.append(h)
        return lv.stack(outs), h, c

    with lv.no_grad():
        out, h, c = run()
        lv.sync(out, h, c)
    plan = _last_plan()
    gates = [s.name for s in _kernels(plan) if plan.entries[s.out].shape == (2, 32)]
    assert len(gates) <= 1, [s.name for s in plan.steps]
    assert sum(isinstance(s, MatmulStep) for s in plan.steps) == 12  # the projection and h @ W_hh^T per step
    config.compile = "never"
    with lv.no_grad():
        ref_out, _, _ = run()
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())


def test_a_product_reads_a_stored_broadcast_before_a_merged_kernel_rewrites_it():
    """A GRU's first step multiplies h0 = zeros(...) (a broadcast number, stored because the live
    tensor keeps it as an output) by W_hh^T; merge_outputs may move the store of h0 into a later
    kernel only if no step before that kernel reads it, and the product reads the stored h0, not
    the number below it (fusion._operand_base). Before, the product read h0's buffer before it
    was written: NaN or garbage, only when the output tensor (and its history) was kept alive."""
    lv.manual_seed(0)
    layer = lv.nn.GRU(8, 8, 1)
    lv.sync(*layer.parameters())
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    kept = layer(lv.tensor(x))[0]  # gradients on: every intermediate stays alive, as outputs
    got = kept.detach().numpy()
    config.compile = "never"
    want = layer(lv.tensor(x))[0].detach().numpy()
    np.testing.assert_array_equal(got, want)


def _reach_by_search(entries, m, roots, stages_of):
    """fusion.reach's definition, searched down from every kernel root (its old form)."""
    r = {}
    for k in roots:
        stack = list(entries[k].inputs) + [j for s in stages_of.get(k, ()) for j in entries[s].inputs]
        for s in stages_of.get(k, ()):
            r.setdefault(s, set()).add(k)
        seen = set()
        while stack:
            i = stack.pop()
            if i in seen or i in m:
                continue
            seen.add(i)
            r.setdefault(i, set()).add(k)
            stack.extend(entries[i].inputs)
    return r


def test_reach_in_one_pass_is_the_search_from_every_root(monkeypatch):
    """fusion.reach (one pass over the entries, readers first), and its update after each wave
    of new buffers (fusion._update_reach), give, at every call while an LSTM's and a small GPT's
    training steps are planned, what a search down from every root gives."""
    from lazyvic.lowering import fusion, pipeline
    from lazyvic.lowering.cpu import codegen
    from lazyvic.trace import cut

    calls, updates = [], []
    one_pass, update = fusion.reach, fusion._update_reach

    def compared(entries, m, roots, stages_of, consumers=None):
        got = one_pass(entries, m, roots, stages_of, consumers)
        assert got == _reach_by_search(entries, m, roots, stages_of)
        calls.append(len(got))
        return got

    def compared_update(entries, m, root_set, stages_of, consumers, r, nodes):
        # Updated in place after a wave's new buffers: what a fresh search gives.
        update(entries, m, root_set, stages_of, consumers, r, nodes)
        assert r == _reach_by_search(entries, m, sorted(root_set), stages_of)
        updates.append(len(nodes))

    monkeypatch.setattr(fusion, "reach", compared)
    monkeypatch.setattr(fusion, "_update_reach", compared_update)
    lv.manual_seed(0)
    lstm, head = lv.nn.LSTM(4, 6, 2), lv.nn.Linear(6, 3)
    x = lv.tensor(rng.standard_normal((5, 2, 4)).astype(np.float32))
    y, _ = lstm(x)
    loss = head(y).square().mean()
    gpt = lv.models.TinyGPT(11, d_model=8, n_layer=1, n_head=2, block_size=8)
    idx = lv.tensor(rng.integers(0, 11, (2, 8)))
    _, gpt_loss = gpt(idx, idx)
    for total, params in ((loss, [*lstm.parameters(), *head.parameters()]), (gpt_loss, list(gpt.parameters()))):
        total.backward()
        trace = cut([total._node] + [p.grad._node for p in params])[0]
        pipeline.lower(trace, codegen.generate)
    assert len(calls) >= 2 and max(calls) > 50
    assert len(updates) >= 4 and max(updates) > 10


def test_a_gather_index_read_through_other_movement_is_checked_as_a_view():
    """An index read through other movement ops (a transpose, a slice) is range-checked on its
    view, not its whole buffer: the plan compiles (it failed, and fell back to the interpreter,
    when the step looked for a shape attribute the last op does not have), and a bad index in
    a part of the buffer the gather does not read raises nothing."""
    table = rng.standard_normal((4, 20)).astype(np.float32)
    ids = rng.integers(0, 20, (7, 4))
    ids[0, 0] = 99  # outside the slice the gather reads
    (y,), plan = _compiled(lambda w, i: w.gather(1, i[1:].transpose(0, 1)) * 2.0, table, ids)
    np.testing.assert_array_equal(y, np.take_along_axis(table, ids[1:].T, 1) * 2)
    checks = [s for s in plan.steps if isinstance(s, IndexCheckStep)]
    assert checks and not any(s.whole_buffer for s in checks)


def test_a_long_unrolled_recurrence_is_planned_in_a_bounded_number_of_waves(monkeypatch):
    """A recurrence unrolled in Python (pytorch/examples' time_sequence_prediction runs two
    LSTMCells over 999 steps) leaves one value per step to materialize, each below the next:
    fusion's exact waves took one wave per step, each a pass over the whole trace (a 100-step
    loop: 202 waves, 110 s of planning). Past EXACT_WAVES waves a wave takes every candidate:
    the forward and backward of 40 steps plan in a few waves more, with the interpreter's bits."""
    from lazyvic.lowering import fusion

    waves = []
    loops = fusion._loops

    def counted(*args):
        waves[-1] += 1
        return loops(*args)

    groups = fusion.plan_groups

    def planned(*args):
        waves.append(0)
        return groups(*args)

    monkeypatch.setattr(fusion, "_loops", counted)
    monkeypatch.setattr("lazyvic.lowering.pipeline.plan_groups", planned)
    lv.manual_seed(0)
    cell = lv.nn.LSTMCell(1, 3).double()
    lv.sync(*cell.parameters())
    x = rng.standard_normal((2, 40)).astype(np.float64)

    def step(x):
        h = c = lv.zeros(2, 3, dtype=lv.float64)
        outs = []
        for t in x.split(1, dim=1):
            h, c = cell(t, (h, c))
            outs.append(h)
        loss = lv.stack(outs).square().mean()
        loss.backward()
        grads = tuple(p.grad for p in cell.parameters())
        cell.zero_grad()
        return (loss, *grads)

    got, _ = _compiled(step, x)
    assert waves and max(waves) <= 20, waves  # exact: 82 (two a step)
    want = _interpreted(step, x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
