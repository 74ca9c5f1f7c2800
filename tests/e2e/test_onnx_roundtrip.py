"""examples/onnx_roundtrip.py end to end: train, export, onnxruntime, import, fine-tune, export again."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "onnx_roundtrip.py"


def _load():
    spec = importlib.util.spec_from_file_location("onnx_roundtrip", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_onnx_roundtrip_example(tmp_path, capsys):
    result = _load().main(["--epochs", "4", "--out-dir", str(tmp_path)])
    assert result["accuracy"] >= 0.9 and result["tuned_accuracy"] >= 0.9
    first, second = result["files"]
    for path in (first, second):
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    # Fine-tuning changed the weights that the second export wrote.
    w1 = onnx.numpy_helper.to_array(onnx.load(str(first)).graph.initializer[0])
    w2 = onnx.numpy_helper.to_array(onnx.load(str(second)).graph.initializer[0])
    assert w1.shape == w2.shape and not np.array_equal(w1, w2)
    out = capsys.readouterr().out
    for step in ("1. trained", "2. exported", "3. imported", "4. fine-tuned", "5. exported again"):
        assert step in out
