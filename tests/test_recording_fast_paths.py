"""The fast paths of recording (tensor.py, products.py, shapes.py, reductions.py, ops/movement.py)
give what the general paths give: same values (against NumPy), same errors, same gradients.

Run on the interpreter (no compile): these check recording, not kernels.
"""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import dtypes as dt
from lazyvic.errors import ShapeError
from lazyvic.shapes import norm_axes, norm_axis, shape_arg

rng = np.random.default_rng(3)
M = rng.standard_normal((3, 4)).astype(np.float32)
N = rng.standard_normal((4, 5)).astype(np.float32)


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    from lazyvic.runtime.config import config

    monkeypatch.setattr(config, "compile", "never")


@pytest.mark.parametrize("dims", [(0, 1), (1, 0), (-1, -2), (-2, -1), (0, -1), (1, -2), (0, 0), (1, -1), (-2, 0)])
def test_transpose_of_a_matrix(dims):
    x = lv.tensor(M)
    got = x.transpose(*dims)
    np.testing.assert_array_equal(got.numpy(), np.swapaxes(M, *dims))
    if dims[0] % 2 == dims[1] % 2:
        assert got is x  # a swap of an axis with itself records nothing


def test_transpose_out_of_range_still_raises():
    with pytest.raises(IndexError):
        lv.tensor(M).transpose(0, 2)
    with pytest.raises(TypeError):
        lv.tensor(M).transpose(0, 1.0)


def test_matrix_products_of_one_dtype_and_their_gradients():
    a = lv.tensor(M, requires_grad=True)
    b = lv.tensor(N, requires_grad=True)
    y = a @ b
    np.testing.assert_allclose(y.numpy(), M @ N, rtol=1e-6)
    (y * y).sum().backward()
    g = 2 * (M @ N)
    np.testing.assert_allclose(a.grad.numpy(), g @ N.T, rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), M.T @ g, rtol=1e-5)
    i = lv.tensor(np.arange(12).reshape(3, 4)) @ lv.tensor(np.arange(20).reshape(4, 5))
    assert i.dtype is dt.int64
    np.testing.assert_array_equal(i.numpy(), np.arange(12).reshape(3, 4) @ np.arange(20).reshape(4, 5))
    h = lv.tensor(M).half() @ lv.tensor(N).half()
    assert h.dtype is dt.float16
    np.testing.assert_array_equal(
        h.numpy(),
        (M.astype(np.float16).astype(np.float32) @ N.astype(np.float16).astype(np.float32)).astype(np.float16),
    )


def test_matrix_products_that_do_not_fit_or_mix_dtypes():
    with pytest.raises(ShapeError, match="cannot be multiplied"):
        lv.tensor(M) @ lv.tensor(M)
    mixed = lv.tensor(M) @ lv.tensor(N.astype(np.float64))
    assert mixed.dtype is dt.float64
    with pytest.raises(lv.errors.DTypeError):
        lv.tensor(M > 0) @ lv.tensor(N > 0)


def test_a_matrix_product_under_autocast_is_still_rounded():
    with lv.autocast("cpu", dtype=lv.bfloat16):
        y = lv.tensor(M) @ lv.tensor(N)
    r = lv.tensor(M).to(lv.bfloat16).float() @ lv.tensor(N).to(lv.bfloat16).float()
    np.testing.assert_array_equal(y.float().numpy(), r.to(y.dtype).float().numpy())


def test_axes_and_shapes_of_plain_ints_and_of_other_kinds():
    assert norm_axis(-1, 3, "op") == 2 and norm_axis(np.int64(1), 3, "op") == 1 and norm_axis(0, 0, "op") == 0
    with pytest.raises(TypeError):
        norm_axis(True, 3, "op")
    with pytest.raises(IndexError):
        norm_axis(3, 3, "op")
    assert norm_axes(-2, 3, "op") == (1,) and norm_axes((2, 0), 3, "op") == (0, 2)
    assert shape_arg((2, 3)) == (2, 3) and shape_arg(([2, -1],)) == (2, -1)
    assert shape_arg((np.int64(2), 3)) == (2, 3) and type(shape_arg((np.int64(2),))[0]) is int
    with pytest.raises(ShapeError):
        shape_arg((2, -3))


def test_reductions_drop_their_axes_and_operands_of_one_dtype_broadcast():
    x = lv.tensor(M)
    np.testing.assert_allclose(x.sum(1).numpy(), M.sum(1), rtol=1e-6)
    assert x.sum(-2).shape == (4,) and x.sum(0, keepdim=True).shape == (1, 4)
    b = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_array_equal((x + lv.tensor(b)).numpy(), M + b)


def test_the_gradient_of_a_permute_is_the_inverse_permutation():
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = lv.tensor(a, requires_grad=True)
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)
    (x.permute(2, 0, 1) * lv.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.transpose(w, (1, 2, 0)))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "minimum"])
@pytest.mark.parametrize("reverse", [False, True])
def test_a_number_operand_of_a_tensor_that_requires_grad(op, reverse):
    """``h * 2.0`` or ``2.0 - h`` on a tensor that requires grad takes the fast path of a number
    operand (its autograd context made without _apply): the same values and gradients as the
    op with the number as a 0-d tensor (the general path)."""
    a = np.float32(0.25) if op in ("maximum", "minimum") else np.float32(1.75)
    x0, x1 = lv.tensor(M, requires_grad=True), lv.tensor(M, requires_grad=True)
    h0, h1 = x0 * 1.5, x1 * 1.5  # non-leaves
    c = lv.tensor(a)
    y0 = c._binary(op, h0) if reverse else h0._binary(op, c)
    y1 = h1._binary(op, float(a), reverse)
    assert y1.requires_grad and y1.grad_fn is not None
    g = rng.standard_normal(M.shape).astype(np.float32)
    (y0 * lv.tensor(g)).sum().backward()
    (y1 * lv.tensor(g)).sum().backward()
    np.testing.assert_array_equal(y1.numpy(), y0.numpy())
    np.testing.assert_array_equal(x1.grad.numpy(), x0.grad.numpy())
    with lv.no_grad():
        z = h1._binary(op, float(a), reverse)
    assert not z.requires_grad and z.grad_fn is None
