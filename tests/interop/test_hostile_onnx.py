"""Hostile ONNX models: external data outside the model's folder, allocation bombs in constant
folding, graphs that are not single static assignment, typed errors, linear name resolution.

Every model is built here with onnx.helper, a few hundred bytes, in tmp_path.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
import time
import tracemalloc

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lazyvic as lv  # noqa: E402
from lazyvic.errors import CheckpointError, OnnxError  # noqa: E402
from lazyvic.interop.onnx import module as onnx_module  # noqa: E402
from lazyvic.interop.onnx import state_dict_keys  # noqa: E402
from lazyvic.interop.onnx.converters import shape as shape_converters  # noqa: E402

MiB = 2**20
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
SECRET = b"SECRETKEYSECRETK"  # 16 bytes: an INT32 tensor of shape (4,)


def make_model(nodes, outputs, inputs=(), inits=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, elem, shape) for n, elem, shape in inputs],
        [helper.make_value_info(n, onnx.TypeProto()) for n in outputs],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def save(model, path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return str(path)


def external(name, location, data_type=TensorProto.INT32, dims=(4,), offset=None, length=None):
    t = TensorProto(name=name, data_type=data_type, dims=list(dims), data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    return t


def constant(name, value):
    return helper.make_node("Constant", [], [name], name=name, value=value)


def ints(name, values):
    return constant(name, numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))


def peak_bytes(fn):
    tracemalloc.start()
    try:
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - the caller inspects it
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------ external data
@pytest.fixture
def secret_in_cwd(tmp_path, monkeypatch):
    """The working directory holds sub/key.txt; the model lives in another folder."""
    cwd = tmp_path / "cwd"
    (cwd / "sub").mkdir(parents=True)
    (cwd / "sub" / "key.txt").write_bytes(SECRET)
    monkeypatch.chdir(cwd)
    return cwd


def test_constant_external_data_is_not_read_from_the_working_directory(tmp_path, secret_in_cwd):
    model = make_model([constant("c", external("c", "sub/key.txt"))], ["c"])
    path = save(model, tmp_path / "model" / "model.onnx")
    with pytest.raises(OnnxError) as info:
        lv.onnx.load(path).forward()
    message = str(info.value)
    assert "model.onnx: cannot load the external data of node 'c' (Constant) attribute 'value'" in message
    assert "'sub/key.txt': no such file" in message and str(tmp_path / "model") in message


def test_constant_external_data_is_read_from_the_model_folder_and_survives_save_load(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "key.txt").write_bytes(b"\0" * 4 + SECRET)
    model = make_model([constant("c", external("c", "sub/key.txt", offset=4, length=16))], ["c"])
    module = lv.onnx.load(save(model, folder / "model.onnx"))
    expected = np.frombuffer(SECRET, dtype=np.int32)
    np.testing.assert_array_equal(module().numpy(), expected)
    lv.save(module, tmp_path / "module.lv")
    (folder / "sub" / "key.txt").unlink()  # the bytes now live in the module's stored graph
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sub").mkdir(parents=True)
    (elsewhere / "sub" / "key.txt").write_bytes(b"X" * 16)
    monkeypatch.chdir(elsewhere)
    np.testing.assert_array_equal(lv.load(tmp_path / "module.lv")().numpy(), expected)


def test_a_stored_graph_that_refers_to_external_data_is_refused(tmp_path, secret_in_cwd):
    model = make_model([constant("c", external("c", "sub/key.txt"))], ["c"])
    config = {"model": base64.b64encode(model.SerializeToString()).decode(), "source": "x.onnx"}
    import safetensors.numpy

    meta = {
        "format": "lazyvic",
        "format_version": "1",
        "kind": "module",
        "dtypes": "{}",
        "class": "lazyvic.interop.onnx.module.OnnxModule",
        "config": json.dumps(config),
    }
    (tmp_path / "hostile.lv").write_bytes(safetensors.numpy.save({}, metadata=meta))
    with pytest.raises(CheckpointError, match=r"node 'c' \(Constant\) attribute 'value' refers to external data"):
        lv.load(tmp_path / "hostile.lv")


def test_a_model_proto_with_external_data_has_no_folder(secret_in_cwd):
    model = make_model([constant("c", external("c", "sub/key.txt"))], ["c"])
    with pytest.raises(OnnxError, match=r"<ModelProto g>: node 'c' \(Constant\) .*no folder to read it from"):
        lv.onnx.load(model).forward()
    w = external("w", "sub/key.txt", data_type=F32)
    with_init = make_model([helper.make_node("Identity", ["w"], ["y"])], ["y"], inits=[w])
    with pytest.raises(OnnxError, match=r"<ModelProto g>: initializer 'w' refers to external data"):
        lv.onnx.load(with_init)


def _folder_with_outside_secret(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(SECRET)
    (folder / "data.bin").write_bytes(SECRET)
    (folder / "escape").symlink_to(tmp_path / "secret.bin")
    (folder / "inside").symlink_to(folder / "data.bin")
    (folder / "dir").mkdir()
    return folder


BAD_LOCATIONS = [
    ("absolute", lambda tmp: str(tmp / "secret.bin"), {}, "is an absolute path"),
    ("dotdot", lambda tmp: "../secret.bin", {}, "contains '..'"),
    ("dotdot-inner", lambda tmp: "dir/../../secret.bin", {}, "contains '..'"),
    ("symlink", lambda tmp: "escape", {}, "leads outside the model's folder"),
    ("offset", lambda tmp: "data.bin", {"offset": 17}, "offset 17 lies beyond the end"),
    ("length", lambda tmp: "data.bin", {"offset": 8, "length": 16}, r"offset 8 \+ length 16 runs past the end"),
    ("size", lambda tmp: "data.bin", {"length": 12}, r"gives 12 bytes, but shape \(4,\) needs 16"),
    ("negative", lambda tmp: "data.bin", {"offset": -1}, "offset '-1' is not a non-negative integer"),
    ("directory", lambda tmp: "dir", {}, "is not a regular file"),
    ("missing", lambda tmp: "nothing.bin", {}, "no such file"),
]


@pytest.mark.parametrize("case, location, extra, problem", BAD_LOCATIONS, ids=[c[0] for c in BAD_LOCATIONS])
@pytest.mark.parametrize("holder", ["initializer", "constant", "subgraph"])
def test_external_data_rules_hold_for_every_tensor(tmp_path, case, location, extra, problem, holder):
    folder = _folder_with_outside_secret(tmp_path)
    tensor = external("t", location(tmp_path), **extra)
    if holder == "initializer":
        model = make_model([helper.make_node("Identity", ["t"], ["y"])], ["y"], inits=[tensor])
        where = "initializer 't'"
    elif holder == "constant":
        model = make_model([constant("t", tensor)], ["t"])
        where = r"node 't' \(Constant\) attribute 'value'"
    else:
        branch = helper.make_graph([constant("t", tensor)], "b", [], [helper.make_value_info("t", onnx.TypeProto())])
        cond = numpy_helper.from_array(np.array(True), "cond")
        node = helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=branch, else_branch=branch)
        model = make_model([node], ["y"], inits=[cond])
        where = r"node 't' \(Constant\) attribute 'value' in attribute '(then|else)_branch' of node 'if0' \(If\)"
    path = save(model, folder / "model.onnx")
    with pytest.raises(OnnxError, match=rf"model.onnx: cannot load the external data of {where} .*{problem}"):
        lv.onnx.load(path)


def test_symlinks_inside_the_folder_are_followed(tmp_path):
    folder = _folder_with_outside_secret(tmp_path)
    model = make_model([constant("c", external("c", "inside"))], ["c"])
    module = lv.onnx.load(save(model, folder / "model.onnx"))
    np.testing.assert_array_equal(module().numpy(), np.frombuffer(SECRET, dtype=np.int32))


def test_the_same_external_bytes_read_many_times_are_bounded(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(np.arange(256 * 1024, dtype=np.float32).tobytes())  # 1 MiB
    inits = [external(f"w{i}", "w.bin", data_type=F32, dims=(256 * 1024,)) for i in range(400)]
    nodes = [helper.make_node("Identity", ["w0"], ["y"])]
    path = save(make_model(nodes, ["y"], inits=inits), folder / "model.onnx")
    result, peak = peak_bytes(lambda: lv.onnx.load(path))
    assert isinstance(result, OnnxError), result
    assert "model.onnx: initializer 'w" in str(result) and "more than this load may allocate" in str(result)
    assert peak < 320 * MiB
    few = [external(f"w{i}", "w.bin", data_type=F32, dims=(256 * 1024,)) for i in range(3)]
    path = save(make_model(nodes, ["y"], inits=few), folder / "few.onnx")
    assert lv.onnx.load(path)().shape == (256 * 1024,)


# ------------------------------------------------------------------ allocation bombs in folding
N = 100_000  # N x N float32 = 40 GB


def _x(name="x"):
    return [(name, F32, [1])]


BOMBS = {
    "ConstantOfShape": ([ints("s", [N, N]), helper.make_node("ConstantOfShape", ["s"], ["y"], name="bomb")], ()),
    "Range": (
        [ints("a", 0), ints("b", 10**10), ints("d", 1), helper.make_node("Range", ["a", "b", "d"], ["y"], name="bomb")],
        (),
    ),
    "Expand": (
        [ints("one", [1]), ints("s", [N, N]), helper.make_node("Expand", ["one", "s"], ["y"], name="bomb")],
        (),
    ),
    "Tile": ([ints("one", [[1]]), ints("r", [N, N]), helper.make_node("Tile", ["one", "r"], ["y"], name="bomb")], ()),
    "Pad": ([ints("one", [1]), ints("p", [0, 10**10]), helper.make_node("Pad", ["one", "p"], ["y"], name="bomb")], ()),
    "MatMul": (
        [
            ints("a", 0),
            ints("b", N),
            ints("d", 1),
            ints("ax0", [0]),
            ints("ax1", [1]),
            helper.make_node("Range", ["a", "b", "d"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "ax1"], ["col"]),
            helper.make_node("Unsqueeze", ["r", "ax0"], ["row"]),
            helper.make_node("MatMul", ["col", "row"], ["y"], name="bomb"),
        ],
        (),
    ),
    "Add": (
        [
            ints("a", 0),
            ints("b", N),
            ints("d", 1),
            ints("ax0", [0]),
            ints("ax1", [1]),
            helper.make_node("Range", ["a", "b", "d"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "ax1"], ["col"]),
            helper.make_node("Unsqueeze", ["r", "ax0"], ["row"]),
            helper.make_node("Add", ["col", "row"], ["y"], name="bomb"),
        ],
        (),
    ),
    "Gather": (
        [
            ints("a", 0),
            ints("b", N),
            ints("d", 1),
            ints("ax0", [0]),
            ints("n", [N]),
            helper.make_node("Range", ["a", "b", "d"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "ax0"], ["row"]),
            helper.make_node("ConstantOfShape", ["n"], ["zeros"], value=numpy_helper.from_array(np.array([0]))),
            helper.make_node("Gather", ["row", "zeros"], ["y"], name="bomb"),
        ],
        (),
    ),
    "EyeLike": (
        [
            ints("s", [N, N]),
            helper.make_node("Expand", ["x", "s"], ["big"]),
            helper.make_node("EyeLike", ["big"], ["y"], name="bomb"),
        ],
        _x(),
    ),
    "CumSum": (
        [
            ints("s", [N]),
            ints("axis", 0),
            helper.make_node("Expand", ["x", "s"], ["big"]),
            helper.make_node("CumSum", ["big", "axis"], ["y"], name="bomb"),
        ],
        _x(),
    ),
    "Resize": (
        [
            ints("s", [1, 1, 1, N]),
            constant("scales", numpy_helper.from_array(np.array([1, 1, 1, 1.5], np.float32), "scales")),
            helper.make_node("Expand", ["x", "s"], ["big"]),
            helper.make_node("Resize", ["big", "", "scales"], ["y"], name="bomb", mode="linear"),
        ],
        _x(),
    ),
}


@pytest.mark.parametrize("op", list(BOMBS))
def test_folding_bombs_are_refused_before_they_allocate(tmp_path, op):
    nodes, inputs = BOMBS[op]
    path = save(make_model(nodes, ["y"], inputs=inputs), tmp_path / f"{op}.onnx")
    assert os.path.getsize(path) < 1000
    module = lv.onnx.load(path)
    args = [np.ones(1, np.float32)] if inputs else []
    result, peak = peak_bytes(lambda: module(*args))
    assert isinstance(result, OnnxError), result
    assert f"{op}.onnx: node 'bomb' ({op}): " in str(result)
    assert "more than one run of this model may make in constants" in str(result) and "max_bytes" in str(result)
    assert peak < 16 * MiB


def test_folded_constants_are_counted_for_the_whole_run(tmp_path):
    # Five 100 MiB constants: each is under the limit, together they are not.
    nodes = [ints("s", [25 * MiB])]
    nodes += [helper.make_node("ConstantOfShape", ["s"], [f"y{i}"], name=f"c{i}") for i in range(5)]
    path = save(make_model(nodes, [f"y{i}" for i in range(5)]), tmp_path / "many.onnx")
    result, peak = peak_bytes(lambda: lv.onnx.load(path)())
    assert isinstance(result, OnnxError), result
    assert "many.onnx: node 'c2' (ConstantOfShape)" in str(result) and "(256.0 MiB, 200.0 MiB already used)" in str(
        result
    )
    assert peak < 220 * MiB


def test_the_fold_limit_is_the_callers_to_set(tmp_path, monkeypatch):
    nodes = [ints("s", [1000, 1000]), helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")]
    path = save(make_model(nodes, ["y"]), tmp_path / "m.onnx")
    assert lv.onnx.load(path)().shape == (1000, 1000)  # 4 MB: fine by default
    small = lv.onnx.load(path, max_bytes=MiB)
    assert small.max_fold_bytes == MiB
    with pytest.raises(OnnxError, match=r"m.onnx: node 'c' \(ConstantOfShape\): the result of shape \(1000, 1000\)"):
        small()
    small.max_fold_bytes = math.inf
    assert small().shape == (1000, 1000)
    monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", "1M")
    with pytest.raises(OnnxError, match="m.onnx: node 'c'"):
        lv.onnx.load(path)()


def test_constants_as_large_as_the_inputs_are_allowed(tmp_path):
    # zeros_like(x) (ConstantOfShape of Shape(x)) may be as large as x whatever the limit.
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")]
    path = save(make_model(nodes, ["y"], inputs=[("x", F32, [64, 64])]), tmp_path / "z.onnx")
    module = lv.onnx.load(path, max_bytes=1024)
    assert module(np.ones((64, 64), np.float32)).shape == (64, 64)
    nodes.append(helper.make_node("Concat", ["y", "y"], ["y2"], name="cat", axis=0))
    path = save(make_model(nodes, ["y2"], inputs=[("x", F32, [64, 64])]), tmp_path / "z2.onnx")
    with pytest.raises(OnnxError, match=r"z2.onnx: node 'cat' \(Concat\)"):
        lv.onnx.load(path, max_bytes=1024)(np.ones((64, 64), np.float32))


def test_memory_and_recursion_errors_name_the_node(tmp_path, monkeypatch):
    nodes = [ints("s", [2]), helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")]
    module = lv.onnx.load(save(make_model(nodes, ["y"]), tmp_path / "m.onnx"))
    for error in (MemoryError, RecursionError):

        def fail(*args, error=error, **kwargs):
            raise error("simulated")

        monkeypatch.setattr(shape_converters.np, "full", fail)
        with pytest.raises(OnnxError, match=rf"m.onnx: node 'c' \(ConstantOfShape\): .*{error.__name__}"):
            module()
        monkeypatch.undo()


def test_memory_error_while_loading_names_the_file(tmp_path, monkeypatch):
    path = save(make_model([ints("c", [1])], ["c"]), tmp_path / "m.onnx")

    def fail(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(onnx_module, "strip_initializers", fail)
    with pytest.raises(OnnxError, match=r"m.onnx: ran out of memory while loading the model"):
        lv.onnx.load(path)


# ------------------------------------------------------------------ single static assignment
def _w(name, value=1.0):
    return numpy_helper.from_array(np.array([value], np.float32), name)


SSA_CASES = {
    "duplicate initializer": (
        make_model([helper.make_node("Identity", ["w"], ["y"])], ["y"], inits=[_w("w"), _w("w", 2.0)]),
        r"initializer name 'w' is used more than once",
    ),
    "duplicate input": (
        make_model([helper.make_node("Relu", ["x"], ["y"])], ["y"], inputs=[("x", F32, [1]), ("x", F32, [1])]),
        r"graph input name 'x' is used more than once",
    ),
    "output redefines an input": (
        make_model([helper.make_node("Relu", ["x"], ["x"], name="r")], ["x"], inputs=_x()),
        r"node 'r' \(Relu\): output 'x' redefines a graph input",
    ),
    "output redefines an initializer": (
        make_model([helper.make_node("Relu", ["x"], ["w"], name="r")], ["w"], inputs=_x(), inits=[_w("w")]),
        r"node 'r' \(Relu\): output 'w' redefines an initializer",
    ),
    "output redefines an output": (
        make_model(
            [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")],
            ["y"],
            inputs=_x(),
        ),
        r"node 'b' \(Neg\): output 'y' redefines the output of an earlier node",
    ),
}


@pytest.mark.parametrize("case", list(SSA_CASES))
def test_graphs_that_redefine_a_name_are_refused(tmp_path, case):
    model, message = SSA_CASES[case]
    with pytest.raises(OnnxError, match=rf"ssa.onnx: {message}"):
        lv.onnx.load(save(model, tmp_path / "ssa.onnx"))


# ------------------------------------------------------------------ initializer names
def clashing_names(n):
    """n distinct initializer names that all sanitize to the same state_dict key "a___"."""
    punct = "!#$%&()*+,-/:;<=>?@[]^{|}~"
    return ["a" + "".join(p) for p in itertools.islice(itertools.product(punct, repeat=3), n)]


def test_clashing_initializer_names_resolve_in_linear_time():
    names = clashing_names(8000)
    t0 = time.perf_counter()
    keys = state_dict_keys(names)
    elapsed = time.perf_counter() - t0
    assert len(set(keys.values())) == 8000
    assert keys[names[0]] == "a___" and keys[names[1]] == "a____2" and keys[names[-1]] == "a____8000"
    assert elapsed < 1.0, f"8,000 clashing names took {elapsed:.2f} s"


def test_suffixes_skip_keys_other_names_hold():
    keys = state_dict_keys(["a__2", "a:", "a;", "a/", "a-"])
    assert keys == {"a__2": "a__2", "a:": "a_", "a;": "a__3", "a/": "a__4", "a-": "a__5"}
    keys = state_dict_keys(["layer.0", "layer", "1x", "_1x"])  # a prefix of a kept name, a leading digit
    assert keys == {"layer.0": "layer.0", "layer": "layer_2", "1x": "_1x_2", "_1x": "_1x"}
