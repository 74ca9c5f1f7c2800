"""lazyvic.explain diagnoses recompiles, syncs in loops, fallbacks and growing graphs;
lazyvic.metrics.report() and LAZYVIC_DEBUG levels say what the runtime did.

Shapes here are ones no other test uses, so each test's first traces miss the global cache.
"""

import importlib
import inspect
import io
import json

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.runtime import metrics
from lazyvic.runtime.config import config

plan_cache_module = importlib.import_module("lazyvic.runtime.plan_cache")  # the package exports the object


@pytest.fixture
def hot(monkeypatch):
    """Hot mode, and an empty plan cache: what is a miss (and the nearest cached key a miss
    is compared with) must not depend on which tests ran before. Plans of fixed sizes only
    (LAZYVIC_DYNAMIC=0): these tests read why a key missed; ``dynamic`` below turns
    automatic dynamic shapes on."""
    from lazyvic.runtime.plan_cache import plan_cache

    monkeypatch.setattr(config, "compile", "hot")
    monkeypatch.setattr(config, "dynamic", False)
    monkeypatch.setattr(config, "debug", 0)
    monkeypatch.setattr(config, "deterministic", False)
    plan_cache.clear_plans()


def _line_of(fn, text: str) -> int:
    """The line number of the first line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_changing_slice_bound_is_a_recompile_trap(hot):
    x = lv.tensor(np.arange(3 * 17, dtype=np.float32).reshape(3, 17))

    def step(n):
        return (x * 2.0)[:, :n].sum()

    def loop():
        return [step(n).item() for n in range(5, 10)]

    report = lv.explain(loop)
    assert report.result == [float((np.arange(51).reshape(3, 17) * 2)[:, :n].sum()) for n in range(5, 10)]
    why = [c["miss_reason"] for c in report.cuts[1:]]
    assert all(w["kind"] == "constant" for w in why)
    assert all(w["differences"][0]["op"] == "slice" and w["differences"][0]["attr"] == "stops" for w in why)
    trap = [w for w in report.warnings if w["kind"] == "recompile"]
    assert len(trap) == 1 and trap[0]["op"] == "slice" and trap[0]["attr"] == "stops" and trap[0]["misses"] == 4
    assert "Fix:" in trap[0]["message"]
    assert "constant differs" in str(report) and "slice" in str(report)


def test_changing_slice_bound_becomes_a_symbol_with_dynamic_shapes(hot, monkeypatch):
    monkeypatch.setattr(config, "dynamic", True)
    x = lv.tensor(np.arange(3 * 19, dtype=np.float32).reshape(3, 19))

    def loop():
        return [(x * 2.0)[:, :n].sum().item() for n in range(5, 11)]

    report = lv.explain(loop)
    assert report.result == [float((np.arange(57).reshape(3, 19) * 2)[:, :n].sum()) for n in range(5, 11)]
    # The first cut is a miss, the second makes the plan of symbolic sizes, the rest hit it.
    assert [c["hit"] for c in report.cuts] == [False, False, True, True, True, True]
    assert report.cuts[1]["symbolic"].startswith("s0 = stops[1] of slice")
    assert [c["sizes"] for c in report.cuts[2:]] == [{"s0": n} for n in range(7, 11)]
    assert not [w for w in report.warnings if w["kind"] == "recompile"]
    dyn = [w for w in report.warnings if w["kind"] == "dynamic"]
    assert len(dyn) == 1 and "no recompile" in dyn[0]["message"]
    assert "a plan of symbolic sizes" in str(report)


def test_changing_reshape_shape_names_the_attribute(hot):
    x = lv.tensor(np.ones(60 * 7, np.float32))

    def loop():
        for rows in (2, 3, 4, 5):
            (x + 1.0).reshape(rows, -1).sum(1).numpy()

    report = lv.explain(loop)
    trap = [w for w in report.warnings if w["kind"] == "recompile"]
    assert trap and trap[0]["op"] == "reshape" and trap[0]["cause"] == "constant"


def test_changing_input_shape_and_dtype_are_named(hot):
    def f(a):
        return (a * 3).sum().item()

    report = lv.explain(lambda: [f(lv.tensor(np.ones(n, np.float32))) for n in (23, 24, 25)])
    assert [c["miss_reason"]["kind"] for c in report.cuts[1:]] == ["input shape", "input shape"]
    assert report.cuts[2]["miss_reason"]["differences"][0]["detail"] == "input 0 shape (24,) -> (25,)"
    assert any(w["kind"] == "recompile" and w["cause"] == "input shape" for w in report.warnings)

    def square(a):
        return (a * a).sum().item()

    report = lv.explain(lambda: [square(lv.tensor(np.ones(29, dt))) for dt in (np.float32, np.float64)])
    why = report.cuts[1]["miss_reason"]
    assert why["kind"] == "dtype" and why["differences"] == [
        {"entry": 0, "op": "buffer", "kind": "dtype", "detail": "dtype float32 -> float64"}
    ]


def test_item_in_a_loop_is_a_sync_in_a_loop(hot):
    w = lv.tensor(np.full((4, 11), 0.5, np.float32))

    def train():
        losses = []
        for _ in range(6):
            losses.append((w * w).sum().item())
        return losses

    report = lv.explain(train)
    where = f"{__file__.rsplit('/', 1)[-1]}:{_line_of(train, '.item()')}"
    assert all(c["reason"] == "item" and c["where"].endswith(where) for c in report.cuts)
    loop = [w for w in report.warnings if w["kind"] == "sync-in-loop"]
    assert len(loop) == 1 and loop[0]["cuts"] == 6 and loop[0]["where"].endswith(where)
    assert report.misses == 1 and report.hits == 5  # hot: the second run compiles, later ones hit
    assert len(report.plans) == 1 and report.plans[0]["compile_seconds"] > 0


def test_each_sync_point_is_named(hot):
    a = lv.tensor(np.ones((2, 19), np.float32))

    def body():
        (a + 1).numpy()
        (a + 2).sum().item()
        (a + 3).tolist()
        bool((a + 4).sum() > 0)
        repr(a + 5)
        b = a + 6  # noqa: F841 - kept alive: lazyvic.sync() realizes live pending tensors
        lv.sync()

    report = lv.explain(body)
    assert [c["reason"] for c in report.cuts] == ["numpy", "item", "tolist", "bool", "repr", "sync"]
    first = _line_of(body, "(a + 1).numpy()")
    assert [int(c["where"].rsplit(":", 1)[1]) for c in report.cuts] == [first + i for i in (0, 1, 2, 3, 4, 6)]


def test_randn_falls_back_to_its_numpy_reference(monkeypatch):
    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(config, "debug", 0)
    report = lv.explain(lambda: (lv.randn(3, 31) * 2 + 1).sum(1).numpy())
    assert report.fallbacks == [
        {
            "plan": report.plans[0]["name"],
            "op": "randn",
            "kind": "no kernel: NumPy reference inside the plan",
            "runs": 1,
        }
    ]
    plan = report.plans[0]
    assert plan["fallbacks"] == ["randn"]
    kinds = {g["kind"] for g in plan["groups"]}
    assert {"reference", "kernel"} <= kinds
    kernel = next(g for g in plan["groups"] if g["kind"] == "kernel")
    assert kernel["name"].startswith("k_") and "mul" in kernel["ops"] and "sum" in kernel["ops"]
    assert plan["memory"]["peak"] > 0
    text = str(report)
    assert "fallbacks to the NumPy interpreter" in text and "randn" in text and kernel["name"] in text


def test_a_plan_that_fails_to_compile_is_a_whole_trace_fallback(monkeypatch):
    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(config, "debug", 0)

    def broken(trace):
        raise RuntimeError("no code generator today")

    monkeypatch.setattr(plan_cache_module, "_compile", broken)
    x = lv.tensor(np.ones(37, np.float32))
    with pytest.warns(RuntimeWarning, match="could not be compiled"):
        report = lv.explain(lambda: (x.exp() * 2).numpy())
    assert report.cuts[0]["ran"] == "interpreter"
    assert report.fallbacks[0]["op"].startswith("<whole trace: RuntimeError")
    assert any(w["kind"] == "fallback" for w in report.warnings)


def test_a_growing_graph_is_cut_by_the_size_limit(hot, monkeypatch):
    monkeypatch.setattr(config, "max_pending", 25)
    x = lv.tensor(np.ones(41, np.float32))

    def grow():
        y = x
        for _ in range(80):
            y = y * 1.001 + 0.5
        return y

    report = lv.explain(grow)
    forced = [c for c in report.cuts if c["reason"] == "size limit"]
    assert len(forced) >= 2 and all(c["where"].endswith(f":{_line_of(grow, 'y * 1.001')}") for c in forced)
    assert report.cuts[-1]["reason"] == "end of explain"
    grow_warnings = [w for w in report.warnings if w["kind"] == "growing-graph"]
    assert len(grow_warnings) == 1 and grow_warnings[0]["cuts"] == len(forced)
    assert not [w for w in report.warnings if w["kind"] == "sync-in-loop"]
    np.testing.assert_allclose(report.result.numpy()[0], _grown(), rtol=1e-5)


def _grown() -> float:
    y = np.float32(1)
    for _ in range(80):
        y = y * np.float32(1.001) + np.float32(0.5)
    return float(y)


def test_report_is_plain_data_and_recording_stops(hot):
    x = lv.tensor(np.ones(43, np.float32))
    report = lv.explain(lambda: (x + 1).sum().item())
    d = report.to_dict()
    json.dumps(d)
    assert set(d) >= {"cuts", "hits", "misses", "plans", "fallbacks", "warnings", "totals"}
    assert metrics.recorder is None
    with pytest.raises(ZeroDivisionError):
        lv.explain(lambda: 1 / 0)
    assert metrics.recorder is None


def test_metrics_report_counts_bytes_and_caches(hot):
    metrics.reset()
    x = lv.tensor(np.ones((5, 47), np.float32))
    for _ in range(3):
        (x * 2).sum(1).numpy()
    snap = metrics.snapshot()
    assert snap["traces"] == 3 and snap["cache_misses"] == 1 and snap["cache_hits"] == 2
    assert snap["plans_compiled"] == 1
    assert snap["bytes_in"] == 3 * x.numpy().nbytes and snap["bytes_out"] == 3 * 5 * 4
    buf = io.StringIO()
    text = metrics.report(file=buf)
    assert buf.getvalue().rstrip("\n") == text
    for word in (
        "counts",
        "times (s)",
        "cache",
        "memory",
        "cache_misses",
        "kernels_compiled",
        "fallbacks",
        "compile_seconds",
        "interpret_seconds",
        "plans_cached",
        "kernels_on_disk",
        "bytes_in",
        "bytes_out",
        "planned_peak_bytes",
    ):
        assert word in text
    assert snap["kernels_on_disk"] >= 1 and snap["planned_peak_bytes"] > 0
    metrics.reset()
    snap = metrics.snapshot()
    assert all(snap[k] == 0 for k in metrics.counters) and snap["fallback_ops"] == {}


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_debug_levels(level, monkeypatch, capsys):
    monkeypatch.setattr(config, "compile", "always")
    monkeypatch.setattr(config, "debug", level)
    monkeypatch.setattr(config, "dynamic", False)  # the second shape is a miss, with its reason
    x = lv.tensor(np.ones((3, 50 + level), np.float32))
    (x.exp() * 2).sum(1).numpy()
    x2 = lv.tensor(np.ones((3, 60 + level), np.float32))
    (x2.exp() * 2).sum(1).numpy()
    err = capsys.readouterr().err
    assert "[lazyvic] plan-cache miss: trace of" in err and "compiled plan plan_" in err
    assert f"input 0 shape (3, {50 + level}) -> (3, {60 + level})" in err  # the miss says why
    assert ("group k_" in err) == (level >= 2)
    assert ("def k_" in err) == (level >= 3)
    assert (" us" in err) == (level >= 4)
