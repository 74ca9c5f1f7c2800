"""F.pad: every mode against NumPy's np.pad (PyTorch's modes), VJPs against finite differences."""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.nn import functional as F
from tests._oracle import check_vjp

NP_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_matches_numpy(mode):
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    pad = (1, 2, 0, 3)  # last dim (1, 2), second-to-last (0, 3)
    got = F.pad(lv.tensor(x), pad, mode=mode).numpy()
    want = np.pad(x, ((0, 0), (0, 0), (0, 3), (1, 2)), mode=NP_MODE[mode])
    np.testing.assert_array_equal(got, want)


def test_constant_value_and_integer_input():
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(
        F.pad(lv.tensor(x), (2, 1), value=-7).numpy(), np.pad(x, ((0, 0), (2, 1)), constant_values=-7)
    )
    xi = np.arange(6, dtype=np.float32).reshape(2, 3)
    for fill in (-np.inf, np.inf, np.nan):
        np.testing.assert_array_equal(
            F.pad(lv.tensor(xi), (1, 1), value=fill).numpy(), np.pad(xi, ((0, 0), (1, 1)), constant_values=fill)
        )
    xf = np.ones((2, 2), np.float64)
    np.testing.assert_array_equal(
        F.pad(lv.tensor(xf), (1, 1, 1, 1), value=0.5).numpy(), np.pad(xf, 1, constant_values=0.5)
    )


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_vjp(mode):
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    check_vjp(lambda t: F.pad(t, (2, 1, 1, 2), mode=mode, value=0.25), x)


def test_bad_arguments():
    x = lv.zeros(2, 3)
    with pytest.raises(ValueError, match="expected an even number"):
        F.pad(x, (1,))
    with pytest.raises(ValueError, match="at most 2 dims"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="mode must be one of"):
        F.pad(x, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="reflect padding of \\(3, 0\\) is too large for dimension 1 of size 3"):
        F.pad(x, (3, 0), mode="reflect")
