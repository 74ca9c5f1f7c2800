"""Settings read from the environment (and settable at run time).

LAZYVIC_COMPILE        hot (default): interpret a plan the first time its key is seen,
                       compile when it recurs; always: compile at once; never: interpret.
LAZYVIC_CACHE_DIR      where generated kernels and Numba's cache live
                       (default: $XDG_CACHE_HOME/lazyvic or ~/.cache/lazyvic).
LAZYVIC_DEBUG          0-4: 1 cache misses (with the reason: the nearest cached key and
                       what differs) and compile times, 2 fusion groups, 3 generated
                       kernel source, 4 per-step run times.
LAZYVIC_DETERMINISTIC  1: plans are compiled the first time their key is seen (no
                       interpreted first run). Also kept in the plan key. BLAS runs on one
                       thread in every mode, compiled or interpreted (multithreaded OpenBLAS
                       may round differently from one thread). Everything else gives the same bits in every
                       mode already: interpreted and compiled runs agree (ops/numerics.py).
                       ``lazyvic.use_deterministic_algorithms(True)`` sets it at run time.
LAZYVIC_CHECK          1: every compiled CPU plan also runs on the interpreter and the outputs
                       are compared bit for bit; a difference raises lazyvic.errors.CheckError
                       naming the first kernel that differs (runtime/check.py). Slow: for
                       tests and for hunting a numerics bug.
LAZYVIC_MAX_PENDING    pending nodes after which the next op forces a cut (default 50000).
LAZYVIC_DYNAMIC        1 (default): automatic dynamic shapes: when a trace of an already seen
                       structure arrives with other sizes (a smaller last batch, a longer
                       sequence, a slice that moved), the sizes that changed become symbols
                       and one plan serves them all (lazyvic/runtime/families.py); 0: one
                       plan per distinct set of sizes.
LAZYVIC_PLAN_CACHE_SIZE    trace keys the plan cache keeps, least recently used first out
                       (default 256); LAZYVIC_DEBUG=1 says when one is evicted.
LAZYVIC_KERNEL_CACHE_SIZE  compiled kernels kept loaded, least recently used first out
                       (default 4096; a plan keeps the kernels it runs alive).
LAZYVIC_NATIVE         runs after which a compiled CPU plan runs its kernels and BLAS products
                       through generated native functions, one call per run of them instead
                       of one Python call per step (lowering/cpu/native.py; default 3; 0:
                       never; a plan of symbolic sizes counts the runs of each binding of its
                       sizes). Same bits either way. Only plans of at most 64 kernels and
                       products (small steps, where Python's share is large): their first
                       compile takes ~60 ms a call (the digits MLP's step: 0.7 s), which a
                       worker process does (when LAZYVIC_COMPILE_WORKERS allows one) while
                       the plan runs its steps; a later run switches over, and later
                       processes load them from the disk cache.
LAZYVIC_VIZ            a directory: at exit, draw every plan the program ran there, with
                       an index.md (lazyvic.tools.viz; needs Graphviz's dot).
LAZYVIC_GC_FREEZE      1 (default): after compiling a plan, collect garbage once and move
                       every surviving object to the collector's permanent generation
                       (``gc.freeze()``), so later full collections stop re-scanning the
                       compiler's objects (on the TinyGPT step: spikes of 100 ms every
                       ~30 steps gone, mean step time -5 to -10 %). Objects alive then
                       are never collected as cycles later; 0 turns this off.
"""

from __future__ import annotations

import os
from pathlib import Path


def _int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class Config:
    def __init__(self):
        self.compile = os.environ.get("LAZYVIC_COMPILE", "hot").lower()
        if self.compile not in ("hot", "always", "never"):
            raise ValueError(f"LAZYVIC_COMPILE must be hot, always or never, got {self.compile!r}")
        self.debug = _int("LAZYVIC_DEBUG", 0)
        self.deterministic = os.environ.get("LAZYVIC_DETERMINISTIC", "0") not in ("", "0")
        self.check = os.environ.get("LAZYVIC_CHECK", "0") not in ("", "0")
        self.max_pending = _int("LAZYVIC_MAX_PENDING", 50000)
        self.dynamic = os.environ.get("LAZYVIC_DYNAMIC", "1") not in ("", "0")
        self.plan_cache_size = max(1, _int("LAZYVIC_PLAN_CACHE_SIZE", 256))
        self.kernel_cache_size = max(1, _int("LAZYVIC_KERNEL_CACHE_SIZE", 4096))
        self.native = max(0, _int("LAZYVIC_NATIVE", 3))
        self.gc_freeze = os.environ.get("LAZYVIC_GC_FREEZE", "1") not in ("", "0")
        cache = os.environ.get("LAZYVIC_CACHE_DIR")
        if not cache:
            base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            cache = str(Path(base) / "lazyvic")
        self.cache_dir = Path(cache)


config = Config()
