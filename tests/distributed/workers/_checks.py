"""Helpers the worker scripts share (a worker's folder is on its sys.path)."""

from __future__ import annotations


def raises(error, fn, text: str) -> None:
    """``fn()`` must raise ``error`` with ``text`` in its message."""
    try:
        fn()
    except error as e:
        assert text in str(e), str(e)
    else:
        raise AssertionError(f"no {error.__name__} ({text})")
