"""Train an MLP (64-128-10) on scikit-learn's handwritten digits with lazyvic.

The data are the 1,797 real 8x8 images bundled with scikit-learn (UCI ML
hand-written digits, no download). Fixed seed, 80/20 split. Each training step
(forward, backward, SGD update) is recorded lazily and run at one sync point as
one cached, fused, compiled plan: after the first steps every step is a
plan-cache hit.

    python examples/train_digits.py [--epochs 30] [--batch-size 128] [--lr 0.1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from tqdm import tqdm

import lazyvic
from lazyvic import nn
from lazyvic.nn import functional as F


def load_data(seed: int):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixel values 0..16 -> [0, 1]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_train = int(0.8 * len(x))
    tr, te = order[:n_train], order[n_train:]
    return x[tr], y[tr], x[te], y[te]


def evaluate(model, x, y) -> float:
    model.eval()
    with lazyvic.no_grad():
        pred = model(lazyvic.from_numpy(x)).argmax(1).numpy()
    model.train()
    return float((pred == y).mean())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)

    lazyvic.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = lazyvic.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    lazyvic.sync()  # "mark step": realize the initial weights, so every step's trace is the same
    rng = np.random.default_rng(args.seed)
    n = len(x_train)
    misses_after_first_step = None
    lazyvic.metrics.reset()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        order = rng.permutation(n)
        total_loss, correct = 0.0, 0
        bar = tqdm(
            range(0, n, args.batch_size), desc=f"epoch {epoch + 1:2d}/{args.epochs}", disable=args.quiet, leave=False
        )
        for start in bar:
            idx = order[start : start + args.batch_size]
            xb, yb = lazyvic.from_numpy(x_train[idx]), lazyvic.from_numpy(y_train[idx])
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            hits = logits.detach().argmax(1) == yb
            lazyvic.sync()  # one plan: forward, backward, update, accuracy
            total_loss += loss.item() * len(idx)
            correct += int(hits.numpy().sum())
            if misses_after_first_step is None:
                misses_after_first_step = lazyvic.metrics.snapshot()["cache_misses"]
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if not args.quiet:
            tqdm.write(f"epoch {epoch + 1:2d}/{args.epochs}  loss {total_loss / n:.4f}  train acc {correct / n:.4f}")
    train_seconds = time.perf_counter() - t0
    train_misses = lazyvic.metrics.snapshot()["cache_misses"] - misses_after_first_step
    acc = evaluate(model, x_test, y_test)
    snap = lazyvic.metrics.snapshot()
    print(f"test accuracy: {acc:.4f} ({len(y_test)} images)")
    print(f"training time: {train_seconds:.2f} s for {args.epochs} epochs")
    print(
        f"plan cache: {snap['traces']} traces, {snap['cache_hits']} hits, {snap['cache_misses']} misses "
        f"({train_misses} in training after the first step), "
        f"{snap['kernels_compiled']} kernels compiled, {snap['kernels_loaded']} loaded from disk, "
        f"compile {snap['compile_seconds']:.2f} s, fallbacks {snap['fallbacks']}"
    )
    return {
        "accuracy": acc,
        "metrics": snap,
        "train_misses_after_first_step": train_misses,
        "train_seconds": train_seconds,
    }


if __name__ == "__main__":
    main()
