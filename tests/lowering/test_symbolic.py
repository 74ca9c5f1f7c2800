"""Plans of symbolic sizes: every kind of op, forward and backward, through one compiled plan
for several sizes (including 1 and 0, which get plans of their own: 0/1 specialization),
against the NumPy reference interpreter; the plan counts of loops whose sizes vary.
"""

import re

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic.runtime import families, metrics
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.trace import symbolic


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# name -> (inputs of size n, the function, inputs that get gradients). Sizes n vary; other
# dimensions are fixed, some are 1 (broadcasting).
CASES = {
    "elementwise_chain": (lambda r, n: {"x": _f32(r, n, 6)}, lambda x: ((x * 1.5 + 0.25).tanh() * x).exp(), ["x"]),
    "broadcast_bias": (lambda r, n: {"x": _f32(r, n, 6), "b": _f32(r, 6)}, lambda x, b: (x + b).relu() * b, ["x", "b"]),
    "broadcast_column": (lambda r, n: {"x": _f32(r, n, 6), "c": _f32(r, n, 1)}, lambda x, c: x * c - c, ["x", "c"]),
    "sum_rows": (lambda r, n: {"x": _f32(r, n, 6)}, lambda x: x.sum(1), ["x"]),
    "sum_batch": (lambda r, n: {"x": _f32(r, n, 6)}, lambda x: x.sum(0), ["x"]),
    "mean_all": (lambda r, n: {"x": _f32(r, n, 3, 4)}, lambda x: (x * x).mean(), ["x"]),
    "max_middle": (lambda r, n: {"x": _f32(r, 3, n, 4)}, lambda x: x.amax(1), ["x"]),
    "softmax_rows": (lambda r, n: {"x": _f32(r, n, 7)}, lambda x: x.softmax(-1), ["x"]),
    "softmax_over_n": (lambda r, n: {"x": _f32(r, 3, n)}, lambda x: x.softmax(-1), ["x"]),
    "layer_norm": (lambda r, n: {"x": _f32(r, n, 8)}, lambda x: F.layer_norm(x, (8,)), ["x"]),
    "reshape_permute": (
        lambda r, n: {"x": _f32(r, n, 4, 6)},
        lambda x: x.reshape(-1, 2, 3).permute(0, 2, 1).reshape(x.shape[0], 4, 6) * 2.0,
        ["x"],
    ),
    "transpose_reduce": (lambda r, n: {"x": _f32(r, n, 5)}, lambda x: x.t().sum(1), ["x"]),
    "expand_new_axis": (lambda r, n: {"x": _f32(r, n, 1)}, lambda x: x.expand(-1, 5) * 3.0, ["x"]),
    "slice_prefix": (lambda r, n: {"x": _f32(r, 4, n + 3)}, lambda x: x[:, 1 : x.shape[1] - 2] * 2.0, ["x"]),
    "pad": (lambda r, n: {"x": _f32(r, n, 3)}, lambda x: F.pad(x, (1, 2)) * 2.0, ["x"]),
    "cat": (lambda r, n: {"x": _f32(r, n, 3), "y": _f32(r, n, 2)}, lambda x, y: lv.cat([x, y * 2.0], 1), ["x", "y"]),
    "matmul": (lambda r, n: {"a": _f32(r, n, 5), "w": _f32(r, 5, 4)}, lambda a, w: (a @ w).relu(), ["a", "w"]),
    "batched_matmul": (lambda r, n: {"a": _f32(r, 2, n, 3), "b": _f32(r, 2, 3, n)}, lambda a, b: a @ b, ["a", "b"]),
    "linear_cross_entropy": (
        lambda r, n: {"x": _f32(r, n, 6), "w": _f32(r, 4, 6), "y": r.integers(0, 4, n)},
        lambda x, w, y: F.cross_entropy(F.linear(x, w), y),
        ["x", "w"],
    ),
    "embedding": (
        lambda r, n: {"w": _f32(r, 10, 4), "i": r.integers(0, 10, (n, 3))},
        lambda w, i: F.embedding(i, w).sum(-1),
        ["w"],
    ),
    "where_compare": (lambda r, n: {"x": _f32(r, n, 5)}, lambda x: lv.where(x > 0.1, x * 2.0, -x), ["x"]),
    "cast_int": (lambda r, n: {"x": _f32(r, n, 5)}, lambda x: (x * 3.0).to(lv.int64).to(lv.float32) + x, ["x"]),
    "conv2d_batch": (
        lambda r, n: {"x": _f32(r, n, 2, 6, 6), "w": _f32(r, 3, 2, 3, 3)},
        lambda x, w: F.conv2d(x, w, padding=1).relu(),
        ["x", "w"],
    ),
    "max_pool_batch": (lambda r, n: {"x": _f32(r, n, 2, 6, 6)}, lambda x: F.max_pool2d(x, 2), ["x"]),
    "avg_pool_ceil_spatial": (
        lambda r, n: {"x": _f32(r, 2, 2, n + 4, n + 5)},
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        ["x"],
    ),
    "adaptive_avg_pool_spatial": (
        lambda r, n: {"x": _f32(r, 2, 2, n + 3, n + 4)},
        lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
        ["x"],
    ),
    "dropout": (lambda r, n: {"x": _f32(r, n, 6)}, lambda x: F.dropout(x * 2.0, 0.3), ["x"]),
    "gather_computed_index": (
        lambda r, n: {"x": _f32(r, n, 6), "i": r.integers(0, 3, (n, 2))},
        lambda x, i: x.gather(1, i * 2) + 1.0,
        ["x"],
    ),
    "scatter_add": (
        lambda r, n: {"x": _f32(r, n, 3), "i": r.integers(0, 5, (n, 3))},
        lambda x, i: lv.zeros(5, 3).scatter_add(0, i, x),
        ["x"],
    ),
}
SIZES = (5, 7, 2, 11, 1)


def _run(name, n, seed=0):
    make, fn, grads = CASES[name]
    lv.manual_seed(n)  # random ops draw the same numbers on both runs
    arrays = make(np.random.default_rng(seed + n), n)
    tensors = {k: lv.tensor(a, requires_grad=(k in grads)) for k, a in arrays.items()}
    out = fn(**tensors)
    cot = lv.tensor(np.random.default_rng(99).standard_normal(out.shape).astype(np.float32))
    (out * cot).sum().backward()
    lv.sync(out, *[tensors[k].grad for k in grads])
    return [out.numpy()] + [tensors[k].grad.numpy() for k in grads]


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_plan_of_symbolic_sizes_matches_the_interpreter(name, fresh, monkeypatch):
    got = {n: _run(name, n) for n in SIZES}
    snap = metrics.snapshot()
    # The first size is a miss (interpreted), the second makes the plan of symbolic sizes,
    # the others run it (size 1 may need a plan of its own: 0/1 specialization).
    assert snap["family_hits"] >= len(SIZES) - 2, snap
    assert snap["symbolic_plans_compiled"] <= 2, snap
    monkeypatch.setattr(config, "compile", "never")
    for n in SIZES:
        want = _run(name, n)
        for g, w in zip(got[n], want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=f"{name} n={n}")


def test_a_guard_that_fails_gets_another_plan(fresh):
    # Lowered for n != 6, the plan relies on (n, 6) and (6, 6) being different shapes; at n = 6
    # that guard fails and the trace gets a plan of its own, with the right answer.
    w = lv.tensor(np.eye(6, dtype=np.float32) * 2)
    for n in (3, 4, 5, 6, 9):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        out = (lv.tensor(x) @ w + 1.0).sum(0).numpy()
        np.testing.assert_allclose(out, (x * 2 + 1).sum(0))
    plans = [p for p in metrics.plans() if p["symbols"]]
    assert plans and all(p["keys"] >= 1 for p in plans)


def test_a_shape_rules_comparison_is_a_guard(fresh):
    # avg_pool2d's ceil_mode drops a last window that would start in the right padding: its shape
    # rule compares sizes, and that comparison is a guard of the symbolic plan (W = 12 needs
    # another plan than W = 8, whose last window was dropped).
    from lazyvic.ops import OPS

    at = dict(
        kernel=(2, 2), stride=(3, 3), padding=(1, 1), ceil_mode=True, count_include_pad=True, divisor_override=None
    )
    for w, ow in ((6, 3), (8, 3), (10, 4), (12, 5), (13, 5), (8, 3)):
        x = np.arange(2 * 7 * w, dtype=np.float32).reshape(1, 2, 7, w)
        got = F.avg_pool2d(lv.tensor(x), 2, 3, 1, ceil_mode=True).numpy()
        assert got.shape == (1, 2, 3, ow)
        np.testing.assert_array_equal(got, OPS["avg_pool2d"].reference([x], at))
    assert metrics.snapshot()["symbolic_plans_compiled"] >= 2


def test_a_broadcast_that_only_held_for_size_one_is_replanned(fresh):
    # b has a dim of size 1 that broadcasts against n; the symbolic plan must not be used when
    # that dim is n (a different structure: it is a new key and a new plan, never a wrong one).
    for n, m in ((4, 1), (5, 1), (6, 6), (7, 1)):
        a = np.ones((n, 3), np.float32)
        b = np.arange(m * 3, dtype=np.float32).reshape(m, 3)
        out = (lv.tensor(a) * lv.tensor(b)).sum(1).numpy()
        np.testing.assert_allclose(out, (a * b).sum(1))


def test_moving_slice_is_one_plan(fresh):
    data = lv.tensor(np.arange(400, dtype=np.float32).reshape(100, 4))
    out = []
    for i in range(0, 80, 7):
        out.append((data[i : i + 5] * 2.0).sum().item())
    assert out == [float(np.arange(400).reshape(100, 4)[i : i + 5].sum() * 2) for i in range(0, 80, 7)]
    snap = metrics.snapshot()
    assert snap["cache_misses"] <= 2 and snap["symbolic_plans_compiled"] == 1


def test_bindings_keep_the_pool_and_share_the_views_of_one_layout(fresh, monkeypatch):
    """A plan of symbolic sizes sizes its temporaries per binding: a binding whose temporaries
    fit runs in the pool as it is (it was made anew at every run: a slot of exactly the size
    needed counted as too small), and bindings whose temporaries have the same shapes (a
    slice's start moving, its length not) share one set of views."""
    from lazyvic.lowering.cpu import plan as cpu_plan

    layouts = []
    real = cpu_plan.CpuPlan._layout
    monkeypatch.setattr(cpu_plan.CpuPlan, "_layout", lambda self, e, p: layouts.append(1) or real(self, e, p))
    base = np.arange(800, dtype=np.float32).reshape(200, 4) / 800
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    data, weight = lv.tensor(base), lv.tensor(w)

    def step(i, n):  # the product's (n, 3) output and the exp's are temporaries of the pool
        return ((data[i : i + n] * 2.0) @ weight).exp().sum(0).numpy()

    for i, n in ((0, 9), (3, 12), (5, 12)):  # a fixed plan, then the family's plan at n = 12
        step(i, n)
    plan = _family_plan()
    made = len(layouts)
    pools = [id(p) for st in plan.free_states for p in st.pool]
    for i in range(10, 150, 7):  # the start moves: one layout
        np.testing.assert_allclose(step(i, 12), np.exp((base[i : i + 12] * 2.0) @ w).sum(0), rtol=1e-5)
    assert len(layouts) == made
    for n in (5, 12, 7, 5):  # smaller lengths fit the pool; each length's views made once
        step(20, n)
    assert len(layouts) == made + 2
    assert [id(p) for st in plan.free_states for p in st.pool] == pools
    assert metrics.snapshot()["symbolic_plans_compiled"] == 1


def test_substituter_builds_what_substitute_builds():
    """The substitution a plan makes per binding, made once (symbolic.substituter): the values
    at each binding, the containers' own types, the parts without symbols the same objects."""
    import collections

    Chain = collections.namedtuple("Chain", "kind shape ops")
    t, u = symbolic.symbol("t_sub", 5), symbolic.symbol("u_sub", 7)
    fixed = ("add", {"axis": 1})
    value = Chain("buffer", (t, 4, u * 2), [fixed, ("slice", {"start": t - 1, "stop": t + u}), [t * u, 3]])
    found: dict = {}
    make = symbolic.substituter(value, found)
    for a, b in ((5, 7), (9, 2)):
        env = {"t_sub": a, "u_sub": b}
        vals = {poly: sym.evaluate(env) for poly, sym in found.items()}
        got = make(vals)
        want = Chain("buffer", (a, 4, 2 * b), [fixed, ("slice", {"start": a - 1, "stop": a + b}), [a * b, 3]])
        assert got == want and type(got) is Chain and type(got.ops) is list
        assert got.shape == (a, 4, 2 * b) and got.ops[1][1]["stop"] == a + b and got.ops[2] == [a * b, 3]
        assert got.ops[0] is fixed and got.kind is value.kind
    assert symbolic.substituter(("buffer", (3, 4), [fixed]), {}) is None


def test_sizes_outside_lowering_are_not_ints():
    s = symbolic.symbol("t_test", 5)
    with pytest.raises(TypeError, match="outside lowering"):
        int(s)
    with pytest.raises(TypeError, match="outside lowering"):
        bool(s == 4)
    with symbolic.recording() as guards:
        assert (s * 2 - 1) > 0  # certain for every size >= 2: no guard
        assert s > 4  # decided by the hint: a guard
    assert [g.render() for g in guards] == ["-4 + t_test > 0"]
    assert symbolic.evaluate(s * s + 3, {"t_test": 7}) == 52


def test_identical_compares_expressions_without_guards():
    s, t = symbolic.symbol("t_same", 10), symbolic.symbol("t_other", 10)
    with symbolic.recording() as guards:
        assert symbolic.identical((s, 3), (s, 3)) and symbolic.identical((s * 2 + 1,), (2 * s + 1,))
        assert not symbolic.identical((s, 10), (10, 10))  # equal at s = 10 only
        assert not symbolic.identical(s, t)  # equal hints, other symbols
        assert not symbolic.identical((10,), (s, 10))  # (a tuple's == would compare 10 with s)
        assert symbolic.identical([4, 5], (4, 5)) and not symbolic.identical((4, 5), (4, 6))
    assert guards == []


def test_templates_fit_pooled_sizes_products_of_them_and_the_gentlest_line():
    """lazyvic.trace.family.fit: from three examples a pooled size is ``(H + b) // d``, a reshape
    to ``oH * oW`` a product of two such, and of the lines through the examples the gentlest
    (``T - 1``, not ``3 * B - 1``); from two, where coincidences abound, only ``s + b``, ``a*s``
    and products over the input dims: the other sizes are free symbols (read from the trace)."""
    from lazyvic.trace import family as fam

    def sizes(b, h, w, t):  # input dims B, H, W, T; then H // 2, (H // 2) * (W // 2), T - 1, W // 2, H * W
        return (b, h, w, t, h // 2, (h // 2) * (w // 2), t - 1, w // 2, h * w)

    kinds = ("input",) * 4 + ("size",) * 5
    examples = [sizes(3, 40, 48, 9), sizes(4, 48, 56, 12), sizes(6, 36, 40, 18)]
    t = fam.fit(examples, kinds)
    assert [site for site, _ in t.symbols] == [0, 1, 2, 3] and not t.free
    assert t.exprs[4] == fam.Expr(1, ((1, 0, 2),))  # H // 2
    assert t.exprs[6] == fam.Expr(1, ((3, 0, 1),), -1)  # T - 1 (T was 3 * B)
    odd = sizes(5, 37, 31, 15)  # odd sizes: H * W is not 4 * (H // 2) * (W // 2)
    assert t.bind(odd) == [5, 37, 31, 15]
    assert t.bind(odd[:8] + (4 * 18 * 15,)) is None
    with symbolic.recording():
        syms = fam.symbols_of(t, examples[0])
        assert symbolic.evaluate(fam._value_at(t, 5, syms, {}, {}), {"s1": 37, "s2": 29}) == 18 * 14
    two = fam.fit(examples[:2], kinds)  # H // 2 was 4 * B + 8 there: now a free symbol
    assert 4 in [site for site, _ in two.symbols] and two.free
    assert two.exprs[6] == fam.Expr(1, ((3, 0, 1),), -1)
    # W // 2 is H // 2 + 4 in both examples: a coincidence not taken for a rule (two free symbols)
    assert two.bind(odd) is not None


def _family_plan():
    (fam,) = [f for f in families.families() if f.plans]
    ((_, plan),) = fam.plans
    return plan


def test_thread_choices_are_not_guards(fresh, monkeypatch):
    """Serial or parallel kernels and BLAS threads are choices of speed: a plan of symbolic sizes
    makes them at its lowering's sizes (kernels), or the same at every size (BLAS on one thread,
    the convolution's products on the plan's team), never as guards. With a threshold inside
    the sizes of the loop, one plan serves every size, with the interpreter's bits."""
    from lazyvic.lowering.cpu import codegen

    monkeypatch.setattr(codegen, "PARALLEL_MIN_ELEMENTS", 8 * 64 * 3)  # crossed at n = 3
    rng = np.random.default_rng(3)
    w = lv.tensor(_f32(rng, 8, 4, 3, 3))

    def step(x):
        return (F.conv2d(x, w, padding=1).tanh() * 1.5 + 0.5).sum((2, 3))

    sizes = (3, 4, 9, 5, 6, 8, 2, 7)
    xs = {n: _f32(rng, n, 4, 8, 8) for n in sizes}
    got = {n: step(lv.tensor(xs[n])).numpy() for n in sizes}
    snap = metrics.snapshot()
    assert snap["symbolic_plans_compiled"] == 1 and snap["cache_misses"] == 1, snap
    plan = _family_plan()
    assert plan.guards == () and plan.blas_threads == 1 and plan.team
    assert sorted(b[0] for b in plan.bindings) == sorted(n for n in sizes if n != 3)
    assert any(k.parallel for k in plan.kernels)  # lowered at n = 4: parallel, used at n = 2 too
    monkeypatch.setattr(config, "compile", "never")
    for n in sizes:
        np.testing.assert_array_equal(got[n], step(lv.tensor(xs[n])).numpy())


def test_plan_cache_is_bounded_and_results_stay_right(fresh, monkeypatch):
    monkeypatch.setattr(config, "plan_cache_size", 3)
    monkeypatch.setattr(config, "dynamic", False)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for k in range(8):  # eight structures: the cache keeps three
        got = (lv.tensor(x) * float(k + 1)).sum(k % 2).reshape(-1)[: 2 + k % 3].numpy()
        np.testing.assert_allclose(got, (x * (k + 1)).sum(k % 2).reshape(-1)[: 2 + k % 3])
    assert len(plan_cache) <= 3 and metrics.snapshot()["plans_evicted"] >= 1


ZERO_OK = ["elementwise_chain", "broadcast_bias", "sum_rows", "sum_batch", "softmax_rows", "matmul", "cat", "pad"]


@pytest.mark.parametrize("name", ZERO_OK)
def test_size_zero_after_a_plan_of_symbolic_sizes(name, fresh, monkeypatch):
    got = {n: _run(name, n) for n in (5, 7, 0)}
    monkeypatch.setattr(config, "compile", "never")
    for g, w in zip(got[0], _run(name, 0)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_loaded_kernels_are_bounded_and_results_stay_right(fresh, monkeypatch):
    from lazyvic.lowering.cpu import kernel_cache
    from lazyvic.runtime.executor import backend

    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(backend("cpu"), "max_kernels", 2)
    x = np.linspace(-1, 1, 35, dtype=np.float32).reshape(5, 7)
    fns = [lambda t: t.exp() * 3.0, lambda t: (t * t).sum(1), lambda t: t.tanh() - t, lambda t: t.relu().amax(0)]
    for rep in range(2):
        for fn in fns:
            got = fn(lv.tensor(x) + float(rep)).numpy()
            want = fn(lv.tensor(x + rep)).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(kernel_cache._loaded) <= 2 and metrics.snapshot()["kernels_evicted"] >= 1


def test_imported_onnx_model_with_dynamic_axes_runs_one_plan_across_sizes(fresh, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from lazyvic.models import TinyGPT

    lv.manual_seed(0)
    m = TinyGPT(vocab_size=30, d_model=16, n_layer=1, n_head=2, block_size=32).eval()
    path = tmp_path / "g.onnx"
    axes = {"idx": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    example = lv.tensor(np.zeros((2, 8), np.int64))
    lv.onnx.export(m, example, path, input_names=["idx"], output_names=["logits"], dynamic_axes=axes)
    imported, sess = lv.onnx.load(path), ort.InferenceSession(str(path))
    rng = np.random.default_rng(0)
    with lv.no_grad():
        for b, t in ((2, 8), (2, 9), (3, 12), (4, 20), (2, 17)):
            x = rng.integers(0, 30, (b, t))
            np.testing.assert_allclose(imported(lv.tensor(x)).numpy(), sess.run(None, {"idx": x})[0], atol=2e-6)
    snap = metrics.snapshot()
    # (2, 9) makes the sequence symbolic, (3, 12) the batch too: two plans, then hits
    assert snap["cache_misses"] <= 2 and snap["symbolic_plans_compiled"] == 2 and snap["family_hits"] == 4


def test_imported_onnx_cnn_with_dynamic_image_sizes_runs_few_plans(fresh, tmp_path):
    """A ResNet-style stem and a strided residual block exported with dynamic batch, height and
    width, imported and run on 6 image sizes (odd ones too): the results of onnxruntime, and a
    plan of symbolic sizes from the second size on (more may be needed: see the README's
    "Sizes derived from sizes"; 3 here, 4 before the pooled sizes were fitted)."""
    ort = pytest.importorskip("onnxruntime")
    from lazyvic import nn

    lv.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(4, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 1, 1)
            self.down = nn.Conv2d(4, 8, 1, 2)

        def forward(self, x):
            return (self.c2(self.c1(x).relu()) + self.down(x)).relu()

    net = nn.Sequential(nn.Conv2d(3, 4, 7, 2, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(3, 2, 1), Block())
    net = nn.Sequential(net, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3)).eval()
    path = tmp_path / "cnn.onnx"
    axes = {"x": {0: "n", 2: "h", 3: "w"}, "y": {0: "n"}}
    example = lv.tensor(np.zeros((2, 3, 32, 32), np.float32))
    lv.onnx.export(net, example, path, input_names=["x"], output_names=["y"], dynamic_axes=axes)
    imported, sess = lv.onnx.load(path), ort.InferenceSession(str(path))
    rng = np.random.default_rng(0)
    with lv.no_grad():
        for n, h, w in ((2, 32, 32), (3, 40, 48), (2, 57, 35), (4, 33, 64), (2, 48, 48), (3, 61, 29)):
            x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
            np.testing.assert_allclose(imported(lv.tensor(x)).numpy(), sess.run(None, {"x": x})[0], atol=2e-5)
    snap = metrics.snapshot()
    # (one miss is the export's own trace; two sizes fit a wrong rule here: 3 plans, not 1)
    assert snap["cache_misses"] <= 3 and snap["symbolic_plans_compiled"] <= 3 and snap["family_hits"] >= 4, snap


def _kernel_count() -> int:
    s = metrics.snapshot()
    return s.get("kernels_compiled", 0) + s.get("kernels_loaded", 0)


def test_other_batch_sizes_reuse_the_first_plans_kernels(fresh, monkeypatch):
    """Shape-generic kernels: a smaller last batch (a plan of symbolic sizes) and an exact plan
    for another batch run the kernels compiled for the first batch (no compile, no load)."""
    rng = np.random.default_rng(0)
    lv.manual_seed(0)
    model = lv.nn.Sequential(lv.nn.Linear(20, 32), lv.nn.ReLU(), lv.nn.Linear(32, 5))
    opt = lv.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lv.sync()

    def step(b):
        x, y = _f32(rng, b, 20), rng.integers(0, 5, b)
        loss = F.cross_entropy(model(lv.tensor(x)), lv.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step(40)
    compiled = _kernel_count()
    assert compiled > 0
    for _ in range(2):
        step(23)  # the smaller last batch: a plan of symbolic sizes
    step(40)
    assert _kernel_count() == compiled
    monkeypatch.setattr(config, "dynamic", False)  # exact plans only: a new plan per size
    for _ in range(2):
        step(57)
    assert _kernel_count() == compiled


def test_a_reduction_adds_in_one_order_wherever_its_buffers_lie(fresh):
    """softmax stores exp in its output row and sums it: the sum runs in a loop of its own, so
    the compiled kernel gives the same bits with its output next to its input or far from it
    (a loop that stores and accumulates is vectorized behind an address check)."""
    rng = np.random.default_rng(1)
    x = _f32(rng, 24, 40)
    for _ in range(2):
        lv.tensor(x).softmax(-1).numpy()  # the second run compiles
    steps = [s for s in plan_cache.last.plan.steps if hasattr(s, "fn") and "exp" in s.source]
    assert len(steps) == 1
    st = steps[0]
    assert len(st.buffers) == 1 and not st.scalars and not st.packed and st.zs is not None  # x, sizes
    separate = np.zeros(x.size, np.float32)
    st.fn(separate, x.reshape(-1), st.zs)
    joint = np.zeros(2 * x.size, np.float32)  # the output right after the input
    joint[: x.size] = x.reshape(-1)
    st.fn(joint[x.size :], joint[: x.size], st.zs)
    np.testing.assert_array_equal(joint[x.size :], separate)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(separate.reshape(x.shape), e / e.sum(1, keepdims=True), rtol=1e-6)


def test_an_element_read_and_written_back_has_one_index(fresh):
    """softmax divides its output row in place: each use of that index is the same text (the
    same size arguments), so LLVM sees one address and vectorizes the loop; an argument per
    use looked like two strides that may overlap and ran 1.8x slower."""
    x = _f32(np.random.default_rng(2), 24, 40)
    for _ in range(2):
        got = lv.tensor(x).softmax(-1).numpy()
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-6)
    (st,) = [s for s in plan_cache.last.plan.steps if hasattr(s, "fn") and "exp" in s.source]
    indices = set(re.findall(r"\bout\[([^\]]*)\]", st.source))
    assert len(indices) == 1 and "z" in next(iter(indices)), indices


def test_traces_with_other_outputs_are_another_family(fresh):
    """Two loops trace the same ops but one keeps the logits alive (an output of its traces)
    and the other does not: a symbolic plan made for one output set must not serve the other
    (its outputs would go to the wrong tensors). nanoGPT-style greedy sampling on a growing
    context, both ways, gives the model's own greedy tokens."""
    from lazyvic.models import TinyGPT

    lv.manual_seed(0)
    model = TinyGPT(vocab_size=23, d_model=16, n_layer=1, n_head=2, block_size=12).eval()
    want = model.generate(np.array([[1]]), 5, temperature=0.0, kv_cache=False).numpy()[0, 1:].tolist()
    for keep_logits in (True, False):
        idx, got = lv.tensor(np.array([[1]])), []
        with lv.no_grad():
            for _ in range(5):
                logits = model(idx[:, -12:])
                nxt = logits[:, -1, :].argmax(-1, keepdim=True)
                if not keep_logits:
                    del logits
                idx = lv.cat((idx, nxt), dim=1)
                got.append(int(nxt.item()))
        assert got == want


def test_the_first_size_seen_again_runs_the_familys_plan(fresh):
    """The first trace of a family runs interpreted (hot mode); once other sizes made a plan of
    symbolic sizes, that first size seen again (a loop's next epoch) runs that plan instead of
    compiling one of its own fixed sizes, with the values a fixed plan gives."""
    rng = np.random.default_rng(0)
    w = lv.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    xs = {n: rng.standard_normal((n, 5)).astype(np.float32) for n in (4, 6, 7)}
    outs = {}
    for n in (4, 6, 7, 4, 4):
        outs[n] = ((lv.tensor(xs[n]) @ w).relu() * 2.0).numpy()
    snap = metrics.snapshot()
    assert snap["plans_compiled"] == 1 and snap["symbolic_plans_compiled"] == 1
    assert snap["cache_misses"] == 1 and snap["interpreted_runs"] == 1
    for n, x in xs.items():
        np.testing.assert_allclose(outs[n], np.maximum(x @ w.numpy(), 0) * 2, rtol=1e-6)
