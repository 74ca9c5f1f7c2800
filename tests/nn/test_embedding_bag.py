"""``F.embedding_bag`` / ``nn.EmbeddingBag`` against PyTorch 2.13 (tests/fixtures/torch_embedding_bag.npz,
made by make_embedding_bag_fixtures.py): sum, mean and max over 2-D inputs, offsets with an empty
bag, ``include_last_offset``, ``padding_idx`` and per-sample weights: outputs and the table's
gradient; then the module and the errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import errors, nn
from lazyvic.runtime.config import config

DATA = np.load(Path(__file__).parents[1] / "fixtures" / "torch_embedding_bag.npz")
LAYOUT = {
    "2d": dict(include_last_offset=False, padding_idx=None),
    "offsets": dict(include_last_offset=False, padding_idx=None),
    "last": dict(include_last_offset=True, padding_idx=None),
    "padding": dict(include_last_offset=False, padding_idx=2),
}
CASES = sorted({k.split(".")[0] for k in DATA.files if "." in k})


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


@pytest.mark.parametrize("case", CASES)
def test_embedding_bag_matches_pytorch(case):
    mode, layout = case.split("_")[0], case.split("_")[1]
    weight = lv.tensor(DATA["weight"], dtype=lv.float64, requires_grad=True)
    offsets = lv.tensor(DATA[f"{case}.offsets"]) if f"{case}.offsets" in DATA.files else None
    psw = lv.tensor(DATA[f"{case}.psw"], dtype=lv.float64) if f"{case}.psw" in DATA.files else None
    y = F.embedding_bag(
        lv.tensor(DATA[f"{case}.input"]), weight, offsets, mode=mode, per_sample_weights=psw, **LAYOUT[layout]
    )
    np.testing.assert_allclose(y.numpy(), DATA[f"{case}.out"], rtol=1e-12, atol=1e-12)
    (y * lv.tensor(DATA[f"{case}.cotangent"])).sum().backward()
    np.testing.assert_allclose(weight.grad.numpy(), DATA[f"{case}.weight_grad"], rtol=1e-12, atol=1e-12)


def test_the_module_and_the_errors():
    lv.manual_seed(0)
    bag = nn.EmbeddingBag(10, 4, mode="sum", padding_idx=0)
    assert bag.weight.shape == (10, 4) and not bag.weight.numpy()[0].any()
    idx, off = lv.tensor([1, 2, 0, 3]), lv.tensor([0, 2])
    w = bag.weight.numpy()
    np.testing.assert_allclose(bag(idx, off).numpy(), [w[1] + w[2], w[3]], rtol=1e-6)
    assert list(bag.state_dict()) == ["weight"]
    with pytest.raises(ValueError, match="mode must be"):
        F.embedding_bag(idx, bag.weight, off, mode="median")
    with pytest.raises(ValueError, match="only supported for mode='sum'"):
        F.embedding_bag(idx, bag.weight, off, mode="mean", per_sample_weights=lv.ones(4))
    with pytest.raises(ValueError, match="start at 0"):
        F.embedding_bag(idx, bag.weight, lv.tensor([1, 2]))
    with pytest.raises(ValueError, match="needs offsets"):
        F.embedding_bag(idx, bag.weight)
    with pytest.raises(errors.ShapeError, match="1-D \\(with offsets\\) or 2-D"):
        F.embedding_bag(lv.tensor([[[1]]]), bag.weight)
