"""The executor: one lowering backend per device, and the run of a compiled plan.

:func:`backend` makes each device's backend once, handing it what only the runtime knows:
the CPU backend gets the buffer pool for its outputs (``runtime/buffers.py``), the CUDA
backend a ``CudaTarget`` saying whether CUDA is Numba's simulator, the CuPy module (or None)
and the counter of host/device copies (``runtime/device.py``). :func:`execute` runs a plan of
either device the same way, ``plan.run(inputs, scalars, debug)``, and counts it.
"""

from __future__ import annotations

import time

from lazyvic.runtime import metrics

_backends: dict = {}


def backend(device: str):
    """The lowering backend of ``device`` (``"cpu"`` or ``"cuda"``), made once per process."""
    b = _backends.get(device)
    if b is None:
        b = _backends[device] = _make_backend(device)
    return b


def _make_backend(device: str):
    if device == "cuda":
        from lazyvic.lowering.cuda import CudaBackend, CudaTarget
        from lazyvic.runtime import device as dev

        return CudaBackend(CudaTarget(simulated=dev.simulated(), cupy=dev.cupy(), on_copy=dev.count))
    from lazyvic.lowering.cpu import CpuBackend
    from lazyvic.runtime.buffers import take
    from lazyvic.runtime.config import config

    return CpuBackend(allocate=take, max_kernels=config.kernel_cache_size)


def execute(plan, inputs: list, scalars: list, debug: int = 0, sizes: tuple = ()) -> list:
    """Run compiled ``plan`` (outputs on its device, see ``lowering.backend.Plan.run``; ``sizes``:
    the values of a symbolic plan's size symbols) and count the run in ``lazyvic.metrics``
    (``compiled_runs``, ``execute_seconds``, fallbacks)."""
    t0 = time.perf_counter()
    out = plan.run(inputs, scalars, debug, sizes) if sizes else plan.run(inputs, scalars, debug)
    metrics.add("execute_seconds", time.perf_counter() - t0)
    metrics.add("compiled_runs")
    if plan.fallbacks:
        metrics.add("fallbacks", len(plan.fallbacks))
        for op in plan.fallbacks:
            metrics.fallback_ops[op] += 1
    return out
