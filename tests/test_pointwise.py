"""Elementwise functions of lazyvic/pointwise.py and the new elementwise primitives: rounding (with
the sign of zero), trigonometry, log1p/expm1, log2/log10/exp2, special values, division and
remainders, clamp, logical functions. Values against NumPy (and ``math``), gradients against
finite differences, and the interpreter and compiled kernels agreeing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _oracle import assert_tensor, check_vjp

import lazyvic as lv
from lazyvic import errors

SPECIAL = [
    -2.5,
    -1.5,
    -0.7,
    -0.5,
    -0.0,
    0.0,
    1e-30,
    -1e-30,
    0.3,
    0.5,
    1.5,
    2.5,
    3.7,
    1e30,
    -1e30,
    np.inf,
    -np.inf,
    np.nan,
]


def _values(dtype):
    big = 2.0**23 if dtype == np.float32 else 2.0**52
    extra = [big - 0.5, big + 1, -(big - 0.5), big / 2 + 0.5]
    return np.array(SPECIAL + extra, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rounding_is_exact_with_the_sign_of_zero(dtype, mode):
    a = _values(dtype)
    x = lv.tensor(a)
    outs = {
        "floor": (x.floor(), np.floor(a)),
        "ceil": (lv.ceil(x), np.ceil(a)),
        "trunc": (x.trunc(), np.trunc(a)),
        "fix": (lv.fix(x), np.trunc(a)),
        "round": (x.round(), np.round(a)),  # half to even
    }
    lv.sync()
    for name, (t, want) in outs.items():
        got = t.numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{name}: sign")
    with np.errstate(invalid="ignore"):
        assert_tensor(x.frac(), a - np.trunc(a))


def test_rounding_integers_and_decimals():
    i = lv.tensor([-3, 0, 4])
    for t in (i.floor(), i.ceil(), i.trunc(), i.round(), lv.round(i, decimals=1)):
        assert_tensor(t, np.array([-3, 0, 4]))
    assert_tensor(lv.tensor([1.2345, -2.675, 0.5]).round(decimals=2), np.array([1.23, -2.68, 0.5], np.float32))
    assert_tensor(lv.tensor([1234.5, 1250.0]).round(decimals=-2), np.array([1200.0, 1200.0], np.float32))
    with pytest.raises(errors.DTypeError, match="frac: expected a floating-point input, got int64"):
        i.frac()


def test_sign_follows_pytorch(mode):
    a = np.array([-0.0, 0.0, np.nan, -2.0, np.inf, -np.inf, 3.5], np.float32)
    assert_tensor(lv.tensor(a).sign(), np.array([0, 0, 0, -1, 1, -1, 1], np.float32))  # sign(nan) is 0 in PyTorch
    assert_tensor(lv.sgn(lv.tensor([-3, 0, 2])), np.array([-1, 0, 1]))
    with pytest.raises(errors.DTypeError, match="sign: bool"):
        lv.tensor([True]).sign()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_transcendentals_against_numpy(dtype, mode):
    rng = np.random.default_rng(1)
    a = rng.uniform(-3, 3, 12)
    p = rng.uniform(0.01, 50, 12)
    if dtype == "int64":
        a, p = np.round(a).astype(np.int64), np.round(p).astype(np.int64) + 1
    else:
        a, p = a.astype(dtype), p.astype(dtype)
    x, y = lv.tensor(a), lv.tensor(p)
    out = np.float64 if dtype == "float64" else np.float32
    f64 = a.astype(np.float64)
    outs = [
        (x.sin(), np.sin(f64)),
        (lv.cos(x), np.cos(f64)),
        (x.tan(), np.tan(f64)),
        (y.log2(), np.log2(p.astype(np.float64))),
        (lv.log10(y), np.log10(p.astype(np.float64))),
        (x.exp2(), np.exp2(f64)),
        (lv.log1p(y), np.log1p(p.astype(np.float64))),
        (x.expm1(), np.expm1(f64)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want.astype(out), rtol=3e-6 if out is np.float32 else 1e-12)


def test_exact_logs_and_small_arguments(mode):
    x = lv.tensor([1.0, 2.0, 8.0, 2.0**29, 0.5, 1024.0])
    np.testing.assert_array_equal(x.log2().numpy(), [0, 1, 3, 29, -1, 10])
    np.testing.assert_array_equal(lv.tensor([1.0, 10.0, 1000.0, 1e-3]).log10().numpy(), [0, 1, 3, -3])
    np.testing.assert_array_equal(lv.tensor([0.0, 3.0, -1.0, 10.0]).exp2().numpy(), [1, 8, 0.5, 1024])
    tiny = np.array([1e-10, -1e-12, 1e-5], np.float64)
    np.testing.assert_allclose(lv.tensor(tiny).log1p().numpy(), np.log1p(tiny), rtol=1e-15)
    np.testing.assert_allclose(lv.tensor(tiny).expm1().numpy(), np.expm1(tiny), rtol=1e-15)
    edge = lv.tensor([-1.0, -2.0, np.inf, np.nan, 800.0], dtype=lv.float64)
    np.testing.assert_array_equal(edge.log1p().numpy(), [-np.inf, np.nan, np.inf, np.nan, math.log1p(800.0)])
    np.testing.assert_array_equal(edge.expm1().numpy(), [math.expm1(-1), math.expm1(-2), np.inf, np.nan, np.inf])
    # Finite up to the largest float64 whose expm1 is (a guard at 709.0 gave inf there).
    top = np.array([709.5, 709.782712893384, np.nextafter(709.782712893384, 800.0)])
    np.testing.assert_array_equal(lv.tensor(top).expm1().numpy(), [math.expm1(709.5), math.expm1(top[1]), np.inf])
    np.testing.assert_array_equal(lv.tensor([np.inf, -np.inf, np.nan]).sin().numpy(), [np.nan] * 3)


def test_special_value_tests_and_nan_to_num(mode):
    a = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], np.float32)
    x = lv.tensor(a)
    outs = [
        (x.isnan(), np.isnan(a)),
        (lv.isinf(x), np.isinf(a)),
        (x.isfinite(), np.isfinite(a)),
        (lv.isposinf(x), np.isposinf(a)),
        (x.isneginf(), np.isneginf(a)),
        (lv.tensor([1, 2]).isnan(), np.array([False, False])),
        (lv.tensor([1, 2]).isfinite(), np.array([True, True])),
        (x.nan_to_num(), np.nan_to_num(a)),
        (lv.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0), np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-2.0)),
        (lv.tensor([1, 2]).nan_to_num(), np.array([1, 2])),
        (lv.isclose(x, x), np.isclose(a, a)),
        (lv.isclose(x, x, equal_nan=True), np.isclose(a, a, equal_nan=True)),
        (lv.tensor([1, 2]).isclose(lv.tensor([1, 3])), np.array([True, False])),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)


@pytest.mark.parametrize("kind", ["int64", "float32"])
def test_floor_division_and_remainders(kind, mode):
    a = np.array([-7, -1, 0, 5, 7, -8]).astype(kind)
    b = np.array([2, -3, 4, -2, 3, 3]).astype(kind)
    x, y = lv.tensor(a), lv.tensor(b)
    outs = [
        (x // y, np.floor_divide(a, b)),
        (x % y, np.remainder(a, b)),
        (x // 3, np.floor_divide(a, 3).astype(kind)),
        (x % 3, np.remainder(a, 3).astype(kind)),
        (7 // y, np.floor_divide(7, b).astype(kind)),
        (lv.remainder(x, -2), np.remainder(a, -2).astype(kind)),
        (lv.fmod(x, 3), np.fmod(a, 3).astype(kind)),
        (x.div(2, rounding_mode="trunc"), np.trunc(a / 2).astype(kind)),
        (x.div(2, rounding_mode="floor"), np.floor(a / 2).astype(kind)),
        (x.div(2), (a / 2).astype(np.float32)),
    ]
    x //= 2
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)
    assert_tensor(x, np.floor_divide(a, 2).astype(kind))


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)


@pytest.mark.parametrize("kind", ["float32", "float64"])
def test_float_floor_division_and_remainders_are_exact(kind, mode):
    """``//``, ``%`` and ``fmod`` of floats as PyTorch computes them (from the exact C fmod, not the
    rounded quotient: 1.0 // 0.1 is 9), bit for bit against NumPy, whose ``floor_divide`` is the
    same algorithm (CPython's float ``//``); remainder's zero keeps fmod's sign, as in PyTorch."""
    a = np.array([1.0, -1.0, 7.5, -7.5, 0.3, 1e8, 5.0, -4.0, 4.0, -0.0, 0.0, np.inf, 3.0, -3.0, 1e-30, 0.5], kind)
    b = np.array([0.1, 0.1, -2.0, 2.0, 0.1, 3.0, 0.0, 2.0, -2.0, 3.0, -3.0, 2.0, np.inf, np.inf, 3.0, -0.0], kind)
    x, y = lv.tensor(a), lv.tensor(b)
    with np.errstate(all="ignore"):
        r = np.fmod(a, b)
        torch_remainder = np.where((r != 0) & ((b < 0) != (r < 0)), r + b, r)
        s = 0.1
        rs = np.fmod(a, a.dtype.type(s))
        outs = [
            (x // y, np.floor_divide(a, b)),
            (x.div(y, rounding_mode="floor"), np.floor_divide(a, b)),
            (x % y, torch_remainder),
            (lv.fmod(x, y), r),
            (x // s, np.floor_divide(a, a.dtype.type(s))),
            (x // -s, np.floor_divide(a, a.dtype.type(-s))),
            (x // 0.0, np.floor_divide(a, a.dtype.type(0.0))),
            (x % s, np.where((rs != 0) & (rs < 0), rs + a.dtype.type(s), rs)),
        ]
    lv.sync()
    for t, want in outs:
        assert t.dtype.name == kind
        np.testing.assert_array_equal(_bits(t.numpy()), _bits(want))
    assert (lv.tensor([1.0]) // 0.1).item() == 9.0 and (lv.tensor([1.0]) % 0.1).item() > 0.09


def test_clamp_forms_logical_functions(mode):
    a = np.array([-2.0, np.nan, 0.5, 3.0], np.float32)
    lo, hi = np.array([-1.0, 0.0, 1.0, 0.0], np.float32), 2.0
    x = lv.tensor(a)
    outs = [
        (x.clamp(lv.tensor(lo), hi), np.clip(a, lo, hi)),  # NaN stays NaN
        (x.clamp_min(0.0), np.where(np.isnan(a), a, np.maximum(a, 0))),
        (lv.clamp_max(x, 0.0), np.where(np.isnan(a), a, np.minimum(a, 0))),
        (lv.clip(x, min=-1.0), np.where(np.isnan(a), a, np.maximum(a, -1))),
        (lv.logical_not(x), np.logical_not(a)),
        (lv.logical_and(x, lv.tensor([1, 0, 1, 1])), np.logical_and(a, [1, 0, 1, 1])),
        (x.logical_or(0), np.logical_or(a, 0)),
        (x.logical_xor(lv.tensor([True, True, False, False])), np.logical_xor(a, [1, 1, 0, 0])),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)
    with pytest.raises(ValueError, match="clamp: at least one"):
        x.clamp()


@pytest.mark.parametrize(
    "name, fn, lo, hi",
    [
        ("tan", lambda x: x.tan(), -1.2, 1.2),
        ("log2", lambda x: x.log2(), 0.2, 3.0),
        ("log10", lambda x: lv.log10(x), 0.2, 3.0),
        ("exp2", lambda x: x.exp2(), -2.0, 2.0),
        ("frac", lambda x: x.frac() * x, -2.9, 2.9),
        ("ceil_trunc", lambda x: x.ceil() + x.trunc() + x, -2.9, 2.9),
        ("remainder", lambda x: (x * 3.0) % 1.7, 0.1, 0.5),
        ("clamp_tensor_bounds", lambda x: x.clamp(x.detach() * 0.0 - 0.3, 0.4), -1.0, 1.0),
        ("nan_to_num", lambda x: (x.log()).nan_to_num(), 0.2, 2.0),
        ("round_decimals", lambda x: x.round(decimals=1) * x, -1.0, 1.0),
    ],
)
def test_composite_gradients(name, fn, lo, hi):
    a = np.random.default_rng(7).uniform(lo, hi, (2, 3)) + 0.013
    check_vjp(fn, a)


def test_div_rounding_modes_promote_as_pytorch():
    i = lv.tensor([-7, 7])
    assert_tensor(i.div(2.5, rounding_mode="trunc"), np.array([-2.0, 2.0], np.float32))  # a float operand
    assert_tensor(lv.div(i, lv.tensor([2, -2]), rounding_mode="floor"), np.array([-4, -4]))
    assert_tensor(i.div(lv.tensor([2.0, 4.0]), rounding_mode="floor"), np.array([-4.0, 1.0], np.float32))
    with pytest.raises(ValueError, match="div: rounding_mode must be None, 'trunc' or 'floor', got 'round'"):
        i.div(2, rounding_mode="round")
