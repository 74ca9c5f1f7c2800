"""margin_ranking_loss, hinge_embedding_loss, soft_margin_loss, multilabel_soft_margin_loss,
multi_margin_loss, gaussian_nll_loss and poisson_nll_loss, functional and modules, against PyTorch
(tests/fixtures/torch_losses_extra.npz, made by make_loss_extra_fixtures.py).

Gradients are those of ``sum(loss * cotangent(loss.shape))`` (tests/nn/_cotangent.py).
"""

import math

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _cotangent import cotangent
from _oracle import check_vjp

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import ArgumentError, DTypeError, IndexError, ShapeError

FIXTURE = "torch_losses_extra.npz"
SPEC = torch_fixtures.spec(FIXTURE)
REDUCTIONS = ("none", "mean", "sum")
TOL = dict(rtol=2e-5, atol=2e-6)
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _args(ref, case: dict, grads=()) -> list:
    return [
        lazyvic.tensor(ref[f"in.{a}"], requires_grad=k in grads) if isinstance(a, str) else a
        for k, a in enumerate(case["args"])
    ]


def _kwargs(ref, case: dict) -> dict:
    return {
        k: lazyvic.tensor(ref[f"in.{v[1:]}"]) if isinstance(v, str) and v[0] == "@" else v
        for k, v in case["kwargs"].items()
    }


@pytest.mark.parametrize("case", SPEC["cases"], ids=lambda c: c["name"])
def test_loss_and_input_gradients_match_torch(ref, case):
    name = case["name"]
    for reduction in REDUCTIONS:
        args = _args(ref, case, case["grads"])
        loss = getattr(F, case["fn"])(*args, **_kwargs(ref, case), reduction=reduction)
        expected = ref[f"{name}.{reduction}.out"]
        assert loss.shape == expected.shape and loss.dtype is lazyvic.float32, (reduction, loss.shape)
        (loss * lazyvic.tensor(cotangent(loss.shape))).sum().backward()
        np.testing.assert_allclose(loss.numpy(), expected, **TOL, err_msg=f"{name} {reduction} loss")
        for k in case["grads"]:
            got = args[k].grad.numpy()
            want = ref[f"{name}.{reduction}.grad.{k}"]
            np.testing.assert_allclose(got, want, **TOL, err_msg=f"{name} {reduction} grad of argument {k}")


_MODULES = {
    "margin_ranking_loss": nn.MarginRankingLoss,
    "hinge_embedding_loss": nn.HingeEmbeddingLoss,
    "soft_margin_loss": nn.SoftMarginLoss,
    "multilabel_soft_margin_loss": nn.MultiLabelSoftMarginLoss,
    "multi_margin_loss": nn.MultiMarginLoss,
    "gaussian_nll_loss": nn.GaussianNLLLoss,
    "poisson_nll_loss": nn.PoissonNLLLoss,
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_loss_modules_match_torch(ref, reduction):
    for case in SPEC["cases"]:
        module = _MODULES[case["fn"]](**_kwargs(ref, case), reduction=reduction)
        loss = module(*_args(ref, case))
        np.testing.assert_allclose(loss.numpy(), ref[f"{case['name']}.{reduction}.out"], **TOL, err_msg=case["name"])


def test_modules_keep_pytorchs_attributes_and_buffers():
    m = nn.MultiMarginLoss(p=2, margin=0.5, weight=lazyvic.ones(4), reduction="sum")
    assert (m.p, m.margin, m.reduction) == (2, 0.5, "sum")
    g = nn.GaussianNLLLoss(full=True, eps=1e-3)
    assert (g.full, g.eps, g.reduction) == (True, 1e-3, "mean")
    with pytest.raises(TypeError):
        nn.GaussianNLLLoss(True)  # keyword-only, as PyTorch
    p = nn.PoissonNLLLoss(log_input=False, full=True, eps=1e-4)
    assert (p.log_input, p.full, p.eps) == (False, True, 1e-4)
    assert nn.MarginRankingLoss().margin == 0.0 and nn.HingeEmbeddingLoss().margin == 1.0
    for cls in ("MultiMarginLoss", "MultiLabelSoftMarginLoss", "PoissonNLLLoss"):
        args = {} if cls == "PoissonNLLLoss" else {"weight": lazyvic.ones(4)}
        sd = getattr(nn, cls)(**args).state_dict()
        assert [[k, list(v.shape)] for k, v in sd.items()] == SPEC["state_dict"][cls]


def test_legacy_size_average_and_reduce_map_to_reduction(ref):
    case = next(c for c in SPEC["cases"] if c["name"] == "pnll_full")
    with pytest.warns(UserWarning, match="reduction='sum'"):
        loss = F.poisson_nll_loss(*_args(ref, case), full=True, size_average=False)
    np.testing.assert_allclose(loss.numpy(), ref["pnll_full.sum.out"], **TOL)
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert nn.MultiMarginLoss(reduce=False).reduction == "none"


def test_soft_margin_loss_stays_finite_where_torchs_exp_overflows():
    x = lazyvic.tensor([100.0, -100.0], requires_grad=True)
    loss = F.soft_margin_loss(x, lazyvic.tensor([-1.0, -1.0]), reduction="sum")
    np.testing.assert_allclose(loss.numpy(), 100.0, rtol=1e-6)  # PyTorch: inf
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0], atol=1e-6)


def test_gaussian_nll_loss_negative_var():
    x = lazyvic.zeros(2, 3)
    with pytest.raises(ArgumentError, match="gaussian_nll_loss: var has negative"):
        F.gaussian_nll_loss(x, x, lazyvic.tensor([[1.0, -1.0, 1.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="gaussian_nll_loss: var has negative"):
        nn.GaussianNLLLoss()(x, x, -0.5)
    # A computed variance is not read before the plan runs: its negative entries give NaN.
    var = lazyvic.tensor([1.0, -1.0, 2.0]) * 1.0
    loss = F.gaussian_nll_loss(lazyvic.zeros(3), lazyvic.zeros(3), var, reduction="none").numpy()
    assert np.isnan(loss[1]) and np.isfinite(loss[[0, 2]]).all()
    np.testing.assert_allclose(loss[[0, 2]], [0.0, 0.5 * math.log(2.0)], atol=1e-7)


def test_multi_margin_loss_of_an_empty_batch_is_zero():
    # PyTorch 2.13's CPU kernel returns an uninitialized value here (a denormal near 0), not NaN.
    x, target = lazyvic.zeros(0, 3), lazyvic.zeros(0, dtype=lazyvic.int64)
    for reduction in ("mean", "sum"):
        loss = F.multi_margin_loss(x, target, reduction=reduction)
        assert loss.shape == () and loss.item() == 0.0
    assert F.multi_margin_loss(x, target, reduction="none").shape == (0,)


_RNG = np.random.default_rng(5)
_X = _RNG.normal(size=(3, 4))
_Y = _RNG.normal(size=(3, 4))
_VAR = _RNG.uniform(0.2, 2.0, (3, 4))
_CLASSES = np.array([1, 3, 0])
_W = np.array([0.5, 2.0, 1.5, 1.0])
_COUNTS = np.array([[0.0, 1.0, 3.0, 2.0], [5.0, 0.0, 1.0, 4.0], [2.0, 2.0, 0.0, 6.0]])


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda x: F.multi_margin_loss(x, lazyvic.tensor(_CLASSES), p=2, margin=0.8, weight=lazyvic.tensor(_W)), [_X]),
        (lambda x, y: F.multilabel_soft_margin_loss(x, y, lazyvic.tensor(_W), reduction="sum"), [_X, _VAR / 2]),
        (lambda x, y, v: F.gaussian_nll_loss(x, y, v, full=True), [_X, _Y, _VAR]),
        (lambda x: F.poisson_nll_loss(x, lazyvic.tensor(_COUNTS), log_input=False, full=True), [_VAR]),
        (lambda a, b: F.margin_ranking_loss(a, b, lazyvic.tensor(np.sign(_Y)), margin=0.3), [_X, _VAR]),
    ],
    ids=["multi_margin_p2_weight", "multilabel_weight", "gaussian_full", "poisson_rate_full", "margin_ranking"],
)
def test_loss_vjp_matches_finite_differences(fn, arrays):
    check_vjp(fn, *arrays)


def test_loss_errors_name_the_function_and_shapes():
    x, y = lazyvic.zeros(4, 3), lazyvic.ones(4, 3)
    with pytest.raises(ShapeError, match=r"margin_ranking_loss: .*same number of dimensions.*\(4, 3\).*\(3,\)"):
        F.margin_ranking_loss(x, x, lazyvic.ones(3))
    with pytest.raises(ShapeError, match=r"margin_ranking_loss: shapes do not broadcast.*input2 \(4, 2\)"):
        nn.MarginRankingLoss()(x, lazyvic.zeros(4, 2), y)
    with pytest.raises(DTypeError, match="margin_ranking_loss: input1 must be a floating-point"):
        F.margin_ranking_loss(lazyvic.tensor([1, 2]), lazyvic.zeros(2), lazyvic.ones(2))
    with pytest.raises(ShapeError, match=r"hinge_embedding_loss: .*input \(4, 3\), target \(4,\)"):
        F.hinge_embedding_loss(x, lazyvic.ones(4))
    with pytest.raises(ShapeError, match=r"soft_margin_loss: target shape \(2, 4, 3\) does not broadcast to"):
        F.soft_margin_loss(x, lazyvic.ones(2, 4, 3))
    with pytest.raises(ShapeError, match="multilabel_soft_margin_loss: expected input .* 0-d"):
        F.multilabel_soft_margin_loss(lazyvic.tensor(1.0), lazyvic.tensor(1.0))
    with pytest.raises(ShapeError, match=r"multilabel_soft_margin_loss: .*weight \(4,\)"):
        nn.MultiLabelSoftMarginLoss(weight=lazyvic.ones(4))(x, y)
    with pytest.raises(ValueError, match="multi_margin_loss: only p == 1 and p == 2"):
        F.multi_margin_loss(x, lazyvic.tensor([0, 1, 2, 0]), p=3)
    with pytest.raises(ValueError, match="MultiMarginLoss: only p == 1 and p == 2"):
        nn.MultiMarginLoss(p=0)
    with pytest.raises(ValueError, match="MultiMarginLoss: expected weight .* 1-D"):
        nn.MultiMarginLoss(weight=lazyvic.ones(1, 3))
    with pytest.raises(ShapeError, match=r"multi_margin_loss: weight shape \(4,\) must be \(3,\)"):
        F.multi_margin_loss(x, lazyvic.tensor([0, 1, 2, 0]), weight=lazyvic.ones(4))
    with pytest.raises(ShapeError, match=r"multi_margin_loss: expected a target of 4 .* got target \(3,\)"):
        F.multi_margin_loss(x, lazyvic.tensor([0, 1, 2]))
    with pytest.raises(ShapeError, match=r"multi_margin_loss: expected a non-empty .* input \(2, 4, 3\)"):
        F.multi_margin_loss(lazyvic.zeros(2, 4, 3), lazyvic.tensor([0, 1]))
    with pytest.raises(DTypeError, match="multi_margin_loss: target must be an integer"):
        F.multi_margin_loss(x, lazyvic.zeros(4))
    with pytest.raises(IndexError, match=r"multi_margin_loss: class index 3 is out of range \[0, 3\)"):
        F.multi_margin_loss(x, lazyvic.tensor([0, 1, 3, 0]))
    with pytest.raises(
        ShapeError, match=r"gaussian_nll_loss: var shape \(3,\) is of incorrect size for input \(4, 3\)"
    ):
        F.gaussian_nll_loss(x, y, lazyvic.ones(3))
    with pytest.raises(ShapeError, match="gaussian_nll_loss: var shape"):
        nn.GaussianNLLLoss()(lazyvic.zeros(4, 3, 5), lazyvic.zeros(4, 3, 5), lazyvic.ones(1, 1, 5))
    with pytest.raises(ShapeError, match=r"gaussian_nll_loss: shapes do not broadcast.*target \(2, 3\)"):
        F.gaussian_nll_loss(x, lazyvic.zeros(2, 3), lazyvic.ones(4, 3))
    with pytest.raises(ValueError, match="gaussian_nll_loss: reduction must be one of"):
        F.gaussian_nll_loss(x, y, y, reduction="avg")
    with pytest.raises(ShapeError, match=r"poisson_nll_loss: .*input \(4, 3\), target \(2, 3\)"):
        nn.PoissonNLLLoss()(x, lazyvic.zeros(2, 3))
    with pytest.raises(ValueError, match="poisson_nll_loss: reduction must be one of"):
        F.poisson_nll_loss(x, y, reduction="avg")
    with pytest.raises(DTypeError, match="poisson_nll_loss: target must be a lazyvic.Tensor"):
        F.poisson_nll_loss(x, np.ones((4, 3)))
