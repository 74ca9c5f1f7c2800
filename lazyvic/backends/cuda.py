"""``lazyvic.backends.cuda``: PyTorch's CUDA matmul and attention switches, accepted and without
effect (see :mod:`lazyvic.backends`). Defaults are PyTorch's."""

from __future__ import annotations

from lazyvic.runtime import device as _device


class MatmulSettings:
    """``backends.cuda.matmul``: settable flags; an unknown name raises AttributeError, as in PyTorch."""

    __slots__ = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __repr__(self) -> str:
        return "lazyvic.backends.cuda.matmul(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


matmul = MatmulSettings()

# scaled_dot_product_attention kernels PyTorch may pick; lazyvic composes attention from primitives.
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """True when lazyvic can run on CUDA here (a GPU, or Numba's CUDA simulator)."""
    return _device.cuda_available()


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def math_sdp_enabled() -> bool:
    return _sdp["math"]


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def cudnn_sdp_enabled() -> bool:
    return _sdp["cudnn"]


def enable_cudnn_sdp(enabled: bool) -> None:
    _sdp["cudnn"] = bool(enabled)
