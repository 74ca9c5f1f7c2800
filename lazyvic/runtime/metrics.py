"""Counters of the runtime: traces, plan-cache hits and misses, compile and run time.

``snapshot()`` returns a dict; ``reset()`` zeroes every counter; ``report()``
returns (and prints) a readable table. ``recorder`` is the hook of ``lazyvic.explain``.

Thread-safe: the counters are process-wide (every thread's runs count). Each thread adds to
counts of its own (no lock, and no increment lost to a race); ``counters`` and :func:`snapshot`
read their totals. A :func:`reset` while other threads run may miss an increment in flight.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Mapping

_COUNTERS = (
    "traces",
    "cache_hits",
    "hash_hits",
    "cache_misses",
    "family_hits",
    "symbolic_plans_compiled",
    "plans_evicted",
    "kernels_evicted",
    "plans_compiled",
    "kernels_compiled",
    "kernels_loaded",
    "native_segments",
    "compile_seconds",
    "native_seconds",
    "execute_seconds",
    "interpret_seconds",
    "fallbacks",
    "interpreted_runs",
    "compiled_runs",
    "checked_runs",
    "ops_traced",
    "bytes_in",
    "bytes_out",
    "capture_recordings",
    "capture_replays",
    "capture_symbolic_replays",
    "capture_hoisted",
    "capture_step_replays",
    "capture_fallbacks",
    "host_to_device_copies",
    "host_to_device_bytes",
    "device_to_host_copies",
    "device_to_host_bytes",
    "collectives",
    "collective_bytes",
    "collective_seconds",
)

_lock = threading.Lock()  # guards the list of per-thread counts and fallback_ops
_threads: list = []  # (weak reference to a thread, its counts)
_retired: dict = dict.fromkeys(_COUNTERS, 0)  # the counts of threads that have ended


class _ThreadCounts(threading.local):
    """The calling thread's counts, registered (and those of ended threads folded into
    ``_retired``) when the thread counts for the first time."""

    def __init__(self):
        self.counts = dict.fromkeys(_COUNTERS, 0)
        with _lock:
            for ref, counts in [t for t in _threads if t[0]() is None or not t[0]().is_alive()]:
                for k, v in counts.items():
                    _retired[k] += v
                _threads.remove((ref, counts))
            _threads.append((weakref.ref(threading.current_thread()), self.counts))


_local = _ThreadCounts()


class Counters(Mapping):
    """The counters, read-only: each is the total of every thread's counts (``counters["traces"]``)."""

    def __getitem__(self, name: str):
        with _lock:
            return _retired[name] + sum(counts[name] for _, counts in _threads)

    def __iter__(self):
        return iter(_COUNTERS)

    def __len__(self) -> int:
        return len(_COUNTERS)

    def totals(self) -> dict:
        with _lock:
            out = dict(_retired)
            for _, counts in _threads:
                for k, v in counts.items():
                    out[k] += v
        return out


counters = Counters()
fallback_ops: Counter = Counter()

# The active ``lazyvic.explain`` recorder, or None: the plan cache checks it once per run,
# so recording costs nothing per op and nothing at all when explain is not running.
recorder = None

# The runtime's plan cache, for the counts below: runtime/plan_cache.py registers it when it
# is made (it sits above this module, which imports nothing of it).
_plan_cache: dict = {}


def register_plan_cache(cache: dict) -> None:
    """Count ``cache`` (trace key -> PlanEntry) in :func:`snapshot` and :func:`plans`."""
    global _plan_cache
    _plan_cache = cache


def add(name: str, value=1) -> None:
    """Add ``value`` to counter ``name`` (in the calling thread's counts: no lock)."""
    _local.counts[name] += value


def add_fallback(op: str, value: int = 1) -> None:
    """Count ``value`` runs of ``op`` on its NumPy reference (``snapshot()["fallback_ops"]``)."""
    with _lock:
        fallback_ops[op] += value


def snapshot() -> dict:
    """A copy of every counter, plus ``fallback_ops`` (op name -> count) and the cache size."""
    snap = counters.totals()
    with _lock:
        snap["fallback_ops"] = dict(fallback_ops)
    snap["plans_cached"] = len(_plan_cache)
    snap["compile_seconds"] = round(snap["compile_seconds"], 6)
    peaks = [p["memory"]["peak"] for p in plans() if p["memory"]]
    snap["planned_peak_bytes"] = max(peaks, default=0)
    snap["kernels_on_disk"] = _kernels_on_disk()
    return snap


def _kernels_on_disk() -> int:
    from lazyvic.lowering.cpu.kernel_cache import kernel_dir
    from lazyvic.runtime.config import config

    try:
        return sum(1 for _ in kernel_dir(config.cache_dir).glob("*.py"))
    except OSError:
        return 0


def plans() -> list[dict]:
    """One dict per cached plan, in first-seen order: ``name`` (None until compiled),
    ``ops`` (trace length), ``runs``, ``hits``, ``keys`` (trace keys it serves: more than one
    for a plan of symbolic sizes), ``symbols``, ``steps``, ``kernels``, ``native_segments`` (compiled once the plan was hot:
    ``lowering/cpu/native.py``), ``fallbacks`` and
    ``memory`` — the planned bytes split into ``inputs``, ``parameters``, ``temporaries``
    (the shared pool), ``outputs`` and ``peak`` (their sum), or None before compiling.
    """
    out, by_plan = [], {}
    for entry in list(_plan_cache.values()):  # a copy: another thread may add a plan meanwhile
        plan = entry.plan
        if plan is not None and id(plan) in by_plan:  # keys bound to one plan of symbolic sizes
            row = by_plan[id(plan)]
            row["runs"] += entry.seen
            row["hits"] += entry.hits
            row["keys"] += 1
            continue
        out.append(
            {
                "name": plan.name if plan is not None else None,
                "ops": entry.n_ops,
                "runs": entry.seen,
                "hits": entry.hits,
                "keys": 1,
                "symbols": list(plan.symbols) if plan is not None else [],
                "steps": len(plan.steps) if plan is not None else 0,
                "kernels": len(plan.kernels) if plan is not None else 0,
                "native_segments": plan.stats.get("native_segments", 0) if plan is not None else 0,
                "fallbacks": list(plan.fallbacks) if plan is not None else [],
                "memory": plan.memory.as_dict() if plan is not None else None,
            }
        )
        if plan is not None:
            by_plan[id(plan)] = out[-1]
    return out


def reset() -> None:
    """Zero every counter (cached plans and kernels stay cached)."""
    with _lock:
        for counts in [_retired] + [c for _, c in _threads]:
            for k in counts:
                counts[k] = 0
        fallback_ops.clear()


_SECTIONS = (
    (
        "counts",
        (
            "traces",
            "ops_traced",
            "cache_hits",
            "hash_hits",
            "cache_misses",
            "family_hits",
            "plans_compiled",
            "symbolic_plans_compiled",
            "plans_evicted",
            "kernels_compiled",
            "kernels_loaded",
            "native_segments",
            "compiled_runs",
            "interpreted_runs",
            "fallbacks",
        ),
    ),
    ("times (s)", ("compile_seconds", "native_seconds", "execute_seconds", "interpret_seconds")),
    ("cache", ("plans_cached", "kernels_on_disk")),
    ("memory", ("bytes_in", "bytes_out", "planned_peak_bytes")),
    (
        "host/device copies",
        ("host_to_device_copies", "host_to_device_bytes", "device_to_host_copies", "device_to_host_bytes"),
    ),
)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def report(file=None) -> str:
    """Print (to ``file``, default stdout) and return a table of the counters.

    Sections: counts (traces, hits, misses, plans, kernels, native segments, fallbacks), times
    in seconds (compile, native segments' compile, execute — which includes interpreted runs and
    the native segments' compile —, interpret), cache sizes (plans
    cached, kernel sources in ``$LAZYVIC_CACHE_DIR/kernels``), bytes moved (the inputs and
    outputs of every run) and the largest planned peak of a cached plan.
    """
    snap = snapshot()
    width = max(len(k) for _, keys in _SECTIONS for k in keys)
    lines = ["lazyvic metrics"]
    for title, keys in _SECTIONS:
        lines.append(f"  {title}")
        for k in keys:
            v = snap[k]
            if isinstance(v, float):
                v = f"{v:.4f}"
            elif k.endswith("bytes") or k.startswith("bytes"):
                v = f"{v} ({_human_bytes(v)})"
            lines.append(f"    {k:<{width}}  {v}")
    if snap["fallback_ops"]:
        lines.append("  fallback ops")
        for op, n in sorted(snap["fallback_ops"].items(), key=lambda kv: -kv[1]):
            lines.append(f"    {op:<{width}}  {n}")
    text = "\n".join(lines)
    print(text, file=file)
    return text
