"""Vision functions: ``pad``, ``interpolate`` (and the older ``upsample*`` spellings),
``pixel_shuffle``, ``pixel_unshuffle``, ``channel_shuffle``, ``unfold``, ``fold``, ``affine_grid``
and ``grid_sample``."""

from __future__ import annotations

import math
import warnings

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import ArgumentError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.functional.pooling import adaptive_avg_pool1d, adaptive_avg_pool2d
from lazyvic.tensor import Tensor, where
from lazyvic.trace.composite import mark

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}  # -> NumPy


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions, as ``torch.nn.functional.pad``.

    ``pad`` lists (before, after) pairs from the last dimension backwards:
    ``(left, right, top, bottom, ...)``. Modes: ``constant`` (filled with ``value``), ``reflect``
    (mirrored without the edge; each pad smaller than the size), ``replicate`` (the edge
    repeated) and ``circular`` (wrapped; each pad at most the size). A negative size removes
    elements from that side instead (constant, reflect and replicate modes, as PyTorch: the
    positive pads are taken from the whole input first). Non-constant modes gather along each
    padded axis, so their VJP sums the gradient of repeated elements. Raises ValueError
    (ArgumentError) for a bad ``pad`` or mode.
    """
    pad = tuple(int(p) for p in pad)
    value = 0.0 if value is None else value
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ArgumentError(
            f"pad: expected an even number of sizes for at most {input.ndim} dims (input {input.shape}), got {pad}"
        )
    if mode not in _PAD_MODES:
        raise ArgumentError(f"pad: mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    pairs = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        pairs[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if any(p < 0 for p in pad):
        if mode == "circular":
            raise ArgumentError(f"pad: negative sizes are not supported in circular mode, got {pad}")
        for axis, (before, after) in enumerate(pairs):
            if input.shape[axis] + before + after < 0:
                raise ArgumentError(
                    f"pad: the size {input.shape[axis]} of dimension {axis} plus padding {(before, after)} "
                    f"is negative (input {input.shape}, pad {pad})"
                )
    grow = [(max(before, 0), max(after, 0)) for before, after in pairs]
    if mode == "constant":
        y = input._pad(tuple(grow))
        if value != 0:  # where, not y + mask * value: 0 * inf would be NaN inside
            border = np.pad(np.zeros(input.shape, dtype=bool), grow, constant_values=True)
            y = where(Tensor(border).to(input.device), value, y)
    else:
        y = input
        for axis, (before, after) in enumerate(grow):
            if before or after:
                n = input.shape[axis]
                limit = n - 1 if mode == "reflect" else (n if mode == "circular" else None)
                if limit is not None and max(before, after) > limit:
                    raise ArgumentError(
                        f"pad: {mode} padding of {(before, after)} is too large for dimension {axis} of "
                        f"size {n} (input {input.shape})"
                    )
                idx = np.pad(np.arange(n), (before, after), mode=_PAD_MODES[mode])
                y = y.index_select(axis, Tensor(idx).to(input.device))
    for axis, (before, after) in enumerate(pairs):
        if before < 0 or after < 0:
            cut_before, cut_after = max(-before, 0), max(-after, 0)
            y = y.narrow(axis, cut_before, y.shape[axis] - cut_before - cut_after)
    pads_onnx = Tensor(np.array([b for b, _ in pairs] + [a for _, a in pairs], dtype=np.int64))
    onnx_mode = {"replicate": "edge"}.get(mode, mode)
    if mode == "circular":
        return mark(y, "Pad", (input, pads_onnx), min_opset=19, mode="wrap")
    return mark(y, "Pad", (input, pads_onnx, Tensor(np.array(value, dtype=input.dtype.np))), mode=onnx_mode)


# ============================================================ shuffles
def _positive_factor(opname: str, name: str, factor) -> int:
    if not isinstance(factor, (int, np.integer)) or isinstance(factor, bool):
        raise ArgumentError(f"{opname}: {name} must be an int, got {factor!r}")
    if factor <= 0:
        raise ArgumentError(f"{opname}: expects a positive {name}, got {factor}")
    return int(factor)


def _need_3d(opname: str, input: Tensor) -> None:
    if input.ndim < 3:
        raise ShapeError(f"{opname}: expects input to have at least 3 dimensions, got shape {input.shape}")


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """Rearrange (*, C * r**2, H, W) into (*, C, H * r, W * r), r = ``upscale_factor``
    (``torch.nn.functional.pixel_shuffle``; Shi et al., "Real-Time Single Image and Video
    Super-Resolution Using an Efficient Sub-Pixel Convolutional Neural Network", 2016): channel
    ``c * r**2 + i * r + j`` goes to the pixel at offset (i, j) of each r x r block. Any dtype; a
    reshape, a permute and a reshape.

    Raises:
        ShapeError: fewer than 3 dimensions, or channels not divisible by r**2.
        ArgumentError: r not a positive int.
    """
    r = _positive_factor("pixel_shuffle", "upscale_factor", upscale_factor)
    _need_3d("pixel_shuffle", input)
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise ShapeError(
            f"pixel_shuffle: expects the channel dimension to be divisible by upscale_factor**2 = {r * r}, "
            f"but input.size(-3)={c} (input {input.shape})"
        )
    nb, oc = len(batch), c // (r * r)
    y = input.reshape(*batch, oc, r, r, h, w)
    y = y.permute(*range(nb), nb, nb + 3, nb + 1, nb + 4, nb + 2)  # (*, C, H, r, W, r)
    return y.reshape(*batch, oc, h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """Rearrange (*, C, H * r, W * r) into (*, C * r**2, H, W), r = ``downscale_factor``: the
    inverse of :func:`pixel_shuffle` (``torch.nn.functional.pixel_unshuffle``). Any dtype.

    Raises:
        ShapeError: fewer than 3 dimensions, or height or width not divisible by r.
        ArgumentError: r not a positive int.
    """
    r = _positive_factor("pixel_unshuffle", "downscale_factor", downscale_factor)
    _need_3d("pixel_unshuffle", input)
    *batch, c, h, w = input.shape
    for name, axis, size in (("height", -2, h), ("width", -1, w)):
        if size % r:
            raise ShapeError(
                f"pixel_unshuffle: expects {name} to be divisible by downscale_factor {r}, "
                f"but input.size({axis})={size} (input {input.shape})"
            )
    nb = len(batch)
    y = input.reshape(*batch, c, h // r, r, w // r, r)
    y = y.permute(*range(nb), nb, nb + 2, nb + 4, nb + 1, nb + 3)  # (*, C, r, r, H, W)
    return y.reshape(*batch, c * r * r, h // r, w // r)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Interleave the channels of (N, C, *) from ``groups`` groups (``torch.nn.functional.
    channel_shuffle``; Zhang et al., "ShuffleNet", 2017): viewed as (N, groups, C / groups, *),
    the two group axes are swapped, so output channel ``k * groups + g`` is input channel
    ``g * (C / groups) + k``. Any dtype.

    Raises:
        ShapeError: fewer than 3 dimensions, or C not divisible by ``groups``.
        ArgumentError: ``groups`` not a positive int.
    """
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups <= 0:
        raise ArgumentError(f"channel_shuffle: number of groups to divide channels in must be positive, got {groups!r}")
    if input.ndim < 3:
        raise ShapeError(f"channel_shuffle: expects input with > 2 dims, got shape {input.shape}")
    n, c, *rest = input.shape
    if c % groups:
        raise ShapeError(
            f"channel_shuffle: number of channels must be divisible by groups, got {c} channels and {groups} groups"
        )
    y = input.reshape(n, int(groups), c // groups, *rest).transpose(1, 2)
    return y.reshape(n, c, *rest)


# ================================================================= interpolate
_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}
_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "area", "bicubic")


def _nearest_index(in_size: int, out_size: int, scale, exact: bool, np_float) -> np.ndarray:
    """PyTorch's ``nearest_idx`` (UpSample.h): ``min(floor(dst * s), in - 1)`` with s = 1 / scale_factor
    when given, else in / out, computed in the input's float type (``+ 0.5`` for nearest-exact)."""
    dst = np.arange(out_size)
    if out_size == in_size:
        return dst
    if out_size == 2 * in_size and not exact:
        return dst >> 1
    s = np_float(1.0 / scale) if scale is not None and scale > 0 else np_float(in_size) / np_float(out_size)
    offset = np_float(0.5) if exact else np_float(0.0)
    src = np.floor((dst.astype(np_float) + offset) * s).astype(np.int64)
    return np.minimum(src, in_size - 1)


def _linear_weights(in_size: int, out_size: int, scale, align_corners: bool, np_float) -> tuple:
    """PyTorch's ``compute_source_index_and_lambda`` (UpSample.h): for each output position the two
    input positions i0, i1 and their weights (1 - l, l), computed in the input's float type."""
    dst = np.arange(out_size).astype(np_float)
    if out_size == in_size:
        i0 = np.arange(out_size)
        return i0, i0, np.ones(out_size, np_float), np.zeros(out_size, np_float)
    if align_corners:
        s = np_float(in_size - 1) / np_float(out_size - 1) if out_size > 1 else np_float(0)
        src = s * dst
    else:
        s = np_float(1.0 / scale) if scale is not None and scale > 0 else np_float(in_size) / np_float(out_size)
        src = np.maximum(s * (dst + np_float(0.5)) - np_float(0.5), np_float(0))
    i0 = np.minimum(src.astype(np.int64), in_size - 1)
    lam = np.clip(src - i0.astype(np_float), 0, 1).astype(np_float)
    i1 = i0 + (i0 < in_size - 1)
    return i0, i1, (np_float(1) - lam).astype(np_float), lam


def _along(x: Tensor, axis: int, values: np.ndarray) -> Tensor:
    """``values`` (out,) as a tensor that broadcasts along ``axis`` of x."""
    shape = (len(values),) + (1,) * (x.ndim - axis - 1)
    return Tensor(values.reshape(shape)).to(x.device)


def _index(x: Tensor, idx: np.ndarray) -> Tensor:
    return Tensor(np.ascontiguousarray(idx, dtype=np.int64)).to(x.device)


def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial axes of input (N, C, *spatial) (1 to 3 of them), as
    ``torch.nn.functional.interpolate``.

    Give ``size`` (an int or one per axis) or ``scale_factor`` (output size ``floor(in * scale)``).
    Modes: ``nearest`` (PyTorch's legacy rule ``floor(dst * in / out)``), ``nearest-exact``,
    ``linear`` (3-D input), ``bilinear`` (4-D), ``trilinear`` (5-D) — separable linear
    interpolation with PyTorch's source positions, with or without ``align_corners`` — and
    ``area`` (adaptive average pooling). Positions and weights are computed as PyTorch's
    ``UpSample.h`` does, in the input's float type; the result gathers rows along each axis, so its
    VJP is a scatter-add. ``bicubic`` and ``antialias=True`` raise UnsupportedOpError.

    Raises ValueError for a missing or doubled size/scale, ``align_corners`` with a nearest mode,
    or a size/scale of the wrong length; ShapeError for a mode that does not fit the input's rank.
    """
    if mode not in _MODES:
        raise ArgumentError(f"interpolate: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if mode == "bicubic" or antialias:
        raise UnsupportedOpError(
            f"interpolate: mode={mode!r}{' with antialias=True' if antialias else ''} is not supported "
            f"(nearest, nearest-exact, linear, bilinear, trilinear and area are)"
        )
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ArgumentError(
                "interpolate: align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    elif align_corners is None:
        align_corners = False
    nd = input.ndim - 2
    if nd not in (1, 2, 3):
        raise ShapeError(
            f"interpolate: expected input (N, C, d1[, d2[, d3]]) with 1 to 3 spatial axes, got {input.shape}"
        )
    if mode in _LINEAR_MODES and _LINEAR_MODES[mode] != nd:
        want = _LINEAR_MODES[mode] + 2
        raise ShapeError(f"interpolate: mode {mode!r} needs a {want}-D input, got {input.ndim}-D shape {input.shape}")
    spatial = input.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ArgumentError("interpolate: give exactly one of size or scale_factor")
    if size is not None:
        if recompute_scale_factor:
            raise ArgumentError("interpolate: recompute_scale_factor is not meaningful with an explicit size")
        sizes = list(size) if isinstance(size, (tuple, list)) else [size] * nd
        if len(sizes) != nd:
            raise ArgumentError(f"interpolate: size {size} must have one entry per spatial axis of input {input.shape}")
        sizes = [int(s) for s in sizes]
        scales = [None] * nd
    else:
        scales = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor] * nd
        if len(scales) != nd:
            raise ArgumentError(
                f"interpolate: scale_factor {scale_factor} must have one entry per spatial axis of input {input.shape}"
            )
        scales = [float(s) for s in scales]
        sizes = [int(math.floor(n * s)) for n, s in zip(spatial, scales)]
        if recompute_scale_factor or mode == "area":
            scales = [None] * nd
    if any(s < 1 for s in sizes):
        raise ShapeError(f"interpolate: output size {tuple(sizes)} must be positive (input {input.shape})")
    if mode == "area":
        if nd == 1:
            return adaptive_avg_pool1d(input, sizes[0])
        if nd == 2:
            return adaptive_avg_pool2d(input, sizes)
        raise UnsupportedOpError(f"interpolate: mode 'area' on a 5-D input {input.shape} is not supported")
    if not mode.startswith("nearest") and not input.dtype.is_floating_point:
        raise DTypeError(f"interpolate: mode {mode!r} needs a floating-point input, got {input.dtype.name}")
    np_float = np.float64 if input.dtype.name == "float64" else np.float32
    x = input
    # The last axis first: PyTorch's kernels nest the interpolation of the first axis outermost.
    for k in reversed(range(nd)):
        axis, n, o, s = 2 + k, spatial[k], sizes[k], scales[k]
        if mode.startswith("nearest"):
            if o != n:
                x = x.index_select(axis, _index(x, _nearest_index(n, o, s, mode == "nearest-exact", np_float)))
            continue
        if o == n:
            continue
        i0, i1, w0, w1 = _linear_weights(n, o, s, align_corners, np_float)
        dt_np = x.dtype.np
        x0 = x.index_select(axis, _index(x, i0))
        if not w1.any():
            x = x0
            continue
        x1 = x.index_select(axis, _index(x, i1))
        x = x0 * _along(x, axis, w0.astype(dt_np)) + x1 * _along(x, axis, w1.astype(dt_np))
    return x


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None) -> Tensor:
    """Deprecated spelling of :func:`interpolate` (PyTorch warns the same)."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated: ``interpolate(input, size, scale_factor, mode='nearest')``."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated: ``interpolate(input, size, scale_factor, mode='bilinear', align_corners=True)``."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ------------------------------------------------------------------ unfold / fold (im2col)
def _pair(opname: str, name: str, v, least: int) -> tuple:
    t = (int(v), int(v)) if isinstance(v, (int, np.integer)) else tuple(int(a) for a in v)
    if len(t) != 2 or min(t) < least:
        raise ArgumentError(f"{opname}: {name} must be an int or a pair of ints >= {least}, got {v!r}")
    return t


def _patches(opname, size_hw, kernel_size, dilation, padding, stride) -> tuple:
    """``(padded (Hp, Wp), the flat index (kh*kw*L,) of each patch element in the padded plane,
    kernel (kh, kw), padding, L)``; raises ShapeError when no block fits."""
    (kh, kw), (dh, dw) = _pair(opname, "kernel_size", kernel_size, 1), _pair(opname, "dilation", dilation, 1)
    (ph, pw), (sh, sw) = _pair(opname, "padding", padding, 0), _pair(opname, "stride", stride, 1)
    hp, wp = size_hw[0] + 2 * ph, size_hw[1] + 2 * pw
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"{opname}: no {kh}x{kw} block (dilation {(dh, dw)}) fits a {size_hw[0]}x{size_hw[1]} plane "
            f"padded by {(ph, pw)}"
        )
    rows = (np.arange(kh)[:, None] * dh)[:, :, None, None] + (np.arange(oh) * sh)[None, None, :, None]
    cols = (np.arange(kw)[None, :] * dw)[:, :, None, None] + (np.arange(ow) * sw)[None, None, None, :]
    flat = (rows * wp + cols).reshape(-1)  # (kh, kw, oh, ow): kernel offsets major, blocks minor
    return (hp, wp), flat, (kh, kw), (ph, pw), oh * ow


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding blocks as columns (im2col, ``torch.nn.functional.unfold``): (N, C, H, W) ->
    (N, C * kh * kw, L), L the number of blocks; an unbatched (C, H, W) -> (C * kh * kw, L). Row
    c * kh * kw + i * kw + j of a column holds channel c at kernel offset (i, j). A gather of the
    zero-padded input (its VJP an index_add). Raises ShapeError for another rank or when no block
    fits, ArgumentError for bad sizes."""
    if input.ndim not in (3, 4):
        raise ShapeError(f"unfold: expected a (N, C, H, W) or (C, H, W) input, got shape {input.shape}")
    x = input if input.ndim == 4 else input.unsqueeze(0)
    n, c, h, w = x.shape
    (hp, wp), flat, (kh, kw), (ph, pw), blocks = _patches("unfold", (h, w), kernel_size, dilation, padding, stride)
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph))
    cols = x.reshape(n, c, hp * wp).index_select(2, _index(x, flat)).reshape(n, c * kh * kw, blocks)
    return cols if input.ndim == 4 else cols.squeeze(0)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The adjoint of :func:`unfold` (col2im, ``torch.nn.functional.fold``): (N, C * kh * kw, L)
    -> (N, C, H, W) with ``output_size`` (H, W), each column's values added into its block
    (overlaps sum); unbatched (C * kh * kw, L) -> (C, H, W). An index_add into a zero-padded
    plane, then the padding cropped. Raises ShapeError when the columns do not match the blocks
    of ``output_size``."""
    if input.ndim not in (2, 3):
        raise ShapeError(f"fold: expected a (N, C*kh*kw, L) or (C*kh*kw, L) input, got shape {input.shape}")
    cols = input if input.ndim == 3 else input.unsqueeze(0)
    h, w = _pair("fold", "output_size", output_size, 1)
    (hp, wp), flat, (kh, kw), (ph, pw), blocks = _patches("fold", (h, w), kernel_size, dilation, padding, stride)
    n, rows, length = cols.shape
    if rows % (kh * kw) or length != blocks:
        raise ShapeError(
            f"fold: input {input.shape} does not match {kh}x{kw} blocks over {(h, w)}: expected "
            f"(N, C*{kh * kw}, {blocks})"
        )
    c = rows // (kh * kw)
    plane = cols.new_zeros(n, c, hp * wp).index_add(2, _index(cols, flat), cols.reshape(n, c, kh * kw * blocks))
    out = plane.reshape(n, c, hp, wp)[:, :, ph : ph + h, pw : pw + w]
    return out if input.ndim == 3 else out.squeeze(0)


# ------------------------------------------------------------------ affine_grid / grid_sample
def _base_coords(n: int, align_corners: bool, np_float) -> np.ndarray:
    """The normalized coordinates [-1, 1] of ``n`` pixel centers (align_corners: of the corner
    pixels' centers at -1 and 1; else of the pixels' edges at -1 and 1)."""
    if align_corners:
        return np.linspace(-1.0, 1.0, n).astype(np_float) if n > 1 else np.zeros(1, np_float)
    return ((np.arange(n) * 2 + 1) / n - 1).astype(np_float)


def affine_grid(theta: Tensor, size, align_corners: bool = False) -> Tensor:
    """The sampling grid of a batch of 2-D affine maps (``torch.nn.functional.affine_grid``, the
    spatial transformer's): theta (N, 2, 3), size (N, C, H, W) -> (N, H, W, 2), each output pixel's
    normalized (x, y) = theta @ (x, y, 1) of its own normalized coordinates. Differentiable in
    theta. Raises ShapeError for theta not (N, 2, 3) or a size not 4 long with theta's N."""
    size = tuple(int(v) for v in size)
    if theta.ndim != 3 or theta.shape[1:] != (2, 3) or len(size) != 4 or size[0] != theta.shape[0]:
        raise ShapeError(
            f"affine_grid: expected theta (N, 2, 3) and size (N, C, H, W) with the same N, got {theta.shape} and {size}"
        )
    if not theta.dtype.is_floating_point:
        raise DTypeError(f"affine_grid: expected a floating-point theta, got {theta.dtype}")
    n, _, h, w = size
    np_float = theta.dtype.np
    xs, ys = _base_coords(w, align_corners, np_float), _base_coords(h, align_corners, np_float)
    base = np.stack([np.broadcast_to(xs, (h, w)), np.broadcast_to(ys[:, None], (h, w)), np.ones((h, w), np_float)], -1)
    base = Tensor(np.ascontiguousarray(base.reshape(1, h * w, 3))).to(theta.device)
    return (base @ theta.transpose(1, 2)).reshape(n, h, w, 2)


def _unnormalize(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    return (coord + 1.0) * ((size - 1) / 2.0) if align_corners else ((coord + 1.0) * size - 1.0) / 2.0


def grid_sample(
    input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners=None
) -> Tensor:
    """Sample ``input`` (N, C, H, W) at ``grid`` (N, Ho, Wo, 2) of normalized (x, y) in [-1, 1]
    (``torch.nn.functional.grid_sample``) -> (N, C, Ho, Wo). ``mode`` "bilinear" (the four
    neighbours weighted; differentiable in input and grid) or "nearest" (the nearest pixel,
    halves to even; no gradient to the grid); ``padding_mode`` "zeros" (outside pixels read 0) or
    "border" (coordinates clamped to the edge). ``align_corners`` as PyTorch (default False).
    Computed as gathers of the flattened planes, so the input's gradient is their scatter-add.
    Raises ShapeError for shapes that do not fit, UnsupportedOpError for another mode (bicubic)
    or padding (reflection)."""
    if mode not in ("bilinear", "nearest"):
        raise UnsupportedOpError(f"grid_sample: mode {mode!r} is not supported (bilinear, nearest)")
    if padding_mode not in ("zeros", "border"):
        raise UnsupportedOpError(f"grid_sample: padding_mode {padding_mode!r} is not supported (zeros, border)")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise ShapeError(
            f"grid_sample: expected input (N, C, H, W) and grid (N, Ho, Wo, 2) with the same N, got {input.shape} and {grid.shape}"
        )
    align = bool(align_corners)
    n, c, h, w = input.shape
    _, ho, wo, _ = grid.shape
    g = grid.to(input.dtype) if grid.dtype != input.dtype else grid
    ix, iy = _unnormalize(g[..., 0], w, align), _unnormalize(g[..., 1], h, align)
    if padding_mode == "border":
        ix, iy = ix.clamp(0.0, w - 1.0), iy.clamp(0.0, h - 1.0)
    planes = input.reshape(n, c, h * w)

    def tap(xi: Tensor, yi: Tensor) -> Tensor:
        """The input at integer coordinates (float tensors), 0 outside the plane: (N, C, Ho*Wo)."""
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        flat = (yi.clamp(0.0, h - 1.0) * w + xi.clamp(0.0, w - 1.0)).to(dt.int64).reshape(n, 1, ho * wo)
        vals = planes.gather(2, flat.expand(n, c, ho * wo))
        return where(inside.reshape(n, 1, ho * wo), vals, 0.0)

    if mode == "nearest":
        out = tap(ix.round(), iy.round())
    else:
        x0, y0 = ix.floor(), iy.floor()
        wx1, wy1 = (ix - x0).reshape(n, 1, ho * wo), (iy - y0).reshape(n, 1, ho * wo)
        wx0, wy0 = 1.0 - wx1, 1.0 - wy1
        out = (
            tap(x0, y0) * (wx0 * wy0)
            + tap(x0 + 1.0, y0) * (wx1 * wy0)
            + tap(x0, y0 + 1.0) * (wx0 * wy1)
            + tap(x0 + 1.0, y0 + 1.0) * (wx1 * wy1)
        )
    return out.reshape(n, c, ho, wo)
