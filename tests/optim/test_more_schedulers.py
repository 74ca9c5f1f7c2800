"""MultiStepLR, ExponentialLR, ConstantLR, PolynomialLR, CosineAnnealingWarmRestarts,
OneCycleLR and ReduceLROnPlateau against PyTorch's rate (and momentum) sequences.

tests/fixtures/torch_schedulers.npz is made by tests/fixtures/make_optim_fixtures.py: per case
the rate and the momentum (SGD) or beta1 (Adam) of two parameter groups after construction
and after each of 30 steps, in float64; ReduceLROnPlateau reads a stored metric sequence.
lazyvic's rates are closed forms; PyTorch's are partly recursive: they agree to 1e-12.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn, optim
from lazyvic.optim import lr_scheduler as sched

FIXTURE = "torch_schedulers.npz"
SPEC = torch_fixtures.spec(FIXTURE)
CASES = SPEC["cases"]
BASE_LRS = SPEC["base_lrs"]
STEPS = SPEC["steps"]


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _optimizer(kind: str):
    groups = [
        {"params": [nn.Parameter(lazyvic.zeros(2))], "lr": BASE_LRS[0]},
        {"params": [nn.Parameter(lazyvic.zeros(3))], "lr": BASE_LRS[1]},
    ]
    if kind == "sgd":
        return optim.SGD(groups, lr=BASE_LRS[0], momentum=0.9)
    return optim.Adam(groups, lr=BASE_LRS[0])


def _record(opt, kind: str) -> tuple:
    lrs = [g["lr"] for g in opt.param_groups]
    moms = [g["momentum"] if kind == "sgd" else g["betas"][0] for g in opt.param_groups]
    return lrs, moms


def _make(case, opt):
    return getattr(sched, case["scheduler"])(opt, **case["kwargs"])


def _advance(case, s, step: int, ref) -> None:
    if case["scheduler"] == "ReduceLROnPlateau":
        s.step(ref["plateau_metrics"][step])
    else:
        s.step()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_sequence_matches_torch(ref, case):
    opt = _optimizer(case["optimizer"])
    s = _make(case, opt)
    rows = [_record(opt, case["optimizer"])]
    for step in range(STEPS):
        _advance(case, s, step, ref)
        rows.append(_record(opt, case["optimizer"]))
    lrs, moms = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    np.testing.assert_allclose(lrs, ref[f"lr.{case['name']}"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(moms, ref[f"momentum.{case['name']}"], rtol=1e-12, atol=1e-15)
    assert s.get_last_lr() == lrs[-1].tolist()
    assert all(type(g["lr"]) is float for g in opt.param_groups)


def test_fixture_sequences_change(ref):
    for case in CASES:
        assert len(np.unique(ref[f"lr.{case['name']}"][:, 0])) >= (2 if case["name"] == "constant" else 3), case["name"]
    restarts = ref["lr.warm_restarts"][:, 0]
    assert restarts[5] == restarts[0] == BASE_LRS[0]  # the restart at T_0 = 5
    assert len(np.unique(ref["momentum.onecycle_cos_sgd"][:, 0])) > 10  # momentum cycles too


def test_warm_restarts_with_fractional_epochs(ref):
    opt = _optimizer("sgd")
    s = sched.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=0.01)
    rows = []
    for epoch in range(6):
        for i in range(4):
            s.step(epoch + i / 4)
            rows.append([g["lr"] for g in opt.param_groups])
    np.testing.assert_allclose(rows, ref["lr.warm_restarts_fractional"], rtol=1e-12)


@pytest.mark.parametrize(
    "name", ["multistep", "warm_restarts_mult", "onecycle_cos_sgd", "onecycle_three_phase", "plateau_cooldown_abs"]
)
def test_state_dict_round_trip_continues_identically(ref, name):
    case = next(c for c in CASES if c["name"] == name)
    opt = _optimizer(case["optimizer"])
    s = _make(case, opt)
    for step in range(9):
        _advance(case, s, step, ref)
    state = s.state_dict()
    assert "optimizer" not in state and not any(callable(v) for v in state.values())
    opt2 = _optimizer(case["optimizer"])
    for g, g1 in zip(opt2.param_groups, opt.param_groups):
        g.update({k: v for k, v in g1.items() if k != "params"})  # as optimizer.load_state_dict does
    s2 = _make(case, _optimizer(case["optimizer"]))
    s2.optimizer = opt2
    s2.load_state_dict(state)
    for step in range(9, 20):
        _advance(case, s, step, ref)
        _advance(case, s2, step, ref)
        assert _record(opt2, case["optimizer"]) == _record(opt, case["optimizer"])


def test_onecycle_steps_past_the_end_raise():
    opt = _optimizer("sgd")
    s = sched.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    for _ in range(3):
        s.step()
    with pytest.raises(ValueError, match="total steps is 3"):
        s.step()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda o: sched.OneCycleLR(o, max_lr=0.1), "total_steps"),
        (lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=0), "total_steps"),
        (lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=5, pct_start=1.5), "pct_start"),
        (lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=5, anneal_strategy="exp"), "anneal_strategy"),
        (lambda o: sched.OneCycleLR(o, max_lr=[0.1], total_steps=5), "max_lr"),
        (lambda o: sched.ReduceLROnPlateau(o, factor=1.0), "factor"),
        (lambda o: sched.ReduceLROnPlateau(o, mode="lowest"), "mode"),
        (lambda o: sched.ReduceLROnPlateau(o, threshold_mode="pct"), "threshold"),
        (lambda o: sched.ReduceLROnPlateau(o, min_lr=[0.1]), "min_lr"),
        (lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=0), "T_0"),
        (lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0), "T_mult"),
        (lambda o: sched.ConstantLR(o, factor=2.0), "factor"),
        (lambda o: sched.PolynomialLR(o, total_iters=0), "total_iters"),
    ],
)
def test_bad_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make(_optimizer("sgd"))


def test_onecycle_cycle_momentum_needs_momentum():
    opt = optim.Adagrad([nn.Parameter(lazyvic.zeros(2))])
    with pytest.raises(ValueError, match="momentum or betas"):
        sched.OneCycleLR(opt, max_lr=0.1, total_steps=5)
    sched.OneCycleLR(opt, max_lr=0.1, total_steps=5, cycle_momentum=False)


def test_onecycle_training_reuses_one_plan():
    """Rate and beta1 change every step; both are scalar inputs of the step's plan."""
    lazyvic.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = optim.Adam(model.parameters(), lr=0.1)
    s = sched.OneCycleLR(opt, max_lr=0.05, total_steps=8)
    rng = np.random.default_rng(0)
    x = lazyvic.tensor(rng.normal(size=(8, 4)).astype(np.float32))
    y = lazyvic.tensor(rng.normal(size=(8, 3)).astype(np.float32))
    misses, betas = [], []
    for _ in range(7):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        s.step()
        lazyvic.sync()
        misses.append(lazyvic.metrics.snapshot()["cache_misses"])
        betas.append(opt.param_groups[0]["betas"][0])
    assert len(set(betas)) >= 5
    assert misses[2:] == [misses[2]] * 5, f"cache misses per step: {misses}"
