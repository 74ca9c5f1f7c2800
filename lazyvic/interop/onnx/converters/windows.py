"""Sliding-window arithmetic that Conv, ConvTranspose and the pools share (no op types here):
padding from ``pads`` / ``auto_pad`` / ``ceil_mode``, strides and dilations, and 1-D ops run as 2-D.
"""

from __future__ import annotations

from lazyvic.errors import UnsupportedOpError
from lazyvic.tensor import Tensor


def spatial_pads(ctx, sizes, kernel, strides, dilations, ceil_mode=False):
    """Begin/end padding per spatial axis from ``pads`` / ``auto_pad``, and the extra end padding
    that ``ceil_mode`` needs (windows that start in the right padding are dropped, as the spec
    says and onnxruntime does)."""
    n = len(sizes)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = list(ctx.attr("pads", [0] * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads {pads} must have {2 * n} entries for {n} spatial axes")
        pairs = [(pads[i], pads[i + n]) for i in range(n)]
    elif auto == "VALID":
        pairs = [(0, 0)] * n
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        pairs = []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            pairs.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    else:
        raise ctx.error(f"unknown auto_pad {auto!r}")
    extra = [0] * n
    if ceil_mode:
        for i, (size, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
            b, e = pairs[i]
            span = (k - 1) * d + 1
            out = -(-(size + b + e - span) // s) + 1
            if (out - 1) * s >= size + b:
                out -= 1
            extra[i] = max((out - 1) * s + span - (size + b + e), 0)
    return pairs, extra


def spatial_attrs(ctx, n_spatial: int, kernel):
    """``strides`` and ``dilations`` (default 1 per axis), checked against the kernel's rank."""
    strides = list(ctx.attr("strides", [1] * n_spatial))
    dilations = list(ctx.attr("dilations", [1] * n_spatial))
    if len(strides) != n_spatial or len(dilations) != n_spatial or len(kernel) != n_spatial:
        raise ctx.error(
            f"kernel {list(kernel)}, strides {strides} and dilations {dilations} must have {n_spatial} entries"
        )
    return strides, dilations


def spatial_rank_check(ctx):
    """Load-time check: 1, 2 or 3 spatial axes (lazyvic's conv2d and conv_transpose2d underneath)."""
    kernel = ctx.attr("kernel_shape")
    if kernel is not None and len(kernel) not in (1, 2, 3):
        return f"{ctx.op} with {len(kernel)} spatial axes (lazyvic has 1-D, 2-D and 3-D {ctx.op})"
    return None


def to_2d(ctx, x: Tensor, what: str):
    """(N, C, L) -> (N, C, 1, L) so 1-D ops run as 2-D ones; (N, C, H, W) unchanged."""
    if x.ndim == 3:
        return x.unsqueeze(2), True
    if x.ndim == 4:
        return x, False
    raise UnsupportedOpError(f"{ctx.label()}: {what} shape {x.shape}: lazyvic imports 1-D, 2-D and 3-D {ctx.op} only")


def lift_1d(values, fill):
    """A 1-D op's per-axis values with the unit height's value in front."""
    return [fill, *values]
