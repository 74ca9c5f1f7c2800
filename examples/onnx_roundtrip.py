"""ONNX round trip: train the digits MLP, export it, run it in onnxruntime, import it back,
fine-tune the imported model for one epoch and export it again.

The data are scikit-learn's 1,797 real 8x8 handwritten digits (no download). Every step
prints what it checked; the script exits non-zero if onnxruntime and lazyvic disagree.

    python examples/onnx_roundtrip.py [--epochs 10] [--out-dir onnx_roundtrip]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

import lazyvic
from lazyvic import nn
from lazyvic.nn import functional as F


def load_data(seed: int):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_train = int(0.8 * len(x))
    return x[order[:n_train]], y[order[:n_train]], x[order[n_train:]], y[order[n_train:]]


def train(model, x, y, epochs: int, lr: float, seed: int, batch_size: int = 128) -> float:
    """SGD with momentum; returns the last epoch's mean loss."""
    opt = lazyvic.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(epochs):
        order, total = rng.permutation(len(x)), 0.0
        for start in range(0, len(x), batch_size):
            idx = order[start : start + batch_size]
            loss = F.cross_entropy(model(lazyvic.from_numpy(x[idx])), lazyvic.from_numpy(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
    return total / len(x)


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((logits.argmax(1) == y).mean())


def run_onnxruntime(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default="onnx_roundtrip", help="folder for the .onnx files")
    args = p.parse_args(argv)
    out = Path(args.out_dir)

    lazyvic.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    loss = train(model, x_train, y_train, args.epochs, args.lr, args.seed)
    model.eval()
    with lazyvic.no_grad():
        logits = model(lazyvic.from_numpy(x_test)).numpy()
    print(f"1. trained {args.epochs} epochs in lazyvic: loss {loss:.4f}, test accuracy {accuracy(logits, y_test):.3f}")

    first = out / "digits_mlp.onnx"
    lazyvic.onnx.export(model, x_test[:1], first, dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    ort_logits = run_onnxruntime(first, x_test)
    diff = float(np.abs(ort_logits - logits).max())
    print(
        f"2. exported {first} ({first.stat().st_size:,} bytes); onnxruntime on the {len(x_test)} test images: "
        f"max |difference| {diff:.2e}, accuracy {accuracy(ort_logits, y_test):.3f}"
    )
    if diff > 1e-4:
        raise SystemExit(f"onnxruntime and lazyvic disagree by {diff}")

    imported = lazyvic.onnx.load(first)
    imported_logits = imported(x_test).numpy()
    diff = float(np.abs(imported_logits - logits).max())
    names = list(imported.state_dict())
    print(f"3. imported it back: parameters {names}, max |difference| {diff:.2e}")
    if diff > 1e-5:
        raise SystemExit(f"the imported model differs from the trained one by {diff}")

    loss = train(imported, x_train, y_train, 1, args.lr * 0.1, args.seed + 1)
    imported.eval()
    tuned = imported(x_test).numpy()
    print(f"4. fine-tuned the imported model 1 epoch: loss {loss:.4f}, test accuracy {accuracy(tuned, y_test):.3f}")

    second = out / "digits_mlp_finetuned.onnx"
    lazyvic.onnx.export(
        imported,
        x_test[:1],
        second,
        input_names=["input"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
    )
    ort_tuned = run_onnxruntime(second, x_test)
    diff = float(np.abs(ort_tuned - tuned).max())
    print(f"5. exported again to {second}; onnxruntime agrees to {diff:.2e}")
    if diff > 1e-4:
        raise SystemExit(f"onnxruntime and lazyvic disagree by {diff}")
    return {"accuracy": accuracy(logits, y_test), "tuned_accuracy": accuracy(tuned, y_test), "files": [first, second]}


if __name__ == "__main__":
    main()
