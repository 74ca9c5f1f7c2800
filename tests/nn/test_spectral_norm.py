"""``nn.utils.spectral_norm`` / ``remove_spectral_norm`` against PyTorch 2.13
(tests/fixtures/torch_spectral_norm.npz, made by make_spectral_norm_fixtures.py): from the same
weights and starting vectors, two training-mode forwards (outputs and the power iteration's
vectors), the gradient of ``weight_orig``, an eval-mode forward, for a Linear (dim 0) and a
ConvTranspose2d (dim 1); PyTorch's state_dict names; the errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import errors, nn
from lazyvic.runtime.config import config

DATA = np.load(Path(__file__).parents[1] / "fixtures" / "torch_spectral_norm.npz")


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


@pytest.mark.parametrize("name", ["linear", "convt"])
def test_spectral_norm_matches_pytorch(name):
    module = nn.Linear(5, 4, dtype=lv.float64) if name == "linear" else nn.ConvTranspose2d(3, 2, 3, dtype=lv.float64)
    module.weight.data = lv.tensor(DATA[f"{name}.weight"])
    module.bias.data = lv.tensor(DATA[f"{name}.bias"])
    nn.utils.spectral_norm(module, n_power_iterations=2)
    assert list(module.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    module.weight_u._assign(lv.tensor(DATA[f"{name}.u0"]))
    module.weight_v._assign(lv.tensor(DATA[f"{name}.v0"]))
    x = lv.tensor(DATA[f"{name}.x"])
    for k in (1, 2):
        y = module(x)
        np.testing.assert_allclose(y.numpy(), DATA[f"{name}.out{k}"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(module.weight_u.numpy(), DATA[f"{name}.u{k}"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(module.weight_v.numpy(), DATA[f"{name}.v{k}"], rtol=1e-10, atol=1e-12)
    (y * lv.tensor(DATA[f"{name}.cotangent"])).sum().backward()
    np.testing.assert_allclose(module.weight_orig.grad.numpy(), DATA[f"{name}.orig_grad"], rtol=1e-9, atol=1e-12)
    module.eval()
    np.testing.assert_allclose(module(x).numpy(), DATA[f"{name}.eval"], rtol=1e-10, atol=1e-12)
    nn.utils.remove_spectral_norm(module)
    assert list(module.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(module(x).numpy(), DATA[f"{name}.eval"], rtol=1e-10, atol=1e-12)


def test_spectral_norm_errors():
    m = nn.Linear(3, 2)
    with pytest.raises(errors.ArgumentError, match="no parameter 'kernel'"):
        nn.utils.spectral_norm(m, "kernel")
    with pytest.raises(errors.ArgumentError, match="n_power_iterations must be at least 1"):
        nn.utils.spectral_norm(m, n_power_iterations=0)
    nn.utils.spectral_norm(m)
    with pytest.raises(errors.ArgumentError, match="has no parameter 'weight'"):
        nn.utils.spectral_norm(m)
    with pytest.raises(errors.ArgumentError, match="bias has no spectral norm"):
        nn.utils.remove_spectral_norm(m, "bias")


def test_a_captured_step_with_spectral_norm_replays_its_power_iteration(monkeypatch):
    """The hook's power iteration updates the buffers in place: a captured step replays it and
    writes them back (weight_u, weight_v in the state compared), with the bits of plain steps."""
    from _steps import plain_and_captured

    monkeypatch.setattr(config, "compile", "hot")
    plain, captured, f = plain_and_captured(lambda: nn.utils.spectral_norm(nn.Linear(4, 3)))
    assert captured == plain and f.replays == 3
