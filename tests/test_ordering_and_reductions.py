"""Sorting and order statistics (sort, argsort, topk, kthvalue, median, msort), and the new
reductions and scans (prod, cumsum, cumprod, all, any, count_nonzero, var's arguments, norms).
Values against NumPy (stable sorts with NaN last), dtypes as PyTorch's, errors typed."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import assert_tensor, check_vjp

import lazyvic as lv
from lazyvic import errors


def _with_ties(*shape, seed=0):
    """Small integers as floats (many ties), a NaN and both zeros."""
    a = np.random.default_rng(seed).integers(-3, 4, size=shape).astype(np.float64)
    a.flat[1] = np.nan
    a.flat[2] = -0.0
    return a


def _stable_desc(a: np.ndarray, axis: int) -> np.ndarray:
    """Descending stable order with NaN first, from Python's sort (independent of lazyvic)."""
    moved = np.moveaxis(a, axis, -1)
    out = np.empty(moved.shape, np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        row = moved[pos]
        out[pos] = sorted(range(len(row)), key=lambda i: (not np.isnan(row[i]), -np.nan_to_num(row[i])))
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_and_argsort_are_stable_with_nan_last(dim, mode):
    a = _with_ties(4, 6, seed=dim + 2)
    x = lv.tensor(a)
    asc = np.argsort(a, axis=dim, kind="stable")
    desc = _stable_desc(a, dim)
    outs = [
        (x.argsort(dim), asc),
        (lv.sort(x, dim).values, np.take_along_axis(a, asc, dim)),
        (x.sort(dim, descending=True).indices, desc),
        (lv.argsort(x, dim, descending=True), desc),
        (x.topk(3, dim).indices, np.take(desc, range(3), axis=dim)),
        (x.topk(2, dim, largest=False).values, np.take(np.take_along_axis(a, asc, dim), range(2), axis=dim)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)


def test_order_statistics_against_numpy(mode):
    a = np.random.default_rng(3).permutation(30).reshape(5, 6).astype(np.float32)
    x = lv.tensor(a)
    srt = np.sort(a, 1)
    outs = [
        (x.kthvalue(2, 1).values, srt[:, 1]),
        (x.kthvalue(6, 1, keepdim=True).indices, a.argmax(1)[:, None]),
        (x.median(1).values, srt[:, 2]),  # the lower median of 6
        (x.median(0).values, np.sort(a, 0)[2]),
        (x.median(), np.sort(a.ravel())[14]),
        (lv.msort(x), np.sort(a, 0)),
        (lv.tensor(np.array([[2, 1, 2, 1]])).sort(descending=True).indices, np.array([[0, 2, 1, 3]])),
        (lv.tensor(3.5).sort().values, np.float32(3.5)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)


def test_median_of_slices_with_nan_and_integer_input():
    a = np.array([[1.0, np.nan, 2.0, np.nan], [3.0, 1.0, 2.0, 0.0]], np.float32)
    values, indices = lv.tensor(a).median(1)
    np.testing.assert_array_equal(values.numpy(), [np.nan, 1.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 1])  # the first NaN; the lower median
    values, indices = lv.median(lv.tensor([[5, 3, 9]]), 1)
    assert values.dtype == lv.int64 and values.tolist() == [5] and indices.tolist() == [0]


def test_ordering_errors():
    x = lv.ones(2, 3) * 1.0
    with pytest.raises(errors.IndexError, match=r"topk: k=4 is out of range for dimension 1 of size 3"):
        x.topk(4)
    with pytest.raises(errors.IndexError, match=r"kthvalue: k=0 is out of range"):
        x.kthvalue(0)
    with pytest.raises(errors.IndexError, match="argsort: dim 2 out of range"):
        x.argsort(2)
    with pytest.raises(errors.IndexError, match="median: cannot take the median of an empty dimension"):
        lv.zeros(2, 0).median(1)
    assert x.is_lazy


def test_order_statistic_gradients_go_to_the_picked_elements():
    a = np.random.default_rng(4).permutation(12).reshape(3, 4) * 0.3 - 1.0
    check_vjp(lambda x: x.kthvalue(2, 0).values, a)
    check_vjp(lambda x: x.sort(0).values * x, a)
    check_vjp(lambda x: x.topk(3).values.exp(), a)
    x = lv.tensor([[1.0, 3.0, 3.0]], dtype=lv.float64, requires_grad=True)
    x.sort(1, descending=True).values[:, 0].sum().backward()  # a tie: the first 3 (stable) gets it
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0]])


def test_max_and_min_over_a_dim_give_the_gradient_to_the_returned_index(mode):
    """PyTorch 2.13 (torch.max(x, 1) / torch.min(y, 0, keepdim=True) on these tensors): the
    whole gradient goes to the index returned, the first of tied values, where ``amax`` shares
    it (lazyvic's max(dim) shared it too)."""
    x = lv.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], requires_grad=True)
    values, indices = x.max(1)
    (values * lv.tensor([1.0, 2.0])).sum().backward()
    np.testing.assert_array_equal(values.numpy(), [3, 2])
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [2, 0, 0]])
    y = lv.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], requires_grad=True)
    values, indices = lv.min(y, 0, keepdim=True)
    values.sum().backward()
    np.testing.assert_array_equal(values.numpy(), [[1, 2, 0]])
    np.testing.assert_array_equal(indices.numpy(), [[0, 1, 1]])
    np.testing.assert_array_equal(y.grad.numpy(), [[1, 0, 0], [0, 1, 1]])
    z = lv.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    z.amax(1).sum().backward()  # amax shares a tie, as PyTorch's
    np.testing.assert_array_equal(z.grad.numpy(), [[0, 0.5, 0.5]])
    s = lv.max(lv.tensor(5.0), 0)  # a 0-d tensor is its own maximum, at index 0
    assert (s.values.item(), s.indices.item(), s.indices.dtype) == (5.0, 0, lv.int64)
    with pytest.raises(errors.IndexError_, match="min: dim 1 out of range"):
        lv.min(lv.tensor(5.0), 1)


# ================================================================ reductions
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # compiled: test_long_scans_and_products
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_prod_cumsum_cumprod_dtypes(dtype, mode):
    a = np.random.default_rng(5).integers(-2, 3, size=(3, 4)).astype(dtype)
    x = lv.tensor(a)
    acc = a.dtype if a.dtype.kind == "f" else np.int64  # PyTorch: bool and integers as int64
    outs = [
        (x.prod(), np.prod(a, dtype=acc)),
        (lv.prod(x, 1), np.prod(a, 1, dtype=acc)),
        (x.prod(0, keepdim=True), np.prod(a, 0, keepdims=True, dtype=acc)),
        (x.cumsum(1), np.cumsum(a, 1, dtype=acc)),
        (lv.cumsum(x, 0, dtype=lv.float64), np.cumsum(a.astype(np.float64), 0)),
        (x.cumprod(1), np.cumprod(a, 1, dtype=acc)),
        (x.all(), np.all(a)),
        (lv.any(x, 1), np.any(a, 1)),
        (x.all(0, keepdim=True), np.all(a, 0, keepdims=True)),
        (lv.count_nonzero(x, 0), np.count_nonzero(a, 0).astype(np.int64)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)


def test_long_scans_and_products(mode):
    a = np.random.default_rng(6).uniform(0.9, 1.1, (2, 300))
    b = np.random.default_rng(7).integers(-3, 4, (300, 2))
    x, y = lv.tensor(a), lv.tensor(b)
    outs = [
        (x.cumsum(1), np.cumsum(a, 1)),
        (x.cumprod(1), np.cumprod(a, 1)),
        (x.prod(1), np.prod(a, 1)),
        (y.cumsum(0), np.cumsum(b, 0)),
        (y[:20].cumprod(0), np.cumprod(b[:20], 0)),
        (y.any(0), np.any(b, 0)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want, rtol=1e-12)


def test_var_std_argument_forms():
    a = np.random.default_rng(7).uniform(-1, 1, (3, 4))
    x = lv.tensor(a)
    np.testing.assert_allclose(x.var(1, True).numpy(), a.var(1, ddof=1))  # PyTorch: var(dim, unbiased)
    np.testing.assert_allclose(x.var(1, False, True).numpy(), a.var(1, keepdims=True))
    np.testing.assert_allclose(x.std(0, correction=0).numpy(), a.std(0))
    np.testing.assert_allclose(lv.std(x, unbiased=False).numpy(), a.std())
    np.testing.assert_allclose(x.mean(dtype=lv.float32).numpy(), a.mean(), rtol=1e-6)
    with pytest.raises(errors.DTypeError, match="mean: expected a floating-point input, got int64"):
        lv.tensor([1, 2]).mean()


def test_norms(mode):
    a = np.random.default_rng(8).uniform(-2, 2, (3, 4))
    x = lv.tensor(a)
    outs = [
        (x.norm(), np.linalg.norm(a)),
        (lv.norm(x, dim=1), np.linalg.norm(a, axis=1)),
        (x.norm(p=1, dim=0, keepdim=True), np.abs(a).sum(0, keepdims=True)),
        (x.norm(p=3), (np.abs(a) ** 3).sum() ** (1 / 3)),
        (lv.linalg.norm(x), np.linalg.norm(a)),
        (lv.linalg.norm(x, ord=1), np.linalg.norm(a, 1)),
        (lv.linalg.norm(x, ord=-np.inf), np.linalg.norm(a, -np.inf)),
        (lv.linalg.norm(x, ord="fro", dim=(1, 0)), np.linalg.norm(a, "fro")),
        (lv.linalg.norm(x[0], ord=np.inf), np.abs(a[0]).max()),
        (lv.linalg.vector_norm(x, ord=0), np.float64(np.count_nonzero(a))),
        (lv.linalg.vector_norm(x, ord=-np.inf, dim=1), np.abs(a).min(1)),
        (lv.linalg.matrix_norm(x, ord=-1), np.linalg.norm(a, -1)),
        (lv.linalg.matrix_norm(x[None], ord=np.inf, keepdim=True), np.linalg.norm(a, np.inf)[None, None, None]),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, np.asarray(want))


def test_norm_errors_and_gradient():
    x = lv.tensor(np.eye(3))
    # The spectral and nuclear norms take singular values (tests/test_linalg_decompositions.py).
    with pytest.raises(errors.DTypeError, match="linalg.svdvals: float16 is not supported"):
        lv.linalg.norm(x.half(), ord="nuc")
    with pytest.raises(errors.DTypeError, match="vector_norm: expected a floating-point input, got int64"):
        lv.tensor([1, 2]).norm()
    with pytest.raises(errors.ShapeError, match="linalg.norm: ord=1 needs a 1-D or 2-D input"):
        lv.linalg.norm(lv.ones(2, 2, 2), ord=1)
    with pytest.raises(errors.UnsupportedOpError, match="linalg.eigvals"):
        lv.linalg.eigvals(x)
    check_vjp(lambda t: lv.linalg.matrix_norm(t, ord=1), np.array([[0.5, -1.2], [2.0, 0.3]]))
    check_vjp(lambda t: t.norm(dim=0), np.array([[0.5, -1.2], [2.0, 0.3]]))
