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
        lv.special.xlogy(lv.tensor(a), lv.tensor(b)).numpy(), [0.0, np.nan, 2 * np.log(3), 1.5 * np.log(0.5)]
    )  # PyTorch: xlogy(0, nan) is nan
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


def test_more_tensor_methods_match_numpy():
    x, t1, t2 = _r(3, 4), _r(3, 4, seed=1), _r(4, seed=2) + 3.0
    a = lv.tensor(x)
    np.testing.assert_allclose(a.addcmul(lv.tensor(t1), lv.tensor(t2), value=0.5).numpy(), x + 0.5 * t1 * t2)
    np.testing.assert_allclose(lv.addcdiv(a, lv.tensor(t1), lv.tensor(t2)).numpy(), x + t1 / t2)
    b = lv.tensor(x)
    b.addcmul_(lv.tensor(t1), lv.tensor(t2), value=2)
    np.testing.assert_allclose(b.numpy(), x + 2 * t1 * t2)
    nan = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    np.testing.assert_array_equal(lv.tensor(nan).nansum(1).numpy(), np.nansum(nan, 1))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanmean(nan, 1)
    np.testing.assert_array_equal(lv.nanmean(lv.tensor(nan), 1).numpy(), want)
    m = np.arange(12.0).reshape(3, 4)
    for k in range(-3, 6):
        np.testing.assert_array_equal(lv.rot90(lv.tensor(m), k).numpy(), np.rot90(m, k))
    np.testing.assert_array_equal(lv.tensor(_r(2, 3, 4)).rot90(1, (2, 0)).numpy(), np.rot90(_r(2, 3, 4), 1, (2, 0)))
    np.testing.assert_allclose(lv.inner(lv.tensor(x), lv.tensor(t1)).numpy(), np.inner(x, t1))
    np.testing.assert_allclose(lv.vdot(lv.tensor(t2), lv.tensor(t2)).numpy(), np.vdot(t2, t2))
    c = lv.tensor(m)
    c.triu_(1)
    np.testing.assert_array_equal(c.numpy(), np.triu(m, 1))
    c.clip_(2, 5)
    np.testing.assert_array_equal(c.numpy(), np.clip(np.triu(m, 1), 2, 5))
    assert lv.tensor(_r(2, 3, 4)).stride() == (12, 4, 1) and lv.tensor(m).is_contiguous()
    assert lv.tensor(m).ndimension() == 2
    check_vjp(lambda p, q: lv.inner(p, q).rot90() * p.addcdiv(q, q * q + 1.0).sum(), _r(3, 2), _r(3, 2, seed=3))
    with pytest.raises(errors.ArgumentError, match="rot90: dims"):
        lv.tensor(m).rot90(1, (0, 0))


def test_more_module_level_functions():
    x = np.array([1.0, 2.0, 3.0])
    for off in (0, 2, -1):
        np.testing.assert_array_equal(lv.diag_embed(lv.tensor(x), off).numpy(), np.diag(x, off))
    batch = _r(2, 3)
    np.testing.assert_array_equal(lv.diag_embed(lv.tensor(batch)).numpy()[1], np.diag(batch[1]))
    np.testing.assert_array_equal(
        lv.diagflat(lv.tensor(np.arange(4.0).reshape(2, 2)), 1).numpy(), np.diagflat(np.arange(4.0), 1)
    )
    for fn, ref in ((lv.atleast_1d, np.atleast_1d), (lv.atleast_2d, np.atleast_2d), (lv.atleast_3d, np.atleast_3d)):
        for v in (np.float64(2.0), x, batch):
            assert fn(lv.tensor(v)).shape == ref(v).shape
        assert [t.shape for t in fn(lv.tensor(x), lv.tensor(batch))] == [a.shape for a in ref(x, batch)]
    assert lv.promote_types(lv.int32, lv.float16) is lv.float16 and lv.promote_types(lv.uint8, lv.int8) is lv.int16
    assert lv.result_type(lv.tensor([1, 2]), 2.5) is lv.float32 and lv.result_type(1, 2) is lv.int64
    assert lv.result_type(lv.tensor([1.0], dtype=lv.float64), lv.tensor([1], dtype=lv.int32)) is lv.float64
    assert lv.result_type(True, False) is lv.bool and lv.result_type(2, 0.5) is lv.float32
    assert (
        lv.can_cast(lv.int8, lv.float16)
        and not lv.can_cast(lv.float64, lv.int32)
        and not lv.can_cast(lv.int32, lv.bool)
    )
    assert not lv.is_complex(lv.tensor(x))
    with pytest.raises(errors.UnsupportedOpError, match="diag_embed"):
        lv.diag_embed(lv.tensor(batch), 0, 0, 1)
    saved = np.get_printoptions()
    try:
        lv.set_printoptions(precision=2)
        assert "1.23" in repr(lv.tensor([1.23456])) and "1.2346" not in repr(lv.tensor([1.23456]))
        lv.set_printoptions(profile="full")
        assert "..." not in repr(lv.tensor(np.arange(2000.0)))
    finally:
        np.set_printoptions(**saved)  # (the other tests in this process print as before)


def test_module_get_submodule_and_get_parameter():
    net = lv.nn.Sequential(lv.nn.Linear(2, 3), lv.nn.Sequential(lv.nn.Linear(3, 1)))
    assert net.get_submodule("1.0") is net[1][0] and net.get_submodule("") is net
    assert net.get_parameter("1.0.bias") is net[1][0].bias
    net.register_module("head", lv.nn.ReLU())
    assert isinstance(net.get_submodule("head"), lv.nn.ReLU)
    with pytest.raises(AttributeError, match="no submodule '2'"):
        net.get_submodule("2")
    with pytest.raises(AttributeError, match="no parameter 'scale'"):
        net.get_parameter("0.scale")
