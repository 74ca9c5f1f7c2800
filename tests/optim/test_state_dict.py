"""Optimizer.state_dict / load_state_dict: PyTorch's layout, exact resume, validation, snapshots.

PyTorch's state names and group keys, and an Adam checkpoint to resume from,
come from tests/fixtures/torch_transformer.npz (made by
tests/fixtures/make_transformer_fixtures.py); no torch needed.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic import functional as F
from lazyvic import nn, optim
from lazyvic.errors import CheckpointError

FIXTURE = "torch_transformer.npz"
SPEC = torch_fixtures.spec(FIXTURE)
LAYOUT = SPEC["optimizer_layout"]

CONFIGS = [
    pytest.param("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01), id="sgd_momentum"),
    pytest.param("Adam", dict(lr=0.02, weight_decay=0.05), id="adam"),
    pytest.param("AdamW", dict(lr=0.02, weight_decay=0.1), id="adamw"),
]

_RNG = np.random.default_rng(11)
_XS = _RNG.normal(size=(6, 8, 4)).astype(np.float32)
_YS = _RNG.integers(0, 3, (6, 8))


def _model(seed: int = 0) -> nn.Sequential:
    lazyvic.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))


def _train(model, opt, steps) -> None:
    for i in steps:
        opt.zero_grad()
        F.cross_entropy(model(lazyvic.tensor(_XS[i])), lazyvic.tensor(_YS[i])).backward()
        opt.step()


def _trained(name: str, kwargs: dict, steps: int):
    model = _model()
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    _train(model, opt, range(steps))
    return model, opt


def _as_numpy(state_dict: dict) -> dict:
    """What a checkpoint file gives back: arrays instead of tensors."""
    return {
        "state": {
            i: {k: (v.numpy().copy() if isinstance(v, lazyvic.Tensor) else v) for k, v in st.items()}
            for i, st in state_dict["state"].items()
        },
        "param_groups": [dict(g) for g in state_dict["param_groups"]],
    }


# ================================================================= layout
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_state_dict_layout_is_pytorchs(name, kwargs):
    model, opt = _trained(name, kwargs, 2)
    sd = opt.state_dict()
    assert list(sd) == ["state", "param_groups"]
    assert list(sd["state"]) == [0, 1, 2, 3] and all(type(i) is int for i in sd["state"])
    params = list(model.parameters())
    for i, st in sd["state"].items():
        assert sorted(st) == LAYOUT[name]["state"]
        for k, v in st.items():
            if k == "step":
                assert v == 2 and type(v) is int
            else:
                assert isinstance(v, lazyvic.Tensor) and v.shape == params[i].shape and not v.requires_grad
    (group,) = sd["param_groups"]
    assert group["params"] == [0, 1, 2, 3]
    assert set(group) <= set(LAYOUT[name]["param_group"])  # a subset of PyTorch's group keys
    for k, v in kwargs.items():
        assert group[k] == v
    if name != "SGD":
        assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8


def test_parameters_are_numbered_across_groups_in_order():
    model = _model()
    p = list(model.parameters())
    opt = optim.SGD([{"params": p[:3], "lr": 0.1}, {"params": p[3:], "lr": 0.01, "momentum": 0.5}], lr=0.1)
    _train(model, opt, range(1))
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1, 2], [3]]
    assert [g["lr"] for g in sd["param_groups"]] == [0.1, 0.01]
    assert list(sd["state"]) == [3]  # only the group with momentum keeps a buffer


def test_state_dict_is_a_snapshot():
    for name, kwargs in (("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01))):
        model, opt = _trained(name, kwargs, 2)
        sd = opt.state_dict()
        before = {
            i: {k: (v.numpy().copy() if isinstance(v, lazyvic.Tensor) else v) for k, v in st.items()}
            for i, st in sd["state"].items()
        }
        _train(model, opt, range(2, 4))
        opt.param_groups[0]["lr"] = 0.5
        assert sd["param_groups"][0]["lr"] == kwargs["lr"]
        for i, st in sd["state"].items():
            for k, v in st.items():
                got = v.numpy() if isinstance(v, lazyvic.Tensor) else v
                np.testing.assert_array_equal(got, before[i][k], err_msg=f"{name} state {i}.{k}")
        assert opt.state_dict()["state"][0]["step" if name == "Adam" else "momentum_buffer"] is not None


# ================================================================= exact resume
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_resume_from_state_dict_is_bit_identical(name, kwargs, mode):
    through, opt = _trained(name, kwargs, 5)

    stopped, opt_a = _trained(name, kwargs, 2)
    model_sd = {k: v.numpy().copy() for k, v in stopped.state_dict().items()}
    opt_sd = _as_numpy(opt_a.state_dict())
    del stopped, opt_a

    resumed = _model(seed=99)  # other initial weights: everything comes from the checkpoint
    resumed.load_state_dict(model_sd)
    opt_b = getattr(optim, name)(resumed.parameters(), lr=123.0)
    opt_b.load_state_dict(opt_sd)
    assert opt_b.param_groups[0]["lr"] == kwargs["lr"]
    _train(resumed, opt_b, range(2, 5))
    for (k, want), got in zip(through.state_dict().items(), resumed.state_dict().values()):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{name}: {k}")


def test_load_copies_the_values():
    model, opt = _trained("Adam", dict(lr=0.01), 1)
    sd = _as_numpy(opt.state_dict())
    model2 = _model()
    opt2 = optim.Adam(model2.parameters(), lr=0.01)
    opt2.load_state_dict(sd)
    kept = sd["state"][0]["exp_avg"].copy()
    sd["state"][0]["exp_avg"][...] = 1e6
    sd["state"][0]["step"] = 50
    sd["param_groups"][0]["lr"] = 9.0
    st = opt2.state_dict()
    np.testing.assert_array_equal(st["state"][0]["exp_avg"].numpy(), kept)
    assert st["state"][0]["step"] == 1 and st["param_groups"][0]["lr"] == 0.01
    assert st["param_groups"][0]["betas"] == (0.9, 0.999)


def test_betas_saved_as_a_list_load_as_a_tuple():
    """A checkpoint read back from JSON has lists where the optimizer had tuples."""
    model, opt = _trained("AdamW", dict(lr=0.01), 1)
    sd = _as_numpy(opt.state_dict())
    sd["param_groups"][0]["betas"] = [0.8, 0.99]
    opt2 = optim.AdamW(_model().parameters())
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["betas"] == (0.8, 0.99)


def test_resume_a_pytorch_adam_checkpoint():
    """PyTorch's layout as it comes from a file: a 0-d float step and float32 arrays."""
    ref = torch_fixtures.arrays(FIXTURE)
    hyper = LAYOUT["adam_resume"]
    w = nn.Parameter(lazyvic.tensor(ref["adam_resume.w_after_2"]))
    opt = optim.Adam([w], lr=1.0)
    torch_sd = {
        "state": {
            0: {
                "step": ref["adam_resume.step"],
                "exp_avg": ref["adam_resume.exp_avg"],
                "exp_avg_sq": ref["adam_resume.exp_avg_sq"],
            }
        },
        "param_groups": [
            {
                "lr": hyper["lr"],
                "betas": [0.9, 0.999],
                "eps": 1e-8,
                "weight_decay": hyper["weight_decay"],
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": None,
                "decoupled_weight_decay": False,
                "params": [0],
            }
        ],
    }
    assert ref["adam_resume.step"].shape == () and float(ref["adam_resume.step"]) == 2.0
    opt.load_state_dict(torch_sd)
    assert opt.state_dict()["state"][0]["step"] == 2
    opt.zero_grad()
    (w * lazyvic.tensor(ref["adam_resume.c"])).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), ref["adam_resume.w_after_3"], rtol=1e-6, atol=1e-7)


# ================================================================= validation
def _snapshot(opt) -> tuple:
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    state = {
        pid: {k: (v.numpy().copy() if isinstance(v, lazyvic.Tensor) else v) for k, v in st.items()}
        for pid, st in opt.state.items()
    }
    return groups, state


def _assert_unchanged(opt, snap) -> None:
    groups, state = _snapshot(opt)
    assert groups == snap[0]
    assert state.keys() == snap[1].keys()
    for pid in state:
        assert state[pid].keys() == snap[1][pid].keys()
        for k in state[pid]:
            np.testing.assert_array_equal(state[pid][k], snap[1][pid][k])


def _bad_state_dicts(sd: dict) -> dict:
    """Broken copies of a 2-group Adam state dict, by what is wrong with them."""
    bad = {}
    one_group = _as_numpy(sd)
    one_group["param_groups"] = [dict(one_group["param_groups"][0], params=[0, 1, 2, 3])]
    bad["group count"] = one_group
    moved = _as_numpy(sd)
    moved["param_groups"][0]["params"] = [0, 1]
    moved["param_groups"][1]["params"] = [2, 3]
    bad["group size"] = moved
    wrong_shape = _as_numpy(sd)
    wrong_shape["state"][1]["exp_avg"] = np.zeros((4,), dtype=np.float32)
    bad["state shape"] = wrong_shape
    transposed = _as_numpy(sd)
    transposed["state"][0]["exp_avg_sq"] = transposed["state"][0]["exp_avg_sq"].T.copy()
    bad["transposed state"] = transposed
    unknown = _as_numpy(sd)
    unknown["state"][7] = dict(unknown["state"][0])
    bad["unknown index"] = unknown
    scalar = _as_numpy(sd)
    scalar["state"][2]["exp_avg"] = np.zeros((), dtype=np.float32)  # only "step" may be 0-d
    bad["0-d state"] = scalar
    for d in bad.values():
        d["param_groups"][0]["lr"] = 7.0  # would show if groups were loaded before the error
    return bad


def _two_group_adam():
    model = _model()
    p = list(model.parameters())
    opt = optim.Adam([{"params": p[:3]}, {"params": p[3:], "lr": 0.002}], lr=0.01)
    _train(model, opt, range(2))
    return model, opt


@pytest.mark.parametrize(
    "problem", ["group count", "group size", "state shape", "transposed state", "unknown index", "0-d state"]
)
def test_mismatched_state_dict_raises_checkpoint_error_and_changes_nothing(problem):
    _, source = _two_group_adam()
    bad = _bad_state_dicts(source.state_dict())[problem]
    _, target = _two_group_adam()
    snap = _snapshot(target)
    with pytest.raises(CheckpointError, match="load_state_dict"):
        target.load_state_dict(bad)
    _assert_unchanged(target, snap)


def test_load_state_dict_rejects_what_is_not_a_state_dict():
    opt = optim.SGD(_model().parameters(), lr=0.1)
    for bad in ({}, {"state": {}}, [1, 2]):
        with pytest.raises(CheckpointError):
            opt.load_state_dict(bad)


def test_load_into_a_fresh_optimizer_before_any_step():
    _, source = _two_group_adam()
    model = _model()
    p = list(model.parameters())
    fresh = optim.Adam([{"params": p[:3]}, {"params": p[3:], "lr": 0.5}], lr=0.5)
    assert fresh.state_dict()["state"] == {}
    fresh.load_state_dict(source.state_dict())
    assert [g["lr"] for g in fresh.param_groups] == [0.01, 0.002]
    assert {i: st["step"] for i, st in fresh.state_dict()["state"].items()} == {0: 2, 1: 2, 2: 2, 3: 2}
