"""Pooling: ``max_pool1d/2d``, ``avg_pool1d/2d``, ``adaptive_avg_pool1d/2d``,
``adaptive_max_pool1d/2d`` (PyTorch's names).

The 2-D max pool is a primitive (lazyvic/ops/pool.py), and so are the 2-D average pools, plain
and adaptive (lazyvic/ops/avg_pool.py); the adaptive max pool is built from max pools; the 1-D
pools are the 2-D ones over a height of 1.
"""

from __future__ import annotations

import numpy as np

from lazyvic.errors import ArgumentError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.functional.convolution import _out_size, _pair, _tuple
from lazyvic.indexing import cat
from lazyvic.tensor import Tensor
from lazyvic.trace.composite import mark


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


def _window_args(name: str, kernel_size, stride, padding) -> tuple:
    """(kernel, stride, padding) pairs, checked as PyTorch checks them; ``stride`` defaults to the kernel."""
    kernel = _pair(kernel_size, name, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else _pair(stride, name, "stride")
    padding = _pair(padding, name, "padding")
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0:
        raise ArgumentError(
            f"{name}: kernel_size {kernel} and stride {stride} must be positive, padding {padding} >= 0"
        )
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ArgumentError(f"{name}: padding {padding} must be at most half of kernel_size {kernel}")
    return kernel, stride, padding


def _pool_args(name: str, x: Tensor, kernel_size, stride, padding) -> tuple:
    kernel, stride, padding = _window_args(name, kernel_size, stride, padding)
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


def _avg_pool_attrs(name: str, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override) -> dict:
    """The avg_pool2d primitive's attributes (ops/avg_pool.py), checked."""
    kernel, stride, padding = _window_args(name, kernel_size, stride, padding)
    if divisor_override is not None and (
        not isinstance(divisor_override, (int, np.integer))
        or isinstance(divisor_override, bool)
        or divisor_override == 0
    ):
        raise ArgumentError(f"{name}: divisor_override must be a nonzero int or None, got {divisor_override!r}")
    return dict(
        kernel=kernel,
        stride=stride,
        padding=padding,
        ceil_mode=bool(ceil_mode),
        count_include_pad=bool(count_include_pad),
        divisor_override=None if divisor_override is None else int(divisor_override),
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
    """Mean over kH x kW windows, as ``torch.nn.functional.avg_pool2d`` (one primitive,
    lazyvic/ops/avg_pool.py).

    input (N, C, H, W) or (C, H, W), floating point -> (N, C, oH, oW) (or (C, oH, oW)) of its
    dtype, with oH = (H + 2*padding - kH) // sH + 1 (ceil_mode: rounded up, but the last window
    must start inside the input or the left padding), likewise oW; ``stride`` defaults to
    ``kernel_size``. Each window's sum is divided by ``divisor_override`` when given; else, with
    ``count_include_pad``, by the window's size within the padded input (zero padding counts,
    the ceil_mode overhang past it does not); else by its number of input elements.

    Raises:
        ShapeError: input not 3-D or 4-D, or the kernel larger than the padded input.
        ArgumentError: a kernel_size or stride below 1, a padding below 0 or above half the
            kernel, a divisor_override of 0.
        DTypeError: an integer or bool input.
    """
    at = _avg_pool_attrs("avg_pool2d", kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if _check_rank("avg_pool2d", input, 2):
        return Tensor.apply("avg_pool2d", input.unsqueeze(0), **at).squeeze(0)
    return Tensor.apply("avg_pool2d", input, **at)


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
    or (C, L) -> (N, C, (L + 2*padding - kernel_size) // stride + 1). Options as :func:`max_pool2d`;
    ``return_indices=True`` also returns each maximum's position along L (int64, for ``max_unpool1d``)."""
    _unsupported("max_pool1d", dilation=(dilation, 1), ceil_mode=(ceil_mode, False))
    unbatched = _check_rank("max_pool1d", input, 1)
    x = input.unsqueeze(0) if unbatched else input
    kernel, stride, padding = _pool1d_args("max_pool1d", kernel_size, stride, padding)
    if return_indices:  # over a height of 1 the 2-D index h * W + w is the position along L
        y, idx = max_pool2d(x.unsqueeze(2), kernel, stride, padding, return_indices=True)
        y, idx = y.squeeze(2), idx.squeeze(2)
        return (y.squeeze(0), idx.squeeze(0)) if unbatched else (y, idx)
    y = max_pool2d(x.unsqueeze(2), kernel, stride, padding).squeeze(2)
    return y.squeeze(0) if unbatched else y


def avg_pool1d(
    input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True
) -> Tensor:
    """Mean over windows of ``kernel_size``, as ``torch.nn.functional.avg_pool1d``: input (N, C, L) or
    (C, L) -> (N, C, (L + 2*padding - kernel_size) // stride + 1) (rounded up with ``ceil_mode``).
    :func:`avg_pool2d` over a height of 1: options and errors as there."""
    unbatched = _check_rank("avg_pool1d", input, 1)
    x = input.unsqueeze(0) if unbatched else input
    kernel, stride, padding = _pool1d_args("avg_pool1d", kernel_size, stride, padding)
    at = _avg_pool_attrs("avg_pool1d", kernel, stride, padding, ceil_mode, count_include_pad, None)
    y = Tensor.apply("avg_pool2d", x.unsqueeze(2), **at).squeeze(2)
    return y.squeeze(0) if unbatched else y


def _adaptive_sizes(name: str, input: Tensor, output_size, nd: int) -> tuple:
    """``output_size`` (an int, or ``nd`` ints or Nones: keep that size) as ``nd`` positive ints."""
    spatial = input.shape[input.ndim - nd :]
    sizes = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * nd
    if len(sizes) != nd or not all(
        o is None or (isinstance(o, (int, np.integer)) and not isinstance(o, bool)) for o in sizes
    ):
        what = "an int" if nd == 1 else "an int or a pair of ints (or None)"
        raise ArgumentError(f"{name}: output_size must be {what}, got {output_size!r}")
    sizes = tuple(n if o is None else int(o) for n, o in zip(spatial, sizes))
    if min(sizes) < 1:
        raise ShapeError(f"{name}: output size {output_size} must be positive (input {input.shape})")
    return sizes


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows, as ``torch.nn.functional.adaptive_avg_pool2d`` (one
    primitive, lazyvic/ops/avg_pool.py): output row i of oH averages the input rows
    floor(i*H/oH) .. ceil((i+1)*H/oH) - 1, likewise columns.

    input (N, C, H, W) or (C, H, W), floating point -> (N, C, oH, oW) (or (C, oH, oW)) of its
    dtype; ``output_size`` is an int or a pair, an entry None keeping that size.

    Raises:
        ShapeError: input not 3-D or 4-D, an empty spatial axis, or an output size below 1.
        ArgumentError: an output_size that is not an int or a pair.
        DTypeError: an integer or bool input.
    """
    unbatched = _check_rank("adaptive_avg_pool2d", input, 2)
    sizes = _adaptive_sizes("adaptive_avg_pool2d", input, output_size, 2)
    x = input.unsqueeze(0) if unbatched else input
    y = Tensor.apply("adaptive_avg_pool2d", x, output_size=sizes)
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows (see :func:`adaptive_avg_pool2d`, over a height of 1):
    input (N, C, L) or (C, L) -> (N, C, output_size) (or (C, output_size))."""
    unbatched = _check_rank("adaptive_avg_pool1d", input, 1)
    (o,) = _adaptive_sizes("adaptive_avg_pool1d", input, output_size, 1)
    x = input.unsqueeze(0) if unbatched else input
    y = Tensor.apply("adaptive_avg_pool2d", x.unsqueeze(2), output_size=(1, o)).squeeze(2)
    return y.squeeze(0) if unbatched else y


def _adaptive_max(y: Tensor, axis: int, o: int, indices: bool = False):
    """Maximum over PyTorch's adaptive windows along one axis (2 or 3) of y (N, C, H, W): one
    max_pool2d when the windows tile the axis, else one per window, side by side. With
    ``indices``: (values, int64 position of each maximum along ``axis``, the first of ties)."""
    n, width = y.shape[axis], y.shape[3]

    def pooled(part, k, start):
        if not indices:
            return max_pool2d(part, k)
        v, flat = max_pool2d(part, k, return_indices=True)  # h * (part's width) + w
        return v, (flat // width if axis == 2 else flat % part.shape[3]) + start

    if n % o == 0:
        k = [1, 1]
        k[axis - 2] = n // o
        return pooled(y, tuple(k), 0)
    cells = []
    for i in range(o):
        start, stop = (i * n) // o, -(-((i + 1) * n) // o)
        k = [1, 1]
        k[axis - 2] = stop - start
        cells.append(pooled(y.narrow(axis, start, stop - start), tuple(k), start))
    if not indices:
        return cat(cells, axis)
    return cat([c[0] for c in cells], axis), cat([c[1] for c in cells], axis)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Maximum over PyTorch's adaptive windows (those of :func:`adaptive_avg_pool2d`), as
    ``torch.nn.functional.adaptive_max_pool2d``: input (N, C, H, W) or (C, H, W), floating point
    -> (N, C, oH, oW) (or (C, oH, oW)). Built from max_pool2d, columns then rows, so the
    gradient goes to each window's first maximum in row-major order, as PyTorch's.

    ``return_indices=True`` returns ``(values, indices)``: indices int64, of the values' shape,
    each maximum's position ``h * W + w`` in its (H, W) plane, the first in row-major order of
    equal maxima, as PyTorch's; NaN counts as the maximum (of several NaNs in a window this gives
    the first, PyTorch's kernel the last, as with max_pool2d). The column pass gives each row's
    first maximum, the row pass the first row holding the window's maximum.

    Raises:
        ShapeError, ArgumentError, DTypeError: as :func:`adaptive_avg_pool2d`.
    """
    unbatched = _check_rank("adaptive_max_pool2d", input, 2)
    oh, ow = _adaptive_sizes("adaptive_max_pool2d", input, output_size, 2)
    x = input.unsqueeze(0) if unbatched else input
    if not x.dtype.is_floating_point:
        raise DTypeError(f"adaptive_max_pool2d: expected a floating-point input, got {x.dtype.name}")
    if return_indices:
        columns, col = _adaptive_max(x, 3, ow, indices=True)  # (N, C, H, oW): each row's window max
        y, row = _adaptive_max(columns, 2, oh, indices=True)  # (N, C, oH, oW)
        idx = row * x.shape[3] + col.gather(2, row)
        return (y.squeeze(0), idx.squeeze(0)) if unbatched else (y, idx)
    y = _adaptive_max(_adaptive_max(x, 3, ow), 2, oh)
    if (oh, ow) == (1, 1):
        y = mark(y, "GlobalMaxPool", (x,))
    return y.squeeze(0) if unbatched else y


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    """Maximum over PyTorch's adaptive windows (see :func:`adaptive_max_pool2d`, over a height of
    1): input (N, C, L) or (C, L) -> (N, C, output_size) (or (C, output_size)); with
    ``return_indices=True`` also the int64 positions along L."""
    unbatched = _check_rank("adaptive_max_pool1d", input, 1)
    (o,) = _adaptive_sizes("adaptive_max_pool1d", input, output_size, 1)
    x = input.unsqueeze(0) if unbatched else input
    if return_indices:
        y, idx = adaptive_max_pool2d(x.unsqueeze(2), (1, o), return_indices=True)
        y, idx = y.squeeze(2), idx.squeeze(2)
        return (y.squeeze(0), idx.squeeze(0)) if unbatched else (y, idx)
    y = adaptive_max_pool2d(x.unsqueeze(2), (1, o)).squeeze(2)
    return y.squeeze(0) if unbatched else y
