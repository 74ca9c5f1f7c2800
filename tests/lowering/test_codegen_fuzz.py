"""Fused, compiled plans against the NumPy reference interpreter on random graphs."""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.runtime.config import config

UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "neg", "erf", "square"]
BINARY = ["add", "sub", "mul", "maximum", "div"]


def _random_graph(rng, inputs):
    """Build a random lazy graph from the input tensors; returns the output tensors."""
    vals = list(inputs)
    for _ in range(rng.integers(4, 10)):
        a = vals[rng.integers(len(vals))]
        r = rng.random()
        if r < 0.3:
            name = UNARY[rng.integers(len(UNARY))]
            out = getattr(a, name)() if name not in ("neg",) else -a
            if name == "exp":
                out = (a * 0.1).exp()
        elif r < 0.55:
            b = vals[rng.integers(len(vals))]
            try:
                lv.broadcast_shapes(a.shape, b.shape)
            except Exception:
                b = b.sum() if b.ndim else b
            name = BINARY[rng.integers(len(BINARY))]
            out = (
                a / (b.abs() + 1.0)
                if name == "div"
                else getattr(a, {"add": "__add__", "sub": "__sub__", "mul": "__mul__", "maximum": "maximum"}[name])(b)
            )
        elif r < 0.7 and a.ndim >= 1:
            dim = int(rng.integers(a.ndim))
            kind = rng.integers(4)
            if kind == 0:
                out = a.sum(dim, keepdim=bool(rng.integers(2)))
            elif kind == 1:
                out = a.amax(dim, keepdim=True)
            elif kind == 2:
                out = a.softmax(dim)
            else:
                out = a - a.mean(dim, keepdim=True)
        elif r < 0.78 and a.ndim == 2:
            out = (a @ a.T) * 0.1  # a BLAS step between kernels
        elif r < 0.85 and a.ndim >= 2:
            kind = rng.integers(4)
            if kind == 0:
                out = a.transpose(0, a.ndim - 1)
            elif kind == 1:
                out = a[:, ::2] if a.shape[1] > 1 else a
            elif kind == 2:
                out = lv.cat([a, a * 2.0], dim=int(rng.integers(a.ndim)))
            else:
                out = a.reshape(-1)
        else:
            out = a.flatten() if a.ndim else a + 1.0
        vals.append(out)
    return vals[len(inputs) :][-3:]


def _run(mode, seed, data_seed=None):
    config.compile = mode
    rng = np.random.default_rng(seed if data_seed is None else data_seed)
    shapes = [(3, 5), (5,), (2, 3, 5)]
    arrays = [rng.standard_normal(shapes[k]).astype(np.float32) for k in range(3)]
    inputs = [lv.tensor(a) for a in arrays]
    outs = _random_graph(np.random.default_rng(seed + 1000), inputs)
    lv.sync(*outs)
    return [o.numpy().copy() for o in outs]


@pytest.mark.parametrize("seed", range(16))
def test_random_graph_compiled_matches_interpreter(seed):
    prev = config.compile
    try:
        # Twice with new data: the second run reuses the plan's pooled buffers, so a step
        # that reads a buffer before it is written shows up as a wrong value.
        for data_seed in (seed, seed + 500):
            expected = _run("never", seed, data_seed)
            lv.metrics.reset()
            got = _run("always", seed, data_seed)
            snap = lv.metrics.snapshot()
            assert snap["compiled_runs"] == snap["traces"] > 0 and snap["fallbacks"] == 0, snap
            assert len(expected) == len(got)
            for e, g in zip(expected, got):
                assert e.shape == g.shape and e.dtype == g.dtype
                np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)
    finally:
        config.compile = prev
