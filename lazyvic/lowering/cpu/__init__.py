"""The CPU backend: Numba kernels and BLAS (see ``lowering/cpu/backend.py``).

backend.py       CpuBackend: the code generator and the steps of each group
codegen.py       one fusion group -> the source of a Numba kernel
kernel_cache.py  kernel files under the cache directory, compiled once per source
steps.py         the steps of a plan (kernel, matmul, conv2d and its weight gradient, pool, cat,
                 scatter_add, checks, references)
plan.py          CpuPlan and its run()
im2col.py        conv2d's im2col copies (Numba kernels)
pool_kernels.py  max_pool2d, the average pools and their transposes (Numba kernels)
"""

from lazyvic.lowering.cpu.backend import CpuBackend, compile_trace
from lazyvic.lowering.cpu.plan import CpuPlan

__all__ = ["CpuBackend", "CpuPlan", "compile_trace"]
