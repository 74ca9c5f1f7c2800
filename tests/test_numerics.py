"""One numerics: the interpreter and the compiled plans give the same bits (ops/numerics.py)."""

import dataclasses

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic.ops import numerics
from lazyvic.runtime.check import same_bits
from lazyvic.runtime.config import config


def _same_bits(a, b) -> bool:
    """Bit equality, any NaN equal to any NaN (NaN payloads are not part of the promise)."""
    return same_bits(np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b)))


def _both(fn, monkeypatch):
    monkeypatch.setattr(config, "compile", "never")
    interpreted = fn().numpy()
    monkeypatch.setattr(config, "compile", "always")
    compiled = fn().numpy()
    return interpreted, compiled


def _values(dtype):
    rng = np.random.default_rng(0)
    special = [0, -0.0, 1e-30, -1e-30, 1e-40, 88.5, -88.5, 100, -100, np.inf, -np.inf, np.nan, 1e30, -1e30, -1, 1]
    parts = [rng.standard_normal(500) * s for s in (0.01, 1, 5, 30)]
    return np.concatenate(parts + [np.array(special)]).astype(dtype)


ELEMENTWISE = {
    "exp": lambda x, p: x.exp(),
    "log": lambda x, p: p.log(),
    "tanh": lambda x, p: x.tanh(),
    "sigmoid": lambda x, p: x.sigmoid(),
    "erf": lambda x, p: x.erf(),
    "sin": lambda x, p: x.sin(),
    "cos": lambda x, p: x.cos(),
    "log1p": lambda x, p: p.log1p(),
    "expm1": lambda x, p: x.expm1(),
    "pow": lambda x, p: p**1.7,
    "pow_tensor": lambda x, p: p ** x.flip(0),
    "gelu": lambda x, p: F.gelu(x),
    "gelu_tanh": lambda x, p: F.gelu(x, approximate="tanh"),
    "silu_softplus": lambda x, p: F.silu(x) + F.softplus(x),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_transcendentals_interpreted_equal_compiled(dtype, monkeypatch):
    v = _values(dtype)
    failed = []
    for name, op in ELEMENTWISE.items():
        got = _both(lambda op=op: op(lv.tensor(v), lv.tensor(np.abs(v))), monkeypatch)
        if not _same_bits(*got):
            failed.append(name)
    assert not failed, f"interpreted and compiled bits differ for {failed}"


REDUCTIONS = {
    "sum_all": lambda m: m.sum(),
    "sum_rows": lambda m: m.sum(-1),
    "sum_cols": lambda m: m.sum(0),
    "sum_3d": lambda m: m.reshape(37, 3, 43).sum((0, 2)),
    "sum_permuted": lambda m: m.t().sum(-1),  # a strided view: the order follows indices, not memory
    "mean_var": lambda m: m.mean(-1) + m.var(-1),
    "prod": lambda m: (m * 0.1 + 1).prod(-1),
    "max_min": lambda m: m.amax(-1) - m.amin(0).sum(),
    "softmax": lambda m: m.softmax(-1),
    "log_softmax": lambda m: m.log_softmax(-1),
    "layer_norm": lambda m: F.layer_norm(m, (129,)),
    "cross_entropy": lambda m: F.cross_entropy(m, lv.tensor(np.arange(37) % 129)),
    "matmul_t": lambda m: (m @ m.t()[:, :65]).t(),  # the plan rewrites it as b^T @ a^T
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reductions_interpreted_equal_compiled(dtype, monkeypatch):
    m = np.random.default_rng(1).standard_normal((37, 129)).astype(dtype)
    failed = []
    for name, op in REDUCTIONS.items():
        if not _same_bits(*_both(lambda op=op: op(lv.tensor(m)), monkeypatch)):
            failed.append(name)
    assert not failed, f"interpreted and compiled bits differ for {failed}"


def _lane_sum_by_definition(x: np.ndarray):
    """The documented order of a 1-D sum, one scalar at a time."""
    lanes = numerics.LANES
    acc = [x.dtype.type(0)] * lanes
    for k, v in enumerate(x):
        acc[k % lanes] = acc[k % lanes] + v
    h = lanes // 2
    while h:
        for q in range(h):
            acc[q] = acc[q] + acc[q + h]
        h //= 2
    return x.dtype.type(0) + acc[0]


@pytest.mark.parametrize("n", [1, 5, 31, 32, 33, 64, 100, 1000])
def test_lane_sum_follows_its_definition(n):
    # Values whose sum depends on the order: large, cancelling, of mixed scales.
    x = (np.random.default_rng(n).standard_normal(n) * np.logspace(0, 8, n)).astype(np.float32)
    with np.errstate(all="ignore"):
        want = _lane_sum_by_definition(x)
    got = numerics.lane_sum(x, (0,))
    assert got.shape == (1,) and _same_bits(got, np.array([want], np.float32))
    # Over two reduced axes the partials of the last axis are added in row-major order.
    y = x[: n - n % 4].reshape(4, -1) if n >= 4 else x.reshape(1, -1)
    parts = [_lane_sum_by_definition(row) for row in y]
    total = np.float32(0)
    for p in parts:
        total = total + p
    assert _same_bits(numerics.lane_sum(y, (0, 1)).reshape(-1), np.array([total], np.float32))


@pytest.mark.parametrize("n", [1, 2, 3, 8, 16, 17])
def test_short_rows_interpreted_equal_compiled(n, monkeypatch):
    """Rows of at most 16 summed without the lane array (lowering/cpu/codegen.SHORT_ROW_MAX), and
    the first longer one, over two reduced axes as batch norm's statistics: the same bits as the
    interpreter, with -0.0, infinities and NaN among the values."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, 4, n)) * np.logspace(0, 6, n)).astype(np.float32)
    x[0, 0, 0], x[1, 2, -1], x[2, 1, 0] = -0.0, np.inf, np.nan
    x[2, 3] = -0.0  # a row of negative zeros: its sum is +0.0 in lane order
    assert _same_bits(*_both(lambda: lv.tensor(x).sum((0, 2)), monkeypatch))
    assert _same_bits(*_both(lambda: (lv.tensor(x) * 2.0).sum(2), monkeypatch))


def test_products_of_transposed_results_interpreted_equal_compiled(monkeypatch):
    """A computed value is row-major in the interpreter as in a plan's buffer (runtime/
    interpreter): an elementwise op on a transposed view, read transposed again by a row-vector
    product (a BLAS gemv, whose bits depend on the layout), gives the compiled plan's bits."""
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal((512, 128)).astype(np.float32), rng.standard_normal((1, 512)).astype(np.float32)
    assert _same_bits(*_both(lambda: lv.tensor(v) @ (lv.tensor(x).T * 2.0).T, monkeypatch))


def test_scatter_add_with_duplicates_interpreted_equal_compiled(monkeypatch):
    """scatter_add (embedding and max-pool gradients) adds duplicates one at a time in the order
    of the index's positions, in the output's dtype, interpreted and compiled: the same bits
    (values of mixed scales, where float64 sums rounded once would differ)."""
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 5, (300, 3))
    src = (rng.standard_normal((300, 3)) * np.logspace(0, 7, 300)[:, None]).astype(np.float32)
    base = rng.standard_normal((5, 3)).astype(np.float32)
    got = _both(lambda: lv.tensor(base).scatter_add(0, lv.tensor(idx), lv.tensor(src)), monkeypatch)
    assert _same_bits(*got)


def test_signed_zero_extremes_follow_llvm():
    x = np.array([[-0.0, 0.0], [-0.0, -0.0], [0.0, 0.0]], np.float32)
    assert list(np.signbit(numerics.extreme(x, (1,), largest=True).ravel())) == [False, True, False]
    assert list(np.signbit(numerics.extreme(x, (1,), largest=False).ravel())) == [True, True, False]


def test_default_mode_gives_the_same_bits_every_call():
    # hot mode: the first call is interpreted, later ones compiled; all agree.
    x = lv.tensor(np.random.default_rng(0).standard_normal(1000).astype(np.float32))
    first = [(x.exp().sum().item(), x.tanh().sum().item(), F.gelu(x).mean().item()) for _ in range(3)]
    assert first[0] == first[1] == first[2]


def _train_once():
    lv.manual_seed(0)
    rng = np.random.default_rng(0)
    model = lv.nn.Sequential(lv.nn.Linear(12, 32), lv.nn.GELU(), lv.nn.Linear(32, 5))
    opt = lv.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(4):
        x = lv.tensor(rng.standard_normal((16, 12)).astype(np.float32))
        y = lv.tensor(rng.integers(0, 5, 16))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


def test_seeded_training_twice_in_one_process_gives_the_same_bits():
    # The first run interprets most traces, the second runs them compiled (hot mode).
    losses_a, params_a = _train_once()
    losses_b, params_b = _train_once()
    assert losses_a == losses_b
    assert all(_same_bits(a, b) for a, b in zip(params_a, params_b))


# -- the checking mode (LAZYVIC_CHECK=1, runtime/check.py) -------------------------------------
@pytest.fixture
def checking(monkeypatch):
    monkeypatch.setattr(config, "check", True)
    monkeypatch.setattr(config, "compile", "always")
    before = lv.metrics.snapshot()["checked_runs"]
    yield
    assert lv.metrics.snapshot()["checked_runs"] > before  # the runs were checked


def test_checked_tiny_gpt_training_steps(checking):
    from lazyvic.models import TinyGPT

    lv.manual_seed(0)
    rng = np.random.default_rng(0)
    model = TinyGPT(vocab_size=65, d_model=32, n_layer=2, n_head=4, block_size=16)
    opt = lv.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    for _ in range(2):
        x = lv.tensor(rng.integers(0, 65, (4, 16)))
        _, loss = model(x, x)
        loss.backward()
        lv.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        assert np.isfinite(loss.item())


def test_checked_resnet18_training_step(checking):
    from lazyvic.models import resnet18

    lv.manual_seed(0)
    model = resnet18(num_classes=10, width=8, small_input=True)
    opt = lv.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = lv.tensor(np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32))
    loss = F.cross_entropy(model(x), lv.tensor(np.array([1, 7])))
    loss.backward()
    opt.step()
    model.eval()
    assert np.isfinite(model(x).sum().item())


def test_checked_imported_transformer_block(checking):
    import os

    pytest.importorskip("onnx")
    fixtures = os.path.join(os.path.dirname(__file__), "fixtures", "onnx")
    module = lv.onnx.load(os.path.join(fixtures, "block.onnx"))
    x = np.load(os.path.join(fixtures, "torch_values.npz"))["block.input"]
    assert np.isfinite(module(x).numpy()).all()


def test_check_names_the_first_kernel_that_differs(checking, monkeypatch):
    from lazyvic import ops
    from lazyvic.errors import CheckError

    # A reference that is off in the last bit of one op: the check must name that op's kernel.
    wrong = lambda x, attrs: np.nextafter(np.exp(x[0]), np.float32(np.inf))  # noqa: E731
    monkeypatch.setitem(ops.OPS, "exp", dataclasses.replace(ops.OPS["exp"], reference=wrong))
    x = lv.tensor(np.linspace(-2, 2, 50, dtype=np.float32))
    with pytest.raises(CheckError) as info:
        ((x * 2).exp() * 3).numpy()
    msg = str(info.value)
    assert "First step that differs: k_" in msg and "exp" in msg and "Kernel source:" in msg
    assert "compiled" in msg and "interpreted" in msg and "0x" in msg


def test_symbolic_size_plans_round_as_the_interpreter(monkeypatch):
    # Batch sizes that vary make the plan symbolic (one plan for all of them); its reductions
    # (row lengths 12 and 40: below and above the 16 of literal loop bounds) give the
    # interpreter's bits, as the fixed-size plan does.
    rng = np.random.default_rng(3)

    def run(batch, compile):
        monkeypatch.setattr(config, "compile", compile)
        a = lv.tensor(rng.standard_normal((batch, 12)).astype(np.float32) * 10)
        b = lv.tensor(rng.standard_normal((batch, 40)).astype(np.float32) * 10)
        return (a.softmax(-1).sum(-1) + F.layer_norm(b, (40,)).exp().sum(-1) + b.sum(0).mean()).numpy()

    before = lv.metrics.snapshot()["symbolic_plans_compiled"]
    for batch in (3, 5, 7, 3, 9):
        state = rng.bit_generator.state
        compiled = run(batch, "always")
        rng.bit_generator.state = state
        assert _same_bits(compiled, run(batch, "never")), batch
    assert lv.metrics.snapshot()["symbolic_plans_compiled"] > before
