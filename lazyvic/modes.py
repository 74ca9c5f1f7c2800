"""Modes every layer reads: grad mode, inference mode, the backward walk, autocast (per thread).

This module sits below the front end and imports nothing of lazyvic: ``Tensor`` ops read the
modes when they record, ``lazyvic.autograd`` sets the backward flag, ``lazyvic.amp.autocast``
sets the autocast precision. Each thread has its own modes, as in PyTorch.

The grad-mode switches follow ``torch.autograd.grad_mode``: ``no_grad``, ``enable_grad``,
``set_grad_enabled`` and ``inference_mode`` are classes whose instances are context managers
and function decorators (generator functions included); ``no_grad``, ``enable_grad`` and
``inference_mode`` also decorate without parentheses (``@no_grad``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading

_state = threading.local()  # .enabled, .inference, .in_backward, .autocast (per thread)


def is_grad_enabled() -> bool:
    """True when ops record autograd history (the default; off inside :class:`no_grad`)."""
    return getattr(_state, "enabled", True)


def _set_grad(mode: bool) -> None:
    _state.enabled = bool(mode)


def is_inference_mode_enabled() -> bool:
    """True inside :class:`inference_mode` (``torch.is_inference_mode_enabled``)."""
    return getattr(_state, "inference", False)


def _wrap_generator(make_context, func):
    """A generator function whose every resumption runs inside a fresh ``make_context()``
    (PyTorch's ``torch.utils._contextlib._wrap_generator``): the mode holds while the generator
    runs and not while its caller does."""

    @functools.wraps(func)
    def generator_context(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with make_context():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with make_context():
                        gen.close()
                    raise
                except BaseException:
                    with make_context():
                        response = gen.throw(*sys.exc_info())
                else:
                    with make_context():
                        response = gen.send(request)
        except StopIteration as e:
            return e.value

    return generator_context


class _DecoratorContextManager:
    """A context manager that also decorates functions: each call of the decorated function
    runs inside a fresh copy (:meth:`clone`), so one decorator serves nested and threaded calls.

    Raises:
        TypeError: when asked to decorate a class (ambiguous, as PyTorch says).
    """

    def __call__(self, func):
        if inspect.isclass(func):
            raise TypeError(f"{type(self).__name__}: cannot decorate a class ({func.__name__}); decorate its methods")
        if not callable(func):
            raise TypeError(f"{type(self).__name__}: expected a function to decorate, got {type(func).__name__}")
        if inspect.isgeneratorfunction(func):
            return _wrap_generator(self.clone, func)

        @functools.wraps(func)
        def decorate_context(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return decorate_context

    def clone(self):
        return type(self)()

    def __enter__(self) -> None:
        raise NotImplementedError

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        raise NotImplementedError


class _NoParamDecoratorContextManager(_DecoratorContextManager):
    """Also decorates without parentheses: ``@no_grad`` is ``@no_grad()``."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoParamDecoratorContextManager):
    """Context manager and decorator under which ops record no autograd history
    (``torch.no_grad``): results have ``requires_grad=False`` even when inputs require grad.
    The previous mode is restored on exit, also when an exception leaves the block."""

    def __init__(self) -> None:
        self.prev = False

    def __enter__(self) -> None:
        self.prev = is_grad_enabled()
        _set_grad(False)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad(self.prev)


class enable_grad(_NoParamDecoratorContextManager):
    """Context manager and decorator that turns recording back on, e.g. inside a
    :class:`no_grad` block (``torch.enable_grad``); restores the previous mode on exit."""

    def __enter__(self) -> None:
        self.prev = is_grad_enabled()
        _set_grad(True)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad(self.prev)


class set_grad_enabled(_DecoratorContextManager):
    """Turn gradient recording on or off (``torch.set_grad_enabled``).

    As in PyTorch it is a class whose constructor sets the mode, so it serves three ways:
    as a function (``set_grad_enabled(False)`` turns recording off until turned on again),
    as a context manager (``with set_grad_enabled(is_train):``; the mode from before the
    construction is restored on exit, also on an exception) and as a decorator
    (``@set_grad_enabled(False)``; the decoration itself leaves the mode as it was).
    """

    def __init__(self, mode: bool) -> None:
        self.prev = is_grad_enabled()
        self.mode = bool(mode)
        _set_grad(self.mode)

    def __call__(self, func):
        _set_grad(self.prev)  # decorating must not change the mode of the decorating code
        return super().__call__(func)

    def __enter__(self) -> None:
        _set_grad(self.mode)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad(self.prev)

    def clone(self) -> "set_grad_enabled":
        return type(self)(self.mode)


class inference_mode(_DecoratorContextManager):
    """Context manager and decorator for inference (``torch.inference_mode``).

    ``inference_mode(True)`` (the default; also ``@inference_mode`` without parentheses) turns
    gradient recording off and :func:`is_inference_mode_enabled` on; ``inference_mode(False)``
    turns both back (recording on), as PyTorch's guard does. Both are restored on exit.

    lazyvic has no separate inference tensors: a tensor made inside is an ordinary tensor
    without history (as under :class:`no_grad`), and ``enable_grad`` inside the block turns
    recording back on (PyTorch keeps it off there).
    """

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # @inference_mode without parentheses: mode is the function

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self.prev = (True, False)

    def __enter__(self) -> None:
        self.prev = (is_grad_enabled(), is_inference_mode_enabled())
        _set_grad(not self.mode)
        _state.inference = self.mode

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad(self.prev[0])
        _state.inference = self.prev[1]

    def clone(self) -> "inference_mode":
        return type(self)(self.mode)


def in_backward() -> bool:
    """True while ``backward()`` records the VJPs (autocast leaves their products alone)."""
    return getattr(_state, "in_backward", False)


@contextlib.contextmanager
def backward_walk():
    """Marks the VJPs recorded inside as backward ops (see :func:`in_backward`)."""
    previous, _state.in_backward = in_backward(), True
    try:
        yield
    finally:
        _state.in_backward = previous


def autocast_precision():
    """The autocast precision in force in this thread (``lazyvic.float16`` / ``bfloat16``, an
    object whose ``op`` names the op-table primitive that rounds to it), or None when off."""
    return getattr(_state, "autocast", None)


def set_autocast_precision(precision) -> None:
    """Set this thread's autocast precision (None: off); ``lazyvic.amp.autocast`` calls it."""
    _state.autocast = precision
