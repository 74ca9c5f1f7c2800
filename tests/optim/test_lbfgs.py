"""``optim.LBFGS`` against PyTorch 2.13 (tests/fixtures/torch_lbfgs.npz, made by
make_lbfgs_fixtures.py): the loss of every ``step``, the number of closure calls and the final
parameters on a Rosenbrock function (the history rolls) and a logistic regression; then the
errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import errors
from lazyvic.runtime.config import config

DATA = np.load(Path(__file__).parents[1] / "fixtures" / "torch_lbfgs.npz")


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")  # (many small traces: no compiles in the suite)


def _run(params, loss_fn, steps, **kw):
    opt = lv.optim.LBFGS(params, **kw)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    return [opt.step(closure).item() for _ in range(steps)], calls[0]


def _leaf(a):
    return lv.nn.Parameter(lv.tensor(a, dtype=lv.float64))


def test_rosenbrock_matches_pytorch():
    a, b = _leaf(DATA["rosenbrock.a0"]), _leaf(DATA["rosenbrock.b0"])
    losses, calls = _run(
        [a, b], lambda: ((1 - a) ** 2 + 100 * (b - a * a) ** 2).sum(), 4, lr=0.5, max_iter=7, history_size=3
    )
    np.testing.assert_allclose(losses, DATA["rosenbrock.losses"], rtol=1e-9)
    assert calls == int(DATA["rosenbrock.calls"])
    np.testing.assert_allclose(a.numpy(), DATA["rosenbrock.a"], rtol=1e-9)
    np.testing.assert_allclose(b.numpy(), DATA["rosenbrock.b"], rtol=1e-9)


def test_logistic_regression_matches_pytorch():
    w, c = _leaf(DATA["logreg.w0"]), _leaf(DATA["logreg.c0"])
    x, y = lv.tensor(DATA["logreg.x"], dtype=lv.float64), lv.tensor(DATA["logreg.y"])
    losses, calls = _run([w, c], lambda: F.cross_entropy(x @ w.T + c, y), 4, max_iter=10)
    np.testing.assert_allclose(losses, DATA["logreg.losses"], rtol=1e-9)
    assert calls == int(DATA["logreg.calls"])
    np.testing.assert_allclose(w.numpy(), DATA["logreg.w"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(c.numpy(), DATA["logreg.c"], rtol=1e-8, atol=1e-10)


def test_lbfgs_errors():
    p = _leaf(np.zeros(2))
    with pytest.raises(errors.UnsupportedOpError, match="strong_wolfe"):
        lv.optim.LBFGS([p], line_search_fn="strong_wolfe")
    with pytest.raises(ValueError, match="closure"):
        lv.optim.LBFGS([p]).step()
    with pytest.raises(ValueError, match="parameter groups"):
        lv.optim.LBFGS([{"params": [p]}, {"params": [_leaf(np.zeros(1))]}])
