"""Run case scripts under Numba's CUDA simulator, several at once, and read their reports.

The simulator needs ``NUMBA_ENABLE_CUDASIM=1`` before Numba is first imported, so the CUDA
work of a test module runs in subprocesses (``python SCRIPT GROUP``) that print one JSON
line per case. A simulated kernel spends most of its time starting and switching Python
threads, so a subprocess keeps a core only about a third busy: the groups of a module run
in parallel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# ``LAZYVIC_TEST_GPU=1``: the same subprocesses run on the real GPU (numba-cuda, CuPy) instead of
# the simulator, and the tests expect ``simulated`` to be False. Used where a GPU is lent.
ON_GPU = os.environ.get("LAZYVIC_TEST_GPU") == "1"
SIMULATED = not ON_GPU


def simulator_env() -> dict:
    """The environment of a case subprocess: the simulator, or the GPU under ``LAZYVIC_TEST_GPU=1``."""
    env = dict(os.environ)
    if ON_GPU:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    else:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    env.pop("LAZYVIC_COMPILE", None)  # the scripts choose their compile mode
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))
    env.setdefault("LAZYVIC_CACHE_DIR", str(ROOT / ".cache" / "lazyvic"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_groups(script: Path, groups: tuple, timeout: float = 600) -> dict:
    """``{group: {case: record}}``; each group's dict also has ``_stderr``, ``_rc`` and
    ``_wall`` (seconds). A group whose process never printed its ``_probe`` line has no
    ``_probe`` key (the caller skips or fails with its stderr)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        t0 = time.perf_counter()
        for group in groups:
            stdout = open(Path(tmp) / f"{group}.out", "w")  # closed below
            stderr = open(Path(tmp) / f"{group}.err", "w")
            proc = subprocess.Popen(
                [sys.executable, str(script), group],
                cwd=ROOT,
                env=simulator_env(),
                stdout=stdout,
                stderr=stderr,
                text=True,
            )
            procs[group] = (proc, stdout, stderr)
        deadline = t0 + timeout
        for group, (proc, stdout, stderr) in procs.items():
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = f"killed after {timeout} s"
            stdout.close()
            stderr.close()
            recs = {
                "_rc": rc,
                "_wall": round(time.perf_counter() - t0, 1),
                "_stderr": (Path(tmp) / f"{group}.err").read_text()[-6000:],
            }
            for line in (Path(tmp) / f"{group}.out").read_text().splitlines():
                if line.startswith("{"):
                    rec = json.loads(line)
                    recs[rec["case"]] = rec
            out[group] = recs
    return out
