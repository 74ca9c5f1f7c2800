"""PyTorch-exported ONNX -> lazyvic.onnx.load -> lazyvic.onnx.export -> onnxruntime, against PyTorch's outputs.

The fixtures come from tests/fixtures/make_onnx_fixtures.py (PyTorch 2.13: dynamo exporter at
opset 18 with external data, TorchScript exporter at opset 17).
"""

from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "onnx"
VALUES = np.load(FIXTURES / "torch_values.npz")


@pytest.mark.parametrize("name", ["mlp", "cnn", "cnn_ts", "block"])
def test_import_then_export_matches_pytorch(name, tmp_path):
    key = name.split("_")[0]
    x, want = VALUES[f"{key}.input"], VALUES[f"{key}.output"]
    m = lv.onnx.load(FIXTURES / f"{name}.onnx")
    np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-5, atol=1e-6)
    path = tmp_path / f"{name}_again.onnx"
    model = lv.onnx.export(m, x, path)  # static: the fixtures declare a fixed batch
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The imported module's parameter names name the re-exported initializers (integer buffers
    # that only fed shape arithmetic were folded at import and are not needed any more).
    inits = {i.name for i in model.graph.initializer}
    params = {k for k, _ in m.named_parameters()}
    assert params and params <= inits
    if name == "mlp":  # TorchScript's Gemm layers come back as Gemm (through F.linear)
        assert [n.op_type for n in model.graph.node if n.op_type != "Constant"] == [
            "Gemm",
            "Relu",
            "Gemm",
            "Tanh",
            "Gemm",
        ]
    # And the re-exported file imports again to the same function.
    again = lv.onnx.load(path)
    np.testing.assert_allclose(again(x * 0.5).numpy(), m(x * 0.5).numpy(), rtol=1e-5, atol=1e-6)


def test_a_fixed_input_shape_cannot_become_dynamic():
    m = lv.onnx.load(FIXTURES / "mlp.onnx")
    x = VALUES["mlp.input"]
    with pytest.raises(
        lv.errors.OnnxError,
        match="axis 0 of 'input' cannot be dynamic: the call fails when it has size .* graph declares",
    ):
        lv.onnx.export(m, x, dynamic_axes={"input": [0]})


def test_lazyvic_export_then_import_keeps_exactly_the_parameters():
    from lazyvic.models import TinyGPT

    lv.manual_seed(3)
    gpt = TinyGPT(vocab_size=30, d_model=16, n_layer=1, n_head=2, block_size=8).eval()
    idx = np.random.default_rng(0).integers(0, 30, (2, 8)).astype(np.int64)
    m = lv.onnx.load(lv.onnx.export(gpt, idx))
    # Scalars and masks are Constant nodes, not initializers: nothing extra becomes trainable.
    assert {k for k, _ in m.named_parameters()} == {k for k, _ in gpt.named_parameters()}
    np.testing.assert_allclose(m(idx).numpy(), gpt(lv.tensor(idx)).numpy(), rtol=1e-5, atol=1e-6)
