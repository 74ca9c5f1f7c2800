#!/usr/bin/env python
"""Compile latency: how long the first compiled run of a new program takes, cold (empty kernel
and Numba caches) and warm (a second process with the caches the first one filled), with
kernels compiled side by side in worker processes (the default) and in the one process only
(``LAZYVIC_COMPILE_WORKERS=0``), quiet and with one core held by a busy process.

    python benchmarks/compile_latency.py [--cases tinygpt,chain] [--no-load] [--json PATH]

Cases:

- ``tinygpt``: the README's TinyGPT training step (d128, 2 layers, 4 heads, batch 16 x 64,
  AdamW, clipping), run plainly: the time of the first step that compiles (the third step;
  the first two run on the interpreter) and the kernels it compiled;
- ``chain``: a 3,333-op elementwise chain on 4,096 floats (multiply, add, tanh, ...): one
  kernel before ``MAX_KERNEL_OPS`` cut it, 14 since (6 distinct);
- ``unrolled``: pytorch/examples' time_sequence_prediction model (two ``LSTMCell``s, 1->51->51,
  and a ``Linear``, float64) unrolled in Python over 100 steps of 97 sequences, MSE loss and
  backward: the first compiled run (the third closure) and its kernels. Fusion planned such a
  trace with one wave per step (110 s at 100 steps) before its waves were bounded.

Each measurement is a fresh process with its own temporary cache directories
(``NUMBA_CACHE_DIR``, ``LAZYVIC_CACHE_DIR``); the warm process reuses the cold one's.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import busy_process  # noqa: E402

CASES = ("tinygpt", "chain", "unrolled")


def _tinygpt():
    import numpy as np

    import lazyvic as lv
    from lazyvic.models import TinyGPT

    rng = np.random.default_rng(0)
    xs = [lv.tensor(rng.integers(0, 65, (16, 64))) for _ in range(3)]
    lv.manual_seed(0)
    model = TinyGPT(vocab_size=65, d_model=128, n_layer=2, n_head=4, block_size=64)
    opt = lv.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step(x):
        _, loss = model(x, x)
        loss.backward()
        lv.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        return loss.item()

    step(xs[0])
    step(xs[1])  # interpreted runs; the third compiles
    t0 = time.perf_counter()
    step(xs[2])
    return time.perf_counter() - t0


def _chain():
    import numpy as np

    import lazyvic as lv

    x0 = lv.tensor(np.linspace(-1, 1, 4096, dtype=np.float32))

    def run():
        x = x0
        for i in range(2000):
            x = (x * 0.999 + 0.001).tanh() if i % 3 == 0 else (x + 0.01 if i % 3 == 1 else x * 1.001)
        return x.numpy()

    run()  # interpreted
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def _unrolled():
    import numpy as np

    import lazyvic as lv

    lv.manual_seed(0)
    cell1, cell2, head = lv.nn.LSTMCell(1, 51).double(), lv.nn.LSTMCell(51, 51).double(), lv.nn.Linear(51, 1).double()
    params = [*cell1.parameters(), *cell2.parameters(), *head.parameters()]
    t = np.arange(101) + np.random.default_rng(0).integers(-80, 80, (97, 1))
    data = lv.tensor(np.sin(t / 20.0))
    x, y = data[:, :-1], data[:, 1:]

    def closure():  # the script's Sequence.forward and closure
        for p in params:
            p.grad = None
        h, c, h2, c2 = (lv.zeros(97, 51, dtype=lv.float64) for _ in range(4))
        outs = []
        for x_t in x.split(1, dim=1):
            h, c = cell1(x_t, (h, c))
            h2, c2 = cell2(h, (h2, c2))
            outs.append(head(h2))
        loss = lv.nn.MSELoss()(lv.cat(outs, dim=1), y)
        loss.backward()
        return loss.item()

    closure()
    closure()  # interpreted runs; the third compiles
    t0 = time.perf_counter()
    closure()
    return time.perf_counter() - t0


def child(case: str) -> dict:
    seconds = {"tinygpt": _tinygpt, "chain": _chain, "unrolled": _unrolled}[case]()
    import lazyvic as lv

    s = lv.metrics.snapshot()
    return {
        "seconds": seconds,
        "kernels_compiled": s.get("kernels_compiled", 0),
        "kernels_loaded": s.get("kernels_loaded", 0),
    }


def _run(case: str, caches: Path, workers: str | None) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=str(HERE.parent),
        NUMBA_CACHE_DIR=str(caches / "numba"),
        LAZYVIC_CACHE_DIR=str(caches / "lazyvic"),
    )
    env.pop("LAZYVIC_COMPILE_WORKERS", None)
    if workers is not None:
        env["LAZYVIC_COMPILE_WORKERS"] = workers
    out = subprocess.run(
        [sys.executable, __file__, "--child", case], capture_output=True, text=True, env=env, timeout=900
    )
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--no-load", action="store_true", help="quiet runs only")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    loads = ["quiet"] if args.no_load else ["quiet", "one core busy"]
    settings = {"workers (default)": None, "one process": "0"}
    rows = []
    print(f"{'case':8s} {'load':14s} {'compiles in':18s} {'cold s':>7s} {'kernels':>8s} {'warm s':>7s}")
    for load in loads:
        busy = busy_process() if load != "quiet" else None
        try:
            for case in args.cases.split(","):
                for label, workers in settings.items():
                    with tempfile.TemporaryDirectory(prefix="lazyvic-bench-") as d:
                        cold = _run(case, Path(d), workers)
                        warm = _run(case, Path(d), workers)
                    row = {"case": case, "load": load, "compiles_in": label, "cold": cold, "warm": warm}
                    rows.append(row)
                    if "error" in cold or "error" in warm:
                        print(f"{case:8s} {load:14s} {label:18s} error:\n{cold.get('error') or warm.get('error')}")
                        continue
                    print(
                        f"{case:8s} {load:14s} {label:18s} {cold['seconds']:7.2f} "
                        f"{cold['kernels_compiled']:8d} {warm['seconds']:7.2f}",
                        flush=True,
                    )
        finally:
            if busy is not None:
                busy.kill()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
