"""``lazyvic.cuda``: PyTorch's ``torch.cuda`` helpers for the ``"cuda"`` device.

lazyvic runs on one GPU (``"cuda"`` = ``"cuda:0"``) through numba-cuda, with CuPy for
storage and cuBLAS when it is installed (``pip install lazyvic[cuda]``). Without a GPU,
``NUMBA_ENABLE_CUDASIM=1`` (set before anything imports Numba) runs the same kernels on
Numba's CUDA simulator: slow, for tests. ``lazyvic.cuda.amp`` holds PyTorch's deprecated
``torch.cuda.amp`` spellings of ``lazyvic.amp.autocast`` and ``GradScaler``.
"""

from __future__ import annotations

from lazyvic.cuda import amp
from lazyvic.errors import DeviceError
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


def current_device() -> int:
    """0, the index of lazyvic's one GPU.

    Raises DeviceError when CUDA is not available (as PyTorch raises)."""
    if not _device.cuda_available():
        raise DeviceError(f"cuda.current_device: CUDA is not available: {_device.describe_cuda()}")
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True when CUDA is available: ``lazyvic.autocast(dtype=lazyvic.bfloat16)`` rounds to bfloat16
    on every device."""
    return _device.cuda_available()


def empty_cache() -> None:
    """Accepted; a no-op (lazyvic's plans keep their buffers for their next run)."""


# Seeding. lazyvic has one Philox stream for every device (lazyvic.generator): ``lazyvic.manual_seed``
# seeds it, and CUDA tensors draw the same numbers as CPU tensors. PyTorch keeps one generator per
# GPU, which these functions seed (and ignores them without CUDA); here they leave lazyvic's stream
# alone, so a script gives the same numbers with or without them, on either device.
def manual_seed(seed) -> None:
    """Accepted for PyTorch scripts; does not change lazyvic's stream (see above).

    Raises ValueError or TypeError for a seed that is not an integer (as ``int(seed)`` does)."""
    int(seed)


def manual_seed_all(seed) -> None:
    """Accepted for PyTorch scripts; does not change lazyvic's stream (see :func:`manual_seed`)."""
    int(seed)
