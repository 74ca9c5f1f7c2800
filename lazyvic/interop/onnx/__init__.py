"""ONNX, both directions: ``export`` (a module or function -> ModelProto) and ``load`` (a file ->
an :class:`OnnxModule`). ``lazyvic.onnx`` re-exports the two; they need the ``onnx`` package.

Export (lazyvic's primitives -> ONNX nodes):

- ``export.py``     recording the call (twice more per dynamic axis), walking the graph, each
                    primitive through its op-table rule (``OpDef.onnx``) or a composite's mark
- ``builder.py``    ``GraphBuilder`` (nodes, constants, names, sizes that follow dynamic axes),
                    which the rules call, and the clean-up of redundant broadcasts

Import (ONNX nodes -> lazyvic calls), one small converter per ONNX op type:

- ``module.py``     ``load`` and ``OnnxModule``: building the module (checks of every node at load
                    time, parameters and buffers, ``state_dict_keys``, the config round trip) and
                    running it node by node
- ``reader.py``     the file: protobuf, external data, initializer arrays
- ``context.py``    ``NodeContext``, what a converter is handed (attributes, values, errors that
                    name the node), and the element types lazyvic has
- ``registry.py``   the flat registry: ``register(op_type, since=...)`` beside each converter,
                    ``supported_ops()``, the opsets read (``MIN_OPSET`` .. ``MAX_OPSET``)
- ``converters/``   the converters by family (its ``__init__`` lists which op types live where);
                    ``converters/optable.py`` derives the one-node primitives' converters (Add,
                    Relu, MatMul, Transpose, ...) from the op table's own ``onnx_node`` rule, so a
                    primitive's mapping is written once for both directions

Layering: this package is at the top: it uses the front end (``lazyvic.tensor``,
``lazyvic.functional``, ``lazyvic.nn.module``), the op table (folding constants through
``lazyvic.lowering.reference.run_reference``, as the interpreter runs a reference) and
``lazyvic.trace.composite``, and never imports the top-level ``lazyvic`` package.
"""

from lazyvic.interop.onnx import converters  # fills the registry
from lazyvic.interop.onnx.builder import GraphBuilder, SymInt
from lazyvic.interop.onnx.export import export
from lazyvic.interop.onnx.module import OnnxModule, OnnxShapeWarning, OnnxSubmodule, load, state_dict_keys
from lazyvic.interop.onnx.reader import read_model
from lazyvic.interop.onnx.registry import supported_ops

__all__ = [
    "export",
    "load",
    "OnnxModule",
    "OnnxShapeWarning",
    "OnnxSubmodule",
    "state_dict_keys",
    "supported_ops",
    "read_model",
    "GraphBuilder",
    "SymInt",
]
