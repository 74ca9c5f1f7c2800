"""Run a worker script under ``mpirun -n N`` from a test (skipped where MPI is missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"


def mpirun() -> str:
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpirun on this machine (apt-get install openmpi-bin libopenmpi-dev)")
    pytest.importorskip("mpi4py")
    return exe


def mpi_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # Open MPI refuses root unless told, and more processes than cores unless told.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env.setdefault("LAZYVIC_DIST_TIMEOUT", "60")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    env.update(extra or {})
    return env


def run_workers(n: int, script: str, *args: str, timeout: float = 240, env: dict | None = None):
    """``mpirun -n n python workers/<script> args``: the CompletedProcess (text output)."""
    cmd = [mpirun(), "-n", str(n), sys.executable, str(WORKERS / script), *map(str, args)]
    return subprocess.run(cmd, env=mpi_env(env), capture_output=True, text=True, timeout=timeout)


def check(result) -> str:
    """The output of a run that must have succeeded (its output in the failure message)."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout
