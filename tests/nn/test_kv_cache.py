"""KVCache: decoding one token at a time with cached keys and values gives what attention over
the whole sequence gives, through one plan of symbolic sizes for every length."""

import numpy as np
import pytest

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import nn
from lazyvic.errors import ShapeError
from lazyvic.models import TinyGPT
from lazyvic.runtime import metrics


def _qkv(rng, T, B=2, H=2, D=4):
    return [rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(3)]


def test_sdpa_with_a_cache_equals_attention_over_the_whole_sequence():
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, 9)
    full = F.scaled_dot_product_attention(lv.tensor(q), lv.tensor(k), lv.tensor(v), is_causal=True).numpy()
    cache = F.KVCache()
    rows = [
        F.scaled_dot_product_attention(
            lv.tensor(q[:, :, :4]), lv.tensor(k[:, :, :4]), lv.tensor(v[:, :, :4]), is_causal=True, kv_cache=cache
        ).numpy()
    ]  # a prompt of 4 tokens, then one token per call
    for t in range(4, 9):
        sl = slice(t, t + 1)
        rows.append(
            F.scaled_dot_product_attention(
                lv.tensor(q[:, :, sl]), lv.tensor(k[:, :, sl]), lv.tensor(v[:, :, sl]), is_causal=True, kv_cache=cache
            ).numpy()
        )
    np.testing.assert_allclose(np.concatenate(rows, axis=2), full, rtol=1e-5, atol=1e-6)
    assert cache.length() == 9


def test_multihead_attention_with_a_cache():
    lv.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = lv.randn(1, 6, 8)
    full, _ = mha(x, x, x, is_causal=True, need_weights=False)
    cache = nn.KVCache()
    steps = [
        mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], is_causal=True, need_weights=False, kv_cache=cache)[0]
        for t in range(6)
    ]
    np.testing.assert_allclose(lv.cat(steps, 1).numpy(), full.numpy(), rtol=1e-5, atol=1e-6)


def test_cache_shape_errors():
    cache = F.KVCache()
    cache.update(lv.zeros(1, 2, 3, 4), lv.zeros(1, 2, 3, 4))
    with pytest.raises(ShapeError, match="KVCache.update"):
        cache.update(lv.zeros(1, 3, 1, 4), lv.zeros(1, 3, 1, 4))


def test_tiny_gpt_cached_generation_equals_full_window_generation():
    lv.manual_seed(1)
    model = TinyGPT(vocab_size=23, d_model=16, n_layer=2, n_head=2, block_size=12).eval()
    prompt = np.array([[3, 5, 7]])
    metrics.reset()
    cached = model.generate(prompt, 20, temperature=0.0).numpy()  # the window slides after 9 tokens
    misses = metrics.snapshot()["cache_misses"]
    full = model.generate(prompt, 20, temperature=0.0, kv_cache=False).numpy()
    np.testing.assert_array_equal(cached, full)
    # the parameters' initialization; the prefill's constants (masks, positions, computed once)
    # and its trace; the decoding step; the sliding window's constant and its trace
    assert misses <= 6


def test_tiny_gpt_cache_past_the_block_size_raises():
    model = TinyGPT(vocab_size=5, d_model=8, n_layer=1, n_head=2, block_size=4).eval()
    cache = F.KVCache()
    model(lv.tensor([[1, 2, 3]]), kv_cache=cache)
    model(lv.tensor([[4]]), kv_cache=cache)
    with pytest.raises(ShapeError, match="block_size"):
        model(lv.tensor([[1]]), kv_cache=cache)


# --------------------------------------------------------------------------- static cache
def test_static_cache_equals_attention_over_the_whole_sequence_with_one_plan():
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, 9)
    full = F.scaled_dot_product_attention(lv.tensor(q), lv.tensor(k), lv.tensor(v), is_causal=True).numpy()
    cache = F.KVCache(max_length=12)
    rows = [
        F.scaled_dot_product_attention(
            lv.tensor(q[:, :, :3]), lv.tensor(k[:, :, :3]), lv.tensor(v[:, :, :3]), is_causal=True, kv_cache=cache
        ).numpy()
    ]
    metrics.reset()
    for t in range(3, 9):
        sl = slice(t, t + 1)
        rows.append(
            F.scaled_dot_product_attention(
                lv.tensor(q[:, :, sl]), lv.tensor(k[:, :, sl]), lv.tensor(v[:, :, sl]), is_causal=True, kv_cache=cache
            ).numpy()
        )
    np.testing.assert_allclose(np.concatenate(rows, axis=2), full, rtol=1e-5, atol=1e-6)
    # The position is data: every decoding step is the same trace (one plan, the rest hits).
    snap = metrics.snapshot()
    assert snap["cache_misses"] == 1 and snap["cache_hits"] == 5
    assert cache.length() == 9 and int(cache.position().item()) == 9
    keys, values, pos = cache.state()
    assert keys.shape == (2, 2, 12, 4) and values.shape == (2, 2, 12, 4) and pos.shape == ()
    np.testing.assert_array_equal(keys.numpy()[:, :, :9], k)
    np.testing.assert_array_equal(keys.numpy()[:, :, 9:], 0)  # slots not yet written


def test_static_cache_not_causal_sees_every_written_key():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, 5)
    full = F.scaled_dot_product_attention(lv.tensor(q[:, :, 4:]), lv.tensor(k), lv.tensor(v)).numpy()
    cache = F.KVCache(max_length=8)
    cache.update(lv.tensor(k[:, :, :4]), lv.tensor(v[:, :, :4]))
    last = F.scaled_dot_product_attention(
        lv.tensor(q[:, :, 4:]), lv.tensor(k[:, :, 4:]), lv.tensor(v[:, :, 4:]), kv_cache=cache
    ).numpy()
    np.testing.assert_allclose(last, full, rtol=1e-5, atol=1e-6)


def test_multihead_attention_with_a_static_cache():
    lv.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = lv.randn(1, 6, 8)
    full, _ = mha(x, x, x, is_causal=True, need_weights=False)
    cache = nn.KVCache(max_length=10)
    first = mha(x[:, :2], x[:, :2], x[:, :2], is_causal=True, need_weights=False, kv_cache=cache)[0]
    steps = [
        mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], is_causal=True, need_weights=False, kv_cache=cache)[0]
        for t in range(2, 6)
    ]
    np.testing.assert_allclose(lv.cat([first, *steps], 1).numpy(), full.numpy(), rtol=1e-5, atol=1e-6)


def test_static_cache_errors():
    cache = F.KVCache(max_length=4)
    cache.update(lv.zeros(1, 2, 3, 4), lv.zeros(1, 2, 3, 4))
    with pytest.raises(ShapeError, match="pass max_length 4"):
        cache.update(lv.zeros(1, 2, 2, 4), lv.zeros(1, 2, 2, 4))
    with pytest.raises(ShapeError, match="do not fit"):
        cache.update(lv.zeros(1, 3, 1, 4), lv.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match="max_length"):
        F.KVCache(max_length=0)
    with pytest.raises(ValueError, match="per layer"):
        F.KVCache.from_state((lv.zeros(1, 4, 2), lv.zeros(1, 4, 2)), 4)
    with pytest.raises(ShapeError, match="from_state"):
        F.KVCache.from_state((lv.zeros(1, 3, 2), lv.zeros(1, 3, 2), lv.tensor(0)), 4)
    with pytest.raises(ValueError, match="static"):
        F.KVCache().state()


def test_tiny_gpt_logits_to_keep_equals_the_last_rows():
    lv.manual_seed(3)
    model = TinyGPT(vocab_size=11, d_model=16, n_layer=2, n_head=2, block_size=8).eval()
    idx = lv.tensor(np.random.default_rng(0).integers(0, 11, (2, 7)))
    full = model(idx).numpy()
    np.testing.assert_allclose(model(idx, logits_to_keep=2).numpy(), full[:, -2:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(idx, logits_to_keep=7).numpy(), full, rtol=1e-6, atol=1e-7)


def test_tiny_gpt_generation_replays_compiled_steps_and_follows_new_weights():
    lv.manual_seed(4)
    model = TinyGPT(vocab_size=19, d_model=16, n_layer=2, n_head=2, block_size=10).eval()
    prompt = np.array([[1, 2], [3, 4]])
    model.generate(prompt, 14, temperature=0.0)  # records the prefill, decoding and window steps
    metrics.reset()
    cached = model.generate(prompt, 14, temperature=0.0).numpy()
    snap = metrics.snapshot()
    # the prefill, 7 decoding steps (positions 2..8 fill the cache), 6 steps on the sliding window
    assert snap["capture_replays"] == 14 and snap.get("capture_recordings", 0) == 0
    np.testing.assert_array_equal(cached, model.generate(prompt, 14, temperature=0.0, kv_cache=False).numpy())
    longer = np.array([[5, 1, 2, 7], [0, 3, 4, 4]])  # another prompt length: a prefill of its own
    np.testing.assert_array_equal(
        model.generate(longer, 9, temperature=0.0).numpy(),
        model.generate(longer, 9, temperature=0.0, kv_cache=False).numpy(),
    )
    # New weights (what an optimizer step or load_state_dict makes): the steps record again.
    state = {k: v * 1.5 if k.endswith("c_fc.weight") else v for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    again = model.generate(prompt, 14, temperature=0.0).numpy()
    np.testing.assert_array_equal(again, model.generate(prompt, 14, temperature=0.0, kv_cache=False).numpy())
    assert not np.array_equal(again, cached)
