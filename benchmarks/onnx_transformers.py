#!/usr/bin/env python
"""Imported transformers: a BERT-style encoder and a GPT-2-style decoder exported by PyTorch
to ONNX, run by lazyvic's importer through ``lazyvic.compile``, by onnxruntime on the same
file and by PyTorch eager on the original module; CPU, batch 1 and 8, quiet and with one core
busy, each runtime in its own fresh process, ms per call and ratios.

    python benchmarks/onnx_transformers.py [--quick] [--only bert|gpt ...] [--batch N ...]
                                           [--reps N] [--iters N] [--threads N] [--no-load]
                                           [--max-wait S] [--json PATH] [--keep DIR]

Models (float32, sequence length 128, int64 token ids drawn with NumPy, no attention mask),
built in PyTorch from fixed seeds and exported by PyTorch's TorchScript exporter
(``torch.onnx.export(..., dynamo=False, opset_version=17)``, batch axis dynamic) into a
temporary folder:

- ``bert``: benchmarks/_bert.py's encoder (``bert_model("torch", cfg)``, Hugging Face's
  layout, post-norm, exact GELU) with hidden 256, 4 layers, 4 heads, intermediate 1024, vocab
  30522, its seeded NumPy weights (``init_state``); output the last hidden state (N, 128, 256).
- ``gpt``: a nanoGPT-style causal decoder written below (the layout of benchmarks/tiny_gpt.py's
  twin: token + position embeddings, pre-norm blocks with a fused ``c_attn`` and
  ``scaled_dot_product_attention(is_causal=True)``, exact-GELU MLP, final LayerNorm, untied
  ``lm_head`` without bias) with d_model 256, 4 layers, 4 heads, block 128, GPT-2's vocabulary
  of 50257; GPT-2's initialization drawn from ``torch.manual_seed(0)``, with biases and
  LayerNorm parameters drawn too (not 0 and 1) so that the output check sees every parameter;
  output the logits (N, 128, 50257).

Runtimes, each in a fresh process:

- ``lazyvic``: ``lazyvic.compile(lazyvic.onnx.load(path).eval())`` called under
  ``lazyvic.no_grad()`` (with parameters requiring grad, a grad-mode call would not replay);
  a call ends with ``.numpy()`` of the output. The first calls record, interpret and compile
  the plan; they are timed apart (``onnx.load``, warm-up to the first compiled replay and
  ``lazyvic.metrics``' compile seconds), not in ms per call.
- ``onnxruntime``: the same file, CPU provider, ``intra_op_num_threads = --threads`` (2),
  ``inter_op_num_threads = 1``, sequential, its default graph optimizations (all levels).
- ``torch``: the module that was exported, eager, ``torch.set_num_threads(--threads)``,
  ``torch.inference_mode()``.

Every process checks its output after its warm-up against onnxruntime's, computed once by the
export process, and the table gives the largest absolute difference.

Method (as benchmarks/resnet18.py and captured_steps.py): the parent starts no runtime; it
launches itself once per (model, batch, load, repetition, runtime), runtimes interleaved, and
reads back a JSON record. In the quiet rows each child starts once other processes use less
than 0.3 cores (or after --max-wait); in the loaded rows a busy Python process
(``_common.busy_process``) spins on one core during the whole phase. Each child: warm-up (3
calls; lazyvic goes on, up to 12 calls, until a call is a compiled replay that neither
interprets nor compiles), then timed calls (at least 5 and 1 s; up to --iters calls or 20 s);
its time is the median call. Rows give the median over processes (spread min..max). Ratios:
``lazyvic/ORT`` and ``lazyvic/torch`` are speeds, t_other / t_lazyvic (above 1: lazyvic is
faster); ``loaded/quiet`` is t_quiet / t_loaded of one runtime (1: unaffected by the busy
core; 0.5: twice as slow). Thread counts: ``OMP_NUM_THREADS``, ``NUMBA_NUM_THREADS`` and
``OPENBLAS_NUM_THREADS`` are --threads in every child. lazyvic's caches
(``LAZYVIC_CACHE_DIR``, ``NUMBA_CACHE_DIR``) live in one temporary directory per run, so the
first lazyvic process of a model compiles from empty caches and later ones find its kernels.

This file is a benchmark harness, not a test: lazyvic itself never imports torch.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (ROOT, HERE):  # benchmark the checkout, installed or not; _bert.py and _common.py beside this file
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from _bert import bert_model, init_state, input_ids, state_shapes  # noqa: E402 - NumPy only at import
from _common import (  # noqa: E402
    QUIET_CORES,
    busy_process,
    cpu_sample,
    loadavg,
    other_cores,
    rate_cell,
    run_child_process,
    source_fingerprint,
    wait_for_quiet,
    write_json,
)
from _common import counter_delta as _delta  # noqa: E402

MODELS = ("bert", "gpt")
RUNTIMES = ("lazyvic", "onnxruntime", "torch")
LOADS = ("quiet", "one core busy")
SEED = 0
SEQ = 128
BERT = dict(vocab=30522, hidden=256, layers=4, heads=4, intermediate=1024, max_positions=512, type_vocab=2, eps=1e-12)
GPT = dict(vocab_size=50257, d_model=256, n_layer=4, n_head=4, block_size=SEQ)
OUTPUTS = {"bert": "last_hidden_state", "gpt": "logits"}
CHILD_TIMEOUT_S = 900
WARMUP, MAX_WARMUP = 3, 12  # warm-up calls; lazyvic goes on until a call is a compiled replay
MIN_CALLS = 5


# ----------------------------------------------------------------- models and inputs
def tokens(model: str, batch: int) -> np.ndarray:
    """(batch, SEQ) int64 token ids, uniform over the model's vocabulary."""
    if model == "bert":
        return input_ids(BERT, batch, SEQ, seed=SEED + 1)
    return np.random.default_rng(SEED + 100 + batch).integers(0, GPT["vocab_size"], (batch, SEQ), dtype=np.int64)


def n_params(model: str) -> int:
    if model == "bert":
        return sum(math.prod(s) for _, s in state_shapes(BERT))
    V, d, L, T = GPT["vocab_size"], GPT["d_model"], GPT["n_layer"], GPT["block_size"]
    return V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d + V * d


def torch_gpt():
    """The nanoGPT-style decoder in PyTorch (benchmarks/tiny_gpt.py's layout), seeded weights."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self, d, n_head):
            super().__init__()
            self.n_head = n_head
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.c_fc = nn.Linear(d, 4 * d)
            self.gelu = nn.GELU()  # exact (erf)
            self.c_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, d, n_head):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d)
            self.attn = CausalSelfAttention(d, n_head)
            self.ln_2 = nn.LayerNorm(d)
            self.mlp = MLP(d)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2(nn.Module):
        def __init__(self, vocab_size, d_model, n_layer, n_head, block_size):
            super().__init__()
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(vocab_size, d_model),
                    wpe=nn.Embedding(block_size, d_model),
                    h=nn.ModuleList([Block(d_model, n_head) for _ in range(n_layer)]),
                    ln_f=nn.LayerNorm(d_model),
                )
            )
            self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

        def forward(self, idx):
            tr = self.transformer
            pos = torch.arange(idx.shape[1], dtype=torch.long, device=idx.device)
            x = tr.wte(idx) + tr.wpe(pos)
            for block in tr.h:
                x = block(x)
            return self.lm_head(tr.ln_f(x))

    torch.manual_seed(SEED)
    model = GPT2(**GPT)
    with torch.no_grad():
        for name, p in model.named_parameters():  # GPT-2's initialization; biases and norms drawn too
            if ".ln_" in name:
                p.copy_(1.0 + 0.05 * torch.randn_like(p) if name.endswith(".weight") else 0.02 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.02)
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * GPT["n_layer"]))
            else:
                p.normal_(0.0, 0.02)
    return model.eval()


def torch_model(model: str):
    import torch

    if model == "gpt":
        return torch_gpt()
    m = bert_model("torch", BERT)
    m.load_state_dict({k: torch.from_numpy(v) for k, v in init_state(BERT, seed=SEED).items()})
    return m.eval()


def ort_session(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ref_path(workdir: str, model: str, batch: int) -> Path:
    return Path(workdir) / f"{model}_onnxruntime_b{batch}.npy"


def child_export(spec: dict, rec: dict) -> None:
    """Export both models to ONNX, and store onnxruntime's outputs (the reference of every check)."""
    import warnings

    import onnx
    import torch

    torch.set_num_threads(spec["threads"])
    rec["torch"], rec["onnx"] = torch.__version__, onnx.__version__
    for model in spec["models"]:
        path = str(Path(spec["dir"]) / f"{model}.onnx")
        m = torch_model(model)
        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(
                m,
                (torch.from_numpy(tokens(model, 1)),),
                path,
                dynamo=False,
                opset_version=17,
                input_names=["input_ids"],
                output_names=[OUTPUTS[model]],
                dynamic_axes={"input_ids": {0: "batch"}, OUTPUTS[model]: {0: "batch"}},
            )
        ops: dict = {}
        for n in onnx.load(path).graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        info = {
            "onnx": path,
            "export_s": time.perf_counter() - t0,
            "bytes": os.path.getsize(path),
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
        }
        sess = ort_session(path, spec["threads"])
        for batch in spec["batches"]:
            x = tokens(model, batch)
            ref = sess.run(None, {"input_ids": x})[0]
            np.save(ref_path(spec["dir"], model, batch), ref)
            with torch.inference_mode():
                y = m(torch.from_numpy(x)).numpy()
            info[f"torch_vs_onnxruntime_b{batch}"] = float(np.abs(y - ref).max())
        rec[model] = info


def _time_calls(run, iters: int, min_s: float, max_s: float) -> list:
    """Per-call times: at least MIN_CALLS calls and ``min_s``; then up to ``iters`` calls or ``max_s``."""
    times, t_start = [], time.perf_counter()
    while True:
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        n, elapsed = len(times), t1 - t_start
        if n >= MIN_CALLS and elapsed >= min_s and (n >= iters or elapsed >= max_s):
            return times
        if n >= 20 * max(iters, MIN_CALLS):
            return times


def child_run(spec: dict, rec: dict) -> None:
    rt, model, batch, threads = spec["runtime"], spec["model"], spec["batch"], spec["threads"]
    x_np = tokens(model, batch)
    counters = None
    t0 = time.perf_counter()
    if rt == "lazyvic":
        import lazyvic as lv

        rec["import_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        module = lv.onnx.load(spec["onnx"]).eval()
        rec["load_s"] = time.perf_counter() - t0
        compiled = lv.compile(module)
        x = lv.tensor(x_np)

        def run():
            with lv.no_grad():
                y = compiled(x)
                return (y[0] if isinstance(y, (list, tuple)) else y).numpy()

        def counters():
            return dict(lv.metrics.snapshot())
    elif rt == "onnxruntime":
        import onnxruntime as ort

        rec["import_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        sess = ort_session(spec["onnx"], threads)
        rec["session_s"] = time.perf_counter() - t0
        rec["versions"] = {"onnxruntime": ort.__version__}

        def run():
            return sess.run(None, {"input_ids": x_np})[0]
    else:
        import torch

        rec["import_s"] = time.perf_counter() - t0
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        m = torch_model(model)
        x = torch.from_numpy(x_np)
        rec["model_s"] = time.perf_counter() - t0
        rec["versions"] = {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}

        def run():
            with torch.inference_mode():
                return m(x).numpy()

    # Warm-up: lazyvic records (and interprets) the first call, compiles at the second, then
    # replays; it goes on while a call still interprets or compiles.
    warm, per_call = [], []
    c_prev = c0 = counters() if counters else None
    while True:
        t0 = time.perf_counter()
        run()
        warm.append(time.perf_counter() - t0)
        settled = True
        if counters:
            c = counters()
            d, c_prev = _delta(c, c_prev), c
            per_call.append(d)
            settled = (
                d.get("capture_replays", 0) >= 1
                and d.get("compiled_runs", 0) >= 1
                and not any(
                    d.get(k) for k in ("interpreted_runs", "plans_compiled", "kernels_compiled", "cache_misses")
                )
            )
        if (len(warm) >= WARMUP and settled) or len(warm) >= MAX_WARMUP:
            break
    rec["warmup_call_s"] = warm
    rec["warmup_s"] = sum(warm)
    if counters:
        c1 = counters()
        rec["warmup_counters"] = _delta(c1, c0)
        rec["warmup_per_call"] = per_call
        rec["settled"] = settled
    y = run()
    ref = np.load(ref_path(spec["dir"], model, batch))
    rec["max_abs_diff_vs_onnxruntime"] = float(np.abs(np.asarray(y) - ref).max())
    rec["max_abs_ref"] = float(np.abs(ref).max())
    del y, ref
    c1 = counters() if counters else None
    a = cpu_sample(False)
    times = _time_calls(run, spec["iters"], spec["min_s"], spec["max_s"])
    rec["other_cores_timed"] = other_cores(a, cpu_sample(False))
    rec["call_s"] = times
    rec["ms"] = statistics.median(times) * 1e3
    rec["ms_min"] = min(times) * 1e3
    if counters:
        tc = _delta(counters(), c1)
        rec["timed_counters"] = tc
        n = len(times)
        ok = tc.get("capture_replays", 0) == n and tc.get("compiled_runs", 0) == n and not tc.get("fallbacks")
        rec["lazyvic_mode"] = "compiled replay" if ok else f"MIXED: {tc}"
        import numba

        from lazyvic.runtime.config import config

        rec["versions"] = {
            "numba": numba.__version__,
            "numba_threads": numba.config.NUMBA_NUM_THREADS,
            "lazyvic_compile_mode": config.compile,
            "lazyvic_cache_dir": str(config.cache_dir),
        }


def child_main(spec: dict) -> dict:
    rec = {"spec": spec, "loadavg_start": loadavg(), "pid": os.getpid()}
    if spec["case"] == "export":
        child_export(spec, rec)
    else:
        child_run(spec, rec)
    rec["loadavg_end"] = loadavg()
    return rec


# ------------------------------------------------------------------------ parent
def run_child(spec: dict, env_extra: dict, max_wait_s: float) -> dict:
    waited, other_before = wait_for_quiet(max_wait_s, descendants=False) if max_wait_s > 0 else (0.0, None)
    before = source_fingerprint()
    t0 = time.perf_counter()
    rec, _, _ = run_child_process(Path(__file__).resolve(), spec, env_extra, CHILD_TIMEOUT_S)
    rec["process_wall_s"] = time.perf_counter() - t0
    rec["quiet_wait_s"], rec["other_cores_before"] = round(waited, 1), other_before
    after = source_fingerprint()
    rec["sources"] = before if before == after else {"before": before, "after": after}
    return rec


def _label(spec: dict) -> str:
    return f"{spec['model']} b{spec['batch']} {spec['load']}"


def _progress(rec: dict) -> None:
    spec = rec["spec"]
    if "error" in rec:
        msg = "ERROR " + rec["error"] + "\n" + rec.get("stderr_tail", "")[-1500:]
    else:
        oc = rec.get("other_cores_timed")
        extra = f"; warm-up {rec['warmup_s']:.1f} s" if spec["runtime"] == "lazyvic" else ""
        msg = (
            f"{rec['ms']:9.2f} ms/call ({len(rec['call_s'])} calls; max|diff vs ORT| "
            f"{rec['max_abs_diff_vs_onnxruntime']:.1e}{extra}; other cores {'-' if oc is None else f'{oc:.2f}'}; "
            f"process {rec['process_wall_s']:.1f} s; waited {rec['quiet_wait_s']:.0f} s)"
        )
    print(f"  {_label(spec) + ' / ' + spec['runtime']:<36} {msg}", flush=True)


def _ratio(x) -> str:
    return "-" if x is None else (f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x")


def summarize(recs: list, models: list, batches: list, loads: list) -> list:
    rows = []
    for model in models:
        for batch in batches:
            for load in loads:
                mine = [
                    r
                    for r in recs
                    if r["spec"].get("model") == model and r["spec"].get("batch") == batch and r["spec"]["load"] == load
                ]
                if not mine:
                    continue
                row = {"model": model, "batch": batch, "load": load}
                for rt in RUNTIMES:
                    ok = [r for r in mine if r["spec"]["runtime"] == rt and "error" not in r]
                    errs = [r["error"] for r in mine if r["spec"]["runtime"] == rt and "error" in r]
                    if ok:
                        ms = [r["ms"] for r in ok]
                        d = {
                            "ms": statistics.median(ms),
                            "min": min(ms),
                            "max": max(ms),
                            "n": len(ms),
                            "max_abs_diff_vs_onnxruntime": max(r["max_abs_diff_vs_onnxruntime"] for r in ok),
                            "max_abs_ref": ok[0]["max_abs_ref"],
                            "other_cores": [r.get("other_cores_timed") for r in ok],
                        }
                        if rt == "lazyvic":
                            d["load_s"] = [r["load_s"] for r in ok]
                            d["warmup_s"] = [r["warmup_s"] for r in ok]
                            d["compile_s"] = [r["warmup_counters"].get("compile_seconds", 0.0) for r in ok]
                            d["kernels_compiled"] = [r["warmup_counters"].get("kernels_compiled", 0) for r in ok]
                            d["kernels_loaded"] = [r["warmup_counters"].get("kernels_loaded", 0) for r in ok]
                            d["modes"] = sorted({r["lazyvic_mode"] for r in ok})
                        if rt == "onnxruntime":
                            d["session_s"] = [r["session_s"] for r in ok]
                        row[rt] = d
                    elif errs:
                        row[rt] = {"error": errs[0]}
                lv = row.get("lazyvic", {}).get("ms")
                for rt in ("onnxruntime", "torch"):
                    other = row.get(rt, {}).get("ms")
                    row[f"lazyvic_vs_{rt}"] = other / lv if lv and other else None
                rows.append(row)
    for row in rows:  # loaded / quiet: the speed of each runtime with a core busy over its quiet speed
        if row["load"] == "quiet":
            continue
        quiet = [q for q in rows if (q["model"], q["batch"], q["load"]) == (row["model"], row["batch"], "quiet")]
        for rt in RUNTIMES:
            t_q, t = (quiet[0] if quiet else {}).get(rt, {}).get("ms"), row.get(rt, {}).get("ms")
            row[f"{rt}_loaded_vs_quiet"] = t_q / t if t_q and t else None
    return rows


def print_table(headers: list, rows: list) -> None:
    """First column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    for r in [headers, *rows]:
        cells = [f"{r[0]:<{widths[0]}}"] + [f"{r[i]:>{widths[i]}}" for i in range(1, len(headers))]
        print("  ".join(cells).rstrip())


def _first_rest(xs: list, fmt: str) -> str:
    if not xs:
        return "-"
    rest = f" / {statistics.median(xs[1:]):{fmt}}" if len(xs) > 1 else ""
    return f"{xs[0]:{fmt}}{rest}"


def print_summary(rows: list, loads: list, reps: int) -> None:
    def cores(row):
        xs = [x for rt in RUNTIMES for x in row.get(rt, {}).get("other_cores", []) if x is not None]
        return f"{statistics.median(xs):.2f}/{max(xs):.2f}" if xs else "-"

    def diff(row):
        d = row.get("lazyvic", {})
        if "max_abs_diff_vs_onnxruntime" not in d:
            return "-"
        bad = d["max_abs_diff_vs_onnxruntime"] > 1e-3 * max(1.0, d["max_abs_ref"])
        return f"{d['max_abs_diff_vs_onnxruntime']:.1e}" + (" MISMATCH" if bad else "")

    print()
    print(f"ms per call, median over {reps} process(es) (min..max); lazyvic/X = t_X / t_lazyvic (>1: lazyvic faster)")
    headers = [
        "model, batch, load",
        "lazyvic ms",
        "onnxruntime ms",
        "torch ms",
        "lazyvic/ORT",
        "lazyvic/torch",
        "max|lazyvic-ORT|",
        "other cores med/max",
    ]
    table = [
        [
            f"{r['model']} b{r['batch']} {r['load']}",
            rate_cell(r.get("lazyvic"), "ms", ".2f", ".1f"),
            rate_cell(r.get("onnxruntime"), "ms", ".2f", ".1f"),
            rate_cell(r.get("torch"), "ms", ".2f", ".1f"),
            _ratio(r["lazyvic_vs_onnxruntime"]),
            _ratio(r["lazyvic_vs_torch"]),
            diff(r),
            cores(r),
        ]
        for r in rows
    ]
    print_table(headers, table)

    loaded = [r for r in rows if r["load"] != "quiet"]
    if loaded:
        print()
        print("loaded / quiet: speed with one core busy over speed on the quiet machine (1: unaffected)")
        print_table(
            ["model, batch", *RUNTIMES],
            [
                [f"{r['model']} b{r['batch']}", *[_ratio(r.get(f"{rt}_loaded_vs_quiet")) for rt in RUNTIMES]]
                for r in loaded
            ],
        )

    print()
    print("first calls, excluded above (first process of the row / median of the others), seconds")
    headers = [
        "model, batch, load",
        "lazyvic onnx.load",
        "lazyvic warm-up",
        "of which compile",
        "kernels compiled",
        "kernels loaded",
        "ORT session",
    ]
    table = []
    for r in rows:
        lv, ort = r.get("lazyvic", {}), r.get("onnxruntime", {})
        table.append(
            [
                f"{r['model']} b{r['batch']} {r['load']}",
                _first_rest(lv.get("load_s", []), ".2f"),
                _first_rest(lv.get("warmup_s", []), ".2f"),
                _first_rest(lv.get("compile_s", []), ".2f"),
                _first_rest(lv.get("kernels_compiled", []), "g"),
                _first_rest(lv.get("kernels_loaded", []), "g"),
                _first_rest(ort.get("session_s", []), ".2f"),
            ]
        )
    print_table(headers, table)
    for r in rows:
        for rt in RUNTIMES:
            if "error" in r.get(rt, {}):
                print(f"  {r['model']} b{r['batch']} {r['load']} / {rt}: {r[rt]['error']}")
        modes = r.get("lazyvic", {}).get("modes", [])
        if modes and modes != ["compiled replay"]:
            print(f"  {r['model']} b{r['batch']} {r['load']} / lazyvic timed calls: {'; '.join(modes)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a smoke test: 1 process per row, few calls, no quiet wait")
    ap.add_argument("--only", nargs="+", choices=MODELS, metavar="MODEL", help="models to run: bert gpt")
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 8], help="batch sizes (default 1 8)")
    ap.add_argument("--reps", type=int, help="processes per runtime and row (default 3; quick 1)")
    ap.add_argument("--iters", type=int, help="timed calls per process, at most (default 30; quick 5)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every runtime (default 2)")
    ap.add_argument("--no-load", action="store_true", help="quiet rows only (no busy core)")
    ap.add_argument(
        "--max-wait",
        type=float,
        metavar="S",
        help=f"quiet rows: wait up to S s for other processes to use < {QUIET_CORES} cores (default 60; quick 0)",
    )
    ap.add_argument(
        "--json",
        type=Path,
        default=HERE / "results" / "onnx_transformers.json",
        metavar="PATH",
        help="results file (default benchmarks/results/onnx_transformers.json)",
    )
    ap.add_argument("--keep", type=Path, metavar="DIR", help="write the ONNX files and caches here and keep them")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rec = child_main(json.loads(args.child))
        Path(args.child_out).write_text(json.dumps(rec, default=float))
        return 0

    models = [m for m in MODELS if not args.only or m in args.only]
    batches = sorted(set(args.batch))
    loads = ["quiet"] if args.no_load else list(LOADS)
    reps = args.reps or (1 if args.quick else 3)
    iters = args.iters or (5 if args.quick else 30)
    min_s, max_s = (0.2, 3.0) if args.quick else (1.0, 20.0)
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 60.0)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="lazyvic-onnx-transformers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env_extra = {
        "OMP_NUM_THREADS": str(args.threads),
        "NUMBA_NUM_THREADS": str(args.threads),
        "OPENBLAS_NUM_THREADS": str(args.threads),
        # lazyvic's kernels and Numba's cache: empty at the start of the run, shared by its children.
        "LAZYVIC_CACHE_DIR": str(workdir / "cache" / "lazyvic"),
        "NUMBA_CACHE_DIR": str(workdir / "cache" / "numba"),
    }
    sources = source_fingerprint()
    env = {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "threads": args.threads,
        "loadavg_1m_start": loadavg(),
        "sources_start": sources,
    }
    print(
        f"onnx_transformers benchmark ({'quick' if args.quick else 'full'}): {platform.machine()}, "
        f"{os.cpu_count()} cores, {args.threads} threads per runtime, {reps} process(es) per runtime and row, "
        f"load average {env['loadavg_1m_start']}, {env['date']}",
        flush=True,
    )
    print(
        f"  lazyvic sources: git HEAD {sources['git_head']}, sha1 of lazyvic/**/*.py {sources['lazyvic_sources_sha1']}"
    )
    for m in models:
        cfg = BERT if m == "bert" else GPT
        print(f"  {m}: {n_params(m):,} parameters, sequence {SEQ}, {cfg}")
    t_run = time.perf_counter()
    payload = {"env": env, "models": {"bert": BERT, "gpt": GPT}, "quick": args.quick, "records": []}
    try:
        exported = run_child(
            {
                "case": "export",
                "load": "quiet",
                "dir": str(workdir),
                "models": models,
                "batches": batches,
                "threads": args.threads,
            },
            env_extra,
            0.0,
        )
        payload["export"] = exported
        if "error" in exported:
            print("ONNX export failed:\n" + exported.get("stderr_tail", ""))
            write_json(args.json, payload, default=str)
            return 1
        for m in models:
            e = exported[m]
            ops = ", ".join(f"{k} {v}" for k, v in e["ops"].items())
            diffs = ", ".join(f"b{b} {e[f'torch_vs_onnxruntime_b{b}']:.1e}" for b in batches)
            print(f"  exported {e['onnx']} ({e['bytes'] / 1e6:.0f} MB, {e['export_s']:.1f} s): {ops}")
            print(f"    max |torch - onnxruntime| in the export process: {diffs}", flush=True)
        recs = payload["records"]
        for load in loads:
            busy = busy_process() if load != "quiet" else None
            try:
                for model in models:
                    for batch in batches:
                        for rep in range(reps):
                            for rt in RUNTIMES:
                                spec = {
                                    "case": "run",
                                    "model": model,
                                    "batch": batch,
                                    "load": load,
                                    "rep": rep,
                                    "runtime": rt,
                                    "onnx": exported[model]["onnx"],
                                    "dir": str(workdir),
                                    "threads": args.threads,
                                    "iters": iters,
                                    "min_s": min_s,
                                    "max_s": max_s,
                                }
                                rec = run_child(spec, env_extra, max_wait if busy is None else 0.0)
                                _progress(rec)
                                recs.append(rec)
                        write_json(args.json, payload, default=str)
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = summarize(recs, models, batches, loads)
    payload["summary"] = rows
    env["loadavg_1m_end"] = loadavg()
    shas = {sources["lazyvic_sources_sha1"]}
    for r in recs:
        src = r.get("sources", {})
        shas |= {d["lazyvic_sources_sha1"] for d in (src.get("before", src), src.get("after", src)) if d}
    env["sources_changed_during_run"] = len(shas) > 1
    payload["elapsed_s"] = round(time.perf_counter() - t_run, 1)
    versions = {}
    for r in recs:
        versions.update(r.get("versions", {}))
    env["versions"] = versions
    print_summary(rows, loads, reps)
    print()
    print(
        "versions: "
        + ", ".join(f"{k} {versions[k]}" for k in ("onnxruntime", "torch", "numba") if k in versions)
        + f", onnx {exported.get('onnx', '-')}; load average start/end {env['loadavg_1m_start']}/{env['loadavg_1m_end']}"
    )
    if env["sources_changed_during_run"]:
        print("** WARNING: lazyvic's sources changed during the run; rows may mix versions (see 'sources') **")
    write_json(args.json, payload, default=str)
    print(f"wrote {args.json}  ({payload['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
