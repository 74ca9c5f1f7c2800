"""examples/from_pytorch.py end to end: PyTorch checkpoints load and match PyTorch's outputs.

The checkpoints and reference outputs are made by
tests/fixtures/make_from_pytorch_fixtures.py; nothing here needs torch.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lazyvic.interop.torch")  # the .pt reader

import lazyvic  # noqa: E402
import lazyvic.interop.torch  # noqa: E402
from lazyvic.interop.keymap import remap  # noqa: E402
from lazyvic.models import TinyGPT  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "from_pytorch.py"
FIXTURES = ROOT / "tests" / "fixtures" / "from_pytorch"


def _load():
    spec = importlib.util.spec_from_file_location("from_pytorch", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_from_pytorch_matches_torch(capsys):
    result = _load().main([])
    assert result["ok"]
    mlp, gpt = result["digits_mlp"], result["tiny_gpt"]
    assert mlp["max_abs_diff"] <= 1e-5 and gpt["max_abs_diff"] <= 1e-5
    assert mlp["accuracy"] == mlp["torch_accuracy"] >= 0.95
    assert mlp["same_predictions"] == mlp["n_test"] == 360
    assert gpt["shape"] == (2, 16, 65) and gpt["iter_num"] == 30
    out = capsys.readouterr().out
    assert "test accuracy" in out and "OK: lazyvic matches PyTorch" in out


def test_from_pytorch_exit_status():
    # A tolerance below the float32 noise between the two libraries must fail with status 1.
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--tol", "0"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED" in run.stdout


def test_tiny_gpt_checkpoint_as_numpy_gives_the_same_model():
    """The NumPy path (``as_numpy=True``) loads the same weights as the Tensor path."""
    as_tensors = lazyvic.interop.torch.load(FIXTURES / "tiny_gpt.pt")
    as_arrays = lazyvic.interop.torch.load(FIXTURES / "tiny_gpt.pt", as_numpy=True)
    assert (
        as_arrays["model_args"]
        == as_tensors["model_args"]
        == dict(vocab_size=65, d_model=32, n_layer=2, n_head=2, block_size=16)
    )
    sd_t = remap(as_tensors["model"], strip_prefix="_orig_mod.", strict=True)
    sd_a = remap(as_arrays["model"], strip_prefix="_orig_mod.", strict=True)
    assert list(sd_t) == list(sd_a) == list(TinyGPT(**as_tensors["model_args"]).state_dict())
    for k in sd_t:
        assert isinstance(sd_a[k], np.ndarray) and sd_a[k].dtype == np.float32
        np.testing.assert_array_equal(sd_t[k].numpy(), sd_a[k])
