"""2-D average pooling, NCHW, as primitives: PyTorch's ``avg_pool2d`` and ``adaptive_avg_pool2d``,
each with its transpose (the input gradient) as a primitive of its own.

    avg_pool2d(x; kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
        x (N, C, H, W) -> (N, C, oH, oW): each window's sum divided by its divisor, with
        oH = (H + 2*pH - kH + (sH - 1 if ceil_mode else 0)) // sH + 1, less one when ceil_mode
        would start the last window past the input and the left padding (likewise oW)
    avg_pool2d_backward(g; the same attributes, input_size)
        g (N, C, oH, oW) -> (N, C, H, W), (H, W) = input_size: each window's g / divisor added
        back over the window
    adaptive_avg_pool2d(x; output_size)
        x (N, C, H, W) -> (N, C, oH, oW) = output_size: output row i averages the input rows
        floor(i*H/oH) .. ceil((i+1)*H/oH) - 1 (likewise columns)
    adaptive_avg_pool2d_backward(g; input_size)
        g (N, C, oH, oW) -> (N, C, H, W), the transpose of adaptive_avg_pool2d

Semantics are PyTorch's (``torch.nn.functional.avg_pool2d``, ``adaptive_avg_pool2d``). The
divisor of window (p, q) is ``divisor_override`` when given; else with ``count_include_pad`` the
window's size clipped to the padded input (a ceil_mode window overhanging the right padding
counts only up to it), else its number of input elements. PyTorch's CPU kernels compute the same.

Both ops are windows over the input, each given per axis as a table (``Windows``): the first
and end input row of each output row, clipped to the input, and the same for columns, plus the
divisor of each output. The NumPy references below and the kernels (lowering/cpu/pool_kernels.py,
lowering/cuda/kernel_lib.py) read the same tables and add in the same order, so they give the
same bits (DESIGN "one numerics"): a window's sum starts at +0.0 and adds its elements in
row-major order, then is divided by the divisor (float32 for float32 and half inputs, which the
front end widens; float64 for float64); the transpose adds, for each input position, g / divisor
of the windows covering it in row-major window order (a gather: no two writers, no races).
NaN payloads aside: where a NaN meets another (or inf meets -inf), which NaN comes out depends
on the operand order each compiler gives an addition. PyTorch's CPU kernels sum a window in
the same order: float32 outputs of PyTorch 2.13 had these bits in 268 of 268 configurations
tried (its adaptive pool to 1x1 sums otherwise).

The forward ops and their transposes are linear, so each VJP is the other with the same
attributes: double backward works.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from lazyvic.errors import ArgumentError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.ops.opdef import OpDef, register


class Windows(NamedTuple):
    """The windows of a 2-D average pool: input rows ``row_start[p] .. row_end[p] - 1`` and
    columns ``col_start[q] .. col_end[q] - 1`` (clipped to the input, never empty) make window
    (p, q), divided by ``divisor[p, q]`` (int64, (oH, oW))."""

    row_start: np.ndarray
    row_end: np.ndarray
    col_start: np.ndarray
    col_end: np.ndarray
    divisor: np.ndarray


def pooled_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """Windows along one axis, as PyTorch's ``pooling_output_shape`` (dilation 1): with
    ceil_mode a last, partial window is kept if it starts inside the input or the left padding."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _axis_windows(size: int, kernel: int, stride: int, pad: int, out: int, count_include_pad: bool) -> tuple:
    """(start, end, divisor factor) of each window along one axis (PyTorch's hstart, hend, and
    hend - hstart before or after clipping to the input)."""
    start = np.arange(out, dtype=np.int64) * stride - pad
    end = np.minimum(start + kernel, size + pad)
    factor = end - start
    start, end = np.maximum(start, 0), np.minimum(end, size)
    return start, end, factor if count_include_pad else end - start


def avg_windows(at: dict, in_hw: tuple, out_hw: tuple) -> Windows:
    """The windows of avg_pool2d (and avg_pool2d_backward) with attributes ``at``."""
    axes = [
        _axis_windows(int(n), k, s, p, int(o), at["count_include_pad"])
        for n, k, s, p, o in zip(in_hw, at["kernel"], at["stride"], at["padding"], out_hw)
    ]
    (r0, r1, fh), (c0, c1, fw) = axes
    d = at["divisor_override"]
    divisor = np.full((len(r0), len(c0)), d, dtype=np.int64) if d is not None else fh[:, None] * fw[None, :]
    return Windows(r0, r1, c0, c1, divisor)


def _adaptive_axis(size: int, out: int) -> tuple:
    i = np.arange(out, dtype=np.int64)
    return (i * size) // out, -((-(i + 1) * size) // out)


def adaptive_windows(at: dict, in_hw: tuple, out_hw: tuple) -> Windows:
    """The windows of adaptive_avg_pool2d (and its transpose): output row i covers input rows
    floor(i*H/oH) .. ceil((i+1)*H/oH) - 1, likewise columns (PyTorch's start_index, end_index)."""
    (r0, r1), (c0, c1) = (_adaptive_axis(int(n), int(o)) for n, o in zip(in_hw, out_hw))
    return Windows(r0, r1, c0, c1, (r1 - r0)[:, None] * (c1 - c0)[None, :])


def covering(start: np.ndarray, end: np.ndarray, size: int) -> tuple:
    """Per input index y along one axis, the windows that cover it: ``first[y] .. last[y] - 1``
    (starts and ends never decrease, so they are a contiguous run; empty where none does)."""
    y = np.arange(size, dtype=np.int64)
    return np.searchsorted(end, y, side="right").astype(np.int64), np.searchsorted(start, y, side="right").astype(
        np.int64
    )


def window_mean(x: np.ndarray, win: Windows) -> np.ndarray:
    """Each window's sum, from +0.0 in row-major order, divided by its divisor (the reference of
    avg_pool2d and adaptive_avg_pool2d; the kernels add in the same order)."""
    n, c, h, w = x.shape
    acc = np.zeros((n, c, len(win.row_start), len(win.col_start)), dtype=x.dtype)
    with np.errstate(all="ignore"):  # inf - inf is a NaN, silently, as in the kernels
        for i in range(int((win.row_end - win.row_start).max(initial=0))):
            rows = win.row_start + i
            xr = x[:, :, np.minimum(rows, h - 1)]
            for j in range(int((win.col_end - win.col_start).max(initial=0))):
                cols = win.col_start + j
                inside = (rows < win.row_end)[:, None] & (cols < win.col_end)[None, :]
                acc = np.where(inside, acc + xr[:, :, :, np.minimum(cols, w - 1)], acc)
        return acc / win.divisor.astype(x.dtype)


def window_mean_transpose(g: np.ndarray, win: Windows, in_hw: tuple) -> np.ndarray:
    """For each input position, g / divisor of the windows covering it added from +0.0 in
    row-major window order (the reference of both backward ops; the kernels add in this order)."""
    h, w = in_hw
    p0, p1 = covering(win.row_start, win.row_end, h)
    q0, q1 = covering(win.col_start, win.col_end, w)
    oh, ow = g.shape[2:]
    acc = np.zeros(g.shape[:2] + (h, w), dtype=g.dtype)
    with np.errstate(all="ignore"):
        t = g / win.divisor.astype(g.dtype)
        for i in range(int((p1 - p0).max(initial=0))):
            ps = p0 + i
            tr = t[:, :, np.minimum(ps, oh - 1)]
            for j in range(int((q1 - q0).max(initial=0))):
                qs = q0 + j
                inside = (ps < p1)[:, None] & (qs < q1)[None, :]
                acc = np.where(inside, acc + tr[:, :, :, np.minimum(qs, ow - 1)], acc)
    return acc


# -- avg_pool2d ------------------------------------------------------------------------------
def _check_window_attrs(name: str, at: dict) -> None:
    (kh, kw), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0 or 2 * ph > kh or 2 * pw > kw:
        raise ArgumentError(
            f"{name}: kernel {at['kernel']} and stride {at['stride']} must be positive and padding "
            f"{at['padding']} between 0 and half the kernel"
        )
    d = at["divisor_override"]
    if d is not None and (not isinstance(d, int) or isinstance(d, bool) or d == 0):
        raise ArgumentError(f"{name}: divisor_override must be a nonzero int or None, got {d!r}")


def _pooled_hw(name: str, hw: tuple, at: dict, shape: tuple) -> tuple:
    out = tuple(
        pooled_size(n, k, s, p, at["ceil_mode"]) for n, k, s, p in zip(hw, at["kernel"], at["stride"], at["padding"])
    )
    if any(n < 1 for n in out):  # (each alone: min() of symbolic sizes would compare H with W)
        raise ShapeError(
            f"{name}: kernel {at['kernel']} (stride {at['stride']}, padding {at['padding']}) is larger than "
            f"the padded input {shape}: output size {out}"
        )
    return out


def _check_input(name: str, shape: tuple, dtype, what: str = "input") -> None:
    if len(shape) != 4:
        raise ShapeError(f"{name}: expected {what} (N, C, H, W), got shape {shape}")
    if not dtype.is_floating_point:
        raise DTypeError(f"{name}: expected a floating-point {what}, got {dtype.name}")


def _infer(shapes, dtypes, at):
    (xs,) = shapes
    _check_input("avg_pool2d", xs, dtypes[0])
    _check_window_attrs("avg_pool2d", at)
    return (xs[0], xs[1], *_pooled_hw("avg_pool2d", xs[2:], at, xs)), dtypes[0]


def _reference(arrays, at):
    (x,) = arrays
    return window_mean(x, avg_windows(at, x.shape[2:], _pooled_hw("avg_pool2d", x.shape[2:], at, x.shape)))


def _forward_attrs(at: dict) -> dict:
    return {k: v for k, v in at.items() if k != "input_size"}


def _vjp(g, x, out, at):
    (inp,) = x
    return (g.apply("avg_pool2d_backward", g, input_size=tuple(inp.shape[2:]), **at),)


def _onnx(b, names, at, shape, dtype):
    if at["divisor_override"] is not None:
        raise UnsupportedOpError(
            f"onnx export: avg_pool2d with divisor_override={at['divisor_override']} has no ONNX form "
            f"(AveragePool divides by the window's size)"
        )
    if at["ceil_mode"] and b.opset < 10:
        return None  # AveragePool has ceil_mode from opset 10
    (ph, pw) = at["padding"]
    y = b.node(
        "AveragePool",
        list(names),
        kernel_shape=list(at["kernel"]),
        strides=list(at["stride"]),
        pads=[ph, pw, ph, pw],
        ceil_mode=int(at["ceil_mode"]) if at["ceil_mode"] else None,
        count_include_pad=int(at["count_include_pad"]),
    )
    # Before opset 22, ONNX's ceil_mode output size keeps a last window that starts in the right
    # padding (onnxruntime drops it, as PyTorch does): a Slice crops to PyTorch's size either way.
    hw = b.shape_of(names[0])[2:]
    if not at["ceil_mode"] or b.opset >= 22:
        return y
    if any(type(v) is not int for v in (*hw, *shape[2:])):
        raise UnsupportedOpError(
            f"avg_pool2d: ceil_mode with dynamic spatial sizes {tuple(hw)} has no fixed crop to PyTorch's "
            f"output size before opset 22 (exporting at opset {b.opset}); export at opset 22 or fixed sizes"
        )
    kept = [(n + 2 * p - k + s - 1) // s + 1 for n, k, s, p in zip(hw, at["kernel"], at["stride"], at["padding"])]
    if tuple(kept) != tuple(shape[2:]):
        zeros, axes = np.zeros(2, dtype=np.int64), np.array([2, 3], dtype=np.int64)
        y = b.node("Slice", [y, b.const(zeros, "starts"), b.ints(shape[2:], "ends"), b.const(axes, "axes")])
    return y


def _backward_infer(shapes, dtypes, at):
    (gs,) = shapes
    _check_input("avg_pool2d_backward", gs, dtypes[0], "gradient")
    _check_window_attrs("avg_pool2d_backward", at)
    hw = tuple(at["input_size"])
    xs = (gs[0], gs[1], *hw)
    if tuple(gs[2:]) != _pooled_hw("avg_pool2d_backward", hw, at, xs):
        raise ShapeError(f"avg_pool2d_backward: gradient {gs} does not have avg_pool2d's output size for an input {xs}")
    return xs, dtypes[0]


def _backward_reference(arrays, at):
    (g,) = arrays
    hw = tuple(at["input_size"])
    return window_mean_transpose(g, avg_windows(at, hw, g.shape[2:]), hw)


def _backward_vjp(g, x, out, at):
    return (g.apply("avg_pool2d", g, **_forward_attrs(at)),)


# -- adaptive_avg_pool2d ---------------------------------------------------------------------
def _adaptive_infer(shapes, dtypes, at):
    (xs,) = shapes
    _check_input("adaptive_avg_pool2d", xs, dtypes[0])
    oh, ow = at["output_size"]
    if any(n < 1 for n in (oh, ow, *xs[2:])):
        raise ShapeError(
            f"adaptive_avg_pool2d: expected a positive output_size and a non-empty input, got output_size "
            f"{at['output_size']} for an input {xs}"
        )
    return (xs[0], xs[1], oh, ow), dtypes[0]


def _adaptive_reference(arrays, at):
    (x,) = arrays
    return window_mean(x, adaptive_windows(at, x.shape[2:], at["output_size"]))


def _adaptive_vjp(g, x, out, at):
    (inp,) = x
    return (g.apply("adaptive_avg_pool2d_backward", g, input_size=tuple(inp.shape[2:])),)


def _adaptive_onnx(b, names, at, shape, dtype):
    """GlobalAveragePool for a (1, 1) output, AveragePool when the windows tile the input
    (kernel = stride = H/oH, W/oW), else two MatMuls by the averaging matrices (the windows of
    uneven sizes: y = A_H @ x @ A_W^T)."""
    (oh, ow), (h, w) = at["output_size"], b.shape_of(names[0])[2:]
    if (oh, ow) == (1, 1):
        return b.node("GlobalAveragePool", list(names))
    if type(h) is not int or type(w) is not int:  # a dynamic spatial axis (an export SymInt): sizes vary
        return None
    if h % oh == 0 and w % ow == 0:
        kernel = [h // oh, w // ow]
        return b.node("AveragePool", list(names), kernel_shape=kernel, strides=kernel)
    win = adaptive_windows(at, (h, w), (oh, ow))
    rows = np.zeros((oh, h), dtype=dtype.np)
    cols = np.zeros((w, ow), dtype=dtype.np)
    for p in range(oh):
        rows[p, win.row_start[p] : win.row_end[p]] = 1.0 / (win.row_end[p] - win.row_start[p])
    for q in range(ow):
        cols[win.col_start[q] : win.col_end[q], q] = 1.0 / (win.col_end[q] - win.col_start[q])
    by_cols = b.node("MatMul", [names[0], b.const(cols, "adaptive_cols")])
    return b.node("MatMul", [b.const(rows, "adaptive_rows"), by_cols])


def _adaptive_backward_infer(shapes, dtypes, at):
    (gs,) = shapes
    _check_input("adaptive_avg_pool2d_backward", gs, dtypes[0], "gradient")
    hw = tuple(at["input_size"])
    if any(n < 1 for n in hw):
        raise ShapeError(f"adaptive_avg_pool2d_backward: expected a non-empty input_size, got {hw}")
    return (gs[0], gs[1], *hw), dtypes[0]


def _adaptive_backward_reference(arrays, at):
    (g,) = arrays
    hw = tuple(at["input_size"])
    return window_mean_transpose(g, adaptive_windows(at, hw, g.shape[2:]), hw)


def _adaptive_backward_vjp(g, x, out, at):
    (inp,) = x
    return (g.apply("adaptive_avg_pool2d", g, output_size=tuple(inp.shape[2:])),)


# Op -> (its windows as a function of (attributes, pooled input (H, W), pooled output (oH, oW)),
# whether the op is the transpose: it maps the pooled output back to the input). The kernels'
# steps read this table (lowering/cpu/backend.py, lowering/cuda/backend.py).
AVERAGE_POOLS = {
    "avg_pool2d": (avg_windows, False),
    "avg_pool2d_backward": (avg_windows, True),
    "adaptive_avg_pool2d": (adaptive_windows, False),
    "adaptive_avg_pool2d_backward": (adaptive_windows, True),
}

register(OpDef("avg_pool2d", "pool", 1, _infer, _reference, vjp=_vjp, onnx=_onnx))
register(OpDef("avg_pool2d_backward", "pool", 1, _backward_infer, _backward_reference, vjp=_backward_vjp))
register(
    OpDef(
        "adaptive_avg_pool2d", "pool", 1, _adaptive_infer, _adaptive_reference, vjp=_adaptive_vjp, onnx=_adaptive_onnx
    )
)
register(
    OpDef(
        "adaptive_avg_pool2d_backward",
        "pool",
        1,
        _adaptive_backward_infer,
        _adaptive_backward_reference,
        vjp=_adaptive_backward_vjp,
    )
)
