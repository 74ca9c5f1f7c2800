"""conv1d, conv_transpose1d/2d, conv2d with padding='same', group_norm, instance_norm and the 1-D
pools (functional and modules) against PyTorch (tests/fixtures/torch_layers.npz, made by
make_layer_fixtures.py), plus finite-difference VJPs and typed errors.

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
from lazyvic.errors import ShapeError, UnsupportedOpError

FIXTURE = "torch_layers.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-5)  # float32 sums of up to 36 products, and their VJPs
COMPILED = {"c1_groups", "ct2_stride2", "gn_4d"}
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _cases(cases):
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in cases
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


def _backward(y):
    (y * lazyvic.tensor(cotangent(y.shape))).sum().backward()


def _close(t, expected, what):
    np.testing.assert_allclose(t.numpy(), expected, **TOL, err_msg=what)


# ================================================================= convolutions
@pytest.mark.parametrize("case, mode", _cases(SPEC["conv"]), indirect=["mode"])
def test_conv_output_and_gradients_match_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref[f"conv.{case['input']}"], requires_grad=True)
    w = lazyvic.tensor(ref[f"{name}.weight"], requires_grad=True)
    b = lazyvic.tensor(ref[f"{name}.bias"], requires_grad=True) if case["bias"] else None
    y = getattr(F, case["fn"])(x, w, b, **case["kwargs"])
    assert y.shape == ref[f"{name}.out"].shape and y.dtype is lazyvic.float32
    _backward(y)
    _close(y, ref[f"{name}.out"], f"{name} output")
    _close(x.grad, ref[f"{name}.grad.input"], f"{name} grad of input")
    _close(w.grad, ref[f"{name}.grad.weight"], f"{name} grad of weight")
    if b is not None:
        _close(b.grad, ref[f"{name}.grad.bias"], f"{name} grad of bias")


def _case(name):
    return next(c for c in SPEC["conv"] if c["name"] == name)


@pytest.mark.parametrize(
    "cls, name, args",
    [
        (nn.Conv1d, "c1_stride_pad_dil", (4, 6, 3)),
        (nn.Conv1d, "c1_same_even", (4, 3, 4)),
        (nn.ConvTranspose1d, "ct1_groups_dil", (4, 4, 3)),
        (nn.ConvTranspose2d, "ct2_outpad", (4, 3, 3)),
        (nn.ConvTranspose2d, "ct2_groups_dil", (4, 2, (2, 3))),
    ],
)
def test_conv_modules_load_pytorch_weights_and_match(ref, cls, name, args):
    case = _case(name)
    m = cls(*args, bias=case["bias"], **case["kwargs"])
    state = {"weight": ref[f"{name}.weight"]} | ({"bias": ref[f"{name}.bias"]} if case["bias"] else {})
    m.load_state_dict(state)
    x = lazyvic.tensor(ref[f"conv.{case['input']}"])
    _close(m(x), ref[f"{name}.out"], f"{cls.__name__} output")


def test_conv_modules_use_pytorchs_names_shapes_and_init():
    lazyvic.manual_seed(0)
    for cls, args, kwargs in ((nn.Conv1d, (4, 6, 3), {}), (nn.ConvTranspose2d, (4, 6, 3), {"groups": 2})):
        m = cls(*args, **kwargs)
        keys = [[k, list(v.shape)] for k, v in m.state_dict().items()]
        assert keys == SPEC["state_dict"][cls.__name__]
        fan_in = m.weight.shape[1] * math.prod(m.weight.shape[2:])
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.bias.numpy()).max() <= bound
        assert m.weight.numpy().std() > bound / 4
    assert nn.ConvTranspose2d(4, 2, 3, bias=False).bias is None


def test_conv_padding_modes_pad_then_convolve():
    x = np.random.default_rng(2).normal(size=(1, 2, 6)).astype(np.float32)
    for mode in ("reflect", "replicate", "circular"):
        m = nn.Conv1d(2, 3, 3, padding=2, padding_mode=mode)
        padded = F.pad(lazyvic.tensor(x), (2, 2), mode=mode)
        want = F.conv1d(padded, m.weight, m.bias).numpy()
        np.testing.assert_allclose(m(lazyvic.tensor(x)).numpy(), want, rtol=1e-6, atol=1e-6)
    m2 = nn.Conv2d(2, 2, (2, 3), padding="same", padding_mode="reflect")
    assert m2(lazyvic.zeros(1, 2, 5, 5)).shape == (1, 2, 5, 5)


def test_conv_transpose_output_size_picks_the_output_padding(ref):
    case = _case("ct2_outpad")
    m = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, bias=False)
    m.load_state_dict({"weight": ref["ct2_outpad.weight"]})
    x = lazyvic.tensor(ref["conv.x2"])
    assert m(x).shape == (1, 3, 9, 9)
    y = m(x, output_size=[10, 10])
    assert case["kwargs"]["output_padding"] == 1
    _close(y, ref["ct2_outpad.out"], "ConvTranspose2d(output_size=...)")
    with pytest.raises(ShapeError, match=r"ConvTranspose2d: requested an output size of \(11, 11\).* 9 to 10"):
        m(x, output_size=(11, 11))


def test_unbatched_convolutions_match_batched():
    rng = np.random.default_rng(4)
    x2, w2 = rng.normal(size=(4, 5, 5)).astype(np.float32), rng.normal(size=(4, 2, 3, 3)).astype(np.float32)
    x1, w1 = x2[:, 0], rng.normal(size=(3, 4, 2)).astype(np.float32)
    for fn, x, w in ((F.conv2d, x2, w2[:, :, :2, :2].repeat(2, 1)), (F.conv_transpose2d, x2, w2), (F.conv1d, x1, w1)):
        got = fn(lazyvic.tensor(x), lazyvic.tensor(w)).numpy()
        want = fn(lazyvic.tensor(x[None]), lazyvic.tensor(w)).numpy()[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


_RNG = np.random.default_rng(3)
_X1 = _RNG.uniform(-1, 1, (1, 2, 5))
_X2 = _RNG.uniform(-1, 1, (1, 2, 3, 3))


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1), [_X2, _RNG.uniform(-1, 1, (2, 1, 3, 2)), _RNG.uniform(-1, 1, 1)]),
        (lambda x, w: F.conv_transpose2d(x, w, groups=2, dilation=2), [_X2, _RNG.uniform(-1, 1, (2, 1, 2, 2))]),
        (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=2), [_X1, _RNG.uniform(-1, 1, (2, 2, 3)), _RNG.uniform(-1, 1, 2)]),
        (lambda x, w: F.conv1d(x, w, padding="same", dilation=2), [_X1, _RNG.uniform(-1, 1, (3, 2, 2))]),
    ],
    ids=["ct2_stride_outpad", "ct2_groups_dil", "ct1_crop", "c1_same"],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # hundreds of evaluations: interpret them
def test_conv_vjp_matches_finite_differences(fn, arrays, mode):
    check_vjp(fn, *arrays)


def test_conv_errors_name_the_op_and_shapes():
    x1, x2 = lazyvic.zeros(2, 4, 9), lazyvic.zeros(1, 4, 5, 5)
    with pytest.raises(ShapeError, match=r"conv1d: input \(2, 4, 9\) has 4 channels, weight \(6, 3, 3\) expects 3"):
        F.conv1d(x1, lazyvic.zeros(6, 3, 3))
    with pytest.raises(ShapeError, match=r"conv1d: expected input \(N, C, L\).*\(1, 4, 5, 5\)"):
        F.conv1d(x2, lazyvic.zeros(6, 4, 3))
    with pytest.raises(ShapeError, match="conv1d: kernel extent 11 is larger than the padded input size 9"):
        F.conv1d(x1, lazyvic.zeros(6, 4, 11))
    with pytest.raises(ValueError, match="conv1d: padding='same' is not supported for strided"):
        F.conv1d(x1, lazyvic.zeros(6, 4, 3), stride=2, padding="same")
    with pytest.raises(
        ShapeError, match=r"conv_transpose2d: input \(1, 4, 5, 5\) has 4 channels; weight \(3, 2, 3, 3\)"
    ):
        F.conv_transpose2d(x2, lazyvic.zeros(3, 2, 3, 3))
    with pytest.raises(ValueError, match="conv_transpose2d: output_padding .* must be smaller than either stride"):
        F.conv_transpose2d(x2, lazyvic.zeros(4, 2, 3, 3), stride=2, output_padding=2)
    with pytest.raises(
        ShapeError,
        match=r"conv_transpose1d: the output size -4 is not positive for input \(1, 4, 1\), weight \(4, 2, 2\)",
    ):
        F.conv_transpose1d(lazyvic.zeros(1, 4, 1), lazyvic.zeros(4, 2, 2), padding=3)
    with pytest.raises(ShapeError, match="conv_transpose1d: bias shape"):
        F.conv_transpose1d(x1, lazyvic.zeros(4, 2, 2), lazyvic.zeros(4), groups=1)
    with pytest.raises(ValueError, match='ConvTranspose2d: only "zeros" padding mode'):
        nn.ConvTranspose2d(4, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="Conv1d: groups=3 must divide"):
        nn.Conv1d(4, 6, 3, groups=3)


# ================================================================= normalization
@pytest.mark.parametrize("case, mode", _cases([c for c in SPEC["norm"] if c["fn"] == "group_norm"]), indirect=["mode"])
def test_group_norm_matches_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref[f"norm.{case['input']}"], requires_grad=True)
    params = []
    if case["affine"]:
        params = [lazyvic.tensor(ref[f"norm.{p}{case['affine']}"], requires_grad=True) for p in ("w", "b")]
    y = F.group_norm(x, case["num_groups"], *params, eps=1e-5)
    _backward(y)
    _close(y, ref[f"{name}.out"], f"{name} output")
    _close(x.grad, ref[f"{name}.grad.input"], f"{name} grad of input")
    for what, p in zip(("weight", "bias"), params):
        _close(p.grad, ref[f"{name}.grad.{what}"], f"{name} grad of {what}")


def test_instance_norm_training_then_evaluation_matches_torch(ref):
    rm, rv = lazyvic.tensor(ref["norm.running_mean0"]), lazyvic.tensor(ref["norm.running_var0"])
    for name, x, use in (("in_train1", "x4", True), ("in_train2", "x4b", True), ("in_eval", "x4", False)):
        xt = lazyvic.tensor(ref[f"norm.{x}"], requires_grad=True)
        w, b = (lazyvic.tensor(ref[f"norm.{p}4"], requires_grad=True) for p in ("w", "b"))
        y = F.instance_norm(xt, rm, rv, w, b, use_input_stats=use, momentum=0.2, eps=1e-5)
        _backward(y)
        _close(y, ref[f"{name}.out"], f"{name} output")
        for what, t in (("input", xt), ("weight", w), ("bias", b)):
            _close(t.grad, ref[f"{name}.grad.{what}"], f"{name} grad of {what}")
        _close(rm, ref[f"{name}.running_mean"], f"{name} running_mean")
        _close(rv, ref[f"{name}.running_var"], f"{name} running_var")
    y = F.instance_norm(lazyvic.tensor(ref["norm.x3"], requires_grad=True))
    _close(y, ref["in_plain_3d.out"], "instance_norm without statistics")


def test_norm_modules_use_pytorchs_names_and_match_torch(ref):
    gn = nn.GroupNorm(2, 4)
    assert [[k, list(v.shape)] for k, v in gn.state_dict().items()] == SPEC["state_dict"]["GroupNorm"]
    gn.load_state_dict({"weight": ref["norm.w4"], "bias": ref["norm.b4"]})
    _close(gn(lazyvic.tensor(ref["norm.x4"])), ref["gn_4d.out"], "GroupNorm")
    inorm = nn.InstanceNorm2d(4, momentum=0.2, affine=True, track_running_stats=True)
    assert [[k, list(v.shape)] for k, v in inorm.state_dict().items()] == SPEC["state_dict"]["InstanceNorm2d"]
    inorm.load_state_dict(
        {
            "weight": ref["norm.w4"],
            "bias": ref["norm.b4"],
            "running_mean": ref["norm.running_mean0"],
            "running_var": ref["norm.running_var0"],
            "num_batches_tracked": np.array(0),
        }
    )
    _close(inorm(lazyvic.tensor(ref["norm.x4"])), ref["in_train1.out"], "InstanceNorm2d train")
    inorm(lazyvic.tensor(ref["norm.x4b"]))
    _close(inorm.running_var, ref["in_train2.running_var"], "InstanceNorm2d running_var")
    inorm.eval()
    _close(inorm(lazyvic.tensor(ref["norm.x4"])), ref["in_eval.out"], "InstanceNorm2d eval")
    plain = nn.InstanceNorm1d(6)
    assert list(plain.state_dict()) == []
    _close(plain(lazyvic.tensor(ref["norm.x3"])), ref["in_plain_3d.out"], "InstanceNorm1d")
    _close(plain(lazyvic.tensor(ref["norm.x3"][0])), ref["in_plain_3d.out"][0], "InstanceNorm1d unbatched")


_XN = np.random.default_rng(5).normal(size=(2, 4, 3))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w, b: F.group_norm(x, 2, w, b),
        lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
    ],
    ids=["group_norm", "instance_norm"],
)
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_norm_vjp_matches_finite_differences(fn, mode):
    rng = np.random.default_rng(6)
    check_vjp(fn, _XN, rng.normal(size=4), rng.normal(size=4))


def test_norm_errors():
    with pytest.raises(
        ShapeError,
        match=r"group_norm: expected the number of channels 4 of input \(2, 4, 3\) to be divisible by num_groups=3",
    ):
        F.group_norm(lazyvic.zeros(2, 4, 3), 3)
    with pytest.raises(ValueError, match="GroupNorm: num_channels 4 must be divisible by num_groups 3"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ShapeError, match=r"instance_norm: expected more than 1 spatial element .*\(2, 4, 1\)"):
        F.instance_norm(lazyvic.zeros(2, 4, 1))
    with pytest.raises(ShapeError, match=r"InstanceNorm2d: expected a 4-D .* got shape \(4, 3\)"):
        nn.InstanceNorm2d(4)(lazyvic.zeros(4, 3))
    with pytest.raises(ShapeError, match="InstanceNorm1d: expected 4 channels"):
        nn.InstanceNorm1d(4, affine=True)(lazyvic.zeros(2, 3, 5))
    with pytest.raises(ShapeError, match=r"layer_norm: input shape \(2, 3\) does not end with normalized_shape \(4,\)"):
        F.layer_norm(lazyvic.zeros(2, 3), (4,))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(4)(lazyvic.zeros(2, 3, 5))


# ================================================================= 1-D pools
@pytest.mark.parametrize("case, mode", _cases(SPEC["pool"]), indirect=["mode"])
def test_pool1d_matches_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref["rs.x3"], requires_grad=True)
    y = getattr(F, case["fn"])(x, **case["kwargs"])
    _backward(y)
    _close(y, ref[f"{name}.out"], f"{name} output")
    _close(x.grad, ref[f"{name}.grad.input"], f"{name} grad of input")


def test_pool1d_modules_and_unbatched_inputs(ref):
    x = lazyvic.tensor(ref["rs.x3"])
    _close(nn.MaxPool1d(3, 2, 1)(x), ref["mp1_k3_s2_p1.out"], "MaxPool1d")
    _close(nn.AvgPool1d(3, 2, 1, count_include_pad=False)(x), ref["ap1_k3_s2_p1_exclude.out"], "AvgPool1d")
    _close(nn.AdaptiveAvgPool1d(4)(x), ref["aap1_4.out"], "AdaptiveAvgPool1d")
    _close(F.max_pool1d(lazyvic.tensor(ref["rs.x3"][1]), 2), ref["mp1_k2.out"][1], "max_pool1d unbatched")
    _close(
        nn.MaxPool2d(2)(lazyvic.tensor(ref["rs.x4"][0])),
        F.max_pool2d(lazyvic.tensor(ref["rs.x4"]), 2).numpy()[0],
        "unbatched",
    )


def test_pool_options_lazyvic_does_not_have_raise():
    x = lazyvic.zeros(1, 2, 8)
    with pytest.raises(UnsupportedOpError, match="max_pool1d: ceil_mode=True is not supported"):
        F.max_pool1d(x, 2, ceil_mode=True)
    with pytest.raises(UnsupportedOpError, match="max_pool2d: ceil_mode=True"):
        nn.MaxPool2d(2, ceil_mode=True)(lazyvic.zeros(1, 1, 4, 4))
    with pytest.raises(ShapeError, match=r"max_pool1d: expected input \(N, C, L\)"):
        F.max_pool1d(lazyvic.zeros(1, 1, 4, 4), 2)
