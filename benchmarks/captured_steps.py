#!/usr/bin/env python
"""Captured training steps: the digits MLP step (64-128-10, ReLU, cross-entropy, SGD lr 0.1,
batch 128) as users write it, run plainly and through ``lazyvic.compile`` (the whole step
captured and replayed), beside PyTorch eager, quiet and under load.

    python benchmarks/captured_steps.py [--steps N] [--reps N] [--no-load] [--json PATH]

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
    return lambda i: lv.sync(run(*data[i % NBATCH]))


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

    return step


def child(runtime: str, steps: int) -> dict:
    step = _torch_step() if runtime == "torch" else _lazyvic_step(runtime == "lazyvic.compile")
    t0 = time.perf_counter()
    for i in range(20):  # warm-up: recording, compiling, the first replays
        step(i)
    warm = time.perf_counter() - t0
    chunks = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(steps // 5):
            step(i)
        chunks.append((time.perf_counter() - t0) / (steps // 5))
    return {"runtime": runtime, "warmup_s": warm, "steps_per_s": 1.0 / statistics.median(chunks)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000, help="timed steps per process (default 1000)")
    ap.add_argument("--reps", type=int, default=3, help="processes per runtime and load (default 3)")
    ap.add_argument("--no-load", action="store_true", help="quiet runs only")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return 0
    loads = ["quiet"] if args.no_load else ["quiet", "one core busy"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    results = {(rt, load): [] for rt in RUNTIMES for load in loads}
    for load in loads:
        busy = busy_process() if load != "quiet" else None
        try:
            for rep in range(args.reps):
                for rt in RUNTIMES:
                    cmd = [sys.executable, __file__, "--child", rt, "--steps", str(args.steps)]
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
                    if out.returncode != 0:
                        print(f"{rt} ({load}) failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                        continue
                    rec = json.loads(out.stdout.strip().splitlines()[-1])
                    results[(rt, load)].append(rec)
                    print(f"  {rt:16s} {load:14s} #{rep + 1}: {rec['steps_per_s']:8.0f} steps/s", flush=True)
        finally:
            if busy is not None:
                busy.kill()
    print()
    print(f"digits MLP step ({IN}-{HID}-{OUT}, batch {BATCH}, SGD): median steps/s over {args.reps} process(es)")
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
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
