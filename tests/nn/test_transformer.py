"""nn.TransformerEncoderLayer / DecoderLayer / Encoder / Decoder / Transformer against PyTorch
(tests/fixtures/torch_sequence.npz, made by tests/fixtures/make_sequence_fixtures.py): PyTorch's
state_dict loaded into the lazyvic module, the output, and the gradients of the inputs and of
every parameter; plus the layer clones, the causal mask, and errors.
"""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from test_rnn import check_case, run_case

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import ShapeError

FIXTURE = "torch_sequence.npz"
SPEC = torch_fixtures.spec(FIXTURE)
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def build(case) -> nn.Module:
    kw = dict(case["kwargs"])
    e, h, cls = case["d_model"], case["nhead"], case["cls"]
    if cls in ("TransformerEncoder", "TransformerDecoder"):
        layer = nn.TransformerEncoderLayer if cls == "TransformerEncoder" else nn.TransformerDecoderLayer
        layers = kw.pop("num_layers")
        return getattr(nn, cls)(layer(e, h, **kw), layers, norm=nn.LayerNorm(e))
    return getattr(nn, cls)(e, h, **kw)


@pytest.mark.parametrize("case", SPEC["transformer"], ids=lambda c: c["name"])
def test_transformer_layers_match_torch(ref, case):
    module = build(case)
    inputs = run_case(ref, case, module)
    check_case(ref, case, module, [module(**inputs)], inputs)


@pytest.mark.parametrize("mode", ["always"], indirect=True)
def test_encoder_layer_compiled_matches_torch(ref, mode):
    case = next(c for c in SPEC["transformer"] if c["name"] == "enc_pre_gelu_bf")
    module = build(case)
    inputs = run_case(ref, case, module)
    check_case(ref, case, module, [module(**inputs)], inputs)


def test_fixture_covers_the_listed_options():
    kwargs = [c["kwargs"] for c in SPEC["transformer"]]
    assert any(k.get("norm_first") for k in kwargs) and any(k.get("batch_first") for k in kwargs)
    assert any(k.get("activation") == "gelu" for k in kwargs)
    assert {c["cls"] for c in SPEC["transformer"]} == {
        "TransformerEncoderLayer",
        "TransformerDecoderLayer",
        "TransformerEncoder",
        "TransformerDecoder",
        "Transformer",
    }


def test_square_subsequent_mask_is_pytorchs():
    m = nn.Transformer.generate_square_subsequent_mask(4)
    assert m.shape == (4, 4) and m.dtype is lazyvic.float32
    expected = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    np.testing.assert_array_equal(m.numpy(), expected)


def test_encoder_clones_its_layer_and_the_clones_train_separately():
    lazyvic.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 2)
    w0, w1 = encoder.layers[0].linear1.weight, encoder.layers[1].linear1.weight
    assert w0 is not w1 and w0 is not layer.linear1.weight
    np.testing.assert_array_equal(w0.numpy(), w1.numpy())  # deep copies, as PyTorch's _get_clones
    assert isinstance(w0, nn.Parameter) and w0.requires_grad
    assert list(encoder.state_dict())[:2] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias"]
    opt = lazyvic.optim.SGD(encoder.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    x, w = (lazyvic.tensor(rng.normal(size=(3, 2, 8)).astype(np.float32)) for _ in range(2))
    (encoder(x) * w).sum().backward()  # not the plain sum: that of a LayerNorm output has no gradient
    opt.step()
    assert not np.array_equal(w0.numpy(), w1.numpy())


def test_transformer_initializes_matrices_with_xavier_uniform():
    lazyvic.manual_seed(0)
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    w = model.encoder.layers[0].linear1.weight.numpy()
    bound = np.sqrt(6 / (8 + 16))
    assert np.abs(w).max() <= bound and w.std() > bound / 4
    assert model.encoder.norm is not None and model.decoder.norm is not None


def test_activation_argument():
    layer = nn.TransformerEncoderLayer(8, 2, activation=nn.GELU())
    assert "activation" in dict(layer.named_children())
    assert nn.TransformerEncoderLayer(8, 2, activation="gelu").activation is F.gelu
    with pytest.raises(ValueError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_unbatched_encoder_layer_matches_batched():
    lazyvic.manual_seed(2)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    x = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    got = layer(lazyvic.tensor(x)).numpy()
    want = layer(lazyvic.tensor(x[:, None])).numpy()[:, 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_transformer_errors():
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    with pytest.raises(ShapeError, match=r"Transformer: the batch number of src \(5, 2, 8\) and tgt \(4, 3, 8\)"):
        model(lazyvic.zeros(5, 2, 8), lazyvic.zeros(4, 3, 8))
    with pytest.raises(ShapeError, match="Transformer: the feature number of src"):
        model(lazyvic.zeros(5, 2, 6), lazyvic.zeros(4, 2, 6))
    layer = nn.TransformerEncoderLayer(8, 2)
    with pytest.raises(ShapeError, match=r"TransformerEncoderLayer: expected src of shape \(S, N, 8\)"):
        layer(lazyvic.zeros(5, 2, 4))
    with pytest.raises(ShapeError, match="MultiheadAttention: attn_mask must be"):
        layer(lazyvic.zeros(5, 2, 8), src_mask=lazyvic.zeros(4, 4))
    with pytest.raises(ShapeError, match="TransformerDecoderLayer: expected memory"):
        nn.TransformerDecoderLayer(8, 2)(lazyvic.zeros(4, 2, 8), lazyvic.zeros(5, 2, 7))
