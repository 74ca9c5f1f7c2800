"""``F.unfold`` / ``F.fold`` and ``nn.Unfold`` / ``nn.Fold`` (im2col and col2im): against a
NumPy loop over blocks, each other's adjoint (the dot-product test), gradients against finite
differences, unbatched inputs, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import check_vjp

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import errors, nn
from lazyvic.runtime.config import config


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


def _unfold_ref(x, k, d, p, s):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.zeros((n, c * k[0] * k[1], oh * ow), x.dtype)
    for ci in range(c):
        for i in range(k[0]):
            for j in range(k[1]):
                row = (ci * k[0] + i) * k[1] + j
                for a in range(oh):
                    for b in range(ow):
                        out[:, row, a * ow + b] = xp[:, ci, a * s[0] + i * d[0], b * s[1] + j * d[1]]
    return out


CASES = [  # kernel, dilation, padding, stride
    ((2, 3), (1, 1), (1, 1), (2, 2)),
    ((3, 3), (2, 1), (0, 2), (1, 3)),
    ((1, 1), (1, 1), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("k, d, p, s", CASES)
def test_unfold_and_fold_match_numpy_and_are_adjoint(k, d, p, s):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    want = _unfold_ref(x, k, d, p, s)
    cols = F.unfold(lv.tensor(x), k, d, p, s)
    np.testing.assert_array_equal(cols.numpy(), want)
    y = rng.standard_normal(want.shape).astype(np.float32)
    back = F.fold(lv.tensor(y), (7, 8), k, d, p, s).numpy()
    assert back.shape == x.shape
    np.testing.assert_allclose((want.astype(np.float64) * y).sum(), (x.astype(np.float64) * back).sum(), rtol=1e-5)
    np.testing.assert_array_equal(nn.Unfold(k, d, p, s)(lv.tensor(x)).numpy(), want)
    np.testing.assert_array_equal(nn.Fold((7, 8), k, d, p, s)(lv.tensor(y)).numpy(), back)
    unbatched = F.unfold(lv.tensor(x[0]), k, d, p, s)
    np.testing.assert_array_equal(unbatched.numpy(), want[0])
    np.testing.assert_array_equal(F.fold(lv.tensor(y[0]), (7, 8), k, d, p, s).numpy(), back[0])


def test_unfold_and_fold_gradients_match_finite_differences():
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 5))
    check_vjp(lambda t: F.unfold(t, 2, padding=1, stride=(1, 2)), x)
    cols = np.random.default_rng(2).standard_normal((1, 2 * 4, 15))
    check_vjp(lambda t: F.fold(t, (4, 5), 2, padding=1, stride=(1, 2)), cols)
    ones = F.fold(F.unfold(lv.ones(1, 1, 4, 4), 2), (4, 4), 2).numpy()[0, 0]
    np.testing.assert_array_equal(ones, [[1, 2, 2, 1], [2, 4, 4, 2], [2, 4, 4, 2], [1, 2, 2, 1]])


def test_unfold_and_fold_errors():
    x = lv.ones(1, 2, 3, 3)
    with pytest.raises(errors.ShapeError, match="unfold: no 5x5 block"):
        F.unfold(x, 5)
    with pytest.raises(errors.ShapeError, match="unfold: expected a"):
        F.unfold(lv.ones(3, 3), 2)
    with pytest.raises(errors.ArgumentError, match="stride must be"):
        F.unfold(x, 2, stride=0)
    with pytest.raises(errors.ShapeError, match="fold: input"):
        F.fold(lv.ones(1, 8, 5), (3, 3), 2)
