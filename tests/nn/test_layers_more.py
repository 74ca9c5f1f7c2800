"""Embedding.from_pretrained and F.embedding's max_norm / scale_grad_by_freq, channel dropout,
F.normalize, one_hot with inferred classes, Unflatten, LayerNorm(bias=False) and Parameter
deep copies, against NumPy (PyTorch's documented semantics)."""

import copy

import numpy as np
import pytest
from _oracle import check_vjp

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError, ShapeError

_TABLE = (np.random.default_rng(0).normal(size=(5, 3)) * 2).astype(np.float32)
pytestmark = pytest.mark.usefixtures("interpreted")


def test_from_pretrained_freezes_by_default_and_keeps_the_table():
    emb = nn.Embedding.from_pretrained(lazyvic.tensor(_TABLE), padding_idx=2)
    assert emb.weight.requires_grad is False and isinstance(emb.weight, nn.Parameter)
    assert (emb.num_embeddings, emb.embedding_dim, emb.padding_idx) == (5, 3, 2)
    np.testing.assert_array_equal(emb.weight.numpy(), _TABLE)  # the padding row is not zeroed
    np.testing.assert_array_equal(emb(lazyvic.tensor([[2, 0]])).numpy(), _TABLE[[[2, 0]]])
    assert list(emb.state_dict()) == ["weight"]


def test_from_pretrained_unfrozen_trains_except_the_padding_row():
    emb = nn.Embedding.from_pretrained(lazyvic.tensor(_TABLE), freeze=False, padding_idx=2)
    assert emb.weight.requires_grad
    emb(lazyvic.tensor([2, 0, 0, 4])).sum().backward()
    expected = np.zeros_like(_TABLE)
    expected[0], expected[4] = 2.0, 1.0
    np.testing.assert_array_equal(emb.weight.grad.numpy(), expected)


def test_from_pretrained_errors():
    with pytest.raises(ShapeError, match=r"Embedding.from_pretrained: embeddings must be 2-D.*\(15,\)"):
        nn.Embedding.from_pretrained(lazyvic.tensor(_TABLE.ravel()))
    with pytest.raises(ValueError, match="padding_idx 5 is out of range for 5 embeddings"):
        nn.Embedding.from_pretrained(lazyvic.tensor(_TABLE), padding_idx=5)


def test_max_norm_renormalizes_the_picked_rows_in_place():
    emb = nn.Embedding.from_pretrained(lazyvic.tensor(_TABLE), max_norm=1.5)
    idx = np.array([[0, 2, 2], [4, 0, 0]])
    out = emb(lazyvic.tensor(idx)).numpy()
    norms = np.linalg.norm(_TABLE, axis=1)
    picked = np.isin(np.arange(5), idx)
    scale = np.where(picked & (norms > 1.5), 1.5 / (norms + 1e-7), 1.0)
    expected = _TABLE * scale[:, None]
    np.testing.assert_allclose(emb.weight.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(out, expected[idx], rtol=1e-6)
    assert np.linalg.norm(emb.weight.numpy()[3]) > 1.5  # not looked up: untouched


def test_scale_grad_by_freq_divides_by_the_counts():
    w = lazyvic.tensor(_TABLE, requires_grad=True)
    idx = lazyvic.tensor([[0, 2, 2], [4, 0, 0]])
    F.embedding(idx, w, scale_grad_by_freq=True).sum().backward()
    expected = np.zeros_like(_TABLE)
    expected[[0, 2, 4]] = 1.0  # each row's total gradient (count) divided by its count
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-6)
    np.testing.assert_array_equal(F.embedding(idx, w, scale_grad_by_freq=True).numpy(), _TABLE[idx.numpy()])


@pytest.mark.parametrize(
    "cls, shape", [(nn.Dropout1d, (4, 6, 5)), (nn.Dropout2d, (3, 5, 4, 4)), (nn.Dropout3d, (2, 8, 2, 2, 2))]
)
def test_channel_dropout_zeroes_whole_channels(cls, shape):
    lazyvic.manual_seed(3)
    x = np.random.default_rng(1).uniform(1, 2, size=shape).astype(np.float32)
    y = cls(p=0.4)(lazyvic.tensor(x)).numpy()
    per_channel = y.reshape(shape[0], shape[1], -1)
    kept = (per_channel != 0).all(-1)
    dropped = (per_channel == 0).all(-1)
    assert (kept | dropped).all() and kept.any() and dropped.any()
    np.testing.assert_allclose(per_channel[kept], x.reshape(per_channel.shape)[kept] / 0.6, rtol=1e-6)
    np.testing.assert_array_equal(cls(p=0.4).eval()(lazyvic.tensor(x)).numpy(), x)
    with pytest.raises(ShapeError, match="dropout"):
        cls()(lazyvic.zeros(*shape[:1]))


def test_dropout_probability_checks():
    with pytest.raises(ValueError, match="Dropout: dropout probability has to be between 0 and 1"):
        nn.Dropout(1.5)
    assert (F.dropout(lazyvic.ones(4), 1.0).numpy() == 0).all()


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_normalize_matches_numpy(p, mode):
    x = np.random.default_rng(2).normal(size=(3, 4))
    norm = (np.abs(x) ** p).sum(1, keepdims=True) ** (1 / p)
    np.testing.assert_allclose(F.normalize(lazyvic.tensor(x), p=p).numpy(), x / np.maximum(norm, 1e-12), rtol=1e-12)
    check_vjp(lambda t: F.normalize(t, p=p, dim=0), x)


def test_one_hot_infers_the_number_of_classes():
    y = F.one_hot(lazyvic.tensor([0, 3, 1]))
    np.testing.assert_array_equal(y.numpy(), np.eye(4)[[0, 3, 1]])
    with pytest.raises(DTypeError, match="one_hot: expected an integer tensor"):
        F.one_hot(lazyvic.zeros(3), 3)


def test_unflatten_and_layer_norm_without_bias():
    assert nn.Unflatten(1, (2, 3))(lazyvic.zeros(4, 6)).shape == (4, 2, 3)
    ln = nn.LayerNorm(4, bias=False)
    assert list(ln.state_dict()) == ["weight"] and ln.bias is None
    x = np.random.default_rng(3).normal(size=(2, 4)).astype(np.float32)
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln(lazyvic.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)


def test_deepcopy_of_a_module_copies_parameters_as_parameters():
    lazyvic.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    c = copy.deepcopy(m)
    for (name, p), (_, q) in zip(m.named_parameters(), c.named_parameters()):
        assert q is not p and isinstance(q, nn.Parameter) and q.requires_grad, name
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    with lazyvic.no_grad():
        c[0].weight.mul_(0.0)
    assert np.abs(m[0].weight.numpy()).sum() > 0
