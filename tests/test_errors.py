"""Bad input raises lazyvic's typed errors at the op that caused it, naming the op and the shapes.

"At the op" means before any sync: no trace runs between the call and the
error, and pending inputs stay pending. The tests check both.
"""

from __future__ import annotations

import contextlib
import operator

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.functional as F
from lazyvic import errors
from lazyvic.runtime import metrics


@contextlib.contextmanager
def raises_at_op(exc, *fragments, pending=()):
    """The block raises ``exc`` without running a trace; the message holds every fragment."""
    before = metrics.snapshot()["traces"]
    with pytest.raises(exc) as info:
        yield info
    assert metrics.snapshot()["traces"] == before, "the error came from a sync, not from the op"
    assert isinstance(info.value, errors.LazyvicError), f"{type(info.value).__name__} is not a lazyvic error"
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in error message {message!r}"
    for t in pending:
        assert t.is_lazy, "a pending input was computed by the failing op"


def _lazy(*shape):
    """A pending float32 tensor (errors must not force it)."""
    return lv.ones(*shape) * 2.0


def test_error_hierarchy():
    assert issubclass(errors.ShapeError, ValueError)
    assert issubclass(errors.DTypeError, TypeError)
    assert issubclass(errors.IndexError, IndexError)
    assert issubclass(errors.AutogradError, RuntimeError)
    assert issubclass(errors.UnsupportedOpError, NotImplementedError)
    assert issubclass(errors.LinAlgError, RuntimeError) and lv.linalg.LinAlgError is errors.LinAlgError
    for e in (errors.ShapeError, errors.DTypeError, errors.IndexError, errors.AutogradError):
        assert issubclass(e, errors.LazyvicError)


# ================================================================ shapes
@pytest.mark.parametrize(
    "name, op",
    [
        ("add", operator.add),
        ("sub", operator.sub),
        ("mul", operator.mul),
        ("div", operator.truediv),
        ("pow", operator.pow),
        ("eq", operator.eq),
        ("lt", operator.lt),
        ("ge", operator.ge),
        ("maximum", lambda a, b: a.maximum(b)),
        ("minimum", lambda a, b: a.minimum(b)),
        ("where", lambda a, b: lv.where(a > 0, a, b)),
    ],
)
def test_broadcast_failure_names_op_and_shapes(name, op):
    x, y = _lazy(2, 3), _lazy(4)
    with raises_at_op(errors.ShapeError, name, "(2, 3)", "(4,)", pending=(x, y)):
        op(x, y)


def test_broadcast_failure_in_place_and_reflected():
    x, y = _lazy(2, 3), lv.tensor(np.ones((3, 2), np.float32))
    with raises_at_op(errors.ShapeError, "add", "(2, 3)", "(3, 2)", pending=(x,)):
        x.add_(y)
    with raises_at_op(errors.ShapeError, "sub", "(3, 2)", "(2, 3)", pending=(x,)):
        y - x
    with raises_at_op(errors.ShapeError, "mul", "(2, 3)", "(2,)"):
        x * [1.0, 2.0]


@pytest.mark.parametrize(
    "a, b, fragments",
    [
        ((2, 3), (2, 3), ("(2, 3)", "3 != 2")),
        ((3,), (4, 2), ("(3,)", "(4, 2)")),
        ((2, 4), (3,), ("(2, 4)", "(3,)")),
        ((5,), (4,), ("(5,)", "(4,)")),
        ((2, 2, 3), (3, 3, 4), ("(2, 2, 3)", "(3, 3, 4)", "batch")),
        ((2, 3), (), ("(2, 3)", "()")),
    ],
)
def test_matmul_shape_errors(a, b, fragments):
    x, y = _lazy(*a), _lazy(*b)
    with raises_at_op(errors.ShapeError, "matmul", *fragments, pending=(x, y)):
        x @ y


@pytest.mark.parametrize(
    "call, fragments",
    [
        (lambda x: x.reshape(4, 2), ("reshape", "(2, 3)", "(4, 2)")),
        (lambda x: x.view(4, -1), ("reshape", "(2, 3)", "(4, -1)")),
        (lambda x: x.reshape(-1, -1), ("reshape", "(-1, -1)")),
        (lambda x: x.reshape(0, -1), ("reshape", "(2, 3)")),
        (lambda x: x.reshape(2, -3), ("(2, -3)",)),
        (lambda x: x.expand(3, 3), ("expand", "(2, 3)", "(3, 3)")),
        (lambda x: x.expand(3), ("expand", "(2, 3)", "(3,)")),
        (lambda x: x.permute(1), ("permute", "(2, 3)")),
        (lambda x: x.permute(0, 0), ("permute", "(0, 0)", "(2, 3)")),
        (lambda x: x.sum((1, -1)), ("sum", "(1, -1)")),
        (lambda x: x.flatten(1, 0), ("flatten",)),
        (lambda x: x.split([1, 1], 1), ("split", "(2, 3)")),
        (lambda x: x.unsqueeze(0).t(), ("t", "(1, 2, 3)")),
        (lambda x: x.view_as(lv.zeros(5)), ("reshape", "(2, 3)", "(5,)")),
    ],
)
def test_movement_shape_errors(call, fragments):
    x = _lazy(2, 3)
    with raises_at_op(errors.ShapeError, *fragments, pending=(x,)):
        call(x)


def test_cat_and_stack_shape_errors():
    x, y, z = _lazy(2, 3), _lazy(2, 4), _lazy(2)
    with raises_at_op(errors.ShapeError, "cat", "(2, 3)", "(2, 4)", pending=(x, y)):
        lv.cat([x, y], 0)
    with raises_at_op(errors.ShapeError, "cat", "(2, 3)", "(2,)"):
        lv.cat([x, z], 1)
    with raises_at_op(errors.ShapeError, "cat"):
        lv.cat([])
    with raises_at_op(errors.ShapeError, "stack", "(2, 3)", "(2, 4)"):
        lv.stack([x, y])
    with raises_at_op(errors.ShapeError, "stack"):
        lv.stack([])


def test_index_op_shape_errors():
    x = _lazy(2, 3)
    with raises_at_op(errors.ShapeError, "gather", "(2,)", "(2, 3)", pending=(x,)):
        x.gather(1, lv.tensor([0, 1]))
    with raises_at_op(errors.ShapeError, "gather", "(3, 1)", "(2, 3)"):
        x.gather(1, lv.tensor([[0], [1], [0]]))
    with raises_at_op(errors.ShapeError, "index_select", "(1, 2)"):
        x.index_select(1, lv.tensor([[0, 1]]))
    with raises_at_op(errors.ShapeError, "scatter_add", "(1, 2)", "(1, 3)"):
        x.scatter_add(1, lv.tensor([[0, 1]]), lv.ones(1, 3))


def test_loss_and_layer_shape_errors():
    logits = _lazy(4, 3)
    with raises_at_op(errors.ShapeError, "cross_entropy", "(4, 3)", "(5,)", pending=(logits,)):
        F.cross_entropy(logits, lv.tensor([0, 1, 2, 0, 1]))
    with raises_at_op(errors.ShapeError, "cross_entropy", "(2, 3, 4)", "(2, 5)"):
        F.cross_entropy(_lazy(2, 3, 4), lv.zeros(2, 5, dtype=lv.int64))
    with raises_at_op(errors.ShapeError, "nll_loss", "(4, 3)", "(3,)"):
        F.nll_loss(logits, lv.tensor([0, 1, 2]))
    with raises_at_op(errors.ShapeError, "mse_loss", "(4, 3)", "(3, 4)"):
        F.mse_loss(logits, _lazy(3, 4))
    with raises_at_op(errors.ShapeError, "linear", "(4, 3)", "(2, 5)"):
        F.linear(logits, _lazy(2, 5))
    with raises_at_op(errors.ShapeError, "Linear", "(4, 3)"):
        lv.nn.Linear(5, 2)(logits)


def test_conversions_of_multi_element_tensors():
    x = _lazy(2, 3)
    with raises_at_op(errors.ShapeError, "item", "(2, 3)", pending=(x,)):
        x.item()
    with raises_at_op(errors.ShapeError, "bool", "(2, 3)", pending=(x,)):
        bool(x)
    with raises_at_op(errors.ShapeError, "(2, 3)"):
        float(x)


# ================================================================== axes
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda x: x.sum(2), "sum"),
        (lambda x: x.sum(-3), "sum"),
        (lambda x: x.mean((0, 5)), "mean"),
        (lambda x: x.amax(2), "max"),
        (lambda x: x.max(3), "max"),
        (lambda x: x.argmax(2), "argmax"),
        (lambda x: x.transpose(0, 2), "transpose"),
        (lambda x: x.unsqueeze(4), "unsqueeze"),
        (lambda x: x.squeeze(2), "squeeze"),
        (lambda x: x.flatten(0, 3), "flatten"),
        (lambda x: x.permute(0, 2), "permute"),
        (lambda x: lv.cat([x, x], 2), "cat"),
        (lambda x: lv.stack([x, x], 4), "stack"),
        (lambda x: x.gather(2, lv.zeros(2, 3, dtype=lv.int64)), "gather"),
        (lambda x: x.index_select(-3, lv.tensor([0])), "index_select"),
        (lambda x: F.softmax(x, 2), "softmax"),
        (lambda x: F.log_softmax(x, -3), "log_softmax"),
        (lambda x: x.size(2), "size"),
        (lambda x: x.narrow(1, 2, 2), "narrow"),
    ],
)
def test_bad_axis_raises_index_error(call, name):
    x = _lazy(2, 3)
    with raises_at_op(errors.IndexError, name, pending=(x,)):
        call(x)


def test_reducing_an_empty_axis():
    with raises_at_op(errors.IndexError, "max", "(0, 3)"):
        lv.zeros(0, 3).amax(0)
    with raises_at_op(errors.IndexError, "argmax", "(0, 3)"):
        lv.zeros(0, 3).argmax(0)


# ========================================================= index values
@pytest.mark.parametrize(
    "index, fragments",
    [
        (2, ("index 2", "dimension 0", "size 2")),
        (-3, ("index -3", "size 2")),
        ((0, 3), ("index 3", "dimension 1", "size 3")),
        ((0, 0, 0), ("too many indices", "(2, 3)")),
        ((Ellipsis, 0, Ellipsis), ("ellipsis",)),
        (np.int64(5), ("index 5",)),
    ],
    ids=repr,
)
def test_getitem_out_of_range(index, fragments):
    x = _lazy(2, 3)
    with raises_at_op(errors.IndexError, "__getitem__", *fragments, pending=(x,)):
        x[index]


def test_index_tensors_out_of_range_raise_at_the_op():
    x = _lazy(2, 3)
    with raises_at_op(errors.IndexError, "gather", "index 5", "size 3", "(2, 3)", pending=(x,)):
        x.gather(1, lv.tensor([[0, 5, 1], [0, 0, 0]]))
    with raises_at_op(errors.IndexError, "gather", "index -1"):
        x.gather(0, lv.tensor([[0, -1, 1]]))
    with raises_at_op(errors.IndexError, "index_select", "index 3", "size 3"):
        x.index_select(1, lv.tensor([0, 3]))
    with raises_at_op(errors.IndexError, "index_select", "index 2", "size 2"):
        x.index_select(0, [2])
    with raises_at_op(errors.IndexError, "scatter_add", "index 7"):
        x.scatter_add(1, lv.tensor([[7]]), lv.ones(1, 1))
    with raises_at_op(errors.IndexError, "__getitem__", "index 2", "size 2"):
        x[lv.tensor([0, 2])]
    with raises_at_op(errors.IndexError, "__getitem__", "index -4", "size 3"):
        x[:, lv.tensor([-4])]


# The interpreter checks index bounds; what a compiled kernel does with a bad index is the compiler's call.
@pytest.mark.parametrize("mode", ["never"], indirect=True)
def test_pending_index_out_of_range_raises_at_its_sync_and_does_not_poison_later_syncs(mode):
    """A computed (pending) index can only be checked when it runs."""
    x = lv.tensor(np.arange(6.0).reshape(2, 3))
    bad = x.gather(1, lv.tensor([[0, 1, 2], [2, 1, 0]]) + 1)
    good = x * 2.0
    with pytest.raises(errors.IndexError, match="index 3"):
        bad.numpy()
    np.testing.assert_array_equal((x + 1.0).numpy(), np.arange(6.0).reshape(2, 3) + 1)
    np.testing.assert_array_equal(good.numpy(), np.arange(6.0).reshape(2, 3) * 2)
    with pytest.raises(errors.IndexError):
        bad.numpy()


def test_a_sync_does_not_fail_on_another_pending_tensors_bad_index(mode):
    """Syncing ``good`` sweeps every live pending tensor into its trace; a bad index in another
    one (``bad``) must not fail it: the sync retries with what it was asked for, and ``bad``
    raises at its own sync. Before: ``good.numpy()`` raised bad's IndexError."""
    x = lv.tensor(np.arange(6.0).reshape(2, 3))
    bad = x.gather(1, lv.tensor([[0, 1, 2], [2, 1, 0]]) + 1)
    good = x * 2.0
    np.testing.assert_array_equal(good.numpy(), np.arange(6.0).reshape(2, 3) * 2)
    with pytest.raises(errors.IndexError, match="index 3"):
        bad.numpy()


# ================================================================ class indices
def test_class_indices_out_of_range_raise_at_the_op_when_known():
    """A realized target (or views of one: the reshaped targets of a batch) is checked at the op.
    Before: one_hot gave a zero row for 3 and -1."""
    with raises_at_op(errors.IndexError, "one_hot", "class index 3", "[0, 3)"):
        F.one_hot(lv.tensor([0, 3]), 3)
    with raises_at_op(errors.IndexError, "one_hot", "class index -1", "[0, 3)"):
        F.one_hot(lv.tensor([[0], [-1]]), 3)
    logits = _lazy(4, 3)
    with raises_at_op(errors.IndexError, "cross_entropy", "target 3", "3 classes", pending=(logits,)):
        F.cross_entropy(logits, lv.tensor([[0, 1], [3, 0]]).reshape(-1))
    with raises_at_op(errors.IndexError, "nll_loss", "target -1", "3 classes"):
        F.nll_loss(_lazy(2, 3, 2), lv.tensor([[0, 1, 2], [1, -1, 0]])[:, 1:])
    with raises_at_op(errors.IndexError, "cross_entropy", "target 5"):
        F.cross_entropy(_lazy(2, 3, 2), lv.tensor([[0, 5], [1, 0]]).to(lv.int32))


def _computed(values):
    """Class indices computed in the trace (pending): they can only be checked when it runs."""
    return lv.tensor(np.asarray(values) * 2) // 2


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: F.one_hot(_computed([0, 3]), 3), "one_hot: class index 3 is out of range [0, 3)"),
        (lambda: F.cross_entropy(_lazy(2, 3), _computed([0, 3])), "cross_entropy: class index 3"),
        (lambda: F.cross_entropy(_lazy(2, 3), _computed([-1, 0])), "cross_entropy: class index -1"),
        (lambda: F.nll_loss(_lazy(2, 3), _computed([2, 7])), "nll_loss: class index 7"),
        (lambda: F.cross_entropy(_lazy(2, 3, 2), _computed([[0, 1], [3, 0]])), "cross_entropy: class index 3"),
    ],
)
def test_computed_class_indices_out_of_range_raise_at_the_sync(mode, make, fragment):
    """The gather's index check (the op table's, run by the interpreter and the compiled plan)
    reads a computed target. Before: 0 was added to the loss, the mean still counted the row."""
    out = make()  # recording does not fail: the values are not known yet
    with pytest.raises(errors.IndexError) as info:
        out.numpy()
    assert fragment in str(info.value)


def test_computed_class_indices_in_range_give_the_realized_targets_result(mode):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 4)).astype(np.float32)
    target = np.array([0, 3, -100, 2, 1, -100])
    want = F.cross_entropy(lv.tensor(logits), lv.tensor(target)).item()
    got = F.cross_entropy(lv.tensor(logits), _computed(target)).item()
    assert got == pytest.approx(want, rel=1e-6)
    hot = F.one_hot(_computed([2, 0, 1]), 3).numpy()
    np.testing.assert_array_equal(hot, np.eye(3, dtype=np.float32)[[2, 0, 1]])


# ================================================================ arguments
def _deep_list(depth: int):
    x = 1.0
    for _ in range(depth):
        x = [x]
    return x


@pytest.mark.parametrize(
    "make, fragments",
    [
        (lambda: F.conv2d(_lazy(1, 3, 5, 5), lv.ones(4, 3, 3, 3), stride=0), ("conv2d", "stride", "(0, 0)")),
        (lambda: F.conv2d(_lazy(1, 3, 5, 5), lv.ones(4, 3, 3, 3), dilation=0), ("conv2d", "dilation")),
        (lambda: F.conv1d(_lazy(1, 3, 5), lv.ones(4, 3, 3), stride=0), ("conv1d", "stride")),
        (lambda: F.max_pool2d(_lazy(1, 3, 5, 5), 2, stride=0), ("max_pool2d", "stride")),
        (lambda: F.avg_pool2d(_lazy(1, 3, 5, 5), 0), ("avg_pool2d", "kernel_size")),
        (lambda: _lazy(4).chunk(0), ("chunk", "got 0")),
        (lambda: _lazy(4).split(0), ("split", "got 0")),
        (lambda: F.pad(_lazy(1, 3, 5), (1, 1), mode="bogus"), ("pad", "mode", "'bogus'")),
        (lambda: _lazy(4)[::0], ("slice step", "got 0")),
        (lambda: lv.arange(0, 4, 0), ("arange", "step")),
        (lambda: lv.zeros(-1), ("full", "(-1,)")),
        (lambda: lv.linspace(0, 1, -1), ("linspace", "-1")),
        (lambda: lv.randperm(-1), ("randperm", "-1")),
    ],
)
def test_bad_arguments_raise_a_typed_error_naming_the_op(make, fragments):
    """Before: ZeroDivisionError (conv2d stride 0, chunk(0)) or a plain ValueError. The error is
    a ValueError (as lazyvic raised) and a RuntimeError (as PyTorch raises for most of these)."""
    with raises_at_op(errors.ArgumentError, *fragments) as info:
        make()
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)


def test_deep_nesting_is_a_shape_error_not_a_recursion_error():
    with raises_at_op(errors.ShapeError, "tensor"):
        lv.tensor(_deep_list(10_000))


# ================================================================ dtypes
@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: lv.tensor(np.ones(3, dtype=np.complex64)), "complex64"),
        (lambda: lv.tensor([1 + 2j, 3j]), "complex128"),
        (lambda: lv.tensor(np.array(["a", "b"])), "<U1"),
        (lambda: lv.tensor(["a", "b"]), "<U1"),
        (lambda: lv.tensor(np.ones(3, dtype="datetime64[s]")), "datetime64"),
        (lambda: lv.tensor(np.array([object(), object()])), "object"),
        (lambda: lv.tensor([1.0], dtype=np.complex128), "complex128"),
        (lambda: lv.tensor([1.0], dtype="float8_e4m3fn"), "float8_e4m3fn"),
        (lambda: lv.zeros(2, dtype=np.complex64), "complex64"),
        (lambda: lv.full((2,), 1.0, dtype="complex64"), "complex64"),
    ],
)
def test_unsupported_dtypes_at_creation(make, fragment):
    with raises_at_op(errors.DTypeError, fragment, "float32"):
        make()


def test_unsupported_dtypes_on_tensors():
    x, i, b = _lazy(2, 3), lv.tensor([[1, 2, 3]]), lv.tensor([True, False])
    with raises_at_op(errors.DTypeError, "float8_e5m2", pending=(x,)):
        x.to(dtype="float8_e5m2")
    with raises_at_op(errors.DTypeError, "complex64"):
        x.to(np.complex64)
    with raises_at_op(errors.DTypeError, "add", "complex"):
        x + 1j
    with raises_at_op(errors.DTypeError, "mul", "str"):
        x * "a"
    with raises_at_op(errors.DTypeError, "~", "float32"):
        _ = ~x
    with raises_at_op(errors.DTypeError, "mean", "int64"):
        i.mean()
    with raises_at_op(errors.DTypeError, "max", "bool"):
        b.amax()
    with raises_at_op(errors.DTypeError, "neg", "bool"):
        _ = -b
    with raises_at_op(errors.DTypeError, "sub", "bool"):
        b - b
    with raises_at_op(errors.DTypeError, "gather", "float32"):
        x.gather(1, lv.tensor([[0.0, 1.0, 2.0]]))
    with raises_at_op(errors.DTypeError, "index", "float32"):
        operator.index(lv.tensor(1.0))
    with raises_at_op(errors.DTypeError, "cross_entropy", "float32"):
        F.cross_entropy(x, lv.tensor([0.0, 1.0]))
    with raises_at_op(errors.DTypeError, "floating-point", "int64"):
        lv.rand(2, dtype=lv.int64)
    with raises_at_op(errors.DTypeError, "floating-point", "int64"):
        lv.randn_like(i)


def test_only_floating_tensors_require_grad():
    with raises_at_op(errors.DTypeError, "grad", "int64"):
        lv.tensor([1, 2], requires_grad=True)
    with raises_at_op(errors.DTypeError, "grad", "bool"):
        lv.tensor([True]).requires_grad_()


# ============================================================ autograd
def test_autograd_errors():
    x = lv.tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2.0
    with raises_at_op(errors.AutogradError, "scalar", "(2, 3)", pending=(y,)):
        y.backward()
    with raises_at_op(errors.AutogradError, "grad shape", "(3,)", "(2, 3)"):
        y.backward(lv.ones(3))
    with raises_at_op(errors.AutogradError, "does not require grad"):
        lv.ones(2).sum().backward()


# ========================================================== unsupported
def test_unsupported_indexing_and_devices():
    x = _lazy(3, 3)
    # Boolean masks and several index tensors are supported now (tests/test_indexing.py).
    with raises_at_op(errors.UnsupportedOpError, "scatter", "multiply", pending=(x,)):
        x.scatter(0, lv.tensor([[0, 1, 2]]), lv.ones(1, 3), reduce="multiply")
    with raises_at_op(errors.UnsupportedOpError, "linalg.eig", "complex", pending=(x,)):
        lv.linalg.eig(x)
    with raises_at_op(errors.ShapeError, "linalg.inv", "(3, 2)", pending=(x,)):
        lv.linalg.inv(x[:, :2])
    if not lv.cuda.is_available():
        with raises_at_op(errors.DeviceError, "not available"):
            x.to("cuda")
    with raises_at_op(errors.DeviceError, "one GPU"):
        x.to("cuda:1")
    with raises_at_op(errors.DeviceError, "unknown device 'tpu'"):
        lv.zeros(2, device="tpu")


def test_errors_leave_the_session_usable(mode):
    """After a raised error, the same ops with good input run (and compile) normally."""
    x = lv.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    with pytest.raises(errors.ShapeError):
        x + lv.ones(4)
    with pytest.raises(errors.IndexError):
        x.gather(1, lv.tensor([[9, 0, 0], [0, 0, 0]]))
    y = (x + lv.ones(3)).gather(1, lv.tensor([[2, 0, 0], [1, 1, 1]]))
    np.testing.assert_array_equal(y.numpy(), [[3, 1, 1], [5, 5, 5]])


def test_data_loading_and_sampling_arguments_raise_argument_errors():
    """A DataLoader of batch size 0, a random_split whose lengths do not add up and a
    multinomial with a negative probability raise ArgumentError (a ValueError, as PyTorch's)
    naming the function."""
    from lazyvic.errors import ArgumentError
    from lazyvic.utils.data import DataLoader, TensorDataset, random_split

    data = TensorDataset(lv.arange(6))
    with pytest.raises(ArgumentError, match="batch_size should be a positive integer"):  # PyTorch's words
        DataLoader(data, batch_size=0)
    with pytest.raises(ArgumentError, match="random_split"):
        random_split(data, [2, 2])
    with pytest.raises(ArgumentError, match="multinomial"):
        lv.multinomial(lv.tensor([0.5, -0.1, 0.6]), 1)
