"""The plan cache: trace key -> compiled plan, and ``run`` (the runtime's entry point).

In ``hot`` mode (default) a key seen for the first time runs on the NumPy
interpreter; when it recurs its plan is compiled and every later run uses it.
In deterministic mode a plan is compiled at first sight, so results never
depend on whether a key was seen before. A plan that fails to compile is run by the interpreter and counted as a
fallback (``metrics.snapshot()["fallback_ops"]`` names why), never silently.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import time
import warnings

import numpy as np

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


def plan_name(key) -> str:
    """The name a plan compiled for ``key`` gets (also used to name keys not compiled yet)."""
    return "plan_" + hashlib.sha1(repr(key).encode()).hexdigest()[:12]


# Cause kinds of a miss, most telling first; "derived shape" (a shape computed from inputs
# that changed) is a consequence of the others and only reported when nothing else differs.
_CAUSES = ("structure", "input shape", "dtype", "constant", "derived shape")


def _root_differences(old_entries: tuple, new_entries: tuple) -> list[int]:
    """Positions where the traces differ for a reason of their own, not only because an
    input entry differs (a dtype or shape change propagates to every op downstream)."""
    differs = [False] * min(len(old_entries), len(new_entries))
    roots = []
    for i, (a, b) in enumerate(zip(old_entries, new_entries)):
        if a == b:
            continue
        differs[i] = True
        if a[0] == b[0] and a[1] == b[1] and a[2] == b[2] and any(differs[j] for j in b[2]):
            continue  # same op, attributes and inputs: its shape/dtype follows from an input's
        roots.append(i)
    return roots


def _entry_diff(i: int, a: tuple, b: tuple) -> dict:
    """What differs between entry ``a`` (cached trace) and ``b`` (new trace) at position ``i``."""
    op_a, attrs_a, ins_a, shape_a, dt_a = a
    op_b, attrs_b, ins_b, shape_b, dt_b = b
    d = {"entry": i, "op": op_b}
    if op_a != op_b:
        return d | {"kind": "structure", "detail": f"op {op_a} -> {op_b}"}
    if ins_a != ins_b:
        return d | {"kind": "structure", "detail": f"inputs {list(ins_a)} -> {list(ins_b)}"}
    if op_b in ("buffer", "scalar") and attrs_a != attrs_b:
        return d | {"kind": "structure", "detail": f"{op_b} slot {attrs_a[0]} -> {attrs_b[0]}"}
    if attrs_a != attrs_b:
        da, db = dict(attrs_a), dict(attrs_b)
        names = sorted(k for k in da.keys() | db.keys() if da.get(k) != db.get(k))
        changes = ", ".join(f"{k}={da.get(k)!r} -> {db.get(k)!r}" for k in names)
        return d | {"kind": "constant", "attr": names[0] if names else None, "detail": changes}
    if dt_a != dt_b:
        return d | {"kind": "dtype", "detail": f"dtype {dt_a} -> {dt_b}"}
    if op_b == "buffer":
        return d | {
            "kind": "input shape",
            "slot": attrs_b[0],
            "detail": f"input {attrs_b[0]} shape {shape_a} -> {shape_b}",
        }
    return d | {"kind": "derived shape", "detail": f"shape {shape_a} -> {shape_b}"}


def diff_traces(old, new, limit: int = 5) -> list[dict]:
    """The differences between two traces, causes first (at most ``limit``).

    Each is a dict with ``kind`` (structure, input shape, dtype, constant, derived shape),
    ``entry`` (position in the new trace), ``op`` and ``detail``. Entries that differ only
    because an input differs are left out.
    """
    diffs = [_entry_diff(i, old.entries[i], new.entries[i]) for i in _root_differences(old.entries, new.entries)]
    if len(old.entries) != len(new.entries):
        diffs.append(
            {
                "kind": "structure",
                "entry": min(len(old.entries), len(new.entries)),
                "op": None,
                "detail": f"{len(old.entries)} ops -> {len(new.entries)} ops",
            }
        )
    if not diffs:
        if old.outputs != new.outputs:
            diffs.append(
                {
                    "kind": "structure",
                    "entry": None,
                    "op": None,
                    "detail": f"outputs {list(old.outputs)} -> {list(new.outputs)}",
                }
            )
        elif old.key[2:] != new.key[2:]:
            diffs.append(
                {
                    "kind": "constant",
                    "entry": None,
                    "op": None,
                    "detail": f"flags/parameters {old.key[2:]!r} -> {new.key[2:]!r}",
                }
            )
    diffs.sort(key=lambda d: _CAUSES.index(d["kind"]))  # stable: entry order within a kind
    return diffs[:limit]


def miss_reason(trace, max_candidates: int = 32) -> dict:
    """Why ``trace`` missed the cache: its nearest cached trace and what differs.

    The nearest is a cached trace of the same length with the fewest root differences
    (else the closest length), among the ``max_candidates`` most recent of the closest length. Returns ``{"kind", "summary", "nearest", "differences"}``;
    ``kind`` is the first cause (see :func:`diff_traces`) or ``"new"`` when nothing is cached.
    """
    n = len(trace.entries)
    # Most recent first: a recompile's previous version is usually among the last keys seen.
    cands = [e for e in reversed(plan_cache.values()) if e.trace is not None and e.key != trace.key]
    if not cands:
        return {
            "kind": "new",
            "summary": "first trace: nothing cached to compare with",
            "nearest": None,
            "differences": [],
        }
    cands.sort(key=lambda e: abs(e.n_ops - n))
    cands = cands[:max_candidates]
    best, best_score = None, None
    for e in cands:
        score = (abs(e.n_ops - n), len(_root_differences(e.trace.entries, trace.entries)))
        if best_score is None or score < best_score:
            best, best_score = e, score
    diffs = diff_traces(best.trace, trace)
    kind = diffs[0]["kind"] if diffs else "structure"
    first = diffs[0] if diffs else None
    where = (
        f" at entry {first['entry']} ({first['op']})" if first and first["entry"] is not None and first["op"] else ""
    )
    detail = f": {first['detail']}" if first else ""
    summary = f"{kind} differs from {plan_name(best.key)} ({best.n_ops} ops){where}{detail}"
    return {"kind": kind, "summary": summary, "nearest": plan_name(best.key), "differences": diffs}


def describe_groups(plan) -> list[dict]:
    """The fusion groups of ``plan`` in run order: ``name`` (the kernel, BLAS product or NumPy
    reference step that computes it), ``kind`` (kernel, matmul, scatter, reference) and ``ops``
    (member ops, in trace order)."""
    by_out = {}
    for step in plan.steps:
        if getattr(step, "out", None) is not None:
            by_out.setdefault(step.out, step)
    out = []
    for g in plan.groups:
        step = by_out.get(g.root)
        kind = type(step).__name__.removesuffix("Step").lower() if step is not None else "?"
        out.append(
            {
                "name": step.name if step is not None else f"node{g.root}",
                "kind": kind,
                "ops": [plan.entries[j][0] for j in sorted(g.members)] or [plan.entries[g.root][0]],
            }
        )
    return out


def _compile(trace):
    if _on_cuda(trace):
        from lazyvic.lowering.cuda_plan import compile_trace_cuda as compile_trace
    else:
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
    if config.debug >= 2:
        for g in describe_groups(plan):
            print(f"[lazyvic]   group {g['name']} ({g['kind']}): {', '.join(g['ops'])}", file=sys.stderr)
        for op in plan.fallbacks:
            print(f"[lazyvic]   fallback: {op} runs its NumPy reference", file=sys.stderr)
    return plan


def run(trace, inputs: list, scalars: list) -> list:
    """Execute ``trace`` with the given input arrays and scalar values; returns output arrays."""
    metrics.add("traces")
    metrics.add("ops_traced", len(trace.entries))
    metrics.add("bytes_in", sum(a.nbytes for a in inputs))
    rec = metrics.recorder  # lazyvic.explain: checked once per run
    event = rec.begin_run(trace) if rec is not None else None
    key = trace.key
    entry = plan_cache.get(key)
    if entry is None:
        if event is not None:
            event["miss_reason"] = miss_reason(trace)
        entry = plan_cache[key] = PlanEntry(key, len(trace.entries), trace)
        metrics.add("cache_misses")
        if config.debug >= 1:
            # The reason costs a comparison with up to 8 cached traces: skipped on huge ones.
            why = ""
            if len(trace.entries) <= 20000:
                why = ": " + miss_reason(trace, max_candidates=8)["summary"]
            print(f"[lazyvic] plan-cache miss: trace of {len(trace.entries)} ops{why}", file=sys.stderr)
    else:
        metrics.add("cache_hits")
        entry.hits += 1
    entry.seen += 1
    plan_cache.last = entry
    out = _run_entry(entry, trace, inputs, scalars, event)
    metrics.add("bytes_out", sum(a.nbytes for a in out))
    if event is not None:
        rec.end_run(event, entry)
    return out


def _on_cuda(trace) -> bool:
    return trace.key[2][:1] == ("cuda",)


def _input_shapes(trace) -> list:
    shapes = [None] * trace.n_inputs
    for op, attrs, _, shape, _ in trace.entries:
        if op == "buffer":
            shapes[attrs[0]] = shape
    return shapes


_COPIES = ("host_to_device", "device_to_host")


def _run_cuda_plan(plan, inputs: list, scalars: list) -> list:
    """Run a CudaPlan; outputs are flat device arrays (see lazyvic.runtime.device). The copies
    the plan counted in its stats during the run (an index error included) go to metrics."""
    from lazyvic.runtime import device

    stats = plan.stats
    before = [(stats.get(d, 0), stats.get(d + "_bytes", 0)) for d in _COPIES]
    try:
        outs = plan.run(inputs, scalars, to_host=False)
    finally:
        for d, (n, nbytes) in zip(_COPIES, before):
            metrics.add(d + "_copies", stats.get(d, 0) - n)
            metrics.add(d + "_bytes", stats.get(d + "_bytes", 0) - nbytes)
    return [device.to_device(o) if isinstance(o, np.ndarray) else device.storage(o) for o in outs]


def _interpret_cuda(trace, inputs: list, scalars: list) -> list:
    """A CUDA trace on the NumPy interpreter: host copies in, device copies out (counted).
    An input may already be a host array (a constant made of Python numbers, realized on the
    CPU earlier in the same sync), as CudaPlan.run also takes."""
    from lazyvic.runtime import device

    host = [
        a if isinstance(a, np.ndarray) else device.to_host(a, shape) for a, shape in zip(inputs, _input_shapes(trace))
    ]
    return [device.to_device(o) for o in interpret(trace, host, scalars)]


def _run_entry(entry: PlanEntry, trace, inputs: list, scalars: list, event: dict | None) -> list:
    mode = config.compile
    if mode == "hot" and config.deterministic:
        mode = "always"  # no interpreted first run: its last bits can differ from the compiled plan's
    if entry.plan is None and entry.failed is None and mode != "never" and (mode == "always" or entry.seen >= 2):
        t0 = time.perf_counter()
        try:
            entry.plan = _compile(trace)
        except Exception as e:  # noqa: BLE001 - reported, and the interpreter still runs the trace
            entry.failed = f"{type(e).__name__}: {e}"
            warnings.warn(
                f"lazyvic: a plan of {len(trace.entries)} ops could not be compiled and runs on the NumPy "
                f"interpreter ({entry.failed.splitlines()[0][:300]}); see lazyvic.metrics.snapshot()['fallback_ops']",
                RuntimeWarning,
                stacklevel=4,
            )
        if event is not None:
            event["compiled"] = True
            event["compile_seconds"] = time.perf_counter() - t0
    on_cuda = _on_cuda(trace)
    if entry.plan is not None and mode != "never":
        plan = entry.plan
        t0 = time.perf_counter()
        out = _run_cuda_plan(plan, inputs, scalars) if on_cuda else execute(plan, inputs, scalars, config.debug)
        dt = time.perf_counter() - t0
        metrics.add("execute_seconds", dt)
        metrics.add("compiled_runs")
        if plan.fallbacks:
            metrics.add("fallbacks", len(plan.fallbacks))
            for op in plan.fallbacks:
                metrics.fallback_ops[op] += 1
        if event is not None:
            event["ran"] = "plan"
            event["execute_seconds"] = dt
        return out
    if entry.failed is not None:
        metrics.add("fallbacks")
        metrics.fallback_ops["<whole trace: " + entry.failed.split(":")[0] + ">"] += 1
    t0 = time.perf_counter()
    out = _interpret_cuda(trace, inputs, scalars) if on_cuda else interpret(trace, inputs, scalars)
    dt = time.perf_counter() - t0
    metrics.add("interpret_seconds", dt)
    metrics.add("execute_seconds", dt)
    metrics.add("interpreted_runs")
    if event is not None:
        event["ran"] = "interpreter"
        event["execute_seconds"] = dt
    return out
