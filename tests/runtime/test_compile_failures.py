"""What a failed or interrupted compile leaves behind: a Ctrl-C inside a compile is retried at the
next run of the key; a kernel cache that cannot be used (read-only, a truncated or corrupt file
from another process) costs a warning and a compile in memory, never the interpreter.

Each case runs in a fresh process (Numba not yet imported, caches of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs two small plans compiled at first sight and prints what happened as JSON.
WORKLOAD = textwrap.dedent("""
    import json, warnings
    import numpy as np
    import lazyvic as lv
    from lazyvic.runtime.config import config
    from lazyvic.runtime.plan_cache import plan_cache

    config.compile = "always"
    x = lv.tensor(np.linspace(0, 1, 64, dtype=np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = float(((x * 2.0).tanh() + 1.0).sum().item())
        b = ((x * 3.0).exp() - 1.0).numpy()
    plans = [e for e in plan_cache.values()]
    print(json.dumps({
        "compiled": all(e.plan is not None for e in plans),
        "failed": [e.failed for e in plans if e.failed],
        "a": a,
        "b_ok": bool(np.allclose(b, np.exp(np.linspace(0, 1, 64, dtype=np.float32) * 3) - 1, rtol=1e-5, atol=1e-6)),
        "warnings": [str(w.message) for w in caught],
    }))
""")


def _run(code: str, cache: Path, numba_cache: Path, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LAZYVIC_CACHE_DIR=str(cache), NUMBA_CACHE_DIR=str(numba_cache))
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cache_warnings(result: dict) -> list:
    return [w for w in result["warnings"] if "kernel cache" in w]


# ------------------------------------------------------------------------- Ctrl-C
CTRL_C = textwrap.dedent("""
    import importlib.abc, json, sys, warnings
    import numpy as np
    import lazyvic as lv
    from lazyvic.runtime.config import config
    from lazyvic.runtime.plan_cache import plan_cache

    config.compile = "always"
    assert "numba" not in sys.modules  # the first compile imports Numba

    class CtrlC(importlib.abc.MetaPathFinder):
        # Ctrl-C landing while the first compile imports Numba (about a second, a real window)
        fired = False
        def find_spec(self, name, path, target=None):
            if name == sys.argv[1] and not CtrlC.fired:
                CtrlC.fired = True
                raise KeyboardInterrupt
            return None

    sys.meta_path.insert(0, CtrlC())
    x = lv.tensor(np.arange(8, dtype=np.float32))
    try:
        (x * 2.0 + 1.0).numpy()
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    warnings.simplefilter("ignore")
    y = (x * 2.0 + 1.0).numpy()
    e = plan_cache.last
    print(json.dumps({"interrupted": interrupted, "compiled": e.plan is not None, "failed": e.failed,
                      "y": y.tolist()}))
""")


@pytest.mark.parametrize("module", ["numba.core.typing", "llvmlite.binding"])
def test_ctrl_c_inside_the_first_compile_is_retried_at_the_next_run(tmp_path, module):
    """Before: Python kept the half-imported Numba's submodules, every later compile failed
    ("module 'numba' has no attribute 'core'") and the key stayed on the interpreter."""
    r = _run(CTRL_C, tmp_path / "lv", tmp_path / "nb", module)
    assert r["interrupted"]
    assert r["compiled"], r["failed"]
    assert r["y"] == [float(2 * i + 1) for i in range(8)]


def test_ctrl_c_inside_a_compile_leaves_the_key_to_be_compiled_next_time(monkeypatch):
    import importlib

    import numpy as np

    import lazyvic as lv
    from lazyvic.runtime.config import config

    pc = importlib.import_module("lazyvic.runtime.plan_cache")

    monkeypatch.setattr(config, "compile", "always")
    real = pc._compile

    def interrupted(trace):
        monkeypatch.setattr(pc, "_compile", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(pc, "_compile", interrupted)
    x = lv.tensor(np.arange(33, dtype=np.float32).reshape(11, 3))  # a key no other test compiles
    with pytest.raises(KeyboardInterrupt):
        ((x - 0.25) * 7.0).abs().numpy()
    assert pc.plan_cache.last.plan is None and pc.plan_cache.last.failed is None
    np.testing.assert_array_equal(((x - 0.25) * 7.0).abs().numpy(), np.abs((x.numpy() - 0.25) * 7))
    assert pc.plan_cache.last.plan is not None


# ------------------------------------------------------------------------- the kernel cache
def test_a_cache_dir_that_cannot_be_created_compiles_in_memory(tmp_path):
    """Before: every plan failed to compile (NotADirectoryError) and ran on the interpreter."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    r = _run(WORKLOAD, blocker / "cache", tmp_path / "nb")
    assert r["compiled"] and not r["failed"], r
    assert r["b_ok"]
    assert len(_cache_warnings(r)) == 1  # once per process, not per kernel


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_cache_dir_compiles_in_memory(tmp_path):
    cache = tmp_path / "cache"
    (cache / "kernels").mkdir(parents=True)
    for d in (cache / "kernels", cache):
        d.chmod(0o555)
    try:
        r = _run(WORKLOAD, cache, tmp_path / "nb")
    finally:
        for d in (cache, cache / "kernels"):
            d.chmod(0o755)
    assert r["compiled"] and not r["failed"], r
    assert len(_cache_warnings(r)) == 1


def test_truncated_kernel_files_and_numba_cache_of_another_process(tmp_path):
    """A first process fills the caches; its kernel files and Numba's cache files are then
    truncated (a crash, a full disk). The next process rewrites the kernel files, and compiles
    in memory what Numba cannot read back. Before: UnpicklingError, plans on the interpreter."""
    cache, numba_cache = tmp_path / "lv", tmp_path / "nb"
    first = _run(WORKLOAD, cache, numba_cache)
    assert first["compiled"] and first["b_ok"] and not _cache_warnings(first)
    truncated = 0
    for f in list((cache / "kernels").glob("*.py")) + list(numba_cache.rglob("*.nb[ic]")):
        f.write_bytes(f.read_bytes()[:40])
        truncated += 1
    assert truncated >= 4
    second = _run(WORKLOAD, cache, numba_cache)
    assert second["compiled"] and not second["failed"], second
    assert second["a"] == first["a"] and second["b_ok"]
    assert len(_cache_warnings(second)) == 1


def test_a_kernel_file_that_cannot_be_rewritten(tmp_path):
    """A kernel file that differs from what it must hold and cannot be replaced (here a directory
    in its place: root ignores permissions) is compiled from a private copy."""
    cache, numba_cache = tmp_path / "lv", tmp_path / "nb"
    first = _run(WORKLOAD, cache, numba_cache)
    for f in (cache / "kernels").glob("*.py"):
        f.unlink()
        f.mkdir()
        (f / "keep").write_text("x")
    second = _run(WORKLOAD, cache, numba_cache)
    assert second["compiled"] and not second["failed"], second
    assert second["a"] == first["a"]
    assert len(_cache_warnings(second)) == 1
