"""The ONNX import registry: one converter per op type, the one-node primitives' converters derived
from the op table's own ``onnx_node`` rule, and the package's layering."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lazyvic  # noqa: E402
from lazyvic.errors import UnsupportedOpError  # noqa: E402
from lazyvic.interop.onnx import registry, supported_ops  # noqa: E402
from lazyvic.interop.onnx.context import NodeContext  # noqa: E402
from lazyvic.interop.onnx.converters.optable import derived_converter  # noqa: E402
from lazyvic.ops import OPS  # noqa: E402
from lazyvic.ops.opdef import OnnxNode, onnx_node  # noqa: E402

PACKAGE = Path(lazyvic.__file__).parent / "interop" / "onnx"

# Op types with a primitive whose ONNX semantics differ from it: hand-written converters.
HAND_WRITTEN = {"Div", "Pow", "Max", "Min", "Mod"}


def test_every_one_node_primitive_imports_through_its_rule():
    derived = {op.onnx.op_type: op for op in OPS.values() if isinstance(op.onnx, OnnxNode) and op.onnx.since}
    assert {"Add", "Relu", "Exp", "MatMul", "Transpose", "Where", "Not"} <= set(derived)
    for op_type, op in derived.items():
        assert supported_ops()[op_type] == tuple(sorted(op.onnx.since)), op_type
    export_only = {op.onnx.op_type for op in OPS.values() if isinstance(op.onnx, OnnxNode) and not op.onnx.since}
    assert export_only == HAND_WRITTEN
    assert export_only <= set(supported_ops())


def test_an_op_type_has_one_converter():
    with pytest.raises(ValueError, match="'Relu' has two converters"):
        registry.register("Relu", since=(13,))(lambda ctx, a: a)


def test_rule_exports_as_before():
    rule = onnx_node("Transpose", carried=("perm",))

    class Builder:
        def node(self, op_type, names, **attrs):
            return (op_type, names, attrs)

    assert rule(Builder(), ["x"], {"perm": (1, 0)}, (2, 3), None) == ("Transpose", ["x"], {"perm": [1, 0]})
    assert onnx_node("Relu", alpha=2)(Builder(), ["x"], {}, (), None) == ("Relu", ["x"], {"alpha": 2})


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_derived_converters_broadcast_and_fold_with_the_reference():
    c = numpy_helper.from_array(np.array([[-1.0], [2.0]], dtype=np.float32), "c")
    nodes = [
        helper.make_node("Constant", [], ["k"], value=c),
        helper.make_node("Sigmoid", ["k"], ["s"]),  # folds: its input is a constant
        helper.make_node("Floor", ["s"], ["f"]),  # so Floor (constants only) imports
        helper.make_node("Add", ["x", "f"], ["y"]),  # (3,) + (2, 1) -> (2, 3)
        helper.make_node("Transpose", ["y"], ["t"]),  # default perm: reversed
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 2])],
    )
    x = np.array([0.5, 1.5, -2.0], dtype=np.float32)
    got = lazyvic.onnx.load(model)(x).numpy()
    k = np.array([[-1.0], [2.0]], dtype=np.float32)
    want = (x + np.floor(OPS["sigmoid"].reference([k], {}))).T
    np.testing.assert_array_equal(got, want)


def test_fixed_attributes_of_a_rule_are_checked_at_load_time():
    rule = onnx_node("LeakyRelu", since=(16,), alpha=0.5)
    conv = derived_converter(OPS["relu"], rule)
    for attrs, problem in (({"alpha": 0.5}, None), ({"alpha": 0.25}, "alpha=0.25"), ({}, "alpha=0.0099")):
        ctx = NodeContext(helper.make_node("LeakyRelu", ["x"], ["y"], **attrs), 16, "m.onnx", 0)
        reason = conv.check(ctx)
        assert (reason is None) if problem is None else (problem in reason), (attrs, reason)


def test_unsupported_op_message_lists_the_registry():
    model = _model(
        [helper.make_node("Foo", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(UnsupportedOpError, match="Foo: nodes 'Foo_0'") as e:
        lazyvic.onnx.load(model)
    assert "(lazyvic imports Abs, Acos, Acosh, Add, And, ArgMax," in str(e.value)


def test_converters_do_not_branch_on_the_op_type():
    for path in sorted((PACKAGE / "converters").glob("*.py")):
        source = path.read_text()
        assert not re.search(r"ctx\.op\s*(==|!=|\bin\b|\bnot in\b)|\[ctx\.op\]", source), path.name


def test_package_files_are_small_and_never_import_the_top_level_package():
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        assert source.count("\n") < 600, path.name
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                assert all(a.name != "lazyvic" for a in node.names), path.name
            elif isinstance(node, ast.ImportFrom) and node.module == "lazyvic":
                root = Path(lazyvic.__file__).parent
                for a in node.names:  # only submodules: `from lazyvic import functional as F`
                    assert (root / f"{a.name}.py").exists() or (root / a.name).is_dir(), (path.name, a.name)
