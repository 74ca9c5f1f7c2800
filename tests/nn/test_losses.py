"""Losses and MLP gradients against PyTorch fixtures (tests/fixtures/torch_mlp_losses.npz).

The fixture file is made by tests/fixtures/make_torch_fixtures.py; these tests
need only NumPy. The live comparison at the end runs when torch is installed.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn

FIXTURE = "torch_mlp_losses.npz"
PARAM_NAMES = torch_fixtures.PARAM_NAMES
RTOL, ATOL = 2e-6, 1e-7  # float32; the sums here have at most a few dozen terms


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def cases():
    return torch_fixtures.spec(FIXTURE)


def mlp(ref) -> nn.Sequential:
    return torch_fixtures.mlp(ref)


def test_fixture_is_complete(ref):
    names = [c["name"] for c in cases()]
    assert len(names) == len(set(names)) >= 10
    assert (ref["target_ignore"] == -100).any() and (ref["target_ignore"] != -100).any()
    for c in cases():
        assert f"{c['name']}.loss" in ref
        for p in PARAM_NAMES:
            assert ref[f"{c['name']}.grad.{p}"].shape == ref[f"init.{p}"].shape


def test_mlp_forward_matches_torch(ref):
    model = mlp(ref)
    out = model(lazyvic.tensor(ref["x"]))
    assert out.shape == (8, 3) and out.dtype is lazyvic.float32
    np.testing.assert_allclose(out.numpy(), ref["output"], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_loss_and_gradients_match_torch(ref, case):
    model = mlp(ref)
    logits = model(lazyvic.tensor(ref["x"]))
    loss = getattr(F, case["fn"])(logits, lazyvic.tensor(ref[case["target"]]), **case["kwargs"])
    (loss if loss.ndim == 0 else loss.sum()).backward()
    expected = ref[f"{case['name']}.loss"]
    assert loss.shape == expected.shape
    np.testing.assert_allclose(loss.numpy(), expected, rtol=RTOL, atol=ATOL)
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        np.testing.assert_allclose(
            p.grad.numpy(), ref[f"{case['name']}.grad.{name}"], rtol=1e-5, atol=1e-7, err_msg=f"grad of {name}"
        )


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_loss_modules_match_functional(ref, case):
    logits = lazyvic.tensor(ref["output"])
    target = lazyvic.tensor(ref[case["target"]])
    module = {"cross_entropy": nn.CrossEntropyLoss, "mse_loss": nn.MSELoss}[case["fn"]](**case["kwargs"])
    np.testing.assert_allclose(module(logits, target).numpy(), ref[f"{case['name']}.loss"], rtol=RTOL, atol=ATOL)


def test_ignored_targets_do_not_count_in_the_mean(ref):
    logits = lazyvic.tensor(ref["output"])
    keep = ref["target_ignore"] != -100
    full = F.cross_entropy(logits, lazyvic.tensor(ref["target_ignore"]), reduction="none").numpy()
    assert (full[~keep] == 0).all()
    mean = F.cross_entropy(logits, lazyvic.tensor(ref["target_ignore"])).item()
    np.testing.assert_allclose(mean, full[keep].mean(), rtol=RTOL)


def test_ignored_rows_get_zero_gradient(ref):
    logits = lazyvic.tensor(ref["output"], requires_grad=True)
    F.cross_entropy(logits, lazyvic.tensor(ref["target_ignore"])).backward()
    g = logits.grad.numpy()
    ignored = ref["target_ignore"] == -100
    assert (g[ignored] == 0).all()
    np.testing.assert_allclose(g[~ignored].sum(1), 0, atol=1e-6)  # softmax - one_hot rows sum to 0


def test_cross_entropy_bad_inputs():
    logits = lazyvic.zeros(4, 3)
    with pytest.raises(lazyvic.errors.ShapeError):
        F.cross_entropy(logits, lazyvic.tensor([0, 1, 2]))
    with pytest.raises(lazyvic.errors.DTypeError):
        F.cross_entropy(logits, lazyvic.zeros(4))
    with pytest.raises(lazyvic.errors.ShapeError):
        F.mse_loss(logits, lazyvic.zeros(3, 4))
    with pytest.raises(ValueError):
        F.mse_loss(logits, logits, reduction="avg")


def test_losses_match_torch_live(ref):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4, 5)).astype(np.float32)  # (N, C, d): the class axis is 1
    target = rng.integers(0, 4, (6, 5))
    target[0, :2] = -100
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(target)).item()
    got = F.cross_entropy(lazyvic.tensor(logits), lazyvic.tensor(target)).item()
    np.testing.assert_allclose(got, expected, rtol=RTOL)
