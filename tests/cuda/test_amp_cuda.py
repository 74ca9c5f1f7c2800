"""The autocast rounding primitives on CUDA, under Numba's CUDA simulator.

``round_float16`` / ``round_bfloat16`` run through the CUDA backend (kernels whose
header imports ``lowering.cuda.kernel_lib.round_*``) and must give the CPU plan's bits. The simulator
needs ``NUMBA_ENABLE_CUDASIM=1`` before Numba is first imported, so the checks run in a
subprocess (this file run as a script) that prints one JSON line per check, as
tests/cuda/test_codegen_cuda.py does. Sizes are small: the simulator runs each CUDA thread
as a Python thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _simulator import SIMULATED, simulator_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

EDGES = [
    0.0,
    -0.0,
    1.0,
    1 + 2.0**-11,
    1 + 3 * 2.0**-11,
    1 + 2.0**-8,
    1 + 3 * 2.0**-8,
    2049.0,
    65504.0,
    65519.0,
    65520.0,
    -65520.0,
    1e5,
    2.0**-14,
    2.0**-14 - 2.0**-25,
    2.0**-24,
    2.0**-25,
    3 * 2.0**-25,
    -(2.0**-25),
    1e-40,
    2.0**-133,
    2.0**-134,
    3 * 2.0**-134,
    3.3895314e38,
    3.3961776e38,
    3.4028235e38,
    np.inf,
    -np.inf,
    np.nan,
]


def _values(dtype, n=160, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    near = rng.standard_normal(n) * 2.0 ** rng.integers(-30, 18, n)
    ties = (np.round(rng.uniform(-4096, 4096, n)) + 0.5) * 2.0 ** rng.integers(-34, 6, n)
    if dtype == np.float32:
        raw = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    else:
        raw = rng.integers(0, 2**64, size=n, dtype=np.uint64).view(np.float64)
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(EDGES, dtype), near.astype(dtype), ties.astype(dtype), raw])


# -- checks (run in the subprocess) ----------------------------------------------------------
def _cpu_and_cuda(outs):
    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.runtime.executor import backend, execute
    from lazyvic.trace.cut import cut

    trace, inputs, scalars, _ = cut([t._node for t in outs])
    cpu = execute(compile_trace(trace), inputs, scalars)
    plan = backend("cuda").compile(trace)
    return cpu, plan.run(inputs, scalars, to_host=True), plan


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a)
    return a.dtype == b.dtype and np.array_equal(nan, np.isnan(b)) and a[~nan].tobytes() == b[~nan].tobytes()


def check_rounding_bits(lv) -> dict:
    """Both precisions, float32 and float64, fused with other elementwise ops: CPU bits."""
    problems, kernels = [], []
    for dtype in (np.float32, np.float64):
        a = _values(dtype)
        x = lv.tensor(a, dtype=dtype)
        finite = lv.tensor(np.where(np.isfinite(a), a, 1.0), dtype=dtype)  # no warnings from NaN * 0.5
        outs = [
            lv.amp.round_to_precision(x, lv.float16),
            lv.amp.round_to_precision(x, lv.bfloat16),
            lv.amp.round_to_precision(finite * 0.5, lv.float16) + 1.0,
        ]
        cpu, gpu, plan = _cpu_and_cuda(outs)
        kernels += [k.name for k in plan.kernels]
        for k, (c, g) in enumerate(zip(cpu, gpu)):
            if not _same_bits(c, g):
                same = ((c == g) & (np.signbit(c) == np.signbit(g))) | (np.isnan(c) & np.isnan(g))
                bad = np.flatnonzero(~same)
                problems.append(
                    f"{np.dtype(dtype).name} output {k}: other bits, e.g. at {bad[:5].tolist()}: "
                    f"{a[bad[:5]].tolist()} -> cpu {c[bad[:5]].tolist()} cuda {g[bad[:5]].tolist()}"
                )
        with np.errstate(over="ignore", invalid="ignore"):
            ref = a.astype(np.float16).astype(dtype)
        if not np.array_equal(np.nan_to_num(cpu[0], nan=7.0), np.nan_to_num(ref, nan=7.0)):
            problems.append(f"{np.dtype(dtype).name}: the CPU plan differs from NumPy's float16 round trip")
    return {"problems": problems, "kernels": kernels}


def check_autocast_matmul(lv) -> dict:
    """An autocast product and its gradient on the device: close to the CPU plan (the tiled
    product may sum in another order), and representable in float16 where the rounding is."""
    rng = np.random.default_rng(1)
    x = lv.tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    w = lv.tensor(rng.standard_normal((6, 3)).astype(np.float32), requires_grad=True)
    with lv.autocast():
        y = x @ w
    y.sum().backward()
    cpu, gpu, _ = _cpu_and_cuda([y, x.grad, w.grad])
    problems = [
        f"output {k}: max error {np.abs(c - g).max():.3g}"
        for k, (c, g) in enumerate(zip(cpu, gpu))
        if not np.allclose(c, g, rtol=2e-3, atol=1e-5)
    ]
    if not np.array_equal(gpu[1], gpu[1].astype(np.float16).astype(np.float32)):
        problems.append("x.grad on the device is not float16-representable")
    return {"problems": problems}


CHECKS = ("check_rounding_bits", "check_autocast_matmul")


def _run_checks() -> None:
    import lazyvic as lv
    from lazyvic.runtime.device import simulated

    sys.setswitchinterval(1e-5)  # the simulator's barrier polls its threads
    print(json.dumps({"check": "_probe", "simulated": simulated()}), flush=True)
    for name in CHECKS:
        rec = {"check": name}
        try:
            rec.update(globals()[name](lv))
        except Exception:  # noqa: BLE001 - reported to the parent test
            rec["error"] = traceback.format_exc()
        print(json.dumps(rec), flush=True)


# -- the tests (pytest side) -----------------------------------------------------------------
@pytest.fixture(scope="module")
def results() -> dict:
    pytest.importorskip("numba.cuda")
    proc = subprocess.run(
        [sys.executable, __file__], cwd=ROOT, env=simulator_env(), capture_output=True, text=True, timeout=300
    )
    recs = {"_stderr": proc.stderr}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            recs[rec["check"]] = rec
    return recs


def test_simulator_is_used(results):
    assert "_probe" in results, results["_stderr"][-4000:]
    assert results["_probe"]["simulated"] is SIMULATED


@pytest.mark.parametrize("check", CHECKS)
def test_cuda_matches_cpu(results, check):
    rec = results.get(check)
    assert rec is not None, f"{check} did not report (subprocess stderr):\n{results['_stderr'][-4000:]}"
    assert "error" not in rec, rec["error"]
    assert rec["problems"] == []


def test_rounding_runs_in_device_kernels(results):
    rec = results["check_rounding_bits"]
    assert "error" not in rec, rec.get("error")
    assert any("round_float16" in k for k in rec["kernels"]) and any("round_bfloat16" in k for k in rec["kernels"])


if __name__ == "__main__":
    _run_checks()
