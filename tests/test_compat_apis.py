"""PyTorch APIs that real scripts import: ``tensordot``, ``dstack``, ``tril_indices`` /
``triu_indices``, ``searchsorted`` / ``bucketize``, ``lazyvic.special``, ``nn.Bilinear`` /
``F.bilinear``, ``lazyvic.utils.checkpoint`` and the ``nn.parameter`` module path: values against
NumPy, gradients against finite differences (float64), and the errors. Interpreter only."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import check_vjp

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import errors
from lazyvic.runtime.config import config


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize(
    "sa, sb, dims",
    [
        ((2, 3, 4), (4, 5), 1),
        ((2, 3, 4), (3, 4, 5), 2),
        ((3, 2), (4,), 0),
        ((2, 3, 4), (4, 2, 3), ([1, 0], [2, 1])),
        ((2, 3, 4), (5, 4), ([-1], [-1])),
        ((3,), (3,), 1),
    ],
)
def test_tensordot_matches_numpy_and_its_gradients_finite_differences(sa, sb, dims):
    a, b = _r(*sa, seed=1).astype(np.float32), _r(*sb, seed=2).astype(np.float32)
    want = np.tensordot(a, b, axes=dims)
    got = lv.tensordot(lv.tensor(a), lv.tensor(b), dims=dims).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    check_vjp(lambda x, y: lv.tensordot(x, y, dims=dims), a, b)


def test_tensordot_errors_name_the_axes():
    a, b = lv.tensor(_r(2, 3)), lv.tensor(_r(4, 5))
    with pytest.raises(errors.ShapeError, match=r"tensordot: contracted axis 1 of \(2, 3\)"):
        lv.tensordot(a, b, 1)
    with pytest.raises(errors.ArgumentError, match="dims must be in 0..2"):
        lv.tensordot(a, b, 3)
    with pytest.raises(errors.ArgumentError, match="one length"):
        lv.tensordot(a, b, ([0, 1], [0]))


def test_dstack_and_triangle_indices_match_numpy():
    x, y = np.arange(3.0), np.arange(3.0, 6.0)
    np.testing.assert_array_equal(lv.dstack([lv.tensor(x), lv.tensor(y)]).numpy(), np.dstack([x, y]))
    m, n = _r(2, 3), _r(2, 3, seed=4)
    np.testing.assert_array_equal(lv.dstack([lv.tensor(m), lv.tensor(n)]).numpy(), np.dstack([m, n]))
    for row, col, offset in ((3, 3, 0), (4, 2, 1), (2, 5, -1), (0, 3, 0)):
        for fn, ref in ((lv.tril_indices, np.tril_indices), (lv.triu_indices, np.triu_indices)):
            got = fn(row, col, offset)
            assert got.dtype == lv.int64
            np.testing.assert_array_equal(got.numpy(), np.stack(ref(row, offset, col)))
    assert lv.tril_indices(3, 3, dtype=lv.int32).dtype == lv.int32
    with pytest.raises(errors.ArgumentError, match="tril_indices: row and col must be non-negative"):
        lv.tril_indices(-1, 3)


def test_searchsorted_and_bucketize_match_numpy():
    seq = np.array([1.0, 3.0, 3.0, 5.0, 7.0], np.float32)
    vals = np.array([[3.0, 6.0, 0.0], [9.0, 1.0, 5.0]], np.float32)
    for right in (False, True):
        want = np.searchsorted(seq, vals, side="right" if right else "left")
        got = lv.searchsorted(lv.tensor(seq), lv.tensor(vals), right=right)
        assert got.dtype == lv.int64 and got.shape == vals.shape
        np.testing.assert_array_equal(got.numpy(), want)
        side = lv.searchsorted(lv.tensor(seq), lv.tensor(vals), side="right" if right else "left")
        np.testing.assert_array_equal(side.numpy(), want)
        np.testing.assert_array_equal(lv.bucketize(lv.tensor(vals), lv.tensor(seq), right=right).numpy(), want)
    batched = np.sort(_r(3, 6).astype(np.float32), axis=-1)
    v = _r(3, 4, seed=5).astype(np.float32)
    got = lv.searchsorted(lv.tensor(batched), lv.tensor(v), out_int32=True)
    assert got.dtype == lv.int32
    np.testing.assert_array_equal(got.numpy(), np.stack([np.searchsorted(batched[k], v[k]) for k in range(3)]))
    shuffled = np.array([5.0, 1.0, 7.0, 3.0], np.float32)
    sorter = np.argsort(shuffled)
    got = lv.searchsorted(lv.tensor(shuffled), lv.tensor(np.array([4.0, 8.0], np.float32)), sorter=lv.tensor(sorter))
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(shuffled, [4.0, 8.0], sorter=sorter))
    assert lv.searchsorted(lv.tensor(seq), 4.0).shape == () and int(lv.searchsorted(lv.tensor(seq), 4.0)) == 3
    with pytest.raises(errors.ShapeError, match="leading axes"):
        lv.searchsorted(lv.tensor(batched), lv.tensor(_r(2, 4)))
    with pytest.raises(errors.ArgumentError, match="side must be"):
        lv.searchsorted(lv.tensor(seq), lv.tensor(vals), side="middle")
    with pytest.raises(errors.ShapeError, match="bucketize: boundaries must be 1-D"):
        lv.bucketize(lv.tensor(vals), lv.tensor(batched))


def test_special_functions_match_numpy():
    x = np.linspace(-4, 4, 17)
    p = np.linspace(0.0, 1.0, 11)
    np.testing.assert_allclose(lv.special.expit(lv.tensor(x)).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_allclose(
        lv.special.logit(lv.tensor(p[1:-1])).numpy(), np.log(p[1:-1] / (1 - p[1:-1])), rtol=1e-12
    )
    eps = 0.05
    q = np.clip(p, eps, 1 - eps)
    np.testing.assert_allclose(lv.special.logit(lv.tensor(p), eps=eps).numpy(), np.log(q / (1 - q)), rtol=1e-12)
    np.testing.assert_allclose(lv.special.erfc(lv.tensor(x)).numpy(), 1 - lv.tensor(x).erf().numpy(), rtol=0)
    a, b = np.array([0.0, 0.0, 2.0, 1.5]), np.array([0.0, np.nan, 3.0, 0.5])
    np.testing.assert_allclose(
        lv.special.xlogy(lv.tensor(a), lv.tensor(b)).numpy(), [0.0, 0.0, 2 * np.log(3), 1.5 * np.log(0.5)]
    )
    check_vjp(lambda t: lv.special.expit(t) * lv.special.logit(lv.special.expit(t)), x[2:-2])
    assert lv.special.logsumexp is lv.logsumexp and lv.special.log1p is lv.log1p
    np.testing.assert_allclose(lv.special.logsumexp(lv.tensor(x), 0).numpy(), np.log(np.exp(x).sum()), rtol=1e-12)


def test_bilinear_matches_einsum_and_finite_differences():
    lv.manual_seed(0)
    m = lv.nn.Bilinear(3, 4, 5)
    assert m.weight.shape == (5, 3, 4) and m.bias.shape == (5,)
    bound = 1 / np.sqrt(3)
    assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.bias.numpy()).max() <= bound
    x1, x2 = _r(2, 6, 3).astype(np.float32), _r(2, 6, 4, seed=1).astype(np.float32)
    want = np.einsum("...i,oij,...j->...o", x1, m.weight.numpy(), x2) + m.bias.numpy()
    np.testing.assert_allclose(m(lv.tensor(x1), lv.tensor(x2)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert lv.nn.Bilinear(3, 4, 5, bias=False).bias is None
    check_vjp(F.bilinear, _r(4, 3), _r(4, 2, seed=2), _r(5, 3, 2, seed=3), _r(5, seed=4))
    with pytest.raises(errors.ShapeError, match="bilinear: inputs"):
        m(lv.tensor(x1), lv.tensor(x1))


def test_checkpoint_gives_the_values_and_gradients_of_the_plain_call():
    lv.manual_seed(0)
    net = lv.nn.Sequential(lv.nn.Linear(4, 8), lv.nn.Tanh(), lv.nn.Linear(8, 2))
    x = lv.tensor(_r(3, 4).astype(np.float32))
    grads = []
    for use in (False, True):
        net.zero_grad()
        y = lv.utils.checkpoint.checkpoint(net, x, use_reentrant=False) if use else net(x)
        (y * y).sum().backward()
        grads.append([p.grad.numpy().copy() for p in net.parameters()])
    assert all(a.tobytes() == b.tobytes() for a, b in zip(*grads))
    seq = lv.utils.checkpoint.checkpoint_sequential(net, 2, x)
    np.testing.assert_array_equal(seq.numpy(), net(x).numpy())
    with pytest.raises(TypeError, match="context_fn"):
        lv.utils.checkpoint.checkpoint(net, x, context_fn=None)
    with pytest.raises(ValueError, match="segments"):
        lv.utils.checkpoint.checkpoint_sequential(net, 0, x)


def test_the_parameter_module_path():
    from lazyvic.nn.parameter import Parameter

    assert Parameter is lv.nn.Parameter and lv.nn.parameter.Parameter is lv.nn.Parameter


def test_tensor_unfold_takes_windows_as_numpy_and_adds_overlapping_gradients():
    x = np.arange(2 * 7 * 3, dtype=np.float64).reshape(2, 7, 3)
    for dim, size, step in ((1, 3, 2), (-1, 2, 1), (0, 1, 1), (1, 7, 3)):
        ref = np.lib.stride_tricks.sliding_window_view(x, size, axis=dim)
        index = [slice(None)] * 3
        index[dim] = slice(None, None, step)
        np.testing.assert_array_equal(lv.tensor(x).unfold(dim, size, step).numpy(), ref[tuple(index)])
    check_vjp(lambda t: t.unfold(1, 3, 1), _r(2, 5))
    assert lv.tensor(5.0).unfold(0, 1, 1).shape == (1,)
    with pytest.raises(errors.ShapeError, match="size 8 exceeds"):
        lv.tensor(x).unfold(1, 8, 1)
    with pytest.raises(errors.ArgumentError, match="step must be at least 1"):
        lv.tensor(x).unfold(1, 2, 0)
