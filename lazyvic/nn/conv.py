"""Convolution modules: Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
(see ``F.conv*``).

Parameters and initialization as PyTorch's ``_ConvNd``: ``weight`` (out, in/groups, *kernel) —
(in, out/groups, *kernel) for the transposed ones — and ``bias`` (out,); kaiming_uniform_ with
a = sqrt(5) (a bound of 1/sqrt(fan_in)) and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), with
fan_in = ``weight.shape[1] * prod(kernel)``.
"""

from __future__ import annotations

import math

from lazyvic import functional as F
from lazyvic.creation import empty
from lazyvic.errors import ShapeError
from lazyvic.functional.convolution import _padding, _tuple
from lazyvic.nn import init
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride,
        padding,
        dilation,
        groups: int,
        bias: bool,
        padding_mode: str,
        output_padding=0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        name, nd = type(self).__name__, self._nd
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: groups={groups} must divide in_channels={in_channels} and out_channels={out_channels}"
            )
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")
        if self._transposed and padding_mode != "zeros":
            raise ValueError(f'{name}: only "zeros" padding mode is supported, got {padding_mode!r}')
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, nd, name, "kernel_size")
        self.stride = _tuple(stride, nd, name, "stride")
        self.dilation = _tuple(dilation, nd, name, "dilation")
        if isinstance(padding, str):
            _padding(name, padding, nd, self.kernel_size, self.stride, self.dilation)  # validates 'same'
            self.padding = padding
        else:
            self.padding = _tuple(padding, nd, name, "padding")
        self.output_padding = _tuple(output_padding, nd, name, "output_padding")
        self.padding_mode = padding_mode
        shape = (in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(*shape, *self.kernel_size, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        """The class's ``F.conv*d`` of ``input``, after the padding of a ``padding_mode`` other
        than ``'zeros'``."""
        padding = self.padding
        if self.padding_mode != "zeros":
            input, padding = self._mode_padded(input), 0
        return self._function(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def _mode_padded(self, x: Tensor) -> Tensor:
        """The input padded by ``padding_mode`` (then the convolution pads nothing)."""
        pads = _padding(type(self).__name__, self.padding, self._nd, self.kernel_size, self.stride, self.dilation)
        flat = [p for pair in reversed(pads) for p in pair]  # F.pad lists the last axis first
        return F.pad(x, flat, mode=self.padding_mode)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution: input (N, in_channels, L) or (in_channels, L) -> (N, out_channels, oL)
    (see ``F.conv1d``); ``padding`` may be an int, ``'valid'`` or ``'same'``, ``padding_mode``
    ``'zeros'``, ``'reflect'``, ``'replicate'`` or ``'circular'``."""

    _nd = 1
    _function = staticmethod(F.conv1d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, 0,
            device, dtype,
        )  # fmt: skip


class Conv2d(_ConvNd):
    """2-D convolution: input (N, in_channels, H, W) or (in_channels, H, W) -> (N, out_channels, oH, oW)
    (see ``F.conv2d``); ``padding`` and ``padding_mode`` as :class:`Conv1d`."""

    _nd = 2
    _function = staticmethod(F.conv2d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, 0,
            device, dtype,
        )  # fmt: skip


class Conv3d(_ConvNd):
    """3-D convolution: input (N, in_channels, D, H, W) or (in_channels, D, H, W) ->
    (N, out_channels, oD, oH, oW) (see ``F.conv3d``); ``padding`` an int, a triple, ``'valid'`` or
    ``'same'``; ``padding_mode`` as :class:`Conv1d`. ``weight`` (out_channels,
    in_channels/groups, kD, kH, kW), ``bias`` (out_channels,)."""

    _nd = 3
    _function = staticmethod(F.conv3d)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, 0,
            device, dtype,
        )  # fmt: skip


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__}: padding must be an int or a tuple of ints, got {padding!r}")
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode,
            output_padding, device, dtype,
        )  # fmt: skip

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        """The class's ``F.conv_transpose*d`` of ``input``; ``output_size`` picks the output_padding."""
        op = self._output_padding(input, output_size)
        return self._function(input, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation)

    def _output_padding(self, input: Tensor, output_size) -> tuple:
        """PyTorch's ``_output_padding``: the output_padding that gives ``output_size`` (the spatial
        sizes, optionally preceded by N and C)."""
        if output_size is None:
            return self.output_padding
        nd, name = self._nd, type(self).__name__
        sizes = list(output_size)
        if len(sizes) in (nd + 1, nd + 2):
            sizes = sizes[-nd:]
        if len(sizes) != nd:
            raise ShapeError(f"{name}: output_size must have {nd} or {nd + 2} elements, got {output_size}")
        spatial = input.shape[-nd:]
        padding = []
        for d in range(nd):
            k, s, p, dil = self.kernel_size[d], self.stride[d], self.padding[d], self.dilation[d]
            smallest = (spatial[d] - 1) * s - 2 * p + dil * (k - 1) + 1
            if not smallest <= sizes[d] < smallest + s:
                raise ShapeError(
                    f"{name}: requested an output size of {tuple(sizes)}, but valid sizes range from "
                    f"{smallest} to {smallest + s - 1} along spatial axis {d} (for an input of {input.shape})"
                )
            padding.append(sizes[d] - smallest)
        return tuple(padding)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution: input (N, in_channels, L) or (in_channels, L) -> (N, out_channels,
    (L - 1)*stride - 2*padding + dilation*(kernel_size - 1) + output_padding + 1) (``F.conv_transpose1d``).
    ``forward(input, output_size=None)``: ``output_size`` picks the output_padding."""

    _nd = 1
    _function = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution: input (N, in_channels, H, W) or (in_channels, H, W) ->
    (N, out_channels, oH, oW) with oH = (H - 1)*sH - 2*pH + dH*(kH - 1) + output_paddingH + 1
    (``F.conv_transpose2d``). ``forward(input, output_size=None)``: ``output_size`` picks the
    output_padding."""

    _nd = 2
    _function = staticmethod(F.conv_transpose2d)


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution: input (N, in_channels, D, H, W) or (in_channels, D, H, W) ->
    (N, out_channels, oD, oH, oW) with oD = (D - 1)*sD - 2*pD + dD*(kD - 1) + output_paddingD + 1
    (likewise oH, oW; ``F.conv_transpose3d``). ``weight`` (in_channels, out_channels/groups, kD,
    kH, kW), ``bias`` (out_channels,). ``forward(input, output_size=None)``: ``output_size``
    picks the output_padding."""

    _nd = 3
    _function = staticmethod(F.conv_transpose3d)
