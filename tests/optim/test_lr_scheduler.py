"""Learning-rate schedulers against PyTorch's rate sequences (tests/fixtures/torch_transformer.npz).

The fixture (made by tests/fixtures/make_transformer_fixtures.py) holds, per
scheduler, the rate of each of two parameter groups after construction and after
each of 30 steps, in float64. No torch needed.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn, optim
from lazyvic.optim import lr_scheduler as sched

FIXTURE = "torch_transformer.npz"
SPEC = torch_fixtures.spec(FIXTURE)
BASE_LRS = SPEC["base_lrs"]
STEPS = 30


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _lambda(epoch):
    return 0.97**epoch / (1 + 0.1 * epoch)  # the function of the fixture script


def _optimizer() -> optim.SGD:
    return optim.SGD(
        [
            {"params": [nn.Parameter(lazyvic.zeros(2))], "lr": BASE_LRS[0]},
            {"params": [nn.Parameter(lazyvic.zeros(3))], "lr": BASE_LRS[1]},
        ],
        lr=BASE_LRS[0],
    )


def _scheduler(name: str, opt, kwargs: dict, last_epoch: int = -1):
    if name == "lambda":
        return sched.LambdaLR(opt, _lambda, last_epoch=last_epoch)
    if name == "sequential":
        warmup = sched.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=5)
        cosine = sched.CosineAnnealingLR(opt, T_max=25, eta_min=1e-4)
        return sched.SequentialLR(opt, [warmup, cosine], milestones=[5], last_epoch=last_epoch)
    cls = {
        "step": sched.StepLR,
        "linear_warmup": sched.LinearLR,
        "linear_decay": sched.LinearLR,
        "cosine": sched.CosineAnnealingLR,
    }[name]
    return cls(opt, **kwargs, last_epoch=last_epoch)


def _lrs(opt) -> list:
    return [g["lr"] for g in opt.param_groups]


def _run(scheduler, opt, steps: int) -> list:
    out = []
    for _ in range(steps):
        opt.step()
        scheduler.step()
        out.append(_lrs(opt))
    return out


@pytest.mark.parametrize("case", SPEC["schedulers"], ids=lambda c: c["name"])
def test_lr_sequence_matches_torch(ref, case):
    opt = _optimizer()
    s = _scheduler(case["name"], opt, case["kwargs"])
    got = np.array([_lrs(opt)] + _run(s, opt, STEPS))
    expected = ref[f"lr.{case['name']}"]
    assert got.shape == expected.shape == (STEPS + 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    assert s.get_last_lr() == _lrs(opt) and all(isinstance(lr, float) for lr in _lrs(opt))
    assert [g["initial_lr"] for g in opt.param_groups] == BASE_LRS


def test_fixture_sequences_change(ref):
    names = {c["name"] for c in SPEC["schedulers"]}
    assert names == {"lambda", "step", "linear_warmup", "linear_decay", "cosine", "sequential"}
    for name in names:
        assert len(np.unique(ref[f"lr.{name}"][:, 0])) >= 4, name
    cosine = ref["lr.cosine"][:, 0]
    assert cosine.argmin() == 20 and cosine[-1] > cosine[20]  # runs past T_max=20, where it rises again


def test_lambda_lr_one_function_per_group():
    opt = _optimizer()
    s = sched.LambdaLR(opt, [lambda e: 0.5**e, lambda e: 1.0 + e])
    _run(s, opt, 3)
    assert _lrs(opt) == [BASE_LRS[0] * 0.125, BASE_LRS[1] * 4.0]
    with pytest.raises(ValueError, match="lr_lambda"):
        sched.LambdaLR(_optimizer(), [_lambda])


def test_bad_scheduler_arguments():
    with pytest.raises(ValueError):
        sched.StepLR(_optimizer(), step_size=0)
    with pytest.raises(ValueError):
        sched.LinearLR(_optimizer(), start_factor=0.0)
    with pytest.raises(ValueError):
        sched.LinearLR(_optimizer(), end_factor=1.5)
    with pytest.raises(ValueError):
        sched.CosineAnnealingLR(_optimizer(), T_max=0)
    opt = _optimizer()
    warmup, cosine = sched.LinearLR(opt), sched.CosineAnnealingLR(opt, T_max=5)
    with pytest.raises(ValueError, match="milestones"):
        sched.SequentialLR(opt, [warmup, cosine], milestones=[2, 4])
    with pytest.raises(ValueError, match="optimizer"):
        sched.SequentialLR(opt, [warmup, sched.CosineAnnealingLR(_optimizer(), T_max=5)], milestones=[2])
    with pytest.raises(KeyError, match="initial_lr"):
        sched.StepLR(_optimizer(), step_size=3, last_epoch=4)  # resuming needs initial_lr in each group


@pytest.mark.parametrize("case", SPEC["schedulers"], ids=lambda c: c["name"])
def test_resuming_with_last_epoch_uses_the_closed_form(ref, case):
    """Constructing with last_epoch=k (groups carry initial_lr) sets the rate of epoch k + 1."""
    opt = _optimizer()
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
        g["lr"] = 123.0  # whatever the current rate is, the schedule does not read it
    s = _scheduler(case["name"], opt, case["kwargs"], last_epoch=9)
    assert s.last_epoch == 10
    rows = [_lrs(opt)] + _run(s, opt, 5)
    np.testing.assert_allclose(rows, ref[f"lr.{case['name']}"][10:16], rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", SPEC["schedulers"], ids=lambda c: c["name"])
def test_state_dict_round_trip_continues_identically(case):
    opt = _optimizer()
    s = _scheduler(case["name"], opt, case["kwargs"])
    _run(s, opt, 7)
    state = s.state_dict()
    assert state["last_epoch"] == 7 and state["base_lrs"] == BASE_LRS
    assert "optimizer" not in state and not any(callable(v) for v in state.values())

    opt2 = _optimizer()
    s2 = _scheduler(case["name"], opt2, case["kwargs"])
    s2.load_state_dict(state)
    assert s2.last_epoch == 7 and s2.get_last_lr() == s.get_last_lr()
    assert _run(s2, opt2, 15) == _run(s, opt, 15)  # bit for bit


def test_schedule_does_not_recompile_the_training_step():
    """The rate is a scalar input of the step's trace: after the first steps every step hits one plan."""
    lazyvic.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.05)
    s = sched.CosineAnnealingLR(opt, T_max=4, eta_min=0.01)
    rng = np.random.default_rng(0)
    x = lazyvic.tensor(rng.normal(size=(8, 4)).astype(np.float32))
    y = lazyvic.tensor(rng.normal(size=(8, 3)).astype(np.float32))
    lazyvic.metrics.reset()
    misses, compiled, lrs, losses = [], [], [], []
    for _ in range(6):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        lrs.append(opt.param_groups[0]["lr"])
        s.step()
        losses.append(loss.item())
        snap = lazyvic.metrics.snapshot()
        misses.append(snap["cache_misses"])
        compiled.append(snap["plans_compiled"])
    assert len(set(lrs)) >= 4  # the rate really changed from step to step
    assert losses[-1] < losses[0]
    assert misses[2:] == [misses[2]] * 4, f"cache misses per step: {misses}"
    assert compiled[2:] == [compiled[2]] * 4, f"plans compiled per step: {compiled}"
    assert misses[-1] <= 2
