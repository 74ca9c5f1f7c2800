"""The shared lowering: named entries through the passes, the op table's index maps, kernel files.

Plans here compile into a temporary cache directory, so the kernels they write stay out of the
suite's cache (whose files are compared before and after refactorings of the lowering).
"""

import itertools

import numpy as np
import pytest
from _oracle import both_tiers

import lazyvic as lv
from lazyvic import ops as optable
from lazyvic.lowering.cpu import CpuPlan, compile_trace, kernel_cache
from lazyvic.lowering.emitter import Lin
from lazyvic.lowering.kernel_files import library_names
from lazyvic.lowering.passes import simplify, transpose_matmuls
from lazyvic.trace import cut
from lazyvic.trace.entry import Attrs, Entry


def _trace(*tensors):
    trace, inputs, scalars, _ = cut([t._node for t in tensors])
    return trace, inputs, scalars


def test_entries_are_named_and_read_only():
    x = lv.tensor(np.ones((2, 3), np.float32))
    trace, _, _ = _trace((x * 2.0).permute(1, 0))
    e = trace.named[-1]
    assert isinstance(e, Entry) and e.op == "permute" and e.attrs["perm"] == (1, 0)
    assert e.shape == (3, 2) and e.dtype is lv.float32 and e.origin == len(trace.entries) - 1
    assert trace.entry(0) == trace.named[0] and trace.named[0].slot == 0
    with pytest.raises(TypeError, match="read-only"):
        e.attrs["perm"] = (0, 1)
    assert hash(Attrs(perm=(1, 0))) == hash(e.attrs)


def test_passes_keep_scope_and_origin():
    x = lv.tensor(np.ones((4, 5), np.float32))
    w = lv.tensor(np.ones((5, 3), np.float32))
    y = (x.permute(1, 0).permute(1, 0) @ w).permute(1, 0).reshape(3, 4).reshape(12)
    trace, _, _ = _trace(y)
    entries, outputs = simplify(*transpose_matmuls(list(trace.named), list(trace.outputs)))
    ops = [e.op for e in entries if not e.is_input]
    assert "reshape" in ops and ops.count("reshape") == 1  # reshape of a reshape folded
    assert ops.count("matmul") == 1  # permute(x @ w) became w^T @ x^T
    for e in entries:
        origin = trace.named[e.origin]
        assert e.scope == origin.scope
        assert e.op == origin.op or (e.op, origin.op) == ("matmul", "permute")


class _Ints(int):
    """An index that is a plain number: enough of an affine form for the op table's maps."""

    def scale(self, k):
        return _Ints(self * k)

    def __add__(self, other):
        return _Ints(int(self) + other)


MOVEMENTS = [
    ("permute", (2, 3, 4), {"perm": (2, 0, 1)}),
    ("expand", (2, 1, 4), {"shape": (2, 3, 4)}),
    ("expand", (), {"shape": (2, 3)}),
    ("slice", (5, 7), {"starts": (1, 0), "stops": (5, 7), "steps": (2, 3)}),
    ("pad", (2, 3), {"pads": ((1, 2), (0, 1))}),
]


@pytest.mark.parametrize("op,shape,attrs", MOVEMENTS, ids=[m[0] + str(m[1]) for m in MOVEMENTS])
def test_index_maps_agree_with_the_references(op, shape, attrs):
    opdef = optable.OPS[op]
    x = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int64).reshape(shape)
    ref = np.asarray(opdef.reference([x], attrs))
    for index in itertools.product(*(range(n) for n in ref.shape)):
        at = opdef.index_map([_Ints(i) for i in index], attrs, shape, ref.shape)
        inside = all(0 <= i < n for i, n in zip(at, shape))
        assert inside or opdef.reads_outside, (op, index, at)
        assert ref[index] == (x[tuple(at)] if inside else 0), (op, index, at)


def test_every_movement_op_is_declared():
    for name, opdef in optable.OPS.items():
        if opdef.kind == "movement":
            assert (opdef.index_map is not None) != opdef.flat_index, name
            assert opdef.is_identity is not None, name
    at = {"perm": (1, 2, 0)}
    assert optable.OPS["permute"].fold(at, at) == {"perm": (2, 0, 1)}


def test_index_maps_work_on_affine_forms():
    i, j = Lin({0: 1}), Lin({1: 1})
    (a, b) = optable.OPS["slice"].index_map([i, j], {"starts": (1, 2), "steps": (2, 1)}, (5, 5), (2, 3))
    assert a.key() == (((0, 2),), 1) and b.key() == (((1, 1),), 2)


def test_kernel_files_are_checked_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_cache, "_loaded", kernel_cache.OrderedDict())
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    x = lv.tensor(a)
    trace, inputs, scalars = _trace((x * 3.0).exp())
    plan = compile_trace(trace, tmp_path)
    assert isinstance(plan, CpuPlan)
    (kernel,) = plan.kernels
    path = tmp_path / "kernels" / f"{kernel.name}.py"
    expected = kernel_cache.kernel_header() + kernel.source
    assert path.read_text() == expected
    path.write_text(expected.replace("exp_f32", "log_f32"))  # another program's file, same name
    monkeypatch.setattr(kernel_cache, "_loaded", kernel_cache.OrderedDict())
    plan = compile_trace(trace, tmp_path)
    assert path.read_text() == expected
    (y,) = plan.run(inputs, scalars)
    np.testing.assert_allclose(y, np.exp(a * 3), rtol=1e-6)
    assert not list(path.parent.glob(".tmp-*"))


def test_kernel_headers_name_the_library():
    names = library_names()
    for name in ("f32", "b1", "exp_f32", "erf_f32", "fmax", "acc_add", "uniform_f32", "round_bf16_f64"):
        assert name in names
    assert "njit" not in names and "np" not in names and not any(n.startswith("_") for n in names)
    header = kernel_cache.kernel_header()
    assert "from lazyvic.lowering.kernel_lib import (" in header and all(n in header for n in names)


def _four_kernels():
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    x = lv.tensor(a)
    outs = ((x * 3.0).exp(), (x + 1.0).tanh(), x.sigmoid() * 2.0, (x - 1.0).abs() + x)
    refs = (np.exp(a * 3), np.tanh(a + 1), 2 / (1 + np.exp(-a)), np.abs(a - 1) + a)
    return _trace(*outs), refs


@pytest.mark.parametrize("worker_ok", [True, False])
def test_kernels_compile_side_by_side_in_worker_processes(tmp_path, monkeypatch, worker_ok):
    # A plan needing several new kernels compiles some in a worker process, into Numba's disk
    # cache, and loads them from there (lowering/cpu/compile_workers.py); a worker that fails
    # leaves its kernels to this process. Same kernels, same results either way.
    from lazyvic.lowering.cpu import compile_workers

    monkeypatch.setenv("LAZYVIC_COMPILE_WORKERS", "1")
    monkeypatch.setattr(kernel_cache, "_loaded", kernel_cache.OrderedDict())
    if not worker_ok:
        monkeypatch.setattr(compile_workers.Worker, "compile", lambda self, job: False)
    (trace, inputs, scalars), refs = _four_kernels()
    plan = compile_trace(trace, tmp_path)
    assert plan.stats["kernels_compiled"] == 4 and plan.stats.get("kernels_loaded", 0) == 0
    assert (plan.stats["kernels_compiled_by_workers"] >= 1) == worker_ok
    for y, ref in zip(plan.run(inputs, scalars), refs):
        np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)
    # Another process (or this one, after its kernels were dropped) loads them all from disk.
    monkeypatch.setattr(kernel_cache, "_loaded", kernel_cache.OrderedDict())
    plan = compile_trace(trace, tmp_path)
    assert plan.stats["kernels_loaded"] == 4 and plan.stats.get("kernels_compiled", 0) == 0


def test_compile_workers_setting(monkeypatch):
    from lazyvic.lowering.cpu import compile_workers

    monkeypatch.setenv("LAZYVIC_COMPILE_WORKERS", "0")
    assert compile_workers.worker_count() == 0
    monkeypatch.setenv("LAZYVIC_COMPILE_WORKERS", "two")
    with pytest.warns(RuntimeWarning, match="LAZYVIC_COMPILE_WORKERS='two'"):
        assert compile_workers.worker_count() == 0
    monkeypatch.delenv("LAZYVIC_COMPILE_WORKERS")
    assert 0 <= compile_workers.worker_count() <= compile_workers.MAX_WORKERS


def test_a_worker_that_cannot_start_leaves_the_compiles_here(tmp_path, monkeypatch):
    from lazyvic.lowering.cpu import compile_workers

    monkeypatch.setenv("LAZYVIC_COMPILE_WORKERS", "1")
    monkeypatch.setattr(kernel_cache, "_loaded", kernel_cache.OrderedDict())
    monkeypatch.setattr(compile_workers, "_workers", [])
    monkeypatch.setattr(compile_workers, "_broken", [])
    monkeypatch.setattr(compile_workers.sys, "executable", "/bin/false")  # exits at once
    (trace, inputs, scalars), refs = _four_kernels()
    plan = compile_trace(trace, tmp_path)
    assert plan.stats["kernels_compiled"] == 4 and plan.stats["kernels_compiled_by_workers"] == 0
    # Found dead during that compile, or (when this thread took every job before the worker had
    # exited, as on a busy machine) at the next one: no more starts in this process.
    for w in compile_workers._workers:
        w.proc.wait(timeout=30)
    monkeypatch.setattr(kernel_cache, "_loaded", kernel_cache.OrderedDict())
    again = compile_trace(trace, tmp_path / "again")
    assert again.stats["kernels_compiled"] == 4 and again.stats.get("kernels_compiled_by_workers", 0) == 0
    assert compile_workers.worker_count() == 0
    for y, ref in zip(plan.run(inputs, scalars), refs):
        np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)


def test_a_round_of_planning_again_keeps_the_kernels_it_did_not_change(monkeypatch):
    """Lowering plans the fusion again when a kernel asks for a buffer (NeedsMaterialize); the
    groups a round left as they were keep the sources made for them. A small GPT's training
    step: more than one round, fewer kernels generated than without keeping them, and the same
    source for every kernel."""
    from lazyvic.lowering import fusion, pipeline
    from lazyvic.lowering.cpu import codegen

    lv.manual_seed(0)
    model = lv.models.TinyGPT(11, d_model=8, n_layer=1, n_head=2, block_size=8)
    idx = lv.tensor(np.random.default_rng(0).integers(0, 11, (2, 8)))
    _, loss = model(idx, idx)
    loss.backward()
    trace, _, _ = _trace(loss, *[p.grad for p in model.parameters()])

    rounds, calls = [0], [0]
    plan = fusion.plan_groups

    def counted_plan(*a, **k):
        rounds[0] += 1
        return plan(*a, **k)

    def counted_generate(*a):
        calls[0] += 1
        return codegen.generate(*a)

    monkeypatch.setattr(pipeline, "plan_groups", counted_plan)
    kept = pipeline.lower(trace, counted_generate)
    kept_rounds, kept_calls = rounds[0], calls[0]
    rounds[0] = calls[0] = 0
    keys = itertools.count()
    monkeypatch.setattr(pipeline, "_source_key", lambda entries, m, group: next(keys))
    fresh = pipeline.lower(trace, counted_generate)
    assert kept_rounds == rounds[0] > 1
    assert len(kept.sources) < kept_calls < calls[0]
    assert {k: s.source for k, s in kept.sources.items()} == {k: s.source for k, s in fresh.sources.items()}


def test_parallel_kernels_keep_their_threads_beside_large_products(tmp_path, monkeypatch):
    """Every plan that calls BLAS runs it on one thread, its large products in pieces on Numba's
    threads, so its parallel kernels keep Numba's threads (until 2026-11-26 a plan with a product
    of 2^28 flops or more kept OpenBLAS's two threads and ran its kernels on one); a plan with no
    product leaves BLAS alone."""
    import numba

    from lazyvic.lowering.cpu import codegen, load

    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine (tests run side by side)

    x = lv.tensor(np.arange(codegen.PARALLEL_MIN_ELEMENTS, dtype=np.float32) / codegen.PARALLEL_MIN_ELEMENTS)
    from lazyvic.lowering.cpu.steps import MatmulStep
    from lazyvic.runtime.config import config

    rng = np.random.default_rng(5)
    y_np = rng.standard_normal((512, 512)).astype(np.float32)
    y = lv.tensor(y_np)  # a product of 2.7e8 flops
    chain = (x * 2 + 1).tanh()
    cuts = [cut(nodes) for nodes in ([chain._node], [chain._node, (y @ y)._node])]
    plans = [compile_trace(c[0], cache_dir=tmp_path) for c in cuts]
    assert [p.parallel for p in plans] == [True, True] and [p.blas_threads for p in plans] == [None, 1]
    (step,) = [s for s in plans[1].steps if isinstance(s, MatmulStep)]
    assert plans[1].team and step.run.team and step.in_pieces
    calls = []
    monkeypatch.setattr(numba, "set_num_threads", calls.append)
    got = [p.run(c[1], c[2]) for p, c in zip(plans, cuts)]
    assert calls == []  # neither plan takes Numba's threads away from its kernels
    expected = np.tanh(np.arange(x.shape[0], dtype=np.float32) / x.shape[0] * 2 + 1)
    np.testing.assert_allclose(got[0][0], expected, rtol=1e-6)
    np.testing.assert_array_equal(got[1][0], got[0][0])
    monkeypatch.setattr(config, "compile", "never")
    np.testing.assert_array_equal(got[1][1], (lv.tensor(y_np) @ lv.tensor(y_np)).numpy())  # the interpreter's bits
    np.testing.assert_allclose(got[1][1], y_np.astype(np.float64) @ y_np, rtol=1e-4, atol=1e-3)
    # While another process is busy, each run's parallel kernels go to the calling thread alone
    # (a region otherwise waits for a thread on the busy core), and back after: the same bits.
    monkeypatch.setattr(load, "other_load", lambda: True)
    busy = plans[0].run(cuts[0][1], cuts[0][2])[0]
    assert calls == ([1, numba.get_num_threads()] if numba.get_num_threads() > 1 else [])
    np.testing.assert_array_equal(busy, got[0][0])


def test_the_interpreter_runs_its_products_on_one_blas_thread(monkeypatch):
    """The interpreter's products run on one BLAS thread, as the plans' do: OpenBLAS's Haswell
    kernels round most float32 products of 100 x 100 x 100 and more otherwise on two threads,
    so an interpreted first run and the compiled runs after it gave other bits there."""
    import dataclasses

    from lazyvic.ops.blas import blas_threads
    from lazyvic.runtime.config import config

    seen = []
    opdef = optable.OPS["matmul"]

    def reference(x, at):
        blas_threads.limit(1)  # (found once: the functions getting each library's thread count)
        blas_threads.restore()
        seen.append([get() for get, _ in blas_threads.libs])
        return opdef.reference(x, at)

    lv.sync()  # (what earlier tests left pending runs before, not in this sync)
    monkeypatch.setitem(optable.OPS, "matmul", dataclasses.replace(opdef, reference=reference))
    monkeypatch.setattr(config, "compile", "never")
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal((lv.tensor(a) @ lv.tensor(a)).numpy(), a @ a)
    assert seen and all(libs and all(n == 1 for n in libs) for libs in seen)


def test_matmul_pieces_tile_the_output_by_the_shape_alone():
    """ops/blas.matmul_pieces: pieces that cover the output once, by rows when it has at least as
    many rows as columns, else by columns; none for small products."""
    from lazyvic.ops.blas import MATMUL_MAX_PIECES, MATMUL_PIECE_WORK, matmul_pieces

    for m, n, k in [
        (1024, 512, 128),
        (128, 512, 1024),
        (700, 512, 64),
        (35, 512, 128),
        (100, 3000, 50),
        (17, 17, 9000),
    ]:
        pieces = matmul_pieces(m, n, k)
        cover = np.zeros((m, n), np.int64)
        for r0, r1, c0, c1 in pieces:
            cover[r0:r1, c0:c1] += 1
        assert (cover == 1).all(), (m, n, k)
        assert len(pieces) <= MATMUL_MAX_PIECES and (len(pieces) == 1 or m * n * k >= len(pieces) * MATMUL_PIECE_WORK)
    assert [p[:2] for p in matmul_pieces(1024, 512, 128)] == [(0, 256), (256, 512), (512, 768), (768, 1024)]
    assert [p[2:] for p in matmul_pieces(128, 512, 1024)] == [(0, 128), (128, 256), (256, 384), (384, 512)]
    assert matmul_pieces(35, 512, 128) == [(0, 35, 0, 512)]  # 2.3e6 multiply-adds: one call
    assert [p[:2] for p in matmul_pieces(1024, 1024, 1024)] == [(0, 256), (256, 512), (512, 768), (768, 1024)]


@pytest.mark.parametrize("batched", [False, True], ids=["pieces", "per_matrix"])
def test_products_in_pieces_on_the_team_keep_the_interpreters_bits(batched, tmp_path, monkeypatch):
    """A plan whose BLAS runs on one thread runs a large product in pieces on Numba's threads
    (ops/blas.matmul_pieces; a batched one a matrix per call): the interpreter's bits (its
    reference makes the same pieces), the same on one thread, and float64's values."""
    import numba

    from lazyvic.lowering.cpu import load, team
    from lazyvic.lowering.cpu.steps import MatmulStep

    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine
    rng = np.random.default_rng(11)
    shapes = ((8, 128, 64), (8, 64, 96)) if batched else ((300, 128), (512, 128))
    a, w = (rng.standard_normal(s).astype(np.float32) for s in shapes)

    def product():
        x, y = lv.tensor(a), lv.tensor(w)
        return (x @ y).relu() if batched else x @ y.T + 1.0

    got = dict(zip(("never", "always"), both_tiers(product)))
    np.testing.assert_array_equal(got["always"], got["never"])
    exact = np.maximum(a.astype(np.float64) @ w, 0) if batched else a.astype(np.float64) @ w.T.astype(np.float64) + 1
    np.testing.assert_allclose(got["never"], exact, rtol=1e-4, atol=1e-4)

    trace, inputs, scalars, _ = cut([product()._node])
    plan = compile_trace(trace, cache_dir=tmp_path)
    (step,) = [s for s in plan.steps if isinstance(s, MatmulStep)]
    assert plan.blas_threads == 1 and plan.team and step.run.team
    calls = {"parallel": 0}
    parallel = team._run_parallel

    def counted(*args):
        calls["parallel"] += 1
        return parallel(*args)

    monkeypatch.setattr(team, "_run_parallel", counted)
    once = plan.run(inputs, scalars)[0]
    assert calls["parallel"] == (1 if numba.get_num_threads() > 1 else 0)
    np.testing.assert_array_equal(once, got["never"])
    step.run.team = False  # the same pieces on the calling thread
    np.testing.assert_array_equal(plan.run(inputs, scalars)[0], got["never"])
    assert calls["parallel"] == (1 if numba.get_num_threads() > 1 else 0)
    # products too small for pieces need no team: the plan stays serial (its runs from several
    # threads then never wait for Numba's threading layer, runtime/executor.py)
    small = lv.tensor(a.reshape(-1, 64)[:8]) @ lv.tensor(np.ones((64, 16), np.float32))
    plan = compile_trace(cut([small._node])[0], cache_dir=tmp_path)
    assert plan.blas_threads == 1 and not plan.team and not plan.parallel
