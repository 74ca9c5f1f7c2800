"""nn.Module, Parameter, Sequential and Linear: registration, state_dict, modes, init."""

from collections import OrderedDict

import numpy as np
import pytest

import lazyvic
from lazyvic import nn
from lazyvic.errors import CheckpointError


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("scale", lazyvic.ones(4))
        self.norm = nn.LayerNorm(4)
        self.register_buffer("cache", lazyvic.zeros(2), persistent=False)

    def forward(self, x):
        return self.norm(self.fc(x) * self.scale).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(4, 2, bias=False)
        self.temperature = 2.0  # plain attribute: not registered

    def forward(self, x):
        return self.head(self.blocks(self.embed(x))) / self.temperature


PARAM_NAMES = [
    "embed.weight", "embed.bias",
    "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.norm.weight", "blocks.0.norm.bias",
    "blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
    "head.weight",
]  # fmt: skip
STATE_KEYS = [
    "embed.weight", "embed.bias",
    "blocks.0.scale", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.norm.weight", "blocks.0.norm.bias",
    "blocks.1.scale", "blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.1.norm.weight", "blocks.1.norm.bias",
    "head.weight",
]  # fmt: skip


def values(module) -> dict:
    return {k: v.numpy().copy() for k, v in module.state_dict().items()}


# ------------------------------------------------------------ registration
def test_registration_of_parameters_modules_and_buffers():
    net = Net()
    assert isinstance(net.embed.weight, nn.Parameter) and net.embed.weight.requires_grad
    assert [n for n, _ in net.named_children()] == ["embed", "blocks", "head"]
    assert net.head.bias is None and "bias" not in dict(net.head.named_parameters())
    assert net.temperature == 2.0 and "temperature" not in net.state_dict()
    assert [n for n, _ in net.named_buffers()] == [
        "blocks.0.scale",
        "blocks.0.cache",
        "blocks.1.scale",
        "blocks.1.cache",
    ]
    assert len(list(net.modules())) == 1 + 1 + 1 + 2 * 3 + 1
    with pytest.raises(AttributeError):
        net.nonexistent  # noqa: B018


def test_named_parameters_order_and_names():
    net = Net()
    named = list(net.named_parameters())
    assert [n for n, _ in named] == PARAM_NAMES
    assert [p.shape for _, p in named][:2] == [(4, 3), (4,)]
    assert all(p is q for (_, p), q in zip(named, net.parameters()))
    assert [n for n, _ in net.blocks[0].named_parameters(prefix="x")] == [
        "x.fc.weight",
        "x.fc.bias",
        "x.norm.weight",
        "x.norm.bias",
    ]
    assert [n for n, _ in net.named_parameters(recurse=False)] == []
    assert [n for n, _ in net.embed.named_parameters(recurse=False)] == ["weight", "bias"]


def test_shared_parameter_is_listed_once():
    net = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    net[1].weight = net[0].weight
    names = [n for n, _ in net.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.bias"]


def test_reassigning_a_registered_name():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = None  # a plain attribute first ...
            self.w = nn.Parameter(lazyvic.ones(2))  # ... then a parameter: the parameter wins
            self.register_buffer("running", lazyvic.zeros(3))

    m = M()
    assert isinstance(m.w, nn.Parameter) and [n for n, _ in m.named_parameters()] == ["w"]
    m.running = lazyvic.ones(3)  # a tensor assigned to a buffer name stays a buffer
    assert list(m.state_dict()) == ["w", "running"]
    np.testing.assert_array_equal(m.state_dict()["running"].numpy(), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="parameter 'w'"):
        m.w = lazyvic.zeros(2)  # PyTorch: a plain tensor cannot replace a parameter
    assert isinstance(m.w, nn.Parameter)
    with pytest.raises(TypeError, match="buffer 'running'"):
        m.running = 3
    m.w = None
    assert m.w is None and list(m.named_parameters()) == []
    del m.running
    assert list(m.state_dict()) == []


def test_assign_before_init_raises():
    class Bad(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match="__init__"):
        Bad()


# ----------------------------------------------------------------- state_dict
def test_state_dict_keys_and_values():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == STATE_KEYS  # non-persistent buffers are left out
    for name, p in net.named_parameters():
        np.testing.assert_array_equal(sd[name].numpy(), p.numpy())
        assert not sd[name].requires_grad and sd[name] is not p
    np.testing.assert_array_equal(sd["blocks.1.scale"].numpy(), np.ones(4, np.float32))
    assert list(net.blocks.state_dict(prefix="blocks.")) == [k for k in STATE_KEYS if k.startswith("blocks.")]


def test_load_state_dict_round_trip_copies_values():
    src, dst = Net(), Net()
    lazyvic.sync()
    expected = values(src)
    assert any(not np.array_equal(expected[k], v) for k, v in values(dst).items())
    missing, unexpected = dst.load_state_dict(src.state_dict())
    assert missing == [] and unexpected == []
    got = values(dst)
    for k in STATE_KEYS:
        np.testing.assert_array_equal(got[k], expected[k], err_msg=k)
    # Updating the source later does not reach the copy.
    with lazyvic.no_grad():
        src.embed.weight.add_(1.0)
    np.testing.assert_array_equal(dst.embed.weight.numpy(), expected["embed.weight"])
    assert isinstance(dst.embed.weight, nn.Parameter) and dst.embed.weight.requires_grad


def test_load_state_dict_from_numpy_casts_and_copies():
    lin = nn.Linear(3, 2)
    w = np.arange(6, dtype=np.float64).reshape(2, 3)
    lin.load_state_dict({"weight": w, "bias": np.array([1, 2])})
    assert lin.weight.dtype is lazyvic.float32 and lin.bias.dtype is lazyvic.float32
    w[0, 0] = 100.0  # the model holds a copy
    np.testing.assert_array_equal(lin.weight.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(lin.bias.numpy(), [1.0, 2.0])


def test_load_state_dict_strict_reports_every_problem_and_assigns_nothing():
    net = Net()
    lazyvic.sync()
    before = values(net)
    sd = {k: v.numpy() + 1 for k, v in net.state_dict().items()}
    del sd["embed.bias"], sd["blocks.1.scale"]  # missing
    sd["head.bias"] = np.zeros(2, np.float32)  # unexpected
    sd["extra.weight"] = np.zeros((5, 5), np.float32)  # unexpected
    sd["blocks.0.fc.weight"] = np.zeros((4, 5), np.float32)  # shape mismatch
    sd["head.weight"] = np.zeros((4, 2), np.float32)  # shape mismatch
    with pytest.raises(CheckpointError) as info:
        net.load_state_dict(sd)
    msg = str(info.value)
    for key in ("embed.bias", "blocks.1.scale", "head.bias", "extra.weight", "blocks.0.fc.weight", "head.weight"):
        assert key in msg, key
    assert "missing" in msg and "unexpected" in msg
    for shape in ("(4,)", "(5, 5)", "(4, 5)", "(4, 4)", "(4, 2)", "(2, 4)"):
        assert shape in msg, shape
    after = values(net)
    for k in STATE_KEYS:  # nothing was assigned, not even the valid keys
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


def test_load_state_dict_non_strict():
    lin = nn.Linear(3, 2, bias=False)
    w = np.ones((2, 3), np.float32)
    missing, unexpected = lin.load_state_dict({"weight": w, "bias": np.zeros(2), "other": np.zeros(1)}, strict=False)
    assert missing == [] and unexpected == ["bias", "other"]
    assert lin.bias is None
    np.testing.assert_array_equal(lin.weight.numpy(), w)
    missing, unexpected = nn.Linear(3, 2).load_state_dict({"weight": w}, strict=False)
    assert missing == ["bias"] and unexpected == []
    with pytest.raises(CheckpointError, match=r"weight.*\(3, 3\).*\(2, 3\)"):  # shapes are checked even then
        lin.load_state_dict({"weight": np.ones((3, 3))}, strict=False)


def test_non_persistent_buffer_is_not_loaded():
    block = Block()
    sd = {k: v.numpy() for k, v in block.state_dict().items()}
    sd["cache"] = np.full(2, 7.0, np.float32)
    _, unexpected = block.load_state_dict(sd, strict=False)
    assert unexpected == ["cache"]
    np.testing.assert_array_equal(block.cache.numpy(), np.zeros(2, np.float32))


# ---------------------------------------------------------- modes and grads
def test_train_eval_flags_are_recursive():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.blocks.train()
    assert net.blocks[1].norm.training and not net.training and not net.embed.training
    net.train(True)
    assert all(m.training for m in net.modules())


def test_dropout_follows_the_mode():
    drop = nn.Dropout(0.5)
    x = lazyvic.ones(1000)
    y = drop(x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.3 < (y == 0).mean() < 0.7
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), np.ones(1000, np.float32))


def test_zero_grad():
    net = Net()
    net(lazyvic.ones(5, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    for name, p in net.named_parameters():
        assert p.grad.shape == p.shape
        np.testing.assert_array_equal(p.grad.numpy(), 0, err_msg=name)
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.zero_grad(set_to_none=False)  # no gradient yet: stays None
    assert all(p.grad is None for p in net.parameters())


def test_requires_grad_and_to_dtype():
    net = Net()
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    net.double()
    assert all(p.dtype is lazyvic.float64 for p in net.parameters())
    assert net(lazyvic.ones(2, 3, dtype=lazyvic.float64)).dtype is lazyvic.float64


# ------------------------------------------------------------------ Sequential
def test_sequential_indexing():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and list(seq) == [a, b, c]
    assert seq[0] is a and seq[-1] is c and seq[1] is b
    tail = seq[1:]
    assert isinstance(tail, nn.Sequential) and list(tail) == [b, c]
    assert list(tail.state_dict()) == ["2.weight", "2.bias"]  # names kept, as PyTorch
    assert list(seq[::2]) == [a, c]
    with pytest.raises(IndexError):
        seq[3]
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and [n for n, _ in seq.named_children()] == ["0", "1", "2", "3"]
    x = lazyvic.tensor(np.arange(4, dtype=np.float32).reshape(2, 2))
    expected = c(b(a(x))).sigmoid().numpy()
    np.testing.assert_allclose(seq(x).numpy(), expected, rtol=1e-6)


def test_sequential_from_ordered_dict():
    seq = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.Tanh())]))
    assert [n for n, _ in seq.named_parameters()] == ["fc.weight", "fc.bias"]
    assert isinstance(seq.act, nn.Tanh) and seq[1] is seq.act
    assert "(fc): Linear(in_features=2, out_features=2, bias=True)" in repr(seq)


# ---------------------------------------------------------------------- Linear
def test_linear_forward_and_shape_error():
    lin = nn.Linear(3, 2)
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    expected = x @ lin.weight.numpy().T + lin.bias.numpy()
    np.testing.assert_allclose(lin(lazyvic.tensor(x)).numpy(), expected, rtol=1e-6)
    with pytest.raises(lazyvic.errors.ShapeError, match="Linear"):
        lin(lazyvic.ones(2, 4))


def test_linear_default_init_statistics():
    lazyvic.manual_seed(1234)
    in_features, out_features = 64, 2048
    lin = nn.Linear(in_features, out_features)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    bound = 1.0 / np.sqrt(in_features)  # kaiming_uniform_(a=sqrt(5)) reduces to this
    assert w.shape == (out_features, in_features) and w.dtype == np.float32
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert w.max() > 0.99 * bound and w.min() < -0.99 * bound  # the whole interval is used
    n = w.size
    assert abs(w.mean()) < 5 * bound / np.sqrt(3 * n)  # 5 standard errors of the mean
    np.testing.assert_allclose(w.var(), bound**2 / 3, rtol=0.02)
    counts, _ = np.histogram(w, bins=16, range=(-bound, bound))
    np.testing.assert_allclose(counts, n / 16, rtol=0.05)  # ~4.5 sigma per bin
    assert len(np.unique(w)) > 0.99 * n
    assert abs(b.mean()) < 5 * bound / np.sqrt(3 * b.size)


def test_linear_seeded_init_is_bit_identical():
    # With LAZYVIC_COMPILE=hot the first init runs on the NumPy interpreter and the
    # repeat on the compiled plan (same trace key), so this also asks both paths to
    # agree bit for bit, as the design promises for seeded runs.
    lazyvic.manual_seed(7)
    first = values(nn.Linear(20, 30))
    lazyvic.manual_seed(7)
    second = values(nn.Linear(20, 30))
    third = values(nn.Linear(20, 30))  # the stream moves on without a reseed
    for k in ("weight", "bias"):
        assert first[k].tobytes() == second[k].tobytes(), k
        assert not np.array_equal(first[k], third[k]), k


# --------------------------------------------------------- live against torch
def test_names_and_keys_match_torch_live():
    torch = pytest.importorskip("torch")

    class TBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.register_buffer("scale", torch.ones(4))
            self.norm = torch.nn.LayerNorm(4)
            self.register_buffer("cache", torch.zeros(2), persistent=False)

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(3, 4)
            self.blocks = torch.nn.Sequential(TBlock(), TBlock())
            self.head = torch.nn.Linear(4, 2, bias=False)

    tnet, net = TNet(), Net()
    assert [n for n, _ in net.named_parameters()] == [n for n, _ in tnet.named_parameters()]
    assert list(net.state_dict()) == list(tnet.state_dict())
    assert [n for n, _ in net.named_buffers()] == [n for n, _ in tnet.named_buffers()]
    assert [n for n, _ in net.named_modules()] == [n for n, _ in tnet.named_modules()]
    assert list(net.blocks[1:].state_dict()) == list(tnet.blocks[1:].state_dict())
    # A torch state_dict (as NumPy arrays) loads as is.
    net.load_state_dict({k: v.numpy() for k, v in tnet.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    with torch.no_grad():
        expected = (
            tnet.head(
                tnet.blocks[1]
                .norm(tnet.blocks[1].fc(tnet.blocks[0].norm(tnet.blocks[0].fc(tnet.embed(torch.from_numpy(x)))).relu()))
                .relu()
            ).numpy()
            / 2.0
        )
    np.testing.assert_allclose(net(lazyvic.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
