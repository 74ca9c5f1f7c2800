"""ONNX: ``export`` (a module or function -> ModelProto). ``lazyvic.onnx`` re-exports it; it needs
the ``onnx`` package.

- ``export.py``     recording the call (twice more per dynamic axis), walking the graph, each
                    primitive through its op-table rule (``OpDef.onnx``) or a composite's mark
- ``builder.py``    ``GraphBuilder`` (nodes, constants, names, sizes that follow dynamic axes),
                    which the rules call, and the clean-up of redundant broadcasts
"""

from lazyvic.interop.onnx.builder import GraphBuilder, SymInt
from lazyvic.interop.onnx.export import export

__all__ = ["export", "GraphBuilder", "SymInt"]
