"""Activations (functional and modules) against PyTorch (tests/fixtures/torch_layers.npz), in-place
semantics, the accurate log1p/expm1 they use, and their errors.

The fixture file is made by tests/fixtures/make_layer_fixtures.py; these tests need only NumPy.
Gradients are those of ``sum(output * cotangent(output.shape))`` (tests/nn/_cotangent.py).
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _cotangent import cotangent
from _oracle import check_vjp

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.functional.activation import expm1, log1p

FIXTURE = "torch_layers.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-6)
COMPILED = {"act_12_softplus", "act_prelu_channels"}  # also through the compiler
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _cases():
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in SPEC["activation"]
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


@pytest.mark.parametrize("case, mode", _cases(), indirect=["mode"])
def test_activation_output_and_gradient_match_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref["act.x"], requires_grad=True)
    if case["fn"] == "prelu":
        w = lazyvic.tensor(ref[f"{name}.weight_in"], requires_grad=True)
        y = F.prelu(x, w)
    else:
        w = None
        y = getattr(F, case["fn"])(x, **case["kwargs"])
    expected = ref[f"{name}.out"]
    assert y.shape == expected.shape and y.dtype is lazyvic.float32
    (y * lazyvic.tensor(cotangent(y.shape))).sum().backward()
    np.testing.assert_allclose(y.numpy(), expected, **TOL, err_msg=f"{name} output")
    np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.input"], **TOL, err_msg=f"{name} grad")
    if w is not None:
        np.testing.assert_allclose(w.grad.numpy(), ref[f"{name}.grad.weight"], **TOL, err_msg=f"{name} grad w")


def test_fixture_covers_every_listed_activation():
    fns = {c["fn"] for c in SPEC["activation"]}
    assert fns >= {"relu6", "elu", "celu", "selu", "softplus", "mish", "hardswish", "hardsigmoid", "hardtanh"}
    assert fns >= {"logsigmoid", "tanhshrink", "softsign", "glu", "threshold", "prelu", "softmin"}


# (module, its F. call) on the fixture's input: the modules forward to the functions.
MODULES = [
    (nn.ReLU(), lambda x: F.relu(x)),
    (nn.ReLU6(), lambda x: F.relu6(x)),
    (nn.ELU(alpha=0.5), lambda x: F.elu(x, 0.5)),
    (nn.CELU(alpha=1.5), lambda x: F.celu(x, 1.5)),
    (nn.SELU(), lambda x: F.selu(x)),
    (nn.LeakyReLU(0.2), lambda x: F.leaky_relu(x, 0.2)),
    (nn.GELU("tanh"), lambda x: F.gelu(x, approximate="tanh")),
    (nn.LogSigmoid(), lambda x: F.logsigmoid(x)),
    (nn.Tanhshrink(), lambda x: F.tanhshrink(x)),
    (nn.Softsign(), lambda x: F.softsign(x)),
    (nn.Softplus(beta=2.0, threshold=5.0), lambda x: F.softplus(x, 2.0, 5.0)),
    (nn.Hardtanh(-0.5, 2.0), lambda x: F.hardtanh(x, -0.5, 2.0)),
    (nn.Hardswish(), lambda x: F.hardswish(x)),
    (nn.Hardsigmoid(), lambda x: F.hardsigmoid(x)),
    (nn.SiLU(), lambda x: F.silu(x)),
    (nn.Mish(), lambda x: F.mish(x)),
    (nn.Threshold(0.3, -2.0), lambda x: F.threshold(x, 0.3, -2.0)),
    (nn.Sigmoid(), lambda x: F.sigmoid(x)),
    (nn.Tanh(), lambda x: F.tanh(x)),
    (nn.Softmax(dim=1), lambda x: F.softmax(x, 1)),
    (nn.Softmin(dim=0), lambda x: F.softmin(x, 0)),
    (nn.LogSoftmax(dim=-1), lambda x: F.log_softmax(x, -1)),
    (nn.GLU(0), lambda x: F.glu(x, 0)),
]


@pytest.mark.parametrize("module, fn", MODULES, ids=lambda m: type(m).__name__ if isinstance(m, nn.Module) else "")
def test_activation_modules_call_their_function(ref, module, fn):
    x = lazyvic.tensor(ref["act.x"])
    np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())


def test_prelu_module_matches_torch_with_its_parameter(ref):
    m = nn.PReLU(6)
    assert [(k, v.shape) for k, v in m.state_dict().items()] == [(k, tuple(s)) for k, s in SPEC["state_dict"]["PReLU"]]
    np.testing.assert_array_equal(m.weight.numpy(), np.full(6, 0.25, np.float32))  # PyTorch's init
    m.load_state_dict({"weight": ref["act_prelu_channels.weight_in"]})
    x = lazyvic.tensor(ref["act.x"], requires_grad=True)
    y = m(x)
    (y * lazyvic.tensor(cotangent(y.shape))).sum().backward()
    np.testing.assert_allclose(y.numpy(), ref["act_prelu_channels.out"], **TOL)
    np.testing.assert_allclose(m.weight.grad.numpy(), ref["act_prelu_channels.grad.weight"], **TOL)
    assert nn.PReLU().weight.shape == (1,)


# ================================================================= in place
@pytest.mark.parametrize(
    "fn, inplace_fn",
    [
        (lambda x: F.relu(x), lambda x: F.relu(x, inplace=True)),
        (lambda x: F.relu(x), lambda x: F.relu_(x)),
        (lambda x: F.elu(x, 0.5), lambda x: F.elu_(x, 0.5)),
        (lambda x: F.leaky_relu(x, 0.1), lambda x: F.leaky_relu(x, 0.1, True)),
        (lambda x: F.hardtanh(x, -0.5, 0.5), lambda x: F.hardtanh_(x, -0.5, 0.5)),
        (lambda x: F.threshold(x, 0.1, 2.0), lambda x: F.threshold_(x, 0.1, 2.0)),
        (lambda x: F.silu(x), lambda x: nn.SiLU(inplace=True)(x)),
        (lambda x: F.hardswish(x), lambda x: nn.Hardswish(True)(x)),
        (lambda x: F.dropout(x, 0.3, False), lambda x: nn.Dropout(0.3, inplace=True).eval()(x)),
    ],
)
def test_inplace_updates_the_input_and_returns_it(fn, inplace_fn):
    data = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    x = lazyvic.tensor(data)
    expected = fn(lazyvic.tensor(data)).numpy()
    out = inplace_fn(x)
    assert out is x
    np.testing.assert_array_equal(x.numpy(), expected)


def test_inplace_on_a_non_leaf_keeps_the_gradient():
    data = np.array([[-1.0, 0.5, 2.0]], dtype=np.float32)
    w = lazyvic.tensor(data, requires_grad=True)
    h = w * 2.0
    F.relu(h, inplace=True)
    (h * lazyvic.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[0.0, 4.0, 6.0]])


def test_inplace_on_a_leaf_that_requires_grad_is_refused():
    x = lazyvic.tensor([1.0, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        F.relu(x, inplace=True)
    with lazyvic.no_grad():
        F.relu(x, inplace=True)  # allowed without grad, as in PyTorch
    np.testing.assert_array_equal(x.numpy(), [1.0, 0.0])


# ================================================================= accuracy and gradients
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log1p_and_expm1_are_accurate_near_zero(dtype):
    values = np.array([-0.5, -0.06, -1e-3, -1e-7, 0.0, 1e-9, 3e-5, 0.02, 0.059, 0.061, 0.5, 3.0], dtype=dtype)
    u = lazyvic.tensor(values)
    rtol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(log1p(u).numpy(), np.log1p(values), rtol=rtol, atol=0)
    np.testing.assert_allclose(expm1(u).numpy(), np.expm1(values), rtol=rtol, atol=0)


def test_softplus_logsigmoid_elu_stay_finite_for_large_inputs():
    x = lazyvic.tensor([-200.0, -30.0, 0.0, 30.0, 200.0], requires_grad=True)
    y = F.softplus(x) + F.logsigmoid(x) + F.elu(x) + F.selu(x) + F.mish(x)
    y.sum().backward()
    assert np.isfinite(y.numpy()).all() and np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(F.logsigmoid(x).numpy()[:2], [-200.0, -30.0], rtol=1e-6)


_X = np.random.default_rng(7).uniform(-3, 3, (2, 5))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.softplus(x, beta=1.5, threshold=3.0),
        lambda x: F.logsigmoid(x),
        lambda x: F.elu(x, 0.7),
        lambda x: F.celu(x, 2.0),
        lambda x: F.selu(x),
        lambda x: F.mish(x),
        lambda x: F.hardswish(x),
        lambda x: F.hardsigmoid(x),
        lambda x: F.softsign(x),
        lambda x: F.tanhshrink(x),
        lambda x: F.glu(x.reshape(10), 0),
        lambda x: log1p(x * 0.01) + expm1(x * 0.01),
    ],
    ids=["softplus", "logsigmoid", "elu", "celu", "selu", "mish", "hardswish", "hardsigmoid", "softsign", "tanhshrink",
         "glu", "log1p_expm1"],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_activation_vjp_matches_finite_differences(fn, mode):
    check_vjp(fn, _X)


# ================================================================= errors
def test_activation_errors_name_the_function():
    x = lazyvic.zeros(3, 5)
    with pytest.raises(ShapeError, match=r"glu: the size 5 of dim -1 .*\(3, 5\)"):
        F.glu(x)
    with pytest.raises(ShapeError, match="glu: does not support 0-d"):
        F.glu(lazyvic.tensor(1.0))
    with pytest.raises(ShapeError, match=r"prelu: 3 slopes .* do not fit input \(3, 5\)"):
        F.prelu(x, lazyvic.ones(3))
    with pytest.raises(ShapeError, match=r"PReLU|prelu"):
        nn.PReLU(4)(x)
    with pytest.raises(DTypeError, match="softplus: expected a floating-point input, got int64"):
        F.softplus(lazyvic.tensor([1, 2]))
    with pytest.raises(DTypeError, match="elu"):
        nn.ELU()(lazyvic.tensor([1, 2]))
    with pytest.raises(ValueError, match="hardtanh: min_val 1.0 must not be greater than max_val 0.0"):
        F.hardtanh(x, 1.0, 0.0)
    with pytest.raises(ValueError, match="Hardtanh"):
        nn.Hardtanh(1.0, 1.0)
    with pytest.raises(ValueError, match="celu: alpha must not be 0"):
        F.celu(x, 0.0)
    with pytest.raises(ValueError, match="gelu: approximate"):
        F.gelu(x, "erf")


def test_softmax_without_dim_warns_and_picks_pytorchs_axis():
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        y = F.softmax(lazyvic.tensor(x))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(1, keepdims=True), rtol=1e-6)
    assert F.log_softmax(lazyvic.tensor(x), 1, dtype=lazyvic.float64).dtype is lazyvic.float64
