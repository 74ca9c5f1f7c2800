"""BatchNorm1d/3d, Softmax, LogSoftmax, LeakyReLU, SiLU modules against NumPy."""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn
from lazyvic.errors import ShapeError
from tests._oracle import log_softmax, softmax


def _bn_reference(x, mean, var, eps=1e-5):
    shape = [1] * x.ndim
    shape[1] = -1
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)


@pytest.mark.parametrize(
    "cls, shape", [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm1d, (4, 3, 5)), (nn.BatchNorm3d, (2, 3, 2, 3, 2))]
)
def test_batch_norm_train_then_eval(cls, shape):
    x = np.random.default_rng(0).standard_normal(shape) * 2 + 1
    bn = cls(3, dtype=lv.float64)
    axes = tuple(i for i in range(len(shape)) if i != 1)
    y = bn(lv.tensor(x)).numpy()
    mean, var = x.mean(axes), x.var(axes)
    np.testing.assert_allclose(y, _bn_reference(x, mean, var), rtol=1e-10, atol=1e-12)
    n = x.size // 3
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var * n / (n - 1), rtol=1e-12)
    assert int(bn.num_batches_tracked.item()) == 1
    bn.eval()
    np.testing.assert_allclose(
        bn(lv.tensor(x)).numpy(), _bn_reference(x, bn.running_mean.numpy(), bn.running_var.numpy()), rtol=1e-10
    )


def test_batch_norm_rank_errors():
    with pytest.raises(ShapeError, match=r"BatchNorm1d: expected input \(N, 3\) or \(N, 3, L\), got \(2, 3, 4, 5\)"):
        nn.BatchNorm1d(3)(lv.zeros(2, 3, 4, 5))
    with pytest.raises(ShapeError, match=r"BatchNorm2d: expected input \(N, 4, H, W\)"):
        nn.BatchNorm2d(4)(lv.zeros(2, 3, 4, 5))
    assert list(nn.BatchNorm1d(2).state_dict()) == [
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]


def test_activation_modules():
    x = np.random.default_rng(1).standard_normal((3, 4))
    t = lv.tensor(x)
    np.testing.assert_allclose(nn.Softmax(1)(t).numpy(), softmax(x, 1), rtol=1e-12)
    np.testing.assert_allclose(nn.LogSoftmax(0)(t).numpy(), log_softmax(x, 0), rtol=1e-12)
    np.testing.assert_allclose(nn.LeakyReLU(0.2)(t).numpy(), np.where(x > 0, x, 0.2 * x), rtol=1e-12)
    np.testing.assert_allclose(nn.SiLU()(t).numpy(), x / (1 + np.exp(-x)), rtol=1e-12)
