"""Compiled reductions reorder nothing but their accumulation (sums in the lane order of ops/numerics.py):
large-offset rows keep their low bits."""

import numpy as np

import lazyvic as lv
from lazyvic.runtime.config import config


def test_log_softmax_of_large_inputs_compiled(monkeypatch):
    monkeypatch.setattr(config, "compile", "always")
    x = (np.random.default_rng(0).standard_normal((4, 33)) + 1e4).astype(np.float32)
    got = lv.tensor(x).log_softmax(-1).numpy()
    xd = x.astype(np.float64)
    shifted = xd - xd.max(-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    # (x - m) - log(s) is exact to float32 rounding; x - (m + log(s)) was off by up to 5e-4 here.
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_sums_still_vectorize_and_match(monkeypatch):
    monkeypatch.setattr(config, "compile", "always")
    x = np.random.default_rng(1).standard_normal((8, 4096)).astype(np.float32)
    np.testing.assert_allclose(lv.tensor(x).sum(-1).numpy(), x.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(lv.tensor(x).amax(-1).numpy(), x.max(-1))
