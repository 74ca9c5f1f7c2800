"""torch.autograd.grad / backward, tensor hooks, retain_grad and Tensor.data.

Gradients are checked against central finite differences in float64 (tests/_oracle.py);
second-order gradients (create_graph=True) against finite differences of the first-order
gradient. Hook and retain_grad semantics follow PyTorch 2.13 (the values torch printed for the
same programs are quoted in the comments).
"""

import numpy as np
import pytest
from _oracle import numeric_grads

import lazyvic as lv
import lazyvic.functional as F
from lazyvic.errors import AutogradError, DTypeError, UnsupportedOpError
from lazyvic.runtime import metrics

RNG = np.random.default_rng(7)
A = RNG.uniform(0.3, 1.2, (2, 3))
W = RNG.uniform(-1.0, 1.0, (3, 4))


def _leaf(a):
    return lv.tensor(a, dtype=lv.float64, requires_grad=True)


def _mlp(x, w):
    return (x @ w).tanh() * x.sum(dim=1, keepdim=True).exp()


# ----------------------------------------------------------------- autograd.grad
def test_grad_matches_finite_differences_and_leaves_grad_alone():
    x, w = _leaf(A), _leaf(W)
    weight = RNG.uniform(0.5, 1.5, (2, 4))
    gx, gw = lv.autograd.grad((_mlp(x, w) * lv.tensor(weight)).sum(), (x, w))
    want = numeric_grads(_mlp, [A, W], weight)
    np.testing.assert_allclose(gx.numpy(), want[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw.numpy(), want[1], rtol=1e-6, atol=1e-8)
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad  # no create_graph: plain values


def test_grad_with_grad_outputs_several_outputs_and_a_non_leaf_input():
    x = _leaf(A)
    h = x * 3.0
    y1, y2 = h.exp(), h * h
    v1, v2 = RNG.uniform(size=(2, 3)), RNG.uniform(size=(2, 3))
    gh, gx = lv.autograd.grad([y1, y2], [h, x], grad_outputs=[lv.tensor(v1), lv.tensor(v2)])
    hn = 3.0 * A
    np.testing.assert_allclose(gh.numpy(), v1 * np.exp(hn) + 2 * hn * v2, rtol=1e-12)
    np.testing.assert_allclose(gx.numpy(), 3.0 * gh.numpy(), rtol=1e-12)
    with pytest.raises(AutogradError, match="second time"):
        lv.autograd.grad(y1.sum(), x)


def test_grad_retain_graph_allows_a_second_walk():
    x = _leaf(A)
    y = (x * x).sum()
    (g1,) = lv.autograd.grad(y, x, retain_graph=True)
    (g2,) = lv.autograd.grad(y, x)
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    np.testing.assert_allclose(g1.numpy(), 2 * A)


def test_grad_unused_inputs():
    x, z = _leaf(A), _leaf(A)
    with pytest.raises(AutogradError, match=r"inputs\[1\].*not used.*allow_unused"):
        lv.autograd.grad((x * 2.0).sum(), [x, z], retain_graph=True)
    gx, gz = lv.autograd.grad((x * 2.0).sum(), [x, z], allow_unused=True, retain_graph=True)
    assert gz is None
    np.testing.assert_array_equal(gx.numpy(), np.full((2, 3), 2.0))
    gx, gz = lv.autograd.grad((x * 2.0).sum(), [x, z], materialize_grads=True)
    np.testing.assert_array_equal(gz.numpy(), np.zeros((2, 3)))


def test_grad_errors_name_the_problem():
    x = _leaf(A)
    plain = lv.tensor(A)
    with pytest.raises(AutogradError, match=r"grad: inputs\[0\].*does not require grad"):
        lv.autograd.grad((x * 2.0).sum(), plain)
    with pytest.raises(AutogradError, match="grad: tensor does not require grad"):
        lv.autograd.grad(plain.sum(), x)
    with pytest.raises(AutogradError, match=r"scalar outputs.*\(2, 3\)"):
        lv.autograd.grad(x * 2.0, x)
    with pytest.raises(AutogradError, match=r"grad shape \(3,\).*\(2, 3\)"):
        lv.autograd.grad(x * 2.0, x, grad_outputs=lv.ones(3, dtype=lv.float64))
    with pytest.raises(UnsupportedOpError, match="is_grads_batched"):
        lv.autograd.grad((x * 2.0).sum(), x, is_grads_batched=True)
    with pytest.raises(AutogradError, match="allow_unused"):
        lv.autograd.grad((x * 2.0).sum(), x, allow_unused=False, materialize_grads=True)


def test_grad_is_lazy_and_one_trace_with_the_forward():
    x, w = _leaf(A), _leaf(W)
    before = metrics.snapshot()["traces"]
    gx, gw = lv.autograd.grad(_mlp(x, w).sum(), (x, w))
    assert gx.is_lazy and gw.is_lazy and metrics.snapshot()["traces"] == before
    gx.numpy()
    assert metrics.snapshot()["traces"] == before + 1 and not gw.is_lazy


# ------------------------------------------------------------ higher order
SECOND_ORDER = {
    "tanh_matmul": (lambda x, w: (x @ w).tanh().sum(), [(2, 3), (3, 4)]),
    "exp_log_div": (lambda x, w: (x.exp() * x.log() / w.sqrt()).sum(), [(4,), (4,)]),
    "cross_entropy": (lambda x, w: F.cross_entropy(x @ w, lv.tensor([1, 3])), [(2, 3), (3, 4)]),
    "layer_norm_gelu": (lambda x, w: F.gelu(F.layer_norm(x, (4,)) * w).sum(), [(3, 4), (3, 4)]),
    "conv_pool": (lambda x, w: F.max_pool2d(F.conv2d(x, w, padding=1), 2).pow(2).sum(), [(1, 2, 4, 4), (2, 2, 3, 3)]),
}


@pytest.mark.parametrize("case", SECOND_ORDER, ids=str)
def test_create_graph_gives_second_order_gradients(case):
    """Hessian-vector products: d/dx_i <grad f, v> against finite differences of grad f."""
    fn, shapes = SECOND_ORDER[case]
    arrays = [RNG.uniform(0.3, 1.2, s) for s in shapes]
    vs = [RNG.uniform(-1.0, 1.0, s) for s in shapes]

    def gradient(arrs):
        leaves = [_leaf(a) for a in arrs]
        return [g.numpy() for g in lv.autograd.grad(fn(*leaves), leaves)]

    leaves = [_leaf(a) for a in arrays]
    grads = lv.autograd.grad(fn(*leaves), leaves, create_graph=True)
    assert all(g.requires_grad for g in grads)
    inner = sum((g * lv.tensor(v)).sum() for g, v in zip(grads, vs))
    hvp = lv.autograd.grad(inner, leaves)
    eps = 1e-5
    plus = gradient([a + eps * v for a, v in zip(arrays, vs)])
    minus = gradient([a - eps * v for a, v in zip(arrays, vs)])
    for k, h in enumerate(hvp):
        want = (plus[k] - minus[k]) / (2 * eps)
        np.testing.assert_allclose(h.numpy(), want, rtol=1e-6, atol=1e-7 * max(1.0, np.abs(want).max()))


def test_gradient_penalty_reaches_the_parameters():
    """WGAN-GP: backward of a penalty on grad(D(x), x, create_graph=True) fills the weights' .grad."""
    x, w = _leaf(A), _leaf(W)
    (gx,) = lv.autograd.grad(_mlp(x, w).sum(), x, create_graph=True)
    ((gx * gx).sum(dim=1).sqrt() - 1.0).pow(2).mean().backward()

    def penalty(w_):
        xs = _leaf(A)
        ws = lv.tensor(w_, dtype=lv.float64)
        (g,) = lv.autograd.grad(_mlp(xs, ws).sum(), xs)
        return float(((g * g).sum(dim=1).sqrt() - 1.0).pow(2).mean().item())

    eps, want = 1e-6, np.zeros_like(W)
    for i in np.ndindex(W.shape):
        d = np.zeros_like(W)
        d[i] = eps
        want[i] = (penalty(W + d) - penalty(W - d)) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5, atol=1e-8)


# ------------------------------------------------------- autograd.backward
def test_backward_with_inputs_accumulates_only_there():
    x, w = _leaf(A), _leaf(W)
    h = x @ w
    lv.autograd.backward(h.tanh().sum(), inputs=[w, h])
    assert x.grad is None
    np.testing.assert_allclose(h.grad.numpy(), 1 - np.tanh(A @ W) ** 2, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), A.T @ h.grad.numpy(), rtol=1e-12)


def test_backward_of_several_tensors():
    x = _leaf(A)
    v = RNG.uniform(size=(2, 3))
    lv.autograd.backward([(x * x).sum(), x.exp()], [None, lv.tensor(v)])
    np.testing.assert_allclose(x.grad.numpy(), 2 * A + v * np.exp(A), rtol=1e-12)
    with pytest.raises(AutogradError, match="2 gradients for 1 tensors"):
        lv.autograd.backward([(x * x).sum()], [None, None])


# ------------------------------------------------------------------ hooks
def test_hooks_on_leaf_and_non_leaf():
    # torch: leaf hook *10, non-leaf hook *100, y = 3x, L = sum(2y): y.grad 200, x.grad 6000.
    x = lv.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    x.register_hook(lambda g: g * 10)
    y = x * 3
    y.retain_grad()
    y.register_hook(lambda g: calls.append(g.shape) or g * 100)
    (y * 2).sum().backward()
    assert calls == [(2,)] and y.retains_grad and not x.retains_grad
    np.testing.assert_array_equal(y.grad.numpy(), [200.0, 200.0])
    np.testing.assert_array_equal(x.grad.numpy(), [6000.0, 6000.0])


def test_hook_that_returns_none_observes_and_remove_unregisters():
    x = lv.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    observer = x.register_hook(lambda g: seen.append(g.numpy().copy()))
    scaler = x.register_hook(lambda g: g * 10)
    (x * 2).sum().backward()
    np.testing.assert_array_equal(seen[0], [2.0, 2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 20.0])
    scaler.remove()
    scaler.remove()  # twice is harmless, as in torch
    observer.remove()
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    assert len(seen) == 1
    with x.register_hook(lambda g: g * 0):
        assert lv.autograd.grad((x * 2).sum(), x)[0].numpy().tolist() == [0.0, 0.0]
    # torch: hooks also run in autograd.grad; the handle's exit removed this one
    assert lv.autograd.grad((x * 2).sum(), x)[0].numpy().tolist() == [2.0, 2.0]


def test_gradient_clipping_hook_on_parameters():
    model = lv.nn.Linear(3, 2)
    for p in model.parameters():
        p.register_hook(lambda g: g.clamp(-0.01, 0.01))
    model(lv.ones(4, 3) * 5.0).sum().backward()
    for p in model.parameters():
        assert np.abs(p.grad.numpy()).max() <= 0.01 + 1e-9


def test_hook_errors():
    with pytest.raises(AutogradError, match="register_hook.*does not require grad"):
        lv.ones(2).register_hook(lambda g: g)
    x = lv.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="callable"):
        x.register_hook(3)
    y = x * 3
    y.register_hook(lambda g: g.sum())
    with pytest.raises(AutogradError, match=r"returned shape \(\).*\(2,\)"):
        (y * 2).sum().backward()


def test_retain_grad_accumulates_and_is_a_no_op_on_leaves():
    x = lv.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    x.retain_grad()
    z = y.sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(AutogradError, match="retain_grad"):
        lv.ones(2).retain_grad()
    assert not (x * 2).retains_grad


# -------------------------------------------------------------- Tensor.data
def test_data_is_a_detached_alias():
    p = lv.nn.Parameter(lv.tensor([1.0, 2.0, 3.0]))
    d = p.data
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0, 3.0])
    d.mul_(2.0)  # outside autograd: no error on a leaf that requires grad
    p.data.add_(lv.ones(3), alpha=-1)
    np.testing.assert_array_equal(p.numpy(), [1.0, 3.0, 5.0])
    with lv.no_grad():
        p -= 1.0
    np.testing.assert_array_equal(d.numpy(), [0.0, 2.0, 4.0])  # the alias reads p's value
    assert p.requires_grad and p.is_leaf


def test_data_updates_record_no_history_and_train_as_in_torch():
    """The word_language_model loop: p.data.add_(p.grad, alpha=-lr) after backward."""
    model = lv.nn.Linear(3, 2)
    x = lv.tensor(RNG.uniform(size=(4, 3)).astype(np.float32))
    w0 = model.weight.numpy().copy()
    loss = (model(x) ** 2).mean()
    loss.backward()
    g = model.weight.grad.numpy().copy()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
    assert model.weight.is_leaf and model.weight.grad_fn is None
    np.testing.assert_allclose(model.weight.numpy(), w0 - 0.1 * g, rtol=1e-6)


def test_data_setter_replaces_the_value():
    p = lv.nn.Parameter(lv.zeros(3))
    p.data = lv.arange(5.0)
    assert p.shape == (5,) and p.requires_grad and p.is_leaf
    p.data = lv.tensor([1.0, 2.0], dtype=lv.float64)  # torch: the dtype follows
    assert p.dtype == lv.float64
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [2.0, 4.0])
    tied = lv.nn.Linear(2, 2)
    tied.weight.data = lv.nn.init.eye_(lv.empty(2, 2)) * 3.0
    np.testing.assert_array_equal(tied.weight.numpy(), np.eye(2) * 3.0)


def test_data_setter_errors():
    p = lv.nn.Parameter(lv.zeros(3))
    with pytest.raises(DTypeError, match="data.*floating-point.*int64"):
        p.data = lv.tensor([1, 2])
    with pytest.raises(TypeError, match="data: expected a Tensor"):
        p.data = [1.0, 2.0]
