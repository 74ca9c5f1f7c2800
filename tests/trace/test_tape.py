"""The tape (lazyvic/trace/tape.py): a sync finds its plan by the structural hash its nodes made
when they were recorded, and never runs a plan for another structure.

Every case compares with NumPy; counts (``hash_hits``) say which path ran. Shapes are small and
the ops few, so the plans compile in a fraction of a second.
"""

import threading

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import dtypes as dt
from lazyvic.runtime import metrics
from lazyvic.runtime.config import config
from lazyvic.runtime.plan_cache import plan_cache
from lazyvic.tensor import _scalar_operand
from lazyvic.trace import scope

rng = np.random.default_rng(7)
A = rng.standard_normal((3, 5)).astype(np.float32)
B = rng.standard_normal((3, 5)).astype(np.float32)


def _hash_hits():
    return metrics.snapshot()["hash_hits"]


def test_a_repeated_step_is_found_by_its_tape_with_new_values(fresh):
    w = lv.tensor(A)
    got = []
    for k in range(5):
        x = lv.tensor(B + k)
        got.append(((x * w + 0.5 * k).exp().sum(1)).numpy())
    # seen once (interpreted), compiled at the second sight (cut), then found by the tape
    assert _hash_hits() == 3
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, np.exp((B + k) * A + np.float32(0.5 * k)).sum(1), rtol=1e-5)


def test_a_leaf_used_twice_and_two_leaves_of_one_shape_are_different_structures(fresh):
    def f(p, q):
        return ((p + q) * p).numpy()

    a, b = lv.tensor(A), lv.tensor(B)
    for _ in range(3):
        np.testing.assert_allclose(f(a, a), (A + A) * A, rtol=1e-6)
        np.testing.assert_allclose(f(a, b), (A + B) * A, rtol=1e-6)
        np.testing.assert_allclose(f(b, a), (B + A) * B, rtol=1e-6)
    # (a, a) is found by its tape at its third sync; (a, b) and (b, a) are one structure (two
    # leaves of one shape): seen, compiled, then found four times with the leaves in either order
    assert _hash_hits() == 1 + 4


def test_the_roots_kept_alive_are_part_of_the_key(fresh):
    a = lv.tensor(A)
    for keep in (False, True, False, True, True):
        h = a * 2.0
        y = (h + 1.0).sum()
        if keep:  # h is a second output of the same recording
            np.testing.assert_allclose(y.numpy(), (A * 2 + 1).sum(), rtol=1e-6)
            np.testing.assert_array_equal(h.numpy(), A * 2)
        else:
            del h
            np.testing.assert_allclose(y.numpy(), (A * 2 + 1).sum(), rtol=1e-6)


def test_an_input_pending_from_another_thread_breaks_the_tape(fresh):
    a = lv.tensor(A)
    made = {}
    for k in range(3):
        t = threading.Thread(target=lambda k=k: made.__setitem__("x", lv.tensor(B) * float(k)))
        t.start()
        t.join()
        before = _hash_hits()
        np.testing.assert_allclose((a + made["x"]).numpy(), A + B * np.float32(k), rtol=1e-6)
        assert _hash_hits() == before  # the other thread's pending node: cut, not looked up


def test_a_scalar_realized_while_recorded_breaks_the_tape(fresh):
    x = lv.tensor(A)
    for _ in range(3):
        s = _scalar_operand(3.0, dt.float32)
        y = x * s
        assert s.numpy() == 3.0  # the scalar node becomes a buffer under the recorded graph
        assert scope.local.state.tape.broken
        np.testing.assert_allclose((y + 1.0).numpy(), A * 3 + 1, rtol=1e-6)
    assert not scope.local.state.tape.broken  # a sync starts a whole tape


def test_an_evicted_plan_is_not_run_by_its_tape(fresh, monkeypatch):
    a = lv.tensor(A)
    for _ in range(3):
        (a * 4.0).numpy()
    assert _hash_hits() == 1
    monkeypatch.setattr(config, "plan_cache_size", 1)
    for _ in range(2):
        (a - 1.5).sum().numpy()  # another key pushes the first out
    before = _hash_hits()
    np.testing.assert_allclose((a * 4.0).numpy(), A * 4, rtol=1e-6)
    assert _hash_hits() == before


def test_the_checking_mode_catches_a_tape_key_that_names_another_trace(fresh, monkeypatch):
    a = lv.tensor(A)
    for _ in range(3):
        (a * 5.0).numpy()
    for _ in range(2):
        (a + 5.0).numpy()
    keys = list(plan_cache.by_tape)
    assert len(keys) == 2
    # Pretend the two structures collided: the first key now names the second trace.
    plan_cache.by_tape[keys[0]] = plan_cache.by_tape[keys[1]]
    monkeypatch.setattr(config, "check", True)
    with pytest.raises(RuntimeError, match="share the tape key"):
        (a * 5.0).numpy()


def test_threads_sharing_a_parameter_train_as_they_do_alone(fresh):
    w0 = rng.standard_normal((5, 4)).astype(np.float32)

    def train(w, x, out, steps=6):
        for _ in range(steps):
            loss = ((x @ w).tanh() ** 2).mean()
            out.append(loss.item())

    xs = [lv.tensor(rng.standard_normal((6, 5)).astype(np.float32)) for _ in range(2)]
    alone = [[], []]
    w = lv.tensor(w0)
    for i in range(2):
        train(w, xs[i], alone[i])
    both = [[], []]
    threads = [threading.Thread(target=train, args=(w, xs[i], both[i])) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert both == alone
