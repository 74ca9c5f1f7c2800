"""The loops of the dynamic-shapes issue, counted (plans and misses, not times): a slice that
moves over 40 batches, nanoGPT-style sampling on a context that grows for 48 tokens, and
training on 24 batches of 20 lengths, each reaching one compiled plan after a few misses.
``benchmarks/dynamic_shapes.py`` times the same loops at the README's model sizes; these use
small models so that CI compiles little.
"""

import numpy as np

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic import nn
from lazyvic.models import TinyGPT
from lazyvic.runtime import metrics
from lazyvic.runtime.plan_cache import plan_cache


def _tiny_gpt(seed=0):
    lv.manual_seed(seed)
    return TinyGPT(vocab_size=23, d_model=16, n_layer=1, n_head=2, block_size=64)


def test_a_slice_that_moves_over_40_batches_misses_at_most_3_times(fresh):
    """word_language_model's ``get_batch``: ``source[i:i+bptt]`` and the next tokens as targets,
    an embedding and a linear layer trained by SGD; the last batch is shorter."""
    rng = np.random.default_rng(0)
    source = lv.tensor(rng.integers(0, 23, (40 * 7 + 3, 4)))
    lv.manual_seed(0)
    emb, out = nn.Embedding(23, 8), nn.Linear(8, 23)
    opt = lv.optim.SGD([*emb.parameters(), *out.parameters()], lr=0.1)
    lv.sync()
    losses = []
    for i in range(0, source.shape[0] - 1, 7):
        n = min(7, source.shape[0] - 1 - i)
        x, y = source[i : i + n], source[i + 1 : i + 1 + n]
        loss = F.cross_entropy(out(emb(x)).reshape(-1, 23), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    snap = metrics.snapshot()
    assert len(losses) == 41 and np.isfinite(losses).all()
    assert snap["cache_misses"] <= 3, snap
    assert snap["compiled_runs"] >= 41 - 3, snap


def test_a_context_growing_for_48_tokens_misses_at_most_4_times(fresh):
    """nanoGPT's sampling loop: the model on ``idx[:, -block:]``, one token more per step, each
    read as it comes; the tokens are the model's own greedy ones."""
    model = _tiny_gpt().eval()
    want = model.generate(np.array([[1]]), 48, temperature=0.0, kv_cache=False).numpy()[0, 1:].tolist()
    plan_cache.clear_plans()
    metrics.reset()
    idx, got = lv.tensor(np.array([[1]])), []
    with lv.no_grad():
        for _ in range(48):
            logits = model(idx[:, -64:])
            nxt = logits[:, -1, :].argmax(-1, keepdim=True)
            idx = lv.cat((idx, nxt), dim=1)
            got.append(int(nxt.item()))
    snap = metrics.snapshot()
    assert got == want
    assert snap["cache_misses"] <= 4, snap
    assert snap["compiled_runs"] >= 48 - 4, snap


def test_24_batches_of_20_lengths_miss_at_most_4_times(fresh):
    """TinyGPT trained with AdamW on batches of (8, T) for 20 distinct T (the benchmark's list)."""
    model = _tiny_gpt()
    opt = lv.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    lengths = [64, 64, 40, 17, 33, 64, 25, 48, 9, 60, 31, 12, 64, 40, 55, 21, 38, 44, 29, 50, 13, 19, 58, 36]
    assert len(set(lengths)) == 20
    lv.sync()
    metrics.reset()
    for T in lengths:
        idx, tgt = lv.tensor(rng.integers(0, 23, (8, T))), lv.tensor(rng.integers(0, 23, (8, T)))
        loss = F.cross_entropy(model(idx).reshape(-1, 23), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert np.isfinite(loss.item())
    snap = metrics.snapshot()
    assert snap["cache_misses"] <= 4, snap
    assert snap["compiled_runs"] >= 18, snap
    # One structure for every length: a bias gradient is the same product at 8*9 rows as at
    # 8*64 (a threshold in between once made two families of plans).
    assert snap["symbolic_plans_compiled"] == 1, snap


def _cnn_losses(sizes):
    lv.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8),
        nn.Conv2d(8, 16, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((n, 3, 8, 8)), rng.integers(0, 10, n)) for n in sizes]
    return _losses(net, lv.optim.SGD(net.parameters(), lr=0.05, momentum=0.9), batches)


def _losses(net, opt, batches):
    """The losses of a classifier trained on ``batches`` of (NumPy images, labels)."""
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(net(lv.tensor(x.astype(np.float32))), lv.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_cnn_trained_on_12_batch_sizes_runs_one_plan(fresh, monkeypatch):
    """Convolution, batch norm (its 1/(N*H*W) follows the batch), depthwise and 1x1 convolutions,
    pooling and a linear layer trained by SGD on batches of 12 sizes, among them the channel
    counts (8, 16) and the class count (10): sizes where two shapes coincide are not guards."""
    sizes = [12, 12, 5, 8, 10, 16, 7, 3, 10, 20, 9, 6, 16, 8]
    lv.sync()
    metrics.reset()
    got = _cnn_losses(sizes)
    snap = metrics.snapshot()
    assert snap["cache_misses"] <= 2 and snap["symbolic_plans_compiled"] == 1, snap
    assert snap["compiled_runs"] >= len(sizes) - 2, snap
    monkeypatch.setattr(lv.runtime.config.config, "compile", "never")
    assert got == _cnn_losses(sizes)  # the interpreter's bits


def _fcn_losses(sizes):
    lv.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((3, 3, h, w)), rng.integers(0, 4, 3)) for h, w in sizes]
    return _losses(net, lv.optim.Adam(net.parameters(), lr=1e-2), batches)


def test_a_conv_net_trained_on_10_image_sizes_compiles_at_most_two_plans(fresh, monkeypatch):
    """Images of 10 sizes (height and width apart, odd ones too) through convolutions, a
    max-pool and a strided convolution, trained by Adam: the pooled sizes follow the image's as
    ``(H + b) // d`` (the strided convolution's input gradient too) and the convolutions' live
    taps are guards that hold for every larger image. Two sizes may fit more than one rule
    (``H // 4`` and ``(H + 2) // 4`` at H = 16 and 28), so a third size can need a second plan;
    before, every size was a miss and ran interpreted."""
    sizes = [(16, 20), (20, 24), (18, 18), (24, 16), (17, 23), (28, 20), (16, 20), (22, 30), (19, 17), (26, 26)]
    lv.sync()
    metrics.reset()
    got = _fcn_losses(sizes)
    snap = metrics.snapshot()
    assert snap["cache_misses"] <= 3 and snap["symbolic_plans_compiled"] <= 2, snap
    assert snap["compiled_runs"] >= len(sizes) - 3, snap
    monkeypatch.setattr(lv.runtime.config.config, "compile", "never")
    assert got == _fcn_losses(sizes)  # the interpreter's bits
