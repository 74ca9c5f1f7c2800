"""The executor: one lowering backend per device, and the run of a compiled plan.

:func:`backend` makes each device's backend once, handing it what only the runtime knows:
the CPU backend gets the buffer pool for its outputs (``runtime/buffers.py``), the CUDA
backend a ``CudaTarget`` saying whether CUDA is Numba's simulator, the CuPy module (or None)
and the counter of host/device copies (``runtime/device.py``). :func:`execute` runs a plan of
either device the same way, ``plan.run(inputs, scalars, debug)``, and counts it.

Threads: a plan's buffers belong to one run at a time. A plan that says ``concurrent_runs``
(the CPU plan: each run takes a set of pooled temporaries of its own) runs in every thread at
once; any other plan (CUDA: its device slots and error buffer) runs under a lock of its own.
Numba's parallel kernels run on its threading layer: ``omp`` (GNU OpenMP, found here) and
``tbb`` take launches from several threads at once; ``workqueue`` does not (Numba aborts
the process), so under it, and until the first parallel kernel has shown which layer runs, CPU
plans with parallel kernels run one at a time (:func:`parallel_launches_are_threadsafe`); plans
without them (serial kernels, BLAS) always run at once.
"""

from __future__ import annotations

import sys
import threading
import time

from lazyvic.runtime import metrics

_backends: dict = {}
_backends_lock = threading.Lock()
_locks_lock = threading.Lock()  # makes the per-plan run locks
_serial = threading.Lock()  # CPU plans under a threading layer that is not threadsafe
_layer: list = []  # [name of Numba's threading layer], once a parallel kernel has started it

THREADSAFE_LAYERS = ("omp", "tbb")


def backend(device: str):
    """The lowering backend of ``device`` (``"cpu"`` or ``"cuda"``), made once per process."""
    b = _backends.get(device)
    if b is None:
        with _backends_lock:
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

    return CpuBackend(
        allocate=take, max_kernels=config.kernel_cache_size, native_after=config.native, native_background=True
    )


def threading_layer() -> str | None:
    """The threading layer Numba's parallel kernels run on in this process (``omp``, ``tbb`` or
    ``workqueue``), or None until the first parallel kernel has started it (lazyvic does not
    start it early: a process that forks, a DataLoader's workers, stays fork-safe until then)."""
    if not _layer:
        numba = sys.modules.get("numba")
        if numba is None:
            return None
        try:
            _layer.append(numba.threading_layer())
        except ValueError:  # no parallel kernel has run yet
            return None
    return _layer[0]


def parallel_launches_are_threadsafe() -> bool:
    """True when parallel kernels may be launched from two threads at once (``omp``, ``tbb``);
    False under ``workqueue``, and until the layer is known (the first parallel kernel)."""
    return threading_layer() in THREADSAFE_LAYERS


def _run_lock(plan) -> threading.Lock:
    lock = getattr(plan, "_lazyvic_run_lock", None)
    if lock is None:
        with _locks_lock:
            lock = getattr(plan, "_lazyvic_run_lock", None)
            if lock is None:
                lock = threading.Lock()
                plan._lazyvic_run_lock = lock
    return lock


def execute(plan, inputs: list, scalars: list, debug: int = 0, sizes: tuple = ()) -> list:
    """Run compiled ``plan`` (outputs on its device, see ``lowering.backend.Plan.run``; ``sizes``:
    the values of a symbolic plan's size symbols) and count the run in ``lazyvic.metrics``
    (``compiled_runs``, ``execute_seconds``, fallbacks). Safe to call from several threads with
    the same plan (see the module docstring)."""
    t0 = time.perf_counter()
    args = (inputs, scalars, debug, sizes) if sizes else (inputs, scalars, debug)
    if getattr(plan, "concurrent_runs", False) and (not plan.parallel or parallel_launches_are_threadsafe()):
        out = plan.run(*args)
    else:
        with _run_lock(plan) if plan.device != "cpu" else _serial:
            out = plan.run(*args)
    metrics.add("execute_seconds", time.perf_counter() - t0)
    metrics.add("compiled_runs")
    if "native_new" in plan.stats:  # the plan became hot: native segments compiled in this run
        n, seconds = plan.stats.pop("native_new", (0, 0.0))
        metrics.add("native_segments", n)
        metrics.add("native_seconds", seconds)
    if plan.fallbacks:
        metrics.add("fallbacks", len(plan.fallbacks))
        for op in plan.fallbacks:
            metrics.add_fallback(op)
    return out
