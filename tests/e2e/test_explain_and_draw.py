"""examples/explain_and_draw.py end to end: the trap is diagnosed, the fix removes it, the picture is drawn."""

import importlib.util
import shutil
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "explain_and_draw.py"


def test_explain_and_draw_example(tmp_path, capsys):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    spec = importlib.util.spec_from_file_location("explain_and_draw", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--out", str(tmp_path)])
    out = capsys.readouterr().out
    # The changing slice bound is made symbolic (one plan), and the sync in the loop is flagged.
    assert "dynamic shapes" in out and "sync-in-loop" in out
    svg = (tmp_path / "tiny_gpt_step.svg").read_text()
    assert "<svg" in svg and "transformer.h.0.attn" in svg and "optim.AdamW" in svg
