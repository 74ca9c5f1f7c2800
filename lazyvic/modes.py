"""Modes every layer reads: grad mode, the backward walk, autocast (per thread).

This module sits below the front end and imports nothing of lazyvic: ``Tensor`` ops read the
modes when they record, ``lazyvic.autograd`` sets the backward flag, ``lazyvic.amp.autocast``
sets the autocast precision. Each thread has its own modes, as in PyTorch.
"""

from __future__ import annotations

import contextlib
import threading

_state = threading.local()  # .enabled, .in_backward, .autocast (per thread)


def is_grad_enabled() -> bool:
    """True when ops record autograd history (the default; off inside :func:`no_grad`)."""
    return getattr(_state, "enabled", True)


def set_grad_enabled(mode: bool) -> None:
    """Turn gradient recording on or off in this thread."""
    _state.enabled = bool(mode)


@contextlib.contextmanager
def no_grad():
    """Context manager (and decorator) under which ops record no autograd context."""
    prev = is_grad_enabled()
    set_grad_enabled(False)
    try:
        yield
    finally:
        set_grad_enabled(prev)


@contextlib.contextmanager
def enable_grad():
    """Context manager (and decorator) under which ops record autograd history again."""
    prev = is_grad_enabled()
    set_grad_enabled(True)
    try:
        yield
    finally:
        set_grad_enabled(prev)


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
