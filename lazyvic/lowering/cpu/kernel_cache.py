"""CPU kernel files: written once per canonical source, imported, compiled.

Each kernel's source is written to ``$LAZYVIC_CACHE_DIR/kernels/<name>.py`` (named by the
SHA-1 of the library hash and its source; checked before use and rewritten when it differs,
see ``lowering/kernel_files.py``) and imported. The same kernel used by several plans is
loaded once per process, and Numba's on-disk cache lets a second process skip compilation.
A cache directory that cannot be used (read-only, a corrupt file or Numba cache entry) costs a
warning and a compile in this process, never the kernel (``kernel_files.load_checked``).
"""

from __future__ import annotations

import functools
import sys
import time
from collections import OrderedDict
from pathlib import Path

from numba.core.errors import NumbaError

from lazyvic.lowering import kernel_lib
from lazyvic.lowering.cpu import compile_workers
from lazyvic.lowering.cpu.compile_workers import signature_types
from lazyvic.lowering.kernel_files import (
    LIB_HASH,
    header,
    import_file,
    library_names,
    load_checked,
    without_disk_cache,
)

_HEADER_IMPORTS = """import math

import numpy as np
from numba import njit, prange
"""

_loaded: OrderedDict = OrderedDict()  # (source hash, scalar dtypes) -> dispatcher, least recently used first


@functools.lru_cache(maxsize=None)
def kernel_header() -> str:
    """The lines above every CPU kernel's source."""
    return header(
        "lazyvic.lowering.cpu.codegen",
        f"kernel_lib {LIB_HASH}",
        _HEADER_IMPORTS,
        "lazyvic.lowering.kernel_lib",
        library_names(),
    )


def library_dispatchers() -> list:
    """The compiled functions of the kernel library (``lowering/kernel_lib.py``) kernels call."""
    return [getattr(kernel_lib, n) for n in library_names() if hasattr(getattr(kernel_lib, n), "_cache")]


def kernel_dir(cache_dir: Path) -> Path:
    d = Path(cache_dir) / "kernels"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _signature(ks, scalar_dtypes: list) -> list:
    """:func:`signature_types`'s arguments for kernel source ``ks`` (JSON-able: a worker's job)."""
    return [[d for d, _ in ks.arg_types], list(scalar_dtypes), [d for d, _ in ks.packed], bool(ks.sizes)]


_imported: dict = {}  # key -> (dispatcher, path): imported by prefetch, not compiled yet
_compiled_elsewhere: set = set()  # keys a worker process compiled into the disk cache


def load(ks, cache_dir: Path, scalar_dtypes: list, stats: dict, max_loaded: int | None = None, compile: bool = True):
    """Return the compiled dispatcher of kernel source ``ks`` (compiling or loading from cache).

    ``stats`` counts ``kernels_compiled`` / ``kernels_loaded`` (from Numba's disk cache; a kernel a
    worker process compiled for this plan counts as compiled). At most ``max_loaded`` dispatchers
    stay loaded in this process (the least recently used go; a plan keeps the kernels it runs
    alive, so only unused ones are freed). With ``compile=False``, a kernel that is in neither
    this process nor the disk cache is imported but not compiled, and None returned.
    """
    sig_types = signature_types(*_signature(ks, scalar_dtypes))
    key = (ks.sha, tuple(scalar_dtypes))
    fn = _loaded.get(key)
    if fn is not None:
        _loaded.move_to_end(key)
        return fn
    t0 = time.perf_counter()

    def compiled(path, cached: bool):
        found = _imported.pop(key, None)
        fn = found[0] if found is not None else getattr(import_file(f"lazyvic_kernels.{ks.name}", path), ks.name)
        if not cached:  # the disk cache failed: this kernel and the library it calls, in memory
            without_disk_cache(fn, *library_dispatchers())
        if not compile:
            cres = fn._cache.load_overload(sig_types, fn.targetctx) if cached else None
            if cres is None:
                _imported[key] = (fn, path if cached else None)
                return None, False
            # As Numba's Dispatcher.compile does for a disk-cache hit: the overload is also
            # registered with the target context, so generated code can call it (native.py).
            fn.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            fn.add_overload(cres)
            return fn, True
        hits_before = sum(fn.stats.cache_hits.values())
        fn.compile(sig_types)
        return fn, sum(fn.stats.cache_hits.values()) > hits_before

    fn, from_disk = load_checked(
        Path(cache_dir) / "kernels", ks.name, kernel_header() + ks.source, compiled, keep=(NumbaError,)
    )
    if fn is None:
        return None
    if key in _compiled_elsewhere:
        _compiled_elsewhere.discard(key)
        from_disk = False
    which = "kernels_loaded" if from_disk else "kernels_compiled"
    stats[which] = stats.get(which, 0) + 1
    stats["kernel_seconds"] = stats.get("kernel_seconds", 0.0) + time.perf_counter() - t0
    _loaded[key] = fn
    while max_loaded is not None and len(_loaded) > max_loaded:
        (sha, _), old = _loaded.popitem(last=False)
        sys.modules.pop(f"lazyvic_kernels.{getattr(old, '__name__', '')}", None)
        stats["kernels_evicted"] = stats.get("kernels_evicted", 0) + 1
    return fn


def prefetch(kernels: list, cache_dir: Path, stats: dict, max_loaded: int | None = None) -> None:
    """Make the kernels a new plan needs ready before its steps are built: ``kernels`` are
    ``(kernel source, scalar dtype names)`` pairs. Those in the disk cache are loaded; when at
    least ``compile_workers.MIN_JOBS`` are missing from it, they are compiled side by side in
    this process and worker processes (``lowering/cpu/compile_workers.py``); :func:`load` then
    finds each one loaded or in the disk cache. Fewer are left to :func:`load`."""
    missing, seen = [], set()
    for ks, scalar_dtypes in kernels:
        key = (ks.sha, tuple(scalar_dtypes))
        if key in _loaded or key in seen:
            continue
        seen.add(key)
        if load(ks, cache_dir, scalar_dtypes, stats, max_loaded, compile=False) is None:
            missing.append((ks, scalar_dtypes, key))
    # Only kernels whose file is in the cache directory: a worker's compile reaches this process
    # through the disk cache.
    missing = [m for m in missing if m[2] in _imported and _imported[m[2]][1] is not None]
    missing.sort(key=lambda m: -len(m[0].source))  # the longest first (compile_side_by_side)
    if len(missing) < compile_workers.MIN_JOBS or compile_workers.worker_count() == 0:
        return
    jobs = [
        {
            "path": str(_imported[key][1]),
            "module": f"lazyvic_kernels.{ks.name}",
            "name": ks.name,
            "sig": _signature(ks, scalar_dtypes),
        }
        for ks, scalar_dtypes, key in missing
    ]
    done = compile_workers.compile_side_by_side(
        jobs, lambda k: load(missing[k][0], cache_dir, missing[k][1], stats, max_loaded)
    )
    _compiled_elsewhere.update(missing[k][2] for k in done)
    stats["kernels_compiled_by_workers"] = stats.get("kernels_compiled_by_workers", 0) + len(done)
