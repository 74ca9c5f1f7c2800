"""Reading an ONNX file: the protobuf, its external data, and the initializers' arrays.

External data (``TensorProto.data_location == EXTERNAL``) is resolved for every tensor of the
model — initializers, sparse initializers, tensors in node attributes (``Constant``'s ``value``,
``ConstantOfShape``'s, ...), in subgraphs at any depth, in functions and training graphs — against
the model's own folder, never the working directory, under one set of rules: the location is a
relative path that stays inside the folder (no absolute path, no ``..`` leaving it, no symbolic
link whose target lies outside it), names a regular file, and ``offset`` / ``length`` lie within
that file; a tensor of a type lazyvic knows must get exactly the bytes its shape needs. The bytes
are copied into the tensor (``raw_data``), so nothing in the loaded model refers to a file any
more. A model given as a ``ModelProto`` has no folder: external data in it is refused. Reading the
same bytes for many tensors counts against the load limit (``format_v1.load_limit``).
"""

from __future__ import annotations

import math
import os
import stat

import numpy as np

from lazyvic.errors import OnnxError
from lazyvic.interop.format_v1 import LoadBudget, load_limit
from lazyvic.interop.onnx.context import ELEM_DTYPES, SUPPORTED_TYPES_TEXT, elem_name, tensor_array


def read_model(model, *, max_bytes: float | None = None) -> tuple:
    """``(onnx.ModelProto with external data loaded, a name for error messages)``.

    ``model`` is a path (str or os.PathLike) or an ``onnx.ModelProto``. Raises OnnxError for a
    missing, truncated or non-ONNX file, external data that cannot be read or breaks the rules of
    the module docstring (naming the file, the tensor's node or initializer and the problem), or
    a ModelProto that still refers to external data; TypeError for anything else. ``max_bytes``:
    see :func:`lazyvic.interop.format_v1.load_limit` (here it bounds external bytes read more than
    once).
    """
    import onnx

    if isinstance(model, onnx.ModelProto):
        source = f"<ModelProto {model.graph.name or 'unnamed'}>"
        refuse_external_data(model, source)
        return model, source
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
    except MemoryError:
        raise OnnxError(f"{path}: ran out of memory while parsing the protobuf (MemoryError)") from None
    except Exception as e:
        raise OnnxError(
            f"{path}: not a valid ONNX file (truncated or not ONNX): cannot parse the protobuf: {type(e).__name__}"
        ) from None
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.opset_import:
        raise OnnxError(f"{path}: not an ONNX model (no IR version, graph or opset import; truncated or not ONNX)")
    load_external_data(proto, path, max_bytes=max_bytes)
    return proto, source


def model_tensors(proto):
    """Every TensorProto of a model, as ``(where, tensor)``; ``where`` names it for messages
    (``initializer 'w'``, ``node 'c' (Constant) attribute 'value'``, and for a subgraph ``... in
    attribute 'then_branch' of node 'if' (If)``). Walks subgraphs with a stack, not recursion."""
    graphs = [(proto.graph, "")]
    graphs += [(f, f" in function '{f.name}'") for f in proto.functions]
    for info in proto.training_info:
        graphs += [(info.initialization, " in the training initialization"), (info.algorithm, " in the training")]
    while graphs:
        graph, suffix = graphs.pop()
        for t in getattr(graph, "initializer", ()):
            yield f"initializer '{t.name}'{suffix}", t
        for sparse in getattr(graph, "sparse_initializer", ()):
            yield f"sparse initializer '{sparse.values.name}'{suffix}", sparse.values
            yield f"sparse initializer '{sparse.values.name}' (indices){suffix}", sparse.indices
        for i, node in enumerate(graph.node):
            node_name = f"node '{node.name or f'{node.op_type}_{i}'}' ({node.op_type})"
            for a in node.attribute:
                where = f"{node_name} attribute '{a.name}'{suffix}"
                if a.HasField("t"):
                    yield where, a.t
                for t in a.tensors:
                    yield where, t
                for sparse in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                    yield where, sparse.values
                    yield f"{where} (indices)", sparse.indices
                if a.HasField("g"):
                    graphs.append((a.g, f" in attribute '{a.name}' of {node_name}{suffix}"))
                graphs += [(g, f" in attribute '{a.name}' of {node_name}{suffix}") for g in a.graphs]


def _uses_external_data(t) -> bool:
    from onnx import TensorProto

    return t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL


def refuse_external_data(proto, source: str) -> None:
    """OnnxError when a tensor of ``proto`` still refers to external data (a model given as a
    ModelProto, or one stored in a lazyvic file): there is no folder it could be read from."""
    for where, t in model_tensors(proto):
        if _uses_external_data(t):
            location = next((e.value for e in t.external_data if e.key == "location"), "?")
            raise OnnxError(
                f"{source}: {where} refers to external data ({location!r}), but the model was not read from "
                f"a file, so there is no folder to read it from: load the model from its path "
                f"(lazyvic.onnx.load('model.onnx')) to read external data next to it"
            )


def load_external_data(proto, path: str, max_bytes: float | None = None) -> None:
    """Copy the external data of every tensor of ``proto`` (read from ``path``) into the tensor,
    under the rules of the module docstring; OnnxError naming the tensor and the problem."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    pending = [(where, t) for where, t in model_tensors(proto) if _uses_external_data(t)]
    if not pending:
        return
    files: dict = {}  # real path -> size; each file's bytes are credited once
    budget = LoadBudget(load_limit(os.path.getsize(path), max_bytes), path, OnnxError)
    for where, t in pending:

        def fail(problem: str, where=where) -> OnnxError:
            return OnnxError(
                f"{path}: cannot load the external data of {where} (expected inside the model's folder "
                f"{folder}): {problem}"
            )

        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        target = _external_file(location, folder, fail)
        offset = _external_int(info, "offset", 0, fail)
        try:
            fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            raise fail(f"{location!r}: no such file") from None
        except OSError as e:
            raise fail(f"{location!r}: cannot open it: {e.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise fail(f"{location!r} is not a regular file")
        with os.fdopen(fd, "rb") as f:
            if target not in files:
                files[target] = st.st_size
                budget.credit(st.st_size)
            if offset > st.st_size:
                raise fail(f"offset {offset} lies beyond the end of {location!r} ({st.st_size} bytes)")
            # No length: the bytes the shape needs (onnx would read to the end of the file).
            length = _external_int(info, "length", _tensor_nbytes(t) or st.st_size - offset, fail)
            if offset + length > st.st_size:
                raise fail(f"offset {offset} + length {length} runs past the end of {location!r} ({st.st_size} bytes)")
            expected = _tensor_nbytes(t)
            if expected is not None and expected != length:
                raise fail(f"{location!r} gives {length} bytes, but shape {tuple(t.dims)} needs {expected}")
            budget.charge(length, f"{where} ({length} bytes of {location!r})")
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise fail(f"{location!r} ended after {len(data)} of {length} bytes (changed while read?)")
        t.raw_data = data
        t.data_location = 0  # TensorProto.DEFAULT
        del t.external_data[:]


def _external_file(location: str, folder: str, fail) -> str:
    """The real path of ``location`` inside ``folder``, or ``fail(...)``."""
    if not location:
        raise fail("no 'location' is given")
    if "\0" in location:
        raise fail(f"location {location!r} contains a NUL character")
    parts = location.replace("\\", "/").split("/")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or os.path.splitdrive(location)[0]:
        raise fail(f"location {location!r} is an absolute path; external data must be relative to the model")
    if ".." in parts:
        raise fail(f"location {location!r} contains '..'; external data must stay inside the model's folder")
    target = os.path.realpath(os.path.join(folder, *[p for p in parts if p not in ("", ".")]))
    if os.path.commonpath([target, folder]) != folder or target == folder:
        raise fail(f"location {location!r} leads outside the model's folder (to {target}, through a symbolic link)")
    return target


def _external_int(info: dict, key: str, default: int, fail) -> int:
    text = info.get(key)
    if text is None:
        return default
    if not (isinstance(text, str) and text.strip().isdigit()):
        raise fail(f"{key} {text!r} is not a non-negative integer")
    return int(text)


def _tensor_nbytes(t) -> int | None:
    """The bytes a tensor's shape needs, for the element types lazyvic has (None for others)."""
    d = ELEM_DTYPES.get(t.data_type)
    if d is None:
        return None
    return math.prod(int(n) for n in t.dims) * np.dtype(d.np).itemsize


def initializer_arrays(proto, source: str) -> dict:
    """Initializer name -> NumPy array; OnnxError for an unloaded external, a type lazyvic lacks,
    or missing / bad data."""
    arrays = {}
    for t in proto.graph.initializer:
        if _uses_external_data(t):
            raise OnnxError(
                f"{source}: initializer '{t.name}' refers to external data that was not loaded; "
                f"load from the file path so lazyvic reads it from the model's directory"
            )
        if t.data_type not in ELEM_DTYPES:
            raise OnnxError(
                f"{source}: initializer '{t.name}' has type {elem_name(t.data_type)} "
                f"(lazyvic supports {SUPPORTED_TYPES_TEXT})"
            )
        if any(n < 0 for n in t.dims):
            raise OnnxError(f"{source}: initializer '{t.name}' has a negative dimension in shape {tuple(t.dims)}")
        try:
            arr = tensor_array(t)
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
