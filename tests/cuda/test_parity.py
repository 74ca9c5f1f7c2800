"""CPU/CUDA parity: every primitive, every VJP, random numbers and dropout masks, and the
TinyGPT and ResNet-18 training steps give the same results on "cpu" and "cuda".

The CUDA side runs on Numba's CUDA simulator in subprocesses (tests/cuda/_parity_cases.py,
three groups at once, see _simulator.py); each case runs once per device in compile mode
"always", so the CUDA traces run as compiled CudaPlans (device kernels), never on the host
interpreter, and any op a plan hands to the host is a counted fallback that fails the case.

- forward: each case of ``PRIMITIVE_CASES`` (tests/test_ops_forward.py) built again with
  every input moved by ``.to("cuda")``; bit-identical for movement, selection, comparison,
  integer and random ops (``_parity_cases.EXACT_OPS``), else within float32 ``rtol=1e-5``.
- vjp: each case of ``VJP_CASES`` (tests/test_vjp.py, float64): the output and every input's
  gradient of ``sum(f(x) * w)`` within ``rtol=1e-10``; the CPU side is the NumPy interpreter.
- random: dropout masks, rand/randn/randint/randperm after the same ``manual_seed``: same bits.
- models: two optimizer steps of TinyGPT (AdamW, dropout 0.1) and ResNet-18 (width 1, 4x4
  images, batch 2, BatchNorm in train mode, SGD with momentum): losses, every gradient and
  every state_dict entry within ``rtol=1e-4, atol=2e-5``; a second seeded CUDA run gives the
  first run's bits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the case tables live in test_ops_forward / test_vjp

import _parity_cases as cases  # noqa: E402
from _simulator import SIMULATED, run_groups  # noqa: E402

from lazyvic.ops import OPS  # noqa: E402

GROUPS = ("ops", "gpt", "resnet")

# Ops of the table with no CUDA parity case, each with its reason. Empty: every op is covered.
NOT_COVERED: dict = {}

# Ops a CUDA plan may hand to the host (a counted fallback) in these cases. argsort (ops/sort.py) has
# no kernel yet: it runs as its NumPy reference, a reported step of the plan, on the CPU and on CUDA.
# A collective (ops/collective.py) sends from host memory through MPI: a host step on CUDA.
# The RNN, LSTM and GRU recurrences (ops/recurrent.py) have CPU steps only; on CUDA, nn.RNN, nn.LSTM and nn.GRU
# unroll their steps instead (functional/recurrent._scans), so only a direct use of the primitives
# runs them on the host. The decompositions and solvers (ops/linalg.py) are LAPACK through NumPy: on CUDA,
# host steps.
ALLOWED_FALLBACKS: set = {
    *(op for op, d in OPS.items() if d.kind == "linalg"),
    "argsort",
    "collective",
    "lstm_scan",
    "lstm_scan_backward",
    "gru_scan",
    "gru_scan_backward",
    "rnn_scan",
    "rnn_scan_backward",
}


@pytest.fixture(scope="module")
def results():
    res = run_groups(HERE / "_parity_cases.py", GROUPS)
    for group, recs in res.items():
        if "_probe" not in recs:
            pytest.skip(f"the CUDA simulator could not start ({group}, rc {recs['_rc']}): {recs['_stderr'][-3000:]}")
    merged = {}
    for recs in res.values():
        merged.update({k: v for k, v in recs.items() if not k.startswith("_")})
    merged["_groups"] = res
    return merged


def _rec(results, case):
    rec = results.get(case)
    if rec is None:
        stderr = "\n".join(f"[{g}] rc {r['_rc']}: {r['_stderr'][-2000:]}" for g, r in results["_groups"].items())
        pytest.fail(f"{case} did not report; subprocess stderr:\n{stderr}")
    assert "error" not in rec, rec["error"]
    return rec


def _assert_on_device(rec):
    """The CUDA side ran compiled plans only: nothing interpreted, no op sent to the host."""
    assert rec["interpreted_runs"] == 0, rec
    assert set(rec["fallbacks"]) <= ALLOWED_FALLBACKS, rec["fallbacks"]


def test_simulator_is_used(results):
    for group, recs in results["_groups"].items():
        assert recs["_probe"] == {"case": "_probe", "simulated": SIMULATED, "available": True}, group
        assert "_done" in recs, f"{group} did not finish: {recs['_stderr'][-3000:]}"


def test_the_comparison_sees_differences():
    """The harness's comparison (run in the subprocesses) flags one ulp where bits are
    promised, a float32 difference beyond rtol 1e-5, and another dtype or shape."""
    a = np.array([1.0, -2.0, 3.0], np.float32)
    ulp = np.nextafter(a, np.float32(np.inf))
    assert cases.compare(a, a.copy(), True) == [] and cases.compare(a, ulp, False) == []
    assert cases.compare(a, ulp, True) and cases.compare(a, a * np.float32(1 + 1e-4), False)
    assert cases.compare(a, a.astype(np.float64), False) and cases.compare(a, a[:2], False)
    assert cases.compare(np.array([1, 2]), np.array([1, 3]), False)  # integers: always exact
    d = np.array([0.1, 0.2])
    assert cases.compare(d, d * (1 + 1e-9), False) and not cases.compare(d, d * (1 + 1e-12), False)


# ------------------------------------------------------------------ every primitive


def test_every_primitive_has_a_parity_case(results):
    table = results["_groups"]["ops"]["_ops_table"]
    assert table["ops"] == sorted(OPS)
    covered = {rec["op"] for name, rec in results.items() if name.startswith("forward:")}
    assert set(OPS) - covered == set(NOT_COVERED), f"no CUDA parity case for {sorted(set(OPS) - covered)}"


@pytest.mark.parametrize("opname", sorted(OPS))
def test_forward_matches_cpu(results, opname):
    if opname in NOT_COVERED:
        pytest.skip(NOT_COVERED[opname])
    rec = _rec(results, f"forward:{opname}")
    assert opname in rec["cuda_ops"], f"the CUDA case does not record {opname}: {rec['cuda_ops']}"
    assert not rec["problems"], rec
    _assert_on_device(rec)
    if opname != "buffer":  # a moved buffer is already a value: no trace runs
        assert rec["compiled_runs"] >= 1, rec


def test_exact_ops_are_compared_bit_for_bit(results):
    """The comparison of random, movement and selection ops really is a bit comparison."""
    exact = {rec["op"] for name, rec in results.items() if name.startswith("forward:") and rec.get("exact")}
    assert cases.EXACT_OPS & set(OPS) <= exact
    assert {"rand", "argmax", "gather", "permute", "pad", "cast"} <= exact  # randn: float64 here, "close"


# ------------------------------------------------------------------ every VJP

VJP_NAMES = [name for name, _, _ in cases.vjp_cases()]


def test_every_differentiable_primitive_has_a_vjp_parity_case(results):
    wanted = set(results["_groups"]["ops"]["_ops_table"]["differentiable"])
    covered = set().union(*[set(rec.get("ops", ())) for name, rec in results.items() if name.startswith("vjp:")])
    assert wanted - covered - set(NOT_COVERED) == set()
    assert len(VJP_NAMES) == len(set(VJP_NAMES)) and len(VJP_NAMES) > 100


@pytest.mark.parametrize("name", VJP_NAMES)
def test_vjp_matches_cpu(results, name):
    rec = _rec(results, f"vjp:{name}")
    assert not rec["problems"], rec
    _assert_on_device(rec)
    assert rec["compiled_runs"] == 1, rec  # forward and backward: one CUDA plan


# ------------------------------------------------------------------ randomness


@pytest.mark.parametrize("name", sorted(cases.RANDOM_CASES))
def test_random_numbers_are_bit_identical(results, name):
    rec = _rec(results, f"random:{name}")
    assert not rec["problems"], rec
    _assert_on_device(rec)


def test_dropout_mask_drops(results):
    """The compared masks are real masks: about 30 % of 45 elements dropped, not all or none."""
    kept, total = _rec(results, "random:dropout_masks")["kept"]
    assert total == 45 and 20 <= kept <= 42, (kept, total)


# ------------------------------------------------------------------ training steps


@pytest.mark.parametrize("model", ["gpt", "resnet"])
def test_training_steps_match_cpu(results, model):
    rec = _rec(results, f"model:{model}")
    assert not rec["problems"], rec
    _assert_on_device(rec)
    assert rec["compiled_runs"] == 2, rec  # each step (forward, backward, update) is one CUDA plan
    losses = np.array([rec["losses"]["cpu"], rec["losses"]["cuda"]])
    assert np.isfinite(losses).all() and losses[0, 0] != losses[0, 1], losses  # two different steps ran
    assert rec["host_to_device_bytes"] > 0 and rec["device_to_host_bytes"] > 0, rec


@pytest.mark.parametrize("model", ["gpt", "resnet"])
def test_seeded_cuda_run_repeats_bit_for_bit(results, model):
    rec = _rec(results, f"determinism:{model}")
    assert rec["steps"] >= 1 and not rec["problems"], rec
