"""ONNX interop: ``lazyvic.onnx.export`` and ``lazyvic.onnx.load``.

The code lives in ``lazyvic/interop/onnx/export.py`` and ``lazyvic/interop/onnx_import.py``;
this module re-exports the public entry points (and needs the ``onnx`` package).
"""

from __future__ import annotations


def export(*args, **kwargs):
    """See :func:`lazyvic.interop.onnx.export.export`."""
    from lazyvic.interop.onnx.export import export as _export

    return _export(*args, **kwargs)


def load(*args, **kwargs):
    """See :func:`lazyvic.interop.onnx_import.load`."""
    from lazyvic.interop.onnx_import import load as _load

    return _load(*args, **kwargs)


__all__ = ["export", "load"]
