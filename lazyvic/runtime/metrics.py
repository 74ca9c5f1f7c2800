"""Counters of the runtime: traces, plan-cache hits and misses, compile and run time.

``snapshot()`` returns a dict; ``reset()`` zeroes every counter; ``report()``
returns (and prints) a readable table.
"""

from __future__ import annotations

from collections import Counter

_COUNTERS = (
    "traces",
    "cache_hits",
    "cache_misses",
    "plans_compiled",
    "kernels_compiled",
    "kernels_loaded",
    "compile_seconds",
    "execute_seconds",
    "interpret_seconds",
    "fallbacks",
    "interpreted_runs",
    "compiled_runs",
    "ops_traced",
)

counters: dict = dict.fromkeys(_COUNTERS, 0)
fallback_ops: Counter = Counter()


def add(name: str, value=1) -> None:
    counters[name] += value


def snapshot() -> dict:
    """A copy of every counter, plus ``fallback_ops`` (op name -> count) and the cache size."""
    from lazyvic.runtime.plan_cache import plan_cache

    snap = dict(counters)
    snap["fallback_ops"] = dict(fallback_ops)
    snap["plans_cached"] = len(plan_cache)
    snap["compile_seconds"] = round(snap["compile_seconds"], 6)
    peaks = [p["memory"]["peak"] for p in plans() if p["memory"]]
    snap["planned_peak_bytes"] = max(peaks, default=0)
    return snap


def plans() -> list[dict]:
    """One dict per cached plan, in first-seen order: ``name`` (None until compiled),
    ``ops`` (trace length), ``runs``, ``hits``, ``steps``, ``kernels``, ``fallbacks`` and
    ``memory`` — the planned bytes split into ``inputs``, ``parameters``, ``temporaries``
    (the shared pool), ``outputs`` and ``peak`` (their sum), or None before compiling.
    """
    from lazyvic.runtime.plan_cache import plan_cache

    out = []
    for entry in plan_cache.values():
        plan = entry.plan
        out.append({
            "name": plan.name if plan is not None else None,
            "ops": entry.n_ops,
            "runs": entry.seen,
            "hits": entry.hits,
            "steps": len(plan.steps) if plan is not None else 0,
            "kernels": sum(1 for s in plan.steps if hasattr(s, "source")) if plan is not None else 0,
            "fallbacks": list(plan.fallbacks) if plan is not None else [],
            "memory": plan.memory.as_dict() if plan is not None else None,
        })
    return out


def reset() -> None:
    """Zero every counter (cached plans and kernels stay cached)."""
    for k in counters:
        counters[k] = 0
    fallback_ops.clear()


def report(file=None) -> str:
    """Print and return a table of the counters."""
    snap = snapshot()
    width = max(len(k) for k in snap)
    lines = ["lazyvic metrics"]
    for k, v in snap.items():
        if isinstance(v, float):
            v = f"{v:.4f}"
        lines.append(f"  {k:<{width}}  {v}")
    text = "\n".join(lines)
    print(text, file=file)
    return text
