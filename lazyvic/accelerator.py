"""``lazyvic.accelerator``: PyTorch's ``torch.accelerator`` (2.6+), the device-neutral way scripts
ask for a GPU: ``device = lazyvic.accelerator.current_accelerator() or lazyvic.device("cpu")``.

lazyvic's one accelerator is CUDA (one GPU, ``"cuda"`` = ``"cuda:0"``, or Numba's CUDA simulator;
see :mod:`lazyvic.cuda`).
"""

from __future__ import annotations

from lazyvic.errors import DeviceError
from lazyvic.runtime import device as _device
from lazyvic.transfer import device


def is_available() -> bool:
    """True when tensors can be placed on ``"cuda"`` (a GPU, or Numba's CUDA simulator)."""
    return _device.cuda_available()


def current_accelerator(check_available: bool = False) -> device | None:
    """``device(type='cuda')`` when CUDA is available, else None (``check_available`` is accepted:
    lazyvic reports the accelerator only when it can be used)."""
    return device("cuda") if _device.cuda_available() else None


def device_count() -> int:
    """1 when CUDA is available (lazyvic uses one GPU), else 0."""
    return 1 if _device.cuda_available() else 0


def current_device_index() -> int:
    """0, the index of lazyvic's one GPU.

    Raises DeviceError when no accelerator is available (as PyTorch raises)."""
    _check("current_device_index")
    return 0


def set_device_index(device, /) -> None:  # noqa: A002 - PyTorch's argument name
    """Select the GPU: only index 0 (or ``"cuda"``, ``"cuda:0"``) exists.

    Raises DeviceError for another index, or when no accelerator is available."""
    _check("set_device_index")
    _device.canonical(device if not isinstance(device, int) else f"cuda:{device}", "set_device_index")


def synchronize(device=None, /) -> None:  # noqa: A002
    """Wait for every kernel launched so far to finish (a no-op without CUDA)."""
    _device.synchronize()


def _check(opname: str) -> None:
    if not _device.cuda_available():
        raise DeviceError(f"accelerator.{opname}: no accelerator is available: {_device.describe_cuda()}")
