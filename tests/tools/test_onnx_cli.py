"""``lazyvic onnx check|run|convert|export``: outputs, files written and exit codes."""

import subprocess
import sys

import numpy as np
import pytest

import lazyvic as lv
from lazyvic import nn
from lazyvic.cli import main

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    lv.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    path = tmp_path_factory.mktemp("cli") / "mlp.onnx"
    lv.onnx.export(m, np.zeros((4, 8), np.float32), path, dynamic_axes={"input": [0]})
    return path, m


def test_check_lists_io_histogram_and_support(mlp_file, capsys):
    path, _ = mlp_file
    assert main(["onnx", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "opsets: ai.onnx 13" in out and "input_dim0" in out
    assert any(line.split() == ["Gemm", "2", "supported"] for line in out.splitlines())
    assert "lazyvic supports every op of this model" in out


def test_check_names_every_unsupported_op(tmp_path, capsys):
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    nodes = [
        h.make_node("Hardmax", ["x"], ["a"], name="hm"),
        h.make_node("Relu", ["a"], ["b"], name="r"),
        h.make_node("FastGelu", ["b"], ["y"], name="fg", domain="com.microsoft"),
    ]
    model = h.make_model(
        h.make_graph(nodes, "g", [x], [y]), opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)]
    )
    path = tmp_path / "odd.onnx"
    onnx.save(model, str(path))
    assert main(["onnx", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "Hardmax" in out and "hm" in out and "com.microsoft.FastGelu: fg" in out
    assert "Relu" in out and "NOT supported" in out


def test_run_writes_outputs_and_compares_with_onnxruntime(mlp_file, tmp_path, capsys):
    path, m = mlp_file
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out_file = tmp_path / "out" / "y.npz"
    rc = main(
        [
            "onnx",
            "run",
            str(path),
            "--input",
            f"input={tmp_path / 'x.npy'}",
            "--output",
            str(out_file),
            "--compare-ort",
            "--repeat",
            "2",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "max |lazyvic - onnxruntime|" in text and "ok" in text
    # (the imported Gemm reads its weight as stored, the module reads it transposed: the two
    # products sum in different orders, ops/gemm's ROWS and DOTS, a float32 rounding apart)
    np.testing.assert_allclose(np.load(out_file)["output"], m(lv.tensor(x)).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("input", "expected NAME=FILE.npy"),
        ("nope=x.npy", "has no input 'nope'"),
        ("input=missing.npy", "missing.npy: no such file"),
    ],
)
def test_run_refuses_bad_input_specs(mlp_file, spec, message, capsys):
    assert main(["onnx", "run", str(mlp_file[0]), "--input", spec]) == 1
    assert message in capsys.readouterr().err


def test_run_needs_every_input(mlp_file, capsys):
    assert main(["onnx", "run", str(mlp_file[0])]) == 1
    assert "input 'input' (input_dim0, 8) float32 is not given" in capsys.readouterr().err


def test_missing_and_invalid_files(tmp_path, capsys):
    assert main(["onnx", "check", str(tmp_path / "none.onnx")]) == 1
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf at all \xff\xfe")
    assert main(["onnx", "run", str(bad), "--random-inputs"]) == 1
    assert "bad.onnx" in capsys.readouterr().err


def test_convert_then_lazyvic_load_rebuilds_the_module(mlp_file, tmp_path, capsys):
    path, m = mlp_file
    out = tmp_path / "mlp.safetensors"
    assert main(["onnx", "convert", str(path), str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    rebuilt = lv.load(out)
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(rebuilt(x).numpy(), m(lv.tensor(x)).numpy(), rtol=1e-6)


def test_export_from_a_factory(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_model.py").write_text(
        "from lazyvic import nn\n"
        "def build(hidden=4):\n"
        "    return nn.Sequential(nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, 2))\n"
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m.onnx"
    assert (
        main(
            [
                "onnx",
                "export",
                "my_model:build",
                str(out),
                "--input-shape",
                "2,3",
                "--kwargs",
                '{"hidden": 5}',
                "--dynamic-batch",
            ]
        )
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert [tuple(i.dims) for i in model.graph.initializer][0] == (5, 3)
    assert main(["onnx", "export", "my_model:nothing", str(out), "--input-shape", "2,3"]) == 1
    assert "has no attribute 'nothing'" in capsys.readouterr().err
    assert main(["onnx", "export", "my_model:build", str(out), "--input-shape", "2,x"]) == 1
    assert "expected comma-separated sizes" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", [[], ["check"], ["run"], ["convert"], ["export"]])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main(["onnx", *cmd, "--help"])
    assert e.value.code == 0
    assert "usage: lazyvic onnx" in capsys.readouterr().out


def test_console_module_entry_point(mlp_file):
    r = subprocess.run(
        [sys.executable, "-m", "lazyvic.cli", "onnx", "check", str(mlp_file[0])], capture_output=True, text=True
    )
    assert r.returncode == 0 and "Gemm" in r.stdout
    r = subprocess.run([sys.executable, "-m", "lazyvic.cli", "onnx", "check"], capture_output=True, text=True)
    assert r.returncode == 2 and "the following arguments are required: model" in r.stderr


@pytest.mark.parametrize("kind", ["module", "state", "safetensors", "pt"])
def test_export_loads_weights(kind, tmp_path, monkeypatch, capsys):
    (tmp_path / "wmodel.py").write_text(
        "from lazyvic import nn\ndef build():\n    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))\n"
    )
    monkeypatch.chdir(tmp_path)
    lv.manual_seed(123)
    trained = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    weights = tmp_path / f"w.{'pt' if kind == 'pt' else 'safetensors'}"
    if kind == "module":
        lv.save(trained, weights)
    elif kind == "state":
        lv.save(trained.state_dict(), weights)
    elif kind == "safetensors":
        lv.interop.torch.save_safetensors(trained.state_dict(), weights)
    else:
        lv.interop.torch.save(trained.state_dict(), weights)
    out = tmp_path / "w.onnx"
    assert main(["onnx", "export", "wmodel:build", str(out), "--input-shape", "2,3", "--weights", str(weights)]) == 0
    model = onnx.load(str(out))
    for init in model.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init), trained.state_dict()[init.name].numpy())
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 20)
    assert main(["onnx", "export", "wmodel:build", str(out), "--input-shape", "2,3", "--weights", str(bad)]) == 1
    assert "--weights" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [[], ["--no-compile"]])
def test_run_replayed_and_recorded_give_the_same_outputs(mlp_file, tmp_path, flag, capsys):
    path, m = mlp_file
    out_file = tmp_path / "y.npz"
    assert (
        main(
            [
                "onnx",
                "run",
                str(path),
                "--random-inputs",
                "--seed",
                "3",
                "--repeat",
                "4",
                "--output",
                str(out_file),
                *flag,
            ]
        )
        == 0
    )
    assert "(interpreted), second" in capsys.readouterr().out
    x = np.random.default_rng(3).standard_normal((1, 8)).astype(np.float32)  # dynamic batch made 1
    np.testing.assert_allclose(np.load(out_file)["output"], m(lv.tensor(x)).numpy(), rtol=1e-6, atol=1e-6)
