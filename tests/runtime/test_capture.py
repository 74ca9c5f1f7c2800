"""lazyvic.compile: replayed calls give the same bits as recorded ones, and every guard records again."""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def mlp():
    lv.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    lv.sync()
    return m


def test_replay_matches_eager_bits_and_skips_recording(mlp):
    cm = lv.compile(mlp)
    with lv.no_grad():
        for seed in range(4):
            x = rand(5, 6, seed=seed)
            np.testing.assert_array_equal(cm(lv.tensor(x)).numpy(), mlp(lv.tensor(x)).numpy())
    assert (cm.recordings, cm.replays, cm.fallbacks) == (1, 3, 0)
    before = lv.metrics.snapshot()["capture_replays"]
    with lv.no_grad():
        cm(rand(5, 6))  # NumPy arrays are tensor inputs too
    assert lv.metrics.snapshot()["capture_replays"] == before + 1


def test_new_shapes_and_new_parameter_values_record_again(mlp):
    cm = lv.compile(mlp)
    with lv.no_grad():
        cm(rand(5, 6))
        cm(rand(2, 6))  # another batch size: another recording
        assert cm.recordings == 2
        mlp[0].weight.mul_(0.5)  # a new value: the replay would read the old one
        x = rand(2, 6, seed=3)
        np.testing.assert_array_equal(cm(x).numpy(), mlp(lv.tensor(x)).numpy())
        assert cm.recordings == 3
        mlp.load_state_dict({k: v.numpy() * 2 for k, v in mlp.state_dict().items()})
        np.testing.assert_array_equal(cm(x).numpy(), mlp(lv.tensor(x)).numpy())
        assert cm.recordings == 4 and cm.replays == 0


class _Reordered(nn.Module):
    """Weights prepared at every call from parameters alone (as an imported LSTM reorders its
    gates): gathered rows, a cast and a scaled bias, then a view of the weight beside them."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(lv.tensor(rand(8, 6, seed=1)))
        self.b = nn.Parameter(lv.tensor(rand(8, seed=2)))
        self.v = nn.Parameter(lv.tensor(rand(24, seed=3)))
        self.register_buffer("order", lv.tensor(np.array([4, 5, 6, 7, 0, 1, 2, 3])))

    def forward(self, x):
        w = self.w.index_select(0, self.order)
        b = (self.b.double() * 0.5).float().expand(x.shape[0], 8) + 1.0
        return (x @ w.T + b) @ self.v.reshape(3, 8).T


def test_values_of_parameters_alone_are_computed_once_and_follow_new_parameters():
    lv.manual_seed(0)
    m = _Reordered()
    cm = lv.compile(m)
    with lv.no_grad():
        for seed in range(3):
            x = rand(5, 6, seed=seed)
            np.testing.assert_array_equal(cm(x).numpy(), m(lv.tensor(x)).numpy())
        # the gather and the cast chain of b (8 elements: its expand to 5 x 8 stays in the
        # trace, being larger than b); v's views of a parameter are no computation
        assert (cm.recordings, cm.replays, cm.hoisted) == (1, 2, 2)
        before = lv.metrics.snapshot()
        np.testing.assert_array_equal(cm(x).numpy(), m(lv.tensor(x)).numpy())
        after = lv.metrics.snapshot()
        assert after["capture_hoisted"] == before["capture_hoisted"]
        m.w.mul_(-1.0)  # a new parameter value: recorded again, the gather computed from it
        np.testing.assert_array_equal(cm(x).numpy(), m(lv.tensor(x)).numpy())
        m.load_state_dict({"b": np.zeros(8, np.float32)}, strict=False)
        np.testing.assert_array_equal(cm(x).numpy(), m(lv.tensor(x)).numpy())
        assert cm.recordings == 3 and cm.hoisted == 6
        expected = x @ -rand(8, 6, seed=1)[[4, 5, 6, 7, 0, 1, 2, 3]].T + 1.0
        np.testing.assert_allclose(cm(x).numpy(), expected @ rand(24, seed=3).reshape(3, 8).T, rtol=1e-5, atol=1e-5)


def test_a_call_refused_for_its_random_draws_computes_nothing_once():
    """An inference call that draws random numbers runs normally at every call; the values of
    its constants alone are not computed apart first (nothing would reuse them)."""
    w = lv.tensor(rand(4, 3, seed=8))
    f = lv.compile(lambda x: x @ (w * 2.0) + lv.rand(2, 3))
    with lv.no_grad():
        for seed in range(2):
            f(lv.tensor(rand(2, 4, seed=seed))).numpy()
    assert f.replays == 0 and f.hoisted == 0 and f.reasons["random ops in an inference call"] == 2


def test_a_returned_value_of_parameters_alone_stays_an_output():
    """A value of constants alone that the call also returns is an output of the trace: computed
    at every replay, never taken out of it (the recording would lose an output)."""
    w = lv.tensor(rand(4, 3, seed=7))

    def fn(x):
        scaled = w * 2.0
        return x @ scaled, scaled, w.T * 3.0

    f = lv.compile(fn)
    with lv.no_grad():
        for seed in range(3):
            x = rand(2, 4, seed=seed)
            for got, want in zip(f(lv.tensor(x)), fn(lv.tensor(x))):
                np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert f.recordings == 1 and f.replays == 2 and f.hoisted == 0


def test_grad_mode_runs_normally_so_backward_works(mlp):
    cm = lv.compile(mlp)
    y = cm(rand(4, 6)).sum()
    y.backward()
    assert mlp[0].weight.grad is not None and cm.fallbacks == 1 and cm.replays == 0


def test_random_ops_are_never_replayed():
    lv.manual_seed(1)
    m = nn.Sequential(nn.Linear(6, 64), nn.Dropout(0.5)).train()
    cm = lv.compile(m)
    with lv.no_grad():
        a, b = cm(rand(3, 6)).numpy(), cm(rand(3, 6)).numpy()
    assert not np.array_equal(a == 0, b == 0)  # new dropout masks
    assert cm.replays == 0


def test_updated_buffers_are_replayed_as_a_step():
    """Batch norm in training updates its running statistics: a step (see test_capture_steps),
    recorded at its second call with the buffers as state, replayed from the third."""
    lv.manual_seed(2)
    bn, eager = nn.BatchNorm2d(3).train(), nn.BatchNorm2d(3).train()
    cm = lv.compile(bn)
    with lv.no_grad():
        for seed in range(4):
            x = rand(2, 3, 4, 4, seed=seed)
            np.testing.assert_allclose(cm(x).numpy(), eager(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    assert cm.replays == 2 and int(bn.num_batches_tracked.item()) == 4
    np.testing.assert_allclose(bn.running_var.numpy(), eager.running_var.numpy(), rtol=1e-6)
    bn.eval()
    with lv.no_grad():
        x = rand(2, 3, 4, 4, seed=9)
        np.testing.assert_array_equal(cm(x).numpy(), cm(x).numpy())
    assert cm.replays == 3  # eval: an inference call, recorded then replayed


def test_functions_with_values_and_several_outputs():
    w = lv.tensor(rand(4, 4, seed=5))

    def fn(x, k: int):
        y = (x @ w) * float(k)
        return y, y.softmax(-1), [y.sum()]

    cfn = lv.compile(fn)
    x = rand(3, 4)
    for k in (1, 2, 1):
        got = cfn(x, k)
        want = fn(lv.tensor(x), k)
        assert isinstance(got, tuple) and len(got) == 3 and isinstance(got[2], list) and len(got[2]) == 1
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
        np.testing.assert_array_equal(got[2][0].numpy(), want[2][0].numpy())
    assert (cfn.recordings, cfn.replays) == (2, 1)  # nested outputs (an nn.LSTM's) replay too

    cdict = lv.compile(lambda x: {"y": x * 2.0})
    for _ in range(2):
        np.testing.assert_array_equal(cdict(x)["y"].numpy(), x * 2.0)
    assert cdict.replays == 0 and any("outputs that are not a Tensor" in r for r in cdict.reasons)

    cfn2 = lv.compile(lambda x, k: ((x @ w) * float(k)).softmax(-1))
    for k in (1, 2, 1, 2):
        # allclose: a plan's first (interpreted) run may differ from its compiled runs in the last bit
        np.testing.assert_allclose(cfn2(x, k).numpy(), ((lv.tensor(x) @ w) * float(k)).softmax(-1).numpy(), rtol=1e-6)
    assert (cfn2.recordings, cfn2.replays) == (2, 2)


def test_a_tensor_returned_twice_replays_as_one_output():
    w = lv.tensor(rand(4, 4, seed=6))

    def fn(x):
        y = (x @ w).relu()
        return y, y.sum(), y

    cfn = lv.compile(fn)
    for seed in (1, 2, 3):
        x = rand(3, 4, seed=seed)
        got, want = cfn(x), fn(lv.tensor(x))
        assert got[0] is got[2]  # as eager: the same tensor twice
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), e.numpy())
    assert (cfn.recordings, cfn.replays) == (1, 2)


def test_sync_inside_the_call_is_not_replayed():
    def fn(x):
        return x * float(x.sum().item())

    cfn = lv.compile(fn)
    for seed in range(3):
        x = rand(3, seed=seed)
        np.testing.assert_allclose(cfn(x).numpy(), x * x.sum(), rtol=1e-6)
    assert cfn.replays == 0


def test_compiled_module_keeps_module_attributes(mlp):
    cm = lv.compile(mlp)
    assert list(cm.state_dict()) == list(mlp.state_dict())
    cm.eval()
    assert not mlp.training
    with pytest.raises(TypeError, match="expected a module or a function"):
        lv.compile(3)


def test_earlier_replayed_outputs_are_not_overwritten(mlp):
    cm = lv.compile(mlp)
    with lv.no_grad():
        outs = [cm(np.full((2, 6), i, np.float32)) for i in range(5)]  # realized, read only afterwards
        for i, out in enumerate(outs):
            np.testing.assert_array_equal(out.numpy(), mlp(lv.tensor(np.full((2, 6), i, np.float32))).numpy())
    assert cm.replays == 4


def test_other_sizes_replay_one_plan_of_symbolic_sizes():
    from lazyvic.runtime.plan_cache import plan_cache

    plan_cache.clear_plans()  # which plan serves a size must not depend on earlier tests
    lv.manual_seed(0)
    m = lv.nn.Sequential(lv.nn.Linear(6, 8), lv.nn.ReLU(), lv.nn.Linear(8, 3)).eval()
    f = lv.compile(m)
    rng = np.random.default_rng(0)
    lv.metrics.reset()
    with lv.no_grad():
        for n in (4, 5, 9, 2, 7, 9):
            x = rng.standard_normal((n, 6)).astype(np.float32)
            np.testing.assert_array_equal(f(lv.tensor(x)).numpy(), m(lv.tensor(x)).numpy())
    # Two recordings (4, then 5: the plan of symbolic sizes), then every other size replays it.
    assert f.recordings == 2 and f.replays == 4
    assert lv.metrics.snapshot()["capture_symbolic_replays"] == 4


def test_a_constant_computed_at_the_recordings_size_is_not_replayed_at_other_sizes():
    """A value computed once from a parameter sliced by an argument's size (hoisted at the
    recording, _hoist_constants) has that recording's size: calls of other sizes record again
    rather than replay a plan of symbolic sizes with it."""
    from lazyvic.runtime.plan_cache import plan_cache

    plan_cache.clear_plans()
    w = lv.tensor(rand(10, 4, seed=5))

    def fn(x):
        return x + w[: x.shape[0]] * 2.0

    f = lv.compile(fn)
    with lv.no_grad():
        for n in (3, 4, 5, 6, 4):
            x = rand(n, 4, seed=n)
            np.testing.assert_array_equal(f(lv.tensor(x)).numpy(), fn(lv.tensor(x)).numpy())
    assert f.recordings == 4 and f.replays == 1 and f.hoisted == 4


def test_a_growing_context_replays_with_its_positions_and_mask_made_at_each_length():
    """nanoGPT-style sampling through a compiled TinyGPT, the context one token longer per call:
    after two recordings every length replays the plan of symbolic sizes, its positions
    (arange(T)) and causal mask (T x T) made at that length, with the logits of the plain model."""
    from lazyvic.models import TinyGPT
    from lazyvic.runtime.plan_cache import plan_cache

    plan_cache.clear_plans()
    lv.manual_seed(0)
    model = TinyGPT(vocab_size=13, d_model=16, n_layer=1, n_head=2, block_size=16).eval()
    f = lv.compile(model)
    idx = np.array([[3]])
    lv.metrics.reset()
    with lv.no_grad():
        for _ in range(8):
            got = f(lv.tensor(idx)).numpy()
            np.testing.assert_array_equal(got, model(lv.tensor(idx)).numpy())
            idx = np.concatenate([idx, got[:, -1:].argmax(-1)], axis=1)
    assert f.recordings <= 3 and f.replays == 8 - f.recordings
    assert lv.metrics.snapshot()["capture_symbolic_replays"] == f.replays


def test_a_scalar_that_follows_the_size_records_every_size():
    f = lv.compile(lambda x: x.mean(0) * 2.0)  # the mean's 1/n is a Python scalar of the call
    with lv.no_grad():
        for n in (3, 4, 6, 6):
            x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
            np.testing.assert_allclose(f(lv.tensor(x)).numpy(), x.mean(0) * 2.0, rtol=1e-6)
    assert f.recordings == 3 and f.replays == 1  # the exact second call of 6 replays its own trace
