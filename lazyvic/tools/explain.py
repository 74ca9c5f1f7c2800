"""``lazyvic.explain``: run a call while recording what the runtime does, and say why.

    report = lazyvic.explain(train_step, model, batch)
    print(report)              # cuts, cache hits/misses and why, fusion groups, fallbacks, warnings
    report.to_dict()           # the same as plain data

Recording hooks the plan cache once per run (``metrics.recorder``): nothing is paid per op,
and nothing at all when no explain is active. Each cut names its sync point (``numpy``,
``item``, ``bool``, ``repr``, ``sync``, ``size limit`` ...) and the user's ``file:line``
(the first frame outside the ``lazyvic`` package).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from lazyvic.runtime import metrics
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import describe_groups, plan_cache, plan_name
from lazyvic.sync import sync

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
# The front end's own frames (a sync point's method, the sync, an eager device copy): not "via".
_FRONT_END_FILES = tuple(
    str(Path(__file__).resolve().parent.parent / f) for f in ("tensor.py", "sync.py", "transfer.py")
)
_OWN_FILES = (str(Path(__file__).resolve()), str(Path(__file__).resolve().parent.parent / "runtime" / "plan_cache.py"))

# Tensor methods that sync, by the name their frame has -> the reason shown.
_SYNC_POINTS = {
    "numpy": "numpy",
    "item": "item",
    "tolist": "tolist",
    "__bool__": "bool",
    "__int__": "int",
    "__float__": "float",
    "__index__": "index",
    "__array__": "__array__",
    "__repr__": "repr",
    "__str__": "repr",
    "__format__": "format",
    "__getitem__": "boolean mask index",
    "__setitem__": "boolean mask assignment",
    "nonzero": "nonzero",
    "masked_select": "masked_select",
    "unique": "unique",
    "unique_consecutive": "unique_consecutive",
    "bincount": "bincount",
    "repeat_interleave": "repeat_interleave",
}
# Collectives (lazyvic.distributed.collectives) cut the trace before they send: "collective <name>".
_COLLECTIVES_FILE = str(Path(__file__).resolve().parent.parent / "distributed" / "collectives.py")
_COLLECTIVES = frozenset(
    {
        "all_reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "broadcast_flat",
    }
)
_DDP_FILE = str(Path(__file__).resolve().parent.parent / "nn" / "parallel" / "distributed.py")
SIZE_LIMIT = "size limit"
END_OF_CALL = "end of explain"

# A sync in a loop: at least this many cuts from one line, with traces of at most this many ops.
LOOP_CUTS = 3
LOOP_SMALL_OPS = 256

_FIXES = {
    "constant": "a Python value baked into an op (a reshape shape, a slice bound, an index ...) is part of "
    "the plan key: keep it fixed (pad or bucket to a few sizes), or compute it with tensors "
    "(masks, index tensors) instead of a Python int that changes every call",
    "input shape": "an input's shape changes from call to call: pad or bucket inputs to a few fixed shapes "
    "(fixed batch size, drop_last=True, fixed sequence length)",
    "dtype": "an input's dtype changes from call to call: cast inputs to one dtype before the loop",
    "derived shape": "a shape computed in the trace changes: pad or bucket the values it comes from",
}


def _cut_site() -> tuple[str, str]:
    """(reason, "file:line") of the sync that is cutting now, found by walking the stack."""
    frame = sys._getframe(2)
    reason = None
    via = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR):
            break
        name = frame.f_code.co_name
        if name in ("_from_node", "_pending", "_apply"):
            reason = SIZE_LIMIT  # recording a new op found too many pending nodes
        elif filename in _FRONT_END_FILES:
            if reason != SIZE_LIMIT and name in _SYNC_POINTS:
                reason = _SYNC_POINTS[name]  # the outermost one wins: item() calls numpy()
        elif filename == _COLLECTIVES_FILE and name in _COLLECTIVES:
            reason = f"collective {name}"
        elif filename == _DDP_FILE and name == "_reduce":
            reason = "collective all_reduce (DistributedDataParallel)"  # the backward's gradients
        elif via is None and filename not in _OWN_FILES:
            via = f"{Path(filename).parent.name}/{Path(filename).name}:{name}"
        frame = frame.f_back
    if reason is None:
        reason = "sync" if via is None else f"sync (in {via})"
    if frame is None:
        return reason, "?"
    return reason, f"{_short_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def _short_path(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


class _Recorder:
    def __init__(self):
        self.runs: list[dict] = []
        self.closing = False

    def begin_run(self, trace) -> dict:
        if self.closing:
            reason, where = END_OF_CALL, "-"
        else:
            reason, where = _cut_site()
        event = {
            "cut": len(self.runs),
            "reason": reason,
            "where": where,
            "ops": len(trace.entries),
            "key": plan_name(trace.key),
            "hit": trace.key in plan_cache,
            "miss_reason": None,
            "compiled": False,
            "compile_seconds": 0.0,
            "ran": None,
            "execute_seconds": 0.0,
            "fallbacks": [],
            "failed": None,
            "symbolic": None,  # what became symbolic, when this cut made a plan of symbolic sizes
            "sizes": None,  # the values of the plan's size symbols, when it has any
        }
        self.runs.append(event)
        return event

    def end_run(self, event: dict, entry) -> None:
        plan = entry.plan
        if entry.sizes:
            # Served by a plan of symbolic sizes: a hit unless this cut had to make it.
            event["hit"] = event["symbolic"] is None
            event["sizes"] = dict(zip((s.split("_", 1)[-1] for s in plan.symbols), entry.sizes))
        if plan is not None:
            event["key"] = plan.name
            if event["compiled"]:
                event["plan"] = {
                    "name": plan.name,
                    "ops": entry.n_ops,
                    "compile_seconds": event["compile_seconds"],
                    "groups": describe_groups(plan),
                    "fallbacks": list(plan.fallbacks),
                    "memory": plan.memory.as_dict() if plan.memory is not None else None,
                }
            if event["ran"] == "plan":
                event["fallbacks"] = list(plan.fallbacks)
        if entry.failed is not None and event["ran"] == "interpreter":
            event["failed"] = entry.failed.splitlines()[0][:300]


class ExplainReport:
    """What happened during one ``lazyvic.explain`` call; ``str()`` reads it, ``to_dict()`` holds it.

    ``cuts``: one dict per trace run (``reason``, ``where``, ``ops``, ``key``, ``hit``,
    ``miss_reason``, ``ran``, times, ``fallbacks``); ``plans``: the plans compiled during the call
    (``groups``, ``fallbacks``, ``memory``); ``fallbacks``; ``warnings``; ``result``: what the
    function returned.
    """

    def __init__(self, name: str, runs: list[dict], seconds: float, result=None):
        self.name = name
        self.cuts = runs
        self.seconds = seconds
        self.result = result
        self.plans = [r["plan"] for r in runs if "plan" in r]
        self.fallbacks = _fallbacks(runs)
        self.warnings = _warnings(runs)

    @property
    def hits(self) -> int:
        return sum(1 for r in self.cuts if r["hit"])

    @property
    def misses(self) -> int:
        return sum(1 for r in self.cuts if not r["hit"])

    def to_dict(self) -> dict:
        return {
            "function": self.name,
            "seconds": self.seconds,
            "cuts": [{k: v for k, v in r.items() if k != "plan"} for r in self.cuts],
            "hits": self.hits,
            "misses": self.misses,
            "plans": self.plans,
            "fallbacks": self.fallbacks,
            "warnings": self.warnings,
            "totals": {
                "compile_seconds": sum(r["compile_seconds"] for r in self.cuts),
                "execute_seconds": sum(r["execute_seconds"] for r in self.cuts if r["ran"] == "plan"),
                "interpret_seconds": sum(r["execute_seconds"] for r in self.cuts if r["ran"] == "interpreter"),
            },
        }

    def __str__(self) -> str:
        d = self.to_dict()
        t = d["totals"]
        lines = [
            f"lazyvic.explain: {self.name} ({self.seconds:.3f} s)",
            f"  {len(self.cuts)} cuts, {self.hits} plan-cache hits, {self.misses} misses, "
            f"{len(self.plans)} plans compiled; compile {t['compile_seconds']:.3f} s, "
            f"execute {t['execute_seconds']:.3f} s, interpret {t['interpret_seconds']:.3f} s",
        ]
        if self.warnings:
            lines.append("warnings")
            lines.extend(f"  ! [{w['kind']}] {w['message']}" for w in self.warnings)
        lines.append("cuts")
        for r in self.cuts:
            status = "hit " if r["hit"] else "MISS"
            ran = r["ran"] or "failed"
            extra = f", compiled in {r['compile_seconds']:.3f} s" if r["compiled"] else ""
            lines.append(
                f"  #{r['cut']:<3} {r['reason']:<10} at {r['where']}: {r['ops']} ops, {status} "
                f"{r['key']}, ran on {ran} {1e3 * r['execute_seconds']:.2f} ms{extra}"
            )
            if r["sizes"]:
                lines.append(
                    "        sizes: "
                    + ", ".join(f"{k}={v}" for k, v in r["sizes"].items())
                    + " (a plan of symbolic sizes)"
                )
            if r["symbolic"] is not None:
                lines.append(f"        dynamic shapes: {r['symbolic']}: one plan serves every such size")
            if r["miss_reason"] is not None:
                lines.append(f"        why: {r['miss_reason']['summary']}")
                also = [x for x in r["miss_reason"]["differences"][1:] if x["kind"] in _FIXES]
                for diff in also[:2]:
                    lines.append(f"             also entry {diff['entry']} ({diff['op']}): {diff['detail']}")
        for p in self.plans:
            mem = p["memory"]
            peak = f", planned peak {mem['peak']} bytes" if mem else ""
            lines.append(
                f"plan {p['name']}: {p['ops']} ops, {len(p['groups'])} groups, "
                f"compiled in {p['compile_seconds']:.3f} s{peak}"
            )
            for g in p["groups"]:
                lines.append(f"  {g['kind']:<9} {g['name']}: {', '.join(g['ops'])}")
        if self.fallbacks:
            lines.append("fallbacks to the NumPy interpreter")
            for f in self.fallbacks:
                lines.append(f"  {f['op']} in {f['plan']} ({f['kind']}), {f['runs']} runs")
        return "\n".join(lines)

    __repr__ = __str__


def _fallbacks(runs: list[dict]) -> list[dict]:
    counts: Counter = Counter()
    for r in runs:
        for op in r["fallbacks"]:
            counts[(r["key"], op, "no kernel: NumPy reference inside the plan")] += 1
        if r["failed"] is not None:
            counts[(r["key"], f"<whole trace: {r['failed']}>", "plan failed to compile: interpreted")] += 1
    return [{"plan": key, "op": op, "kind": kind, "runs": n} for (key, op, kind), n in counts.items()]


def _warnings(runs: list[dict]) -> list[dict]:
    out = []
    # Sizes that changed and became symbols (automatic dynamic shapes): not a problem, but the
    # user should know which of their sizes vary.
    for r in runs:
        if r["symbolic"] is not None:
            out.append(
                {
                    "kind": "dynamic",
                    "where": r["where"],
                    "message": f"sizes changed between cuts at {r['where']}, so they became symbols: "
                    f"{r['symbolic']}; plan {r['key']} serves every size its guards admit (no recompile)",
                }
            )
    # A plan key that keeps changing: misses whose traces differ from a cached one at the same place.
    changing = defaultdict(list)
    for r in runs:
        why = r["miss_reason"]
        if why is None or why["kind"] in ("new", "structure") or not why["differences"]:
            continue
        d = why["differences"][0]
        changing[(d["kind"], d["entry"], d["op"], d.get("attr"))].append((r, d))
    for (kind, entry, op, attr), group in changing.items():
        if len(group) < 2:
            continue
        what = f"attribute {attr!r} of {op}" if kind == "constant" else f"{kind} of {op}"
        examples = "; ".join(d["detail"] for _, d in group[:3])
        lines = sorted({r["where"] for r, _ in group})
        out.append(
            {
                "kind": "recompile",
                "entry": entry,
                "op": op,
                "attr": attr,
                "cause": kind,
                "misses": len(group),
                "message": f"the plan key keeps changing: {len(group)} misses differ only in the {what} "
                f"at entry {entry} ({examples}); cut at {', '.join(lines)}. Each new value compiles "
                f"a new plan. Fix: {_FIXES[kind]}.",
            }
        )
    # A sync in a loop: many cuts from one line, each a small trace.
    by_line = defaultdict(list)
    for r in runs:
        if r["reason"] not in (SIZE_LIMIT, END_OF_CALL):
            by_line[(r["where"], r["reason"])].append(r)
    for (where, reason), group in by_line.items():
        ops = statistics.median(r["ops"] for r in group)
        if len(group) >= LOOP_CUTS and ops <= LOOP_SMALL_OPS:
            out.append(
                {
                    "kind": "sync-in-loop",
                    "where": where,
                    "reason": reason,
                    "cuts": len(group),
                    "message": f"{len(group)} cuts by {reason} at {where} with small traces (median {ops:g} "
                    f"ops): a sync inside a loop runs the work as many small plans and waits for "
                    f"each. Fix: keep values as tensors in the loop (e.g. total = total + "
                    f"loss.detach()) and sync once after it (total.item()).",
                }
            )
    # A graph that keeps growing: cuts forced by the size limit.
    forced = [r for r in runs if r["reason"] == SIZE_LIMIT]
    if forced:
        lines = sorted({r["where"] for r in forced})
        out.append(
            {
                "kind": "growing-graph",
                "cuts": len(forced),
                "message": f"{len(forced)} cuts forced by the size limit (LAZYVIC_MAX_PENDING="
                f"{config.max_pending}) at {', '.join(lines)}: the pending graph grows without a "
                f"sync point. Fix: call lazyvic.sync() once per step (or read a value, e.g. "
                f"loss.item(), at the end of the step), and do not keep a step's tensors alive "
                f"into the next.",
            }
        )
    for f in _fallbacks(runs):
        if f["op"].startswith("<whole trace"):
            out.append(
                {
                    "kind": "fallback",
                    "message": f"plan {f['plan']} could not be compiled and ran on the NumPy interpreter: {f['op']}",
                }
            )
    return out


def explain(fn, *args, **kwargs) -> ExplainReport:
    """Run ``fn(*args, **kwargs)`` while recording every cut, cache lookup, compile and fallback.

    Pending work from before the call is synced first (so it is not counted), and work still
    pending when ``fn`` returns is synced at the end (reason ``end of explain``). Returns an
    :class:`ExplainReport`; ``report.result`` is what ``fn`` returned. Exceptions from ``fn``
    propagate (recording stops).
    """
    sync()
    previous = metrics.recorder
    rec = _Recorder()
    metrics.recorder = rec
    t0 = time.perf_counter()
    try:
        result = fn(*args, **kwargs)
        rec.closing = True
        sync()
    finally:
        metrics.recorder = previous
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return ExplainReport(name, rec.runs, time.perf_counter() - t0, result)
