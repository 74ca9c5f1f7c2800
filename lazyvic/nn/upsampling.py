"""Upsampling modules: Upsample, UpsamplingNearest2d, UpsamplingBilinear2d (see ``F.interpolate``)."""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.nn.module import Module
from lazyvic.tensor import Tensor


class Upsample(Module):
    """Resize the spatial axes of (N, C, *spatial) to ``size`` or by ``scale_factor`` with ``mode``
    (``F.interpolate``: nearest, nearest-exact, linear, bilinear, trilinear, area)."""

    def __init__(
        self,
        size=None,
        scale_factor=None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) else scale_factor
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(
            input, self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor
        )

    def extra_repr(self) -> str:
        what = f"scale_factor={self.scale_factor}" if self.scale_factor is not None else f"size={self.size}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``Upsample(size, scale_factor, mode='nearest')`` of (N, C, H, W)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample(size, scale_factor, mode='bilinear', align_corners=True)`` of (N, C, H, W)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
