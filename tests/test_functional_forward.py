"""Forward values of the composites of lazyvic.functional (softmax, cross_entropy, mse_loss,
layer_norm, dropout ...) against NumPy, moved out of test_ops_forward.py."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import assert_tensor, cross_entropy, layer_norm, log_softmax, softmax

import lazyvic as lv
import lazyvic.functional as F


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(*shape, seed=0, low=-2.0, high=2.0):
    return _rng(seed).uniform(low, high, size=shape).astype(np.float32)


# ============================================================ functional
@pytest.mark.parametrize(
    "dim, mode", [(0, "never"), (1, "never"), (-1, "never"), (0, "always"), (-1, "always")], indirect=["mode"]
)
def test_softmax_log_softmax(dim, mode):
    a = (_f32(2, 3, 4) * 4).astype(np.float64)
    x32, x64 = lv.tensor(a, dtype=lv.float32), lv.tensor(a)
    outs = [
        (F.softmax(x64, dim), softmax(a, dim)),
        (F.log_softmax(x64, dim), log_softmax(a, dim)),
        (x64.softmax(dim), softmax(a, dim)),
        (x64.log_softmax(dim), log_softmax(a, dim)),
        (F.softmax(x32, dim), softmax(a.astype(np.float32).astype(np.float64), dim).astype(np.float32)),
        (F.log_softmax(x32, dim), log_softmax(a.astype(np.float32).astype(np.float64), dim).astype(np.float32)),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected, rtol=1e-5 if t.dtype == lv.float32 else 1e-10, atol=1e-6)


def test_softmax_is_stable_for_large_logits():
    a = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]])
    assert_tensor(F.softmax(lv.tensor(a), 1), softmax(a, 1))
    assert_tensor(F.log_softmax(lv.tensor(a), -1), log_softmax(a, -1))


@pytest.mark.parametrize(
    "reduction, mode",
    [("mean", "never"), ("sum", "never"), ("none", "never"), ("mean", "always")],
    indirect=["mode"],
)
def test_cross_entropy(reduction, mode):
    logits = (_f32(5, 4) * 3).astype(np.float64)
    target = np.array([0, 3, -100, 1, 3])
    y = lv.tensor(target)
    outs = [
        (F.cross_entropy(lv.tensor(logits), y, reduction=reduction), cross_entropy(logits, target, reduction)),
        (
            F.cross_entropy(lv.tensor(logits), lv.tensor(np.where(target < 0, 2, target)), reduction=reduction),
            cross_entropy(logits, np.where(target < 0, 2, target), reduction),
        ),
        (
            F.cross_entropy(
                lv.tensor(logits), lv.tensor(np.where(target < 0, 1, target)), reduction=reduction, ignore_index=3
            ),
            cross_entropy(logits, np.where(target < 0, 1, target), reduction, ignore_index=3),
        ),
        (
            F.cross_entropy(lv.tensor(logits), y, reduction=reduction, label_smoothing=0.1),
            cross_entropy(logits, target, reduction, label_smoothing=0.1),
        ),
        (
            F.cross_entropy(lv.tensor(logits, dtype=lv.float32), y, reduction=reduction),
            cross_entropy(logits.astype(np.float32), target, reduction).astype(np.float32),
        ),
    ]
    if reduction == "mean":
        outs.append((lv.nn.CrossEntropyLoss()(lv.tensor(logits), y), cross_entropy(logits, target)))
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, np.asarray(expected), rtol=1e-5 if t.dtype == lv.float32 else 1e-10)


def test_cross_entropy_spatial_and_nll(mode):
    logits = (_f32(2, 3, 4) * 2).astype(np.float64)  # (N, C, d)
    target = np.array([[0, 2, 1, 1], [2, 2, 0, 1]])
    flat_logits = logits.transpose(0, 2, 1).reshape(-1, 3)
    logp = log_softmax(flat_logits, 1)
    outs = [
        (F.cross_entropy(lv.tensor(logits), lv.tensor(target)), cross_entropy(flat_logits, target.reshape(-1))),
        (
            F.nll_loss(lv.tensor(logp), lv.tensor(target.reshape(-1)), reduction="sum"),
            -logp[np.arange(8), target.reshape(-1)].sum(),
        ),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, np.asarray(expected), rtol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction, mode):
    a, b = _f32(3, 4, seed=1), _f32(3, 4, seed=2)
    d = (a.astype(np.float64) - b) ** 2
    want = {"mean": d.mean(), "sum": d.sum(), "none": d}[reduction]
    got = F.mse_loss(lv.tensor(a), lv.tensor(b), reduction=reduction)
    assert_tensor(got, np.asarray(want).astype(np.float32))
    if reduction == "mean":
        assert_tensor(lv.nn.MSELoss()(lv.tensor(a), lv.tensor(b)), np.asarray(want).astype(np.float32))


def test_layer_norm_linear_and_friends(mode):
    a = _f32(2, 3, 4).astype(np.float64)
    w, bias = _f32(4, seed=1).astype(np.float64), _f32(4, seed=2).astype(np.float64)
    w2 = _f32(3, 4, seed=3).astype(np.float64)
    x = lv.tensor(a)
    outs = [
        (F.layer_norm(x, (4,)), layer_norm(a, 1)),
        (F.layer_norm(x, (4,), lv.tensor(w), lv.tensor(bias)), layer_norm(a, 1, w, bias)),
        (F.layer_norm(x, (3, 4), eps=1e-3), layer_norm(a, 2, eps=1e-3)),
        (F.linear(x, lv.tensor(w2)), a @ w2.T),
        (F.linear(x, lv.tensor(w2), lv.tensor(bias[:3])), a @ w2.T + bias[:3]),
        (F.leaky_relu(x, 0.1), np.where(a > 0, a, 0.1 * a)),
        (F.one_hot(lv.tensor([0, 2, 1]), 3), np.eye(3, dtype=np.float32)[[0, 2, 1]]),
        (F.dropout(x, 0.5, training=False), a),
    ]
    lv.sync()
    for t, expected in outs:
        assert_tensor(t, expected, rtol=1e-10, atol=1e-12)


def test_dropout_keeps_or_scales(mode):
    lv.manual_seed(0)
    a = _f32(50, 20, low=1, high=2)
    out = F.dropout(lv.tensor(a), p=0.25).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], a[kept] / 0.75, rtol=1e-6)
    assert 0.65 < kept.mean() < 0.85
