"""The CUDA backend: numba-cuda kernels, cuBLAS through CuPy (see ``lowering/cuda/backend.py``).

backend.py       CudaBackend: the code generator and the steps of each group
target.py        CudaTarget: the device as the runtime describes it (simulator, CuPy, copy counter)
codegen.py       one fusion group -> the source of a numba-cuda kernel
kernel_lib.py    the device functions and fixed kernels generated kernels and steps call
loader.py        kernel files under the cache directory, compiled once per source
steps.py         the steps of a plan (kernel, matmul, conv2d, pool, randn, host steps)
index_steps.py   the steps that read indices (range checks, gathers, scatter_add)
plan.py          CudaPlan and its run()

Nothing here imports ``numba.cuda`` until a plan is compiled or run.
"""

from lazyvic.lowering.cuda.backend import CudaBackend
from lazyvic.lowering.cuda.plan import CudaPlan
from lazyvic.lowering.cuda.target import CudaTarget

__all__ = ["CudaBackend", "CudaPlan", "CudaTarget"]
