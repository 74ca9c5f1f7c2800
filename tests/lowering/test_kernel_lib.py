"""Maximum errors of the vectorizable float32 approximations against float64 libm."""

import math

import numpy as np
import pytest
from numba import njit

from lazyvic.lowering import kernel_lib as kl


def _vectorized(fn):
    @njit(error_model="numpy")
    def run(out, x):
        for i in range(x.size):
            out[i] = fn(x[i])

    def call(x):
        out = np.empty_like(x)
        run(out, x)
        return out

    return call


GRID = np.linspace(-30, 30, 400_001).astype(np.float32)


def _rel(got, ref):
    m = np.isfinite(ref) & (np.abs(ref) > 1e-30)
    return np.max(np.abs(got[m] - ref[m]) / np.abs(ref[m]))


def test_exp():
    x = np.linspace(-87, 88, 400_001).astype(np.float32)
    assert _rel(_vectorized(kl.exp_f32)(x), np.exp(x.astype(np.float64))) < 2.5e-7
    special = np.array([np.inf, -np.inf, np.nan, 100, -100], np.float32)
    got = _vectorized(kl.exp_f32)(special)
    assert got[0] == np.inf and got[1] == 0 and np.isnan(got[2]) and got[3] == np.inf and got[4] == 0


def test_log():
    x = np.concatenate([np.logspace(-44, 38, 400_001), [1.0, 1 + 1e-6, 1 - 1e-6]]).astype(np.float32)
    assert _rel(_vectorized(kl.log_f32)(x), np.log(x.astype(np.float64))) < 2.5e-7
    got = _vectorized(kl.log_f32)(np.array([0, -1, np.inf, np.nan], np.float32))
    assert got[0] == -np.inf and np.isnan(got[1]) and got[2] == np.inf and np.isnan(got[3])


def test_tanh_sigmoid():
    ref = np.tanh(GRID.astype(np.float64))
    assert np.max(np.abs(_vectorized(kl.tanh_f32)(GRID) - ref)) < 4e-7
    small = np.linspace(-0.1, 0.1, 10_001).astype(np.float32)
    assert _rel(_vectorized(kl.tanh_f32)(small), np.tanh(small.astype(np.float64))) < 5e-7
    assert _rel(_vectorized(kl.sigmoid_f32)(GRID), 1 / (1 + np.exp(-GRID.astype(np.float64)))) < 4e-7


@pytest.mark.parametrize("lo,hi", [(-6, 6), (-0.3, 0.3)])
def test_erf(lo, hi):
    x = np.linspace(lo, hi, 100_001).astype(np.float32)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.max(np.abs(_vectorized(kl.erf_f32)(x) - ref)) < 5e-7
    tiny = np.linspace(-1e-3, 1e-3, 1001).astype(np.float32)
    tref = np.array([math.erf(v) for v in tiny.astype(np.float64)])
    assert _rel(_vectorized(kl.erf_f32)(tiny), tref) < 3e-7


@pytest.mark.parametrize("name", ["exp_f32", "log_f32", "tanh_f32", "sigmoid_f32", "erf_f32"])
def test_numpy_mirror_gives_the_kernel_bits(name):
    # ops/numerics.py computes the same float32 operations with NumPy (the interpreter's
    # references): bit for bit, over a dense grid, subnormals and the special values.
    from lazyvic.ops import numerics

    grid = np.concatenate(
        [
            np.linspace(-100, 100, 200_001),
            np.logspace(-45, 38, 20_001),
            -np.logspace(-45, 38, 20_001),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, -87.33, 1e-39, -1e-39],
        ]
    ).astype(np.float32)
    got = getattr(numerics, name)(grid)
    want = _vectorized(getattr(kl, name))(grid)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


def test_numpy_fma_is_the_fused_multiply_add():
    # numerics.fma (round-to-odd in float64) against the compiled llvm.fma, bit for bit, on
    # products that cancel against c, subnormal results, ties and special values.
    from lazyvic.ops import numerics

    rng = np.random.default_rng(0)
    n = 200_000
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-70, 70, n)).astype(np.float32)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-70, 70, n)).astype(np.float32)
    near = -(a.astype(np.float64) * b.astype(np.float64))
    c = np.where(rng.random(n) < 0.5, near * (1 + rng.standard_normal(n) * 1e-7), rng.standard_normal(n))
    c = c.astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, 1.0 + 2**-23], np.float32)
    a, b, c = (np.concatenate([v, np.repeat(special, 8), np.tile(special, 8)]) for v in (a, b, c[: len(a)]))
    b = np.roll(b, 3)

    @njit(error_model="numpy")
    def fused(out, a, b, c):
        for i in range(a.size):
            out[i] = kl.fma(a[i], b[i], c[i])

    want = np.empty_like(a)
    fused(want, a, b, c)
    got = numerics.fma(a, b, c)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))
    # Sums that round to a float32 midpoint in float64 but lie below it: (1 + 2^-23) +
    # (1 + 2^-23)(2^-24 - 2^-47) = 1 + 3 * 2^-24 - 2^-70 must give 1 + 2^-23 (a float64 sum
    # rounded to float32 again gives 1 + 2^-22); alone (the fast path's check finds it) and
    # among ordinary values, and negated.
    one = np.float32(1 + 2**-23)
    for sign in (1, -1):
        tie_a, tie_b, tie_c = np.float32(sign * one), np.float32(2**-24 - 2**-47), np.float32(sign * one)
        assert numerics.fma(tie_a, tie_b, tie_c) == np.float32(sign * one)
        mixed = [np.concatenate([[v], np.ones(9, np.float32)]) for v in (tie_a, tie_b, tie_c)]
        assert numerics.fma(*mixed)[0] == np.float32(sign * one)
    # Below float32's normal range: products of tiny values, with and without a small c.
    tiny = (rng.standard_normal(1000) * 2.0**-70).astype(np.float32)
    small_c = np.where(rng.random(1000) < 0.5, 0.0, rng.standard_normal(1000) * 2.0**-130).astype(np.float32)
    want = np.empty_like(tiny)
    fused(want, tiny, np.roll(tiny, 1), small_c)
    assert np.array_equal(numerics.fma(tiny, np.roll(tiny, 1), small_c).view(np.int32), want.view(np.int32))
