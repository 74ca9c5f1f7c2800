"""Padding modules (PyTorch's names): ``ZeroPad1d``/``2d``/``3d``, ``ConstantPad1d``/``2d``/``3d``,
``ReflectionPad1d``/``2d``/``3d``, ``ReplicationPad1d``/``2d``/``3d`` and ``CircularPad1d``/``2d``/``3d``,
each ``F.pad`` with a fixed ``padding`` and mode.

``padding`` is an int (the same size on every side) or a tuple of (left, right) for the 1d
modules and (left, right, top, bottom) for the 2d ones, stored as a tuple as PyTorch stores it;
negative sizes crop. The constant modules pad any input of enough dimensions; the reflection
and replication modules take (C, W) or (N, C, W) for 1d and (C, H, W) or (N, C, H, W) for 2d,
as PyTorch's kernels do.
"""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.errors import ShapeError
from lazyvic.nn.module import Module
from lazyvic.tensor import Tensor


def _sides(padding, n: int) -> tuple:
    """An int repeated ``n`` times, or a sequence as a tuple (PyTorch's ``_pair``/``_quadruple``)."""
    return tuple(padding) if isinstance(padding, (tuple, list)) else (padding,) * n


class _ConstantPadNd(Module):
    _sides = 2

    def __init__(self, padding, value: float):
        super().__init__()
        self.padding = _sides(padding, self._sides)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last axis with ``value``: (*, W) -> (*, W + left + right)."""

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two axes with ``value``: (*, H, W) -> (*, H + top + bottom, W + left + right)."""

    _sides = 4

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ZeroPad1d(ConstantPad1d):
    """Pad the last axis with zeros: (*, W) -> (*, W + left + right)."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pad the last two axes with zeros: (*, H, W) -> (*, H + top + bottom, W + left + right)."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _EdgePadNd(Module):
    """Reflection or replication padding of the last one or two axes of a batched or unbatched input."""

    _sides = 2
    _mode = "reflect"

    def __init__(self, padding):
        super().__init__()
        self.padding = _sides(padding, self._sides)

    def forward(self, input: Tensor) -> Tensor:
        spatial = self._sides // 2
        if input.ndim not in (spatial + 1, spatial + 2):
            raise ShapeError(
                f"{type(self).__name__}: expected a {spatial + 1}-D or {spatial + 2}-D (batched) input, "
                f"got shape {input.shape}"
            )
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad1d(_EdgePadNd):
    """Pad the last axis of (C, W) or (N, C, W) with its reflection (the edge not repeated; each
    size smaller than W)."""


class ReflectionPad2d(_EdgePadNd):
    """Pad the last two axes of (C, H, W) or (N, C, H, W) with their reflection (each size
    smaller than the axis)."""

    _sides = 4


class ReplicationPad1d(_EdgePadNd):
    """Pad the last axis of (C, W) or (N, C, W) with copies of its edge elements."""

    _mode = "replicate"


class ReplicationPad2d(_EdgePadNd):
    """Pad the last two axes of (C, H, W) or (N, C, H, W) with copies of their edge elements."""

    _sides = 4
    _mode = "replicate"


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three axes with ``value``: (*, D, H, W) -> (*, D + front + back, H + top + bottom,
    W + left + right); ``padding`` (left, right, top, bottom, front, back) or an int."""

    _sides = 6

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ZeroPad3d(ConstantPad3d):
    """Pad the last three axes with zeros (see :class:`ConstantPad3d`)."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ReflectionPad3d(_EdgePadNd):
    """Pad the last three axes of (C, D, H, W) or (N, C, D, H, W) with their reflection."""

    _sides = 6


class ReplicationPad3d(_EdgePadNd):
    """Pad the last three axes of (C, D, H, W) or (N, C, D, H, W) with copies of their edge elements."""

    _sides = 6
    _mode = "replicate"


class CircularPad1d(_EdgePadNd):
    """Pad the last axis of (C, W) or (N, C, W) with its other end (wrapped around; each size at
    most W), as ``torch.nn.CircularPad1d``: ``F.pad(x, padding, mode="circular")``."""

    _mode = "circular"


class CircularPad2d(_EdgePadNd):
    """Pad the last two axes of (C, H, W) or (N, C, H, W), wrapped around (``F.pad`` circular)."""

    _sides = 4
    _mode = "circular"


class CircularPad3d(_EdgePadNd):
    """Pad the last three axes of (C, D, H, W) or (N, C, D, H, W), wrapped around (``F.pad`` circular)."""

    _sides = 6
    _mode = "circular"
