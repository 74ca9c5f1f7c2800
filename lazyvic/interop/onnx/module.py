"""The imported model: :func:`load` and :class:`OnnxModule`, an ONNX graph as a lazyvic module.

Loading reads the file (``reader.py``), checks every node against the converter registry at once
(unknown ops, other domains, versions, unsupported features: one UnsupportedOpError listing them
all), and builds the module: floating-point initializers become ``nn.Parameter`` s and integer and
bool ones buffers, under ``state_dict`` keys equal to the initializer names when those are dotted
identifiers (``layer1.0.conv1.weight`` -> nested submodules), else sanitized
(:func:`state_dict_keys`). Its ``config`` is ``{"model": base64 of the ModelProto with the
initializers' data stripped, "source": file name}``, so ``OnnxModule(**config)`` rebuilds the same
structure with zero-filled parameters and lazyvic format v1 (``lazyvic.save`` / ``lazyvic.load``)
round-trips it.

Calling the module runs the nodes in order, each through its converter (``converters/``), on
values that are known constants (NumPy arrays) or lazy Tensors (see ``context.py``): a node whose
inputs are all constants folds with NumPy, so shape arithmetic never reaches the lazy graph, while
the computation on data (graph inputs, floating-point initializers) stays lazy and is traced,
cached, fused and differentiated like any other lazyvic code. Inputs that the spec calls tensors
but that lazyvic needs as Python values (Reshape's shape, Slice's starts/ends, axes, ...) are read
from constants, or from a Tensor that already holds data (no sync); a Tensor still pending there
(a shape computed from data) is computed first with ``.numpy()`` (a sync point).

Untrusted models: loading checks that the graph is in single static assignment form (no duplicate
initializer or input names, no node output that redefines a name) and that no tensor refers to
external data it could not read from the model's folder (``reader.py``); parameters are created
lazily, so a stored config naming huge initializer shapes allocates nothing before
``load_state_dict`` checks the shapes. A run may make at most ``max_fold_bytes`` (plus the bytes
of its inputs) in NumPy constants (``context.py``), checked before each array is made.
"""

from __future__ import annotations

import base64
import math
import re
import warnings

import numpy as np

from lazyvic.creation import full
from lazyvic.errors import LazyvicError, OnnxError, UnsupportedOpError
from lazyvic.interop.format_v1 import load_limit
from lazyvic.interop.onnx.context import (
    ELEM_DTYPES,
    RUN_BUDGET,
    SUPPORTED_TYPES_TEXT,
    NodeContext,
    const_tensor,
    elem_name,
    is_const,
    lazyvic_dtype,
    run_budget,
    shape_of,
)
from lazyvic.interop.onnx.halves import HALF_IN_FLOAT32, convert_widened
from lazyvic.interop.onnx.reader import initializer_arrays, read_model, refuse_external_data, strip_initializers
from lazyvic.interop.onnx.registry import MAX_OPSET, MIN_OPSET, converter, supported_ops
from lazyvic.nn.module import Module, Parameter
from lazyvic.tensor import Tensor

_DEFAULT_DOMAINS = ("", "ai.onnx")


# ------------------------------------------------------------------ state_dict names
_NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z|[0-9]+\Z")


def state_dict_keys(names) -> dict:
    """Initializer name -> ``state_dict`` key, deterministic in the names' order.

    A name whose "."-separated parts are all Python identifiers or digit strings (``layer1.0.conv1.
    weight``, as lazyvic's and PyTorch's exporters write) is kept: it becomes nested submodules. Any
    other name (``onnx::MatMul_123``, ``/fc/Gemm_output``), and a name that is also the prefix of
    another kept name, becomes a flat key: every character outside ``[A-Za-z0-9_]`` is replaced by
    ``_``, a leading digit gets a ``_`` prefix, and a clash with a kept name, a submodule name or an
    earlier flat key gets ``_2``, ``_3``, ... appended (``onnx::MatMul_123`` -> ``onnx__MatMul_123``).
    """
    names = list(names)
    dotted = [n for n in names if all(_NAME_PART.match(p) for p in n.split("."))]
    prefixes = set()
    for n in dotted:  # every proper prefix, found by position (linear in the name's length)
        prefixes.update(n[:i] for i, c in enumerate(n) if c == ".")
    keys = {n: n for n in dotted if n not in prefixes}
    taken = set(keys.values()) | prefixes
    next_suffix: dict = {}  # base -> the suffix to try next, so n names of one base cost O(n), not O(n^2)
    for n in names:
        if n in keys:
            continue
        base = re.sub(r"[^A-Za-z0-9_]", "_", n) or "_"
        if base[0].isdigit():
            base = "_" + base
        key, i = base, next_suffix.get(base, 1)
        if i > 1:
            key = f"{base}_{i}"
        while key in taken:
            i += 1
            key = f"{base}_{i}"
        next_suffix[base] = i
        keys[n] = key
        taken.add(key)
    return keys


class OnnxShapeWarning(UserWarning):
    """A graph output whose computed shape differs from the shape the model declares for it (a
    static size where an axis is dynamic, as PyTorch's dynamo exporter writes for an LSTM's
    outputs): the computed value is returned, as onnxruntime does after its warning."""


class OnnxSubmodule(Module):
    """A namespace module that holds the parameters under one dotted prefix of an imported graph."""

    def forward(self, *args):
        raise TypeError("an OnnxSubmodule only holds parameters; call the OnnxModule that owns it")


# ------------------------------------------------------------------ the module
class OnnxModule(Module):
    """An ONNX graph as a lazyvic module (build with :func:`load`).

    ``OnnxModule(model=..., source=...)`` rebuilds the structure from ``config`` (see
    :func:`load`) with zero-filled parameters, created lazily (nothing is allocated until they
    are used); ``lazyvic.load`` then fills them. Attributes: ``input_names`` / ``output_names``
    (graph order), ``opset`` (default domain), ``initializer_keys`` (initializer name ->
    state_dict key), ``config`` (JSON-able), ``max_fold_bytes`` (how many bytes of NumPy
    constants one call may make beyond the bytes of its inputs; default
    ``lazyvic.interop.format_v1.load_limit`` of the model's size: ``LAZYVIC_MAX_LOAD_BYTES``, else
    256 MiB or the model's size when larger; assign to change it).

    Raises OnnxError for a stored graph that cannot be parsed, refers to external data, or is not
    in single static assignment form (see :func:`load`).
    """

    def __init__(self, model: str, source: str = "<ModelProto>"):
        import onnx

        super().__init__()
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(base64.b64decode(model))
        except Exception as e:
            raise OnnxError(f"{source}: the stored graph cannot be parsed: {type(e).__name__}") from None
        object.__setattr__(self, "config", {"model": model, "source": source})
        self._build(proto, source)

    # ---------------------------------------------------------------- build
    def _build(self, proto, source: str) -> None:
        graph = proto.graph
        opsets = {o.domain: o.version for o in proto.opset_import}
        opset = opsets.get("", opsets.get("ai.onnx"))
        if opset is None:
            raise UnsupportedOpError(f"{source}: the model imports no default-domain (ai.onnx) opset")
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise UnsupportedOpError(
                f"{source}: opset {opset} is not supported (lazyvic imports default-domain "
                f"opsets {MIN_OPSET} to {MAX_OPSET}, as onnxruntime does from 7; convert older models "
                f"with onnx.version_converter.convert_version(model, 13))"
            )
        if graph.sparse_initializer:
            raise UnsupportedOpError(
                f"{source}: sparse initializers "
                f"({', '.join(repr(t.values.name) for t in graph.sparse_initializer)}) "
                f"are not supported"
            )
        refuse_external_data(proto, source)
        init_names = [t.name for t in graph.initializer]
        init_set = set(init_names)
        _refuse_duplicates(source, "initializer", init_names)
        _refuse_duplicates(source, "graph input", [vi.name for vi in graph.input])
        inputs = [vi for vi in graph.input if vi.name not in init_set]
        input_set = {vi.name for vi in inputs}
        steps, unsupported = [], {}
        defined = set(init_names) | {vi.name for vi in inputs}
        undefined = []
        # Which values are known constants when the graph runs (see the module docstring): it decides
        # whether a fold_only op (Floor, Sin, ...) can be imported.
        constants = {
            t.name
            for t in graph.initializer
            if t.data_type not in ELEM_DTYPES or not ELEM_DTYPES[t.data_type].is_floating_point
        }
        for i, node in enumerate(graph.node):
            ctx = NodeContext(node, 0, source, i)
            problem = self._node_problem(ctx, opsets)
            conv = converter(ctx.op)
            if conv is not None and (
                conv.constant or (conv.fold is not None and all(n in constants for n in node.input if n))
            ):
                constants.update(n for n in node.output if n)
            elif conv is not None and conv.fold_only and problem is None:
                problem = (
                    f"{ctx.op} of a computed tensor (lazyvic has no {ctx.op} primitive: it folds {ctx.op} "
                    f"of constants only, as in shape arithmetic)"
                )
            if problem is not None:
                unsupported.setdefault(problem, []).append(ctx.name)
            for name in node.input:
                if name and name not in defined:
                    undefined.append((ctx, name))
            for name in node.output:
                if name and name in defined:
                    what = (
                        "a graph input"
                        if name in input_set
                        else "an initializer"
                        if name in init_set
                        else "the output of an earlier node or of this one"
                    )
                    raise OnnxError(
                        f"{ctx.label()}: output '{name}' redefines {what}; an ONNX graph assigns each "
                        f"name once (single static assignment), so the model is malformed"
                    )
                if name:
                    defined.add(name)
            steps.append(ctx)
        if unsupported:
            lines = [f"{what}: nodes {', '.join(repr(n) for n in names)}" for what, names in unsupported.items()]
            raise UnsupportedOpError(
                f"{source}: {len(unsupported)} unsupported op type(s):\n  "
                + "\n  ".join(lines)
                + f"\n(lazyvic imports {', '.join(supported_ops())})"
            )
        if undefined:
            ctx, name = undefined[0]
            raise OnnxError(
                f"{ctx.label()}: input '{name}' is not defined (not a graph input, an initializer or "
                f"the output of an earlier node; a missing initializer?)"
                + (f"; {len(undefined) - 1} more undefined inputs" if len(undefined) > 1 else "")
            )
        for out in graph.output:
            if out.name not in defined:
                raise OnnxError(f"{source}: graph output '{out.name}' is not produced by any node")
        for vi in inputs:
            elem = vi.type.tensor_type.elem_type
            if not vi.type.HasField("tensor_type"):
                raise UnsupportedOpError(
                    f"{source}: graph input '{vi.name}' is not a tensor (sequences, maps and "
                    f"optionals are not supported)"
                )
            if elem not in ELEM_DTYPES:
                raise OnnxError(
                    f"{source}: graph input '{vi.name}' has type {elem_name(elem)} "
                    f"(lazyvic supports {SUPPORTED_TYPES_TEXT})"
                )
        keys = state_dict_keys(init_names)
        slots = {}
        declared_bytes = 0
        for t in graph.initializer:
            if t.data_type not in ELEM_DTYPES:
                raise OnnxError(
                    f"{source}: initializer '{t.name}' has type {elem_name(t.data_type)} "
                    f"(lazyvic supports {SUPPORTED_TYPES_TEXT})"
                )
            if any(n < 0 for n in t.dims):
                raise OnnxError(f"{source}: initializer '{t.name}' has a negative dimension in shape {tuple(t.dims)}")
            d = ELEM_DTYPES[t.data_type]
            owner, attr = self._owner(keys[t.name])
            # Lazy zeros: a stored config names shapes, and nothing that size may exist before
            # load_state_dict has checked them against the file's tensors.
            zeros = full(tuple(t.dims), False if d.name == "bool" else 0, dtype=d)
            declared_bytes += math.prod(t.dims) * np.dtype(d.np).itemsize
            if d.is_floating_point:
                owner.register_parameter(attr, Parameter(zeros))
            else:
                owner.register_buffer(attr, zeros)
            slots[t.name] = (owner, attr, d.is_floating_point)
        d = self.__dict__
        d["opset"] = opset
        d["input_names"] = [vi.name for vi in inputs]
        d["output_names"] = [o.name for o in graph.output]
        d["initializer_keys"] = keys
        d["_onnx_source"] = source
        d["_onnx_inputs"] = [(vi.name, vi.type.tensor_type) for vi in inputs]
        d["_onnx_outputs"] = [(o.name, o.type.tensor_type) for o in graph.output]
        d["_onnx_steps"] = steps
        d["_onnx_slots"] = slots
        d["max_fold_bytes"] = load_limit(proto.ByteSize() + declared_bytes)

    @staticmethod
    def _node_problem(ctx: NodeContext, opsets: dict):
        import onnx

        domain = ctx.proto.domain
        if domain not in _DEFAULT_DOMAINS:
            return f"{ctx.op} (domain {domain!r}, lazyvic imports the default ai.onnx domain only)"
        conv = converter(ctx.op)
        if conv is None:
            return ctx.op
        opset = opsets.get("", opsets.get("ai.onnx"))
        try:
            ctx.version = onnx.defs.get_schema(ctx.op, opset, "").since_version
        except Exception:
            return f"{ctx.op} (no schema at opset {opset})"
        if ctx.version not in conv.since:
            return (
                f"{ctx.op} version {ctx.version} (at opset {opset}; lazyvic handles versions "
                f"{', '.join(map(str, conv.since))})"
            )
        if conv.check is not None:
            return conv.check(ctx)
        return None

    def _owner(self, key: str):
        owner = self
        *path, attr = key.split(".")
        for part in path:
            child = owner._modules.get(part)
            if child is None:
                child = OnnxSubmodule()
                owner.add_module(part, child)
            owner = child
        return owner, attr

    # ---------------------------------------------------------------- run
    def _bind_input(self, name: str, type_proto, value) -> Tensor:
        source = self._onnx_source
        expected = ELEM_DTYPES[type_proto.elem_type]
        if isinstance(value, Tensor):
            t = value
        else:
            arr = np.asarray(value)
            if lazyvic_dtype(arr.dtype) is None:
                raise OnnxError(
                    f"{source}: graph input '{name}' got an array of dtype {arr.dtype} "
                    f"(lazyvic supports {SUPPORTED_TYPES_TEXT})"
                )
            t = const_tensor(arr, dtype=arr.dtype, device=NodeContext.device)
        if t.dtype is not expected:
            raise OnnxError(f"{source}: graph input '{name}' expects {expected.name}, got {t.dtype.name}")
        if type_proto.HasField("shape"):
            dims = type_proto.shape.dim
            declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
            fits = len(dims) == t.ndim and all(
                not d.HasField("dim_value") or d.dim_value == s for d, s in zip(dims, t.shape)
            )
            if not fits:
                raise OnnxError(
                    f"{source}: graph input '{name}' has shape {t.shape}, but the graph declares {declared}"
                )
        return t

    def forward(self, *inputs):
        """Run the graph on ``inputs`` (lazyvic Tensors or NumPy arrays, in graph-input order).

        Returns one Tensor for a single-output graph, else a tuple in graph-output order.
        Raises OnnxError for a wrong number of inputs, a shape or dtype that does not fit the
        graph's declaration, or a node whose input shapes do not fit (naming the node).
        """
        source = self._onnx_source
        if len(inputs) != len(self._onnx_inputs):
            raise OnnxError(
                f"{source}: the graph takes {len(self._onnx_inputs)} inputs "
                f"({', '.join(self.input_names)}), got {len(inputs)}"
            )
        previous = NodeContext.device
        NodeContext.device = next((p.device for p in self.parameters()), "cpu")  # where .to() put the model
        given = sum(_nbytes(v) for v in inputs)  # constants made from the inputs' shapes may be that large
        budget_token = RUN_BUDGET.set(run_budget(self.max_fold_bytes + given, source))
        try:
            env = {}
            for (name, type_proto), value in zip(self._onnx_inputs, inputs):
                env[name] = self._bind_input(name, type_proto, value)
            for name, (owner, attr, is_param) in self._onnx_slots.items():
                if is_param:
                    env[name] = owner._parameters[attr]
                else:  # integer initializers are constants: shape arithmetic folds through them
                    env[name] = np.asarray(owner._buffers[attr].numpy())
            for ctx in self._onnx_steps:
                self._run_node(ctx, env)
            outs = []
            for name, type_proto in self._onnx_outputs:
                value = env[name]
                t = (
                    value
                    if isinstance(value, Tensor)
                    else const_tensor(value, dtype=value.dtype, device=NodeContext.device)
                )
                self._check_output(name, type_proto, t)
                outs.append(t)
        finally:
            NodeContext.device = previous
            RUN_BUDGET.reset(budget_token)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _check_output(self, name, type_proto, t: Tensor) -> None:
        """Warn (:class:`OnnxShapeWarning`) when an output's shape differs from its declaration:
        onnxruntime warns and returns the computed value; inputs, by contrast, must fit."""
        if not type_proto.HasField("shape"):
            return
        dims = type_proto.shape.dim
        if len(dims) != t.ndim or any(d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, t.shape)):
            declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
            warnings.warn(
                f"{self._onnx_source}: graph output '{name}' has shape {t.shape}, but the graph "
                f"declares {declared}; returning the computed shape (as onnxruntime does)",
                OnnxShapeWarning,
                stacklevel=4,
            )

    @staticmethod
    def _run_node(ctx: NodeContext, env: dict) -> None:
        conv = converter(ctx.op)
        args = [env[name] if name else None for name in ctx.inputs]
        try:
            present = [a for a in args if a is not None]
            if conv.fold is not None and all(is_const(a) for a in present):
                budget = RUN_BUDGET.get()
                before = budget.used if budget is not None else 0
                out = conv.fold(ctx, *args)
                if budget is not None and ctx.op != "Constant":  # a Constant's bytes are the file's own
                    _charge_fresh(ctx, budget, budget.used - before, out, present)
            elif ctx.op in HALF_IN_FLOAT32:  # float16/bfloat16: computed in float32, rounded once
                out = convert_widened(ctx, conv.convert, args)
            else:
                out = conv.convert(ctx, *args)
        except (OnnxError, UnsupportedOpError):
            raise
        except MemoryError:
            raise ctx.error("ran out of memory (MemoryError)") from None
        except (LazyvicError, ValueError, IndexError, TypeError, ArithmeticError, RecursionError) as e:
            raise ctx.error(
                f"{type(e).__name__}: {e} (input shapes "
                f"{', '.join(str(shape_of(a)) if a is not None else '-' for a in args)})"
            ) from None
        outs = out if isinstance(out, tuple) else (out,)
        for i, name in enumerate(ctx.outputs):
            if not name:
                continue
            if i >= len(outs):
                raise ctx.error(f"output {i} ('{name}') is not produced by lazyvic's converter")
            value = outs[i]
            if isinstance(value, np.ndarray) or np.isscalar(value):
                value = np.asarray(value)
            env[name] = value

    def extra_repr(self) -> str:
        return (
            f"source={self._onnx_source!r}, opset={self.opset}, inputs={self.input_names}, "
            f"outputs={self.output_names}, nodes={len(self._onnx_steps)}"
        )


def _nbytes(value) -> int:
    if isinstance(value, Tensor):
        return math.prod(value.shape) * np.dtype(value.dtype.np).itemsize
    return np.asarray(value).nbytes


def _refuse_duplicates(source: str, what: str, names: list) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise OnnxError(f"{source}: {what} name '{n}' is used more than once (names must be unique)")
        seen.add(n)


def _charge_fresh(ctx: NodeContext, budget, reserved: int, out, inputs: list) -> None:
    """Count what a fold made, beyond what it reserved, against the run's budget (views of an
    input, such as Reshape's and Identity's results, made nothing)."""
    fresh = 0
    for value in out if isinstance(out, tuple) else (out,):
        if isinstance(value, np.ndarray) and not any(np.may_share_memory(value, a) for a in inputs):
            fresh += value.nbytes
    if fresh > reserved:
        budget.charge(fresh - reserved, f"node '{ctx.name}' ({ctx.op}): the folded constants")


# ------------------------------------------------------------------ entry point
def load(model, *, name: str | None = None, max_bytes: float | None = None) -> OnnxModule:
    """Import an ONNX model as a lazyvic module.

    Args:
        model: a path (str or os.PathLike) of a ``.onnx`` file — initializers stored as external
            data (``model.onnx.data`` next to it, as PyTorch's exporter writes) are read from the
            model's directory — or an ``onnx.ModelProto`` (with its data loaded).
        name: what error messages call the model (default: the file's name, or
            ``<ModelProto graph-name>``); useful with a ModelProto read from a file.
        max_bytes: how many bytes the load, and each call of the module (``max_fold_bytes``),
            may allocate beyond the model's own data (external data read twice, constants folded
            from a shape in the file); default ``lazyvic.interop.format_v1.load_limit``: the
            environment variable ``LAZYVIC_MAX_LOAD_BYTES``, else 256 MiB or the model's size when
            larger. ``math.inf`` turns it off for models you trust.

    Returns:
        An :class:`OnnxModule`. Calling it with the graph inputs (Tensors or NumPy arrays, in
        graph-input order; initializers listed as graph inputs are not user inputs) returns a
        Tensor, or a tuple for several graph outputs. Floating-point initializers are
        ``nn.Parameter`` s (trainable; autograd flows through the graph), integer and bool ones are
        buffers; their ``state_dict`` keys follow :func:`state_dict_keys`. Element types: the
        thirteen of ``lazyvic.dtypes`` (FLOAT, DOUBLE, FLOAT16, BFLOAT16 as ``ml_dtypes.bfloat16``
        arrays, BOOL, INT8/16/32/64, UINT8/16/32/64); FLOAT8*, INT4/UINT4, complex and strings are
        refused. Shapes are static (known when the module is called).

    Semantics: the ONNX operator specification (https://onnx.ai/onnx/operators/) at the model's
    default-domain opset, 7 to 28 (onnxruntime's range from below). Each op is read at its schema
    version for that opset (``onnx.defs.get_schema(op, opset).since_version``): ReduceSum's axes
    are an input from 13 (an attribute before), ReduceMean/Max/Min's from 18; Split's ``split`` is
    an input from 13 and ``num_outputs`` exists from 18; Reshape's ``allowzero`` from 14;
    Squeeze/Unsqueeze take axes as an input from 13; Softmax and LogSoftmax are per-axis from 13
    and coerce their input to 2-D before; Slice's starts/ends/axes are inputs from 10; Pad's pads
    and Clip's bounds are inputs from 11; Dropout-7/-10 have a ratio attribute; Resize-10 and
    Upsample-7/-9 use asymmetric coordinates; BatchNormalization-7 has ``spatial`` and, like -9,
    a five-output training form. :func:`supported_ops` lists every op and the versions handled; versions after
    18 are included where the schema change concerns only element types (checked by
    comparing the schemas' inputs, outputs and attributes), or is implemented (AveragePool-19
    dilations, Pad-19 ``wrap``, SpaceToDepth-28 ``mode``). Conv and ConvTranspose are 1-D, 2-D or
    3-D; MaxPool and AveragePool take any number of spatial axes.

    External data is read from the model's folder only (see ``reader.py``): a location that is
    absolute, climbs out with ``..``, leaves through a symbolic link, or whose offset and length do
    not lie within the file is refused, for initializers and for tensors in node attributes alike;
    a ModelProto that still refers to external data is refused (it has no folder).

    Raises:
        OnnxError: a missing, truncated or non-ONNX file, missing external data or initializer
            data, external data outside the model's folder or beyond its file, a node input no
            earlier node, initializer or graph input defines, a duplicate initializer or graph
            input name, a node output that redefines a name, an unsupported element type,
            running out of memory; when called, inputs that do not fit the graph, nodes whose
            shapes do not fit, and constants past ``max_fold_bytes`` (the message names the
            file, the node and its op type). A graph output whose shape differs from the model's
            declaration is returned with an :class:`OnnxShapeWarning`, as onnxruntime warns.
        UnsupportedOpError: (at load time) every op type lazyvic cannot import, each with its node
            names, listed at once: unknown ops, other domains (e.g. ``com.microsoft``), op
            versions outside the handled ones, unsupported features (e.g. Conv with 3 spatial
            axes, Pad's wrap mode before Pad-19, Cast to float8), or an opset outside 7..28.
    """
    try:
        proto, source = read_model(model, max_bytes=max_bytes)
        source = name or source
        arrays = initializer_arrays(proto, source)
        model_bytes = proto.ByteSize()
        structure = base64.b64encode(strip_initializers(proto).SerializeToString()).decode("ascii")
        del proto
        module = OnnxModule(structure, source=source)
        keys = module.initializer_keys
        module.load_state_dict({keys[init]: arr for init, arr in arrays.items()})
    except MemoryError:
        raise OnnxError(
            f"{name or _describe(model)}: ran out of memory while loading the model (MemoryError)"
        ) from None
    except RecursionError:
        raise OnnxError(
            f"{name or _describe(model)}: the model is nested too deeply for Python (RecursionError)"
        ) from None
    module.__dict__["max_fold_bytes"] = load_limit(model_bytes, max_bytes)
    return module


def _describe(model) -> str:
    return str(model) if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__") else "<ModelProto>"


__all__ = ["load", "OnnxModule", "OnnxShapeWarning", "OnnxSubmodule", "state_dict_keys"]
