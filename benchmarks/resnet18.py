#!/usr/bin/env python
"""ResNet-18 inference and conv2d benchmark: lazyvic vs onnxruntime vs PyTorch eager, CPU,
each runtime in its own fresh process, images/s and ratios.

    python benchmarks/resnet18.py [--quick] [--only resnet|conv] [--reps N] [--iters N]
                                  [--max-wait S] [--json PATH] [--keep-onnx DIR]

Model: ResNet-18 in torchvision's layout with ``width=16`` (stages of 16/32/64/128 channels),
``num_classes=10``, the standard stem (7x7/2 convolution and 3x3/2 max pool), 32x32 inputs,
inference (evaluation-mode batch norm), at batch 1 and batch 32. One seeded NumPy draw of the
weights (tests/_resnet_weights.py) is loaded into the PyTorch twin, which is exported to ONNX
(opset 13; the TorchScript exporter folds each batch norm into its convolution). Then

- onnxruntime runs that file (CPU provider, ``intra_op_num_threads=2``, sequential);
- lazyvic runs the same file through its importer (``lazyvic.onnx.load``); if the importer
  fails, ``lazyvic.models.resnet18`` with the same state_dict runs instead, and the table says so;
- PyTorch runs the twin eagerly (``torch.set_num_threads(2)``, ``torch.no_grad()``).

Every process checks its logits against PyTorch's (stored beside the ONNX file) and reports
the largest difference. The conv2d cases run one convolution alone (forward, and
forward + backward for lazyvic and PyTorch).

As benchmarks/tiny_gpt.py: the parent imports neither lazyvic nor torch; each (case,
runtime, repetition) is a child process started once the machine is quiet (other
processes using less than 0.3 cores, or after --max-wait); repetitions of the runtimes are
interleaved; tables show medians over processes (spread min..max), each process timing
the median of its iterations. Ratios are ``lazyvic / this`` in images/s (above 1: lazyvic
is faster). On 2 cores, any 2-thread pool collapses when another process is busy: read
the "other cores" column.

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
for p in (ROOT, ROOT / "tests"):  # benchmark the checkout; tests/_resnet_weights.py draws the weights
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# The house harness (_common.py and tiny_gpt.py, beside this file): quiet waits, CPU sampling, tables.
from _common import (  # noqa: E402
    add_harness_args,
    cpu_sample,
    loadavg,
    other_cores,
    rate_cell,
    run_quiet_child,
    source_fingerprint,
)
from tiny_gpt import _ratio, _stats, print_table  # noqa: E402

# "lazyvic.compile" is the same imported model through lazyvic.compile (the plan replayed without
# recording the forward again); ResNet cases only.
RUNTIMES = ("lazyvic", "lazyvic.compile", "onnxruntime", "torch")
REFERENCES = ("onnxruntime", "torch")
SEED = 0
THREADS = 2
WIDTH, CLASSES, IMAGE = 16, 10, 32
BATCHES = (1, 32)
CHILD_TIMEOUT_S = 900
# conv2d alone: (name, batch, in channels, size, out channels, kernel, stride, padding)
CONVS = (
    ("3x3 64->64 s1", 32, 64, 32, 64, 3, 1, 1),
    ("1x1 64->128 s1", 32, 64, 32, 128, 1, 1, 0),
    ("3x3 64->128 s2", 32, 64, 32, 128, 3, 2, 1),
)


# ----------------------------------------------------------------- model and weights
def state_keys_and_shapes() -> list:
    """(key, shape) of the ResNet-18 state_dict, in torchvision's order."""
    w = WIDTH
    out = [("conv1.weight", (w, 3, 7, 7))] + _bn("bn1", w)
    inplanes = w
    for i in range(4):
        planes, stride = w * 2**i, 1 if i == 0 else 2
        for b in range(2):
            p = f"layer{i + 1}.{b}."
            cin = inplanes if b == 0 else planes
            out += [(p + "conv1.weight", (planes, cin, 3, 3))] + _bn(p + "bn1", planes)
            out += [(p + "conv2.weight", (planes, planes, 3, 3))] + _bn(p + "bn2", planes)
            if b == 0 and (stride != 1 or cin != planes):
                out += [(p + "downsample.0.weight", (planes, cin, 1, 1))] + _bn(p + "downsample.1", planes)
        inplanes = planes
    return out + [("fc.weight", (CLASSES, inplanes)), ("fc.bias", (CLASSES,))]


def _bn(prefix: str, c: int) -> list:
    return [(f"{prefix}.{k}", (c,)) for k in ("weight", "bias", "running_mean", "running_var")] + [
        (f"{prefix}.num_batches_tracked", ())
    ]


def weights() -> dict:
    from _resnet_weights import resnet_state

    return resnet_state(state_keys_and_shapes(), SEED)


def images(batch: int) -> np.ndarray:
    return np.random.default_rng(SEED + batch).standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)


def torch_resnet18():
    """The PyTorch twin of ``lazyvic.models.resnet18`` (torchvision's layout; no torchvision here)."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes, planes, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
                )

        def forward(self, x):
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, WIDTH, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(WIDTH)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            inplanes = WIDTH
            for i in range(4):
                planes, stride = WIDTH * 2**i, 1 if i == 0 else 2
                setattr(
                    self,
                    f"layer{i + 1}",
                    nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)),
                )
                inplanes = planes
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(inplanes, CLASSES)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    model = ResNet18()
    model.load_state_dict({k: torch.tensor(v) for k, v in weights().items()})
    return model.eval()


def export_onnx(workdir: Path) -> dict:
    """Child: write resnet18.onnx (batch axis dynamic) and PyTorch's logits for each batch."""
    import torch

    torch.manual_seed(SEED)
    model = torch_resnet18()
    path = workdir / "resnet18.onnx"
    with torch.no_grad():
        torch.onnx.export(
            model,
            (torch.from_numpy(images(1)),),
            str(path),
            dynamo=False,
            opset_version=13,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        )
        ref = {f"b{b}": model(torch.from_numpy(images(b))).numpy() for b in BATCHES}
    np.savez(workdir / "reference_logits.npz", **ref)
    import onnx

    ops = sorted({n.op_type for n in onnx.load(str(path)).graph.node})
    return {"onnx": str(path), "onnx_ops": ops, "torch": torch.__version__}


# ------------------------------------------------------------------------ children
def _time(fn, iters: int, warmup: int, min_s: float = 0.5) -> tuple:
    """Per-call times of ``fn`` after ``warmup`` calls: at least ``iters`` calls and ``min_s``."""
    for _ in range(warmup):
        fn()
    times, t_end = [], time.perf_counter() + min_s
    while len(times) < iters or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 20 * iters:
            break
    return times


def _lazyvic_resnet(spec: dict, rec: dict, compiled: bool = False):
    import lazyvic as lv

    try:
        module = lv.onnx.load(spec["onnx"])
        rec["lazyvic_model"] = "imported ONNX (lazyvic.onnx.load)"
    except Exception as e:  # noqa: BLE001 - the importer is young: fall back, and say so in the table
        from lazyvic.models import resnet18

        module = resnet18(num_classes=CLASSES, width=WIDTH)
        module.load_state_dict({k: lv.tensor(v) for k, v in weights().items()})
        rec["lazyvic_model"] = f"lazyvic.models.resnet18 (ONNX import failed: {type(e).__name__}: {e})"[:300]
    module.eval()
    if compiled:
        module = lv.compile(module)
        rec["lazyvic_model"] += " + lazyvic.compile"

    def forward(x):
        y = module(x)
        return y[0] if isinstance(y, (list, tuple)) else y

    return lv, forward


def child_resnet(spec: dict, rec: dict) -> None:
    rt, batch = spec["runtime"], spec["batch"]
    x_np = images(batch)
    if rt in ("lazyvic", "lazyvic.compile"):
        lv, forward = _lazyvic_resnet(spec, rec, compiled=rt == "lazyvic.compile")
        x = lv.tensor(x_np)

        def run():
            with lv.no_grad():
                return forward(x).numpy()
    elif rt == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(spec["onnx"], so, providers=["CPUExecutionProvider"])
        rec["onnxruntime"] = ort.__version__

        def run():
            return sess.run(None, {"input": x_np})[0]
    else:
        import torch

        torch.set_num_threads(THREADS)
        model = torch_resnet18()
        x = torch.from_numpy(x_np)
        rec["torch"] = torch.__version__

        def run():
            with torch.no_grad():
                return model(x).numpy()

    t_first = time.perf_counter()
    y = run()
    rec["first_call_s"] = time.perf_counter() - t_first
    ref = np.load(Path(spec["onnx"]).with_name("reference_logits.npz"))[f"b{batch}"]
    rec["max_abs_diff_vs_torch"] = float(np.abs(np.asarray(y) - ref).max())
    a = cpu_sample()
    times = _time(run, spec["iters"], warmup=5)
    rec["other_cores_timed"] = other_cores(a, cpu_sample())
    rec["timed"] = _stats(times)
    rec["images_per_s"] = batch / rec["timed"]["median_s"]


def child_conv(spec: dict, rec: dict) -> None:
    rt = spec["runtime"]
    _, n, c, size, o, k, s, p = next(cv for cv in CONVS if cv[0] == spec["conv"])
    rng = np.random.default_rng(SEED)
    x_np = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w_np = (rng.standard_normal((o, c, k, k)) * np.sqrt(2 / (c * k * k))).astype(np.float32)
    backward = spec["backward"]
    if rt == "lazyvic":
        import lazyvic as lv
        import lazyvic.functional as F

        x, w = lv.tensor(x_np, requires_grad=backward), lv.tensor(w_np, requires_grad=backward)
        if backward:

            def run():
                x.grad = w.grad = None
                F.conv2d(x, w, stride=s, padding=p).sum().backward()
                lv.sync(x.grad, w.grad)
                return w.grad.numpy()
        else:

            def run():
                return F.conv2d(x, w, stride=s, padding=p).numpy()
    elif rt == "torch":
        import torch

        torch.set_num_threads(THREADS)
        x, w = torch.from_numpy(x_np).requires_grad_(backward), torch.from_numpy(w_np).requires_grad_(backward)
        if backward:

            def run():
                x.grad = w.grad = None
                torch.nn.functional.conv2d(x, w, stride=s, padding=p).sum().backward()
                return w.grad.numpy()
        else:

            def run():
                with torch.no_grad():
                    return torch.nn.functional.conv2d(x, w, stride=s, padding=p).numpy()
    else:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[s, s], pads=[p, p, p, p])
        graph = helper.make_graph(
            [node],
            "conv",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_np.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, o, None, None])],
            [numpy_helper.from_array(w_np, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 7  # what opset 13 came with (this onnx writes IR versions onnxruntime may not read yet)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        onnx.checker.check_model(model)

        def run():
            return sess.run(None, {"x": x_np})[0]

    a = cpu_sample()
    times = _time(run, spec["iters"], warmup=5)
    rec["other_cores_timed"] = other_cores(a, cpu_sample())
    rec["timed"] = _stats(times)
    rec["images_per_s"] = n / rec["timed"]["median_s"]
    rec["checksum"] = float(np.asarray(run(), dtype=np.float64).sum())
    oh = (size + 2 * p - k) // s + 1
    rec["gflops"] = 2 * n * o * oh * oh * c * k * k * (3 if backward else 1) / rec["timed"]["median_s"] / 1e9


def child_main(spec: dict) -> dict:
    rec = {"spec": spec, "loadavg_start": loadavg(), "pid": os.getpid()}
    if spec["case"] == "export":
        rec.update(export_onnx(Path(spec["dir"])))
    elif spec["case"] == "resnet":
        child_resnet(spec, rec)
    else:
        child_conv(spec, rec)
    rec["loadavg_end"] = loadavg()
    return rec


# ------------------------------------------------------------------------ parent
def run_child(spec: dict, max_wait_s: float, env_extra: dict) -> dict:
    wait = max_wait_s if spec["case"] != "export" else None
    return run_quiet_child(Path(__file__).resolve(), spec, env_extra, CHILD_TIMEOUT_S, wait)


def _label(spec: dict) -> str:
    if spec["case"] == "resnet":
        return f"resnet18 batch {spec['batch']}"
    return f"conv2d {spec['conv']}" + (" fwd+bwd" if spec["backward"] else " fwd")


def _progress(rec: dict) -> None:
    spec = rec["spec"]
    if "error" in rec:
        msg = "ERROR " + rec["error"] + "\n" + rec.get("stderr_tail", "")[-1500:]
    else:
        oc = rec.get("other_cores_timed")
        msg = (
            f"{rec['images_per_s']:9.1f} img/s (median {rec['timed']['median_s'] * 1e3:.3f} ms; "
            f"other cores {'-' if oc is None else f'{oc:.2f}'}; waited {rec['quiet_wait_s']:.0f} s)"
        )
    print(f"  {_label(spec) + ' / ' + spec['runtime']:<42} {msg}", flush=True)


def summarize(recs: list) -> list:
    """Rows: one per case, the median images/s per runtime (spread) and lazyvic's ratios."""
    rows, order = [], []
    for r in recs:
        key = _label(r["spec"])
        if key not in order:
            order.append(key)
    for key in order:
        mine = [r for r in recs if _label(r["spec"]) == key]
        row = {"case": key}
        for rt in RUNTIMES:
            ok = [r for r in mine if r["spec"]["runtime"] == rt and "error" not in r]
            errs = [r["error"] for r in mine if r["spec"]["runtime"] == rt and "error" in r]
            if ok:
                ips = [r["images_per_s"] for r in ok]
                row[rt] = {
                    "images_per_s": statistics.median(ips),
                    "min": min(ips),
                    "max": max(ips),
                    "n": len(ips),
                    "other_cores": [r.get("other_cores_timed") for r in ok],
                    "max_abs_diff_vs_torch": max((r.get("max_abs_diff_vs_torch", 0.0) for r in ok), default=None),
                }
                if "checksum" in ok[0]:
                    row[rt]["output_sum"] = ok[0]["checksum"]
                if rt == "lazyvic" and "lazyvic_model" in ok[0]:
                    row["lazyvic_model"] = ok[0]["lazyvic_model"]
            elif errs:
                row[rt] = {"error": errs[0]}
        for mine_rt in ("lazyvic", "lazyvic.compile"):
            lz = row.get(mine_rt, {}).get("images_per_s")
            for rt in REFERENCES:
                other = row.get(rt, {}).get("images_per_s")
                key = f"ratio_vs_{rt}" if mine_rt == "lazyvic" else f"compiled_ratio_vs_{rt}"
                row[key] = lz / other if lz and other else None
        rows.append(row)
    return rows


def print_summary(rows: list) -> None:
    def cell(row, rt):
        return rate_cell(row.get(rt), "images_per_s", ".0f")

    def cores(row):
        xs = [x for rt in RUNTIMES for x in row.get(rt, {}).get("other_cores", []) if x is not None]
        return f"{statistics.median(xs):.2f}/{max(xs):.2f}" if xs else "-"

    headers = [
        "case (images/s, median over processes)",
        *RUNTIMES,
        "lazyvic/ORT",
        "lazyvic/torch",
        "compiled/ORT",
        "compiled/torch",
        "other cores med/max",
    ]
    table = [
        [
            r["case"],
            *[cell(r, rt) for rt in RUNTIMES],
            _ratio(r["ratio_vs_onnxruntime"]),
            _ratio(r["ratio_vs_torch"]),
            _ratio(r.get("compiled_ratio_vs_onnxruntime")),
            _ratio(r.get("compiled_ratio_vs_torch")),
            cores(r),
        ]
        for r in rows
    ]
    print()
    print_table(headers, table)
    for r in rows:
        if "lazyvic_model" in r:
            print(f"  {r['case']}: lazyvic ran {r['lazyvic_model']}")
        diffs = {
            rt: r[rt]["max_abs_diff_vs_torch"]
            for rt in RUNTIMES
            if isinstance(r.get(rt), dict) and r[rt].get("max_abs_diff_vs_torch") is not None
        }
        if diffs and r["case"].startswith("resnet"):
            print(f"  {r['case']}: max |logits - torch|: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
        sums = {rt: r[rt]["output_sum"] for rt in RUNTIMES if isinstance(r.get(rt), dict) and "output_sum" in r[rt]}
        if sums:
            print(
                f"  {r['case']}: sum of the output (or weight gradient): "
                + ", ".join(f"{k} {v:.6g}" for k, v in sums.items())
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_harness_args(ap, ("resnet", "conv"), "default 50; quick 20", busy=False)
    ap.add_argument("--no-backward", action="store_true", help="conv2d: forward only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rec = child_main(json.loads(args.child))
        Path(args.child_out).write_text(json.dumps(rec))
        return 0

    reps = args.reps or (1 if args.quick else 3)
    iters = args.iters or (20 if args.quick else 50)
    max_wait = args.max_wait if args.max_wait is not None else (0 if args.quick else 60)
    workdir = args.keep_onnx or Path(tempfile.mkdtemp(prefix="lazyvic-resnet18-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Numba's and lazyvic's caches stay where they are: a warm cache is the steady state measured.
    env_extra = {
        "OMP_NUM_THREADS": str(THREADS),
        "NUMBA_NUM_THREADS": str(THREADS),
        "OPENBLAS_NUM_THREADS": str(THREADS),
    }
    print(
        f"resnet18 benchmark: {platform.machine()}, {os.cpu_count()} cores, {THREADS} threads per runtime, "
        f"{reps} process(es) per runtime and case, load {loadavg()}, "
        f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        flush=True,
    )
    exported = run_child({"case": "export", "dir": str(workdir)}, 0, env_extra)
    if "error" in exported:
        print("ONNX export failed:\n" + exported.get("stderr_tail", ""))
        return 1
    print(f"  exported {exported['onnx']} (ops: {', '.join(exported['onnx_ops'])})", flush=True)
    specs = []
    if args.only in (None, "resnet"):
        for batch in BATCHES:
            for _ in range(reps):
                specs += [
                    {"case": "resnet", "runtime": rt, "batch": batch, "onnx": exported["onnx"], "iters": iters}
                    for rt in RUNTIMES
                ]
    if args.only in (None, "conv"):
        for conv in CONVS:
            for backward in (False,) if args.no_backward else (False, True):
                for _ in range(reps):
                    specs += [
                        {"case": "conv", "runtime": rt, "conv": conv[0], "backward": backward, "iters": iters}
                        for rt in RUNTIMES
                        if rt != "lazyvic.compile" and not (backward and rt == "onnxruntime")
                    ]
    recs = []
    for spec in specs:
        rec = run_child(spec, max_wait, env_extra)
        _progress(rec)
        recs.append(rec)
    rows = summarize(recs)
    print_summary(rows)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"records": recs, "summary": rows, "export": exported, "sources": source_fingerprint()},
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
