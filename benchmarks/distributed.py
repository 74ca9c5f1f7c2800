#!/usr/bin/env python
"""Data-parallel training throughput: lazyvic (``lazyvic.distributed`` over MPI, its DDP, plain and
through ``lazyvic.compile``) beside PyTorch DDP (gloo), on 1 and 2 processes of one machine.

    python benchmarks/distributed.py [--busy] [--only digits gpt] [--steps N] [--reps N]
                                     [--max-wait S] [--mpi-arg ARG ...] [--json PATH]

Workloads: the digits MLP (64-128-10, SGD momentum 0.9, lr 0.1, combined batch 128) and the TinyGPT
training step (vocab 65, d_model 128, 2 layers, 4 heads, block 64; combined batch 16 x 64, AdamW
lr 3e-4, weight decay 0.1, gradient clipping at 1.0), both from the same NumPy-drawn weights in
both frameworks. Per framework and workload: 1 process on the whole combined batch (no DDP) with
the framework's default threads and with 1 thread, and 2 processes (DDP, half the batch each, 1
thread each: NUMBA_NUM_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = 1, and
``torch.set_num_threads(1)``); lazyvic also with the step captured by ``lazyvic.compile``.

Every measurement is a fresh launch of ``_distributed_worker.py``: plainly for 1 process, through
``python -m lazyvic.distributed.run -n 2`` (mpirun) or ``python -m torch.distributed.run
--standalone --nproc-per-node 2`` for 2. The parent imports neither lazyvic nor torch. Run it
with a Python that has both (and mpi4py); see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import (  # noqa: E402
    busy_process,
    cpu_sample,
    loadavg,
    other_cores,
    source_fingerprint,
    wait_for_quiet,
    write_json,
)

WORKER = HERE / "_distributed_worker.py"
WORKLOADS = {
    "digits": dict(title="digits MLP 64-128-10, SGD momentum, combined batch 128", warmup=20, steps=1000),
    "gpt": dict(title="TinyGPT (d 128, 2 layers), AdamW, combined batch 16 x 64", warmup=20, steps=50),
}
CHUNKS = 5  # timed steps are split in chunks; a process's steps/s is the median chunk's
# (processes, threads per process): None is the framework's default (both use every core)
CONFIGS = ((1, None), (1, 1), (2, 1))
RUNS = (("lazyvic", "eager"), ("torch", "eager"), ("lazyvic", "compile"))  # interleaved in this order
THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
CHILD_TIMEOUT_S = 600
LOSS_STEP = 3  # the combined-batch loss of this step is compared across rows
STALL = 0.8  # a rank whose mean steps/s is below this times its median chunk's gets a warning


# ---------------------------------------------------------------------- launching
def command(spec: dict, prefix: str, mpi_args: list) -> list:
    """The command line of one measurement: the worker itself, or a launcher starting it twice."""
    worker = [str(WORKER), json.dumps(spec), prefix]
    if spec["nproc"] == 1:
        return [sys.executable, *worker]
    n = str(spec["nproc"])
    if spec["framework"] == "lazyvic":
        return [
            sys.executable,
            "-m",
            "lazyvic.distributed.run",
            "-n",
            n,
            *(f"--mpi-arg={a}" for a in mpi_args),
            *worker,
        ]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", n, *worker]


def environment(threads, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if threads is not None:
        env.update(dict.fromkeys(THREAD_VARIABLES, str(threads)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env["LAZYVIC_CACHE_DIR"] = str(cache / "lazyvic")  # the run's own kernel caches: the first
    env["NUMBA_CACHE_DIR"] = str(cache / "numba")  # lazyvic process of a workload compiles
    env.setdefault("LAZYVIC_DIST_TIMEOUT", "120")  # a stuck collective fails instead of hanging
    return env


def run_one(spec: dict, cache: Path, mpi_args: list, max_wait) -> dict:
    """Launch one measurement (after waiting for a quiet machine unless ``max_wait`` is None) and
    collect its ranks' records."""
    waited, before = wait_for_quiet(max_wait, descendants=False) if max_wait is not None else (0.0, None)
    tmp = Path(tempfile.mkdtemp(prefix="distributed-", dir=cache))
    prefix = str(tmp / "out")
    rec = {"spec": spec, "quiet_wait_s": round(waited, 1), "other_cores_before": before}
    a = cpu_sample(descendants=False)
    proc = subprocess.Popen(
        command(spec, prefix, mpi_args),
        env=environment(spec["threads"], cache),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a timeout stops the launcher and its ranks
    )
    try:
        stdout, stderr = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        rec["error"] = f"timed out after {CHILD_TIMEOUT_S} s"
        return rec
    b = cpu_sample(descendants=False)
    rec["process_wall_s"] = b[0] - a[0]
    rec["other_cores"] = other_cores(a, b)  # the launched processes are reaped: they count as ours
    ranks = [json.loads(p.read_text()) for p in sorted(tmp.glob("out.rank*.json"))]
    if len(ranks) != spec["nproc"]:
        rec["error"] = f"exit status {proc.returncode}, {len(ranks)} of {spec['nproc']} rank records"
        rec["output_tail"] = (stdout + stderr)[-3000:]
        return rec
    rec["ranks"] = ranks
    rec["warnings"] = steady_warnings(ranks)
    if proc.returncode != 0:  # every rank wrote its record: the failure came at the teardown
        rec["warnings"].append(f"exit status {proc.returncode} after every rank wrote its record")
        rec["output_tail"] = (stdout + stderr)[-3000:]
    rec["steps_per_s"] = min(r["steps_per_s"] for r in ranks)  # the ranks step together
    rec["losses"] = [statistics.fmean(r["losses"][k] for r in ranks) for k in range(len(ranks[0]["losses"]))]
    comm = [r["comm"] for r in ranks if "comm" in r]
    if comm:
        rec["comm_ms_per_step"] = statistics.fmean(c["ms_per_step"] for c in comm)
        rec["collectives_per_step"] = statistics.fmean(c["collectives_per_step"] for c in comm)
    return rec


def steady_warnings(ranks: list) -> list:
    """What says that the timed steps were not steady: a chunk much slower than the others (the
    median hides it), or lazyvic compiling, interpreting, or a captured step not replaying."""
    out = []
    for r in ranks:
        if r["steps_per_s_mean"] < STALL * r["steps_per_s"]:
            chunks = ", ".join(f"{t:.3f}" for t in r["chunk_s"])
            out.append(
                f"rank {r['rank']}: mean {r['steps_per_s_mean']:.1f} steps/s, below {STALL} x the median "
                f"chunk's (a stall; chunk seconds {chunks})"
            )
        c = r.get("timed_counters", {})
        for k in ("plans_compiled", "kernels_compiled", "interpreted_runs", "fallbacks", "capture_fallbacks"):
            if c.get(k):
                out.append(f"rank {r['rank']}: {k} {c[k]} in the timed steps")
        cap = r.get("info", {}).get("capture")
        if cap and cap["fallbacks"] + cap["recordings"] > 2:
            out.append(f"rank {r['rank']}: lazyvic.compile {cap}")
    return out


def label(spec: dict) -> str:
    threads = "default" if spec["threads"] is None else str(spec["threads"])
    return f"{spec['framework']:8s} {spec['mode']:8s} {spec['nproc']} proc x {threads} thr"


def progress(rec: dict) -> None:
    if "error" in rec:
        msg = "ERROR " + rec["error"] + ("\n" + rec["output_tail"] if "output_tail" in rec else "")
    else:
        msg = f"{rec['steps_per_s']:9.1f} steps/s"
        if "comm_ms_per_step" in rec:
            msg += f", comm {rec['comm_ms_per_step']:.2f} ms/step"
        oc = rec["other_cores"]
        msg += f"  [{rec['process_wall_s']:.1f} s; waited {rec['quiet_wait_s']:.0f} s; other cores "
        msg += ("-" if oc is None else f"{oc:.2f}") + "]"
        for w in rec["warnings"]:
            msg += f"\n      warning: {w}"
    print(f"  {rec['spec']['workload']:6s} {label(rec['spec'])} #{rec['rep'] + 1}: {msg}", flush=True)


# ---------------------------------------------------------------------- summary
def summarize(recs: list, workload: str) -> list:
    """One row per (framework, mode, processes, threads): the median over processes, ratios."""

    def rate(fw, mode, nproc, threads):
        xs = [
            r["steps_per_s"]
            for r in recs
            if "error" not in r
            and r["spec"]["workload"] == workload
            and (r["spec"]["framework"], r["spec"]["mode"], r["spec"]["nproc"], r["spec"]["threads"])
            == (fw, mode, nproc, threads)
        ]
        return statistics.median(xs) if xs else None

    rows = []
    for nproc, threads in CONFIGS:
        for fw, mode in RUNS:
            mine = [
                r
                for r in recs
                if r["spec"]["workload"] == workload
                and (r["spec"]["framework"], r["spec"]["mode"], r["spec"]["nproc"], r["spec"]["threads"])
                == (fw, mode, nproc, threads)
            ]
            if not mine:
                continue
            ok = [r for r in mine if "error" not in r]
            row = {"workload": workload, "framework": fw, "mode": mode, "processes": nproc, "threads": threads}
            if not ok:
                rows.append(row | {"error": mine[0]["error"]})
                continue
            sps = rate(fw, mode, nproc, threads)
            torch_sps = rate("torch", "eager", nproc, threads)
            one_thread = rate(fw, mode, 1, 1)
            default = rate(fw, mode, 1, None)
            comm = [r["comm_ms_per_step"] for r in ok if "comm_ms_per_step" in r]
            row |= {
                "steps_per_s": sps,
                "steps_per_s_all": [r["steps_per_s"] for r in ok],
                "vs_torch": sps / torch_sps if torch_sps else None,
                "scaling_efficiency": sps / (nproc * one_thread) if nproc > 1 and one_thread else None,
                "speedup_vs_1proc_default": sps / default if default else None,
                "comm_ms_per_step": statistics.median(comm) if comm else None,
                "collectives_per_step": ok[0].get("collectives_per_step"),
                "loss_at_step": {LOSS_STEP: ok[0]["losses"][LOSS_STEP - 1]}
                if len(ok[0]["losses"]) >= LOSS_STEP
                else {},
                "other_cores": [r["other_cores"] for r in ok],
            }
            rows.append(row)
    return rows


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_table(rows: list, title: str) -> None:
    print(f"\n{title}")
    head = (
        "framework",
        "mode",
        "procs",
        "threads",
        "steps/s",
        "vs torch",
        "scaling eff",
        "vs 1p default",
        "comm ms/step",
    )
    widths = (9, 8, 5, 7, 9, 8, 11, 13, 16)
    print("  ".join(h.rjust(w) if i >= 4 else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for r in rows:
        threads = "default" if r["threads"] is None else str(r["threads"])
        if "error" in r:
            cells = (r["framework"], r["mode"], str(r["processes"]), threads, "error", "", "", "", "")
        else:
            comm = "-"
            if r["comm_ms_per_step"] is not None:
                comm = f"{r['comm_ms_per_step']:.2f} ({r['collectives_per_step']:.0f}/step)"
            eff = "-" if r["scaling_efficiency"] is None else f"{100 * r['scaling_efficiency']:.0f} %"
            cells = (
                r["framework"],
                r["mode"],
                str(r["processes"]),
                threads,
                f"{r['steps_per_s']:.1f}",
                _x(r["vs_torch"]),
                eff,
                _x(r["speedup_vs_1proc_default"]),
                comm,
            )
        print("  ".join(c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    losses = [(r, r["loss_at_step"].get(LOSS_STEP)) for r in rows if "error" not in r and r["loss_at_step"]]
    ref = next((v for r, v in losses if r["framework"] == "torch" and r["processes"] == 1), None)
    if ref is not None:
        diff = max(abs(v - ref) for _, v in losses)
        print(
            f"loss of the combined batch at step {LOSS_STEP}: {ref:.6f} (torch, 1 process); largest difference "
            f"over all rows {diff:.1e}"
        )


# ---------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busy", action="store_true", help="run everything beside a Python process spinning on one core")
    ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS), help="workloads to run")
    ap.add_argument("--frameworks", nargs="+", choices=("lazyvic", "torch"), default=["lazyvic", "torch"])
    ap.add_argument(
        "--steps",
        type=int,
        help="timed steps per process (default " + ", ".join(f"{k} {w['steps']}" for k, w in WORKLOADS.items()) + ")",
    )
    ap.add_argument("--warmup", type=int, help="warm-up steps per process (default 20)")
    ap.add_argument("--reps", type=int, help="launches per row, interleaved; the median is shown (default 2; --busy 1)")
    ap.add_argument(
        "--max-wait",
        type=float,
        default=5.0,
        metavar="S",
        help="quiet runs: before each launch wait up to S s for other processes to use < 0.3 cores (default 5)",
    )
    ap.add_argument(
        "--mpi-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="passed to lazyvic's launcher as --mpi-arg=ARG (e.g. --mpi-arg=--bind-to --mpi-arg=none)",
    )
    ap.add_argument("--json", type=Path, help="results file (default benchmarks/results/distributed[_busy].json)")
    args = ap.parse_args(argv)
    if args.reps is None:  # busy: the default-thread rows crawl (1 TinyGPT step/s), keep the run short
        args.reps = 1 if args.busy else 2
    json_path = args.json or HERE / "results" / ("distributed_busy.json" if args.busy else "distributed.json")
    load = "one core busy" if args.busy else "quiet"
    print(
        f"distributed.py: {load}; {os.cpu_count()} CPUs; Python {platform.python_version()}; "
        f"load average {loadavg()}; {source_fingerprint()}",
        flush=True,
    )
    t_start = time.perf_counter()
    recs = []
    busy = busy_process() if args.busy else None
    try:
        with tempfile.TemporaryDirectory(prefix="lazyvic-distributed-") as d:
            cache = Path(d)
            for workload in args.only:
                w = WORKLOADS[workload]
                for rep in range(args.reps):
                    for nproc, threads in CONFIGS:
                        for fw, mode in RUNS:
                            if fw not in args.frameworks:
                                continue
                            spec = dict(
                                workload=workload,
                                framework=fw,
                                mode=mode,
                                nproc=nproc,
                                threads=threads,
                                warmup=args.warmup if args.warmup is not None else w["warmup"],
                                steps=args.steps or w["steps"],
                                chunks=CHUNKS,
                            )
                            rec = run_one(spec, cache, args.mpi_arg, None if args.busy else args.max_wait)
                            rec["rep"] = rep
                            progress(rec)
                            recs.append(rec)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    summary = {}
    for workload in args.only:
        summary[workload] = summarize(recs, workload)
        print_table(summary[workload], f"{WORKLOADS[workload]['title']} ({load}): steps/s of the combined batch")
    wall = time.perf_counter() - t_start
    print(f"\n{len(recs)} launches in {wall:.0f} s; results in {json_path}")
    write_json(
        json_path,
        {
            "load": load,
            "argv": sys.argv[1:],
            "python": sys.executable,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_end": loadavg(),
            "sources": source_fingerprint(),
            "wall_s": wall,
            "summary": summary,
            "records": recs,
        },
    )
    return 0 if all("error" not in r for r in recs) else 1


if __name__ == "__main__":
    sys.exit(main())
