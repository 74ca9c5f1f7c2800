"""torch.autograd.Function: custom forward/backward pairs, checked against finite differences
(tests/_oracle.py) and PyTorch's rules for ctx, several outputs and bad backward results."""

import numpy as np
import pytest
from _oracle import numeric_grads

import lazyvic as lv
from lazyvic.autograd import Function, once_differentiable
from lazyvic.errors import AutogradError, ShapeError, UnsupportedOpError
from lazyvic.runtime import metrics

RNG = np.random.default_rng(3)
A = RNG.uniform(0.2, 1.0, (2, 3))
B = RNG.uniform(0.2, 1.0, (2, 3))


def _leaf(a):
    return lv.tensor(a, dtype=lv.float64, requires_grad=True)


class ScaledSoftplus(Function):
    """y = log(1 + exp(k x)) / k, with dy/dx = sigmoid(k x) (k a non-tensor argument)."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        ctx.save_for_backward(x)
        return (1.0 + (x * k).exp()).log() / k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        assert ctx.needs_input_grad == (True, False)
        return grad * (x * ctx.k).sigmoid(), None


class MulAndDiff(Function):
    """Two outputs: (a * b, a - b)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b, a - b

    @staticmethod
    def backward(ctx, g_prod, g_diff):
        a, b = ctx.saved_tensors
        return g_prod * b + g_diff, g_prod * a - g_diff


class SetupStyle(Function):
    """PyTorch 2's form: forward without ctx, setup_context separately."""

    @staticmethod
    def forward(x, y):
        return x * y.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, y = inputs
        ctx.save_for_backward(x, y, output)

    @staticmethod
    def backward(ctx, grad):
        x, y, out = ctx.saved_tensors
        return grad * y.exp(), grad * out


def test_custom_function_matches_finite_differences():
    x = _leaf(A)
    w = RNG.uniform(0.5, 1.5, A.shape)
    y = ScaledSoftplus.apply(x, 3.0)
    assert y.requires_grad and y.grad_fn == "ScaledSoftplusBackward"
    (y * lv.tensor(w)).sum().backward()
    (want,) = numeric_grads(lambda t: ScaledSoftplus.apply(t, 3.0), [A], w)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), np.log1p(np.exp(3 * A)) / 3, rtol=1e-12)


@pytest.mark.parametrize("used", ["both", "first", "second"])
def test_several_outputs_get_one_backward(used):
    a, b = _leaf(A), _leaf(B)
    p, d = MulAndDiff.apply(a, b)
    loss = {"both": (p * 2.0).sum() + (d * d).sum(), "first": (p * 2.0).sum(), "second": (d * d).sum()}[used]
    loss.backward()

    def objective(x, y):
        prod, diff = x * y, x - y
        return {"both": 2 * prod + diff**2, "first": 2 * prod, "second": diff**2}[used]

    ga, gb = numeric_grads(objective, [A, B], np.ones(A.shape))
    np.testing.assert_allclose(a.grad.numpy(), ga, rtol=1e-6)  # an unused output's gradient is zeros
    np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-6)


def test_setup_context_style_and_saved_outputs():
    x, y = _leaf(A), _leaf(B)
    SetupStyle.apply(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(B), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), A * np.exp(B), rtol=1e-12)


def test_saved_values_are_the_values_at_save_time():
    x = _leaf(A)
    h = x * 1.0
    y = ScaledSoftplus.apply(h, 2.0)
    h += 5.0  # an in-place update after the forward does not change what backward reads
    y.sum().backward()
    sig = 1 / (1 + np.exp(-2 * A))
    np.testing.assert_allclose(x.grad.numpy(), sig, rtol=1e-12)


def test_function_in_a_model_is_lazy_and_one_trace():
    x = _leaf(A)
    w = lv.nn.Parameter(lv.tensor(B, dtype=lv.float64))
    before = metrics.snapshot()["traces"]
    loss = MulAndDiff.apply(x, w)[0].sum()
    loss.backward()
    assert x.grad.is_lazy and metrics.snapshot()["traces"] == before
    w.grad.numpy()
    assert metrics.snapshot()["traces"] == before + 1


def test_no_history_without_grad():
    x = _leaf(A)
    with lv.no_grad():
        y = ScaledSoftplus.apply(x, 1.0)
    assert not y.requires_grad
    z = ScaledSoftplus.apply(lv.tensor(A), 1.0)
    assert not z.requires_grad and z.grad_fn is None


def test_mark_non_differentiable_and_materialize_grads():
    seen = []

    class SortLike(Function):
        @staticmethod
        def forward(ctx, x):
            idx = (x > 0.5).to(lv.float64)
            ctx.mark_non_differentiable(idx)
            ctx.set_materialize_grads(False)
            return x * 2.0, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            seen.append(g_idx)
            return g * 2.0

    x = _leaf(A)
    y, idx = SortLike.apply(x)
    assert y.requires_grad and not idx.requires_grad
    y.sum().backward()
    assert seen == [None]  # set_materialize_grads(False): None instead of zeros
    np.testing.assert_array_equal(x.grad.numpy(), np.full(A.shape, 2.0))


def test_double_backward_through_a_function():
    """create_graph=True: backward's ops on saved tensors are recorded, so it differentiates again."""

    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3.0 * x * x

    x = _leaf(A)
    (g,) = lv.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    (h,) = lv.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.numpy(), 3 * A**2, rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), 6 * A, rtol=1e-12)


def test_once_differentiable_records_no_history():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2.0 * x

    x = _leaf(A)
    (g,) = lv.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    assert not g.requires_grad
    np.testing.assert_allclose(g.numpy(), 2 * A, rtol=1e-12)


def _function(backward, forward=None):
    def default_forward(ctx, x, k=1.0):
        return x * k

    return type(
        "Bad", (Function,), {"forward": staticmethod(forward or default_forward), "backward": staticmethod(backward)}
    )


def test_bad_backward_results_raise():
    x = _leaf(A)
    with pytest.raises(AutogradError, match="BadBackward.*incorrect number of gradients.*expected 2"):
        _function(lambda ctx, g: g).apply(x, 2.0).sum().backward()
    with pytest.raises(AutogradError, match="argument 1, which is not a tensor"):
        _function(lambda ctx, g: (g, g)).apply(_leaf(A), 2.0).sum().backward()
    with pytest.raises(ShapeError, match=r"BadBackward.*\(4,\).*\(2, 3\)"):
        _function(lambda ctx, g: lv.ones(4, dtype=lv.float64)).apply(_leaf(A)).sum().backward()
    with pytest.raises(TypeError, match="BadBackward"):
        _function(lambda ctx, g: 3.0).apply(_leaf(A)).sum().backward()
    with pytest.raises(ShapeError, match=r"\(1, 3\).*\(2, 3\)"):  # torch: not "compatible with [2, 3]"
        _function(lambda ctx, g: g.sum(dim=0, keepdim=True)).apply(_leaf(A)).sum().backward()
    y = _leaf(A)
    _function(lambda ctx, g: (g.expand(5, 2, 3), None, None)).apply(y, 2.0).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.full(A.shape, 5.0))  # torch: summed back to (2, 3)


def test_ctx_errors():
    def dirty(ctx, x):
        ctx.mark_dirty(x)
        return x

    with pytest.raises(UnsupportedOpError, match="mark_dirty"):
        _function(lambda ctx, g: g, dirty).apply(_leaf(A))

    def saves_a_number(ctx, x):
        ctx.save_for_backward(x, 3.0)
        return x

    with pytest.raises(TypeError, match="save_for_backward.*float"):
        _function(lambda ctx, g: g, saves_a_number).apply(_leaf(A))
    y = ScaledSoftplus.apply(_leaf(A), 1.0)
    z = y.sum()
    z.backward()
    with pytest.raises(AutogradError, match="second time"):
        z.backward()
    with pytest.raises(RuntimeError, match="apply"):
        ScaledSoftplus()
