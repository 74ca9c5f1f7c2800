"""In-place updates of non-leaf tensors keep their gradients; NumPy interop copies when asked."""

import numpy as np

import lazyvic as lv


def test_inplace_add_on_a_non_leaf_keeps_the_gradient():
    x = lv.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2.0
    h += 1.0
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2, 2])


def test_inplace_update_that_reads_itself():
    x = lv.tensor([1.0, 2.0], requires_grad=True)
    h = x * x  # dh/dx = 2x
    h.add_(h * 3.0)  # h = 4 x^2
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 8 * np.array([1.0, 2.0]))


def test_array_protocol_copies_when_asked():
    t = lv.tensor(np.arange(4, dtype=np.float32))
    a = np.array(t)  # NumPy 2 asks for a copy
    a[0] = 42.0
    assert t.numpy()[0] == 0.0
    assert np.asarray(t) is t.numpy()  # no copy asked: shares memory, like PyTorch


def test_copy_does_not_share_storage_with_its_source():
    src = lv.tensor(np.ones(3, np.float32))
    dst = lv.zeros(3)
    dst.copy_(src)
    lv.sync()
    src.numpy()[0] = 5.0
    assert dst.numpy()[0] == 1.0


def test_bitwise_ops_on_integers_and_floats():
    """Integers: bitwise, as PyTorch (before: refused); floats: refused, as PyTorch."""
    import pytest

    np.testing.assert_array_equal((lv.tensor([6]) & lv.tensor([3])).numpy(), [2])
    with pytest.raises(lv.errors.UnsupportedOpError, match="bitwise"):
        lv.tensor([6.0]) & lv.tensor([3.0])


def test_inplace_update_after_another_op_read_the_old_value():
    x = lv.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = x * 1.0
    a = h.relu()  # reads h before the update
    h *= 2.0  # h = 2x
    (a + h).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (np.array([1.0, -2.0, 3.0]) > 0) + 2.0)


def test_inplace_update_after_a_backward_freed_the_readers():
    import pytest

    x = lv.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    y = h * 3.0
    y.sum().backward()  # frees the contexts of y and h
    h += 1.0  # must not trip over y's freed context
    np.testing.assert_allclose(h.numpy(), [3.0, 5.0])
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])
    with pytest.raises(lv.errors.AutogradError, match="second time"):
        h.sum().backward()  # as in PyTorch: h's old context was freed
