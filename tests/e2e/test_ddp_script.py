"""The torchrun-style data-parallel script (examples/pytorch_style/ddp_digits.py) runs unchanged
under ``lazyvic run`` and agrees with PyTorch under ``torchrun``.

The fixture comes from tests/fixtures/make_ddp_fixtures.py: the script's PyTorch twin run by
``torchrun --nproc-per-node 2`` (the "gloo" group), from which rank 0 recorded its initial
weights and losses. Here ``python -m lazyvic.distributed.run -n 2`` runs the lazyvic script
from those weights with the same arguments (samples in order, ``--no-shuffle``: lazyvic's
shuffled order comes from its own random stream, so a shuffled run is only checked to learn).
Tolerance: every loss within ``rtol=1e-4`` of PyTorch's, as the deterministic runs of
tests/e2e/test_pytorch_style.py (float32 sums in another order; with two ranks the gradient
average is the same sum halved in both libraries).

Each launch starts MPI and the interpreter on every rank: a few seconds. Skipped where
``mpirun`` or mpi4py is missing.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "pytorch_style" / "ddp_digits.py"
FIXTURES = ROOT / "tests" / "fixtures" / "pytorch_style"


def _maker():
    path = ROOT / "tests" / "fixtures" / "make_ddp_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_ddp_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


def _launch(nproc: int, tmp_path: Path, *args: str) -> tuple[dict, str]:
    """``python -m lazyvic.distributed.run -n nproc ddp_digits.py args`` in ``tmp_path``: rank 0's
    metrics and the job's output (the run must succeed)."""
    if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
        pytest.skip("no mpirun on this machine (apt-get install openmpi-bin libopenmpi-dev)")
    pytest.importorskip("mpi4py")
    env = dict(os.environ)
    # Open MPI refuses root unless told (the launcher adds --oversubscribe past the core count).
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env.setdefault("LAZYVIC_DIST_TIMEOUT", "60")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    metrics = tmp_path / "metrics.json"
    cmd = [sys.executable, "-m", "lazyvic.distributed.run", "-n", str(nproc), str(SCRIPT), *args]
    cmd += ["--metrics", str(metrics), "--snapshot-path", str(tmp_path / "snapshot.pt")]
    result = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"exit {result.returncode}\n{out[-4000:]}"
    return json.loads(metrics.read_text()), result.stdout


def test_ddp_digits_matches_pytorch(tmp_path):
    """Two ranks, 1,001 samples (each rank reads 501: one index padded), three epochs of eight
    SGD-with-momentum steps: rank 0's local losses and the all-reduced epoch means are PyTorch's."""
    script, nproc, argv = MAKER.CASES["ddp_digits"]
    data = np.load(FIXTURES / f"{script}.npz")
    assert str(data["source_sha256"]) == MAKER.source_sha256(script), (
        f"{script}.py changed since the fixture {script}.npz was made: rerun tests/fixtures/make_ddp_fixtures.py"
    )
    assert str(data["argv"]) == argv and int(data["nproc"]) == nproc
    want = json.loads(str(data["results"]))
    got, out = _launch(nproc, tmp_path, *argv.split(), "--init-from", str(FIXTURES / f"{script}.init.npz"))
    assert len(got["train_loss"]) == len(want["train_loss"]) == 24 and len(got["epoch_loss"]) == 3
    np.testing.assert_allclose(got["train_loss"], want["train_loss"], rtol=1e-4)
    np.testing.assert_allclose(got["epoch_loss"], want["epoch_loss"], rtol=1e-4)
    assert out.count("Steps: 8") == 2 * 3 and out.count("mean loss over 2 ranks") == 3  # rank 0 logs


def test_ddp_digits_trains_on_three_ranks_with_shuffling(tmp_path):
    """Three ranks over 1,001 samples (334 each: two indices padded), the sampler reshuffling each
    epoch (``set_epoch``): the job finishes, the loss falls, and rank 0's checkpoint (the inner
    module's ``state_dict``, no ``module.`` prefix) loads with ``lazyvic.load``."""
    import lazyvic

    got, out = _launch(3, tmp_path, "--epochs", "3", "--batch-size", "32", "--samples", "1001")
    assert len(got["train_loss"]) == 3 * 11  # ceil(334 / 32) steps per epoch, the last of 14
    assert out.count("Steps: 11") == 3 * 3 and out.count("mean loss over 3 ranks") == 3
    losses = got["epoch_loss"]
    assert losses[-1] < losses[0] - 0.5, losses
    state = lazyvic.load(str(tmp_path / "snapshot.pt"))
    assert sorted(state) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert tuple(state["fc1.weight"].shape) == (64, 64) and tuple(state["fc2.weight"].shape) == (10, 64)
    assert np.isfinite(state["fc2.weight"].numpy()).all()
