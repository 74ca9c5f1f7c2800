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
    return snap


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
