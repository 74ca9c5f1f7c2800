"""DistributedDataParallel against one process on the combined batch (1, 2 and 4 MPI processes),
bit-exact repeatability, no_sync, and the ways a job fails."""

import subprocess
import sys

import numpy as np
import pytest
from _mpi import WORKERS, check, mpi_env, mpirun, run_workers

# Tolerances: the ranks' gradients are means over their own rows, averaged over the ranks; one
# process sums the combined batch in another order. Observed: losses 4e-7, gradients 2e-7,
# parameters after 6 steps 2e-8 (SGD) and 9e-6 (AdamW divides by small second moments).
TOL = {"mlp": dict(loss=2e-6, grad=2e-6, param=1e-6), "gpt": dict(loss=2e-6, grad=2e-6, param=1e-4)}


def single(kind, tmp_path, *flags):
    out = tmp_path / f"single-{kind}{''.join(flags)}.npz"
    run = subprocess.run(
        [sys.executable, str(WORKERS / "ddp_train.py"), kind, str(out), "--single", *flags],
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    check(run)
    return np.load(out)


def parallel(kind, n, tmp_path, *flags, name=""):
    out = tmp_path / f"ddp{n}-{kind}{name}.npz"
    check(run_workers(n, "ddp_train.py", kind, out, *flags, timeout=300))
    return np.load(out)


def assert_close(a, b, tol):
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=0, atol=tol["loss"])
    for f in a.files:
        if f != "losses":
            kind = "grad" if f.startswith("grad") else "param"
            np.testing.assert_allclose(a[f], b[f], rtol=0, atol=tol[kind], err_msg=f)


@pytest.mark.parametrize("kind", ["mlp", "gpt"])
def test_ddp_trains_as_one_process_on_the_combined_batch(kind, tmp_path):
    mpirun()
    one = single(kind, tmp_path)
    for n in (1, 2, 4):
        assert_close(parallel(kind, n, tmp_path), one, TOL[kind])
    if kind == "mlp":
        assert one["losses"][-1] < one["losses"][0]  # (the GPT's tokens are random: nothing to learn)


def test_ddp_is_bit_exact_from_run_to_run_and_no_sync_accumulates(tmp_path):
    mpirun()
    a = parallel("mlp", 2, tmp_path, name="a")
    b = parallel("mlp", 2, tmp_path, name="b")
    for f in a.files:
        assert np.array_equal(a[f], b[f]), f
    # The captured step (lazyvic.compile: the all-reduces are steps of its plan; the worker asserts
    # it replayed): the same training. Not the same bits: eager DDP cuts the trace after backward,
    # the captured step is one plan, and the gradients' kernels are fused another way (1e-8 seen).
    c = parallel("mlp", 2, tmp_path, "--compile", name="compiled")
    assert_close(c, a, dict(loss=1e-6, grad=1e-7, param=1e-7))
    assert_close(parallel("mlp", 2, tmp_path, "--compile", name="compiled2"), c, dict(loss=0, grad=0, param=0))
    # Two half-batches per step, the first inside no_sync(): the same training as one process.
    assert_close(
        parallel("mlp", 2, tmp_path, "--no-sync", name="nosync"), single("mlp", tmp_path, "--no-sync"), TOL["mlp"]
    )


@pytest.mark.parametrize(
    "mode, expect",
    [
        (
            "mismatch",
            "parameter or buffer '0.weight' is shape (17, 4) float32 on rank 1 but shape (16, 4) float32 on rank 0",
        ),
        ("timeout", "all_reduce: rank 0 of 2 waited 3 s for the other ranks"),
        ("die", "exited"),
        ("unused", "parameters ['b.weight', 'b.bias'] got no gradient"),
    ],
)
def test_a_failing_rank_ends_the_job_with_a_clear_error(mode, expect):
    run = run_workers(2, "ddp_failures.py", mode, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert expect in out, out[-3000:]
    assert "finished" not in out
