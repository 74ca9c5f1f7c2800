"""Mixed precision (lazyvic/amp.py): the round_float16/round_bfloat16 primitives against
NumPy bit for bit, autocast on matmul/linear/conv2d and their gradients, GradScaler against
torch.amp.GradScaler's semantics, and a small MLP trained with both."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from _oracle import pending_ops

import lazyvic as lv
import lazyvic.functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError
from lazyvic.lowering import kernel_lib
from lazyvic.ops.elementwise import round_bfloat16_reference, round_float16_reference

# -- reference values ------------------------------------------------------------------------
_ULP16 = 2.0**-10  # binary16 spacing in [1, 2)
F16_EDGES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    1 + _ULP16 / 2,
    1 + 3 * _ULP16 / 2,
    -(1 + _ULP16 / 2),
    1 + _ULP16 / 2 + 2.0**-20,  # ties to even, just above
    2048.0 + 1.0,
    2048.0 + 3.0,
    2049.5,  # ties at the 1.0 spacing of [2048, 4096)
    65504.0,
    65519.0,
    65519.996,
    65520.0,
    -65520.0,
    65536.0,
    1e5,
    3.4e38,  # largest value and overflow
    2.0**-14,
    2.0**-14 - 2.0**-25,
    2.0**-14 - 2.0**-26,  # smallest normal and just below
    2.0**-24,
    2.0**-25,
    3 * 2.0**-25,
    5 * 2.0**-25,
    2.0**-25 + 2.0**-40,
    -(2.0**-25),
    2.0**-30,  # subnormals
    1e-45,
    1.17549435e-38,  # float32 subnormal and smallest normal: 0
    np.inf,
    -np.inf,
    np.nan,
    -np.nan,
]
_ULPB = 2.0**-7
BF16_EDGES = [
    0.0,
    -0.0,
    1.0,
    1 + _ULPB / 2,
    1 + 3 * _ULPB / 2,
    -(1 + 3 * _ULPB / 2),
    1 + _ULPB / 2 + 2.0**-20,
    65504.0,
    65520.0,
    3.3895314e38,
    3.3961776e38,
    3.4028235e38,
    -3.4028235e38,  # largest bf16, tie to inf
    2.0**-126,
    1e-40,
    1e-45,
    2.0**-133,
    2.0**-134,
    3 * 2.0**-134,  # subnormals
    np.inf,
    -np.inf,
    np.nan,
]


def _bits(a: np.ndarray) -> np.ndarray:
    """Bit patterns with every NaN made the same (NaN payloads are not compared)."""
    a = np.where(np.isnan(a), np.array(np.nan, a.dtype), a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _numpy_f16(a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return a.astype(np.float16).astype(a.dtype)


def _bf16_by_integers(a: np.ndarray) -> np.ndarray:
    """bfloat16 rounding written independently: Python integers on each float32 pattern."""
    out = []
    for v in np.asarray(a, np.float32).ravel():
        u = int(np.array(v).view(np.uint32))
        if v != v:
            out.append(v)
            continue
        low, keep = u & 0xFFFF, u >> 16
        if low > 0x8000 or (low == 0x8000 and keep & 1):
            keep += 1
        out.append(np.array(keep << 16, np.uint32).view(np.float32))
    return np.array(out, np.float32).reshape(np.shape(a))


def _random_patterns(n: int, dtype, seed: int = 0) -> np.ndarray:
    """Random bit patterns (every exponent, NaNs and infinities included) plus values near
    the binary16 range, where the interesting roundings are."""
    rng = np.random.default_rng(seed)
    if dtype == np.float32:
        raw = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        raw = rng.integers(0, 2**64, size=n, dtype=np.uint64).view(np.float64)
    near = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 18, n)).astype(dtype)
    ties = (np.round(rng.uniform(-4096, 4096, n)) + 0.5) * 2.0 ** rng.integers(-34, 6, n)  # exact halfway cases
    return np.concatenate([raw, near, ties.astype(dtype)])


# -- the primitive against NumPy -------------------------------------------------------------
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
def test_round_float16_matches_numpy_bit_for_bit(mode, np_dtype):
    """Edge values and random patterns, interpreted and compiled: NumPy's float16 round trip."""
    a = np.concatenate([np.array(F16_EDGES, np_dtype), _random_patterns(3000, np_dtype)])
    got = lv.amp.round_to_precision(lv.tensor(a, dtype=np_dtype), lv.float16).numpy()
    assert got.dtype == np_dtype
    np.testing.assert_array_equal(_bits(got), _bits(_numpy_f16(a)))
    np.testing.assert_array_equal(_bits(got), _bits(round_float16_reference(a)))
    assert np.signbit(got[1]) and got[F16_EDGES.index(65520.0)] == np.inf


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
def test_round_bfloat16_matches_bit_references(mode, np_dtype):
    """Edge values and random patterns, interpreted and compiled, against a Python-integer
    reference and ml_dtypes.bfloat16 (when importable)."""
    a = np.concatenate([np.array(BF16_EDGES, np_dtype), _random_patterns(3000, np_dtype, seed=1)])
    got = lv.tensor(a, dtype=np_dtype).to(np_dtype)
    got = lv.amp.round_to_precision(got, "bfloat16").numpy()
    assert got.dtype == np_dtype
    with np.errstate(over="ignore", invalid="ignore"):
        expected = _bf16_by_integers(a.astype(np.float32)).astype(np_dtype)
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    np.testing.assert_array_equal(_bits(got), _bits(round_bfloat16_reference(a)))


def test_round_bfloat16_matches_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.concatenate([np.array(BF16_EDGES, np.float32), _random_patterns(20000, np.float32, seed=2)])
    got = lv.amp.round_to_precision(lv.tensor(a), lv.bfloat16).numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        expected = a.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(_bits(got), _bits(expected))


def test_kernel_lib_functions_on_many_patterns():
    """The njit scalar functions themselves, over 200k patterns per dtype (in one loop)."""
    from numba import njit

    @njit
    def apply_all(f, a):
        out = np.empty_like(a)
        for i in range(a.size):
            out[i] = f(a[i])
        return out

    for np_dtype in (np.float32, np.float64):
        a = _random_patterns(70000, np_dtype, seed=3)
        sfx = "f32" if np_dtype == np.float32 else "f64"
        f16 = apply_all(getattr(kernel_lib, f"round_f16_{sfx}"), a)
        bf16 = apply_all(getattr(kernel_lib, f"round_bf16_{sfx}"), a)
        np.testing.assert_array_equal(_bits(f16), _bits(_numpy_f16(a)))
        np.testing.assert_array_equal(_bits(bf16), _bits(round_bfloat16_reference(a)))


def test_rounding_keeps_nan_and_rejects_integers():
    x = lv.tensor(np.array([np.nan, 1.0], np.float32))
    assert np.isnan(lv.amp.round_to_precision(x).numpy()[0])
    with pytest.raises(DTypeError, match="floating-point"):
        lv.amp.round_to_precision(lv.tensor([1, 2]))
    with pytest.raises(DTypeError, match="float16 or lazyvic.bfloat16"):
        lv.amp.round_to_precision(x, lv.float32)


@pytest.mark.parametrize(
    "make, dtype",
    [
        (lambda: lv.tensor([1.0], dtype=lv.float16), "float16"),
        (lambda: lv.tensor([1.0]).to(lv.bfloat16), "bfloat16"),
        (lambda: lv.tensor([1.0]).to("float16"), "float16"),
        (lambda: lv.zeros(2, dtype="bfloat16"), "bfloat16"),
    ],
)
def test_half_precisions_are_tensor_dtypes_too(make, dtype):
    """lazyvic.float16 / bfloat16 are both autocast's precisions and storage dtypes."""
    t = make()
    assert t.dtype is lv.dtypes.get_dtype(dtype) and t.numpy().dtype.name == dtype
    assert lv.dtypes.get_dtype(np.float16) is lv.float16
    with lv.autocast(dtype=t.dtype):
        assert lv.amp.get_autocast_dtype() is t.dtype


# -- autocast --------------------------------------------------------------------------------
def _data(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _r16(a):
    return _numpy_f16(np.asarray(a, np.float32))


def test_autocast_matmul_is_the_float32_product_of_rounded_operands(mode):
    a, b = _data(3, 5, 7), _data(7, 4, seed=1)
    ta, tb = lv.tensor(a), lv.tensor(b)
    plain = (ta @ tb).numpy()
    with lv.autocast():
        c = ta @ tb
        assert "round_float16" in pending_ops(c)
        d = lv.matmul(ta, lv.tensor(_data(3, 7, 2, seed=2)))
    assert c.dtype is lv.float32
    exact = (lv.amp.round_to_precision(ta) @ lv.amp.round_to_precision(tb)).numpy()
    np.testing.assert_array_equal(c.numpy(), exact)  # same rounded operands, same product
    np.testing.assert_allclose(c.numpy(), _r16(a) @ _r16(b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.numpy(), _r16(a) @ _r16(_data(3, 7, 2, seed=2)), rtol=1e-5, atol=1e-5)
    assert not np.array_equal(c.numpy(), plain)
    np.testing.assert_array_equal((ta @ tb).numpy(), plain)  # outside: unchanged
    assert "round_float16" not in pending_ops(ta @ tb)


def test_autocast_linear_bfloat16_and_float64_untouched():
    x, w, b = _data(4, 6), _data(3, 6, seed=1), _data(3, seed=2)
    lin = nn.Linear(6, 3)
    with lv.autocast(dtype=lv.bfloat16):
        y = F.linear(lv.tensor(x), lv.tensor(w), lv.tensor(b))
        y64 = lv.tensor(x, dtype=lv.float64) @ lv.tensor(w, dtype=lv.float64).T
        ym = lin(lv.tensor(x))
        assert "round_bfloat16" in pending_ops(ym)
    rb = round_bfloat16_reference
    np.testing.assert_allclose(y.numpy(), rb(x) @ rb(w).T + b, rtol=1e-5, atol=1e-5)
    wl, bl = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    np.testing.assert_allclose(ym.numpy(), rb(x) @ rb(wl).T + bl, rtol=1e-5, atol=1e-5)
    assert "round_bfloat16" not in pending_ops(y64)
    np.testing.assert_allclose(y64.numpy(), x.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-12)


def test_autocast_conv2d(mode):
    x, w, b = _data(2, 3, 6, 6), _data(4, 3, 3, 3, seed=1), _data(4, seed=2)
    with lv.autocast():
        y = F.conv2d(lv.tensor(x), lv.tensor(w), lv.tensor(b), padding=1)
    expected = F.conv2d(lv.tensor(_r16(x)), lv.tensor(_r16(w)), lv.tensor(b), padding=1)
    np.testing.assert_array_equal(y.numpy(), expected.numpy())
    plain = F.conv2d(lv.tensor(x), lv.tensor(w), lv.tensor(b), padding=1).numpy()
    assert not np.array_equal(y.numpy(), plain)
    np.testing.assert_allclose(y.numpy(), plain, rtol=0, atol=2e-2)


def test_autocast_nesting_disable_decorator_and_threads():
    a, b = lv.tensor(_data(2, 3)), lv.tensor(_data(3, 2, seed=1))

    def rounded_by():
        ops = pending_ops(a @ b)
        return "float16" if "round_float16" in ops else "bfloat16" if "round_bfloat16" in ops else None

    assert rounded_by() is None and not lv.amp.is_autocast_enabled()
    with lv.autocast(dtype="bfloat16"):
        assert rounded_by() == "bfloat16" and lv.amp.get_autocast_dtype() is lv.bfloat16
        with lv.autocast(enabled=False):
            assert rounded_by() is None
            with lv.amp.autocast("cuda", dtype=lv.float16):
                assert rounded_by() == "float16"
            assert rounded_by() is None
        assert rounded_by() == "bfloat16"
        seen = []
        t = threading.Thread(target=lambda: seen.append(lv.amp.get_autocast_dtype()))
        t.start()
        t.join()
        assert seen == [None]  # the state is per thread
    assert rounded_by() is None

    @lv.autocast()
    def product():
        return rounded_by()

    assert product() == "float16" and rounded_by() is None
    with pytest.raises(DTypeError):
        lv.autocast(dtype=lv.float32)
    with pytest.raises(ValueError):
        lv.autocast("tpu")


def _linear_grads_numpy(x, w, r):
    """d/dx and d/dw of sum((round(x) @ round(w)) * r) with the cotangents rounded (float16)."""
    return _r16(r @ _r16(w).T), _r16(_r16(x).T @ r)


def test_autocast_gradients_are_rounded_like_a_half_cast(mode):
    x, w, r = _data(5, 8), _data(8, 3, seed=1), _data(5, 3, seed=2)
    tx, tw = lv.tensor(x, requires_grad=True), lv.tensor(w, requires_grad=True)
    with lv.autocast():
        loss = ((tx @ tw) * lv.tensor(r)).sum()
    loss.backward()
    gx, gw = _linear_grads_numpy(x, w, r)
    # One binary16 ulp where float32 BLAS sums round differently across a rounding boundary.
    np.testing.assert_allclose(tx.grad.numpy(), gx, rtol=2.0**-10, atol=2.0**-24)
    np.testing.assert_allclose(tw.grad.numpy(), gw, rtol=2.0**-10, atol=2.0**-24)
    assert np.array_equal(tx.grad.numpy(), _r16(tx.grad.numpy()))  # representable in binary16


def test_autocast_gradients_match_torch_half_casts():
    torch = pytest.importorskip("torch")
    x, w, r = _data(6, 9), _data(9, 4, seed=1), _data(6, 4, seed=2)
    tx, tw = lv.tensor(x, requires_grad=True), lv.tensor(w, requires_grad=True)
    with lv.autocast():
        ((tx @ tw) * lv.tensor(r)).sum().backward()  # backward inside: computes what outside does
    px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    # x.half().float() is what autocast does to an operand; its backward rounds the gradient.
    ((px.half().float() @ pw.half().float()) * torch.tensor(r)).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=2.0**-10, atol=2.0**-24)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=2.0**-10, atol=2.0**-24)


def test_small_gradients_underflow_unless_scaled():
    x, w = _data(4, 8), _data(8, 2, seed=1)
    grads = []
    for scale in (1.0, 2.0**16):
        tw = lv.tensor(w, requires_grad=True)
        with lv.autocast():
            loss = (lv.tensor(x) @ tw).sum() * 1e-9
        (loss * scale).backward()
        grads.append(tw.grad.numpy() / scale)
    assert np.all(grads[0] == 0)  # 4e-9 is below binary16's smallest subnormal (6e-8)
    np.testing.assert_allclose(grads[1], np.repeat(x.sum(0, keepdims=True).T, 2, 1) * 1e-9, rtol=2e-3)


def test_round_ops_export_to_onnx_casts():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")

    class Net(nn.Module):
        def forward(self, x):
            return lv.amp.round_to_precision(x) * 2.0 + lv.amp.round_to_precision(x, lv.bfloat16)

    x = np.concatenate([F16_EDGES[:12], _data(20)]).astype(np.float32).reshape(4, -1)
    model = lv.onnx.export(Net(), lv.tensor(x))
    types = [n.op_type for n in model.graph.node]
    assert types.count("Cast") == 4
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    expected = _numpy_f16(x) * 2.0 + round_bfloat16_reference(x)
    np.testing.assert_array_equal(got, expected)
    onnx.checker.check_model(model)


# -- GradScaler ------------------------------------------------------------------------------
def _scaler_run(lib, steps=7, inf_at=(2, 5), opt="sgd"):
    """A Linear model trained ``steps`` steps with a GradScaler (growth_interval 2), the loss
    made infinite at the steps in ``inf_at``. Returns per step (scale, skipped) and the weights."""
    w0, b0 = _data(3, 4, seed=10), _data(3, seed=11)
    x, y = _data(8, 4, seed=12), _data(8, 3, seed=13)
    if lib == "torch":
        import torch

        model = torch.nn.Linear(4, 3)
        with torch.no_grad():
            model.weight.copy_(torch.tensor(w0))
            model.bias.copy_(torch.tensor(b0))
        T = torch.tensor
        scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
        make_opt = torch.optim.SGD if opt == "sgd" else torch.optim.Adam
    else:
        model = nn.Linear(4, 3)
        model.weight = nn.Parameter(lv.tensor(w0))
        model.bias = nn.Parameter(lv.tensor(b0))
        T = lv.tensor
        scaler = lv.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
        make_opt = lv.optim.SGD if opt == "sgd" else lv.optim.Adam
    optimizer = make_opt(model.parameters(), lr=0.05)
    log = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = ((model(T(x)) - T(y)) ** 2).mean()
        if step in inf_at:
            loss = loss * float("inf")
        before = model.weight.detach().numpy().copy()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        skipped = np.array_equal(before, model.weight.detach().numpy())
        log.append((scaler.get_scale(), skipped))
    return log, model.weight.detach().numpy(), model.bias.detach().numpy(), scaler.state_dict()


_INF_WARNINGS = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@_INF_WARNINGS
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_grad_scaler_matches_torch(opt):
    pytest.importorskip("torch")
    ours = _scaler_run("lazyvic", opt=opt)
    theirs = _scaler_run("torch", opt=opt)
    assert ours[0] == theirs[0]  # same scales, same skipped steps
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-5, atol=1e-6)
    assert {k: float(v) for k, v in ours[3].items()} == {k: float(v) for k, v in theirs[3].items()}


@_INF_WARNINGS
def test_grad_scaler_schedule_without_torch():
    """PyTorch's rule by hand: growth after 2 clean steps, backoff and a skipped step on inf."""
    log, *_ = _scaler_run("lazyvic", steps=7, inf_at=(2, 5))
    assert log == [
        (256.0, False),
        (512.0, False),
        (256.0, True),
        (256.0, False),
        (512.0, False),
        (256.0, True),
        (256.0, False),
    ]


def test_grad_scaler_errors_state_dict_and_disabled():
    p = nn.Parameter(lv.tensor(_data(3)))
    opt = lv.optim.SGD([p], lr=0.1)
    scaler = lv.amp.GradScaler(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3)
    assert scaler.is_enabled() and scaler.get_scale() == 8.0 and scaler.get_growth_factor() == 4.0
    (scaler.scale([p.sum(), (p * 2).sum()])[1]).backward()
    np.testing.assert_allclose(p.grad.numpy(), 16.0)
    scaler.unscale_(opt)
    np.testing.assert_allclose(p.grad.numpy(), 2.0)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    assert scaler._get_growth_tracker() == 1
    with pytest.raises(RuntimeError, match="No inf checks"):
        scaler.update()
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: None)
    state = scaler.state_dict()
    assert state == {
        "scale": 8.0,
        "growth_factor": 4.0,
        "backoff_factor": 0.25,
        "growth_interval": 3,
        "_growth_tracker": 1,
    }
    other = lv.amp.GradScaler()
    other.load_state_dict(state)
    assert other.state_dict() == state
    other.update(new_scale=lv.tensor(3.0))
    assert other.get_scale() == 3.0
    with pytest.raises(RuntimeError, match="empty"):
        other.load_state_dict({})
    with pytest.raises(ValueError):
        lv.amp.GradScaler(growth_factor=0.5)
    with pytest.raises(TypeError, match="init_scale"):
        lv.amp.GradScaler(1024.0)
    off = lv.amp.GradScaler(enabled=False)
    loss = p.sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    off.step(opt)
    off.update()


# -- training --------------------------------------------------------------------------------
def _train_mlp(steps=60):
    """A 2-layer MLP on a fixed regression task, autocast + GradScaler + Adam."""
    lv.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = np.sin(x @ rng.standard_normal((8, 1)).astype(np.float32))
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = lv.optim.Adam(model.parameters(), lr=1e-2)
    scaler = lv.amp.GradScaler(growth_interval=10)
    tx, ty = lv.tensor(x), lv.tensor(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with lv.autocast():
            loss = F.mse_loss(model(tx), ty)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], scaler.get_scale()


def test_mlp_with_autocast_and_grad_scaler_converges_and_is_deterministic(mode):
    """Both runs in one compile mode (the interpreter's and a compiled plan's reductions
    round differently; the first run of a plan key in the default "hot" mode is interpreted)."""
    losses, params, scale = _train_mlp()
    assert losses[-1] < 0.2 * losses[0], losses[::10]
    assert scale >= 2.0**16  # no overflow at this size: the scale only grew
    losses2, params2, _ = _train_mlp()
    assert losses == losses2
    for a, b in zip(params, params2):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_round_vjp_rounds_the_cotangent(mode, precision):
    """d/dx sum(round(x) * r) = round(r): the gradient of a cast to half and back."""
    x, r = _data(3, 5), _data(3, 5, seed=1, scale=1e-3)
    tx = lv.tensor(x, requires_grad=True)
    (lv.amp.round_to_precision(tx, precision) * lv.tensor(r)).sum().backward()
    ref = round_float16_reference if precision == "float16" else round_bfloat16_reference
    np.testing.assert_array_equal(tx.grad.numpy(), ref(r))
    assert not np.array_equal(ref(r), r)


def test_backward_inside_autocast_equals_backward_outside():
    """VJP products are not autocast (the rounding ops' VJPs round the gradients), so where
    backward() is called does not matter."""
    x, w, r = _data(5, 8), _data(8, 3, seed=1), _data(5, 3, seed=2)
    grads = []
    for inside in (False, True):
        tx, tw = lv.tensor(x, requires_grad=True), lv.tensor(w, requires_grad=True)
        with lv.autocast():
            loss = ((tx @ tw) * lv.tensor(r)).sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        grads.append((tx.grad.numpy(), tw.grad.numpy()))
    for a, b in zip(*grads):
        assert a.tobytes() == b.tobytes()
