#!/usr/bin/env python
"""Recurrent networks: an LSTM (or GRU, RNN) language-model training step against PyTorch eager, and LSTM/GRU
inference against onnxruntime and PyTorch, CPU, each runtime in its own fresh process.

    python benchmarks/rnn.py [--quick] [--only train|infer] [--reps N] [--iters N] [--max-wait S]
                             [--busy] [--json PATH] [--keep-onnx DIR]
                             [--ntoken N] [--ninp N] [--nhid N] [--nlayers N] [--bptt N]
                             [--batch N] [--dropout P] [--model LSTM|GRU|RNN_TANH|RNN_RELU]

Training (``train``): the ``RNNModel`` of pytorch/examples' word_language_model, ``Embedding(ntoken,
ninp)`` -> dropout -> ``LSTM(ninp, nhid, nlayers, dropout)`` (the example's ``--model``: ``--model
GRU``, ``RNN_TANH`` or ``RNN_RELU`` for its other layers) -> dropout -> ``Linear(nhid, ntoken)``
-> ``log_softmax``, ``NLLLoss`` (the cross-entropy), and that example's training loop: the hidden
state carried from one window to the next and detached (``repackage_hidden``) before each step,
``model.zero_grad()``, ``clip_grad_norm_(model.parameters(), 0.25)``, the plain SGD update
``p.data.add_(p.grad, alpha=-lr)`` (lr 20), and ``loss.item()`` every step. Sizes default to ones
this 2-core machine runs in seconds (the example has 200/200 and 33,278 tokens): ntoken 1,000,
ninp = nhid = 128, 2 layers, bptt 35, batch 20, and **dropout 0** (the example has 0.2;
``--dropout 0.2`` runs it, and then the losses of the runtimes are not compared, since each draws
its own masks). The data is a random token stream (seeded NumPy, 8 windows of bptt + 1 rows of
``batch`` columns, cycled). The weights are one seeded NumPy draw, initialized as the example does
(encoder and decoder weights U(-0.1, 0.1), decoder bias 0, the LSTM's PyTorch's default
U(-1/sqrt(nhid), 1/sqrt(nhid))), loaded into both models through ``load_state_dict`` (same
parameter names). Runtimes: lazyvic running the step as written (``lazyvic``), the same step
function through ``lazyvic.compile`` (``lazyvic.compile``: captured and replayed; the detach stays
outside it, in the loop, as in the example, since a call whose tensor arguments require grad runs
normally), and PyTorch eager (``torch.set_num_threads(2)``). Every process returns the losses of
its first 5 steps; the harness prints the largest difference from PyTorch's.

Inference (``infer``): a 2-layer ``nn.LSTM`` and a 2-layer ``nn.GRU`` (input 64, hidden 128,
sequence 35; batch 1 and batch 20), one seeded NumPy draw of weights each, the model returning the
output sequence (T, N, 128). PyTorch exports each (cell, batch) to ONNX (TorchScript exporter,
``dynamo=False``, opset 14, static shapes: one LSTM or GRU node per layer). Then onnxruntime runs
the file (CPU provider, ``intra_op_num_threads=2``, sequential; column ``onnxruntime``), lazyvic
imports it (``lazyvic.onnx.load``) and runs it through ``lazyvic.compile`` (``lazyvic.onnx``),
lazyvic's own ``nn.LSTM`` / ``nn.GRU`` with the same state_dict runs through ``lazyvic.compile``
(``lazyvic.nn``), and PyTorch runs its model eagerly under ``no_grad`` (``torch``). Every
process checks its output against PyTorch's (stored beside the ONNX file).

As benchmarks/resnet18.py: the parent imports neither lazyvic nor torch; each (case, runtime,
repetition) is a child process started once the machine is quiet (other processes using less
than 0.3 cores, or after --max-wait); repetitions are interleaved; each process times every
call after a warm-up (at least --iters calls and 0.5 s) and reports the median; the tables show
medians over processes (spread min..max). Ratios are ``lazyvic / this`` in steps/s or
sequences/s (above 1: lazyvic is faster). ``--busy`` adds rows measured with one core held by a
busy Python process (``_common.busy_process``). On 2 cores any 2-thread pool suffers when
another process is busy: read the "other cores" column. Under each table, per lazyvic runtime: the
mean milliseconds a timed call spent running plans (``lazyvic.metrics``' ``execute_seconds``)
beside the median call, and the size of its largest plan (ops, steps, kernels, native segments).

This file is a benchmark harness, not a test: lazyvic itself never imports torch.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (ROOT, HERE):  # benchmark the checkout; the house harness sits beside this file
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _common import (  # noqa: E402
    add_harness_args,
    busy_process,
    counter_delta,
    cpu_sample,
    loadavg,
    other_cores,
    rate_cell,
    run_quiet_child,
    source_fingerprint,
    write_json,
)
from resnet18 import _time  # noqa: E402
from tiny_gpt import _ratio, _stats, print_table  # noqa: E402

TRAIN_RUNTIMES = ("lazyvic", "lazyvic.compile", "torch")
INFER_RUNTIMES = ("lazyvic.onnx", "lazyvic.nn", "onnxruntime", "torch")
SEED = 0
THREADS = 2
CHILD_TIMEOUT_S = 900
LOSS_STEPS = 5  # the first steps' losses: the agreement check (all inside the warm-up)
TRAIN_WARMUP = 8  # lazyvic: interpreted, compiled, then (captured) the first call, the recording, replays
INFER_WARMUP = 5  # calls after the first (lazyvic: the recording, then replays)
WARMUP_S = 1.0  # then more warm-up calls for this long (a native segment a worker compiled switches in)
WINDOWS = 8  # bptt windows of the token stream, cycled
LR, CLIP = 20.0, 0.25  # the example's defaults
# Training: gates per hidden unit of each of the example's --model choices.
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
# Inference: cells, input and hidden sizes, layers, sequence length, batches.
CELLS = ("LSTM", "GRU")
I_INPUT, I_HIDDEN, I_LAYERS, I_SEQ = 64, 128, 2, 35
I_BATCHES = (1, 20)
OPSET = 14
LOADS = ("quiet", "one core busy")


# ------------------------------------------------------------------ training: model, weights, data
def train_weights(cfg: dict) -> dict:
    """The RNNModel state_dict, one seeded NumPy draw initialized as the example's init_weights."""
    r = np.random.default_rng(SEED)
    ntoken, ninp, nhid = cfg["ntoken"], cfg["ninp"], cfg["nhid"]
    out = {"encoder.weight": r.uniform(-0.1, 0.1, (ntoken, ninp)).astype(np.float32)}
    stdv, g = 1.0 / np.sqrt(nhid), GATES[cfg["model"]]
    for k in range(cfg["nlayers"]):
        fan_in = ninp if k == 0 else nhid
        for name, shape in (
            ("weight_ih", (g * nhid, fan_in)),
            ("weight_hh", (g * nhid, nhid)),
            ("bias_ih", (g * nhid,)),
            ("bias_hh", (g * nhid,)),
        ):
            out[f"rnn.{name}_l{k}"] = r.uniform(-stdv, stdv, shape).astype(np.float32)
    out["decoder.weight"] = r.uniform(-0.1, 0.1, (ntoken, nhid)).astype(np.float32)
    out["decoder.bias"] = np.zeros(ntoken, np.float32)
    return out


def train_batches(cfg: dict) -> list:
    """WINDOWS (data (bptt, batch) int64, targets (bptt * batch,) int64) pairs cut from one random
    token stream as the example's get_batch cuts its batchified corpus."""
    bptt = cfg["bptt"]
    stream = np.random.default_rng(SEED + 1).integers(0, cfg["ntoken"], (WINDOWS * bptt + 1, cfg["batch"]))
    return [(stream[i : i + bptt], stream[i + 1 : i + 1 + bptt].reshape(-1)) for i in range(0, WINDOWS * bptt, bptt)]


def rnn_model(nn, F, cfg: dict):
    """pytorch/examples' word_language_model RNNModel (untied; its ``--model`` LSTM, GRU, RNN_TANH or
    RNN_RELU) in ``nn``/``F``, lazyvic's or torch's: the same code, the same parameter names."""
    ntoken, kind = cfg["ntoken"], cfg["model"]

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(cfg["dropout"])
            self.encoder = nn.Embedding(ntoken, cfg["ninp"])
            sizes = (cfg["ninp"], cfg["nhid"], cfg["nlayers"])
            if kind in ("LSTM", "GRU"):
                self.rnn = getattr(nn, kind)(*sizes, dropout=cfg["dropout"])
            else:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[kind]
                self.rnn = nn.RNN(*sizes, nonlinearity=nonlinearity, dropout=cfg["dropout"])
            self.decoder = nn.Linear(cfg["nhid"], ntoken)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output).view(-1, ntoken)
            return F.log_softmax(decoded, dim=1), hidden

    return RNNModel()


def train_step_fn(model, nn, F, cfg: dict):
    """The body of the example's train() loop after repackage_hidden: ``(data, targets, h, c)`` ->
    (loss, h, c) for an LSTM, ``(data, targets, h)`` -> (loss, h) for a GRU or RNN."""
    lr, clip, lstm = cfg["lr"], cfg["clip"], cfg["model"] == "LSTM"

    def train_step(data, targets, *hidden):
        model.zero_grad()
        output, hidden = model(data, hidden if lstm else hidden[0])
        loss = F.nll_loss(output, targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        return (loss, *hidden) if lstm else (loss, hidden)

    return train_step


def child_train(spec: dict, rec: dict) -> None:
    rt, cfg = spec["runtime"], spec["cfg"]
    batches, weights = train_batches(cfg), train_weights(cfg)
    shape = (cfg["nlayers"], cfg["batch"], cfg["nhid"])
    compiled = None
    if rt == "torch":
        import torch

        torch.set_num_threads(THREADS)
        torch.manual_seed(SEED)
        nn, F = torch.nn, torch.nn.functional
        model = rnn_model(nn, F, cfg)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches]
        hidden = (torch.zeros(shape), torch.zeros(shape))[: 2 if cfg["model"] == "LSTM" else 1]
        rec["torch"] = torch.__version__
        run = train_step_fn(model, nn, F, cfg)
    else:
        import lazyvic as lv

        lv.manual_seed(SEED)
        nn, F = lv.nn, lv.nn.functional
        model = rnn_model(nn, F, cfg)
        model.load_state_dict(weights)
        data = [(lv.tensor(x), lv.tensor(y)) for x, y in batches]
        hidden = (lv.zeros(*shape), lv.zeros(*shape))[: 2 if cfg["model"] == "LSTM" else 1]
        lv.sync(*model.parameters(), *hidden)  # nothing of the setup leaks into the first step
        run = train_step_fn(model, nn, F, cfg)
        if rt == "lazyvic.compile":
            run = compiled = lv.compile(run)
    model.train()
    state = {"k": 0, "hidden": hidden}

    def step():
        x, y = data[state["k"] % WINDOWS]
        state["k"] += 1
        hidden = (t.detach() for t in state["hidden"])  # repackage_hidden
        loss, *state["hidden"] = run(x, y, *hidden)
        return loss.item()

    first, losses, t_end = [], [], None
    while t_end is None or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        loss = step()
        first.append(time.perf_counter() - t0)
        if len(losses) < LOSS_STEPS:
            losses.append(loss)
        if len(first) == TRAIN_WARMUP:
            t_end = time.perf_counter() + WARMUP_S
    rec["losses"], rec["warmup_step_s"] = losses, first
    counters = _lazyvic_counters() if rt != "torch" else None
    a = cpu_sample()
    times = _time(step, spec["iters"], warmup=0)
    rec["other_cores_timed"] = other_cores(a, cpu_sample())
    rec["timed"] = _stats(times)
    rec["n_timed"] = len(times)
    rec["rate"] = 1.0 / rec["timed"]["median_s"]  # steps/s
    if counters is not None:
        _lazyvic_profile(rec, counters, len(times))
    rec["last_loss"] = step()
    if compiled is not None:
        rec["compile"] = {
            "replays": compiled.replays,
            "recordings": compiled.recordings,
            "fallbacks": compiled.fallbacks,
            "reasons": {str(k): v for k, v in compiled.reasons.items()},
        }


def _lazyvic_counters() -> dict:
    import lazyvic.metrics

    return lazyvic.metrics.snapshot()


def _lazyvic_profile(rec: dict, counters: dict, calls: int) -> None:
    """Where lazyvic's time went in the timed calls: the counters' change (``execute_seconds``:
    running plans), mean time per call spent running plans, and the largest plans."""
    import lazyvic.metrics

    rec["counters_timed"] = delta = counter_delta(_lazyvic_counters(), counters)
    rec["execute_ms_per_call"] = 1e3 * delta.get("execute_seconds", 0.0) / max(calls, 1)
    keys = ("ops", "runs", "steps", "kernels", "native_segments", "fallbacks")
    # compiled plans first (a captured step's replays run a plan of their own; the cache's entry
    # for the same trace, from the step's first call, may never have been compiled)
    largest = sorted(lazyvic.metrics.plans(), key=lambda p: (p["steps"] > 0, p["ops"]), reverse=True)[:3]
    rec["plans"] = [{k: p[k] for k in keys} for p in largest]


# ------------------------------------------------------------------ inference
def infer_weights(cell: str) -> dict:
    """The state_dict of ``Net(cell)``: PyTorch's default U(-1/sqrt(H), 1/sqrt(H)), seeded."""
    r = np.random.default_rng(SEED + CELLS.index(cell) + 10)
    g, stdv = (4 if cell == "LSTM" else 3) * I_HIDDEN, 1.0 / np.sqrt(I_HIDDEN)
    out = {}
    for k in range(I_LAYERS):
        fan_in = I_INPUT if k == 0 else I_HIDDEN
        for name, shape in (
            ("weight_ih", (g, fan_in)),
            ("weight_hh", (g, I_HIDDEN)),
            ("bias_ih", (g,)),
            ("bias_hh", (g,)),
        ):
            out[f"rnn.{name}_l{k}"] = r.uniform(-stdv, stdv, shape).astype(np.float32)
    return out


def infer_input(batch: int) -> np.ndarray:
    return np.random.default_rng(SEED + 100 + batch).standard_normal((I_SEQ, batch, I_INPUT)).astype(np.float32)


def infer_net(nn, cell: str):
    """A recurrent network of ``nn`` (lazyvic's or torch's) returning its output sequence."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(nn, cell)(I_INPUT, I_HIDDEN, I_LAYERS)

        def forward(self, x):
            return self.rnn(x)[0]

    return Net()


def _onnx_name(cell: str, batch: int) -> str:
    return f"{cell.lower()}_b{batch}.onnx"


def export_onnx(workdir: Path) -> dict:
    """Child: write one ONNX file per (cell, batch) and PyTorch's outputs beside them."""
    import onnx
    import torch

    torch.set_num_threads(THREADS)
    ref, ops = {}, {}
    for cell in CELLS:
        model = infer_net(torch.nn, cell)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in infer_weights(cell).items()})
        model.eval()
        for batch in I_BATCHES:
            path = workdir / _onnx_name(cell, batch)
            x = torch.from_numpy(infer_input(batch))
            with torch.no_grad():
                torch.onnx.export(
                    model,
                    (x,),
                    str(path),
                    dynamo=False,
                    opset_version=OPSET,
                    input_names=["input"],
                    output_names=["output"],
                )
                ref[f"{cell}_b{batch}"] = model(x).numpy()
            ops[path.name] = sorted({n.op_type for n in onnx.load(str(path)).graph.node})
    np.savez(workdir / "reference_outputs.npz", **ref)
    return {"dir": str(workdir), "onnx_ops": ops, "torch": torch.__version__, "onnx": onnx.__version__}


def child_infer(spec: dict, rec: dict) -> None:
    rt, cell, batch = spec["runtime"], spec["cell"], spec["batch"]
    path = Path(spec["dir"]) / _onnx_name(cell, batch)
    x_np = infer_input(batch)
    counters = None
    if rt in ("lazyvic.onnx", "lazyvic.nn"):
        import lazyvic as lv

        if rt == "lazyvic.onnx":
            module = lv.onnx.load(str(path))
        else:
            module = infer_net(lv.nn, cell)
            module.load_state_dict(infer_weights(cell))
        module.eval()
        compiled = lv.compile(module)
        x = lv.tensor(x_np)

        def run():
            with lv.no_grad():
                y = compiled(x)
                return (y[0] if isinstance(y, (list, tuple)) else y).numpy()
    elif rt == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        rec["onnxruntime"] = ort.__version__

        def run():
            return sess.run(None, {"input": x_np})[0]
    else:
        import torch

        torch.set_num_threads(THREADS)
        model = infer_net(torch.nn, cell)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in infer_weights(cell).items()})
        model.eval()
        x = torch.from_numpy(x_np)
        rec["torch"] = torch.__version__

        def run():
            with torch.no_grad():
                return model(x).numpy()

    t0 = time.perf_counter()
    y = run()
    rec["first_call_s"] = time.perf_counter() - t0
    ref = np.load(Path(spec["dir"]) / "reference_outputs.npz")[f"{cell}_b{batch}"]
    rec["max_abs_diff_vs_torch"] = float(np.abs(np.asarray(y) - ref).max())
    for _ in range(INFER_WARMUP):
        run()
    t_end = time.perf_counter() + WARMUP_S
    while time.perf_counter() < t_end:
        run()
    if rt.startswith("lazyvic"):
        counters = _lazyvic_counters()
    a = cpu_sample()
    times = _time(run, spec["iters"], warmup=0)
    rec["other_cores_timed"] = other_cores(a, cpu_sample())
    rec["timed"] = _stats(times)
    rec["n_timed"] = len(times)
    rec["rate"] = batch / rec["timed"]["median_s"]  # sequences/s
    if counters is not None:
        _lazyvic_profile(rec, counters, len(times))
        rec["compile"] = {
            "replays": compiled.replays,
            "recordings": compiled.recordings,
            "fallbacks": compiled.fallbacks,
            "reasons": {str(k): v for k, v in compiled.reasons.items()},
        }


def child_main(spec: dict) -> dict:
    rec = {"spec": spec, "loadavg_start": loadavg(), "pid": os.getpid()}
    if spec["case"] == "export":
        rec.update(export_onnx(Path(spec["dir"])))
    elif spec["case"] == "train":
        child_train(spec, rec)
    else:
        child_infer(spec, rec)
    rec["loadavg_end"] = loadavg()
    return rec


# ------------------------------------------------------------------ parent
def run_child(spec: dict, max_wait_s: float, env_extra: dict) -> dict:
    wait = max_wait_s if max_wait_s > 0 else None
    return run_quiet_child(Path(__file__).resolve(), spec, env_extra, CHILD_TIMEOUT_S, wait)


def _label(spec: dict) -> str:
    if spec["case"] == "train":
        c = spec["cfg"]
        return f"{c['model']} LM step ({c['nlayers']}x{c['nhid']}, bptt {c['bptt']}, batch {c['batch']})"
    return f"{spec['cell']} {I_LAYERS}x{I_HIDDEN}, seq {I_SEQ}, batch {spec['batch']}"


def _row_key(spec: dict) -> str:
    return _label(spec) + ("" if spec["load"] == "quiet" else ", one core busy")


def _progress(rec: dict) -> None:
    spec = rec["spec"]
    if "error" in rec:
        msg = "ERROR " + rec["error"] + "\n" + rec.get("stderr_tail", "")[-1500:]
    else:
        oc = rec.get("other_cores_timed")
        unit = "steps/s" if spec["case"] == "train" else "seq/s"
        msg = (
            f"{rec['rate']:9.1f} {unit} (median {rec['timed']['median_s'] * 1e3:.2f} ms of {rec['n_timed']}; "
            f"other cores {'-' if oc is None else f'{oc:.2f}'}; waited {rec['quiet_wait_s']:.0f} s; "
            f"process {rec['process_wall_s']:.0f} s)"
        )
        c = rec.get("compile")
        # an inference call records once; a training step runs normally once, then records once
        if c and (c["recordings"] > 1 or c["fallbacks"] > (1 if spec["case"] == "train" else 0)):
            msg += f"\n    {c['recordings']} recording(s), {c['fallbacks']} call(s) ran normally: {c['reasons']}"
    print(f"  {_row_key(spec) + ' / ' + spec['runtime']:<64} {msg}", flush=True)


def summarize(recs: list, runtimes: tuple) -> list:
    """Rows: one per case and load, the median rate per runtime (spread) and lazyvic's ratios."""
    order = list(dict.fromkeys(_row_key(r["spec"]) for r in recs))
    rows = []
    for key in order:
        mine = [r for r in recs if _row_key(r["spec"]) == key]
        row = {"case": key}
        for rt in runtimes:
            ok = [r for r in mine if r["spec"]["runtime"] == rt and "error" not in r]
            errs = [r for r in mine if r["spec"]["runtime"] == rt and "error" in r]
            if ok:
                rates = [r["rate"] for r in ok]
                row[rt] = {
                    "rate": statistics.median(rates),
                    "min": min(rates),
                    "max": max(rates),
                    "n": len(rates),
                    "other_cores": [r.get("other_cores_timed") for r in ok],
                }
                if "max_abs_diff_vs_torch" in ok[0]:
                    row[rt]["max_abs_diff_vs_torch"] = max(r["max_abs_diff_vs_torch"] for r in ok)
                if "losses" in ok[0]:
                    row[rt]["losses"] = [r["losses"] for r in ok]
                if "execute_ms_per_call" in ok[0]:
                    row[rt]["median_ms"] = statistics.median(r["timed"]["median_s"] * 1e3 for r in ok)
                    row[rt]["execute_ms_per_call"] = statistics.median(r["execute_ms_per_call"] for r in ok)
                    row[rt]["plans"] = ok[0]["plans"]
            elif errs:
                row[rt] = {"error": errs[0]["error"], "stderr_tail": errs[0].get("stderr_tail", "")[-1500:]}
        for mine_rt in (rt for rt in runtimes if rt.startswith("lazyvic")):
            lz = row.get(mine_rt, {}).get("rate")
            for ref in (rt for rt in runtimes if not rt.startswith("lazyvic")):
                other = row.get(ref, {}).get("rate")
                row[f"{mine_rt}/{ref}"] = lz / other if lz and other else None
        if "losses" in row.get("torch", {}):
            row["loss_check"] = _loss_check(row, runtimes)
        rows.append(row)
    return rows


def _loss_check(row: dict, runtimes: tuple) -> dict:
    """The largest |loss - torch's| over the first LOSS_STEPS steps of every process, per runtime."""
    ref = row["torch"]["losses"][0]
    out = {}
    for rt in runtimes:
        runs = row.get(rt, {}).get("losses")
        if runs:
            out[rt] = max(abs(a - b) for losses in runs for a, b in zip(losses, ref))
    return {"steps": LOSS_STEPS, "torch_losses": ref, "max_abs_diff_vs_torch": out}


def print_summary(title: str, unit: str, rows: list, runtimes: tuple, dropout: float) -> None:
    refs = [rt for rt in runtimes if not rt.startswith("lazyvic")]
    mine = [rt for rt in runtimes if rt.startswith("lazyvic")]
    ratio_keys = [f"{m}/{r}" for m in mine for r in refs]

    def cores(row):
        xs = [x for rt in runtimes for x in row.get(rt, {}).get("other_cores", []) if x is not None]
        return f"{statistics.median(xs):.2f}/{max(xs):.2f}" if xs else "-"

    short = {"onnxruntime": "ORT", "lazyvic.compile": "compiled"}
    headers = [
        f"{title} ({unit}, median over processes)",
        *runtimes,
        *["/".join(short.get(p, p) for p in k.split("/")) for k in ratio_keys],
        "other cores med/max",
    ]
    fmt = ".1f" if unit == "steps/s" else ".0f"
    table = [
        [r["case"], *[rate_cell(r.get(rt), "rate", fmt, fmt) for rt in runtimes], *[_ratio(r[k]) for k in ratio_keys]]
        + [cores(r)]
        for r in rows
    ]
    print()
    print_table(headers, table)
    for r in rows:
        for rt in runtimes:
            if isinstance(r.get(rt), dict) and "error" in r[rt]:
                print(f"  {r['case']} / {rt}: {r[rt]['error']}; {r[rt]['stderr_tail'].strip().splitlines()[-1:]}")
        diffs = {rt: r[rt]["max_abs_diff_vs_torch"] for rt in runtimes if "max_abs_diff_vs_torch" in r.get(rt, {})}
        if diffs:
            print(f"  {r['case']}: max |output - torch|: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
        for rt in runtimes:
            d = r.get(rt, {})
            if "execute_ms_per_call" in d and d["plans"]:
                p = d["plans"][0]
                print(
                    f"  {r['case']} / {rt}: {d['execute_ms_per_call']:.2f} of {d['median_ms']:.2f} ms a call running "
                    f"plans (mean vs median); largest plan {p['ops']} ops in {p['steps']} steps ({p['kernels']} kernels, "
                    f"{p['native_segments']} native segments{', fallbacks ' + str(p['fallbacks']) if p['fallbacks'] else ''})"
                )
        if "loss_check" in r:
            lc = r["loss_check"]
            ref = ", ".join(f"{x:.5f}" for x in lc["torch_losses"])
            diffs = ", ".join(f"{k} {v:.1e}" for k, v in lc["max_abs_diff_vs_torch"].items() if k != "torch")
            note = " (dropout > 0: each runtime draws its own masks; not comparable)" if dropout > 0 else ""
            print(f"  {r['case']}: torch's first {lc['steps']} losses {ref}; max |loss - torch|: {diffs}{note}")


def _cfg(args) -> dict:
    return {
        "ntoken": args.ntoken,
        "ninp": args.ninp,
        "nhid": args.nhid,
        "nlayers": args.nlayers,
        "bptt": args.bptt,
        "batch": args.batch,
        "dropout": args.dropout,
        "model": args.model,
        "lr": LR,
        "clip": CLIP,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_harness_args(ap, ("train", "infer"), "default 30; quick 10")
    g = ap.add_argument_group("training step sizes (pytorch/examples word_language_model's RNNModel)")
    g.add_argument("--ntoken", type=int, default=1000, help="vocabulary (default 1000)")
    g.add_argument("--ninp", type=int, default=128, help="embedding size (default 128)")
    g.add_argument("--nhid", type=int, default=128, help="LSTM hidden size (default 128)")
    g.add_argument("--nlayers", type=int, default=2, help="LSTM layers (default 2)")
    g.add_argument("--bptt", type=int, default=35, help="sequence length (default 35)")
    g.add_argument("--batch", type=int, default=20, help="batch size (default 20)")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout (default 0: losses comparable; example 0.2)")
    g.add_argument("--model", choices=tuple(GATES), default="LSTM", help="the example's recurrent layer (default LSTM)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rec = child_main(json.loads(args.child))
        Path(args.child_out).write_text(json.dumps(rec))
        return 0

    reps = args.reps or (1 if args.quick else 3)
    iters = args.iters or (10 if args.quick else 30)
    max_wait = args.max_wait if args.max_wait is not None else (0 if args.quick else 60)
    loads = LOADS if args.busy else LOADS[:1]
    cfg = _cfg(args)
    # Numba's and lazyvic's caches stay where they are: a warm cache is the steady state measured.
    env_extra = {
        "OMP_NUM_THREADS": str(THREADS),
        "NUMBA_NUM_THREADS": str(THREADS),
        "OPENBLAS_NUM_THREADS": str(THREADS),
    }
    t_start = time.perf_counter()
    print(
        f"rnn benchmark: {platform.machine()}, {os.cpu_count()} cores, {THREADS} threads per runtime, "
        f"{reps} process(es) per runtime and case, load {loadavg()}, "
        f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        flush=True,
    )
    sources = source_fingerprint()
    print(f"  lazyvic sources: git HEAD {sources['git_head']}, sha1 {sources['lazyvic_sources_sha1']}", flush=True)
    payload = {"config": cfg, "sources": sources, "records": [], "summary": {}}
    specs = []
    if args.only in (None, "train"):
        print(
            f"  train: ntoken {cfg['ntoken']}, ninp {cfg['ninp']}, nhid {cfg['nhid']}, {cfg['nlayers']} layers, "
            f"bptt {cfg['bptt']}, batch {cfg['batch']}, dropout {cfg['dropout']}, SGD lr {LR}, clip {CLIP}",
            flush=True,
        )
        for load in loads:
            for _ in range(reps):
                specs += [
                    {"case": "train", "runtime": rt, "cfg": cfg, "iters": iters, "load": load} for rt in TRAIN_RUNTIMES
                ]
    if args.only in (None, "infer"):
        workdir = args.keep_onnx or Path(tempfile.mkdtemp(prefix="lazyvic-rnn-"))
        workdir.mkdir(parents=True, exist_ok=True)
        exported = run_child({"case": "export", "dir": str(workdir)}, 0, env_extra)
        payload["export"] = exported
        if "error" in exported:
            print("ONNX export failed:\n" + exported.get("stderr_tail", ""))
            return 1
        for name, ops in exported["onnx_ops"].items():
            print(f"  exported {workdir / name} (opset {OPSET}; ops: {', '.join(ops)})", flush=True)
        for load in loads:
            for cell in CELLS:
                for batch in I_BATCHES:
                    for _ in range(reps):
                        specs += [
                            {
                                "case": "infer",
                                "runtime": rt,
                                "cell": cell,
                                "batch": batch,
                                "dir": str(workdir),
                                "iters": iters,
                                "load": load,
                            }
                            for rt in INFER_RUNTIMES
                        ]
    recs = payload["records"]
    for load in loads:
        busy = busy_process() if load != "quiet" else None
        try:
            for spec in (s for s in specs if s["load"] == load):
                rec = run_child(spec, max_wait if busy is None else 0.0, env_extra)
                _progress(rec)
                recs.append(rec)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    for case, title, unit, runtimes in (
        ("train", "training step", "steps/s", TRAIN_RUNTIMES),
        ("infer", "inference", "sequences/s", INFER_RUNTIMES),
    ):
        mine = [r for r in recs if r["spec"]["case"] == case]
        if mine:
            rows = summarize(mine, runtimes)
            payload["summary"][case] = rows
            print_summary(title, unit, rows, runtimes, cfg["dropout"])
    wall = time.perf_counter() - t_start
    payload["wall_s"] = wall
    print(f"\n  total {wall / 60:.1f} min", flush=True)
    if args.json:
        write_json(args.json, payload, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
