"""ONNX export: a lazyvic module or function -> an ONNX model (opset 13 by default).

How it works: the call is recorded on the example inputs as a lazy graph (nothing
runs); the graph is walked from the outputs and each primitive becomes the ONNX
nodes that its op-table rule (``OpDef.onnx``, in ``lazyvic/ops/``) emits. A
composite built from primitives (conv2d's im2col, softmax, cat, an embedding
lookup, ...) that marked its result with one ONNX node (``lazyvic.trace.composite``)
is written as that node, and the primitives behind it are skipped. Opset 13 has no
LayerNormalization or Gelu: below opsets 17 and 20 they are written as their
decompositions (ReduceMean-style sums, Sqrt, Div; Erf or Tanh), which is what the
primitives already are.
An RNN/LSTM/GRU layer is recorded unrolled and marked as one ONNX RNN/LSTM/GRU node
(``functional/recurrent._mark_onnx``). Nested tuples/lists of outputs are flattened in order,
as torch.onnx.export does.

Names: graph inputs ``input`` (``input_0``, ``input_1``, ... for several) and outputs
``output`` / ``output_0`` ... unless given; initializers are named by the module's
``state_dict()`` keys, so ``lazyvic.onnx.load`` gives the same keys back; other
constants ``const_N``; nodes by the module path that recorded them.

Dynamic axes: the graph is recorded once more per dynamic axis with that axis one
size larger (one smaller where the call refuses larger); an example size of 1 is recorded
at 2, since size-1 axes take broadcasting paths. Every integer that changes with the axis
(a reshape's target shape, an expand shape, slice bounds) must be an affine function
of the axis sizes; it is computed in the graph from ``Shape`` of the input (a single
changing entry of a Reshape target becomes ``-1``). A graph whose structure or
constants change with the axis size (a mean over the batch, a mask built for one
length) cannot be exported with that axis dynamic: OnnxError says which node.

Element types: every lazyvic dtype is written as its TensorProto type (``builder.ONNX_DTYPES``;
bfloat16 tensors as BFLOAT16). A node whose schema at the opset refuses its type (Add of int8
before Add-14, Conv of bfloat16 before Conv-22, Relu of uint8) is computed in a wider type that
holds every value and cast back, which is lazyvic's own arithmetic (``legalize.py``); where no
such type exists, UnsupportedOpError names the op, the type and the opset that takes it.

References: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md)
for every node written; ``onnx.helper`` builds the protobufs and
``onnx.checker.check_model(full_check=True)`` checks the result.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import OnnxError, UnsupportedOpError
from lazyvic.interop.format_v1 import _write_atomic as write_atomic
from lazyvic.interop.onnx.builder import ONNX_DTYPES, GraphBuilder, SymInt, drop_redundant_broadcasts, rename
from lazyvic.modes import no_grad
from lazyvic.nn.module import Module
from lazyvic.ops import OPS
from lazyvic.runtime import device, metrics
from lazyvic.sync import sync
from lazyvic.tensor import Tensor
from lazyvic.trace import composite

MIN_OPSET, MAX_OPSET = 13, 18


# -- recording
def _as_tensors(example_inputs) -> tuple:
    items = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    out = []
    for i, x in enumerate(items):
        if isinstance(x, Tensor):
            out.append(x)
        elif isinstance(x, np.ndarray):
            out.append(Tensor(x))
        else:
            raise TypeError(
                f"onnx export: example input {i} is a {type(x).__name__}; expected a lazyvic Tensor or a NumPy array"
            )
    return tuple(out)


def _flat_outputs(out) -> list:
    """The call's output Tensors in order, nested tuples and lists flattened depth-first (as
    torch.onnx.export does: an ``nn.LSTM``'s ``(output, (h_n, c_n))`` is three graph outputs)."""
    flat: list = []

    def walk(item, where: str) -> None:
        if isinstance(item, Tensor):
            flat.append(item)
        elif isinstance(item, (tuple, list)):
            for i, t in enumerate(item):
                walk(t, f"{where}[{i}]")
        else:
            raise TypeError(
                f"onnx export: {'output ' + where if where else 'the output'} of the call is a {type(item).__name__}; expected Tensors "
                f"(a Tensor or a tuple/list of Tensors, nested or not)"
            )

    walk(out, "")
    return flat


class _Recording:
    """One recorded call: output nodes, composite marks, and the leaves' names."""

    def __init__(self, fn, inputs: tuple):
        traces_before = metrics.counters["traces"]
        with no_grad(), composite.recording() as marks:
            self.outputs = _flat_outputs(fn(*inputs))
        if metrics.counters["traces"] != traces_before:
            raise OnnxError(
                "onnx export: the call ran a sync point (.item(), .numpy(), print, lazyvic.sync ...) "
                "while recording; its values would be frozen into the graph as constants. Keep "
                "data-dependent Python out of the exported forward"
            )
        self.marks = marks
        self.inputs = inputs

    def usable_mark(self, node, opset: int):
        m = self.marks.get(node)
        if m is None and node.op == "buffer":
            m = composite.recipe_of(node)
        return m if m is not None and opset >= m.min_opset else None


def _deps(rec: _Recording, node, opset: int) -> tuple:
    m = rec.usable_mark(node, opset)
    if m is not None:
        return tuple(i for i in m.inputs if i is not None)
    return node.inputs


def _order(rec: _Recording, opset: int) -> list:
    """Nodes reachable from the outputs, inputs first (iterative post-order DFS)."""
    seen, order = set(), []
    for out in rec.outputs:
        stack = [(out._node, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            for i in reversed(_deps(rec, node, opset)):
                if i not in seen:
                    stack.append((i, False))
    return order


# -- dynamic axes
def _axes_spec(dynamic_axes, names: list, what: str) -> dict:
    """``{value name: {axis: dim name}}`` from PyTorch's ``dynamic_axes`` format."""
    spec = {}
    for name, axes in (dynamic_axes or {}).items():
        if isinstance(axes, dict):
            spec[name] = {int(a): str(n) for a, n in axes.items()}
        elif isinstance(axes, (list, tuple)):
            spec[name] = {int(a): f"{name}_dim{int(a)}" for a in axes}
        else:
            raise TypeError(
                f"onnx export: dynamic_axes[{name!r}] must be a dict {{axis: name}} or a list of axes, got {axes!r}"
            )
    return spec


def _symbolize(value, others: list, terms_of, where: str):
    """``value`` (ints, nested tuples) with every int that differs in ``others`` made a SymInt."""
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, (str, float, dt.DType)):
        if any(o != value for o in others):
            raise OnnxError(
                f"onnx export: {where} changes with a dynamic axis ({value!r} vs "
                f"{[o for o in others]}); it cannot be exported with that axis dynamic"
            )
        return value
    if isinstance(value, (int, np.integer)):
        if all(o == value for o in others):
            return value
        return SymInt(int(value), terms_of(int(value), [int(o) for o in others], where))
    if isinstance(value, (tuple, list)):
        if any(not isinstance(o, (tuple, list)) or len(o) != len(value) for o in others):
            raise OnnxError(f"onnx export: {where} changes rank with a dynamic axis")
        out = [_symbolize(v, [o[i] for o in others], terms_of, f"{where}[{i}]") for i, v in enumerate(value)]
        return type(value)(out) if isinstance(value, tuple) else out
    if isinstance(value, dict):
        return {k: _symbolize(v, [o[k] for o in others], terms_of, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, np.ndarray):
        if any(o.shape != value.shape or not np.array_equal(o, value) for o in others):
            raise OnnxError(f"onnx export: the constant {where} changes with a dynamic axis")
        return value
    return value


# -- export
def _check_opset(opset_version) -> int:
    if not isinstance(opset_version, int) or not MIN_OPSET <= opset_version <= MAX_OPSET:
        raise ValueError(
            f"onnx export: opset_version must be an int from {MIN_OPSET} to {MAX_OPSET}, got {opset_version!r}"
        )
    return opset_version


def _default_names(given, n: int, base: str, what: str) -> list:
    if given is None:
        return [base] if n == 1 else [f"{base}_{i}" for i in range(n)]
    given = list(given)
    if len(given) != n or len(set(given)) != n or not all(isinstance(g, str) and g for g in given):
        raise ValueError(f"onnx export: {what} must be {n} distinct non-empty strings, got {given!r}")
    return given


def export(
    model_or_fn,
    example_inputs,
    path=None,
    opset_version: int = 13,
    input_names=None,
    output_names=None,
    dynamic_axes=None,
    check: bool = True,
):
    """Export a module or function to ONNX, as ``torch.onnx.export``.

    Args:
        model_or_fn: an ``nn.Module`` (exported in evaluation mode, then put back in its mode) or a
            function of Tensors. Its parameters and buffers become initializers named by their
            ``state_dict()`` keys; other constants it uses are written as ``Constant`` nodes.
        example_inputs: a Tensor or NumPy array, or a tuple/list of them: the call is recorded on
            these (without running anything), so their shapes and dtypes fix the graph's.
        path: file to write (``str`` or ``os.PathLike``); written to a temporary file in the same
            folder and renamed, so a failed export leaves no partial file. None: only return it.
        opset_version: default-domain opset, 13 to 18. Below 17 LayerNormalization and below 20
            Gelu are written as their decompositions; ReduceMax/ReduceMin take ``axes`` as an input
            from 18.
        input_names, output_names: graph input and output names (defaults ``input``/``output``,
            numbered ``input_0`` ... when there are several).
        dynamic_axes: PyTorch's format, ``{name: {axis: dim_name}}`` or ``{name: [axis, ...]}``,
            for inputs (and outputs, which only get the names). See the module docstring.
        check: run ``onnx.checker.check_model(full_check=True)`` before writing.

    Returns:
        The ``onnx.ModelProto``.

    Raises:
        UnsupportedOpError: the recorded graph holds ops with no ONNX form at this opset (all are
            listed), e.g. random numbers (dropout in training mode) or scatter_add below opset 16,
            or an element type no op schema at this opset takes (Relu of int64 at opset 13).
        OnnxError: the call ran a sync point while recording, a dynamic axis changes the graph, or
            the checker rejects the model (a lazyvic bug: please report it).
        TypeError / ValueError: bad arguments (names, opset, inputs that are not tensors).
    """
    import onnx

    opset = _check_opset(opset_version)
    inputs = _as_tensors(example_inputs)
    in_names = _default_names(input_names, len(inputs), "input", "input_names")
    dyn = _axes_spec(dynamic_axes, in_names, "dynamic_axes")
    for name, axes in dyn.items():
        if name in in_names:
            shape = inputs[in_names.index(name)].shape
            bad = [a for a in axes if not 0 <= a < len(shape)]
            if bad:
                raise ValueError(
                    f"onnx export: dynamic axis {bad[0]} of input {name!r} is out of range for shape {shape}"
                )

    is_module = isinstance(model_or_fn, Module)
    was_training = is_module and model_or_fn.training
    param_names: dict = {}
    if is_module:
        state = model_or_fn.state_dict()
        sync(*[t for t in state.values() if isinstance(t, Tensor)])
        for key, t in state.items():
            param_names.setdefault(t._node, key)
        model_or_fn.eval()
    elif not callable(model_or_fn):
        raise TypeError(f"onnx export: expected an nn.Module or a function, got {type(model_or_fn).__name__}")
    sync(*inputs)
    # A dynamic axis of example size 1 is recorded at size 2: size-1 axes take broadcasting paths
    # (skipped reshapes, expands) that larger sizes do not. Values never enter the graph (a sync
    # while recording is refused), so zeros of the new shape record the same program.
    resized = list(inputs)
    for name, axes in dyn.items():
        if name in in_names:
            i = in_names.index(name)
            shape = [2 if a in axes and d == 1 else d for a, d in enumerate(resized[i].shape)]
            if tuple(shape) != resized[i].shape:
                resized[i] = Tensor(np.zeros(shape, dtype=resized[i].dtype.np))
    inputs = tuple(resized)
    try:
        base = _Recording(model_or_fn, inputs)
        variants = _record_variants(model_or_fn, inputs, in_names, dyn)
    finally:
        if was_training:
            model_or_fn.train()

    out_names = _default_names(output_names, len(base.outputs), "output", "output_names")
    for name in dyn:
        if name not in in_names and name not in out_names:
            raise ValueError(
                f"onnx export: dynamic_axes names {name!r}, which is neither an input "
                f"({in_names}) nor an output ({out_names})"
            )
    b = GraphBuilder(opset)
    graph = _emit(b, base, variants, inputs, in_names, out_names, param_names, opset)
    dim_names = {(n, a): d for n, axes in dyn.items() for a, d in axes.items()}

    def value_info(name, shape, dtype_name):
        dims = [dim_names.get((name, a), d) for a, d in enumerate(shape)]
        return onnx.helper.make_tensor_value_info(name, ONNX_DTYPES[dtype_name], dims)

    graph_inputs = [value_info(n, t.shape, t.dtype.name) for n, t in zip(in_names, inputs)]
    graph_outputs = []
    for n, (shape, dtype_name, changing) in zip(out_names, graph):
        for a in changing:
            dim_names.setdefault((n, a), f"{n}_dim{a}")
        graph_outputs.append(value_info(n, shape, dtype_name))
    drop_redundant_broadcasts(b, set(out_names))
    # Element types a node's schema refuses at this opset (Add of int8 before 14, Conv of
    # bfloat16, Relu of uint8) are computed in a wider type and cast back (legalize.py).
    from lazyvic.interop.onnx.legalize import legalize_types

    refused = legalize_types(b, {n: ONNX_DTYPES[t.dtype.name] for n, t in zip(in_names, inputs)}, MAX_OPSET)
    if refused:
        listed = "; ".join(f"{what}: nodes {', '.join(repr(n) for n in nodes)}" for what, nodes in refused.items())
        raise UnsupportedOpError(f"onnx export: element types ONNX does not take at opset {opset}: {listed}")
    name = type(model_or_fn).__name__ if is_module else getattr(model_or_fn, "__name__", "function")
    g = onnx.helper.make_graph(b.nodes, name, graph_inputs, graph_outputs, initializer=b.initializers)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(
        g,
        opset_imports=opsets,
        producer_name="lazyvic",
        producer_version=_version(),
        ir_version=onnx.helper.find_min_ir_version_for(opsets),
    )
    if check:
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception as e:  # the checker's own exception types vary across onnx versions
            raise OnnxError(
                f"onnx export: the exported {name} fails onnx.checker (a lazyvic bug, please report it): {e}"
            ) from None
    if path is not None:
        _write_atomic(model, Path(os.fspath(path)))
    return model


def _with_size(inputs: tuple, i: int, axis: int, size: int) -> tuple:
    changed = list(inputs)
    shape = list(inputs[i].shape)
    shape[axis] = size
    changed[i] = Tensor(np.zeros(shape, dtype=inputs[i].dtype.np))  # a buffer: no sync needed
    return tuple(changed)


def _record_variants(fn, inputs: tuple, in_names: list, dyn: dict) -> list:
    """One recording per dynamic axis, with that axis one size larger (one smaller where the call
    refuses larger: a sequence already at a model's block size), as ``(input name, axis, example
    size, other size, recording)``; with several axes, a last ``(None, ..., recording)`` with every
    axis changed at once, which checks that the sizes combine affinely."""
    variants, joint = [], inputs
    for name, axes in dyn.items():
        if name not in in_names:
            continue
        i = in_names.index(name)
        for axis in sorted(axes):
            size = inputs[i].shape[axis]
            rec, error = None, None
            for other in (size + 1, size - 1) if size > 2 else (size + 1,):
                try:
                    rec = _Recording(fn, _with_size(inputs, i, axis, other))
                    break
                except Exception as e:  # the call refuses that size (a fixed ONNX input, a block size)
                    error = e
            if rec is None:
                raise OnnxError(
                    f"onnx export: axis {axis} of {name!r} cannot be dynamic: the call fails when it "
                    f"has size {other} instead of {size}: {error}"
                ) from error
            variants.append((name, axis, size, other, rec))
            joint = _with_size(joint, i, axis, other)
    if len(variants) > 1:
        try:
            variants.append((None, None, None, None, _Recording(fn, joint)))
        except Exception as e:
            raise OnnxError(f"onnx export: the call fails when every dynamic axis changes size at once: {e}") from e
    return variants


def _emit(
    b: GraphBuilder,
    base: _Recording,
    variants: list,
    inputs: tuple,
    in_names: list,
    out_names: list,
    param_names: dict,
    opset: int,
) -> list:
    """Write the nodes of ``base`` into ``b``; returns (shape, dtype name, changing axes) per output."""
    import onnx

    order = _order(base, opset)
    others = [_order(v[-1], opset) for v in variants]
    for (name, axis, *_), o in zip(variants, others):
        if len(o) != len(order) or any(x.op != y.op for x, y in zip(order, o)):
            what = f"axis {axis} of {name!r} changes size" if name else "every dynamic axis changes size at once"
            raise OnnxError(
                f"onnx export: the recorded graph changes structure when {what}, so it cannot be "
                f"exported with those axes dynamic"
            )
    rows = list(zip(order, *others)) if others else [(n,) for n in order]

    def terms_of(value, other_values, where):
        terms, affine, joint = [], True, None
        for (name, axis, size, other, _), v in zip(variants, other_values):
            if name is None:
                joint = v  # the recording with every axis changed
            elif v != value:
                k, rem = divmod(v - value, other - size)
                affine &= rem == 0
                terms.append((name, axis, size, k, other))
        if joint is not None:
            affine &= joint == value + sum(k * (other - size) for _, _, size, k, other in terms)
        return tuple(t[:4] for t in terms), affine, where

    for k, (name, t) in enumerate(zip(in_names, inputs)):
        b.claim(name)
        shape = t.shape
        if variants:
            others = [v[-1].inputs[k].shape for v in variants]
            shape = _symbolize(shape, others, terms_of, f"input {name!r} shape")
        b.set_info(name, shape, t.dtype)
    names: dict = {}  # node -> value name
    input_of = {t._node: n for t, n in zip(inputs, in_names)}
    unsupported: dict = {}
    for row in rows:
        node = row[0]
        b.scope = node.scope
        if node in input_of:
            names[node] = input_of[node]
            continue
        changing = len(row) > 1 and any(o.shape != node.shape for o in row[1:])
        if node.op == "buffer" and not (changing and base.usable_mark(node, opset)):
            data = node.data if node.device != "cuda" else device.to_host(node.data, node.shape)
            if node in param_names:
                names[node] = b.const(data, name=param_names[node])
            else:
                if changing:
                    raise OnnxError(
                        f"onnx export: a constant of shape {node.shape} used in "
                        f"{node.scope or 'the call'} changes shape with a dynamic axis"
                    )
                names[node] = b.const(data, "const")
            continue
        if node.op == "scalar":
            if any(o.value != node.value for o in row[1:]):
                raise OnnxError(
                    f"onnx export: the scalar {node.value!r} used in {node.scope or 'the call'} changes "
                    f"with a dynamic axis (a mean over it?), so that axis cannot be dynamic"
                )
            names[node] = b.const(np.asarray(node.value, dtype=node.dtype.np), "scalar")
            continue
        mark = base.usable_mark(node, opset)
        if mark is not None:
            attrs = mark.attrs
            if len(row) > 1:
                others_marks = [v[-1].usable_mark(o, opset) for v, o in zip(variants, row[1:])]
                if any(m is None or m.op_type != mark.op_type for m in others_marks):
                    raise OnnxError(
                        f"onnx export: {mark.op_type} in {node.scope or 'the call'} is recorded "
                        f"differently when a dynamic axis changes size, so that axis cannot be dynamic"
                    )
                others_attrs = [m.attrs for m in others_marks]
                attrs = _symbolize(attrs, others_attrs, terms_of, f"{mark.op_type} in {node.scope or 'the call'}")
            ins = [None if i is None else names[i] for i in mark.inputs]
            out = mark.op_type(b, ins, attrs) if callable(mark.op_type) else b.node(mark.op_type, ins, **attrs)
        else:
            rule = OPS[node.op].onnx
            attrs, shape = dict(node.attrs), node.shape
            if len(row) > 1:
                where = f"{node.op} in {node.scope or 'the call'}"
                attrs = _symbolize(attrs, [dict(o.attrs) for o in row[1:]], terms_of, where)
                shape = _symbolize(shape, [o.shape for o in row[1:]], terms_of, f"{where} shape")
            out = None if rule is None else rule(b, [names[i] for i in node.inputs], attrs, shape, node.dtype)
            if out is None:  # listed at the end; a stand-in name lets the walk find every other one
                unsupported.setdefault(node.op, []).append(node.scope or "(top level)")
                out = f"unsupported/{node.op}_{len(names)}"
        shape = node.shape
        if len(row) > 1:
            shape = _symbolize(shape, [o.shape for o in row[1:]], terms_of, f"{node.op} shape")
        b.set_info(out, shape, node.dtype)
        names[node] = out
    if unsupported:
        listed = "; ".join(f"{op} (in {', '.join(sorted(set(where)))})" for op, where in sorted(unsupported.items()))
        hint = (
            " Random ops come from dropout or rand in training mode: export in eval mode."
            if ("rand" in unsupported or "randn" in unsupported)
            else ""
        )
        raise UnsupportedOpError(f"onnx export: no ONNX form at opset {opset} for: {listed}.{hint}")

    b.scope = None
    result = []
    for i, (t, out_name) in enumerate(zip(base.outputs, out_names)):
        value = names[t._node]
        if (
            value in in_names
            or value in out_names[:i]
            or value in b.constants
            or (value in out_names and out_names.index(value) != i)
        ):
            b.claim(out_name)
            b.nodes.append(onnx.helper.make_node("Identity", [value], [out_name], name=f"{out_name}_identity"))
        else:
            rename(b, value, out_name)
            names[t._node] = out_name
        changing = []
        for *_, rec in variants:
            other = rec.outputs[i].shape
            changing += [a for a, (x, y) in enumerate(zip(t.shape, other)) if x != y and a not in changing]
        result.append((t.shape, t.dtype.name, changing))
    return result


def _write_atomic(model, path: Path) -> None:
    """The file, written as every lazyvic file is (``format_v1._write_atomic``: a locked temporary
    file beside it, fsync, rename; leftovers of killed writers are removed on the next save)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(os.fspath(path), [model.SerializeToString()])


def _version() -> str:
    """lazyvic's version for ``producer_version`` (from the installed distribution's metadata: this
    package does not import the top-level ``lazyvic``)."""
    try:
        return metadata.version("lazyvic")
    except metadata.PackageNotFoundError:
        return "unknown"


__all__ = ["export", "MIN_OPSET", "MAX_OPSET"]
