"""ONNX export of the new primitives (sin, cos, floor, round, log1p, expm1, prod, argsort) and of
functions built on them, checked by onnx.checker and run in onnxruntime against lazyvic."""

from __future__ import annotations

import numpy as np
import pytest

import lazyvic as lv

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _run(model, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _op_types(model) -> set:
    return {n.op_type for n in model.graph.node}


def test_elementwise_primitives_export_and_match_onnxruntime():
    x = np.array([[-2.5, -0.7, 0.4], [1.5, 2.5, 3.3]], np.float32)

    def fn(t):
        return t.sin() + t.cos(), t.floor(), t.round(), t.abs().log1p(), (t * 0.5).expm1(), t.ceil() + t.trunc()

    model = lv.onnx.export(fn, x, opset_version=13)
    assert {"Sin", "Cos", "Floor", "Round", "Log", "Exp"} <= _op_types(model)
    got = _run(model, {"input": x})
    for g, want in zip(got, fn(lv.tensor(x))):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6, atol=1e-6)


def test_prod_and_argsort_export_and_match_onnxruntime():
    x = np.array([[0.3, -1.2, 2.5, 0.9], [1.7, 0.1, -0.4, 2.2]], np.float32)

    def fn(t):
        return t.prod(1), t.argsort(1, descending=True), t.topk(2).values, t.sort(0).values

    model = lv.onnx.export(fn, x, opset_version=18)
    assert {"ReduceProd", "TopK"} <= _op_types(model)
    got = _run(model, {"input": x})
    for g, want in zip(got, fn(lv.tensor(x))):
        np.testing.assert_allclose(g, want.numpy(), rtol=1e-6)
