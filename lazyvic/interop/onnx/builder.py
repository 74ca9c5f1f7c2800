"""The ONNX graph being written: :class:`GraphBuilder`, which the op table's export rules
(``OpDef.onnx``) and the composites' marks call, and :class:`SymInt`, a size that follows dynamic
axes. After the walk, :func:`drop_redundant_broadcasts` removes the Expand/Reshape nodes that
ONNX's broadcasting makes unnecessary.

References: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md) for every
node written; ``onnx.helper`` builds the protobufs.
"""

from __future__ import annotations

from itertools import count

import numpy as np

from lazyvic import dtypes as dt
from lazyvic.errors import OnnxError

# TensorProto element types (onnx.proto's enum DataType).
ONNX_DTYPES = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "uint16": 4,
    "int16": 5,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
    "uint32": 12,
    "uint64": 13,
    "bfloat16": 16,
}


class SymInt(int):
    """An int that depends on dynamic axes: ``value + sum(k * (size - example size))``.

    It compares and computes as its example value, so op rules written for static shapes
    run unchanged; ``GraphBuilder.ints`` turns a list holding one into graph arithmetic.
    ``affine`` is False when the recordings showed that no such form fits (a product of two
    dynamic sizes, ``B * T``): then only a Reshape target can hold it, as its -1 entry.
    """

    terms: tuple  # ((graph input name, axis, example size, k), ...)
    affine: bool
    where: str

    def __new__(cls, value: int, info: tuple):
        self = super().__new__(cls, value)
        self.terms, self.affine, self.where = info
        return self


class GraphBuilder:
    """Collects ONNX nodes and initializers while a trace is walked; passed to ``OpDef.onnx`` rules.

    Attributes:
        opset: the default-domain opset being written (rules choose attribute or input forms by it).
        scope: the module path of the node being exported (names the ONNX nodes).
    """

    def __init__(self, opset: int):
        import onnx

        self._onnx = onnx
        self.opset = opset
        self.scope: str | None = None
        self.nodes: list = []
        self.initializers: list = []
        self._info: dict = {}  # value name -> (shape, dtype name)
        self._names: set = set()
        self._counter = count()
        self._consts: dict = {}  # (dtype, shape, bytes) -> name, for small constants
        self.constants: dict = {}  # value name -> array, for initializers and Constant nodes
        self._dims: dict = {}  # (input name, axis) -> name of its size as a 1-element int64 tensor
        self.memo: dict = {}  # values emitted once for several composites (a recurrent node's outputs)

    # -- names and value info ---------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A value or node name not used yet, prefixed with the current scope."""
        base = f"{self.scope}/{hint}" if self.scope else hint
        name = base
        while name in self._names:
            name = f"{base}_{next(self._counter)}"
        self._names.add(name)
        return name

    def claim(self, name: str) -> None:
        if name in self._names:
            raise OnnxError(f"onnx export: the name {name!r} is used twice")
        self._names.add(name)

    def set_info(self, name: str, shape: tuple, dtype) -> None:
        """Record a value's shape (ints, or SymInts for sizes that follow dynamic axes) and dtype."""
        self._info[name] = (tuple(shape), dtype if isinstance(dtype, str) else dtype.name)

    def shape_of(self, name: str) -> tuple:
        """Shape of a value made from a lazyvic node (or a constant)."""
        return self._info[name][0]

    def dtype_of(self, name: str) -> str:
        """lazyvic dtype name of a value made from a lazyvic node (or a constant)."""
        return self._info[name][1]

    def knows(self, name: str) -> bool:
        """Whether the shape and dtype of value ``name`` were recorded (``set_info``)."""
        return name in self._info

    def onnx_dtype(self, dtype) -> int:
        """The ``TensorProto`` element type of a lazyvic DType or dtype name."""
        return ONNX_DTYPES[dtype if isinstance(dtype, str) else dtype.name]

    # -- nodes and constants ----------------------------------------------------------------
    def node(self, op_type: str, inputs: list, **attrs) -> str:
        """Append one ONNX node with one output; returns the output's name. ``None`` inputs
        become empty names (omitted optional inputs); ``None`` attributes are left out."""
        return self.node_outputs(op_type, inputs, 1, **attrs)[0]

    def node_outputs(self, op_type: str, inputs: list, n: int, **attrs) -> list:
        """Append one ONNX node with ``n`` outputs (as :meth:`node`); returns their names."""
        name = self.fresh(op_type)
        outs = [name] + [self.fresh(f"{op_type}_out{k}") for k in range(1, n)]
        ins = ["" if i is None else i for i in inputs]
        while ins and ins[-1] == "":
            ins.pop()
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(self._onnx.helper.make_node(op_type, ins, outs, name=name, **attrs))
        return outs

    def const(self, array, hint: str = "const", name: str | None = None) -> str:
        """A constant: an initializer when ``name`` is given (parameters and buffers, by state_dict
        key), else a ``Constant`` node, so importers do not take it for a trainable weight (small
        ones are shared by value)."""
        array = np.asarray(array)
        array = np.ascontiguousarray(array).reshape(array.shape)  # ascontiguousarray makes 0-d arrays 1-d
        named = name is not None
        key = None
        if name is None and array.size <= 64:
            key = (array.dtype.str, array.shape, array.tobytes())
            if key in self._consts:
                return self._consts[key]
        if name is None:
            saved, self.scope = self.scope, None
            name = self.fresh(hint)
            self.scope = saved
        else:
            self.claim(name)
        tensor = self._onnx.numpy_helper.from_array(array, name)
        if named:
            self.initializers.append(tensor)
        else:
            self.nodes.append(self._onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        self.constants[name] = array
        self.set_info(name, array.shape, dt.get_dtype(array.dtype).name)
        if key is not None:
            self._consts[key] = name
        return name

    def ints(self, values, hint: str = "ints", infer_one: bool = False) -> str:
        """A 1-D int64 tensor of ``values``: a constant, or graph arithmetic on the dynamic axes
        when some value is a :class:`SymInt`. With ``infer_one`` (a Reshape target) a single
        dynamic entry is written as -1."""
        values = list(values)
        dynamic = [i for i, v in enumerate(values) if isinstance(v, SymInt)]
        if not dynamic:
            return self.const(np.asarray([int(v) for v in values], dtype=np.int64), hint)
        if infer_one and len(dynamic) == 1:
            return self.const(
                np.asarray([-1 if i in dynamic else int(v) for i, v in enumerate(values)], dtype=np.int64), hint
            )
        parts = []
        for v in values:
            if not isinstance(v, SymInt):
                parts.append(self.const(np.asarray([int(v)], dtype=np.int64), hint))
                continue
            if not v.affine:
                raise OnnxError(
                    f"onnx export: {v.where} = {int(v)} is not an affine function of the dynamic axis "
                    f"sizes (a product of two of them?), so those axes cannot all be dynamic"
                )
            offset = int(v) - sum(k * size for _, _, size, k in v.terms)
            total = None
            for input_name, axis, _, k in v.terms:
                term = self._dim(input_name, axis)
                if k != 1:
                    term = self.node("Mul", [term, self.const(np.asarray([k], dtype=np.int64))])
                total = term if total is None else self.node("Add", [total, term])
            if offset:
                total = self.node("Add", [total, self.const(np.asarray([offset], dtype=np.int64))])
            parts.append(total)
        return self.node("Concat", parts, axis=0)

    def _dim(self, input_name: str, axis: int) -> str:
        key = (input_name, axis)
        if key not in self._dims:
            saved, self.scope = self.scope, None
            shape = self.node("Shape", [input_name])
            self._dims[key] = self.node("Gather", [shape, self.const(np.asarray([axis], dtype=np.int64))], axis=0)
            self.scope = saved
        return self._dims[key]


# ONNX ops that broadcast their inputs numpy-style (multidirectional broadcasting).
_BROADCASTING = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Max",
        "Min",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Where",
        "And",
        "Or",
        "Xor",
    }
)


def drop_redundant_broadcasts(b: GraphBuilder, outputs: set) -> None:
    """Bypass the constant-shape Expand and Reshape nodes whose consumers all broadcast anyway.

    lazyvic's elementwise primitives take equal shapes, so a bias add records reshape (N,) ->
    (1, N), expand -> (M, N), add. ONNX's Add broadcasts by itself: where every consumer's
    output shape stays the same with the un-expanded input, the Expand (then the Reshape) is
    dropped, and so are the nodes and constants nothing uses any more.
    """
    consts = b.constants
    changed = True
    while changed:
        changed = False
        users: dict = {}
        for n in b.nodes:
            for i in n.input:
                users.setdefault(i, []).append(n)
        for n in b.nodes:
            if n.op_type not in ("Expand", "Reshape") or n.output[0] in outputs:
                continue
            if n.op_type == "Reshape" and n.input[1] not in consts:
                continue
            src, out = n.input[0], n.output[0]
            if not b.knows(src) or not b.knows(out) or not users.get(out):
                continue

            if all(_broadcast_unchanged(b, c, out, src) for c in users[out]):
                for c in users[out]:
                    for j, i in enumerate(c.input):
                        if i == out:
                            c.input[j] = src
                b.nodes.remove(n)
                changed = True
                break
    while True:  # nodes (shape arithmetic for a dropped Expand) and constants nothing reads any more
        used = {i for n in b.nodes for i in n.input} | outputs
        live = [n for n in b.nodes if any(o in used for o in n.output)]
        if len(live) == len(b.nodes):
            break
        b.nodes[:] = live
    b.initializers[:] = [t for t in b.initializers if t.name in used]


def _broadcast_unchanged(b: GraphBuilder, consumer, old: str, new: str) -> bool:
    """Whether ``consumer`` broadcasts and gives the same shape with input ``old`` replaced by ``new``."""
    if consumer.op_type not in _BROADCASTING or not b.knows(consumer.output[0]):
        return False
    if not all(b.knows(i) for i in consumer.input):
        return False
    shapes = [b.shape_of(new if i == old else i) for i in consumer.input]
    return _broadcast(shapes) == _sym_key(b.shape_of(consumer.output[0]))


def _sym_key(shape) -> tuple:
    """A shape with each size that follows dynamic axes told apart by its terms."""
    return tuple((int(d), d.terms if isinstance(d, SymInt) else ()) for d in shape)


def _broadcast(shapes: list):
    """NumPy broadcasting of shapes that may hold SymInts; None where sizes may disagree."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = {k for s in shapes for k in _sym_key(s[len(s) - rank + axis :][:1]) if len(s) - rank + axis >= 0}
        big = {d for d in dims if d != (1, ())}
        if len(big) > 1:
            return None
        out.append(big.pop() if big else (1, ()))
    return tuple(out)


def rename(b: GraphBuilder, old: str, new: str) -> None:
    """Rename value ``old`` to ``new`` (claimed) in every node written so far."""
    b.claim(new)
    for n in b.nodes:
        for lst in (n.input, n.output):
            for j, v in enumerate(lst):
                if v == old:
                    lst[j] = new
