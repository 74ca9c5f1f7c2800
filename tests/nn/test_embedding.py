"""Embedding (functional and module), ModuleList and ModuleDict.

Values and gradients against PyTorch come from tests/fixtures/torch_transformer.npz
(made by tests/fixtures/make_transformer_fixtures.py); no torch needed.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _oracle import check_vjp, numeric_grads

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.errors import IndexError as LIndexError

FIXTURE = "torch_transformer.npz"
SPEC = torch_fixtures.spec(FIXTURE)


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


# ================================================================= F.embedding
@pytest.mark.parametrize("case", SPEC["embedding"], ids=lambda c: c["name"])
def test_embedding_forward_and_weight_grad_match_torch(ref, case, mode):
    name = case["name"]
    weight = lazyvic.tensor(ref["embedding.weight"], requires_grad=True)
    out = F.embedding(lazyvic.tensor(ref["embedding.index"]), weight, padding_idx=case["padding_idx"])
    assert out.shape == (2, 5, 4) and out.dtype is lazyvic.float32
    (out * lazyvic.tensor(ref["embedding.cotangent"])).sum().backward()
    # A lookup and a scatter-add of a few rows: exact up to float32 summation order.
    np.testing.assert_array_equal(out.numpy(), ref[f"{name}.out"])
    np.testing.assert_allclose(weight.grad.numpy(), ref[f"{name}.grad.weight"], rtol=1e-6, atol=1e-7)


def test_fixture_padding_rows_get_no_gradient(ref):
    index = ref["embedding.index"]
    assert (index == 3).sum() >= 2 and (index == 9).any()  # the padding rows are looked up
    assert (ref["emb_pad.grad.weight"][3] == 0).all() and (ref["emb_plain.grad.weight"][3] != 0).all()
    assert (ref["emb_pad_negative.grad.weight"][9] == 0).all()


def test_embedding_any_index_shape():
    w = np.arange(12, dtype=np.float32).reshape(6, 2)
    weight = lazyvic.tensor(w)
    for index in (np.array(4), np.array([5, 0, 5]), np.array([[[1], [2]], [[3], [0]]])):
        out = F.embedding(lazyvic.tensor(index), weight)
        assert out.shape == index.shape + (2,)
        np.testing.assert_array_equal(out.numpy(), w[index])
    out = F.embedding(lazyvic.tensor(np.array([1, 2], dtype=np.int32)), weight)
    np.testing.assert_array_equal(out.numpy(), w[[1, 2]])


def test_embedding_out_of_range_index_raises_index_error_naming_embedding():
    weight = lazyvic.zeros(6, 2)
    for bad in ([0, 6], [-1, 2]):
        with pytest.raises(LIndexError, match="embedding") as info:
            F.embedding(lazyvic.tensor(bad), weight)
        assert isinstance(info.value, IndexError)  # what PyTorch users catch
    with pytest.raises(LIndexError, match="embedding"):
        nn.Embedding(3, 2)(lazyvic.tensor([[0, 3]]))


def test_embedding_pending_out_of_range_index_raises_when_it_runs():
    out = F.embedding(lazyvic.tensor([0, 3]) * 2, lazyvic.zeros(6, 2))
    with pytest.raises(LIndexError):
        out.numpy()


def test_embedding_float_index_raises_dtype_error():
    weight = lazyvic.zeros(6, 2)
    with pytest.raises(DTypeError, match="embedding"):
        F.embedding(lazyvic.tensor([0.0, 1.0]), weight)
    with pytest.raises(DTypeError, match="embedding"):
        nn.Embedding(6, 2)(lazyvic.tensor([1.0]))


def test_embedding_float_list_index_is_not_truncated():
    """A Python list of floats is a float index too: PyTorch refuses it, it must not become [0, 1]."""
    with pytest.raises(DTypeError, match="embedding"):
        F.embedding([0.5, 1.7], lazyvic.zeros(6, 2))


def test_embedding_weight_must_be_2d():
    with pytest.raises(ShapeError, match="embedding"):
        F.embedding(lazyvic.tensor([0]), lazyvic.zeros(3))


_W = np.random.default_rng(3).uniform(-1, 1, (5, 3))
_IDX = np.array([[1, 4, 1], [0, 2, 4]])


@pytest.mark.parametrize("mode", ["never"], indirect=True)  # many evaluations: interpret them
def test_embedding_vjp_matches_finite_differences(mode):
    check_vjp(lambda w: F.embedding(lazyvic.tensor(_IDX), w), _W)


@pytest.mark.parametrize("padding_idx, row", [(1, 1), (-1, 4)], ids=["pad1", "pad_negative"])
@pytest.mark.parametrize("mode", ["never"], indirect=True)
def test_embedding_vjp_with_padding_is_finite_differences_without_the_padding_row(padding_idx, row, mode):
    """The padding row takes part in the forward value but, by PyTorch's rule, gets no gradient."""
    idx = lazyvic.tensor(_IDX)

    def fn(w):
        return F.embedding(idx, w, padding_idx=padding_idx)

    cotangent = np.random.default_rng(0).uniform(0.5, 1.5, _IDX.shape + (3,))
    w = lazyvic.tensor(_W, dtype=lazyvic.float64, requires_grad=True)
    (fn(w) * lazyvic.tensor(cotangent)).sum().backward()
    (expected,) = numeric_grads(fn, [_W], cotangent)
    expected[row] = 0.0
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-6, atol=1e-8)


def test_embedding_vjp_padding_row_is_zero():
    w = lazyvic.tensor(_W, requires_grad=True)
    F.embedding(lazyvic.tensor(_IDX), w, padding_idx=1).sum().backward()
    g = w.grad.numpy()
    assert (g[1] == 0).all()
    np.testing.assert_array_equal(g[:, 0], [1.0, 0.0, 1.0, 0.0, 2.0])  # rows 0, 2 once, 4 twice; 3 never


# ================================================================= nn.Embedding
def test_embedding_module_padding_row_starts_zeroed_and_stays_zero_grad():
    lazyvic.manual_seed(0)
    emb = nn.Embedding(7, 3, padding_idx=2)
    w = emb.weight.numpy()
    assert (w[2] == 0).all() and (np.delete(w, 2, 0) != 0).all()
    assert emb.weight.shape == (7, 3) and emb.weight.requires_grad
    (emb(lazyvic.tensor([[2, 1], [2, 6]])) * 3.0).sum().backward()
    g = emb.weight.grad.numpy()
    assert (g[2] == 0).all()
    np.testing.assert_array_equal(g[[1, 6]], np.full((2, 3), 3.0))
    np.testing.assert_array_equal(np.delete(g, [1, 2, 6], 0), 0.0)


def test_embedding_module_negative_padding_idx_and_range():
    emb = nn.Embedding(5, 2, padding_idx=-1)
    assert emb.padding_idx == 4 and (emb.weight.numpy()[4] == 0).all()
    for bad in (5, -6):
        with pytest.raises(ValueError, match="padding_idx"):
            nn.Embedding(5, 2, padding_idx=bad)


def test_embedding_module_init_is_standard_normal():
    lazyvic.manual_seed(1)
    w = nn.Embedding(400, 50).weight.numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02


def test_embedding_module_loads_torch_weights_and_matches(ref):
    emb = nn.Embedding(10, 4, padding_idx=3)
    assert list(emb.state_dict()) == SPEC["state_dict_keys"]["Embedding"]
    emb.load_state_dict({"weight": ref["embedding.weight"]})
    np.testing.assert_array_equal(emb(lazyvic.tensor(ref["embedding.index"])).numpy(), ref["emb_pad.out"])
    assert "padding_idx=3" in repr(emb)


# ================================================================= ModuleList and ModuleDict
def test_module_list_registers_in_order():
    layers = nn.ModuleList([nn.Linear(2, 3), nn.Linear(3, 4)])
    layers.append(nn.ReLU()).extend([nn.Linear(4, 1)])
    assert len(layers) == 4
    assert isinstance(layers[0], nn.Linear) and isinstance(layers[-1], nn.Linear) and layers[-1].out_features == 1
    assert [type(m).__name__ for m in layers] == ["Linear", "Linear", "ReLU", "Linear"]
    assert list(layers.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"]
    assert len(list(layers.parameters())) == 6
    sliced = layers[1:3]
    assert isinstance(sliced, nn.ModuleList) and len(sliced) == 2 and sliced[0] is layers[1]
    with pytest.raises(NotImplementedError):
        layers(lazyvic.zeros(1, 2))


def test_module_dict_registers_by_name():
    d = nn.ModuleDict({"enc": nn.Linear(2, 3), "act": nn.ReLU()})
    d["dec"] = nn.Linear(3, 2)
    assert list(d) == list(d.keys()) == ["enc", "act", "dec"]
    assert "enc" in d and "nope" not in d and len(d) == 3
    assert d["dec"].out_features == 2 and [m for _, m in d.items()] == list(d.values())
    assert list(d.state_dict()) == ["enc.weight", "enc.bias", "dec.weight", "dec.bias"]
    d["enc"] = nn.Linear(2, 5)  # replacing keeps the position
    assert list(d) == ["enc", "act", "dec"] and d["enc"].out_features == 5
    with pytest.raises(NotImplementedError):
        d(lazyvic.zeros(1, 2))


def test_nested_containers_state_dict_names_equal_torch():
    tree = nn.ModuleDict(
        {
            "emb": nn.Embedding(5, 2, padding_idx=0),
            "blocks": nn.ModuleList([nn.Linear(2, 3), nn.Sequential(nn.Linear(3, 3), nn.ReLU()), nn.LayerNorm(3)]),
            "attn": nn.MultiheadAttention(8, 2),
        }
    )
    assert list(tree.state_dict()) == SPEC["state_dict_keys"]["tree"]
    assert [n for n, _ in tree.named_parameters()] == SPEC["state_dict_keys"]["tree"]
    # A round trip through the names loads every value.
    sd = {k: v.numpy() + 1.0 for k, v in tree.state_dict().items()}
    fresh = nn.ModuleDict(
        {
            "emb": nn.Embedding(5, 2),
            "blocks": nn.ModuleList([nn.Linear(2, 3), nn.Sequential(nn.Linear(3, 3), nn.ReLU()), nn.LayerNorm(3)]),
            "attn": nn.MultiheadAttention(8, 2),
        }
    )
    fresh.load_state_dict(sd)
    for k, v in fresh.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k], err_msg=k)
