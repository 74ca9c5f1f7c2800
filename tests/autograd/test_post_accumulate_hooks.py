"""Tensor.register_post_accumulate_grad_hook and engine.queue_callback (what DDP builds on)."""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.autograd import engine
from lazyvic.errors import AutogradError


def test_post_accumulate_hook_sees_the_accumulated_grad_and_callbacks_run_after_the_walk():
    w = lv.nn.Parameter(lv.tensor([1.0, 2.0, 3.0]))
    b = lv.nn.Parameter(lv.tensor([0.5]))
    events = []

    def hook(p):
        events.append(("hook", p is w, p.grad.numpy().copy()))
        if len(events) == 1:
            engine.queue_callback(lambda: events.append(("done", b.grad is not None)))

    handle = w.register_post_accumulate_grad_hook(hook)
    ((w * 2).sum() + b.sum() * 3).backward()
    assert events[0][0] == "hook" and events[0][1] and np.array_equal(events[0][2], [2, 2, 2])
    assert events[-1] == ("done", True)  # after every leaf got its gradient
    (w * 1).sum().backward()  # accumulates: the hook sees the sum
    assert np.array_equal(events[-1][2], [3, 3, 3])
    handle.remove()
    n = len(events)
    (w * 1).sum().backward()
    assert len(events) == n


def test_misuse_is_a_typed_error():
    x = lv.nn.Parameter(lv.ones(2))
    with pytest.raises(AutogradError, match="only a leaf"):
        (x * 2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(AutogradError, match="only a leaf"):
        lv.ones(2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(TypeError, match="callable"):
        x.register_post_accumulate_grad_hook(3)
    with pytest.raises(AutogradError, match="inside a backward walk"):
        engine.queue_callback(lambda: None)
