"""Each ``.grad`` is its own tensor: one gradient reaching several leaves (both inputs of an add,
as an LSTM's ``bias_ih`` and ``bias_hh``) must not be shared between their ``.grad`` attributes,
or an in-place update of one (``clip_grad_norm_``'s ``mul_``) would change the others."""

import numpy as np

import lazyvic as lv

X = np.array([0.5, -1.5, 2.0])


def _leaves():
    return lv.zeros(3, requires_grad=True), lv.zeros(3, requires_grad=True)


def test_leaves_sharing_a_gradient_get_their_own_grad_tensors():
    b_ih, b_hh = _leaves()
    x = lv.tensor(X, dtype=lv.float32)
    ((x + b_ih + b_hh) * x).sum().backward()
    assert b_ih.grad is not b_hh.grad
    b_ih.grad.mul_(0.5)
    np.testing.assert_allclose(b_ih.grad.numpy(), 0.5 * X, rtol=1e-7)
    np.testing.assert_allclose(b_hh.grad.numpy(), X, rtol=1e-7)


def test_clip_grad_norm_scales_shared_gradients_once():
    """The word-language-model case: clipping multiplies every ``.grad`` by one coefficient
    (max_norm / (norm + 1e-6), PyTorch's rule), so a gradient two leaves share must not be
    scaled twice."""
    b_ih, b_hh = _leaves()
    x = lv.tensor(X, dtype=lv.float32)
    ((x + b_ih + b_hh) * x).sum().backward()
    norm = lv.nn.utils.clip_grad_norm_([b_ih, b_hh], max_norm=0.25)
    expected_norm = np.sqrt(2 * (X**2).sum())
    np.testing.assert_allclose(norm.item(), expected_norm, rtol=1e-6)
    for b in (b_ih, b_hh):
        np.testing.assert_allclose(b.grad.numpy(), X * 0.25 / (expected_norm + 1e-6), rtol=1e-6)


def test_retained_non_leaf_grad_is_not_the_leaf_grad():
    w = lv.tensor(X, dtype=lv.float32, requires_grad=True)
    h = w * 1.0
    h.retain_grad()
    (h * 2.0).sum().backward()
    w.grad.zero_()
    np.testing.assert_allclose(h.grad.numpy(), 2.0 * np.ones(3))


def test_create_graph_grad_keeps_its_history():
    w = lv.tensor(X, dtype=lv.float64, requires_grad=True)
    b = lv.zeros(3, dtype=lv.float64, requires_grad=True)
    ((w + b) ** 2).sum().backward(create_graph=True)
    assert w.grad is not b.grad and w.grad.requires_grad
    w.grad.sum().backward()  # d/dw sum(2 (w + b)) = 2, added to w.grad = 2 w
    np.testing.assert_allclose(w.grad.detach().numpy(), 2 * X + 2)


def _nodes(t) -> set:
    """The pending nodes that compute ``t``."""
    seen, stack = {}, [t._node]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node.inputs)
    return seen


def _count_ops(t, op: str, besides) -> int:
    """How many nodes of ``op`` compute ``t`` that are not among the nodes computing ``besides``."""
    skip = _nodes(besides)
    return sum(node.op == op for key, node in _nodes(t).items() if key not in skip)


def test_gradients_of_slices_and_of_a_weight_used_at_every_step_are_joined():
    """autograd/engine._Terms: a sequence's step inputs x[t] get their gradients joined by one
    cat (not a sum of T padded terms), and a weight multiplied at every step gets one product
    over the stacked steps (not T small ones), with the gradients of the definition."""
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((6, 2, 3)), rng.standard_normal((3, 4))
    x, w = lv.tensor(xs, requires_grad=True), lv.tensor(ws, requires_grad=True)
    y = lv.stack([(x[t] @ w).tanh() for t in range(6)])
    y.sum().backward()
    assert _count_ops(w.grad, "matmul", y) == 1 and _count_ops(w.grad, "cat", y) == 2
    assert _count_ops(x.grad, "cat", y) == 1 and _count_ops(x.grad, "add", y) == 0
    g = 1.0 - np.tanh(xs @ ws) ** 2  # d tanh, (6, 2, 4)
    np.testing.assert_allclose(w.grad.numpy(), np.einsum("tni,tnj->ij", xs, g), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), g @ ws.T, rtol=1e-12)
