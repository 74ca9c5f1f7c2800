#!/usr/bin/env python
"""Captured training steps as users write them, run plainly and through ``lazyvic.compile`` (the
whole step captured and replayed), beside PyTorch eager, quiet and under load. Two workloads:

- ``digits``: the digits MLP step (64-128-10, ReLU, cross-entropy, SGD lr 0.1, batch 128);
- ``residual``: a 12-block pre-norm residual MLP step (batch 64, width 256: a Linear stem, 12
  blocks ``x = x + fc2(gelu(fc1(layer_norm(x))))`` with fc1 256->512 and fc2 512->256, a final
  LayerNorm and a Linear 256->10 head, cross-entropy, AdamW lr 1e-3 weight_decay 0.01), the same
  initial weights (NumPy, fixed seed) in every runtime.

    python benchmarks/captured_steps.py [--only digits residual] [--steps N] [--reps N] [--no-load] [--json PATH]

Each (runtime, load) measurement is a fresh process (torch's and Numba's OpenMP pools slow each
other down in one process), repeated ``--reps`` times, interleaved; the table shows the median
steps/s over processes. "Under load" runs a busy Python process (one core spinning) beside the
measurement, as on a shared machine. Ratios are steps/s over PyTorch eager's in the same load.
lazyvic itself never imports torch; this harness does, in its torch children only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import busy_process  # noqa: E402

RUNTIMES = ("lazyvic", "lazyvic.compile", "torch")
IN, HID, OUT, BATCH, LR, NBATCH = 64, 128, 10, 128, 0.1, 8

# The residual MLP: batch, width, hidden width of a block, blocks, classes, AdamW, timed steps.
R_BATCH, R_WIDTH, R_HID, R_BLOCKS, R_OUT = 64, 256, 512, 12, 10
R_LR, R_WD, R_STEPS = 1e-3, 0.01, 100  # ~20 s for the slowest process (torch or plain lazyvic, one core busy)
LOSS_STEPS = 3  # the residual children return the losses of their first steps: agreement check


def _data():
    import numpy as np

    r = np.random.default_rng(0)
    xs = [r.standard_normal((BATCH, IN), dtype=np.float32) for _ in range(NBATCH)]
    ys = [r.integers(0, OUT, BATCH).astype(np.int64) for _ in range(NBATCH)]
    return xs, ys


def _lazyvic_step(captured: bool):
    import lazyvic as lv
    import lazyvic.nn.functional as F

    lv.manual_seed(0)
    model = lv.nn.Sequential(lv.nn.Linear(IN, HID), lv.nn.ReLU(), lv.nn.Linear(HID, OUT))
    opt = lv.optim.SGD(model.parameters(), lr=LR)
    data = [(lv.tensor(x), lv.tensor(y)) for x, y in zip(*_data())]

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = lv.compile(train_step) if captured else train_step
    return lambda i: lv.sync(run(*data[i % NBATCH])), run


def _torch_step():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HID), torch.nn.ReLU(), torch.nn.Linear(HID, OUT))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in zip(*_data())]
    loss_fn = torch.nn.functional.cross_entropy

    def step(i):
        x, y = data[i % NBATCH]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step, None


# ------------------------------------------------------------------ residual MLP
def _residual_data():
    import numpy as np

    r = np.random.default_rng(1)
    xs = [r.standard_normal((R_BATCH, R_WIDTH), dtype=np.float32) for _ in range(NBATCH)]
    ys = [r.integers(0, R_OUT, R_BATCH).astype(np.int64) for _ in range(NBATCH)]
    return xs, ys


def _residual_weights() -> dict:
    """The initial state dict (PyTorch's default init: Linear U(-1/sqrt(in), 1/sqrt(in)),
    LayerNorm ones and zeros), drawn with a fixed seed, loaded into every runtime's model."""
    import numpy as np

    r = np.random.default_rng(2)
    out = {}

    def linear(name, fan_in, fan_out):
        bound = 1.0 / np.sqrt(fan_in)
        out[f"{name}.weight"] = r.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
        out[f"{name}.bias"] = r.uniform(-bound, bound, fan_out).astype(np.float32)

    def norm(name):
        out[f"{name}.weight"] = np.ones(R_WIDTH, np.float32)
        out[f"{name}.bias"] = np.zeros(R_WIDTH, np.float32)

    linear("stem", R_WIDTH, R_WIDTH)
    for b in range(R_BLOCKS):
        norm(f"blocks.{b}.norm")
        linear(f"blocks.{b}.fc1", R_WIDTH, R_HID)
        linear(f"blocks.{b}.fc2", R_HID, R_WIDTH)
    norm("norm")
    linear("head", R_WIDTH, R_OUT)
    return out


def _residual_model(nn, F):
    """The residual MLP in ``nn``/``F`` (lazyvic's or torch's: the same code, the same names)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(R_WIDTH)
            self.fc1 = nn.Linear(R_WIDTH, R_HID)
            self.fc2 = nn.Linear(R_HID, R_WIDTH)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.norm(x))))

    class ResidualMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(R_WIDTH, R_WIDTH)
            self.blocks = nn.ModuleList([Block() for _ in range(R_BLOCKS)])
            self.norm = nn.LayerNorm(R_WIDTH)
            self.head = nn.Linear(R_WIDTH, R_OUT)

        def forward(self, x):
            x = self.stem(x)
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x))

    return ResidualMLP()


def _lazyvic_residual(captured: bool):
    import lazyvic as lv
    import lazyvic.nn.functional as F

    lv.manual_seed(0)
    model = _residual_model(lv.nn, F)
    model.load_state_dict(_residual_weights())
    lv.sync(*model.parameters())  # nothing of the setup leaks into the first step
    opt = lv.optim.AdamW(model.parameters(), lr=R_LR, weight_decay=R_WD)
    data = [(lv.tensor(x), lv.tensor(y)) for x, y in zip(*_residual_data())]

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = lv.compile(train_step) if captured else train_step

    def step(i, want_loss=False):
        loss = run(*data[i % NBATCH])
        return loss.item() if want_loss else lv.sync(loss)

    return step, run


def _torch_residual():
    import torch

    torch.manual_seed(0)
    model = _residual_model(torch.nn, torch.nn.functional)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in _residual_weights().items()})
    opt = torch.optim.AdamW(model.parameters(), lr=R_LR, weight_decay=R_WD)
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in zip(*_residual_data())]
    loss_fn = torch.nn.functional.cross_entropy

    def step(i, want_loss=False):
        x, y = data[i % NBATCH]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item() if want_loss else None

    return step, None


WORKLOADS = {
    "digits": {
        "title": f"digits MLP step ({IN}-{HID}-{OUT}, batch {BATCH}, SGD)",
        "steps": 1000,
        "losses": False,
        "lazyvic": _lazyvic_step,
        "torch": _torch_step,
    },
    "residual": {
        "title": (
            f"residual MLP step ({R_BLOCKS} pre-norm blocks {R_WIDTH}-{R_HID}-{R_WIDTH}, GELU, batch {R_BATCH}, AdamW)"
        ),
        "steps": R_STEPS,
        "losses": True,
        "lazyvic": _lazyvic_residual,
        "torch": _torch_residual,
    },
}


def child(runtime: str, steps: int, workload: str = "digits") -> dict:
    w = WORKLOADS[workload]
    step, compiled = w["torch"]() if runtime == "torch" else w["lazyvic"](runtime == "lazyvic.compile")
    losses = []
    t0 = time.perf_counter()
    for i in range(20):  # warm-up: recording, compiling, the first replays
        if w["losses"] and i < LOSS_STEPS:
            losses.append(step(i, want_loss=True))
        else:
            step(i)
    warm = time.perf_counter() - t0
    chunks = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(steps // 5):
            step(i)
        chunks.append((time.perf_counter() - t0) / (steps // 5))
    rec = {"runtime": runtime, "warmup_s": warm, "steps_per_s": 1.0 / statistics.median(chunks)}
    if w["losses"]:
        rec["losses"] = losses
    if compiled is not None and hasattr(compiled, "fallbacks"):
        rec["compile"] = {
            "replays": compiled.replays,
            "recordings": compiled.recordings,
            "fallbacks": compiled.fallbacks,
            "reasons": {str(k): v for k, v in compiled.reasons.items()},
        }
    return rec


def measure(workload: str, steps: int, reps: int, loads: list, env: dict) -> dict:
    results = {(rt, load): [] for rt in RUNTIMES for load in loads}
    for load in loads:
        busy = busy_process() if load != "quiet" else None
        try:
            for rep in range(reps):
                for rt in RUNTIMES:
                    cmd = [sys.executable, __file__, "--child", rt, "--steps", str(steps), "--only", workload]
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
                    if out.returncode != 0:
                        print(f"{rt} ({load}) failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                        continue
                    rec = json.loads(out.stdout.strip().splitlines()[-1])
                    results[(rt, load)].append(rec)
                    print(f"  {rt:16s} {load:14s} #{rep + 1}: {rec['steps_per_s']:8.0f} steps/s", flush=True)
                    c = rec.get("compile")
                    # a training step's first call runs normally and its second records; every
                    # later call should replay
                    if c and (c["fallbacks"] > 1 or c["recordings"] > 1):
                        print(
                            f"  {rt:16s} {load:14s} #{rep + 1}: {c['recordings']} recording(s), "
                            f"{c['fallbacks']} call(s) ran normally: {c['reasons']}",
                            flush=True,
                        )
        finally:
            if busy is not None:
                busy.kill()
    return results


def report(workload: str, results: dict, reps: int, loads: list) -> dict:
    print()
    print(f"{WORKLOADS[workload]['title']}: median steps/s over {reps} process(es)")
    print(f"{'runtime':16s} {'load':14s} {'steps/s':>9s} {'vs torch':>9s} {'vs quiet':>9s}")
    table = {}
    for load in loads:
        ref = [r["steps_per_s"] for r in results[("torch", load)]]
        ref = statistics.median(ref) if ref else None
        for rt in RUNTIMES:
            rates = [r["steps_per_s"] for r in results[(rt, load)]]
            if not rates:
                continue
            rate = statistics.median(rates)
            quiet = [r["steps_per_s"] for r in results[(rt, "quiet")]]
            vs_quiet = rate / statistics.median(quiet) if quiet else None
            table[f"{rt} / {load}"] = {
                "steps_per_s": rate,
                "vs_torch": rate / ref if ref else None,
                "vs_quiet": vs_quiet,
            }
            vt = f"{rate / ref:.2f}x" if ref else "-"
            print(f"{rt:16s} {load:14s} {rate:9.0f} {vt:>9s} {vs_quiet:8.2f}x")
    if WORKLOADS[workload]["losses"]:
        table["losses"] = check_losses(results)
    return table


def check_losses(results: dict) -> dict:
    """Loss at step LOSS_STEPS of every process, per runtime; the largest difference from torch's."""
    k = LOSS_STEPS - 1
    per_rt = {
        rt: [r["losses"][k] for (r_rt, _), recs in results.items() if r_rt == rt for r in recs] for rt in RUNTIMES
    }
    ref = per_rt["torch"][0] if per_rt["torch"] else None
    if ref is None:
        print(f"loss at step {LOSS_STEPS}: no torch process finished, nothing to compare")
        return {"step": LOSS_STEPS, "per_runtime": per_rt, "max_abs_diff_vs_torch": None}
    diff = max(abs(v - ref) for vs in per_rt.values() for v in vs)
    shown = ", ".join(f"{rt} {vs[0]:.6f}" for rt, vs in per_rt.items() if vs)
    print(f"loss at step {LOSS_STEPS}: {shown}; max |diff| vs torch over all processes {diff:.1e}")
    return {"step": LOSS_STEPS, "per_runtime": per_rt, "max_abs_diff_vs_torch": diff}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only",
        nargs="+",
        choices=list(WORKLOADS),
        default=list(WORKLOADS),
        help="workloads to run (default: all)",
    )
    ap.add_argument(
        "--steps",
        type=int,
        help="timed steps per process (default: " + ", ".join(f"{k} {w['steps']}" for k, w in WORKLOADS.items()) + ")",
    )
    ap.add_argument("--reps", type=int, default=3, help="processes per runtime and load (default 3)")
    ap.add_argument("--no-load", action="store_true", help="quiet runs only")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.only = list(dict.fromkeys(args.only))  # in the order given, once each
    if args.child:
        if len(args.only) != 1:
            ap.error("--child takes one workload (--only NAME)")
        workload = args.only[0]
        print(json.dumps(child(args.child, args.steps or WORKLOADS[workload]["steps"], workload)))
        return 0
    loads = ["quiet"] if args.no_load else ["quiet", "one core busy"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    tables = {}
    for workload in args.only:
        steps = args.steps or WORKLOADS[workload]["steps"]
        if len(args.only) > 1:
            print(f"{workload}:", flush=True)
        results = measure(workload, steps, args.reps, loads, env)
        tables[workload] = report(workload, results, args.reps, loads)
        if workload != args.only[-1]:
            print()
    if args.json:
        # digits alone: the table as before (no workload level), so older readers keep working.
        out = tables["digits"] if args.only == ["digits"] else tables
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
