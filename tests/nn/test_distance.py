"""cosine_similarity, pairwise_distance, cdist, cosine_embedding_loss and triplet_margin_loss,
functional and modules, against PyTorch (tests/fixtures/torch_distance.npz, made by
make_distance_fixtures.py); their gradients against finite differences; their errors.

Gradients are those of ``sum(output * cotangent(output.shape))`` (tests/nn/_cotangent.py).
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
from lazyvic.errors import ArgumentError, DTypeError, ShapeError

FIXTURE = "torch_distance.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-6)
pytestmark = pytest.mark.usefixtures("interpreted")

_FUNCTIONS = {
    "cosine_similarity": F.cosine_similarity,
    "pairwise_distance": F.pairwise_distance,
    "cdist": lazyvic.cdist,
    "cosine_embedding_loss": F.cosine_embedding_loss,
    "triplet_margin_loss": F.triplet_margin_loss,
}
CASES = [c for c in SPEC["cases"] if c["fn"] in _FUNCTIONS]


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _inputs(ref, case) -> list:
    return [lazyvic.tensor(ref[f"x.{a}"], requires_grad=i in case["grad"]) for i, a in enumerate(case["args"])]


def _check(ref, name: str, out, inputs, grads) -> None:
    expected = ref[f"{name}.out"]
    assert out.shape == expected.shape and out.dtype is lazyvic.float32, (out.shape, out.dtype)
    if grads:
        (out * lazyvic.tensor(cotangent(out.shape))).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected, **TOL, err_msg=f"{name} output")
    for i in grads:
        np.testing.assert_allclose(inputs[i].grad.numpy(), ref[f"{name}.grad.{i}"], **TOL, err_msg=f"{name} grad {i}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_function_and_input_gradients_match_torch(ref, case):
    inputs = _inputs(ref, case)
    out = _FUNCTIONS[case["fn"]](*inputs, **case["kwargs"])
    _check(ref, case["name"], out, inputs, case["grad"])


_MODULES = {
    "cos_broadcast_dim_last": lambda kw: nn.CosineSimilarity(**kw),
    "cos_norm_below_eps": lambda kw: nn.CosineSimilarity(**kw),
    "pd_keepdim": lambda kw: nn.PairwiseDistance(**kw),
    "pd_p0.5": lambda kw: nn.PairwiseDistance(**kw),
    "cel_none_margin": lambda kw: nn.CosineEmbeddingLoss(**kw),
    "tml_none_swap": lambda kw: nn.TripletMarginLoss(**kw),
    "tml_sum_p1": lambda kw: nn.TripletMarginLoss(**kw),
}


@pytest.mark.parametrize("case", [c for c in CASES if c["name"] in _MODULES], ids=lambda c: c["name"])
def test_modules_match_torch(ref, case):
    module = _MODULES[case["name"]](case["kwargs"])
    inputs = _inputs(ref, case)
    _check(ref, case["name"], module(*inputs), inputs, case["grad"])


def test_modules_keep_pytorchs_attributes_and_defaults():
    cos, pd = nn.CosineSimilarity(), nn.PairwiseDistance(p=3.0, keepdim=True)
    assert (cos.dim, cos.eps) == (1, 1e-8)
    assert (pd.norm, pd.eps, pd.keepdim) == (3.0, 1e-6, True)  # PyTorch names the order "norm"
    cel, tml = nn.CosineEmbeddingLoss(margin=0.5, reduction="sum"), nn.TripletMarginLoss()
    assert (cel.margin, cel.reduction) == (0.5, "sum")
    assert (tml.margin, tml.p, tml.eps, tml.swap, tml.reduction) == (1.0, 2.0, 1e-6, False, "mean")
    assert list(tml.state_dict()) == [] and "p=3.0" in repr(pd)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert nn.TripletMarginLoss(size_average=False).reduction == "sum"


def test_legacy_size_average_and_reduce_map_to_reduction(ref):
    a, b, t = (lazyvic.tensor(ref[f"x.{k}"]) for k in ("a68", "b68", "t6"))
    with pytest.warns(UserWarning, match="reduction='none'"):
        out = F.cosine_embedding_loss(a, b, t, reduce=False)
    assert out.shape == (6,)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        out = F.triplet_margin_loss(a, b, t.reshape(6, 1) * a, size_average=False)
    assert out.shape == ()


def test_cdist_of_a_set_with_itself_has_a_zero_diagonal_and_finite_gradients():
    x = lazyvic.tensor(np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32), requires_grad=True)
    d = lazyvic.cdist(x, x)
    d.sum().backward()
    assert np.all(np.diag(d.numpy()) == 0) and np.isfinite(x.grad.numpy()).all()


def test_half_inputs_are_computed_in_float32_and_rounded_once():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
    for fn in (F.cosine_similarity, F.pairwise_distance, lazyvic.cdist):
        half = fn(lazyvic.tensor(a, dtype=lazyvic.float16), lazyvic.tensor(b, dtype=lazyvic.float16))
        wide = fn(*(lazyvic.tensor(v.astype(np.float16), dtype=lazyvic.float32) for v in (a, b)))
        assert half.dtype is lazyvic.float16
        np.testing.assert_array_equal(half.numpy(), wide.numpy().astype(np.float16))
    mixed = F.cosine_similarity(lazyvic.tensor(a, dtype=lazyvic.float16), lazyvic.tensor(b, dtype=lazyvic.float64))
    assert mixed.dtype is lazyvic.float64  # PyTorch's result_type


def test_integer_inputs_promote_as_pytorch():
    i = lazyvic.tensor([[1, 2, 3]])
    assert F.pairwise_distance(i, i + 1).dtype is lazyvic.float32  # + eps makes them float
    assert F.cosine_similarity(i, lazyvic.tensor([[1.0, 0.0, 0.0]])).dtype is lazyvic.float32


_RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda a, b: F.cosine_similarity(a, b, dim=-1), [_RNG.normal(size=(2, 1, 3)), _RNG.normal(size=(2, 3))]),
        (lambda a, b: F.pairwise_distance(a, b, p=3.0), [_RNG.normal(size=(3, 4)), _RNG.normal(size=(3, 4))]),
        (lambda a, b: lazyvic.cdist(a, b), [_RNG.normal(size=(2, 3, 2)), _RNG.normal(size=(2, 2, 2))]),
        (lambda a, b: lazyvic.cdist(a, b, p=1.5), [_RNG.normal(size=(3, 2)), _RNG.normal(size=(2, 2))]),
        (
            lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True, reduction="none"),
            [_RNG.normal(size=(3, 4)), _RNG.normal(size=(3, 4)), _RNG.normal(size=(3, 4))],
        ),
        (
            lambda a, b: F.cosine_embedding_loss(a, b, lazyvic.tensor([1.0, -1.0, -1.0]), margin=-0.5),
            [_RNG.normal(size=(3, 4)), _RNG.normal(size=(3, 4))],
        ),
    ],
    ids=["cosine_similarity", "pairwise_distance_p3", "cdist_p2", "cdist_p1.5", "triplet_swap", "cosine_embedding"],
)
def test_vjp_matches_finite_differences(fn, arrays):
    check_vjp(fn, *arrays, rtol=1e-6, atol=1e-8)


def test_errors_name_the_function_and_shapes():
    a, b = lazyvic.zeros(4, 3), lazyvic.zeros(4, 5)
    with pytest.raises(ShapeError, match=r"cosine_similarity: shapes \(4, 3\) and \(4, 5\)"):
        F.cosine_similarity(a, b)
    with pytest.raises(IndexError, match="cosine_similarity: dim 2 out of range"):
        F.cosine_similarity(a, a, dim=2)
    with pytest.raises(DTypeError, match="cosine_similarity: expected floating-point inputs.*int64, int64"):
        F.cosine_similarity(lazyvic.tensor([1, 2]), lazyvic.tensor([3, 4]), dim=0)
    with pytest.raises(DTypeError, match="cosine_similarity: x2 must be a lazyvic.Tensor, got ndarray"):
        F.cosine_similarity(a, np.zeros((4, 3)))
    with pytest.raises(ShapeError, match=r"pairwise_distance: shapes \(4, 3\) and \(4, 5\)"):
        F.pairwise_distance(a, b)
    with pytest.raises(DTypeError, match="pairwise_distance: bool inputs"):
        F.pairwise_distance(a > 0, a > 0)


def test_cdist_errors_as_pytorch():
    a = lazyvic.zeros(4, 3)
    with pytest.raises(ShapeError, match=r"cdist: expected x1 of at least 2 dimensions .* got \(3,\)"):
        lazyvic.cdist(lazyvic.zeros(3), a)
    with pytest.raises(ShapeError, match=r"cdist: x1 \(4, 3\) and x2 \(2, 5\) must have the same number of columns"):
        lazyvic.cdist(a, lazyvic.zeros(2, 5))
    with pytest.raises(ShapeError, match=r"cdist \(batch axes of \(2, 4, 3\) and \(3, 4, 3\)\)"):
        lazyvic.cdist(lazyvic.zeros(2, 4, 3), lazyvic.zeros(3, 4, 3))
    with pytest.raises(DTypeError, match="cdist: only floating-point inputs are supported, x1 is int64"):
        lazyvic.cdist(lazyvic.tensor([[1, 2]]), lazyvic.tensor([[1, 2]]))
    with pytest.raises(DTypeError, match="cdist: x1 and x2 must have the same dtype, got float32 and float64"):
        lazyvic.cdist(a, a.double())
    with pytest.raises(ArgumentError, match="cdist: only non-negative p values are supported, got p=-1"):
        lazyvic.cdist(a, a, p=-1.0)
    with pytest.raises(ValueError, match="cdist: 'fast' is not a valid value for compute_mode"):
        lazyvic.cdist(a, a, compute_mode="fast")
    assert lazyvic.cdist(lazyvic.zeros(2, 0), lazyvic.zeros(3, 0), p=math.inf).numpy().tolist() == [[0.0] * 3] * 2


def test_loss_errors_as_pytorch():
    a, t = lazyvic.zeros(4, 3), lazyvic.ones(4)
    with pytest.raises(ShapeError, match=r"cosine_embedding_loss: expected a 0-d or 1-d target .* got \(4, 1\)"):
        F.cosine_embedding_loss(a, a, t.reshape(4, 1))
    with pytest.raises(
        ShapeError, match=r"cosine_embedding_loss: a 1-d target \(4,\) expects 2-d inputs, got \(4, 3\) and \(3,\)"
    ):
        F.cosine_embedding_loss(a, a[0], t)
    with pytest.raises(ShapeError, match=r"cosine_embedding_loss: target \(3,\) does not fit inputs \(4, 3\)"):
        F.cosine_embedding_loss(a, a, lazyvic.ones(3))
    with pytest.raises(ValueError, match="cosine_embedding_loss: reduction must be one of"):
        F.cosine_embedding_loss(a, a, t, reduction="batchmean")
    with pytest.raises(
        ShapeError, match=r"triplet_margin_loss: .* same number of dimensions, got \(4, 3\), \(4, 3\) and \(3,\)"
    ):
        F.triplet_margin_loss(a, a, a[0])
    with pytest.raises(ValueError, match="triplet_margin_loss: margin must be greater than 0, got 0"):
        F.triplet_margin_loss(a, a, a, margin=0)
    with pytest.raises(ValueError, match="TripletMarginLoss: expected margin to be greater than 0, got -1"):
        nn.TripletMarginLoss(margin=-1)
