"""The module-level functions (``lazyvic.exp(x)``, ``lazyvic.sum(x, 1)`` ...), products and einsum,
the new creation functions, and the small Tensor conveniences (``nelement``, ``__format__``,
``type_as`` ...). Values against NumPy, errors typed and naming the op."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import assert_tensor, check_vjp

import lazyvic as lv
from lazyvic import errors, functions


def _r(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


# ======================================================== module-level twins
def test_every_twin_is_exported_and_is_the_method():
    x = lv.tensor(_r(2, 3))
    for name in functions._TWINS:
        fn = getattr(lv, name)
        assert fn is getattr(functions, name) and fn.__name__ == name, name
        assert callable(getattr(x, name)), name
    assert lv.linalg.norm is not None and lv.where is functions.where


def test_twins_give_the_method_results(mode):
    a, b = _r(2, 3), _r(2, 3, seed=1)
    x, y = lv.tensor(a), lv.tensor(b)
    outs = [
        (lv.exp(x), np.exp(a)),
        (lv.sum(x, 1), a.sum(1)),
        (lv.sum(x, dim=(0, 1), keepdim=True), a.sum((0, 1), keepdims=True)),
        (lv.max(x), a.max()),
        (lv.max(x, 1).values, a.max(1)),
        (lv.max(x, 1, True).indices, a.argmax(1)[:, None]),
        (lv.max(x, y), np.maximum(a, b)),
        (lv.clamp(x, max=0.2), np.minimum(a, 0.2)),
        (lv.transpose(x, 0, 1), a.T),
        (lv.flatten(lv.unsqueeze(x, 0)), a.reshape(-1)),
        (lv.mean(x, 0), a.mean(0)),
        (lv.argmax(x), np.int64(a.argmax())),
        (lv.softmax(x, 1, dtype=lv.float64), np.exp(a) / np.exp(a).sum(1, keepdims=True)),
        (lv.gather(x, 1, lv.tensor([[2, 0], [1, 1]])), np.take_along_axis(a, np.array([[2, 0], [1, 1]]), 1)),
        (lv.chunk(x, 2, 1)[1], a[:, 2:]),
        (lv.split(x, [1, 2], 1)[1], a[:, 1:]),
        (lv.narrow(x, 1, 1, 2), a[:, 1:3]),
        (lv.abs(x), np.abs(a)),
        (lv.add(2, x), 2 + a),  # a Python number first, as PyTorch allows for arithmetic
        (lv.sub(1.5, x), 1.5 - a),
        (lv.pow(2, x), (2.0 ** a.astype(np.float64)).astype(np.float32)),
        (lv.mul(x, y), a * b),
    ]
    lv.sync()
    for t, want in outs:
        assert_tensor(t, np.asarray(want, dtype=t.dtype.np), rtol=1e-5)


def test_twin_out_argument_and_bad_input():
    x = lv.tensor(_r(2, 3))
    out = lv.zeros(2, 3)
    assert lv.exp(x, out=out) is out
    np.testing.assert_allclose(out.numpy(), np.exp(_r(2, 3)), rtol=1e-6)
    with pytest.raises(errors.ShapeError, match=r"exp\(\): out has shape \(3,\)"):
        lv.exp(x, out=lv.zeros(3))
    with pytest.raises(TypeError, match=r"exp\(\): argument 'input' must be a lazyvic.Tensor, not float"):
        lv.exp(2.0)
    with pytest.raises(TypeError, match="maximum"):
        lv.maximum(2, x)


def test_module_only_functions(mode):
    a, b = _r(2, 3), _r(3, seed=1)
    x, y = lv.tensor(a), lv.tensor(b)
    assert lv.is_tensor(x) and not lv.is_tensor(a)
    assert lv.allclose(x, x + 1e-9) and not lv.allclose(x, x + 1e-3)
    assert lv.equal(x, x * 1.0) and not lv.equal(x, y) and not lv.equal(x, x + 1.0)
    std, mean = lv.std_mean(x, 1)
    var, mean0 = lv.var_mean(x, 0, unbiased=False)
    xs, ys = lv.broadcast_tensors(x, y)
    gi, gj = lv.meshgrid(lv.arange(2), lv.arange(3), indexing="ij")
    xi, xj = lv.meshgrid(lv.arange(2), lv.arange(3), indexing="xy")
    outs = [
        (std, a.std(1, ddof=1)),
        (mean, a.mean(1)),
        (var, a.var(0)),
        (mean0, a.mean(0)),
        (ys, np.broadcast_to(b, (2, 3))),
        (gi, np.meshgrid(np.arange(2), np.arange(3), indexing="ij")[0]),
        (gj, np.meshgrid(np.arange(2), np.arange(3), indexing="ij")[1]),
        (xi, np.meshgrid(np.arange(2), np.arange(3), indexing="xy")[0]),
        (xj, np.meshgrid(np.arange(2), np.arange(3), indexing="xy")[1]),
        (lv.hstack([y, y]), np.hstack([b, b])),
        (lv.vstack([y, x]), np.vstack([b, a])),
        (lv.concat([x, x], 1), np.concatenate([a, a], 1)),
    ]
    for t, want in outs:
        assert_tensor(t, np.asarray(want, dtype=t.dtype.np), rtol=1e-5)
    assert xs.shape == (2, 3)


# ================================================================ products
@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
        ("i,i->", [(5,), (5,)]),
        ("i,j", [(2,), (3,)]),
        ("ii->i", [(3, 3)]),
        ("iij->j", [(2, 2, 3)]),
        ("ijk->kij", [(2, 3, 4)]),
        ("ij->j", [(3, 4)]),
        ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),
        ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
        ("ij,kj,k", [(2, 3), (4, 3), (4,)]),
        ("ba", [(2, 3)]),
    ],
)
def test_einsum_against_numpy(equation, shapes):
    arrays = [_r(*s, seed=k).astype(np.float64) for k, s in enumerate(shapes)]
    got = lv.einsum(equation, *[lv.tensor(a) for a in arrays])
    assert_tensor(got, np.einsum(equation, *arrays))
    assert_tensor(lv.einsum(equation, [lv.tensor(a) for a in arrays]), np.einsum(equation, *arrays))


def test_einsum_gradient_and_errors():
    check_vjp(lambda a, b: lv.einsum("ij,jk->ki", a, b), _r(2, 3), _r(3, 2, seed=1))
    check_vjp(lambda a: lv.einsum("ii->i", a), _r(3, 3))
    with pytest.raises(errors.ShapeError, match="einsum: subscript 'j' has sizes 3 and 4"):
        lv.einsum("ij,jk", lv.ones(2, 3), lv.ones(4, 2))
    with pytest.raises(errors.ShapeError, match="einsum: subscripts 'ij' do not fit an operand of shape"):
        lv.einsum("ij", lv.ones(2, 3, 4))
    with pytest.raises(errors.ShapeError, match="2 operands, got 1"):
        lv.einsum("ij,jk", lv.ones(2, 3))


def test_products_and_their_errors(mode):
    a, b, v = _r(2, 3), _r(3, 4, seed=1), _r(3, seed=2)
    c, d = _r(2, 2, 3, seed=3), _r(2, 3, 4, seed=4)
    x, y, z, p, q = (lv.tensor(t) for t in (a, b, v, c, d))
    outs = [
        (lv.mm(x, y), a @ b),
        (x.mv(z), a @ v),
        (lv.dot(z, z), v @ v),
        (lv.outer(z, z), np.outer(v, v)),
        (lv.ger(z, z), np.outer(v, v)),
        (lv.bmm(p, q), c @ d),
        (lv.addmm(lv.tensor(b[:2, :2]), x, y[:, :2], beta=0.5, alpha=2.0), 0.5 * b[:2, :2] + 2 * (a @ b[:, :2])),
        (lv.addmm(lv.tensor(np.full((2, 4), np.nan, np.float32)), x, y, beta=0), a @ b),  # beta 0: input unread
        (lv.baddbmm(lv.zeros(2, 2, 4), p, q, alpha=0.5), 0.5 * (c @ d)),
        (lv.addmv(z[:2], x, z), v[:2] + a @ v),
    ]
    for t, want in outs:
        assert_tensor(t, np.asarray(want, np.float32), rtol=1e-5)
    with pytest.raises(errors.ShapeError, match=r"mm: mat2 must be 2-D, got shape \(3,\)"):
        lv.mm(x, z)
    with pytest.raises(errors.ShapeError, match=r"bmm: batch sizes differ"):
        lv.bmm(p, lv.ones(3, 3, 4))
    with pytest.raises(errors.ShapeError, match=r"dot: lengths differ"):
        lv.dot(z, lv.ones(4))
    with pytest.raises(errors.ShapeError, match=r"matmul: shapes \(2, 3\) and \(2, 3\) cannot be multiplied"):
        lv.mm(x, x)


# ================================================================ creation
def test_linspace_logspace_as_tensor(mode):
    outs = [
        (lv.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float32)),
        (lv.linspace(-1, 1, 4, dtype=lv.float64), np.linspace(-1, 1, 4)),
        (lv.linspace(2, 2, 1), np.array([2.0], np.float32)),
        (lv.linspace(0, 1, 0), np.zeros(0, np.float32)),
        (lv.linspace(-2, 10, 5, dtype=lv.int64), np.array([-2, 1, 4, 7, 10])),
        (lv.logspace(0, 2, 3), np.array([1, 10, 100], np.float32)),
        (lv.logspace(0, 3, 4, base=2.0), np.array([1, 2, 4, 8], np.float32)),
        (lv.empty_like(lv.ones(2, dtype=lv.int32)).shape == (2,), None),
    ]
    assert outs.pop()[0]
    for t, want in outs:
        assert_tensor(t, want)
    assert lv.linspace(0, 1, 3, requires_grad=True).requires_grad
    t = lv.tensor([1.0, 2.0])
    assert lv.as_tensor(t) is t
    assert lv.as_tensor(t, dtype=lv.float64).dtype == lv.float64
    assert_tensor(lv.as_tensor([1, 2]), np.array([1, 2]))
    assert_tensor(lv.as_tensor(np.arange(3, dtype=np.int32)), np.arange(3, dtype=np.int32))
    with pytest.raises(ValueError, match="linspace: number of steps must be non-negative"):
        lv.linspace(0, 1, -1)


# ======================================================== small conveniences
def test_small_tensor_conveniences():
    x = lv.tensor(_r(2, 3))
    assert x.nelement() == x.numel() == 6 and x.element_size() == 4
    assert lv.tensor([1, 2]).element_size() == 8 and lv.tensor([True]).element_size() == 1
    assert x.is_floating_point() and not lv.tensor([1]).is_floating_point() and lv.is_floating_point(x)
    assert x.shape == (2, 3) and x.shape != [2, 3] and x.size(1) == 3 and x.shape[-1] == 3
    assert x.type_as(lv.tensor([1])).dtype == lv.int64
    e = x.new_empty(4, 2)
    assert e.shape == (4, 2) and e.dtype == lv.float32
    assert isinstance(x.numpy(force=True), np.ndarray)
    loss = (lv.tensor([1.25, 2.5]) * 2.0).sum()
    assert f"{loss:.3f}" == "7.500" and f"{loss}" == "7.5" and f"{lv.tensor(3):>3d}" == "  3"
    assert f"{x}" == str(x)
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{x:.3f}"
    assert x.half().dtype is lv.float16 and x.bfloat16().dtype is lv.bfloat16
    assert x.byte().dtype is lv.uint8 and x.char().dtype is lv.int8 and x.short().dtype is lv.int16
    report = lv.explain(lambda t: f"{(t * 2).sum():.2f}", x)
    assert any(cut["reason"] == "format" for cut in report.to_dict()["cuts"])


def test_in_place_variants(mode):
    a = _r(2, 3) * 3
    x = lv.tensor(a) * 1.0
    x.abs_().floor_().clamp_min_(1.0)
    y = lv.tensor(a) * 1.0
    y.masked_fill_(y > 0, 0.0).exp_()
    lv.sync()
    assert_tensor(x, np.maximum(np.floor(np.abs(a)), 1.0))
    assert_tensor(y, np.exp(np.where(a > 0, 0, a)))


def test_script_idioms_of_the_issue():
    """Lines of pytorch/examples word_language_model (positional encoding) and nanoGPT (top-k
    filtering), run with ``torch`` bound to lazyvic."""
    import math

    torch = lv
    max_len, d_model = 10, 8
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    p = np.arange(max_len)[:, None] * np.exp(np.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    want = np.zeros((max_len, d_model))
    want[:, 0::2], want[:, 1::2] = np.sin(p), np.cos(p)
    np.testing.assert_allclose(pe.numpy(), want, atol=2e-6)

    a = np.random.default_rng(0).standard_normal((2, 5, 7)).astype(np.float32)
    logits = torch.tensor(a)[:, -1, :] / 0.8
    v, _ = torch.topk(logits, min(3, logits.size(-1)))
    logits[logits < v[:, [-1]]] = -float("Inf")
    probs = lv.functional.softmax(logits, dim=-1)
    last = a[:, -1, :] / np.float32(0.8)
    kept = last >= np.sort(last, 1)[:, -3:][:, :1]
    e = np.where(kept, np.exp(last - last.max(1, keepdims=True)), 0)
    np.testing.assert_allclose(probs.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
