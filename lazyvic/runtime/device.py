"""Devices: ``"cpu"`` and ``"cuda"``, device storage, and counted host/device copies.

A tensor on ``"cuda"`` keeps its value in device memory as a flat (1-D) C-contiguous
array of ``numel`` elements; its shape lives on its node. The array is a CuPy array
when CuPy is importable (the ``lazyvic[cuda]`` extra), else a Numba device array
(also under Numba's CUDA simulator, ``NUMBA_ENABLE_CUDASIM=1``, where "device" memory
is host memory and every CUDA thread is a Python thread).

Every copy between host and device is counted in :mod:`lazyvic.metrics`:
``host_to_device_bytes`` / ``host_to_device_copies`` and ``device_to_host_bytes`` /
``device_to_host_copies`` (transfers of ``Tensor.to``, of sync points that read a
CUDA tensor on the host, and those a CUDA plan makes for the ops it runs on the host).

``numba.cuda`` is imported only when a CUDA device is first asked for, so CPU-only
programs never pay for it. GPU detection lives here (:func:`cuda_available`,
:func:`simulated`, :func:`cupy`); the CUDA backend is handed what it found
(``runtime/executor.py``), as the lowering sits below the runtime.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from lazyvic.errors import DeviceError
from lazyvic.runtime import metrics

DEVICES = ("cpu", "cuda")


@functools.lru_cache(maxsize=None)
def _availability() -> tuple:
    """(available, reason) of the CUDA device, found once per process."""
    try:
        from numba import config as numba_config
        from numba import cuda
    except Exception as e:  # noqa: BLE001 - numba-cuda missing or broken: report it, never crash
        return False, f"numba.cuda cannot be imported ({type(e).__name__}: {e})"
    if "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS" not in os.environ:
        # lazyvic sizes its grids itself: a small tensor's kernel has a small grid, and a warning
        # per launch of one says nothing a user can act on (set the variable to see them).
        getattr(cuda, "config", numba_config).CUDA_LOW_OCCUPANCY_WARNINGS = 0
    if numba_config.ENABLE_CUDASIM:
        return True, "Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    try:
        if cuda.is_available():
            name = cuda.get_current_device().name
            return True, name.decode() if isinstance(name, bytes) else str(name)
    except Exception as e:  # noqa: BLE001 - a driver error is "not available", with its reason
        return False, f"the CUDA driver failed ({type(e).__name__}: {e})"
    return False, (
        "no NVIDIA GPU or CUDA driver found (numba.cuda.is_available() is False); "
        "NUMBA_ENABLE_CUDASIM=1 runs the CUDA code on Numba's simulator"
    )


def cuda_available() -> bool:
    """True when tensors can be placed on ``"cuda"`` (a GPU, or Numba's CUDA simulator)."""
    return _availability()[0]


def describe_cuda() -> str:
    """The GPU's name, the simulator, or why CUDA is not available."""
    return _availability()[1]


def canonical(device, opname: str = "to") -> str:
    """``"cpu"`` or ``"cuda"`` for a device spec: ``"cpu"``, ``"cuda"``, ``"cuda:0"``, or an
    object whose ``str`` or ``.type`` is one of them (``None`` is ``"cpu"``).

    Raises:
        DeviceError: for an unknown device, a GPU index other than 0, or ``"cuda"`` when no
            GPU (nor the simulator) is available; the message names ``opname``.
    """
    if device is None:
        return "cpu"
    spec = device
    if not isinstance(device, str):  # a device object, e.g. torch.device("cuda", 0)
        spec = str(getattr(device, "type", device))
        index = getattr(device, "index", None)
        if spec == "cuda" and index not in (None, 0):
            spec = f"cuda:{index}"
    if spec == "cpu":
        return "cpu"
    if spec in ("cuda", "cuda:0"):
        ok, why = _availability()
        if not ok:
            raise DeviceError(f"{opname}: device 'cuda' is not available: {why}")
        return "cuda"
    if spec.startswith("cuda:"):
        raise DeviceError(f"{opname}: device {spec!r} is not supported: lazyvic uses one GPU, 'cuda' (= 'cuda:0')")
    raise DeviceError(f"{opname}: unknown device {device!r}; expected 'cpu' or 'cuda'")


def simulated() -> bool:
    """True under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config as numba_config

    return bool(numba_config.ENABLE_CUDASIM)


@functools.lru_cache(maxsize=None)
def cupy():
    """CuPy when it is importable and a real GPU is in use (not the simulator), else None
    (looked for once)."""
    if simulated():
        return None
    try:
        import cupy as cp
    except ImportError:
        return None
    return cp


def count(direction: str, nbytes: int) -> None:
    """Count one copy of ``nbytes`` in ``direction`` (``host_to_device`` or ``device_to_host``)."""
    metrics.add(direction + "_copies")
    metrics.add(direction + "_bytes", int(nbytes))


def to_device(a: np.ndarray):
    """A flat device copy of host array ``a`` (counted): CuPy if present, else Numba."""
    a = np.ascontiguousarray(a).reshape(-1)
    count("host_to_device", a.nbytes)
    cp = cupy()
    if cp is not None:
        return cp.asarray(a)
    from numba import cuda

    return cuda.to_device(a)


def storage(d):
    """Device array ``d`` (any array with ``__cuda_array_interface__``, e.g. one a CUDA plan
    wrote) as this process's storage type, flat, without a copy."""
    cp = cupy()
    if cp is not None and not isinstance(d, cp.ndarray):
        d = cp.asarray(d)
    return d.reshape(-1) if len(d.shape) != 1 else d


def to_host(d, shape: tuple) -> np.ndarray:
    """A host copy (NumPy, counted) of flat device array ``d``, with ``shape``."""
    if hasattr(d, "copy_to_host"):
        a = d.copy_to_host()
    else:
        a = cupy().asnumpy(d)
    count("device_to_host", a.nbytes)
    return np.asarray(a).reshape(shape)


def synchronize() -> None:
    """Wait for every kernel launched so far to finish (a no-op without a GPU)."""
    if not cuda_available():
        return
    from numba import cuda

    cuda.synchronize()
