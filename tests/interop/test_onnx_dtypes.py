"""ONNX import and export of every lazyvic dtype: float16, bfloat16 (ml_dtypes arrays), uint8, int8,
int16, uint16, uint32, uint64 besides float32, float64, int32, int64 and bool.

Export: a small function per dtype is exported, checked by onnx.checker, run in onnxruntime and
imported back, against lazyvic's own result; element types that an op's schema refuses at the
opset (Add of int8 before Add-14, Conv of bfloat16) are computed in a wider type and cast back
(``lazyvic/interop/onnx/legalize.py``). onnxruntime's CPU kernels cover less than the schemas
(bfloat16 only in Cast and data movement, no Max of int16 ...): each case uses ops it runs, and
bfloat16 cases take and return float32 (onnxruntime's Python API cannot feed bfloat16 arrays).

Import: a uint8 image input cast to float (the common preprocessing), int8 and float16 initializers,
bfloat16 tensors in both encodings ONNX allows (raw bytes, int32_data), and the element types
lazyvic still refuses (float8, int4, complex, string) with their errors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lazyvic as lv  # noqa: E402
from lazyvic import nn  # noqa: E402
from lazyvic.errors import OnnxError, UnsupportedOpError  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
INTEGERS = ["uint8", "int8", "int16", "uint16", "uint32", "uint64"]


def run_ort(model, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def make_model(nodes, inputs: list, outputs: list, inits=(), opset: int = 17):
    """``inputs``/``outputs``: (name, TensorProto type, shape) triples; ``inits``: TensorProtos."""
    graph = helper.make_graph(
        nodes,
        "dtypes",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 10
    onnx.checker.check_model(model, full_check=True)
    return model


def assert_same(got: np.ndarray, want: np.ndarray, ulps: int = 0):
    """Same dtype and shape; equal values, or within ``ulps`` units in the last place of a half type."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if ulps:
        eps = lv.finfo(lv.float16 if want.dtype == np.float16 else lv.bfloat16).eps
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=ulps * eps, atol=0)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def ints(name: str, shape=(3, 4), seed=0) -> np.ndarray:
    """Values of integer dtype ``name`` large enough that ``3 * x`` wraps in the 8-bit types."""
    info = np.iinfo(np.dtype(name))
    return np.random.default_rng(seed).integers(max(info.min, -100), min(info.max, 250) + 1, shape).astype(name)


# ---------------------------------------------------------------------------------- export
@pytest.mark.parametrize("opset", [13, 14])
@pytest.mark.parametrize("name", INTEGERS)
def test_integer_round_trip_through_onnxruntime(name, opset):
    """Wrapping arithmetic (Add/Mul of 8- and 16-bit types are computed in int32 at opset 13, natively
    from 14), a comparison, movement and a cast to float: onnxruntime and the re-import agree with
    lazyvic bit for bit."""
    x = ints(name)

    def f(x):
        y = (x * 3 + x).reshape(4, 3).transpose(0, 1)
        return y, x > 5, lv.cat([x, x[:1]], 0), x.to(lv.float32) * 0.5

    want = [t.numpy() for t in f(lv.tensor(x))]
    assert want[0].dtype == np.dtype(name)
    model = lv.onnx.export(f, lv.tensor(x), opset_version=opset)
    assert model.graph.input[0].type.tensor_type.elem_type == helper.np_dtype_to_tensor_dtype(np.dtype(name))
    carried = any(n.op_type == "Cast" and n.output[0].startswith("input/as_") for n in model.graph.node)
    assert carried == (opset == 13 and name in ("uint8", "int8", "int16", "uint16"))
    for got, w in zip(run_ort(model, {"input": x}), want):
        assert_same(got, w)
    for got, w in zip(lv.onnx.load(model)(x), want):
        assert_same(got.numpy(), w)


def test_float16_round_trip_through_onnxruntime():
    """float16 arithmetic, a reduction and a cast: the re-import is exact; onnxruntime computes some
    float16 nodes in float32 without rounding in between (its inserted casts), so 2 ulps."""
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float16)

    def f(x):
        return (x * 2.0 + 1.0).relu() - x, x.amax(1), x.to(lv.float32)

    want = [t.numpy() for t in f(lv.tensor(x))]
    model = lv.onnx.export(f, lv.tensor(x))
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    for got, w in zip(run_ort(model, {"input": x}), want):
        assert_same(got, w, ulps=2 if w.dtype == np.float16 else 0)
    for got, w in zip(lv.onnx.load(model)(x), want):
        assert_same(got.numpy(), w)


def test_bfloat16_casts_round_to_nearest_even_in_onnxruntime_too():
    """float32 -> bfloat16 -> movement -> float32: onnxruntime's Cast rounds as lazyvic's does
    (ties to even: 1 + 2**-8 goes down to 1, 1 + 3 * 2**-8 up to 1 + 2**-6)."""
    bits = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0xBF808001, 0x7F7FFFFF, 0x00010000], dtype=np.uint32)
    x = np.concatenate([bits.view(np.float32), np.random.default_rng(2).standard_normal(6).astype(np.float32)])
    x = x.reshape(3, 4)

    def f(x):
        h = x.to(lv.bfloat16)
        return lv.cat([h, h.transpose(0, 1).reshape(3, 4).flip(1)], 0).to(lv.float32)

    want = f(lv.tensor(x)).numpy()
    np.testing.assert_array_equal(want[0, :2], [1.0, 1.0 + 2.0**-6])
    model = lv.onnx.export(f, lv.tensor(x))
    assert any(n.op_type == "Cast" and n.attribute[0].i == TensorProto.BFLOAT16 for n in model.graph.node)
    assert_same(run_ort(model, {"input": x})[0], want)
    assert_same(lv.onnx.load(model)(x).numpy(), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_module_exports_half_initializers(dtype):
    """A module converted to a half type: FLOAT16 / BFLOAT16 initializers, imported back as
    parameters of that dtype with the same values; the convolution runs in float32 and is rounded
    once (F.conv2d on half tensors, as PyTorch's CPU kernel), so the exported Conv reads a Cast to
    FLOAT (also what Conv before opset 22 needs for bfloat16)."""
    lv.manual_seed(0)
    d = getattr(lv, dtype)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5 * 5, 2)).to(d)
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 5)).astype(d.np)
    want = net(lv.tensor(x)).numpy()
    model = lv.onnx.export(net, lv.tensor(x))
    code = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.BFLOAT16
    assert {t.data_type for t in model.graph.initializer} == {code}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    producer = {o: n for n in model.graph.node for o in n.output}[conv.input[0]]
    assert producer.op_type == "Cast" and producer.attribute[0].i == TensorProto.FLOAT
    back = lv.onnx.load(model)
    assert {p.dtype for p in back.parameters()} == {d}
    for key, value in net.state_dict().items():
        assert_same(back.state_dict()[key].numpy(), value.numpy())
    # The imported Gemm (a composite ONNX node) rounds x @ W.T + b once, as lazyvic's nn.Linear
    # (and PyTorch's addmm) does.
    assert_same(back(x).numpy(), want)
    if dtype == "float16":  # onnxruntime has no bfloat16 Conv or Gemm on the CPU
        assert_same(run_ort(model, {"input": x})[0], want, ulps=2)


def test_refused_element_types_at_the_opset_are_named():
    """Without a carrier (int64 has no wider integer type), export names the op, the type and the
    first opset that takes it; Relu of uint64 is written as the Identity it is."""
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    with pytest.raises(UnsupportedOpError, match=r"Relu of INT64 \(ONNX's Relu takes INT64 from opset 14"):
        lv.onnx.export(lambda x: x.relu(), lv.tensor(x))
    assert lv.onnx.export(lambda x: x.relu(), lv.tensor(x), opset_version=14).graph.node[0].op_type == "Relu"
    u = np.array([[0, 2**64 - 1]], dtype=np.uint64)
    model = lv.onnx.export(lambda x: x.relu() + 1, lv.tensor(u))
    assert [n.op_type for n in model.graph.node if n.op_type != "Constant"] == ["Identity", "Add"]
    assert_same(run_ort(model, {"input": u})[0], np.array([[1, 0]], dtype=np.uint64))


def test_zero_dim_constants_keep_their_rank():
    """A 0-d constant (the 1/n of a mean over every element) is written 0-d, not (1,)."""
    for d in (lv.float32, lv.float16):
        x = np.arange(12).reshape(3, 4).astype(d.np)
        model = lv.onnx.export(lambda x: x.mean(), lv.tensor(x))
        assert_same(run_ort(model, {"input": x})[0], lv.tensor(x).mean().numpy())


# ---------------------------------------------------------------------------------- import
def test_uint8_image_input_cast_to_float():
    """The common preprocessing: a uint8 image, Cast to float, scaled and normalized."""
    img = np.random.default_rng(4).integers(0, 256, (1, 3, 4, 4)).astype(np.uint8)
    mean = numpy_helper.from_array(np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1), "mean")
    scale = numpy_helper.from_array(np.array(1 / 255, np.float32), "scale")
    nodes = [
        helper.make_node("Cast", ["img"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "scale"], ["s"]),
        helper.make_node("Sub", ["s", "mean"], ["y"]),
    ]
    model = make_model(
        nodes, [("img", TensorProto.UINT8, img.shape)], [("y", TensorProto.FLOAT, img.shape)], [mean, scale]
    )
    got = lv.onnx.load(model)(img).numpy()
    assert_same(got, run_ort(model, {"img": img})[0])
    with pytest.raises(OnnxError, match="graph input 'img' expects uint8, got float32"):
        lv.onnx.load(model)(img.astype(np.float32))


def test_int8_initializer_dequantized():
    """An int8 weight with a scale and zero point (DequantizeLinear written out): the initializer
    is an int8 buffer, the product matches onnxruntime."""
    w = np.random.default_rng(5).integers(-128, 128, (4, 3)).astype(np.int8)
    w[0, 0] = -128  # -128 - 3 wraps to 125 in int8, in ONNX's Sub as in lazyvic's
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(3, np.int8), "zero"),
        numpy_helper.from_array(np.array(0.02, np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Sub", ["w", "zero"], ["shifted"]),
        helper.make_node("Cast", ["shifted"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["wf", "scale"], ["wd"]),
        helper.make_node("MatMul", ["x", "wd"], ["y"]),
    ]
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    model = make_model(nodes, [("x", TensorProto.FLOAT, x.shape)], [("y", TensorProto.FLOAT, (2, 3))], inits)
    module = lv.onnx.load(model)
    assert module.state_dict()["w"].dtype is lv.int8 and "w" not in dict(module.named_parameters())
    want = x @ ((w - np.int8(3)).astype(np.float32) * np.float32(0.02))
    np.testing.assert_allclose(module(x).numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(module(x).numpy(), run_ort(model, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_float16_initializer():
    """A float16 initializer is a float16 parameter; float16 Add/Mul match onnxruntime within 1 ulp."""
    h = np.random.default_rng(7).standard_normal(4).astype(np.float16)
    x = np.random.default_rng(8).standard_normal((3, 4)).astype(np.float16)
    nodes = [helper.make_node("Add", ["x", "h"], ["s"]), helper.make_node("Mul", ["s", "h"], ["y"])]
    model = make_model(
        nodes,
        [("x", TensorProto.FLOAT16, x.shape)],
        [("y", TensorProto.FLOAT16, x.shape)],
        [numpy_helper.from_array(h, "h")],
    )
    module = lv.onnx.load(model)
    assert module.h.dtype is lv.float16 and module.h.requires_grad
    got = module(x).numpy()
    assert_same(got, ((x + h) * h).astype(np.float16))  # NumPy rounds each float16 op as lazyvic does
    assert_same(got, run_ort(model, {"x": x})[0], ulps=1)


def _bfloat16_tensors(values: np.ndarray, name: str) -> list:
    """The same bfloat16 tensor in both encodings: raw little-endian bytes and int32_data."""
    bits = values.astype(BF16).view(np.uint16)
    raw = helper.make_tensor(name, TensorProto.BFLOAT16, values.shape, bits.tobytes(), raw=True)
    packed = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=values.shape)
    packed.int32_data.extend(int(b) for b in bits.reshape(-1))
    return [raw, packed]


@pytest.mark.parametrize("encoding", [0, 1], ids=["raw_data", "int32_data"])
def test_bfloat16_initializer_and_constant(encoding):
    """bfloat16 initializers and Constant values decode to ml_dtypes.bfloat16 arrays (whichever
    array type onnx.numpy_helper gives for them); a model with bfloat16 input and output runs on
    ml_dtypes arrays; its float32 variant matches onnxruntime."""
    b = np.array([[1.5, -2.0, 3.140625], [0.0078125, -0.0, 1e30]], np.float32)
    init = _bfloat16_tensors(b, "b")[encoding]
    const = _bfloat16_tensors(np.array([2.0, 0.5, -1.0], np.float32), "c")[encoding]
    nodes = [
        helper.make_node("Constant", [], ["c"], value=const),
        helper.make_node("Mul", ["x", "b"], ["xb"]),
        helper.make_node("Add", ["xb", "c"], ["y"]),
    ]
    model = make_model(nodes, [("x", TensorProto.BFLOAT16, (2, 3))], [("y", TensorProto.BFLOAT16, (2, 3))], [init])
    module = lv.onnx.load(model)
    assert module.b.dtype is lv.bfloat16
    assert_same(module.b.numpy(), b.astype(BF16))
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(BF16)
    want = (x.astype(np.float32) * b.astype(BF16).astype(np.float32)).astype(BF16)
    want = (want.astype(np.float32) + np.array([2.0, 0.5, -1.0], np.float32)).astype(BF16)
    assert_same(module(x).numpy(), want)
    # onnxruntime: float32 in and out, the bfloat16 initializer cast to float.
    nodes = [
        helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["xh"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xf", "bf"], ["y"]),
    ]
    model = make_model(nodes, [("x", TensorProto.FLOAT, (2, 3))], [("y", TensorProto.FLOAT, (2, 3))], [init])
    xf = np.random.default_rng(10).standard_normal((2, 3)).astype(np.float32)
    assert_same(lv.onnx.load(model)(xf).numpy(), run_ort(model, {"x": xf})[0])


@pytest.mark.parametrize("name", ["float16", "bfloat16", *INTEGERS])
def test_cast_to_every_dtype_matches_onnxruntime(name):
    """Cast from float32 to each type and back (in-range values: ONNX leaves out-of-range float ->
    integer casts undefined), folded on constants and computed on a graph input alike."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(name) if name != "bfloat16" else BF16)
    x = np.array([[0.0, 1.0, 2.5, 3.5], [7.75, 100.4, 3.0, 65.0]], np.float32)
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=elem),
        helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(x, "k")),
        helper.make_node("Cast", ["k"], ["kh"], to=elem),
        helper.make_node("Cast", ["kh"], ["z"], to=TensorProto.FLOAT),
    ]
    model = make_model(
        nodes,
        [("x", TensorProto.FLOAT, x.shape)],
        [("y", TensorProto.FLOAT, x.shape), ("z", TensorProto.FLOAT, x.shape)],
    )
    y, z = lv.onnx.load(model)(x)
    want_y, want_z = run_ort(model, {"x": x})
    assert_same(y.numpy(), want_y)
    assert_same(z.numpy(), want_z)
    direct = lv.tensor(x).to(getattr(lv, name)).to(lv.float32).numpy()
    assert_same(y.numpy(), direct)


@pytest.mark.parametrize("half", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_half_composites_compute_in_float32_and_round_once(half):
    """Softmax, LayerNormalization and Elu of a half type are computed in float32 and rounded once
    (lazyvic/interop/onnx/halves.py); LayerNormalization's Mean output (type U, stash_type float)
    stays float32."""
    elem = helper.np_dtype_to_tensor_dtype(half)
    x = (np.random.default_rng(11).standard_normal((2, 3, 8)) * 4).astype(half)
    g = np.linspace(0.5, 1.5, 8).astype(half)
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=-1),
        helper.make_node("LayerNormalization", ["x", "g"], ["n", "mean"], axis=-1, epsilon=1e-5),
        helper.make_node("Elu", ["x"], ["c"], alpha=2.0),
    ]
    model = make_model(
        nodes,
        [("x", elem, x.shape)],
        [("s", elem, x.shape), ("n", elem, x.shape), ("mean", TensorProto.FLOAT, (2, 3, 1)), ("c", elem, x.shape)],
        [numpy_helper.from_array(g, "g") if half != BF16 else _bfloat16_tensors(g.astype(np.float32), "g")[0]],
        opset=22,
    )
    s, n, mean, c = (t.numpy() for t in lv.onnx.load(model)(x))
    x32, g32 = x.astype(np.float32), g.astype(np.float32)
    e = np.exp(x32 - x32.max(-1, keepdims=True))
    assert_same(s, (e / e.sum(-1, keepdims=True)).astype(half), ulps=0 if half == np.float16 else 1)
    mu = x32.mean(-1, keepdims=True)
    var = ((x32 - mu) ** 2).mean(-1, keepdims=True)
    assert_same(n, ((x32 - mu) / np.sqrt(var + 1e-5) * g32).astype(half), ulps=1)
    assert mean.dtype == np.float32
    np.testing.assert_allclose(mean, mu, rtol=1e-6)
    assert_same(c, np.where(x32 > 0, x32, 2 * (np.exp(x32) - 1)).astype(half), ulps=1)


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.BFLOAT16], ids=["float16", "bfloat16"])
def test_double_to_half_rounds_through_float32_like_onnxruntime(elem):
    """float64 -> float16 / bfloat16 rounds to float32 first (onnxruntime, PyTorch and lazyvic's cast
    do; correct rounding would give 1 + 2**-10 for the first value), folded or not."""
    x = np.array([1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-8 + 2.0**-40, -3.25], np.float64)
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=elem),
        helper.make_node("Cast", ["h"], ["y"], to=TensorProto.DOUBLE),
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(x, "k")),
        helper.make_node("Cast", ["k"], ["kh"], to=elem),  # folded: k is a constant
        helper.make_node("Cast", ["kh"], ["z"], to=TensorProto.DOUBLE),
    ]
    model = make_model(
        nodes, [("x", TensorProto.DOUBLE, [3])], [("y", TensorProto.DOUBLE, [3]), ("z", TensorProto.DOUBLE, [3])]
    )
    y, z = lv.onnx.load(model)(x)
    want = run_ort(model, {"x": x})
    assert_same(y.numpy(), want[0])
    assert_same(z.numpy(), want[1])
    assert y.numpy()[0] == 1.0


@pytest.mark.parametrize(
    "elem, what",
    [
        (TensorProto.FLOAT8E4M3FN, "FLOAT8E4M3FN"),
        (TensorProto.INT4, "INT4"),
        (TensorProto.COMPLEX64, "COMPLEX64"),
        (TensorProto.STRING, "STRING"),
    ],
)
def test_types_lazyvic_lacks_are_refused(elem, what):
    """Graph inputs and Cast targets of float8, int4, complex and string types are refused, naming
    the type and what lazyvic supports."""
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", elem, [2])],
            [helper.make_tensor_value_info("y", elem, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 21)],
    )
    with pytest.raises(OnnxError, match=f"graph input 'x' has type {what} .*BFLOAT16.*UINT64"):
        lv.onnx.load(model)
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y"], name="c", to=elem)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", elem, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 21)],
    )
    with pytest.raises(UnsupportedOpError, match=f"Cast to {what} .*: nodes 'c'"):
        lv.onnx.load(model)


@pytest.mark.parametrize("field", ["raw_data", "int32_data"])
def test_bad_bfloat16_data_is_refused(field):
    """A BFLOAT16 initializer whose data does not fit its shape, or whose int32_data holds a value
    that is not a 16-bit pattern, raises OnnxError naming it."""
    t = TensorProto(name="b", data_type=TensorProto.BFLOAT16, dims=[2])
    if field == "raw_data":
        t.raw_data = b"\x00\x3f\x80"  # 3 bytes for 2 elements
    else:
        t.int32_data.extend([0x3F80, 0x12345])
    nodes = [helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxError, match="initializer 'b' .*missing or bad data"):
        lv.onnx.load(model)
