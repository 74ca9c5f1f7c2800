"""Module forward hooks (``register_forward_pre_hook`` / ``register_forward_hook``, PyTorch's
rules: replaced arguments and outputs, kwargs, order, ``prepend``, removal, ``always_call``) and
``nn.utils.weight_norm`` / ``remove_weight_norm`` (values against NumPy, gradients against
finite differences, PyTorch's state_dict names, the errors)."""

from __future__ import annotations

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import errors, nn
from lazyvic.runtime.config import config


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


class _Scale(nn.Module):
    def forward(self, x, factor=1.0):
        return x * factor


def test_hooks_replace_arguments_and_outputs_in_order_and_are_removed():
    m, calls = _Scale(), []
    x = lv.tensor(np.array([1.0, 2.0], np.float32))
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre1") or (args[0] + 1.0,))
    h2 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre0") or None, prepend=True)
    h3 = m.register_forward_hook(lambda mod, args, out: calls.append("post") or out * 10.0)
    np.testing.assert_array_equal(m(x).numpy(), [20.0, 30.0])
    assert calls == ["pre0", "pre1", "post"]
    h3.remove()
    np.testing.assert_array_equal(m(x).numpy(), [2.0, 3.0])
    h1.remove()
    h2.remove()
    assert "_forward_pre_hooks" not in m.__dict__ and "_forward_hooks" not in m.__dict__
    np.testing.assert_array_equal(m(x).numpy(), [1.0, 2.0])
    h1.remove()  # removing twice is harmless, as in PyTorch


def test_hooks_with_kwargs_capture_activations_and_always_call():
    m = _Scale()
    x = lv.tensor(np.array([1.0, -1.0], np.float32))
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "factor": 3.0}), with_kwargs=True)
    seen = {}
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.update(k=kwargs, out=out), with_kwargs=True)
    y = m(x, factor=2.0)
    np.testing.assert_array_equal(y.numpy(), [3.0, -3.0])
    assert seen["k"] == {"factor": 3.0} and seen["out"] is y
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    feats = []
    with net[1].register_forward_hook(lambda mod, args, out: feats.append(out)):
        out = net(lv.tensor(np.ones((2, 3), np.float32)))
    np.testing.assert_array_equal(net[2](feats[0]).numpy(), out.numpy())
    assert "_forward_hooks" not in net[1].__dict__  # the context manager removed it

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    b, called = Boom(), []
    b.register_forward_hook(lambda mod, args, out: called.append(out), always_call=True)
    with pytest.raises(ValueError, match="boom"):
        b(x)
    assert called == [None]
    bad = _Scale()
    bad.register_forward_pre_hook(lambda mod, args, kwargs: 1, with_kwargs=True)
    with pytest.raises(RuntimeError, match="new_args, new_kwargs"):
        bad(x)


def test_weight_norm_computes_g_v_over_its_norm_with_pytorchs_names():
    lv.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3)
    w0 = conv.weight.numpy().astype(np.float64)
    nn.utils.weight_norm(conv)
    assert list(conv.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert conv.weight_g.shape == (3, 1, 1, 1) and conv.weight_v.shape == (3, 2, 3, 3)
    np.testing.assert_allclose(conv.weight_g.numpy()[:, 0, 0, 0], np.sqrt((w0**2).sum((1, 2, 3))), rtol=1e-6)
    g = np.array([1.0, 2.0, 0.5], np.float32).reshape(3, 1, 1, 1)
    conv.weight_g.data = lv.tensor(g)
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
    want = lv.nn.functional.conv2d(
        lv.tensor(x), lv.tensor((g * w0 / np.sqrt((w0**2).sum((1, 2, 3), keepdims=True))).astype(np.float32)), conv.bias
    )
    np.testing.assert_allclose(conv(lv.tensor(x)).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    whole = nn.utils.weight_norm(nn.Linear(3, 2), dim=None)
    assert whole.weight_g.shape == ()
    nn.utils.remove_weight_norm(conv)
    assert list(conv.state_dict()) == ["bias", "weight"] and isinstance(conv.weight, nn.Parameter)
    np.testing.assert_allclose(conv(lv.tensor(x)).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_weight_norm_gradients_match_finite_differences():
    lv.manual_seed(0)
    m = nn.utils.weight_norm(nn.Linear(3, 2, dtype=lv.float64), dim=0)
    x = lv.tensor(np.random.default_rng(2).standard_normal((4, 3)))
    w = np.random.default_rng(3).uniform(0.5, 1.5, (4, 2))

    def loss():
        return float((m(x).numpy() * w).sum())

    (m(x) * lv.tensor(w)).sum().backward()
    for p in (m.weight_g, m.weight_v):
        base, grad, eps = p.numpy().copy(), p.grad.numpy(), 1e-6
        num = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            for sign in (1, -1):
                bumped = base.copy()
                bumped[i] += sign * eps
                p.data = lv.tensor(bumped)
                num[i] += sign * loss() / (2 * eps)
        p.data = lv.tensor(base)
        np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)


def test_weight_norm_errors():
    m = nn.Linear(3, 2)
    with pytest.raises(errors.ArgumentError, match="no parameter 'kernel'"):
        nn.utils.weight_norm(m, "kernel")
    with pytest.raises(errors.ArgumentError, match="dim 2 out of range"):
        nn.utils.weight_norm(m, dim=2)
    nn.utils.weight_norm(m)
    with pytest.raises(errors.ArgumentError, match="has no parameter 'weight'"):
        nn.utils.weight_norm(m)
    with pytest.raises(errors.ArgumentError, match="bias has no weight norm"):
        nn.utils.remove_weight_norm(m, "bias")


def test_a_compiled_model_with_hooks_runs_them_at_every_call(monkeypatch):
    """A replay runs no Python, so lazyvic.compile runs a call that reaches a hook normally (and
    says why): the hook sees every call's activations."""
    monkeypatch.setattr(config, "compile", "hot")
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    feats = []
    net[1].register_forward_hook(lambda mod, args, out: feats.append(out))
    c = lv.compile(net)
    with lv.no_grad():
        for i in range(3):
            y = c(lv.tensor(np.full((2, 3), float(i), np.float32)))
            np.testing.assert_array_equal(net[2](feats[-1]).numpy(), y.numpy())
    assert len(feats) == 3 and c.replays == 0
    assert c.reasons["a forward hook on ReLU (Python that runs at every call)"] == 3


def test_a_captured_step_with_weight_norm_replays_with_the_plain_steps_bits(monkeypatch):
    """weight_norm's hook records ops on the module's parameters only: a training step through
    lazyvic.compile replays it (g and v are read at each replay) with the bits of plain steps."""
    from _steps import plain_and_captured

    monkeypatch.setattr(config, "compile", "hot")
    plain, captured, f = plain_and_captured(lambda: nn.utils.weight_norm(nn.Linear(4, 3)))
    assert captured == plain and f.replays == 3 and f.fallbacks == 1
