"""PyTorch checkpoints without PyTorch: fixtures written by torch, hostile pickles, bad input, the writer.

The fixtures in tests/fixtures/torch_ckpt/ come from tests/fixtures/make_torch_checkpoints.py;
the live tests at the end need torch and are skipped without it.
"""

import functools
import io
import json
import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.errors import CheckpointError, DTypeError
from lazyvic.interop import torch as torch_io

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "torch_ckpt"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
NAMES = ("views", "dtypes", "training", "numpy")


def _comparable(array: np.ndarray) -> np.ndarray:
    """expected.npz holds bfloat16 tensors as float32 (exact): compare them in float32."""
    return array.astype(np.float32) if array.dtype.name == "bfloat16" else array


@functools.cache
def _expected_npz() -> dict:
    with np.load(FIXTURES / "expected.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def expected_arrays():
    with np.load(FIXTURES / "expected.npz") as f:
        return {k: f[k] for k in f.files}


def fixture_path(name: str, legacy: bool) -> Path:
    return FIXTURES / f"{name}{'_legacy' if legacy else ''}.pt"


def walk(node, value, visit):
    """Check ``value`` against a structure node of expected.json; call visit(path, value, node) per tensor."""
    if "tensor" in node:
        visit(node["tensor"], value, node)
    elif "numpy" in node:  # a NumPy array or number comes back as itself, as torch.load gives it
        want = _expected_npz()[node["numpy"]]
        assert isinstance(value, np.generic if node["scalar"] else np.ndarray), type(value)
        assert value.dtype == want.dtype and np.shape(value) == want.shape
        np.testing.assert_array_equal(value, want)
    elif "value" in node:
        expected = tuple(node["value"]) if isinstance(value, tuple) else node["value"]
        assert value == expected and type(value) is type(expected)
    else:
        assert type(value).__name__ == node["type"]
        pairs = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        assert [k for k, _ in pairs] == [k for k, _ in node["items"]]  # int keys stay int
        for (_, v), (_, child) in zip(pairs, node["items"]):
            walk(child, v, visit)


# ------------------------------------------------------------------ reading the fixtures


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("name", NAMES)
def test_fixture_as_numpy(name, legacy, expected_arrays):
    info = EXPECTED[name]
    loaded = torch_io.load(fixture_path(name, legacy), as_numpy=True)
    seen = {}

    def visit(path, array, node):
        meta = info["tensors"][path]
        want = expected_arrays[path]
        assert isinstance(array, np.ndarray)
        assert array.dtype.name == meta["dtype"]  # exact dtypes, bfloat16 as ml_dtypes.bfloat16
        assert array.shape == tuple(meta["shape"])
        np.testing.assert_array_equal(_comparable(array), want)
        if array.size > 0:
            assert [s // array.itemsize for s in array.strides] == meta["stride"]
        seen[path] = (array, meta)

    walk(info["structure"], loaded, visit)
    assert set(seen) == set(info["tensors"])

    # Views of one storage share memory, at the recorded storage offsets; others do not.
    for p, (a, ma) in seen.items():
        for q, (b, mb) in seen.items():
            if p >= q or a.size == 0 or b.size == 0:
                continue
            same = ma["storage"] == mb["storage"]
            assert np.shares_memory(a, b) == same, (p, q)
            if same:
                delta = b.__array_interface__["data"][0] - a.__array_interface__["data"][0]
                assert delta == (mb["storage_offset"] - ma["storage_offset"]) * a.itemsize, (p, q)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("name", NAMES)
def test_fixture_as_tensors(name, legacy, expected_arrays):
    info = EXPECTED[name]
    loaded = torch_io.load(fixture_path(name, legacy), map_location={"cuda:0": "cpu"})  # the fixtures are CPU
    count = 0

    def visit(path, tensor, node):
        nonlocal count
        count += 1
        meta = info["tensors"][path]
        assert isinstance(tensor, lv.Tensor)
        assert isinstance(tensor, lv.nn.Parameter) == node["parameter"]
        assert tensor.dtype.name == meta["dtype"]  # no widening
        assert tensor.shape == tuple(meta["shape"])
        np.testing.assert_array_equal(_comparable(tensor.numpy()), expected_arrays[path])
        assert tensor.numpy().flags.c_contiguous

    walk(info["structure"], loaded, visit)
    assert count == len(info["tensors"])


def test_training_checkpoint_structure():
    ckpt = torch_io.load(fixture_path("training", legacy=False))
    assert isinstance(ckpt["model"], OrderedDict) and list(ckpt["model"]) == ["weight", "bias"]
    state, groups = ckpt["optimizer"]["state"], ckpt["optimizer"]["param_groups"]
    assert sorted(state) == [0, 1] and set(state[0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert state[0]["step"].shape == () and state[0]["step"].item() == 2.0
    assert groups[0]["params"] == [0, 1] and groups[0]["betas"] == (0.9, 0.999) and groups[0]["lr"] == 1e-2
    assert ckpt["epoch"] == 3 and ckpt["names"] == ["w", "b"] and ckpt["pair"] == (1, "x")
    assert ckpt["param"].requires_grad and not ckpt["frozen"].requires_grad
    # The loaded state_dict fits a lazyvic Linear of the same shape.
    layer = lv.nn.Linear(3, 2)
    layer.load_state_dict(ckpt["model"])
    np.testing.assert_array_equal(layer.weight.numpy(), ckpt["model"]["weight"].numpy())


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_lazyvic_load_reads_torch_checkpoints(legacy, expected_arrays, tmp_path):
    """``torch.load`` under ``import lazyvic as torch``: lazyvic.load tells a torch.save file by
    its first bytes and reads it (from a path, a file object or a BytesIO) as interop.torch.load
    does; with ``model=`` the state_dict is loaded into it."""
    path = fixture_path("numpy", legacy)
    info = EXPECTED["numpy"]
    with open(path, "rb") as f:
        data = f.read()
    for source in (path, str(path), open(path, "rb"), io.BytesIO(data)):
        loaded = lv.load(source, weights_only=False)
        walk(info["structure"], loaded, lambda p, t, node: np.testing.assert_array_equal(t.numpy(), expected_arrays[p]))
    # pytorch/examples' time_sequence_prediction: torch.save(array) then torch.from_numpy(torch.load(...))
    wave = lv.from_numpy(lv.load(path, weights_only=False)["wave"])
    np.testing.assert_array_equal(wave.numpy(), expected_arrays["numpy/wave"])
    # A state_dict written by torch.save (our writer writes torch's format) into model=.
    state = lv.load(fixture_path("training", legacy), map_location="cpu")["model"]
    torch_io.save(state, tmp_path / "linear.pt")
    layer = lv.nn.Linear(3, 2)
    assert lv.load(tmp_path / "linear.pt", model=layer) is layer
    np.testing.assert_array_equal(layer.weight.numpy(), state["weight"].numpy())
    torch_io.save([state["weight"]], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="list.pt: a PyTorch checkpoint holding a list, not a state_dict"):
        lv.load(tmp_path / "list.pt", model=layer)


def test_torch_writes_what_the_docstring_says():
    """torch 2.x: v2 with typed storages, v3 with UntypedStorage for uint16; 64-byte aligned stored records."""
    with zipfile.ZipFile(fixture_path("dtypes", legacy=False)) as z:
        names = z.namelist()
        pkl = z.read("dtypes/data.pkl")
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    assert {"dtypes/data.pkl", "dtypes/byteorder", "dtypes/version"} <= set(names)
    for text in (b"ctorch._utils\n_rebuild_tensor_v2", b"ctorch\nFloatStorage", b"ctorch\nBFloat16Storage"):
        assert text in pkl
    assert b"ctorch._utils\n_rebuild_tensor_v3" in pkl and b"ctorch.storage\nUntypedStorage" in pkl


# ------------------------------------------------------------------------ hostile pickles


def global_call(module: str, name: str, arg: str) -> bytes:
    """A protocol-2 pickle calling module.name(arg): what a malicious checkpoint would hold."""
    text = arg.encode()
    return (
        b"\x80\x02c" + f"{module}\n{name}\n".encode()
        + b"X" + len(text).to_bytes(4, "little") + text + b"\x85R."
    )  # fmt: skip


def write_zip(path, records: dict, compression=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for name, data in records.items():
            z.writestr(name, data)
    return Path(path)


def zip_records(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def legacy_file(path, object_pickle: bytes, magic=torch_io.LEGACY_MAGIC_NUMBER, tail: bytes = b"") -> Path:
    header = pickle.dumps(magic, protocol=2) + pickle.dumps(1001, protocol=2)
    header += pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
    Path(path).write_bytes(header + object_pickle + tail)
    return Path(path)


class Evil:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


HOSTILE = [("os", "system"), ("builtins", "eval"), ("__builtin__", "exec"), ("posix", "system"), ("subprocess", "call")]


@pytest.mark.parametrize("module,name", HOSTILE)
@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_hostile_global_is_refused_without_side_effect(tmp_path, module, name, layout):
    marker = tmp_path / "pwned"
    payload = f"open({str(marker)!r}, 'w')" if name in ("eval", "exec") else f"touch {marker}"
    evil = global_call(module, name, payload)
    if layout == "zip":
        path = write_zip(tmp_path / "evil.pt", {"evil/data.pkl": evil, "evil/version": b"3\n"})
    else:
        path = legacy_file(tmp_path / "evil.pt", evil, tail=pickle.dumps([], protocol=2))
    with pytest.raises(CheckpointError, match=f"evil.pt.*refused to load global {module}.{name}"):
        torch_io.load(path)
    assert not marker.exists()


@pytest.mark.parametrize("layout", ["zip", "legacy", "legacy-header"])
def test_reduce_calling_os_system_is_refused(tmp_path, layout):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"weight": Evil(f"touch {marker}")}, protocol=2)
    if layout == "zip":
        path = write_zip(tmp_path / "evil.pt", {"evil/data.pkl": evil})
    elif layout == "legacy":
        path = legacy_file(tmp_path / "evil.pt", evil)
    else:  # the payload where the magic number should be
        path = tmp_path / "evil.pt"
        path.write_bytes(evil)
    with pytest.raises(CheckpointError, match=r"refused to load global (os|posix|nt)\.system"):
        torch_io.load(path)
    assert not marker.exists()


def test_persistent_id_must_be_a_storage_tuple(tmp_path):
    class Pid(pickle.Pickler):
        def persistent_id(self, obj):
            return "not a storage" if obj == "x" else None

    buf = io.BytesIO()
    Pid(buf, protocol=2).dump({"a": "x"})
    path = write_zip(tmp_path / "pid.pt", {"pid/data.pkl": buf.getvalue()})
    with pytest.raises(CheckpointError, match="pid.pt.*refused persistent id 'not a storage'"):
        torch_io.load(path)


def test_admitted_globals_are_only_torch_rebuild_storage_dtype_and_containers():
    for qualname in torch_io.ADMITTED_GLOBALS:
        module = qualname.rpartition(".")[0]
        admitted = ("torch", "torch._utils", "torch.storage", "collections", "builtins", "_codecs", "numpy")
        assert module in (*admitted, "numpy.core.multiarray", "numpy._core.multiarray"), qualname
    assert "builtins.eval" not in torch_io.ADMITTED_GLOBALS and "builtins.getattr" not in torch_io.ADMITTED_GLOBALS


# ------------------------------------------------------------------------------ bad input


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(CheckpointError, match="nope.pt: no such file"):
        torch_io.load(tmp_path / "nope.pt")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty.pt is not a PyTorch checkpoint"):
        torch_io.load(tmp_path / "empty.pt")


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_file(tmp_path, legacy, keep):
    blob = fixture_path("training", legacy).read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(blob[: int(len(blob) * keep)])
    with pytest.raises(CheckpointError, match="cut.pt.*(corrupt|truncated|magic)"):
        torch_io.load(path)


def test_corrupt_zip(tmp_path):
    blob = bytearray(fixture_path("views", legacy=False).read_bytes())
    at = blob.find(b"\x80\x02")  # inside views/data.pkl: its CRC no longer matches
    blob[at + 10 : at + 20] = b"\xff" * 10
    (tmp_path / "crc.pt").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="crc.pt is a corrupt or truncated zip archive"):
        torch_io.load(tmp_path / "crc.pt")
    blob = bytearray(fixture_path("views", legacy=False).read_bytes())
    at = blob.find(b"PK\x01\x02")  # the first central directory entry
    blob[at : at + 4] = b"XXXX"
    (tmp_path / "dir.pt").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="dir.pt is a corrupt or truncated zip archive"):
        torch_io.load(tmp_path / "dir.pt")


def test_zip_without_data_pkl(tmp_path):
    path = write_zip(tmp_path / "other.pt", {"readme.txt": b"hi"})
    with pytest.raises(CheckpointError, match="other.pt is a zip archive but not a PyTorch checkpoint"):
        torch_io.load(path)


def test_compressed_record(tmp_path):
    records = zip_records(fixture_path("views", legacy=False))
    path = write_zip(tmp_path / "deflated.pt", records, compression=zipfile.ZIP_DEFLATED)
    with pytest.raises(CheckpointError, match="deflated.pt: record views/data/0 is compressed"):
        torch_io.load(path)


def test_wrong_magic_number(tmp_path):
    path = legacy_file(tmp_path / "magic.pt", pickle.dumps({}, protocol=2), magic=12345)
    with pytest.raises(CheckpointError, match="magic.pt is not a PyTorch checkpoint.*wrong magic number"):
        torch_io.load(path)
    (tmp_path / "noise.pt").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(CheckpointError, match="noise.pt is not a PyTorch checkpoint"):
        torch_io.load(tmp_path / "noise.pt")


def with_pickle_edit(tmp_path, name: str, old: bytes, new: bytes, drop: str | None = None) -> Path:
    """A copy of fixture <name>.pt with data.pkl edited (GLOBAL names are newline-terminated, so lengths may differ)."""
    records = zip_records(fixture_path(name, legacy=False))
    assert old in records[f"{name}/data.pkl"]
    records[f"{name}/data.pkl"] = records[f"{name}/data.pkl"].replace(old, new)
    records.pop(drop, None)
    return write_zip(tmp_path / f"{name}.pt", records)


def test_unknown_storage_type(tmp_path):
    path = with_pickle_edit(tmp_path, "views", b"torch\nFloatStorage\n", b"torch\nFancyStorage\n")
    with pytest.raises(CheckpointError, match="views.pt: unknown storage type torch.FancyStorage"):
        torch_io.load(path)


@pytest.mark.parametrize(
    "old,new,what",
    [
        (b"torch\nFloatStorage\n", b"torch\nComplexFloatStorage\n", "complex64"),
        (b"torch\nCharStorage\n", b"torch\nQInt8Storage\n", "qint8"),
        (b"torch\nuint16\n", b"torch\ncomplex64\n", "complex64"),
    ],
)
def test_dtype_lazyvic_cannot_represent(tmp_path, old, new, what):
    path = with_pickle_edit(tmp_path, "dtypes", old, new)
    with pytest.raises(CheckpointError, match=f"dtypes.pt: .*{what}.*cannot represent"):
        torch_io.load(path)


def test_missing_data_record(tmp_path):
    path = with_pickle_edit(tmp_path, "views", b"", b"", drop="views/data/0")
    with pytest.raises(CheckpointError, match="views.pt: the record views/data/0 of storage '0' is missing"):
        torch_io.load(path)


def test_storage_record_too_short(tmp_path):
    records = zip_records(fixture_path("views", legacy=False))
    records["views/data/0"] = records["views/data/0"][:20]
    path = write_zip(tmp_path / "short.pt", records)
    with pytest.raises(CheckpointError, match="short.pt: record views/data/0 holds 20 bytes, too short"):
        torch_io.load(path)


def hand_written_checkpoint(path, shape, stride, numel, offset=0) -> Path:
    """A zip checkpoint of one float32 tensor with any size/stride/offset over a storage of numel elements."""
    storage = torch_io._StorageRecord("0", "FloatStorage", np.zeros(numel, np.float32))
    record = torch_io._TensorRecord(storage, shape, stride)
    record.__reduce__ = lambda: (torch_io._W_REBUILD_V2, (storage, offset, shape, stride, False, OrderedDict()))
    buf = io.BytesIO()

    class Pickler(torch_io._CheckpointPickler):
        def reducer_override(self, obj):
            return obj.__reduce__() if isinstance(obj, torch_io._TensorRecord) else NotImplemented

    Pickler(buf, protocol=2).dump({"t": record})
    return write_zip(path, {"hand/data.pkl": buf.getvalue(), "hand/data/0": storage.data.tobytes()})


def test_storage_too_small_for_size_stride_offset(tmp_path):
    ok = hand_written_checkpoint(tmp_path / "ok.pt", (2, 3), (1, 2), numel=6)
    np.testing.assert_array_equal(torch_io.load(ok)["t"].numpy(), np.zeros((2, 3), np.float32))
    for shape, stride, offset in [((2, 3), (3, 1), 1), ((7,), (1,), 0), ((2, 2), (5, 1), 0), ((0,), (1,), 7)]:
        path = hand_written_checkpoint(tmp_path / "big.pt", shape, stride, numel=6, offset=offset)
        with pytest.raises(CheckpointError, match=r"big.pt: storage '0' holds 6 elements, too few"):
            torch_io.load(path)
    path = hand_written_checkpoint(tmp_path / "neg.pt", (2,), (-1,), numel=6, offset=3)
    with pytest.raises(CheckpointError, match="neg.pt: a tensor with negative"):
        torch_io.load(path)


def test_legacy_storage_data_truncated(tmp_path):
    blob = fixture_path("views", legacy=True).read_bytes()
    (tmp_path / "cut.pt").write_bytes(blob[:-4])
    with pytest.raises(CheckpointError, match="cut.pt is truncated: storage .* needs 48 bytes"):
        torch_io.load(tmp_path / "cut.pt")


# -------------------------------------------------------------------------------- writer


def sample_state():
    shared = lv.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    return {
        "model": OrderedDict([("w", shared), ("b", lv.tensor(np.array([1.5, -2.0], np.float64))), ("w_again", shared)]),
        "arrays": {
            "f16": np.array([0.5, -1.0], np.float16),
            "i8": np.array([-128, 127], np.int8),
            "i16": np.array([-3, 4], np.int16),
            "u8": np.array([0, 255], np.uint8),
            "i32": lv.tensor(np.array([7], np.int32)),
            "i64": np.arange(3),
            "mask": lv.tensor(np.array([True, False])),
            "transposed": np.arange(6.0).reshape(2, 3).T,  # non-contiguous input
            "big_endian": np.array([1.0, 2.0], dtype=">f4"),
            "scalar": np.array(4.0),
            "empty": np.zeros((0, 2), np.float32),
        },
        "param": lv.nn.Parameter(lv.tensor([1.0, 2.0])),
        "optimizer": {"state": {0: {"step": lv.tensor(np.array(2.0, np.float32))}}, "param_groups": [{"lr": 0.1}]},
        "epoch": np.int64(3),
        "meta": ("name", 1.5, None, True, b"raw", [1, 2]),
    }


def test_writer_round_trip_through_our_reader(tmp_path):
    state = sample_state()
    path = tmp_path / "state.pt"
    torch_io.save(state, path)
    back = torch_io.load(path, as_numpy=True)
    assert isinstance(back["model"], OrderedDict) and list(back["model"]) == ["w", "b", "w_again"]
    assert back["model"]["w"] is back["model"]["w_again"]  # one object saved twice stays one
    for k, v in state["arrays"].items():
        want = v.numpy() if isinstance(v, lv.Tensor) else v
        assert back["arrays"][k].dtype == want.dtype.newbyteorder("="), k
        assert back["arrays"][k].shape == want.shape
        np.testing.assert_array_equal(back["arrays"][k], want)
    assert back["optimizer"]["state"][0]["step"].shape == () and back["optimizer"]["param_groups"] == [{"lr": 0.1}]
    assert back["epoch"] == 3 and type(back["epoch"]) is int
    assert back["meta"] == ("name", 1.5, None, True, b"raw", [1, 2])

    tensors = torch_io.load(path)
    assert isinstance(tensors["param"], lv.nn.Parameter) and tensors["param"].requires_grad
    assert tensors["arrays"]["f16"].dtype == lv.float16 and tensors["arrays"]["u8"].dtype == lv.uint8


def test_writer_layout(tmp_path):
    path = tmp_path / "my-model.pt"
    torch_io.save({"w": np.ones(3, np.float32), "b": np.zeros(5, np.float64)}, path)
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        assert [i.filename for i in infos] == [
            "my-model/data.pkl", "my-model/byteorder", "my-model/data/0", "my-model/data/1", "my-model/version"
        ]  # fmt: skip
        assert z.read("my-model/byteorder") == b"little" and z.read("my-model/version") == b"3\n"
        assert all(i.compress_type == zipfile.ZIP_STORED for i in infos)
        pkl = z.read("my-model/data.pkl")
    assert pkl[:2] == b"\x80\x02" and b"ctorch._utils\n_rebuild_tensor_v2\n" in pkl and b"ctorch\nFloatStorage\n" in pkl
    blob = path.read_bytes()
    for i in infos:  # data records start on a 64-byte boundary, like torch's
        name_len, extra_len = (
            int.from_bytes(blob[i.header_offset + 26 : i.header_offset + 28], "little"),
            int.from_bytes(blob[i.header_offset + 28 : i.header_offset + 30], "little"),
        )
        assert (i.header_offset + 30 + name_len + extra_len) % 64 == 0
    torch_io.save({}, tmp_path / "weird name!.pt")
    with zipfile.ZipFile(tmp_path / "weird name!.pt") as z:
        assert z.namelist()[0] == "archive/data.pkl"


def test_writer_refuses_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "keep.pt"
    torch_io.save({"a": np.ones(2, np.float32)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"builtins.object at obj\['bad'\]\[0\]"):
        torch_io.save({"a": np.ones(2, np.float32), "bad": [object()]}, path)
    with pytest.raises(DTypeError, match=r"obj\['c'\].*complex64"):
        torch_io.save({"c": np.ones(2, np.complex64)}, path)
    loop = []
    loop.append(loop)
    with pytest.raises(TypeError, match="contains itself"):
        torch_io.save(loop, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pt"]
    with pytest.raises(OSError):
        torch_io.save({"a": np.ones(2)}, tmp_path / "no_such_dir" / "x.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pt"]


# --------------------------------------------------------------------------- safetensors


def test_safetensors_round_trip(tmp_path):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    state = {"t": base.T, "row": base[1], "h": np.array([1.0, 2.0], np.float16), "i": lv.tensor([1, 2])}
    path = tmp_path / "w.safetensors"
    torch_io.save_safetensors(state, path, metadata={"format": "pt"})
    arrays = torch_io.load_safetensors(path, as_numpy=True)
    np.testing.assert_array_equal(arrays["t"], base.T)  # non-contiguous input is not scrambled
    assert arrays["h"].dtype == np.float16 and arrays["i"].dtype == np.int64
    tensors = torch_io.load_safetensors(path)
    assert tensors["h"].dtype == lv.float16 and tensors["row"].shape == (4,)
    np.testing.assert_array_equal(tensors["row"].numpy(), base[1])
    with pytest.raises(CheckpointError, match="nope.safetensors: no such file"):
        torch_io.load_safetensors(tmp_path / "nope.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(CheckpointError, match="bad.safetensors: not a valid safetensors file"):
        torch_io.load_safetensors(tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match="not a Tensor"):
        torch_io.save_safetensors({"x": [1, 2]}, tmp_path / "x.safetensors")


# ------------------------------------------------------------------- live, against torch


def test_live_our_writer_then_torch_load(tmp_path):
    torch = pytest.importorskip("torch")
    state = sample_state()
    path = tmp_path / "ours.pt"
    torch_io.save(state, path)
    back = torch.load(path, weights_only=True)
    assert isinstance(back["model"], OrderedDict) and back["model"]["w"] is back["model"]["w_again"]
    for k, v in state["arrays"].items():
        want = v.numpy() if isinstance(v, lv.Tensor) else v
        got = back["arrays"][k]
        assert isinstance(got, torch.Tensor) and got.shape == want.shape
        assert str(got.dtype).removeprefix("torch.") == want.dtype.name, k
        np.testing.assert_array_equal(got.numpy(), want)
    assert isinstance(back["param"], torch.nn.Parameter) and back["param"].requires_grad
    assert back["optimizer"]["state"][0]["step"].shape == ()
    assert back["epoch"] == 3 and back["meta"] == ("name", 1.5, None, True, b"raw", [1, 2])


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_live_torch_save_then_our_reader(tmp_path, legacy):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(1234)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool]  # fmt: skip
    state = {}
    for i in range(24):
        shape = tuple(torch.randint(0, 5, (int(torch.randint(0, 4, (1,), generator=gen)),), generator=gen).tolist())
        base = (torch.randn(shape or (), generator=gen) * 50).to(dtypes[i % len(dtypes)])
        if base.ndim >= 2 and i % 3 == 0:
            base = base.transpose(0, 1)
        if base.ndim >= 1 and base.shape[0] > 1 and i % 4 == 1:
            base = base[1:]  # a storage offset
        state[f"t{i}"] = base
    state["nested"] = {"list": [state["t0"], {"k": state["t1"]}], 5: (state["t2"],)}
    path = tmp_path / "theirs.pt"
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    arrays = torch_io.load(path, as_numpy=True)
    tensors = torch_io.load(path)
    for k, v in state.items():
        if k == "nested":
            continue
        want = (v.float() if v.dtype == torch.bfloat16 else v).numpy()
        assert arrays[k].dtype.name == str(v.dtype).removeprefix("torch.") and arrays[k].shape == want.shape, k
        np.testing.assert_array_equal(_comparable(arrays[k]), want)
        assert tensors[k].dtype.name == str(v.dtype).removeprefix("torch.")  # no widening
        np.testing.assert_array_equal(_comparable(tensors[k].numpy()), _comparable(want))
    assert arrays["nested"]["list"][0] is arrays["t0"] and arrays["nested"][5][0] is arrays["t2"]


def test_build_opcode_cannot_change_how_later_files_are_read(tmp_path):
    """BUILD sets attributes on what a GLOBAL named; each load must get its own objects."""
    for target, state in [
        (b"torch\nFloatStorage\n", (b"dtype_name", b"uint8")),
        (b"_codecs\nencode\n", (b"__defaults__", b"utf-8")),
    ]:
        key, value = state
        attack = (
            b"\x80\x02c" + target + b"N}X" + len(key).to_bytes(4, "little") + key
            + b"X" + len(value).to_bytes(4, "little") + value + b"s\x86b0N."
        )  # fmt: skip
        path = write_zip(tmp_path / "build.pt", {"build/data.pkl": attack})
        try:
            assert torch_io.load(path) is None
        except CheckpointError as e:
            assert "build.pt" in str(e)
    assert torch_io._decode_latin1.__defaults__ == ("latin1",)
    loaded = torch_io.load(fixture_path("views", legacy=False), as_numpy=True)
    assert loaded["a"].dtype == np.float32


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps")
@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_file_is_unmapped_after_load(legacy):
    for as_numpy in (False, True):
        loaded = torch_io.load(fixture_path("training", legacy), as_numpy=as_numpy)
        assert "torch_ckpt" not in Path("/proc/self/maps").read_text()
    loaded["model"]["weight"][0, 0] = 123.0  # as_numpy arrays are writable copies, not the file
    assert torch_io.load(fixture_path("training", legacy), as_numpy=True)["model"]["weight"][0, 0] != 123.0


def test_map_location_places_tensors_or_says_why():
    """None and "cpu" load to the CPU; a dict maps saved locations (CPU here) to devices; a
    callable is refused; "cuda" without a GPU raises DeviceError (with one: tensors there)."""
    path = fixture_path(NAMES[0], False)
    tensors = []
    for where in (None, "cpu", {"cpu": "cpu"}):
        walk(
            EXPECTED[NAMES[0]]["structure"], torch_io.load(path, map_location=where), lambda p, t, n: tensors.append(t)
        )
    assert len(tensors) >= 3 and all(t.device == "cpu" for t in tensors)
    with pytest.raises(lv.errors.CheckpointError, match="map_location as a function"):
        torch_io.load(path, map_location=lambda storage, location: storage)
    with pytest.raises(lv.errors.DeviceError, match="unknown device 'mps'"):
        torch_io.load(path, map_location="mps")
    if not lv.cuda.is_available():
        with pytest.raises(lv.errors.DeviceError, match="not available"):
            torch_io.load(path, map_location="cuda")
        with pytest.raises(lv.errors.DeviceError, match="not available"):
            torch_io.load(path, map_location={"cpu": "cuda:0"})
