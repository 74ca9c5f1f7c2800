"""Pools composed of other pools: ``max_pool3d``, ``avg_pool3d``, ``adaptive_avg_pool3d``,
``adaptive_max_pool3d``, ``lp_pool1d/2d/3d`` and ``max_unpool1d/2d/3d`` (PyTorch's names).

A 3-D window is a product of intervals, so a 3-D pool is two 2-D pools: one over (H, W) of every
depth slice (the input seen as (N, C*D, H, W)), then one over D of every output column (seen as
(N, C, D, oH*oW)) with a (kD, 1) kernel. Maximum of maxima, and sum of sums over counts that are
products of the per-axis counts (with or without padding, rounded up or down), give PyTorch's
3-D pools; the 2-D max pool's gradient goes to the first maximum in row-major order, so the
composition's goes to the first in (d, h, w) order, as PyTorch's. ``lp_pool*`` is PyTorch's own
composition of an average pool; ``max_unpool*`` scatters into a zero plane (repeated indices,
from overlapping windows, hold equal values: the mean that ``scatter`` writes is that value up to
rounding).
"""

from __future__ import annotations

import math

from lazyvic.creation import zeros
from lazyvic.errors import ArgumentError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.functional.activation import relu
from lazyvic.functional.convolution import _tuple
from lazyvic.functional.pooling import (
    _adaptive_sizes,
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool2d,
)
from lazyvic.tensor import Tensor, where


def _batched(name: str, x: Tensor, nd: int) -> tuple:
    """(x with a batch axis, whether it had none); raises unless x is (N, C, *nd) or (C, *nd)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"{name}: expected a lazyvic.Tensor, got {type(x).__name__}")
    if x.ndim not in (nd + 1, nd + 2):
        layout = ("(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)")[nd - 1]
        raise ShapeError(f"{name}: expected input {layout} or without the batch axis, got shape {x.shape}")
    return (x.unsqueeze(0), True) if x.ndim == nd + 1 else (x, False)


def _window3d(name: str, kernel_size, stride, padding) -> tuple:
    kernel = _tuple(kernel_size, 3, name, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, 3, name, "stride")
    padding = _tuple(padding, 3, name, "padding")
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0:
        raise ArgumentError(
            f"{name}: kernel_size {kernel} and stride {stride} must be positive, padding {padding} >= 0"
        )
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ArgumentError(f"{name}: padding {padding} must be at most half of kernel_size {kernel}")
    return kernel, stride, padding


def _unbatch(y, unbatched: bool):
    if isinstance(y, tuple):
        return tuple(t.squeeze(0) for t in y) if unbatched else y
    return y.squeeze(0) if unbatched else y


def _depth_indices(i2: Tensor, i3: Tensor, shape: tuple, out: tuple) -> Tensor:
    """The flat d*H*W + h*W + w index of each 3-D maximum from the two passes' indices: ``i2``
    (N, C*D, oH, oW) the (h, w) of each slice's maximum, ``i3`` (N, C, oD, oH*oW) the position
    d*(oH*oW) + j of the maximal slice (whose index, taken from ``i2``, is the answer's (h, w))."""
    n, c, d, h, w = shape
    columns = out[1] * out[2]
    depth = i3 // columns
    hw = i2.reshape(n, c, d, columns).gather(2, depth)
    return (depth * (h * w) + hw).reshape(n, c, *out)


def max_pool3d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """Maximum over kD x kH x kW windows, as ``torch.nn.functional.max_pool3d``: input
    (N, C, D, H, W) or (C, D, H, W), floating point -> (N, C, oD, oH, oW), oD = (D + 2*pD - kD)
    // sD + 1 and likewise; ``stride`` defaults to ``kernel_size``; the implicit padding is -inf.
    Two max_pool2d passes (module docstring); the gradient goes to the first maximum of each
    window in (d, h, w) order, as PyTorch's. ``return_indices=True`` also returns each maximum's
    position d*H*W + h*W + w in its (n, c) volume, int64 (for ``max_unpool3d``).

    Raises:
        ShapeError: input not 4-D or 5-D, or a kernel larger than the padded input.
        ArgumentError: a kernel_size or stride below 1, a padding below 0 or above half the kernel.
        UnsupportedOpError: ``dilation`` other than 1 or ``ceil_mode=True``.
    """
    name = "max_pool3d"
    if _tuple(dilation, 3, name, "dilation") != (1, 1, 1) or ceil_mode:
        raise UnsupportedOpError(f"{name}: dilation={dilation!r} and ceil_mode={ceil_mode!r} (only 1 and False)")
    x, unbatched = _batched(name, input, 3)
    kernel, stride, padding = _window3d(name, kernel_size, stride, padding)
    n, c, d, h, w = x.shape
    planes = x.reshape(n, c * d, h, w)
    y2 = max_pool2d(planes, kernel[1:], stride[1:], padding[1:], return_indices=return_indices)
    v2 = y2[0] if return_indices else y2
    oh, ow = v2.shape[2:]
    y3 = max_pool2d(
        v2.reshape(n, c, d, oh * ow), (kernel[0], 1), (stride[0], 1), (padding[0], 0), return_indices=return_indices
    )
    if not return_indices:
        return _unbatch(y3.reshape(n, c, -1, oh, ow), unbatched)
    od = y3[0].shape[2]
    idx = _depth_indices(y2[1], y3[1], x.shape, (od, oh, ow))
    return _unbatch((y3[0].reshape(n, c, od, oh, ow), idx), unbatched)


def avg_pool3d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
) -> Tensor:
    """Mean over kD x kH x kW windows, as ``torch.nn.functional.avg_pool3d``: input
    (N, C, D, H, W) or (C, D, H, W), floating point -> (N, C, oD, oH, oW) with the output sizes,
    divisors, ``ceil_mode`` and ``count_include_pad`` rules of :func:`avg_pool2d` per axis (the
    divisor is the product of the per-axis counts, as PyTorch's); ``divisor_override`` divides
    each window's sum instead. Two avg_pool2d passes (module docstring), so float32 sums round
    in another order than PyTorch's single sum.

    Raises:
        ShapeError, ArgumentError, DTypeError: as :func:`avg_pool2d`, for 4-D or 5-D inputs.
    """
    name = "avg_pool3d"
    x, unbatched = _batched(name, input, 3)
    kernel, stride, padding = _window3d(name, kernel_size, stride, padding)
    if divisor_override is not None and (
        not isinstance(divisor_override, int) or isinstance(divisor_override, bool) or divisor_override == 0
    ):
        raise ArgumentError(f"{name}: divisor_override must be a nonzero int or None, got {divisor_override!r}")
    n, c, d, h, w = x.shape
    plane_divisor = None if divisor_override is None else 1  # sums first, one division at the end
    y = avg_pool2d(
        x.reshape(n, c * d, h, w), kernel[1:], stride[1:], padding[1:], ceil_mode, count_include_pad, plane_divisor
    )
    oh, ow = y.shape[2:]
    y = avg_pool2d(
        y.reshape(n, c, d, oh * ow),
        (kernel[0], 1),
        (stride[0], 1),
        (padding[0], 0),
        ceil_mode,
        count_include_pad,
        divisor_override,
    )
    return _unbatch(y.reshape(n, c, -1, oh, ow), unbatched)


def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows (those of :func:`adaptive_avg_pool2d`, per axis), as
    ``torch.nn.functional.adaptive_avg_pool3d``: input (N, C, D, H, W) or (C, D, H, W), floating
    point -> (N, C, oD, oH, oW); ``output_size`` an int or three (an entry None keeps that size).

    Raises:
        ShapeError: input not 4-D or 5-D, or an output size below 1. ArgumentError: a bad
        output_size. DTypeError: a non-floating input.
    """
    name = "adaptive_avg_pool3d"
    x, unbatched = _batched(name, input, 3)
    od, oh, ow = _adaptive_sizes(name, x, output_size, 3)
    n, c, d, h, w = x.shape
    y = adaptive_avg_pool2d(x.reshape(n, c * d, h, w), (oh, ow)).reshape(n, c, d, oh * ow)
    y = adaptive_avg_pool2d(y, (od, oh * ow))
    return _unbatch(y.reshape(n, c, od, oh, ow), unbatched)


def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    """Maximum over PyTorch's adaptive windows, as ``torch.nn.functional.adaptive_max_pool3d``:
    input (N, C, D, H, W) or (C, D, H, W), floating point -> (N, C, oD, oH, oW); the gradient goes
    to the first maximum of each window in (d, h, w) order. ``return_indices=True`` also returns
    the flat positions d*H*W + h*W + w, int64.

    Raises:
        ShapeError, ArgumentError, DTypeError: as :func:`adaptive_avg_pool3d`.
    """
    name = "adaptive_max_pool3d"
    x, unbatched = _batched(name, input, 3)
    od, oh, ow = _adaptive_sizes(name, x, output_size, 3)
    n, c, d, h, w = x.shape
    y2 = adaptive_max_pool2d(x.reshape(n, c * d, h, w), (oh, ow), return_indices=return_indices)
    v2 = y2[0] if return_indices else y2
    y3 = adaptive_max_pool2d(v2.reshape(n, c, d, oh * ow), (od, oh * ow), return_indices=return_indices)
    if not return_indices:
        return _unbatch(y3.reshape(n, c, od, oh, ow), unbatched)
    # adaptive_max_pool2d's indices are flat in the (D, oH*oW) plane too: d * (oH*oW) + j.
    idx = _depth_indices(y2[1], y3[1], x.shape, (od, oh, ow))
    return _unbatch((y3[0].reshape(n, c, od, oh, ow), idx), unbatched)


def _lp(pooled: Tensor, norm_type: float, count: int) -> Tensor:
    """PyTorch's ending of its lp pools: ``(sign(m) * relu(|m|) * count) ** (1 / p)``."""
    return (pooled.sign() * relu(pooled.abs()) * count) ** (1.0 / norm_type)


def _check_norm(name: str, input: Tensor, norm_type) -> float:
    if not isinstance(input, Tensor) or not input.dtype.is_floating_point:
        what = input.dtype.name if isinstance(input, Tensor) else type(input).__name__
        raise DTypeError(f"{name}: expected a floating-point input, got {what}")
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or norm_type == 0:
        raise ArgumentError(f"{name}: norm_type must be a nonzero number, got {norm_type!r}")
    return float(norm_type)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size: int, stride=None, ceil_mode: bool = False) -> Tensor:
    """Power-average pool, as ``torch.nn.functional.lp_pool1d``: ``(sum over the window of
    x**p) ** (1/p)``, computed as PyTorch does from an average pool of ``x**p`` (so a negative sum
    gives 0, and the gradient at a zero sum is PyTorch's). input (N, C, L) or (C, L); ``stride``
    defaults to ``kernel_size``, no padding.

    Raises: DTypeError (non-floating input), ArgumentError (norm_type 0), and as :func:`avg_pool1d`.
    """
    p = _check_norm("lp_pool1d", input, norm_type)
    (k,) = _tuple(kernel_size, 1, "lp_pool1d", "kernel_size")
    pooled = avg_pool1d(input**p, k, stride, 0, ceil_mode)
    return _lp(pooled, p, k)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """Power-average pool over kH x kW windows, as ``torch.nn.functional.lp_pool2d`` (see
    :func:`lp_pool1d`): input (N, C, H, W) or (C, H, W)."""
    p = _check_norm("lp_pool2d", input, norm_type)
    kernel = _tuple(kernel_size, 2, "lp_pool2d", "kernel_size")
    pooled = avg_pool2d(input**p, kernel, stride, 0, ceil_mode)
    return _lp(pooled, p, math.prod(kernel))


def lp_pool3d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """Power-average pool over kD x kH x kW windows, as ``torch.nn.functional.lp_pool3d`` (see
    :func:`lp_pool1d`): input (N, C, D, H, W) or (C, D, H, W)."""
    p = _check_norm("lp_pool3d", input, norm_type)
    kernel = _tuple(kernel_size, 3, "lp_pool3d", "kernel_size")
    pooled = avg_pool3d(input**p, kernel, stride, 0, ceil_mode)
    return _lp(pooled, p, math.prod(kernel))


def _unpool_size(name: str, spatial: tuple, kernel: tuple, stride: tuple, padding: tuple, output_size) -> tuple:
    """PyTorch's ``_unpool_output_size``: (in - 1) * stride - 2 * padding + kernel per axis, or
    ``output_size`` (its last len(kernel) entries) when it lies strictly within a stride of that."""
    default = tuple((i - 1) * s - 2 * p + k for i, k, s, p in zip(spatial, kernel, stride, padding))
    if output_size is None:
        return default
    size = tuple(int(v) for v in output_size)
    if len(size) == len(kernel) + 2:
        size = size[2:]
    if len(size) != len(kernel):
        raise ArgumentError(
            f"{name}: output_size should be a sequence of {len(kernel)} or {len(kernel) + 2} elements, "
            f"got {tuple(output_size)}"
        )
    for o, dflt, s in zip(size, default, stride):
        if not dflt - s < o < dflt + s:
            raise ArgumentError(
                f"{name}: invalid output_size {size} (each entry must lie strictly between "
                f"{tuple(v - s for v, s in zip(default, stride))} and {tuple(v + s for v, s in zip(default, stride))})"
            )
    return size


def _max_unpool(name: str, nd: int, input: Tensor, indices: Tensor, kernel_size, stride, padding, output_size):
    x, unbatched = _batched(name, input, nd)
    if not isinstance(indices, Tensor) or indices.dtype.category != 1:
        raise DTypeError(f"{name}: indices must be an integer tensor (as max_pool returns), got {indices!r}")
    if indices.shape != input.shape:
        raise ShapeError(f"{name}: indices shape {indices.shape} must equal the input shape {input.shape}")
    kernel = _tuple(kernel_size, nd, name, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, nd, name, "stride")
    padding = _tuple(padding, nd, name, "padding")
    size = _unpool_size(name, x.shape[2:], kernel, stride, padding, output_size)
    n, c = x.shape[:2]
    idx = (indices.unsqueeze(0) if unbatched else indices).reshape(n, c, -1)
    out = zeros(n, c, math.prod(size), dtype=x.dtype, device=x.device)
    flat = x.reshape(n, c, -1)
    y = out.scatter(2, idx, flat.detach())
    if flat.requires_grad:
        # PyTorch's gradient: every input reads the output's gradient at its index (a gather), also
        # where overlapping windows repeat an index (scatter's own gradient would split it among
        # the repeats). scatter_add carries that gradient; what it adds is zero.
        zero = where(flat.detach().isfinite(), flat - flat.detach(), 0.0)
        y = y + out.scatter_add(2, idx, zero)
    return _unbatch(y.reshape(n, c, *size), unbatched)


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """The partial inverse of ``max_pool1d(..., return_indices=True)``, as
    ``torch.nn.functional.max_unpool1d``: zeros of length (L - 1) * stride - 2 * padding +
    kernel_size (or ``output_size``), each input value written at its index. input and indices
    (N, C, L) or (C, L). Raises ShapeError, DTypeError, ArgumentError (a bad output_size); an
    index outside the output raises at the sync (the scatter's check)."""
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """The partial inverse of ``max_pool2d(..., return_indices=True)``, as
    ``torch.nn.functional.max_unpool2d``: input and indices (N, C, H, W) or (C, H, W) -> zeros of
    (N, C, oH, oW), oH = (H - 1) * sH - 2 * pH + kH (or ``output_size``), with each value written
    at its flat index h * oW + w. Errors as :func:`max_unpool1d`."""
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """The partial inverse of ``max_pool3d(..., return_indices=True)``, as
    ``torch.nn.functional.max_unpool3d`` (see :func:`max_unpool2d`): input and indices
    (N, C, D, H, W) or (C, D, H, W)."""
    return _max_unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)
