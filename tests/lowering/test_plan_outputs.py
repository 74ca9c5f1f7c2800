"""A CPU plan's small outputs are used again two runs later, only when nothing refers to them
(CpuPlan._outputs): a held tensor, a user's array or a view of it keeps its memory its own."""

import gc

import numpy as np

import lazyvic as lv
from lazyvic.lowering.cpu import compile_trace
from lazyvic.trace import cut


def _plan(tmp_path):
    x = lv.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    w = lv.tensor(np.ones((4, 5), np.float32))
    trace, inputs, scalars, _ = cut([t._node for t in ((x * 2.0).exp(), (x @ w) + 1.0)])
    return compile_trace(trace, cache_dir=tmp_path), inputs, scalars


def _addresses(outs):
    return [a.__array_interface__["data"][0] for a in outs]


def test_outputs_nobody_holds_are_used_again(tmp_path):
    plan, inputs, scalars = _plan(tmp_path)
    first = plan.run(inputs, scalars)
    want = [a.copy() for a in first]
    where = _addresses(first)
    del first
    plan.run(inputs, scalars)
    third = plan.run(inputs, scalars)
    assert _addresses(third) == where  # the first run's memory, free again
    for a, b in zip(third, want):
        assert a.tobytes() == b.tobytes()


def test_held_outputs_and_views_of_them_are_not_overwritten(tmp_path):
    plan, inputs, scalars = _plan(tmp_path)
    first = plan.run(inputs, scalars)
    view = first[0][1:]  # a user's view: it refers to the allocation, not to the array
    kept = first[1]  # the array itself, as a tensor's node holds it
    saved = (view.copy(), kept.copy())
    where = _addresses(first)
    del first
    gc.collect()
    for _ in range(4):
        later = plan.run(inputs, scalars)
        assert not set(_addresses(later)) & set(where)
        del later
    assert view.tobytes() == saved[0].tobytes() and kept.tobytes() == saved[1].tobytes()


def test_a_captured_training_step_keeps_its_results(fresh):
    """Losses a user keeps across steps stay what they were (their arrays are never reused)."""
    rng = np.random.default_rng(0)
    model = lv.nn.Linear(6, 3)
    opt = lv.optim.SGD(model.parameters(), lr=0.1)
    x = lv.tensor(rng.standard_normal((5, 6), dtype=np.float32))

    @lv.compile
    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    losses, values = [], []
    for _ in range(8):
        losses.append(step(x))
        values.append(float(losses[-1].item()))  # read at once, before later steps ran
    assert step.replays >= 4
    assert all(b < a for a, b in zip(values, values[1:]))  # it trains: each loss a new value
    assert [float(v.item()) for v in losses] == values  # and the kept tensors still hold theirs
