"""lazyvic.get_rng_state / set_rng_state: saving and restoring the global Philox generator."""

import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn


@pytest.fixture(autouse=True)
def _keep_the_generator():
    """Leave the global generator as the test found it, even when a test fails half way."""
    state = lazyvic.get_rng_state().numpy()
    yield
    lazyvic.set_rng_state(state)


def test_state_is_seed_and_offset():
    lazyvic.manual_seed(1234)
    state = lazyvic.get_rng_state()
    assert isinstance(state, lazyvic.Tensor) and state.dtype is lazyvic.int64 and state.shape == (2,)
    np.testing.assert_array_equal(state.numpy(), [1234, 0])
    lazyvic.rand(3, 2)
    seed, offset = lazyvic.get_rng_state().numpy()
    assert seed == 1234 and offset > 0
    np.testing.assert_array_equal(state.numpy(), [1234, 0])  # a snapshot, not a view of the generator


def test_restoring_the_state_reproduces_the_numbers_bit_for_bit(mode):
    lazyvic.manual_seed(5)
    lazyvic.rand(7)  # start somewhere inside the stream
    state = lazyvic.get_rng_state()
    first = [lazyvic.rand(5, 3).numpy(), lazyvic.randn(9, dtype=lazyvic.float64).numpy(), lazyvic.rand(2).numpy()]
    after = lazyvic.get_rng_state().numpy()
    lazyvic.set_rng_state(state)
    again = [lazyvic.rand(5, 3).numpy(), lazyvic.randn(9, dtype=lazyvic.float64).numpy(), lazyvic.rand(2).numpy()]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(lazyvic.get_rng_state().numpy(), after)


def test_state_is_taken_when_the_op_is_recorded_not_when_it_runs():
    """Lazy draws take their stream position at the op: realizing later does not matter."""
    state = lazyvic.get_rng_state()
    pending = lazyvic.rand(4, 4)
    lazyvic.set_rng_state(state)
    again = lazyvic.rand(4, 4).numpy()
    np.testing.assert_array_equal(pending.numpy(), again)


@pytest.mark.parametrize(
    "as_",
    [
        lambda s: s,
        lambda s: s.numpy(),
        lambda s: [int(v) for v in s.numpy()],
        lambda s: tuple(s.numpy().astype(np.int32)),
    ],
    ids=["tensor", "ndarray", "list", "int32_tuple"],
)
def test_set_rng_state_accepts_tensor_array_and_ints(as_):
    lazyvic.manual_seed(77)
    lazyvic.rand(3)
    state = lazyvic.get_rng_state()
    expected = lazyvic.rand(6).numpy()
    lazyvic.set_rng_state(as_(state))
    np.testing.assert_array_equal(lazyvic.get_rng_state().numpy(), state.numpy())
    np.testing.assert_array_equal(lazyvic.rand(6).numpy(), expected)


def test_restoring_reproduces_dropout_and_initialization():
    state = lazyvic.get_rng_state()
    x = lazyvic.ones(6, 5)
    mask_a = F.dropout(x, 0.5).numpy()
    w_a = nn.Linear(5, 3).weight.numpy()
    lazyvic.set_rng_state(state)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), mask_a)
    np.testing.assert_array_equal(nn.Linear(5, 3).weight.numpy(), w_a)


@pytest.mark.parametrize(
    "bad",
    [
        [1, 2, 3],
        [5],
        [[1, 2]],
        [1, -4],
        [-1, 0],
        [1.5, 2.0],
        np.array([1.0, 2.0]),
        lazyvic.tensor([1.0, 2.0]),
        ["1", "2"],
        [True, False],
    ],
    ids=[
        "three",
        "one",
        "2d",
        "negative_offset",
        "negative_seed",
        "floats",
        "float_array",
        "float_tensor",
        "strings",
        "bools",
    ],
)
def test_bad_states_raise_value_error_and_change_nothing(bad):
    lazyvic.manual_seed(3)
    lazyvic.rand(2)
    before = lazyvic.get_rng_state().numpy()
    with pytest.raises(ValueError, match="set_rng_state"):
        lazyvic.set_rng_state(bad)
    np.testing.assert_array_equal(lazyvic.get_rng_state().numpy(), before)


def test_a_seed_beyond_int64_is_refused():
    """A uint64 seed past 2**63 - 1 cannot enter a trace as an int64 scalar; refuse it up front
    instead of failing at the next random op (manual_seed keeps 63 bits)."""
    lazyvic.manual_seed(3)
    before = lazyvic.get_rng_state().numpy()
    with pytest.raises(ValueError, match="set_rng_state"):
        lazyvic.set_rng_state(np.array([2**64 - 1, 0], dtype=np.uint64))
    np.testing.assert_array_equal(lazyvic.get_rng_state().numpy(), before)
    lazyvic.rand(2).numpy()
