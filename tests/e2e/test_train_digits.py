"""The main job, shortened: examples/train_digits.py end to end."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"


def _load():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_digits_short_run(capsys):
    result = _load().main(["--epochs", "8", "--quiet"])
    assert result["accuracy"] >= 0.93  # the full 30-epoch run reaches >= 0.95 (about 0.986)
    # After the first step every training step hits the cache; the smaller last batch adds one plan.
    assert result["train_misses_after_first_step"] <= 1
    snap = result["metrics"]
    assert snap["fallbacks"] == 0 and snap["compiled_runs"] > 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "plan cache" in out
