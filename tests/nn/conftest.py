"""The ``interpreted`` fixture: run a test on the NumPy interpreter (``LAZYVIC_COMPILE=never``).

The default tier ("hot") compiles a plan the second time its key is seen, so a test that runs the
same structure twice (a module and its function) would wait for Numba; modules whose tests compare
against fixtures use it (``pytestmark``), and the tests that should also run compiled ask for the
``mode`` fixture instead, which then decides."""

import pytest

from lazyvic.runtime.config import config


@pytest.fixture
def interpreted(request):
    if "mode" in request.fixturenames:
        yield
        return
    prev = config.compile
    config.compile = "never"
    yield
    config.compile = prev
