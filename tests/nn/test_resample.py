"""F.interpolate and the Upsample modules against PyTorch (tests/fixtures/torch_layers.npz, made by
make_layer_fixtures.py), finite-difference VJPs and errors.

Gradients are those of ``sum(output * cotangent(output.shape))`` (tests/nn/_cotangent.py).
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _cotangent import cotangent
from _oracle import check_vjp

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError, ShapeError, UnsupportedOpError

FIXTURE = "torch_layers.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-6)
COMPILED = {"up_bilinear_align"}
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _cases():
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in SPEC["resample"]
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


@pytest.mark.parametrize("case, mode", _cases(), indirect=["mode"])
def test_interpolate_matches_torch(ref, case, mode):
    name = case["name"]
    x = lazyvic.tensor(ref[f"rs.{case['input']}"], requires_grad=True)
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in case["kwargs"].items()}
    y = F.interpolate(x, **kwargs)
    assert y.shape == ref[f"{name}.out"].shape
    (y * lazyvic.tensor(cotangent(y.shape))).sum().backward()
    np.testing.assert_allclose(y.numpy(), ref[f"{name}.out"], **TOL, err_msg=f"{name} output")
    np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.input"], **TOL, err_msg=f"{name} grad")


def test_upsample_modules_match_torch(ref):
    x4 = lazyvic.tensor(ref["rs.x4"])
    np.testing.assert_allclose(nn.Upsample(scale_factor=2)(x4).numpy(), ref["up_nearest_scale2.out"], **TOL)
    np.testing.assert_allclose(
        nn.Upsample(scale_factor=2, mode="bilinear")(x4).numpy(), ref["up_bilinear_scale2.out"], **TOL
    )
    np.testing.assert_allclose(nn.UpsamplingNearest2d(size=(7, 3))(x4).numpy(), ref["up_nearest_size.out"], **TOL)
    np.testing.assert_allclose(nn.UpsamplingBilinear2d((7, 9))(x4).numpy(), ref["up_bilinear_align.out"], **TOL)


def test_nearest_keeps_integer_inputs():
    x = lazyvic.tensor(np.arange(6).reshape(1, 1, 2, 3))
    y = F.interpolate(x, scale_factor=2)
    assert y.dtype is lazyvic.int64
    np.testing.assert_array_equal(y.numpy()[0, 0], np.arange(6).reshape(2, 3).repeat(2, 0).repeat(2, 1))


_X = np.random.default_rng(8).normal(size=(1, 2, 3, 4))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(scale_factor=1.7, mode="bilinear"),
        dict(size=(5, 2), mode="bilinear", align_corners=True),
        dict(scale_factor=(2, 1.5), mode="nearest"),
    ],
    ids=["bilinear", "bilinear_align", "nearest"],
)
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_interpolate_vjp_matches_finite_differences(kwargs, mode):
    check_vjp(lambda x: F.interpolate(x, **kwargs), _X)


def test_interpolate_errors():
    x = lazyvic.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match="exactly one of size or scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="exactly one of size or scale_factor"):
        F.interpolate(x, size=4, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ShapeError, match=r"interpolate: mode 'linear' needs a 3-D input, got 4-D shape \(1, 2, 3, 4\)"):
        F.interpolate(x, scale_factor=2, mode="linear")
    with pytest.raises(ValueError, match=r"size \(4, 5, 6\) must have one entry per spatial axis"):
        F.interpolate(x, size=(4, 5, 6))
    with pytest.raises(UnsupportedOpError, match="interpolate: mode='bicubic'"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(DTypeError, match="interpolate: mode 'bilinear' needs a floating-point input"):
        F.interpolate(lazyvic.zeros(1, 1, 2, 2, dtype=lazyvic.int64), scale_factor=2, mode="bilinear")
    with pytest.raises(ShapeError, match="interpolate: expected input"):
        F.interpolate(lazyvic.zeros(3, 4), scale_factor=2)
