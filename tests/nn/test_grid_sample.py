"""``F.affine_grid`` and ``F.grid_sample`` against PyTorch 2.13 (tests/fixtures/torch_grid_sample.npz,
made by make_grid_sample_fixtures.py): grids, samples at points past the border for both modes,
both paddings and both ``align_corners``, and the gradients of theta, the input and the grid
(bilinear); then finite differences and the errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _oracle import check_vjp

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import errors
from lazyvic.runtime.config import config

DATA = np.load(Path(__file__).parents[1] / "fixtures" / "torch_grid_sample.npz")


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


def _leaf(a):
    return lv.tensor(a, dtype=lv.float64, requires_grad=True)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_pytorch(align):
    case = f"affine_{align}"
    theta = _leaf(DATA[f"{case}.theta"])
    grid = F.affine_grid(theta, (2, 3, 4, 5), align_corners=bool(align))
    np.testing.assert_allclose(grid.numpy(), DATA[f"{case}.grid"], rtol=1e-12, atol=1e-12)
    (grid * lv.tensor(DATA[f"{case}.cotangent"])).sum().backward()
    np.testing.assert_allclose(theta.grad.numpy(), DATA[f"{case}.theta_grad"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_pytorch(mode, padding, align):
    case = f"sample_{mode}_{padding}_{align}"
    x, grid = _leaf(DATA[f"{case}.x"]), _leaf(DATA[f"{case}.grid"])
    y = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=bool(align))
    np.testing.assert_allclose(y.numpy(), DATA[f"{case}.out"], rtol=1e-10, atol=1e-12)
    (y * lv.tensor(DATA[f"{case}.cotangent"])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), DATA[f"{case}.x_grad"], rtol=1e-10, atol=1e-12)
    if mode == "bilinear":
        np.testing.assert_allclose(grid.grad.numpy(), DATA[f"{case}.grid_grad"], rtol=1e-9, atol=1e-10)


def test_a_spatial_transformer_has_finite_difference_gradients():
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 6))
    theta = np.array([[[0.9, 0.1, 0.05], [-0.2, 0.8, 0.1]]])

    def stn(img, th):
        return F.grid_sample(img, F.affine_grid(th, (1, 2, 4, 4), align_corners=False), align_corners=False)

    check_vjp(stn, x, theta)


def test_grid_sample_errors():
    x = lv.ones(1, 1, 3, 3)
    with pytest.raises(errors.UnsupportedOpError, match="mode 'bicubic'"):
        F.grid_sample(x, lv.zeros(1, 2, 2, 2), mode="bicubic")
    with pytest.raises(errors.UnsupportedOpError, match="padding_mode 'reflection'"):
        F.grid_sample(x, lv.zeros(1, 2, 2, 2), padding_mode="reflection")
    with pytest.raises(errors.ShapeError, match="grid_sample: expected input"):
        F.grid_sample(x, lv.zeros(2, 2, 2, 2))
    with pytest.raises(errors.ShapeError, match="affine_grid: expected theta"):
        F.affine_grid(lv.zeros(1, 3, 3), (1, 1, 2, 2))
