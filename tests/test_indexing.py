"""Indexing reads and writes: index tensors on several axes, boolean masks (a sync point), lazy
``__setitem__`` and ``x[i] += v``, and the data-dependent selections (nonzero, masked_select,
unique, where(cond)). Values against NumPy (PyTorch's rules where they differ: see also
tests/test_torch_semantics.py), gradients against finite differences, errors typed at the op."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import assert_tensor, check_vjp

import lazyvic as lv
from lazyvic import errors
from lazyvic.runtime import metrics


def _grid(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def _traces() -> int:
    return metrics.snapshot()["traces"]


# ================================================================ reads
def test_index_tensors_on_several_axes(mode):
    a = _grid(3, 4, 5)
    x = lv.tensor(a)
    i, j = np.array([[2], [0]]), np.array([4, 1, 1])
    outs = [
        (x[lv.tensor(i), lv.tensor(j[:1] - 1)], a[i, j[:1] - 1]),  # broadcast (2, 1) with (1,)
        (x[:, lv.tensor([3, 0]), lv.tensor(j[:2])], a[:, [3, 0], j[:2]]),  # adjacent: stays in place
        (x[lv.tensor(i), :, lv.tensor(j)], a[i, :, j]),  # not adjacent: goes first (as NumPy)
        (x[[0, 2], [1, 3], [4, 0]], a[[0, 2], [1, 3], [4, 0]]),
        (x[lv.tensor([-1, 0]), 1:3, lv.tensor([-2, 2])], a[[-1, 0], 1:3, [-2, 2]]),
        (x[None, lv.tensor([1]), ..., lv.tensor([0])], a[None, [1], ..., [0]]),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)


def test_pending_index_tensors_are_wrapped_and_gathered_lazily():
    a = _grid(3, 4)
    i = lv.tensor([0, 2, 1]) - 1  # pending, with a -1
    t = lv.tensor(a)[i, lv.tensor([3, 0, -1])]
    assert t.is_lazy
    np.testing.assert_array_equal(t.numpy(), a[[-1, 1, 0], [3, 0, -1]])


def test_boolean_mask_read_is_a_sync_point_named_by_explain(mode):
    a = _grid(2, 3, 4) - 10.0
    x = lv.tensor(a) * 1.0
    before = _traces()
    picked = x[x > 0]
    assert _traces() == before + 1  # the mask was computed: one sync
    assert_tensor(picked, a[a > 0])
    assert_tensor(x[lv.tensor(a[:, 0, 0] > -5)], a[a[:, 0, 0] > -5])
    assert_tensor(x[:, [True, False, True]], a[:, [True, False, True]])
    report = lv.explain(lambda t: t[t > 0].sum(), lv.tensor(a) * 2.0)
    assert any(cut["reason"] == "boolean mask index" for cut in report.to_dict()["cuts"]), report


def test_boolean_mask_of_the_wrong_shape_raises_index_error():
    x = lv.tensor(_grid(2, 3))
    with pytest.raises(errors.IndexError, match=r"mask of shape \(3,\).*\(2, 3\)"):
        x[lv.tensor([True, False, True])]


def test_index_errors_are_typed_and_name_the_op():
    x = lv.ones(2, 3) * 2.0
    with pytest.raises(errors.IndexError, match=r"__getitem__: index 3 .*dimension 1 with size 3"):
        x[lv.tensor([0, 1]), lv.tensor([1, 3])]
    with pytest.raises(errors.IndexError, match="integers or bools"):
        x[[0.5]]
    with pytest.raises(errors.IndexError, match="single ellipsis"):
        x[..., lv.tensor([0]), ...]
    assert x.is_lazy


# ================================================================ writes
def test_setitem_basic_indices_write_through_a_where(mode):
    a = _grid(4, 5)
    x = lv.tensor(a) + 0.0
    want = a.copy()
    for index, value in [
        ((1, 2), 100.0),
        ((slice(None), 0), np.array([-1, -2, -3, -4], np.float32)),
        ((slice(1, None, 2), slice(0, 5, 3)), np.array([[7, 8], [9, 10]], np.float32)),
        ((Ellipsis, -1), 0.5),
        ((None, 0), np.arange(5, dtype=np.float32)),
        ((slice(3, 1),), 5.0),  # an empty region: nothing written
    ]:
        x[index] = lv.tensor(value) if isinstance(value, np.ndarray) else value
        want[index] = value
    assert x.is_lazy
    assert_tensor(x, want)


def test_setitem_casts_the_value_and_x_index_plus_equals(mode):
    a = np.arange(6).reshape(2, 3)
    x = lv.tensor(a)
    x[0] = 2.7  # cast to int64, as PyTorch
    x[1, 1:] += 10
    x[lv.tensor([0, 0, 1])] += 1  # repeated index: one add (PyTorch's read-modify-write)
    want = a.copy()
    want[0] = 2
    want[1, 1:] += 10
    want[[0, 1]] += 1
    assert_tensor(x, want)
    b = lv.tensor([True, False, True])
    b[1] = 1
    assert_tensor(b, np.array([True, True, True]))


def test_setitem_with_index_tensors_and_masks(mode):
    a = _grid(3, 4)
    x = lv.tensor(a) + 0.0
    want = a.copy()
    x[lv.tensor([2, 0]), lv.tensor([1, 3])] = lv.tensor([-1.0, -2.0])
    want[[2, 0], [1, 3]] = [-1, -2]
    x[x > 9] = 0.0  # a scalar under a mask: a where, no sync
    want[want > 9] = 0
    x[:, [True, False, False, True]] = 5.0
    want[:, [True, False, False, True]] = 5
    assert_tensor(x, want)


def test_setitem_repeated_positions_known_now_keep_the_last_value():
    x = lv.zeros(5)
    x[[1, 3, 1]] = lv.tensor([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(x.numpy(), [0, 30, 0, 20, 0])


def test_setitem_repeated_positions_in_a_pending_index_get_the_mean():
    """PyTorch leaves this undefined; lazyvic documents the mean (so x[i] += v stays exact)."""
    x = lv.zeros(4)
    i = lv.tensor([1, 2, 1]) * 1
    x[i] = lv.tensor([1.0, 5.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), [0, 2, 5, 0])


def test_setitem_is_lazy_and_a_mask_with_tensor_values_syncs():
    x = lv.tensor(_grid(2, 3)) * 1.0
    before = _traces()
    x[:, 1] = 7.0
    x[lv.tensor([1]), lv.tensor([2])] = 9.0
    assert _traces() == before and x.is_lazy
    x[x > 3] = lv.tensor([1.0, 2.0, 3.0])  # one value per true element: their count is data
    assert _traces() == before + 1
    np.testing.assert_array_equal(x.numpy(), [[0, 1, 2], [3, 2, 3]])


def test_setitem_errors():
    x = lv.ones(2, 3) * 1.0
    with pytest.raises(errors.ShapeError, match=r"__setitem__: a value of shape \(4,\).*\(3,\)"):
        x[0] = lv.ones(4)
    with pytest.raises(errors.ShapeError, match=r"__setitem__.*\(2,\).*\(3, 3\)"):
        x[lv.tensor([0, 1, 0])] = lv.ones(2, 3)[0, :2]
    with pytest.raises(errors.IndexError, match=r"__setitem__: index 2 is out of bounds for dimension 0 with size 2"):
        x[2] = 1.0
    with pytest.raises(errors.IndexError, match=r"__setitem__: index 5 is out of bounds"):
        x[:, [0, 5]] = 1.0
    leaf = lv.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf[0] = 2.0
    with lv.no_grad():
        leaf[0] = 2.0
    np.testing.assert_array_equal(leaf.numpy(), [2, 1, 1])


def _written(index):
    def fn(x, v):
        y = x * 1.0
        y[index] = v
        return y

    return fn


@pytest.mark.parametrize(
    "index, shapes",
    [
        ((slice(None), slice(1, 4, 2)), [(3, 5), (3, 2)]),
        ((1,), [(3, 4), (4,)]),
        ((slice(None), [2, 0]), [(2, 3), (2, 2)]),
        (([0, 2], [1, 1]), [(3, 2), (2,)]),
    ],
    ids=["strided", "row", "column_list", "two_lists"],
)
def test_setitem_gradients_match_finite_differences(index, shapes):
    rng = np.random.default_rng(4)
    check_vjp(_written(index), *[rng.uniform(-1, 1, s) for s in shapes])


def test_setitem_gradient_of_a_pending_index():
    def fn(x, v):
        y = x * 1.0
        y[lv.tensor([2, 0]) * 1] = v
        return y

    rng = np.random.default_rng(5)
    check_vjp(fn, rng.uniform(-1, 1, (3, 2)), rng.uniform(-1, 1, (2, 2)))


# ===================================================== data-dependent outputs
def test_nonzero_where_masked_select_unique_are_sync_points(mode):
    a = np.array([[0, 2, 1], [3, 0, 0]])
    x = lv.tensor(a) * 1
    before = _traces()
    nz = lv.nonzero(x)
    assert _traces() == before + 1
    assert_tensor(nz, np.argwhere(a))
    rows, cols = lv.where(x > 1)
    assert_tensor(rows, np.nonzero(a > 1)[0]) and assert_tensor(cols, np.nonzero(a > 1)[1])
    assert_tensor(x.masked_select(x < 2), a[a < 2])
    values, inverse, counts = x.unique(return_inverse=True, return_counts=True)
    u, inv, cnt = np.unique(a, return_inverse=True, return_counts=True)
    assert_tensor(values, u)
    assert_tensor(inverse, inv.reshape(a.shape).astype(np.int64))
    assert_tensor(counts, cnt.astype(np.int64))
    report = lv.explain(lambda t: (t * 2).nonzero(), x)
    assert any(cut["reason"] == "nonzero" for cut in report.to_dict()["cuts"])


def test_masked_select_gradient():
    mask = lv.tensor([[True, False, True], [False, True, True]])
    check_vjp(lambda x: x.masked_select(mask) * 2.0, np.random.default_rng(6).uniform(-1, 1, (2, 3)))
