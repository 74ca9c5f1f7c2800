"""Modules added together, against PyTorch 2.13 (tests/fixtures/torch_nn_gaps.npz, made by
make_nn_gaps_fixtures.py): LocalResponseNorm, RReLU, Softmax2d, AlphaDropout, circular padding,
the 3-D pools, LPPool, MaxUnpool, MultiLabelMarginLoss, SyncBatchNorm and the lazy modules.
Outputs and input gradients to 1e-12 in float64; the random modules by their statistics, their
determinism per seed and their eval mode; the errors."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import errors, nn

DATA = np.load(Path(__file__).parents[1] / "fixtures" / "torch_nn_gaps.npz")
pytestmark = pytest.mark.usefixtures("interpreted")

FUNCTIONS = {
    "lrn4d": lambda t: F.local_response_norm(t, 3, alpha=0.1, beta=0.75, k=1.0),
    "lrn3d": lambda t: F.local_response_norm(t, 2, alpha=0.5, beta=0.6, k=2.0),
    "lrn5d": lambda t: nn.LocalResponseNorm(4, alpha=0.3)(t),
    "rrelu_eval": lambda t: nn.RReLU(0.1, 0.3).eval()(t),
    "softmax2d": lambda t: nn.Softmax2d()(t),
    "circular1d": lambda t: nn.CircularPad1d((2, 1))(t),
    "circular2d": lambda t: nn.CircularPad2d((1, 2, 2, 1))(t),
    "circular3d": lambda t: F.pad(t, (1, 1, 1, 0, 1, 1), mode="circular"),
    "max_pool3d": lambda t: nn.MaxPool3d((2, 3, 2), (2, 2, 1), (1, 1, 0), return_indices=True)(t),
    "max_pool3d_default": lambda t: F.max_pool3d(t, 2),
    "adaptive_max_pool3d": lambda t: nn.AdaptiveMaxPool3d((2, 4, 3), return_indices=True)(t),
    "avg_pool3d": lambda t: nn.AvgPool3d(3, 2, 1)(t),
    "avg_pool3d_nopad": lambda t: F.avg_pool3d(t, (3, 2, 3), (2, 2, 2), (1, 1, 0), count_include_pad=False),
    "avg_pool3d_ceil": lambda t: F.avg_pool3d(t, 2, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg_pool3d_divisor": lambda t: F.avg_pool3d(t, (2, 2, 3), 2, divisor_override=5),
    "adaptive_avg_pool3d": lambda t: nn.AdaptiveAvgPool3d((2, 4, 3))(t),
    "lp_pool1d": lambda t: nn.LPPool1d(2, 3, 2)(t),
    "lp_pool2d": lambda t: F.lp_pool2d(t, 3.0, (2, 3)),
    "lp_pool3d": lambda t: nn.LPPool3d(2, 2, ceil_mode=True)(t),
    "multilabel_none": lambda t: F.multilabel_margin_loss(
        t, lv.tensor(DATA["multilabel_none.target"]), reduction="none"
    ),
    "multilabel_mean": lambda t: nn.MultiLabelMarginLoss()(t, lv.tensor(DATA["multilabel_mean.target"])),
    "multilabel_sum": lambda t: F.multilabel_margin_loss(t, lv.tensor(DATA["multilabel_sum.target"]), reduction="sum"),
    "multilabel_1d": lambda t: F.multilabel_margin_loss(t, lv.tensor([2, 4, -1, 0, 1])),
}
UNPOOL = {
    "max_unpool1d": lambda t, i: nn.MaxUnpool1d(2, 2)(t, i),
    "max_unpool1d_size": lambda t, i: F.max_unpool1d(t, i, 2, 2, 0, [7]),
    "max_unpool2d": lambda t, i: nn.MaxUnpool2d(3, 2, 1)(t, i),
    "max_unpool2d_size": lambda t, i: F.max_unpool2d(t, i, 3, 2, 1, output_size=[6, 5]),
    "max_unpool3d": lambda t, i: F.max_unpool3d(t, i, 2),
}


def _check(name: str, fn) -> None:
    x = lv.tensor(DATA[f"{name}.x"], dtype=lv.float64, requires_grad=True)
    y = fn(x)
    if isinstance(y, tuple):
        y, idx = y
        assert idx.dtype == lv.int64
        np.testing.assert_array_equal(idx.numpy(), DATA[f"{name}.idx"])
    np.testing.assert_allclose(y.numpy(), DATA[f"{name}.out"], rtol=1e-12, atol=1e-12)
    (y * lv.tensor(DATA[f"{name}.cot"])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), DATA[f"{name}.grad"], rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_matches_pytorch(name):
    _check(name, FUNCTIONS[name])


@pytest.mark.parametrize("name", sorted(UNPOOL))
def test_max_unpool_matches_pytorch(name):
    indices = lv.tensor(DATA[f"{name}.indices"])
    _check(name, lambda t: UNPOOL[name](t, indices))


def test_pools_round_trip_through_lazyvic_indices():
    x = lv.tensor(DATA["max_pool3d.x"], dtype=lv.float64)
    y, idx = F.max_pool1d(x[0, :, 0, 0], 2, return_indices=True)  # (C, L): unbatched
    np.testing.assert_array_equal(F.max_unpool1d(y, idx, 2).numpy().max(-1), y.numpy().max(-1))
    y, idx = F.max_pool2d(x[:, :, 0], 2, return_indices=True)
    back = F.max_unpool2d(y, idx, 2, output_size=x[:, :, 0].shape)
    assert back.shape == x[:, :, 0].shape
    np.testing.assert_array_equal(F.max_pool2d(back, 2).numpy(), y.numpy())
    # unbatched 3-D pools equal the batched ones
    np.testing.assert_array_equal(F.max_pool3d(x[0], 2).numpy(), F.max_pool3d(x, 2).numpy()[0])
    np.testing.assert_array_equal(F.adaptive_avg_pool3d(x[0], 2).numpy(), F.adaptive_avg_pool3d(x, 2).numpy()[0])


def test_random_modules_eval_and_determinism():
    x = lv.randn(400, 50, dtype=lv.float64)
    for m in (nn.RReLU(), nn.AlphaDropout(0.3), nn.FeatureAlphaDropout(0.3)):
        m.eval()
        expected = F.leaky_relu(x, (1 / 8 + 1 / 3) / 2) if isinstance(m, nn.RReLU) else x
        np.testing.assert_array_equal(m(x).numpy(), expected.numpy())
        m.train()
        lv.manual_seed(5)
        a = m(x).numpy()
        lv.manual_seed(5)
        b = m(x).numpy()
        np.testing.assert_array_equal(a, b)  # same seed, same bits
        assert not np.array_equal(a, m(x).numpy())  # the next draw differs


def test_rrelu_training_slopes():
    x = -lv.ones(200, 100, dtype=lv.float64)
    lv.manual_seed(0)
    slopes = -F.rrelu(x, 0.1, 0.3, training=True).numpy()
    assert slopes.min() >= 0.1 and slopes.max() < 0.3
    assert abs(slopes.mean() - 0.2) < 3e-3 and abs(slopes.var() - 0.2**2 / 12) < 3e-4  # U(0.1, 0.3)
    assert np.unique(slopes).size > 10000  # one slope per element
    np.testing.assert_array_equal(F.rrelu(-x, training=True).numpy(), 1.0)  # positives untouched
    # the gradient is the drawn slope
    x = lv.tensor(-np.ones((3, 4)), requires_grad=True)
    y = F.rrelu(x, training=True)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), -y.numpy())


def test_alpha_dropout_keeps_mean_and_variance():
    lv.manual_seed(1)
    x = lv.randn(1000, 200, dtype=lv.float64)
    y = F.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(y.mean()) < 0.01 and abs(y.var() - 1) < 0.02
    alpha = 1.7580993408473766
    a = ((1 - 0.2) * (1 + 0.2 * alpha**2)) ** -0.5
    dropped = np.isclose(y, a * alpha * (0.2 - 1), rtol=1e-14, atol=0)  # PyTorch's dropped value
    assert abs(dropped.mean() - 0.2) < 0.01
    np.testing.assert_allclose(y[~dropped], a * x.numpy()[~dropped] + a * alpha * 0.2, rtol=1e-12)
    # features: whole (n, c) slices share the draw
    z = F.feature_alpha_dropout(lv.randn(50, 8, 3, 4, dtype=lv.float64), 0.5, training=True).numpy()
    a = ((1 - 0.5) * (1 + 0.5 * alpha**2)) ** -0.5
    per_channel = np.isclose(z, a * alpha * (0.5 - 1), rtol=1e-14, atol=0).reshape(50, 8, -1)
    assert (per_channel.all(-1) | ~per_channel.any(-1)).all() and 0.3 < per_channel.all(-1).mean() < 0.7
    np.testing.assert_array_equal(F.alpha_dropout(x, 1.0, training=True).numpy(), 0.0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.AlphaDropout(1.5)
    with pytest.raises(errors.ShapeError, match="feature_alpha_dropout"):
        F.feature_alpha_dropout(lv.ones(3), 0.5, training=True)


def test_sync_batch_norm_one_process():
    m = nn.SyncBatchNorm(3, momentum=0.3, dtype=lv.float64)
    m.weight.data = lv.tensor([1.0, 2.0, 0.5], dtype=lv.float64)
    m.bias.data = lv.tensor([0.0, -1.0, 0.25], dtype=lv.float64)
    for i in range(2):
        y = m(lv.tensor(DATA[f"syncbn.x{i}"]))
        np.testing.assert_allclose(y.numpy(), DATA[f"syncbn.out{i}"], rtol=1e-12, atol=1e-12)
    m.eval()
    np.testing.assert_allclose(
        m(lv.tensor(DATA["syncbn.x_eval"])).numpy(), DATA["syncbn.out_eval"], rtol=1e-12, atol=1e-12
    )
    state = m.state_dict()
    keys = [k.split(".", 2)[2] for k in DATA.files if k.startswith("syncbn.state.")]
    assert sorted(state) == sorted(keys)
    for k in keys:
        np.testing.assert_allclose(state[k].numpy(), DATA[f"syncbn.state.{k}"], rtol=1e-12)
    with pytest.raises(errors.ShapeError, match="SyncBatchNorm"):
        m(lv.ones(3))


def test_convert_sync_batchnorm():
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3), nn.Sequential(nn.BatchNorm1d(4, affine=False)))
    model[1].eval()
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], nn.SyncBatchNorm) and isinstance(converted[2][0], nn.SyncBatchNorm)
    assert converted[1].weight is model[1].weight and converted[1].running_mean is model[1].running_mean
    assert not converted[1].training and converted[2][0].training and converted[2][0].weight is None
    assert list(converted.state_dict()) == list(model.state_dict())
    single = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm1d(5))
    assert type(single) is nn.SyncBatchNorm and "SyncBatchNorm(5, eps=1e-05" in repr(single)


def test_lazy_linear_and_conv():
    lv.manual_seed(0)
    eager = nn.Linear(3, 4)
    lv.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    assert isinstance(model[0].weight, nn.UninitializedParameter)
    opt = lv.optim.SGD(model.parameters(), lr=0.1)  # made before the first call
    y = model(lv.ones(2, 3))
    assert type(model[0]) is nn.Linear and model[0].in_features == 3 and type(model[0].weight) is nn.Parameter
    np.testing.assert_array_equal(model[0].weight.numpy(), eager.weight.numpy())  # Linear's init, same draws
    np.testing.assert_array_equal(model[0].bias.numpy(), eager.bias.numpy())
    y.sum().backward()
    before = model[0].weight.numpy().copy()
    opt.step()
    assert model[0].weight.shape == (4, 3) and not np.array_equal(model[0].weight.numpy(), before)
    # a state_dict loaded into a lazy module gives it the checkpoint's shapes
    fresh = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    fresh.load_state_dict(model.state_dict())
    assert type(fresh[0]) is nn.Linear and fresh[0].in_features == 3
    np.testing.assert_array_equal(fresh[0].weight.numpy(), model[0].weight.numpy())
    assert isinstance(copy.deepcopy(nn.LazyLinear(2)).weight, nn.UninitializedParameter)
    lv.manual_seed(1)
    conv = nn.LazyConv2d(5, 3, padding=1, bias=False)
    assert conv(lv.ones(1, 2, 4, 4)).shape == (1, 5, 4, 4)
    lv.manual_seed(1)
    ref = nn.Conv2d(2, 5, 3, padding=1, bias=False)
    assert type(conv) is nn.Conv2d and conv.in_channels == 2
    np.testing.assert_array_equal(conv.weight.numpy(), ref.weight.numpy())
    with pytest.raises(errors.ShapeError, match="LazyConv1d"):
        nn.LazyConv1d(2, 3)(lv.ones(4))


def test_errors():
    x = lv.ones(1, 2, 4, 4, 4)
    with pytest.raises(errors.ShapeError, match="max_pool3d"):
        F.max_pool3d(lv.ones(2, 4, 4), 2)
    with pytest.raises(errors.UnsupportedOpError, match="max_pool3d"):
        F.max_pool3d(x, 2, ceil_mode=True)
    with pytest.raises(errors.ArgumentError, match="avg_pool3d: padding"):
        F.avg_pool3d(x, 2, padding=2)
    with pytest.raises(errors.ShapeError, match="local_response_norm"):
        F.local_response_norm(lv.ones(2, 3), 2)
    with pytest.raises(errors.ArgumentError, match="rrelu"):
        F.rrelu(x, 0.5, 0.1)
    with pytest.raises(errors.ShapeError, match="Softmax2d"):
        nn.Softmax2d()(lv.ones(2, 3))
    with pytest.raises(errors.ArgumentError, match="max_unpool2d: invalid output_size"):
        F.max_unpool2d(lv.ones(1, 1, 2, 2), lv.zeros(1, 1, 2, 2, dtype=lv.int64), 2, output_size=(9, 9))
    with pytest.raises(errors.ShapeError, match="max_unpool2d: indices shape"):
        F.max_unpool2d(lv.ones(1, 1, 2, 2), lv.zeros(1, 1, 2, dtype=lv.int64), 2)
    with pytest.raises(errors.ShapeError, match="multilabel_margin_loss"):
        F.multilabel_margin_loss(lv.ones(2, 3), lv.zeros(2, 2, dtype=lv.int64))
    with pytest.raises(errors.DTypeError, match="multilabel_margin_loss"):
        F.multilabel_margin_loss(lv.ones(2, 3), lv.zeros(2, 3))
    with pytest.raises(errors.ArgumentError, match="lp_pool2d"):
        F.lp_pool2d(lv.ones(1, 1, 4, 4), 0, 2)
    with pytest.raises(errors.ArgumentError, match="circular"):
        nn.CircularPad1d(4)(lv.ones(1, 2, 3))
    assert repr(nn.LPPool2d(2, 3)) == "LPPool2d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False)"
    assert repr(nn.LocalResponseNorm(2)) == "LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)"
    assert repr(nn.MaxUnpool2d(2)) == "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))"
    assert repr(nn.RReLU()) == "RReLU(lower=0.125, upper=0.3333333333333333)"
    assert repr(nn.CircularPad2d(1)) == "CircularPad2d((1, 1, 1, 1))"


def test_compiled_tier_gives_the_interpreters_bits(mode):
    """A training step through the new modules: the same bits compiled and interpreted (the
    ``mode`` fixture runs it both ways; the values are checked against PyTorch above)."""
    x = lv.tensor(DATA["max_pool3d.x"][:1, :1, :4, :4, :4], dtype=lv.float32, requires_grad=True)
    lv.manual_seed(3)
    y = F.max_pool3d(F.local_response_norm(x, 2), 2) + F.rrelu(F.avg_pool3d(x, 2), training=True)
    y.sum().backward()
    got = np.concatenate([y.numpy().ravel(), x.grad.numpy().ravel()])
    key = "compiled_step"
    if not hasattr(test_compiled_tier_gives_the_interpreters_bits, key):
        setattr(test_compiled_tier_gives_the_interpreters_bits, key, got)
    np.testing.assert_array_equal(got, getattr(test_compiled_tier_gives_the_interpreters_bits, key))


def _random_training(captured: bool) -> list:
    lv.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.RReLU(), nn.AlphaDropout(0.3), nn.Linear(6, 1))
    opt = lv.optim.SGD(model.parameters(), lr=0.1)
    x = lv.ones(5, 4)

    def step():
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    run = lv.compile(step) if captured else step
    return [run().item() for _ in range(4)]


def test_random_modules_in_a_captured_step():
    """RReLU's slopes and AlphaDropout's masks are drawn afresh at every replay of a
    ``lazyvic.compile``d step, as in the plain steps (same seed, same bits)."""
    plain = _random_training(False)
    assert len(set(plain)) == 4
    assert _random_training(True) == plain
