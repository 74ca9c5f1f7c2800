"""lazyvic.onnx.load: small onnx.helper graphs per op family and PyTorch-exported fixtures, each
compared with onnxruntime on the same inputs; errors; fine-tuning; lazyvic format v1 round trip.

The fixtures in tests/fixtures/onnx/ come from tests/fixtures/make_onnx_fixtures.py (torch is not
needed here).
"""

from __future__ import annotations

import itertools
import os
import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lazyvic  # noqa: E402
from lazyvic.errors import OnnxError, UnsupportedOpError  # noqa: E402
from lazyvic.interop.onnx import OnnxModule, state_dict_keys, supported_ops  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "onnx")
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
_NP_TO_ELEM = {
    np.dtype(np.float32): F32,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): I64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def _rng(seed=0):
    return np.random.default_rng(seed)


def _model(nodes, inputs: dict, outputs, inits: dict | None = None, opset: int = 17):
    """A model from nodes; ``inputs`` name -> example array (their dtypes/shapes declare the inputs);
    ``outputs`` a list of names (types left to inference); ``inits`` name -> array."""
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info(n, _NP_TO_ELEM[a.dtype], a.shape) for n, a in inputs.items()],
        [helper.make_value_info(n, onnx.TypeProto()) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 9 if opset <= 20 else 10
    _model.last_inputs = inputs
    return model


def _ort(model, feeds: dict):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model, inputs: dict | None = None, rtol=1e-5, atol=1e-6):
    """Run with lazyvic and onnxruntime; compare every output (dtype, shape, values). ``inputs``
    defaults to the model's single input ``x`` bound to the example the test built it from."""
    if inputs is None:
        inputs = {"x": _model.last_inputs["x"]}
    expected = _ort(model, inputs)
    module = lazyvic.onnx.load(model)
    got = module(*inputs.values())
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = g.numpy()
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    return module


_names = itertools.count()


def _node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or f"{op.lower()}_{next(_names)}", **attrs)


# ============================================================== op families vs onnxruntime
X34 = _rng(1).standard_normal((3, 4)).astype(np.float32)
X234 = _rng(2).standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcast(op):
    b = _rng(3).standard_normal((4,)).astype(np.float32) + 2.0
    _check(_model([_node(op, ["x", "b"], ["y"])], {"x": X234}, ["y"], {"b": b}), {"x": X234})


def test_integer_div_truncates_and_pow():
    a = np.array([7, -7, 9, -9], dtype=np.int64)
    b = np.array([2, 2, -4, -4], dtype=np.int64)
    _check(_model([_node("Div", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"]), {"a": a, "b": b})
    x = np.abs(X34) + 0.5
    e = np.array([[2.0, 0.5, -1.0, 3.0]], dtype=np.float32)
    _check(_model([_node("Pow", ["x", "e"], ["y"])], {"x": x, "e": e}, ["y"]), {"x": x, "e": e})


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("Sqrt", {}),
        ("Reciprocal", {}),
        ("Exp", {}),
        ("Log", {}),
        ("Neg", {}),
        ("Abs", {}),
        ("Relu", {}),
        ("LeakyRelu", {"alpha": 0.2}),
        ("Sigmoid", {}),
        ("Tanh", {}),
        ("Erf", {}),
        ("Softmax", {"axis": 1}),
        ("LogSoftmax", {}),
        ("Identity", {}),
    ],
)
def test_unary(op, attrs):
    x = np.abs(X234) + 0.1 if op in ("Sqrt", "Log", "Reciprocal") else X234
    _check(_model([_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"]), {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    m = _model([_node("Gelu", ["x"], ["y"], approximate=approximate)], {"x": X234}, ["y"], opset=20)
    _check(m, {"x": X234})


def test_clip_bounds_are_inputs():
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    _check(_model([_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": X234}, ["y"], inits), {"x": X234})
    _check(_model([_node("Clip", ["x", "", "hi"], ["y"])], {"x": X234}, ["y"], inits), {"x": X234})


def test_matmul_and_gemm():
    w = _rng(4).standard_normal((4, 5)).astype(np.float32)
    _check(_model([_node("MatMul", ["x", "w"], ["y"])], {"x": X234}, ["y"], {"w": w}), {"x": X234})
    wt = np.ascontiguousarray(w.T)
    c = _rng(5).standard_normal((5,)).astype(np.float32)
    m = _model(
        [_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)], {"x": X34}, ["y"], {"w": wt, "c": c}
    )
    _check(m, {"x": X34})
    at = np.ascontiguousarray(X34.T)
    _check(_model([_node("Gemm", ["a", "w"], ["y"], transA=1)], {"a": at}, ["y"], {"w": w}), {"a": at})


IMG = _rng(6).standard_normal((2, 4, 7, 8)).astype(np.float32)


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [1, 1, 1, 1]},
        {"pads": [0, 1, 2, 1], "strides": [2, 1]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        {"auto_pad": "VALID", "dilations": [2, 1]},
        {"group": 2, "pads": [1, 0, 1, 0]},
    ],
)
def test_conv2d(attrs):
    groups = attrs.get("group", 1)
    w = _rng(7).standard_normal((6, 4 // groups, 3, 3)).astype(np.float32)
    b = _rng(8).standard_normal((6,)).astype(np.float32)
    m = _model([_node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": IMG}, ["y"], {"w": w, "b": b})
    _check(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2], "output_padding": [1, 0]},
        {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [1, 2]},
        {"group": 2, "strides": [1, 2]},
        {"strides": [2, 2], "output_shape": [15, 18]},
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ],
)
def test_conv_transpose(attrs):
    groups = attrs.get("group", 1)
    w = _rng(18).standard_normal((4, 6 // groups, 3, 3)).astype(np.float32)
    b = _rng(19).standard_normal((6,)).astype(np.float32)
    m = _model([_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": IMG}, ["y"], {"w": w, "b": b})
    _check(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


def test_conv1d():
    x = IMG[:, :, 0, :]
    w = _rng(9).standard_normal((3, 4, 3)).astype(np.float32)
    m = _model([_node("Conv", ["x", "w"], ["y"], pads=[1, 2], strides=[2])], {"x": x}, ["y"], {"w": w})
    _check(m, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [2, 2], "pads": [0, 1, 1, 0], "count_include_pad": 1}),
        ("GlobalAveragePool", {}),
        ("LpPool", {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1]}),
        ("LpPool", {"kernel_shape": [2, 2], "p": 1}),
    ],
)
def test_pooling(op, attrs):
    _check(_model([_node(op, ["x"], ["y"], **attrs)], {"x": IMG}, ["y"]), {"x": IMG})


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    ],
)
def test_average_pool_with_ceil_mode_imports_as_the_primitive(attrs):
    """AveragePool with symmetric pads, ceil_mode and either count_include_pad is the avg_pool2d
    primitive (lazyvic/ops/avg_pool.py), not a decomposition, and matches onnxruntime."""
    m = _model([_node("AveragePool", ["x"], ["y"], **attrs)], {"x": IMG}, ["y"], opset=22)
    _check(m, {"x": IMG})
    y = lazyvic.onnx.load(m)(lazyvic.tensor(IMG))
    assert y._node.op == "avg_pool2d"


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "storage_order": 1},
    ],
)
def test_max_pool_indices(attrs):
    m = _model([_node("MaxPool", ["x"], ["y", "i"], **attrs)], {"x": IMG}, ["y", "i"])
    _check(m, {"x": IMG})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_3d(op):
    x = _rng(16).standard_normal((1, 2, 5, 6, 4)).astype(np.float32)
    m = _model(
        [_node(op, ["x"], ["y"], kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1])], {"x": x}, ["y"]
    )
    _check(m, {"x": x})


def test_batch_norm_and_layer_norm():
    r = _rng(10)
    c = 4
    inits = {
        "s": r.uniform(0.5, 1.5, c).astype(np.float32),
        "b": r.standard_normal(c).astype(np.float32),
        "m": r.standard_normal(c).astype(np.float32),
        "v": r.uniform(0.5, 2, c).astype(np.float32),
    }
    m = _model([_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)], {"x": IMG}, ["y"], inits)
    _check(m, {"x": IMG})
    ln = {"g": r.standard_normal((7, 8)).astype(np.float32), "beta": r.standard_normal((8,)).astype(np.float32)}
    m = _model(
        [_node("LayerNormalization", ["x", "g", "beta"], ["y", "mean", "inv"], axis=-2)],
        {"x": IMG},
        ["y", "mean", "inv"],
        ln,
    )
    _check(m, {"x": IMG}, rtol=1e-4, atol=1e-5)
    m = _model([_node("LayerNormalization", ["x", "beta"], ["y"], epsilon=1e-3)], {"x": IMG}, ["y"], ln)
    _check(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


def test_movement_ops():
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    cases = [
        ([_node("Flatten", ["x"], ["y"], axis=-1)], {}),
        ([_node("Reshape", ["x", "s"], ["y"])], {"s": i64(0, -1, 2)}),
        ([_node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], {}),
        ([_node("Transpose", ["x"], ["y"])], {}),
        ([_node("Concat", ["x", "x"], ["y"], axis=-1)], {}),
        ([_node("Unsqueeze", ["x", "a"], ["y"])], {"a": i64(0, -1)}),
        ([_node("Unsqueeze", ["x", "a"], ["t"]), _node("Squeeze", ["t", "a"], ["y"])], {"a": i64(1)}),
        ([_node("Expand", ["x", "s"], ["y"])], {"s": i64(2, 1, 1, 4)}),
        (
            [_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
            {"st": i64(-1, 0), "en": i64(-100, 4), "ax": i64(2, 1), "sp": i64(-2, 2)},
        ),
        ([_node("Slice", ["x", "st", "en"], ["y"])], {"st": i64(1), "en": i64(1000)}),
        ([_node("Gather", ["x", "i"], ["y"], axis=1)], {"i": np.array([[0, -1], [2, 1]], dtype=np.int64)}),
        ([_node("Gather", ["x", "i"], ["y"], axis=2)], {"i": np.array(-2, dtype=np.int64)}),
    ]
    for nodes, inits in cases:
        _check(_model(nodes, {"x": X234}, ["y"], inits), {"x": X234})


def test_split_opset13_and_18():
    sizes = np.array([1, 3], dtype=np.int64)
    _check(_model([_node("Split", ["x", "s"], ["a", "b"], axis=2)], {"x": X234}, ["a", "b"], {"s": sizes}), {"x": X234})
    _check(_model([_node("Split", ["x"], ["a", "b"], axis=2)], {"x": X234}, ["a", "b"], opset=13), {"x": X234})
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    m = _model([_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)], {"x": x}, ["a", "b", "c"], opset=18)
    _check(m, {"x": x})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_axes_attribute_or_input(op, opset):
    axes = np.array([0, -1], dtype=np.int64)
    if op == "ReduceSum" or opset >= 18:
        nodes, inits = [_node(op, ["x", "axes"], ["y"], keepdims=0)], {"axes": axes}
    else:
        nodes, inits = [_node(op, ["x"], ["y"], axes=[0, -1], keepdims=0)], {}
    _check(_model(nodes, {"x": X234}, ["y"], inits, opset=opset), {"x": X234})
    _check(_model([_node(op, ["x"], ["y"])], {"x": X234}, ["y"], opset=opset), {"x": X234})


def test_argmax_compare_logic_where_cast():
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype=np.float32)
    _check(_model([_node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1)], {"x": x}, ["y"]), {"x": x})
    _check(_model([_node("ArgMax", ["x"], ["y"], axis=0, keepdims=0)], {"x": x}, ["y"]), {"x": x})
    z = np.array([[1, 0, 3], [2, 5, 0]], dtype=np.float32)
    nodes = [
        _node("Equal", ["x", "z"], ["e"]),
        _node("Less", ["x", "z"], ["l"]),
        _node("Greater", ["x", "z"], ["g"]),
        _node("Not", ["e"], ["n"]),
        _node("Where", ["l", "x", "z"], ["w"]),
        _node("Cast", ["g"], ["c"], to=TensorProto.INT32),
        _node("Cast", ["x"], ["d"], to=TensorProto.INT64),
        _node("Dropout", ["x"], ["dr"]),
    ]
    _check(_model(nodes, {"x": x, "z": z}, ["e", "l", "g", "n", "w", "c", "d", "dr"]), {"x": x, "z": z})


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("Sign", {}),
        ("Softplus", {}),
        ("Softsign", {}),
        ("Elu", {"alpha": 0.5}),
        ("Selu", {}),
        ("Celu", {"alpha": 2.0}),
        ("HardSigmoid", {}),
        ("HardSwish", {}),
        ("ThresholdedRelu", {"alpha": 0.3}),
        ("Mish", {}),
        ("IsNaN", {}),
        ("IsInf", {}),
        ("GlobalMaxPool", {}),
        ("ReduceMin", {"keepdims": 0}),
        ("ReduceSumSquare", {}),
        ("ArgMin", {"axis": -1}),
        ("Trilu", {"upper": 0}),
        ("SpaceToDepth", {"blocksize": 2}),
        ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}),
    ],
)
def test_more_unary_ops(op, attrs):
    x = _rng(13).standard_normal((2, 4, 4, 6)).astype(np.float32)
    x[0, 0, 0, :3] = [np.inf, -np.inf, np.nan] if op in ("IsNaN", "IsInf") else x[0, 0, 0, :3]
    opset = 18 if op == "Mish" else 17
    _check(_model([_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=opset))


@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean", "LessOrEqual", "GreaterOrEqual", "PRelu"])
def test_more_binary_ops(op):
    x = X234
    z = _rng(14).standard_normal((3, 1)).astype(np.float32)
    _check(_model([_node(op, ["x", "z"], ["y"])], {"x": x, "z": z}, ["y"]), {"x": x, "z": z})


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"])
def test_more_reductions(op):
    x = np.abs(X234) + 0.1
    m = _model(
        [_node(op, ["x", "axes"], ["y"], keepdims=0)], {"x": x}, ["y"], {"axes": np.array([1], np.int64)}, opset=18
    )
    _check(m, {"x": x})
    _check(_model([_node(op, ["x"], ["y"], axes=[0, 2])], {"x": x}, ["y"], opset=17), {"x": x})


def test_cumsum_onehot_normalizations():
    for exclusive in (0, 1):
        for reverse in (0, 1):
            m = _model(
                [_node("CumSum", ["x", "ax"], ["y"], exclusive=exclusive, reverse=reverse)],
                {"x": X234},
                ["y"],
                {"ax": np.array(1, np.int64)},
            )
            _check(m, {"x": X234})
    ints = np.array([[1, 5, -2], [3, 0, 7]], dtype=np.int64)
    _check(
        _model([_node("CumSum", ["x", "ax"], ["y"])], {"x": ints}, ["y"], {"ax": np.array(-1, np.int64)}), {"x": ints}
    )
    idx = np.array([[0, 2, -1], [1, 5, 3]], dtype=np.int64)
    m = _model(
        [_node("OneHot", ["i", "d", "v"], ["y"], axis=1)],
        {"i": idx},
        ["y"],
        {"d": np.array(4, np.int64), "v": np.array([-1.0, 2.0], np.float32)},
    )
    _check(m, {"i": idx})
    _check(_model([_node("LpNormalization", ["x"], ["y"], p=1, axis=0)], {"x": X234}, ["y"]), {"x": X234})
    _check(
        _model([_node("MeanVarianceNormalization", ["x"], ["y"])], {"x": IMG}, ["y"]), {"x": IMG}, rtol=1e-4, atol=1e-5
    )
    r = _rng(17)
    gn = {"s": r.standard_normal(4).astype(np.float32), "b": r.standard_normal(4).astype(np.float32)}
    m = _model([_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], {"x": IMG}, ["y"], gn, opset=21)
    _check(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs,scales,sizes",
    [
        (
            {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
            [1, 1, 2, 1.5],
            None,
        ),
        ({"mode": "nearest"}, None, [2, 4, 5, 13]),
        ({"mode": "linear"}, [1, 1, 0.6, 1.7], None),
        ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [2, 4, 12, 5]),
        (
            {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel", "antialias": 1},
            [1, 1, 0.5, 0.4],
            None,
        ),
        ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [1, 1, 1.5, 0.8], None),
        ({"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}, None, [6, 20]),
    ],
)
def test_resize(attrs, scales, sizes):
    inits = {"scales": np.array(scales, np.float32)} if scales else {"sizes": np.array(sizes, np.int64)}
    inputs = ["x", "", "scales"] if scales else ["x", "", "", "sizes"]
    m = _model([_node("Resize", inputs, ["y"], **attrs)], {"x": IMG}, ["y"], inits, opset=18)
    _check(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


def test_scatter():
    data = _rng(20).standard_normal((4, 5, 3)).astype(np.float32)
    upd = _rng(21).standard_normal((2, 5, 3)).astype(np.float32)
    m = _model(
        [_node("ScatterND", ["x", "i", "u"], ["y"])],
        {"x": data},
        ["y"],
        {"i": np.array([[3], [-4]], np.int64), "u": upd},
    )
    _check(m, {"x": data})
    m = _model(
        [_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")],
        {"x": data},
        ["y"],
        {"i": np.array([[1, 2], [1, 2], [0, 4]], np.int64), "u": upd[0, :3]},
        opset=18,
    )
    _check(m, {"x": data})
    idx = np.array([[[0, 2, 1]] * 5, [[3, -1, 0]] * 5], dtype=np.int64)
    m = _model([_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)], {"x": data}, ["y"], {"i": idx, "u": upd})
    _check(m, {"x": data})


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(reduction):
    scores = _rng(23).standard_normal((4, 5, 3)).astype(np.float32)
    labels = np.array([[0, 4, 1], [2, -1, 3], [4, 4, 0], [1, 2, -1]], dtype=np.int64)
    w = np.linspace(0.5, 1.5, 5).astype(np.float32)
    m = _model(
        [_node("SoftmaxCrossEntropyLoss", ["s", "l", "w"], ["loss", "logp"], reduction=reduction, ignore_index=-1)],
        {"s": scores, "l": labels},
        ["loss", "logp"],
        {"w": w},
    )
    _check(m, {"s": scores, "l": labels})
    m = _model(
        [_node("NegativeLogLikelihoodLoss", ["s", "l"], ["loss"], reduction=reduction, ignore_index=-1)],
        {"s": scores, "l": labels},
        ["loss"],
    )
    _check(m, {"s": scores, "l": labels})


def test_rms_norm_swish_shrink_eyelike():
    g = _rng(24).standard_normal((3, 4)).astype(np.float32)
    m = lazyvic.onnx.load(
        _model([_node("RMSNormalization", ["x", "g"], ["y"], axis=-2)], {"x": X234}, ["y"], {"g": g}, opset=23)
    )
    want = X234 / np.sqrt((X234**2).mean((1, 2), keepdims=True) + 1e-5) * g
    np.testing.assert_allclose(m(X234).numpy(), want, rtol=1e-5, atol=1e-6)
    m = lazyvic.onnx.load(_model([_node("Swish", ["x"], ["y"], alpha=0.5)], {"x": X234}, ["y"], opset=24))
    np.testing.assert_allclose(m(X234).numpy(), X234 / (1 + np.exp(-0.5 * X234)), rtol=1e-5, atol=1e-6)
    _check(_model([_node("Shrink", ["x"], ["y"], lambd=0.3, bias=0.1)], {"x": X234}, ["y"]), {"x": X234})
    _check(_model([_node("EyeLike", ["x"], ["y"], k=1, dtype=TensorProto.INT64)], {"x": X34}, ["y"]), {"x": X34})


@pytest.mark.parametrize("layout", ["4d", "3d"])
def test_attention(layout):
    r = _rng(25)
    if layout == "4d":  # grouped-query, causal with a KV cache, a boolean mask, every output
        q, k, v = (r.standard_normal(s).astype(np.float32) for s in [(2, 4, 3, 8), (2, 2, 3, 8), (2, 2, 3, 6)])
        pk, pv = r.standard_normal((2, 2, 2, 8)).astype(np.float32), r.standard_normal((2, 2, 2, 6)).astype(np.float32)
        mask = r.random((3, 5)) > 0.3
        feeds = {"q": q, "k": k, "v": v, "m": mask, "pk": pk, "pv": pv}
        node = _node(
            "Attention",
            ["q", "k", "v", "m", "pk", "pv"],
            ["y", "present_k", "present_v", "qk"],
            is_causal=1,
            qk_matmul_output_mode=3,
        )
        outs = ["y", "present_k", "present_v", "qk"]
    else:  # packed heads, softcap, an explicit scale, a float mask
        q, k, v = (r.standard_normal(s).astype(np.float32) for s in [(2, 3, 12), (2, 4, 12), (2, 4, 6)])
        feeds = {"q": q, "k": k, "v": v, "m": r.standard_normal((3, 4)).astype(np.float32)}
        node = _node("Attention", ["q", "k", "v", "m"], ["y"], q_num_heads=3, kv_num_heads=3, softcap=2.0, scale=0.3)
        outs = ["y"]
    _check(_model([node], feeds, outs, opset=23), feeds, rtol=1e-4, atol=1e-5)


def test_gather_nd_center_crop_pad_reverse_sequence_rotary_swiglu():
    idx = np.array([[[1, 2], [0, -1]], [[0, 0], [1, 1]]], dtype=np.int64)
    _check(
        _model([_node("GatherND", ["x", "i"], ["y"], batch_dims=1)], {"x": X234}, ["y"], {"i": idx[:, :, :1]}),
        {"x": X234},
    )
    _check(_model([_node("GatherND", ["x", "i"], ["y"])], {"x": X234}, ["y"], {"i": idx}), {"x": X234})
    m = _model(
        [_node("CenterCropPad", ["x", "s"], ["y"], axes=[1, 2])],
        {"x": X234},
        ["y"],
        {"s": np.array([6, 3], np.int64)},
        opset=18,
    )
    _check(m, {"x": X234})
    x = _rng(26).standard_normal((4, 3, 2)).astype(np.float32)
    m = _model(
        [_node("ReverseSequence", ["x", "n"], ["y"], time_axis=0, batch_axis=1)],
        {"x": x},
        ["y"],
        {"n": np.array([4, 1, 3], np.int64)},
    )
    _check(m, {"x": x})
    r = _rng(27)
    x = r.standard_normal((2, 3, 5, 8)).astype(np.float32)
    caches = {
        "c": r.standard_normal((7, 3)).astype(np.float32),
        "s": r.standard_normal((7, 3)).astype(np.float32),
        "p": np.array([[0, 2, 4, 6, 1], [3, 3, 2, 1, 0]], np.int64),
    }
    m = _model(
        [_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], rotary_embedding_dim=6, interleaved=1)],
        {"x": x},
        ["y"],
        caches,
        opset=23,
    )
    _check(m, {"x": x})
    a, b = X234, np.flip(X234, 0).copy()
    m = lazyvic.onnx.load(_model([_node("SwiGLU", ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"], opset=28))
    np.testing.assert_allclose(m(a, b).numpy(), a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent(op):
    r = _rng(28)
    gates, hidden = {"LSTM": 4, "GRU": 3, "RNN": 1}[op], 5
    x = r.standard_normal((4, 3, 6)).astype(np.float32)  # (seq, batch, input)
    inits = {
        "w": r.standard_normal((2, gates * hidden, 6)).astype(np.float32) * 0.5,
        "r": r.standard_normal((2, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "b": r.standard_normal((2, 2 * gates * hidden)).astype(np.float32) * 0.5,
        "n": np.array([4, 2, 3], np.int32),
        "h0": r.standard_normal((2, 3, hidden)).astype(np.float32),
    }
    inputs, outs, attrs = ["x", "w", "r", "b", "n", "h0"], ["y", "y_h"], {}
    if op == "LSTM":
        inits["c0"] = r.standard_normal((2, 3, hidden)).astype(np.float32)
        inits["p"] = r.standard_normal((2, 3 * hidden)).astype(np.float32)
        inputs, outs = inputs + ["c0", "p"], outs + ["y_c"]
    if op == "GRU":
        attrs["linear_before_reset"] = 1
    if op == "RNN":
        attrs.update(activations=["Relu", "HardSigmoid"], activation_alpha=[0.3], activation_beta=[0.4])
    node = _node(op, inputs, outs, hidden_size=hidden, direction="bidirectional", **attrs)
    want = _check(_model([node], {"x": x}, outs, inits), {"x": x}, rtol=1e-4, atol=1e-5)(x)
    # layout=1 (batch-major; onnxruntime does not run it): the same numbers, transposed.
    batch_major = {
        k: (np.ascontiguousarray(v.transpose(1, 0, 2)) if k in ("h0", "c0") else v) for k, v in inits.items()
    }
    node = _node(op, inputs, outs, hidden_size=hidden, direction="bidirectional", layout=1, **attrs)
    xb = np.ascontiguousarray(x.transpose(1, 0, 2))
    got = lazyvic.onnx.load(_model([node], {"x": xb}, outs, batch_major))(xb)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy().transpose(2, 0, 1, 3), rtol=1e-6)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy().transpose(1, 0, 2), rtol=1e-6)


@pytest.mark.parametrize(
    "op, direction",
    [
        ("LSTM", "bidirectional"),
        ("LSTM", "reverse"),
        ("GRU", "bidirectional"),
        ("RNN", "bidirectional"),
        ("RNN", "relu"),
    ],
)
def test_recurrent_nodes_as_pytorchs_layers(op, direction):
    """LSTM and GRU nodes with the default activations over whole sequences (an LSTM without
    peepholes, a GRU with linear_before_reset=1: what PyTorch's exporter writes) run as PyTorch's
    layers with the gates reordered (ONNX: i, o, f, c and z, r, h), one scan primitive per
    direction (ops/recurrent.py); RNN nodes with Tanh (the default) or Relu activations too;
    against onnxruntime, initial states and biases included, with sequence_lens all equal to the
    length (the bidirectional LSTM) or uneven (the scans' lengths input: outputs past a
    sequence's end are zeros, Y_h the state at its last step). ("relu": an RNN forward in time
    with activations ["Relu"].)"""
    from _oracle import pending_ops

    r = _rng(29)
    attrs = {"activations": ["Relu"]} if direction == "relu" else {}
    direction = "forward" if direction == "relu" else direction
    gates, hidden, dirs = {"LSTM": 4, "GRU": 3, "RNN": 1}[op], 5, 2 if direction == "bidirectional" else 1
    x = r.standard_normal((4, 3, 6)).astype(np.float32)
    inits = {
        "w": r.standard_normal((dirs, gates * hidden, 6)).astype(np.float32) * 0.5,
        "r": r.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "b": r.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.5,
        "n": np.array([4, 4, 4] if (op, direction) == ("LSTM", "bidirectional") else [4, 2, 3], np.int32),
        "h0": r.standard_normal((dirs, 3, hidden)).astype(np.float32),
    }
    inputs, outs = ["x", "w", "r", "b", "n", "h0"], ["y", "y_h"]
    if op == "LSTM":
        inits["c0"] = r.standard_normal((dirs, 3, hidden)).astype(np.float32)
        inputs, outs = inputs + ["c0"], outs + ["y_c"]
    elif op == "GRU":
        attrs["linear_before_reset"] = 1
    model = _model([_node(op, inputs, outs, hidden_size=hidden, direction=direction, **attrs)], {"x": x}, outs, inits)
    _check(model, {"x": x}, rtol=1e-5, atol=1e-6)
    assert op.lower() + "_scan" in pending_ops(lazyvic.onnx.load(model)(x)[0])


@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
        ("ii->i", [(4, 4)]),
        ("bii->b", [(2, 3, 3)]),
        ("ij,ij,ij->i", [(3, 4), (3, 4), (3, 4)]),
        ("i,j->ij", [(3,), (4,)]),
        ("abc,cd,Ad->Aab", [(2, 3, 4), (4, 5), (6, 5)]),
        ("ij->", [(3, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ],
)
def test_einsum_matches_numpy(equation, shapes):
    r = _rng(29)
    arrays = {f"x{i}": r.standard_normal(shape).astype(np.float32) for i, shape in enumerate(shapes)}
    m = lazyvic.onnx.load(_model([_node("Einsum", list(arrays), ["y"], equation=equation)], arrays, ["y"]))
    np.testing.assert_allclose(m(*arrays.values()).numpy(), np.einsum(equation, *arrays.values()), rtol=1e-5, atol=1e-5)


def test_mod():
    a = np.array([7, -7, 7, -7, 0, 5], dtype=np.int64)
    b = np.array([3, 3, -3, -3, 2, 5], dtype=np.int64)
    for fmod in (0, 1):
        _check(_model([_node("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": a, "b": b}, ["y"]), {"a": a, "b": b})
    x, z = a.astype(np.float32) + 0.5, b.astype(np.float32)
    _check(_model([_node("Mod", ["x", "z"], ["y"], fmod=1)], {"x": x, "z": z}, ["y"]), {"x": x, "z": z})


def test_logic_pad_tile_gather_elements_instance_norm():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    for op in ("And", "Or", "Xor"):
        _check(_model([_node(op, ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"]), {"a": a, "b": b})
    pads = {"p": np.array([0, 2, -1, 1, 0, 3], np.int64), "v": np.array(1.5, np.float32)}
    _check(_model([_node("Pad", ["x", "p", "v"], ["y"])], {"x": X234}, ["y"], pads), {"x": X234})
    for mode in ("edge", "reflect", "wrap"):
        m = _model(
            [_node("Pad", ["x", "p"], ["y"], mode=mode)],
            {"x": X234},
            ["y"],
            {"p": np.array([0, 2, 1, 0, 1, 2], np.int64)},
            opset=19,
        )
        _check(m, {"x": X234})
    m = _model(
        [_node("Pad", ["x", "p", "", "ax"], ["y"])],
        {"x": X234},
        ["y"],
        {"p": np.array([1, 2], np.int64), "ax": np.array([-1], np.int64)},
        opset=18,
    )
    _check(m, {"x": X234})
    _check(
        _model([_node("Tile", ["x", "r"], ["y"])], {"x": X234}, ["y"], {"r": np.array([2, 1, 3], np.int64)}),
        {"x": X234},
    )
    idx = np.array([[[0, -1], [2, 1], [1, 1]]] * 2, dtype=np.int64)
    _check(_model([_node("GatherElements", ["x", "i"], ["y"], axis=2)], {"x": X234}, ["y"], {"i": idx}), {"x": X234})
    r = _rng(15)
    inits = {"s": r.standard_normal(4).astype(np.float32), "b": r.standard_normal(4).astype(np.float32)}
    _check(
        _model([_node("InstanceNormalization", ["x", "s", "b"], ["y"])], {"x": IMG}, ["y"], inits),
        {"x": IMG},
        rtol=1e-4,
        atol=1e-5,
    )


def test_shape_chain_is_constant_folded_without_a_sync():
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape (what exporters write for x.view(x.size(0), -1)),
    # plus ConstantOfShape, Range and Cast of constants feeding a graph output.
    nodes = [
        _node("Shape", ["x"], ["shape"]),
        _node("Gather", ["shape", "zero"], ["n"], axis=0),
        _node("Unsqueeze", ["n", "zero_1d"], ["n1"]),
        _node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        _node("Reshape", ["x", "target"], ["y"]),
        _node("Shape", ["y"], ["yshape"], start=-1),
        _node("ConstantOfShape", ["yshape"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        _node("Range", ["zero", "n", "one"], ["r"]),
        _node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        _node("Constant", [], ["half"], value_float=0.5),
        _node("Mul", ["rf", "half"], ["rh"]),
        _node("Unsqueeze", ["rh", "one_1d"], ["rcol"]),
        _node("Add", ["y", "ones"], ["y1"]),
        _node("Add", ["y1", "rcol"], ["out"]),
    ]
    inits = {
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "zero_1d": np.array([0], np.int64),
        "one_1d": np.array([1], np.int64),
        "minus_one": np.array([-1], np.int64),
    }
    model = _model(nodes, {"x": X234}, ["out"], inits)
    _check(model, {"x": X234})
    x = lazyvic.tensor(X234) * 1.0  # a pending tensor: any sync inside forward would realize it
    out = lazyvic.onnx.load(model)(x)
    assert x.is_lazy and out.is_lazy and out.shape == (2, 12)
    assert all(not isinstance(b, lazyvic.nn.Parameter) for b in lazyvic.onnx.load(model).buffers())


def test_rounding_and_trig_ops_fold_on_shape_arithmetic_and_run_on_data():
    # half = floor(shape[-1] / 2) computed in float, as exporters write for dynamic sizes.
    nodes = [
        _node("Shape", ["x"], ["s"], start=-1),
        _node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        _node("Constant", [], ["two"], value=numpy_helper.from_array(np.full(1, 2.0, np.float32))),
        _node("Div", ["sf", "two"], ["h"]),
        _node("Floor", ["h"], ["hf"]),
        _node("Cos", ["hf"], ["c"]),
        _node("Cast", ["hf"], ["hi"], to=TensorProto.INT64),
        _node("Slice", ["x", "zero", "hi", "axes"], ["y0"]),
        _node("ReduceSum", ["c"], ["cs"], keepdims=0),
        _node("Add", ["y0", "cs"], ["y"]),
    ]
    inits = {"zero": np.array([0], np.int64), "axes": np.array([2], np.int64)}
    m = _model(nodes, {"x": X234}, ["y"], inits)
    got = lazyvic.onnx.load(m)(X234).numpy()
    np.testing.assert_allclose(got, X234[:, :, :2] + np.cos(2.0), rtol=1e-6)
    # On data they are primitives now (Floor, Round, Sin, Cos) or built from them (Ceil).
    data = (X234 * 3.7).astype(np.float32)
    for op_type, ref in (("Floor", np.floor), ("Ceil", np.ceil), ("Round", np.round), ("Sin", np.sin), ("Cos", np.cos)):
        got = lazyvic.onnx.load(_model([_node(op_type, ["x"], ["y"])], {"x": data}, ["y"]))(data).numpy()
        np.testing.assert_allclose(got, ref(data), rtol=1e-6, atol=1e-6, err_msg=op_type)


def test_multiple_outputs_tensor_and_numpy_inputs():
    m = _model([_node("Relu", ["x"], ["a"]), _node("Neg", ["x"], ["b"])], {"x": X34}, ["a", "b"])
    module = lazyvic.onnx.load(m)
    a, b = module(lazyvic.tensor(X34))
    np.testing.assert_array_equal(a.numpy(), np.maximum(X34, 0))
    a2, b2 = module(X34)
    np.testing.assert_array_equal(b2.numpy(), -X34)
    assert module.input_names == ["x"] and module.output_names == ["a", "b"]


def test_initializer_listed_as_graph_input_is_not_a_user_input():
    w = _rng(11).standard_normal((4, 2)).astype(np.float32)
    m = _model([_node("MatMul", ["x", "w"], ["y"])], {"x": X34, "w": w}, ["y"], {"w": w})
    module = lazyvic.onnx.load(m)
    assert module.input_names == ["x"]
    np.testing.assert_allclose(module(X34).numpy(), X34 @ w, rtol=1e-5)


# ============================================================== PyTorch-exported fixtures
VALUES = np.load(os.path.join(FIXTURES, "torch_values.npz"))


@pytest.mark.parametrize("name,key", [("cnn", "cnn"), ("cnn_ts", "cnn"), ("mlp", "mlp"), ("block", "block")])
def test_pytorch_fixture_matches_onnxruntime_and_torch(name, key):
    path = os.path.join(FIXTURES, f"{name}.onnx")
    x = VALUES[f"{key}.input"]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    expected = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    module = lazyvic.onnx.load(path)
    got = module(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, VALUES[f"{key}.output"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cnn", "mlp"])
def test_pytorch_fixture_compiled(name):
    from lazyvic.runtime.config import config

    module = lazyvic.onnx.load(os.path.join(FIXTURES, f"{name}.onnx"))
    prev, config.compile = config.compile, "always"
    try:
        got = module(VALUES[f"{name}.input"]).numpy()
    finally:
        config.compile = prev
    np.testing.assert_allclose(got, VALUES[f"{name}.output"], rtol=1e-5, atol=1e-5)


def test_external_data_fixture_and_state_dict_keys():
    path = os.path.join(FIXTURES, "cnn.onnx")
    assert os.path.exists(path + ".data")
    proto = onnx.load(path, load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)
    module = lazyvic.onnx.load(path)
    names = [t.name for t in proto.graph.initializer]
    keys = module.initializer_keys
    for n in names:
        if n.replace(".", "").replace("_", "").isalnum() and not n[0].isdigit():
            assert keys[n] == n
    assert set(module.state_dict()) == set(keys.values())
    assert "conv1.weight" in module.state_dict() and "bn1.running_var" in module.state_dict()
    assert isinstance(module.conv1.weight, lazyvic.nn.Parameter)
    np.testing.assert_array_equal(
        module.state_dict()["conv1.weight"].numpy(), numpy_helper.to_array(onnx.load(path).graph.initializer[0])
    )


def test_state_dict_key_sanitizing():
    keys = state_dict_keys(
        ["layer1.0.conv1.weight", "onnx::MatMul_123", "fc", "fc.weight", "/a/b:0", "1x", "onnx__MatMul_123", "a.b-c"]
    )
    assert keys["layer1.0.conv1.weight"] == "layer1.0.conv1.weight"
    assert keys["fc.weight"] == "fc.weight"
    assert keys["fc"] == "fc_2"  # also a submodule name
    assert keys["onnx__MatMul_123"] == "onnx__MatMul_123"  # kept names come first
    assert keys["onnx::MatMul_123"] == "onnx__MatMul_123_2"
    assert keys["/a/b:0"] == "_a_b_0" and keys["1x"] == "_1x" and keys["a.b-c"] == "a_b_c"
    assert len(set(keys.values())) == len(keys)


def test_integer_initializers_are_buffers_float_ones_parameters():
    m = _model(
        [_node("Reshape", ["x", "onnx::Reshape_7"], ["t"]), _node("Add", ["t", "bias"], ["y"])],
        {"x": X234},
        ["y"],
        {"onnx::Reshape_7": np.array([6, 4], np.int64), "bias": np.ones(4, np.float32)},
    )
    module = lazyvic.onnx.load(m)
    assert [n for n, _ in module.named_parameters()] == ["bias"]
    assert [n for n, _ in module.named_buffers()] == ["onnx__Reshape_7"]


# ============================================================== fine-tuning
def test_gradients_match_torch_and_sgd_lowers_the_loss():
    module = lazyvic.onnx.load(os.path.join(FIXTURES, "mlp.onnx"))
    x, target = VALUES["mlp.input"], lazyvic.tensor(VALUES["mlp.target"])
    loss = ((module(x) - target) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(loss.item(), float(VALUES["mlp.loss"]), rtol=1e-5)
    params = dict(module.named_parameters())
    assert set(params) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight", "head.bias"}
    for name, p in params.items():
        np.testing.assert_allclose(p.grad.numpy(), VALUES[f"mlp.grad.{name}"], rtol=1e-4, atol=1e-6)
    before = {n: p.numpy().copy() for n, p in params.items()}
    opt = lazyvic.optim.SGD(module.parameters(), lr=0.1)
    opt.step()
    opt.zero_grad()
    after = ((module(x) - target) ** 2).mean().item()
    assert after < loss.item()
    assert all(not np.array_equal(before[n], p.numpy()) for n, p in module.named_parameters())


def test_gradient_matches_finite_differences_through_conv_and_pool():
    r = _rng(12)
    x = r.standard_normal((1, 2, 5, 5))
    w = r.standard_normal((3, 2, 3, 3))
    nodes = [
        _node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        _node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2]),
        _node("Tanh", ["p"], ["y"]),
    ]
    module = lazyvic.onnx.load(_model(nodes, {"x": x}, ["y"], {"w": w}))
    assert module.w.dtype == lazyvic.float64
    loss = module(x).sum()
    loss.backward()
    grad = module.w.grad.numpy()

    def f(wv):
        m = lazyvic.onnx.load(_model(nodes, {"x": x}, ["y"], {"w": wv}))
        return m(x).sum().item()

    for idx in [(0, 0, 0, 0), (1, 1, 2, 1), (2, 0, 1, 2)]:
        e = np.zeros_like(w)
        e[idx] = 1e-6
        fd = (f(w + e) - f(w - e)) / 2e-6
        np.testing.assert_allclose(grad[idx], fd, rtol=1e-4, atol=1e-7)


def test_gradient_matches_finite_differences_through_conv_transpose_and_resize():
    r = _rng(22)
    x = r.standard_normal((1, 2, 4, 3))
    w = r.standard_normal((2, 3, 3, 3))
    s = r.standard_normal(3)
    nodes = [
        _node("ConvTranspose", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 0, 0, 1]),
        _node("Resize", ["c", "", "sc"], ["r"], mode="linear"),
        _node("InstanceNormalization", ["r", "s", "b"], ["n"]),
        _node("Tanh", ["n"], ["y"]),
    ]
    inits = {"sc": np.array([1, 1, 0.7, 1.5], np.float32), "b": np.zeros(3)}

    def build(wv, sv):
        return lazyvic.onnx.load(_model(nodes, {"x": x}, ["y"], {"w": wv, "s": sv, **inits}))

    module = build(w, s)
    (module(x) * np.linspace(-1, 1, 1 * 3 * 5 * 9).reshape(1, 3, 5, 9)).sum().backward()
    weight = np.linspace(-1, 1, 1 * 3 * 5 * 9).reshape(1, 3, 5, 9)

    def f(wv, sv):
        return float((build(wv, sv)(x).numpy() * weight).sum())

    for idx in [(0, 0, 0, 0), (1, 2, 1, 2)]:
        e = np.zeros_like(w)
        e[idx] = 1e-6
        np.testing.assert_allclose(module.w.grad.numpy()[idx], (f(w + e, s) - f(w - e, s)) / 2e-6, rtol=1e-4, atol=1e-7)
    e = np.zeros_like(s)
    e[1] = 1e-6
    np.testing.assert_allclose(module.s.grad.numpy()[1], (f(w, s + e) - f(w, s - e)) / 2e-6, rtol=1e-4, atol=1e-7)


# ============================================================== lazyvic format v1 round trip
def test_save_load_round_trip(tmp_path):
    module = lazyvic.onnx.load(os.path.join(FIXTURES, "cnn.onnx"))
    assert isinstance(module, OnnxModule) and set(module.config) == {"model", "source"}
    path = tmp_path / "cnn.lazyvic"
    lazyvic.save(module, path)
    again = lazyvic.load(path)
    assert isinstance(again, OnnxModule) and list(again.state_dict()) == list(module.state_dict())
    x = VALUES["cnn.input"]
    np.testing.assert_array_equal(again(x).numpy(), module(x).numpy())
    # The stored structure carries no weights.
    assert len(module.config["model"]) < os.path.getsize(os.path.join(FIXTURES, "cnn.onnx")) * 1.5


# ============================================================== errors
def test_missing_file(tmp_path):
    with pytest.raises(OnnxError, match="nope.onnx: no such file"):
        lazyvic.onnx.load(tmp_path / "nope.onnx")


def test_not_onnx_and_truncated(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("this is not a model\n" * 20)
    with pytest.raises(OnnxError, match="notes.onnx: not") as e:
        lazyvic.onnx.load(text)
    assert "Traceback" not in str(e.value)
    data = open(os.path.join(FIXTURES, "mlp.onnx"), "rb").read()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxError, match="cut.onnx"):
        lazyvic.onnx.load(cut)


def test_missing_external_data(tmp_path):
    shutil.copy(os.path.join(FIXTURES, "cnn.onnx"), tmp_path / "cnn.onnx")
    with pytest.raises(OnnxError, match=r"cnn.onnx: cannot load the external data"):
        lazyvic.onnx.load(tmp_path / "cnn.onnx")


def test_missing_initializer_names_the_node(tmp_path):
    m = _model([_node("MatMul", ["x", "w"], ["y"], name="proj")], {"x": X34}, ["y"])
    path = tmp_path / "broken.onnx"
    onnx.save(m, path)
    with pytest.raises(OnnxError, match=r"broken.onnx: node 'proj' \(MatMul\): input 'w' is not defined"):
        lazyvic.onnx.load(path)


def test_initializer_without_data(tmp_path):
    m = _model([_node("Add", ["x", "b"], ["y"])], {"x": X34}, ["y"], {"b": np.ones(4, np.float32)})
    m.graph.initializer[0].ClearField("raw_data")
    with pytest.raises(OnnxError, match="initializer 'b'"):
        lazyvic.onnx.load(m)


def test_inconsistent_shapes(tmp_path):
    w = np.ones((5, 2), np.float32)
    m = _model([_node("MatMul", ["x", "w"], ["y"], name="mm")], {"x": X34}, ["y"], {"w": w})
    path = tmp_path / "shapes.onnx"
    onnx.save(m, path)
    module = lazyvic.onnx.load(path)
    with pytest.raises(OnnxError, match=r"shapes.onnx: node 'mm' \(MatMul\): .*\(3, 4\).*\(5, 2\)"):
        module(X34)
    with pytest.raises(
        OnnxError,
        match=r"shapes.onnx: graph input 'x' has shape \(4, 3\), but the graph declares "
        r"\(3, 4\)",
    ):
        module(X34.T.copy())
    with pytest.raises(OnnxError, match="expects float32, got float64"):
        module(X34.astype(np.float64))
    with pytest.raises(OnnxError, match="takes 1 inputs"):
        module(X34, X34)
    bad_conv = _model(
        [_node("Conv", ["x", "w"], ["y"], name="Conv_3")], {"x": IMG}, ["y"], {"w": np.ones((8, 3, 3, 3), np.float32)}
    )
    with pytest.raises(OnnxError, match=r"node 'Conv_3' \(Conv\).*\(2, 4, 7, 8\)"):
        lazyvic.onnx.load(bad_conv)(IMG)


def test_unsupported_ops_are_all_listed_at_load_time():
    nodes = [
        _node("Relu", ["x"], ["a"]),
        _node("Foo", ["a"], ["b"], name="foo_1"),
        _node("Foo", ["b"], ["c"], name="foo_2"),
        _node("TopK", ["c"], ["d"], name="topk"),
        helper.make_node("FusedGemm", ["d", "d"], ["y"], name="fg", domain="com.microsoft"),
    ]
    m = _model(nodes, {"x": X34}, ["y"])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOpError) as e:
        lazyvic.onnx.load(m)
    msg = str(e.value)
    assert "3 unsupported op type(s)" in msg
    assert "Foo: nodes 'foo_1', 'foo_2'" in msg and "TopK: nodes 'topk'" in msg
    assert "FusedGemm (domain 'com.microsoft'" in msg and "'fg'" in msg


def test_opset_limits_and_unsupported_features():
    with pytest.raises(UnsupportedOpError, match="opset 6 is not supported"):
        lazyvic.onnx.load(_model([_node("Relu", ["x"], ["y"])], {"x": X34}, ["y"], opset=6))
    with pytest.raises(UnsupportedOpError, match="opset 99 is not supported"):
        lazyvic.onnx.load(_model([_node("Relu", ["x"], ["y"])], {"x": X34}, ["y"], opset=99))
    with pytest.raises(UnsupportedOpError, match="Cast to FLOAT8E4M3FN.*nodes 'c8'"):
        lazyvic.onnx.load(
            _model([_node("Cast", ["x"], ["y"], name="c8", to=TensorProto.FLOAT8E4M3FN)], {"x": X34}, ["y"], opset=19)
        )
    m = _model(
        [_node("Pad", ["x", "p"], ["y"], name="pad", mode="wrap")],
        {"x": X34},
        ["y"],
        {"p": np.array([1, 1, 1, 1], np.int64)},
        opset=18,
    )  # wrap exists from Pad-19
    with pytest.raises(UnsupportedOpError, match="Pad with mode='wrap': nodes 'pad'"):
        lazyvic.onnx.load(m)
    m = _model([_node("Add", ["x", "h"], ["y"])], {"x": X34}, ["y"], {"h": np.ones(4, np.complex64)})
    with pytest.raises(OnnxError, match="initializer 'h' has type COMPLEX64"):
        lazyvic.onnx.load(m)
    assert supported_ops()["ReduceMean"] == (1, 11, 13, 18)
