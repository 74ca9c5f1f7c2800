"""The new layers export to ONNX as their own operators (ConvTranspose, Conv) and run in
onnxruntime with lazyvic's results."""

from collections import Counter

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _run_ort(model, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def _ops(model) -> Counter:
    return Counter(n.op_type for n in model.graph.node if n.op_type != "Constant")


def test_dcgan_style_generator_exports_conv_transpose_nodes():
    lv.manual_seed(0)
    net = nn.Sequential(
        nn.ConvTranspose2d(6, 4, 4, 1, 0, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(True),
        nn.ConvTranspose2d(4, 2, 4, 2, 1, bias=False),
        nn.Tanh(),
    ).eval()
    x = np.random.default_rng(0).normal(size=(2, 6, 1, 1)).astype(np.float32)
    model = lv.onnx.export(net, x)
    onnx.checker.check_model(model, full_check=True)
    assert _ops(model)["ConvTranspose"] == 2
    np.testing.assert_allclose(_run_ort(model, x), net(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_conv1d_and_same_padding_export_as_conv():
    lv.manual_seed(1)
    net = nn.Sequential(
        nn.Conv1d(3, 4, 4, padding="same"), nn.GELU(), nn.ConvTranspose1d(4, 2, 3, stride=2, output_padding=1)
    )
    x = np.random.default_rng(1).normal(size=(2, 3, 7)).astype(np.float32)
    model = lv.onnx.export(net, x)
    onnx.checker.check_model(model, full_check=True)
    hist = _ops(model)
    assert hist["Conv"] == 1 and hist["ConvTranspose"] == 1
    np.testing.assert_allclose(_run_ort(model, x), net(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)
