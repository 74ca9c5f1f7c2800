"""Edge values with PyTorch's results: operands with a size of 0 (matmul, bmm, einsum, conv2d,
reductions over an empty axis), infinities in logsumexp, sign of NaN, integers a dtype cannot
hold. Each runs on the interpreter and through the compiler (the ``mode`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.functional as F
from lazyvic import errors

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    "a, b",
    [
        ((2, 5, 0), (0, 3)),  # before: ShapeError "reshape: cannot reshape (2, 5, 0) ... to (-1, 0)"
        ((4, 0), (0, 3)),
        ((0,), (0,)),
        ((5, 0), (0,)),
        ((2, 1, 4, 0), (3, 0, 5)),
        ((0, 2, 3), (3, 4)),
        ((2, 3), (3, 0)),
    ],
)
def test_matmul_with_a_size_of_0(mode, a, b):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
    got = (lv.tensor(x) @ lv.tensor(y)).numpy()
    want = np.matmul(x, y)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # zeros, or nothing


def test_matmul_with_k_0_has_zero_gradients(mode):
    a = lv.tensor(np.ones((2, 5, 0), np.float32), requires_grad=True)
    b = lv.tensor(np.ones((0, 3), np.float32), requires_grad=True)
    (a @ b + 1.0).sum().backward()
    assert a.grad.shape == (2, 5, 0) and b.grad.shape == (0, 3)


def test_bmm_einsum_and_conv_with_a_size_of_0(mode):
    np.testing.assert_array_equal(lv.bmm(lv.ones(2, 5, 0), lv.ones(2, 0, 3)).numpy(), np.zeros((2, 5, 3)))
    # before: ShapeError "expand: cannot expand shape (2, 0) to (2, 1)"
    np.testing.assert_array_equal(lv.einsum("ij,jk->ik", lv.ones(2, 0), lv.ones(0, 3)).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(
        lv.einsum("bij,bjk->bik", lv.ones(0, 2, 3), lv.ones(0, 3, 4)).numpy().shape, (0, 2, 4)
    )
    assert F.conv2d(lv.ones(0, 3, 5, 5), lv.ones(4, 3, 3, 3)).numpy().shape == (0, 4, 3, 3)
    with pytest.raises(errors.ShapeError, match="conv2d: weight .* at least one output channel"):
        F.conv2d(lv.ones(1, 3, 5, 5), lv.ones(0, 3, 3, 3))  # before: NumPy's IndexError at the sync


def test_reductions_over_an_empty_axis(mode):
    x = lv.ones(3, 0)
    np.testing.assert_array_equal(x.sum(1).numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(x.prod(1).numpy(), np.ones(3, np.float32))
    assert np.isnan(x.mean(1).numpy()).all()
    np.testing.assert_array_equal(x.logsumexp(1).numpy(), np.full(3, -INF, np.float32))  # before: IndexError
    assert x.softmax(1).numpy().shape == (3, 0) and x.log_softmax(1).numpy().shape == (3, 0)
    assert F.cross_entropy(lv.ones(0, 4), lv.zeros(0, dtype=lv.int64)).isnan().item()
    for reduce in (lambda: x.amax(1), lambda: x.max(1), lambda: x.argmax(1), lambda: lv.ones(0).min()):
        with pytest.raises(errors.IndexError, match="empty axis"):
            reduce()


@pytest.mark.parametrize(
    "values, want",
    [([INF, 1.0], INF), ([-INF, -INF], -INF), ([INF, -INF], INF), ([INF, INF], INF), ([1.0, 2.0], 2.3132617)],
)
def test_logsumexp_with_infinities(mode, values, want):
    """Before: NaN for the first four (``inf - inf`` in the shift by the maximum)."""
    assert lv.tensor(values).logsumexp(0).item() == pytest.approx(want)
    assert lv.tensor([values, values]).logsumexp((0, 1)).item() == pytest.approx(
        want + np.log(2) if abs(want) != INF else want
    )


def test_logsumexp_of_nan_is_nan(mode):
    assert np.isnan(lv.tensor([NAN, 1.0]).logsumexp(0).item())


@pytest.mark.parametrize("dtype", [lv.float32, lv.float64])
def test_sign_of_nan_and_zeros_is_pytorchs(mode, dtype):
    """PyTorch 2.13: ``torch.sign(nan) == 0`` (and ``sign(-0.0)`` is +0)."""
    got = lv.tensor([NAN, -0.0, 0.0, 2.0, -3.0, INF, -INF], dtype=dtype).sign().numpy()
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 1.0, -1.0, 1.0, -1.0])
    assert not np.signbit(got[:3]).any()


@pytest.mark.parametrize(
    "make, value",
    [
        (lambda: lv.tensor(np.array([1, 2**64 - 1], dtype=np.uint64), dtype=lv.int64), "18446744073709551615"),
        (lambda: lv.tensor([2**64 - 1]), "18446744073709551615"),
        (lambda: lv.tensor([2**63]), "9223372036854775808"),
        (lambda: lv.tensor([2**70]), "1180591620717411303424"),
        (lambda: lv.tensor([2**63, 1], dtype=lv.int64), "9223372036854775808"),
        (lambda: lv.tensor([2**64], dtype=lv.uint64), "18446744073709551616"),
        (lambda: lv.tensor([-1], dtype=lv.uint64), "-1"),
        (lambda: lv.tensor([300], dtype=lv.uint8), "300"),
        (lambda: lv.tensor(np.array([-129, 5]), dtype=lv.int8), "-129"),
        (lambda: lv.tensor([1.0, INF], dtype=lv.int64), "inf"),
        (lambda: lv.tensor([3e9], dtype=lv.int32), "3000000000.0"),
        (lambda: lv.full((2,), 2**64 - 1), "18446744073709551615"),
        (lambda: lv.tensor([1]) + 2**70, "1180591620717411303424"),
    ],
)
def test_integers_a_dtype_cannot_hold_raise(make, value):
    """Before: uint64 2**64 - 1 became -1, 2**63 became -2**63, inf an arbitrary integer."""
    with pytest.raises(errors.DTypeError) as info:
        make()
    assert value in str(info.value)


def test_uint64_keeps_values_beyond_int64():
    """uint64 arrays are uint64 tensors (before: 2**64 - 1 had no dtype and raised)."""
    a = np.array([1, 2**63, 2**64 - 1], dtype=np.uint64)
    for t in (lv.tensor(a), lv.from_numpy(a), lv.tensor([1, 2**63, 2**64 - 1], dtype=lv.uint64)):
        assert t.dtype is lv.uint64
        np.testing.assert_array_equal(t.numpy(), a)


def test_integers_that_fit_are_kept():
    np.testing.assert_array_equal(lv.tensor(np.array([0, 2**63 - 1], dtype=np.uint64)).numpy(), [0, 2**63 - 1])
    np.testing.assert_array_equal(lv.tensor([-(2**63), 2**63 - 1]).numpy(), [-(2**63), 2**63 - 1])
    np.testing.assert_array_equal(lv.tensor([2.5, -3.0], dtype=lv.int32).numpy(), [2, -3])
