#!/usr/bin/env python
"""Side-by-side benchmarks: lazyvic vs NumPy, PyTorch eager and torch.compile.

    python benchmarks/run.py [--quick] [--only NAME ...] [--backends NAME ...] [--json PATH]

Everything runs in this one process. Each case is timed with ``time.perf_counter``
over several repeats after a warm-up, and the median is reported. lazyvic runs
interpret a trace the first time its key is seen and compile it the second time,
so lazyvic gets at least 3 warm-up runs; every measured lazyvic run includes the
sync (``.numpy()`` or ``lazyvic.sync``). Ratios are ``t_baseline / t_lazyvic``:
above 1 means lazyvic is faster. See benchmarks/README.md.

This file is a benchmark harness, not a test: lazyvic itself never imports torch.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import math
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
from _common import counter_delta as _delta  # beside this file
from _common import write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # benchmark the checkout, installed or not
    sys.path.insert(0, str(ROOT))

BACKENDS = ("lazyvic", "numpy", "torch", "torch.compile")
SQRT1_2 = 1.0 / math.sqrt(2.0)

# ---------------------------------------------------------------- optional deps
try:
    import lazyvic as lv
    import lazyvic.functional as LF

    LV_IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - reported in every lazyvic row
    lv = LF = None
    LV_IMPORT_ERROR = f"{type(e).__name__}: {e}"

try:
    from scipy.special import erf as _scipy_erf

    def np_erf(x):
        return _scipy_erf(x)

    ERF_SOURCE = "scipy.special.erf"
except ImportError:  # NumPy has no erf: a (slow) vectorized math.erf, cast back to float32
    _vec_erf = np.vectorize(math.erf, otypes=[np.float32])

    def np_erf(x):
        return _vec_erf(x)

    ERF_SOURCE = "np.vectorize(math.erf) (scipy missing: slow)"

torch = None
TORCH_IMPORT_ERROR = None


def _import_torch(disabled: bool):
    global torch, TORCH_IMPORT_ERROR
    if disabled:
        TORCH_IMPORT_ERROR = "disabled (--no-torch)"
        return
    try:
        import torch as _torch

        torch = _torch
    except Exception as e:  # noqa: BLE001
        TORCH_IMPORT_ERROR = f"{type(e).__name__}: {e}"


def tcompile(fn):
    """torch.compile with fixed shapes (one graph per case and size)."""
    return torch.compile(fn, dynamic=False)


# ---------------------------------------------------------------------- timing
class Settings:
    def __init__(self, quick: bool):
        self.quick = quick
        self.lv_warmup = 3 if quick else 4  # >= 3: interpret, compile, steady
        self.compile_warmup = 3  # torch.compile compiles on call 1
        self.eager_warmup = 1 if quick else 2
        self.min_reps = 3 if quick else 5
        self.budget_s = 0.75 if quick else 4.0  # timed repeats stop past this (after min_reps)


def measure(fn, warmup: int, min_reps: int, max_reps: int, budget_s: float, check_at: int | None):
    """Warm up, then time ``fn`` until max_reps or (min_reps and budget_s). Returns (times, checked).

    ``checked`` is a copy of the output of call number ``check_at`` (0-based, warm-up calls
    included; None: the last call), taken outside the timed region.
    """
    checked = None
    calls = 0

    def keep(out):
        nonlocal checked
        if check_at is None or calls == check_at:
            checked = out

    for _ in range(warmup):
        out = fn()
        keep(_copy_out(out) if check_at == calls else out)
        calls += 1
    gc.collect()
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < max_reps:
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        keep(_copy_out(out) if check_at == calls else out)
        calls += 1
        if len(times) >= min_reps and time.perf_counter() - t_start > budget_s:
            break
    if check_at is None:
        checked = _copy_out(checked)
    return times, checked


def _copy_out(out):
    """The output as a NumPy copy (lazyvic may pool buffers; torch tensors detach)."""
    if out is None:
        return None
    if isinstance(out, np.ndarray):
        return out.copy()
    if torch is not None and isinstance(out, torch.Tensor):
        return out.detach().numpy().copy()
    if hasattr(out, "numpy"):
        return np.array(out.numpy(), copy=True)
    return np.array(out, copy=True)


# ------------------------------------------------------------------------ cases
class Case:
    """One benchmark. Subclasses define sizes, work and one setup method per backend.

    A setup method takes a size and returns a zero-argument callable that performs one
    run (including the sync for lazyvic) and returns its output, used for the check.
    """

    name = ""
    title = ""
    unit = ""  # GB/s, GFLOP/s, steps/s, us/op
    notes = ""
    max_reps_quick = 20
    max_reps_full = 50
    check_at: int | None = None
    tol = 1e-4  # reported, not enforced: max abs err / max(1, max |ref|)

    def sizes(self, quick: bool) -> list:
        raise NotImplementedError

    def size_label(self, size) -> str:
        return str(size)

    def work(self, size) -> float:
        """Bytes, flops, steps or ops per run, in the unit's base (GB/s: bytes, ...)."""
        raise NotImplementedError

    def throughput(self, size, t: float) -> float:
        w = self.work(size)
        if self.unit == "GB/s":
            return w / t / 1e9
        if self.unit == "GFLOP/s":
            return w / t / 1e9
        if self.unit == "steps/s":
            return w / t
        if self.unit == "us/op":
            return t / w * 1e6
        raise ValueError(self.unit)

    def setup(self, backend: str, size):
        meth = {
            "lazyvic": self.lazyvic,
            "numpy": self.numpy,
            "torch": self.torch_eager,
            "torch.compile": self.torch_compile,
        }[backend]
        return meth(size)

    def lazyvic(self, size):
        raise NotImplementedError

    def numpy(self, size):
        raise NotImplementedError

    def torch_eager(self, size):
        raise NotImplementedError

    def torch_compile(self, size):
        raise NotImplementedError


def _rng():
    return np.random.default_rng(0)


def _fmt_count(n: int) -> str:
    for div, suf in ((1 << 20, "M"), (1 << 10, "K")):
        if n % div == 0 and n >= div:
            return f"{n // div}{suf}"
    return str(n)


class Elementwise(Case):
    name = "elementwise"
    title = "gelu(x*a+b)*c"
    unit = "GB/s"
    notes = "float32; a=1.5, b=0.25, c=0.75 Python scalars; exact (erf) gelu; GB/s = 2*4*N bytes (1 read + 1 write)"
    A, B, C = 1.5, 0.25, 0.75

    def sizes(self, quick):
        return [1 << 22] if quick else [1 << 24]

    def size_label(self, n):
        return _fmt_count(n)

    def work(self, n):
        return 2 * 4 * n

    def _x(self, n):
        return _rng().standard_normal(n, dtype=np.float32)

    def lazyvic(self, n):
        x = lv.from_numpy(self._x(n))
        a, b, c = self.A, self.B, self.C
        return lambda: (LF.gelu(x * a + b) * c).numpy()

    def numpy(self, n):
        x = self._x(n)
        a, b, c = self.A, self.B, self.C

        def run():
            t = x * a + b
            return t * 0.5 * (1.0 + np_erf(t * SQRT1_2)) * c

        return run

    def _torch_fn(self):
        a, b, c = self.A, self.B, self.C
        return lambda x: torch.nn.functional.gelu(x * a + b) * c

    def torch_eager(self, n):
        x, f = torch.from_numpy(self._x(n)), self._torch_fn()
        return lambda: f(x)

    def torch_compile(self, n):
        x, f = torch.from_numpy(self._x(n)), tcompile(self._torch_fn())
        return lambda: f(x)


class _RowsCase(Case):
    """A (rows, cols) float32 case whose work is one read and one write of the matrix."""

    def sizes(self, quick):
        return [(1024, 1024)] if quick else [(4096, 1024)]

    def size_label(self, s):
        return f"{s[0]}x{s[1]}"

    def work(self, s):
        return 2 * 4 * s[0] * s[1]


class Softmax(_RowsCase):
    name = "softmax"
    title = "softmax(x, -1)"
    unit = "GB/s"
    notes = "float32, last axis; GB/s = 2*4*rows*cols bytes (1 read + 1 write)"

    def _x(self, s):
        return _rng().standard_normal(s, dtype=np.float32)

    def lazyvic(self, s):
        x = lv.from_numpy(self._x(s))
        return lambda: LF.softmax(x, -1).numpy()

    def numpy(self, s):
        x = self._x(s)

        def run():
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        return run

    def torch_eager(self, s):
        x = torch.from_numpy(self._x(s))
        return lambda: torch.softmax(x, -1)

    def torch_compile(self, s):
        x = torch.from_numpy(self._x(s))
        f = tcompile(lambda x: torch.softmax(x, -1))
        return lambda: f(x)


class LayerNormGelu(_RowsCase):
    name = "layernorm_gelu"
    title = "gelu(layer_norm(x))"
    unit = "GB/s"
    notes = (
        "float32, layer norm over the last axis WITH affine (weight, bias of shape (cols,)), "
        "eps=1e-5, then exact gelu; GB/s = 2*4*rows*cols bytes (x read + y write)"
    )
    EPS = 1e-5

    def _data(self, s):
        r = _rng()
        x = r.standard_normal(s, dtype=np.float32)
        w = (1.0 + 0.1 * r.standard_normal(s[1])).astype(np.float32)
        b = (0.1 * r.standard_normal(s[1])).astype(np.float32)
        return x, w, b

    def lazyvic(self, s):
        x, w, b = (lv.from_numpy(a) for a in self._data(s))
        shape, eps = (s[1],), self.EPS
        return lambda: LF.gelu(LF.layer_norm(x, shape, w, b, eps)).numpy()

    def numpy(self, s):
        x, w, b = self._data(s)
        eps = self.EPS

        def run():
            mu = x.mean(axis=-1, keepdims=True)
            var = x.var(axis=-1, keepdims=True)
            y = (x - mu) / np.sqrt(var + eps) * w + b
            return y * 0.5 * (1.0 + np_erf(y * SQRT1_2))

        return run

    def _torch_fn(self, s):
        shape, eps = (s[1],), self.EPS
        F = torch.nn.functional
        return lambda x, w, b: F.gelu(F.layer_norm(x, shape, w, b, eps))

    def torch_eager(self, s):
        x, w, b = (torch.from_numpy(a) for a in self._data(s))
        f = self._torch_fn(s)
        return lambda: f(x, w, b)

    def torch_compile(self, s):
        x, w, b = (torch.from_numpy(a) for a in self._data(s))
        f = tcompile(self._torch_fn(s))
        return lambda: f(x, w, b)


class Matmul(Case):
    name = "matmul"
    title = "a @ b (square)"
    unit = "GFLOP/s"
    notes = "float32 n x n @ n x n; GFLOP/s = 2*n^3/t"
    max_reps_quick = 10
    max_reps_full = 30
    tol = 1e-3

    def sizes(self, quick):
        return [1024, 2048] if quick else [1024, 2048, 4096]

    def size_label(self, n):
        return f"n={n}"

    def work(self, n):
        return 2.0 * n**3

    def _ab(self, n):
        r = _rng()
        return r.standard_normal((n, n), dtype=np.float32), r.standard_normal((n, n), dtype=np.float32)

    def lazyvic(self, n):
        a, b = (lv.from_numpy(m) for m in self._ab(n))
        return lambda: (a @ b).numpy()

    def numpy(self, n):
        a, b = self._ab(n)
        return lambda: a @ b

    def torch_eager(self, n):
        a, b = (torch.from_numpy(m) for m in self._ab(n))
        return lambda: a @ b

    def torch_compile(self, n):
        a, b = (torch.from_numpy(m) for m in self._ab(n))
        f = tcompile(lambda a, b: a @ b)
        return lambda: f(a, b)


class MLPStep(Case):
    """One SGD training step of the digits MLP; every backend starts from the same weights."""

    name = "mlp_step"
    title = "MLP train step"
    unit = "steps/s"
    notes = (
        "64-128-10, ReLU, cross-entropy (mean), SGD lr=0.1, batch 128, random float32 data "
        "(8 batches cycled); check = loss of the 3rd step (after 2 updates)"
    )
    IN, HID, OUT, BATCH, LR, NBATCH = 64, 128, 10, 128, 0.1, 8
    max_reps_quick = 100
    max_reps_full = 1000
    check_at = 2
    tol = 1e-4

    def sizes(self, quick):
        return [self.BATCH]

    def size_label(self, b):
        return f"{self.IN}-{self.HID}-{self.OUT} b{b}"

    def work(self, b):
        return 1.0

    def _init(self):
        r = _rng()

        def lin(i, o):
            bound = 1.0 / math.sqrt(i)
            return (
                r.uniform(-bound, bound, (o, i)).astype(np.float32),
                r.uniform(-bound, bound, (o,)).astype(np.float32),
            )

        W1, b1 = lin(self.IN, self.HID)
        W2, b2 = lin(self.HID, self.OUT)
        xs = [r.standard_normal((self.BATCH, self.IN), dtype=np.float32) for _ in range(self.NBATCH)]
        ys = [r.integers(0, self.OUT, self.BATCH).astype(np.int64) for _ in range(self.NBATCH)]
        return [W1, b1, W2, b2], xs, ys

    def lazyvic(self, b):
        (W1, b1, W2, b2), xs, ys = self._init()
        l1, l2 = lv.nn.Linear(self.IN, self.HID), lv.nn.Linear(self.HID, self.OUT)
        l1.weight, l1.bias = lv.nn.Parameter(lv.from_numpy(W1)), lv.nn.Parameter(lv.from_numpy(b1))
        l2.weight, l2.bias = lv.nn.Parameter(lv.from_numpy(W2)), lv.nn.Parameter(lv.from_numpy(b2))
        model = lv.nn.Sequential(l1, lv.nn.ReLU(), l2)
        opt = lv.optim.SGD(model.parameters(), lr=self.LR)
        data = [(lv.from_numpy(x), lv.from_numpy(y)) for x, y in zip(xs, ys)]
        it = [0]

        def step():
            x, y = data[it[0] % len(data)]
            it[0] += 1
            opt.zero_grad()
            loss = LF.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            lv.sync(loss)  # the mark step: forward, backward and update in one trace
            return loss

        return step

    def numpy(self, b):
        params, xs, ys = self._init()
        W1, b1, W2, b2 = params
        lr, B = self.LR, self.BATCH
        rows = np.arange(B)
        it = [0]

        def step():
            x, y = xs[it[0] % len(xs)], ys[it[0] % len(ys)]
            it[0] += 1
            h = x @ W1.T + b1
            r = np.maximum(h, 0)
            logits = r @ W2.T + b2
            z = logits - logits.max(axis=1, keepdims=True)
            e = np.exp(z)
            s = e.sum(axis=1, keepdims=True)
            loss = (np.log(s[:, 0]) - z[rows, y]).mean()
            g = e / s
            g[rows, y] -= 1.0
            g /= B
            gW2, gb2 = g.T @ r, g.sum(axis=0)
            gh = (g @ W2) * (h > 0)
            gW1, gb1 = gh.T @ x, gh.sum(axis=0)
            for p, g in zip(params, (gW1, gb1, gW2, gb2)):
                p -= lr * g  # in place
            return loss

        return step

    def _torch_setup(self):
        params, xs, ys = self._init()
        W1, b1, W2, b2 = params
        model = torch.nn.Sequential(
            torch.nn.Linear(self.IN, self.HID), torch.nn.ReLU(), torch.nn.Linear(self.HID, self.OUT)
        )
        with torch.no_grad():
            for p, v in zip(model.parameters(), (W1, b1, W2, b2)):
                p.copy_(torch.from_numpy(v))
        opt = torch.optim.SGD(model.parameters(), lr=self.LR)
        data = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in zip(xs, ys)]
        return model, opt, data

    def _torch_step(self, loss_fn, opt, data):
        it = [0]

        def step():
            x, y = data[it[0] % len(data)]
            it[0] += 1
            opt.zero_grad()
            loss = loss_fn(x, y)
            loss.backward()
            opt.step()
            return loss

        return step

    def torch_eager(self, b):
        model, opt, data = self._torch_setup()
        F = torch.nn.functional
        return self._torch_step(lambda x, y: F.cross_entropy(model(x), y), opt, data)

    def torch_compile(self, b):
        # forward + loss compiled (backward through AOTAutograd); the SGD update runs eagerly.
        model, opt, data = self._torch_setup()
        F = torch.nn.functional
        return self._torch_step(tcompile(lambda x, y: F.cross_entropy(model(x), y)), opt, data)


class OpChain(Case):
    name = "op_chain"
    title = "1000-op chain"
    unit = "us/op"
    notes = (
        "16 float32 elements; 500 x (x = x * 1.0001; x = x + 0.0001). lazyvic: build 1000 lazy "
        "ops + one sync (cached plan); NumPy / torch eager: run the 1000 ops; torch.compile: "
        "call of the cached compiled 1000-op function"
    )
    N, OPS = 16, 1000
    max_reps_quick = 30
    max_reps_full = 200

    def sizes(self, quick):
        return [self.OPS]

    def size_label(self, ops):
        return f"{ops} ops, n={self.N}"

    def work(self, ops):
        return float(ops)

    def _x(self):
        return np.linspace(0.0, 1.0, self.N, dtype=np.float32)

    @staticmethod
    def _chain(x, ops):
        for _ in range(ops // 2):
            x = x * 1.0001
            x = x + 0.0001
        return x

    def lazyvic(self, ops):
        x = lv.from_numpy(self._x())
        return lambda: self._chain(x, ops).numpy()

    def numpy(self, ops):
        x = self._x()
        return lambda: self._chain(x, ops)

    def torch_eager(self, ops):
        x = torch.from_numpy(self._x())
        return lambda: self._chain(x, ops)

    def torch_compile(self, ops):
        x = torch.from_numpy(self._x())
        f = tcompile(lambda x: self._chain(x, ops))
        return lambda: f(x)


CASES = [Elementwise(), Softmax(), LayerNormGelu(), Matmul(), MLPStep(), OpChain()]


# ------------------------------------------------------------------------ runner
def _lv_counters():
    if lv is None:
        return {}
    try:
        return lv.metrics.snapshot()
    except Exception:  # noqa: BLE001
        return {}


def _lv_mode(timed: dict, reps: int) -> str:
    """How the timed lazyvic runs executed, from the metrics delta over them."""
    traces = timed.get("traces", 0)
    comp, interp, fb = timed.get("compiled_runs", 0), timed.get("interpreted_runs", 0), timed.get("fallbacks", 0)
    if traces == 0:
        return "no trace"
    if comp == traces:
        mode = "compiled"
    elif interp == traces:
        mode = "interp+fallback" if fb else "interpreted"
    else:
        mode = f"mixed {comp}c/{interp}i"
    if traces != reps:
        mode += f", {traces / reps:g} traces/run"
    return mode


def _drop_lv_pending(row: dict) -> None:
    """After a lazyvic error, make sure no half-built graph leaks into the next case's sync."""
    gc.collect()
    try:
        from lazyvic.sync import live

        n = len(live.pending())
        if n:
            live.clear()
            row["dropped_pending_tensors"] = n
    except Exception:  # noqa: BLE001 - internal detail; best effort only
        pass


def run_one(case: Case, backend: str, size, st: Settings) -> dict:
    row = {"case": case.name, "size": case.size_label(size), "backend": backend, "unit": case.unit}
    if backend == "lazyvic" and lv is None:
        row["error"] = f"import lazyvic failed: {LV_IMPORT_ERROR}"
        return row
    if backend.startswith("torch") and torch is None:
        row["skipped"] = f"torch not importable: {TORCH_IMPORT_ERROR}"
        return row
    warmup = {"lazyvic": st.lv_warmup, "torch.compile": st.compile_warmup}.get(backend, st.eager_warmup)
    if case.check_at is not None:
        warmup = max(warmup, case.check_at + 1)
    max_reps = case.max_reps_quick if st.quick else case.max_reps_full
    before = _lv_counters() if backend == "lazyvic" else None
    t_setup = time.perf_counter()
    try:
        fn = case.setup(backend, size)
        t_warm = time.perf_counter()
        # Warm-up and timing; for lazyvic the metrics delta of the timed runs is kept apart.
        checked = None
        if backend == "lazyvic":
            for i in range(warmup):
                out = fn()
                if case.check_at == i:
                    checked = _copy_out(out)
            row["warmup_s"] = round(time.perf_counter() - t_warm, 4)
            mid = _lv_counters()
            times, last = measure(fn, 0, st.min_reps, max_reps, st.budget_s, None)
            if case.check_at is None:
                checked = last
            after = _lv_counters()
            row["lazyvic_warmup_metrics"] = _delta(mid, before)
            row["lazyvic_timed_metrics"] = _delta(after, mid)
            row["lazyvic_mode"] = _lv_mode(row["lazyvic_timed_metrics"], len(times))
        else:
            times, checked = measure(fn, warmup, st.min_reps, max_reps, st.budget_s, case.check_at)
        row["setup_and_warmup_s"] = round(time.perf_counter() - t_setup - sum(times), 4)
    except Exception as e:  # noqa: BLE001 - the error goes in the row; the run goes on
        row["error"] = f"{type(e).__name__}: {e}".strip()
        row["traceback"] = traceback.format_exc()
        if backend == "lazyvic":
            row["lazyvic_metrics"] = _delta(_lv_counters(), before or {})
            _drop_lv_pending(row)
        return row
    finally:
        fn = None  # noqa: F841 - drop the closure's buffers before the next backend
        gc.collect()
    med = statistics.median(times)
    row.update(
        times_s=[round(t, 9) for t in times],
        reps=len(times),
        warmup=warmup,
        median_s=med,
        min_s=min(times),
        throughput=case.throughput(size, med),
    )
    row["_checked"] = checked
    return row


def attach_checks(rows: list, case: Case) -> None:
    """max |out - numpy| / max(1, max |numpy|), per row, with NumPy as the reference."""
    ref_row = next((r for r in rows if r["backend"] == "numpy" and r.get("_checked") is not None), None)
    ref = None if ref_row is None else np.asarray(ref_row["_checked"], dtype=np.float64)
    for r in rows:
        out = r.pop("_checked", None)
        if ref is None or out is None or r["backend"] == "numpy":
            continue
        try:
            out = np.asarray(out, dtype=np.float64)
            if out.shape != ref.shape:
                r["check"] = f"shape {out.shape} != {ref.shape}"
                continue
            scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
            err = float(np.max(np.abs(out - ref))) / scale if ref.size else 0.0
            r["max_rel_err"] = err
            r["check"] = "ok" if err <= case.tol else "MISMATCH"
        except Exception as e:  # noqa: BLE001
            r["check"] = f"check failed: {type(e).__name__}: {e}"


def attach_ratios(rows: list) -> None:
    lvrow = next((r for r in rows if r["backend"] == "lazyvic"), None)
    t_lv = None if lvrow is None else lvrow.get("median_s")
    for r in rows:
        if r["backend"] != "lazyvic" and t_lv and r.get("median_s"):
            r["lazyvic_ratio"] = r["median_s"] / t_lv  # > 1: lazyvic faster


# ----------------------------------------------------------------------- output
def _fmt_time(t):
    if t is None:
        return "-"
    if t >= 1.0:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def _fmt_thr(v, unit):
    if v is None:
        return "-"
    if unit == "us/op":
        return f"{v:.3f} us/op"
    if v >= 100:
        return f"{v:.0f} {unit}"
    if v >= 10:
        return f"{v:.1f} {unit}"
    return f"{v:.3g} {unit}"


def _fmt_ratio(x):
    if x is None:
        return "-"
    return f"{x:.3g}x" if x < 100 else f"{x:.0f}x"


def _trunc(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


COLS = [
    ("case", 14),
    ("size", 18),
    ("backend", 13),
    ("median", 10),
    ("min", 10),
    ("throughput", 16),
    ("lv/this", 8),
    ("check", 9),
    ("note", 0),
]


def format_row(r: dict, first: bool) -> str:
    note = ""
    if "error" in r:
        note = "ERROR " + _trunc(r["error"], 110)
    elif "skipped" in r:
        note = "skipped: " + _trunc(r["skipped"], 100)
    elif r["backend"] == "lazyvic":
        note = f"{r.get('lazyvic_mode', '')}; warm-up {r.get('warmup_s', 0):.2f}s, {r['reps']} reps"
        cs = r.get("lazyvic_warmup_metrics", {}).get("compile_seconds")
        if cs:
            note += f", compile {cs:.2f}s"
    else:
        note = f"{r['reps']} reps"
        if r["backend"] == "torch.compile" and r.get("setup_and_warmup_s") is not None:
            note += f", setup+compile {r['setup_and_warmup_s']:.1f}s"
    if r.get("max_rel_err") is not None:
        note += f"; err {r['max_rel_err']:.1e}"
    vals = [
        r["case"] if first else "",
        r["size"] if first else "",
        r["backend"],
        _fmt_time(r.get("median_s")),
        _fmt_time(r.get("min_s")),
        _fmt_thr(r.get("throughput"), r["unit"]),
        "-" if r["backend"] == "lazyvic" else _fmt_ratio(r.get("lazyvic_ratio")),
        r.get("check", "-" if r["backend"] != "numpy" else "ref"),
        note,
    ]
    return "  ".join(f"{v:<{w}}" if w else v for v, (_, w) in zip(vals, COLS)).rstrip()


def header() -> str:
    return "  ".join(f"{n:<{w}}" if w else n for n, w in COLS)


def print_summary(all_rows: list, backends: list) -> None:
    base = [b for b in backends if b != "lazyvic"]
    print()
    print("ratios: lazyvic / baseline = t_baseline / t_lazyvic  (>1: lazyvic faster, <1: slower)")
    w = 34
    print(f"{'case':<{w}}" + "".join(f"{b:>15}" for b in base))
    groups: dict = {}
    for r in all_rows:
        groups.setdefault((r["case"], r["size"]), {})[r["backend"]] = r
    for (case, size), g in groups.items():
        cells = []
        for b in base:
            r = g.get(b)
            if r is None:
                cells.append("-")
            elif "lazyvic_ratio" in r:
                cells.append(_fmt_ratio(r["lazyvic_ratio"]))
            elif "skipped" in r:
                cells.append("skipped")
            elif "error" in r or "error" in g.get("lazyvic", {}):
                cells.append("error")
            else:
                cells.append("-")
        print(f"{_trunc(case + ' ' + size, w - 1):<{w}}" + "".join(f"{c:>15}" for c in cells))


def environment() -> dict:
    env = {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "erf_for_numpy": ERF_SOURCE,
    }
    try:
        env["loadavg_1m"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        env["loadavg_1m"] = None
    try:
        import numba

        env["numba"] = numba.__version__
        env["numba_threads"] = numba.config.NUMBA_NUM_THREADS
    except Exception:  # noqa: BLE001
        env["numba"] = None
    try:
        import scipy

        env["scipy"] = scipy.__version__
    except Exception:  # noqa: BLE001
        env["scipy"] = None
    env["lazyvic"] = getattr(lv, "__version__", None) if lv is not None else f"unavailable: {LV_IMPORT_ERROR}"
    if lv is not None:
        try:
            from lazyvic.runtime.config import config

            env["lazyvic_compile_mode"] = config.compile
            env["lazyvic_cache_dir"] = str(config.cache_dir)
        except Exception:  # noqa: BLE001
            pass
    if torch is not None:
        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
    else:
        env["torch"] = f"unavailable: {TORCH_IMPORT_ERROR}"
    return env


def _jsonable(o):
    if isinstance(o, dict):
        return {k: _jsonable(v) for k, v in o.items() if not k.startswith("_")}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def main(argv=None) -> int:
    names = [c.name for c in CASES]
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="cases: " + ", ".join(names),
    )
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (about a minute)")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=names, help="run only these cases")
    ap.add_argument(
        "--backends",
        nargs="+",
        metavar="NAME",
        choices=BACKENDS,
        help=f"run only these backends (default: all of {', '.join(BACKENDS)})",
    )
    ap.add_argument("--no-torch", action="store_true", help="do not import torch")
    ap.add_argument(
        "--json",
        default=str(HERE / "results" / "latest.json"),
        metavar="PATH",
        help="where to write the results (default: benchmarks/results/latest.json)",
    )
    args = ap.parse_args(argv)

    _import_torch(args.no_torch)
    st = Settings(args.quick)
    backends = list(args.backends or BACKENDS)
    if "lazyvic" not in backends:
        backends.insert(0, "lazyvic")  # ratios need it
    cases = [c for c in CASES if not args.only or c.name in args.only]
    env = environment()
    json_path = Path(args.json)
    t0 = time.perf_counter()

    print(f"lazyvic benchmarks ({'quick' if args.quick else 'full'})  {env['date']}")
    print(
        f"  python {env['python']}, numpy {env['numpy']}, numba {env.get('numba')} "
        f"({env.get('numba_threads')} threads), torch {env['torch']}"
        + (f" ({env['torch_threads']} threads)" if torch is not None else "")
        + f", {env['cpu_count']} cpus"
    )
    print(
        f"  lazyvic {env['lazyvic']}, LAZYVIC_COMPILE={env.get('lazyvic_compile_mode')}; "
        f"numpy erf: {env['erf_for_numpy']}"
    )
    print(
        f"  median of timed repeats after warm-up (lazyvic: {st.lv_warmup} warm-up runs, "
        f"torch.compile: {st.compile_warmup}, others: {st.eager_warmup})"
    )
    load = env.get("loadavg_1m")
    if load is not None:
        busy = load > 0.5 * (os.cpu_count() or 1)
        print(
            f"  load average (1 min) at start: {load:.2f}"
            + ("  ** WARNING: the machine is busy; timings will be noisy **" if busy else "")
        )
    print("  lv/this = t_this / t_lazyvic: >1 means lazyvic is faster; check: vs NumPy, max abs err / max(1, |ref|)")
    print()
    print(header())
    print("-" * 150)

    all_rows: list = []
    payload = {"env": env, "quick": args.quick, "cases": {}, "results": all_rows}
    for case in cases:
        payload["cases"][case.name] = {"title": case.title, "unit": case.unit, "notes": case.notes}
        print(f"# {case.name}: {case.title} -- {case.notes}")
        for size in case.sizes(args.quick):
            rows = []
            for backend in backends:
                r = run_one(case, backend, size, st)
                rows.append(r)
            attach_checks(rows, case)
            attach_ratios(rows)
            for i, r in enumerate(rows):
                print(format_row(r, i == 0), flush=True)
            all_rows.extend(rows)
            payload["lazyvic_metrics"] = _lv_counters()
            payload["elapsed_s"] = round(time.perf_counter() - t0, 2)
            write_json(json_path, _jsonable(payload))

    print_summary(all_rows, backends)
    snap = _lv_counters()
    payload["lazyvic_metrics"] = snap
    payload["elapsed_s"] = round(time.perf_counter() - t0, 2)
    try:
        payload["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        pass
    print()
    print("lazyvic metrics snapshot (whole run):")
    if lv is not None:
        keys = [
            "traces",
            "cache_hits",
            "cache_misses",
            "plans_compiled",
            "kernels_compiled",
            "kernels_loaded",
            "compile_seconds",
            "execute_seconds",
            "interpret_seconds",
            "interpreted_runs",
            "compiled_runs",
            "fallbacks",
            "fallback_ops",
            "plans_cached",
            "ops_traced",
        ]
        for k in keys + [k for k in snap if k not in keys]:
            if k in snap:
                v = snap[k]
                print(f"  {k:<18} {v:.3f}" if isinstance(v, float) else f"  {k:<18} {v}")
    else:
        print(f"  unavailable: {LV_IMPORT_ERROR}")
    write_json(json_path, _jsonable(payload))
    print()
    print(f"wrote {json_path}  ({payload['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
