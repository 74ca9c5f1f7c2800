"""Creation functions (tensor, zeros, full, arange, eye, rand ...): values and dtypes against NumPy,
moved out of test_ops_forward.py (run on the interpreter and through the compiler, ``mode``)."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import assert_tensor

import lazyvic as lv


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(*shape, seed=0, low=-2.0, high=2.0):
    return _rng(seed).uniform(low, high, size=shape).astype(np.float32)


def _i64(*shape, seed=0, low=-5, high=6):
    return _rng(seed).integers(low, high, size=shape).astype(np.int64)


# ============================================================== creation
def test_tensor_from_python_data_dtypes(mode):
    cases = [
        ([[1, 2], [3, 4]], np.int64),
        ([1.5, -2.0], np.float32),
        ([1, 2.5], np.float32),
        ([True, False], np.bool_),
        (3, np.int64),
        (2.5, np.float32),
        (True, np.bool_),
    ]
    for data, np_dtype in cases:
        assert_tensor(lv.tensor(data), np.array(data, dtype=np_dtype))


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_tensor_and_from_numpy_keep_numpy_dtype(np_dtype, mode):
    a = (_f32(2, 3) * 3).astype(np_dtype)
    assert_tensor(lv.tensor(a), a)
    assert_tensor(lv.from_numpy(a), a)
    # a non-contiguous array is read in its logical order
    assert_tensor(lv.from_numpy(a.T), a.T)


def test_tensor_copies_its_data():
    a = np.arange(6.0).reshape(2, 3)
    t = lv.tensor(a)
    a[0, 0] = 100.0
    assert t.numpy()[0, 0] == 0.0


@pytest.mark.parametrize("dtype", [lv.float32, lv.float64, lv.int32, lv.int64, lv.bool])
def test_tensor_dtype_argument(dtype):
    data = [[0, 1, 2], [3, 0, 5]]
    assert_tensor(lv.tensor(data, dtype=dtype), np.array(data).astype(dtype.np), dtype)


def test_dtype_aliases():
    assert lv.float is lv.float32 and lv.double is lv.float64
    assert lv.long is lv.int64 and lv.int is lv.int32 and lv.bool is lv.bool_
    assert lv.tensor([1], dtype="float64").dtype == lv.float64
    assert lv.tensor([1], dtype=np.int32).dtype == lv.int32
    assert lv.tensor([1], dtype=float).dtype == lv.float32
    assert lv.tensor([1], dtype=int).dtype == lv.int64


def test_zeros_ones_full(mode):
    outs = [
        (lv.zeros(2, 3), np.zeros((2, 3), np.float32)),
        (lv.zeros((2, 3), dtype=lv.int32), np.zeros((2, 3), np.int32)),
        (lv.ones([3]), np.ones(3, np.float32)),
        (lv.ones(2, 2, dtype=lv.float64), np.ones((2, 2))),
        (lv.ones(2, dtype=lv.bool), np.ones(2, bool)),
        (lv.full((2, 3), 7), np.full((2, 3), 7, np.int64)),
        (lv.full((2,), 2.5), np.full(2, 2.5, np.float32)),
        (lv.full((2,), True), np.full(2, True)),
        (lv.full((3,), -1.25, dtype=lv.float64), np.full(3, -1.25)),
        (lv.full((), 4.0), np.array(4.0, np.float32)),
        (lv.empty(2, 2).shape == (2, 2), None),
    ]
    assert outs.pop()[0]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_like_constructors(mode):
    x = lv.tensor(_i64(2, 3))
    y = lv.tensor(_f32(3, 2).astype(np.float64))
    outs = [
        (lv.zeros_like(x), np.zeros((2, 3), np.int64)),
        (lv.ones_like(x, dtype=lv.float64), np.ones((2, 3))),
        (lv.full_like(x, 7), np.full((2, 3), 7, np.int64)),
        (lv.full_like(y, 0.5), np.full((3, 2), 0.5)),
        (x.zeros_like(), np.zeros((2, 3), np.int64)),
        (y.ones_like(), np.ones((3, 2))),
        (y.new_zeros(4), np.zeros(4)),
        (y.new_ones(1, 2), np.ones((1, 2))),
        (y.new_full((2,), 3.0), np.full(2, 3.0)),
        (x.new_tensor([1.0, 2.0]), np.array([1, 2], np.int64)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)
    for like, shape, dtype in (
        (lv.rand_like(y), (3, 2), lv.float64),
        (lv.randn_like(y), (3, 2), lv.float64),
        (lv.rand_like(x, dtype=lv.float32), (2, 3), lv.float32),
    ):
        assert like.dtype == dtype and like.shape == shape
        assert np.isfinite(like.numpy()).all()


@pytest.mark.parametrize(
    "args, kwargs, expected",
    [
        ((5,), {}, np.arange(5, dtype=np.int64)),
        ((2, 9, 3), {}, np.arange(2, 9, 3, dtype=np.int64)),
        ((5, 0, -2), {}, np.array([5, 3, 1], dtype=np.int64)),
        ((0, 1, 0.25), {}, np.array([0, 0.25, 0.5, 0.75], dtype=np.float32)),
        ((1.5,), {}, np.array([0, 1], dtype=np.float32)),
        ((4,), {"dtype": lv.float64}, np.arange(4, dtype=np.float64)),
        ((3, 0), {}, np.zeros(0, dtype=np.int64)),
    ],
)
def test_arange(args, kwargs, expected):
    assert_tensor(lv.arange(*args, **kwargs), expected)


def test_eye_tril_triu(mode):
    a = _f32(3, 4)
    outs = [
        (lv.eye(3), np.eye(3, dtype=np.float32)),
        (lv.eye(2, 3, dtype=lv.int64), np.eye(2, 3, dtype=np.int64)),
        (lv.tril(lv.tensor(a)), np.tril(a)),
        (lv.tril(lv.tensor(a), -1), np.tril(a, -1)),
        (lv.triu(lv.tensor(a), 1), np.triu(a, 1)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected)


def test_rand_randn_shapes_ranges_and_moments(mode):
    lv.manual_seed(7)
    u, u64 = lv.rand(4000), lv.rand(2, 5, dtype=lv.float64)
    z, z64 = lv.randn(4000), lv.randn((3, 2), dtype=lv.float64)
    lv.sync()
    assert (u.dtype, u64.dtype, z.dtype, z64.dtype) == (lv.float32, lv.float64, lv.float32, lv.float64)
    assert u64.shape == (2, 5) and z64.shape == (3, 2)
    un = u.numpy()
    assert un.min() >= 0.0 and un.max() < 1.0
    assert abs(un.mean() - 0.5) < 0.03 and abs(un.var() - 1 / 12) < 0.01
    zn = z.numpy()
    assert np.isfinite(zn).all()
    assert abs(zn.mean()) < 0.1 and abs(zn.std() - 1.0) < 0.06
    # successive draws continue the stream: no repeats
    assert not np.array_equal(u.numpy()[:10], lv.rand(10).numpy())


def test_randint_and_randperm():
    lv.manual_seed(3)
    r = lv.randint(3, 7, (200,))
    assert r.dtype == lv.int64 and r.shape == (200,)
    rn = r.numpy()
    assert rn.min() >= 3 and rn.max() < 7 and set(rn.tolist()) == {3, 4, 5, 6}
    assert lv.randint(5, size=(3,)).numpy().max() < 5
    p = lv.randperm(10)
    assert p.dtype == lv.int64
    assert sorted(p.tolist()) == list(range(10))


def test_numpy_scalars_keep_their_dtype_as_in_pytorch():
    """torch.tensor(np.float64(3)) is float64 and torch.tensor(np.int32(3)) int32 (a NumPy
    scalar is a 0-d array to PyTorch); Python numbers take the defaults."""
    cases = [
        (np.float64(3), lv.float64),
        (np.float32(3), lv.float32),
        (np.int32(3), lv.int32),
        (np.int64(3), lv.int64),
        (np.uint8(3), lv.uint8),
        (np.bool_(True), lv.bool),
        (3.0, lv.float32),
        (3, lv.int64),
    ]
    for value, want in cases:
        got = lv.tensor(value)
        assert got.dtype is want and got.shape == () and got.item() == value, (value, got.dtype)
        assert lv.as_tensor(value).dtype is want
    assert lv.tensor(np.float64(3), dtype=lv.float32).dtype is lv.float32
