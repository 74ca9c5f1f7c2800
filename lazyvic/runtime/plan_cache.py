"""The plan cache: trace key -> compiled plan, and ``run`` (the runtime's entry point).

In ``hot`` mode (default) a key seen for the first time runs on the NumPy
interpreter; when it recurs its plan is compiled and every later run uses it. Both give the
same bits (``ops/numerics.py``; ``LAZYVIC_CHECK=1`` verifies it for every compiled run,
``runtime/check.py``). In deterministic mode a plan is compiled at first sight. A plan that fails to compile is run by the interpreter and counted as a
fallback (``metrics.snapshot()["fallback_ops"]`` names why), never silently.

A plan is compiled by the backend of the trace's device (``executor.backend(trace.device)``)
and run through ``executor.execute`` (``plan.run``), the same way for the CPU and CUDA; only
the interpreter needs to know the device (CUDA traces get host copies in, device copies out).

A key that misses may still be served by a plan of symbolic sizes of its family (the same
structure with other sizes: ``runtime/families.py``): the key then gets an entry bound to that
plan and the values of its size symbols (a "family hit", counted apart from misses).

The cache is bounded (``LAZYVIC_PLAN_CACHE_SIZE``, default 256 keys): the least recently used
entry goes first, and ``LAZYVIC_DEBUG=1`` and ``metrics.snapshot()["plans_evicted"]`` say so.

A second index finds a compiled plan without a trace: the key of a thread's tape (the structural
hash its nodes made when they were recorded, ``lazyvic.trace.tape``) -> the entry and where each
of the trace's input and scalar slots sits among the tape's leaves (:meth:`PlanCache.learn`,
:func:`run_hashed`). The sync fills it on the first run of a tape key and uses it from then on
(``metrics.snapshot()["hash_hits"]`` counts those runs, which are cache hits too).

Threads: the cache is shared by every thread. One plan is compiled at a time
(:data:`compile_lock`): a thread that needs a key another thread is compiling waits for that
plan and runs it. A compile interrupted (Ctrl-C) is retried the next time its key runs.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import threading
import time
import warnings
from collections import OrderedDict

from lazyvic.runtime import families, metrics
from lazyvic.runtime.check import check_run
from lazyvic.runtime.config import config
from lazyvic.runtime.executor import backend, execute
from lazyvic.runtime.interpreter import interpret, interpret_cuda


class PlanEntry:
    __slots__ = ("key", "trace", "n_ops", "seen", "plan", "failed", "hits", "sizes", "template", "evicted")

    def __init__(self, key, n_ops: int, trace=None, plan=None, sizes: tuple = (), template=None):
        self.key = key
        self.trace = trace  # the first trace seen with this key (no data: for tools)
        self.n_ops = n_ops
        self.seen = 0
        self.plan = plan
        self.failed = None
        self.hits = 0
        self.sizes = sizes  # a plan of symbolic sizes: the values of its symbols for this key
        self.template = template  # ... and the family template that binds them (trace.family)
        self.evicted = False  # pushed out of the cache: the tape index must not run it again


MAX_BOUND_KEYS = 128  # keys remembered as bound to a plan of symbolic sizes (cheap to find again)
MAX_TAPE_KEYS = 512  # tape keys remembered (lazyvic.trace.tape): a few per plan


class PlanCache(OrderedDict):
    """trace key -> PlanEntry, least recently used first, bounded by ``config.plan_cache_size``;
    counters are kept in ``lazyvic.metrics``.

    ``last`` is the entry of the most recent run (its ``plan`` is None until compiled). Keys
    served by a plan of symbolic sizes of their family are remembered apart (``bound``, the
    last ``MAX_BOUND_KEYS``): a loop whose sizes change every step (a growing context) makes a
    key per step, and those must not push compiled plans out of the cache.
    """

    last: PlanEntry | None = None

    def __init__(self):
        super().__init__()
        self.bound: OrderedDict = OrderedDict()
        self.by_tape: OrderedDict = OrderedDict()  # tape key -> (entry, input leaves, scalar leaves)

    def learn(self, tape_key, entry: PlanEntry, input_leaves: tuple, scalar_leaves: tuple) -> None:
        """Remember that a tape with key ``tape_key`` cuts to ``entry``'s trace, whose input and
        scalar slots hold the tape's leaves at ``input_leaves`` and ``scalar_leaves`` (the
        oldest such go past :data:`MAX_TAPE_KEYS`)."""
        self.by_tape[tape_key] = (entry, input_leaves, scalar_leaves)
        while len(self.by_tape) > MAX_TAPE_KEYS:
            self.by_tape.popitem(last=False)

    def lookup(self, key):
        """The entry of ``key`` (now the most recently used), or None."""
        entry = self.get(key)
        if entry is not None:
            self.move_to_end(key)
            return entry
        entry = self.bound.get(key)
        if entry is not None:
            self.bound.move_to_end(key)
        return entry

    def bind(self, key, entry: PlanEntry) -> PlanEntry:
        """Remember that ``key`` runs ``entry``'s plan of symbolic sizes (the oldest such go)."""
        self.bound[key] = entry
        while len(self.bound) > MAX_BOUND_KEYS:
            self.bound.popitem(last=False)
        return entry

    def insert(self, key, entry: PlanEntry) -> PlanEntry:
        """Add ``entry`` and return it, or the entry another thread added for ``key`` meanwhile
        (one entry per key); the least recently used entries go past the bound."""
        entry = self.setdefault(key, entry)
        while len(self) > config.plan_cache_size:
            _, old = self.popitem(last=False)
            old.evicted = True
            metrics.add("plans_evicted")
            if config.debug >= 1:
                what = f"plan {old.plan.name}" if old.plan is not None else "an uncompiled key"
                print(
                    f"[lazyvic] plan cache full ({config.plan_cache_size} keys, LAZYVIC_PLAN_CACHE_SIZE): "
                    f"evicted {what} of {old.n_ops} ops, unused for the longest",
                    file=sys.stderr,
                )
        return entry

    def clear_plans(self) -> None:
        for entry in self.values():
            entry.evicted = True
        self.clear()
        self.bound.clear()
        self.by_tape.clear()
        self.last = None
        families.clear()


plan_cache = PlanCache()
metrics.register_plan_cache(plan_cache)
compile_lock = threading.Lock()  # one compile at a time: a key is never compiled twice at once


def plan_name(key) -> str:
    """The name a plan compiled for ``key`` gets (also used to name keys not compiled yet)."""
    return "plan_" + hashlib.sha1(repr(key).encode()).hexdigest()[:12]


# Cause kinds of a miss, most telling first; "derived shape" (a shape computed from inputs
# that changed) is a consequence of the others and only reported when nothing else differs.
_CAUSES = ("structure", "input shape", "dtype", "constant", "derived shape")


def _root_differences(old, new) -> list[int]:
    """Positions where traces ``old`` and ``new`` differ for a reason of their own, not only
    because an input entry differs (a dtype or shape change propagates to every op downstream)."""
    differs = [False] * min(len(old.entries), len(new.entries))
    roots = []
    for i, (a, b) in enumerate(zip(old.entries, new.entries)):
        if a == b:  # the key's own entries: equal ones cost a tuple comparison, no Entry
            continue
        differs[i] = True
        a, b = old.entry(i), new.entry(i)
        if a.op == b.op and a.attrs == b.attrs and a.inputs == b.inputs and any(differs[j] for j in b.inputs):
            continue  # same op, attributes and inputs: its shape/dtype follows from an input's
        roots.append(i)
    return roots


def _entry_diff(i: int, a, b) -> dict:
    """What differs between Entry ``a`` (cached trace) and ``b`` (new trace) at position ``i``."""
    d = {"entry": i, "op": b.op}
    if a.op != b.op:
        return d | {"kind": "structure", "detail": f"op {a.op} -> {b.op}"}
    if a.inputs != b.inputs:
        return d | {"kind": "structure", "detail": f"inputs {list(a.inputs)} -> {list(b.inputs)}"}
    if b.is_input and a.attrs != b.attrs:
        return d | {"kind": "structure", "detail": f"{b.op} slot {a.slot} -> {b.slot}"}
    if a.attrs != b.attrs:
        da, db = dict(a.attrs), dict(b.attrs)
        names = sorted(k for k in da.keys() | db.keys() if da.get(k) != db.get(k))
        changes = ", ".join(f"{k}={da.get(k)!r} -> {db.get(k)!r}" for k in names)
        return d | {"kind": "constant", "attr": names[0] if names else None, "detail": changes}
    if a.dtype is not b.dtype:
        return d | {"kind": "dtype", "detail": f"dtype {a.dtype.name} -> {b.dtype.name}"}
    if b.op == "buffer":
        return d | {
            "kind": "input shape",
            "slot": b.slot,
            "detail": f"input {b.slot} shape {a.shape} -> {b.shape}",
        }
    return d | {"kind": "derived shape", "detail": f"shape {a.shape} -> {b.shape}"}


def diff_traces(old, new, limit: int = 5) -> list[dict]:
    """The differences between two traces, causes first (at most ``limit``).

    Each is a dict with ``kind`` (structure, input shape, dtype, constant, derived shape),
    ``entry`` (position in the new trace), ``op`` and ``detail``. Entries that differ only
    because an input differs are left out.
    """
    diffs = [_entry_diff(i, old.entry(i), new.entry(i)) for i in _root_differences(old, new)]
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
        score = (abs(e.n_ops - n), len(_root_differences(e.trace, trace)))
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
                "ops": [plan.entries[j].op for j in sorted(g.members)] or [plan.entries[g.root].op],
            }
        )
    return out


def _compile(trace, named=None, symbols=()):
    t0 = time.perf_counter()
    plan = backend(trace.device).compile(trace, config.cache_dir, config.debug, named, symbols)
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
    metrics.add("kernels_evicted", plan.stats.get("kernels_evicted", 0))
    if config.debug >= 1:
        print(f"[lazyvic] compiled plan {plan.name}: {len(plan.steps)} steps in {dt:.3f}s", file=sys.stderr)
    if config.debug >= 2:
        for g in describe_groups(plan):
            print(f"[lazyvic]   group {g['name']} ({g['kind']}): {', '.join(g['ops'])}", file=sys.stderr)
        for op in plan.fallbacks:
            print(f"[lazyvic]   fallback: {op} runs its NumPy reference", file=sys.stderr)
    return plan


def run(trace, inputs: list, scalars: list, at_once: bool = False) -> list:
    """Execute ``trace`` with the given input arrays and scalar values; returns output arrays.
    ``at_once``: compile at first sight in the default (hot) mode, as ``LAZYVIC_COMPILE=always``
    does (a captured step: it will recur, and all its runs then compute the same bits)."""
    metrics.add("traces")
    metrics.add("ops_traced", len(trace.entries))
    metrics.add("bytes_in", sum(a.nbytes for a in inputs))
    rec = metrics.recorder  # lazyvic.explain: checked once per run
    event = rec.begin_run(trace) if rec is not None else None
    key = trace.key
    entry = plan_cache.lookup(key)
    if entry is not None and entry.plan is None and entry.failed is None and entry.template is None:
        _adopt_family_plan(entry, trace)
    if entry is None:
        entry = _family_entry(trace, event)
    if entry is None:
        if event is not None:
            event["miss_reason"] = miss_reason(trace)
        entry = plan_cache.insert(key, PlanEntry(key, len(trace.entries), trace))
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
    out = _run_entry(entry, trace, inputs, scalars, event, at_once)
    metrics.add("bytes_out", sum(a.nbytes for a in out))
    if event is not None:
        rec.end_run(event, entry)
    return out


def run_hashed(tape_key, leaves: list) -> list | None:
    """Run the compiled plan the tape index (:meth:`PlanCache.learn`) holds for ``tape_key``,
    its inputs taken from the tape's ``leaves``; returns the output arrays, or None when the
    index has no such key or the run needs a trace (a plan not compiled yet or evicted,
    ``LAZYVIC_CHECK``, ``LAZYVIC_COMPILE=never``, ``lazyvic.explain`` recording): the caller then
    cuts and runs :func:`run`."""
    found = plan_cache.by_tape.get(tape_key)
    if found is None:
        return None
    entry, input_leaves, scalar_leaves = found
    if entry.plan is None or entry.evicted or config.check or config.compile == "never" or metrics.recorder:
        return None
    inputs = [leaves[k].data for k in input_leaves]
    scalars = [leaves[k].value for k in scalar_leaves]
    metrics.add("traces")
    metrics.add("ops_traced", entry.n_ops)
    metrics.add("bytes_in", sum(a.nbytes for a in inputs))
    metrics.add("cache_hits")
    metrics.add("hash_hits")
    entry.hits += 1
    entry.seen += 1
    if entry.key in plan_cache:
        plan_cache.move_to_end(entry.key)
    plan_cache.last = entry
    out = execute(entry.plan, inputs, scalars, config.debug, entry.sizes)
    metrics.add("bytes_out", sum(a.nbytes for a in out))
    return out


def _family_entry(trace, event: dict | None) -> PlanEntry | None:
    """An entry bound to a plan of symbolic sizes of the trace's family, or None (see
    ``runtime/families.py``); a new symbolic plan is compiled here, counted as a compile."""
    t0 = time.perf_counter()
    with compile_lock:  # the families' state is shared by threads; a symbolic plan compiles here
        found = families.resolve(trace, _compile_symbolic)
    if found is None:
        return None
    plan, sizes, note, template = found
    metrics.add("family_hits")
    if note is not None and event is not None:
        event["compiled"] = True
        event["compile_seconds"] = time.perf_counter() - t0
        event["symbolic"] = note
        event["miss_reason"] = miss_reason(trace)
    entry = PlanEntry(trace.key, len(trace.entries), None, plan, sizes, template)
    if note is not None:  # the key that made the plan: an entry of the cache (tools read it)
        entry.trace = trace
        return plan_cache.insert(trace.key, entry)
    # Other keys the plan serves: remembered apart, without their trace (a loop over moving
    # slices or a growing context makes a key per step).
    return plan_cache.bind(trace.key, entry)


def _adopt_family_plan(entry: PlanEntry, trace) -> None:
    """A key run interpreted before its family had a plan of symbolic sizes, seen again (the
    first batch of a loop's next epoch, whose first key was the family's first trace): it runs
    the family's plan from now on, instead of compiling a plan of its own fixed sizes when it
    recurs (an LSTM language model's training step: 3 s)."""
    if config.compile != "hot" or config.deterministic:
        return
    with compile_lock:
        found = families.existing(trace)
    if found is not None:
        entry.plan, entry.sizes, entry.template = found
        metrics.add("family_hits")


def _compile_symbolic(trace, named, symbols):
    metrics.add("symbolic_plans_compiled")
    return _compile(trace, named, symbols)


def _compile_entry(entry: PlanEntry, trace) -> None:
    """Compile ``entry``'s plan; a failure leaves it to the interpreter (reported), an interrupt
    (KeyboardInterrupt, SystemExit) leaves it uncompiled, to be tried again at its next run."""
    modules = set(sys.modules)
    try:
        entry.plan = _compile(trace)
    except Exception as e:  # noqa: BLE001 - reported, and the interpreter still runs the trace
        entry.failed = f"{type(e).__name__}: {e}"
        warnings.warn(
            f"lazyvic: a plan of {len(trace.entries)} ops could not be compiled and runs on the NumPy "
            f"interpreter ({entry.failed.splitlines()[0][:300]}); see lazyvic.metrics.snapshot()['fallback_ops']",
            RuntimeWarning,
            stacklevel=6,
        )
    except BaseException:
        _drop_orphan_modules(set(sys.modules) - modules)
        raise


def _drop_orphan_modules(names: set) -> None:
    """Forget the modules among ``names`` whose package is no longer imported.

    An import interrupted by Ctrl-C (the first compile imports Numba, ~1 s) drops the package
    whose code was running from ``sys.modules`` but keeps the submodules it had imported; the
    package imported again then lacks them as attributes (``module 'numba' has no attribute
    'core'``) and every later compile fails. Without the orphans, the next import starts clean."""
    for name in names:
        parent = name.rpartition(".")[0]
        while parent:
            if parent not in sys.modules:
                sys.modules.pop(name, None)
                break
            parent = parent.rpartition(".")[0]


def _run_entry(entry: PlanEntry, trace, inputs: list, scalars: list, event: dict | None, at_once: bool = False) -> list:
    mode = config.compile
    if mode == "hot" and (config.deterministic or at_once):
        mode = "always"  # no interpreted first run: its last bits can differ from the compiled plan's
    if entry.plan is None and entry.failed is None and mode != "never" and (mode == "always" or entry.seen >= 2):
        t0 = time.perf_counter()
        with compile_lock:
            if entry.plan is None and entry.failed is None:  # else another thread compiled it meanwhile
                _compile_entry(entry, trace)
        if event is not None:
            event["compiled"] = True
            event["compile_seconds"] = time.perf_counter() - t0
    if entry.plan is not None and mode != "never":
        t0 = time.perf_counter()
        out = execute(entry.plan, inputs, scalars, config.debug, entry.sizes)
        if config.check:
            check_run(entry.plan, trace, inputs, scalars, out, entry.sizes)
        if event is not None:
            event["ran"] = "plan"
            event["execute_seconds"] = time.perf_counter() - t0
        return out
    if entry.failed is not None:
        metrics.add("fallbacks")
        metrics.fallback_ops["<whole trace: " + entry.failed.split(":")[0] + ">"] += 1
    t0 = time.perf_counter()
    out = interpret_cuda(trace, inputs, scalars) if trace.device == "cuda" else interpret(trace, inputs, scalars)
    dt = time.perf_counter() - t0
    metrics.add("interpret_seconds", dt)
    metrics.add("execute_seconds", dt)
    metrics.add("interpreted_runs")
    if event is not None:
        event["ran"] = "interpreter"
        event["execute_seconds"] = dt
    return out
