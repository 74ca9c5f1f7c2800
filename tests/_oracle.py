"""Oracles shared by the op-level tests: NumPy comparisons and finite differences.

Expected values in the tests are computed here with NumPy (or ``math``) from the
same input data; nothing here reads lazyvic's op table, so a wrong reference
implementation in ``lazyvic/ops`` cannot make its own test pass.
"""

from __future__ import annotations

import math

import numpy as np

import lazyvic as lv

# The float32 transcendentals of the compiled kernels are polynomial
# approximations with a documented error of a few ulp; float64 ones call libm.
FLOAT_TOL = {
    "float32": dict(rtol=2e-5, atol=2e-6),
    "float64": dict(rtol=1e-12, atol=1e-13),
}

LV_DTYPE = {d.np: d for d in lv.dtypes.ALL}


def pending_ops(t: lv.Tensor) -> set:
    """Names of the ops in the pending graph behind ``t`` (call before any sync)."""
    seen, stack, ops = set(), [t._node], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        ops.add(node.op)
        stack.extend(node.inputs)
    return ops


def assert_tensor(t: lv.Tensor, expected, dtype=None, rtol=None, atol=None) -> None:
    """``t`` has the shape, lazyvic dtype and values of ``expected`` (a NumPy array or scalar).

    ``dtype`` defaults to the lazyvic dtype of ``expected.dtype``; build ``expected``
    with an explicit dtype when promotion is what the test checks. Integer and
    bool results must match exactly; floating results within the dtype's tolerance.
    """
    assert isinstance(t, lv.Tensor), f"expected a lazyvic.Tensor, got {type(t).__name__}"
    expected = np.asarray(expected)
    want = dtype if dtype is not None else LV_DTYPE[expected.dtype]
    assert t.dtype == want, f"dtype {t.dtype} != expected {want}"
    assert t.shape == expected.shape, f"shape {t.shape} != expected {expected.shape}"
    got = t.numpy()
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.np, f"realized array dtype {got.dtype} != {want.np}"
    assert got.shape == expected.shape
    if want.is_floating_point:
        tol = dict(FLOAT_TOL[want.name])
        if rtol is not None:
            tol["rtol"] = rtol
        if atol is not None:
            tol["atol"] = atol
        np.testing.assert_allclose(got, expected.astype(want.np), equal_nan=True, **tol)
    else:
        np.testing.assert_array_equal(got, expected.astype(want.np))


def erf(x: np.ndarray) -> np.ndarray:
    """math.erf elementwise, computed in float64 (NumPy has no erf)."""
    flat = [math.erf(v) for v in np.asarray(x, dtype=np.float64).ravel()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(x))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def cross_entropy(
    logits: np.ndarray, target: np.ndarray, reduction="mean", ignore_index=-100, label_smoothing=0.0
) -> np.ndarray:
    """PyTorch's cross_entropy for (N, C) logits, written row by row."""
    logp = log_softmax(logits.astype(np.float64), 1)
    n, c = logits.shape
    losses = np.zeros(n)
    valid = target != ignore_index
    for i in range(n):
        if not valid[i]:
            continue
        nll = -logp[i, target[i]]
        smooth = -logp[i].mean()
        losses[i] = (1 - label_smoothing) * nll + label_smoothing * smooth
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / valid.sum()


def layer_norm(x: np.ndarray, n_axes: int, weight=None, bias=None, eps=1e-5) -> np.ndarray:
    axes = tuple(range(x.ndim - n_axes, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def gelu(x: np.ndarray, approximate="none") -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


# ----------------------------------------------------------- finite differences
def _scalar_objective(fn, arrays, weight):
    """sum(fn(*arrays) * weight) evaluated by lazyvic on fresh float64 leaves, without autograd."""
    with lv.no_grad():
        out = fn(*[lv.tensor(a, dtype=lv.float64) for a in arrays])
        return float((out.numpy().astype(np.float64) * weight).sum())


def numeric_grads(fn, arrays, weight, eps=1e-6) -> list:
    """Central differences of sum(fn(*arrays) * weight) with respect to every array."""
    grads = []
    for k, a in enumerate(arrays):
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[k][i] += eps
            minus[k][i] -= eps
            g[i] = (_scalar_objective(fn, plus, weight) - _scalar_objective(fn, minus, weight)) / (2 * eps)
        grads.append(g)
    return grads


def check_vjp(fn, *arrays, seed=0, rtol=1e-5, atol=1e-7, eps=1e-6) -> None:
    """Gradients from ``backward()`` match central finite differences, in float64.

    ``fn`` maps lazyvic tensors to one tensor. The objective is
    ``sum(fn(*inputs) * w)`` for a fixed random cotangent ``w``, so every
    element of the output contributes with a different weight.
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    leaves = [lv.tensor(a, dtype=lv.float64, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    assert out.dtype == lv.float64, f"expected a float64 output, got {out.dtype}"
    weight = np.random.default_rng(seed).uniform(0.5, 1.5, size=out.shape)
    (out * lv.tensor(weight, dtype=lv.float64)).sum().backward()
    expected = numeric_grads(fn, arrays, weight, eps)
    for k, (leaf, want) in enumerate(zip(leaves, expected)):
        assert leaf.grad is not None, f"input {k} got no gradient"
        assert leaf.grad.shape == leaf.shape and leaf.grad.dtype == lv.float64
        scale = max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_allclose(
            leaf.grad.numpy(), want, rtol=rtol, atol=atol * scale, err_msg=f"gradient of input {k}"
        )


# ------------------------------------------------------------------ Philox4x32-10
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_U32 = 0xFFFFFFFF


def philox4x32_10(counter: tuple, key: tuple) -> tuple:
    """Philox4x32-10 of one 4-word counter under a 2-word key, in plain Python ints.

    Salmon et al., SC'11; checked against Random123's known-answer vectors in the tests.
    """
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & _U32, (p0 >> 32) ^ c3 ^ k1, p0 & _U32
        k0, k1 = (k0 + _W0) & _U32, (k1 + _W1) & _U32
    return c0, c1, c2, c3


def philox_words(seed: int, n: int) -> np.ndarray:
    """The first ``n`` 32-bit words of the stream keyed by ``seed`` (counters 0, 1, 2, ...)."""
    key = (seed & _U32, (seed >> 32) & _U32)
    words = []
    for block in range((n + 3) // 4):
        words.extend(philox4x32_10((block & _U32, block >> 32, 0, 0), key))
    return np.array(words[:n], dtype=np.uint64)


def both_tiers(fn) -> tuple:
    """``fn().numpy()`` interpreted and compiled (``config.compile`` "never", then "always")."""
    from lazyvic.runtime.config import config

    got = {}
    for mode in ("never", "always"):
        prev, config.compile = config.compile, mode
        try:
            got[mode] = fn().numpy()
        finally:
            config.compile = prev
    return got["never"], got["always"]
