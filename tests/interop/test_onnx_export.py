"""lazyvic.onnx.export: checked by onnx.checker (full_check) and run in onnxruntime against lazyvic."""

from collections import Counter

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn
from lazyvic.errors import OnnxError, UnsupportedOpError
from lazyvic.models import TinyGPT, resnet18

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def run_ort(model, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ops(model) -> Counter:
    """Op histogram without Constant nodes (the constants the export writes)."""
    return Counter(n.op_type for n in model.graph.node if n.op_type != "Constant")


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def digits_mlp():
    lv.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def test_mlp_matches_onnxruntime_and_keeps_state_dict_names(digits_mlp, tmp_path):
    x = rand(7, 64)
    path = tmp_path / "mlp.onnx"
    model = lv.onnx.export(digits_mlp, x, path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert model.opset_import[0].version == 13
    assert [i.name for i in model.graph.initializer] == list(digits_mlp.state_dict())  # constants are nodes
    assert ops(model) == Counter({"Gemm": 2, "Relu": 1})
    (y,) = run_ort(model, {"input": x})
    np.testing.assert_allclose(y, digits_mlp(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    for init in model.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init), digits_mlp.state_dict()[init.name].numpy())


def test_dynamic_batch_axis(digits_mlp):
    model = lv.onnx.export(digits_mlp, rand(5, 64), dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for n in (1, 9):
        x = rand(n, 64, seed=n)
        (y,) = run_ort(model, {"input": x})
        np.testing.assert_allclose(y, digits_mlp(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    # An example batch of 1 is recorded at 2 (size-1 axes take broadcasting paths).
    model = lv.onnx.export(digits_mlp, rand(1, 64), dynamic_axes={"input": {0: "batch"}})
    for n in (1, 4):
        x = rand(n, 64, seed=n)
        (y,) = run_ort(model, {"input": x})
        np.testing.assert_allclose(y, digits_mlp(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_export_is_byte_identical_and_restores_training_mode(digits_mlp):
    digits_mlp.train()
    a = lv.onnx.export(digits_mlp, rand(3, 64)).SerializeToString()
    assert digits_mlp.training
    b = lv.onnx.export(digits_mlp, rand(3, 64, seed=5)).SerializeToString()
    assert a == b


@pytest.fixture(scope="module")
def resnet():
    lv.manual_seed(1)
    m = resnet18(num_classes=10, width=8)
    x = lv.tensor(rand(4, 3, 32, 32))
    m.train()
    m(x)  # one training step's statistics, so running_mean/var are not the defaults
    lv.sync()
    return m.eval()


def test_resnet18_exports_as_conv_batchnorm_pool_graph(resnet):
    x = rand(2, 3, 32, 32, seed=3)
    model = lv.onnx.export(resnet, x, dynamic_axes={"input": [0]})
    hist = ops(model)
    assert hist["Conv"] == 20 and hist["BatchNormalization"] == 20 and hist["MaxPool"] == 1
    assert "Slice" not in hist and "Pad" not in hist  # the im2col composite is one Conv node
    for n, seed in ((2, 3), (3, 4)):
        x = rand(n, 3, 32, 32, seed=seed)
        (y,) = run_ort(model, {"input": x})
        np.testing.assert_allclose(y, resnet(lv.tensor(x)).numpy(), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def gpt():
    lv.manual_seed(2)
    return TinyGPT(vocab_size=40, d_model=32, n_layer=2, n_head=2, block_size=16).eval()


@pytest.mark.parametrize("opset", [13, 17])
def test_tiny_gpt_matches_onnxruntime(gpt, opset):
    idx = np.random.default_rng(0).integers(0, 40, (2, 16)).astype(np.int64)
    model = lv.onnx.export(
        gpt,
        idx,
        opset_version=opset,
        input_names=["idx"],
        output_names=["logits"],
        dynamic_axes={"idx": {0: "batch", 1: "seq"}},
    )
    hist = ops(model)
    if opset < 17:
        assert "LayerNormalization" not in hist and hist["ReduceSum"] > 0  # the decomposition
    else:
        assert hist["LayerNormalization"] == 2 * 2 + 1
    assert "Gelu" not in hist and hist["Erf"] == 2
    assert "Expand" not in ops(model) and ops(model)["Range"] == 3  # positions and the causal mask follow seq
    for batch, seq in ((2, 16), (3, 5), (1, 1)):
        idx = np.random.default_rng(batch).integers(0, 40, (batch, seq)).astype(np.int64)
        (y,) = run_ort(model, {"idx": idx})
        np.testing.assert_allclose(y, gpt(lv.tensor(idx)).numpy(), rtol=1e-4, atol=1e-5)


def test_function_with_several_inputs_and_outputs():
    def fn(a, b):
        h = (a @ b).softmax(-1)
        return h, h.argmax(-1), a, h

    a, b = rand(3, 4), rand(4, 5, seed=1)
    model = lv.onnx.export(fn, (a, b), input_names=["a", "b"], output_names=["p", "k", "a_out", "p_again"])
    p, k, a_out, p_again = run_ort(model, {"a": a, "b": b})
    np.testing.assert_array_equal(p, p_again)
    ref = fn(lv.tensor(a), lv.tensor(b))
    np.testing.assert_allclose(p, ref[0].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(k, ref[1].numpy())
    np.testing.assert_array_equal(a_out, a)
    assert ops(model)["Softmax"] == 1


def test_bool_logic_and_exact_float_division_run_in_onnxruntime():
    # &, |, ^ and ~ of bool tensors are wheres over bools: written as And/Or/Not, since
    # onnxruntime's CPU Where has no bool kernel; //, % and fmod of floats are exact (C's fmod).
    def fn(x, y):
        p, q = x > 0, y > 0
        return p & q, p | q, p ^ q, ~(p & ~q), x // y, x % y, lv.fmod(x, y)

    a = np.array([[1.0, -1.0, 7.5, -7.5], [0.3, 2.0, -3.0, 1e8]], np.float32)
    b = np.array([[0.1, 0.1, -2.0, 2.0], [0.1, -0.7, 3.0, 3.0]], np.float32)
    model = lv.onnx.export(fn, (a, b), input_names=["x", "y"])
    got = run_ort(model, {"x": a, "y": b})
    for g, want in zip(got, fn(lv.tensor(a), lv.tensor(b))):
        np.testing.assert_array_equal(g, want.numpy())
    assert ops(model)["Or"] >= 3  # the bool wheres, written as logic
    np.testing.assert_array_equal(got[4][0], [9.0, -10.0, -4.0, -4.0])


def test_primitives_without_composites():
    # Movement, reduce, compare and where rules, each checked by onnxruntime.
    def fn(x):
        y = x[:, 1:5:2].permute(1, 0).reshape(-1)
        z = lv.where(x > 0, x, x.exp() - 1.0).amax(0) + x.amin(1).sum() + x.abs().sqrt().mean()
        return y, z, (x != 0.5).long(), x.max(1).values

    x = rand(4, 6)
    model = lv.onnx.export(fn, x, opset_version=18)
    outs = run_ort(model, {"input": x})
    for got, want in zip(outs, fn(lv.tensor(x))):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def test_unsupported_ops_are_listed_and_no_file_is_written(tmp_path):
    path = tmp_path / "bad.onnx"
    with pytest.raises(UnsupportedOpError, match="rand.*eval mode"):
        lv.onnx.export(lambda x: x + lv.rand(3), rand(3), path)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_dropout_in_training_mode_exports_as_identity():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    model = lv.onnx.export(m, rand(2, 4))
    assert ops(model) == Counter({"Gemm": 1}) and m.training


def test_bad_arguments():
    with pytest.raises(ValueError, match="opset_version must be an int from 13 to 18"):
        lv.onnx.export(lambda x: x, rand(2), opset_version=12)
    with pytest.raises(ValueError, match="input_names must be 1 distinct"):
        lv.onnx.export(lambda x: x, rand(2), input_names=["a", "b"])
    with pytest.raises(TypeError, match="example input 0 is a int"):
        lv.onnx.export(lambda x: x, 3)
    with pytest.raises(TypeError, match="the output of the call is a dict"):
        lv.onnx.export(lambda x: {"y": x}, rand(2))
    with pytest.raises(TypeError, match=r"output \[1\]\[1\] of the call is a dict"):
        lv.onnx.export(lambda x: (x, [x, {"y": x}]), rand(2))
    with pytest.raises(ValueError, match="dynamic axis 3 of input 'input' is out of range"):
        lv.onnx.export(lambda x: x * 2.0, rand(2), dynamic_axes={"input": [3]})


def test_sync_inside_the_call_is_refused():
    def fn(x):
        return x * float((x * 2.0).sum().item())

    with pytest.raises(OnnxError, match="ran a sync point"):
        lv.onnx.export(fn, rand(3))


def test_axis_that_changes_a_constant_is_refused():
    def fn(x):
        return x.mean(0)  # a scalar 1/N of the dynamic axis

    with pytest.raises(OnnxError, match="changes with a dynamic axis"):
        lv.onnx.export(fn, rand(4, 3), dynamic_axes={"input": [0]})


def test_broadcasts_that_onnx_does_itself_are_dropped():
    bias = lv.tensor(rand(5, seed=1))

    def fn(x):
        return (x * 2.0 + bias).sum(-1)

    x = rand(3, 4, 5)
    model = lv.onnx.export(fn, x)
    assert ops(model) == Counter({"Mul": 1, "Add": 1, "ReduceSum": 1, "Reshape": 1})  # Reshape: keepdim=False
    (y,) = run_ort(model, {"input": x})
    np.testing.assert_allclose(y, fn(lv.tensor(x)).numpy(), rtol=1e-6)


@pytest.mark.parametrize("opset", [13, 16])
def test_gather_pad_cast_and_scatter_add(opset):
    idx = np.array([[0, 2], [1, 1], [2, 0]], dtype=np.int64)

    def fn(x):
        g = x.gather(1, lv.tensor(idx))
        p = x._pad(((0, 0), (1, 2)))  # the pad primitive
        s = lv.zeros(3, 4).scatter_add(1, lv.tensor(idx), g)
        return g, p, (x > 0).to(lv.float64), s

    x = rand(3, 4)
    if opset < 16:
        with pytest.raises(UnsupportedOpError, match="scatter_add"):
            lv.onnx.export(fn, x, opset_version=opset)
        return
    model = lv.onnx.export(fn, x, opset_version=opset)
    assert {"GatherElements", "Pad", "Cast", "ScatterElements"} <= set(ops(model))
    for got, want in zip(run_ort(model, {"input": x}), fn(lv.tensor(x))):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_functional_pad_is_one_pad_node(mode):
    def fn(x):
        return lv.nn.functional.pad(x, (1, 2, 2, 0), mode=mode, value=0.5) * 2.0

    x = rand(2, 3, 4, 5)
    model = lv.onnx.export(fn, x)
    assert ops(model) == Counter({"Pad": 1, "Mul": 1})
    (y,) = run_ort(model, {"input": x})
    np.testing.assert_allclose(y, fn(lv.tensor(x)).numpy(), rtol=1e-6)


def test_sizes_that_multiply_two_dynamic_axes():
    def flat(x):  # a Reshape target may hold B*T (as -1) ...
        return x.reshape(-1) * 2.0

    model = lv.onnx.export(flat, rand(2, 3), dynamic_axes={"input": [0, 1]})
    x = rand(4, 5)
    np.testing.assert_allclose(run_ort(model, {"input": x})[0], x.reshape(-1) * 2.0, rtol=1e-6)

    def sliced(x):  # ... but a slice bound cannot
        return x.reshape(-1)[: x.shape[0] * x.shape[1] - 1]

    with pytest.raises(OnnxError, match="not an affine function of the dynamic axis sizes"):
        lv.onnx.export(sliced, rand(2, 3), dynamic_axes={"input": [0, 1]})


def _layer_cases():
    lv.manual_seed(7)
    return {
        "conv_groups_stride_dilation": (nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2), (2, 4, 9, 9)),
        "avgpool_exclude_pad": (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 3, 7, 7)),
        "maxpool_padded": (nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 7, 7)),
        "adaptive_2x3": (nn.AdaptiveAvgPool2d((2, 3)), (2, 3, 7, 8)),
        "adaptive_max_2x3": (nn.AdaptiveMaxPool2d((2, 3)), (2, 3, 7, 8)),
        "layernorm_gelu_tanh": (nn.Sequential(nn.LayerNorm(8), nn.GELU("tanh")), (3, 5, 8)),
        "batchnorm1d_eval": (nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6), nn.LeakyReLU(0.1), nn.SiLU()), (4, 6)),
        "mha": (nn.MultiheadAttention(8, 2, batch_first=True), (2, 5, 8)),
        "softmax_logsoftmax": (nn.Sequential(nn.Softmax(1), nn.LogSoftmax(-1)), (3, 4, 5)),
    }


@pytest.mark.parametrize(
    "module, shape, hist",
    [
        # ceil_mode: PyTorch (and onnxruntime) drop a last window that would start in the right
        # padding; opset 13's shape rule keeps it, so a Slice crops to PyTorch's size.
        (nn.AvgPool2d(2, stride=3, padding=1, ceil_mode=True), (2, 3, 7, 8), {"AveragePool": 1, "Slice": 1}),
        (nn.AvgPool2d((3, 2), (2, 1), 1, ceil_mode=True, count_include_pad=False), (2, 3, 8, 7), {"AveragePool": 1}),
        (nn.AvgPool1d(3, 2, 1, ceil_mode=True), (2, 3, 9), {"Reshape": 2, "AveragePool": 1}),
        (nn.AdaptiveAvgPool2d((4, 2)), (2, 3, 8, 6), {"AveragePool": 1}),  # windows that tile the input
        (nn.AdaptiveAvgPool2d(1), (2, 3, 5, 7), {"GlobalAveragePool": 1}),
        (nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 7, 5), {"MatMul": 2}),  # uneven windows: averaging matrices
    ],
    ids=[
        "avg_ceil_dropped_window",
        "avg_ceil_exclude_pad",
        "avg1d_ceil",
        "adaptive_tiles",
        "global",
        "adaptive_uneven",
    ],
)
def test_average_pools_export_as_one_onnx_pool(module, shape, hist):
    x = rand(*shape, seed=5)
    model = lv.onnx.export(module, x)
    assert ops(model) == Counter(hist)
    (got,) = run_ort(model, {"input": x})
    np.testing.assert_allclose(got, module(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    pool = next(n for n in model.graph.node if n.op_type == "AveragePool") if "AveragePool" in hist else None
    if pool is not None and module.__class__.__name__.startswith("AvgPool"):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in pool.attribute}
        assert attrs["ceil_mode"] == 1 and attrs["count_include_pad"] == int(module.count_include_pad)


def test_avg_pool_divisor_override_has_no_onnx_form():
    with pytest.raises(UnsupportedOpError, match="avg_pool2d with divisor_override=3"):
        lv.onnx.export(nn.AvgPool2d(2, divisor_override=3), rand(1, 2, 4, 4))


@pytest.mark.parametrize("case", list(_layer_cases()))
def test_layers_match_onnxruntime(case):
    module, shape = _layer_cases()[case]
    module.eval()
    x = rand(*shape, seed=11)
    fn = (lambda t: module(t, t, t)[0]) if case == "mha" else module
    model = lv.onnx.export(fn, x)
    (got,) = run_ort(model, {"input": x})
    np.testing.assert_allclose(got, fn(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "cls, kwargs, onnx_op",
    [(nn.LSTM, {}, "LSTM"), (nn.GRU, {}, "GRU"), (nn.RNN, {}, "RNN"), (nn.RNN, {"nonlinearity": "relu"}, "RNN")],
)
def test_recurrent_layers_export_as_one_onnx_node_per_layer_and_direction(cls, kwargs, onnx_op, tmp_path):
    """A 2-layer bidirectional nn.LSTM / GRU / RNN is 4 ONNX LSTM / GRU / RNN nodes (no per-step
    nodes), its nested (output, (h_n, c_n)) result flat graph outputs as torch.onnx.export writes
    them; sequence and batch axes dynamic; onnxruntime matches lazyvic at two sizes."""
    lv.manual_seed(0)
    m = cls(8, 16, num_layers=2, bidirectional=True, **kwargs).eval()
    x = rand(5, 3, 8)
    model = lv.onnx.export(m, x, tmp_path / "rnn.onnx", dynamic_axes={"input": {0: "T", 1: "N"}})
    hist = ops(model)
    assert hist[onnx_op] == 4 and not {"MatMul", "Gemm", "Sigmoid", "Tanh", "Relu"} & set(hist), hist
    for shape, seed in (((5, 3, 8), 0), ((9, 4, 8), 1)):
        xx = rand(*shape, seed=seed)
        with lv.no_grad():
            y, state = m(lv.tensor(xx))
        want = [y, *(state if isinstance(state, tuple) else (state,))]
        got = run_ort(model, {"input": xx})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_lstm_export_with_initial_states_imports_back_to_the_same_outputs(tmp_path):
    """Given initial states (graph inputs) and batch_first: one LSTM node; the exported file
    runs in onnxruntime and, imported by lazyvic.onnx.load, gives lazyvic's bits."""
    lv.manual_seed(1)
    m = nn.LSTM(6, 10, batch_first=True).eval()
    x, h0, c0 = rand(3, 7, 6), rand(1, 3, 10, seed=1), rand(1, 3, 10, seed=2)
    path = tmp_path / "lstm.onnx"
    model = lv.onnx.export(lambda x, h, c: m(x, (h, c)), (x, h0, c0), path)
    assert ops(model)["LSTM"] == 1
    with lv.no_grad():
        y, (h, c) = m(lv.tensor(x), (lv.tensor(h0), lv.tensor(c0)))
        back = lv.onnx.load(path)(lv.tensor(x), lv.tensor(h0), lv.tensor(c0))
    got = run_ort(model, {"input_0": x, "input_1": h0, "input_2": c0})
    for g, b, w in zip(got, back, (y, h, c)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(b.numpy(), w.numpy())
    # lazyvic.compile of the imported module reorders the gates of W and R and sums the
    # reordered biases once, at its recording (capture._hoist_constants): the same bits
    compiled = lv.compile(lv.onnx.load(path))
    with lv.no_grad():
        for _ in range(3):
            again = compiled(lv.tensor(x), lv.tensor(h0), lv.tensor(c0))
            for a, w in zip(again, (y, h, c)):
                np.testing.assert_array_equal(a.numpy(), w.numpy())
    assert (compiled.recordings, compiled.replays, compiled.hoisted) == (1, 2, 3)
