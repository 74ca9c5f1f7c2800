"""Plan-cache behaviour: hits, misses, scalar inputs, compile modes, the disk cache."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import plan_cache


@pytest.fixture
def hot():
    prev = config.compile
    config.compile = "hot"
    lv.metrics.reset()
    yield
    config.compile = prev


def _step(x, w, lr):
    y = ((x @ w).tanh() * lr + 1.0).sum(1)
    return y.numpy()


def test_same_structure_new_values_hits(hot):
    rng = np.random.default_rng(0)
    w = lv.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    outs = []
    for _ in range(4):
        x = rng.standard_normal((7, 5)).astype(np.float32)
        outs.append((_step(lv.tensor(x), w, 0.5), x))
    snap = lv.metrics.snapshot()
    assert snap["cache_misses"] == 1 and snap["cache_hits"] == 3
    assert snap["interpreted_runs"] == 1 and snap["compiled_runs"] == 3  # hot: compiled on the 2nd sight
    wn = w.numpy()
    for got, x in outs:
        np.testing.assert_allclose(got, (np.tanh(x @ wn) * 0.5 + 1).sum(1), rtol=1e-5)


def test_new_shape_misses_and_changed_scalar_hits(hot, monkeypatch):
    monkeypatch.setattr(config, "dynamic", False)  # one plan per set of sizes
    w = lv.tensor(np.ones((5, 2), np.float32))  # shapes no other test uses: a fresh key
    _step(lv.tensor(np.ones((7, 5), np.float32)), w, 0.1)
    _step(lv.tensor(np.ones((7, 5), np.float32)), w, 0.2)  # a new learning rate is a new scalar value, not a new plan
    assert lv.metrics.snapshot()["cache_misses"] == 1
    got = _step(lv.tensor(np.ones((8, 5), np.float32)), w, 0.3)
    assert lv.metrics.snapshot()["cache_misses"] == 2
    np.testing.assert_allclose(got, np.full(8, 2 * (np.tanh(5.0) * 0.3 + 1)), rtol=1e-6)


def test_a_new_size_of_a_known_structure_gets_one_plan_of_symbolic_sizes(hot):
    plan_cache.clear_plans()  # the structure (x @ w, w of shape (k, 2)) is another test's too
    w = lv.tensor(np.ones((6, 2), np.float32))
    _step(lv.tensor(np.ones((7, 6), np.float32)), w, 0.1)
    for n in (8, 9, 13, 2):  # the batch changes: one plan of symbolic sizes serves every other one
        got = _step(lv.tensor(np.ones((n, 6), np.float32)), w, 0.3)
        np.testing.assert_allclose(got, np.full(n, 2 * (np.tanh(6.0) * 0.3 + 1)), rtol=1e-6)
    snap = lv.metrics.snapshot()
    assert snap["cache_misses"] == 1 and snap["family_hits"] == 4 and snap["symbolic_plans_compiled"] == 1


def test_changed_learning_rate_does_not_recompile_training_step(hot):
    lv.manual_seed(0)
    model = lv.nn.Linear(4, 2)
    opt = lv.optim.SGD(model.parameters(), lr=0.1)
    x, y = lv.randn(8, 4), lv.randn(8, 2)
    lv.sync()
    misses = []
    for step in range(5):
        for g in opt.param_groups:
            g["lr"] = 0.1 / (step + 1)
        loss = lv.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        misses.append(lv.metrics.snapshot()["cache_misses"])
    assert misses == [misses[0]] * 5


def test_compile_modes(hot):
    x = lv.tensor(np.arange(6, dtype=np.float32))
    config.compile = "never"
    lv.metrics.reset()
    for _ in range(3):
        (x * 2.0 + 1.0).numpy()
    assert lv.metrics.snapshot()["compiled_runs"] == 0
    config.compile = "always"
    lv.metrics.reset()
    got = (x * 3.0 - 1.0).numpy()
    assert lv.metrics.snapshot()["compiled_runs"] == 1
    np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32) * 3 - 1)


def test_sync_realizes_all_live_tensors_in_one_trace(hot):
    a = lv.ones(3) * 2.0
    b = a + 1.0
    c = b.exp()
    assert a.is_lazy and b.is_lazy and c.is_lazy
    before = lv.metrics.snapshot()["traces"]
    lv.sync()
    assert lv.metrics.snapshot()["traces"] == before + 1
    assert not (a.is_lazy or b.is_lazy or c.is_lazy)
    np.testing.assert_allclose(c.numpy(), np.exp(np.full(3, 3.0, np.float32)), rtol=1e-6)


def test_pending_size_limit_forces_a_cut(hot):
    prev = config.max_pending
    config.max_pending = 50
    try:
        x = lv.zeros(4)
        before = lv.metrics.snapshot()["traces"]
        for _ in range(200):
            x = x + 1.0
        assert lv.metrics.snapshot()["traces"] > before  # cut before the graph reached 200 nodes
        np.testing.assert_array_equal(x.numpy(), np.full(4, 200.0, np.float32))
    finally:
        config.max_pending = prev


SEEDED_SCRIPT = textwrap.dedent("""
    import hashlib, lazyvic as lv
    lv.manual_seed(123)
    model = lv.nn.Sequential(lv.nn.Linear(6, 8), lv.nn.ReLU(), lv.nn.Linear(8, 3))
    opt = lv.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(4):
        x, t = lv.randn(16, 6), lv.randint(0, 3, (16,))
        loss = lv.functional.cross_entropy(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    h = hashlib.sha256(b"".join(p.numpy().tobytes() for p in model.parameters())).hexdigest()
    print(repr(losses), h)
""")


def test_seeded_run_is_bit_identical_across_processes(tmp_path):
    # The default (hot) mode interprets a trace the first time and compiles it when it
    # recurs; every process follows the same sequence, so runs are bit-identical.
    env = dict(os.environ, LAZYVIC_CACHE_DIR=str(tmp_path / "lv"), NUMBA_CACHE_DIR=str(tmp_path / "nb"))
    outs = [
        subprocess.run(
            [sys.executable, "-c", SEEDED_SCRIPT], env=env, capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert outs[0] == outs[1] and outs[0].strip()


@pytest.mark.parametrize("mode", ["never", "always"])
def test_seeded_run_is_bit_identical_in_process(mode):
    prev = config.compile
    config.compile = mode
    try:

        def run():
            lv.manual_seed(7)
            w = lv.randn(5, 4, requires_grad=True)
            out = []
            for _ in range(3):
                x = lv.rand(6, 5)
                loss = (x @ w).tanh().logsumexp(1).mean()
                loss.backward()
                with lv.no_grad():
                    w -= w.grad * 0.1
                w.grad = None
                out.append(loss.item())
            return out, w.numpy().tobytes()

        assert run() == run()
    finally:
        config.compile = prev


def test_second_process_loads_kernels_from_disk(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, lazyvic as lv
        from lazyvic.runtime.config import config
        config.compile = "always"
        x = lv.tensor(np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8))
        y = (x * 1.25 + 0.5).softmax(1).sum(0)
        print(float(y.sum()), lv.metrics.snapshot()["kernels_compiled"], lv.metrics.snapshot()["kernels_loaded"])
    """)
    env = dict(os.environ, LAZYVIC_CACHE_DIR=str(tmp_path / "lv"), NUMBA_CACHE_DIR=str(tmp_path / "nb"))
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    (v1, c1, l1), (v2, c2, l2) = [r.stdout.split() for r in runs]
    assert float(v1) == pytest.approx(8.0, rel=1e-5) and v1 == v2
    assert int(c1) >= 1 and int(l1) == 0
    assert int(c2) == 0 and int(l2) == int(c1)


def test_compile_failure_falls_back_loudly(hot, monkeypatch):
    from lazyvic.lowering.cpu import CpuBackend

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel for this")

    monkeypatch.setattr(CpuBackend, "compile", broken)
    config.compile = "always"
    x = lv.tensor(np.arange(5, dtype=np.float32))
    with pytest.warns(RuntimeWarning, match="could not be compiled"):
        got = (x * 7.0 - 3.0).numpy()
    np.testing.assert_array_equal(got, np.arange(5, dtype=np.float32) * 7 - 3)
    snap = lv.metrics.snapshot()
    assert snap["fallbacks"] == 1 and any("RuntimeError" in k for k in snap["fallback_ops"])


THREADS_SCRIPT = textwrap.dedent("""
    import hashlib, numpy as np, lazyvic as lv
    from lazyvic.lowering.cpu import codegen
    from lazyvic.runtime.config import config
    config.compile = "always"
    codegen.PARALLEL_MIN_ELEMENTS = 1 << 15  # parallel kernels at a size that compiles fast
    rng = np.random.default_rng(0)
    x = lv.tensor(rng.standard_normal((256, 300)).astype(np.float32))
    y = (x.softmax(1) * 3.0).tanh().sum(0) + lv.functional.layer_norm(x, (300,)).mean()
    print(hashlib.sha256(y.numpy().tobytes()).hexdigest(), lv.metrics.snapshot()["fallbacks"])
""")


def test_results_do_not_depend_on_the_thread_count(tmp_path):
    # Every output element (and every reduction) is computed by one thread in a fixed order.
    outs = []
    for threads in ("1", "2"):
        env = dict(
            os.environ,
            LAZYVIC_CACHE_DIR=str(tmp_path / "lv"),
            NUMBA_CACHE_DIR=str(tmp_path / "nb"),
            NUMBA_NUM_THREADS=threads,
        )
        outs.append(
            subprocess.run(
                [sys.executable, "-c", THREADS_SCRIPT], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
    assert outs[0] == outs[1] and outs[0].split()[1] == "0"


def test_compiling_a_plan_freezes_long_lived_objects_unless_turned_off(monkeypatch):
    import gc

    from lazyvic.runtime.plan_cache import plan_cache

    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(config, "gc_freeze", False)
    plan_cache.clear_plans()  # both traces below must compile
    x = lv.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    gc.unfreeze()
    np.testing.assert_array_equal((x * 3.0 + 1.0).numpy(), x.numpy() * 3 + 1)
    assert gc.get_freeze_count() == 0
    config.gc_freeze = True
    np.testing.assert_array_equal((x - 2.0).abs().numpy(), np.abs(x.numpy() - 2))
    assert gc.get_freeze_count() > 0


def test_memory_plan_counts_parameters_apart_from_other_inputs(monkeypatch):
    from lazyvic.runtime.plan_cache import plan_cache

    monkeypatch.setattr(config, "compile", "always")
    model = lv.nn.Linear(4, 3)
    lv.sync()
    x = lv.tensor(np.ones((2, 4), dtype=np.float32))
    model(x).sum().item()
    mem = plan_cache.last.plan.memory
    assert mem.parameter_bytes == (12 + 3) * 4 and mem.input_bytes == 2 * 4 * 4
    model.double()  # new parameter values stay counted as parameters
    lv.sync()
    model(x.double()).sum().item()
    mem = plan_cache.last.plan.memory
    assert mem.parameter_bytes == (12 + 3) * 8
    assert (
        mem.as_dict()["peak"]
        == mem.peak_bytes
        == sum(mem.as_dict()[k] for k in ("inputs", "parameters", "temporaries", "outputs"))
    )
    names = [p["name"] for p in lv.metrics.plans()]
    assert plan_cache.last.plan.name in names
    assert lv.metrics.snapshot()["planned_peak_bytes"] >= mem.peak_bytes
