"""The "cuda" device API: ``Tensor.to/cuda/cpu``, ``device=`` on creation functions,
``Module.to``, optimizer state, checkpoints, ``lazyvic.compile``, ``lazyvic.cuda``.

With a device: the checks of tests/cuda/_device_cases.py run on Numba's CUDA simulator in a
subprocess (one JSON line per check). Without one: this process has no GPU (nor the
simulator), and every way of asking for "cuda" raises DeviceError saying why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _device_cases  # noqa: E402
from _simulator import SIMULATED, run_groups  # noqa: E402

import lazyvic as lv  # noqa: E402
from lazyvic.errors import DeviceError  # noqa: E402

# ------------------------------------------------------------------ on the simulator


@pytest.fixture(scope="module")
def results():
    recs = run_groups(HERE / "_device_cases.py", ("device",))["device"]
    if "_probe" not in recs:
        pytest.skip(f"the CUDA simulator could not start (rc {recs['_rc']}): {recs['_stderr'][-3000:]}")
    return recs


def test_simulator_is_used(results):
    assert results["_probe"] == {"case": "_probe", "simulated": SIMULATED, "available": True}
    assert "_done" in results, results["_stderr"][-3000:]


@pytest.mark.parametrize("check", _device_cases.CHECKS)
def test_device_api(results, check):
    rec = results.get(check)
    assert rec is not None, f"{check} did not report; subprocess stderr:\n{results['_stderr'][-3000:]}"
    assert "error" not in rec, rec["error"]


# ------------------------------------------------------------------ without a GPU

needs_no_gpu = pytest.mark.skipif(lv.cuda.is_available(), reason="a GPU (or the simulator) is available here")


@needs_no_gpu
def test_cuda_module_without_a_gpu():
    assert lv.cuda.is_available() is False and lv.cuda.device_count() == 0 and lv.cuda.is_simulated() is False
    why = lv.cuda.get_device_name()
    assert "NUMBA_ENABLE_CUDASIM" in why or "cannot be imported" in why or "driver" in why, why
    lv.cuda.synchronize()  # a no-op


@needs_no_gpu
@pytest.mark.parametrize(
    "call, opname",
    [
        (lambda: lv.tensor([1.0, 2.0]).to("cuda"), "to"),
        (lambda: lv.tensor([1.0, 2.0]).cuda(), "to"),
        (lambda: lv.tensor([1.0]).to(device="cuda:0"), "to"),
        (lambda: lv.tensor([1.0], device="cuda"), "tensor"),
        (lambda: lv.zeros(2, device="cuda"), "full"),
        (lambda: lv.rand(2, device="cuda"), "rand"),
        (lambda: lv.randperm(4, device="cuda"), "randperm"),
        (lambda: lv.eye(2, device="cuda"), "eye"),
        (lambda: lv.nn.Linear(2, 2).to("cuda"), "Module.to"),
        (lambda: lv.nn.Linear(2, 2).cuda(), "Module.to"),
    ],
)
def test_cuda_raises_not_available(call, opname):
    with pytest.raises(DeviceError, match="not available") as info:
        call()
    assert str(info.value).startswith(f"{opname}: device 'cuda' is not available"), str(info.value)


def test_cpu_tensors_and_device_specs():
    x = lv.tensor(np.arange(3, dtype=np.float32))
    assert x.device == "cpu" and not x.is_cuda and (x * 2.0).device == "cpu"
    assert x.to("cpu") is x and x.cpu() is x and x.to(device=None) is x
    assert x.to("cpu", lv.float64).dtype == lv.float64
    m = lv.nn.Linear(2, 2)
    params = list(m.parameters())
    assert m.to("cpu") is m and all(a is b for a, b in zip(params, m.parameters()))
    with pytest.raises(DeviceError, match="'cuda:1' is not supported"):
        x.to("cuda:1")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        x.to(device="tpu")
    with pytest.raises(DeviceError, match="unknown device"):
        lv.zeros(2, device="gpu")


# ------------------------------------------------------------------ on a real GPU with CuPy


def test_cupy_storage_and_cublas_matmul():
    """With CuPy and a GPU (the ``cuda`` extra): CUDA tensors are CuPy arrays and a matmul
    plan multiplies through CuPy (cuBLAS), matching NumPy. The simulator has no CuPy path."""
    cupy = pytest.importorskip("cupy", reason="CuPy-backed storage and cuBLAS need the cuda extra and a GPU")
    if not lv.cuda.is_available() or lv.cuda.is_simulated():
        pytest.skip("CuPy-backed storage and cuBLAS need a real GPU (not available here)")
    from lazyvic.runtime.config import config

    prev, config.compile = config.compile, "always"
    try:
        x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
        a = lv.tensor(x, device="cuda")
        y = (a @ a.T).relu()
        lv.sync(y)
        assert isinstance(y._node.data, cupy.ndarray)
        np.testing.assert_allclose(y.numpy(), np.maximum(x @ x.T, 0), rtol=1e-4, atol=1e-4)
    finally:
        config.compile = prev
