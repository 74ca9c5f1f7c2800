"""nn.utils.clip_grad_norm_ against PyTorch (tests/fixtures/torch_transformer.npz); no torch needed."""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import nn
from lazyvic.nn.utils import clip_grad_norm_

FIXTURE = "torch_transformer.npz"
SPEC = torch_fixtures.spec(FIXTURE)


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _params_with_grads(ref) -> list:
    params = []
    for i in range(3):
        g = ref[f"clip.grad{i}"]
        p = nn.Parameter(lazyvic.zeros(*g.shape))
        p.grad = lazyvic.tensor(g)
        params.append(p)
    return params


@pytest.mark.parametrize("case", SPEC["clip"], ids=lambda c: c["name"])
def test_clip_grad_norm_matches_torch(ref, case, mode):
    params = _params_with_grads(ref)
    norm = clip_grad_norm_(params, case["max_norm"])
    assert isinstance(norm, lazyvic.Tensor) and norm.shape == () and norm.dtype is lazyvic.float32
    np.testing.assert_allclose(norm.numpy(), ref[f"{case['name']}.norm"], rtol=2e-6)
    for i, p in enumerate(params):
        np.testing.assert_allclose(p.grad.numpy(), ref[f"{case['name']}.grad{i}"], rtol=2e-6, atol=1e-7)


def test_fixture_has_one_clipping_case_and_one_not(ref):
    norm = float(ref["clip_active.norm"])
    assert norm > 1.0 == SPEC["clip"][0]["max_norm"]
    np.testing.assert_array_equal(ref["clip_inactive.grad0"], ref["clip.grad0"])  # below max_norm: unchanged


def test_clip_grad_norm_is_the_global_l2_norm_in_float64():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=s) for s in ((3, 2), (4,))]
    params = []
    for g in grads:
        p = nn.Parameter(lazyvic.zeros(*g.shape, dtype=lazyvic.float64))
        p.grad = lazyvic.tensor(g)
        params.append(p)
    total = np.sqrt(sum((g**2).sum() for g in grads))
    norm = clip_grad_norm_(iter(params), 0.5)  # any iterable, e.g. model.parameters()
    np.testing.assert_allclose(norm.item(), total, rtol=1e-14)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * 0.5 / (total + 1e-6), rtol=1e-14)
    clipped = np.sqrt(sum((p.grad.numpy() ** 2).sum() for p in params))
    assert clipped <= 0.5


def test_clip_grad_norm_skips_parameters_without_grad():
    a, b = nn.Parameter(lazyvic.zeros(2)), nn.Parameter(lazyvic.zeros(2))
    a.grad = lazyvic.tensor([3.0, 4.0])
    np.testing.assert_allclose(clip_grad_norm_([a, b], 1.0).item(), 5.0)
    assert b.grad is None
    assert clip_grad_norm_([b], 1.0).item() == 0.0  # nothing to clip


def test_clip_grad_norm_accepts_a_single_tensor():
    """PyTorch takes one Tensor as well as an iterable of them."""
    p = nn.Parameter(lazyvic.zeros(3, 2))
    p.grad = lazyvic.full((3, 2), 10.0)
    norm = clip_grad_norm_(p, 1.0)
    np.testing.assert_allclose(norm.item(), np.sqrt(600.0), rtol=1e-6)
    np.testing.assert_allclose(p.grad.numpy(), np.full((3, 2), 10.0 / (np.sqrt(600.0) + 1e-6)), rtol=1e-6)


def test_clip_grad_norm_refuses_a_norm_type_that_is_not_a_number():
    # Other norms (inf, p) are compared with PyTorch in tests/nn/test_utils_init.py.
    p = nn.Parameter(lazyvic.zeros(2))
    p.grad = lazyvic.ones(2)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_([p], 1.0, norm_type="fro")
