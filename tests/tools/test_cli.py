"""The ``lazyvic`` command line: ``explain`` on a script, ``viz`` arguments and its missing-module error."""

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from lazyvic import cli

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""\
    import sys

    import numpy as np

    import lazyvic as lv

    x = lv.tensor(np.ones(53, np.float32))
    total = 0.0
    for i in range(4):
        total += (x * float(i)).sum().item()
    print("total", total, sys.argv[1:])
""")


def test_explain_runs_a_script_and_prints_the_report(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), LAZYVIC_COMPILE="hot")
    proc = subprocess.run(
        [sys.executable, "-m", "lazyvic.cli", "explain", str(script), "--flag", "7"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "total 318.0 ['--flag', '7']" in out
    assert "lazyvic.explain:" in out and "4 cuts" in out
    assert "item" in out and "tiny.py:10" in out
    assert "[sync-in-loop]" in out


def test_viz_without_the_visualizer_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lazyvic.tools.viz", None)  # import fails
    assert cli.main(["viz", "some.py", "--out", "d"]) == 2
    assert "visualizer is not available" in capsys.readouterr().err


def test_viz_passes_script_args_and_out(monkeypatch, capsys, tmp_path):
    calls = []

    def viz_script(script, script_args, out_dir):
        calls.append((script, script_args, out_dir))
        return Path(out_dir) / "index.md"

    monkeypatch.setitem(sys.modules, "lazyvic.tools.viz", types.SimpleNamespace(viz_script=viz_script))
    assert cli.main(["viz", "train.py", "--steps", "2", "--out", str(tmp_path)]) == 0
    assert cli.main(["viz", "--out", "o", "train.py", "a"]) == 0
    assert calls == [("train.py", ["--steps", "2"], str(tmp_path)), ("train.py", ["a"], "o")]
    assert "index.md" in capsys.readouterr().out


def test_no_subcommand_is_an_error():
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert e.value.code == 2
