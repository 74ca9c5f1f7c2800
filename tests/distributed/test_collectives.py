"""Collectives against NumPy on 1 process (MPI's singleton) and 3 processes (more than the cores)."""

import re
import subprocess
import sys

import pytest
from _mpi import WORKERS, check, mpi_env, mpirun, run_workers


@pytest.mark.parametrize("n", [1, 3])
def test_collectives_match_numpy(n):
    mpirun()  # skips without MPI
    if n == 1:
        run = subprocess.run(
            [sys.executable, str(WORKERS / "collectives.py")],
            env=mpi_env(),
            capture_output=True,
            text=True,
            timeout=240,
        )
    else:
        run = run_workers(n, "collectives.py")
    out = check(run)
    assert sorted(re.findall(r"ok \d+", out)) == [f"ok {r}" for r in range(n)]


def test_collectives_without_a_process_group_raise():
    import lazyvic as lv
    import lazyvic.distributed as dist

    assert dist.is_available() and not dist.is_initialized()
    with pytest.raises(dist.DistributedError, match="all_reduce: Default process group has not been initialized"):
        dist.all_reduce(lv.ones(2))
    with pytest.raises(dist.DistributedError, match="get_rank"):
        dist.get_rank()
    with pytest.raises(lv.errors.ArgumentError, match="unknown backend 'tcp'"):
        dist.init_process_group("tcp")
    if not dist.is_nccl_available():  # no GPU (CI): says what the backend needs, before MPI starts
        with pytest.raises(dist.DistributedError, match="init_process_group: the 'nccl' backend needs"):
            dist.init_process_group("nccl")
        assert not dist.is_initialized()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_rooted_collectives_and_point_to_point_match_numpy(n):
    out = check(run_workers(n, "rooted.py"))
    assert sorted(re.findall(r"ok \d+", out)) == [f"ok {r}" for r in range(n)]


def test_subgroups_run_among_their_members():
    out = check(run_workers(3, "subgroups.py"))
    assert sorted(re.findall(r"ok \d+", out)) == ["ok 0", "ok 1", "ok 2"]
