"""ONNX for the inverse trigonometric and hyperbolic functions: Atan, Asin, Acos (opset 7) and
Sinh, Cosh, Asinh, Acosh, Atanh (opset 9) exported and run in onnxruntime against lazyvic, and
imported against NumPy; logaddexp and deg2rad export as the nodes they are built of; atan2,
which ONNX lacks, is refused by name. (Old opsets: test_onnx_old_opsets.py; the onnx package's
own node cases: test_onnx_conformance.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import errors

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

OP_TYPES = {
    "atan": ("Atan", np.arctan),
    "asin": ("Asin", np.arcsin),
    "acos": ("Acos", np.arccos),
    "sinh": ("Sinh", np.sinh),
    "cosh": ("Cosh", np.cosh),
    "asinh": ("Asinh", np.arcsinh),
    "acosh": ("Acosh", np.arccosh),
    "atanh": ("Atanh", np.arctanh),
}
# Inside every domain (acosh's from 1) and out of some (asin(1.5) is NaN in both), with +-1 and 0.
X = np.array([[-0.9, -0.5, 0.0, 0.3], [0.75, 1.0, 1.5, 3.0]], np.float32)


def _run(model, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _functions(t):
    return tuple(getattr(t, name)() for name in OP_TYPES)


def test_export_matches_onnxruntime():
    model = lv.onnx.export(_functions, X, opset_version=13)
    onnx.checker.check_model(model)
    assert {op for op, _ in OP_TYPES.values()} <= {n.op_type for n in model.graph.node}
    got = _run(model, {"input": X})
    for name, g, want in zip(OP_TYPES, got, _functions(lv.tensor(X)), strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6, atol=1e-7, equal_nan=True, err_msg=name)


def test_compositions_export_and_match_onnxruntime():
    y = np.array([[0.5, -0.5, 3.0, -20.0], [0.75, 1.0, np.inf, -np.inf]], np.float32)

    def fn(a, b):
        return lv.logaddexp(a, b), lv.logaddexp2(a, b), a.deg2rad(), b.rad2deg()

    model = lv.onnx.export(fn, (X, y), opset_version=13)
    got = _run(model, {i.name: v for i, v in zip(model.graph.input, (X, y), strict=True)})
    for g, want in zip(got, fn(lv.tensor(X), lv.tensor(y)), strict=True):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6, atol=1e-6)


def test_atan2_has_no_onnx_form():
    with pytest.raises(errors.UnsupportedOpError, match="no ONNX form at opset 13 for: atan2"):
        lv.onnx.export(lambda t: t.atan2(t.flip(0)), X)


@pytest.mark.parametrize("name", list(OP_TYPES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_import(name, dtype):
    op_type, ref = OP_TYPES[name]
    x = X.astype(dtype)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", elem, x.shape)],
        [helper.make_tensor_value_info("y", elem, x.shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = lv.onnx.load(model)(x).numpy()
    assert got.dtype == dtype
    with np.errstate(invalid="ignore", divide="ignore"):
        want = ref(x.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(got, want, rtol=3e-7 if dtype == np.float32 else 5e-16, equal_nan=True)
    if dtype == np.float32:  # onnxruntime's CPU kernels of these ops are float32 only
        np.testing.assert_allclose(got, _run(model, {"x": x})[0], rtol=1e-6, equal_nan=True)
