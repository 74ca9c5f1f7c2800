"""``F.pixel_shuffle``, ``F.pixel_unshuffle``, ``F.channel_shuffle``, the modules ``PixelShuffle``,
``PixelUnshuffle``, ``ChannelShuffle`` and the padding modules (``ZeroPad1d`` ... ``ReplicationPad2d``):
PyTorch code run with ``torch`` bound to ``lazyvic`` against real PyTorch 2.13's values and
gradients (tests/fixtures/torch_extra_functions.npz, made by make_extra_function_fixtures.py),
PyTorch's attributes and reprs, VJPs against finite differences, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from _torch_fixtures import arrays, spec

import lazyvic
from lazyvic import errors, nn
from lazyvic.nn import functional as F
from tests._oracle import check_vjp

pytestmark = pytest.mark.usefixtures("interpreted")

FIXTURE = "torch_extra_functions.npz"
DATA = arrays(FIXTURE)
PREFIXES = ("pixel_", "channel_", "module_", "zero_pad", "constant_pad", "reflection_pad", "replication_pad")
CASES = {case["name"]: case for case in spec(FIXTURE) if case["name"].startswith(PREFIXES)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pytorch_code_gives_pytorch_results(name):
    case = CASES[name]
    env = {"torch": lazyvic}
    for k in case["inputs"]:
        env[k] = lazyvic.tensor(DATA[f"{name}.in.{k}"], requires_grad=k in case["grad"])
    exec(case["code"], env)
    out = env["out"]
    outs = list(out) if isinstance(out, tuple) else [out]
    assert len(outs) == case["outputs"]
    for k, got in enumerate(outs):
        want = DATA[f"{name}.out.{k}"]
        assert got.shape == want.shape and got.dtype.np == want.dtype, f"{name} output {k}: {got.shape} {got.dtype}"
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} output {k}")  # moves and fills: exact
    if case["grad"]:
        w = lazyvic.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(*out.shape)
        (out * w).sum().backward()
        for k in case["grad"]:
            want = DATA[f"{name}.grad.{k}"]
            np.testing.assert_allclose(env[k].grad.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=f"{name} grad {k}")


def test_shuffles_and_pads_vjp():
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 3))
    check_vjp(lambda t: F.pixel_unshuffle(F.pixel_shuffle(t, 2) * t.sum(), 3), x)
    check_vjp(lambda t: F.channel_shuffle(t, 2) * t, x)
    check_vjp(lambda t: nn.ReflectionPad2d((2, -1, 1, 2))(t), x)


# ===================================================== attributes and reprs
@pytest.mark.parametrize(
    "make, padding, value, text",
    [
        (lambda: nn.ZeroPad1d(2), (2, 2), 0.0, "ZeroPad1d((2, 2))"),
        (lambda: nn.ZeroPad2d((1, 2, 3, 4)), (1, 2, 3, 4), 0.0, "ZeroPad2d((1, 2, 3, 4))"),
        (lambda: nn.ConstantPad1d(2, 3.5), (2, 2), 3.5, "ConstantPad1d(padding=(2, 2), value=3.5)"),
        (lambda: nn.ConstantPad2d(1, 3), (1, 1, 1, 1), 3, "ConstantPad2d(padding=(1, 1, 1, 1), value=3)"),
        (lambda: nn.ReflectionPad1d([1, 2]), (1, 2), None, "ReflectionPad1d((1, 2))"),
        (lambda: nn.ReflectionPad2d(1), (1, 1, 1, 1), None, "ReflectionPad2d((1, 1, 1, 1))"),
        (lambda: nn.ReplicationPad1d(2), (2, 2), None, "ReplicationPad1d((2, 2))"),
        (lambda: nn.ReplicationPad2d((1, 0, 2, 0)), (1, 0, 2, 0), None, "ReplicationPad2d((1, 0, 2, 0))"),
    ],
)  # the reprs and attributes PyTorch 2.13 gives
def test_padding_modules_store_padding_as_pytorch(make, padding, value, text):
    m = make()
    assert m.padding == padding and repr(m) == text
    assert getattr(m, "value", None) == value
    assert not list(m.parameters())


def test_shuffle_modules_attributes_and_reprs():
    assert repr(nn.PixelShuffle(2)) == "PixelShuffle(upscale_factor=2)" and nn.PixelShuffle(2).upscale_factor == 2
    assert repr(nn.PixelUnshuffle(3)) == "PixelUnshuffle(downscale_factor=3)"
    assert repr(nn.ChannelShuffle(2)) == "ChannelShuffle(groups=2)" and nn.ChannelShuffle(2).groups == 2
    for name in ("pixel_shuffle", "pixel_unshuffle", "channel_shuffle"):
        assert name in F.__all__ and getattr(lazyvic.nn.functional, name) is getattr(F, name)


def test_constant_padding_keeps_an_integer_dtype():
    out = nn.ConstantPad1d((0, 2), 7)(lazyvic.tensor([1, 2]))
    assert out.dtype == lazyvic.int64 and out.tolist() == [1, 2, 7, 7]


# ================================================================ errors
@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: F.pixel_shuffle(lazyvic.zeros(2, 3), 2), errors.ShapeError, r"pixel_shuffle: expects input to have at least 3 dimensions, got shape \(2, 3\)"),
        (lambda: F.pixel_shuffle(lazyvic.zeros(1, 6, 2, 3), 2), errors.ShapeError, r"pixel_shuffle: .*divisible by upscale_factor\*\*2 = 4, but input.size\(-3\)=6"),
        (lambda: F.pixel_shuffle(lazyvic.zeros(1, 4, 2, 3), 0), errors.ArgumentError, "pixel_shuffle: expects a positive upscale_factor, got 0"),
        (lambda: F.pixel_unshuffle(lazyvic.zeros(1, 2, 4, 5), 2), errors.ShapeError, r"pixel_unshuffle: expects width to be divisible by downscale_factor 2, but input.size\(-1\)=5"),
        (lambda: F.pixel_unshuffle(lazyvic.zeros(1, 2, 3, 4), 2), errors.ShapeError, r"pixel_unshuffle: expects height"),
        (lambda: F.pixel_unshuffle(lazyvic.zeros(4, 4), 2), errors.ShapeError, "pixel_unshuffle: expects input to have at least 3 dimensions"),
        (lambda: F.pixel_unshuffle(lazyvic.zeros(1, 4, 4), 2.0), errors.ArgumentError, "pixel_unshuffle: downscale_factor must be an int"),
        (lambda: F.channel_shuffle(lazyvic.zeros(1, 6, 2), 4), errors.ShapeError, "channel_shuffle: number of channels must be divisible by groups, got 6 channels and 4 groups"),
        (lambda: F.channel_shuffle(lazyvic.zeros(1, 6, 2), 0), errors.ArgumentError, "channel_shuffle: number of groups to divide channels in must be positive, got 0"),
        (lambda: nn.ChannelShuffle(2)(lazyvic.zeros(6, 2)), errors.ShapeError, r"channel_shuffle: expects input with > 2 dims, got shape \(6, 2\)"),
        (lambda: nn.ReflectionPad1d(2)(lazyvic.zeros(3)), errors.ShapeError, r"ReflectionPad1d: expected a 2-D or 3-D \(batched\) input, got shape \(3,\)"),
        (lambda: nn.ReplicationPad2d(1)(lazyvic.zeros(1, 1, 1, 2, 3)), errors.ShapeError, "ReplicationPad2d: expected a 3-D or 4-D"),
        (lambda: nn.ReflectionPad1d(4)(lazyvic.zeros(2, 3, 4)), errors.ArgumentError, r"pad: reflect padding of \(4, 4\) is too large for dimension 2 of size 4"),
        (lambda: nn.ZeroPad2d(2)(lazyvic.zeros(3)), errors.ArgumentError, "pad: expected an even number of sizes for at most 1 dims"),
        (lambda: nn.ZeroPad1d(-3)(lazyvic.zeros(2, 3, 4)), errors.ArgumentError, r"pad: the size 4 of dimension 2 plus padding \(-3, -3\) is negative"),
        (lambda: F.pad(lazyvic.zeros(2, 3, 4), (-1, 2), mode="circular"), errors.ArgumentError, "pad: negative sizes are not supported in circular mode"),
    ],
)  # fmt: skip
def test_errors_are_typed_and_name_the_function(call, error, match):
    with pytest.raises(error, match=match):
        call()
