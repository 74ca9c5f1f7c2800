#!/usr/bin/env python
"""MobileNetV2 and EfficientNet-B0 inference (lazyvic, lazyvic.compile, onnxruntime, PyTorch
eager) and two training steps (lazyvic, lazyvic.compile, PyTorch eager), CPU, each runtime in
its own fresh process, images/s or steps/s and ratios.

    python benchmarks/convnets.py [--quick] [--only infer|train] [--reps N] [--iters N]
                                  [--size S] [--size32 S] [--busy] [--max-wait S]
                                  [--json PATH] [--keep-onnx DIR]

Inference: MobileNetV2 and EfficientNet-B0 in torchvision's layout (``torchvision.models``
``mobilenet_v2`` / ``efficientnet_b0``, ``weights=None``, ``torch.manual_seed(0)``, 1000 classes,
evaluation mode; where torchvision cannot be imported, the twins below: the same modules built
in the same order, so the same parameter names and the same seeded weights, checked against
torchvision 0.28). torchvision's initialization (batch norm as the identity, fan-out
convolutions) gives logits of 1e-9 (MobileNetV2) and 1e-13 (EfficientNet-B0), too small to
compare runtimes with, so a seeded draw then replaces the weights and batch norm statistics
(``_redraw``: logits of about 1-300). Batch 1 at ``--size`` (default 224) and batch 32 at
``--size32`` (default 224: one lazyvic call there took 0.57 s for MobileNetV2 and 1.1 s for
EfficientNet-B0 when this 2-core machine was quiet, 3-10x that with one core taken by another
process; the first, interpreted, call of EfficientNet-B0 takes about a minute), one seeded
NumPy draw of standard normal images per (batch, size), the same for every runtime. One process
exports each model once to ONNX (opset 13, TorchScript exporter, batch axis dynamic; it folds
batch norm into the convolutions) and saves PyTorch's logits. Then

- lazyvic imports that file (``lazyvic.onnx.load``) and calls it under ``lazyvic.no_grad()``
  (``.numpy()`` of the logits ends every call); ``lazyvic.compile`` wraps the same imported
  module (the plan replayed without recording the forward again);
- onnxruntime runs the file (CPU provider, ``intra_op_num_threads=2``, sequential);
- PyTorch runs the model eagerly (``torch.set_num_threads(2)``, ``torch.no_grad()``).

Each process checks its logits against PyTorch's from the export process (max abs difference).

Training steps (lazyvic, lazyvic.compile, PyTorch eager; the same initial weights and batches
in every runtime):

- ``mnist``: the pytorch/examples MNIST ``Net`` (conv 1->32 3x3, conv 32->64 3x3, max pool 2,
  dropout 0.25, fc 9216->128, dropout 0.5, fc 128->10, log_softmax, nll_loss), Adadelta lr 1.0,
  batch 64 of random 1x28x28 images and labels (4 batches cycled); weights drawn with NumPy
  (PyTorch's default ranges, U(-1/sqrt(fan_in), 1/sqrt(fan_in))). Dropout draws its own
  masks in each runtime, so the losses of the runtimes differ by more than rounding;
- ``resnet18``: ResNet-18 of width 16 (``lazyvic.models.resnet18(num_classes=10, width=16)``
  and benchmarks/resnet18.py's PyTorch twin, both loaded with its seeded weight draw), 32x32
  inputs, batch 32, training-mode batch norm, SGD lr 0.01 momentum 0.9, cross-entropy.

A step is zero_grad, forward, loss, backward, optimizer step, then ``loss.item()`` (in every
runtime). ``lazyvic.compile`` captures a function doing zero_grad/forward/backward/step and
returning the loss (its first call runs normally, the second records, later calls replay), and
``.item()`` is called outside it.

Method, as benchmarks/resnet18.py: the parent imports neither lazyvic nor torch; each (case,
runtime, repetition) is a child process started once the machine is quiet (other processes
using less than 0.3 cores, or after --max-wait); repetitions of the runtimes are interleaved;
each process times single calls or steps after its warm-up (the first call timed apart: lazyvic
interprets it, then compiles its plan; lazyvic warms up longer while a call still interprets,
compiles or records) and reports their median; tables show medians over
processes (spread min..max). Ratios are ``lazyvic / this`` in images/s or steps/s (above 1:
lazyvic is faster). ``--busy`` runs every row a second time with a busy Python process spinning
on one core (``_common.busy_process``), as on a shared machine. On 2 cores, any 2-thread pool
collapses when another process is busy: read the "other cores" column.

This file is a benchmark harness, not a test: lazyvic itself never imports torch.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
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
for p in (ROOT, HERE, ROOT / "tests"):  # the checkout's lazyvic; resnet18.py and tests/_resnet_weights.py
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
from tiny_gpt import _ratio, _stats, print_table  # noqa: E402

RUNTIMES = ("lazyvic", "lazyvic.compile", "onnxruntime", "torch")
REFERENCES = ("onnxruntime", "torch")
MODELS = ("mobilenet_v2", "efficientnet_b0")
TRAINS = ("mnist", "resnet18")
LOADS = ("quiet", "one core busy")
SEED = 0
THREADS = 2
CLASSES = 1000
BATCHES = (1, 32)
OPSET = 13
CHILD_TIMEOUT_S = 1200
INFER_WARMUP, TRAIN_WARMUP = 3, 8  # after the first call; a training step's trace changes over the first steps
MNIST_BATCH, MNIST_LR, N_BATCHES = 64, 1.0, 4
RESNET_BATCH, RESNET_IMAGE, RESNET_LR, RESNET_MOMENTUM = 32, 32, 0.01, 0.9
LOSS_STEPS = 3  # losses of the first steps, reported for agreement
# lazyvic warms up longer, up to EXTRA_WARMUP calls more, while its last call still did one of these
EXTRA_WARMUP = 20
STILL_WARMING = {
    "interpreted_runs",
    "plans_compiled",
    "kernels_compiled",
    "native_segments",
    "capture_recordings",
    "capture_fallbacks",
}
# torchvision's settings: MobileNetV2 (expansion t, channels c, blocks n, stride s) and
# EfficientNet-B0 (expansion, kernel, stride, in channels, out channels, blocks).
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
EFFICIENTNET_B0_STAGES = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


# ----------------------------------------------------------------- models and data
def images(batch: int, size: int) -> np.ndarray:
    return np.random.default_rng(SEED + batch).standard_normal((batch, 3, size, size)).astype(np.float32)


def _conv_bn_act(nn, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, act=None):
    """torchvision's ``Conv2dNormActivation``: Conv2d (no bias), BatchNorm2d, activation."""
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act(inplace=True)] if act is not None else []))


def _init_like_torchvision(model, nn, linear_init) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            linear_init(m.weight)
            nn.init.zeros_(m.bias)


def _twin_mobilenet_v2():
    """torchvision 0.28's ``mobilenet_v2(weights=None)`` (width 1.0, dropout 0.2)."""
    import torch
    from torch import nn

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride, t):
            super().__init__()
            hidden = inp * t
            self.use_res_connect = stride == 1 and inp == oup
            layers = [_conv_bn_act(nn, inp, hidden, 1, act=nn.ReLU6)] if t != 1 else []
            layers += [
                _conv_bn_act(nn, hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
                nn.BatchNorm2d(oup),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            features, cin = [_conv_bn_act(nn, 3, 32, 3, 2, act=nn.ReLU6)], 32
            for t, c, n, s in MOBILENET_V2_BLOCKS:
                for i in range(n):
                    features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            features.append(_conv_bn_act(nn, cin, 1280, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(1280, CLASSES))
            _init_like_torchvision(self, nn, lambda w: nn.init.normal_(w, 0, 0.01))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def _twin_efficientnet_b0():
    """torchvision 0.28's ``efficientnet_b0(weights=None)`` (stochastic depth is the identity in
    evaluation mode, which is all this twin runs)."""
    import torch
    from torch import nn

    class SqueezeExcitation(nn.Module):
        def __init__(self, cin, squeeze):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(cin, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, cin, 1)
            self.activation = nn.SiLU(inplace=True)
            self.scale_activation = nn.Sigmoid()

        def forward(self, x):
            return self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x))))) * x

    class MBConv(nn.Module):
        def __init__(self, t, k, stride, cin, cout):
            super().__init__()
            self.use_res_connect = stride == 1 and cin == cout
            hidden = cin * t
            layers = [_conv_bn_act(nn, cin, hidden, 1, act=nn.SiLU)] if hidden != cin else []
            layers += [
                _conv_bn_act(nn, hidden, hidden, k, stride, groups=hidden, act=nn.SiLU),
                SqueezeExcitation(hidden, max(1, cin // 4)),
                _conv_bn_act(nn, hidden, cout, 1),
            ]
            self.block = nn.Sequential(*layers)
            self.stochastic_depth = nn.Identity()

        def forward(self, x):
            return self.block(x) + x if self.use_res_connect else self.block(x)

    class EfficientNet(nn.Module):
        def __init__(self):
            super().__init__()
            layers = [_conv_bn_act(nn, 3, 32, 3, 2, act=nn.SiLU)]
            for t, k, s, cin, cout, n in EFFICIENTNET_B0_STAGES:
                layers.append(
                    nn.Sequential(*[MBConv(t, k, s if i == 0 else 1, cin if i == 0 else cout, cout) for i in range(n)])
                )
            layers.append(_conv_bn_act(nn, 320, 1280, 1, act=nn.SiLU))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Dropout(p=0.2, inplace=True), nn.Linear(1280, CLASSES))
            r = 1.0 / CLASSES**0.5
            _init_like_torchvision(self, nn, lambda w: nn.init.uniform_(w, -r, r))

        def forward(self, x):
            return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

    return EfficientNet()


def _redraw(model) -> None:
    """Seeded weights whose logits are O(1..100): torchvision's initialization (batch norm as the
    identity, fan-out convolutions, a 0.01 classifier) gives MobileNetV2 logits of about 1e-9 and
    EfficientNet-B0's of 1e-13, too small to compare runtimes with (and near denormals). Convolutions
    N(0, 2 / fan_in), batch norm scales and running variances U(0.5, 1.5), shifts and running means
    N(0, 0.1) (as tests/_resnet_weights.py), the classifier N(0, 1 / fan_in)."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.normal_(0, (2 / m.weight[0].numel()) ** 0.5, generator=g)
                if m.bias is not None:
                    m.bias.normal_(0, 0.1, generator=g)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.1, generator=g)
                m.running_mean.normal_(0, 0.1, generator=g)
                m.running_var.uniform_(0.5, 1.5, generator=g)
            elif isinstance(m, nn.Linear):
                m.weight.normal_(0, (1 / m.in_features) ** 0.5, generator=g)
                m.bias.normal_(0, 0.1, generator=g)


def torch_convnet(name: str) -> tuple:
    """(the model with its seeded weights, in evaluation mode; where it came from)."""
    import torch

    torch.manual_seed(SEED)
    try:
        import torchvision
        import torchvision.models as tvm

        model, source = getattr(tvm, name)(weights=None, num_classes=CLASSES), f"torchvision {torchvision.__version__}"
    except Exception as e:  # noqa: BLE001 - ImportError, or a torchvision built for another torch (RuntimeError)
        torch.manual_seed(SEED)
        twin = {"mobilenet_v2": _twin_mobilenet_v2, "efficientnet_b0": _twin_efficientnet_b0}[name]
        model, source = twin(), f"twin in convnets.py (torchvision not importable: {type(e).__name__})"
    _redraw(model)
    return model.eval(), source


def export_onnx(spec: dict, rec: dict) -> None:
    """Child: one ONNX file per (model, size), batch axis dynamic, and PyTorch's logits."""
    import onnx
    import torch

    torch.set_num_threads(THREADS)
    workdir = Path(spec["dir"])
    rec["torch"], rec["onnx_version"], rec["models"] = torch.__version__, onnx.__version__, {}
    for name in spec["models"]:
        for size in sorted({s for _, s in spec["shapes"]}):
            model, source = torch_convnet(name)
            path = workdir / f"{name}_{size}.onnx"
            t0 = time.perf_counter()
            with torch.no_grad():
                torch.onnx.export(
                    model,
                    (torch.from_numpy(images(1, size)),),
                    str(path),
                    dynamo=False,
                    opset_version=OPSET,
                    input_names=["input"],
                    output_names=["logits"],
                    dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                )
                ref = {f"b{b}": model(torch.from_numpy(images(b, s))).numpy() for b, s in spec["shapes"] if s == size}
            np.savez(workdir / f"{name}_{size}_logits.npz", **ref)
            ops: dict = {}
            for n in onnx.load(str(path)).graph.node:
                ops[n.op_type] = ops.get(n.op_type, 0) + 1
            rec["models"][f"{name}_{size}"] = {
                "onnx": str(path),
                "ops": dict(sorted(ops.items())),
                "params": sum(p.numel() for p in model.parameters()),
                "source": source,
                "export_s": round(time.perf_counter() - t0, 2),
            }


def mnist_net(nn, F):
    """pytorch/examples' MNIST ``Net``, in ``nn``/``F`` (lazyvic's or torch's: the same code)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
            x = self.dropout1(x).flatten(1)
            x = self.dropout2(F.relu(self.fc1(x)))
            return F.log_softmax(self.fc2(x), dim=1)

    return Net()


def mnist_weights() -> dict:
    r = np.random.default_rng(SEED + 1)
    out = {}
    for name, shape in (("conv1", (32, 1, 3, 3)), ("conv2", (64, 32, 3, 3)), ("fc1", (128, 9216)), ("fc2", (10, 128))):
        bound = 1.0 / np.sqrt(np.prod(shape[1:]))
        out[f"{name}.weight"] = r.uniform(-bound, bound, shape).astype(np.float32)
        out[f"{name}.bias"] = r.uniform(-bound, bound, shape[0]).astype(np.float32)
    return out


def train_batches(case: str) -> list:
    r = np.random.default_rng(SEED + 2)
    n, shape = (MNIST_BATCH, (1, 28, 28)) if case == "mnist" else (RESNET_BATCH, (3, RESNET_IMAGE, RESNET_IMAGE))
    return [
        (r.standard_normal((n, *shape), dtype=np.float32), r.integers(0, 10, n).astype(np.int64))
        for _ in range(N_BATCHES)
    ]


# ------------------------------------------------------------------------ children
def _lazyvic_counters(rec: dict):
    import lazyvic as lv

    rec["lazyvic_sources"] = source_fingerprint()
    return lv.metrics.snapshot


def _mode(c: dict, calls: int) -> str:
    """How lazyvic's timed calls ran, from the change of ``lazyvic.metrics``."""
    parts = []
    if c.get("capture_replays"):
        parts.append(f"{c['capture_replays'] / calls:g} replays/call")
    if c.get("capture_recordings") or c.get("capture_fallbacks"):
        parts.append(f"{c.get('capture_recordings', 0)} recordings, {c.get('capture_fallbacks', 0)} normal calls")
    comp, interp = c.get("compiled_runs", 0), c.get("interpreted_runs", 0)
    if comp or interp:
        parts.append("compiled" if not interp else f"{interp} of {comp + interp} plan runs interpreted")
    if c.get("traces"):
        parts.append(f"{c['traces'] / calls:g} traces/call")
    if c.get("fallbacks"):
        parts.append(f"{c['fallbacks']} fallbacks")
    if c.get("kernels_compiled"):
        parts.append(f"{c['kernels_compiled']} kernels compiled")
    return ", ".join(parts) or "no plan run"


def _timed(rec: dict, run, spec: dict, warmup: int, counters=None):
    """First call, ``warmup`` calls (lazyvic: more while a call still interprets or compiles),
    then timed calls (benchmarks/resnet18.py's ``_time``): at least ``spec["iters"]`` and
    ``spec["min_s"]`` seconds. Returns the first call's result."""
    from resnet18 import _time

    c0 = c1 = counters() if counters else None
    t0 = time.perf_counter()
    first = run()
    rec["first_call_s"] = time.perf_counter() - t0
    calls = 1
    while calls <= warmup or counters and calls <= warmup + EXTRA_WARMUP:
        run()
        calls += 1
        if counters:
            c, c1 = c1, counters()
            if calls > warmup and not set(counter_delta(c1, c)) & STILL_WARMING:
                break
    rec["warmup_s"], rec["warmup_calls"] = time.perf_counter() - t0, calls
    c1 = counters() if counters else None
    a = cpu_sample()
    times = _time(run, spec["iters"], warmup=0, min_s=spec["min_s"])
    rec["other_cores_timed"] = other_cores(a, cpu_sample())
    rec["timed"] = _stats(times)
    rec["calls"] = len(times)
    if counters:
        c2 = counters()
        rec["warmup_counters"], rec["timed_counters"] = counter_delta(c1, c0), counter_delta(c2, c1)
        rec["lazyvic_mode"] = _mode(rec["timed_counters"], len(times))
    return first


def child_infer(spec: dict, rec: dict) -> None:
    rt, batch, size = spec["runtime"], spec["batch"], spec["size"]
    x_np = images(batch, size)
    counters = None
    if rt in ("lazyvic", "lazyvic.compile"):
        import lazyvic as lv

        counters = _lazyvic_counters(rec)
        module = lv.onnx.load(spec["onnx"])
        module.eval()
        if rt == "lazyvic.compile":
            module = lv.compile(module)
        x = lv.tensor(x_np)

        def run():
            with lv.no_grad():
                y = module(x)
                return (y[0] if isinstance(y, (list, tuple)) else y).numpy()
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
        model, rec["torch_model"] = torch_convnet(spec["model"])
        x = torch.from_numpy(x_np)
        rec["torch"] = torch.__version__

        def run():
            with torch.no_grad():
                return model(x).numpy()

    y = _timed(rec, run, spec, INFER_WARMUP, counters)
    ref = np.load(Path(spec["onnx"]).with_name(f"{spec['model']}_{size}_logits.npz"))[f"b{batch}"]
    rec["max_abs_diff_vs_torch"] = float(np.abs(np.asarray(y) - ref).max())
    rec["max_abs_logit"] = float(np.abs(ref).max())
    rec["rate"] = batch / rec["timed"]["median_s"]


def _lazyvic_trainer(case: str, captured: bool):
    import lazyvic as lv
    import lazyvic.nn.functional as F

    lv.manual_seed(SEED)
    if case == "mnist":
        model = mnist_net(lv.nn, F)
        model.load_state_dict({k: lv.tensor(v) for k, v in mnist_weights().items()})
        opt = lv.optim.Adadelta(model.parameters(), lr=MNIST_LR)

        def loss_of(x, y):
            return F.nll_loss(model(x), y)
    else:
        from resnet18 import weights

        from lazyvic.models import resnet18

        model = resnet18(num_classes=10, width=16)
        model.load_state_dict({k: lv.tensor(v) for k, v in weights().items()})
        opt = lv.optim.SGD(model.parameters(), lr=RESNET_LR, momentum=RESNET_MOMENTUM)

        def loss_of(x, y):
            return F.cross_entropy(model(x), y)

    model.train()
    lv.sync(*model.parameters())  # nothing of the setup joins the first step
    data = [(lv.tensor(x), lv.tensor(y)) for x, y in train_batches(case)]

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        return loss

    return (lv.compile(train_step) if captured else train_step), data


def _torch_trainer(case: str):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    if case == "mnist":
        model = mnist_net(torch.nn, F)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in mnist_weights().items()})
        opt = torch.optim.Adadelta(model.parameters(), lr=MNIST_LR)

        def loss_of(x, y):
            return F.nll_loss(model(x), y)
    else:
        from resnet18 import torch_resnet18

        model = torch_resnet18()  # benchmarks/resnet18.py's twin: width 16, 10 classes, its weights
        opt = torch.optim.SGD(model.parameters(), lr=RESNET_LR, momentum=RESNET_MOMENTUM)

        def loss_of(x, y):
            return F.cross_entropy(model(x), y)

    model.train()
    data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in train_batches(case)]

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        return loss

    return train_step, data


def child_train(spec: dict, rec: dict) -> None:
    rt, case = spec["runtime"], spec["train"]
    counters = None
    if rt == "torch":
        import torch

        step, data = _torch_trainer(case)
        rec["torch"] = torch.__version__
    else:
        counters = _lazyvic_counters(rec)
        step, data = _lazyvic_trainer(case, rt == "lazyvic.compile")
    losses, i = [], [0]

    def run():
        x, y = data[i[0] % N_BATCHES]
        loss = step(x, y).item()
        if len(losses) < LOSS_STEPS:
            losses.append(loss)
        i[0] += 1
        return loss

    _timed(rec, run, spec, TRAIN_WARMUP, counters)
    rec["losses"] = losses
    rec["rate"] = 1.0 / rec["timed"]["median_s"]
    if rt == "lazyvic.compile":
        rec["capture"] = {
            "replays": step.replays,
            "recordings": step.recordings,
            "fallbacks": step.fallbacks,
            "reasons": {str(k): v for k, v in step.reasons.items()},
        }


def child_main(spec: dict) -> dict:
    rec = {"spec": spec, "loadavg_start": loadavg(), "pid": os.getpid()}
    t0 = time.perf_counter()
    {"export": export_onnx, "infer": child_infer, "train": child_train}[spec["case"]](spec, rec)
    rec["child_s"] = time.perf_counter() - t0
    rec["loadavg_end"] = loadavg()
    return rec


# ------------------------------------------------------------------------ parent
def run_child(spec: dict, max_wait_s: float, env_extra: dict) -> dict:
    wait = max_wait_s if max_wait_s > 0 else None
    return run_quiet_child(Path(__file__).resolve(), spec, env_extra, CHILD_TIMEOUT_S, wait)


def _label(spec: dict) -> str:
    if spec["case"] == "infer":
        label = f"{spec['model']} b{spec['batch']} {spec['size']}px"
    elif spec["train"] == "mnist":
        label = f"train mnist cnn b{MNIST_BATCH} Adadelta"
    else:
        label = f"train resnet18 w16 b{RESNET_BATCH} {RESNET_IMAGE}px SGD"
    return label + (" [1 core busy]" if spec["load"] != "quiet" else "")


def _progress(rec: dict) -> None:
    spec = rec["spec"]
    unit = "img/s" if spec["case"] == "infer" else "steps/s"
    if "error" in rec:
        msg = "ERROR " + rec["error"] + "\n" + rec.get("stderr_tail", "")[-2500:]
    else:
        oc = rec.get("other_cores_timed")
        msg = (
            f"{rec['rate']:9.2f} {unit} (median {rec['timed']['median_s'] * 1e3:.1f} ms of {rec['calls']}; "
            f"first call {rec['first_call_s']:.1f} s; other cores {'-' if oc is None else f'{oc:.2f}'}; "
            f"waited {rec['quiet_wait_s']:.0f} s)"
        )
        if "lazyvic_mode" in rec:
            msg += f"\n{'':46}lazyvic: {rec['lazyvic_mode']}"
    print(f"  {_label(spec) + ' / ' + spec['runtime']:<44} {msg}", flush=True)


def summarize(recs: list) -> list:
    """Rows: one per case, the median rate per runtime (spread) and lazyvic's ratios."""
    order = list(dict.fromkeys(_label(r["spec"]) for r in recs))
    rows = []
    for key in order:
        mine = [r for r in recs if _label(r["spec"]) == key]
        row = {"case": key, "unit": "images/s" if mine[0]["spec"]["case"] == "infer" else "steps/s"}
        for rt in RUNTIMES:
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
                    "first_call_s": [round(r["first_call_s"], 2) for r in ok],
                }
                for k in ("max_abs_diff_vs_torch", "max_abs_logit", "losses", "lazyvic_mode", "capture"):
                    if k in ok[0]:
                        row[rt][k] = max(r[k] for r in ok) if k == "max_abs_diff_vs_torch" else ok[0][k]
            elif errs:
                row[rt] = {"error": errs[0]["error"], "stderr_tail": errs[0].get("stderr_tail", "")}
        for mine_rt, prefix in (("lazyvic", "ratio_vs_"), ("lazyvic.compile", "compiled_ratio_vs_")):
            lz = row.get(mine_rt, {}).get("rate")
            for rt in REFERENCES:
                other = row.get(rt, {}).get("rate")
                row[prefix + rt] = lz / other if lz and other else None
        rows.append(row)
    return rows


def _exc_line(stderr_tail: str) -> str:
    """The last line of a traceback that names the exception."""
    lines = [ln.strip() for ln in stderr_tail.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.split(":")[0].split(".")[-1].endswith(("Error", "Exception", "Warning")):
            return ln[:400]
    return lines[-1][:400] if lines else ""


def print_summary(rows: list) -> None:
    def cell(row, rt):
        fmt = ".1f" if row["unit"] == "images/s" else ".2f"
        return rate_cell(row.get(rt), "rate", fmt, fmt)

    def cores(row):
        xs = [x for rt in RUNTIMES for x in row.get(rt, {}).get("other_cores", []) if x is not None]
        return f"{statistics.median(xs):.2f}/{max(xs):.2f}" if xs else "-"

    headers = [
        "case (median over processes)",
        "unit",
        *RUNTIMES,
        "lazyvic/ORT",
        "compiled/ORT",
        "lazyvic/torch",
        "compiled/torch",
        "other cores med/max",
    ]
    table = [
        [
            r["case"],
            r["unit"],
            *[cell(r, rt) for rt in RUNTIMES],
            _ratio(r["ratio_vs_onnxruntime"]),
            _ratio(r["compiled_ratio_vs_onnxruntime"]),
            _ratio(r["ratio_vs_torch"]),
            _ratio(r["compiled_ratio_vs_torch"]),
            cores(r),
        ]
        for r in rows
    ]
    print()
    print_table(headers, table)
    print()
    for r in rows:
        got = {rt: r[rt] for rt in RUNTIMES if isinstance(r.get(rt), dict)}
        diffs = {rt: d["max_abs_diff_vs_torch"] for rt, d in got.items() if "max_abs_diff_vs_torch" in d}
        if diffs:
            scale = next(d["max_abs_logit"] for d in got.values() if "max_abs_logit" in d)
            print(
                f"  {r['case']}: max |logits - torch| (largest |logit| {scale:.3g}): "
                + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
            )
        losses = {rt: d["losses"] for rt, d in got.items() if "losses" in d}
        if losses:
            print(
                f"  {r['case']}: loss of steps 1-{LOSS_STEPS}: "
                + "; ".join(f"{k} " + ", ".join(f"{v:.4f}" for v in vs) for k, vs in losses.items())
            )
        for rt, d in got.items():
            if rt.startswith("lazyvic") and "first_call_s" in d:
                print(
                    f"  {r['case']} / {rt}: first call {'/'.join(f'{s:.1f}' for s in d['first_call_s'])} s; "
                    f"timed calls: {d.get('lazyvic_mode', '-')}"
                )
            if "error" in d:
                print(f"  {r['case']} / {rt}: ERROR {d['error']}: {_exc_line(d.get('stderr_tail', ''))}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_harness_args(ap, ("infer", "train"), "default 20, batch-32 inference 5; quick 5, 2")
    ap.add_argument("--size", type=int, default=224, help="image size of the batch-1 inference rows (default 224)")
    ap.add_argument("--size32", type=int, default=224, help="image size of the batch-32 inference rows (default 224)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rec = child_main(json.loads(args.child))
        Path(args.child_out).write_text(json.dumps(rec, default=str))
        return 0

    reps = args.reps or (1 if args.quick else 3)
    iters = args.iters or (5 if args.quick else 20)
    min_s = 0.5 if args.quick else 2.0
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 60.0)
    loads = LOADS if args.busy else LOADS[:1]
    workdir = args.keep_onnx or Path(tempfile.mkdtemp(prefix="lazyvic-convnets-"))
    workdir.mkdir(parents=True, exist_ok=True)
    shapes = [(1, args.size), (32, args.size32)]
    # Numba's and lazyvic's caches stay where they are: a warm cache is the steady state measured.
    env_extra = {
        "OMP_NUM_THREADS": str(THREADS),
        "NUMBA_NUM_THREADS": str(THREADS),
        "OPENBLAS_NUM_THREADS": str(THREADS),
    }
    sources = source_fingerprint()
    print(
        f"convnets benchmark ({'quick' if args.quick else 'full'}): {platform.machine()}, {os.cpu_count()} cores, "
        f"{THREADS} threads per runtime, {reps} process(es) per runtime and case, load {loadavg()}, "
        f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC; lazyvic sources: git HEAD {sources['git_head']}, "
        f"sha1 {sources['lazyvic_sources_sha1']}",
        flush=True,
    )
    t_run = time.perf_counter()
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "sources_start": sources, "records": []}
    recs = payload["records"]
    try:
        exported = {}
        if args.only in (None, "infer"):
            exported = run_child(
                {"case": "export", "dir": str(workdir), "models": list(MODELS), "shapes": shapes, "load": "quiet"},
                0.0,
                env_extra,
            )
            payload["export"] = exported
            if "error" in exported:
                print("ONNX export failed:\n" + exported.get("stderr_tail", ""))
                return 1
            for e in exported["models"].values():
                ops = ", ".join(f"{k} {v}" for k, v in e["ops"].items())
                print(f"  exported {e['onnx']} ({e['params']:,} parameters, {e['source']}; {e['export_s']} s): {ops}")
        for load in loads:
            specs = []
            if args.only in (None, "infer"):
                for name in MODELS:
                    for batch, size in shapes:
                        n = iters if batch == 1 else max(2, iters // 4)
                        for _ in range(reps):
                            specs += [
                                {
                                    "case": "infer",
                                    "model": name,
                                    "batch": batch,
                                    "size": size,
                                    "runtime": rt,
                                    "onnx": exported["models"][f"{name}_{size}"]["onnx"],
                                    "iters": n,
                                    "min_s": min_s,
                                    "load": load,
                                }
                                for rt in RUNTIMES
                            ]
            if args.only in (None, "train"):
                for case in TRAINS:
                    for _ in range(reps):
                        specs += [
                            {
                                "case": "train",
                                "train": case,
                                "runtime": rt,
                                "iters": iters,
                                "min_s": min_s,
                                "load": load,
                            }
                            for rt in RUNTIMES
                            if rt != "onnxruntime"
                        ]
            busy = busy_process() if load != "quiet" else None
            try:
                for spec in specs:
                    rec = run_child(spec, max_wait if busy is None else 0.0, env_extra)
                    _progress(rec)
                    recs.append(rec)
                    if args.json:
                        write_json(args.json, payload, default=str)
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    finally:
        if args.keep_onnx is None:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = summarize(recs)
    payload["summary"] = rows
    payload["sources_end"] = source_fingerprint()
    payload["elapsed_s"] = round(time.perf_counter() - t_run, 1)
    print_summary(rows)
    changed = payload["sources_end"]["lazyvic_sources_sha1"] != sources["lazyvic_sources_sha1"]
    print(
        f"\n  {payload['elapsed_s']:.0f} s in all; load average at the end {loadavg()}"
        + ("; lazyvic's sources CHANGED during the run (see the records' lazyvic_sources)" if changed else "")
    )
    if args.json:
        write_json(args.json, payload, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
