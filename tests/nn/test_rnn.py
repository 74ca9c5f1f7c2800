"""nn.RNN / LSTM / GRU and their cells against PyTorch (tests/fixtures/torch_sequence.npz, made by
tests/fixtures/make_sequence_fixtures.py): PyTorch's state_dict loaded into the lazyvic module,
outputs and final states, gradients of the inputs, initial states and every parameter; plus the
state_dict layout and initialization, dropout between layers, finite differences and errors.

Gradients are those of the sum over outputs of ``sum(output * cotangent(output.shape))``
(tests/nn/_cotangent.py).
"""

import math
from collections import namedtuple

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _cotangent import cotangent
from _oracle import check_vjp

import lazyvic
from lazyvic import nn
from lazyvic.errors import ArgumentError, DTypeError, ShapeError, UnsupportedOpError
from lazyvic.functional import recurrent

FIXTURE = "torch_sequence.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=3e-5, atol=3e-6)
COMPILED = {"lstm_batch_first"}  # also through the compiler (the small ones: compiling is slow)
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def unflatten(flat: np.ndarray, layout: list) -> dict:
    """The named tensors of a flat array, cut with the spec's [key, shape] list."""
    out, start = {}, 0
    for key, shape in layout:
        n = math.prod(shape)
        out[key] = flat[start : start + n].reshape(shape)
        start += n
    assert start == flat.size
    return out


def flatten_outputs(result) -> list:
    if isinstance(result, lazyvic.Tensor):
        return [result]
    return [t for r in result for t in flatten_outputs(r)]


def run_case(ref, case, module):
    """Load the case's parameters, run it as the fixture script did, back-propagate; returns the
    module, the input tensors and the outputs."""
    name = case["name"]
    assert [[k, list(v.shape)] for k, v in module.state_dict().items()] == case["state_dict"]
    module.load_state_dict(unflatten(ref[f"{name}.params"], case["state_dict"]))
    prefix = f"{name}.input."
    inputs = {}
    for key in ref:
        if key.startswith(prefix):
            a = ref[key]
            grad = a.dtype == np.float32 and "mask" not in key
            inputs[key[len(prefix) :]] = lazyvic.tensor(a, requires_grad=grad)
    return inputs


def check_case(ref, case, module, outputs, inputs):
    name = case["name"]
    assert len(outputs) == case["outputs"]
    total = None
    for i, y in enumerate(outputs):
        assert y.shape == ref[f"{name}.out{i}"].shape, f"{name} output {i}"
        term = (y * lazyvic.tensor(cotangent(y.shape))).sum()
        total = term if total is None else total + term
    total.backward()
    for i, y in enumerate(outputs):
        np.testing.assert_allclose(y.numpy(), ref[f"{name}.out{i}"], **TOL, err_msg=f"{name} output {i}")
    for key, t in inputs.items():
        if t.requires_grad:
            np.testing.assert_allclose(t.grad.numpy(), ref[f"{name}.grad.input.{key}"], **TOL, err_msg=f"{name} d{key}")
    grads = unflatten(ref[f"{name}.param_grads"], case["state_dict"])
    for key, p in module.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[key], **TOL, err_msg=f"{name} grad of {key}")


def _cases():
    return [
        pytest.param(c, m, id=f"{c['name']}-{m}")
        for c in SPEC["rnn"]
        for m in (("never", "always") if c["name"] in COMPILED else ("never",))
    ]


# nn.utils.rnn.PackedSequence's fields (the RNNs read any object that has them).
PackedSequence = namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])


@pytest.mark.parametrize("case, mode", _cases(), indirect=["mode"])
def test_recurrent_layers_match_torch(ref, case, mode):
    module = getattr(nn, case["cls"])(*case["args"], **case["kwargs"])
    inputs = run_case(ref, case, module)
    h0, c0 = inputs.get("h0"), inputs.get("c0")
    if case.get("packed"):
        x = PackedSequence(*(inputs[f] for f in PackedSequence._fields))
    else:
        x = inputs["x"]
    result = module(x) if h0 is None else module(x, (h0, c0) if c0 is not None else h0)
    if case.get("packed"):
        assert isinstance(result[0], PackedSequence) and result[0].batch_sizes is x.batch_sizes
        result = (result[0].data, result[1])
    check_case(ref, case, module, flatten_outputs(result), inputs)


def test_fixture_covers_the_listed_options():
    kwargs = [c["kwargs"] for c in SPEC["rnn"]]
    assert {c["cls"] for c in SPEC["rnn"]} == {"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"}
    assert {c["cls"] for c in SPEC["rnn"] if c.get("packed")} == {"LSTM", "GRU"}
    assert any(k.get("bidirectional") and k.get("num_layers") == 2 for k in kwargs)
    assert any(k.get("batch_first") for k in kwargs) and any(k.get("bias") is False for k in kwargs)


def test_output_structure_is_pytorchs():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    out, (h, c) = lstm(lazyvic.zeros(5, 2, 3))
    assert out.shape == (5, 2, 8) and h.shape == c.shape == (4, 2, 4)
    out, h = nn.GRU(3, 4, batch_first=True)(lazyvic.zeros(2, 5, 3))
    assert out.shape == (2, 5, 4) and h.shape == (1, 2, 4)
    out, h = nn.RNN(3, 4)(lazyvic.zeros(5, 3))
    assert out.shape == (5, 4) and h.shape == (1, 4)
    h, c = nn.LSTMCell(3, 4)(lazyvic.zeros(2, 3))
    assert h.shape == c.shape == (2, 4)


def test_parameters_are_initialized_as_pytorch():
    lazyvic.manual_seed(0)
    gru = nn.GRU(3, 16, num_layers=2)
    bound = 1 / math.sqrt(16)
    for name, p in gru.named_parameters():
        v = p.numpy()
        assert np.abs(v).max() <= bound and v.std() > bound / 4, name
    assert [n for n, _ in nn.RNN(2, 3, bias=False).named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    assert len(nn.LSTM(2, 3, num_layers=2).all_weights) == 2
    nn.LSTM(2, 3).flatten_parameters()  # scripts call it; nothing to do


def test_dropout_between_layers_only_in_training():
    lazyvic.manual_seed(1)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.5)
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = lazyvic.tensor(np.random.default_rng(0).normal(size=(3, 2, 3)).astype(np.float32))
    lstm.eval()
    a, b = lstm(x)[0].numpy(), lstm(x)[0].numpy()
    np.testing.assert_allclose(a, b, rtol=1e-6)
    lstm.train()
    c = lstm(x)[0].numpy()
    assert not np.allclose(a, c)


@pytest.mark.parametrize("mode", ["never"], indirect=True)  # three steps: interpret them
def test_unrolled_lstm_trains_one_step(mode):
    lazyvic.manual_seed(0)
    model = nn.LSTM(2, 3)
    head = nn.Linear(3, 1)
    params = list(model.parameters()) + list(head.parameters())
    opt = lazyvic.optim.SGD(params, lr=0.5)
    x = lazyvic.tensor(np.random.default_rng(1).normal(size=(4, 2, 2)).astype(np.float32))
    y = lazyvic.tensor(np.ones((2, 1), np.float32))
    losses = []
    for _ in range(3):
        opt.zero_grad()
        out, _ = model(x)
        loss = ((head(out[-1]) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[2] < losses[0]


_R = np.random.default_rng(9)


@pytest.mark.parametrize(
    "fn, arrays",
    [
        (lambda x, h, c, wi, wh, b: recurrent.lstm_layer(x, h, c, wi, wh, b, None, reverse=True)[0], [
            _R.normal(size=(3, 2, 2)), _R.normal(size=(2, 2)), _R.normal(size=(2, 2)), _R.normal(size=(8, 2)) * 0.5,
            _R.normal(size=(8, 2)) * 0.5, _R.normal(size=8) * 0.1]),
        (lambda x, h, wi, wh, bi, bh: recurrent.gru_layer(x, h, wi, wh, bi, bh)[1], [
            _R.normal(size=(3, 2, 2)), _R.normal(size=(2, 2)), _R.normal(size=(6, 2)) * 0.5,
            _R.normal(size=(6, 2)) * 0.5, _R.normal(size=6) * 0.1, _R.normal(size=6) * 0.1]),
        (lambda x, h, wi, wh: recurrent.rnn_layer(x, h, wi, wh, nonlinearity="tanh")[0], [
            _R.normal(size=(3, 2, 2)), _R.normal(size=(2, 2)), _R.normal(size=(2, 2)), _R.normal(size=(2, 2))]),
    ],
    ids=["lstm_reverse", "gru", "rnn_tanh"],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_recurrent_layer_vjp_matches_finite_differences(fn, arrays, mode):
    check_vjp(fn, *arrays)


def test_recurrent_errors_name_the_layer():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(
        ShapeError, match=r"LSTM: expected input to be 2-D \(T, I\) or 3-D \(T, N, I\), got shape \(1, 5, 2, 3\)"
    ):
        lstm(lazyvic.zeros(1, 5, 2, 3))
    with pytest.raises(ShapeError, match=r"LSTM: expected a sequence length above 0, got input of shape \(0, 2, 3\)"):
        lstm(lazyvic.zeros(0, 2, 3))
    with pytest.raises(ShapeError, match=r"GRU: expected a sequence length above 0"):
        nn.GRU(3, 4, batch_first=True)(lazyvic.zeros(2, 0, 3))
    w = lazyvic.zeros(16, 4)
    with pytest.raises(ShapeError, match=r"lstm_scan: expected at least one time step, got xp of shape \(0, 2, 16\)"):
        lazyvic.Tensor.apply(
            "lstm_scan", lazyvic.zeros(0, 2, 16), lazyvic.zeros(2, 4), lazyvic.zeros(2, 4), w, reverse=False
        )
    with pytest.raises(ShapeError, match=r"lstm_scan: expected xp \(T, N, 4H\), h0 and c0 \(N, H\) and w_hh"):
        lazyvic.Tensor.apply(
            "lstm_scan", lazyvic.zeros(3, 2, 12), lazyvic.zeros(2, 4), lazyvic.zeros(2, 4), w, reverse=False
        )
    with pytest.raises(DTypeError, match=r"gru_scan: expected float32 or float64 inputs of one dtype"):
        args = (
            lazyvic.zeros(3, 2, 12),
            lazyvic.zeros(2, 4),
            lazyvic.zeros(12, 4, dtype=lazyvic.float64),
            lazyvic.zeros(12),
        )
        lazyvic.Tensor.apply("gru_scan", *args, reverse=False)
    with pytest.raises(ArgumentError, match="rnn_scan: nonlinearity must be 'tanh' or 'relu', got 'gelu'"):
        lazyvic.Tensor.apply(
            "rnn_scan",
            lazyvic.zeros(3, 2, 4),
            lazyvic.zeros(2, 4),
            lazyvic.zeros(4, 4),
            reverse=False,
            nonlinearity="gelu",
        )
    with pytest.raises(ShapeError, match=r"rnn_scan: expected xp \(T, N, H\), h0 \(N, H\) and w_hh \(H, H\), got"):
        lazyvic.Tensor.apply(
            "rnn_scan",
            lazyvic.zeros(3, 2, 4),
            lazyvic.zeros(2, 4),
            lazyvic.zeros(4, 5),
            reverse=False,
            nonlinearity="tanh",
        )
    with pytest.raises(ShapeError, match=r"LSTM: input.size\(-1\) must be equal to input_size: expected 3"):
        lstm(lazyvic.zeros(5, 2, 4))
    with pytest.raises(ShapeError, match=r"LSTM: expected h_0 of shape \(2, 2, 4\), got \(1, 2, 4\)"):
        lstm(lazyvic.zeros(5, 2, 3), (lazyvic.zeros(1, 2, 4), lazyvic.zeros(2, 2, 4)))
    with pytest.raises(ShapeError, match="LSTM: hx must be a pair"):
        lstm(lazyvic.zeros(5, 2, 3), lazyvic.zeros(2, 2, 4))
    with pytest.raises(ShapeError, match=r"GRU: expected h_0 of shape \(1, 4\)"):
        nn.GRU(3, 4)(lazyvic.zeros(5, 3), lazyvic.zeros(1, 2, 4))
    with pytest.raises(DTypeError, match="RNN: expected a floating-point input, got int64"):
        nn.RNN(3, 4)(lazyvic.zeros(5, 2, 3, dtype=lazyvic.int64))
    with pytest.raises(UnsupportedOpError, match="LSTM: proj_size=2"):
        nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        nn.RNNBase("GRU", 3, 4, proj_size=2)
    with pytest.raises(ValueError, match="RNN: unknown nonlinearity 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ShapeError, match=r"LSTMCell: expected input \(N, 3\) or \(3,\), got \(2, 4\)"):
        nn.LSTMCell(3, 4)(lazyvic.zeros(2, 4))
    with pytest.raises(ShapeError, match=r"GRUCell: expected a hidden state of shape \(2, 4\), got \(2, 5\)"):
        nn.GRUCell(3, 4)(lazyvic.zeros(2, 3), lazyvic.zeros(2, 5))

    packed = PackedSequence(lazyvic.zeros(5, 3), lazyvic.tensor([2, 2]), None, None)
    with pytest.raises(ShapeError, match=r"LSTM: expected a PackedSequence with data .* got data \(5, 3\)"):
        lstm(packed)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_inference_reads_one_row_major_recurrent_weight(cls, monkeypatch):
    """Without gradients, every step multiplies by one row-major copy of W_hh^T
    (functional/recurrent.recurrent_weight), not by a transposed view: the interpreter and the
    compiled plan give the same bits, and the outputs match the training-mode ones."""
    from lazyvic.runtime.config import config

    xs = np.random.default_rng(5).standard_normal((5, 4, 8)).astype(np.float32)
    outs = {}
    for mode in ("never", "always"):
        monkeypatch.setattr(config, "compile", mode)
        lazyvic.manual_seed(0)
        layer = getattr(nn, cls)(8, 8, 1)
        with lazyvic.no_grad():
            assert recurrent.recurrent_weight(layer.weight_hh_l0, 4, 5) is not None
            outs[mode] = layer(lazyvic.tensor(xs))[0].numpy()
    assert outs["never"].tobytes() == outs["always"].tobytes()
    monkeypatch.setattr(config, "compile", "never")
    with_grad = layer(lazyvic.tensor(xs))[0].detach().numpy()  # per-step views of W_hh^T
    np.testing.assert_allclose(outs["always"], with_grad, rtol=1e-5, atol=1e-6)


def _training_step(model, x, states):
    """Outputs, final states and every gradient of one step of a loss over all of them."""
    for p in model.parameters():
        p.grad = None
    leaves = [lazyvic.tensor(a, requires_grad=True) for a in (x, *states)]
    out, last = model(leaves[0], tuple(leaves[1:]) if len(leaves) == 3 else leaves[1])
    loss = (out * out).sum() + sum((s * (k + 2)).sum() for k, s in enumerate(last if len(leaves) == 3 else [last]))
    loss.backward()
    values = [out] + list(last if len(leaves) == 3 else [last]) + [t.grad for t in leaves]
    return [v.numpy() for v in values + [p.grad for p in model.parameters()]]


def _recurrent_model(cls: str, *args, **kwargs):
    """nn.LSTM, nn.GRU, nn.RNN, or with ``cls`` "RNN_relu" an nn.RNN with nonlinearity="relu"."""
    if cls == "RNN_relu":
        return nn.RNN(*args, nonlinearity="relu", **kwargs)
    return getattr(nn, cls)(*args, **kwargs)


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
@pytest.mark.parametrize(
    "cls, bidirectional", [("LSTM", False), ("LSTM", True), ("GRU", True), ("RNN", True), ("RNN_relu", False)]
)
def test_scans_give_the_unrolled_steps_results(cls, bidirectional, mode, monkeypatch):
    """nn.LSTM's, nn.GRU's and nn.RNN's recurrences run as one lstm_scan / gru_scan / rnn_scan
    primitive per layer and direction (ops/recurrent.py; a library step of a BLAS product and a
    cell kernel per time step) and give the results of the same steps unrolled into the graph:
    outputs, final states and every gradient of two layers, interpreted and compiled. An LSTM
    forward in time gives the very bits; backwards, its weight gradient sums the steps in another
    order, and the GRU's and RNN's backwards are written in another order: within float32
    rounding."""
    from _oracle import pending_ops

    lazyvic.manual_seed(3)
    model = _recurrent_model(cls, 5, 4, num_layers=2, bidirectional=bidirectional)
    op = cls.split("_")[0].lower() + "_scan"
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 3, 5)).astype(np.float32)
    states = [
        rng.standard_normal((4 if bidirectional else 2, 3, 4)).astype(np.float32)
        for _ in range(2 if cls == "LSTM" else 1)
    ]
    with lazyvic.no_grad():
        assert op in pending_ops(model(lazyvic.tensor(x))[0])
    scanned = _training_step(model, x, states)
    monkeypatch.setattr(recurrent, "_scans", lambda *a: False)
    with lazyvic.no_grad():
        assert op not in pending_ops(model(lazyvic.tensor(x))[0])
    unrolled = _training_step(model, x, states)
    for k, (a, b) in enumerate(zip(scanned, unrolled)):
        if bidirectional or cls != "LSTM":
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=str(k))
        else:
            assert a.tobytes() == b.tobytes(), k


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_packed_sequences_run_as_each_sequence_alone(cls, monkeypatch):
    """A PackedSequence of unsorted lengths through a bidirectional two-layer layer (the scans
    with their lengths input: rows past their length hold their state) gives, for each sequence,
    what the same layer gives that sequence alone: outputs, final states and the gradients of the
    inputs and parameters; interpreted and compiled give the same bits."""
    from _oracle import pending_ops

    from lazyvic.nn.utils.rnn import pack_sequence, pad_packed_sequence
    from lazyvic.runtime.config import config

    rng = np.random.default_rng(8)
    lengths = [3, 5, 2]
    seqs = [rng.standard_normal((n, 4)).astype(np.float32) for n in lengths]
    weights = {}

    def run(inputs, packed: bool):
        lazyvic.manual_seed(9)
        model = _recurrent_model(cls, 4, 3, num_layers=2, bidirectional=True)
        xs = [lazyvic.tensor(a, requires_grad=True) for a in inputs]
        if packed:
            out, last = model(pack_sequence(xs, enforce_sorted=False))
            padded, _ = pad_packed_sequence(out)
            outs = [padded[:n, i] for i, n in enumerate(lengths)]
            with lazyvic.no_grad():
                assert cls.lower() + "_scan" in pending_ops(model(pack_sequence(xs, enforce_sorted=False))[0].data)
        else:
            outs, finals = [], []
            for x in xs:
                o, f = model(x.unsqueeze(1))
                outs.append(o[:, 0])
                finals.append(f)
            last = tuple(lazyvic.cat([f[k] for f in finals], 1) for k in range(2)) if cls == "LSTM" else None
            last = last if cls == "LSTM" else lazyvic.cat(finals, 1)
        states = list(last) if cls == "LSTM" else [last]
        loss = sum((o * o).sum() for o in outs) + sum((s * (k + 2)).sum() for k, s in enumerate(states))
        loss.backward()
        weights["grads"] = [p.grad.numpy() for p in model.parameters()]
        return [o.numpy() for o in outs] + [s.numpy() for s in states], [x.grad.numpy() for x in xs], weights["grads"]

    got = {}
    for mode in ("never", "always"):
        monkeypatch.setattr(config, "compile", mode)
        got[mode] = run(seqs, True)
    alone = run(seqs, False)
    for a, b in zip(got["never"][0] + got["never"][1] + got["never"][2], alone[0] + alone[1] + alone[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(sum(got["never"], []), sum(got["always"], [])):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN", "RNN_relu"])
def test_scans_give_the_same_bits_on_every_tier(cls, batch, monkeypatch):
    """The interpreter (the NumPy loop and cells) and the compiled plan (the Numba cells, the
    forward in one native loop calling OpenBLAS as NumPy does: a gemv at batch 1, a gemm above)
    give the same bits: outputs, states and gradients of a bidirectional two-layer step."""
    from lazyvic.runtime.config import config

    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, batch, 6)).astype(np.float32)
    states = [rng.standard_normal((4, batch, 8)).astype(np.float32) for _ in range(2 if cls == "LSTM" else 1)]
    got = {}
    for mode in ("never", "always"):
        monkeypatch.setattr(config, "compile", mode)
        lazyvic.manual_seed(7)
        got[mode] = _training_step(_recurrent_model(cls, 6, 8, num_layers=2, bidirectional=True), x, states)
    for k, (a, b) in enumerate(zip(got["never"], got["always"])):
        assert a.tobytes() == b.tobytes(), k


def test_lstm_over_varying_lengths_is_one_plan(fresh):
    """A language-model step whose sequence length changes (the last, shorter batch of
    word_language_model; variable-length batches): the scans take the length as a symbolic size,
    so one plan serves every length after the first two, with one library step per layer
    forward and backward, and gives the interpreter's bits."""
    from lazyvic.lowering.cpu.steps import RecurrentStep
    from lazyvic.runtime import metrics
    from lazyvic.runtime.config import config
    from lazyvic.runtime.plan_cache import plan_cache

    def losses(lengths):
        lazyvic.manual_seed(0)
        model, head = nn.LSTM(4, 8, num_layers=2), nn.Linear(8, 3)
        opt = lazyvic.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.1)
        rng, out = np.random.default_rng(1), []
        for n in lengths:
            x = lazyvic.tensor(rng.standard_normal((n, 2, 4)).astype(np.float32))
            y, _ = model(x)
            loss = (head(y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    lengths = [7, 5, 9, 6, 12, 8, 11]
    got = losses(lengths)
    snap = metrics.snapshot()
    assert snap["cache_misses"] <= 3 and snap["family_hits"] >= len(lengths) - 3, snap
    assert snap["symbolic_plans_compiled"] == 1, {k: v for k, v in snap.items() if v}
    plan = plan_cache.last.plan
    assert plan is not None and plan.symbols, "the last step did not run the plan of symbolic sizes"
    scans = [s.name for s in plan.steps if isinstance(s, RecurrentStep)]
    assert len(scans) == 4, scans  # 2 layers, forward and backward
    config.compile = "never"
    assert losses(lengths) == got


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_initial_states_filled_from_a_scalar_follow_its_value(cls, fresh):
    """Initial states made of a Python number (``full``: a scalar input of the plan, broadcast)
    are made once per value by the scan's step, not at every call: one plan serves each value,
    and each call gives the bits of the same states passed as arrays."""
    from lazyvic.lowering.cpu.steps import RecurrentStep
    from lazyvic.runtime import metrics
    from lazyvic.runtime.plan_cache import plan_cache

    lazyvic.manual_seed(3)
    layer = getattr(nn, cls)(4, 8).eval()
    x = lazyvic.tensor(np.random.default_rng(2).standard_normal((5, 2, 4)).astype(np.float32))
    values = [0.0, 0.5, 0.5, 0.0, -0.25, 0.5, -0.25]

    def run(state):
        with lazyvic.no_grad():
            return layer(x, (state(), state()) if cls == "LSTM" else state())[0].numpy()

    got = [run(lambda v=v: lazyvic.full((1, 2, 8), v)) for v in values]
    plan = plan_cache.last.plan
    scans = [s for s in plan.steps if isinstance(s, RecurrentStep)]
    assert scans and scans[0].filled, "the states did not reach the scan as a scalar input"
    assert metrics.snapshot()["plans_compiled"] == 1
    for v, y in zip(values, got):
        want = run(lambda v=v: lazyvic.tensor(np.full((1, 2, 8), v, dtype=np.float32)))
        assert y.tobytes() == want.tobytes(), v
    assert got[0].tobytes() != got[1].tobytes()


def test_lstm_over_varying_batch_sizes_gives_the_interpreters_bits(fresh, monkeypatch):
    """Inference on batches of other sizes through one plan of symbolic sizes: the zero
    initial states the scans make of a scalar input (kept per value) are made per binding of
    the sizes, never reused at another batch size."""
    from lazyvic.runtime.config import config
    from lazyvic.runtime.plan_cache import plan_cache

    lazyvic.manual_seed(0)
    lstm = nn.LSTM(4, 8, num_layers=2).eval()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((5, n, 4)).astype(np.float32) for n in (2, 3, 2, 6, 4, 6, 2)]

    def outputs():
        with lazyvic.no_grad():
            return [lstm(lazyvic.tensor(x))[0].numpy().copy() for x in xs]

    got = outputs()
    assert plan_cache.last.plan is not None and plan_cache.last.plan.symbols
    monkeypatch.setattr(config, "compile", "never")
    for k, (a, b) in enumerate(zip(got, outputs())):
        assert a.tobytes() == b.tobytes(), k


def test_compiled_layers_read_each_calls_inputs(fresh, monkeypatch):
    """A compiled layer's scans keep their views of the plan's temporaries (the input
    projection) from call to call: each call still reads its own inputs (alternating inputs
    give the interpreter's bits every time)."""
    from lazyvic.lowering.cpu.steps import RecurrentStep
    from lazyvic.runtime.config import config
    from lazyvic.runtime.plan_cache import plan_cache

    lazyvic.manual_seed(4)
    layer = nn.LSTM(4, 8, num_layers=2).eval()
    f = lazyvic.compile(lambda x: layer(x)[0])
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((6, 1, 4)).astype(np.float32) for _ in range(2)]
    with lazyvic.no_grad():
        got = [f(lazyvic.tensor(xs[k % 2])).numpy().copy() for k in range(6)]
        scans = [s for s in plan_cache.last.plan.steps if isinstance(s, RecurrentStep)]
        assert scans and all(s.kept for s in scans), "the scans did not keep a view of a temporary"
        monkeypatch.setattr(config, "compile", "never")
        want = [layer(lazyvic.tensor(x))[0].numpy() for x in xs]
    for k, y in enumerate(got):
        assert y.tobytes() == want[k % 2].tobytes(), k


def test_packed_batches_of_other_lengths_are_one_plan(fresh):
    """A classifier over packed, unsorted batches whose lengths change every step (and whose
    longest sequence moves): pack_sequence and the layer give every batch the same trace
    structure, so after the first two every batch runs a plan of symbolic sizes of the same
    family, with the interpreter's losses. (The family's guards specialize a plan on lengths
    that were equal, as 2 and 2 in the third batch, and on a length of 1: three such plans
    here, where the pad-then-pack tree missed at every batch.)"""
    from lazyvic.nn.utils.rnn import pack_sequence
    from lazyvic.runtime import metrics
    from lazyvic.runtime.config import config

    batches = [[4, 7, 2], [6, 3, 5], [2, 2, 8], [5, 9, 4], [3, 6, 6], [7, 1, 3]]

    def losses():
        lazyvic.manual_seed(0)
        lstm, head = nn.LSTM(3, 4, bidirectional=True), nn.Linear(8, 2)
        opt = lazyvic.optim.SGD(list(lstm.parameters()) + list(head.parameters()), lr=0.1)
        rng, out = np.random.default_rng(2), []
        for lengths in batches:
            seqs = [lazyvic.tensor(rng.standard_normal((n, 3)).astype(np.float32)) for n in lengths]
            _, (h, _) = lstm(pack_sequence(seqs, enforce_sorted=False))
            loss = (head(lazyvic.cat([h[0], h[1]], 1)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    got = losses()
    snap = metrics.snapshot()
    assert snap["cache_misses"] <= 2 and snap["family_hits"] == len(batches) - 2, snap
    assert snap["symbolic_plans_compiled"] <= 3, {k: v for k, v in snap.items() if v}
    config.compile = "never"
    assert losses() == got


@pytest.mark.parametrize("batch", [1, 4])
def test_recurrent_loops_run_natively(batch):
    """With NumPy's OpenBLAS bound (lowering/cpu/native.py), the compiled recurrences' loops
    make the products themselves (one native call per loop; ops/gemm's kernel or NumPy's BLAS
    call, a gemv at batch 1): no fallback to the Python loop for the usual shapes."""
    from lazyvic.lowering.cpu import native, recurrent_kernels
    from lazyvic.ops import recurrent
    from lazyvic.ops.gemm_choice import own_kind_of

    if not native.blas().ok:
        pytest.skip(native.blas().reason)
    h0 = np.zeros((batch, 8), np.float32)
    y = np.zeros((5, batch, 48), np.float32)
    for w_hh in (np.zeros((32, 8), np.float32), np.zeros((24, 8), np.float32)):
        made = recurrent_kernels._forward_plan(h0, w_hh, y, False)
        assert made is not None
        # the kind: ops/gemm's kernel (2) where it runs the product, else a gemv at batch 1
        wt = recurrent.recurrent_weight(w_hh, batch, made[0])
        v = wt[:, : made[2]]
        own = own_kind_of(batch, 8, made[2], h0.strides, v.strides, (4 * made[2], 4))
        assert made is not None and made[3] == (2 if own else 1 if batch == 1 else 0)
        d = np.zeros((5, batch, 48), np.float32)
        assert recurrent_kernels._native_call(d[0, :, : w_hh.shape[0]], w_hh, np.empty_like(h0)) is not None


def test_plans_count_the_recurrent_loops_scratch(tmp_path):
    """Each recurrent loop's own arrays (step order, product rows, w_hh^T copy, per-step
    gradients) are what ``recurrent_kernels.scratch_bytes`` says (traced allocations of one
    call: the scratch plus at most a few Python objects), and a plan's memory report counts them."""
    import tracemalloc

    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.lowering.cpu import recurrent_kernels as rk
    from lazyvic.ops import recurrent as R
    from lazyvic.trace import cut

    rng = np.random.default_rng(0)
    steps, rows, hidden = 7, 64, 64  # scratch of 16-160 KB, well above the Python objects of a call
    t, n, h = steps, rows, hidden

    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    cases = {  # op: (inputs, output width in H, the call)
        "lstm_scan": (
            (f(t, n, 4 * h), f(n, h), f(n, h), f(4 * h, h)),
            6,
            lambda a, y: rk.lstm_forward(*a, y, rk.lstm_forward_cell),
        ),
        "gru_scan": (
            (f(t, n, 3 * h), f(n, h), f(3 * h, h), f(3 * h)),
            5,
            lambda a, y: rk.gru_forward(*a, y, rk.gru_forward_cell),
        ),
        "rnn_scan": ((f(t, n, h), f(n, h), f(h, h)), 1, lambda a, y: rk.rnn_forward(*a, y, False)),
        "lstm_scan_backward": (
            (f(t, n, 6 * h), f(t, n, 6 * h), f(n, h), f(4 * h, h)),
            6,
            lambda a, d: rk.lstm_backward(*a, d, rk.lstm_backward_cell),
        ),
        "gru_scan_backward": (
            (f(t, n, 5 * h), f(t, n, 5 * h), f(n, h), f(3 * h, h)),
            5,
            lambda a, d: rk.gru_backward(*a, d, rk.gru_backward_cell),
        ),
        "rnn_scan_backward": ((f(t, n, h), f(t, n, h), f(h, h)), 2, lambda a, d: rk.rnn_backward(*a, d, False)),
    }
    grouped = (f(t, 20, 4 * 128), f(20, 128), f(20, 128), f(4 * 128, 128))  # 2 groups of units
    assert R.unit_groups(20, 128, 4) == 2
    cases["lstm_scan in groups"] = (grouped, 6, lambda a, y: rk.lstm_forward(*a, y, rk.lstm_forward_cell))
    for name, (arrays, width, call) in cases.items():
        op = name.split()[0]
        n, h = (20, 128) if name == "lstm_scan in groups" else (rows, hidden)
        out = np.zeros((steps, n, width * h), np.float32)
        call(arrays, out)  # compiled (or loaded) outside the trace
        peaks = []
        for _ in range(3):  # the least of three calls: a first call may still fill Python caches
            tracemalloc.start()
            call(arrays, out)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        expected = rk.scratch_bytes(op, [a.shape for a in arrays], out.shape, 4)
        assert expected <= min(peaks) <= expected + 8192, (name, expected, peaks)

    lstm = nn.LSTM(8, hidden)
    with lazyvic.no_grad():
        y, _ = lstm(lazyvic.tensor(f(steps, rows, 8)))
    plan = compile_trace(cut([y._node])[0], cache_dir=tmp_path)
    memory = plan.memory.as_dict()
    scans = [s for s in plan.steps if s.name.startswith("lstm_scan")]
    assert scans and memory["scratch"] == sum(s.scratch for s in scans) > 0
    assert memory["peak"] == sum(memory[k] for k in ("inputs", "parameters", "outputs", "temporaries", "scratch"))


def test_per_step_products_in_column_blocks_give_the_same_bits_on_every_tier():
    """Products whose M*N*K is above OpenBLAS's small-matrix threshold run as equal column
    blocks below it (recurrent.column_block), in the NumPy loops and the native ones alike:
    at batch 20 and hidden 128 the LSTM's (20 x 512) @ (512 x 128) backward product in two
    64-column blocks, whose bits differ from one product's, and the loops agree bit for bit."""
    from lazyvic.lowering.cpu import native
    from lazyvic.lowering.cpu import recurrent_kernels as rk
    from lazyvic.ops import recurrent as R

    if not native.blas().ok:
        pytest.skip(native.blas().reason)
    assert R.column_block(20, 512, 128) == 256 and R.column_block(20, 128, 512) == 64
    assert R.column_block(1, 2048, 512) == 2048 and R.column_block(128, 512, 128) == 512  # a gemv; 16-wide blocks
    rng = np.random.default_rng(3)
    steps, rows, hidden = 4, 20, 128
    xp = rng.standard_normal((steps, rows, 4 * hidden)).astype(np.float32)
    h0, c0 = (rng.standard_normal((rows, hidden)).astype(np.float32) for _ in range(2))
    w_hh = (rng.standard_normal((4 * hidden, hidden)) * 0.1).astype(np.float32)
    gy = rng.standard_normal((steps, rows, 6 * hidden)).astype(np.float32)
    y, d = (np.zeros((2, steps, rows, 6 * hidden), np.float32) for _ in range(2))
    R.lstm_forward(xp, h0, c0, w_hh, y[0], R.numpy_forward_cell)
    rk.lstm_forward(xp, h0, c0, w_hh, y[1], rk.lstm_forward_cell)
    R.lstm_backward(gy, y[0], c0, w_hh, d[0], R.numpy_backward_cell)
    rk.lstm_backward(gy, y[0], c0, w_hh, d[1], rk.lstm_backward_cell)
    assert y[0].tobytes() == y[1].tobytes() and d[0].tobytes() == d[1].tobytes()
    dgates = np.ascontiguousarray(d[0, 1, :, : 4 * hidden])
    whole, blocked = np.empty((rows, hidden), np.float32), np.empty((rows, hidden), np.float32)
    np.matmul(dgates, w_hh, out=whole)
    R.blocked_matmul(dgates, w_hh, blocked, 64)
    assert whole.tobytes() != blocked.tobytes()  # so a tier without the blocks would differ


def test_python_loops_with_the_compiled_cells_give_the_reference_bits(monkeypatch):
    """Where no native loop can be made (NumPy's product is not one gemm or gemv), the CPU step
    runs ops/recurrent.py's Python loop with the compiled cells, passing them the whole range of
    units (as a native loop does: called with those arguments left out, Numba's specialization
    ran an LSTM cell 7x slower). Its bits are the NumPy reference's."""
    from lazyvic.lowering.cpu import recurrent_kernels as rk
    from lazyvic.ops import recurrent as R

    monkeypatch.setattr(rk, "_forward_plan", lambda *a: None)
    monkeypatch.setattr(rk, "_native_call", lambda *a: None)
    rng = np.random.default_rng(5)
    steps, rows, hidden = 3, 4, 32

    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    xp, h0, c0, w_hh = f(steps, rows, 4 * hidden), f(rows, hidden), f(rows, hidden), f(4 * hidden, hidden)
    y = np.zeros((2, steps, rows, 6 * hidden), np.float32)
    R.lstm_forward(xp, h0, c0, w_hh, y[0], R.numpy_forward_cell)
    rk.lstm_forward(xp, h0, c0, w_hh, y[1], rk.lstm_forward_cell)
    assert y[0].tobytes() == y[1].tobytes() and np.abs(y[0]).sum() > 0
    gy, d = f(steps, rows, 6 * hidden), np.zeros((2, steps, rows, 6 * hidden), np.float32)
    R.lstm_backward(gy, y[0], c0, w_hh, d[0], R.numpy_backward_cell)
    rk.lstm_backward(gy, y[0], c0, w_hh, d[1], rk.lstm_backward_cell)
    assert d[0].tobytes() == d[1].tobytes()
    xg, wg, bg = f(steps, rows, 3 * hidden), f(3 * hidden, hidden), f(3 * hidden)
    g = np.zeros((2, steps, rows, 5 * hidden), np.float32)
    R.gru_forward(xg, h0, wg, bg, g[0], R.numpy_gru_forward_cell)
    rk.gru_forward(xg, h0, wg, bg, g[1], rk.gru_forward_cell)
    assert g[0].tobytes() == g[1].tobytes()
    xr, wr = f(steps, rows, hidden), f(hidden, hidden)
    r = np.zeros((2, steps, rows, hidden), np.float32)
    R.rnn_forward(xr, h0, wr, r[0], R._numpy_rnn_forward_cell(R._tanh))
    rk.rnn_forward(xr, h0, wr, r[1], False)
    assert r[0].tobytes() == r[1].tobytes()


@pytest.mark.parametrize(
    "cell, rows, hidden, reverse, lengths",
    [
        ("lstm", 20, 128, True, True),
        ("gru", 8, 256, False, False),
        ("rnn", 40, 128, False, True),
        ("lstm", 2, 384, False, False),
    ],
    ids=["lstm_2_groups", "gru_4_groups", "rnn_2_groups", "lstm_gemm_blocks_of_the_transposed_view"],
)
def test_forward_steps_in_groups_of_units_give_the_same_bits_on_every_tier(
    cell, rows, hidden, reverse, lengths, monkeypatch
):
    """A forward's steps in groups of hidden units (recurrent.unit_groups: each group's products
    and cell, side by side on Numba's threads where the plan has its team) give the NumPy loop's
    bits, serial or parallel; at 2 rows the products read w_hh^T's transposed view, whose column
    blocks start H elements apart (they were read 1 apart: wrong outputs at hidden 384)."""
    from lazyvic.lowering.cpu import load, native
    from lazyvic.lowering.cpu import recurrent_kernels as rk
    from lazyvic.ops import recurrent as R

    if not native.blas().ok:
        pytest.skip(native.blas().reason)
    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine
    gates, width = {"lstm": (4, 6), "gru": (3, 5), "rnn": (1, 1)}[cell]
    assert R.unit_groups(rows, hidden, gates) == {"lstm": 2, "gru": 4, "rnn": 2}[cell] if rows > 2 else 1
    if rows == 2:
        assert R.column_block(rows, gates * hidden, hidden) < gates * hidden  # blocks of the view
    rng = np.random.default_rng(5)
    steps = 5
    xp = rng.standard_normal((steps, rows, gates * hidden)).astype(np.float32)
    h0, c0 = (rng.standard_normal((rows, hidden)).astype(np.float32) for _ in range(2))
    w_hh = (rng.standard_normal((gates * hidden, hidden)) * 0.1).astype(np.float32)
    b_hh = rng.standard_normal(gates * hidden).astype(np.float32)
    lens = rng.integers(0, steps + 1, rows).astype(np.int64) if lengths else None
    want = np.empty((steps, rows, width * hidden), np.float32)
    if cell == "lstm":
        R.lstm_forward(xp, h0, c0, w_hh, want, R.numpy_forward_cell, reverse, lens)
        run = lambda y, team: rk.lstm_forward(xp, h0, c0, w_hh, y, None, reverse, lens, team=team)  # noqa: E731
    elif cell == "gru":
        R.gru_forward(xp, h0, w_hh, b_hh, want, R.numpy_gru_forward_cell, reverse, lens)
        run = lambda y, team: rk.gru_forward(xp, h0, w_hh, b_hh, y, None, reverse, lens, team=team)  # noqa: E731
    else:
        R.rnn_forward(xp, h0, w_hh, want, R._numpy_rnn_forward_cell(R._tanh), reverse, lens)
        run = lambda y, team: rk.rnn_forward(xp, h0, w_hh, y, False, reverse, lens, team=team)  # noqa: E731
    for team in (False, True):
        got = np.full_like(want, np.nan)
        run(got, team)
        assert got.tobytes() == want.tobytes(), team
    if cell == "lstm" and not lengths:  # and the values: PyTorch's equations in float64
        h, c = h0.astype(np.float64), c0.astype(np.float64)
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        for t in range(steps):
            g = xp[t] + h @ w_hh.T.astype(np.float64)
            i, f, gg, o = np.split(g, 4, axis=1)
            c = sig(f) * c + sig(i) * np.tanh(gg)
            h = sig(o) * np.tanh(c)
            np.testing.assert_allclose(want[t, :, :hidden], h, rtol=1e-4, atol=1e-5)


def test_lstm_step_on_the_team_gives_the_interpreters_bits(monkeypatch):
    """An LSTM large enough for groups of units (batch 8, hidden 128) runs its forward and its
    backward on Numba's threads in a compiled plan (recurrent_kernels.forward_loop_parallel,
    lstm_backward_loop_parallel): outputs, states and gradients with the interpreter's bits, at
    two calls with other inputs (the backward's padded cotangent is a buffer the step keeps,
    recurrent steps' ``padded``: its zeros stay, its h columns are the new call's)."""
    import numba

    from lazyvic.lowering.cpu import load
    from lazyvic.lowering.cpu import recurrent_kernels as rk
    from lazyvic.ops import recurrent as R
    from lazyvic.runtime.config import config

    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine
    assert R.unit_groups(8, 128, 4) == 2
    calls = {"forward": 0, "backward": 0}
    for name, key in (("forward_loop_parallel", "forward"), ("lstm_backward_loop_parallel", "backward")):
        real = getattr(rk, name)
        monkeypatch.setattr(
            rk, name, lambda *a, real=real, key=key: (calls.__setitem__(key, calls[key] + 1), real(*a))[1]
        )
    rng = np.random.default_rng(8)
    model = nn.LSTM(16, 128)
    got = {}
    for mode in ("never", "always"):
        monkeypatch.setattr(config, "compile", mode)
        got[mode] = []
        for _ in range(2):
            x = rng.standard_normal((6, 8, 16)).astype(np.float32)
            states = [rng.standard_normal((1, 8, 128)).astype(np.float32) for _ in range(2)]
            for p in model.parameters():
                p.grad = None
            leaves = [lazyvic.tensor(a, requires_grad=True) for a in (x, *states)]
            out, _ = model(leaves[0], tuple(leaves[1:]))
            ((out * out).sum()).backward()  # the cotangent of the scan: its h columns, zeros beside
            got[mode].append(
                [v.numpy() for v in [out] + [t.grad for t in leaves] + [p.grad for p in model.parameters()]]
            )
        if mode == "never":
            rng = np.random.default_rng(8)
    for one, other in zip(got["never"], got["always"]):
        for k, (a, b) in enumerate(zip(one, other)):
            assert a.tobytes() == b.tobytes(), k
    assert got["never"][0][0].tobytes() != got["never"][1][0].tobytes()
    threads = numba.get_num_threads() > 1
    assert calls == {"forward": 2 * threads, "backward": 2 * threads}
