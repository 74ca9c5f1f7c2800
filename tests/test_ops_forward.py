"""Forward values and dtypes of every primitive and of the public Tensor API, against NumPy.

Each test runs twice through the ``mode`` fixture: on the NumPy interpreter
(``never``) and through the compiler (``always``; a trace the compiler cannot
handle yet falls back to the interpreter, which is reported, never silent).
Related checks share one trace (one ``lazyvic.sync()``) to keep the number of
distinct compiled kernels small.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from _oracle import (
    assert_tensor,
    erf,
    gelu,
    pending_ops,
    philox_words,
)

import lazyvic as lv
import lazyvic.functional as F
from lazyvic.ops import OPS


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(*shape, seed=0, low=-2.0, high=2.0):
    return _rng(seed).uniform(low, high, size=shape).astype(np.float32)


def _i64(*shape, seed=0, low=-5, high=6):
    return _rng(seed).integers(low, high, size=shape).astype(np.int64)


# ================================================================ primitives
# One case per primitive of the op table: a public-API expression whose pending
# graph contains that primitive, and its value computed independently with NumPy.
PRIMITIVE_CASES = {}


def _case(name):
    def register(build):
        PRIMITIVE_CASES[name] = build
        return build

    return register


def _gather_loops(src, idx, dim):
    out = np.empty(idx.shape, dtype=src.dtype)
    for pos in np.ndindex(idx.shape):
        where = list(pos)
        where[dim] = idx[pos]
        out[pos] = src[tuple(where)]
    return out


def _scatter_add_loops(base, idx, src, dim):
    out = base.copy()
    for pos in np.ndindex(idx.shape):
        where = list(pos)
        where[dim] = idx[pos]
        out[tuple(where)] += src[pos]
    return out


@_case("buffer")
def _():
    a = _f32(2, 3)
    return lv.tensor(a), a


@_case("scalar")
def _():
    a = _f32(2, 3)
    return lv.tensor(a) * 2.5, a * np.float32(2.5)


@_case("rand")
def _():
    lv.manual_seed(1234)
    words = philox_words(1234, 6)
    return lv.rand(2, 3), ((words >> 8).astype(np.float32) * np.float32(2.0**-24)).reshape(2, 3)


@_case("randn")
def _():
    # Box-Muller over pairs of 32-bit words, as documented in lazyvic/ops/source.py.
    lv.manual_seed(99)
    w = philox_words(99, 6).astype(np.float64)
    u1 = (w[0::2] + 1.0) / 4294967297.0
    u2 = w[1::2] / 4294967296.0
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.stack([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)], axis=1).reshape(-1)
    return lv.randn(2, 3, dtype=lv.float64), z.reshape(2, 3)


@_case("neg")
def _():
    a = _f32(2, 3)
    return -lv.tensor(a), -a


@_case("exp")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).exp(), np.exp(a.astype(np.float64)).astype(np.float32)


@_case("log")
def _():
    a = _f32(2, 3, low=0.1, high=5.0)
    return lv.tensor(a).log(), np.log(a.astype(np.float64)).astype(np.float32)


@_case("sqrt")
def _():
    a = _f32(2, 3, low=0.0, high=5.0)
    return lv.tensor(a).sqrt(), np.sqrt(a.astype(np.float64)).astype(np.float32)


@_case("tanh")
def _():
    a = _f32(2, 3, low=-4, high=4)
    return lv.tensor(a).tanh(), np.tanh(a.astype(np.float64)).astype(np.float32)


@_case("sigmoid")
def _():
    a = _f32(2, 3, low=-6, high=6)
    return lv.tensor(a).sigmoid(), (1 / (1 + np.exp(-a.astype(np.float64)))).astype(np.float32)


@_case("erf")
def _():
    a = _f32(2, 3, low=-3, high=3)
    return lv.tensor(a).erf(), erf(a).astype(np.float32)


@_case("relu")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).relu(), np.where(a > 0, a, np.float32(0))


@_case("abs")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).abs(), np.abs(a)


@_case("logical_not")
def _():
    a = _f32(2, 3)
    return ~(lv.tensor(a) > 0), ~(a > 0)


@_case("cast")
def _():
    a = np.array([[-2.7, -0.5, 0.0], [0.5, 1.9, 3.2]], dtype=np.float32)
    return lv.tensor(a).to(lv.int32), np.trunc(a).astype(np.int32)


@_case("add")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    return lv.tensor(a) + lv.tensor(b), a + b


@_case("sub")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    return lv.tensor(a) - lv.tensor(b), a - b


@_case("mul")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    return lv.tensor(a) * lv.tensor(b), a * b


@_case("div")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2, low=0.5, high=3)
    return lv.tensor(a) / lv.tensor(b), a / b


@_case("pow")
def _():
    a, b = _f32(2, 3, seed=1, low=0.1, high=3), _f32(2, 3, seed=2)
    return lv.tensor(a) ** lv.tensor(b), (a.astype(np.float64) ** b).astype(np.float32)


# Values where the rounded quotient misleads (1.0 / 0.1 rounds up to 10), signed zeros,
# infinities and a zero divisor: fmod is exact, remainder has the sign of b (PyTorch keeps
# fmod's zero), as torch.fmod / torch.remainder give on these (checked with torch 2.13).
_MOD_A = np.array([[1.0, -1.0, 7.5, -7.5, 0.3, 1e8], [5.0, -4.0, -0.0, np.inf, 3.0, -3.0]], np.float32)
_MOD_B = np.array([[0.1, 0.1, -2.0, 2.0, 0.1, 3.0], [0.0, 2.0, 3.0, 2.0, np.inf, np.inf]], np.float32)


@_case("fmod")
def _():
    with np.errstate(all="ignore"):
        want = np.fmod(_MOD_A, _MOD_B)
    return lv.fmod(lv.tensor(_MOD_A), lv.tensor(_MOD_B)), want


@_case("remainder")
def _():
    with np.errstate(all="ignore"):
        r = np.fmod(_MOD_A, _MOD_B)
        want = np.where((r != 0) & ((_MOD_B < 0) != (r < 0)), r + _MOD_B, r)
    return lv.tensor(_MOD_A) % lv.tensor(_MOD_B), want


@_case("floordiv_int")
def _():
    a = np.array([[7, -7, 2**62 + 1], [-(2**63), 5, 9]])
    b = np.array([[2, 2, 3], [-1, 0, -4]])
    # Python's floor division; INT64_MIN // -1 wraps; x // 0 is 0 (PyTorch raises)
    want = np.array([[3, -4, (2**62 + 1) // 3], [-(2**63), 0, -3]])
    return lv.tensor(a) // lv.tensor(b), want


@_case("truncdiv_int")
def _():
    a = np.array([[7, -7, 2**62 + 1], [-(2**63), 5, 9]])
    b = np.array([[2, 2, -3], [-1, 0, -4]])
    want = np.array([[3, -3, -((2**62 + 1) // 3)], [-(2**63), 0, -2]])  # toward zero
    return lv.div(lv.tensor(a), lv.tensor(b), rounding_mode="trunc"), want


def _bitwise_case(name, fn):
    @_case(name)
    def _():
        a, b = np.array([[5, -8, 255], [0, 12, -1]]), np.array([[3, 7, 1], [9, 10, 6]])
        return fn(lv.tensor(a), lv.tensor(b)), fn(a, b)  # two's complement, as NumPy


_bitwise_case("bitwise_and", lambda x, y: x & y)
_bitwise_case("bitwise_or", lambda x, y: x | y)
_bitwise_case("bitwise_xor", lambda x, y: x ^ y)


@_case("maximum")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    return lv.tensor(a).maximum(lv.tensor(b)), np.maximum(a, b)


@_case("minimum")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    return lv.tensor(a).minimum(lv.tensor(b)), np.minimum(a, b)


def _cmp_case(name, fn):
    @_case(name)
    def _():
        a, b = _i64(2, 3, seed=1, low=0, high=3), _i64(2, 3, seed=2, low=0, high=3)
        return fn(lv.tensor(a), lv.tensor(b)), fn(a, b)


_cmp_case("eq", lambda a, b: a == b)
_cmp_case("ne", lambda a, b: a != b)
_cmp_case("lt", lambda a, b: a < b)
_cmp_case("le", lambda a, b: a <= b)
_cmp_case("gt", lambda a, b: a > b)
_cmp_case("ge", lambda a, b: a >= b)


@_case("where")
def _():
    c, a, b = _f32(2, 3) > 0, _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    return lv.where(lv.tensor(c), lv.tensor(a), lv.tensor(b)), np.where(c, a, b)


@_case("sum")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).sum(1), a.astype(np.float64).sum(1).astype(np.float32)


@_case("max")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).amax(0), a.max(0)


@_case("min")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).amin(1), a.min(1)


@_case("argmax")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).argmax(1), a.argmax(1).astype(np.int64)


@_case("reshape")
def _():
    a = _f32(2, 3)
    return lv.tensor(a).reshape(3, 2), a.reshape(3, 2)


@_case("permute")
def _():
    a = _f32(2, 3, 4)
    return lv.tensor(a).permute(2, 0, 1), a.transpose(2, 0, 1)


@_case("expand")
def _():
    a = _f32(3, 1)
    return lv.tensor(a).expand(3, 4), np.broadcast_to(a, (3, 4))


@_case("slice")
def _():
    a = _f32(2, 5)
    return lv.tensor(a)[:, 1:4], a[:, 1:4]


@_case("pad")
def _():
    a, b = _f32(2, 3, seed=1), _f32(2, 2, seed=2)
    return lv.cat([lv.tensor(a), lv.tensor(b)], 1), np.concatenate([a, b], 1)


@_case("cat")
def _():
    a, b, c = _f32(2, 3, seed=1), _f32(2, 1, seed=2), _f32(2, 2, seed=3)
    pieces = [lv.tensor(v) for v in (a, b, c, b)]
    return lv.cat(pieces, 1), np.concatenate([a, b, c, b], 1)


@_case("matmul")
def _():
    a, b = _f32(2, 3, seed=1), _f32(3, 4, seed=2)
    return lv.tensor(a) @ lv.tensor(b), (a.astype(np.float64) @ b).astype(np.float32)


@_case("conv2d")
def _():
    # Loops over the definition (cross-correlation), padding 1 and stride 2 and 2 groups.
    x, w = _f32(2, 4, 5, 6, seed=1), _f32(6, 2, 3, 3, seed=2)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((2, 6, 3, 3))
    for n, o, p, q in np.ndindex(out.shape):
        c0 = (o // 3) * 2
        out[n, o, p, q] = (xp[n, c0 : c0 + 2, 2 * p : 2 * p + 3, 2 * q : 2 * q + 3] * w[o]).sum()
    return F.conv2d(lv.tensor(x), lv.tensor(w), stride=2, padding=1, groups=2), out.astype(np.float32)


@_case("conv2d_weight")
def _():
    # conv2d's weight gradient over the definition: w[o, c, i, j] receives g[n, o, p, q] times
    # the padded input the tap read; strides (1, 2), padding 1, 2 groups, 2 images; a 1-row
    # input, so the kernel rows 0 and 2 read padding only (zero, not in the product).
    x, g = _f32(2, 4, 1, 3, seed=1), _f32(2, 6, 1, 2, seed=2)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((6, 2, 3, 3))
    for o, c, i, j in np.ndindex(out.shape):
        c0 = (o // 3) * 2
        out[o, c, i, j] = (g[:, o].astype(np.float64) * xp[:, c0 + c, i : i + 1, j : j + 3 : 2]).sum()
    at = dict(kernel=(3, 3), stride=(1, 2), padding=(1, 1, 1, 1), dilation=(1, 1), groups=2)
    return lv.Tensor.apply("conv2d_weight", lv.tensor(x), lv.tensor(g), **at), out.astype(np.float32)


@_case("conv_transpose2d")
def _():
    # Loops over the definition (each input element scatters its weighted kernel), stride 2,
    # padding 1 cropped from each side, output_padding 1, dilation 2, 2 groups.
    x, w = _f32(2, 4, 3, 2, seed=1), _f32(4, 3, 3, 2, seed=2)
    full = np.zeros((2, 6, (3 - 1) * 2 + 2 * 2 + 1 + 1, (2 - 1) * 2 + 2 * 1 + 1 + 1))
    for n, c, p, q in np.ndindex(x.shape):
        g = c // 2
        for o, i, j in np.ndindex(3, 3, 2):
            full[n, g * 3 + o, 2 * p + 2 * i, 2 * q + 2 * j] += float(x[n, c, p, q]) * float(w[c, o, i, j])
    out = full[:, :, 1:, 1:]  # padding 1 crops a row and a column at both ends; output_padding adds one back
    out = out[:, :, : full.shape[2] - 2, : full.shape[3] - 2]
    got = F.conv_transpose2d(lv.tensor(x), lv.tensor(w), stride=2, padding=1, output_padding=1, dilation=2, groups=2)
    return got, out.astype(np.float32)


@_case("max_pool2d")
def _():
    # Loops over the definition: 3x3 windows, stride 2, padding 1 (padding never wins).
    x = _f32(2, 3, 5, 6, seed=3)
    out = np.full((2, 3, 3, 3), -np.inf, dtype=np.float32)
    for n, c, p, q in np.ndindex(out.shape):
        for i in range(3):
            for j in range(3):
                h, w = 2 * p + i - 1, 2 * q + j - 1
                if 0 <= h < 5 and 0 <= w < 6:
                    out[n, c, p, q] = max(out[n, c, p, q], x[n, c, h, w])
    return F.max_pool2d(lv.tensor(x), 3, 2, 1), out


@_case("max_pool2d_indices")
def _():
    # Loops over the definition: 3x3 windows, stride 2, padding 1; rounded values make ties,
    # which go to the first maximum in row-major order; a NaN wins, the last of a window's NaNs
    # (PyTorch's rules: ``val > max || isnan(val)``).
    x = np.round(_f32(2, 3, 5, 6, seed=3))
    x[0, 1, 2, 3] = x[0, 1, 2, 4] = np.nan
    out = np.zeros((2, 3, 3, 3), dtype=np.int64)
    for n, c, p, q in np.ndindex(out.shape):
        best = None
        for i in range(3):
            for j in range(3):
                h, w = 2 * p + i - 1, 2 * q + j - 1
                if 0 <= h < 5 and 0 <= w < 6:
                    v = x[n, c, h, w]
                    if best is None or v > best or np.isnan(v):
                        best, out[n, c, p, q] = v, h * 6 + w
    at = dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1))
    values = F.max_pool2d(lv.tensor(x), 3, 2, 1)
    return lv.Tensor.apply("max_pool2d_indices", lv.tensor(x), values, **at), out


def _avg_pool_windows(size, k, s, p, ceil_mode, count_include_pad):
    """PyTorch's avg_pool2d windows along one axis, from its definition: per output, the input
    indices of the window and its divisor factor (padding counts, the ceil_mode overhang not)."""
    out = (size + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    windows = []
    for o in range(out):
        start, end = o * s - p, min(o * s - p + k, size + p)
        inside = [i for i in range(start, end) if 0 <= i < size]
        windows.append((inside, end - start if count_include_pad else len(inside)))
    return windows


# Non-square (3, 2) windows, stride (2, 3), padding 1, ceil_mode with a last window clipped by
# the padding, the padding left out of the divisor.
_AVG_AT = dict(
    kernel=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True, count_include_pad=False, divisor_override=None
)


def _avg_pool_loops(x, at):
    rows, cols = (
        _avg_pool_windows(n, k, s, p, at["ceil_mode"], at["count_include_pad"])
        for n, k, s, p in zip(x.shape[2:], at["kernel"], at["stride"], at["padding"])
    )
    out = np.zeros(x.shape[:2] + (len(rows), len(cols)))
    for n, c, (p, (ri, fh)), (q, (ci, fw)) in itertools.product(
        range(x.shape[0]), range(x.shape[1]), enumerate(rows), enumerate(cols)
    ):
        out[n, c, p, q] = x[n, c][np.ix_(ri, ci)].astype(np.float64).sum() / (at["divisor_override"] or fh * fw)
    return out


def _adaptive_windows(size, out):
    return [list(range((i * size) // out, -(-((i + 1) * size) // out))) for i in range(out)]


@_case("avg_pool2d")
def _():
    x = _f32(2, 3, 6, 7, seed=3)
    out = _avg_pool_loops(x, _AVG_AT)
    assert out.shape == (2, 3, 4, 3)  # the ceil_mode row starts in the input, its window clipped
    got = F.avg_pool2d(lv.tensor(x), (3, 2), (2, 3), 1, ceil_mode=True, count_include_pad=False)
    return got, out.astype(np.float32)


@_case("avg_pool2d_backward")
def _():
    # The transpose, from the definition: each window's g / divisor added to its input elements;
    # divisor_override, and stride 3 > kernel 2 (rows and columns no window covers get 0).
    at = dict(kernel=(2, 2), stride=(3, 3), padding=(1, 0), ceil_mode=False, count_include_pad=True, divisor_override=3)
    g = _f32(2, 3, 3, 2, seed=4)
    out = np.zeros((2, 3, 7, 6))
    rows = _avg_pool_windows(7, 2, 3, 1, False, True)
    cols = _avg_pool_windows(6, 2, 3, 0, False, True)
    for n, c, (p, (ri, _)), (q, (ci, _)) in itertools.product(range(2), range(3), enumerate(rows), enumerate(cols)):
        out[n, c][np.ix_(ri, ci)] += float(g[n, c, p, q]) / 3
    return lv.Tensor.apply("avg_pool2d_backward", lv.tensor(g), input_size=(7, 6), **at), out.astype(np.float32)


@_case("adaptive_avg_pool2d")
def _():
    # Windows of uneven sizes (7 -> 3), and overlapping ones (5 -> 4).
    x = _f32(2, 3, 7, 5, seed=5)
    out = np.zeros((2, 3, 3, 4))
    for p, ri in enumerate(_adaptive_windows(7, 3)):
        for q, ci in enumerate(_adaptive_windows(5, 4)):
            out[:, :, p, q] = x[:, :, ri][:, :, :, ci].astype(np.float64).mean((2, 3))
    return F.adaptive_avg_pool2d(lv.tensor(x), (3, 4)), out.astype(np.float32)


@_case("adaptive_avg_pool2d_backward")
def _():
    g = _f32(2, 3, 3, 4, seed=6)
    out = np.zeros((2, 3, 7, 5))
    for p, ri in enumerate(_adaptive_windows(7, 3)):
        for q, ci in enumerate(_adaptive_windows(5, 4)):
            out[:, :, ri[0] : ri[-1] + 1, ci[0] : ci[-1] + 1] += g[:, :, p : p + 1, q : q + 1] / (len(ri) * len(ci))
    return lv.Tensor.apply("adaptive_avg_pool2d_backward", lv.tensor(g), input_size=(7, 5)), out.astype(np.float32)


@_case("gather")
def _():
    a = _f32(2, 3)
    idx = np.array([[2, 0, 0, 1], [1, 1, 2, 0]])
    return lv.tensor(a).gather(1, lv.tensor(idx)), _gather_loops(a, idx, 1)


@_case("scatter_add")
def _():
    base, src = _f32(3, 4, seed=1), _f32(2, 4, seed=2)
    idx = np.array([[0, 2, 2, 1], [0, 0, 2, 1]])
    got = lv.tensor(base).scatter_add(0, lv.tensor(idx), lv.tensor(src))
    return got, _scatter_add_loops(base, idx, src, 0)


@_case("round_float16")
def _():
    a = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 65519.0, 65520.0, 2.0**-25, 3 * 2.0**-25, -0.0, np.nan], np.float32)
    expected = np.array([1.0, 1 + 2.0**-9, 65504.0, np.inf, 0.0, 2.0**-23, -0.0, np.nan], np.float32)
    return lv.amp.round_to_precision(lv.tensor(a), lv.float16), expected


@_case("round_bfloat16")
def _():
    a = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 3.3961776e38, -0.0, np.nan], np.float32)
    expected = np.array([1.0, 1 + 2.0**-6, np.inf, -0.0, np.nan], np.float32)
    return lv.amp.round_to_precision(lv.tensor(a), lv.bfloat16), expected


def _f64_then_f32(fn, a):
    return fn(a.astype(np.float64)).astype(np.float32)


@_case("sin")
def _():
    a = _f32(2, 3, low=-3, high=3)
    return lv.tensor(a).sin(), _f64_then_f32(np.sin, a)


@_case("cos")
def _():
    a = _f32(2, 3, low=-3, high=3)
    return lv.tensor(a).cos(), _f64_then_f32(np.cos, a)


@_case("floor")
def _():
    # Halves, both zeros, values just off integers; floor(-0.0) is -0.0 (checked bitwise in test_rounding).
    a = np.array([[-2.5, -0.5, -0.0], [0.5, 1.5, 2.75]], np.float32)
    return lv.tensor(a).floor(), np.array([[-3.0, -1.0, -0.0], [0.0, 1.0, 2.0]], np.float32)


@_case("round")
def _():
    # Half to even, as PyTorch and IEEE 754.
    a = np.array([[-2.5, -1.5, -0.4], [0.5, 2.5, 3.75]], np.float32)
    return lv.tensor(a).round(), np.array([[-2.0, -2.0, -0.0], [0.0, 2.0, 4.0]], np.float32)


@_case("log1p")
def _():
    a = _f32(2, 3, low=-0.5, high=3.0)
    return lv.tensor(a).log1p(), _f64_then_f32(np.log1p, a)


@_case("expm1")
def _():
    a = _f32(2, 3, low=-2.0, high=2.0)
    return lv.tensor(a).expm1(), _f64_then_f32(np.expm1, a)


def _f64_then_f32_unary(name: str, fn, edges: list, low: float, high: float):
    """A case of unary primitive ``name``: a row of edge values (outside the domain, its ends,
    overflow, infinities, NaN: the guards of the kernel expression) and a row inside the domain."""

    def build():
        a = np.stack([np.array(edges, np.float32), _f32(3, low=low, high=high)])
        with np.errstate(all="ignore"):
            return getattr(lv.tensor(a), name)(), _f64_then_f32(fn, a)

    PRIMITIVE_CASES[name] = build


# inverse trigonometric and hyperbolic functions (one libm call each: float64 NumPy rounded once is
# within their tolerance); more edge values: tests/test_trig.py
for _name, _fn, _edges, _low, _high in (
    ("atan", np.arctan, [np.inf, -np.inf, np.nan], -3.0, 3.0),
    ("asin", np.arcsin, [1.0, -2.0, np.nan], -1.0, 1.0),
    ("acos", np.arccos, [-1.0, 2.0, np.nan], -1.0, 1.0),
    ("sinh", np.sinh, [800.0, -800.0, np.nan], -3.0, 3.0),
    ("cosh", np.cosh, [800.0, -np.inf, np.nan], -3.0, 3.0),
    ("asinh", np.arcsinh, [np.inf, -np.inf, -0.0], -3.0, 3.0),
    ("acosh", np.arccosh, [0.5, 1.0, np.inf], 1.0, 4.0),
    ("atanh", np.arctanh, [1.0, -1.0, 2.0], -0.99, 0.99),
):
    _f64_then_f32_unary(_name, _fn, _edges, _low, _high)


@_case("atan2")
def _():
    y, x = _f32(2, 3, low=-3, high=3), _f32(2, 3, seed=1, low=-3, high=3)
    y[0], x[0] = [0.0, -0.0, np.inf], [-0.0, -0.0, -np.inf]  # pi, -pi, 3 pi / 4 (C99's signs)
    return lv.atan2(lv.tensor(y), lv.tensor(x)), np.arctan2(y.astype(np.float64), x).astype(np.float32)


@_case("prod")
def _():
    a = _f32(2, 3, low=0.5, high=2.0)
    return lv.tensor(a).prod(1), np.array([np.prod(row.astype(np.float64)) for row in a], np.float32)


@_case("collective")
def _():
    # The op's plumbing (a step of its own in compiled plans, the interpreter's reference) through
    # a stand-in transport: three ranks holding the same values, summed. The MPI transport itself
    # is tested under mpirun in tests/distributed.
    from lazyvic.ops import collective

    collective.transports[-1] = lambda a, at: a * 3 if at["collective"] == "all_reduce" else a
    a = _f32(2, 3)
    t = lv.Tensor.apply("collective", lv.tensor(a) + 1, collective="all_reduce", reduce="sum", src=0, group=-1)
    return t, (a + 1) * 3


def _lstm_loops(xp, h0, c0, w):
    """lstm_scan by its definition (ops/recurrent.py), element by element in float64: per
    step and row [h, c, i, f, g, o]."""
    steps, rows, hidden = xp.shape[0], xp.shape[1], h0.shape[1]
    sig = lambda v: 1.0 / (1.0 + math.exp(-v))  # noqa: E731
    y = np.zeros((steps, rows, 6 * hidden))
    h, c = h0.astype(np.float64), c0.astype(np.float64)
    for t in range(steps):
        h_new, c_new = np.zeros_like(h), np.zeros_like(c)
        for n in range(rows):
            for j in range(hidden):
                pre = [
                    float(xp[t, n, k * hidden + j]) + sum(h[n, m] * w[k * hidden + j, m] for m in range(hidden))
                    for k in range(4)
                ]
                i, f, g, o = sig(pre[0]), sig(pre[1]), math.tanh(pre[2]), sig(pre[3])
                c_new[n, j] = f * c[n, j] + i * g
                h_new[n, j] = o * math.tanh(c_new[n, j])
                y[t, n, j::hidden] = (h_new[n, j], c_new[n, j], i, f, g, o)
        h, c = h_new, c_new
    return y


def _lstm_operands(seed):
    return (
        _f32(3, 2, 12, seed=seed),
        _f32(2, 3, seed=seed + 1),
        _f32(2, 3, seed=seed + 2),
        _f32(12, 3, seed=seed + 3, low=-0.5, high=0.5),
    )


@_case("lstm_scan")
def _():
    xp, h0, c0, w = _lstm_operands(20)
    return lv.Tensor.apply("lstm_scan", *map(lv.tensor, (xp, h0, c0, w)), reverse=False), _lstm_loops(
        xp, h0, c0, w
    ).astype(np.float32)


@_case("lstm_scan_backward")
def _():
    # Backpropagation through time by the chain rule, element by element in float64: per step
    # and row [d of the gates' pre-activations, dc_{t-1}, dh_{t-1}].
    xp, h0, c0, w = _lstm_operands(30)
    y = _lstm_loops(xp, h0, c0, w)
    gy = _f32(*y.shape, seed=34)
    steps, rows, hidden = y.shape[0], y.shape[1], 3
    d = np.zeros_like(y)
    dh_next, dc_next = np.zeros((rows, hidden)), np.zeros((rows, hidden))
    for t in reversed(range(steps)):
        c_prev = c0 if t == 0 else y[t - 1, :, hidden : 2 * hidden]
        for n in range(rows):
            for j in range(hidden):
                h, c, i, f, g, o = y[t, n, j::hidden]
                dh = gy[t, n, j] + dh_next[n, j]
                tc = math.tanh(c)
                dc = gy[t, n, hidden + j] + dc_next[n, j] + dh * o * (1 - tc * tc)
                di, df, dg = (
                    dc * g + gy[t, n, 2 * hidden + j],
                    dc * c_prev[n, j] + gy[t, n, 3 * hidden + j],
                    dc * i + gy[t, n, 4 * hidden + j],
                )
                do = dh * tc + gy[t, n, 5 * hidden + j]
                d[t, n, j : 4 * hidden : hidden] = (
                    di * i * (1 - i),
                    df * f * (1 - f),
                    dg * (1 - g * g),
                    do * o * (1 - o),
                )
                d[t, n, 4 * hidden + j] = dc * f
        d[t, :, 5 * hidden :] = d[t, :, : 4 * hidden] @ w
        dh_next, dc_next = d[t, :, 5 * hidden :], d[t, :, 4 * hidden : 5 * hidden]
    args = [lv.tensor(a) for a in (gy, y.astype(np.float32), c0, w)]
    return lv.Tensor.apply("lstm_scan_backward", *args, reverse=False), d.astype(np.float32)


def _gru_loops(xp, h0, w, b):
    """gru_scan by its definition (ops/recurrent.py), element by element in float64: per step
    and row [h, r, z, n, hn]."""
    steps, rows, hidden = xp.shape[0], xp.shape[1], h0.shape[1]
    sig = lambda v: 1.0 / (1.0 + math.exp(-v))  # noqa: E731
    y = np.zeros((steps, rows, 5 * hidden))
    h = h0.astype(np.float64)
    for t in range(steps):
        h_new = np.zeros_like(h)
        for n in range(rows):
            for j in range(hidden):
                hp = [
                    float(b[k * hidden + j]) + sum(h[n, m] * w[k * hidden + j, m] for m in range(hidden))
                    for k in range(3)
                ]
                r, z = sig(xp[t, n, j] + hp[0]), sig(xp[t, n, hidden + j] + hp[1])
                nn_ = math.tanh(xp[t, n, 2 * hidden + j] + r * hp[2])
                h_new[n, j] = (1 - z) * nn_ + z * h[n, j]
                y[t, n, j::hidden] = (h_new[n, j], r, z, nn_, hp[2])
        h = h_new
    return y


def _gru_operands(seed):
    return (
        _f32(3, 2, 9, seed=seed),
        _f32(2, 3, seed=seed + 1),
        _f32(9, 3, seed=seed + 2, low=-0.5, high=0.5),
        _f32(9, seed=seed + 3),
    )


@_case("gru_scan")
def _():
    xp, h0, w, b = _gru_operands(40)
    t = lv.Tensor.apply("gru_scan", *map(lv.tensor, (xp, h0, w, b)), reverse=False)
    return t, _gru_loops(xp, h0, w, b).astype(np.float32)


@_case("gru_scan_backward")
def _():
    # Backpropagation through time by the chain rule, element by element in float64: per step
    # and row [d of the r, z and n pre-activations, d of hn, dh_{t-1}].
    xp, h0, w, b = _gru_operands(50)
    y = _gru_loops(xp, h0, w, b)
    gy = _f32(*y.shape, seed=54)
    steps, rows, hidden = y.shape[0], y.shape[1], 3
    d = np.zeros_like(y)
    dh_next = np.zeros((rows, hidden))
    for t in reversed(range(steps)):
        h_prev = h0 if t == 0 else y[t - 1, :, :hidden]
        for n in range(rows):
            for j in range(hidden):
                h, r, z, nn_, hn = y[t, n, j::hidden]
                dh = gy[t, n, j] + dh_next[n, j]
                dz = dh * (h_prev[n, j] - nn_) + gy[t, n, 2 * hidden + j]
                dn = (dh * (1 - z) + gy[t, n, 3 * hidden + j]) * (1 - nn_ * nn_)
                dhn = dn * r + gy[t, n, 4 * hidden + j]
                dr = (dn * hn + gy[t, n, hidden + j]) * r * (1 - r)
                d[t, n, j::hidden] = (dr, dz * z * (1 - z), dn, dhn, dh * z)
        dhp = np.concatenate([d[t, :, : 2 * hidden], d[t, :, 3 * hidden : 4 * hidden]], 1)
        d[t, :, 4 * hidden :] += dhp @ w
        dh_next = d[t, :, 4 * hidden :]
    args = [lv.tensor(a) for a in (gy, y.astype(np.float32), h0, w)]
    return lv.Tensor.apply("gru_scan_backward", *args, reverse=False), d.astype(np.float32)


def _rnn_loops(xp, h0, w, act):
    """rnn_scan by its definition (ops/recurrent.py), element by element in float64:
    h_t = act(xp[t] + h_{t-1} @ w^T)."""
    steps, rows, hidden = xp.shape
    y = np.zeros((steps, rows, hidden))
    h = h0.astype(np.float64)
    for t in range(steps):
        for n in range(rows):
            for j in range(hidden):
                y[t, n, j] = act(xp[t, n, j] + sum(h[n, m] * w[j, m] for m in range(hidden)))
        h = y[t]
    return y


def _rnn_operands(seed):
    return _f32(3, 2, 4, seed=seed), _f32(2, 4, seed=seed + 1), _f32(4, 4, seed=seed + 2, low=-0.5, high=0.5)


@_case("rnn_scan")
def _():
    xp, h0, w = _rnn_operands(60)
    t = lv.Tensor.apply("rnn_scan", *map(lv.tensor, (xp, h0, w)), reverse=False, nonlinearity="tanh")
    return t, _rnn_loops(xp, h0, w, math.tanh).astype(np.float32)


@_case("rnn_scan_backward")
def _():
    # relu: dpre_t = (gy_t + dh_t from step t + 1) where h_t > 0, else 0; dh_{t-1} = dpre_t @ w.
    xp, h0, w = _rnn_operands(70)
    y = _rnn_loops(xp, h0, w, lambda v: max(v, 0.0))
    gy = _f32(*y.shape, seed=74)
    steps, rows, hidden = y.shape
    d = np.zeros((steps, rows, 2 * hidden))
    dh_next = np.zeros((rows, hidden))
    for t in reversed(range(steps)):
        for n in range(rows):
            for j in range(hidden):
                d[t, n, j] = gy[t, n, j] + dh_next[n, j] if y[t, n, j] > 0 else 0.0
        d[t, :, hidden:] = d[t, :, :hidden] @ w
        dh_next = d[t, :, hidden:]
    args = [lv.tensor(a) for a in (gy, y.astype(np.float32), w)]
    return lv.Tensor.apply("rnn_scan_backward", *args, reverse=False, nonlinearity="relu"), d.astype(np.float32)


@_case("argsort")
def _():
    # Descending and stable: NaN first, ties (and -0.0 == 0.0) in their order. The expected
    # permutation comes from Python's stable sort on (is-not-NaN, -value).
    a = np.array([[3.0, 1.0, 3.0, np.nan], [0.0, -0.0, 2.0, 0.0]], np.float32)
    rows = [sorted(range(4), key=lambda i, r=r: (not np.isnan(r[i]), -r[i] if not np.isnan(r[i]) else 0)) for r in a]
    return lv.tensor(a).argsort(1, descending=True), np.array(rows, np.int64)


# Linear algebra (lazyvic/ops/linalg.py): float32 LAPACK against NumPy's float64 on matrices far
# from singular, through the public functions that record each primitive (factors whose signs
# LAPACK chooses are compared up to sign).
def _linalg_operand(*shape, seed=80):
    a = _rng(seed).uniform(-1, 1, size=shape) + 2.5 * np.eye(shape[-1])
    return a.astype(np.float32), a.astype(np.float32).astype(np.float64)


@_case("linalg_inv")
def _():
    a, a64 = _linalg_operand(2, 3, 3)
    return lv.linalg.inv(lv.tensor(a)), np.linalg.inv(a64).astype(np.float32)


@_case("linalg_det")
def _():
    a, a64 = _linalg_operand(2, 3, 3)
    return lv.linalg.det(lv.tensor(a)), np.linalg.det(a64).astype(np.float32)


@_case("linalg_slogdet")
def _():
    a, a64 = _linalg_operand(2, 3, 3)
    a, a64 = -a, -a64  # negative determinants
    sign, logabs = lv.linalg.slogdet(lv.tensor(a))
    return lv.stack([sign, logabs]), np.stack(np.linalg.slogdet(a64)).astype(np.float32)


@_case("linalg_solve")
def _():
    a, a64 = _linalg_operand(2, 3, 3)
    b = _f32(2, 3, 2, seed=81)
    return lv.linalg.solve(lv.tensor(a), lv.tensor(b)), np.linalg.solve(a64, b.astype(np.float64)).astype(np.float32)


@_case("linalg_cholesky")
def _():
    a, a64 = _linalg_operand(2, 3, 3)
    s, s64 = a @ a.transpose(0, 2, 1), a64 @ a64.transpose(0, 2, 1)
    return lv.linalg.cholesky(lv.tensor(s)), np.linalg.cholesky(s64).astype(np.float32)


@_case("linalg_eigh")
def _():
    a, a64 = _linalg_operand(2, 3, 3)
    return lv.linalg.eigvalsh(lv.tensor(a + a.transpose(0, 2, 1))), np.linalg.eigvalsh(
        a64 + a64.transpose(0, 2, 1)
    ).astype(np.float32)


@_case("linalg_svd")
def _():
    a = _f32(2, 4, 3, seed=82)
    return lv.linalg.svdvals(lv.tensor(a)), np.linalg.svd(a.astype(np.float64), compute_uv=False).astype(np.float32)


@_case("linalg_qr")
def _():
    a = _f32(2, 4, 3, seed=83)
    return lv.linalg.qr(lv.tensor(a)).R.abs(), np.abs(np.linalg.qr(a.astype(np.float64))[1]).astype(np.float32)


@_case("linalg_info")
def _():
    # The second matrix is singular: its LU factorization's second pivot is exactly zero.
    a = np.array([[[2.0, 1.0], [1.0, 3.0]], [[1.0, 2.0], [2.0, 4.0]]], np.float32)
    return lv.linalg.inv_ex(lv.tensor(a)).info, np.array([0, 2], np.int32)


@pytest.mark.parametrize("opname", sorted(OPS))
def test_primitive_forward(opname, mode):
    """Every primitive in the op table has a forward case, and it matches NumPy."""
    assert opname in PRIMITIVE_CASES, f"op {opname!r} has no forward test case in PRIMITIVE_CASES"
    t, expected = PRIMITIVE_CASES[opname]()
    assert opname in pending_ops(t), f"the case for {opname!r} does not record it: {pending_ops(t)}"
    assert_tensor(t, expected)


# ============================================================== elementwise
_UNARY = {
    "exp": (lambda t: t.exp(), np.exp, (-2, 2)),
    "log": (lambda t: t.log(), np.log, (0.2, 5)),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, (0.0, 5)),
    "rsqrt": (lambda t: t.rsqrt(), lambda a: 1 / np.sqrt(a), (0.2, 5)),
    "tanh": (lambda t: t.tanh(), np.tanh, (-3, 3)),
    "sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), (-5, 5)),
    "erf": (lambda t: t.erf(), erf, (-3, 3)),
    "reciprocal": (lambda t: t.reciprocal(), lambda a: 1 / a, (0.5, 4)),
    "F.sigmoid": (F.sigmoid, lambda a: 1 / (1 + np.exp(-a)), (-5, 5)),
    "F.tanh": (F.tanh, np.tanh, (-3, 3)),
    "F.silu": (F.silu, lambda a: a / (1 + np.exp(-a)), (-4, 4)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_transcendental_unary(dtype, mode):
    """Floating unaries keep float32/float64; integer inputs compute in float32 (PyTorch)."""
    out_dtype = np.float32 if dtype != "float64" else np.float64
    outs = []
    for name, (fn, ref, (low, high)) in _UNARY.items():
        a = _rng(len(name)).uniform(low, high, size=(2, 3))
        if dtype == "int64":
            a = np.maximum(np.round(a), 1 if low > 0 else -3).astype(np.int64)
        else:
            a = a.astype(dtype)
        outs.append((name, fn(lv.tensor(a)), ref(a.astype(np.float64)).astype(out_dtype)))
    lv.sync()
    for name, t, expected in outs:
        try:
            assert_tensor(t, expected)
        except AssertionError as e:
            raise AssertionError(f"{name} on {dtype}: {e}") from None


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_sign_preserving_unary(dtype, mode):
    """neg, abs, relu, sign, square, clone, unary +, keep the input dtype."""
    a = (_f32(3, 4) * 3).astype(dtype)
    a[0, 0] = 0
    x = lv.tensor(a)
    outs = [
        (-x, -a),
        (x.neg(), -a),
        (+x, a),
        (abs(x), np.abs(a)),
        (x.abs(), np.abs(a)),
        (x.relu(), np.maximum(a, 0).astype(dtype)),
        (F.relu(x), np.maximum(a, 0).astype(dtype)),
        (x.sign(), np.sign(a).astype(dtype)),
        (x.square(), a * a),
        (x.clone(), a),
        (x.contiguous(), a),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


# (lhs, rhs, dtype of + - * and of maximum/minimum). A spec is (dtype, shape) or a Python scalar.
PROMOTION_CASES = [
    (("float32", (2, 3)), ("float32", (3,)), "float32"),
    (("float32", (2, 1)), ("float64", (1, 3)), "float64"),
    (("int64", (2, 3)), ("float32", (2, 3)), "float32"),
    (("int32", (3,)), ("int64", (2, 3)), "int64"),
    (("int32", (2, 1, 3)), ("int32", (4, 1)), "int32"),
    (("int32", (2, 3)), 2, "int32"),
    (("int64", (2, 3)), 3, "int64"),
    (("int64", (2, 3)), 1.5, "float32"),
    (("int32", (3,)), 2.5, "float32"),
    (("float64", (2, 3)), 2, "float64"),
    (("float32", (2, 3)), 2.5, "float32"),
    (("bool", (2, 3)), 1, "int64"),
    (("bool", (2, 3)), 1.5, "float32"),
    (("bool", (2, 3)), ("int32", (3,)), "int32"),
    (("bool", (3,)), ("float64", (2, 3)), "float64"),
    (("float32", ()), ("int64", (2, 3)), "float32"),
]


def _operand(spec, seed):
    if not isinstance(spec, tuple):
        return spec, spec
    dtype, shape = spec
    a = _rng(seed).integers(1, 5, size=shape)
    if dtype == "bool":
        a = a > 2
    elif dtype.startswith("float"):
        a = (a + _rng(seed + 7).uniform(-0.4, 0.4, size=shape)).astype(dtype)
    else:
        a = a.astype(dtype)
    return lv.tensor(a), np.asarray(a)


def _np_promoted(value, dtype):
    return np.asarray(value).astype(dtype) if isinstance(value, np.ndarray) else np.array(value, dtype=dtype)


def _case_id(value):
    return str(value).replace(" ", "")


@pytest.mark.parametrize("mode", ["never"], indirect=True)
@pytest.mark.parametrize("lhs, rhs, arith", PROMOTION_CASES, ids=_case_id)
@pytest.mark.parametrize("swap", [False, True], ids=["tensor_op_other", "other_op_tensor"])
def test_binary_operators_broadcast_and_promote(lhs, rhs, arith, swap, mode):
    """+ - * / maximum minimum and comparisons with NumPy broadcasting and PyTorch promotion."""
    _check_binary_operators(lhs, rhs, arith, swap)


# A few of the promotion cases again through the compiler (each case compiles several kernels).
@pytest.mark.parametrize(
    "lhs, rhs, arith, swap",
    [
        (("float32", (2, 3)), ("float32", (3,)), "float32", False),
        (("int32", (3,)), ("int64", (2, 3)), "int64", True),
        (("int64", (2, 3)), 1.5, "float32", True),
        (("bool", (3,)), ("float64", (2, 3)), "float64", False),
    ],
    ids=_case_id,
)
def test_binary_operators_compiled(lhs, rhs, arith, swap, mode):
    _check_binary_operators(lhs, rhs, arith, swap)


def _check_binary_operators(lhs, rhs, arith, swap):
    x, xn = _operand(lhs, 1)
    y, yn = _operand(rhs, 2)
    if swap:
        x, xn, y, yn = y, yn, x, xn
    div = arith if arith.startswith("float") else "float32"
    a, b = _np_promoted(xn, arith), _np_promoted(yn, arith)
    ad, bd = _np_promoted(xn, div), _np_promoted(yn, div)
    with np.errstate(divide="ignore", invalid="ignore"):  # a False divisor gives inf / nan, as in PyTorch
        quotient = ad / bd
    outs = [
        ("+", x + y, a + b, arith),
        ("-", x - y, a - b, arith),
        ("*", x * y, a * b, arith),
        ("/", x / y, quotient, div),
        ("==", x == y, a == b, "bool"),
        ("!=", x != y, a != b, "bool"),
        ("<", x < y, a < b, "bool"),
        ("<=", x <= y, a <= b, "bool"),
        (">", x > y, a > b, "bool"),
        (">=", x >= y, a >= b, "bool"),
    ]
    if isinstance(x, lv.Tensor):
        outs += [
            ("maximum", x.maximum(y), np.maximum(a, b), arith),
            ("minimum", x.minimum(y), np.minimum(a, b), arith),
            ("add()", x.add(y), a + b, arith),
            ("sub()", x.sub(y), a - b, arith),
            ("mul()", x.mul(y), a * b, arith),
            ("div()", x.div(y), quotient, div),
            ("lt()", x.lt(y), a < b, "bool"),
            ("ge()", x.ge(y), a >= b, "bool"),
            ("eq()", x.eq(y), a == b, "bool"),
            ("ne()", x.ne(y), a != b, "bool"),
            ("le()", x.le(y), a <= b, "bool"),
            ("gt()", x.gt(y), a > b, "bool"),
        ]
    lv.sync()
    for name, t, expected, dtype in outs:
        try:
            assert_tensor(t, np.asarray(expected).astype(dtype), rtol=1e-6)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_add_sub_alpha(mode):
    a, b = _f32(2, 3, seed=1), _f32(2, 3, seed=2)
    x, y = lv.tensor(a), lv.tensor(b)
    s, d = x.add(y, alpha=2), x.sub(y, alpha=0.5)
    lv.sync()
    assert_tensor(s, a + 2 * b, rtol=1e-6)
    assert_tensor(d, a - 0.5 * b, rtol=1e-6)


def test_bool_logical_operators(mode):
    a, b = _f32(2, 3, seed=1) > 0, _f32(2, 3, seed=2) > 0
    x, y = lv.tensor(a), lv.tensor(b)
    outs = [(x & y, a & b), (x | y, a | b), (~x, ~a), (x + y, a | b), (x * y, a & b), (x & True, a)]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_pow_forms(mode):
    a = _f32(2, 3, low=0.2, high=3)
    e = _f32(2, 3, seed=5, low=-2, high=2)
    ints = np.array([[1, -2, 3], [0, 4, -5]], dtype=np.int64)
    x, ex, xi = lv.tensor(a), lv.tensor(e), lv.tensor(ints)
    a64 = a.astype(np.float64)
    outs = [
        (x**2, a * a, "float32"),
        (x**3, a64**3, "float32"),
        (x**0.5, np.sqrt(a64), "float32"),
        (x**-1.5, a64**-1.5, "float32"),
        (x**1, a, "float32"),
        (x**0, np.ones_like(a), "float32"),
        (x**ex, a64**e, "float32"),
        (x.pow(2.5), a64**2.5, "float32"),
        (2.0**x, 2.0**a64, "float32"),
        (xi**2, ints * ints, "int64"),
        (xi**3, ints**3, "int64"),
        (xi**0, np.ones_like(ints), "int64"),
        (xi**0.5, np.abs(ints) ** 0.5 * np.where(ints < 0, np.nan, 1), "float32"),
        (2.0**xi, 2.0**ints, "float32"),
        (lv.tensor(a, dtype=lv.float64) ** 3, a64**3, "float64"),
    ]
    lv.sync()
    for t, expected, dtype in outs:
        assert_tensor(t, np.asarray(expected).astype(dtype))


@pytest.mark.xfail(
    reason="integer tensor ** integer tensor (and int ** int tensor) computes in float32; "
    "PyTorch keeps int64 (the pow primitive is floating-point only)",
    strict=True,
)
def test_pow_integer_tensor_exponent_stays_integer():
    xi = lv.tensor([1, 2, 3])
    assert_tensor(xi ** lv.tensor([2, 3, 1]), np.array([1, 8, 3], dtype=np.int64))
    assert_tensor(2**xi, np.array([2, 4, 8], dtype=np.int64))


def test_maximum_minimum_clamp(mode):
    a = _f32(3, 4)
    b = _f32(4, seed=3)
    ints = _i64(3, 4)
    x, y, xi = lv.tensor(a), lv.tensor(b), lv.tensor(ints)
    outs = [
        (x.maximum(y), np.maximum(a, b)),
        (x.minimum(y), np.minimum(a, b)),
        (x.max(y), np.maximum(a, b)),
        (x.min(y), np.minimum(a, b)),
        (x.clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5)),
        (x.clamp(min=0.25), np.maximum(a, np.float32(0.25))),
        (x.clamp(max=-0.25), np.minimum(a, np.float32(-0.25))),
        (x.clip(-1, 1), np.clip(a, -1, 1)),
        (xi.clamp(-2, 3), np.clip(ints, -2, 3)),
        (xi.clamp(min=0.5), np.maximum(ints, 0.5).astype(np.float32)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_where_forms(mode):
    c = _f32(2, 3) > 0
    a, b = _f32(2, 3, seed=1), _f32(3, seed=2)
    ints = _i64(2, 3)
    cond, x, y, xi = lv.tensor(c), lv.tensor(a), lv.tensor(b), lv.tensor(ints)
    outs = [
        (lv.where(cond, x, y), np.where(c, a, b)),
        (lv.where(cond, x, 0.0), np.where(c, a, np.float32(0))),
        (lv.where(cond, 1.5, y), np.where(c, np.float32(1.5), b)),
        (lv.where(cond, 1.0, 0.0), np.where(c, 1, 0).astype(np.float32)),
        (lv.where(cond, 1, 0), np.where(c, 1, 0).astype(np.int64)),
        (lv.where(cond, xi, 0.5), np.where(c, ints, 0.5).astype(np.float32)),
        (lv.where(xi, x, y), np.where(ints != 0, a, b)),
        (lv.where(cond[0], x, y), np.where(c[0], a, b)),
        (x.where(cond, y), np.where(c, a, b)),
        (x.masked_fill(cond, -1.0), np.where(c, np.float32(-1), a)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_erf_and_gelu_against_math(mode):
    a = np.linspace(-4, 4, 17)
    x32, x64 = lv.tensor(a, dtype=lv.float32), lv.tensor(a, dtype=lv.float64)
    outs = [
        (x32.erf(), erf(a.astype(np.float32)).astype(np.float32)),
        (x64.erf(), erf(a)),
        (F.gelu(x64), gelu(a)),
        (F.gelu(x64, approximate="tanh"), gelu(a, "tanh")),
        (F.gelu(x32), gelu(a.astype(np.float32).astype(np.float64)).astype(np.float32)),
        (lv.nn.GELU()(x64), gelu(a)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


# ================================================================ casts
@pytest.mark.parametrize("src", ["float32", "float64", "int32", "int64", "bool"])
def test_casts(src, mode):
    a = np.array([[-2.75, -1.0, -0.5, 0.0], [0.5, 1.0, 2.5, 7.9]])
    a = (a > 0) if src == "bool" else a.astype(src)
    x = lv.tensor(a)
    outs = [
        (x.float(), a.astype(np.float32)),
        (x.double(), a.astype(np.float64)),
        (x.long(), a.astype(np.int64)),
        (x.int(), a.astype(np.int32)),
        (x.bool(), a != 0),
        (x.to(lv.float64), a.astype(np.float64)),
        (x.to("int64"), a.astype(np.int64)),
        (x.to(dtype=lv.int32), a.astype(np.int32)),
        (x.to(np.float32), a.astype(np.float32)),
        (x.type(lv.float32), a.astype(np.float32)),
        (x.to("cpu"), a),
        (x.cpu(), a),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


# ============================================================== reductions
@pytest.mark.parametrize(
    "dim, keepdim, mode",
    [(dim, keepdim, "never") for dim in (None, 0, 1, -1, (0, 2), (-1, -3)) for keepdim in (False, True)]
    + [(None, False, "always"), (-1, False, "always"), ((0, 2), True, "always")],
    indirect=["mode"],
)
def test_sum_mean_amax_amin(dim, keepdim, mode):
    a = _f32(2, 3, 4)
    x = lv.tensor(a)
    axis = dim if dim is None or isinstance(dim, int) else tuple(dim)
    a64 = a.astype(np.float64)
    outs = [
        (x.sum(dim, keepdim), a64.sum(axis=axis, keepdims=keepdim).astype(np.float32)),
        (x.mean(dim, keepdim), a64.mean(axis=axis, keepdims=keepdim).astype(np.float32)),
        (x.amax(dim, keepdim), a.max(axis=axis, keepdims=keepdim)),
        (x.amin(dim, keepdim), a.min(axis=axis, keepdims=keepdim)),
    ]
    if dim is None and not keepdim:
        outs += [
            (x.sum(), a64.sum().astype(np.float32)),
            (x.max(), a.max()),
            (x.min(), a.min()),
            (x.mean(), a64.mean().astype(np.float32)),
        ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, np.asarray(expected))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_sum_of_integers_and_bools_is_int64(dtype, mode):
    a = _i64(3, 4)
    a = (a > 0) if dtype == "bool" else a.astype(dtype)
    x = lv.tensor(a)
    outs = [
        (x.sum(), np.array(a.astype(np.int64).sum())),
        (x.sum(0), a.astype(np.int64).sum(0)),
        (x.sum(1, keepdim=True), a.astype(np.int64).sum(1, keepdims=True)),
        (x.sum(dtype=lv.float64), np.array(a.astype(np.float64).sum())),
    ]
    if dtype != "bool":
        outs += [(x.amax(1), a.max(1)), (x.amin(0), a.min(0))]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_max_min_with_dim_return_values_and_indices(mode):
    a = np.array([[1.0, 5.0, 5.0, -2.0], [3.0, -1.0, 3.0, 0.0], [-4.0, -4.0, -5.0, -5.0]], dtype=np.float32)
    x = lv.tensor(a)
    mx, mn = x.max(1), x.min(0, keepdim=True)
    vals, idx = mx
    outs = [
        (mx.values, a.max(1)),
        (mx.indices, np.array([1, 0, 0])),  # first of ties, as NumPy and PyTorch
        (vals, a.max(1)),
        (idx, np.array([1, 0, 0])),
        (mn.values, a.min(0, keepdims=True)),
        (mn.indices, np.array([[2, 2, 2, 2]])),
        (x.argmax(1), np.array([1, 0, 0])),
        (x.argmax(0), np.array([1, 0, 0, 1])),
        (x.argmax(), np.array(1)),
        (x.argmax(1, keepdim=True), np.array([[1], [0], [0]])),
        (x.argmin(1), a.argmin(1)),
        (x.argmin(), np.array(a.argmin())),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(
            t,
            np.asarray(expected).astype(t.dtype.np) if t.dtype == lv.float32 else np.asarray(expected).astype(np.int64),
        )


def test_argmax_int_and_bool_inputs(mode):
    ints = np.array([[3, 7, 7], [-1, -1, -2]])
    x = lv.tensor(ints)
    outs = [(x.argmax(1), np.array([1, 0])), (x.argmin(1), np.array([0, 2]))]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected.astype(np.int64))
    with pytest.raises(lv.errors.DTypeError, match="argmax: bool"):  # as PyTorch
        (x > 5).argmax(1)


def test_var_std_logsumexp(mode):
    a = _f32(3, 5).astype(np.float64)
    x = lv.tensor(a)
    m = a.max(1, keepdims=True)
    outs = [
        (x.var(), np.array(a.var(ddof=1))),
        (x.var(1), a.var(1, ddof=1)),
        (x.var(0, keepdim=True, correction=0), a.var(0, ddof=0, keepdims=True)),
        (x.std(1), a.std(1, ddof=1)),
        (x.std(unbiased=False), np.array(a.std())),
        (x.logsumexp(1), (np.log(np.exp(a - m).sum(1, keepdims=True)) + m)[:, 0]),
        (x.logsumexp(1, keepdim=True), np.log(np.exp(a - m).sum(1, keepdims=True)) + m),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected, rtol=1e-10)


def test_reductions_over_empty_axes():
    x = lv.zeros(0, 3)
    assert_tensor(x.sum(0), np.zeros(3, np.float32))
    assert_tensor(x.sum(), np.array(0.0, np.float32))
    assert x.mean(0).shape == (3,) and np.isnan(x.mean(0).numpy()).all()


# ================================================================ movement
def test_reshape_view_family(mode):
    a = _f32(2, 3, 4)
    x = lv.tensor(a)
    outs = [
        (x.reshape(6, 4), a.reshape(6, 4)),
        (x.reshape((4, -1)), a.reshape(4, -1)),
        (x.reshape([-1]), a.reshape(-1)),
        (x.view(2, 12), a.reshape(2, 12)),
        (x.view(-1, 3, 2), a.reshape(-1, 3, 2)),
        (x.reshape(24, 1, 1), a.reshape(24, 1, 1)),
        (x.view_as(lv.zeros(4, 6)), a.reshape(4, 6)),
        (x.reshape_as(lv.zeros(3, 8)), a.reshape(3, 8)),
        (x.flatten(), a.reshape(-1)),
        (x.flatten(1), a.reshape(2, 12)),
        (x.flatten(0, 1), a.reshape(6, 4)),
        (x.flatten(-2, -1), a.reshape(2, 12)),
        (x.unflatten(2, (2, 2)), a.reshape(2, 3, 2, 2)),
        (x[0, 0, 0].flatten(), a[0, 0, 0].reshape(1)),
        (lv.nn.Flatten()(x), a.reshape(2, 12)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_permute_transpose_T(mode):
    a = _f32(2, 3, 4)
    m = _f32(3, 5, seed=1)
    x, y = lv.tensor(a), lv.tensor(m)
    outs = [
        (x.permute(2, 0, 1), a.transpose(2, 0, 1)),
        (x.permute((1, 2, 0)), a.transpose(1, 2, 0)),
        (x.permute(-1, -3, -2), a.transpose(2, 0, 1)),
        (x.permute(0, 1, 2), a),
        (x.transpose(0, 2), a.swapaxes(0, 2)),
        (x.transpose(-1, -2), a.swapaxes(-1, -2)),
        (x.T, a.transpose(2, 1, 0)),
        (x.mT, a.swapaxes(-1, -2)),
        (y.T, m.T),
        (y.t(), m.T),
        (y.T.T, m),
        (x.permute(2, 0, 1).reshape(4, 6), a.transpose(2, 0, 1).reshape(4, 6)),
        (lv.tensor(np.arange(3)).T, np.arange(3)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_expand_squeeze_unsqueeze(mode):
    a = _f32(3, 1)
    s = _f32(1, 3, 1, 2)
    x, y = lv.tensor(a), lv.tensor(s)
    outs = [
        (x.expand(3, 4), np.broadcast_to(a, (3, 4))),
        (x.expand(2, 3, 4), np.broadcast_to(a, (2, 3, 4))),
        (x.expand(-1, 5), np.broadcast_to(a, (3, 5))),
        (x.expand((2, -1, 2)), np.broadcast_to(a, (2, 3, 2))),
        (x.expand_as(lv.zeros(2, 3, 4)), np.broadcast_to(a, (2, 3, 4))),
        (x.broadcast_to((3, 2)), np.broadcast_to(a, (3, 2))),
        (lv.tensor(np.float32(2.5)).expand(2, 2), np.full((2, 2), 2.5, np.float32)),
        (x.expand(3, 4) * 2, np.broadcast_to(a, (3, 4)) * 2),
        (y.squeeze(), s.squeeze()),
        (y.squeeze(0), s.squeeze(0)),
        (y.squeeze(2), s.squeeze(2)),
        (y.squeeze(-2), s.squeeze(-2)),
        (y.squeeze(1), s),  # not size 1: unchanged, as PyTorch
        (y.squeeze((0, 2)), s.squeeze((0, 2))),
        (x.unsqueeze(0), a[None]),
        (x.unsqueeze(1), a[:, None]),
        (x.unsqueeze(-1), a[..., None]),
        (x.unsqueeze(2), a[:, :, None]),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, np.ascontiguousarray(expected))


_GETITEM_CASES = [
    1,
    -1,
    (0, 2),
    (1, -1, 3),
    slice(None),
    slice(1, 3),
    slice(None, None, 2),
    slice(1, None, 3),
    slice(-3, -1),
    slice(5, 100),
    slice(3, 1),
    (slice(None), 0),
    (slice(None), slice(1, 4, 2)),
    (slice(None), slice(None), slice(None, None, 3)),
    (Ellipsis, 1),
    (Ellipsis, slice(0, 5, 4)),
    (0, Ellipsis),
    (None,),
    (None, 1, None),
    (slice(None), None, slice(0, 2)),
    (Ellipsis, None),
    (1, Ellipsis, None, 2),
    (),
    np.int64(2),
]


@pytest.mark.parametrize("index", _GETITEM_CASES, ids=lambda ix: repr(ix).replace(" ", ""))
def test_getitem_basic(index):
    a = _f32(4, 3, 5)
    x = lv.tensor(a)
    assert_tensor(x[index], np.array(a[index]))


def test_getitem_basic_compiled(mode):
    a = _f32(4, 3, 5)
    x = lv.tensor(a)
    outs = [
        (x[ix], np.array(a[ix]))
        for ix in (1, (slice(None), slice(1, 4, 2)), (Ellipsis, slice(0, 5, 4)), (None, 1, None))
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_getitem_with_integer_tensor(mode):
    a = _f32(4, 3, 5)
    ints = np.arange(20).reshape(4, 5)
    x, xi = lv.tensor(a), lv.tensor(ints)
    i = np.array([2, 0, 2, 3])
    j = np.array([[1, 0], [2, 2]])
    outs = [
        (x[lv.tensor(i)], a[i]),
        (x[list(i)], a[i]),
        (x[i], a[i]),
        (x[:, lv.tensor([2, 0])], a[:, [2, 0]]),
        (x[:, :, lv.tensor([4, 4, 0])], a[:, :, [4, 4, 0]]),
        (x[lv.tensor(j)], a[j]),
        (x[lv.tensor(i), 1], a[i, 1]),
        (x[lv.tensor(i), :, 1:3], a[i, :, 1:3]),
        (xi[lv.tensor(i)], ints[i]),
        (xi[:, lv.tensor(np.array([0, 4], dtype=np.int32))], ints[:, [0, 4]]),
        (x[lv.tensor([-1, 0])], a[[-1, 0]]),
        (x[1, lv.tensor([2, 0])], a[1, [2, 0]]),
        # PyTorch applies integer indices first (NumPy would move the advanced axis to the front)
        (x[1, :, lv.tensor([4, 1])], a[1][:, [4, 1]]),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_iteration_and_narrow_split_chunk(mode):
    a = _f32(5, 3)
    x = lv.tensor(a)
    rows = list(x)
    parts = x.split(2)
    sized = x.split([1, 4])
    cols = x.split(1, dim=1)
    chunks = x.chunk(3)
    outs = [(r, a[k]) for k, r in enumerate(rows)]
    outs += [(x.narrow(0, 1, 3), a[1:4]), (x.narrow(1, -2, 2), a[:, 1:3])]
    outs += [(p, a[k * 2 : (k + 1) * 2]) for k, p in enumerate(parts)]
    outs += [(sized[0], a[:1]), (sized[1], a[1:])]
    outs += [(c, a[:, k : k + 1]) for k, c in enumerate(cols)]
    outs += [(c, a[k * 2 : (k + 1) * 2]) for k, c in enumerate(chunks)]
    assert len(parts) == 3 and len(cols) == 3 and len(chunks) == 3
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_cat_and_stack(mode):
    a, b, c = _f32(2, 3, seed=1), _f32(2, 1, seed=2), _f32(2, 3, seed=3)
    ints = _i64(1, 3)
    x, y, z, xi = lv.tensor(a), lv.tensor(b), lv.tensor(c), lv.tensor(ints)
    bo = lv.tensor(a > 0)
    outs = [
        (lv.cat([x, y], 1), np.concatenate([a, b], 1)),
        (lv.cat([x, z], 0), np.concatenate([a, c], 0)),
        (lv.cat([x, z, x], -2), np.concatenate([a, c, a], -2)),
        (lv.cat((x, y, x), dim=-1), np.concatenate([a, b, a], -1)),
        (lv.cat([x]), a),
        (lv.cat([x, xi], 0), np.concatenate([a, ints.astype(np.float32)], 0)),
        (lv.cat([xi, xi], 0), np.concatenate([ints, ints], 0)),
        (lv.cat([bo, bo[:1]], 0), np.concatenate([a > 0, a[:1] > 0], 0)),
        (lv.stack([x, z]), np.stack([a, c])),
        (lv.stack([x, z], 1), np.stack([a, c], 1)),
        (lv.stack([x, z, x], -1), np.stack([a, c, a], -1)),
        (lv.stack((x,), 2), np.stack([a], 2)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


# ============================================================ index ops
def test_gather_index_select_scatter_add(mode):
    a = _f32(3, 4)
    idx0 = np.array([[2, 0, 1, 1], [0, 0, 2, 1]])
    idx1 = np.array([[3, 3], [0, 1], [2, 0]])
    sel = np.array([3, 0, 0])
    src = _f32(2, 4, seed=5)
    base = _f32(3, 4, seed=6)
    x = lv.tensor(a)
    outs = [
        (x.gather(0, lv.tensor(idx0)), _gather_loops(a, idx0, 0)),
        (x.gather(1, lv.tensor(idx1)), _gather_loops(a, idx1, 1)),
        (x.gather(-1, lv.tensor(idx1)), _gather_loops(a, idx1, 1)),
        (x.gather(1, lv.tensor(idx1[:2, :1])), _gather_loops(a, idx1[:2, :1], 1)),
        (x.gather(1, lv.tensor(idx1.astype(np.int32))), _gather_loops(a, idx1, 1)),
        (x.index_select(1, lv.tensor(sel)), a[:, sel]),
        (x.index_select(0, lv.tensor([2, 2])), a[[2, 2]]),
        (x.index_select(-1, [1]), a[:, [1]]),
        (lv.tensor(base).scatter_add(0, lv.tensor(idx0), lv.tensor(src)), _scatter_add_loops(base, idx0, src, 0)),
        (
            lv.tensor(base).scatter_add(1, lv.tensor(idx0[:, :2]), lv.tensor(src[:, :2])),
            _scatter_add_loops(base, idx0[:, :2], src[:, :2], 1),
        ),
        (
            lv.tensor(np.zeros(5, np.int64)).scatter_add(0, lv.tensor([1, 1, 4]), lv.tensor([1, 2, 3])),
            np.array([0, 3, 0, 0, 3]),
        ),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_scatter_add_into_constant_base(mode):
    """zeros(...).scatter_add(...) is how gather's VJP starts; the base is a broadcast scalar."""
    outs = [
        (
            lv.zeros(5, dtype=lv.int64).scatter_add(0, lv.tensor([1, 1, 4]), lv.tensor([1, 2, 3])),
            np.array([0, 3, 0, 0, 3]),
        ),
        (
            lv.full((2, 3), 1.0).scatter_add(1, lv.tensor([[0], [2]]), lv.tensor([[1.0], [2.0]])),
            np.array([[2, 1, 1], [1, 1, 3]], dtype=np.float32),
        ),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


# ================================================================ matmul
MATMUL_SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3, 4)),
    ((2, 2, 3), (3, 4)),
    ((2, 3), (4, 3, 5)),
    ((4, 1, 2, 3), (5, 3, 2)),
    ((3,), (2, 3, 4)),
    ((2, 2, 3), (3,)),
    ((1, 2, 3), (2, 3, 4)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_shapes(dtype, mode):
    outs = []
    for k, (sa, sb) in enumerate(MATMUL_SHAPES):
        a = _f32(*sa, seed=k).astype(dtype)
        b = _f32(*sb, seed=k + 50).astype(dtype)
        x, y = lv.tensor(a), lv.tensor(b)
        want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
        outs += [(x @ y, want), (x.matmul(y), want), (lv.matmul(x, y), want)]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_matmul_mixed_and_reflected(mode):
    a = _f32(2, 3)
    b = _f32(3, 2, seed=1).astype(np.float64)
    x = lv.tensor(a)
    outs = [
        (x @ lv.tensor(b), a.astype(np.float64) @ b),
        (x @ b.tolist(), (a @ b.astype(np.float32))),
        (lv.tensor(b.T) @ x.T, b.T @ a.T.astype(np.float64)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected, rtol=1e-6)


def test_matmul_integer_stays_integer():
    """PyTorch keeps integer products integer, wrapping on overflow (NumPy's matmul does too)."""
    a = np.array([[1, 2], [3, 4]])
    assert_tensor(lv.tensor(a) @ lv.tensor(a), a @ a)
    u = np.array([[200, 100], [3, 255]], np.uint8)
    assert_tensor(lv.tensor(u) @ lv.tensor(u), u @ u)  # wraps modulo 256
    with pytest.raises(lv.errors.DTypeError, match="bool"):
        lv.tensor([[True]]) @ lv.tensor([[True]])
