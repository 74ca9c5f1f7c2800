"""The plan cache: trace key -> compiled plan, and ``run`` (the runtime's entry point).

In ``hot`` mode (default) a key seen for the first time runs on the NumPy
interpreter; when it recurs its plan is compiled and every later run uses it.
In deterministic mode a plan is compiled at first sight, so results never
depend on whether a key was seen before. A plan that fails to compile is run by the interpreter and counted as a
fallback (``metrics.snapshot()["fallback_ops"]`` names why), never silently.
"""

from __future__ import annotations

import gc
import sys
import time
import warnings

from lazyvic.runtime import metrics
from lazyvic.runtime.config import config
from lazyvic.runtime.executor import execute
from lazyvic.runtime.interpreter import interpret


class PlanEntry:
    __slots__ = ("key", "trace", "n_ops", "seen", "plan", "failed", "hits")

    def __init__(self, key, n_ops: int, trace=None):
        self.key = key
        self.trace = trace  # the first trace seen with this key (no data: for tools)
        self.n_ops = n_ops
        self.seen = 0
        self.plan = None
        self.failed = None
        self.hits = 0


class PlanCache(dict):
    """dict of trace key -> PlanEntry, with counters kept in ``lazyvic.metrics``.

    ``last`` is the entry of the most recent run (its ``plan`` is None until compiled).
    """

    last: PlanEntry | None = None

    def clear_plans(self) -> None:
        self.clear()
        self.last = None


plan_cache = PlanCache()


def _compile(trace):
    from lazyvic.lowering import compile_trace

    t0 = time.perf_counter()
    plan = compile_trace(trace, config.cache_dir, config.debug)
    if config.gc_freeze:
        # Compiling leaves ~10^5 long-lived objects (Numba's and ours) that every full
        # collection would walk again; see LAZYVIC_GC_FREEZE in runtime/config.py.
        gc.collect()
        gc.freeze()
    dt = time.perf_counter() - t0
    metrics.add("compile_seconds", dt)
    metrics.add("plans_compiled")
    metrics.add("kernels_compiled", plan.stats.get("kernels_compiled", 0))
    metrics.add("kernels_loaded", plan.stats.get("kernels_loaded", 0))
    if config.debug >= 1:
        print(f"[lazyvic] compiled plan {plan.name}: {len(plan.steps)} steps in {dt:.3f}s", file=sys.stderr)
    return plan


def run(trace, inputs: list, scalars: list) -> list:
    """Execute ``trace`` with the given input arrays and scalar values; returns output arrays."""
    metrics.add("traces")
    metrics.add("ops_traced", len(trace.entries))
    key = trace.key
    entry = plan_cache.get(key)
    if entry is None:
        entry = plan_cache[key] = PlanEntry(key, len(trace.entries), trace)
        metrics.add("cache_misses")
        if config.debug >= 1:
            print(f"[lazyvic] plan-cache miss: trace of {len(trace.entries)} ops", file=sys.stderr)
    else:
        metrics.add("cache_hits")
        entry.hits += 1
    entry.seen += 1
    plan_cache.last = entry
    mode = config.compile
    if mode == "hot" and config.deterministic:
        mode = "always"  # no interpreted first run: its last bits can differ from the compiled plan's
    if entry.plan is None and entry.failed is None and mode != "never" and (mode == "always" or entry.seen >= 2):
        try:
            entry.plan = _compile(trace)
        except Exception as e:  # noqa: BLE001 - reported, and the interpreter still runs the trace
            entry.failed = f"{type(e).__name__}: {e}"
            warnings.warn(
                f"lazyvic: a plan of {len(trace.entries)} ops could not be compiled and runs on the NumPy "
                f"interpreter ({entry.failed.splitlines()[0][:300]}); see lazyvic.metrics.snapshot()['fallback_ops']",
                RuntimeWarning,
                stacklevel=3,
            )
    if entry.plan is not None and mode != "never":
        plan = entry.plan
        t0 = time.perf_counter()
        out = execute(plan, inputs, scalars, config.debug)
        metrics.add("execute_seconds", time.perf_counter() - t0)
        metrics.add("compiled_runs")
        if plan.fallbacks:
            metrics.add("fallbacks", len(plan.fallbacks))
            for op in plan.fallbacks:
                metrics.fallback_ops[op] += 1
        return out
    if entry.failed is not None:
        metrics.add("fallbacks")
        metrics.fallback_ops["<whole trace: " + entry.failed.split(":")[0] + ">"] += 1
    t0 = time.perf_counter()
    out = interpret(trace, inputs, scalars)
    dt = time.perf_counter() - t0
    metrics.add("interpret_seconds", dt)
    metrics.add("execute_seconds", dt)
    metrics.add("interpreted_runs")
    return out
