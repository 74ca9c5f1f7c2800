"""3-D convolutions: ``conv3d`` and ``conv_transpose3d``, built on the 2-D primitives.

No new primitive: each is a sum over the kD depth taps of the kernel of one 2-D primitive each
(lazyvic/ops/conv.py's conv2d, lazyvic/ops/conv_transpose.py's conv_transpose2d), with the
depth slices folded into the batch axis, so they get the 2-D compiled kernels, VJPs and CUDA
steps as they are. The taps are added in a fixed order (kd = 0, 1, ...), so results are
deterministic. For the ONNX export each is marked as one Conv / ConvTranspose node with a 3-D
kernel (lazyvic.trace.composite). Formulas and output sizes are PyTorch's
(``torch.nn.Conv3d`` and ``torch.nn.ConvTranspose3d`` documentation).
"""

from __future__ import annotations

from lazyvic import dtypes as dt
from lazyvic.creation import zeros
from lazyvic.errors import ShapeError
from lazyvic.functional.convolution import (
    _check_conv,
    _check_positive,
    _check_transposed,
    _conv2d,
    _out_size,
    _padding,
    _tuple,
    transposed_conv2d,
)
from lazyvic.ops.conv_transpose import tap_range
from lazyvic.tensor import Tensor
from lazyvic.trace.composite import mark


def _add_bias(y: Tensor, bias) -> Tensor:
    """y (N, O, D, H, W) plus bias (O,) per channel (recorded as the 2-D convolutions add theirs)."""
    if bias is None:
        return y
    b = bias.reshape(1, y.shape[1], 1, 1, 1)
    return Tensor.apply("add", y, Tensor.apply("expand", b, shape=y.shape)) if b.dtype is y.dtype else y + b


def _check_kernel(name: str, weight: Tensor) -> None:
    if min(weight.shape[2:]) < 1:
        raise ShapeError(f"{name}: weight {weight.shape} has an empty kernel")


def _conv3d(input: Tensor, weight: Tensor, bias, stride: tuple, pads: tuple, dilation: tuple, groups: int) -> Tensor:
    """conv3d on checked 5-D operands; ``pads`` ((front, back), (top, bottom), (left, right)).

    Tap kd of the kernel reads, for output depth t, input depth t*sD + kd*dD - front: the
    strided slice of those depths, each an image of the batch (N*oD, C, H, W), convolved by
    w[:, :, kd] with conv2d gives the tap's share of every output (N, oD, O, oH, oW). Output
    depths whose tap reads the depth padding get zeros from it instead: the input is not
    padded along D, and only the depths a tap reads are convolved (as conv2d leaves out the
    taps that read padding only)."""
    n, c, d, h, w = input.shape
    kd = weight.shape[2]
    (sd, sh, sw), (dd, dh, dw), front = stride, dilation, pads[0][0]
    od = (d + sum(pads[0]) - dd * (kd - 1) - 1) // sd + 1
    depth_major = input.permute(0, 2, 1, 3, 4)  # (N, D, C, H, W): a depth slice is a batch of images
    total = None
    for k in range(kd):
        lo, hi = tap_range(k, dd, sd, front, od, d)  # the output depths that tap k reads the input for
        if lo == hi:
            continue
        first = lo * sd + k * dd - front
        images = depth_major._slice((0, first, 0, 0, 0), (n, first + (hi - lo - 1) * sd + 1, c, h, w), (1, sd, 1, 1, 1))
        y = _conv2d(
            images.reshape(n * (hi - lo), c, h, w), weight.select(2, k), None, (sh, sw), pads[1:], (dh, dw), groups
        )
        y = y.reshape(n, hi - lo, *y.shape[1:])._pad(((0, 0), (lo, od - hi), (0, 0), (0, 0), (0, 0)))
        total = y if total is None else total + y
    if total is None:  # every output depth reads the padding only: zeros, and zero gradients
        return _conv3d(
            input._pad(((0, 0), (0, 0), pads[0], (0, 0), (0, 0))), weight, bias, stride,
            ((0, 0), *pads[1:]), dilation, groups,
        )  # fmt: skip
    return _add_bias(total.permute(0, 2, 1, 3, 4), bias)


def conv3d(
    input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups: int = 1
) -> Tensor:
    """3-D cross-correlation, as ``torch.nn.functional.conv3d``.

    input (N, C, D, H, W) or (C, D, H, W), weight (O, C/groups, kD, kH, kW), bias (O,) ->
    (N, O, oD, oH, oW) with oD = (D + 2*pD - dD*(kD-1) - 1) // sD + 1 (likewise oH, oW), in the
    input's floating dtype (float16/bfloat16 computed in float32, rounded once). ``stride``,
    ``dilation``: an int or a triple; ``padding``: an int, a triple, ``'valid'`` (none) or
    ``'same'`` (output size = input size; stride 1 only; the odd one out after, as PyTorch).

    Computed as the sum over the kD depth taps of one conv2d each (module docstring).

    Raises:
        ShapeError: naming conv3d, when the ranks, the channels, the groups, the bias or the
            kernel extent (larger than the padded input) do not fit.
        ArgumentError (a ValueError): a stride or dilation below 1, a negative padding, a bad
            padding string, 'same' with a stride.
    """
    name = "conv3d"
    if _check_conv(name, 3, input, weight, bias, groups, transposed=False):
        return conv3d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0)
    _check_kernel(name, weight)
    stride, dilation = _tuple(stride, 3, name, "stride"), _tuple(dilation, 3, name, "dilation")
    _check_positive(name, "stride", stride)
    _check_positive(name, "dilation", dilation)
    kernel = tuple(weight.shape[2:])
    pads = _padding(name, padding, 3, kernel, stride, dilation)
    for axis in range(3):
        _out_size(
            name, input.shape[2 + axis] + sum(pads[axis]), kernel[axis], stride[axis], dilation[axis], input.shape
        )
    y = _conv3d(input, weight, bias, stride, pads, dilation, groups)
    return mark(
        y,
        "Conv",
        (input, weight, bias),
        kernel_shape=list(kernel),
        strides=list(stride),
        pads=[p for p, _ in pads] + [p for _, p in pads],
        dilations=list(dilation),
        group=groups,
    )


def transposed_conv3d(
    input: Tensor, weight: Tensor, bias, stride: tuple, begins: tuple, out_dhw: tuple, dilation: tuple, groups: int
) -> Tensor:
    """The 3-D transposed convolution on checked 5-D operands: input (N, C_in, D, H, W), weight
    (C_in, C_out/groups, kD, kH, kW) -> (N, C_out, *out_dhw), the window of the full result
    (input position p, tap i landing at p*s + i*d) that starts ``begins`` (front, top, left)
    into it; positions no input reaches are zero (PyTorch's output_padding, ONNX's
    output_shape). The ONNX importer's ConvTranspose with asymmetric pads comes here too.

    Tap kd of the kernel is one conv_transpose2d of the input depths as images (N*D, C_in, H,
    W) by w[:, :, kd]; input depth p's result lands at output depth p*sD + kd*dD - front, so the
    tap's results are spread sD apart (zeros between) and shifted into place, then the taps are
    added. Only the input depths whose tap lands inside the output are convolved."""
    n, cin, d, h, w = input.shape
    kd = weight.shape[2]
    (sd, dd), od, front = (stride[0], dilation[0]), out_dhw[0], begins[0]
    depth_major = input.permute(0, 2, 1, 3, 4)  # (N, D, C_in, H, W): a depth slice is a batch of images
    total = None
    for k in range(kd):
        lo, hi = tap_range(k, dd, sd, front, d, od)  # the input depths whose tap k lands in the output
        if lo == hi:
            continue
        first, span = lo * sd + k * dd - front, (hi - lo - 1) * sd + 1  # where depth lo lands; the extent
        images = depth_major._slice((0, lo, 0, 0, 0), (n, hi, cin, h, w), (1, 1, 1, 1, 1))
        y = transposed_conv2d(
            images.reshape(n * (hi - lo), cin, h, w), weight.select(2, k), None, stride[1:], begins[1:],
            out_dhw[1:], dilation[1:], groups,
        )  # fmt: skip
        y = y.reshape(n, hi - lo, *y.shape[1:])  # (N, depths, C_out, oH, oW)
        if sd > 1 and hi - lo > 1:  # sD - 1 zero depths after each depth
            spread = y.unsqueeze(2)._pad(((0, 0), (0, 0), (0, sd - 1), (0, 0), (0, 0), (0, 0)))
            y = spread.reshape(n, (hi - lo) * sd, *y.shape[2:]).narrow(1, 0, span)
        y = y._pad(((0, 0), (first, od - first - span), (0, 0), (0, 0), (0, 0)))
        total = y if total is None else total + y
    if total is None:  # every output position lies between the input's (an ONNX model can ask for that)
        cout = weight.shape[1] * groups
        total = zeros(n, od, cout, *out_dhw[1:], dtype=input.dtype, device=input.device)
    return _add_bias(total.permute(0, 2, 1, 3, 4), bias)


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> Tensor:
    """3-D transposed convolution ("deconvolution"), as ``torch.nn.functional.conv_transpose3d``.

    input (N, C_in, D, H, W) or (C_in, D, H, W), weight (C_in, C_out/groups, kD, kH, kW), bias
    (C_out,) -> (N, C_out, oD, oH, oW) with oD = (D - 1)*sD - 2*pD + dD*(kD - 1) + output_paddingD + 1
    (likewise oH, oW), in the input's floating dtype. ``stride``, ``padding``, ``output_padding``,
    ``dilation``: an int or a triple; ``output_padding`` must be smaller than the stride or the
    dilation along each axis.

    Computed as the sum over the kD depth taps of one conv_transpose2d each
    (:func:`transposed_conv3d`).

    Raises:
        ShapeError: naming conv_transpose3d, when the ranks, the channels, the groups or the bias
            do not fit, or the output would be empty.
        ArgumentError (a ValueError): a stride or dilation below 1, a negative padding or
            output_padding, an output_padding not smaller than the stride or the dilation.
    """
    name = "conv_transpose3d"
    if _check_conv(name, 3, input, weight, bias, groups, transposed=True):
        y = conv_transpose3d(input.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation)
        return y.squeeze(0)
    _check_kernel(name, weight)
    stride, padding = _tuple(stride, 3, name, "stride"), _tuple(padding, 3, name, "padding")
    output_padding, dilation = _tuple(output_padding, 3, name, "output_padding"), _tuple(dilation, 3, name, "dilation")
    _check_positive(name, "stride", stride)
    _check_positive(name, "dilation", dilation)
    _check_positive(name, "padding", padding, 0)
    _check_positive(name, "output_padding", output_padding, 0)
    _check_transposed(name, input, weight, stride, padding, output_padding, dilation)
    out_dhw = tuple(
        (size - 1) * s - 2 * p + d * (k - 1) + op + 1
        for size, k, s, p, op, d in zip(input.shape[2:], weight.shape[2:], stride, padding, output_padding, dilation)
    )
    y = transposed_conv3d(input, weight, bias, stride, padding, out_dhw, dilation, groups)
    return mark(
        y,
        "ConvTranspose",
        (input, weight, bias),
        kernel_shape=list(weight.shape[2:]),
        strides=list(stride),
        pads=list(padding) + list(padding),
        output_padding=list(output_padding),
        dilations=list(dilation),
        group=groups,
    )


# On half tensors: the convolution and the bias in float32, rounded once (PyTorch's CPU kernels).
dt.widen_halves(globals(), ("conv3d", "conv_transpose3d"))
