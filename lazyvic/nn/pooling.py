"""Pooling modules: MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d,
AdaptiveMaxPool1d/2d/3d, LPPool1d/2d/3d, MaxUnpool1d/2d/3d (see ``F.*_pool*``, ``F.max_unpool*``)."""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.functional.convolution import _tuple
from lazyvic.nn.module import Module
from lazyvic.tensor import Tensor


class _MaxPoolNd(Module):
    def __init__(
        self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False, ceil_mode: bool = False
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = (
            kernel_size,
            stride if stride is not None else kernel_size,
            padding,
        )
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool1d(_MaxPoolNd):
    """Maximum over windows: (N, C, L) or (C, L) -> (N, C, oL) (``F.max_pool1d``)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.max_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )


class MaxPool2d(_MaxPoolNd):
    """Maximum over windows: (N, C, H, W) or (C, H, W) -> (N, C, oH, oW) (``F.max_pool2d``)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.max_pool2d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )


class AvgPool1d(Module):
    """Mean over windows: (N, C, L) or (C, L) -> (N, C, oL) (``F.avg_pool1d``)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = (
            kernel_size,
            stride if stride is not None else kernel_size,
            padding,
        )
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """Mean over windows: (N, C, H, W) or (C, H, W) -> (N, C, oH, oW) (``F.avg_pool2d``)."""

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override=None,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = (
            kernel_size,
            stride if stride is not None else kernel_size,
            padding,
        )
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(Module):
    """Mean over PyTorch's adaptive windows: (N, C, L) -> (N, C, output_size)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    """Mean over PyTorch's adaptive windows: (N, C, H, W) -> (N, C, *output_size)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool1d(Module):
    """Maximum over PyTorch's adaptive windows: (N, C, L) -> (N, C, output_size)
    (``F.adaptive_max_pool1d``; ``return_indices=True`` also returns the positions)."""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    """Maximum over PyTorch's adaptive windows: (N, C, H, W) -> (N, C, *output_size)
    (``F.adaptive_max_pool2d``; ``return_indices=True`` also returns the positions)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class MaxPool3d(_MaxPoolNd):
    """Maximum over windows: (N, C, D, H, W) or (C, D, H, W) -> (N, C, oD, oH, oW)
    (``F.max_pool3d``)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.max_pool3d(
            input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices
        )


class AvgPool3d(AvgPool2d):
    """Mean over windows: (N, C, D, H, W) or (C, D, H, W) -> (N, C, oD, oH, oW) (``F.avg_pool3d``)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool3d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )


class AdaptiveAvgPool3d(AdaptiveAvgPool1d):
    """Mean over PyTorch's adaptive windows: (N, C, D, H, W) -> (N, C, *output_size)
    (``F.adaptive_avg_pool3d``)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool3d(input, self.output_size)


class AdaptiveMaxPool3d(AdaptiveMaxPool1d):
    """Maximum over PyTorch's adaptive windows: (N, C, D, H, W) -> (N, C, *output_size)
    (``F.adaptive_max_pool3d``; ``return_indices=True`` also returns the positions)."""

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


class _LPPoolNd(Module):
    _fn = None

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPoolNd):
    """Power-average pool ``(sum x**p) ** (1/p)`` over windows: (N, C, L) or (C, L) (``F.lp_pool1d``)."""

    _fn = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPoolNd):
    """Power-average pool over kH x kW windows: (N, C, H, W) or (C, H, W) (``F.lp_pool2d``)."""

    _fn = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPoolNd):
    """Power-average pool over kD x kH x kW windows: (N, C, D, H, W) or (C, D, H, W) (``F.lp_pool3d``)."""

    _fn = staticmethod(F.lp_pool3d)


class _MaxUnpoolNd(Module):
    """Sizes stored as tuples of the module's rank, as PyTorch's (``MaxUnpool2d(2).stride == (2, 2)``)."""

    _fn = None
    _nd = 1

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        name, nd = type(self).__name__, self._nd
        self.kernel_size = _tuple(kernel_size, nd, name, "kernel_size")
        self.stride = _tuple(stride if stride is not None else kernel_size, nd, name, "stride")
        self.padding = _tuple(padding, nd, name, "padding")

    def forward(self, input: Tensor, indices: Tensor, output_size=None) -> Tensor:
        return type(self)._fn(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The partial inverse of MaxPool1d: values written at their indices in zeros (``F.max_unpool1d``)."""

    _fn = staticmethod(F.max_unpool1d)


class MaxUnpool2d(_MaxUnpoolNd):
    """The partial inverse of MaxPool2d: values written at their indices in zeros (``F.max_unpool2d``)."""

    _fn = staticmethod(F.max_unpool2d)
    _nd = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """The partial inverse of MaxPool3d: values written at their indices in zeros (``F.max_unpool3d``)."""

    _fn = staticmethod(F.max_unpool3d)
    _nd = 3
