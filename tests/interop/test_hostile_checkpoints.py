"""Hostile .pt, safetensors and format-v1 files: allocation limits, typed errors, temporary files.

Every file here is made by the test, small, in tmp_path. The allocation tests measure with
tracemalloc (NumPy reports its buffers to it) that what a file is refused for was never allocated.
"""

import base64
import io
import json
import math
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import lazyvic as lv
from lazyvic.errors import CheckpointError
from lazyvic.interop import format_v1
from lazyvic.interop import torch as torch_io

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20


def peak_bytes(fn):
    """(what fn raised or returned, the peak bytes traced while it ran)."""
    tracemalloc.start()
    try:
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - the caller inspects it
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------ hand-written .pt files
class _Pickler(torch_io._CheckpointPickler):
    def reducer_override(self, obj):
        return obj.__reduce__() if isinstance(obj, torch_io._TensorRecord) else NotImplemented


def view_record(storage, shape, stride, offset=0):
    """A tensor record with any size / stride / offset over ``storage`` (a fresh object each time,
    so the pickle holds one rebuild call per record, as torch writes distinct tensors)."""
    record = torch_io._TensorRecord(storage, shape, stride)
    record.__reduce__ = lambda: (torch_io._W_REBUILD_V2, (storage, offset, shape, stride, False, OrderedDict()))
    return record


def write_checkpoint(path, obj, storages, compress_pkl=False) -> Path:
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ck/data.pkl", buf.getvalue(), zipfile.ZIP_DEFLATED if compress_pkl else zipfile.ZIP_STORED)
        for s in storages:
            z.writestr(f"ck/data/{s.key}", s.data.tobytes())
    return Path(path)


def float_storage(numel, key="0"):
    return torch_io._StorageRecord(key, "FloatStorage", np.arange(numel, dtype=np.float32))


def test_compressed_data_pkl_is_refused_before_it_is_unpacked(tmp_path):
    # ~300 KB on disk, 300 MiB unpacked: a valid pickle of one huge bytes object.
    path = tmp_path / "bomb.pt"
    unpacked = 300 * MiB
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("bomb/data.pkl", "w", force_zip64=True) as f:
            f.write(b"\x80\x02B" + (unpacked - 4).to_bytes(4, "little"))
            chunk = bytes(MiB)
            for _ in range(299):
                f.write(chunk)
            f.write(bytes(MiB - 4) + b".")
    assert path.stat().st_size < 2 * MiB
    result, peak = peak_bytes(lambda: torch_io.load(path))
    assert isinstance(result, CheckpointError), result
    assert re.search(
        r"bomb.pt: record bomb/data.pkl \(compressed, \d+ bytes unpacked\) would take 300.0 MiB", str(result)
    )
    assert "LAZYVIC_MAX_LOAD_BYTES" in str(result)
    assert peak < 16 * MiB


def test_small_compressed_data_pkl_still_loads(tmp_path):
    storage = float_storage(6)
    path = write_checkpoint(
        tmp_path / "ok.pt", {"w": view_record(storage, (2, 3), (3, 1))}, [storage], compress_pkl=True
    )
    np.testing.assert_array_equal(torch_io.load(path)["w"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_stride_zero_tensor_is_not_materialized_past_the_limit(tmp_path):
    storage = float_storage(1)
    path = write_checkpoint(tmp_path / "expand.pt", {"t": view_record(storage, (2**28,), (0,))}, [storage])
    assert path.stat().st_size < 1000
    result, peak = peak_bytes(lambda: torch_io.load(path))  # 1 GiB of float32 from 4 bytes
    assert isinstance(result, CheckpointError), result
    assert "expand.pt: a tensor of size (268435456,) and stride (0,) over storage '0'" in str(result)
    assert "would take 1.0 GiB" in str(result)
    assert peak < 16 * MiB
    # As NumPy arrays, views stay views: nothing is materialized.
    arr = torch_io.load(path, as_numpy=True)["t"]
    assert arr.shape == (2**28,) and arr.strides == (0,)
    # Small expansions (an expanded position-ids buffer) load; the limit is the caller's to set.
    small = write_checkpoint(tmp_path / "small.pt", {"t": view_record(storage, (4096,), (0,))}, [storage])
    np.testing.assert_array_equal(torch_io.load(small)["t"].numpy(), np.zeros(4096, np.float32))
    with pytest.raises(CheckpointError, match=r"small.pt: a tensor of size \(4096,\).*max_bytes="):
        torch_io.load(small, max_bytes=1000)
    assert torch_io.load(small, max_bytes=math.inf)["t"].shape == (4096,)


def test_one_storage_referenced_a_thousand_times_is_copied_once(tmp_path):
    storage = float_storage(256 * 1024)  # 1 MiB
    records = {f"t{i}": view_record(storage, (256 * 1024,), (1,)) for i in range(1000)}
    path = write_checkpoint(tmp_path / "tied.pt", records, [storage])
    result, peak = peak_bytes(lambda: torch_io.load(path))
    assert not isinstance(result, Exception), result
    assert all(t is result["t0"] for t in result.values())  # the same view: one Tensor, one copy
    assert peak < 12 * MiB
    np.testing.assert_array_equal(result["t999"].numpy(), np.arange(256 * 1024, dtype=np.float32))
    arrays = torch_io.load(path, as_numpy=True)  # NumPy views share the storage's one copy
    assert all(np.shares_memory(a, arrays["t0"]) for a in arrays.values())


def test_overlapping_views_are_bounded(tmp_path):
    # 400 views of one 1 MiB storage at different offsets: 400 MiB of copies from a 1 MiB file.
    storage = float_storage(256 * 1024)
    records = {f"t{i}": view_record(storage, (256 * 1024 - i,), (1,), offset=i) for i in range(400)}
    path = write_checkpoint(tmp_path / "overlap.pt", records, [storage])
    result, peak = peak_bytes(lambda: torch_io.load(path))
    assert isinstance(result, CheckpointError), result
    assert "overlap.pt: a tensor of size" in str(result) and "more than this load may allocate" in str(result)
    assert peak < 300 * MiB
    assert len(torch_io.load(path, max_bytes=math.inf)) == 400


class _LegacyView:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class _LegacyPickler(torch_io._CheckpointPickler):
    """Writes legacy persistent ids: a view ``key`` of the whole storage "root"."""

    def persistent_id(self, obj):
        if isinstance(obj, _LegacyView):
            float_storage = torch_io._W_STORAGES["FloatStorage"]
            return ("storage", float_storage, "root", "cpu", obj.numel, (obj.key, 0, obj.numel))
        return None


class _LegacyTensor:
    def __init__(self, view, offset):
        self.view, self.offset = view, offset

    def __reduce__(self):
        size = (self.view.numel - self.offset,)
        return torch_io._W_REBUILD_V2, (self.view, self.offset, size, (1,), False, OrderedDict())


def legacy_checkpoint(path, offsets, numel=256 * 1024) -> Path:
    """A legacy-format file whose tensors are views over one root storage, one view key each."""
    header = pickle.dumps(torch_io.LEGACY_MAGIC_NUMBER, protocol=2) + pickle.dumps(1001, protocol=2)
    header += pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
    buf = io.BytesIO()
    objs = {f"t{i}": _LegacyTensor(_LegacyView(f"v{i}", numel), off) for i, off in enumerate(offsets)}
    _LegacyPickler(buf, protocol=2).dump(objs)
    keys = pickle.dumps(["root"], protocol=2)
    data = numel.to_bytes(8, "little") + np.arange(numel, dtype=np.float32).tobytes()
    Path(path).write_bytes(header + buf.getvalue() + keys + data)
    return Path(path)


def test_legacy_views_of_one_root_are_counted_once(tmp_path):
    same = legacy_checkpoint(tmp_path / "same.pt", [0] * 300)
    result, peak = peak_bytes(lambda: torch_io.load(same))
    assert not isinstance(result, Exception), result
    assert all(t is result["t0"] for t in result.values()) and peak < 12 * MiB
    np.testing.assert_array_equal(result["t299"].numpy(), np.arange(256 * 1024, dtype=np.float32))
    shifted = legacy_checkpoint(tmp_path / "shifted.pt", range(300))  # 300 different 1 MiB views
    with pytest.raises(CheckpointError, match="shifted.pt: a tensor of size"):
        torch_io.load(shifted)


def test_memory_error_while_loading_names_the_file(tmp_path, monkeypatch):
    storage = float_storage(6)
    path = write_checkpoint(tmp_path / "oom.pt", {"w": view_record(storage, (6,), (1,))}, [storage])

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(torch_io, "_tensor", out_of_memory)
    with pytest.raises(CheckpointError, match=r"oom.pt: ran out of memory while loading it \(MemoryError\)"):
        torch_io.load(path)


def test_deeply_nested_objects_in_messages_are_bounded(tmp_path):
    # A deeply nested list handed to _rebuild_parameter: the message shows a bounded repr.
    depth = 100_000
    pkl = b"\x80\x02ctorch._utils\n_rebuild_parameter\n" + b"]" * depth + b"a" * (depth - 1)
    pkl += b"\x89ccollections\nOrderedDict\n)R\x87R."
    with zipfile.ZipFile(tmp_path / "deep.pt", "w") as z:
        z.writestr("deep/data.pkl", pkl)
    with pytest.raises(CheckpointError, match=r"deep.pt: _rebuild_parameter got \[\[\[.*\]\]\], not a tensor"):
        torch_io.load(tmp_path / "deep.pt")


def test_safetensors_memory_error_names_the_file(tmp_path, monkeypatch):
    torch_io.save_safetensors({"a": np.ones(3, np.float32)}, tmp_path / "a.safetensors")

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(torch_io, "safetensors_arrays", out_of_memory)
    with pytest.raises(CheckpointError, match=r"a.safetensors: ran out of memory"):
        torch_io.load_safetensors(tmp_path / "a.safetensors")


# ------------------------------------------------------------------ format v1
def v1_file(path, metadata: dict, arrays=None) -> Path:
    meta = {"format": "lazyvic", "format_version": "1", "dtypes": "{}"} | metadata
    Path(path).write_bytes(safetensors.numpy.save(arrays or {}, metadata=meta))
    return Path(path)


def test_format_v1_onnx_module_config_allocates_nothing_before_the_shape_check(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [150_000_000])],
        initializer=[TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[150_000_000])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    config = {"model": base64.b64encode(model.SerializeToString()).decode(), "source": "x.onnx"}
    path = v1_file(
        tmp_path / "onnx.lv",
        {"kind": "module", "class": "lazyvic.interop.onnx.module.OnnxModule", "config": json.dumps(config)},
    )
    assert path.stat().st_size < 600
    result, peak = peak_bytes(lambda: lv.load(path))
    assert isinstance(result, CheckpointError), result
    assert "missing keys: w (150000000,)" in str(result)
    assert peak < 16 * MiB  # 600 MB of zeros before


def test_format_v1_deep_structure_is_a_checkpoint_error(tmp_path):
    deep = v1_file(tmp_path / "deep.lv", {"kind": "state", "structure": "[" * 100_000 + "]" * 100_000})
    with pytest.raises(CheckpointError, match=r"deep.lv is corrupt or truncated: .*nested too deeply"):
        lv.load(deep)
    tagged = '{"__tuple__":' * 5000 + "[]" + "}" * 5000
    deep2 = v1_file(tmp_path / "deep2.lv", {"kind": "state", "structure": tagged})
    with pytest.raises(CheckpointError, match=r"deep2.lv is corrupt or truncated: .*nested too deeply"):
        lv.load(deep2)


@pytest.mark.parametrize("writer", ["v1", "pt"])
def test_saving_a_structure_nested_too_deeply_is_a_checkpoint_error(tmp_path, writer):
    """A dict nested 5,000 deep raised a raw RecursionError from both writers; now a
    CheckpointError naming the file, and nothing is written."""
    deep: dict = {"x": lv.ones(2)}
    for _ in range(5000):
        deep = {"d": deep}
    target = tmp_path / ("deep.lv" if writer == "v1" else "deep.pt")
    save = lv.save if writer == "v1" else lv.interop.torch.save
    with pytest.raises(CheckpointError, match=r"deep\.(lv|pt): the object is nested too deeply to save"):
        save(deep, target)
    assert list(tmp_path.iterdir()) == []


def test_format_v1_memory_error_names_the_file(tmp_path, monkeypatch):
    lv.save({"a": lv.ones(3)}, tmp_path / "s.lv")

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(format_v1, "_read", out_of_memory)
    with pytest.raises(CheckpointError, match=r"s.lv: ran out of memory while loading it"):
        lv.load(tmp_path / "s.lv")


def test_load_limit_resolution(monkeypatch):
    monkeypatch.delenv("LAZYVIC_MAX_LOAD_BYTES", raising=False)
    assert format_v1.load_limit(10) == format_v1.DEFAULT_MAX_LOAD_BYTES == 256 * MiB
    assert format_v1.load_limit(2**40) == 2**40  # a big file may make as much as it holds
    assert format_v1.load_limit(10, max_bytes=5) == 5
    for text, value in [("8G", 8 * 2**30), ("512MiB", 512 * MiB), ("1000", 1000), ("inf", math.inf), ("2 kb", 2048)]:
        monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", text)
        assert format_v1.load_limit(2**40) == value
    monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", "lots")
    with pytest.raises(ValueError, match="LAZYVIC_MAX_LOAD_BYTES='lots'"):
        format_v1.load_limit(1)
    with pytest.raises(ValueError, match="max_bytes=-1"):
        format_v1.load_limit(1, max_bytes=-1)


def test_environment_variable_sets_the_limit(tmp_path, monkeypatch):
    storage = float_storage(1)
    path = write_checkpoint(tmp_path / "e.pt", {"t": view_record(storage, (4096,), (0,))}, [storage])
    assert torch_io.load(path)["t"].shape == (4096,)
    monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", "1K")
    with pytest.raises(CheckpointError, match=r"e.pt: .* would take 16.0 KiB, more than .*\(1.0 KiB, "):
        torch_io.load(path)
    assert torch_io.load(path, max_bytes=2**20)["t"].shape == (4096,)  # the keyword wins
    monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", "inf")
    assert torch_io.load(path)["t"].shape == (4096,)


# ------------------------------------------------------------------ temporary files of killed saves
_KILLED_SAVE = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import lazyvic as lv
    from lazyvic.interop import format_v1, torch as torch_io
    kind, path = sys.argv[1], sys.argv[2]
    def hang(fd):
        print("writing", flush=True)
        time.sleep(600)
    format_v1.os.fsync = hang  # the bytes are in the temporary file; the rename never comes
    state = {"w": np.ones((4, 4), np.float32)}
    if kind == "v1":
        lv.save(state, path)
    elif kind == "pt":
        torch_io.save(state, path)
    else:
        torch_io.save_safetensors(state, path)
    """
)

TEMP = re.compile(r"\.(?P<target>.+)\.lazyvic-[0-9]+-[0-9a-f]{8}\.tmp\Z")


def killed_save(kind: str, path: Path) -> Path:
    """Run a save in a child, SIGKILL it mid-write; return the temporary file it left."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVE, kind, str(path)], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    try:
        assert child.stdout.readline() == b"writing\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    left = [p for p in path.parent.iterdir() if p.name != path.name]
    assert len(left) == 1, left
    return left[0]


@pytest.mark.parametrize("kind", ["v1", "pt", "safetensors"])
def test_next_save_removes_what_a_killed_save_left(tmp_path, kind):
    path = tmp_path / f"model.{kind}"
    leftover = killed_save(kind, path)
    match = TEMP.match(leftover.name)
    assert match and match["target"] == path.name, leftover.name  # recognisable, and whose
    assert not path.exists()

    old = time.time() - 3600
    os.utime(leftover, (old, old))
    # What must survive: another target's leftover, a name that only looks alike, a leftover too
    # young to judge, a live writer's (locked) file, and a symbolic link with the pattern's name.
    others = {
        "other": tmp_path / ".other.pt.lazyvic-123-deadbeef.tmp",
        "alike": tmp_path / f".{path.name}.lazyvic-123-deadbeef.tmp.bak",
        "young": tmp_path / f".{path.name}.lazyvic-7-0badc0de.tmp",
        "live": tmp_path / f".{path.name}.lazyvic-8-12345678.tmp",
    }
    for p in others.values():
        p.write_bytes(b"x")
        if p is not others["young"]:
            os.utime(p, (old, old))
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"keep me")
    link = tmp_path / f".{path.name}.lazyvic-9-abcdef01.tmp"
    link.symlink_to(outside)
    import fcntl

    with open(others["live"], "rb") as live:
        fcntl.flock(live, fcntl.LOCK_EX)
        state = {"w": np.ones((4, 4), np.float32)}
        if kind == "v1":
            lv.save(state, path)
        elif kind == "pt":
            torch_io.save(state, path)
        else:
            torch_io.save_safetensors(state, path)
    assert not leftover.exists()
    assert all(p.exists() for p in others.values())
    assert link.is_symlink() and outside.read_bytes() == b"keep me"
    assert path.exists()
