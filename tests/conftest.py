"""Test set-up: compiled kernels and Numba's cache go to a folder inside the checkout."""

import os
from pathlib import Path

_root = Path(__file__).resolve().parent.parent
os.environ.setdefault("LAZYVIC_CACHE_DIR", str(_root / ".cache" / "lazyvic"))
os.environ.setdefault("NUMBA_CACHE_DIR", str(_root / ".cache" / "numba"))
# Plans do not turn native after a few runs (a worker process compiling each one would take
# the suite's cores): tests/lowering/test_native.py turns them native itself.
os.environ.setdefault("LAZYVIC_NATIVE", "0")


import pytest  # noqa: E402

from lazyvic.runtime import metrics  # noqa: E402
from lazyvic.runtime.config import config  # noqa: E402
from lazyvic.runtime.plan_cache import plan_cache  # noqa: E402


@pytest.fixture(params=["never", "always"])
def mode(request):
    """Run the test on the interpreter (never) and through the compiler (always)."""
    prev = config.compile
    config.compile = request.param
    yield request.param
    config.compile = prev


@pytest.fixture
def fresh(monkeypatch):
    """Default compile settings (hot, automatic dynamic shapes, not deterministic), an empty
    plan cache and zeroed counters: for tests that count plans, misses and recompiles."""
    monkeypatch.setattr(config, "compile", "hot")
    monkeypatch.setattr(config, "dynamic", True)
    monkeypatch.setattr(config, "deterministic", False)
    plan_cache.clear_plans()
    metrics.reset()


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-iters",
        type=int,
        default=None,
        help="programs per fuzz test (tests/test_fuzz.py; default LAZYVIC_FUZZ_ITERS or 60)",
    )


@pytest.fixture
def fuzz_iters(request) -> int:
    """Programs per fuzz test: ``--fuzz-iters``, else ``LAZYVIC_FUZZ_ITERS``, else 60."""
    given = request.config.getoption("--fuzz-iters")
    return given if given is not None else int(os.environ.get("LAZYVIC_FUZZ_ITERS", "60"))
