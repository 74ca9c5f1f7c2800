"""ops/gemm's float32 product kernels: exact per-element order, tails, layouts, and one numerics
across the NumPy reference, plan steps, thread-team pieces and native segments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lazyvic
from lazyvic.lowering.cpu import compile_trace, native
from lazyvic.lowering.cpu.steps import MatmulStep
from lazyvic.ops.blas import matmul_into
from lazyvic.ops.gemm_choice import DOTS, LANES, ROWS, own_kind_of
from lazyvic.ops.numerics import fma
from lazyvic.runtime import metrics
from lazyvic.trace import cut


def _sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ROWS' numerics: each output summed over p in order, one FMA per term (exact emulation)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for p in range(a.shape[1]):
        acc = fma(np.broadcast_to(a[:, p : p + 1], acc.shape), np.broadcast_to(b[p : p + 1, :], acc.shape), acc)
    return acc


def _lanes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """DOTS' numerics: term p into partial sum p mod 16 by FMA, then halves added (16->8->4->2->1)."""
    m, k = a.shape
    n = b.shape[1]
    lanes = np.zeros((m, n, LANES), np.float32)
    for p in range(k):
        prod_a = np.broadcast_to(a[:, None, p], (m, n))
        prod_b = np.broadcast_to(b[None, p, :], (m, n))
        lanes[:, :, p % 16] = fma(prod_a, prod_b, lanes[:, :, p % 16])
    width = 16
    while width > 1:
        half = width // 2
        lanes = (lanes[:, :, :half] + lanes[:, :, half:width]).astype(np.float32)
        width = half
    return lanes[:, :, 0]


def _which(a, b, out):
    if not (a.dtype == b.dtype == out.dtype == np.float32):
        return 0
    return own_kind_of(a.shape[0], a.shape[1], b.shape[1], a.strides, b.strides, out.strides)


def _run(a, b):
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    matmul_into(a, b, out)
    return out


SHAPES = [(1, 1, 16), (3, 5, 16), (4, 16, 64), (7, 33, 80), (9, 17, 144), (20, 128, 512), (5, 64, 48), (13, 40, 208)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_rows_kernel_is_the_in_order_fma_sum(m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for av in (a, np.asfortranarray(a)):  # a's rows or columns contiguous
        assert _which(av, b, np.empty((m, n), np.float32)) == ROWS
        np.testing.assert_array_equal(_run(av, b), _sequential(a, b))


@pytest.mark.parametrize("m,k,n", [(1, 16, 512), (4, 128, 512), (7, 33, 70), (20, 130, 9), (64, 17, 12), (3, 40, 5)])
def test_dots_kernel_is_the_lane_sum(m, k, n):
    rng = np.random.default_rng(m + k * n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)  # x @ w.T, nn.Linear's layout
    assert _which(a, w.T, np.empty((m, n), np.float32)) == DOTS
    np.testing.assert_array_equal(_run(a, w.T), _lanes(a, w.T))


def test_which_kernel_and_blas_fallbacks():
    def kind(a, b):
        return _which(a, b, np.empty((a.shape[0], b.shape[1]), a.dtype))

    f = np.float32
    assert kind(np.ones((8, 8), f), np.ones((8, 64), f)) == ROWS
    assert kind(np.ones((8, 8), f), np.ones((8, 10), f)) == 0  # narrow: BLAS
    assert kind(np.ones((8, 32), f), np.ones((10, 32), f).T) == DOTS
    assert kind(np.ones((128, 64), f), np.ones((128, 64), f).T) == DOTS
    assert kind(np.ones((8, 8), f), np.ones((10, 8), f).T) == 0  # an inner dimension under 16 lanes
    assert kind(np.ones((8, 8)), np.ones((8, 64))) == 0  # float64: BLAS
    assert kind(np.ones((8, 32), f).T, np.ones((8, 64), f).T) == 0  # neither layout
    assert kind(np.ones((0, 8), f), np.ones((8, 64), f)) == 0


def test_pieces_give_the_whole_products_bits():
    """Rows and column pieces of a product (a plan's thread team runs them) give the same bits
    as the whole product: each element's sum does not depend on the tiling."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 96)).astype(np.float32)
    b = rng.standard_normal((96, 160)).astype(np.float32)
    w = rng.standard_normal((24, 96)).astype(np.float32)
    whole, whole_t = _run(a, b), _run(a, w.T)
    for r0, r1, c0, c1 in [(0, 19, 0, 160), (19, 37, 0, 160), (0, 37, 0, 64), (0, 37, 64, 160), (5, 6, 16, 48)]:
        np.testing.assert_array_equal(_run(a[r0:r1], b[:, c0:c1]), whole[r0:r1, c0:c1])
    for r0, r1, c0, c1 in [(0, 20, 0, 24), (20, 37, 0, 24), (0, 37, 8, 13)]:
        np.testing.assert_array_equal(_run(a[r0:r1], w[c0:c1].T), whole_t[r0:r1, c0:c1])


def test_batched_products_run_each_matrix():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 6, 32)).astype(np.float32)
    b = rng.standard_normal((3, 32, 64)).astype(np.float32)
    out = np.empty((3, 6, 64), np.float32)
    matmul_into(a, b, out)
    for i in range(3):
        np.testing.assert_array_equal(out[i], _sequential(a[i], b[i]))


def test_tiers_agree_on_the_bits():
    """The interpreter, a compiled plan and a captured (replayed) step give the kernel's bits,
    for nn.Linear's layout (DOTS) and its input gradient's (ROWS)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, 48)).astype(np.float32)
    w = rng.standard_normal((80, 48)).astype(np.float32)
    want_y = _lanes(x, w.T)
    g = np.ones((12, 80), np.float32)
    want_gx = _sequential(g, w)

    def f(xt, wt):
        y = xt @ wt.T
        y.sum().backward()
        return y

    before = metrics.snapshot()
    for _ in range(3):  # interpreted, then compiled (the plan cache's policy), then cached
        xt = lazyvic.tensor(x, requires_grad=True)
        y = f(xt, lazyvic.tensor(w))
        np.testing.assert_array_equal(y.numpy(), want_y)
        np.testing.assert_array_equal(xt.grad.numpy(), want_gx)
    after = metrics.snapshot()
    assert after["compiled_runs"] > before["compiled_runs"] and after["interpreted_runs"] > before["interpreted_runs"]
    step = lazyvic.compile(lambda xt, wt: xt @ wt.T)
    for _ in range(3):
        np.testing.assert_array_equal(step(lazyvic.tensor(x), lazyvic.tensor(w)).numpy(), want_y)


@pytest.mark.skipif(not native.blas().ok, reason="NumPy's BLAS not bound")
def test_native_segments_and_thread_pieces_give_the_kernels_bits(tmp_path):
    """A hot plan's native segment calls ops/gemm.product for the products it runs (ROWS, DOTS,
    a batched ROWS), and a product in pieces on the plan's team (2 * MATMUL_PIECE_WORK
    multiply-adds) runs them piece by piece: the step-by-step bits, the emulations' bits."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((12, 48)).astype(np.float32)
    w = rng.standard_normal((80, 48)).astype(np.float32)
    v = rng.standard_normal((48, 64)).astype(np.float32)
    q = rng.standard_normal((3, 5, 32)).astype(np.float32)
    big_a = rng.standard_normal((256, 128)).astype(np.float32)
    big_b = rng.standard_normal((128, 256)).astype(np.float32)
    t = {n: lazyvic.tensor(a) for n, a in dict(x=x, w=w, v=v, q=q, big_a=big_a, big_b=big_b).items()}
    outs = [(t["x"] @ t["w"].T) * 2.0, (t["x"] @ t["v"]) + 1.0, t["q"] @ t["v"][:32], t["big_a"] @ t["big_b"]]
    trace, inputs, scalars, _ = cut([o._node for o in outs])
    plan = compile_trace(trace, cache_dir=tmp_path)
    inputs = [np.ascontiguousarray(a) for a in inputs]
    plan.native_after = 0
    plain = plan.run(inputs, scalars)
    plan.native_after = 1
    hot = [plan.run(inputs, scalars) for _ in range(2)]
    segs = [s for s in plan.native if isinstance(s, native.NativeSegment)]
    assert segs and sum(isinstance(st, MatmulStep) for s in segs for st in s.steps) >= 3
    assert sum(s.source.count(" own(") for s in segs) >= 3
    for run in hot:
        for a, b in zip(plain, run):
            assert a.tobytes() == b.tobytes()
    np.testing.assert_array_equal(plain[0], _lanes(x, w.T) * np.float32(2.0))
    np.testing.assert_array_equal(plain[1], _sequential(x, v) + np.float32(1.0))
    for i in range(3):
        np.testing.assert_array_equal(plain[2][i], _sequential(q[i], v[:32]))
    np.testing.assert_array_equal(plain[3], _sequential(big_a, big_b))


PRODUCT = """
import json, warnings
import numpy as np
from lazyvic.ops.blas import matmul_into
a = np.arange(6 * 20, dtype=np.float32).reshape(6, 20) / 7
b = np.arange(20 * 64, dtype=np.float32).reshape(20, 64) / 5
out = np.empty((6, 64), np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    matmul_into(a, b, out)
print(json.dumps({"out": out.tolist(), "warnings": [str(w.message) for w in caught]}))
"""


def test_a_truncated_numba_cache_of_the_kernels_compiles_in_memory(tmp_path):
    """ops/gemm's kernels are compiled into Numba's disk cache; with those files truncated (a
    crash, a full disk) the next process warns and compiles them in memory, same result."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(tmp_path))

    def run():
        out = subprocess.run([sys.executable, "-c", PRODUCT], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    files = [f for f in tmp_path.rglob("*.nb[ic]") if "gemm" in f.name]
    assert files and not first["warnings"]
    for f in files:
        f.write_bytes(f.read_bytes()[:40])
    second = run()
    assert second["out"] == first["out"]
    assert len(second["warnings"]) == 1 and "ops/gemm" in second["warnings"][0]


def test_compiled_code_that_inlines_the_kernels_is_keyed_by_their_source(tmp_path):
    """Numba's disk cache keys a function by its own file: the thread team's, the recurrent and
    the random loops' entries (which inline native.py's, gemm.py's and kernel_lib's code) carry
    those files' hashes in their stamp, and
    a native segment's file names it, so a changed gemm.py recompiles them (a stale entry ran
    a 16-column product 10x slower than the new code)."""
    from lazyvic.lowering.cpu import random_kernels, recurrent_kernels, team
    from lazyvic.lowering.kernel_files import inlined_sources_hash
    from lazyvic.ops.gemm_choice import gemm_source_hash

    assert gemm_source_hash() in inlined_sources_hash()
    for d in (team._run_parallel, team._run_serial, recurrent_kernels.forward_loop, random_kernels.fill_parallel):
        assert d._cache._cache_file._source_stamp[1] == inlined_sources_hash()
    rng = np.random.default_rng(5)
    x = lazyvic.tensor(rng.standard_normal((4, 32)).astype(np.float32))
    v = lazyvic.tensor(rng.standard_normal((32, 16)).astype(np.float32))
    trace, inputs, scalars, _ = cut([((x @ v) + 1.0)._node])
    plan = compile_trace(trace, cache_dir=tmp_path)
    plan.native_after = 1
    plan.run([np.ascontiguousarray(a) for a in inputs], scalars)
    segs = [s for s in plan.native if isinstance(s, native.NativeSegment)]
    assert segs and all(f"gemm {gemm_source_hash()}" in s.source for s in segs)


def _jitted(obj) -> bool:
    from numba.core.extending import _Intrinsic
    from numba.core.registry import CPUDispatcher

    return isinstance(obj, (CPUDispatcher, _Intrinsic))


# Modules that import other files' jitted code, whose cached functions call none of it (read).
NO_FOREIGN_JIT = {"lazyvic.lowering.cpu.steps": "its cached scatter_add_2d and _in_range call no other jitted code"}


def test_every_cached_loop_that_uses_another_files_jitted_code_is_stamped():
    """Numba's disk cache keys a function by its own file: a module whose cached functions can
    inline compiled code of another lazyvic module (a dispatcher or intrinsic imported by name,
    or a module of them used by attribute) stamps them with inlined_sources_hash."""
    import importlib
    import pkgutil
    import types as pytypes

    import lazyvic.lowering
    from lazyvic.lowering.kernel_files import inlined_sources_hash

    checked = []
    for info in pkgutil.walk_packages(lazyvic.lowering.__path__, "lazyvic.lowering."):
        if ".cuda" in info.name or info.name in NO_FOREIGN_JIT:
            continue
        mod = importlib.import_module(info.name)
        own = [v for v in vars(mod).values() if _jitted(v) and getattr(v, "_cache", None) is not None]
        cached = [d for d in own if getattr(d, "__module__", None) == mod.__name__ and hasattr(d._cache, "_cache_file")]
        if not cached:
            continue
        foreign = [
            n
            for n, v in vars(mod).items()
            if (_jitted(v) and getattr(v, "__module__", mod.__name__) != mod.__name__)
            or (
                isinstance(v, pytypes.ModuleType)
                and v.__name__.startswith("lazyvic.")
                and any(_jitted(x) for x in vars(v).values())
            )
        ]
        if foreign:
            checked.append(mod.__name__)
            for d in cached:
                assert d._cache._cache_file._source_stamp[1:] == (inlined_sources_hash(),), (mod.__name__, d, foreign)
    assert {"lazyvic.lowering.cpu.team", "lazyvic.lowering.cpu.recurrent_kernels"} <= set(checked), checked
