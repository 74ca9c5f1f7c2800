"""Convolutions: Conv ConvTranspose (1-D, 2-D and 3-D; the conv2d and conv_transpose2d primitives
underneath: a 1-D convolution as a 2-D one over a unit height, a 3-D one as functional.conv3d's sum
of 2-D ones over its depth taps).

Conv-1 and ConvTranspose-1 are read as version 11, as onnxruntime does: version 11 rewrote the
documentation (ConvTranspose-1's text of SAME_UPPER/SAME_LOWER padding reads the other way round),
not onnxruntime's kernels, which give both versions the same results.
"""

from __future__ import annotations

from lazyvic import functional as F
from lazyvic.functional.convolution import transposed_conv2d
from lazyvic.functional.convolution3d import transposed_conv3d
from lazyvic.interop.onnx.converters.movement import pad_axes
from lazyvic.interop.onnx.converters.windows import lift_1d, spatial_attrs, spatial_pads, spatial_rank_check, to_2d
from lazyvic.interop.onnx.registry import register


def _conv_operands(ctx, a, w, b):
    """Conv and ConvTranspose inputs: ``(x, weight, bias, one_d, n_spatial, kernel)``; a 1-D
    convolution gets a unit height (``one_d``), a 3-D one (5-D input) stays as it is."""
    x, weight = ctx.tensor(a), ctx.tensor(w)
    bias = None if b is None else ctx.tensor(b)
    if weight.ndim != x.ndim:
        raise ctx.error(f"weight shape {weight.shape} does not fit input {x.shape}")
    one_d = False
    if x.ndim != 5:
        x, one_d = to_2d(ctx, x, "input")
    if one_d:
        weight = weight.unsqueeze(2)
    n_spatial = 1 if one_d else x.ndim - 2
    kernel = list(ctx.attr("kernel_shape", weight.shape[-n_spatial:]))
    return x, weight, bias, one_d, n_spatial, kernel


@register("Conv", since=(1, 11, 22), check=spatial_rank_check)
def conv(ctx, a, w, b=None):
    x, weight, bias, one_d, n_spatial, kernel = _conv_operands(ctx, a, w, b)
    if tuple(kernel) != tuple(weight.shape[-n_spatial:]):
        raise ctx.error(f"kernel_shape {kernel} does not match weight shape {weight.shape}")
    strides, dilations = spatial_attrs(ctx, n_spatial, kernel)
    pairs, _ = spatial_pads(ctx, x.shape[-n_spatial:], kernel, strides, dilations)
    if one_d:
        kernel, strides, dilations, pairs = (
            lift_1d(kernel, 1),
            lift_1d(strides, 1),
            lift_1d(dilations, 1),
            [(0, 0), *pairs],
        )
    padding = [0] * len(pairs)
    if all(p == q for p, q in pairs):
        padding = [p for p, _ in pairs]
    else:
        x = pad_axes(x, pairs, 0)
    y = (F.conv3d if x.ndim == 5 else F.conv2d)(
        x,
        weight,
        bias,
        stride=tuple(strides),
        padding=tuple(padding),
        dilation=tuple(dilations),
        groups=int(ctx.attr("group", 1)),
    )
    return y.squeeze(2) if one_d else y


def _conv_transpose_pads(ctx, sizes, kernel, strides, dilations):
    """(begin, end) padding per spatial axis and output_padding, from pads / output_shape / auto_pad
    (the spec's ConvTranspose formulas)."""
    n = len(sizes)
    out_pad = list(ctx.attr("output_padding", [0] * n))
    auto = ctx.attr("auto_pad", "NOTSET")
    target = ctx.attr("output_shape")
    if target is not None:
        target = list(target)[-n:]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [size * s for size, s in zip(sizes, strides)]
    if target is None:
        pads = [0] * (2 * n) if auto == "VALID" else list(ctx.attr("pads", [0] * (2 * n)))
        return [(pads[i], pads[i + n]) for i in range(n)], out_pad
    pairs = []
    for size, k, s, d, op, t in zip(sizes, kernel, strides, dilations, out_pad, target):
        total = s * (size - 1) + op + (k - 1) * d + 1 - t
        half = total // 2
        pairs.append((half, total - half) if auto == "SAME_UPPER" else (total - half, half))
    return pairs, out_pad


@register("ConvTranspose", since=(1, 11, 22), check=spatial_rank_check)
def conv_transpose(ctx, a, w, b=None):
    """The conv_transpose2d primitive (functional.convolution.transposed_conv2d; 3-D:
    functional.convolution3d.transposed_conv3d): the output window starts ``pads``' begin into
    the full result and has the spec's output size
    ``stride*(in - 1) + output_padding + dilation*(kernel - 1) + 1 - begin - end``."""
    x, weight, bias, one_d, n_spatial, kernel = _conv_operands(ctx, a, w, b)
    strides, dilations = spatial_attrs(ctx, n_spatial, kernel)
    pairs, out_pad = _conv_transpose_pads(ctx, x.shape[-n_spatial:], kernel, strides, dilations)
    if one_d:
        kernel, strides, dilations = lift_1d(kernel, 1), lift_1d(strides, 1), lift_1d(dilations, 1)
        pairs, out_pad = [(0, 0), *pairs], [0, *out_pad]
    groups = int(ctx.attr("group", 1))
    c = x.shape[1]
    if weight.shape[0] != c or c % groups:
        raise ctx.error(f"weight shape {weight.shape} does not fit input {x.shape} with group={groups}")
    out_hw = [
        s * (size - 1) + op + d * (k - 1) + 1 - pb - pe
        for size, k, s, d, op, (pb, pe) in zip(x.shape[2:], kernel, strides, dilations, out_pad, pairs)
    ]
    if min(out_hw) < 1:
        raise ctx.error(f"output size {out_hw} is not positive for input {x.shape} and weight {weight.shape}")
    transposed = transposed_conv3d if x.ndim == 5 else transposed_conv2d
    y = transposed(
        x, weight, bias, tuple(strides), tuple(pb for pb, _ in pairs), tuple(out_hw), tuple(dilations), groups
    )
    return y.squeeze(2) if one_d else y
