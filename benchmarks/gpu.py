#!/usr/bin/env python
"""GPU throughput of issue 7: ResNet-18 mixed-precision training and BERT-small inference,
lazyvic vs PyTorch eager, each runtime in its own fresh process, images/s and sequences/s.

    python benchmarks/gpu.py [--device cuda|cpu] [--tiny] [--only resnet|bert] [--reps N]
                              [--iters N] [--windows N] [--warmup N] [--resnet-batch N]
                              [--batch N [N ...]] [--seq N] [--no-amp] [--no-compile]
                              [--no-torch] [--json PATH]

Goals of the issue (long term, on an A100-class GPU): ResNet-18 training >= 400 images/s,
BERT-small inference >= 1,200 sequences/s. ``--device cpu --tiny`` runs the same harness at
toy sizes on the CPU (about a minute), to validate it where there is no GPU.

- **ResNet-18 training**: ``lazyvic.models.resnet.resnet18`` (torchvision's layout, width 64,
  1000 classes, 7x7/2 stem) on (batch, 3, 224, 224) float32 images with int64 labels, two
  synthetic batches drawn with NumPy and placed on the device once, cycled; SGD (lr 0.01,
  momentum 0.9), mean cross-entropy, training-mode batch norm. Mixed precision: lazyvic runs
  the forward under ``lazyvic.autocast(dtype=lazyvic.float16)`` with ``lazyvic.amp.GradScaler``
  (autocast rounds matmul/conv operands to float16 and accumulates in float32, see
  lazyvic/amp.py); PyTorch under ``torch.autocast("cuda", dtype=torch.float16)`` with
  ``torch.amp.GradScaler("cuda")`` and ``cudnn.benchmark`` on (on ``--device cpu``:
  ``torch.autocast("cpu", dtype=torch.bfloat16)``, PyTorch's CPU default, with the same
  scaler). ``--no-amp``: float32 for both. The PyTorch twin and the shared weights are
  benchmarks/resnet18.py's (``torch_resnet18``, ``weights``: one seeded draw from
  tests/_resnet_weights.py) at this width and class count.
- **BERT-small inference**: benchmarks/_bert.py (4 layers, hidden 512, 8 heads, intermediate
  2048, vocab 30522; Hugging Face's parameter names), one model definition built on both
  libraries, the same seeded weights loaded into both; random full-length token ids, no
  attention mask, sequence length 128, batches 1 and 32, float32. lazyvic under
  ``lazyvic.no_grad()``, plain and through ``lazyvic.compile`` (plan replay); PyTorch under
  ``torch.inference_mode()`` (float32 matmuls, TF32 off: PyTorch's default). Before timing,
  every process checks its output against PyTorch's float32 output of the same batch on the
  CPU, computed once by a reference process (tolerance 1e-4); a mismatch fails the row.

Method (as benchmarks/tiny_gpt.py and resnet18.py): the parent imports neither lazyvic nor
torch; it starts one child process per (case, runtime, repetition), repetitions interleaved.
A child runs ``--warmup`` steps (lazyvic's hot mode interprets a trace the first time and
compiles it the second), then ``--windows`` timed windows of ``--iters`` steps each. A lazyvic
step ends with ``lazyvic.sync`` of its result (the mark step: otherwise the next step's graph
would grow on top of this one); a window ends with a device sync (``lazyvic.cuda.synchronize()``,
``torch.cuda.synchronize()``) and, for training, ``.item()`` of the last loss. A process's rate
is the median over its windows of ``batch * iters / window time``; tables give the median over
processes (spread min..max) and ratios ``lazyvic / torch`` (above 1: lazyvic is faster). A
second table gives lazyvic's ``lazyvic.metrics`` counters per timed step: traces, host<->device
copy bytes, and ``fallback_ops`` (ops a plan ran on the host, or traces left to the NumPy
interpreter) — read these first on a GPU.

This file is a benchmark harness, not a test: lazyvic itself never imports torch.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
from _common import loadavg, rate_cell, source_fingerprint

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (ROOT, HERE, ROOT / "tests"):  # the checkout's lazyvic; _bert.py and resnet18.py beside this file
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SEED = 0
CHILD_TIMEOUT_S = 1800
N_BATCHES = 2  # synthetic ResNet batches, cycled
LR, MOMENTUM = 0.01, 0.9
BERT_TOL = 1e-4
MAX_EXTRA_WARMUP = 20  # lazyvic: warm-up steps beyond --warmup while plans still compile
GOALS = {"resnet": (400.0, "img/s"), "bert": (1200.0, "seq/s")}  # issue 7, on an A100-class GPU
# Sizes: the (default) and toy ones for validating the harness on a CPU (--tiny).
SIZES = {
    "full": dict(
        resnet=dict(width=64, classes=1000, image=224, batch=64),
        bert="BERT_SMALL",
        seq=128,
        bert_batches=(1, 32),
        reps=3,
        warmup=5,
        windows=3,
        iters=20,
    ),
    "tiny": dict(
        resnet=dict(width=8, classes=10, image=64, batch=4),
        bert="BERT_TINY",
        seq=32,
        bert_batches=(1, 8),
        reps=1,
        warmup=4,
        windows=2,
        iters=3,
    ),
}


# ------------------------------------------------------------------------- child: shared
def _stats(xs: list) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _counter_delta(after: dict, before: dict) -> dict:
    """Change of lazyvic.metrics.snapshot() counters, fallback_ops included (a dict of counts)."""
    out = {}
    for k, v in after.items():
        if k == "fallback_ops":
            ops = {op: n - before.get(k, {}).get(op, 0) for op, n in v.items()}
            ops = {op: n for op, n in ops.items() if n}
            if ops:
                out[k] = ops
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and v != before.get(k, 0):
            d = v - before.get(k, 0)
            out[k] = round(d, 6) if isinstance(d, float) else d
    return out


def _measure(step, finish, spec: dict, rec: dict, counters=None) -> None:
    """Warm-up steps (each finished), then timed windows of ``iters`` steps finished once.

    ``step(i)`` runs step i and returns its result; ``finish(result)`` waits for the device and
    returns the loss as a float (training) or None. ``counters``: lazyvic's metrics snapshot;
    with it the warm-up goes on after ``warmup`` steps until a step neither interprets nor
    compiles a plan (a new trace shows up after a skipped GradScaler step, say), at most
    ``MAX_EXTRA_WARMUP`` steps more, so that the timed windows measure cached compiled plans."""
    n_warm, n_win, iters = spec["warmup"], spec["windows"], spec["iters"]
    rec["warmup_step_s"], rec["warmup_losses"] = [], []
    c0 = c_prev = counters() if counters else None
    i = 0
    while i < n_warm + MAX_EXTRA_WARMUP:
        t0 = time.perf_counter()
        rec["warmup_losses"].append(finish(step(i)))
        rec["warmup_step_s"].append(time.perf_counter() - t0)
        i += 1
        if counters:
            c = counters()
            d, c_prev = _counter_delta(c, c_prev), c
            settled = not any(d.get(k) for k in ("cache_misses", "interpreted_runs", "plans_compiled"))
        else:
            settled = True
        if i >= n_warm and settled:
            break
    rec["warmup_steps"] = i
    c1 = counters() if counters else None
    windows = []
    for _ in range(n_win):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = step(i)
            i += 1
        rec["last_loss"] = finish(out)
        windows.append(time.perf_counter() - t0)
    rec["window_s"] = windows
    rates = [spec["batch"] * iters / t for t in windows]
    rec["rates"], rec["rate"] = rates, statistics.median(rates)
    if counters:
        c2 = counters()
        rec["warmup_counters"] = _counter_delta(c1, c0)
        rec["timed_counters"] = _counter_delta(c2, c1)
        rec["timed_steps"] = n_win * iters


def _lazyvic(device: str, rec: dict):
    import lazyvic as lv

    rec["lazyvic"] = lv.__version__
    if device == "cuda":
        rec["gpu"] = lv.cuda.get_device_name()
    return lv, lambda: lv.metrics.snapshot()


def _torch(device: str, rec: dict):
    import torch

    rec["torch"] = torch.__version__
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} has no CUDA (torch.cuda.is_available() is False)")
        rec["gpu"] = torch.cuda.get_device_name(0)
    return torch


def child_probe(spec: dict, rec: dict) -> None:
    """Versions and the device; raises (lazyvic's DeviceError) when lazyvic cannot use it."""
    lv, _ = _lazyvic("cpu", rec)
    lv.zeros(1).to(spec["device"])
    if spec["device"] == "cuda":
        rec["gpu"] = lv.cuda.get_device_name()
        rec["simulated"] = lv.cuda.is_simulated()
    import numba

    rec["numba"] = numba.__version__
    if spec["torch"]:
        try:
            import torch

            rec["torch"], rec["torch_importable"] = torch.__version__, True
            rec["torch_device_ok"] = spec["device"] == "cpu" or torch.cuda.is_available()
        except ImportError as e:
            rec["torch"], rec["torch_device_ok"] = f"not importable ({e})", False


# ---------------------------------------------------------------------- child: ResNet-18
def resnet_data(r: dict) -> list:
    rng = np.random.default_rng(SEED + 1)
    return [
        (
            rng.standard_normal((r["batch"], 3, r["image"], r["image"])).astype(np.float32),
            rng.integers(0, r["classes"], size=r["batch"], dtype=np.int64),
        )
        for _ in range(N_BATCHES)
    ]


def _resnet_twin_module(r: dict):
    """benchmarks/resnet18.py, set to this width and class count (its twin and weight draw read
    the module's WIDTH and CLASSES when called). Importing it imports lazyvic too (through
    tiny_gpt.py and run.py), also in the torch process; lazyvic's import loads neither Numba
    nor CUDA, so that process's torch runs undisturbed."""
    import resnet18

    resnet18.WIDTH, resnet18.CLASSES = r["width"], r["classes"]
    return resnet18


def child_resnet(spec: dict, rec: dict) -> None:
    r, device, amp = spec["resnet"], spec["device"], spec["amp"]
    data = resnet_data(r)
    if spec["runtime"] == "lazyvic":
        lv, counters = _lazyvic(device, rec)
        import lazyvic.functional as F
        from lazyvic.models.resnet import resnet18

        weights = _resnet_twin_module(r).weights()
        model = resnet18(num_classes=r["classes"], width=r["width"])
        model.load_state_dict({k: lv.tensor(v) for k, v in weights.items()})
        model.to(device).train()
        opt = lv.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        scaler = lv.amp.GradScaler(device, enabled=amp)
        batches = [(lv.tensor(x).to(device), lv.tensor(y).to(device)) for x, y in data]
        rec["precision"] = "autocast float16 (emulated) + GradScaler" if amp else "float32"

        def step(i):
            x, y = batches[i % N_BATCHES]
            with lv.autocast(device, dtype=lv.float16, enabled=amp):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            lv.sync(loss)  # the mark step: the update runs now instead of joining the next step's graph
            return loss

        def finish(loss):
            value = loss.item()
            lv.cuda.synchronize()
            return value

        _measure(step, finish, spec, rec, counters)
        rec["final_scale"] = scaler.get_scale()
    else:
        torch = _torch(device, rec)
        model = _resnet_twin_module(r).torch_resnet18().to(device).train()
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        half = torch.float16 if device == "cuda" else torch.bfloat16
        scaler = torch.amp.GradScaler(device, enabled=amp)
        if device == "cuda":
            torch.backends.cudnn.benchmark = True
        batches = [(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)) for x, y in data]
        rec["precision"] = f"autocast {str(half).split('.')[1]} + GradScaler" if amp else "float32"

        def step(i):
            x, y = batches[i % N_BATCHES]
            with torch.autocast(device, dtype=half, enabled=amp):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            return loss

        def finish(loss):
            value = loss.item()
            if device == "cuda":
                torch.cuda.synchronize()
            return value

        _measure(step, finish, spec, rec)
        rec["final_scale"] = scaler.get_scale()


# ---------------------------------------------------------------------- child: BERT-small
def child_bert(spec: dict, rec: dict) -> None:
    import _bert

    cfg, device, batch = spec["bert"], spec["device"], spec["batch"]
    state = _bert.init_state(cfg, SEED)
    ids_np = _bert.input_ids(cfg, batch, spec["seq"])
    ref_path = Path(spec["ref"])
    if spec["runtime"] in ("lazyvic", "lazyvic.compile"):
        lv, counters = _lazyvic(device, rec)
        model = _bert.bert_model("lazyvic", cfg)
        model.load_state_dict({k: lv.tensor(v) for k, v in state.items()})
        model.to(device).eval()
        forward = lv.compile(model) if spec["runtime"] == "lazyvic.compile" else model
        ids = lv.tensor(ids_np).to(device)

        def step(i):
            with lv.no_grad():
                out = forward(ids)
            lv.sync(out)
            return out

        def finish(out):
            lv.cuda.synchronize()

        out = step(0).numpy()
    else:
        torch = _torch(device, rec)
        model = _bert.bert_model("torch", cfg)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        model.to(device).eval()
        ids = torch.from_numpy(ids_np).to(device)

        def step(i):
            with torch.inference_mode():
                return model(ids)

        def finish(out):
            if device == "cuda":
                torch.cuda.synchronize()

        out = step(0).cpu().numpy()
    if ref_path.exists():
        err = float(np.abs(out - np.load(ref_path)).max())
        rec["max_abs_diff_vs_torch"] = err
        if not err <= BERT_TOL:
            raise AssertionError(f"BERT output differs from PyTorch's by {err:.3g} (tolerance {BERT_TOL:g})")
    _measure(step, finish, spec, rec, counters if spec["runtime"] != "torch" else None)


def child_bert_reference(spec: dict, rec: dict) -> None:
    """PyTorch's float32 output on the CPU for each batch: the oracle of every BERT process."""
    import _bert
    import torch

    rec["torch"] = torch.__version__
    cfg = spec["bert"]
    model = _bert.bert_model("torch", cfg)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in _bert.init_state(cfg, SEED).items()})
    model.eval()
    for batch in spec["batches"]:
        with torch.inference_mode():
            out = model(torch.from_numpy(_bert.input_ids(cfg, batch, spec["seq"]))).numpy()
        np.save(Path(spec["dir"]) / f"bert_b{batch}.npy", out)


def child_main(spec: dict) -> dict:
    rec = {"spec": spec, "pid": os.getpid(), "loadavg_start": loadavg()}
    t0 = time.perf_counter()
    try:
        {"probe": child_probe, "resnet": child_resnet, "bert": child_bert, "bert_ref": child_bert_reference}[
            spec["case"]
        ](spec, rec)
    except Exception as e:  # noqa: BLE001 - reported in the table (first line) and the JSON (traceback)
        rec["error"] = f"{type(e).__module__}.{type(e).__qualname__}: {e}".splitlines()[0]
        rec["traceback"] = traceback.format_exc()
    rec["child_s"] = time.perf_counter() - t0
    rec["loadavg_end"] = loadavg()
    return rec


# --------------------------------------------------------------------------------- parent
def run_child(spec: dict) -> dict:
    fd, out_path = tempfile.mkstemp(prefix="lazyvic-cuda-bench-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec), "--child-out", out_path]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "").strip()
            last = tail.splitlines()[-1] if tail else ""
            return {
                "spec": spec,
                "error": f"child exited with {proc.returncode}: {last}"[:300],
                "stderr_tail": tail[-3000:],
            }
        rec = json.loads(Path(out_path).read_text())
    except subprocess.TimeoutExpired:
        return {"spec": spec, "error": f"timed out after {CHILD_TIMEOUT_S} s"}
    finally:
        Path(out_path).unlink(missing_ok=True)
    rec["process_wall_s"] = time.perf_counter() - t0
    return rec


def _label(spec: dict) -> str:
    if spec["case"] == "resnet":
        r = spec["resnet"]
        return f"resnet18 train b{r['batch']} {r['image']}px w{r['width']}" + (" amp" if spec["amp"] else " fp32")
    return f"bert b{spec['batch']} s{spec['seq']} h{spec['bert']['hidden']}x{spec['bert']['layers']} fp32"


def _progress(rec: dict) -> None:
    spec = rec["spec"]
    unit = GOALS[spec["case"]][1]
    if "error" in rec:
        msg = "ERROR " + rec["error"]
    else:
        msg = (
            f"{rec['rate']:10.1f} {unit} (windows {', '.join(f'{t:.3f}' for t in rec['window_s'])} s; "
            f"warm-up {sum(rec['warmup_step_s']):.1f} s; process {rec.get('process_wall_s', 0):.1f} s)"
        )
    print(f"  {_label(spec) + ' / ' + spec['runtime']:<52} {msg}", flush=True)


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def print_table(headers: list, rows: list) -> None:
    """Left-aligned first column and notes (last), right-aligned numbers in between."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    for r in [headers, *rows]:
        cells = [f"{r[0]:<{widths[0]}}"] + [f"{r[i]:>{widths[i]}}" for i in range(1, len(headers) - 1)]
        print("  ".join(cells + [str(r[-1])]).rstrip())


def summarize(recs: list, runtimes: tuple) -> list:
    """One row per case: each runtime's median rate over processes (and spread), lazyvic's ratios,
    its per-step counters in the timed windows, and the checks."""
    order = []
    for r in recs:
        if _label(r["spec"]) not in order:
            order.append(_label(r["spec"]))
    rows = []
    for key in order:
        mine = [r for r in recs if _label(r["spec"]) == key]
        case = mine[0]["spec"]["case"]
        row = {"case": key, "kind": case, "goal": GOALS[case][0], "unit": GOALS[case][1]}
        for rt in runtimes:
            ok = [r for r in mine if r["spec"]["runtime"] == rt and "error" not in r]
            errs = [r["error"] for r in mine if r["spec"]["runtime"] == rt and "error" in r]
            if not ok:
                if errs:
                    row[rt] = {"error": errs[0]}
                continue
            rates = [r["rate"] for r in ok]
            d = row[rt] = {
                "rate": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "n": len(rates),
                "precision": ok[0].get("precision"),
            }
            if errs:
                d["errors"] = errs
            if case == "resnet":
                d["losses"] = ok[0]["warmup_losses"][:3]
                # No growth within 2000 steps: every halving of the scale is a skipped step.
                d["skipped_steps"] = round(math.log2(2.0**16 / ok[0]["final_scale"])) if ok[0]["spec"]["amp"] else 0
            d["warmup_steps"] = ok[0]["warmup_steps"]
            if "max_abs_diff_vs_torch" in ok[0]:
                d["max_abs_diff_vs_torch"] = max(r["max_abs_diff_vs_torch"] for r in ok)
            if "timed_counters" in ok[0]:
                d["per_step"] = _per_step(ok[0])
        torch_rate = row.get("torch", {}).get("rate")
        for rt in runtimes:
            if rt != "torch" and torch_rate and row.get(rt, {}).get("rate"):
                row[f"ratio_{rt}"] = row[rt]["rate"] / torch_rate
        rows.append(row)
    return rows


def _per_step(rec: dict) -> dict:
    """lazyvic's counters per timed step (first process of the row)."""
    c, n = rec["timed_counters"], rec["timed_steps"]
    w = rec.get("warmup_counters", {})
    traces = c.get("traces", 0)
    comp, interp = c.get("compiled_runs", 0), c.get("interpreted_runs", 0)
    mode = (
        "no trace"
        if not traces
        else "compiled"
        if comp == traces
        else "interpreted"
        if interp == traces
        else f"mixed {comp}c/{interp}i"
    )
    if c.get("capture_replays"):
        mode += f", {c['capture_replays'] / n:g} replays/step"
    return {
        "traces": traces / n,
        "mode": mode,
        "h2d_bytes": c.get("host_to_device_bytes", 0) / n,
        "h2d_copies": c.get("host_to_device_copies", 0) / n,
        "d2h_bytes": c.get("device_to_host_bytes", 0) / n,
        "d2h_copies": c.get("device_to_host_copies", 0) / n,
        "fallbacks": c.get("fallbacks", 0) / n,
        "fallback_ops": c.get("fallback_ops", {}),
        "warmup_steps": rec["warmup_steps"],
        "warmup_compile_s": w.get("compile_seconds", 0.0),
        "warmup_kernels": w.get("kernels_compiled", 0),
        "warmup_kernels_loaded": w.get("kernels_loaded", 0),
    }


def print_summary(rows: list, runtimes: tuple, env: dict) -> None:
    lazies = [rt for rt in runtimes if rt != "torch"]

    def cell(row, rt):
        return rate_cell(row.get(rt), "rate", ".1f")

    device = env["device"]
    headers = [
        "case (rate, median over processes)",
        *runtimes,
        *[f"{rt}/torch" for rt in lazies],
        "goal (A100)",
        "note",
    ]
    table = []
    for row in rows:
        note = "; ".join(f"{rt}: {row[rt]['precision']}" for rt in runtimes if row.get(rt, {}).get("precision"))
        goal = f">= {row['goal']:.0f} {row['unit']}"
        table.append(
            [
                row["case"],
                *[cell(row, rt) for rt in runtimes],
                *[_ratio(row.get(f"ratio_{rt}")) for rt in lazies],
                goal,
                note,
            ]
        )
    print()
    print(
        f"Throughput on {device} ({env.get('gpu') or env.get('cpu')}); ratios lazyvic / torch eager "
        f"(above 1: lazyvic is faster); the goals are the issue's, for an A100-class GPU"
        + ("; --tiny sizes, not the issue's" if env["tiny"] else "")
    )
    print_table(headers, table)

    headers = [
        "lazyvic per timed step",
        "traces",
        "mode",
        "H2D bytes (copies)",
        "D2H bytes (copies)",
        "fallbacks",
        "warm-up: steps, compile",
        "fallback_ops (ops run on the host / interpreted)",
    ]
    table = []
    for row in rows:
        for rt in lazies:
            p = row.get(rt, {}).get("per_step")
            if not p:
                continue
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(p["fallback_ops"].items(), key=lambda kv: -kv[1]))
            table.append(
                [
                    f"{row['case']} / {rt}",
                    f"{p['traces']:g}",
                    p["mode"],
                    f"{_bytes(p['h2d_bytes'])} ({p['h2d_copies']:g})",
                    f"{_bytes(p['d2h_bytes'])} ({p['d2h_copies']:g})",
                    f"{p['fallbacks']:g}",
                    f"{p['warmup_steps']}, {p['warmup_compile_s']:.1f} s ({p['warmup_kernels']} kernels compiled, "
                    f"{p['warmup_kernels_loaded']} loaded)",
                    ops or "none",
                ]
            )
    if table:
        print()
        print_table(headers, table)

    print()
    for row in rows:
        if row["kind"] == "resnet":
            losses = {rt: row[rt]["losses"] for rt in runtimes if row.get(rt, {}).get("losses")}
            if losses:
                txt = "; ".join(f"{rt} " + ", ".join(f"{v:.4f}" for v in ls) for rt, ls in losses.items())
                skipped = ", ".join(f"{rt} {row[rt]['skipped_steps']}" for rt in losses)
                print(
                    f"  {row['case']}: loss of steps 1-3: {txt} (steps GradScaler skipped for inf/NaN "
                    f"gradients: {skipped})"
                )
        else:
            diffs = {
                rt: row[rt]["max_abs_diff_vs_torch"]
                for rt in runtimes
                if row.get(rt, {}).get("max_abs_diff_vs_torch") is not None
            }
            print(
                f"  {row['case']}: max |output - PyTorch's float32 output on the CPU| (checked before timing, "
                f"tolerance {BERT_TOL:g}): "
                + (", ".join(f"{rt} {v:.1e}" for rt, v in diffs.items()) or "not checked (no reference)")
            )
        for rt in runtimes:
            d = row.get(rt, {})
            for err in ([d["error"]] if "error" in d else []) + d.get("errors", []):
                print(f"  {row['case']} / {rt}: ERROR {err}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where both runtimes run (default cuda)")
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="toy sizes (ResNet width 8 on 64x64, BERT 2x64 at seq 32), 1 process per row: "
        "to validate the harness on a CPU",
    )
    ap.add_argument("--only", choices=("resnet", "bert"), help="run one case only")
    ap.add_argument("--reps", type=int, help="processes per runtime and row (default 3; tiny 1)")
    ap.add_argument("--iters", type=int, help="steps per timed window (default 20; tiny 3)")
    ap.add_argument("--windows", type=int, help="timed windows per process (default 3; tiny 2)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per process (default 5; tiny 4)")
    ap.add_argument("--resnet-batch", type=int, help="ResNet-18 batch (default 64; tiny 4)")
    ap.add_argument("--batch", type=int, nargs="+", help="BERT batch sizes (default 1 32; tiny 1 8)")
    ap.add_argument("--seq", type=int, help="BERT sequence length (default 128; tiny 32)")
    ap.add_argument("--no-amp", action="store_true", help="ResNet-18 in float32 (no autocast, no GradScaler)")
    ap.add_argument("--no-compile", action="store_true", help="BERT: skip the lazyvic.compile column")
    ap.add_argument("--no-torch", action="store_true", help="lazyvic only (BERT then has no reference to check)")
    ap.add_argument("--json", type=Path, help="write every record and the summary here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        Path(args.child_out).write_text(json.dumps(child_main(json.loads(args.child)), default=str))
        return 0

    size = SIZES["tiny" if args.tiny else "full"]
    import _bert  # NumPy only: the configurations

    bert_cfg = getattr(_bert, size["bert"])
    resnet = dict(size["resnet"], batch=args.resnet_batch or size["resnet"]["batch"])
    seq = args.seq or size["seq"]
    if seq > bert_cfg["max_positions"]:
        ap.error(f"--seq {seq} is longer than the model's {bert_cfg['max_positions']} positions")
    common = dict(
        device=args.device,
        warmup=args.warmup if args.warmup is not None else size["warmup"],
        windows=args.windows or size["windows"],
        iters=args.iters or size["iters"],
    )
    reps = args.reps or size["reps"]

    probe = run_child({"case": "probe", "device": args.device, "torch": not args.no_torch})
    if "error" in probe:
        print(f"gpu.py: {probe['error']}", file=sys.stderr)
        return 2
    use_torch = not args.no_torch and probe.get("torch_device_ok", False)
    env = {
        "device": args.device,
        "tiny": args.tiny,
        "gpu": probe.get("gpu"),
        "lazyvic": probe.get("lazyvic"),
        "numba": probe.get("numba"),
        "torch": probe.get("torch"),
        "cpu": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "loadavg": loadavg(),
        "started": f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "sources": source_fingerprint(),
    }
    print(
        f"lazyvic {env['lazyvic']} (numba {env['numba']}) vs torch {env['torch']} on {args.device}: "
        f"{env['gpu'] or env['cpu']}{' (simulated)' if probe.get('simulated') else ''}; "
        f"{reps} process(es) per row, {common['warmup']} warm-up steps, {common['windows']} windows of "
        f"{common['iters']} steps; load {env['loadavg']}; {env['started']}",
        flush=True,
    )
    if not args.no_torch and not use_torch:
        print(f"  torch rows skipped: torch {probe.get('torch')} cannot run on {args.device}", flush=True)

    with tempfile.TemporaryDirectory(prefix="lazyvic-cuda-bench-") as tmp:
        specs = []
        if args.only in (None, "resnet"):
            rts = ("lazyvic", "torch") if use_torch else ("lazyvic",)
            specs += [
                dict(common, case="resnet", runtime=rt, resnet=resnet, batch=resnet["batch"], amp=not args.no_amp)
                for _ in range(reps)
                for rt in rts
            ]
        if args.only in (None, "bert"):
            rts = ("lazyvic",) + (() if args.no_compile else ("lazyvic.compile",)) + (("torch",) if use_torch else ())
            batches = args.batch or size["bert_batches"]
            if probe.get("torch_importable"):
                ref = run_child({"case": "bert_ref", "bert": bert_cfg, "batches": batches, "seq": seq, "dir": tmp})
                if "error" in ref:
                    print(f"  BERT reference (torch, cpu, float32) failed, outputs not checked: {ref['error']}")
            for batch in batches:
                specs += [
                    dict(
                        common,
                        case="bert",
                        runtime=rt,
                        bert=bert_cfg,
                        batch=batch,
                        seq=seq,
                        ref=str(Path(tmp) / f"bert_b{batch}.npy"),
                    )
                    for _ in range(reps)
                    for rt in rts
                ]
        recs = []
        for spec in specs:
            rec = run_child(spec)
            _progress(rec)
            recs.append(rec)
    runtimes = tuple(
        rt for rt in ("lazyvic", "lazyvic.compile", "torch") if any(r["spec"]["runtime"] == rt for r in recs)
    )
    rows = summarize(recs, runtimes)
    print_summary(rows, runtimes, env)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"env": env, "records": recs, "summary": rows}, indent=1, default=str))
        print(f"\n  wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
