"""conv2d, the 2-D pools, batch norm (functional and modules) and ResNet-18 against PyTorch
(tests/fixtures/torch_vision.npz).

The fixture file is made by tests/fixtures/make_vision_fixtures.py; these tests
need only NumPy. Gradients are those of ``sum(output * cotangent)``, as the
script computed them. The fixture comparisons run on the interpreter (a few also
through the compiler, with the ``mode`` fixture: Numba compiles each new shape
slowly); the finite-difference checks run in float64 on the interpreter.
"""

import math

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _oracle import check_vjp
from _resnet_weights import resnet_state

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import ArgumentError, DTypeError, ShapeError
from lazyvic.models import resnet18
from lazyvic.runtime.config import config

FIXTURE = "torch_vision.npz"
TOL = dict(rtol=2e-5, atol=2e-5)  # float32 sums of up to 36 products, and their VJPs
SPEC = torch_fixtures.spec(FIXTURE)
COMPILED = {"conv_groups2", "max_k3_s2_p1", "avg_k3_s2_p1_exclude_pad"}  # also run through the compiler


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _cases(cases):
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in cases
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


def _assert_close(t, expected, what):
    np.testing.assert_allclose(t.numpy(), expected, **TOL, err_msg=what)


# ================================================================= conv2d
@pytest.mark.parametrize("case, mode", _cases(SPEC["conv"]), indirect=["mode"])
def test_conv2d_output_and_gradients_match_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref["x"], requires_grad=True)
    w = lazyvic.tensor(ref[f"{name}.weight"], requires_grad=True)
    b = lazyvic.tensor(ref[f"{name}.bias"], requires_grad=True) if case["bias"] else None
    y = F.conv2d(x, w, b, **case["kwargs"])
    assert y.shape == ref[f"{name}.out"].shape and y.dtype is lazyvic.float32
    (y * lazyvic.tensor(ref[f"{name}.cotangent"])).sum().backward()
    _assert_close(y, ref[f"{name}.out"], f"{name} output")
    _assert_close(x.grad, ref[f"{name}.grad.input"], f"{name} grad of input")
    _assert_close(w.grad, ref[f"{name}.grad.weight"], f"{name} grad of weight")
    if b is not None:
        _assert_close(b.grad, ref[f"{name}.grad.bias"], f"{name} grad of bias")


def test_conv2d_module_uses_pytorch_names_init_and_functional(ref):
    lazyvic.manual_seed(0)
    conv = nn.Conv2d(4, 6, 3, groups=2)
    assert list(conv.state_dict()) == SPEC["state_dict_keys"]["Conv2d"]
    assert conv.weight.shape == (6, 2, 3, 3) and conv.bias.shape == (6,)
    fan_in = 2 * 3 * 3
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) gives the same bound as the bias
    assert np.abs(conv.weight.numpy()).max() <= bound and np.abs(conv.bias.numpy()).max() <= bound
    assert conv.weight.numpy().std() > bound / 4  # drawn, not constant
    case = next(c for c in SPEC["conv"] if c["name"] == "conv_plain")
    conv = nn.Conv2d(4, 6, 3)
    conv.load_state_dict({"weight": ref["conv_plain.weight"], "bias": ref["conv_plain.bias"]})
    assert case["kwargs"] == {}
    _assert_close(conv(lazyvic.tensor(ref["x"])), ref["conv_plain.out"], "Conv2d output")
    assert nn.Conv2d(4, 2, (1, 2), bias=False).bias is None


_RNG = np.random.default_rng(3)
_X = _RNG.uniform(-1, 1, (1, 2, 4, 4))
_W = _RNG.uniform(-1, 1, (2, 1, 2, 2))
_B = _RNG.uniform(-1, 1, 2)


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(stride=2, padding=1, groups=2), dict(dilation=2, padding=(1, 0), groups=2)],
    ids=["plain", "stride_pad_groups", "dilation_groups"],
)
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # hundreds of evaluations: interpret them
def test_conv2d_vjp_matches_finite_differences(kwargs, mode):
    w = _W if kwargs.get("groups") else np.concatenate([_W, _W[:, :1] * 0.5], axis=1)
    check_vjp(lambda x, w, b: F.conv2d(x, w, b, **kwargs), _X, w, _B)


def test_conv2d_shape_errors_name_the_op_and_shapes():
    x = lazyvic.zeros(2, 4, 7, 7)
    with pytest.raises(ShapeError, match=r"conv2d.*\(2, 4, 7, 7\).*\(6, 3, 3, 3\)"):
        F.conv2d(x, lazyvic.zeros(6, 3, 3, 3))  # channels do not match
    with pytest.raises(ShapeError, match="conv2d.*groups=3"):
        F.conv2d(x, lazyvic.zeros(6, 2, 3, 3), groups=3)
    with pytest.raises(ShapeError, match="conv2d.*groups=2"):
        F.conv2d(x, lazyvic.zeros(5, 2, 3, 3), groups=2)  # out channels not divisible
    with pytest.raises(ShapeError, match="conv2d.*kernel extent 9.*padded input size 7"):
        F.conv2d(x, lazyvic.zeros(6, 4, 9, 9))
    with pytest.raises(ShapeError, match="conv2d.*kernel extent 9"):
        F.conv2d(x, lazyvic.zeros(6, 4, 3, 3), dilation=4)
    with pytest.raises(ShapeError, match="conv2d.*bias"):
        F.conv2d(x, lazyvic.zeros(6, 4, 3, 3), lazyvic.zeros(5))
    with pytest.raises(ShapeError, match=r"conv2d.*\(1, 4, 7, 7, 1\)"):
        F.conv2d(lazyvic.zeros(1, 4, 7, 7, 1), lazyvic.zeros(6, 4, 3, 3))


def _conv_case(seed=5):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, 4, 9, 7)).astype(np.float32), rng.standard_normal((6, 2, 3, 2)).astype(np.float32)


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_conv2d_is_one_primitive_with_the_same_bits_interpreted_and_compiled(mode):
    """conv2d records one conv2d node (no im2col of slices); the interpreter and the compiled
    step (im2col kernel + the same BLAS call) give the same bits, run after run."""
    from _oracle import pending_ops

    x, w = _conv_case()
    kwargs = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    y = F.conv2d(lazyvic.tensor(x), lazyvic.tensor(w), **kwargs)
    assert "conv2d" in pending_ops(y) and not pending_ops(y) & {"slice", "pad", "matmul"}
    first = y.numpy()
    expected = F.conv2d(lazyvic.tensor(x.astype(np.float64)), lazyvic.tensor(w.astype(np.float64)), **kwargs)
    np.testing.assert_allclose(first, expected.numpy(), rtol=1e-5, atol=1e-5)
    for _ in range(2):  # hot mode's second run is compiled; bits must not change
        np.testing.assert_array_equal(F.conv2d(lazyvic.tensor(x), lazyvic.tensor(w), **kwargs).numpy(), first)
    from lazyvic.ops.conv import _reference

    at = dict(stride=(2, 1), padding=(1, 1, 2, 2), dilation=(1, 2), groups=2)
    np.testing.assert_array_equal(_reference([x, w], at), first)


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_conv2d_leaves_out_taps_that_read_only_padding(mode):
    """On a 1x1 input a padded 3x3 convolution reads the input through its centre tap only
    (ResNet-18's last stage at 32x32): the other taps are left out of the product."""
    from lazyvic.ops.conv import taps

    assert taps((2, 4, 1, 1), (5, 4, 3, 3), dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)), (1, 1)) == (
        [1],
        [1],
    )
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((2, 4, 1, 1)), rng.standard_normal((5, 4, 3, 3))
    xt, wt = lazyvic.tensor(x, requires_grad=True), lazyvic.tensor(w, requires_grad=True)
    y = F.conv2d(xt, wt, padding=1)
    np.testing.assert_allclose(y.numpy()[:, :, 0, 0], x[:, :, 0, 0] @ w[:, :, 1, 1].T, rtol=1e-12)
    (y * 2.0).sum().backward()
    grad_w = np.zeros_like(w)
    grad_w[:, :, 1, 1] = 2 * x[:, :, 0, 0].sum(0)
    np.testing.assert_allclose(wt.grad.numpy(), grad_w, rtol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy()[:, :, 0, 0], np.tile(2 * w[:, :, 1, 1].sum(0), (2, 1)), rtol=1e-12)


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_conv2d_large_column_matrices_are_built_in_chunks_of_images(mode, monkeypatch):
    """Above CHUNK_BYTES the im2col matrix and its product go CHUNK_COLUMNS columns (whole images)
    at a time: 2 images per chunk here, the last chunk 1; the same values and, interpreted or
    compiled, the same bits."""
    from lazyvic.ops import conv

    monkeypatch.setattr(conv, "CHUNK_BYTES", 0)
    monkeypatch.setattr(conv, "CHUNK_COLUMNS", 2 * 6 * 5)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((5, 3, 6, 5)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    assert conv.images_per_chunk(5, 27, 30, 4) == 2
    got = F.conv2d(lazyvic.tensor(x), lazyvic.tensor(w), padding=1).numpy()
    for _ in range(2):
        np.testing.assert_array_equal(F.conv2d(lazyvic.tensor(x), lazyvic.tensor(w), padding=1).numpy(), got)
    at = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    np.testing.assert_array_equal(conv._reference([x, w], at), got)
    expected = F.conv2d(lazyvic.tensor(x, dtype=lazyvic.float64), lazyvic.tensor(w, dtype=lazyvic.float64), padding=1)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["always"], indirect=True)
@pytest.mark.parametrize(
    "shape, kwargs",
    [
        pytest.param((3, 3, 21, 20), dict(stride=2, padding=3), id="stem-7x7-s2"),
        pytest.param((2, 4, 9, 10), dict(stride=1, padding=1), id="3x3-s1"),
        pytest.param((2, 4, 11, 25), dict(stride=(1, 3), padding=(2, 1), dilation=(1, 2)), id="s3-dilated"),
        pytest.param((2, 4, 8, 19), dict(stride=(2, 2), padding=(0, 2), groups=2), id="groups-s2"),
        pytest.param((2, 4, 9, 17), dict(stride=2, padding=0), id="s2-no-padding"),
    ],
)
def test_conv2d_compiled_im2col_gives_the_reference_bits(mode, shape, kwargs):
    """The compiled im2col (a phase-split padded buffer; copies of whole output rows from 8
    columns on, gathers below) fills the same column matrix as the NumPy reference: the same
    bits, for strides, dilations, asymmetric paddings and groups, run after run."""
    from lazyvic.ops import conv

    rng = np.random.default_rng(11)
    groups = kwargs.get("groups", 1)
    k = 7 if shape[1] == 3 else 3
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((4, shape[1] // groups, k, k)).astype(np.float32)
    got = F.conv2d(lazyvic.tensor(x), lazyvic.tensor(w), **kwargs).numpy()
    np.testing.assert_array_equal(F.conv2d(lazyvic.tensor(x), lazyvic.tensor(w), **kwargs).numpy(), got)
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    (ph, pw) = pair(kwargs.get("padding", 0))
    at = dict(
        stride=pair(kwargs.get("stride", 1)),
        padding=(ph, ph, pw, pw),
        dilation=pair(kwargs.get("dilation", 1)),
        groups=groups,
    )
    np.testing.assert_array_equal(conv._reference([x, w], at), got)
    expected = F.conv2d(lazyvic.tensor(x, dtype=lazyvic.float64), lazyvic.tensor(w, dtype=lazyvic.float64), **kwargs)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["always"], indirect=True)
def test_conv2d_gradients_compiled_match_the_interpreter(mode):
    """The VJP (conv2d of the dilated, padded gradient by the flipped weight; conv2d of the
    input by the gradient) through the compiler, against the interpreter in float64."""
    x, w = _conv_case(6)
    g = np.random.default_rng(7).standard_normal((3, 6, 5, 3))
    kwargs = dict(stride=2, padding=(1, 0), dilation=(1, 2), groups=2)

    def grads(dtype, how):
        prev = lazyvic.runtime.config.config.compile
        lazyvic.runtime.config.config.compile = how
        try:
            xt = lazyvic.tensor(x, dtype=dtype, requires_grad=True)
            wt = lazyvic.tensor(w, dtype=dtype, requires_grad=True)
            (F.conv2d(xt, wt, **kwargs) * lazyvic.tensor(g, dtype=dtype)).sum().backward()
            return xt.grad.numpy(), wt.grad.numpy()
        finally:
            lazyvic.runtime.config.config.compile = prev

    for got, want in zip(grads(lazyvic.float32, "always"), grads(lazyvic.float64, "never")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ================================================================= pooling
@pytest.mark.parametrize("case, mode", _cases(SPEC["pool"]), indirect=["mode"])
def test_pool_output_and_gradient_match_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref["x"], requires_grad=True)
    y = getattr(F, case["fn"])(x, **case["kwargs"])
    assert y.shape == ref[f"{name}.out"].shape
    (y * lazyvic.tensor(ref[f"{name}.cotangent"])).sum().backward()
    _assert_close(y, ref[f"{name}.out"], f"{name} output")
    _assert_close(x.grad, ref[f"{name}.grad.input"], f"{name} grad of input")


def test_pool_modules_match_the_functions(ref):
    x = lazyvic.tensor(ref["x"])
    _assert_close(nn.MaxPool2d(3, 2, 1)(x), ref["max_k3_s2_p1.out"], "MaxPool2d")
    _assert_close(nn.AvgPool2d(3, 2, 1, count_include_pad=False)(x), ref["avg_k3_s2_p1_exclude_pad.out"], "AvgPool2d")
    _assert_close(nn.AvgPool2d(2)(x), ref["avg_k2.out"], "AvgPool2d")
    _assert_close(nn.AdaptiveAvgPool2d((3, 2))(x), ref["adaptive_3x2.out"], "AdaptiveAvgPool2d")
    _assert_close(nn.AdaptiveAvgPool2d(1)(x), ref["x"].mean((2, 3), keepdims=True), "global average")


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_max_pool2d_without_gradient_gives_the_same_bits(ref, mode):
    """Without autograd max_pool2d is a chain of maximum over the windows (no stack): the same
    values as the stack/amax form that autograd uses (a maximum rounds nothing)."""
    x = lazyvic.tensor(ref["x"], requires_grad=True)
    with_grad = F.max_pool2d(x, 3, 2, 1)
    with lazyvic.no_grad():
        without = F.max_pool2d(x, 3, 2, 1)
    np.testing.assert_array_equal(without.numpy(), with_grad.numpy())
    np.testing.assert_array_equal(F.max_pool2d(lazyvic.tensor(ref["x"]), 2).numpy(), F.max_pool2d(x, 2).numpy())


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_max_pool2d_gives_the_gradient_to_the_first_of_tied_maxima(mode):
    """max_pool2d is one primitive; its VJP gives a window's gradient to its first maximum in
    row-major order (PyTorch's rule: the index return_indices=True gives), and overlapping
    windows add up."""
    from _oracle import pending_ops

    a = np.array([[1.0, 2.0, 3.0, 0.0], [2.0, 3.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    x = lazyvic.tensor(a.reshape(1, 1, 3, 4), requires_grad=True)
    y = F.max_pool2d(x, (2, 2), stride=(1, 2), padding=0)
    assert "max_pool2d" in pending_ops(y)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy()[0, 0], [[3, 3], [3, 3]])
    grad = np.array([[0, 0, 1, 0], [0, 2, 0, 1], [0, 0, 0, 0]])
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], grad)


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_max_pool2d_of_an_empty_batch_has_an_empty_gradient(mode):
    """A batch of no images (PyTorch gives an empty output and gradient)."""
    x = lazyvic.tensor(np.zeros((0, 3, 4, 4), np.float32), requires_grad=True)
    y = F.max_pool2d(x, 2)
    y.sum().backward()
    assert y.shape == (0, 3, 2, 2) and x.grad.shape == (0, 3, 4, 4)


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_max_pool2d_return_indices_gives_pytorchs_flat_positions(mode):
    """nn.MaxPool2d(return_indices=True): (values, int64 positions h*W + w in each plane), the
    first of tied maxima; batched and unbatched."""
    a = np.array([[1.0, 2.0, 3.0, 0.0], [2.0, 3.0, 1.0, 3.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    x = lazyvic.tensor(np.stack([a, -a]).reshape(2, 1, 3, 4))
    values, index = lazyvic.nn.MaxPool2d((2, 2), stride=(1, 2), return_indices=True)(x)
    assert index.dtype == lazyvic.int64
    np.testing.assert_array_equal(index.numpy()[:, 0], [[[5, 2], [5, 7]], [[0, 3], [8, 10]]])
    np.testing.assert_array_equal(values.numpy()[:, 0], [[[3, 3], [3, 3]], [[-1, 0], [0, 0]]])
    v1, i1 = F.max_pool2d(x[0], (2, 2), (1, 2), return_indices=True)
    np.testing.assert_array_equal(i1.numpy(), index.numpy()[0])
    np.testing.assert_array_equal(v1.numpy(), values.numpy()[0])


@pytest.mark.parametrize("mode", ["always"], indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "kernel, stride, padding",
    [((3, 3), (2, 2), (1, 1)), ((3, 3), (1, 1), (1, 0)), ((2, 2), (2, 2), (0, 0)), ((2, 3), (1, 2), (1, 1))],
)
def test_max_pool2d_compiled_gives_the_reference_bits(mode, dtype, kernel, stride, padding):
    """The compiled max_pool2d step against the NumPy reference, bit for bit: ties of -0.0 and
    0.0 keep the first in row-major order, -inf and inf pass through, and a NaN wins its window
    (an input with a NaN takes the kernel's NaN-aware loop). The indices (return_indices, the
    gradient's positions) are the first match in row-major order, a NaN window's last NaN."""
    from lazyvic.ops.pool import _reference, indices_reference

    rng = np.random.default_rng(12)
    x = rng.choice(np.array([-1.0, -0.0, 0.0, 0.5, -np.inf, np.inf], dtype=dtype), size=(2, 3, 9, 11))
    at = dict(kernel=kernel, stride=stride, padding=padding)
    for case in (x, np.where(rng.random(x.shape) < 0.05, np.nan, x).astype(dtype)):
        with lazyvic.no_grad():
            got, index = F.max_pool2d(lazyvic.tensor(case), kernel, stride, padding, return_indices=True)
            got, index = got.numpy(), index.numpy()
        expected = _reference([case], at)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
        np.testing.assert_array_equal(index, indices_reference([case, expected], at))


@pytest.mark.parametrize("mode", ["always"], indirect=True)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_average_pool_and_its_gradient_give_the_reference_bits(mode, dtype):
    """A global average pool (adaptive to 1x1, or a kernel the size of the plane) sums eight
    planes side by side in the compiled kernel: each plane from +0.0 in row-major order as the
    reference, so the same bits (with -0.0, infinities, NaNs, and a plane count that is not a
    multiple of eight); its gradient is +0.0 + g / divisor at every position (a -0.0 gradient
    gives +0.0, as the reference's sum does)."""
    from lazyvic.ops import avg_pool

    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 7, 5, 6)).astype(dtype) * 1e4
    x[0, 0] = -0.0
    x[1, 2, 1, 1], x[2, 3, 0, 0], x[2, 4, 4, 5] = np.inf, -np.inf, np.nan
    windows = avg_pool.adaptive_windows({}, (5, 6), (1, 1))
    expected = avg_pool.window_mean(x, windows)
    for pool in (lambda t: F.adaptive_avg_pool2d(t, 1), lambda t: F.avg_pool2d(t, (5, 6))):
        with lazyvic.no_grad():
            got = pool(lazyvic.tensor(x)).numpy()
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    g = rng.standard_normal((3, 7, 1, 1)).astype(dtype)
    g[0, 1] = -0.0
    t = lazyvic.tensor(np.zeros_like(x), requires_grad=True)
    (F.adaptive_avg_pool2d(t, 1) * lazyvic.tensor(g)).sum().backward()
    want = np.broadcast_to(dtype(0) + g / dtype(30), x.shape)
    np.testing.assert_array_equal(t.grad.numpy(), want)
    np.testing.assert_array_equal(np.signbit(t.grad.numpy()), np.signbit(want))


_P = np.random.default_rng(4).permutation(2 * 5 * 5).reshape(1, 2, 5, 5) / 10.0  # distinct: no ties in max


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(lambda x: F.max_pool2d(x, 3, 2, 1), id="max"),
        pytest.param(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), id="avg_exclude_pad"),
        pytest.param(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), id="adaptive"),
    ],
)
@pytest.mark.parametrize("mode", ["never"], indirect=True)
def test_pool_vjp_matches_finite_differences(fn, mode):
    check_vjp(fn, _P)


def test_pool_errors():
    x = lazyvic.zeros(1, 2, 3, 3)
    with pytest.raises(ShapeError, match="max_pool2d.*kernel extent 4"):
        F.max_pool2d(x, 4)
    with pytest.raises(ShapeError, match="avg_pool2d"):
        F.avg_pool2d(lazyvic.zeros(3, 3), 2)
    with pytest.raises(ValueError, match="max_pool2d: padding"):
        F.max_pool2d(x, 2, padding=2)


@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (
            lambda: F.avg_pool2d(lazyvic.zeros(3, 3), 2),
            ShapeError,
            r"avg_pool2d: expected input \(N, C, H, W\).*\(3, 3\)",
        ),
        (
            lambda: F.avg_pool2d(lazyvic.zeros(1, 2, 3, 3), 4),
            ShapeError,
            r"avg_pool2d: kernel \(4, 4\).*larger than the padded input \(1, 2, 3, 3\)",
        ),
        (lambda: F.avg_pool2d(lazyvic.zeros(1, 2, 5, 5), 2, padding=2), ArgumentError, "avg_pool2d: padding"),
        (
            lambda: F.avg_pool2d(lazyvic.zeros(1, 2, 5, 5, dtype=lazyvic.int64), 2),
            DTypeError,
            "avg_pool2d: expected a floating-point input, got int64",
        ),
        (lambda: F.avg_pool2d(lazyvic.zeros(1, 2, 5, 5), 2, divisor_override=0), ArgumentError, "divisor_override"),
        (lambda: F.avg_pool1d(lazyvic.zeros(1, 2, 3, 3), 2), ShapeError, r"avg_pool1d: expected input \(N, C, L\)"),
        (lambda: F.adaptive_avg_pool2d(lazyvic.zeros(1, 2, 5, 5), (0, 2)), ShapeError, "adaptive_avg_pool2d: output"),
        (
            lambda: F.adaptive_avg_pool2d(lazyvic.zeros(2, 5, dtype=lazyvic.int32), 2),
            ShapeError,
            r"adaptive_avg_pool2d: expected input \(N, C, H, W\)",
        ),
        (
            lambda: F.adaptive_avg_pool2d(lazyvic.zeros(1, 2, 5, 5, dtype=lazyvic.int32), 2),
            DTypeError,
            "adaptive_avg_pool2d: expected a floating-point input, got int32",
        ),
        (lambda: F.adaptive_avg_pool2d(lazyvic.zeros(1, 2, 5, 5), (1, 2, 3)), ArgumentError, "output_size"),
    ],
)
def test_average_and_adaptive_pool_errors_name_the_op(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# ------------------------------------------------- pool options (tests/fixtures/torch_pools.npz)
POOLS = "torch_pools.npz"  # made by tests/fixtures/make_pool_fixtures.py


@pytest.fixture(scope="module")
def pools():
    return torch_fixtures.arrays(POOLS)


@pytest.mark.parametrize("case", torch_fixtures.spec(POOLS)["pool"], ids=lambda c: c["name"])
def test_pool_options_match_torch_and_compile_to_the_interpreters_bits(pools, case, monkeypatch):
    """ceil_mode (a last window the padding clips, or dropped), count_include_pad, non-square
    windows, a stride over the kernel, divisor_override; adaptive windows of uneven and
    overlapping sizes; the adaptive max pools' gradient to each window's first maximum; max_pool2d
    of an input with NaNs (value, index and gradient at a window's last NaN): outputs, indices and
    input gradients as PyTorch's, and the compiled plan gives the interpreter's bits."""
    name = case["name"]
    results = {}
    for mode in ("never", "always"):
        monkeypatch.setattr(config, "compile", mode)
        x = lazyvic.tensor(pools[case["input"]], requires_grad=True)
        y = getattr(F, case["fn"])(x, **case["kwargs"])
        assert y.shape == pools[f"{name}.out"].shape
        (y * lazyvic.tensor(pools[f"{name}.cotangent"])).sum().backward()
        results[mode] = (y.numpy(), x.grad.numpy())
        _assert_close(y, pools[f"{name}.out"], f"{name} output ({mode})")
        _assert_close(x.grad, pools[f"{name}.grad.input"], f"{name} grad of input ({mode})")
    for got, want in zip(results["always"], results["never"]):
        assert got.tobytes() == want.tobytes(), f"{name}: the compiled plan's bits differ from the interpreter's"
    if f"{name}.indices" in pools:  # the max pools' return_indices=True
        y, idx = getattr(F, case["fn"])(lazyvic.tensor(pools[case["input"]]), return_indices=True, **case["kwargs"])
        assert idx.dtype == lazyvic.int64 and np.array_equal(idx.numpy(), pools[f"{name}.indices"]), name
        assert np.array_equal(y.numpy(), pools[f"{name}.out"], equal_nan=True)


def test_adaptive_max_pool_indices_are_each_windows_first_maximum(mode):
    """Against the definition: PyTorch's windows, each maximum's position h * W + w, the first in
    row-major order of ties (values rounded to make many); unbatched and module forms."""
    rng = np.random.default_rng(3)
    for shape, out in [((2, 3, 7, 9), (3, 4)), ((1, 2, 8, 8), (4, 4)), ((2, 1, 6, 5), (5, 3)), ((1, 1, 5, 6), 1)]:
        x = np.round(rng.standard_normal(shape) * 1.5).astype(np.float32)
        oh, ow = (out, out) if isinstance(out, int) else out
        want = np.empty((*shape[:2], oh, ow), np.int64)
        for i in range(oh):
            h0, h1 = (i * shape[2]) // oh, -(-((i + 1) * shape[2]) // oh)
            for j in range(ow):
                w0, w1 = (j * shape[3]) // ow, -(-((j + 1) * shape[3]) // ow)
                window = x[:, :, h0:h1, w0:w1].reshape(*shape[:2], -1)
                first = window.argmax(-1)  # NumPy's argmax: the first maximum in row-major order
                want[:, :, i, j] = (h0 + first // (w1 - w0)) * shape[3] + w0 + first % (w1 - w0)
        y, idx = F.adaptive_max_pool2d(lazyvic.tensor(x), out, return_indices=True)
        assert np.array_equal(idx.numpy(), want), shape
        assert np.array_equal(y.numpy(), F.adaptive_max_pool2d(lazyvic.tensor(x), out).numpy())
    x = lazyvic.tensor(np.round(rng.standard_normal((3, 9, 7))).astype(np.float32))
    y, idx = nn.AdaptiveMaxPool2d((2, 3), return_indices=True)(x)
    yb, idxb = F.adaptive_max_pool2d(x.unsqueeze(0), (2, 3), return_indices=True)
    assert idx.shape == (3, 2, 3) and np.array_equal(idx.numpy(), idxb.numpy()[0])
    v1, i1 = nn.AdaptiveMaxPool1d(4, return_indices=True)(x[0])
    assert i1.shape == (9, 4) and np.array_equal(np.take_along_axis(x[0].numpy(), i1.numpy(), 1), v1.numpy())


# ================================================================= batch norm
def _bn_step(ref, name, x, rm, rv, training):
    xt = lazyvic.tensor(x, requires_grad=True)
    w = lazyvic.tensor(ref["bn.weight"], requires_grad=True)
    b = lazyvic.tensor(ref["bn.bias"], requires_grad=True)
    spec = SPEC["bn"]
    y = F.batch_norm(xt, rm, rv, w, b, training=training, momentum=spec["momentum"], eps=spec["eps"])
    (y * lazyvic.tensor(ref[f"{name}.cotangent"])).sum().backward()
    _assert_close(y, ref[f"{name}.out"], f"{name} output")
    for what, t in (("input", xt), ("weight", w), ("bias", b)):
        _assert_close(t.grad, ref[f"{name}.grad.{what}"], f"{name} grad of {what}")
    _assert_close(rm, ref[f"{name}.running_mean"], f"{name} running_mean")
    _assert_close(rv, ref[f"{name}.running_var"], f"{name} running_var")


def test_batch_norm_train_and_eval_match_torch(ref, mode):
    rm, rv = lazyvic.tensor(ref["bn.running_mean0"]), lazyvic.tensor(ref["bn.running_var0"])
    _bn_step(ref, "bn_train1", ref["x"], rm, rv, True)
    _bn_step(ref, "bn_train2", ref["bn.x2"], rm, rv, True)
    _bn_step(ref, "bn_eval", ref["x"], rm, rv, False)


def test_batchnorm2d_module_matches_torch(ref):
    bn = nn.BatchNorm2d(4)
    assert list(bn.state_dict()) == SPEC["state_dict_keys"]["BatchNorm2d"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    bn.load_state_dict(
        {
            "weight": ref["bn.weight"],
            "bias": ref["bn.bias"],
            "running_mean": ref["bn.running_mean0"],
            "running_var": ref["bn.running_var0"],
            "num_batches_tracked": np.array(0, dtype=np.int64),
        }
    )
    _assert_close(bn(lazyvic.tensor(ref["x"])), ref["bn_train1.out"], "train output")
    bn(lazyvic.tensor(ref["bn.x2"]))
    assert int(bn.num_batches_tracked.item()) == 2
    _assert_close(bn.running_mean, ref["bn_train2.running_mean"], "running_mean")
    _assert_close(bn.running_var, ref["bn_train2.running_var"], "running_var")
    bn.eval()
    _assert_close(bn(lazyvic.tensor(ref["x"])), ref["bn_eval.out"], "eval output")
    assert int(bn.num_batches_tracked.item()) == 2
    no_stats = nn.BatchNorm2d(4, affine=False, track_running_stats=False).eval()
    assert list(no_stats.state_dict()) == []
    x = ref["x"].astype(np.float64)
    expected = (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5)
    _assert_close(no_stats(lazyvic.tensor(ref["x"])), expected, "batch statistics without running stats")


@pytest.mark.parametrize("mode", ["never"], indirect=True)
def test_batch_norm_vjp_matches_finite_differences(mode):
    rng = np.random.default_rng(6)
    x, w, b = rng.normal(size=(2, 3, 2, 2)), rng.normal(size=3), rng.normal(size=3)
    check_vjp(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)
    stats = (rng.normal(size=3), rng.uniform(0.5, 1.5, size=3))
    check_vjp(lambda x, w, b: F.batch_norm(x, *(lazyvic.tensor(s) for s in stats), w, b), x, w, b)


def test_batch_norm_errors():
    x = lazyvic.zeros(2, 3, 4, 4)
    with pytest.raises(ShapeError, match=r"batch_norm: running_mean shape \(4,\)"):
        F.batch_norm(x, lazyvic.zeros(4), lazyvic.ones(3))
    with pytest.raises(ValueError, match="batch_norm.*more than 1 value"):
        F.batch_norm(lazyvic.zeros(1, 3, 1, 1), None, None, training=True)
    with pytest.raises(ShapeError, match="BatchNorm2d"):
        nn.BatchNorm2d(4)(x)


# ================================================================= ResNet-18


@pytest.mark.parametrize("case", SPEC["resnet"], ids=lambda c: c["name"])
def test_resnet18_matches_torchvision_layout_and_outputs(ref, case):
    name, cfg = case["name"], SPEC["resnet_config"]
    model = resnet18(cfg["num_classes"], width=cfg["width"], small_input=case["small_input"])
    keys_and_shapes = SPEC["resnet_state_dict"][name]
    assert [[k, list(v.shape)] for k, v in model.state_dict().items()] == keys_and_shapes
    state = resnet_state(keys_and_shapes, cfg["seed"] + SPEC["resnet"].index(case))
    model.load_state_dict(state)
    x = lazyvic.tensor(ref[f"{name}.x"])
    _assert_close(model.eval()(x), ref[f"{name}.eval_out"], f"{name} eval output")
    _assert_close(model.train()(x), ref[f"{name}.train_out"], f"{name} train output")
    _assert_close(model.bn1.running_mean, ref[f"{name}.bn1.running_mean"], "bn1 running_mean")
    _assert_close(model.bn1.running_var, ref[f"{name}.bn1.running_var"], "bn1 running_var")
    # The input gradient through batch statistics of 2 values per channel is ill-conditioned; the
    # fixture has it in float64 (see make_vision_fixtures.py).
    model.load_state_dict(state)
    model = model.double().train()
    x = lazyvic.tensor(ref[f"{name}.x"], dtype=lazyvic.float64, requires_grad=True)
    (model(x) * lazyvic.tensor(ref[f"{name}.cotangent"], dtype=lazyvic.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.input64"], rtol=1e-7, atol=1e-10)


def test_resnet18_default_has_torchvision_parameter_count():
    model = resnet18()
    assert sum(p.numel() for p in model.parameters()) == 11_689_512  # torchvision.models.resnet18()
    assert len(model.state_dict()) == 122 and model.fc.weight.shape == (1000, 512)
