"""scaled_dot_product_attention and nn.MultiheadAttention against PyTorch (tests/fixtures/torch_transformer.npz).

The fixture file is made by tests/fixtures/make_transformer_fixtures.py; these
tests need only NumPy. Gradients are those of ``sum(output * cotangent)`` (plus
``sum(weights * cotangent_w)`` for MultiheadAttention), as the script computed
them. The fixture comparisons run on the interpreter and through the compiler;
the finite-difference checks run in float64 on the interpreter.
"""

import math

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _oracle import check_vjp, softmax

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import ShapeError

FIXTURE = "torch_transformer.npz"
TOL = dict(rtol=2e-5, atol=2e-6)  # float32: softmax, two matmuls and their VJPs
MHA_PARAMS = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")
SPEC = torch_fixtures.spec(FIXTURE)


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _case_id(case):
    return case["name"]


# ================================================================= scaled_dot_product_attention
@pytest.mark.parametrize("case", SPEC["sdpa"], ids=_case_id)
def test_sdpa_output_and_gradients_match_torch(ref, case, mode):
    name = case["name"]
    q = lazyvic.tensor(ref["sdpa.q"], requires_grad=True)
    k = lazyvic.tensor(ref[f"sdpa.{case['key']}"], requires_grad=True)
    v = lazyvic.tensor(ref[f"sdpa.{case['value']}"], requires_grad=True)
    mask = lazyvic.tensor(ref[f"sdpa.{case['mask']}"]) if case["mask"] else None
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **case["kwargs"])
    assert out.shape == ref[f"{name}.out"].shape and out.dtype is lazyvic.float32
    (out * lazyvic.tensor(ref[f"sdpa.{case['cotangent']}"])).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref[f"{name}.out"], **TOL, err_msg=f"{name} output")
    for what, x in (("query", q), ("key", k), ("value", v)):
        np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.{what}"], **TOL, err_msg=f"{name} grad of {what}")


def test_sdpa_fixture_covers_the_cases(ref):
    names = {c["name"] for c in SPEC["sdpa"]}
    assert {"sdpa_causal", "sdpa_bool_mask", "sdpa_float_mask", "sdpa_scale", "sdpa_cross"} <= names
    assert ref["sdpa.q"].shape == (2, 3, 5, 4)
    assert ref["sdpa.k_cross"].shape[-2] != ref["sdpa.q"].shape[-2]  # L != S
    assert not ref["sdpa.bool_mask"].all() and ref["sdpa.bool_mask"].any(1).all()


def test_sdpa_matches_the_numpy_formula(ref):
    """softmax(q k^T * scale + mask) v written out in float64, with a numpy mask (not a Tensor)."""
    q, k, v = (ref[f"sdpa.{n}"].astype(np.float64) for n in ("q", "k_cross", "v_cross"))
    mask = ref["sdpa.cross_mask"]
    scores = np.where(mask, q @ np.swapaxes(k, -1, -2) * 0.7, -np.inf)
    expected = softmax(scores, -1) @ v
    got = F.scaled_dot_product_attention(
        lazyvic.tensor(q), lazyvic.tensor(k), lazyvic.tensor(v), attn_mask=mask, scale=0.7
    )
    assert got.dtype is lazyvic.float64
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-13)


def test_sdpa_is_causal_equals_the_lower_triangular_bool_mask(ref):
    q, k, v = (lazyvic.tensor(ref[f"sdpa.{n}"]) for n in ("q", "k_cross", "v_cross"))
    L, S = q.shape[-2], k.shape[-2]
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=np.tril(np.ones((L, S), dtype=bool)))
    np.testing.assert_array_equal(causal.numpy(), masked.numpy())


def test_sdpa_bad_shapes_raise_shape_error_naming_the_op():
    q = lazyvic.zeros(2, 3, 5, 4)
    bad = [
        (q, lazyvic.zeros(2, 3, 5, 3), lazyvic.zeros(2, 3, 5, 4)),  # key feature size != query's
        (q, lazyvic.zeros(2, 3, 5, 4), lazyvic.zeros(2, 3, 6, 4)),  # value length != key length
        (lazyvic.zeros(4), lazyvic.zeros(4), lazyvic.zeros(4)),  # 1-D
    ]
    for query, key, value in bad:
        with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
            F.scaled_dot_product_attention(query, key, value)


def test_sdpa_batch_and_mask_shape_errors_name_the_op():
    """Leading dimensions that do not broadcast, and a mask that does not fit (L, S), are the
    caller's mistake in scaled_dot_product_attention, not in the matmul/where it is built from."""
    q = lazyvic.zeros(2, 3, 5, 4)
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(q, lazyvic.zeros(2, 4, 5, 4), lazyvic.zeros(2, 4, 5, 4))
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=lazyvic.ones(4, 4, dtype=lazyvic.bool))
    with pytest.raises(ShapeError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=lazyvic.zeros(3, 5))


def test_sdpa_attn_mask_and_is_causal_together_raise():
    q = lazyvic.zeros(1, 3, 2)
    with pytest.raises(ValueError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=lazyvic.ones(3, 3, dtype=lazyvic.bool), is_causal=True)


def test_sdpa_dropout_is_reproducible_under_a_seed():
    q = lazyvic.tensor(np.random.default_rng(0).normal(size=(2, 4, 3)).astype(np.float32))
    lazyvic.manual_seed(7)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    lazyvic.manual_seed(7)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    # The same dropped weights; the last bits may differ (hot mode interprets the first run).
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.allclose(a, F.scaled_dot_product_attention(q, q, q).numpy())


_RNG = np.random.default_rng(5)
_Q, _K, _V = _RNG.uniform(-1, 1, (2, 3, 2)), _RNG.uniform(-1, 1, (2, 4, 2)), _RNG.uniform(-1, 1, (2, 4, 3))
_BOOL_MASK = np.array([[True, False, True, True], [False, True, False, True], [True, True, True, False]])
_FLOAT_MASK = _RNG.uniform(-1, 1, (3, 4))


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), id="plain"),
        pytest.param(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), id="causal"),
        pytest.param(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=_BOOL_MASK), id="bool_mask"),
        pytest.param(
            lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, attn_mask=lazyvic.tensor(_FLOAT_MASK, dtype=lazyvic.float64), scale=0.4
            ),
            id="float_mask_scale",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["never"], indirect=True)  # hundreds of evaluations: interpret them
def test_sdpa_vjp_matches_finite_differences(fn, mode):
    check_vjp(fn, _Q, _K, _V)


# ================================================================= MultiheadAttention
def _mha(ref, batch_first: bool, dtype=None) -> nn.MultiheadAttention:
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first, dtype=dtype)
    mha.load_state_dict({k: ref[f"mha.init.{k}"] for k in MHA_PARAMS})
    return mha


def _mha_call(ref, case, mha):
    """Run one fixture case; returns (x, kv, output, weights), inputs and output batch first."""
    x = lazyvic.tensor(ref["mha.x"], requires_grad=True)
    kv = x if case["self_attention"] else lazyvic.tensor(ref["mha.kv"], requires_grad=True)
    q_in, kv_in = (x, kv) if case["batch_first"] else (x.transpose(0, 1), kv.transpose(0, 1))
    kwargs = {
        k: (lazyvic.tensor(ref[f"mha.{v}"]) if k in ("attn_mask", "key_padding_mask") else v)
        for k, v in case["kwargs"].items()
    }
    out, weights = mha(q_in, kv_in, kv_in, **kwargs)
    return x, kv, out, weights


@pytest.mark.parametrize("case", SPEC["mha"], ids=_case_id)
def test_multihead_attention_matches_torch(ref, case, mode):
    name = case["name"]
    mha = _mha(ref, case["batch_first"])
    x, kv, out, weights = _mha_call(ref, case, mha)
    assert out.shape == ref[f"{name}.out"].shape
    out_bf = out if case["batch_first"] else out.transpose(0, 1)
    loss = (out_bf * lazyvic.tensor(ref["mha.cotangent"])).sum()
    if f"{name}.weights" in ref:
        expected_w = ref[f"{name}.weights"]
        assert weights is not None and weights.shape == expected_w.shape
        cot_w = ref["mha.cotangent_w"][..., : kv.shape[1]]
        loss = (
            loss + (weights * lazyvic.tensor(np.ascontiguousarray(cot_w if weights.ndim == 4 else cot_w[:, 0]))).sum()
        )
    else:
        assert weights is None
    loss.backward()
    np.testing.assert_allclose(out.numpy(), ref[f"{name}.out"], **TOL, err_msg=f"{name} output")
    if weights is not None:
        np.testing.assert_allclose(weights.numpy(), ref[f"{name}.weights"], **TOL, err_msg=f"{name} weights")
    np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.query"], **TOL, err_msg=f"{name} grad of query")
    if not case["self_attention"]:
        np.testing.assert_allclose(kv.grad.numpy(), ref[f"{name}.grad.kv"], **TOL, err_msg=f"{name} grad of key/value")
    for pname, p in mha.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), ref[f"{name}.grad.{pname}"], **TOL, err_msg=f"{name} grad of {pname}"
        )


def test_mha_fixture_covers_the_cases(ref):
    cases = {c["name"]: c for c in SPEC["mha"]}
    assert {c["batch_first"] for c in cases.values()} == {True, False}
    assert {c["kwargs"].get("average_attn_weights", True) for c in cases.values()} == {True, False}
    assert any("key_padding_mask" in c["kwargs"] for c in cases.values())
    assert any(c["kwargs"].get("need_weights") is False for c in cases.values())
    assert ref["mha.key_padding_mask"].any() and not ref["mha.key_padding_mask"].all(1).any()


def test_mha_is_causal_without_a_mask_equals_the_causal_mask(ref):
    """PyTorch needs attn_mask beside the is_causal hint; lazyvic also takes is_causal alone."""
    mha = _mha(ref, batch_first=True)
    x = lazyvic.tensor(ref["mha.x"])
    out, w = mha(x, x, x, is_causal=True)
    np.testing.assert_allclose(out.numpy(), ref["mha_is_causal.out"], **TOL)
    np.testing.assert_allclose(w.numpy(), ref["mha_is_causal.weights"], **TOL)
    assert (w.numpy()[:, np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0).all()


def test_mha_per_head_3d_mask_equals_the_2d_mask(ref):
    """A (N*H, L, S) attn_mask, batch-major as PyTorch lays it out, equals the (L, S) mask repeated."""
    mha = _mha(ref, batch_first=True)
    x = lazyvic.tensor(ref["mha.x"])
    mask2 = ref["mha.float_mask"]
    mask3 = np.broadcast_to(mask2, (2 * 2,) + mask2.shape).copy()
    mask3[1] += 5.0 * np.eye(5, dtype=np.float32)  # batch 0, head 1 differs
    _, w2 = mha(x, x, x, attn_mask=lazyvic.tensor(mask2), average_attn_weights=False)
    _, w3 = mha(x, x, x, attn_mask=lazyvic.tensor(mask3), average_attn_weights=False)
    w2, w3 = w2.numpy(), w3.numpy()
    np.testing.assert_allclose(w3[1], w2[1], rtol=1e-6, atol=1e-7)  # batch 1 unchanged
    np.testing.assert_allclose(w3[0, 0], w2[0, 0], rtol=1e-6, atol=1e-7)
    assert not np.allclose(w3[0, 1], w2[0, 1])
    # +5 on the diagonal of one head's scores: its log-weights move by 5 * I minus a per-row constant.
    shift = np.log(w3[0, 1]) - np.log(w2[0, 1]) - 5.0 * np.eye(5)
    np.testing.assert_allclose(shift - shift[:, :1], 0.0, atol=1e-4)


def test_mha_state_dict_keys_equal_torch():
    keys = SPEC["state_dict_keys"]
    assert list(nn.MultiheadAttention(8, 2).state_dict()) == keys["MultiheadAttention"]
    assert list(nn.MultiheadAttention(8, 2, bias=False).state_dict()) == keys["MultiheadAttention_no_bias"]
    sd = nn.MultiheadAttention(8, 2).state_dict()
    assert sd["in_proj_weight"].shape == (24, 8) and sd["out_proj.weight"].shape == (8, 8)
    assert (sd["in_proj_bias"].numpy() == 0).all() and (sd["out_proj.bias"].numpy() == 0).all()


def test_mha_default_init_is_xavier_uniform():
    lazyvic.manual_seed(0)
    w = nn.MultiheadAttention(64, 4).in_proj_weight.numpy()
    bound = math.sqrt(6.0 / (64 + 3 * 64))  # fan_in 64, fan_out 192
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound


def test_mha_bad_arguments():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(8, 3)
    with pytest.raises(ValueError):
        nn.MultiheadAttention(8, 2, kdim=4)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = lazyvic.zeros(2, 5, 8)
    bad_calls = [
        dict(query=lazyvic.zeros(2, 5, 6), key=lazyvic.zeros(2, 5, 6), value=lazyvic.zeros(2, 5, 6)),
        dict(query=lazyvic.zeros(1, 2, 5, 8), key=lazyvic.zeros(1, 2, 5, 8), value=lazyvic.zeros(1, 2, 5, 8)),
        dict(query=lazyvic.zeros(5, 8), key=lazyvic.zeros(2, 5, 8), value=lazyvic.zeros(2, 5, 8)),
        dict(query=x, key=lazyvic.zeros(2, 6, 8), value=x),
        dict(query=x, key=x, value=x, attn_mask=lazyvic.ones(4, 5, dtype=lazyvic.bool)),
        dict(query=x, key=x, value=x, key_padding_mask=lazyvic.ones(2, 4, dtype=lazyvic.bool)),
    ]
    for kwargs in bad_calls:
        with pytest.raises(ShapeError, match="MultiheadAttention"):
            mha(**kwargs)


def test_mha_without_weights_returns_none_and_same_output(ref):
    mha = _mha(ref, batch_first=True)
    x = lazyvic.tensor(ref["mha.x"])
    a, w = mha(x, x, x, need_weights=False)
    b, _ = mha(x, x, x)
    assert w is None
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
