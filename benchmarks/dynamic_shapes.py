#!/usr/bin/env python
"""Shapes that vary: lazyvic vs PyTorch eager on loops whose sizes change, in one run.

    python benchmarks/dynamic_shapes.py [--quick] [--only NAME ...] [--json PATH] [--no-torch]

Cases (each runtime in a fresh child process, so one's thread pools do not slow the other):

- ``moving_slice``: a word_language_model-style training loop: an embedding + 2-layer LSTM +
  linear language model trained with truncated backprop over ``source[i:i+bptt]`` as ``i``
  moves (40 batches; the last, shorter batch included when the data ends). Also run (warm) with
  the whole step through ``lazyvic.compile`` (``lazyvic_compile``, its second process).
- ``growing_context``: nanoGPT-style sampling: the README's TinyGPT called on ``idx[:, -64:]``
  as the context grows by one token per step (48 tokens), each token read (``.item()``) as it
  comes, as a program that streams its output does; tokens/s. (Without a read, lazyvic records
  all 48 calls into one trace and runs them at the end.) Also run (warm) with the model through
  ``lazyvic.compile`` (``lazyvic_compile``, its second process: replays of one plan of symbolic
  sizes).
- ``generate``: ``TinyGPT.generate`` (KV cache) vs PyTorch's nanoGPT loop, 200 greedy tokens
  from the same prompt, generated 1 + REPEATS times: tokens/s of the median later generation
  (``first_s``: the first, which records and compiles; ``second_s``: the second, where lazyvic
  compiles the prefill's plan, seen twice now; the third makes its native segment).
- ``varlen_train``: TinyGPT training on 24 batches of about 20 distinct lengths; total time
  including compiling, and steps/s once every length has been seen. Also run (warm) with the
  whole step through ``lazyvic.compile`` (``lazyvic_compile``, its second process: replays of one
  plan of symbolic sizes from the third step on).
- ``cnn_batches``: a small CNN (convolution, batch norm, depthwise and 1x1 convolutions, pooling,
  linear; SGD with momentum) trained on 30 batches of 20 distinct sizes (8..40 images of 32x32),
  as a loader with ``drop_last=False`` and a varying sampler gives them.
- ``image_sizes``: a fully convolutional classifier (convolutions, batch norm, max-pool, a
  stride-2 convolution, adaptive average pooling; Adam) trained on 20 batches of 4 images whose
  height and width vary (48..96, apart), as detection and segmentation loops feed them.
- ``packed_lstm``: a sequence classifier (bidirectional 2-layer LSTM 32 -> 128 over
  ``pack_sequence(..., enforce_sorted=False)``, the final states into a linear layer, Adam) on 40
  batches of 16 sequences of random lengths 5..35 (no two batches alike).

Reported: time (total, including lazyvic's compiles), the time from the first step to the steady
state (until the last step slower than twice the steady median), steps or tokens per second, lazyvic's
plan-cache counters (misses, plans of symbolic sizes, family hits) and the ratio
``lazyvic / torch`` (> 1: lazyvic faster). A cold run (empty kernel cache) and a warm one
(kernels loaded from disk) are both shown for lazyvic: compile latency is part of the story.
This file is a benchmark, not a test: lazyvic itself never imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CASES = ("moving_slice", "growing_context", "generate", "varlen_train", "cnn_batches", "image_sizes", "packed_lstm")
VOCAB, D, LAYERS, HEADS, BLOCK = 65, 128, 2, 4, 64
REPEATS = 6  # generations timed after the first (the second and third compile: see run_generate)


# --------------------------------------------------------------------------- workloads
def _to_steady(times: list) -> float:
    """Seconds from the first step until the steady state: the time of every step up to the
    last one that took more than twice the median of the second half."""
    steady = float(np.median(times[len(times) // 2 :]))
    slow = [k for k, t in enumerate(times) if t > 2 * steady]
    return float(sum(times[: slow[-1] + 1])) if slow else 0.0


def _steps_summary(times: list, total: float) -> dict:
    """A training loop's record: total seconds, steady steps/s (the median of the second half),
    the time to the steady state, steps, and steps/s over the whole loop."""
    return {
        "total_s": total,
        "steady_steps_per_s": 1.0 / np.median(times[len(times) // 2 :]),
        "to_steady_s": _to_steady(times),
        "steps": len(times),
        "steps_per_s": len(times) / total,
    }


def _lm_data(n_tokens=12000, batch=8):
    return np.random.default_rng(0).integers(0, VOCAB, (n_tokens // batch, batch))


def run_moving_slice(lib, quick: bool, compiled: bool = False) -> dict:
    torch, nn, F = lib
    torch.manual_seed(0)
    data = torch.tensor(_lm_data())
    bptt, nhid = 35, 64

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, nhid)
            self.rnn = nn.LSTM(nhid, nhid, 2)
            self.out = nn.Linear(nhid, VOCAB)

        def forward(self, x, hidden):
            y, hidden = self.rnn(self.emb(x), hidden)
            return self.out(y), hidden

    model = LM()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    hidden = (torch.zeros(2, data.shape[1], nhid), torch.zeros(2, data.shape[1], nhid))
    steps = 12 if quick else 40

    def train_step(x, y, h, c):
        out, hidden = model(x, (h, c))
        loss = F.cross_entropy(out.reshape(-1, VOCAB), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss, hidden

    step = torch.compile(train_step) if compiled else train_step  # (lazyvic.compile: the whole step)
    t0, times = time.perf_counter(), []
    for i in range(0, min(steps * bptt, data.shape[0] - 1), bptt):  # 1,500 rows: 40 full slices
        s0 = time.perf_counter()
        seq_len = min(bptt, data.shape[0] - 1 - i)
        x, y = data[i : i + seq_len], data[i + 1 : i + 1 + seq_len].reshape(-1)
        hidden = tuple(h.detach() for h in hidden)
        loss, hidden = step(x, y, *hidden)
        loss.item()
        times.append(time.perf_counter() - s0)
    total = time.perf_counter() - t0
    return {
        "total_s": total,
        "steps": steps,
        "steady_steps_per_s": 1.0 / np.median(times[steps // 2 :]),
        "to_steady_s": _to_steady(times),
    }


def _tiny_gpt(lib):
    torch, nn, F = lib
    if torch.__name__ == "lazyvic":
        from lazyvic.models import TinyGPT

        return TinyGPT(vocab_size=VOCAB, d_model=D, n_layer=LAYERS, n_head=HEADS, block_size=BLOCK)
    sys.path.insert(0, str(HERE))
    from tiny_gpt import torch_tiny_gpt

    return torch_tiny_gpt(
        dict(vocab_size=VOCAB, d_model=D, n_layer=LAYERS, n_head=HEADS, block_size=BLOCK, dropout=0.0)
    )


def run_growing_context(lib, quick: bool, compiled: bool = False) -> dict:
    torch, nn, F = lib
    torch.manual_seed(0)
    model = _tiny_gpt(lib).eval()
    call = torch.compile(model) if compiled else model  # (lazyvic.compile)
    n = 24 if quick else 48
    idx = torch.tensor(np.array([[1]]))
    t0 = time.perf_counter()
    streamed, times = [], []
    with torch.no_grad():
        for _ in range(n):
            s0 = time.perf_counter()
            logits = call(idx[:, -BLOCK:])
            nxt = logits[:, -1, :].argmax(-1, keepdim=True)
            idx = torch.cat((idx, nxt), dim=1)
            streamed.append(int(nxt.item()))  # each token shown as it comes: a sync per token
            times.append(time.perf_counter() - s0)
    total = time.perf_counter() - t0
    return {
        "total_s": total,
        "tokens": n,
        "tokens_per_s": n / total,
        "steady_tokens_per_s": 1.0 / np.median(times[n // 2 :]),
        "to_steady_s": _to_steady(times),
        "tokens_out": idx.numpy()[0].tolist(),
    }


def run_generate(lib, quick: bool) -> dict:
    torch, nn, F = lib
    torch.manual_seed(0)
    model = _tiny_gpt(lib).eval()
    n = 60 if quick else 200
    prompt = np.array([[1]])

    def gen():
        if torch.__name__ == "lazyvic":
            return model.generate(torch.tensor(prompt), n, temperature=0.0).numpy()
        idx = torch.tensor(prompt)
        with torch.no_grad():
            for _ in range(n):
                nxt = model(idx[:, -BLOCK:])[:, -1, :].argmax(-1, keepdim=True)
                idx = torch.cat((idx, nxt), dim=1)
        return idx.numpy()

    t0 = time.perf_counter()
    first = gen()
    first_s = time.perf_counter() - t0
    calls, same = [], True
    for _ in range(REPEATS):  # later generations: lazyvic replays what the first one recorded
        t0 = time.perf_counter()
        out = gen()
        calls.append(time.perf_counter() - t0)
        same = same and bool((first == out).all())
    warm = float(np.median(calls))
    return {
        "first_s": first_s,
        "second_s": calls[0],
        "calls_s": calls,
        "total_s": warm,
        "tokens": n,
        "tokens_per_s": n / warm,
        "same": same,
    }


def run_varlen_train(lib, quick: bool, compiled: bool = False) -> dict:
    torch, nn, F = lib
    torch.manual_seed(0)
    model = _tiny_gpt(lib)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    lengths = [64, 64, 40, 17, 33, 64, 25, 48, 9, 60, 31, 12, 64, 40, 55, 21, 38, 44, 29, 50, 13, 19, 58, 36]
    if quick:
        lengths = lengths[:10]

    def train_step(idx, tgt):
        logits = model(idx)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step = torch.compile(train_step) if compiled else train_step  # (lazyvic.compile: the whole step)
    t0, times = time.perf_counter(), []
    for T in lengths:
        s0 = time.perf_counter()
        idx = torch.tensor(rng.integers(0, VOCAB, (8, T)))
        tgt = torch.tensor(rng.integers(0, VOCAB, (8, T)))
        step(idx, tgt).item()
        times.append(time.perf_counter() - s0)
    return {**_steps_summary(times, time.perf_counter() - t0), "distinct_lengths": len(set(lengths))}


def _train_steps(torch, F, forward, opt, batches) -> dict:
    """A classifier's training loop over ``batches`` of (inputs, NumPy labels): ``forward(inputs)``
    gives the logits; cross-entropy, backward, the optimizer's step and ``loss.item()`` each step."""
    t0, times = time.perf_counter(), []
    for x, y in batches:
        s0 = time.perf_counter()
        loss = F.cross_entropy(forward(x), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - s0)
    return _steps_summary(times, time.perf_counter() - t0)


def run_cnn_batches(lib, quick: bool) -> dict:
    torch, nn, F = lib
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32), nn.Conv2d(32, 64, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    sizes = [int(n) for n in rng.integers(8, 41, 12 if quick else 30)]
    batches = [(rng.standard_normal((n, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, n)) for n in sizes]
    return {**_train_steps(torch, F, lambda x: net(torch.tensor(x)), opt, batches), "distinct_sizes": len(set(sizes))}


def run_image_sizes(lib, quick: bool) -> dict:
    torch, nn, F = lib
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 5),
    )  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    sizes = [(int(h), int(w)) for h, w in rng.integers(48, 97, (8 if quick else 20, 2))]
    batches = [(rng.standard_normal((4, 3, h, w)).astype(np.float32), rng.integers(0, 5, 4)) for h, w in sizes]
    return {**_train_steps(torch, F, lambda x: net(torch.tensor(x)), opt, batches), "distinct_sizes": len(set(sizes))}


def run_packed_lstm(lib, quick: bool) -> dict:
    torch, nn, F = lib
    pack_sequence = torch.nn.utils.rnn.pack_sequence
    torch.manual_seed(0)
    lstm, head = nn.LSTM(32, 128, 2, bidirectional=True), nn.Linear(256, 5)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    rng = np.random.default_rng(0)
    steps = 12 if quick else 40
    batches = []
    for _ in range(steps):
        lens = rng.integers(5, 36, 16)
        batches.append(([rng.standard_normal((n, 32)).astype(np.float32) for n in lens], rng.integers(0, 5, 16)))

    def forward(seqs):
        _, (h, _) = lstm(pack_sequence([torch.tensor(a) for a in seqs], enforce_sorted=False))
        return head(torch.cat([h[-2], h[-1]], 1))

    return _train_steps(torch, F, forward, opt, batches)


# Cases also run through lazyvic.compile (the whole training step captured), warm.
COMPILED_CASES = ("moving_slice", "growing_context", "varlen_train")
RUNNERS = {
    "moving_slice": run_moving_slice,
    "growing_context": run_growing_context,
    "generate": run_generate,
    "varlen_train": run_varlen_train,
    "cnn_batches": run_cnn_batches,
    "image_sizes": run_image_sizes,
    "packed_lstm": run_packed_lstm,
}


# ------------------------------------------------------------------------------ children
def child(case: str, runtime: str, quick: bool) -> dict:
    if runtime == "torch":
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
        lib = (torch, nn, F)
    else:
        import lazyvic as torch
        import lazyvic.nn as nn
        import lazyvic.nn.functional as F

        lib = (torch, nn, F)
        torch.metrics.reset()
    rec = RUNNERS[case](lib, quick, compiled=True) if runtime == "lazyvic_compile" else RUNNERS[case](lib, quick)
    if runtime != "torch":
        snap = torch.metrics.snapshot()
        rec["lazyvic"] = {
            k: snap[k]
            for k in (
                "traces",
                "cache_hits",
                "cache_misses",
                "family_hits",
                "plans_compiled",
                "symbolic_plans_compiled",
                "kernels_compiled",
                "kernels_loaded",
                "compile_seconds",
                "interpreted_runs",
                "compiled_runs",
                "capture_replays",
                "capture_symbolic_replays",
                "capture_fallbacks",
            )
        }
    return rec


def run_child(case, runtime, quick, cache_dir) -> dict:
    env = dict(os.environ, LAZYVIC_CACHE_DIR=cache_dir, NUMBA_CACHE_DIR=os.path.join(cache_dir, "numba"))
    out = tempfile.mktemp(suffix=".json")
    cmd = [sys.executable, __file__, "--child", case, runtime, "--child-out", out] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(Path(out).read_text())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", choices=CASES)
    ap.add_argument("--json", default=str(HERE / "results" / "dynamic_shapes.json"))
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        Path(args.child_out).write_text(json.dumps(child(args.child[0], args.child[1], args.quick)))
        return
    cache = tempfile.mkdtemp(prefix="lazyvic-dyn-")
    results = {}
    for case in args.only or CASES:
        row = {"lazyvic_cold": run_child(case, "lazyvic", args.quick, cache)}
        row["lazyvic_warm"] = run_child(case, "lazyvic", args.quick, cache)  # kernels on disk now
        if case in COMPILED_CASES:  # twice: the first compiles the captured plans' own kernels
            run_child(case, "lazyvic_compile", args.quick, cache)
            row["lazyvic_compile"] = run_child(case, "lazyvic_compile", args.quick, cache)
        if not args.no_torch:
            row["torch"] = run_child(case, "torch", args.quick, cache)
        results[case] = row
        _print_row(case, row)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.json}")


def _rate(rec: dict) -> tuple:
    for key in ("steady_tokens_per_s", "tokens_per_s", "steady_steps_per_s", "steps_per_s"):
        if key in rec:
            return key, rec[key]
    return None, None


def _print_row(case: str, row: dict) -> None:
    print(f"# {case}")
    torch_rec = row.get("torch", {})
    for name, rec in row.items():
        if "error" in rec:
            print(f"  {name:13s} ERROR {rec['error'][-300:]}")
            continue
        key, rate = _rate(rec)
        extra = ""
        if "lazyvic" in rec:
            c = rec["lazyvic"]
            extra = (
                f"  misses {c['cache_misses']}, symbolic plans {c['symbolic_plans_compiled']}, family hits "
                f"{c['family_hits']}, compiled runs {c['compiled_runs']}, compile {c['compile_seconds']:.1f} s, "
                f"kernels compiled {c['kernels_compiled']}"
            )
            if c.get("capture_replays"):
                extra += f", replays {c['capture_replays']} ({c['capture_symbolic_replays']} symbolic)"
        ratio = ""
        if name != "torch" and torch_rec and "error" not in torch_rec:
            ratio = f"  total time ratio {torch_rec['total_s'] / rec['total_s']:.2f}x"
            _, trate = _rate(torch_rec)
            if rate and trate:
                ratio += f", {key} ratio {rate / trate:.2f}x"
        steady = f"  to steady {rec['to_steady_s']:5.2f} s" if "to_steady_s" in rec else ""
        if "first_s" in rec:
            steady = f"  first {rec['first_s']:5.2f} s, second {rec['second_s']:5.2f} s"
        print(f"  {name:13s} total {rec['total_s']:7.2f} s{steady}  {key} {rate:9.1f}{ratio}{extra}")


if __name__ == "__main__":
    main()
