"""CUDA kernel files: each generated kernel compiled once per canonical source.

Each source is written to ``<cache dir>/cuda_kernels/<name>.py`` (named by the SHA-1 of the
CUDA library hash and its source; checked before use and rewritten when it differs, see
``lowering/kernel_files.py``), imported once per process and compiled by numba-cuda, with its
on-disk cache for later processes.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lazyvic.lowering.cuda.codegen import CUDA_LIB_HASH
from lazyvic.lowering.kernel_files import header, import_file, library_names, write_checked

_HEADER_IMPORTS = """import math

import numpy as np
from numba import cuda
"""

_loaded: dict = {}  # source SHA-1 -> compiled kernel (one per process)


@functools.lru_cache(maxsize=None)
def kernel_header() -> str:
    """The lines above every CUDA kernel's source: the kernel language's names that the CUDA
    library defines (importing it imports ``numba.cuda``)."""
    from lazyvic.lowering.cuda import kernel_lib

    return header(
        "lazyvic.lowering.cuda.codegen",
        f"cuda_kernel_lib {CUDA_LIB_HASH}",
        _HEADER_IMPORTS,
        "lazyvic.lowering.cuda.kernel_lib",
        library_names(kernel_lib),
    )


def load_kernel(ks, cache_dir: Path, stats: dict):
    """The kernel of source ``ks``: loaded once per process, keyed by its source."""
    kernel = _loaded.get(ks.sha)
    if kernel is not None:
        stats["kernels_reused"] = stats.get("kernels_reused", 0) + 1
        return kernel
    directory = Path(cache_dir) / "cuda_kernels"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{ks.name}.py"
    write_checked(path, kernel_header() + ks.source)
    kernel = _loaded[ks.sha] = getattr(import_file(f"lazyvic_cuda_kernels.{ks.name}", path), ks.name)
    stats["kernels_compiled"] = stats.get("kernels_compiled", 0) + 1
    return kernel
