"""lazyvic.compile of a whole training step: replays give the same bits as the same steps run
normally (deterministic mode: every plan compiled, so both paths run compiled kernels), the
optimizers' per-step values, the scheduler and the random generator advance at every replay,
and every change a replay cannot see records again or runs normally, with its reason."""

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn
from lazyvic.nn import functional as F

STEPS = 6
rng = np.random.default_rng(0)
XS = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3)]
YS = [rng.integers(0, 3, 4) for _ in range(3)]


@pytest.fixture(autouse=True)
def deterministic():
    prev = lv.are_deterministic_algorithms_enabled()
    lv.use_deterministic_algorithms(True)
    yield
    lv.use_deterministic_algorithms(prev)


def _model(dropout: float = 0.0):
    lv.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(dropout), nn.Linear(8, 3))
    lv.sync()
    return m


def _train(make_opt, captured: bool, dropout: float = 0.0, schedule: bool = False, clip: bool = False):
    """Losses and final state of STEPS steps; the step as users write it."""
    m = _model(dropout)
    opt = make_opt(m.parameters())
    sched = lv.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS) if schedule else None

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        if sched is not None:
            sched.step()
        return loss

    f = lv.compile(step) if captured else step
    losses = [f(lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])).item() for k in range(STEPS)]
    return losses, m, opt, f


OPTIMIZERS = {
    "sgd_nesterov_wd": lambda p: lv.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "adam_amsgrad": lambda p: lv.optim.Adam(p, lr=1e-2, amsgrad=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_captured_steps_give_the_bits_of_plain_steps(name):
    want, m0, opt0, _ = _train(OPTIMIZERS[name], captured=False)
    got, m1, opt1, f = _train(OPTIMIZERS[name], captured=True)
    assert got == want
    for a, b in zip(m0.parameters(), m1.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    # first call normal, second recorded, the rest replayed without Python
    assert (f.recordings, f.replays) == (1, STEPS - 2)
    s0, s1 = opt0.state_dict()["state"], opt1.state_dict()["state"]
    for i in s0:
        for k, v in s0[i].items():
            w = s1[i][k]
            assert (v == w) if k == "step" else np.array_equal(v.numpy(), w.numpy())


def test_scheduler_clipping_and_dropout_advance_at_every_replay():
    def adamw(p):
        return lv.optim.AdamW(p, lr=1e-2, weight_decay=0.1)

    want, m0, opt0, _ = _train(adamw, False, dropout=0.5, schedule=True, clip=True)
    got, m1, opt1, f = _train(adamw, True, dropout=0.5, schedule=True, clip=True)
    assert f.replays == STEPS - 2
    assert got == want  # new dropout masks at every replay, the same as the plain run's
    assert opt1.param_groups[0]["lr"] == opt0.param_groups[0]["lr"] != 1e-2
    assert opt1.state_dict()["state"][0]["step"] == STEPS
    np.testing.assert_array_equal(m0[0].weight.numpy(), m1[0].weight.numpy())


def test_every_optimizer_replays_its_per_step_values():
    """One step updating a parameter with each optimizer: one plan for all of them."""
    makers = [
        lambda p: lv.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True, weight_decay=1e-3),
        lambda p: lv.optim.Adagrad(p, lr=1e-1, lr_decay=1e-2),
        lambda p: lv.optim.Adadelta(p, lr=1.0),
        lambda p: lv.optim.Adamax(p, lr=1e-2),
        lambda p: lv.optim.NAdam(p, lr=1e-2),
        lambda p: lv.optim.RAdam(p, lr=1e-2),
        lambda p: lv.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1),
    ]

    def run(captured):
        w = [lv.tensor(rng_w.copy(), requires_grad=True) for _ in makers]
        opts = [make([p]) for make, p in zip(makers, w)]

        def step(x):
            loss = sum((p * x).tanh().sum() * (k + 1) for k, p in enumerate(w))
            loss.backward()
            for o in opts:
                o.step()
                o.zero_grad()
            return loss

        f = lv.compile(step) if captured else step
        losses = [f(lv.tensor(XS[k % 3][0])).item() for k in range(STEPS)]
        return losses, [p.numpy() for p in w], f

    rng_w = np.random.default_rng(1).standard_normal(6).astype(np.float32)
    want, w0, _ = run(False)
    got, w1, f = run(True)
    assert f.replays == STEPS - 2 and got == want
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)


def _adam_step():
    m = _model()
    opt = lv.optim.Adam(m.parameters(), lr=1e-2)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    return m, opt, step


def test_a_step_returning_a_tensor_twice_replays():
    _, _, plain = _adam_step()
    _, _, step = _adam_step()

    def twice(fn):
        def run(x, y):
            loss = fn(x, y)
            return loss, loss.detach(), loss

        return run

    f = lv.compile(twice(step))
    for k in range(4):
        x, y = lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])
        got, want = f(x, y), twice(plain)(x, y)
        assert got[0] is got[2]
        assert [t.item() for t in got] == [t.item() for t in want]
    assert (f.recordings, f.replays) == (1, 2)


def test_changes_outside_the_step_are_seen():
    m0, opt0, plain = _adam_step()
    m1, opt1, step = _adam_step()
    f = lv.compile(step)

    def both(k):
        a = plain(lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])).item()
        b = f(lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])).item()
        assert a == b

    for k in range(4):
        both(k)
    assert (f.recordings, f.replays) == (1, 2)
    for m in (m0, m1):  # a parameter changed in place: read at the next replay, no new recording
        with lv.no_grad():
            m[0].weight.data.mul_(0.5)
    both(4)
    assert (f.recordings, f.replays) == (1, 3)
    state = opt0.state_dict()  # new optimizer state objects: recorded again
    opt0.load_state_dict(state)
    opt1.load_state_dict(state)
    for k in range(5, 8):
        both(k)
    assert f.recordings == 2 and f.replays == 4
    for opt in (opt0, opt1):  # another hyperparameter: recorded again
        opt.param_groups[0]["betas"] = (0.8, 0.99)
    for k in range(8, 11):
        both(k)
    assert f.recordings == 3
    np.testing.assert_array_equal(m0[0].weight.numpy(), m1[0].weight.numpy())


def test_gradients_left_from_outside_are_accumulated_as_eager_does():
    """A step without zero_grad, called once with gradients left over: eager adds to them."""

    def make():
        m = _model()
        opt = lv.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss

        return m, opt, step

    (m0, opt0, plain), (m1, opt1, step) = make(), make()
    f = lv.compile(step)
    for k in range(6):
        for opt in (opt0, opt1):
            if k != 4:  # at step 4 the gradients of step 3 stay
                opt.zero_grad()
        assert (
            plain(lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])).item()
            == f(lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])).item()
        )
    np.testing.assert_array_equal(m0[0].weight.numpy(), m1[0].weight.numpy())
    assert f.recordings >= 2  # the leftover gradients made a new recording


def test_steps_that_cannot_be_replayed_run_normally_and_say_why():
    m, opt, step = _adam_step()

    def with_item(x, y):
        return float(step(x, y).item())

    f = lv.compile(with_item)
    for k in range(3):
        f(lv.tensor(XS[k]), lv.tensor(YS[k]))
    assert f.replays == 0 and f.fallbacks == 3
    assert any("sync point inside the step" in r for r in f.reasons)

    sched = lv.optim.lr_scheduler.ReduceLROnPlateau(opt)

    def plateau(x, y):
        loss = step(x, y)
        sched.step(0.5)
        return loss

    g = lv.compile(plateau)
    for k in range(3):
        g(lv.tensor(XS[k]), lv.tensor(YS[k]))
    assert g.replays == 0 and any("ReduceLROnPlateau" in r for r in g.reasons)


def test_training_flag_is_a_guard():
    m, opt, step = _adam_step()
    f = lv.compile(step)
    for k in range(3):
        f(lv.tensor(XS[k]), lv.tensor(YS[k]))
    m.eval()
    f(lv.tensor(XS[0]), lv.tensor(YS[0]))
    assert f.recordings == 1 and f.replays == 1  # eval: discovered again, not replayed


def test_a_compiled_model_inside_a_captured_step_is_part_of_it():
    """The inner lazyvic.compile runs normally inside the step's recording (its outputs need
    autograd history); the step replays as a whole."""

    def make():
        m = _model()
        opt = lv.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return m, opt

    (m0, opt0), (m1, opt1) = make(), make()
    inner = lv.compile(m1)

    def step(m, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    f = lv.compile(lambda x, y: step(inner, opt1, x, y))
    for k in range(STEPS):
        x, y = lv.tensor(XS[k % 3]), lv.tensor(YS[k % 3])
        assert step(m0, opt0, x, y).item() == f(x, y).item()
    assert f.replays == STEPS - 2 and inner.replays == 0
    np.testing.assert_array_equal(m0[3].weight.numpy(), m1[3].weight.numpy())


def _gpt_steps(captured: bool, lengths: list) -> tuple:
    """Losses and final parameters of a tiny TinyGPT trained on batches of other lengths."""
    from lazyvic.models import TinyGPT

    lv.manual_seed(0)
    model = TinyGPT(vocab_size=11, d_model=16, n_layer=1, n_head=2, block_size=16)
    opt = lv.optim.AdamW(model.parameters(), lr=1e-2)
    r = np.random.default_rng(1)

    def step(idx, tgt):
        logits = model(idx)
        loss = F.cross_entropy(logits.reshape(-1, 11), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss

    f = lv.compile(step) if captured else step
    losses = []
    for t in lengths:
        idx, tgt = (lv.tensor(r.integers(0, 11, (2, t))) for _ in range(2))
        losses.append(f(idx, tgt).item())
    return losses, [p.numpy().copy() for p in model.parameters()], f


def test_a_step_of_other_sizes_replays_one_plan_of_symbolic_sizes():
    """A captured step called with other sequence lengths: the second length is recorded at once
    (the state exists) and served by a plan of symbolic sizes, which every later length replays,
    its positions, causal mask and bias-gradient rows made at each length, with the bits of the
    steps run normally."""
    lengths = [6, 6, 4, 7, 3, 5, 8, 4, 9]
    want_losses, want_params, _ = _gpt_steps(False, lengths)
    before = lv.metrics.snapshot()
    losses, params, f = _gpt_steps(True, lengths)
    after = lv.metrics.snapshot()
    assert losses == want_losses
    assert all(a.tobytes() == b.tobytes() for a, b in zip(params, want_params))
    assert f.recordings == 2 and f.fallbacks == 1 and f.replays == len(lengths) - 3
    assert after["capture_symbolic_replays"] - before["capture_symbolic_replays"] == len(lengths) - 4


def test_a_step_with_a_constant_of_its_sizes_values_never_replays_it_at_other_sizes():
    """A constant computed in Python from a size (weights ``arange(n) / n``) has no maker: calls
    of other sizes must not replay a plan with the recording's values. They run normally or
    record; every loss and parameter is the plain steps'."""

    def run(captured: bool):
        lv.manual_seed(0)
        m = nn.Linear(6, 3)
        opt = lv.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            w = lv.tensor((np.arange(x.shape[0], dtype=np.float32) + 1.0) / x.shape[0])
            opt.zero_grad()
            loss = (F.cross_entropy(m(x), y, reduction="none") * w).sum()
            loss.backward()
            opt.step()
            return loss

        f = lv.compile(step) if captured else step
        r = np.random.default_rng(2)
        losses = []
        for n in (4, 4, 6, 5, 7, 6, 3):
            x, y = r.standard_normal((n, 6)).astype(np.float32), r.integers(0, 3, n)
            losses.append(f(lv.tensor(x), lv.tensor(y)).item())
        return losses, [p.numpy().copy() for p in m.parameters()], f

    want, want_params, _ = run(False)
    before = lv.metrics.snapshot()["capture_symbolic_replays"]
    got, params, f = run(True)
    assert got == want and all(a.tobytes() == b.tobytes() for a, b in zip(params, want_params))
    assert lv.metrics.snapshot()["capture_symbolic_replays"] == before
