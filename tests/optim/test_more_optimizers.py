"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Adam/AdamW amsgrad and decoupled weight
decay, maximize: trajectories, state_dict layout and resume against PyTorch.

tests/fixtures/torch_optim_more.npz is made by tests/fixtures/make_optim_fixtures.py: the 5-7-3
MLP of the other optimizer fixtures trained 8 steps with cross_entropy, the learning rate
changed before every step, per configuration; with the final state_dict. Tolerance: ~1e-6
relative in float32 (an absolute floor scaled to each tensor, see assert_close); the update
formulas are PyTorch's but some products are associated differently.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn, optim
from lazyvic.errors import UnsupportedOpError

FIXTURE = "torch_optim_more.npz"
PARAM_NAMES = torch_fixtures.PARAM_NAMES
RTOL = 2e-6
CONFIGS = torch_fixtures.spec(FIXTURE)


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def assert_close(got, expected, what: str) -> None:
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def _model(ref) -> nn.Sequential:
    model = torch_fixtures.mlp(ref)
    lazyvic.sync()
    return model


def _step(model, opt, ref, step: int, lr: float):
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad()
    loss = F.cross_entropy(model(lazyvic.tensor(ref["xs"][step % 3])), lazyvic.tensor(ref["ys"][step % 3]))
    loss.backward()
    opt.step()
    return loss


def _optimizer(config, model):
    kwargs = dict(config["kwargs"])
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return getattr(optim, config["optimizer"])(model.parameters(), lr=config["lrs"][0], **kwargs)


def test_fixture_covers_every_new_rule():
    names = {c["optimizer"] for c in CONFIGS}
    assert {"RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "Adam", "AdamW"} <= names
    assert any(c["kwargs"].get("amsgrad") for c in CONFIGS)
    for c in CONFIGS:
        assert len(set(c["lrs"])) == len(c["lrs"]) == 8


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c["name"])
def test_trajectory_and_state_match_torch(ref, config):
    model = _model(ref)
    opt = _optimizer(config, model)
    name = config["name"]
    for step, lr in enumerate(config["lrs"]):
        loss = _step(model, opt, ref, step, lr)
        assert_close(np.float32(loss.item()), ref[f"{name}.loss"][step], f"{name} loss at step {step}")
        for pname, p in model.named_parameters():
            assert_close(p.numpy(), ref[f"{name}.param.{pname}"][step], f"{name} {pname} after step {step}")
    sd = opt.state_dict()
    assert sorted(sd["state"][0]) == config["state_names"]
    assert set(sd["param_groups"][0]) <= set(config["group_keys"]) | {"initial_lr"}
    for i, st in sd["state"].items():
        for key, v in st.items():
            want = ref[f"{name}.state.{i}.{key}"]
            if isinstance(v, lazyvic.Tensor):
                assert_close(v.numpy(), want, f"{name} state {i}.{key}")
            else:
                np.testing.assert_allclose(v, want, rtol=1e-6, err_msg=f"{name} state {i}.{key}")


@pytest.mark.parametrize(
    "name", ["rmsprop_centered_momentum", "adagrad_decay", "adadelta_rho_wd", "nadam_default", "radam_default"]
)
def test_resume_from_a_torch_state_dict_continues_the_trajectory(ref, name):
    """Load PyTorch's state after step 8 (0-d tensors for step/mu_product, as in a .pt file) into
    a fresh optimizer and take one more step: it matches taking that step in one run."""
    config = next(c for c in CONFIGS if c["name"] == name)
    through = _model(ref)
    opt = _optimizer(config, through)
    for step, lr in enumerate(config["lrs"]):
        _step(through, opt, ref, step, lr)
    _step(through, opt, ref, 8, 0.004)

    resumed = _model(ref)
    resumed.load_state_dict({k: ref[f"{name}.param.{k}"][-1] for k in PARAM_NAMES})
    opt2 = _optimizer(config, resumed)
    state = {i: {key: ref[f"{name}.state.{i}.{key}"] for key in config["state_names"]} for i in range(len(PARAM_NAMES))}
    torch_sd = opt.state_dict()
    opt2.load_state_dict({"state": state, "param_groups": torch_sd["param_groups"]})
    assert isinstance(opt2.state_dict()["state"][0]["step"], int)
    _step(resumed, opt2, ref, 8, 0.004)
    for (k, p), q in zip(through.named_parameters(), resumed.parameters()):
        assert_close(q.numpy(), p.numpy(), f"{name} {k} after the resumed step")


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
        lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01),
        lambda ps: optim.Adadelta(ps),
        lambda ps: optim.Adam(ps, amsgrad=True),
        lambda ps: optim.Adamax(ps),
        lambda ps: optim.NAdam(ps),
        lambda ps: optim.RAdam(ps),
    ],
    ids=["rmsprop", "adagrad", "adadelta", "adam_amsgrad", "adamax", "nadam", "radam"],
)
def test_every_step_reuses_one_plan(ref, make):
    """Bias corrections, RAdam's rectification switch, NAdam's momentum schedule and the rate
    change every step: all scalar inputs, so after the first steps no step compiles."""
    model = _model(ref)
    opt = make(model.parameters())
    lrs = [0.01, 0.02, 0.005, 0.03, 0.01, 0.002, 0.02, 0.01, 0.004]
    for step in range(2):
        _step(model, opt, ref, step, lrs[step]).item()
    before = lazyvic.metrics.snapshot()
    for step in range(2, 9):  # RAdam switches to the rectified update at step 6
        _step(model, opt, ref, step, lrs[step]).item()
    after = lazyvic.metrics.snapshot()
    assert after["cache_misses"] == before["cache_misses"], "a changing scalar recompiled the step"
    assert after["traces"] - before["traces"] == 7


def test_add_param_group_and_named_parameters(ref):
    model = _model(ref)
    opt = optim.RMSprop(model[0].named_parameters(), lr=0.01)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    opt.add_param_group({"params": model[2].parameters(), "lr": 0.5, "alpha": 0.9})
    g = opt.param_groups[1]
    assert g["lr"] == 0.5 and g["alpha"] == 0.9 and g["eps"] == 1e-8
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [model[0].weight]})
    w = model[2].weight.numpy().copy()
    _step(model, opt, ref, 0, 0.01)
    assert not np.array_equal(model[2].weight.numpy(), w)
    agd = optim.Adagrad(model.parameters(), initial_accumulator_value=0.5)
    assert sorted(agd.state_dict()["state"]) == [0, 1, 2, 3]  # made at construction, as in PyTorch
    np.testing.assert_array_equal(agd.state_dict()["state"][1]["sum"].numpy(), np.full(7, 0.5, np.float32))


def test_step_with_a_closure_returns_its_loss(ref):
    model = _model(ref)
    opt = optim.Adam(model.parameters(), lr=0.01)
    x, y = lazyvic.tensor(ref["xs"][0]), lazyvic.tensor(ref["ys"][0])

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    with lazyvic.no_grad():  # the closure still records its backward
        loss = opt.step(closure)
    first = loss.item()
    assert opt.step(closure).item() < first


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda ps: optim.RMSprop(ps, lr=-0.1), "RMSprop.*lr"),
        (lambda ps: optim.RMSprop(ps, alpha=1.5), "RMSprop.*alpha"),
        (lambda ps: optim.Adagrad(ps, lr_decay=-1.0), "Adagrad.*lr_decay"),
        (lambda ps: optim.Adagrad(ps, initial_accumulator_value=-1.0), "Adagrad.*initial_accumulator_value"),
        (lambda ps: optim.Adadelta(ps, rho=1.5), "Adadelta.*rho"),
        (lambda ps: optim.Adamax(ps, betas=(0.9, 1.0)), "Adamax.*beta"),
        (lambda ps: optim.NAdam(ps, momentum_decay=-0.1), "NAdam.*momentum_decay"),
        (lambda ps: optim.RAdam(ps, eps=-1.0), "RAdam.*eps"),
        (lambda ps: optim.AdamW(ps, betas=(-0.1, 0.9)), "AdamW.*beta"),
    ],
)
def test_invalid_hyperparameters_name_the_optimizer(bad, match):
    with pytest.raises(ValueError, match=match):
        bad([nn.Parameter(lazyvic.zeros(2))])


def test_bad_params_and_unsupported_flags():
    p = nn.Parameter(lazyvic.zeros(2))
    with pytest.raises(TypeError, match="iterable of Tensors"):
        optim.Adam(p)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([1.0], lr=0.1)
    with pytest.raises(UnsupportedOpError, match="differentiable"):
        optim.Adam([p], differentiable=True)
    opt = optim.RAdam([p], foreach=True, capturable=True)  # implementation choices are accepted
    assert opt.param_groups[0]["foreach"] is True


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)),
        ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
        ("Adadelta", dict(weight_decay=0.01)),
        ("Adam", dict(lr=0.01, amsgrad=True)),
        ("Adamax", dict(lr=0.01)),
        ("NAdam", dict(lr=0.01, weight_decay=0.01)),
        ("RAdam", dict(lr=0.01)),
    ],
)
def test_resume_from_state_dict_is_bit_identical(ref, name, kwargs):
    """Stop after 5 steps, save (as arrays, as a checkpoint file gives them back), load into a
    fresh optimizer over other weights, go on: the same bits as the uninterrupted run."""
    lrs = [0.01, 0.02, 0.005, 0.03, 0.01, 0.002, 0.02, 0.01]
    through = _model(ref)
    opt = getattr(optim, name)(through.parameters(), **kwargs)
    for step in range(8):
        _step(through, opt, ref, step, lrs[step])
    stopped = _model(ref)
    opt_a = getattr(optim, name)(stopped.parameters(), **kwargs)
    for step in range(5):
        _step(stopped, opt_a, ref, step, lrs[step])
    weights = {k: v.numpy().copy() for k, v in stopped.state_dict().items()}
    sd = opt_a.state_dict()
    saved = {
        "state": {
            i: {k: (v.numpy().copy() if isinstance(v, lazyvic.Tensor) else v) for k, v in st.items()}
            for i, st in sd["state"].items()
        },
        "param_groups": sd["param_groups"],
    }
    resumed = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    resumed.load_state_dict(weights)
    opt_b = getattr(optim, name)(resumed.parameters(), lr=123.0)
    opt_b.load_state_dict(saved)
    for step in range(5, 8):
        _step(resumed, opt_b, ref, step, lrs[step])
    for (k, want), got in zip(through.state_dict().items(), resumed.state_dict().values()):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{name}: {k}")


class SignMomentum(optim.Optimizer):
    """A user-written optimizer in PyTorch's idiom: self.state[p], lazily made state, in-place updates."""

    def __init__(self, params, lr=0.01, beta=0.9):
        super().__init__(params, dict(lr=lr, beta=beta))

    @lazyvic.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["buf"] = lazyvic.zeros_like(p)
                buf = state["buf"]
                buf.mul_(group["beta"]).add_(p.grad, alpha=1 - group["beta"])
                p.data.add_(buf.sign(), alpha=-group["lr"])


def test_a_custom_optimizer_in_pytorchs_idiom(ref):
    model = _model(ref)
    opt = SignMomentum(model.parameters(), lr=0.05)
    w = {k: v.numpy().astype(np.float64) for k, v in model.named_parameters()}
    bufs = {k: np.zeros_like(v) for k, v in w.items()}
    for step in range(3):
        _step(model, opt, ref, step, 0.05)
        grads = {k: p.grad.numpy() for k, p in model.named_parameters()}
        for k in w:
            bufs[k] = bufs[k] * 0.9 + grads[k] * (1 - 0.9)
            w[k] = w[k] - 0.05 * np.sign(bufs[k])
        for k, p in model.named_parameters():
            np.testing.assert_allclose(p.numpy(), w[k], rtol=1e-5, atol=1e-6, err_msg=f"{k} after step {step}")
    assert sorted(opt.state_dict()["state"]) == [0, 1, 2, 3]
    assert opt.state[model[0].weight]["buf"].shape == (7, 5)
