"""Convolutions: ``conv1d``, ``conv2d``, ``conv_transpose1d``, ``conv_transpose2d``.

Two primitives carry them all: ``conv2d`` (lazyvic/ops/conv.py: im2col and a BLAS product) and
its adjoint ``conv_transpose2d`` (lazyvic/ops/conv_transpose.py: a BLAS product and col2im, with
no zeros inserted by the stride; Dumoulin & Visin 2016, "A guide to convolution arithmetic for
deep learning", section 4). Each one's VJP is written with the other and conv2d's weight
gradient. A 1-D convolution is a 2-D one over a height of 1. The formulas and output sizes are
PyTorch's (``torch.nn.Conv2d`` and ``torch.nn.ConvTranspose2d`` documentation).
"""

from __future__ import annotations

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.tensor import Tensor, autocast_operands
from lazyvic.trace.composite import mark


def _tuple(value, n: int, name: str, what: str) -> tuple:
    """``value`` (an int or a sequence of ``n`` ints) as an ``n``-tuple of ints."""
    vals = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(vals) != n or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
        raise ArgumentError(f"{name}: {what} must be an int or a tuple of {n} ints, got {value!r}")
    return tuple(int(v) for v in vals)


def _pair(value, name: str, what: str) -> tuple:
    return _tuple(value, 2, name, what)


def _out_size(name: str, size: int, kernel: int, stride: int, dilation: int, shape: tuple) -> int:
    span = dilation * (kernel - 1) + 1
    if span > size:
        raise ShapeError(f"{name}: kernel extent {span} is larger than the padded input size {size} (input {shape})")
    return (size - span) // stride + 1


def _check_positive(name: str, what: str, values: tuple, minimum: int = 1) -> None:
    if any(v < minimum for v in values):
        raise ArgumentError(f"{name}: {what} must be at least {minimum}, got {values}")


def _check_conv(name: str, nd: int, input: Tensor, weight: Tensor, bias, groups: int, transposed: bool) -> bool:
    """Check the ranks, channels, groups and bias of a convolution over ``nd`` spatial axes; returns
    True for an unbatched input (C, *spatial)."""
    layout = ("(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)")[nd - 1]
    if input.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{name}: expected input {layout} or without the batch axis, got shape {input.shape}")
    kernel = (", k)", ", kH, kW)", ", kD, kH, kW)")[nd - 1]
    wlayout = ("(C_in, C_out/groups" if transposed else "(C_out, C_in/groups") + kernel
    if weight.ndim != nd + 2:
        raise ShapeError(f"{name}: expected weight {wlayout}, got shape {weight.shape}")
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ArgumentError(f"{name}: groups must be a positive int, got {groups!r}")
    c = input.shape[-nd - 1]
    if transposed:
        out = weight.shape[1] * groups
        if weight.shape[0] != c or c % groups:
            raise ShapeError(
                f"{name}: input {input.shape} has {c} channels; weight {weight.shape} {wlayout} expects "
                f"{weight.shape[0]}, divisible by groups={groups}"
            )
    else:
        out = weight.shape[0]
        if c % groups or out % groups:
            raise ShapeError(
                f"{name}: groups={groups} must divide input channels {c} and output channels {out} "
                f"(input {input.shape}, weight {weight.shape})"
            )
        if weight.shape[1] * groups != c:
            raise ShapeError(
                f"{name}: input {input.shape} has {c} channels, weight {weight.shape} expects "
                f"{weight.shape[1] * groups} (C/groups={weight.shape[1]}, groups={groups})"
            )
    if bias is not None and bias.shape != (out,):
        raise ShapeError(f"{name}: bias shape {bias.shape} does not fit weight shape {weight.shape} ({out} outputs)")
    return input.ndim == nd + 1


def _same_padding(name: str, kernel: tuple, stride: tuple, dilation: tuple) -> tuple:
    """``padding='same'``: (before, after) per spatial axis; the odd one out goes after (PyTorch)."""
    if any(s != 1 for s in stride):
        raise ArgumentError(f"{name}: padding='same' is not supported for strided convolutions (stride {stride})")
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple((t // 2, t - t // 2) for t in totals)


def _padding(name: str, padding, nd: int, kernel: tuple, stride: tuple, dilation: tuple) -> tuple:
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding == "same":
            return _same_padding(name, kernel, stride, dilation)
        raise ArgumentError(f"{name}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    p = _tuple(padding, nd, name, "padding")
    _check_positive(name, "padding", p, 0)
    return tuple((v, v) for v in p)


def _conv2d(input: Tensor, weight: Tensor, bias, stride: tuple, pads: tuple, dilation: tuple, groups: int) -> Tensor:
    """The conv2d primitive on checked 4-D operands; ``pads`` ((top, bottom), (left, right))."""
    o, _, kh, kw = weight.shape
    if pads[0][0] != pads[0][1] or pads[1][0] != pads[1][1]:  # asymmetric ('same' with an even kernel)
        input = input._pad(((0, 0), (0, 0), (0, pads[0][1] - pads[0][0]), (0, pads[1][1] - pads[1][0])))
    x, weight = autocast_operands(input, weight)
    y = Tensor.apply(
        "conv2d",
        x,
        weight,
        stride=stride,
        padding=(pads[0][0], pads[0][0], pads[1][0], pads[1][0]),
        dilation=dilation,
        groups=groups,
    )
    if bias is not None:
        b = bias.reshape(1, o, 1, 1)
        # The add recorded directly (the generic broadcasting path cost 2.5 us more per call:
        # 50 us of a 1.1 ms ResNet-18 forward at batch 1); mixed dtypes take the generic path.
        y = Tensor.apply("add", y, Tensor.apply("expand", b, shape=y.shape)) if b.dtype is y.dtype else y + b
    return y


def conv2d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``.

    input (N, C, H, W) or (C, H, W), weight (O, C/groups, kH, kW), bias (O,) -> (N, O, oH, oW) with
    oH = (H + 2*pH - dH*(kH-1) - 1) // sH + 1 (likewise oW). ``padding``: an int, a pair,
    ``'valid'`` (none) or ``'same'`` (output size = input size; stride 1 only). The bias is an
    elementwise add that fuses with what follows. Raises ShapeError naming conv2d when the ranks,
    channels, groups or kernel size do not fit the input; ValueError for bad arguments.
    """
    unbatched = _check_conv("conv2d", 2, input, weight, bias, groups, transposed=False)
    if unbatched:
        return conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    stride, dilation = _pair(stride, "conv2d", "stride"), _pair(dilation, "conv2d", "dilation")
    _check_positive("conv2d", "stride", stride)
    _check_positive("conv2d", "dilation", dilation)
    kh, kw = weight.shape[2:]
    pads = _padding("conv2d", padding, 2, (kh, kw), stride, dilation)
    _out_size("conv2d", input.shape[2] + sum(pads[0]), kh, stride[0], dilation[0], input.shape)
    _out_size("conv2d", input.shape[3] + sum(pads[1]), kw, stride[1], dilation[1], input.shape)
    y = _conv2d(input, weight, bias, stride, pads, dilation, groups)
    return mark(
        y,
        "Conv",
        (input, weight, bias),
        kernel_shape=[kh, kw],
        strides=list(stride),
        pads=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]],
        dilations=list(dilation),
        group=groups,
    )


def conv1d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """1-D cross-correlation, as ``torch.nn.functional.conv1d``: a 2-D one over a height of 1.

    input (N, C, L) or (C, L), weight (O, C/groups, k), bias (O,) -> (N, O, oL) with
    oL = (L + 2*p - d*(k-1) - 1) // s + 1. ``padding``: an int, ``'valid'`` or ``'same'``.
    Raises ShapeError naming conv1d when the ranks, channels, groups or kernel size do not fit.
    """
    unbatched = _check_conv("conv1d", 1, input, weight, bias, groups, transposed=False)
    if unbatched:
        return conv1d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    (s,), (d,) = _tuple(stride, 1, "conv1d", "stride"), _tuple(dilation, 1, "conv1d", "dilation")
    _check_positive("conv1d", "stride", (s,))
    _check_positive("conv1d", "dilation", (d,))
    k = weight.shape[2]
    (pad,) = _padding("conv1d", padding, 1, (k,), (s,), (d,))
    _out_size("conv1d", input.shape[2] + sum(pad), k, s, d, input.shape)
    y = _conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), ((0, 0), pad), (1, d), groups).squeeze(2)
    return mark(
        y,
        "Conv",
        (input, weight, bias),
        kernel_shape=[k],
        strides=[s],
        pads=[pad[0], pad[1]],
        dilations=[d],
        group=groups,
    )


def _check_transposed(name, input, weight, stride, padding, output_padding, dilation) -> None:
    """Raise unless output_padding < max(stride, dilation) and every output size is positive
    (the arguments are per spatial axis, as the caller gave them)."""
    for s, d, op in zip(stride, dilation, output_padding):
        if op >= max(s, d):
            raise ArgumentError(
                f"{name}: output_padding {output_padding} must be smaller than either stride {stride} or "
                f"dilation {dilation}"
            )
    for size, k, s, p, op, d in zip(input.shape[2:], weight.shape[2:], stride, padding, output_padding, dilation):
        out = (size - 1) * s - 2 * p + d * (k - 1) + op + 1
        if out < 1:
            raise ShapeError(
                f"{name}: the output size {out} is not positive for input {input.shape}, weight {weight.shape}, "
                f"stride {stride}, padding {padding}, output_padding {output_padding}, dilation {dilation}"
            )


def transposed_conv2d(input: Tensor, weight: Tensor, bias, stride: tuple, pads: tuple, out_hw: tuple, dilation, groups):
    """The conv_transpose2d primitive (lazyvic/ops/conv_transpose.py) on checked 4-D operands:
    ``pads`` (top, left) where the output window starts in the full result, ``out_hw`` its size
    (the ONNX importer's ConvTranspose with asymmetric pads or output_shape comes here too)."""
    x, weight = autocast_operands(input, weight)
    y = Tensor.apply(
        "conv_transpose2d",
        x,
        weight,
        stride=tuple(stride),
        padding=tuple(pads),
        dilation=tuple(dilation),
        groups=groups,
        out_hw=tuple(out_hw),
    )
    if bias is not None:
        b = bias.reshape(1, y.shape[1], 1, 1)
        y = Tensor.apply("add", y, Tensor.apply("expand", b, shape=y.shape)) if b.dtype is y.dtype else y + b
    return y


def _conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation) -> Tensor:
    """The checked 4-D transposed convolution (see conv_transpose2d)."""
    out_hw = tuple(
        (size - 1) * s - 2 * p + d * (k - 1) + op + 1
        for size, k, s, p, op, d in zip(input.shape[2:], weight.shape[2:], stride, padding, output_padding, dilation)
    )
    return transposed_conv2d(input, weight, bias, stride, padding, out_hw, dilation, groups)


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> Tensor:
    """2-D transposed convolution ("deconvolution"), as ``torch.nn.functional.conv_transpose2d``.

    input (N, C_in, H, W) or (C_in, H, W), weight (C_in, C_out/groups, kH, kW), bias (C_out,) ->
    (N, C_out, oH, oW) with oH = (H - 1)*sH - 2*pH + dH*(kH - 1) + output_paddingH + 1 (likewise oW).
    ``output_padding`` must be smaller than the stride or the dilation. One primitive
    (conv_transpose2d: a BLAS product and a col2im sum, no zeros inserted by the stride; its VJP
    is conv2d and conv2d's weight gradient). Raises ShapeError naming conv_transpose2d when the ranks, channels or
    groups do not fit or the output would be empty; ValueError for bad arguments.
    """
    name = "conv_transpose2d"
    if _check_conv(name, 2, input, weight, bias, groups, transposed=True):
        y = conv_transpose2d(input.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation)
        return y.squeeze(0)
    stride, padding = _pair(stride, name, "stride"), _pair(padding, name, "padding")
    output_padding, dilation = _pair(output_padding, name, "output_padding"), _pair(dilation, name, "dilation")
    _check_positive(name, "stride", stride)
    _check_positive(name, "dilation", dilation)
    _check_positive(name, "padding", padding, 0)
    _check_positive(name, "output_padding", output_padding, 0)
    _check_transposed(name, input, weight, stride, padding, output_padding, dilation)
    y = _conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return mark(
        y,
        "ConvTranspose",
        (input, weight, bias),
        kernel_shape=list(weight.shape[2:]),
        strides=list(stride),
        pads=[padding[0], padding[1], padding[0], padding[1]],
        output_padding=list(output_padding),
        dilations=list(dilation),
        group=groups,
    )


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> Tensor:
    """1-D transposed convolution, as ``torch.nn.functional.conv_transpose1d`` (a 2-D one over a
    height of 1). input (N, C_in, L) or (C_in, L), weight (C_in, C_out/groups, k), bias (C_out,) ->
    (N, C_out, (L - 1)*s - 2*p + d*(k - 1) + output_padding + 1). Errors as conv_transpose2d."""
    name = "conv_transpose1d"
    if _check_conv(name, 1, input, weight, bias, groups, transposed=True):
        y = conv_transpose1d(input.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation)
        return y.squeeze(0)
    (s,), (p,) = _tuple(stride, 1, name, "stride"), _tuple(padding, 1, name, "padding")
    (op,), (d,) = _tuple(output_padding, 1, name, "output_padding"), _tuple(dilation, 1, name, "dilation")
    _check_positive(name, "stride", (s,))
    _check_positive(name, "dilation", (d,))
    _check_positive(name, "padding", (p,), 0)
    _check_positive(name, "output_padding", (op,), 0)
    _check_transposed(name, input, weight, (s,), (p,), (op,), (d,))
    y = _conv_transpose2d(input.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), (0, op), groups, (1, d))
    y = y.squeeze(2)
    return mark(
        y,
        "ConvTranspose",
        (input, weight, bias),
        kernel_shape=[weight.shape[2]],
        strides=[s],
        pads=[p, p],
        output_padding=[op],
        dilations=[d],
        group=groups,
    )


# On half tensors: the convolution and the bias in float32, rounded once (PyTorch's CPU kernels).
dt.widen_halves(globals(), ("conv2d", "conv1d", "conv_transpose2d", "conv_transpose1d"))
