"""The state the checkpoint tests save and compare (imported by the workers and by test_checkpoint.py).

A small model and its AdamW state after some steps, plus a tensor of every kind the sharding
treats apart: cut in row ranges (float32 with an odd row count, bfloat16), whole (int64, bool,
an empty one), 0-d, and non-tensor values (an int, a str, inf, a tuple).
"""

import ml_dtypes
import numpy as np

import lazyvic
from lazyvic import functional as F
from lazyvic import nn, optim

_RNG = np.random.default_rng(5)
XS = _RNG.normal(size=(4, 8, 64)).astype(np.float32)
YS = _RNG.integers(0, 3, (4, 8))


def build(seed: int = 0):
    """(model, AdamW): Linear(64, 96)'s weight is 24 KiB, above MIN_SPLIT_BYTES, so it is cut."""
    lazyvic.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 96), nn.Tanh(), nn.Linear(96, 3))
    return model, optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)


def train(model, opt, steps) -> None:
    for i in steps:
        opt.zero_grad()
        F.cross_entropy(model(lazyvic.tensor(XS[i])), lazyvic.tensor(YS[i])).backward()
        opt.step()


def state(model, opt, seed: int = 0) -> dict:
    rng = np.random.default_rng(100 + seed)
    extra = {
        "rows": lazyvic.tensor(rng.normal(size=(101, 50)).astype(np.float32)),  # 20 KiB: 50 + 51 rows
        "half": lazyvic.tensor(rng.normal(size=(40, 300)).astype(ml_dtypes.bfloat16)),
        "ids": lazyvic.tensor(rng.integers(-9, 9, 7)),
        "mask": lazyvic.tensor(rng.normal(size=3) > 0),
        "empty": lazyvic.zeros(0, 4),
        "scalar": lazyvic.tensor(np.float64(rng.normal())),
        "name": f"run-{seed}",
        "inf": float("inf"),
        "pair": (seed, lazyvic.tensor(rng.integers(0, 9, (2, 2)).astype(np.int32))),
    }
    return {"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3 + seed, "extra": extra}


def assert_same(got, expected, where: str = "state") -> None:
    """Tensors: the same dtype, shape and bits; other values equal (containers of the same type)."""
    if isinstance(expected, lazyvic.Tensor):
        assert isinstance(got, lazyvic.Tensor), f"{where}: {type(got).__name__}, expected a Tensor"
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), f"{where}: {got.dtype} {got.shape}"
        a, b = (np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8) for t in (got, expected))
        assert np.array_equal(a, b), f"{where}: the values differ"
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), f"{where}: keys {list(got)}"
        for k in expected:
            assert_same(got[k], expected[k], f"{where}[{k!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(got) is type(expected) and len(got) == len(expected), f"{where}: {got!r}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{where}[{i}]")
    else:
        assert type(got) is type(expected) and got == expected, f"{where}: {got!r}, expected {expected!r}"
