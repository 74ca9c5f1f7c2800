"""Rearranging (flip, roll, repeat, tile, repeat_interleave, unbind, select, movedim, diag,
diagonal, trace, tril/triu) and the scatter family (scatter, index_add, index_fill, index_copy,
take, take_along_dim): values against NumPy, gradients against finite differences, errors typed."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import assert_tensor, check_vjp

import lazyvic as lv
from lazyvic import errors


def _grid(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def test_rearranging_against_numpy(mode):
    a = _grid(2, 3, 4)
    x = lv.tensor(a)
    outs = [
        (x.flip(0), a[::-1]),
        (lv.flip(x, (0, 2)), a[::-1, :, ::-1]),
        (x.fliplr(), np.fliplr(a)),
        (lv.flipud(x), np.flipud(a)),
        (x.roll(2), np.roll(a, 2)),
        (lv.roll(x, (1, -1), (1, 2)), np.roll(a, (1, -1), (1, 2))),
        (x.roll(-5, 2), np.roll(a, -5, 2)),
        (x.repeat(2, 1, 2), np.tile(a, (2, 1, 2))),
        (x[0].repeat(2, 1, 1), np.tile(a[0], (2, 1, 1))),
        (lv.tile(x[0, 0], (2, 2)), np.tile(a[0, 0], (2, 2))),
        (x.repeat_interleave(2, dim=1), np.repeat(a, 2, 1)),
        (lv.repeat_interleave(x[0], lv.tensor([1, 0, 2]), dim=0), np.repeat(a[0], [1, 0, 2], 0)),
        (x[0, 0].repeat_interleave([2, 1, 0, 1]), np.repeat(a[0, 0], [2, 1, 0, 1])),
        (x.repeat_interleave(2), np.repeat(a, 2)),
        (lv.unbind(x, 2)[3], a[:, :, 3]),
        (x.select(1, -1), a[:, -1]),
        (lv.movedim(x, 0, -1), np.moveaxis(a, 0, -1)),
        (x.moveaxis((0, 1), (2, 0)), np.moveaxis(a, (0, 1), (2, 0))),
        (lv.swapaxes(x, 0, 2), np.swapaxes(a, 0, 2)),
        (x.swapdims(1, 2), np.swapaxes(a, 1, 2)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, np.array(want))


def test_diagonals_and_triangles(mode):
    a = _grid(3, 4)
    v = np.array([1.0, 2.0, 3.0], np.float32)
    c = _grid(2, 3, 3)
    x, y, z = lv.tensor(a), lv.tensor(v), lv.tensor(c)
    outs = [
        (lv.diag(y), np.diag(v)),
        (y.diag(2), np.diag(v, 2)),
        (lv.diag(y, -1), np.diag(v, -1)),
        (x.diag(), np.diag(a)),
        (lv.diag(x, 2), np.diag(a, 2)),
        (x.diag(-2), np.diag(a, -2)),
        (x.diag(5), np.diag(a, 5)),
        (lv.diagonal(z, 0, 1, 2), np.diagonal(c, 0, 1, 2)),
        (z.diagonal(1, 2, 0), np.diagonal(c, 1, 2, 0)),
        (x.trace(), np.float32(np.trace(a))),
        (x.tril(), np.tril(a)),
        (lv.triu(z, 1), np.triu(c, 1)),
        (lv.tensor(a > 5).tril(-1), np.tril(a > 5, -1)),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, np.array(want))


def test_rearranging_errors():
    x = lv.ones(2, 3) * 1.0
    with pytest.raises(errors.ShapeError, match=r"repeat: 1 repeat sizes for a tensor of shape \(2, 3\)"):
        x.repeat(2)
    with pytest.raises(errors.ShapeError, match="roll: shifts"):
        x.roll((1, 2), (0,))
    with pytest.raises(errors.ShapeError, match="repeat_interleave: expected 2 non-negative counts"):
        x.repeat_interleave([1, 2, 3], dim=0)
    with pytest.raises(errors.ShapeError, match=r"diag: expected a 1-D or 2-D input, got shape \(1, 2, 3\)"):
        x[None].diag()
    with pytest.raises(errors.ShapeError, match="diagonal: dim1 and dim2 are the same axis"):
        x.diagonal(0, 1, -1)
    with pytest.raises(errors.ShapeError, match="trace: expected a 2-D input"):
        x[0].trace()
    with pytest.raises(errors.ShapeError, match="movedim: repeated axes"):
        x.movedim((0, 0), (0, 1))
    with pytest.raises(errors.IndexError, match="select: index 3 out of range"):
        x.select(1, 3)
    with pytest.raises(errors.IndexError, match="flip: dim 2 out of range"):
        x.flip(2)
    with pytest.raises(errors.ShapeError, match="tril: expected at least 2 dimensions"):
        x[0].tril()
    assert x.is_lazy


def test_repeat_interleave_with_pending_counts_is_a_sync_point():
    counts = lv.tensor([2, 0, 1]) * 1
    report = lv.explain(lambda c: lv.tensor([7, 8, 9]).repeat_interleave(c * 1), counts)
    assert any(cut["reason"] == "repeat_interleave" for cut in report.to_dict()["cuts"])
    np.testing.assert_array_equal(lv.tensor([7, 8, 9]).repeat_interleave(counts).numpy(), [7, 7, 9])


@pytest.mark.parametrize(
    "name, fn, shapes",
    [
        ("flip", lambda x: x.flip((0, 1)) * x, [(2, 3)]),
        ("roll", lambda x: x.roll((1, 2), (0, 1)) * x, [(3, 4)]),
        ("repeat", lambda x: x.repeat(2, 1, 3), [(2, 2)]),
        ("repeat_interleave", lambda x: x.repeat_interleave(lv.tensor([2, 0, 1]), dim=1), [(2, 3)]),
        ("tile_unbind", lambda x: lv.tile(x, (2,)).unbind(0)[1], [(2, 3)]),
        ("movedim", lambda x: x.movedim(0, 2) * 2.0, [(2, 3, 2)]),
        ("diag_1d", lambda x: x.diag(-1), [(3,)]),
        ("diagonal", lambda x: x.diagonal(1, 0, 2), [(3, 2, 4)]),
        ("trace_tril", lambda x: x.tril(1).trace() + x.triu().sum(), [(3, 3)]),
        ("cumsum_dims", lambda x: x.cumsum(0) + x.cumsum(-1), [(3, 4)]),
    ],
)
def test_rearranging_gradients(name, fn, shapes):
    rng = np.random.default_rng(11)
    check_vjp(fn, *[rng.uniform(-1, 1, s) for s in shapes])


# ============================================================ scatter family
def test_scatter_family_against_loops(mode):
    a = _grid(3, 4)
    idx = np.array([[0, 2, 1, 0], [1, 1, 2, 2]])
    src = -_grid(2, 4) - 1
    x = lv.tensor(a)
    scattered = a.copy()
    added = a.copy()
    for i, j in np.ndindex(idx.shape):
        scattered[idx[i, j], j] = src[i, j]
        added[idx[i, j], j] += src[i, j]
    index_added = a.copy()
    for i, row in enumerate([2, 0, 2]):
        index_added[row] += 2 * a[i]
    filled = a.copy()
    filled[:, [0, 3]] = -1
    copied = a.copy()
    copied[[1, 2, 0]] = a * 10
    outs = [
        (x.scatter(0, lv.tensor(idx), lv.tensor(src)), scattered),
        (lv.scatter(x, 0, lv.tensor(idx), lv.tensor(src), reduce="add"), added),
        (x.scatter(1, lv.tensor([[3], [0], [1]]), 9.5), np.where(np.eye(4)[[3, 0, 1]] > 0, 9.5, a).astype(np.float32)),
        (x.scatter(0, lv.tensor(idx[:1, :2]), lv.tensor(src)), _scatter_loop(a, idx[:1, :2], src, 0)),
        (lv.index_add(x, 0, lv.tensor([2, 0, 2]), x, alpha=2), index_added),
        (x.index_fill(1, lv.tensor([0, 3]), -1.0), filled),
        (x.index_copy(0, lv.tensor([1, 2, 0]), x * 10), copied),
        (lv.take(x, lv.tensor([[0, -1], [5, 3]])), np.take(a, [[0, -1], [5, 3]])),
        (lv.take_along_dim(x, lv.tensor([[3], [0], [1]]), dim=1), np.take_along_axis(a, np.array([[3], [0], [1]]), 1)),
        (x.take_along_dim(lv.tensor([[2, 0, 1, 1]]), 0), np.take_along_axis(a, np.array([[2, 0, 1, 1]]), 0)),
        (lv.take_along_dim(x, lv.tensor([2, 0])), a.ravel()[[2, 0]]),
    ]
    y = x * 1.0
    y.scatter_(0, lv.tensor(idx), lv.tensor(src))
    y.index_add_(1, lv.tensor([0]), lv.ones(3, 1))
    z = lv.tensor(np.array([[True, False], [False, False]]))
    z.scatter_(1, lv.tensor([[1], [0]]), True)
    lv.sync()
    for t, want in outs:
        assert_tensor(t, want)
    assert_tensor(y, scattered + np.eye(4, dtype=np.float32)[0])
    assert_tensor(z, np.array([[True, True], [True, False]]))


def _scatter_loop(a, idx, src, dim):
    out = a.copy()
    for pos in np.ndindex(idx.shape):
        where = list(pos)
        where[dim] = idx[pos]
        out[tuple(where)] = src[pos]
    return out


def test_scatter_family_errors():
    x = lv.ones(3, 4) * 1.0
    with pytest.raises(errors.IndexError, match=r"scatter: index 3 is out of range for dimension 0 with size 3"):
        x.scatter(0, lv.tensor([[3, 0]]), 1.0)
    with pytest.raises(errors.ShapeError, match="scatter: index shape .* is larger than src shape"):
        x.scatter(0, lv.tensor([[0, 1, 2]]), lv.ones(1, 2))
    with pytest.raises(errors.UnsupportedOpError, match="scatter: reduce='multiply'"):
        x.scatter(0, lv.tensor([[0]]), lv.ones(1, 1), reduce="multiply")
    with pytest.raises(errors.ShapeError, match=r"index_add: source shape \(2, 4\) must be \(1, 4\)"):
        x.index_add(0, lv.tensor([1]), lv.ones(2, 4))
    with pytest.raises(errors.IndexError, match="index_fill: index 4"):
        x.index_fill(1, lv.tensor([4]), 0.0)
    with pytest.raises(errors.ShapeError, match="take_along_dim: indices shape"):
        x.take_along_dim(lv.tensor([0]), 1)
    with pytest.raises(errors.IndexError, match="take: index 12"):
        x.take(lv.tensor([12]))
    assert x.is_lazy


@pytest.mark.parametrize(
    "name, fn, shapes",
    [
        ("scatter_src", lambda x, s: x.scatter(1, lv.tensor([[2, 0], [1, 1]]), s), [(2, 3), (2, 2)]),
        ("index_add", lambda x, s: x.index_add(0, lv.tensor([1, 1]), s, alpha=0.5), [(3, 2), (2, 2)]),
        ("index_copy", lambda x, s: x.index_copy(1, lv.tensor([2, 0]), s), [(2, 3), (2, 2)]),
        ("index_fill", lambda x: x.index_fill(0, lv.tensor([1]), 0.5), [(3, 2)]),
        ("take_along_dim", lambda x: x.take_along_dim(lv.tensor([[1, 1, 0]]), 0), [(2, 3)]),
        ("take", lambda x: x.take(lv.tensor([[5, 0], [0, -2]])), [(2, 3)]),
    ],
)
def test_scatter_family_gradients(name, fn, shapes):
    rng = np.random.default_rng(12)
    check_vjp(fn, *[rng.uniform(-1, 1, s) for s in shapes])
