"""Collectives and DistributedDataParallel on "cuda" tensors.

- ``"mpi"`` group: 2 processes on Numba's CUDA simulator (or the GPU under ``LAZYVIC_TEST_GPU=1``,
  see tests/cuda/_simulator.py): values travel through host memory and results come back to the
  device (a collective used to leave a CUDA tensor on the CPU).
- ``"nccl"`` group: only where a GPU is lent (``LAZYVIC_TEST_GPU=1``; CuPy and NCCL): one rank per
  GPU, every collective GPU to GPU with no host copy counted. A machine with one GPU runs one rank.
"""

from __future__ import annotations

import os

import pytest
from _mpi import check, run_workers

ON_GPU = os.environ.get("LAZYVIC_TEST_GPU") == "1"


def test_cuda_tensors_in_an_mpi_group_stay_on_the_device():
    env = {} if ON_GPU else {"NUMBA_ENABLE_CUDASIM": "1"}
    out = check(run_workers(2, "cuda_collectives.py", "mpi", env=env, timeout=400))
    assert "ok 0" in out and "ok 1" in out


@pytest.mark.skipif(not ON_GPU, reason="NCCL needs a GPU (LAZYVIC_TEST_GPU=1 where one is lent)")
def test_nccl_collectives_and_ddp_on_the_gpu():
    gpus = int(os.environ.get("LAZYVIC_TEST_GPUS", "1"))
    out = check(run_workers(gpus, "cuda_collectives.py", "nccl", timeout=400))
    assert all(f"ok {r}" in out for r in range(gpus))
