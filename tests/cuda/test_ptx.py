"""Every CUDA kernel lazyvic launches in the CUDA tests compiles for a real GPU (PTX).

The CUDA simulator runs kernels as Python, so it never checks that a kernel types in
numba-cuda's CUDA target, lowers through NVVM or links libdevice. This test does, without a
GPU, in two steps (the subprocess side is tests/cuda/_ptx_record.py):

1. record, under the simulator (several processes, see _simulator.py): every op's forward
   and VJP case, random numbers and dropout (tests/cuda/_parity_cases.py), the CUDA side of
   the TinyGPT and ResNet-18 training steps, the cases of tests/cuda/test_codegen_cuda.py
   and the float16/bfloat16 rounding of tests/cuda/test_amp_cuda.py, all in compile mode
   "always"; each kernel launch is recorded with its argument types (deduplicated);
2. compile each recorded kernel with ``numba.cuda.compile_ptx`` for compute capabilities
   8.0 and 9.0, in a process of this interpreter NOT under the simulator: generated kernels
   from the files the plans loaded them from, library kernels from
   ``lazyvic.lowering.cuda.kernel_lib``, factory-made ones (the tiled matmul) built with the
   GPU's parameters (``lowering.cuda.target.MATMUL_TILE``, not the simulator's tile).

It skips where this interpreter cannot compile PTX (numba-cuda or its NVVM missing), as in
CI. To run it for real, in an environment with the ``cuda`` extra (no GPU needed):
``pip install -e ".[dev,cuda]" && python -m pytest tests/cuda/test_ptx.py`` (about 2 min
on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _ptx_record as ptx  # noqa: E402
from _simulator import ROOT, run_groups  # noqa: E402

SCRIPT = HERE / "_ptx_record.py"
GROUPS = ("ops", "gpt", "resnet", "codegen", "amp")
CCS = ("8.0", "9.0")

# What the recorded set must hold: the kinds of generated kernels (lowering/cuda/codegen.py)
# and the library kernels of lowering/cuda/kernel_lib.py that the cases above launch.
GENERATED_KINDS = {"elementwise", "rows", "thread_rows"}
LIBRARY_KERNELS = {
    "gather_copy",
    "copy_view",
    "fill",
    "index_check",
    "index_check_value",
    "gather_dim",
    "scatter_keys",
    "scatter_add_sorted",
    "im2col_kernel",
    "conv_output_kernel",
    "max_pool2d_kernel",
    "place_copy",
    "avg_pool2d_kernel",
    "avg_pool2d_backward_kernel",
    "randn_kernel",
    "matmul_kernel.<locals>.matmul_tiled",
}
MIN_KERNELS = 50


def compiler_env() -> dict:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _lines(stdout: str) -> dict:
    return {rec["case"]: rec for rec in (json.loads(line) for line in stdout.splitlines() if line.startswith("{"))}


@pytest.fixture(scope="module")
def compiler():
    """Skip unless this interpreter compiles a kernel calling a device function to PTX."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "probe", CCS[0]],
        cwd=ROOT,
        env=compiler_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    rec = _lines(proc.stdout).get("_probe")
    if rec is None:
        pytest.skip(f"the PTX probe did not report (rc {proc.returncode}): {proc.stderr[-2000:]}")
    if not rec["ok"]:
        pytest.skip(
            f"{sys.executable} cannot compile CUDA kernels to PTX (numba-cuda with NVVM needed): {rec['error']}"
        )
    return rec


@pytest.fixture(scope="module")
def recorded(compiler):
    """The kernels launched by the cases, deduplicated by what a GPU compiles: a list of
    records (see _ptx_record.install_recorder), plus the groups' raw results."""
    t0 = time.perf_counter()
    groups = run_groups(SCRIPT, GROUPS)
    kernels: dict = {}
    for group, recs in groups.items():
        if "_probe" not in recs:
            pytest.skip(f"the CUDA simulator could not start ({group}, rc {recs['_rc']}): {recs['_stderr'][-3000:]}")
        if "_kernels" not in recs:
            pytest.fail(f"recording {group} did not finish (rc {recs['_rc']}): {recs['_stderr'][-3000:]}")
        for rec in recs["_kernels"]["kernels"]:
            kernels.setdefault(ptx.gpu_key(rec), dict(rec, groups=[]))["groups"].append(group)
    return {"kernels": list(kernels.values()), "groups": groups, "seconds": round(time.perf_counter() - t0, 1)}


@pytest.fixture(scope="module")
def compiled(recorded):
    """``{cc: [result per kernel]}``: every capability's kernels split among processes (at
    least one per capability, more where there are cores for them)."""
    shards = max(1, (os.cpu_count() or 1) // len(CCS))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.json"
        path.write_text(json.dumps(recorded["kernels"]))
        procs = {
            (cc, shard): subprocess.Popen(
                [sys.executable, str(SCRIPT), "compile", str(path), cc, str(shard), str(shards)],
                cwd=ROOT,
                env=compiler_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for cc in CCS
            for shard in range(shards)
        }
        out: dict = {cc: {} for cc in CCS}
        for (cc, shard), proc in procs.items():
            try:
                stdout, stderr = proc.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            recs = _lines(stdout)
            if "_done" not in recs:
                pytest.fail(
                    f"compiling for cc {cc} (shard {shard}) did not finish (rc {proc.returncode}): {stderr[-3000:]}"
                )
            out[cc].update({rec["kernel"]: rec for rec in recs.values() if "kernel" in rec})
    return {cc: [res[n] for n in range(len(recorded["kernels"]))] for cc, res in out.items()}


def _describe(kernel: dict) -> str:
    name = kernel["qualname"] if kernel["kind"] == "library" else Path(kernel["file"]).name
    args = ", ".join(
        a.get("array", a.get("scalar", a.get("other"))) + (f"[{a['ndim']}d {a['layout']}]" if "array" in a else "")
        for a in kernel["args"]
    )
    return f"{name} ({kernel['kind']}; {', '.join(kernel['groups'])}) ({args})"


def test_the_recording_is_representative(recorded):
    kernels = recorded["kernels"]
    errors = {
        f"{g}:{case}": rec["error"][-1500:]
        for g, recs in recorded["groups"].items()
        for case, rec in recs.items()
        if isinstance(rec, dict) and "error" in rec
    }
    assert len(kernels) > MIN_KERNELS, (len(kernels), errors)
    kinds = {k["kind"] for k in kernels}
    assert GENERATED_KINDS <= kinds, (kinds, errors)
    library = {k["qualname"] for k in kernels if k["kind"] == "library"}
    assert LIBRARY_KERNELS <= library, (sorted(LIBRARY_KERNELS - library), errors)
    odd = [_describe(k) for k in kernels if any("other" in a for a in k["args"])]
    assert not odd, f"launch arguments of no Numba type: {odd}"


@pytest.mark.parametrize("cc", CCS)
def test_every_kernel_compiles_to_ptx(recorded, compiled, cc):
    failures = []
    for kernel, res in zip(recorded["kernels"], compiled[cc]):
        if not res["ok"]:
            failures.append(f"{_describe(kernel)}:\n    {res['error'][:1500]}\n    file: {kernel['file']}")
    assert not failures, (
        f"{len(failures)} of {len(recorded['kernels'])} kernels do not compile for cc {cc}:\n" + "\n".join(failures)
    )
