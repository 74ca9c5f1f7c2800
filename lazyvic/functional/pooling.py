"""Pooling: ``max_pool1d/2d``, ``avg_pool1d/2d``, ``adaptive_avg_pool1d/2d`` (PyTorch's names).

The 2-D max pool is a primitive (lazyvic/ops/pool.py); the average pools sum strided views; the
1-D pools are the 2-D ones over a height of 1.
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import ArgumentError, ShapeError, UnsupportedOpError
from lazyvic.functional.convolution import _out_size, _pair, _tuple
from lazyvic.indexing import cat, stack
from lazyvic.tensor import Tensor
from lazyvic.trace.composite import mark


def _windows(x: Tensor, kernel: tuple, stride: tuple, dilation: tuple, out_hw: tuple) -> list:
    """The kH*kW strided views of the (padded) x (N, C, H, W), each (N, C, oH, oW), row-major over the
    kernel: window (i, j) holds x[:, :, i*dH + sH*oh, j*dW + sW*ow]."""
    n, c = x.shape[:2]
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    views = []
    for i in range(kh):
        for j in range(kw):
            h0, w0 = i * dh, j * dw
            stops = (n, c, h0 + (oh - 1) * sh + 1, w0 + (ow - 1) * sw + 1)
            views.append(x._slice((0, 0, h0, w0), stops, (1, 1, sh, sw)))
    return views


def _check_rank(name: str, x: Tensor, nd: int) -> bool:
    """Raise unless x is (N, C, *spatial) or (C, *spatial); True when unbatched."""
    if x.ndim not in (nd + 1, nd + 2):
        layout = ("(N, C, L)", "(N, C, H, W)")[nd - 1]
        raise ShapeError(f"{name}: expected input {layout} or without the batch axis, got shape {x.shape}")
    return x.ndim == nd + 1


def _unsupported(name: str, **options) -> None:
    """PyTorch options that lazyvic's pools do not implement, when set to other than their defaults."""
    for option, (value, default) in options.items():
        if value != default and not (option == "dilation" and value in ((1, 1), [1, 1], (1,), [1])):
            raise UnsupportedOpError(f"{name}: {option}={value!r} is not supported (only {option}={default!r})")


def _pool_args(name: str, x: Tensor, kernel_size, stride, padding) -> tuple:
    kernel = _pair(kernel_size, name, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else _pair(stride, name, "stride")
    padding = _pair(padding, name, "padding")
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0:
        raise ArgumentError(
            f"{name}: kernel_size {kernel} and stride {stride} must be positive, padding {padding} >= 0"
        )
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ArgumentError(f"{name}: padding {padding} must be at most half of kernel_size {kernel}")
    hp, wp = x.shape[2] + 2 * padding[0], x.shape[3] + 2 * padding[1]
    out_hw = (
        _out_size(name, hp, kernel[0], stride[0], 1, x.shape),
        _out_size(name, wp, kernel[1], stride[1], 1, x.shape),
    )
    return kernel, stride, padding, out_hw


def max_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    """Maximum over kH x kW windows, as ``torch.nn.functional.max_pool2d``. input (N, C, H, W) or
    (C, H, W) -> (N, C, oH, oW); ``stride`` defaults to ``kernel_size``; the implicit padding is
    -inf. Gradients go to the window maximum, the first of exact ties in row-major order (as
    PyTorch's). ``return_indices=True`` also returns each maximum's position h*W + w in its
    (n, c) plane, int64 (as PyTorch's, for ``max_unpool2d``). ``dilation`` and ``ceil_mode``
    other than their defaults raise UnsupportedOpError."""
    _unsupported("max_pool2d", dilation=(dilation, 1), ceil_mode=(ceil_mode, False))
    if _check_rank("max_pool2d", input, 2):
        y = max_pool2d(input.unsqueeze(0), kernel_size, stride, padding, return_indices=return_indices)
        return (y[0].squeeze(0), y[1].squeeze(0)) if return_indices else y.squeeze(0)
    kernel, stride, padding, out_hw = _pool_args("max_pool2d", input, kernel_size, stride, padding)
    y = Tensor.apply("max_pool2d", input, kernel=kernel, stride=stride, padding=padding)  # lazyvic/ops/pool.py
    if return_indices:
        return y, Tensor.apply("max_pool2d_indices", input, y, kernel=kernel, stride=stride, padding=padding)
    return mark(
        y,
        "MaxPool",
        (input,),
        kernel_shape=list(kernel),
        strides=list(stride),
        pads=[padding[0], padding[1], padding[0], padding[1]],
    )


def avg_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
) -> Tensor:
    """Mean over kH x kW windows, as ``torch.nn.functional.avg_pool2d``. input (N, C, H, W) or
    (C, H, W) -> (N, C, oH, oW); the zero padding counts in the divisor when ``count_include_pad``,
    else each window is divided by its number of input elements. ``ceil_mode`` and
    ``divisor_override`` other than their defaults raise UnsupportedOpError."""
    _unsupported("avg_pool2d", ceil_mode=(ceil_mode, False), divisor_override=(divisor_override, None))
    if _check_rank("avg_pool2d", input, 2):
        return avg_pool2d(
            input.unsqueeze(0), kernel_size, stride, padding, count_include_pad=count_include_pad
        ).squeeze(0)
    kernel, stride, padding, out_hw = _pool_args("avg_pool2d", input, kernel_size, stride, padding)
    pads = ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1]))
    total = stack(_windows(input._pad(pads), kernel, stride, (1, 1), out_hw), dim=0).sum(0)
    onnx_attrs = dict(
        kernel_shape=list(kernel),
        strides=list(stride),
        count_include_pad=int(count_include_pad),
        pads=[padding[0], padding[1], padding[0], padding[1]],
    )
    if count_include_pad or padding == (0, 0):
        return mark(total * (1.0 / (kernel[0] * kernel[1])), "AveragePool", (input,), **onnx_attrs)
    inside = np.pad(np.ones(input.shape[2:]), pads[2:])
    (kh, kw), (sh, sw) = kernel, stride
    count = sum(
        inside[i : i + (out_hw[0] - 1) * sh + 1 : sh, j : j + (out_hw[1] - 1) * sw + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    )
    divisor = Tensor((1.0 / count).astype(input.dtype.np)).to(input.device)
    return mark(total * divisor, "AveragePool", (input,), **onnx_attrs)


def _pool1d_args(name: str, kernel_size, stride, padding) -> tuple:
    (k,) = _tuple(kernel_size, 1, name, "kernel_size")
    (s,) = (k,) if stride is None or stride == [] or stride == () else _tuple(stride, 1, name, "stride")
    (p,) = _tuple(padding, 1, name, "padding")
    return (1, k), (1, s), (0, p)


def max_pool1d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    """Maximum over windows of ``kernel_size``, as ``torch.nn.functional.max_pool1d``: input (N, C, L)
    or (C, L) -> (N, C, (L + 2*padding - kernel_size) // stride + 1). Options as :func:`max_pool2d`."""
    _unsupported(
        "max_pool1d", dilation=(dilation, 1), ceil_mode=(ceil_mode, False), return_indices=(return_indices, False)
    )
    unbatched = _check_rank("max_pool1d", input, 1)
    x = input.unsqueeze(0) if unbatched else input
    kernel, stride, padding = _pool1d_args("max_pool1d", kernel_size, stride, padding)
    y = max_pool2d(x.unsqueeze(2), kernel, stride, padding).squeeze(2)
    return y.squeeze(0) if unbatched else y


def avg_pool1d(
    input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True
) -> Tensor:
    """Mean over windows of ``kernel_size``, as ``torch.nn.functional.avg_pool1d``: input (N, C, L) or
    (C, L) -> (N, C, (L + 2*padding - kernel_size) // stride + 1). Options as :func:`avg_pool2d`."""
    _unsupported("avg_pool1d", ceil_mode=(ceil_mode, False))
    unbatched = _check_rank("avg_pool1d", input, 1)
    x = input.unsqueeze(0) if unbatched else input
    kernel, stride, padding = _pool1d_args("avg_pool1d", kernel_size, stride, padding)
    y = avg_pool2d(x.unsqueeze(2), kernel, stride, padding, count_include_pad=count_include_pad).squeeze(2)
    return y.squeeze(0) if unbatched else y


def _adaptive_mean(y: Tensor, axis: int, o: int) -> Tensor:
    """Mean over PyTorch's adaptive windows along one axis: cell i averages [floor(i*n/o), ceil((i+1)*n/o))."""
    n = y.shape[axis]
    if o == n:
        return y
    cells = [
        y.narrow(axis, (i * n) // o, -(-((i + 1) * n) // o) - (i * n) // o).mean(axis, keepdim=True) for i in range(o)
    ]
    return cells[0] if o == 1 else cat(cells, axis)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows: output cell i of an axis of size n averages
    [floor(i*n/o), ceil((i+1)*n/o)). input (N, C, H, W) or (C, H, W) -> (N, C, oH, oW); an entry of
    ``output_size`` may be None (keep that size)."""
    if _check_rank("adaptive_avg_pool2d", input, 2):
        return adaptive_avg_pool2d(input.unsqueeze(0), output_size).squeeze(0)
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    if len(sizes) != 2:
        raise ArgumentError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got {output_size!r}")
    y = input
    for axis, o in zip((2, 3), sizes):
        o = input.shape[axis] if o is None else int(o)
        if o < 1:
            raise ShapeError(f"adaptive_avg_pool2d: output size {output_size} must be positive")
        # One axis at a time: the mean over a rectangle is the mean of the row means.
        y = _adaptive_mean(y, axis, o)
    if y.shape[2:] == (1, 1):
        return mark(y, "GlobalAveragePool", (input,))
    return y


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows (see :func:`adaptive_avg_pool2d`): input (N, C, L) or
    (C, L) -> (N, C, output_size)."""
    _check_rank("adaptive_avg_pool1d", input, 1)
    (o,) = _tuple(output_size, 1, "adaptive_avg_pool1d", "output_size")
    if o < 1:
        raise ShapeError(f"adaptive_avg_pool1d: output size {output_size} must be positive")
    return _adaptive_mean(input, input.ndim - 1, o)
