"""Native segments (lowering/cpu/native.py): a hot plan's kernels and BLAS products run by one
generated Numba function per run of them, with the same bits as the steps one by one.

Plans compile into a temporary cache directory (the suite's cache stays as it was)."""

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic.lowering.cpu import compile_trace, native
from lazyvic.lowering.cpu.steps import KernelStep, MatmulStep
from lazyvic.runtime import executor, metrics
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.trace import cut

pytestmark = pytest.mark.skipif(not native.blas().ok, reason=f"NumPy's BLAS not bound: {native.blas().reason}")


def _compiled(tensors, tmp_path):
    trace, inputs, scalars, _ = cut([t._node for t in tensors])
    plan = compile_trace(trace, cache_dir=tmp_path)
    return plan, [np.ascontiguousarray(a) for a in inputs], scalars


def _segments(steps):
    return [s for s in steps if isinstance(s, native.NativeSegment)]


def _run_both(plan, inputs, scalars, runs=2):
    """The plan's outputs run step by step, then (hot) through native segments."""
    plan.native_after = 0
    plain = plan.run(inputs, scalars)
    plan.native_after = 1
    outs = [plan.run(inputs, scalars) for _ in range(runs)]
    return plain, outs


def test_products_and_kernels_in_one_segment_give_the_same_bits(tmp_path):
    rng = np.random.default_rng(0)
    mats = {
        "x": rng.standard_normal((33, 17), dtype=np.float32),
        "w": rng.standard_normal((19, 17), dtype=np.float32),
        "v": rng.standard_normal((33, 19), dtype=np.float32),
        "q": rng.standard_normal((2, 3, 7, 5), dtype=np.float32),
        "k": rng.standard_normal((2, 3, 9, 5), dtype=np.float32),
        "d": rng.standard_normal((6, 4), dtype=np.float64),
        "e": rng.standard_normal((4, 6), dtype=np.float64),
    }
    t = {n: lv.tensor(a) for n, a in mats.items()}
    h = (t["x"] @ t["w"].T).relu()  # an operand read transposed (F-blasable)
    g = t["x"].T @ (h * t["v"])  # a transposed first operand, a kernel's output as second
    att = (t["q"] @ t["k"].transpose(-2, -1)).softmax(-1)  # batched, both 4-D
    wb = t["q"] @ t["x"][:5, :4]  # a 2-D operand broadcast over the batch (a view with offsets)
    dd = (t["d"] @ t["e"]).exp()
    outs = [h, g, att, wb, dd]
    plan, inputs, scalars = _compiled(outs, tmp_path)
    plain, hot = _run_both(plan, inputs, scalars)
    segs = _segments(plan.native)
    assert segs and all(s.fn is not None for s in segs)
    products = sum(isinstance(st, MatmulStep) for s in segs for st in s.steps)
    assert products == sum(isinstance(st, MatmulStep) for st in plan.steps) == 5
    for run in hot:
        for a, b in zip(plain, run):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    # and against NumPy's own products
    np.testing.assert_array_equal(hot[0][1], mats["x"].T @ (hot[0][0] * mats["v"]))
    np.testing.assert_array_equal(hot[0][3], mats["q"] @ mats["x"][:5, :4])
    assert plan.stats["native_segments"] == len(segs)


def test_vector_products_are_gemv_and_numpys_other_ways_stay_steps(tmp_path):
    rng = np.random.default_rng(1)
    x = lv.tensor(rng.standard_normal((8, 8), dtype=np.float32))
    u = lv.tensor(rng.standard_normal((8,), dtype=np.float32))
    y = lv.tensor(rng.standard_normal((8, 1), dtype=np.float32))
    r = lv.tensor(rng.standard_normal((3, 1, 8), dtype=np.float32))
    a = x * 2.0
    native_products = [
        (x + 1.0) @ u,  # a vector: gemv
        (x - 1.0) @ y,  # a column: gemv
        r @ (x * 4.0).T,  # rows of a batch times a transposed matrix: gemv, column-major
        (x * 5.0).sum(0, keepdim=True) @ (x * 6.0),  # a row: gemv
    ]
    step_products = [
        a @ a.T,  # one buffer times its transpose at one address: NumPy uses syrk
        (x * 3.0) @ (x * 3.0)[:, ::2],  # a non-contiguous operand: NumPy copies it
        (x * 7.0)[:1] @ (x * 8.0)[:, :1],  # a 1x1 result: dot
    ]
    plan, inputs, scalars = _compiled(native_products + step_products, tmp_path)
    plain, hot = _run_both(plan, inputs, scalars)
    in_segments = [st for s in _segments(plan.native) for st in s.steps if isinstance(st, MatmulStep)]
    assert len(in_segments) == len(native_products)
    assert sum(isinstance(st, MatmulStep) for st in plan.native) == len(step_products)
    for a, b in zip(plain, hot[-1]):
        assert a.tobytes() == b.tobytes()
    by_shape = {a.shape: a for a in inputs}
    # (the plan may run it as another product: transposes moved by the graph passes)
    np.testing.assert_allclose(hot[-1][2], by_shape[(3, 1, 8)] @ (by_shape[(8, 8)] * 4.0).T, rtol=1e-5, atol=1e-5)


def test_a_segment_that_cannot_compile_runs_its_steps(tmp_path, monkeypatch):
    x = lv.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    out = ((x * 2.0 + 1.0).exp() @ x.T.relu()).sum(0) - 1.0
    plan, inputs, scalars = _compiled([out], tmp_path)

    def broken(*args, **kw):
        raise RuntimeError("no native code today")

    monkeypatch.setattr(native, "load_checked", broken)
    plain, hot = _run_both(plan, inputs, scalars)
    segs = _segments(plan.native)
    assert segs and all(s.failed and s.fn is None for s in segs)
    assert plain[0].tobytes() == hot[0][0].tobytes() == hot[1][0].tobytes()
    np.testing.assert_allclose(plain[0], (np.exp(inputs[0] * 2 + 1) @ np.maximum(inputs[0].T, 0)).sum(0) - 1, 1e-5)


def test_a_segment_whose_arguments_fail_to_compile_runs_its_steps(tmp_path):
    """New argument types at a later run (a compile error there) fall back to the steps too."""
    from numba.core.errors import TypingError

    x = lv.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    out = ((x * 2.0).exp() @ x.T).sum(0) + 1.0
    plan, inputs, scalars = _compiled([out], tmp_path)
    plain, hot = _run_both(plan, inputs, scalars)

    def typing_error(*args):
        raise TypingError("no overload for these types")

    seg = _segments(plan.native)[0]
    seg.fn = typing_error
    again = plan.run(inputs, scalars)
    assert seg.failed and seg.fn is None
    assert again[0].tobytes() == plain[0].tobytes() == hot[-1][0].tobytes()


def test_scalars_change_between_runs(tmp_path):
    """A step's Python numbers (a learning rate, a scale) are read at every run."""
    rng = np.random.default_rng(2)
    w = lv.tensor(rng.standard_normal((16, 16), dtype=np.float32))
    x = lv.tensor(rng.standard_normal((4, 16), dtype=np.float32))
    out = ((x @ w) * 0.5 + 0.25).tanh() @ w
    trace, inputs, scalars, _ = cut([out._node])
    plan = compile_trace(trace, cache_dir=tmp_path)
    plan.native_after = 1
    for k in range(3):
        s = [v * (k + 1) if isinstance(v, float) else v for v in scalars]
        got = plan.run(inputs, s)[0]
        plan.native_after, seg = 0, plan.native
        plan.native = None
        want = plan.run(inputs, s)[0]
        plan.native_after, plan.native = 1, seg
        assert got.tobytes() == want.tobytes()
    assert _segments(plan.native)


def test_a_hot_training_step_through_the_runtime(fresh, monkeypatch):
    """Through the plan cache: after a few steps the plan runs native segments (counted), and
    the losses and parameters equal those of a run that never goes native, bit for bit."""

    def train(native_after):
        monkeypatch.setattr(executor.backend("cpu"), "native_after", native_after)
        monkeypatch.setattr(executor.backend("cpu"), "native_background", False)
        lv.manual_seed(0)
        rng = np.random.default_rng(0)
        model = lv.nn.Sequential(lv.nn.Linear(12, 16), lv.nn.GELU(), lv.nn.Linear(16, 3))
        opt = lv.optim.AdamW(model.parameters(), lr=0.01)
        x = lv.tensor(rng.standard_normal((8, 12), dtype=np.float32))
        y = lv.tensor(rng.integers(0, 3, 8))
        losses = []
        for _ in range(6):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.numpy().copy() for p in model.parameters()]

    metrics.reset()
    hot_losses, hot_params = train(2)
    assert metrics.snapshot()["native_segments"] >= 1
    plan_cache.clear_plans()
    cold_losses, cold_params = train(0)
    assert hot_losses == cold_losses
    for a, b in zip(hot_params, cold_params):
        assert a.tobytes() == b.tobytes()


def test_kernels_only_segment_without_products(tmp_path, monkeypatch):
    """Without NumPy's BLAS bound, kernels still join in segments; products stay steps."""
    monkeypatch.setattr(native.blas(), "ok", False)
    x = lv.tensor(np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6))
    a = (x * 2.0).exp().sum(1)
    b = (x @ x.T.relu()).sigmoid()
    plan, inputs, scalars = _compiled([a, b], tmp_path)
    plain, hot = _run_both(plan, inputs, scalars)
    segs = _segments(plan.native or [])
    assert all(isinstance(st, KernelStep) for s in segs for st in s.steps)
    for p, h in zip(plain, hot[-1]):
        assert p.tobytes() == h.tobytes()


def test_a_worker_process_compiles_the_segments_while_the_steps_run(tmp_path):
    """In the background (the runtime's way): the runs go on through the steps until the worker
    has put the segment in Numba's disk cache; then a run loads it, and the bits stay the same."""
    import time

    from lazyvic.lowering.cpu import compile_workers

    if compile_workers.worker_count() == 0:
        pytest.skip("no compile worker on this machine (LAZYVIC_COMPILE_WORKERS=0 or one CPU)")
    rng = np.random.default_rng(3)
    x = lv.tensor(rng.standard_normal((16, 24), dtype=np.float32))
    w = lv.tensor(rng.standard_normal((24, 8), dtype=np.float32))
    out = ((x @ w).tanh() * 3.0 + 0.5).softmax(-1)
    plan, inputs, scalars = _compiled([out], tmp_path)
    want = plan.run(inputs, scalars)[0]
    plan.native_after, plan.native_background = 1, True
    first = plan.run(inputs, scalars)[0]  # the segment goes to the worker; this run ran the steps
    segs = _segments(plan.native)
    assert segs and all(s.pending and s.fn is None for s in segs)
    deadline = time.monotonic() + 300
    while not all(s.ready or s.failed for s in segs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(s.ready and not s.failed for s in segs)
    got = plan.run(inputs, scalars)[0]  # loads it from the disk cache
    assert all(s.fn is not None for s in segs)
    assert want.tobytes() == first.tobytes() == got.tobytes()


def test_plans_with_more_calls_than_the_cap_stay_steps(tmp_path, monkeypatch):
    x = lv.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6))
    out = ((x @ x.T).exp() @ x).tanh().sum(0)
    plan, inputs, scalars = _compiled([out], tmp_path)
    assert sum(isinstance(st, (KernelStep, MatmulStep)) for st in plan.steps) >= 3
    monkeypatch.setattr(native, "MAX_CALLS", 1)
    plain, hot = _run_both(plan, inputs, scalars)
    assert plan.native is False and plan.stats.get("native_segments", 0) == 0
    assert plain[0].tobytes() == hot[-1][0].tobytes()


def test_a_plan_of_symbolic_sizes_goes_native_per_binding(fresh, monkeypatch):
    """Runs are counted per binding of the size symbols: a context that grows by one each call
    (every call a new binding, run once) makes no native segment; a binding run native_after
    times does, and its results stay those of the steps."""
    monkeypatch.setattr(executor.backend("cpu"), "native_after", 2)
    monkeypatch.setattr(executor.backend("cpu"), "native_background", False)
    rng = np.random.default_rng(0)
    w1 = lv.tensor(rng.standard_normal((6, 16), dtype=np.float32))
    w2 = lv.tensor(rng.standard_normal((16, 6), dtype=np.float32))
    x = rng.standard_normal((40, 6), dtype=np.float32)

    def call(n):
        out = (lv.tensor(x[:n]) @ w1).tanh() @ w2
        return out.numpy()

    def expected(n):
        return np.tanh(x[:n] @ w1.numpy()) @ w2.numpy()

    for n in range(3, 12):  # the family turns symbolic at the second size; each size once
        np.testing.assert_allclose(call(n), expected(n), rtol=1e-5, atol=1e-5)
    assert metrics.snapshot()["native_segments"] == 0
    assert any(p["symbols"] for p in metrics.plans())
    got = [call(20) for _ in range(4)]
    assert metrics.snapshot()["native_segments"] >= 1
    for g in got:
        np.testing.assert_array_equal(g, got[0])
    np.testing.assert_allclose(got[0], expected(20), rtol=1e-5, atol=1e-5)
