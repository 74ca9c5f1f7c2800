"""``lazyvic.cuda``: PyTorch's ``torch.cuda`` helpers for the ``"cuda"`` device.

lazyvic runs on one GPU (``"cuda"`` = ``"cuda:0"``) through numba-cuda, with CuPy for
storage and cuBLAS when it is installed (``pip install lazyvic[cuda]``). Without a GPU,
``NUMBA_ENABLE_CUDASIM=1`` (set before anything imports Numba) runs the same kernels on
Numba's CUDA simulator: slow, for tests.
"""

from __future__ import annotations

from lazyvic.runtime import device as _device


def is_available() -> bool:
    """True when tensors can be placed on ``"cuda"`` (a GPU, or Numba's CUDA simulator)."""
    return _device.cuda_available()


def device_count() -> int:
    """1 when CUDA is available (lazyvic uses one GPU), else 0."""
    return 1 if _device.cuda_available() else 0


def get_device_name(device=None) -> str:
    """The GPU's name, "Numba's CUDA simulator ...", or why CUDA is not available."""
    return _device.describe_cuda()


def synchronize(device=None) -> None:
    """Wait for every kernel launched so far to finish (a no-op without CUDA)."""
    _device.synchronize()


def is_simulated() -> bool:
    """True under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    return _device.simulated()
