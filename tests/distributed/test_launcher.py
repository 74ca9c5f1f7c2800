"""``lazyvic run`` (lazyvic.distributed.run): torchrun's variables, script arguments, -m, more
processes than cores, a failing rank that ends the job, the mpirun command line, a missing mpirun."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _mpi import WORKERS, mpirun

from lazyvic.distributed import run

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30  # LAZYVIC_DIST_TIMEOUT in the jobs: a rank that waited this long did not get aborted


def lazyvic_run(*args: str, cwd: Path, timeout: float = 120):
    """``python -m lazyvic.cli run ARGS`` in ``cwd`` (the workers write their results there) with
    no Open MPI settings inherited: the launcher's own (run as root, oversubscribe) are under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_") and k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(LAZYVIC_DIST_TIMEOUT=str(TIMEOUT), PYTHONPATH=os.pathsep.join([str(ROOT), str(WORKERS)]))
    env["LAUNCH_OUT"] = str(cwd)
    cmd = [sys.executable, "-m", "lazyvic.cli", "run", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def results(proc, out: Path) -> list[dict]:
    """The ranks' results, in rank order, of a run that must have succeeded."""
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return [json.loads(path.read_text()) for path in sorted(out.glob("*.json"))]


def test_three_ranks_see_torchrun_variables_and_their_arguments(tmp_path):
    # 3 processes: more than the 2 cores of the CI machine, so Open MPI needs --oversubscribe there.
    mpirun()
    script = str(WORKERS / "launch_env.py")
    args = ["--lr", "0.1", "-n", "5", "two words"]  # -n after the script is the script's
    found = results(lazyvic_run("-n", "3", script, *args, cwd=tmp_path), tmp_path)
    assert [r["dist"] for r in found] == [[0, 3], [1, 3], [2, 3]]
    for rank, r in enumerate(found):
        mpi_rank, mpi_size, local_rank, local_size = r["mpi"]
        assert (mpi_rank, mpi_size) == (rank, 3)
        env = r["env"]
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "3")
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (str(local_rank), str(local_size))
        assert env["GROUP_RANK"] == "0" and local_size == 3  # one host
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29500")
        assert r["argv"] == [script, *args]
        assert r["name"] == "__main__" and r["path0"] == str(WORKERS)


def test_module_runs_as_main(tmp_path):
    mpirun()
    found = results(lazyvic_run("-n", "2", "-m", "launch_module", "a", "--b", cwd=tmp_path), tmp_path)
    assert [r["rank"] for r in found] == ["0", "1"]
    for r in found:
        assert r["name"] == "__main__"
        assert r["argv"] == [str(WORKERS / "launch_module.py"), "a", "--b"]


@pytest.mark.parametrize(
    "mode, message",
    [("raise", "[rank1]: RuntimeError: rank 1 fails on purpose"), ("exit", "[rank1]: exited with status 3")],
    ids=["raise", "exit"],
)
def test_a_failing_rank_ends_the_job(tmp_path, mode, message):
    mpirun()
    start = time.monotonic()
    proc = lazyvic_run("-n", "2", str(WORKERS / "launch_fail.py"), mode, cwd=tmp_path)
    elapsed = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert message in out
    if mode == "raise":
        assert "[rank1]: Traceback (most recent call last):" in out
        assert 'launch_fail.py", line' in out and "runpy" not in out  # the script's frames, not the launcher's
    assert "rank 0 passed the barrier" not in out
    assert "waited" not in out and elapsed < TIMEOUT, out  # rank 0 was aborted, not timed out


def test_a_missing_mpirun_is_a_one_line_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "lazyvic.cli", "run", "--mpirun", "/nonexistent", "-n", "2", "script.py"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "no MPI launcher: '/nonexistent'" in proc.stderr and "openmpi-bin" in proc.stderr and "mpich" in proc.stderr


@pytest.mark.parametrize("flavour", ["open-mpi", "mpich"])
def test_the_mpirun_command_line(tmp_path, monkeypatch, flavour):
    fake = tmp_path / "mpirun"
    version = "mpirun (Open MPI) 4.1.4" if flavour == "open-mpi" else "HYDRA build details:"
    fake.write_text(f"#!/bin/sh\necho '{version}'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(run, "_cores", lambda: 2)
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)
    for name in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        monkeypatch.delenv(name, raising=False)
    child = [sys.executable, "-m", "lazyvic.distributed.run", "--child", "-m", "pkg.train", "--x"]

    cmd, env = run.mpirun_command(
        3, "pkg.train", ["--x"], module=True, mpirun=str(fake), mpi_args=["--bind-to", "none"]
    )
    open_mpi = flavour == "open-mpi"
    assert cmd == [str(fake), "-n", "3", *(["--oversubscribe"] if open_mpi else []), "--bind-to", "none", *child]
    assert ("OMPI_ALLOW_RUN_AS_ROOT" in env and "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM" in env) == open_mpi

    cmd, _ = run.mpirun_command(2, "train.py", mpirun=str(fake))  # not more than the cores; unbound
    unbound = ["--bind-to", "none"] if open_mpi else []
    assert cmd == [
        str(fake),
        "-n",
        "2",
        *unbound,
        sys.executable,
        "-m",
        "lazyvic.distributed.run",
        "--child",
        "train.py",
    ]
    cmd, _ = run.mpirun_command(8, "train.py", hostfile="hosts", mpirun=str(fake))  # the hostfile's slots decide
    assert cmd[: 5 + len(unbound)] == [str(fake), "-n", "8", *unbound, "--hostfile", "hosts"]

    monkeypatch.setattr(os, "geteuid", lambda: 1000, raising=False)
    _, env = run.mpirun_command(2, "train.py", mpirun=str(fake))
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in env
