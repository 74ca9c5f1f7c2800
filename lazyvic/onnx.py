"""ONNX interop: ``lazyvic.onnx.export`` and ``lazyvic.onnx.load``.

The code lives in the package ``lazyvic/interop/onnx/`` (``export.py``; ``module.py`` and the
converters for import); this module re-exports the public entry points (and needs the ``onnx``
package, imported on first use).
"""

from __future__ import annotations


def export(*args, **kwargs):
    """See :func:`lazyvic.interop.onnx.export.export`."""
    from lazyvic.interop.onnx.export import export as _export

    return _export(*args, **kwargs)


def load(*args, **kwargs):
    """See :func:`lazyvic.interop.onnx.module.load`."""
    from lazyvic.interop.onnx.module import load as _load

    return _load(*args, **kwargs)


__all__ = ["export", "load"]
