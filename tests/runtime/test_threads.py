"""Threads: independent models trained and run in several threads give exactly the results they
give alone; the registry and the module scope are per thread; a key is compiled once; parallel
kernels and BLAS calls from several threads at once do not deadlock.

The stress test runs 4 threads x ``LAZYVIC_STRESS_STEPS`` steps (default 50 for the MLP, 20 for
the conv net: seconds). The long run of the issue, 4 threads x 200 steps (about 4 s warm)::

    LAZYVIC_STRESS_STEPS=200 python -m pytest -q tests/runtime/test_threads.py -k stress
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.functional as F
from lazyvic import nn
from lazyvic.runtime import metrics
from lazyvic.runtime.config import config
from lazyvic.runtime.executor import THREADSAFE_LAYERS, threading_layer
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.trace import scope

THREADS = 4
TIMEOUT = 300  # seconds a thread may take before the test calls it a deadlock


@pytest.fixture
def compiled():
    prev = config.compile
    config.compile = "always"
    yield
    config.compile = prev


def _steps(default: int) -> int:
    return int(os.environ.get("LAZYVIC_STRESS_STEPS", default))


def _run_threads(jobs: list) -> list:
    """Run each job in a thread of its own, all started at once; their results (or raise the
    first error, or fail on a thread that does not finish: a deadlock)."""
    results, errors = [None] * len(jobs), []
    start = threading.Barrier(len(jobs))

    def worker(i):
        try:
            start.wait()
            results[i] = jobs[i]()
        except BaseException as e:  # noqa: BLE001 - reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish: deadlock"
    if errors:
        raise errors[0]
    return results


# ------------------------------------------------------------------------- the workloads
def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _convnet():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def _data(kind: str, seed: int, steps: int) -> list:
    rng = np.random.default_rng(seed)
    shape, classes = ((8, 16), 4) if kind == "mlp" else ((4, 2, 6, 6), 3)
    return [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]).astype(np.int64))
        for _ in range(steps)
    ]


def _job(kind: str, role: str, state: dict, data: list):
    """A job: train a fresh model from ``state`` on ``data`` (SGD with momentum), or run it in
    inference; returns the losses (or outputs) and the final parameters, as NumPy arrays."""

    def run():
        model = _mlp() if kind == "mlp" else _convnet()
        model.load_state_dict({k: lv.tensor(v) for k, v in state.items()})
        out = []
        if role == "train":
            opt = lv.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            for x, y in data:
                opt.zero_grad()
                loss = F.cross_entropy(model(lv.tensor(x)), lv.tensor(y))
                loss.backward()
                opt.step()
                out.append(loss.numpy())
        else:
            with lv.no_grad():
                for x, _ in data:
                    out.append(model(lv.tensor(x)).softmax(1).numpy())
        return out, [p.numpy() for p in model.parameters()]

    return run


def _jobs(kind: str, steps: int) -> list:
    lv.manual_seed(7)
    state = {k: v.numpy().copy() for k, v in (_mlp() if kind == "mlp" else _convnet()).state_dict().items()}
    roles = ["train"] * (THREADS - 1) + ["infer"]
    return [_job(kind, role, state, _data(kind, 100 + i, steps)) for i, role in enumerate(roles)]


def _assert_same_bits(got, want) -> None:
    (g_out, g_params), (w_out, w_params) = got, want
    for a, b in zip(g_out + g_params, w_out + w_params):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind, steps", [("mlp", 50), ("conv", 20)])
def test_stress_threads_train_and_infer_exactly_as_alone(compiled, kind, steps):
    """4 threads: 3 train their own model (same architecture, so the same plans, different data)
    and 1 runs another in inference; every loss, output and parameter is bit for bit what the
    same job gives alone. Before plans owned their buffers per run, most steps were wrong."""
    jobs = _jobs(kind, _steps(steps))
    alone = [job() for job in jobs]  # one thread: the reference (and every plan compiled)
    together = _run_threads(jobs)
    for got, want in zip(together, alone):
        _assert_same_bits(got, want)


def test_stress_in_the_default_mode_after_warm_up():
    """The default (hot) mode: once the keys are compiled, concurrent runs are exact too."""
    prev = config.compile
    config.compile = "hot"
    try:
        jobs = _jobs("mlp", _steps(20))
        jobs[0]()  # every key seen twice: compiled
        alone = [job() for job in jobs]
        together = _run_threads(jobs)
        for got, want in zip(together, alone):
            _assert_same_bits(got, want)
    finally:
        config.compile = prev


# ------------------------------------------------------------------------- per-thread state
def test_a_sync_realizes_the_calling_threads_pending_tensors_only():
    x = lv.tensor(np.arange(4, dtype=np.float32))
    mine = x * 2.0
    ready, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        theirs = x + 1.0
        ready.set()
        done.wait(TIMEOUT)
        seen["still pending after the main thread's sync"] = theirs.is_lazy
        seen["value"] = theirs.numpy()

    t = threading.Thread(target=other)
    t.start()
    ready.wait(TIMEOUT)
    lv.sync()
    seen["mine"] = mine.is_lazy
    done.set()
    t.join(TIMEOUT)
    assert seen["mine"] is False
    assert seen["still pending after the main thread's sync"] is True
    np.testing.assert_array_equal(seen["value"], np.arange(4, dtype=np.float32) + 1)


def test_a_tensor_of_another_thread_is_realized_when_synced():
    made = {}
    t = threading.Thread(target=lambda: made.setdefault("y", lv.tensor([1.0, 2.0]).exp() * 3.0))
    t.start()
    t.join(TIMEOUT)
    y = made["y"]
    assert y.is_lazy
    np.testing.assert_allclose(y.numpy(), np.exp([1.0, 2.0]) * 3.0, rtol=1e-6)


def test_module_scopes_are_per_thread():
    inside, leave = threading.Event(), threading.Event()

    class Holds(nn.Module):
        def forward(self, x):
            inside.set()
            leave.wait(TIMEOUT)
            return x + 1.0

    t = threading.Thread(target=lambda: Holds()(lv.tensor([1.0])))
    t.start()
    inside.wait(TIMEOUT)
    try:
        assert scope.current is None  # the other thread is inside Holds, this one is not
        node = (lv.tensor([1.0]) * 2.0)._node
        assert node.scope is None
    finally:
        leave.set()
        t.join(TIMEOUT)


def test_the_size_limit_counts_the_calling_threads_pending_tensors():
    prev = config.max_pending
    config.max_pending = 30
    try:
        before = lv.metrics.snapshot()["traces"]

        def grow():
            y = lv.tensor([0.0])
            for _ in range(100):
                y = y + 1.0
            return y.item()

        assert _run_threads([grow, grow]) == [100.0, 100.0]
        assert lv.metrics.snapshot()["traces"] - before >= 2 * 3  # each thread cut its own graph
    finally:
        config.max_pending = prev


# ------------------------------------------------------------------------- the plan cache
def test_a_key_compiled_by_several_threads_at_once_is_compiled_once(compiled):
    rng = np.random.default_rng(3)
    # A shape no other test uses: a new key.
    xs = [rng.standard_normal((13, 29)).astype(np.float32) for _ in range(THREADS)]
    before = lv.metrics.snapshot()["plans_compiled"]

    def job(x):
        return lambda: (lv.tensor(x).tanh() * 3.0 + 1.0).sum(1).numpy()

    got = _run_threads([job(x) for x in xs])
    assert lv.metrics.snapshot()["plans_compiled"] - before == 1
    for g, x in zip(got, xs):
        np.testing.assert_array_equal(g, job(x)())


# ------------------------------------------------------------------------- thread pools
@pytest.fixture
def parallel_kernels(monkeypatch):
    """Parallel kernels from 2**15 elements (a size that compiles and runs fast)."""
    from lazyvic.lowering.cpu import codegen

    monkeypatch.setattr(codegen, "PARALLEL_MIN_ELEMENTS", 1 << 15)


def test_numba_threading_layer_takes_launches_from_several_threads(compiled, parallel_kernels):
    """Numba's parallel kernels run on a threading layer that accepts concurrent launches here
    (``omp`` or ``tbb``); under ``workqueue`` the executor runs parallel CPU plans one at a time."""
    (lv.tensor(np.ones(1 << 16, np.float32)) * 2.0 + 1.0).numpy()  # a parallel kernel starts the layer
    assert threading_layer() in THREADSAFE_LAYERS + ("workqueue",)


def test_parallel_kernels_and_blas_in_several_threads_do_not_deadlock(compiled, parallel_kernels):
    rng = np.random.default_rng(5)
    big = rng.standard_normal(1 << 16).astype(np.float32)
    a = rng.standard_normal((256, 256)).astype(np.float32)

    def job():
        outs = []
        for i in range(15):
            x = lv.tensor(big)
            y = ((x * 1.5 + float(i)).tanh() * 2.0).sum()  # parallel kernels
            m = (lv.tensor(a) @ lv.tensor(a)).relu().sum()  # BLAS
            outs.append((y.item(), m.item()))
        return outs

    got = _run_threads([job] * THREADS)
    assert all(g == got[0] for g in got)
    assert any(e.plan is not None and e.plan.parallel for e in plan_cache.values())


def test_traces_run_counts_the_calling_threads_syncs_only():
    from lazyvic.sync import traces_run

    before = traces_run()
    _run_threads([lambda: (lv.tensor([1.0, 2.0]) * 3.0).numpy()] * 2)
    assert traces_run() == before  # other threads' syncs are not this thread's
    (lv.tensor([1.0]) + 1.0).numpy()
    assert traces_run() == before + 1


def test_metrics_count_every_threads_increments():
    from lazyvic.runtime import metrics

    before = metrics.counters["capture_fallbacks"]

    def count():
        for _ in range(20_000):
            metrics.add("capture_fallbacks")

    _run_threads([count] * THREADS)
    assert metrics.counters["capture_fallbacks"] - before == THREADS * 20_000
    assert metrics.snapshot()["capture_fallbacks"] - before == THREADS * 20_000


def test_threads_share_a_plan_of_symbolic_sizes_at_different_sizes(monkeypatch):
    """One plan of symbolic sizes run by 4 threads at once, each at sizes of its own (a binding
    per size, each run on storage of its own): every result is NumPy's, nothing compiles."""
    monkeypatch.setattr(config, "compile", "hot")
    monkeypatch.setattr(config, "dynamic", True)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((24, 16)).astype(np.float32)

    def f(x):
        h = (lv.tensor(x) @ lv.tensor(w)).relu()
        return (h.softmax(-1) * h).sum(0).numpy()

    def reference(x):
        h = np.maximum(x @ w, 0)
        e = np.exp(h - h.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True) * h).sum(0)

    for n in (20, 33, 20, 33):  # a plan of symbolic sizes for n, compiled before the threads
        f(rng.standard_normal((n, 24)).astype(np.float32))
    sizes = [18, 40, 27, 55]
    data = [[rng.standard_normal((n, 24)).astype(np.float32) for _ in range(6)] for n in sizes]
    before = metrics.snapshot()
    results = _run_threads([lambda xs=xs: [f(x) for x in xs] for xs in data])
    after = metrics.snapshot()
    assert after["plans_compiled"] == before["plans_compiled"]
    assert after["family_hits"] - before["family_hits"] == len(sizes)  # a key per size, one plan
    assert after["compiled_runs"] - before["compiled_runs"] == 6 * len(sizes)
    for got, xs in zip(results, data):
        for g, x in zip(got, xs):
            np.testing.assert_allclose(g, reference(x), rtol=1e-4, atol=1e-5)
