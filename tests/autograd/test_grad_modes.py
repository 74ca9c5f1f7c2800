"""Grad-mode switches with PyTorch's semantics (torch.autograd.grad_mode).

no_grad / enable_grad / set_grad_enabled / inference_mode are context managers and decorators;
set_grad_enabled is also a plain function; every one restores the previous mode on exit, also
when an exception leaves the block. The expected behaviour was read off PyTorch 2.13 (the
comments quote what torch printed).
"""

import threading

import pytest

import lazyvic as lv


@pytest.fixture(autouse=True)
def grad_mode_restored():
    yield
    assert lv.is_grad_enabled() and not lv.is_inference_mode_enabled(), "a test leaked a grad mode"


def _records() -> bool:
    """Whether an op recorded now gets autograd history."""
    return (lv.ones(2, requires_grad=True) * 2.0).requires_grad


def test_set_grad_enabled_as_a_function_persists():
    lv.set_grad_enabled(False)
    try:
        assert not lv.is_grad_enabled() and not _records()
    finally:
        lv.set_grad_enabled(True)
    assert _records()


@pytest.mark.parametrize("outer", [True, False])
def test_set_grad_enabled_as_a_context_manager_restores(outer):
    lv.set_grad_enabled(outer)
    try:
        for mode in (True, False):
            with lv.set_grad_enabled(mode):
                assert lv.is_grad_enabled() is mode and _records() is mode
            assert lv.is_grad_enabled() is outer
    finally:
        lv.set_grad_enabled(True)


def test_set_grad_enabled_restores_on_an_exception():
    with pytest.raises(ZeroDivisionError):
        with lv.set_grad_enabled(False):
            raise ZeroDivisionError
    assert lv.is_grad_enabled()
    with lv.no_grad():
        with pytest.raises(KeyError):
            with lv.set_grad_enabled(True):
                assert _records()
                raise KeyError("x")
        assert not lv.is_grad_enabled()


def test_set_grad_enabled_as_a_decorator():
    # torch: decorating does not change the mode; each call runs with the decorator's mode.
    @lv.set_grad_enabled(False)
    def f():
        return lv.is_grad_enabled()

    assert lv.is_grad_enabled()
    assert f() is False
    assert lv.is_grad_enabled()


def test_train_or_eval_idiom():
    x = lv.ones(3, requires_grad=True)
    for phase in ("train", "val"):
        with lv.set_grad_enabled(phase == "train"):
            y = (x * 3.0).sum()
        assert y.requires_grad is (phase == "train")
    assert lv.is_grad_enabled()


@pytest.mark.parametrize("parens", [True, False], ids=["called", "bare"])
def test_no_grad_and_enable_grad_decorate_functions(parens):
    no_grad = lv.no_grad() if parens else lv.no_grad
    enable_grad = lv.enable_grad() if parens else lv.enable_grad

    @no_grad
    def off(x):
        return x * 2.0

    @enable_grad
    def on(x):
        return x * 2.0

    x = lv.ones(2, requires_grad=True)
    assert not off(x).requires_grad and off.__name__ == "off"
    with lv.no_grad():
        assert on(x).requires_grad
        assert not lv.is_grad_enabled()
    assert lv.is_grad_enabled()


def test_decorated_function_restores_on_an_exception():
    @lv.no_grad()
    def fails():
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        fails()
    assert lv.is_grad_enabled()


def test_decorated_generator_holds_the_mode_only_while_it_runs():
    @lv.no_grad()
    def gen():
        for _ in range(2):
            yield lv.is_grad_enabled()

    seen = []
    for mode in gen():
        seen.append((mode, lv.is_grad_enabled()))
    assert seen == [(False, True), (False, True)]


def test_decorating_a_class_raises():
    with pytest.raises(TypeError, match="class"):

        @lv.no_grad()
        class Model:
            pass


def test_inference_mode():
    x = lv.ones(2, requires_grad=True)
    with lv.inference_mode():
        assert lv.is_inference_mode_enabled() and not lv.is_grad_enabled()
        y = x * 2.0
        # torch: inference_mode(False) inside turns grad mode back on and inference mode off.
        with lv.inference_mode(False):
            assert lv.is_grad_enabled() and not lv.is_inference_mode_enabled()
            assert (x * 2.0).requires_grad
        assert lv.is_inference_mode_enabled()
    assert not y.requires_grad
    assert not lv.is_inference_mode_enabled() and lv.is_grad_enabled()
    assert lv.autograd.is_inference_mode_enabled is lv.is_inference_mode_enabled


@pytest.mark.parametrize("parens", [True, False], ids=["called", "bare"])
def test_inference_mode_decorates(parens):
    deco = lv.inference_mode() if parens else lv.inference_mode

    @deco
    def predict(x):
        return x * 2.0, lv.is_inference_mode_enabled()

    y, flag = predict(lv.ones(2, requires_grad=True))
    assert flag and not y.requires_grad
    assert not lv.is_inference_mode_enabled()


def test_inference_mode_restores_on_an_exception():
    with pytest.raises(RuntimeError):
        with lv.inference_mode():
            raise RuntimeError
    with lv.no_grad():
        with lv.inference_mode(False):
            assert lv.is_grad_enabled()  # torch: True
        assert not lv.is_grad_enabled()


def test_modes_are_per_thread():
    seen = []
    with lv.no_grad():
        t = threading.Thread(target=lambda: seen.append(lv.is_grad_enabled()))
        t.start()
        t.join()
    assert seen == [True]


def test_torch_spellings():
    assert lv.autograd.no_grad is lv.no_grad and lv.autograd.set_grad_enabled is lv.set_grad_enabled
    assert lv.autograd.inference_mode is lv.inference_mode and lv.autograd.enable_grad is lv.enable_grad
