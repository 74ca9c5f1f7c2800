"""conv3d and conv_transpose3d (lazyvic/functional/convolution3d.py: sums of the 2-D primitives over
the depth taps), nn.Conv3d and nn.ConvTranspose3d: against a float64 NumPy definition written
here, against PyTorch (tests/fixtures/torch_conv3d.npz, made by make_conv3d_fixtures.py),
finite-difference VJPs, one ONNX node each on export, 3-D Conv/ConvTranspose import against
onnxruntime, and typed errors.

Gradients against PyTorch are those of ``sum(output * cotangent(output.shape))``
(tests/nn/_cotangent.py).
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
from lazyvic.errors import ArgumentError, ShapeError
from lazyvic.functional.convolution3d import transposed_conv3d

FIXTURE = "torch_conv3d.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-5)  # float32 sums of up to 72 products, and their VJPs
COMPILED = {"c3_stride_pad_dil_groups", "ct3_stride_outpad_groups"}
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _case(name):
    return next(c for c in SPEC["conv"] if c["name"] == name)


def _close(t, expected, what):
    np.testing.assert_allclose(t.numpy(), expected, **TOL, err_msg=what)


# ======================================================== the NumPy definition
def _conv3d_definition(x, w, b, stride, pads, dilation, groups):
    """out[n, o, t] = b[o] + sum over c in o's group and taps i of xpad[n, c, t*s + i*d] * w[o, c, i]
    (PyTorch's Conv3d formula), one output channel and one tap at a time, in float64."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *pads))
    out_size = [(xp.shape[2 + a] - dilation[a] * (w.shape[2 + a] - 1) - 1) // stride[a] + 1 for a in range(3)]
    out = np.zeros((n, o, *out_size))
    for oc in range(o):
        group = oc // (o // groups)
        for tap in np.ndindex(*w.shape[2:]):
            window = xp[
                (slice(None), slice(group * cg, (group + 1) * cg))
                + tuple(
                    slice(tap[a] * dilation[a], tap[a] * dilation[a] + (out_size[a] - 1) * stride[a] + 1, stride[a])
                    for a in range(3)
                )
            ]
            out[:, oc] += np.einsum("ncdhw,c->ndhw", window, w[(oc, slice(None)) + tap].astype(np.float64))
        if b is not None:
            out[:, oc] += b[oc]
    return out


def _conv_transpose3d_definition(x, w, b, stride, padding, output_padding, dilation, groups):
    """out[n, g*Og + o, p*s + i*d - pad] += x[n, g*Cg + c, p] * w[g*Cg + c, o, i] (PyTorch's
    ConvTranspose3d), one tap at a time into the full result, then the window of the output."""
    n, cin = x.shape[:2]
    og, cg = w.shape[1], cin // groups
    full = [(x.shape[2 + a] - 1) * stride[a] + dilation[a] * (w.shape[2 + a] - 1) + 1 for a in range(3)]
    out_size = [full[a] - 2 * padding[a] + output_padding[a] for a in range(3)]
    result = np.zeros((n, og * groups, *[max(full[a], padding[a] + out_size[a]) for a in range(3)]))
    for g in range(groups):
        xg = x[:, g * cg : (g + 1) * cg].astype(np.float64)
        for tap in np.ndindex(*w.shape[2:]):
            where = tuple(
                slice(tap[a] * dilation[a], tap[a] * dilation[a] + (x.shape[2 + a] - 1) * stride[a] + 1, stride[a])
                for a in range(3)
            )
            wg = w[(slice(g * cg, (g + 1) * cg), slice(None)) + tap].astype(np.float64)
            result[(slice(None), slice(g * og, (g + 1) * og)) + where] += np.einsum("ncdhw,co->nodhw", xg, wg)
    out = result[(slice(None), slice(None)) + tuple(slice(padding[a], padding[a] + out_size[a]) for a in range(3))]
    return out + (0 if b is None else b.reshape(1, -1, 1, 1, 1))


_RNG = np.random.default_rng(11)
_X = _RNG.normal(size=(2, 4, 5, 6, 5))


@pytest.mark.parametrize(
    "kwargs, wshape, pads",
    [
        (dict(stride=2, padding=(1, 0, 2), dilation=(2, 1, 1), groups=2), (6, 2, 3, 2, 3), ((1, 1), (0, 0), (2, 2))),
        (dict(padding="same", dilation=(1, 2, 1)), (3, 4, 2, 3, 2), ((0, 1), (2, 2), (0, 1))),
        (dict(stride=(1, 2, 3), groups=4), (4, 1, 1, 3, 2), ((0, 0), (0, 0), (0, 0))),
    ],
    ids=["stride_pad_dil_groups", "same_even", "depthwise_strides"],
)
def test_conv3d_matches_the_definition_in_float64(kwargs, wshape, pads):
    w, b = _RNG.normal(size=wshape), _RNG.normal(size=wshape[0])
    y = F.conv3d(lazyvic.tensor(_X), lazyvic.tensor(w), lazyvic.tensor(b), **kwargs)
    stride = (kwargs.get("stride", 1),) * 3 if isinstance(kwargs.get("stride", 1), int) else kwargs["stride"]
    want = _conv3d_definition(_X, w, b, stride, pads, kwargs.get("dilation", (1, 1, 1)), kwargs.get("groups", 1))
    assert y.dtype is lazyvic.float64 and y.shape == want.shape
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, wshape",
    [
        (dict(stride=2, padding=(1, 0, 1), output_padding=1, groups=2), (4, 3, 3, 2, 3)),
        (dict(stride=(3, 1, 2), padding=(2, 1, 0), dilation=(2, 1, 2), output_padding=(1, 0, 1)), (4, 2, 2, 3, 2)),
        (dict(padding=(6, 0, 0), dilation=(3, 1, 1)), (4, 2, 4, 1, 1)),  # depth tap 0 lands outside the output
    ],
    ids=["stride_outpad_groups", "per_axis", "crop"],
)
def test_conv_transpose3d_matches_the_definition_in_float64(kwargs, wshape):
    groups = kwargs.get("groups", 1)
    w, b = _RNG.normal(size=wshape), _RNG.normal(size=wshape[1] * groups)
    y = F.conv_transpose3d(lazyvic.tensor(_X), lazyvic.tensor(w), lazyvic.tensor(b), **kwargs)

    def triple(key, default):
        v = kwargs.get(key, default)
        return (v,) * 3 if isinstance(v, int) else v

    want = _conv_transpose3d_definition(
        _X, w, b, triple("stride", 1), triple("padding", 0), triple("output_padding", 0), triple("dilation", 1), groups
    )
    assert y.dtype is lazyvic.float64 and y.shape == want.shape
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)


def test_outputs_that_no_input_depth_reaches_are_the_bias_with_zero_gradients():
    rng = np.random.default_rng(8)
    # conv3d: with stride 2 both output depths read the depth padding only.
    x, w, b = (lazyvic.tensor(rng.normal(size=s), requires_grad=True) for s in ((1, 2, 1, 3, 3), (3, 2, 1, 2, 2), (3,)))
    y = F.conv3d(x, w, b, stride=(2, 1, 1), padding=(1, 0, 0))
    assert y.shape == (1, 3, 2, 2, 2)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(b.numpy().reshape(1, 3, 1, 1, 1), y.shape))
    y.sum().backward()
    assert not x.grad.numpy().any() and not w.grad.numpy().any()
    # ONNX's ConvTranspose can ask for an output window that lies between the input depths.
    x, w = lazyvic.tensor(rng.normal(size=(1, 2, 2, 3, 3))), lazyvic.tensor(rng.normal(size=(2, 3, 1, 2, 2)))
    y = transposed_conv3d(x, w, b, (3, 1, 1), (1, 0, 0), (1, 4, 4), (1, 1, 1), 1)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(b.numpy().reshape(1, 3, 1, 1, 1), (1, 3, 1, 4, 4)))


# ======================================================== against PyTorch
def _cases():
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in SPEC["conv"]
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


@pytest.mark.parametrize("case, mode", _cases(), indirect=["mode"])
def test_conv3d_output_and_gradients_match_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref[f"conv.{case['input']}"], requires_grad=True)
    w = lazyvic.tensor(ref[f"{name}.weight"], requires_grad=True)
    b = lazyvic.tensor(ref[f"{name}.bias"], requires_grad=True) if case["bias"] else None
    y = getattr(F, case["fn"])(x, w, b, **case["kwargs"])
    assert y.shape == ref[f"{name}.out"].shape and y.dtype is lazyvic.float32
    (y * lazyvic.tensor(cotangent(y.shape))).sum().backward()
    _close(y, ref[f"{name}.out"], f"{name} output")
    _close(x.grad, ref[f"{name}.grad.input"], f"{name} grad of input")
    _close(w.grad, ref[f"{name}.grad.weight"], f"{name} grad of weight")
    if b is not None:
        _close(b.grad, ref[f"{name}.grad.bias"], f"{name} grad of bias")


_VX = _RNG.uniform(-1, 1, (1, 2, 3, 4, 3))


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (
            lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 2), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2),
            [_VX, _RNG.uniform(-1, 1, (4, 1, 2, 2, 2)), _RNG.uniform(-1, 1, 4)],
        ),
        (
            lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=(1, 0, 1), output_padding=1, groups=2),
            [_VX, _RNG.uniform(-1, 1, (2, 1, 3, 2, 2)), _RNG.uniform(-1, 1, 2)],
        ),
    ],
    ids=["conv3d", "conv_transpose3d"],
)
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # hundreds of evaluations: interpret them
def test_conv3d_vjp_matches_finite_differences(fn, arrays, mode):
    check_vjp(fn, *arrays)


# ======================================================== modules
def test_conv3d_modules_use_pytorchs_names_shapes_and_init():
    lazyvic.manual_seed(0)
    for cls, args in ((nn.Conv3d, (4, 6, (3, 2, 1))), (nn.ConvTranspose3d, (4, 6, 3))):
        m = cls(*args, groups=2)
        assert [[k, list(v.shape)] for k, v in m.state_dict().items()] == SPEC["state_dict"][cls.__name__]
        fan_in = m.weight.shape[1] * math.prod(m.weight.shape[2:])
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.bias.numpy()).max() <= bound
        assert m.weight.numpy().std() > bound / 4
    assert nn.Conv3d(4, 6, 3, bias=False).bias is None
    assert "kernel_size=(3, 3, 3), stride=(2, 2, 2)" in repr(nn.Conv3d(4, 6, 3, stride=2))


@pytest.mark.parametrize(
    "cls, name, args",
    [
        (nn.Conv3d, "c3_stride_pad_dil_groups", (4, 6, (3, 2, 3))),
        (nn.Conv3d, "c3_same_even", (4, 3, (2, 3, 2))),
        (nn.ConvTranspose3d, "ct3_stride_outpad_groups", (4, 6, (3, 2, 3))),
    ],
)
def test_conv3d_modules_load_pytorch_weights_and_match(ref, cls, name, args):
    case = _case(name)
    m = cls(*args, bias=case["bias"], **case["kwargs"])
    m.load_state_dict({"weight": ref[f"{name}.weight"], "bias": ref[f"{name}.bias"]})
    x = ref[f"conv.{case['input']}"]
    _close(m(lazyvic.tensor(x)), ref[f"{name}.out"], f"{cls.__name__} output")
    _close(m(lazyvic.tensor(x[1])), ref[f"{name}.out"][1], f"{cls.__name__} unbatched output")


def test_conv_transpose3d_output_size_picks_the_output_padding(ref):
    name = "ct3_stride_outpad_groups"
    m = nn.ConvTranspose3d(4, 6, (3, 2, 3), stride=2, padding=(1, 0, 1), groups=2)
    m.load_state_dict({"weight": ref[f"{name}.weight"], "bias": ref[f"{name}.bias"]})
    x = lazyvic.tensor(ref["conv.x5"])
    assert m(x).shape == (2, 6, 9, 12, 9)
    _close(m(x, output_size=ref[f"{name}.out"].shape), ref[f"{name}.out"], "ConvTranspose3d(output_size=...)")


def test_conv3d_padding_modes_pad_then_convolve():
    x = lazyvic.tensor(np.random.default_rng(2).normal(size=(1, 2, 4, 4, 5)).astype(np.float32))
    for mode in ("reflect", "replicate", "circular"):
        m = nn.Conv3d(2, 3, 3, padding=(1, 2, 1), padding_mode=mode)
        want = F.conv3d(F.pad(x, (1, 1, 2, 2, 1, 1), mode=mode), m.weight, m.bias).numpy()
        np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-6, atol=1e-6)
    assert nn.Conv3d(2, 2, (2, 3, 2), padding="same", padding_mode="reflect")(x).shape == (1, 2, 4, 4, 5)


def test_conv3d_half_inputs_compute_in_float32_and_round_once():
    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(1, 2, 3, 4, 4)).astype(np.float32), rng.normal(size=(2, 2, 2, 2, 2)).astype(np.float32)
    xh, wh = lazyvic.tensor(x).to(lazyvic.bfloat16), lazyvic.tensor(w).to(lazyvic.bfloat16)
    for fn in (F.conv3d, F.conv_transpose3d):
        y = fn(xh, wh, stride=(1, 2, 1))
        want = fn(xh.float(), wh.float(), stride=(1, 2, 1)).to(lazyvic.bfloat16)
        assert y.dtype is lazyvic.bfloat16
        np.testing.assert_array_equal(y.float().numpy(), want.float().numpy())


# ======================================================== ONNX
def test_conv3d_modules_export_as_one_onnx_node_each_and_match_onnxruntime():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    lazyvic.manual_seed(3)
    model = nn.Sequential(
        nn.Conv3d(4, 6, 3, stride=(2, 1, 1), padding=(1, 0, 2), dilation=(1, 2, 1), groups=2),
        nn.ReLU(),
        nn.ConvTranspose3d(6, 4, (2, 3, 2), stride=2, padding=(0, 1, 1), output_padding=(1, 0, 1), groups=2),
    )
    x = np.random.default_rng(4).normal(size=(2, 4, 5, 6, 5)).astype(np.float32)
    proto = lazyvic.onnx.export(model, x)
    onnx.checker.check_model(proto, full_check=True)
    nodes = [n for n in proto.graph.node if n.op_type != "Constant"]
    assert [n.op_type for n in nodes] == ["Conv", "Relu", "ConvTranspose"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]
    assert attrs[0] == dict(
        kernel_shape=[3, 3, 3], strides=[2, 1, 1], pads=[1, 0, 2, 1, 0, 2], dilations=[1, 2, 1], group=2
    )
    assert attrs[2]["output_padding"] == [1, 0, 1] and attrs[2]["pads"] == [0, 1, 1, 0, 1, 1]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"input": x})
    np.testing.assert_allclose(model(lazyvic.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("Conv", {"strides": [2, 1, 2], "pads": [1, 0, 2, 0, 1, 1], "dilations": [1, 2, 1], "group": 2}),
        ("Conv", {"auto_pad": "SAME_UPPER", "strides": [1, 2, 2]}),
        ("ConvTranspose", {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 0, 0], "group": 2}),
        ("ConvTranspose", {"strides": [2, 2, 1], "output_shape": [10, 12, 7]}),
    ],
    ids=["conv-pads-groups", "conv-same-upper", "convtranspose-pads-groups", "convtranspose-output-shape"],
)
def test_onnx_3d_conv_imports_and_matches_onnxruntime(op, attrs):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)
    groups = attrs.get("group", 1)
    x = rng.normal(size=(2, 4, 5, 6, 5)).astype(np.float32)
    wshape = (6, 4 // groups, 3, 2, 3) if op == "Conv" else (4, 6 // groups, 3, 2, 3)
    w, b = rng.normal(size=wshape).astype(np.float32), rng.normal(size=6).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)],
        "conv3d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_value_info("y", onnx.TypeProto())],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    got = lazyvic.onnx.load(proto)(x).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ======================================================== errors
def test_conv3d_errors_name_the_op_and_shapes():
    x = lazyvic.zeros(2, 4, 5, 6, 5)
    with pytest.raises(ShapeError, match=r"conv3d: expected input \(N, C, D, H, W\).*\(4, 5, 5\)"):
        F.conv3d(lazyvic.zeros(4, 5, 5), lazyvic.zeros(6, 4, 3, 3, 3))
    with pytest.raises(ShapeError, match=r"conv3d: expected weight \(C_out, C_in/groups, kD, kH, kW\).*\(6, 4, 3, 3\)"):
        F.conv3d(x, lazyvic.zeros(6, 4, 3, 3))
    with pytest.raises(ShapeError, match=r"conv3d: input \(2, 4, 5, 6, 5\) has 4 channels, weight \(6, 3, 3, 3, 3\)"):
        F.conv3d(x, lazyvic.zeros(6, 3, 3, 3, 3))
    with pytest.raises(ShapeError, match=r"conv3d: groups=3 must divide input channels 4 and output channels 6"):
        F.conv3d(x, lazyvic.zeros(6, 1, 3, 3, 3), groups=3)
    with pytest.raises(
        ShapeError, match=r"conv3d: kernel extent 7 is larger than the padded input size 5 .*\(2, 4, 5, 6, 5\)"
    ):
        F.conv3d(x, lazyvic.zeros(6, 4, 4, 3, 3), dilation=(2, 1, 1), padding=(0, 1, 1))
    with pytest.raises(ShapeError, match=r"conv3d: bias shape \(5,\) does not fit weight shape \(6, 4, 3, 3, 3\)"):
        F.conv3d(x, lazyvic.zeros(6, 4, 3, 3, 3), lazyvic.zeros(5))
    with pytest.raises(ArgumentError, match="conv3d: padding='same' is not supported for strided"):
        F.conv3d(x, lazyvic.zeros(6, 4, 3, 3, 3), stride=(1, 2, 1), padding="same")
    with pytest.raises(ArgumentError, match=r"conv3d: stride must be an int or a tuple of 3 ints, got \(1, 2\)"):
        F.conv3d(x, lazyvic.zeros(6, 4, 3, 3, 3), stride=(1, 2))
    with pytest.raises(
        ShapeError, match=r"conv_transpose3d: input \(2, 4, 5, 6, 5\) has 4 channels; weight \(3, 2, 3, 3, 3\)"
    ):
        F.conv_transpose3d(x, lazyvic.zeros(3, 2, 3, 3, 3))
    with pytest.raises(ArgumentError, match="conv_transpose3d: output_padding .* must be smaller than either stride"):
        F.conv_transpose3d(x, lazyvic.zeros(4, 2, 3, 3, 3), stride=2, output_padding=(0, 2, 0))
    with pytest.raises(ShapeError, match=r"conv_transpose3d: the output size -1 is not positive for input \(2, 4, 5"):
        F.conv_transpose3d(x, lazyvic.zeros(4, 2, 1, 1, 1), padding=(3, 0, 0))
    with pytest.raises(ValueError, match="Conv3d: groups=3 must divide"):
        nn.Conv3d(4, 6, 3, groups=3)
    with pytest.raises(ValueError, match='ConvTranspose3d: only "zeros" padding mode'):
        nn.ConvTranspose3d(4, 2, 3, padding_mode="reflect")
