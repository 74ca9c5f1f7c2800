"""The random API, a device-placed Generator and the DataLoader on "cuda" (Numba's CUDA simulator,
in a subprocess): the same seed draws the same numbers as on the CPU, and batches of CUDA tensors
stay on the device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _simulator import simulator_env  # noqa: E402

import lazyvic as lv  # noqa: E402
from lazyvic.utils.data import DataLoader, TensorDataset  # noqa: E402

SCRIPT = r"""
import json
import lazyvic as lv
from lazyvic.runtime.config import config
from lazyvic.utils.data import DataLoader, TensorDataset

config.compile = "always"  # the device kernels, not the reference interpreter
DEVICE = {device}
out = {{"device": str(lv.accelerator.current_accelerator())}}
exec({draws!r})
out["draws"] = draws(DEVICE)
x = lv.arange(10).to(DEVICE)
batches = list(DataLoader(TensorDataset(x * 2, x), batch_size=4, shuffle=True,
                          generator=lv.Generator(device=DEVICE).manual_seed(5)))
out["batch_devices"] = sorted({{t.device for b in batches for t in b}})
out["batches"] = [[t.tolist() for t in b] for b in batches]
print("RESULT " + json.dumps(out))
"""

DRAWS = r"""
def draws(device):
    g = lv.Generator(device=device).manual_seed(17)
    lv.manual_seed(9)
    return {
        "rand": lv.rand(5, device=device, generator=g).tolist(),
        "randn": lv.randn(5, device=device, dtype=lv.float64).tolist(),
        "randint": lv.randint(-3, 9, (6,), device=device).tolist(),
        "uniform_": lv.zeros(4, device=device).uniform_(2, 3).tolist(),
        "normal_": lv.zeros(4, device=device).normal_(1, 2, generator=g).tolist(),
        "bernoulli": lv.bernoulli(lv.full((6,), 0.4, device=device)).tolist(),
        "random_": lv.zeros(4, device=device).random_(100).tolist(),
        "exponential_": lv.zeros(4, device=device).exponential_(3.0).tolist(),
        "multinomial": lv.multinomial(lv.ones(5, device=device), 5, generator=g).tolist(),
        "multinomial_device": lv.multinomial(lv.ones(5, device=device), 2).device,
    }
"""


@pytest.fixture(scope="module")
def on_device():
    script = SCRIPT.format(device='"cuda"', draws=DRAWS)
    proc = subprocess.run(
        [sys.executable, "-c", script], env=simulator_env(), capture_output=True, text=True, timeout=600
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        pytest.skip(f"the CUDA simulator could not run (rc {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def test_draws_on_cuda_equal_the_cpu_draws(on_device):
    namespace = {"lv": lv}
    exec(DRAWS, namespace)  # the same draws, on the CPU
    state = lv.get_rng_state()
    try:
        cpu = namespace["draws"]("cpu")
    finally:
        lv.set_rng_state(state)
    assert on_device["device"] == "cuda" and on_device["draws"]["multinomial_device"] == "cuda"
    for name, values in cpu.items():
        if name == "multinomial_device":
            continue
        if name == "exponential_":  # through log: the CUDA kernel's log may round differently
            np.testing.assert_allclose(on_device["draws"][name], values, rtol=1e-6)
        else:
            assert on_device["draws"][name] == values, name


def test_shuffled_batches_of_cuda_tensors_stay_on_the_device(on_device):
    x = lv.arange(10)
    cpu = list(DataLoader(TensorDataset(x * 2, x), batch_size=4, shuffle=True, generator=lv.Generator().manual_seed(5)))
    assert on_device["batch_devices"] == ["cuda"]
    assert on_device["batches"] == [[t.tolist() for t in b] for b in cpu]
