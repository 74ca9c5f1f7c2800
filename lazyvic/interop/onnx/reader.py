"""Reading an ONNX file: the protobuf, its external data, and the initializers' arrays."""

from __future__ import annotations

import os

import numpy as np

from lazyvic.errors import OnnxError
from lazyvic.interop.onnx.context import ELEM_DTYPES, SUPPORTED_TYPES_TEXT, elem_name


def read_model(model) -> tuple:
    """``(onnx.ModelProto with external data loaded, a name for error messages)``.

    ``model`` is a path (str or os.PathLike) or an ``onnx.ModelProto``. Raises OnnxError for a
    missing, truncated or non-ONNX file or external data that cannot be read; TypeError for
    anything else.
    """
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model, f"<ModelProto {model.graph.name or 'unnamed'}>"
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"onnx.load: expected a path or an onnx.ModelProto, got {type(model).__name__}")
    path = os.fspath(model)
    source = os.path.basename(path) or path
    if not os.path.exists(path):
        raise OnnxError(f"{path}: no such file")
    if os.path.isdir(path):
        raise OnnxError(f"{path}: is a directory, not an ONNX file")
    try:
        with open(path, "rb") as f:
            proto = onnx.ModelProto()
            proto.ParseFromString(f.read())
    except Exception as e:
        raise OnnxError(
            f"{path}: not a valid ONNX file (truncated or not ONNX): cannot parse the protobuf: {type(e).__name__}"
        ) from None
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.opset_import:
        raise OnnxError(f"{path}: not an ONNX model (no IR version, graph or opset import; truncated or not ONNX)")
    try:
        from onnx.external_data_helper import load_external_data_for_model, uses_external_data

        if any(uses_external_data(t) for t in proto.graph.initializer):
            load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
    except Exception as e:
        raise OnnxError(
            f"{path}: cannot load the external data of its initializers (expected next to the model "
            f"in {os.path.dirname(os.path.abspath(path))}): {type(e).__name__}: {e}"
        ) from None
    return proto, source


def initializer_arrays(proto, source: str) -> dict:
    """Initializer name -> NumPy array; OnnxError for an unloaded external, a type lazyvic lacks,
    or missing / bad data."""
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data

    arrays = {}
    for t in proto.graph.initializer:
        if uses_external_data(t):
            raise OnnxError(
                f"{source}: initializer '{t.name}' refers to external data that was not loaded; "
                f"load from the file path so lazyvic reads it from the model's directory"
            )
        if t.data_type not in ELEM_DTYPES:
            raise OnnxError(
                f"{source}: initializer '{t.name}' has type {elem_name(t.data_type)} "
                f"(lazyvic supports {SUPPORTED_TYPES_TEXT})"
            )
        try:
            arr = np.asarray(numpy_helper.to_array(t))
        except Exception as e:
            raise OnnxError(
                f"{source}: initializer '{t.name}' (shape {tuple(t.dims)}) has missing or bad data: "
                f"{type(e).__name__}: {e}"
            ) from None
        if arr.shape != tuple(t.dims):
            raise OnnxError(f"{source}: initializer '{t.name}' has {arr.size} values for shape {tuple(t.dims)}")
        arrays[t.name] = arr
    return arrays


def strip_initializers(proto):
    """A copy of the model whose initializers keep name, dims and type but no data."""
    import onnx

    stripped = onnx.ModelProto()
    stripped.CopyFrom(proto)
    for t in stripped.graph.initializer:
        for field in (
            "raw_data",
            "float_data",
            "int32_data",
            "int64_data",
            "double_data",
            "uint64_data",
            "string_data",
            "external_data",
        ):
            t.ClearField(field)
        t.data_location = 0
    return stripped
