"""Load PyTorch checkpoints (``torch.save``'d ``.pt`` files) into lazyvic models, without PyTorch.

Two checkpoints made by tests/fixtures/make_from_pytorch_fixtures.py with PyTorch:

- ``digits_mlp.pt``: the state_dict of a PyTorch 64-128-10 MLP trained on
  scikit-learn's digits; its keys (``0.weight``, ``0.bias``, ``2.weight``,
  ``2.bias``) are those of the same ``lazyvic.nn.Sequential``, so it loads as is.
- ``tiny_gpt.pt``: a nanoGPT-style checkpoint dict (``model``, ``model_args``,
  ``iter_num``, ...) of a PyTorch port of ``lazyvic.models.TinyGPT``, saved from a
  ``torch.compile``-d model: every key starts with ``_orig_mod.``, which
  ``lazyvic.interop.keymap.remap`` strips.

Each model runs the inputs stored beside its checkpoint; the script prints the
largest absolute difference from PyTorch's outputs (and the digits test
accuracy) and exits with status 1 when a difference exceeds ``--tol``.

    python examples/from_pytorch.py [--fixtures tests/fixtures/from_pytorch] [--tol 1e-5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import lazyvic
import lazyvic.interop.torch
from lazyvic import nn
from lazyvic.interop.keymap import remap
from lazyvic.models import TinyGPT

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "from_pytorch"


def check_digits_mlp(fixtures: Path) -> dict:
    state_dict = lazyvic.interop.torch.load(fixtures / "digits_mlp.pt")
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    model.load_state_dict(state_dict)  # strict: every key and shape must match
    model.eval()
    ref = np.load(fixtures / "digits_mlp.npz")
    x = ref["x_test"].astype(np.float32) / 16.0  # pixel values 0..16 -> [0, 1], as in training
    with lazyvic.no_grad():
        logits = model(lazyvic.from_numpy(x)).numpy()
    n = len(ref["logits"])  # PyTorch's logits are stored for the first n test images
    pred = logits.argmax(1)
    return {
        "max_abs_diff": float(np.abs(logits[:n] - ref["logits"]).max()),
        "accuracy": float((pred == ref["y_test"]).mean()),
        "torch_accuracy": float((ref["pred"] == ref["y_test"]).mean()),
        "same_predictions": int((pred == ref["pred"]).sum()),
        "n_test": len(x),
    }


def check_tiny_gpt(fixtures: Path) -> dict:
    checkpoint = lazyvic.interop.torch.load(fixtures / "tiny_gpt.pt")
    model = TinyGPT(**checkpoint["model_args"])
    model.load_state_dict(remap(checkpoint["model"], strip_prefix="_orig_mod."))
    model.eval()
    ref = np.load(fixtures / "tiny_gpt.npz")
    with lazyvic.no_grad():
        logits = model(lazyvic.from_numpy(ref["idx"])).numpy()
    return {
        "max_abs_diff": float(np.abs(logits - ref["logits"]).max()),
        "iter_num": int(checkpoint["iter_num"]),
        "shape": logits.shape,
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fixtures", type=Path, default=FIXTURES, help="folder of the .pt and .npz files")
    p.add_argument("--tol", type=float, default=1e-5, help="largest allowed absolute difference")
    args = p.parse_args(argv)

    mlp = check_digits_mlp(args.fixtures)
    print(
        f"digits MLP  (digits_mlp.pt): max |lazyvic - torch| = {mlp['max_abs_diff']:.3g}; "
        f"test accuracy {mlp['accuracy']:.4f} (torch {mlp['torch_accuracy']:.4f}, "
        f"{mlp['same_predictions']}/{mlp['n_test']} predictions identical)"
    )
    gpt = check_tiny_gpt(args.fixtures)
    print(
        f"TinyGPT     (tiny_gpt.pt, iter {gpt['iter_num']}): max |lazyvic - torch| = "
        f"{gpt['max_abs_diff']:.3g} over logits {gpt['shape']}"
    )
    ok = mlp["max_abs_diff"] <= args.tol and gpt["max_abs_diff"] <= args.tol
    print("OK: lazyvic matches PyTorch" if ok else f"FAILED: a difference exceeds --tol {args.tol:g}")
    return {"ok": ok, "digits_mlp": mlp, "tiny_gpt": gpt}


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
