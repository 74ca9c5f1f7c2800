"""Optimizers against PyTorch trajectories (tests/fixtures/torch_optim_trajectories.npz).

The fixture file is made by tests/fixtures/make_torch_fixtures.py: a 5-7-3 MLP
trained 3 steps with cross_entropy per optimizer configuration, with the
learning rate changed before every step. These tests need only NumPy; the live
comparison at the end runs when torch is installed.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn, optim

FIXTURE = "torch_optim_trajectories.npz"
PARAM_NAMES = torch_fixtures.PARAM_NAMES
RTOL = 1e-6  # float32, relative to the size of the parameter tensor (see assert_close)


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def configs():
    return torch_fixtures.spec(FIXTURE)


def mlp(ref) -> nn.Sequential:
    model = torch_fixtures.mlp(ref)
    lazyvic.sync()
    return model


def assert_close(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    # ~1e-6 relative: elementwise rtol, plus an absolute floor scaled to the tensor
    # (an element that is nearly 0 after an update cannot keep 1e-6 of itself).
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def train_step(model, opt, x, y, lr):
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad()
    loss = F.cross_entropy(model(lazyvic.tensor(x)), lazyvic.tensor(y))
    loss.backward()
    opt.step()
    return loss


def make_optimizer(config, model):
    cls = getattr(optim, config["optimizer"])
    return cls(model.parameters(), lr=config["lrs"][0], **config["kwargs"])


def test_fixture_is_complete(ref):
    names = {c["name"] for c in configs()}
    assert {"sgd_plain", "sgd_momentum_wd", "sgd_nesterov", "adam_default", "adam_wd", "adamw_wd"} <= names
    for c in configs():
        assert len(set(c["lrs"])) == len(c["lrs"]) == 3  # the learning rate changes every step
        for p in PARAM_NAMES:
            assert ref[f"{c['name']}.param.{p}"].shape == (3,) + ref[f"init.{p}"].shape


@pytest.mark.parametrize("config", configs(), ids=lambda c: c["name"])
def test_trajectory_matches_torch(ref, config):
    model = mlp(ref)
    opt = make_optimizer(config, model)
    name = config["name"]
    for step, lr in enumerate(config["lrs"]):
        loss = train_step(model, opt, ref["xs"][step], ref["ys"][step], lr)
        assert_close(np.float32(loss.item()), ref[f"{name}.loss"][step], f"{name} loss at step {step}")
        for pname, p in model.named_parameters():
            assert_close(p.numpy(), ref[f"{name}.param.{pname}"][step], f"{name} {pname} after step {step}")


def test_adamw_differs_from_adam_with_l2(ref):
    """Decoupled weight decay is not L2 regularization: same hyperparameters, other values."""
    results = []
    for cls in (optim.Adam, optim.AdamW):
        model = mlp(ref)
        opt = cls(model.parameters(), lr=0.01, weight_decay=0.1)
        for step in range(2):
            train_step(model, opt, ref["xs"][step], ref["ys"][step], 0.01)
        results.append(model[0].weight.numpy().copy())
    assert np.abs(results[0] - results[1]).max() > 1e-6


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2),
        lambda ps: optim.Adam(ps, lr=0.01),
        lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    ],
    ids=["sgd_momentum", "adam", "adamw"],
)
def test_changing_lr_does_not_miss_the_plan_cache(ref, make_opt):
    model = mlp(ref)
    opt = make_opt(model.parameters())
    xs, ys = ref["xs"], ref["ys"]
    lrs = [0.1, 0.05, 0.02, 0.01, 0.003, 0.3]
    for step in range(3):  # warm-up: the first steps create optimizer state
        train_step(model, opt, xs[step % 3], ys[step % 3], lrs[step]).item()
    before = lazyvic.metrics.snapshot()
    for step in range(3, 6):
        train_step(model, opt, xs[step % 3], ys[step % 3], lrs[step]).item()
    after = lazyvic.metrics.snapshot()
    assert after["cache_misses"] == before["cache_misses"], "a new learning rate recompiled the step"
    assert after["cache_hits"] - before["cache_hits"] == 3
    assert after["traces"] - before["traces"] == 3


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "AdamW"])
def test_training_step_is_one_trace_at_one_sync(ref, opt_name):
    model = mlp(ref)
    opt = getattr(optim, opt_name)(model.parameters(), lr=0.01, **({"momentum": 0.9} if opt_name == "SGD" else {}))
    for step in range(3):
        before = lazyvic.metrics.snapshot()["traces"]
        loss = train_step(model, opt, ref["xs"][step], ref["ys"][step], 0.01)
        # Nothing has run yet: forward, backward and update are all pending.
        assert lazyvic.metrics.snapshot()["traces"] == before
        assert loss.is_lazy and all(p.is_lazy for p in model.parameters())
        loss.item()
        assert lazyvic.metrics.snapshot()["traces"] == before + 1
        # The one sync realized the whole step: parameters, gradients, optimizer state.
        for p in model.parameters():
            assert not p.is_lazy and not p.grad.is_lazy
        for st in opt.state.values():
            assert not any(isinstance(v, lazyvic.Tensor) and v.is_lazy for v in st.values())


def test_zero_grad_and_skipping_params_without_grad(ref):
    model = mlp(ref)
    opt = optim.SGD(model.parameters(), lr=0.1)
    frozen = model[2].bias.numpy().copy()
    train_step(model, opt, ref["xs"][0], ref["ys"][0], 0.1)
    assert all(p.grad is not None for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    loss = F.cross_entropy(model(lazyvic.tensor(ref["xs"][1])), lazyvic.tensor(ref["ys"][1]))
    loss.backward()
    model[2].bias.grad = None
    bias_before = model[2].bias.numpy().copy()
    opt.step()
    lazyvic.sync()
    np.testing.assert_array_equal(model[2].bias.numpy(), bias_before)
    assert not np.array_equal(frozen, bias_before)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is None or not p.grad.numpy().any() for p in model.parameters())


def test_momentum_buffer_is_not_the_gradient(ref):
    """PyTorch clones the gradient into the momentum buffer: zeroing .grad in place must not reset it."""
    model = mlp(ref)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_step(model, opt, ref["xs"][0], ref["ys"][0], 0.1)
    lazyvic.sync()
    w = model[0].weight
    buf = opt.state[w]["momentum_buffer"].numpy().copy()
    assert buf.any()
    w.grad.zero_()
    np.testing.assert_array_equal(opt.state[w]["momentum_buffer"].numpy(), buf)


def test_param_groups_with_their_own_lr(ref):
    model = mlp(ref)
    opt = optim.SGD([{"params": model[0].parameters(), "lr": 0.0}, {"params": model[2].parameters()}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.0, 0.1]
    first = model[0].weight.numpy().copy()
    last = model[2].weight.numpy().copy()
    opt.zero_grad()
    F.cross_entropy(model(lazyvic.tensor(ref["xs"][0])), lazyvic.tensor(ref["ys"][0])).backward()
    opt.step()
    lazyvic.sync()
    np.testing.assert_array_equal(model[0].weight.numpy(), first)
    assert not np.array_equal(model[2].weight.numpy(), last)


@pytest.mark.parametrize(
    "bad",
    [
        lambda ps: optim.SGD(ps, lr=-1.0),
        lambda ps: optim.SGD(ps, lr=0.1, nesterov=True),
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
        lambda ps: optim.Adam(ps, betas=(1.0, 0.999)),
        lambda ps: optim.Adam(ps, eps=-1.0),
        lambda ps: optim.SGD([], lr=0.1),
    ],
)
def test_invalid_hyperparameters_raise(bad):
    with pytest.raises(ValueError):
        bad([nn.Parameter(lazyvic.zeros(2))])


def test_trajectory_matches_torch_live(ref):
    """A longer run (6 steps, lr changing every step) compared with PyTorch directly."""
    torch = pytest.importorskip("torch")
    cfg = {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.02}
    lrs = [0.02, 0.01, 0.03, 0.005, 0.02, 0.01]
    tmodel = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    tmodel.load_state_dict({k: torch.from_numpy(ref[f"init.{k}"].copy()) for k in PARAM_NAMES})
    topt = torch.optim.AdamW(tmodel.parameters(), lr=lrs[0], foreach=False, **cfg)
    model = mlp(ref)
    opt = optim.AdamW(model.parameters(), lr=lrs[0], **cfg)
    for step, lr in enumerate(lrs):
        x, y = ref["xs"][step % 3], ref["ys"][step % 3]
        for g in topt.param_groups:
            g["lr"] = lr
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        topt.step()
        train_step(model, opt, x, y, lr)
        lazyvic.sync()
        for (name, p), tp in zip(model.named_parameters(), tmodel.parameters()):
            assert_close(p.numpy(), tp.detach().numpy(), f"{name} after step {step}")
