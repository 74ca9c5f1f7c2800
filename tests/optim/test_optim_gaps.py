"""``optim.Rprop``, ``optim.ASGD``, ``lr_scheduler.CyclicLR`` and ``optim.swa_utils`` against
PyTorch 2.13 (tests/fixtures/torch_nn_gaps.npz, made by make_nn_gaps_fixtures.py): every step's
parameters and the final state on a fixed smooth function, every step's rate and momentum, the
averaged state_dicts and update_bn's statistics; a captured step; the errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn
from lazyvic.optim import swa_utils
from lazyvic.runtime.config import config

DATA = np.load(Path(__file__).parents[1] / "fixtures" / "torch_nn_gaps.npz")


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


def _loss(p, q):
    """The fixture's function: quadratic and quartic terms, with sign changes along the way."""
    return (
        ((p - 0.3) ** 2 * lv.arange(1, 6, dtype=lv.float64)).sum()
        + 0.5 * (q**4).sum()
        - (q * 0.7).sum()
        + (p[:3] * q[0]).sum()
    )


CONFIGS = {
    "rprop": (lv.optim.Rprop, {}),
    "rprop_opts": (lv.optim.Rprop, dict(lr=0.05, etas=(0.4, 1.3), step_sizes=(1e-3, 0.2))),
    "asgd": (lv.optim.ASGD, dict(lr=0.05)),
    "asgd_opts": (lv.optim.ASGD, dict(lr=0.05, lambd=1e-2, alpha=0.6, t0=2, weight_decay=0.1)),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_optimizer_matches_pytorch(name):
    cls, kw = CONFIGS[name]
    p = lv.tensor(DATA["optim.p0"], dtype=lv.float64, requires_grad=True)
    q = lv.tensor(DATA["optim.q0"], dtype=lv.float64, requires_grad=True)
    opt = cls([p, q], **kw)
    for step, expected in enumerate(DATA[f"optim.{name}.traj"]):
        opt.zero_grad()
        _loss(p, q).backward()
        opt.step()
        got = np.concatenate([p.numpy().ravel(), q.numpy().ravel()])
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13, err_msg=f"step {step + 1}")
    st = [opt.state[p], opt.state[q]]
    assert st[0]["step"] == 7
    if cls is lv.optim.ASGD:
        ax = np.concatenate([s["ax"].numpy().ravel() for s in st])
        np.testing.assert_allclose(ax, DATA[f"optim.{name}.ax"], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(st[0]["eta"], DATA[f"optim.{name}.eta"], rtol=1e-14)
        assert st[0]["mu"] == DATA[f"optim.{name}.mu"]
    else:
        sizes = np.concatenate([s["step_size"].numpy().ravel() for s in st])
        np.testing.assert_allclose(sizes, DATA[f"optim.{name}.step_size"], rtol=1e-14)
    # the state round-trips through state_dict
    again = cls([lv.tensor(p.numpy(), requires_grad=True), lv.tensor(q.numpy(), requires_grad=True)], **kw)
    again.load_state_dict(opt.state_dict())
    assert again.state_dict()["state"][0].keys() == opt.state_dict()["state"][0].keys()


def _four_steps(captured: bool) -> np.ndarray:
    p = lv.tensor(DATA["optim.p0"], dtype=lv.float64, requires_grad=True)
    q = lv.tensor(DATA["optim.q0"], dtype=lv.float64, requires_grad=True)
    opts = [lv.optim.Rprop([p], lr=0.05), lv.optim.ASGD([q], lr=0.05, t0=2)]

    def step():
        for o in opts:
            o.zero_grad()
        loss = _loss(p, q)
        loss.backward()
        for o in opts:
            o.step()
        return loss

    run = lv.compile(step) if captured else step
    for _ in range(4):
        run()
    return np.concatenate([p.numpy(), q.numpy().ravel(), opts[1].state[q]["ax"].numpy().ravel()])


def test_captured_step_replays_the_plain_steps(mode):
    """Rprop and ASGD (whose eta and mu change per step) in a ``lazyvic.compile``d step give the
    plain steps' bits."""
    np.testing.assert_array_equal(_four_steps(False), _four_steps(True))


@pytest.mark.parametrize("name", ["triangular", "triangular2", "exp_range", "scale_fn"])
def test_cyclic_lr_matches_pytorch(name):
    kw = {
        "triangular": dict(base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=2),
        "triangular2": dict(base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=2, mode="triangular2"),
        "exp_range": dict(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="exp_range", gamma=0.9),
        "scale_fn": dict(
            base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 1 / (1 + x), scale_mode="iterations"
        ),
    }[name]
    groups = [{"params": [lv.zeros(1, requires_grad=True)]}, {"params": [lv.zeros(1, requires_grad=True)]}]
    opt = lv.optim.SGD(groups, lr=0.5, momentum=0.9)
    sched = lv.optim.lr_scheduler.CyclicLR(opt, **kw)
    lrs, moms = [], []
    for _ in range(14):
        lrs.append([g["lr"] for g in opt.param_groups])
        moms.append([g["momentum"] for g in opt.param_groups])
        sched.step()
    np.testing.assert_allclose(lrs, DATA[f"cyclic.{name}.lr"], rtol=1e-14)
    np.testing.assert_allclose(moms, DATA[f"cyclic.{name}.momentum"], rtol=1e-14)
    # a scheduler restored from its state_dict continues where the first stopped
    again = lv.optim.lr_scheduler.CyclicLR(lv.optim.SGD(groups, lr=0.5, momentum=0.9), **kw)
    again.load_state_dict(sched.state_dict())
    sched.step()
    again.step()
    assert again.get_last_lr() == sched.get_last_lr()
    # Adam's beta1 cycles as the momentum
    adam = lv.optim.Adam([lv.zeros(1, requires_grad=True)], lr=0.5)
    cyc = lv.optim.lr_scheduler.CyclicLR(adam, 0.01, 0.1, step_size_up=2)
    assert adam.param_groups[0]["betas"][0] == 0.9 and cyc.get_last_lr() == [0.01]
    cyc.step()
    assert adam.param_groups[0]["betas"][0] == pytest.approx(0.85)


def _model():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).to(lv.float64)


def _states():
    keys = sorted({k.split(".", 2)[2] for k in DATA.files if k.startswith("swa.state0.")})
    return [{k: lv.tensor(DATA[f"swa.state{i}.{k}"]) for k in keys} for i in range(4)]


@pytest.mark.parametrize("name", ["mean", "ema", "ema_fn", "mean_buffers"])
def test_averaged_model_matches_pytorch(name):
    kw = {
        "mean": {},
        "ema": dict(multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9)),
        "ema_fn": dict(avg_fn=swa_utils.get_ema_avg_fn(0.8), use_buffers=True),
        "mean_buffers": dict(use_buffers=True),
    }[name]
    model = _model()
    averaged = swa_utils.AveragedModel(model, **kw)
    for state in _states():
        model.load_state_dict(state)
        averaged.update_parameters(model)
    got = averaged.state_dict()
    expected = sorted(k.split(".", 2)[2] for k in DATA.files if k.startswith(f"swa.{name}."))
    assert sorted(got) == expected
    for k in expected:
        want = DATA[f"swa.{name}.{k}"]
        assert got[k].numpy().dtype == want.dtype, k
        np.testing.assert_allclose(got[k].numpy(), want, rtol=1e-12, atol=1e-14, err_msg=k)
    x = lv.ones(2, 3, dtype=lv.float64)
    averaged.eval()
    np.testing.assert_array_equal(averaged(x).numpy(), averaged.module(x).numpy())


@pytest.mark.parametrize("strategy", ["cos", "linear"])
def test_swalr_matches_pytorch(strategy):
    opt = lv.optim.SGD([lv.zeros(1, requires_grad=True)], lr=0.5)
    sched = swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=3, anneal_strategy=strategy)
    lrs = []
    for _ in range(8):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    np.testing.assert_allclose(lrs, DATA[f"swa.swalr_{strategy}"], rtol=1e-14)


def test_update_bn_matches_pytorch():
    model = _model()
    model.load_state_dict(_states()[-1])
    model.eval()
    batches = [(lv.tensor(DATA[f"swa.bn_batch{i}"]), lv.zeros(5)) for i in range(3)]
    swa_utils.update_bn(batches, model)
    assert not model.training and model[1].momentum == float(DATA["swa.update_bn.momentum"])
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(v.numpy(), DATA[f"swa.update_bn.{k}"], rtol=1e-12, atol=1e-14, err_msg=k)
    swa_utils.update_bn(batches, nn.Linear(3, 2))  # no BatchNorm: nothing to do


def test_errors_and_aliases():
    p = [lv.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="Rprop: invalid eta"):
        lv.optim.Rprop(p, etas=(1.2, 0.5))
    with pytest.raises(ValueError, match="ASGD: invalid lr"):
        lv.optim.ASGD(p, lr=-1.0)
    with pytest.raises(ValueError, match="CyclicLR: mode"):
        lv.optim.lr_scheduler.CyclicLR(lv.optim.SGD(p, lr=0.1, momentum=0.9), 0.1, 1.0, mode="sawtooth")
    with pytest.raises(ValueError, match="CyclicLR: cycle_momentum"):
        lv.optim.lr_scheduler.CyclicLR(lv.optim.Rprop(p), 0.1, 1.0)
    with pytest.raises(ValueError, match="SWALR: anneal_strategy"):
        swa_utils.SWALR(lv.optim.SGD(p, lr=0.1), 0.05, anneal_strategy="step")
    with pytest.raises(ValueError, match="only one of avg_fn and multi_avg_fn"):
        swa_utils.AveragedModel(nn.Linear(2, 2), avg_fn=swa_utils.get_swa_avg_fn(), multi_avg_fn=lambda *a: None)
    # lazyvic.cuda.amp: PyTorch's deprecated spellings, with its FutureWarning
    with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
        scaler = lv.cuda.amp.GradScaler(init_scale=8.0)
    assert isinstance(scaler, lv.amp.GradScaler) and scaler.get_scale() == 8.0
    with pytest.warns(FutureWarning, match="torch.cuda.amp.autocast"):
        ctx = lv.cuda.amp.autocast(dtype=lv.bfloat16)
    with ctx:
        assert lv.amp.is_autocast_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lv.amp.GradScaler()  # the new spelling does not warn
