"""Shuffle modules (PyTorch's names): ``PixelShuffle``, ``PixelUnshuffle`` and ``ChannelShuffle``
(``F.pixel_shuffle``, ``F.pixel_unshuffle``, ``F.channel_shuffle``)."""

from __future__ import annotations

from lazyvic.functional.vision import channel_shuffle, pixel_shuffle, pixel_unshuffle
from lazyvic.nn.module import Module
from lazyvic.tensor import Tensor


class PixelShuffle(Module):
    """(*, C * r**2, H, W) -> (*, C, H * r, W * r), r = ``upscale_factor`` (``F.pixel_shuffle``)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H * r, W * r) -> (*, C * r**2, H, W), r = ``downscale_factor`` (``F.pixel_unshuffle``)."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    """Interleave the channels of (N, C, *) from ``groups`` groups (``F.channel_shuffle``)."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input: Tensor) -> Tensor:
        return channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
