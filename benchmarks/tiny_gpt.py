#!/usr/bin/env python
"""TinyGPT benchmark: training steps/s, first-step time and greedy generation,
lazyvic vs PyTorch eager vs torch.compile, each runtime in its own fresh process.

    python benchmarks/tiny_gpt.py [--quick] [--only train|generate|first-step] [--json PATH]
                                  [--steps N] [--reps N] [--dropout P] [--no-torch]

torch (OpenMP), OpenBLAS and Numba (OpenMP threading layer) each keep a thread pool
that spins after a parallel region; in one process on 2 cores they slow each other
down. So this script is a parent that launches itself once per (case, runtime,
repetition) with ``subprocess`` and collects one JSON record from each child. The
parent imports neither lazyvic nor torch. Repetitions of different runtimes are
interleaved, and the tables show the median over processes with the spread
(min..max). Ratios are ``lazyvic / this`` = ``t_this / t_lazyvic``: above 1 means
lazyvic is faster. See benchmarks/README.md.

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
from _common import (
    QUIET_CORES,
    cpu_sample,
    loadavg,
    other_cores,
    run_child_process,
    source_fingerprint,
    wait_for_quiet,
    write_json,
)
from _common import counter_delta as _delta

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # benchmark the checkout, installed or not
    sys.path.insert(0, str(ROOT))

RUNTIMES = ("lazyvic", "lazyvic.compile", "torch", "torch.compile")
TRAIN_ONLY = ("lazyvic.compile",)  # a captured training step (lazyvic.compile); not in the other cases
CASES = ("train", "first-step", "generate")
SEED = 0
N_BATCHES = 8  # random batches, cycled
GEN_TOKENS = 200
CHILD_TIMEOUT_S = 1200


# ----------------------------------------------------------------- configuration
def model_config(dropout: float) -> dict:
    """The issue's configuration (the TinyGPT constructor arguments)."""
    return dict(vocab_size=65, d_model=128, n_layer=2, n_head=4, block_size=64, dropout=dropout)


TRAIN = dict(batch=16, lr=1e-3, weight_decay=0.1, clip=1.0)


def init_weights(cfg: dict) -> dict:
    """GPT-2 initialization as ``lazyvic.models.TinyGPT`` does it, drawn from one seeded NumPy
    generator and loaded into every runtime, so all of them start from the same weights.

    Keys are the nanoGPT / TinyGPT parameter names; both runtimes load them strictly, which
    also checks that the PyTorch model below has the same parameters with the same shapes.
    """
    V, d, L, T = cfg["vocab_size"], cfg["d_model"], cfg["n_layer"], cfg["block_size"]
    shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (T, d)}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes.update(
            {
                p + "ln_1.weight": (d,),
                p + "ln_1.bias": (d,),
                p + "attn.c_attn.weight": (3 * d, d),
                p + "attn.c_attn.bias": (3 * d,),
                p + "attn.c_proj.weight": (d, d),
                p + "attn.c_proj.bias": (d,),
                p + "ln_2.weight": (d,),
                p + "ln_2.bias": (d,),
                p + "mlp.c_fc.weight": (4 * d, d),
                p + "mlp.c_fc.bias": (4 * d,),
                p + "mlp.c_proj.weight": (d, 4 * d),
                p + "mlp.c_proj.bias": (d,),
            }
        )
    shapes.update({"transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,), "lm_head.weight": (V, d)})
    rng = np.random.default_rng(SEED)
    out = {}
    for name, shape in shapes.items():
        if ".ln_" in name:
            a = np.ones(shape) if name.endswith(".weight") else np.zeros(shape)
        elif name.endswith(".bias"):
            a = np.zeros(shape)
        elif name.endswith("c_proj.weight"):
            a = rng.normal(0.0, 0.02 / math.sqrt(2 * L), shape)
        else:
            a = rng.normal(0.0, 0.02, shape)
        out[name] = a.astype(np.float32)
    return out


def token_batches(cfg: dict) -> list:
    """N_BATCHES random (x, y) int64 pairs of shape (batch, block): y is x shifted by one token."""
    rng = np.random.default_rng(SEED + 1)
    B, T, V = TRAIN["batch"], cfg["block_size"], cfg["vocab_size"]
    out = []
    for _ in range(N_BATCHES):
        seq = rng.integers(0, V, (B, T + 1), dtype=np.int64)
        out.append((np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])))
    return out


def prompt_tokens(cfg: dict) -> np.ndarray:
    return np.random.default_rng(SEED + 2).integers(0, cfg["vocab_size"], (1, 1), dtype=np.int64)


# ------------------------------------------------------------- PyTorch TinyGPT
def torch_tiny_gpt(cfg: dict):
    """The PyTorch twin of ``lazyvic.models.TinyGPT`` (nanoGPT layout, untied ``lm_head``).

    Defined in a function so that the lazyvic children never import torch.
    """
    import torch
    from torch import nn
    from torch.nn import functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self, d_model, n_head, dropout):
            super().__init__()
            self.n_head, self.dropout = n_head, dropout
            self.c_attn = nn.Linear(d_model, 3 * d_model)
            self.c_proj = nn.Linear(d_model, d_model)
            self.resid_dropout = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            H = self.n_head
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
            )
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_dropout(self.c_proj(y))

    class MLP(nn.Module):
        def __init__(self, d_model, dropout):
            super().__init__()
            self.c_fc = nn.Linear(d_model, 4 * d_model)
            self.gelu = nn.GELU()  # exact (erf), as lazyvic's nn.GELU()
            self.c_proj = nn.Linear(4 * d_model, d_model)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, d_model, n_head, dropout):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d_model)
            self.attn = CausalSelfAttention(d_model, n_head, dropout)
            self.ln_2 = nn.LayerNorm(d_model)
            self.mlp = MLP(d_model, dropout)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class TinyGPT(nn.Module):
        def __init__(self, vocab_size, d_model, n_layer, n_head, block_size, dropout):
            super().__init__()
            self.block_size = block_size
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(vocab_size, d_model),
                    wpe=nn.Embedding(block_size, d_model),
                    drop=nn.Dropout(dropout),
                    h=nn.ModuleList([Block(d_model, n_head, dropout) for _ in range(n_layer)]),
                    ln_f=nn.LayerNorm(d_model),
                )
            )
            self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

        def forward(self, idx, targets=None):
            B, T = idx.shape
            tr = self.transformer
            pos = torch.arange(T, dtype=torch.long, device=idx.device)
            x = tr.drop(tr.wte(idx) + tr.wpe(pos))
            for block in tr.h:
                x = block(x)
            logits = self.lm_head(tr.ln_f(x))
            if targets is None:
                return logits
            loss = F.cross_entropy(logits.view(B * T, logits.size(-1)), targets.view(B * T))
            return logits, loss

    return TinyGPT(**cfg)


# ------------------------------------------------------------------ runtimes
class LazyvicRuntime:
    def __init__(self, cfg: dict, captured: bool = False):
        import lazyvic as lv

        self.name = "lazyvic.compile" if captured else "lazyvic"
        self.captured = captured
        self.lv = lv
        self.model = lv.models.TinyGPT(**cfg)
        self.model.load_state_dict(init_weights(cfg))
        lv.sync(*self.model.parameters())  # nothing of the setup leaks into the first step

    def trainer(self, cfg: dict):
        lv, model = self.lv, self.model
        model.train()
        opt = lv.optim.AdamW(model.parameters(), lr=TRAIN["lr"], weight_decay=TRAIN["weight_decay"])
        data = [(lv.tensor(x), lv.tensor(y)) for x, y in token_batches(cfg)]
        clip = lv.nn.utils.clip_grad_norm_

        def train_step(x, y):
            _, loss = model(x, y)
            loss.backward()
            clip(model.parameters(), TRAIN["clip"])
            opt.step()
            opt.zero_grad()
            return loss

        # lazyvic.compile: the whole step captured, replayed from its third call without Python.
        run = lv.compile(train_step) if self.captured else train_step

        def step(i: int) -> float:
            x, y = data[i % len(data)]
            return run(x, y).item()  # the sync: forward, backward, clip and update in one trace

        return step

    def generator(self, cfg: dict):
        lv, model = self.lv, self.model
        model.eval()
        prompt = lv.tensor(prompt_tokens(cfg))
        return lambda n: model.generate(prompt, n, temperature=0.0).numpy()

    def counters(self) -> dict:
        return dict(self.lv.metrics.snapshot())

    def info(self) -> dict:
        import numba

        from lazyvic.runtime.config import config

        out = {
            "lazyvic": getattr(self.lv, "__version__", None),
            "numba": numba.__version__,
            "numba_threads": numba.config.NUMBA_NUM_THREADS,
            "lazyvic_compile_mode": config.compile,
            "lazyvic_cache_dir": str(config.cache_dir),
            "numba_cache_dir": os.environ.get("NUMBA_CACHE_DIR"),
        }
        try:
            out["numba_threading_layer"] = numba.threading_layer()
        except ValueError:  # no parallel kernel has run yet
            out["numba_threading_layer"] = None
        return out


class TorchRuntime:
    def __init__(self, cfg: dict, compiled: bool, gen_dynamic):
        import torch

        self.torch = torch
        self.compiled = compiled
        self.name = "torch.compile" if compiled else "torch"
        torch.manual_seed(SEED)  # dropout masks (only with --dropout)
        self.model = torch_tiny_gpt(cfg)
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in init_weights(cfg).items()})
        self.gen_dynamic = gen_dynamic

    def trainer(self, cfg: dict):
        torch, model = self.torch, self.model
        model.train()
        # torch.compile: forward + loss compiled (backward through AOTAutograd); clipping and
        # AdamW run eagerly.
        fwd = torch.compile(model) if self.compiled else model
        opt = torch.optim.AdamW(model.parameters(), lr=TRAIN["lr"], weight_decay=TRAIN["weight_decay"])
        data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in token_batches(cfg)]
        clip = torch.nn.utils.clip_grad_norm_

        def step(i: int) -> float:
            x, y = data[i % len(data)]
            _, loss = fwd(x, y)
            loss.backward()
            clip(model.parameters(), TRAIN["clip"])
            opt.step()
            opt.zero_grad()
            return loss.item()

        return step

    def generator(self, cfg: dict):
        torch, model = self.torch, self.model
        model.eval()
        # dynamic=None (PyTorch's default): the sequence length becomes dynamic after the
        # first recompile; --gen-dynamic true/false forces it.
        fwd = torch.compile(model, dynamic=self.gen_dynamic) if self.compiled else model
        block = cfg["block_size"]
        prompt = torch.from_numpy(prompt_tokens(cfg))

        @torch.no_grad()
        def generate(n: int) -> np.ndarray:
            idx = prompt
            for _ in range(n):  # nanoGPT's loop: crop to the context, take the last position
                logits = fwd(idx[:, -block:])
                nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
                idx = torch.cat((idx, nxt), dim=1)
            return idx.numpy()

        return generate

    def counters(self) -> dict:
        if not self.compiled:
            return {}
        from torch._dynamo.utils import counters

        return {f"dynamo_{k}": v for k, v in counters["stats"].items()}

    def info(self) -> dict:
        torch = self.torch
        out = {
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
        }
        if self.compiled:
            import torch._functorch.config as fconfig
            import torch._inductor.config as iconfig

            out["inductor_cache_dir"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            out["inductor_fx_graph_cache"] = iconfig.fx_graph_cache
            out["aot_autograd_cache"] = getattr(fconfig, "enable_autograd_cache", None)
        return out


def make_runtime(name: str, cfg: dict, gen_dynamic):
    if name in ("lazyvic", "lazyvic.compile"):
        return LazyvicRuntime(cfg, captured=name == "lazyvic.compile")
    return TorchRuntime(cfg, compiled=name == "torch.compile", gen_dynamic=gen_dynamic)


# ---------------------------------------------------------------------- child
def _stats(times: list) -> dict:
    s = sorted(times)

    def pct(q):
        return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]

    return {
        "median_s": statistics.median(s),
        "mean_s": statistics.fmean(s),
        "min_s": s[0],
        "max_s": s[-1],
        "p10_s": pct(0.1),
        "p90_s": pct(0.9),
    }


def child_main(spec: dict) -> dict:
    """One measurement in this (fresh) process; returns the JSON record."""
    t_start = time.perf_counter()
    rec = {"spec": spec, "loadavg_start": loadavg(), "pid": os.getpid()}
    cfg = model_config(spec["dropout"])
    t0 = time.perf_counter()
    if spec["runtime"] == "lazyvic":
        import lazyvic  # noqa: F401 - timed apart from the model setup
    else:
        import torch  # noqa: F401
    rec["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rt = make_runtime(spec["runtime"], cfg, spec.get("gen_dynamic"))
    rec["model_setup_s"] = time.perf_counter() - t0
    if spec["case"] == "generate":
        _child_generate(rt, cfg, spec, rec)
    else:
        _child_train(rt, cfg, spec, rec)
    rec["info"] = rt.info()
    rec["child_total_s"] = time.perf_counter() - t_start
    rec["loadavg_end"] = loadavg()
    return rec


def _child_train(rt, cfg: dict, spec: dict, rec: dict) -> None:
    t0 = time.perf_counter()
    step = rt.trainer(cfg)
    rec["trainer_setup_s"] = time.perf_counter() - t0
    n_warm, n_timed = spec["warmup"], spec["steps"]
    times, losses, per_step = [], [], []
    c_first = c_prev = rt.counters()
    cpu = [cpu_sample()]  # at the start, after the warm-up, at the end
    for i in range(n_warm + n_timed):
        t0 = time.perf_counter()
        losses.append(step(i))
        times.append(time.perf_counter() - t0)
        c = rt.counters()
        per_step.append(_delta(c, c_prev))
        c_prev = c
        if i + 1 == n_warm:
            c_mid = c
            cpu.append(cpu_sample())
    if n_warm == 0:
        c_mid = c_first
        cpu.append(cpu[0])
    cpu.append(cpu_sample())
    rec["other_cores_warmup"] = other_cores(cpu[0], cpu[1]) if n_warm else None
    rec["other_cores_timed"] = other_cores(cpu[1], cpu[2])
    rec["step_times_s"] = times
    rec["losses"] = losses
    rec["per_step_counters"] = per_step
    rec["warmup_counters"] = _delta(c_mid, c_first)
    rec["timed_counters"] = _delta(c_prev, c_mid)
    if n_timed:
        timed = times[n_warm:]
        rec["timed"] = _stats(timed)
        rec["steps_per_s"] = 1.0 / rec["timed"]["median_s"]
        rec["steps_per_s_mean"] = n_timed / sum(timed)
    if rt.name.startswith("lazyvic") and n_timed:
        tc = rec["timed_counters"]
        rec["lazyvic_mode"] = _lazyvic_mode(tc, n_timed)


def _lazyvic_mode(c: dict, runs: int) -> str:
    traces = c.get("traces", 0)
    comp, interp = c.get("compiled_runs", 0), c.get("interpreted_runs", 0)
    if traces == 0:
        return "no trace"
    mode = "compiled" if comp == traces else "interpreted" if interp == traces else f"mixed {comp}c/{interp}i"
    if c.get("fallbacks"):
        mode += ", fallbacks"
    return mode + f", {traces / runs:g} traces/run"


def _child_generate(rt, cfg: dict, spec: dict, rec: dict) -> None:
    gen = rt.generator(cfg)
    n = spec["tokens"]
    c0 = rt.counters()
    cpu0 = cpu_sample()
    t0 = time.perf_counter()
    first = gen(n)  # warm-up: lazyvic interprets, then compiles its one plan; torch.compile compiles
    rec["first_generation_s"] = time.perf_counter() - t0
    c1 = rt.counters()
    cpu1 = cpu_sample()
    times = []
    for _ in range(spec["gens"]):
        t0 = time.perf_counter()
        out = gen(n)
        times.append(time.perf_counter() - t0)
    c2 = rt.counters()
    rec["other_cores_warmup"] = other_cores(cpu0, cpu1)
    rec["other_cores_timed"] = other_cores(cpu1, cpu_sample())
    rec["tokens"] = first[0].tolist()
    rec["tokens_stable"] = bool(np.array_equal(first, out))
    rec["generation_times_s"] = times
    rec["timed"] = _stats(times)
    rec["tokens_per_s"] = n / rec["timed"]["median_s"]
    rec["warmup_counters"] = _delta(c1, c0)
    rec["timed_counters"] = _delta(c2, c1)
    if rt.name == "lazyvic":
        rec["lazyvic_mode"] = _lazyvic_mode(rec["timed_counters"], spec["gens"] * n)


# --------------------------------------------------------------------- parent
class Plan:
    """What the parent runs: counts per case, from --quick / --steps / --reps."""

    def __init__(self, args):
        q = args.quick
        self.warmup = 5  # lazyvic: interpret, compile, then steady
        self.steps = args.steps or (10 if q else 100)  # timed training steps per process
        self.reps = args.reps or (1 if q else 5)  # processes per runtime and case
        self.first_reps = args.reps or (1 if q else 3)  # cold+warm pairs for the first step
        self.first_steps = 3
        self.gens = 1 if q else 3  # timed generations per process
        self.tokens = GEN_TOKENS
        self.max_wait = args.max_wait if args.max_wait is not None else (0 if q else 120)


def run_child(spec: dict, env_extra: dict, max_wait_s: float) -> dict:
    waited, other_before = wait_for_quiet(max_wait_s)
    before = source_fingerprint()
    rec = _run_child(spec, env_extra)
    rec["quiet_wait_s"], rec["other_cores_before"] = round(waited, 1), other_before
    after = source_fingerprint()
    rec["sources"] = before if before == after else {"before": before, "after": after}
    return rec


def _run_child(spec: dict, env_extra: dict) -> dict:
    rec, stderr, wall = run_child_process(Path(__file__).resolve(), spec, env_extra, CHILD_TIMEOUT_S)
    if wall is None:  # timed out
        return rec
    rec["process_wall_s"] = wall
    if "error" not in rec and stderr.strip():
        rec["stderr_tail"] = stderr[-2000:]
    return rec


def cache_env(d: Path) -> dict:
    """Every on-disk compile cache of both runtimes inside ``d``."""
    return {
        "LAZYVIC_CACHE_DIR": str(d / "lazyvic"),
        "NUMBA_CACHE_DIR": str(d / "numba"),
        "TORCHINDUCTOR_CACHE_DIR": str(d / "inductor"),
    }


def _progress(label: str, rec: dict) -> None:
    if "error" in rec:
        msg = "ERROR " + rec["error"]
    elif rec["spec"]["case"] == "first-step":
        msg = "steps " + ", ".join(f"{x:.2f}" for x in rec["step_times_s"]) + " s"
    elif "steps_per_s" in rec:
        msg = f"{rec['steps_per_s']:.2f} steps/s (median step {rec['timed']['median_s'] * 1e3:.1f} ms)"
    elif "tokens_per_s" in rec:
        msg = f"{rec['tokens_per_s']:.1f} tokens/s"
    else:
        msg = "?"
    oc = rec.get("other_cores_timed")
    other = "-" if oc is None else f"{oc:.2f}"
    print(
        f"  {label:<40} {msg}  [{rec.get('process_wall_s', 0):.1f} s; waited {rec.get('quiet_wait_s', 0):.0f} s; "
        f"other cores {other}]",
        flush=True,
    )


def run_train(plan: Plan, runtimes: list, cache: Path, dropout: float) -> list:
    recs = []
    for rep in range(plan.reps):
        for rt in runtimes:
            spec = dict(case="train", runtime=rt, dropout=dropout, warmup=plan.warmup, steps=plan.steps)
            rec = run_child(spec, cache_env(cache), plan.max_wait)
            rec["rep"] = rep
            _progress(f"train {rt} #{rep + 1}", rec)
            recs.append(rec)
    return recs


def run_generate(plan: Plan, runtimes: list, cache: Path, dropout: float, gen_dynamic) -> list:
    recs = []
    for rep in range(plan.reps):
        for rt in runtimes:
            spec = dict(
                case="generate",
                runtime=rt,
                dropout=dropout,
                tokens=plan.tokens,
                gens=plan.gens,
                gen_dynamic=gen_dynamic,
            )
            rec = run_child(spec, cache_env(cache), plan.max_wait)
            rec["rep"] = rep
            _progress(f"generate {rt} #{rep + 1}", rec)
            recs.append(rec)
    return recs


def run_first_step(plan: Plan, runtimes: list, dropout: float, keep: bool) -> list:
    """Per repetition: a new empty cache directory; the 'empty' process fills it, the 'warm'
    process (started right after) finds it. torch eager has no cache: one fresh process."""
    recs = []
    for rep in range(plan.first_reps):
        for rt in runtimes:
            spec = dict(case="first-step", runtime=rt, dropout=dropout, warmup=0, steps=plan.first_steps)
            if rt == "torch":
                kinds = ["none"]
            else:
                kinds = ["empty", "warm"]
            d = Path(tempfile.mkdtemp(prefix=f"tiny_gpt-first-{rt}-"))
            try:
                for kind in kinds:
                    rec = run_child(dict(spec, cache=kind), cache_env(d), plan.max_wait)
                    rec["rep"] = rep
                    _progress(f"first-step {rt} cache={kind} #{rep + 1}", rec)
                    recs.append(rec)
            finally:
                if not keep:
                    shutil.rmtree(d, ignore_errors=True)
    return recs


# ------------------------------------------------------------------- tables
def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _spread(xs, fmt) -> str:
    if len(xs) < 2:
        return "(1 run)" if xs else "-"
    return f"{fmt(min(xs))}..{fmt(max(xs))}"


def _ratio(x) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def _cores(xs) -> str:
    """Median and maximum over the processes of a row."""
    xs = [x for x in xs if x is not None]
    return f"{_med(xs):.2f}/{max(xs):.2f}" if xs else "-"


def _select(recs, case, rt, **match):
    """(records that succeeded, error messages of those that failed) for one row."""
    mine = [
        r
        for r in recs
        if r["spec"]["case"] == case
        and r["spec"]["runtime"] == rt
        and all(r["spec"].get(k) == v for k, v in match.items())
    ]
    return [r for r in mine if "error" not in r], [r["error"] for r in mine if "error" in r] or ["not run"]


def print_table(headers: list, rows: list) -> None:
    """Left-aligned first column and notes (last), right-aligned numbers in between."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    for r in [headers, *rows]:
        cells = [f"{r[0]:<{widths[0]}}"] + [f"{r[i]:>{widths[i]}}" for i in range(1, len(headers) - 1)]
        print("  ".join(cells + [str(r[-1])]).rstrip())


def summarize_train(recs: list, runtimes: list) -> dict:
    out = {}
    for rt in runtimes:
        ok, err = _select(recs, "train", rt)
        if not ok:
            out[rt] = {"error": err[0]}
            continue
        rates = [r["steps_per_s"] for r in ok]
        step_ms = [t * 1e3 for r in ok for t in r["step_times_s"][r["spec"]["warmup"] :]]
        pooled = _stats(step_ms)
        out[rt] = {
            "steps_per_s": _med(rates),
            "steps_per_s_runs": rates,
            "steps_per_s_mean_runs": [r["steps_per_s_mean"] for r in ok],
            "step_ms_pooled": {k[:-2]: v for k, v in pooled.items()},
            "other_cores_runs": [r["other_cores_timed"] for r in ok],
            "warmup_s_runs": [sum(r["step_times_s"][: r["spec"]["warmup"]]) for r in ok],
            "losses_first_3": ok[0]["losses"][:3],
            "mode": ok[0].get("lazyvic_mode"),
            "failed_runs": err if err != ["not run"] else [],
        }
        if rt.startswith("lazyvic"):  # time inside the plan's kernels; the rest is tracing, autograd and the cut
            out[rt]["execute_ms_per_step"] = _med(
                [r["timed_counters"].get("execute_seconds", 0.0) * 1e3 / r["spec"]["steps"] for r in ok]
            )
    lv = out.get("lazyvic", {}).get("steps_per_s")
    ref_loss = out.get("lazyvic", {}).get("losses_first_3")
    eager = out.get("torch", {}).get("steps_per_s")
    for rt in runtimes:
        r = out[rt]
        if eager and r.get("steps_per_s"):
            r["torch_ratio"] = r["steps_per_s"] / eager
        if rt != "lazyvic" and lv and r.get("steps_per_s"):
            r["lazyvic_ratio"] = lv / r["steps_per_s"]
        if rt != "lazyvic" and ref_loss and r.get("losses_first_3"):
            r["loss_max_abs_diff_vs_lazyvic"] = max(abs(a - b) for a, b in zip(r["losses_first_3"], ref_loss))
    return out


def print_train(s: dict, plan: Plan) -> None:
    print()
    print(
        f"training step (batch {TRAIN['batch']}, forward + backward + clip + AdamW, loss.item() each step): "
        f"{plan.warmup} warm-up steps, then {plan.steps} timed; steps/s = 1 / median step time; "
        f"median over {plan.reps} process(es)"
    )
    rows = []
    for rt, r in s.items():
        if "error" in r:
            rows.append([rt, "ERROR", "", "", "", "", "", r["error"]])
            continue
        p = r["step_ms_pooled"]
        note = [r["mode"]] if r.get("mode") else []
        if "execute_ms_per_step" in r:
            note.append(f"{r['execute_ms_per_step']:.1f} ms/step executing the plan")
        if "loss_max_abs_diff_vs_lazyvic" in r:
            note.append(f"loss of steps 1-3 vs lazyvic: max diff {r['loss_max_abs_diff_vs_lazyvic']:.1e}")
        rows.append(
            [
                rt,
                f"{r['steps_per_s']:.2f}",
                _spread(r["steps_per_s_runs"], lambda x: f"{x:.2f}"),
                f"{1e3 / r['steps_per_s']:.1f}",
                f"{p['p10']:.1f}/{p['p90']:.1f}/{p['max']:.0f}",
                _cores(r["other_cores_runs"]),
                _ratio(r.get("lazyvic_ratio")) if rt != "lazyvic" else "",
                _ratio(r.get("torch_ratio")) if rt != "torch" else "",
                "; ".join(note),
            ]
        )
    print_table(
        [
            "runtime",
            "steps/s",
            "spread",
            "ms/step",
            "step ms p10/p90/max",
            "other cores med/max",
            "lazyvic/this",
            "this/torch",
            "note",
        ],
        rows,
    )


def summarize_first(recs: list, runtimes: list) -> list:
    rows = []
    for rt in runtimes:
        for kind in ["none"] if rt == "torch" else ["empty", "warm"]:
            ok, err = _select(recs, "first-step", rt, cache=kind)
            row = {"runtime": rt, "cache": kind}
            if not ok:
                row["error"] = err[0]
                rows.append(row)
                continue
            # lazyvic (hot mode) interprets step 1 and compiles its plan in step 2; torch.compile
            # compiles in step 1: "to first compiled" is where each has run its compiled code once.
            n_first = 2 if rt == "lazyvic" else 1
            row.update(
                {
                    "steps_to_first_compiled": n_first,
                    "step1_s_runs": [r["step_times_s"][0] for r in ok],
                    "first_compiled_s_runs": [sum(r["step_times_s"][:n_first]) for r in ok],
                    "next_step_s_runs": [r["step_times_s"][n_first] for r in ok],
                    "import_s_runs": [r["import_s"] for r in ok],
                    "setup_s_runs": [r["model_setup_s"] + r["trainer_setup_s"] for r in ok],
                    "process_wall_s_runs": [r["process_wall_s"] for r in ok],
                    "other_cores_runs": [r["other_cores_timed"] for r in ok],
                    "counters_runs": [r["timed_counters"] for r in ok],
                }
            )
            rows.append(row)
    lv = {r["cache"]: _med(r["first_compiled_s_runs"]) for r in rows if r["runtime"] == "lazyvic" and "error" not in r}
    for r in rows:
        if r["runtime"] == "lazyvic" or "error" in r:
            continue
        t = _med(r["first_compiled_s_runs"])
        r["lazyvic_ratio"] = {k: t / v for k, v in lv.items() if v}  # per lazyvic cache state
    return rows


def print_first(rows: list, plan: Plan) -> None:
    print()
    print(
        f"first training step in a fresh process; median over {plan.first_reps} process(es) per row "
        f"('empty': new cache dirs; 'warm': the next process, same dirs)"
    )
    out = []
    for r in rows:
        if "error" in r:
            out.append([r["runtime"], r["cache"], "ERROR", "", "", "", "", "", "", "", "", r["error"]])
            continue
        note = "to 1st compiled = step 1" if r["steps_to_first_compiled"] == 1 else "to 1st compiled = steps 1+2"
        ratio = ""
        if r["runtime"] == "lazyvic":
            cs = [c.get("compile_seconds", 0.0) for c in r["counters_runs"]]
            kc = [c.get("kernels_compiled", 0) for c in r["counters_runs"]]
            kl = [c.get("kernels_loaded", 0) for c in r["counters_runs"]]
            note += f"; kernels compiled {_med(kc):g} / loaded {_med(kl):g}; plan compile {_med(cs):.1f} s"
        elif r["runtime"] == "torch":
            lr = r["lazyvic_ratio"]
            ratio = " / ".join(_ratio(lr.get(k)) for k in ("empty", "warm"))
            note += "; lazyvic/this vs lazyvic empty / warm"
        else:
            ratio = _ratio(r["lazyvic_ratio"].get(r["cache"]))
        out.append(
            [
                r["runtime"],
                r["cache"],
                f"{_med(r['step1_s_runs']):.2f}",
                f"{_med(r['first_compiled_s_runs']):.2f}",
                _spread(r["first_compiled_s_runs"], lambda x: f"{x:.1f}" if x >= 1 else f"{x:.3f}"),
                f"{_med(r['next_step_s_runs']) * 1e3:.0f}",
                f"{_med(r['import_s_runs']):.2f}",
                f"{_med(r['setup_s_runs']):.2f}",
                f"{_med(r['process_wall_s_runs']):.1f}",
                _cores(r["other_cores_runs"]),
                ratio,
                note,
            ]
        )
    print_table(
        [
            "runtime",
            "cache",
            "step 1 s",
            "to 1st compiled s",
            "spread",
            "next step ms",
            "import s",
            "setup s",
            "process s",
            "other cores med/max",
            "lazyvic/this",
            "note",
        ],
        out,
    )


def summarize_generate(recs: list, runtimes: list) -> dict:
    out = {}
    for rt in runtimes:
        ok, err = _select(recs, "generate", rt)
        if not ok:
            out[rt] = {"error": err[0]}
            continue
        rates = [r["tokens_per_s"] for r in ok]
        out[rt] = {
            "tokens_per_s": _med(rates),
            "tokens_per_s_runs": rates,
            "first_generation_s_runs": [r["first_generation_s"] for r in ok],
            "other_cores_runs": [r["other_cores_timed"] for r in ok],
            "warmup_counters": ok[0]["warmup_counters"],
            "timed_counters": ok[0]["timed_counters"],
            "mode": ok[0].get("lazyvic_mode"),
            "tokens": ok[0]["tokens"],
            "tokens_stable": all(r["tokens_stable"] for r in ok),
        }
        if rt == "lazyvic":
            out[rt]["execute_ms_per_token"] = _med(
                [
                    r["timed_counters"].get("execute_seconds", 0.0) * 1e3 / (r["spec"]["gens"] * r["spec"]["tokens"])
                    for r in ok
                ]
            )
    lv = out.get("lazyvic", {})
    for rt in runtimes:
        r = out[rt]
        if rt == "lazyvic" or "error" in r or "error" in lv:
            continue
        r["lazyvic_ratio"] = lv["tokens_per_s"] / r["tokens_per_s"]
        r["first_token_differing_from_lazyvic"] = next(
            (i for i, (a, b) in enumerate(zip(r["tokens"], lv["tokens"])) if a != b), None
        )
    return out


def print_generate(s: dict, plan: Plan) -> None:
    print()
    print(
        f"greedy generation: {plan.tokens} new tokens from a 1-token prompt, batch 1; 1 warm-up generation, "
        f"then {plan.gens} timed per process; tokens/s = {plan.tokens} / median time; "
        f"median over {plan.reps} process(es)"
    )
    rows = []
    for rt, r in s.items():
        if "error" in r:
            rows.append([rt, "ERROR", "", "", "", "", "", r["error"]])
            continue
        note = []
        if r.get("mode"):
            note.append(r["mode"].replace("traces/run", "traces/token"))
        if "execute_ms_per_token" in r:
            note.append(f"{r['execute_ms_per_token']:.2f} ms/token executing the plan")
        if rt == "torch.compile":
            note.append(
                f"graphs compiled: {r['warmup_counters'].get('dynamo_unique_graphs', 0)} in warm-up, "
                f"{r['timed_counters'].get('dynamo_unique_graphs', 0)} while timed"
            )
        if "first_token_differing_from_lazyvic" in r:
            i = r["first_token_differing_from_lazyvic"]
            note.append("same tokens as lazyvic" if i is None else f"tokens differ from lazyvic's from #{i}")
        rows.append(
            [
                rt,
                f"{r['tokens_per_s']:.1f}",
                _spread(r["tokens_per_s_runs"], lambda x: f"{x:.0f}"),
                f"{1e3 / r['tokens_per_s']:.2f}",
                f"{_med(r['first_generation_s_runs']):.2f}",
                _cores(r["other_cores_runs"]),
                _ratio(r.get("lazyvic_ratio")) if rt != "lazyvic" else "",
                "; ".join(note),
            ]
        )
    print_table(
        ["runtime", "tokens/s", "spread", "ms/token", "warm-up gen s", "other cores med/max", "lazyvic/this", "note"],
        rows,
    )


# ---------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer steps, 1 process per row (a smoke test)")
    ap.add_argument(
        "--only", nargs="+", choices=CASES, metavar="CASE", help=f"run only these cases: {', '.join(CASES)}"
    )
    ap.add_argument(
        "--json",
        default=str(HERE / "results" / "tiny_gpt.json"),
        metavar="PATH",
        help="results file (default: benchmarks/results/tiny_gpt.json)",
    )
    ap.add_argument("--steps", type=int, help="timed training steps per process (default 100; quick 10)")
    ap.add_argument("--reps", type=int, help="processes per runtime and row (default 5, first step 3; quick 1)")
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout of the model (default 0.0)")
    ap.add_argument("--no-torch", action="store_true", help="lazyvic only (no torch child processes)")
    ap.add_argument(
        "--gen-dynamic",
        choices=("auto", "true", "false"),
        default="auto",
        help="torch.compile's dynamic= for generation (auto: None, the default)",
    )
    ap.add_argument(
        "--max-wait",
        type=float,
        metavar="S",
        help="before each child, wait up to S seconds for other processes to use less than "
        f"{QUIET_CORES} cores (default 120; quick 0)",
    )
    ap.add_argument("--keep-cache", action="store_true", help="keep the temporary cache directories")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        rec = child_main(json.loads(args.child))
        Path(args.child_out).write_text(json.dumps(rec, default=float))
        return 0

    plan = Plan(args)
    runtimes = ["lazyvic", "lazyvic.compile"] if args.no_torch else list(RUNTIMES)
    cases = [c for c in CASES if not args.only or c in args.only]
    gen_dynamic = {"auto": None, "true": True, "false": False}[args.gen_dynamic]
    cfg = model_config(args.dropout)
    env = {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "loadavg_1m_start": loadavg(),
        "env": {
            k: os.environ[k]
            for k in ("LAZYVIC_COMPILE", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY")
            if k in os.environ
        },
    }
    n_params = sum(int(np.prod(a.shape)) for a in init_weights(cfg).values())
    print(f"TinyGPT benchmark ({'quick' if args.quick else 'full'})  {env['date']}")
    print(
        f"  vocab {cfg['vocab_size']}, d_model {cfg['d_model']}, {cfg['n_layer']} layers, {cfg['n_head']} heads, "
        f"block {cfg['block_size']}, batch {TRAIN['batch']}, dropout {cfg['dropout']}; {n_params:,} parameters; "
        f"AdamW lr {TRAIN['lr']} wd {TRAIN['weight_decay']}, clip {TRAIN['clip']}"
    )
    print(
        f"  python {env['python']}, numpy {env['numpy']}, {env['cpu_count']} cpus; one fresh process per "
        f"measurement; load average at start {env['loadavg_1m_start']}"
    )
    sources = source_fingerprint()
    env["sources_start"] = sources
    print(
        f"  lazyvic sources: git HEAD {sources['git_head']}, sha1 of lazyvic/**/*.py {sources['lazyvic_sources_sha1']}"
    )
    print("  ratios: lazyvic/this = t_this / t_lazyvic (>1: lazyvic faster)")
    payload = {"env": env, "config": cfg, "train_config": TRAIN, "quick": args.quick, "plan": vars(plan), "records": []}
    json_path = Path(args.json)
    t_run = time.perf_counter()
    cache = Path(tempfile.mkdtemp(prefix="tiny_gpt-cache-"))
    payload["shared_cache_dir"] = str(cache)
    recs = payload["records"]
    try:
        for case in cases:
            print(f"# {case}", flush=True)
            if case == "train":
                recs += run_train(plan, runtimes, cache, args.dropout)
                payload["train"] = summarize_train(recs, runtimes)
            elif case == "first-step":
                rts = [r for r in runtimes if r not in TRAIN_ONLY]
                recs += run_first_step(plan, rts, args.dropout, args.keep_cache)
                payload["first_step"] = summarize_first(recs, rts)
            else:
                rts = [r for r in runtimes if r not in TRAIN_ONLY]
                recs += run_generate(plan, rts, cache, args.dropout, gen_dynamic)
                payload["generate"] = summarize_generate(recs, rts)
            write_json(json_path, payload, default=float)
    finally:
        if not args.keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
    # Versions and thread counts as the children saw them.
    for r in recs:
        for k, v in r.get("info", {}).items():
            if "cache_dir" not in k:
                env.setdefault(k, v)
    env["loadavg_1m_end"] = loadavg()
    shas = {sources["lazyvic_sources_sha1"]}
    for r in recs:
        src = r.get("sources", {})
        shas |= {d["lazyvic_sources_sha1"] for d in (src.get("before", src), src.get("after", src)) if d}
    env["sources_changed_during_run"] = len(shas) > 1
    payload["elapsed_s"] = round(time.perf_counter() - t_run, 1)

    print()
    layer = env.get("numba_threading_layer") or "not started: no parallel kernel ran"
    print(
        f"lazyvic {env.get('lazyvic')}, numba {env.get('numba')} ({env.get('numba_threads')} threads, "
        f"threading layer {layer}), LAZYVIC_COMPILE={env.get('lazyvic_compile_mode')}; "
        f"torch {env.get('torch', '-')} ({env.get('torch_threads', '-')} threads); "
        f"load average start/end {env['loadavg_1m_start']}/{env['loadavg_1m_end']}"
    )
    if env["sources_changed_during_run"]:
        print(
            "** WARNING: lazyvic's sources changed during the run; rows may mix versions "
            "(see 'sources' in each JSON record) **"
        )
    if "train" in payload:
        print_train(payload["train"], plan)
    if "first_step" in payload:
        print_first(payload["first_step"], plan)
    if "generate" in payload:
        print_generate(payload["generate"], plan)
    write_json(json_path, payload, default=float)
    print()
    print(f"wrote {json_path}  ({payload['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
