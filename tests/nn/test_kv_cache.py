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
    assert misses <= 5  # prompt, first decode, the plan of symbolic sizes, the sliding window


def test_tiny_gpt_cache_past_the_block_size_raises():
    model = TinyGPT(vocab_size=5, d_model=8, n_layer=1, n_head=2, block_size=4).eval()
    cache = F.KVCache()
    model(lv.tensor([[1, 2, 3]]), kv_cache=cache)
    model(lv.tensor([[4]]), kv_cache=cache)
    with pytest.raises(ShapeError, match="block_size"):
        model(lv.tensor([[1]]), kv_cache=cache)
