"""ONNX interop: ``lazyvic.onnx.export``, ``lazyvic.onnx.load`` and ``OnnxShapeWarning``.

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


def __getattr__(name: str):
    # The warning class lives with the importer (which needs the onnx package): loaded on use.
    if name == "OnnxShapeWarning":
        from lazyvic.interop.onnx.module import OnnxShapeWarning

        return OnnxShapeWarning
    raise AttributeError(f"module 'lazyvic.onnx' has no attribute {name!r}")


__all__ = ["export", "load"]  # and OnnxShapeWarning, through __getattr__
