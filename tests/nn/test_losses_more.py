"""nll_loss, cross_entropy (class weights, (N, C, d) inputs, label smoothing, class probabilities),
binary_cross_entropy (with logits), l1 / mse / smooth_l1 / huber and kl_div, functional and
modules, against PyTorch (tests/fixtures/torch_layers.npz, made by make_layer_fixtures.py).

Gradients are those of ``sum(loss * cotangent(loss.shape))`` (tests/nn/_cotangent.py).
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _cotangent import cotangent
from _oracle import check_vjp

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError, IndexError, ShapeError

FIXTURE = "torch_layers.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-6)
COMPILED = {"nll_weight", "bcel_pos_weight"}  # also through the compiler
pytestmark = [
    pytest.mark.usefixtures("interpreted"),
    pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning"),  # kl_div, as PyTorch
]


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _kwargs(ref, kwargs: dict) -> dict:
    return {
        k: lazyvic.tensor(ref[f"loss.{v[1:]}"]) if isinstance(v, str) and v[0] == "@" else v for k, v in kwargs.items()
    }


def _cases():
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in SPEC["loss"]
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


@pytest.mark.parametrize("case, mode", _cases(), indirect=["mode"])
def test_loss_and_input_gradient_match_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref[f"loss.{case['input']}"], requires_grad=True)
    target = lazyvic.tensor(ref[f"loss.{case['target']}"])
    loss = getattr(F, case["fn"])(x, target, **_kwargs(ref, case["kwargs"]))
    expected = ref[f"{name}.out"]
    assert loss.shape == expected.shape and loss.dtype is lazyvic.float32
    (loss * lazyvic.tensor(cotangent(loss.shape))).sum().backward()
    np.testing.assert_allclose(loss.numpy(), expected, **TOL, err_msg=f"{name} loss")
    np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.input"], **TOL, err_msg=f"{name} grad")


_MODULES = {
    "nll_loss": nn.NLLLoss,
    "cross_entropy": nn.CrossEntropyLoss,
    "binary_cross_entropy": nn.BCELoss,
    "binary_cross_entropy_with_logits": nn.BCEWithLogitsLoss,
    "l1_loss": nn.L1Loss,
    "mse_loss": nn.MSELoss,
    "smooth_l1_loss": nn.SmoothL1Loss,
    "huber_loss": nn.HuberLoss,
    "kl_div": nn.KLDivLoss,
}


@pytest.mark.parametrize("case", [c for c in SPEC["loss"] if "weight" not in c["kwargs"] or c["fn"] in
                                  ("nll_loss", "cross_entropy", "binary_cross_entropy",
                                   "binary_cross_entropy_with_logits")], ids=lambda c: c["name"])  # fmt: skip
def test_loss_modules_match_torch(ref, case):
    module = _MODULES[case["fn"]](**_kwargs(ref, case["kwargs"]))
    loss = module(lazyvic.tensor(ref[f"loss.{case['input']}"]), lazyvic.tensor(ref[f"loss.{case['target']}"]))
    np.testing.assert_allclose(loss.numpy(), ref[f"{case['name']}.out"], **TOL)


def test_weighted_loss_modules_keep_pytorchs_buffers():
    for cls in ("CrossEntropyLoss", "BCEWithLogitsLoss"):
        args = {"weight": lazyvic.ones(4)} if cls == "CrossEntropyLoss" else {}
        if cls == "BCEWithLogitsLoss":
            args = {"weight": lazyvic.ones(3), "pos_weight": lazyvic.ones(3)}
        sd = getattr(nn, cls)(**args).state_dict()
        assert [[k, list(v.shape)] for k, v in sd.items()] == SPEC["state_dict"][cls]
    assert list(nn.NLLLoss().state_dict()) == []


def test_legacy_size_average_and_reduce_map_to_reduction(ref):
    logp, target = lazyvic.tensor(ref["loss.logp"]), lazyvic.tensor(ref["loss.target"])
    with pytest.warns(UserWarning, match="reduction='sum'"):
        loss = F.nll_loss(logp, target, size_average=False)
    np.testing.assert_allclose(loss.numpy(), ref["nll_sum.out"], **TOL)
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert nn.MSELoss(reduce=False).reduction == "none"


def test_kl_div_mean_warns_as_pytorch():
    x = lazyvic.zeros(2, 3)
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(x, x)


def test_bce_clamps_the_log_at_minus_100():
    p = lazyvic.tensor([0.0, 1.0, 0.0, 1.0], requires_grad=True)
    y = lazyvic.tensor([1.0, 0.0, 0.0, 1.0])
    loss = F.binary_cross_entropy(p, y, reduction="none")
    np.testing.assert_allclose(loss.numpy(), [100.0, 100.0, 0.0, 0.0])
    loss.sum().backward()
    assert np.isfinite(p.grad.numpy()).all()


def test_bce_with_logits_is_stable_for_large_logits():
    z = lazyvic.tensor([-1000.0, 1000.0, 50.0], requires_grad=True)
    y = lazyvic.tensor([0.0, 1.0, 0.0])
    loss = F.binary_cross_entropy_with_logits(z, y, reduction="none")
    np.testing.assert_allclose(loss.numpy(), [0.0, 0.0, 50.0], atol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0.0, 0.0, 1.0], atol=1e-6)


def test_regression_losses_broadcast_with_a_warning_as_pytorch():
    a, b = np.arange(3, dtype=np.float32).reshape(3, 1), np.array([0.5, 1.0, 4.0], np.float32)
    with pytest.warns(UserWarning, match="different to the input size"):
        loss = F.mse_loss(lazyvic.tensor(a), lazyvic.tensor(b))
    np.testing.assert_allclose(loss.numpy(), ((a - b) ** 2).mean(), rtol=1e-6)


_RNG = np.random.default_rng(11)
_LOGITS = _RNG.normal(size=(4, 3))
_T = np.array([0, 2, -100, 1])
_W = np.array([0.5, 2.0, 1.5])
_P = _RNG.dirichlet(np.ones(3), 4)


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda x: F.cross_entropy(x, lazyvic.tensor(_T), lazyvic.tensor(_W), label_smoothing=0.3), [_LOGITS]),
        (lambda x: F.cross_entropy(x, lazyvic.tensor(_P), lazyvic.tensor(_W), label_smoothing=0.1), [_LOGITS]),
        (lambda x: F.nll_loss(x.log_softmax(1), lazyvic.tensor(_T), lazyvic.tensor(_W)), [_LOGITS]),
        (lambda x, y: F.binary_cross_entropy(x, y, lazyvic.tensor(_W)), [_P * 0.9 + 0.05, _P]),
        (lambda x, y: F.binary_cross_entropy_with_logits(x, y, pos_weight=lazyvic.tensor(_W)), [_LOGITS, _P]),
        (lambda x, y: F.smooth_l1_loss(x, y, beta=0.8), [_LOGITS, _P]),
        (lambda x, y: F.huber_loss(x, y, delta=0.6), [_LOGITS, _P]),
        (lambda x, y: F.l1_loss(x, y, reduction="sum"), [_LOGITS, _P]),
        (lambda x, y: F.kl_div(x, y, reduction="batchmean"), [np.log(_P[::-1].copy()), _P]),
        (lambda x, y: F.kl_div(x, y, reduction="sum", log_target=True), [np.log(_P[::-1].copy()), np.log(_P)]),
    ],
    ids=["ce_weight_smooth", "ce_probs", "nll_weight", "bce", "bce_logits", "smooth_l1", "huber", "l1", "kl",
         "kl_log_target"],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_loss_vjp_matches_finite_differences(fn, arrays, mode):
    check_vjp(fn, *arrays)


def test_loss_errors_name_the_function_and_shapes():
    logits, target = lazyvic.zeros(4, 3), lazyvic.tensor([0, 1, 2, 0])
    with pytest.raises(ShapeError, match=r"nll_loss: expected .* got \(4, 3\) and \(3,\)"):
        F.nll_loss(logits, lazyvic.tensor([0, 1, 2]))
    with pytest.raises(ShapeError, match=r"cross_entropy: weight shape \(4,\) must be \(3,\)"):
        F.cross_entropy(logits, target, weight=lazyvic.ones(4))
    with pytest.raises(IndexError, match="nll_loss: target 3 is out of bounds for 3 classes"):
        F.nll_loss(logits, lazyvic.tensor([0, 1, 3, 0]))
    with pytest.raises(DTypeError, match=r"cross_entropy: .*float32 target of shape \(4,\)"):
        F.cross_entropy(logits, lazyvic.zeros(4))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(logits, target, label_smoothing=1.5)
    with pytest.raises(ShapeError, match=r"binary_cross_entropy: target size \(4,\) must be the same as input size"):
        F.binary_cross_entropy(lazyvic.zeros(4, 1), lazyvic.zeros(4))
    with pytest.raises(ShapeError, match="binary_cross_entropy_with_logits: target size"):
        nn.BCEWithLogitsLoss()(lazyvic.zeros(4, 1), lazyvic.zeros(4))
    with pytest.raises(ShapeError, match="binary_cross_entropy_with_logits: pos_weight shape"):
        F.binary_cross_entropy_with_logits(logits, logits, pos_weight=lazyvic.ones(4))
    with pytest.raises(DTypeError, match="binary_cross_entropy: target must be a floating-point"):
        F.binary_cross_entropy(lazyvic.zeros(4), lazyvic.tensor([0, 1, 0, 1]))
    with pytest.raises(ShapeError, match=r"l1_loss: input shape \(4, 3\) and target shape \(2, 3\)"):
        F.l1_loss(logits, lazyvic.zeros(2, 3))
    with pytest.raises(ShapeError, match="huber_loss: weight shape"):
        F.huber_loss(logits, logits, weight=lazyvic.ones(3))
    with pytest.raises(ValueError, match="kl_div: reduction must be one of"):
        F.kl_div(logits, logits, reduction="avg")
    with pytest.raises(ValueError, match="smooth_l1_loss: beta"):
        F.smooth_l1_loss(logits, logits, beta=-1.0)
    with pytest.raises(ValueError, match="huber_loss: delta"):
        nn.HuberLoss(delta=0.0)(logits, logits)
