"""lazyvic format v1: round trips, byte-identical files, every CheckpointError, atomic writes."""

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import lazyvic as lv
from lazyvic.errors import CheckpointError, DTypeError
from lazyvic.interop import FORMAT_VERSION, format_v1, load, save

ROOT = Path(__file__).resolve().parents[2]


def mlp():
    return lv.nn.Sequential(lv.nn.Linear(4, 8), lv.nn.ReLU(), lv.nn.Linear(8, 3))


class TinyNet(lv.nn.Module):
    """A module with a config dict and buffers of every non-float dtype, incl. a 0-d one."""

    def __init__(self, d_in: int, d_out: int, flag: bool = True):
        super().__init__()
        self.config = {"d_in": d_in, "d_out": d_out, "flag": flag}
        self.proj = lv.nn.Linear(d_in, d_out)
        self.register_buffer("count", lv.tensor(np.array(7, dtype=np.int64)))
        self.register_buffer("mask", lv.tensor(np.arange(d_out) % 2 == 0))
        self.register_buffer("ids", lv.tensor(np.arange(d_out, dtype=np.int32)))

    def forward(self, x):
        return self.proj(x)


def numpy_state(module) -> dict:
    return {k: v.numpy().copy() for k, v in module.state_dict().items()}


def metadata_of(path) -> dict:
    with safetensors.safe_open(str(path), framework="numpy") as f:
        return f.metadata()


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_raw(path, header: dict, data: bytes = b"") -> None:
    """A safetensors file written by hand, for headers safetensors itself would not write."""
    text = json.dumps(header).encode()
    Path(path).write_bytes(len(text).to_bytes(8, "little") + text + data)


def lazyvic_metadata(**overrides) -> dict:
    meta = {"format": "lazyvic", "format_version": "1", "kind": "state", "dtypes": "{}", "structure": "null"}
    meta.update(overrides)
    return meta


def assert_same(a, b, where="obj"):
    """Equal values of equal types all the way down (int vs str keys, tuple vs list, dtypes, nan)."""
    if isinstance(a, (lv.Tensor, np.ndarray)):
        assert isinstance(b, lv.Tensor), where
        a_dtype = a.dtype.name if isinstance(a, lv.Tensor) else lv.dtypes.get_dtype(a.dtype).name
        assert b.dtype.name == a_dtype, where
        assert b.shape == tuple(a.shape), where
        assert np.array_equal(np.asarray(a), b.numpy(), equal_nan=b.dtype.is_floating_point), where
        return
    assert type(a) is type(b) or (isinstance(a, dict) and type(b) is dict), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b) and [type(k) for k in a] == [type(k) for k in b], where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


def optimizer_like_state() -> dict:
    rng = np.random.default_rng(0)
    return {
        "state": {
            0: {
                "step": 3,
                "exp_avg": lv.tensor(rng.standard_normal((8, 4)).astype(np.float32)),
                "exp_avg_sq": lv.tensor(rng.random((8, 4)).astype(np.float32)),
            },
            1: {"step": 3, "exp_avg": lv.tensor(rng.standard_normal(8)), "max": lv.tensor(np.array(2.5))},
        },
        "param_groups": [
            {
                "lr": 0.001,
                "betas": (0.9, 0.999),
                "eps": 1e-08,
                "weight_decay": 0.01,
                "amsgrad": False,
                "foreach": None,
                "params": [0, 1],
            }
        ],
        "all_dtypes": [
            lv.tensor(np.array([True, False])),
            lv.tensor(np.array(True)),
            lv.tensor(np.arange(5, dtype=np.int32)),
            lv.tensor(np.array(-3, dtype=np.int64)),
            lv.tensor(np.zeros((2, 0, 3), np.float32)),
            np.arange(6, dtype=np.float64).reshape(2, 3).T,
        ],
        "scalars": (1, -(2**62), 0.1, float("inf"), float("-inf"), float("nan"), "x", "", True, None),
        "nested": {"empty_dict": {}, "empty_list": [], "empty_tuple": (), "one": (1,), "tuple_in_list": [(1, [2])]},
        "mixed_keys": {1: "int one", "1": "str one", -5: [], "__tensor__": "looks like a tag"},
        "tag_like": {"__dict__": [["a", 1]], "__tuple__": {"__float__": "nan"}},
        "unicode": {"größe": "ünïcode ✓"},
    }


# ------------------------------------------------------------------- round trips


def test_module_round_trip_gives_identical_outputs(tmp_path, mode):
    # `mode` pins the execution path: in the default "hot" mode the first calls are interpreted
    # and later ones compiled, which may differ in the last bit for some graphs.
    lv.manual_seed(0)
    model = mlp()
    x = lv.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))
    before = model(x).numpy().copy()
    save(model, tmp_path / "mlp.safetensors")

    lv.manual_seed(123)
    fresh = mlp()
    assert not np.array_equal(fresh(x).numpy(), before)
    assert load(tmp_path / "mlp.safetensors", model=fresh) is fresh
    assert np.array_equal(fresh(x).numpy(), before)
    for k, v in numpy_state(model).items():
        assert np.array_equal(fresh.state_dict()[k].numpy(), v)


def test_module_metadata_layout(tmp_path):
    save(TinyNet(3, 4), tmp_path / "t.safetensors")
    meta = metadata_of(tmp_path / "t.safetensors")
    assert set(meta) == {"format", "format_version", "kind", "dtypes", "class", "config"}
    assert meta["format"] == "lazyvic" and meta["format_version"] == str(FORMAT_VERSION) == "1"
    assert meta["kind"] == "module"
    assert meta["class"] == f"{TinyNet.__module__}.TinyNet"
    assert meta["config"] == '{"d_in":3,"d_out":4,"flag":true}'
    assert json.loads(meta["dtypes"]) == {
        "proj.weight": "float32",
        "proj.bias": "float32",
        "count": "int64",
        "mask": "bool",
        "ids": "int32",
    }
    # a plain safetensors reader sees the tensors under their state_dict names
    arrays = safetensors.numpy.load_file(str(tmp_path / "t.safetensors"))
    assert arrays["count"].shape == () and arrays["mask"].dtype == np.bool_


def test_custom_module_with_config_and_int_bool_buffers(tmp_path):
    src = TinyNet(3, 4)
    src.count = lv.tensor(np.array(42, dtype=np.int64))
    src.mask = lv.tensor(np.array([False, True, True, False]))
    save(src, tmp_path / "t.safetensors")
    dst = load(tmp_path / "t.safetensors", model=TinyNet(3, 4))
    for k, v in numpy_state(src).items():
        got = dst.state_dict()[k]
        assert got.dtype.np == v.dtype and got.shape == v.shape and np.array_equal(got.numpy(), v), k
    assert dst.count.shape == () and int(dst.count.numpy()) == 42


def test_rebuild_without_model_from_a_lazyvic_class_with_config(tmp_path, monkeypatch, mode):
    import lazyvic.nn.layers as layers

    class ConfiguredMLP(lv.nn.Module):
        def __init__(self, d_in, hidden, d_out):
            super().__init__()
            self.config = {"d_in": d_in, "hidden": hidden, "d_out": d_out}
            self.net = lv.nn.Sequential(lv.nn.Linear(d_in, hidden), lv.nn.ReLU(), lv.nn.Linear(hidden, d_out))

        def forward(self, x):
            return self.net(x)

    # Pretend the class lives in lazyvic (as lazyvic.models.TinyGPT will).
    ConfiguredMLP.__module__, ConfiguredMLP.__qualname__ = layers.__name__, "ConfiguredMLP"
    monkeypatch.setattr(layers, "ConfiguredMLP", ConfiguredMLP, raising=False)
    src = ConfiguredMLP(4, 6, 2)
    x = lv.tensor(np.ones((2, 4), np.float32))
    save(src, tmp_path / "c.safetensors")
    got = load(tmp_path / "c.safetensors")
    assert type(got) is ConfiguredMLP and got.config == src.config
    assert np.array_equal(got(x).numpy(), src(x).numpy())


def test_state_round_trip_keeps_structure_key_types_and_dtypes(tmp_path):
    state = optimizer_like_state()
    save(state, tmp_path / "s.safetensors")
    got = load(tmp_path / "s.safetensors")
    assert_same(state, got)
    assert got["state"][1]["max"].shape == () and got["all_dtypes"][1].shape == ()
    assert got["param_groups"][0]["betas"] == (0.9, 0.999)
    names = json.loads(metadata_of(tmp_path / "s.safetensors")["dtypes"])
    assert names["state.0.exp_avg"] == "float32" and names["all_dtypes.0"] == "bool"


def test_bare_tensors_and_0d_round_trip(tmp_path):
    for i, value in enumerate(
        [
            lv.tensor(np.array(1.5, np.float32)),
            lv.tensor(np.array(False)),
            lv.tensor(np.array([[1, 2]], np.int32)),
            np.array(9, np.int64),
        ]
    ):
        save(value, tmp_path / f"{i}.safetensors")
        assert_same(value, load(tmp_path / f"{i}.safetensors"))


def test_numpy_scalars_become_python_scalars(tmp_path):
    save({"a": np.float32(0.5), "b": np.int64(3), "c": np.bool_(True)}, tmp_path / "s.safetensors")
    assert_same({"a": 0.5, "b": 3, "c": True}, load(tmp_path / "s.safetensors"))


def test_one_tensor_object_is_stored_once_and_shared(tmp_path):
    t = lv.tensor(np.arange(3.0))
    save({"a": t, "b": [t]}, tmp_path / "s.safetensors")
    got = load(tmp_path / "s.safetensors")
    assert got["a"] is got["b"][0]
    assert list(json.loads(metadata_of(tmp_path / "s.safetensors")["dtypes"])) == ["a"]


def test_colliding_dotted_paths_get_distinct_names(tmp_path):
    obj = {"a.b": lv.tensor(np.zeros(2)), "a": {"b": lv.tensor(np.ones(2))}}
    save(obj, tmp_path / "s.safetensors")
    assert_same(obj, load(tmp_path / "s.safetensors"))


def test_real_optimizer_state_round_trip(tmp_path):
    model = mlp()
    opt = lv.optim.AdamW(model.parameters())
    if not hasattr(opt, "state_dict"):
        pytest.skip("Optimizer.state_dict is not available yet")
    x = lv.tensor(np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32))
    for _ in range(2):
        opt.zero_grad()
        y = model(x)
        (y * y).mean().backward()
        opt.step()
    state = opt.state_dict()
    save(state, tmp_path / "opt.safetensors")
    assert_same(state, load(tmp_path / "opt.safetensors"))


# ------------------------------------------------------------------- determinism

# Builds the same seeded content in this process and in a fresh interpreter.
_SCRIPT = """
import numpy as np
import lazyvic as lv
from lazyvic.interop import save

def build():
    lv.manual_seed(0)
    model = lv.nn.Sequential(lv.nn.Linear(4, 8), lv.nn.ReLU(), lv.nn.Linear(8, 3))
    rng = np.random.default_rng(0)
    state = {"state": {i: {"step": i, "exp_avg": lv.tensor(rng.standard_normal((3, 2)).astype(np.float32)),
                           "z": rng.integers(0, 9, 4)} for i in range(3)},
             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1, 2]}],
             "meta": {k: v for k, v in zip("qwertyuiop", range(10))}}
    return model, state

def write(folder):
    model, state = build()
    save(model, folder + "/model.safetensors")
    save(state, folder + "/state.safetensors")
"""


def test_saves_are_byte_identical_across_saves_and_processes(tmp_path):
    ns = {}
    exec(_SCRIPT, ns)
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        ns["write"](str(tmp_path / run))
    (tmp_path / "sub").mkdir()
    subprocess.run(
        [sys.executable, "-c", _SCRIPT + f"\nwrite({str(tmp_path / 'sub')!r})\n"],
        check=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONHASHSEED="random"),
        timeout=300,
    )
    for name in ("model.safetensors", "state.safetensors"):
        hashes = {sha256(tmp_path / run / name) for run in ("a", "b", "sub")}
        assert len(hashes) == 1, name


def test_header_metadata_is_sorted_and_data_aligned(tmp_path):
    save(optimizer_like_state(), tmp_path / "s.safetensors")
    blob = (tmp_path / "s.safetensors").read_bytes()
    size = int.from_bytes(blob[:8], "little")
    assert size % 8 == 0
    header = json.loads(blob[8 : 8 + size])
    assert list(header)[0] == "__metadata__"
    assert list(header["__metadata__"]) == sorted(header["__metadata__"])


# ------------------------------------------------------------------- load errors


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="nope.safetensors"):
        load(tmp_path / "nope.safetensors")


@pytest.mark.parametrize("keep", ["0", "5", "8", "30", "header", "header+3", "-1"])
def test_truncated_file(tmp_path, keep):
    path = tmp_path / "m.safetensors"
    save(mlp(), path)
    blob = path.read_bytes()
    size = int.from_bytes(blob[:8], "little")
    n = {"header": 8 + size, "header+3": 8 + size + 3, "-1": len(blob) - 1}.get(keep) or int(keep)
    path.write_bytes(blob[:n])
    with pytest.raises(CheckpointError, match="m.safetensors is corrupt or truncated"):
        load(path, model=mlp())


def test_header_size_beyond_the_file(tmp_path):
    path = tmp_path / "m.safetensors"
    save(mlp(), path)
    blob = bytearray(path.read_bytes())
    blob[:8] = (len(blob) * 2).to_bytes(8, "little")
    path.write_bytes(blob)
    with pytest.raises(CheckpointError, match="corrupt or truncated.*header size"):
        load(path)


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00\x01", b"}}}}", b"[1, 2"])
def test_corrupt_header_bytes(tmp_path, garbage):
    path = tmp_path / "m.safetensors"
    save(mlp(), path)
    blob = bytearray(path.read_bytes())
    blob[8 : 8 + len(garbage)] = garbage
    path.write_bytes(blob)
    with pytest.raises(CheckpointError, match="m.safetensors is corrupt or truncated.*not JSON"):
        load(path)


def test_safetensors_decode_error_is_corrupt(tmp_path):
    # Offsets inside the file, but the data length does not fit the shape.
    path = tmp_path / "bad.safetensors"
    meta = lazyvic_metadata(dtypes='{"a":"float32"}', structure='{"__tensor__":"a"}')
    write_raw(path, {"__metadata__": meta, "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(12))
    with pytest.raises(CheckpointError, match="bad.safetensors is corrupt or truncated.*safetensors cannot decode"):
        load(path)


def test_foreign_safetensors_file_is_not_lazyvic(tmp_path):
    path = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"w": np.zeros(3, np.float32)}, str(path))
    with pytest.raises(CheckpointError, match="plain.safetensors is not a lazyvic format file.*safetensors"):
        load(path)
    safetensors.numpy.save_file({"w": np.zeros(3, np.float32)}, str(path), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="not a lazyvic format file.*safetensors.numpy.load_file"):
        load(path)


def test_newer_format_version(tmp_path):
    path = tmp_path / "future.safetensors"
    safetensors.numpy.save_file(
        {"w": np.zeros(3, np.float32)},
        str(path),
        metadata=lazyvic_metadata(format_version="2", dtypes='{"w":"float32"}'),
    )
    with pytest.raises(
        CheckpointError,
        match=r"future.safetensors was written by a newer lazyvic "
        r"\(format version 2\).*reads format version 1",
    ):
        load(path)


def test_bad_metadata_fields_are_corrupt(tmp_path):
    path = tmp_path / "odd.safetensors"
    for meta in [
        lazyvic_metadata(format_version="one"),
        lazyvic_metadata(kind="optimizer"),
        lazyvic_metadata(structure="{"),
        lazyvic_metadata(structure='{"__tensor__":"missing"}'),
        lazyvic_metadata(dtypes='{"w":"float32"}'),
    ]:
        safetensors.numpy.save_file({}, str(path), metadata=meta)
        with pytest.raises(CheckpointError, match="odd.safetensors is corrupt or truncated"):
            load(path)


def test_state_file_with_model_is_an_error(tmp_path):
    save({"w": lv.tensor(np.zeros(3))}, tmp_path / "s.safetensors")
    with pytest.raises(CheckpointError, match="not a module"):
        load(tmp_path / "s.safetensors", model=mlp())


# -------------------------------------------------------------- model mismatches


def test_mismatched_model_raises_and_changes_nothing(tmp_path):
    save(mlp(), tmp_path / "m.safetensors")
    target = lv.nn.Sequential(lv.nn.Linear(4, 9), lv.nn.ReLU(), lv.nn.Linear(9, 3))
    before = numpy_state(target)
    with pytest.raises(CheckpointError, match="size mismatch for 0.weight"):
        load(tmp_path / "m.safetensors", model=target)
    for k, v in before.items():
        assert np.array_equal(target.state_dict()[k].numpy(), v), k


def test_wrong_model_class_names_both(tmp_path):
    save(mlp(), tmp_path / "m.safetensors")
    target = lv.nn.Linear(4, 8)
    before = numpy_state(target)
    with pytest.raises(CheckpointError, match="lazyvic.nn.layers.Sequential.*lazyvic.nn.layers.Linear"):
        load(tmp_path / "m.safetensors", model=target)
    assert all(np.array_equal(target.state_dict()[k].numpy(), v) for k, v in before.items())


def test_rebuild_without_config_asks_for_model(tmp_path):
    save(lv.nn.Linear(4, 8), tmp_path / "lin.safetensors")
    with pytest.raises(CheckpointError, match=r"without a config.*model=Linear\(...\)"):
        load(tmp_path / "lin.safetensors")


def test_rebuild_outside_lazyvic_asks_for_model(tmp_path):
    save(TinyNet(2, 2), tmp_path / "t.safetensors")
    with pytest.raises(CheckpointError, match=r"not a class of the lazyvic package.*model=TinyNet\(...\)"):
        load(tmp_path / "t.safetensors")


@pytest.mark.parametrize(
    "cls",
    ["lazyvic_evil.Net", "os.system", "lazyvic.tensor.Tensor", "lazyvic.nn.NoSuchLayer", "lazyvic.no_such_module.Net"],
)
def test_rebuild_never_imports_or_builds_foreign_classes(tmp_path, cls):
    path = tmp_path / "forged.safetensors"
    safetensors.numpy.save_file({}, str(path), metadata=lazyvic_metadata(kind="module", **{"class": cls}, config="{}"))
    with pytest.raises(CheckpointError, match="model="):
        load(path)
    assert "lazyvic_evil" not in sys.modules


# ------------------------------------------------------------ save errors, atomic


@pytest.mark.parametrize(
    "obj, match",
    [
        ({"state": {0: {"bad": object()}}}, r"object at obj\['state'\]\[0\]\['bad'\]"),
        ({"s": {1, 2}}, r"type builtins.set at obj\['s'\]"),
        ([lv.nn.ReLU()], r"at obj\[0\] \(save a module on its own"),
        ({(1, 2): 3}, r"dict key \(1, 2\) of type tuple at obj"),
        ({True: 3}, "dict key True of type bool"),
    ],
)
def test_unsupported_objects_raise_type_error(tmp_path, obj, match):
    with pytest.raises(TypeError, match=match):
        save(obj, tmp_path / "x.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_unsupported_array_dtype(tmp_path):
    with pytest.raises(DTypeError, match=r"obj\['h'\]"):
        save({"h": np.zeros(2, np.complex64)}, tmp_path / "x.safetensors")


def test_self_containing_list(tmp_path):
    loop = [1]
    loop.append(loop)
    with pytest.raises(TypeError, match="contains itself"):
        save({"loop": loop}, tmp_path / "x.safetensors")


def test_unserializable_config(tmp_path):
    net = TinyNet(2, 2)
    net.config["fn"] = print
    with pytest.raises(TypeError, match="TinyNet.config is not JSON-serializable"):
        save(net, tmp_path / "x.safetensors")


def test_failed_save_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save(mlp(), path)
    old = path.read_bytes()
    with pytest.raises(TypeError, match="object"):
        save({"w": lv.tensor(np.ones(3)), "bad": [1, object()]}, path)
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_failure_after_the_temp_file_is_written_cleans_up(tmp_path, monkeypatch, step):
    path = tmp_path / "ckpt.safetensors"
    save(mlp(), path)
    old = path.read_bytes()
    seen = []

    def boom(*args):
        seen.extend(p.name for p in tmp_path.iterdir())
        raise OSError(f"simulated {step} failure")

    monkeypatch.setattr(format_v1.os, step, boom)
    with pytest.raises(OSError, match="simulated"):
        save(mlp(), path)
    monkeypatch.undo()
    assert any(name.endswith(".tmp") for name in seen)  # the temp file did exist
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]


def test_save_replaces_an_existing_file_with_ordinary_permissions(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    path.write_bytes(b"old")
    save(mlp(), path)
    assert isinstance(load(path, model=mlp()), lv.nn.Sequential)
    (tmp_path / "plain").write_bytes(b"")
    assert path.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777
