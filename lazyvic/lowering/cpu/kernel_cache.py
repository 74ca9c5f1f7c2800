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

from numba import types
from numba.core.errors import NumbaError

from lazyvic.lowering import kernel_lib
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

_NB = {
    "bool": types.boolean,
    "int32": types.int32,
    "int64": types.int64,
    "float32": types.float32,
    "float64": types.float64,
}


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


def load(ks, cache_dir: Path, scalar_dtypes: list, stats: dict, max_loaded: int | None = None):
    """Return the compiled dispatcher of kernel source ``ks`` (compiling or loading from cache).

    ``stats`` counts ``kernels_compiled`` / ``kernels_loaded`` (from Numba's disk cache).
    At most ``max_loaded`` dispatchers stay loaded in this process (the least recently used go;
    a plan keeps the kernels it runs alive, so only unused ones are freed).
    """
    sig_types = (
        [types.Array(_NB[d], 1, "C") for d, _ in ks.arg_types]
        + [_NB[d] for d in scalar_dtypes]
        + [types.Array(_NB[d], 1, "C") for d, _ in ks.packed]
        + ([types.Array(types.int64, 1, "C")] if ks.sizes else [])  # the size arguments (zs)
    )
    key = (ks.sha, tuple(scalar_dtypes))
    fn = _loaded.get(key)
    if fn is not None:
        _loaded.move_to_end(key)
        return fn
    t0 = time.perf_counter()

    def compiled(path, cached: bool):
        fn = getattr(import_file(f"lazyvic_kernels.{ks.name}", path), ks.name)
        if not cached:  # the disk cache failed: this kernel and the library it calls, in memory
            without_disk_cache(fn, *library_dispatchers())
        hits_before = sum(fn.stats.cache_hits.values())
        fn.compile(tuple(sig_types))
        return fn, sum(fn.stats.cache_hits.values()) > hits_before

    fn, from_disk = load_checked(
        Path(cache_dir) / "kernels", ks.name, kernel_header() + ks.source, compiled, keep=(NumbaError,)
    )
    which = "kernels_loaded" if from_disk else "kernels_compiled"
    stats[which] = stats.get(which, 0) + 1
    stats["kernel_seconds"] = stats.get("kernel_seconds", 0.0) + time.perf_counter() - t0
    _loaded[key] = fn
    while max_loaded is not None and len(_loaded) > max_loaded:
        (sha, _), old = _loaded.popitem(last=False)
        sys.modules.pop(f"lazyvic_kernels.{getattr(old, '__name__', '')}", None)
        stats["kernels_evicted"] = stats.get("kernels_evicted", 0) + 1
    return fn
