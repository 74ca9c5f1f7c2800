"""What the CUDA backend runs on: :class:`CudaTarget`, handed over by the runtime.

The runtime finds out whether CUDA is Numba's simulator and whether CuPy drives a real GPU
(``lazyvic.runtime.device``) and counts host/device copies; the lowering cannot ask it (it
sits below the runtime), so the runtime makes a target and hands it to ``CudaBackend``.
Every plan keeps its target, and its steps launch, multiply and copy through it.

``numba.cuda`` is imported only when a plan first runs, so this module loads on machines
without CUDA.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

# Launch sizes. They change no result (elementwise kernels are grid-stride loops, row
# kernels fix their own block size and reduction order), only the speed. The simulator
# runs every thread as a Python thread: few of them.
ELEMENTWISE_THREADS = 256
MAX_BLOCKS = 65535
MATMUL_TILE = 16
SIMULATOR_THREADS = 32
SIMULATOR_MAX_BLOCKS = 2
# 0: the simulator multiplies with kernel_lib.matmul_rows_kernel (no barriers: the tiled
# kernel's were about half of the simulated tests' time); a tile size runs the tiled kernel,
# as tests/cuda/test_codegen_cuda.py's other launch sizes do (the same bits).
SIMULATOR_MATMUL_TILE = 0

_shared_lock = threading.Lock()


def _lock_simulator_shared_arrays() -> None:
    """Make the CUDA simulator's shared arrays safe for a whole block.

    The simulator (numba 0.68) runs each thread as a Python thread and gives the threads
    of a block one shared array per source line, found or made with a check-then-store
    that is not locked: two threads can each make their own array, and a reduction tree
    then combines partial results that the other threads never see (seen here as rare
    wrong row sums). This is the same lookup under a lock.
    """
    from numba.core import types as numba_types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "lazyvic_locked", False):
        return
    unlocked = shared.array

    def array(self, shape, dtype):
        if shape == 0:  # dynamic shared memory: one buffer, no lookup
            return unlocked(self, shape, dtype)
        if isinstance(dtype, numba_types.Type):
            dtype = numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with _shared_lock:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, dtype)
        return res

    shared.array = array
    shared.lazyvic_locked = True


@dataclass(frozen=True)
class CudaTarget:
    """The device a CUDA plan runs on.

    Attributes:
        simulated: Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): few threads per launch,
            and its shared arrays locked (see ``_lock_simulator_shared_arrays``).
        cupy: the CuPy module when it drives a real GPU (cuBLAS products, device sorts, and
            the storage type of outputs), else None.
        on_copy: called with ``(direction, nbytes)`` for every host/device copy a plan makes
            (``"host_to_device"`` or ``"device_to_host"``); the runtime counts them in its
            metrics. Plans also count them in their ``stats``.
    """

    simulated: bool = False
    cupy: object = None
    on_copy: Callable | None = None

    @property
    def cuda(self):
        """``numba.cuda`` (under the simulator, with its shared arrays locked)."""
        from numba import cuda

        if self.simulated:
            _lock_simulator_shared_arrays()
        return cuda

    def launch_1d(self, n: int) -> tuple:
        """``(blocks, threads)`` of a grid-stride kernel over ``n`` elements."""
        threads = SIMULATOR_THREADS if self.simulated else ELEMENTWISE_THREADS
        blocks = min(SIMULATOR_MAX_BLOCKS if self.simulated else MAX_BLOCKS, max(1, -(-n // threads)))
        return blocks, threads

    def launch(self, n: int) -> tuple:
        """:meth:`launch_1d`, with no more threads than elements (grid-stride kernels)."""
        blocks, threads = self.launch_1d(n)
        return blocks, max(1, min(threads, n))

    def row_blocks(self, rows: int) -> int:
        """Blocks of a row kernel over ``rows`` rows (one block per row, grid-stride beyond)."""
        return min(SIMULATOR_MAX_BLOCKS if self.simulated else MAX_BLOCKS, max(1, rows))

    def matmul(self, c, a, b, batch: int, m: int, k: int, n: int, dtype) -> None:
        """``c = a @ b`` over flat C-contiguous (batch, m, k) and (batch, k, n) device arrays:
        CuPy (cuBLAS) when present, else the tiled kernel of the CUDA library (under the
        simulator, by default, its product without barriers: the same bits)."""
        if batch * m * n == 0:  # no output to write (the tiled kernel's grid has at least one layer)
            return
        cupy = self.cupy
        if cupy is not None:
            cupy.matmul(
                cupy.asarray(a).reshape(batch, m, k),
                cupy.asarray(b).reshape(batch, k, n),
                out=cupy.asarray(c).reshape(batch, m, n),
            )
            return
        from lazyvic.lowering.cuda.kernel_lib import matmul_kernel, matmul_rows_kernel

        tile = SIMULATOR_MATMUL_TILE if self.simulated else MATMUL_TILE
        if not tile:  # the simulator's default: no barriers (the same bits as the tiled kernel)
            total = batch * m * n
            blocks = min(SIMULATOR_MAX_BLOCKS, max(1, -(-total // SIMULATOR_THREADS)))
            args = (np.int64(m), np.int64(k), np.int64(n), np.int64(total))
            matmul_rows_kernel(np.dtype(dtype))[blocks, SIMULATOR_THREADS](c, a, b, *args)
            return
        grid = (max(1, -(-n // tile)), max(1, -(-m // tile)), max(1, batch))
        matmul_kernel(tile, np.dtype(dtype))[grid, (tile, tile)](c, a, b, np.int64(m), np.int64(k), np.int64(n))

    def storage(self, d):
        """A flat device array as the runtime stores it: a CuPy array when CuPy is in use."""
        return self.cupy.asarray(d) if self.cupy is not None else d
