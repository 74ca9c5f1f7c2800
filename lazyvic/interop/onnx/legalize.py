"""Element types that an op's schema does not allow at the exported opset, computed in a wider one.

ONNX's type constraints differ from op to op and opset to opset: Add, Sub, Mul and Div take
int8, int16, uint8 and uint16 from version 14 only, Relu no unsigned type, Conv no bfloat16
before version 22, MatMul no 8- or 16-bit integer at all. lazyvic computes every op of a half type
in float32 and rounds the result to the half type, and every integer op modulo 2**bits, so such a
node is written as that computation: its inputs of the refused type are cast to a *carrier* type
the schema allows that holds every value of theirs (float16 and bfloat16 -> float32; int8, int16,
uint8, uint16 -> int32; uint32 -> int64; bool -> int32), the node runs in the carrier, and its
outputs of that type are cast back. Casting back rounds to nearest even (floats) or keeps the low
bits (integers: ONNX's Cast discards the higher bits of an out-of-range integer), which is what
lazyvic's op gives. Ops that only select values (Relu, Max, Min, Clip, ReduceMax, MaxPool ...) may
carry a small integer type in a floating one that holds all its values (uint8 -> float32), and
modular arithmetic (Neg, Add, Sub, Mul) may carry uint64 in int64 (the same bits), and a Relu of
an unsigned type that would need a carrier it cannot have (uint64) is written as the Identity it is.

A refused type without a carrier (uint64, int64, float64, or no carrier the schema allows) cannot
be exported at that opset: :func:`legalize_types` returns those nodes, and export raises
UnsupportedOpError naming each op, type and the first opset (up to 18) whose schema takes it.

Types are followed through the graph from the graph inputs and initializers with ONNX's own
per-node inference (``onnx.shape_inference.infer_node_outputs``), so the nodes an op-table rule
writes around its main node (Casts, Constants) are typed as well.
"""

from __future__ import annotations

from onnx import TensorProto, defs, helper, shape_inference

# Carriers by element type, preferred first: each holds every value of the type exactly.
_CARRIERS = {
    TensorProto.FLOAT16: (TensorProto.FLOAT, TensorProto.DOUBLE),
    TensorProto.BFLOAT16: (TensorProto.FLOAT, TensorProto.DOUBLE),
    TensorProto.FLOAT: (TensorProto.DOUBLE,),
    TensorProto.BOOL: (TensorProto.INT32, TensorProto.INT64),
    TensorProto.INT8: (TensorProto.INT32, TensorProto.INT16, TensorProto.INT64),
    TensorProto.UINT8: (TensorProto.INT32, TensorProto.INT16, TensorProto.UINT32, TensorProto.INT64),
    TensorProto.INT16: (TensorProto.INT32, TensorProto.INT64),
    TensorProto.UINT16: (TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64),
    TensorProto.INT32: (TensorProto.INT64,),
    TensorProto.UINT32: (TensorProto.INT64, TensorProto.UINT64),
}
# Ops whose result is one of their inputs' values (no arithmetic): an integer type may also be
# carried by a floating type that holds every value of it exactly (Relu of uint8 before Relu-14,
# which has no integer type; Relu-14 no unsigned one).
_SELECTING = frozenset({"Relu", "Max", "Min", "Clip", "ReduceMax", "ReduceMin", "MaxPool", "GlobalMaxPool"})
_EXACT_FLOATS = {
    TensorProto.INT8: (TensorProto.FLOAT, TensorProto.DOUBLE),
    TensorProto.UINT8: (TensorProto.FLOAT, TensorProto.DOUBLE),
    TensorProto.INT16: (TensorProto.FLOAT, TensorProto.DOUBLE),
    TensorProto.UINT16: (TensorProto.FLOAT, TensorProto.DOUBLE),
    TensorProto.INT32: (TensorProto.DOUBLE,),
    TensorProto.UINT32: (TensorProto.DOUBLE,),
}
# Ops computing modulo 2**bits: uint64 may be carried by int64 (the same bits; Neg has no unsigned type).
_MODULAR = frozenset({"Neg", "Add", "Sub", "Mul"})
_UNSIGNED = frozenset({TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})
_TYPE_STR = {
    code: f"tensor({name})"
    for code, name in (
        (TensorProto.FLOAT, "float"),
        (TensorProto.DOUBLE, "double"),
        (TensorProto.FLOAT16, "float16"),
        (TensorProto.BFLOAT16, "bfloat16"),
        (TensorProto.BOOL, "bool"),
        (TensorProto.INT8, "int8"),
        (TensorProto.INT16, "int16"),
        (TensorProto.INT32, "int32"),
        (TensorProto.INT64, "int64"),
        (TensorProto.UINT8, "uint8"),
        (TensorProto.UINT16, "uint16"),
        (TensorProto.UINT32, "uint32"),
        (TensorProto.UINT64, "uint64"),
    )
}


def _formal(params: list, i: int):
    """The formal parameter of position ``i`` (the last one repeats when it is variadic)."""
    if i < len(params):
        return params[i]
    last = params[-1] if params else None
    return last if last is not None and last.option == defs.OpSchema.FormalParameterOption.Variadic else None


def legalize_types(b, input_types: dict, max_opset: int = 18) -> dict:
    """Rewrite ``b.nodes`` (a :class:`~lazyvic.interop.onnx.builder.GraphBuilder` at ``b.opset``)
    so that no node gets an element type its schema refuses where a carrier exists (module
    docstring). ``input_types``: graph input name -> TensorProto element type. Value names stay:
    a rewritten node's outputs keep their names (the Casts back write them).

    Returns the refusals left, ``{"<op> of <type> (<what>)": [node names]}``, where ``<what>`` is
    the first opset up to ``max_opset`` whose schema takes the type, or says there is none."""
    types = dict(input_types)
    types.update({t.name: t.data_type for t in b.initializers})
    casts: dict = {}  # (value, carrier) -> the name of its cast, shared by the nodes that need it
    nodes, left = [], {}
    saved_scope, b.scope = b.scope, None
    try:
        for node in b.nodes:
            try:
                schema = defs.get_schema(node.op_type, b.opset, node.domain)
            except Exception:  # not a default-domain op: nothing to check it against
                nodes.append(node)
                continue
            if node.op_type == "Relu" and types.get(node.input[0]) in _UNSIGNED:
                refused_here = _carriers(schema, node, types)[1]
                if refused_here:  # Relu of an unsigned type (uint64 has no carrier) is the identity
                    node = helper.make_node("Identity", list(node.input), list(node.output), name=node.name)
                    schema = defs.get_schema("Identity", b.opset, "")
            carriers, refused = _carriers(schema, node, types)
            for t in refused:
                left.setdefault(_refusal(node.op_type, t, b.opset, max_opset), []).append(node.name)
            back = []
            if carriers:
                node, back = _rewrite(b, node, schema, carriers, types, casts, nodes)
            _infer(schema, node, types, b.opset)
            nodes.append(node)
            for carried, original, t in back:
                nodes.append(helper.make_node("Cast", [carried], [original], name=b.fresh(f"{original}/cast"), to=t))
                types[original] = t
    finally:
        b.scope = saved_scope
    b.nodes[:] = nodes
    return left


def _refusal(op_type: str, t: int, opset: int, max_opset: int) -> str:
    name = TensorProto.DataType.Name(t)
    for later in range(opset + 1, max_opset + 1):
        schema = defs.get_schema(op_type, later, "")
        if any(_TYPE_STR[t] in c.allowed_type_strs for c in schema.type_constraints):
            return f"{op_type} of {name} (ONNX's {op_type} takes {name} from opset {later}: export with opset_version={later})"
    return f"{op_type} of {name} (ONNX's {op_type} does not take {name} up to opset {max_opset}, nor a wider type that holds its values)"


def _carriers(schema, node, types: dict) -> tuple:
    """``(carriers, refused)``: type parameter -> (refused element type, its carrier) for the
    parameters of ``node`` whose inputs have a type the schema refuses and a carrier it allows;
    the refused types without a carrier."""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    carriers: dict = {}
    refused: list = []
    for i, name in enumerate(node.input):
        formal = _formal(list(schema.inputs), i)
        if not name or formal is None or formal.type_str not in allowed or name not in types:
            continue
        t = types[name]
        if _TYPE_STR.get(t) in allowed[formal.type_str] or formal.type_str in carriers:
            continue
        carrier = next((c for c in _candidates(node.op_type, t) if _TYPE_STR[c] in allowed[formal.type_str]), None)
        if carrier is not None:
            carriers[formal.type_str] = (t, carrier)
        elif t in _TYPE_STR and t not in refused:
            refused.append(t)
    return carriers, refused


def _candidates(op_type: str, t: int) -> tuple:
    """The carriers of element type ``t`` for an ``op_type`` node, preferred first."""
    out = _CARRIERS.get(t, ())
    if op_type in _SELECTING:
        out += _EXACT_FLOATS.get(t, ())
    if op_type in _MODULAR and t == TensorProto.UINT64:
        out += (TensorProto.INT64,)
    return out


def _rewrite(b, node, schema, carriers: dict, types: dict, casts: dict, nodes: list) -> tuple:
    """``(node computing in the carriers, [(carried output, original name, refused type)])``: its
    inputs of a refused type are cast to the carrier (the Casts appended to ``nodes``), its outputs
    of that type get new names, which the caller casts back to the original ones."""
    inputs = list(node.input)
    for i, name in enumerate(inputs):
        formal = _formal(list(schema.inputs), i)
        if not name or formal is None or formal.type_str not in carriers:
            continue
        carrier = carriers[formal.type_str][1]
        key = (name, carrier)
        if key not in casts:
            cast = b.fresh(f"{name}/as_{TensorProto.DataType.Name(carrier).lower()}")
            nodes.append(helper.make_node("Cast", [name], [cast], name=cast, to=carrier))
            types[cast] = carrier
            casts[key] = cast
        inputs[i] = casts[key]
    outputs, back = list(node.output), []
    for j, name in enumerate(outputs):
        formal = _formal(list(schema.outputs), j)
        if name and formal is not None and formal.type_str in carriers:
            t, carrier = carriers[formal.type_str]
            outputs[j] = b.fresh(f"{name}/{TensorProto.DataType.Name(carrier).lower()}")
            back.append((outputs[j], name, t))
    new = helper.make_node(node.op_type, inputs, outputs, name=node.name, domain=node.domain)
    new.attribute.extend(node.attribute)
    return new, back


def _infer(schema, node, types: dict, opset: int) -> None:
    """Record the element types of ``node``'s outputs (ONNX's per-node inference; outputs whose
    type it cannot tell stay unknown, and the nodes that read them are left unchecked)."""
    known = {n: helper.make_tensor_type_proto(types[n], None) for n in node.input if n and n in types}
    try:
        inferred = shape_inference.infer_node_outputs(
            schema, node, known, opset_imports=[helper.make_opsetid("", opset)]
        )
    except Exception:
        return
    for name, tp in inferred.items():
        if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
            types[name] = tp.tensor_type.elem_type
