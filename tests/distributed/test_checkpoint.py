"""lazyvic.distributed.checkpoint: sharded save and load (PyTorch DCP's save/load), resharding
from 2 ranks to 3 and to 1, the index written last, and bad checkpoints.

The state (a model, its AdamW state after 2 steps, tensors of every kind) is
workers/checkpoint_state.py; the MPI runs are workers/checkpoint_save.py and checkpoint_load.py.
"""

import importlib.util
import json
import os

import numpy as np
import pytest
from _mpi import WORKERS, check, run_workers

import lazyvic
import lazyvic.distributed.checkpoint as dcp
from lazyvic.errors import ArgumentError, CheckpointError, UnsupportedOpError

_spec = importlib.util.spec_from_file_location("checkpoint_state", WORKERS / "checkpoint_state.py")
cs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cs)


def test_one_process_round_trip_resumes_training_bit_for_bit(tmp_path):
    model, opt = cs.build()
    cs.train(model, opt, range(2))
    saved = cs.state(model, opt)
    assert saved["optim"]["state"][0]["step"] == 2
    dcp.save(saved, checkpoint_id=tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["index.json", "shard-00000-of-00001.safetensors"]
    cs.train(model, opt, range(2, 3))
    after_3 = [p.numpy().copy() for p in model.parameters()]

    model2, opt2 = cs.build(seed=1)
    loaded = cs.state(model2, opt2, seed=1)
    held = loaded["model"]["0.weight"]
    dcp.load(loaded, checkpoint_id=str(tmp_path / "ckpt"))
    assert loaded["model"]["0.weight"] is held  # in place
    cs.assert_same(loaded, saved)
    model2.load_state_dict(loaded["model"])
    opt2.load_state_dict(loaded["optim"])
    cs.train(model2, opt2, range(2, 3))
    for p, expected in zip(model2.parameters(), after_3):
        assert np.array_equal(p.numpy(), expected)
    assert opt2.state_dict()["state"][0]["step"] == 3


def test_two_ranks_save_three_ranks_and_one_process_load(tmp_path):
    ckpt, reference = tmp_path / "ckpt", tmp_path / "reference.lazyvic"
    out = check(run_workers(2, "checkpoint_save.py", ckpt, reference))
    assert out.count("saved and loaded back") == 2

    index = json.loads((ckpt / "index.json").read_text())
    files = ["shard-00000-of-00002.safetensors", "shard-00001-of-00002.safetensors"]
    assert (index["format"], index["format_version"], index["world_size"], index["files"]) == (
        "lazyvic sharded checkpoint",
        "1",
        2,
        files,
    )
    assert sorted(os.listdir(ckpt)) == ["index.json", *files]
    listed = {s["file"] for entry in index["tensors"].values() for s in entry["shards"]}
    assert listed == set(files)
    # Rank 0 writes the index after every shard is written.
    assert all(os.stat(ckpt / "index.json").st_mtime_ns >= os.stat(ckpt / f).st_mtime_ns for f in files)
    tensors = index["tensors"]
    assert [s["rows"] for s in tensors["extra.rows"]["shards"]] == [[0, 50], [50, 101]]
    assert [s["file"] for s in tensors["model.0.weight"]["shards"]] == files
    assert tensors["extra.scalar"]["shards"] == [{"file": files[0], "rows": None, "shape": []}]
    assert len(tensors["model.2.bias"]["shards"]) == 1  # small: one rank writes it whole
    assert tensors["extra.half"]["dtype"] == "bfloat16"

    out = check(run_workers(3, "checkpoint_load.py", ckpt, reference))
    assert out.count("loaded") == 3

    expected = lazyvic.load(reference)
    model, opt = cs.build(seed=30)
    loaded = cs.state(model, opt, seed=30)
    dcp.load(loaded, checkpoint_id=ckpt)  # no process group: world size 1
    cs.assert_same(loaded, expected)


# ------------------------------------------------------------------ bad input


@pytest.fixture
def small(tmp_path):
    """A world-size-1 checkpoint of {"w": (8, 4) float32, "b": (4,) float32, "n": 1}."""
    ckpt = tmp_path / "small"
    state = {"w": lazyvic.tensor(np.arange(32, dtype=np.float32).reshape(8, 4)), "b": lazyvic.ones(4), "n": 1}
    dcp.save(state, checkpoint_id=ckpt)
    return ckpt


def _target(**entries) -> dict:
    out = {"w": lazyvic.zeros(8, 4), "b": lazyvic.zeros(4), "n": 0}
    out.update(entries)
    return out


def _edit_index(ckpt, edit) -> None:
    path = ckpt / "index.json"
    index = json.loads(path.read_text())
    edit(index)
    path.write_text(json.dumps(index))


def test_loads_the_small_checkpoint_into_tensors_and_arrays(small):
    state = _target()
    dcp.load(state, checkpoint_id=small)
    assert np.array_equal(state["w"].numpy(), np.arange(32, dtype=np.float32).reshape(8, 4))
    assert state["n"] == 1
    array = np.zeros((8, 4), dtype=np.float32)
    dcp.load({"w": array}, checkpoint_id=small)  # written into
    assert np.array_equal(array, np.arange(32, dtype=np.float32).reshape(8, 4))


def test_arguments_pytorch_has_and_lazyvic_does_not(small):
    with pytest.raises(UnsupportedOpError, match="storage_writer is not supported"):
        dcp.save({}, checkpoint_id=small, storage_writer=object())
    with pytest.raises(ArgumentError, match="checkpoint_id is required"):
        dcp.load({}, checkpoint_id=None)


def test_no_index(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"index.json: no such file.*did not finish"):
        dcp.load(_target(), checkpoint_id=tmp_path / "empty")


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "is corrupt or truncated: it is not JSON"),
        ("[1, 2]", "is not the index of a lazyvic sharded checkpoint"),
        ('{"format": "lazyvic sharded checkpoint", "format_version": "2"}', "written by a newer lazyvic"),
        ('{"format": "lazyvic sharded checkpoint", "format_version": "1", "world_size": 1}', "'tensors'"),
    ],
)
def test_malformed_index(small, text, match):
    (small / "index.json").write_text(text)
    with pytest.raises(CheckpointError, match=match):
        dcp.load(_target(), checkpoint_id=small)


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda ix: ix["tensors"]["w"].update(dtype="float128"),
            r"tensor 'w': dtype 'float128' is not a lazyvic dtype",
        ),
        (lambda ix: ix["tensors"]["w"]["shards"][0].update(file="../w.safetensors"), r"'w': shard file '../w"),
        (lambda ix: ix["tensors"].pop("b"), r"refers to tensor 'b', which 'tensors' does not list"),
    ],
)
def test_malformed_tensor_entries(small, edit, match):
    _edit_index(small, edit)
    with pytest.raises(CheckpointError, match=match):
        dcp.load(_target(), checkpoint_id=small)


def test_shards_that_do_not_cover_a_tensor(small):
    def edit(ix):
        ix["tensors"]["w"]["shards"][0].update(rows=[0, 7], shape=[7, 4])

    _edit_index(small, edit)
    with pytest.raises(CheckpointError, match=r"shards of tensor 'w' \(shape \[8, 4\]\) do not cover it.*rows 0\.\.8"):
        dcp.load(_target(), checkpoint_id=small)


def test_missing_and_truncated_shard_files(small):
    shard = small / "shard-00000-of-00001.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-4])
    with pytest.raises(CheckpointError, match=r"shard-00000-of-00001.safetensors is corrupt or truncated"):
        dcp.load(_target(), checkpoint_id=small)
    shard.unlink()
    with pytest.raises(CheckpointError, match=r"shard-00000-of-00001.safetensors: no such file.*tensor 'b'"):
        dcp.load(_target(), checkpoint_id=small)


@pytest.mark.parametrize(
    "entries, match",
    [
        ({"w": lazyvic.zeros(4, 8)}, r"\['w'\].*shape \[8, 4\] and dtype float32; the state_dict's has shape \[4, 8\]"),
        ({"w": lazyvic.zeros(8, 4, dtype=lazyvic.float64)}, r"\['w'\].*has shape \[8, 4\] and dtype float64"),
        ({"extra": lazyvic.zeros(1)}, r"state_dict\['extra'\].*the checkpoint has no such key"),
        ({"n": lazyvic.zeros(1)}, r"\['n'\].*holds a tensor, the checkpoint holds the value 1"),
        ({"b": [lazyvic.zeros(4)]}, r"\['b'\].*holds a list, the checkpoint holds a tensor"),
    ],
)
def test_state_dict_that_does_not_match(small, entries, match):
    state = _target(**entries)
    with pytest.raises(CheckpointError, match=match):
        dcp.load(state, checkpoint_id=small)
    assert not any(v.numpy().any() for v in state.values() if isinstance(v, lazyvic.Tensor))  # nothing changed


def test_a_huge_shape_in_the_index_allocates_nothing(small):
    def edit(ix):
        n = 2**40
        ix["tensors"]["w"].update(
            shape=[n, 4], shards=[{"file": "shard-00000-of-00001.safetensors", "rows": [0, n], "shape": [n, 4]}]
        )

    _edit_index(small, edit)
    state = {"w": {}}  # holds no tensor: takes whatever the checkpoint has
    with pytest.raises(
        CheckpointError,
        match=r"tensor 'w' is stored as F32 \[8, 4\]; expected a float32 piece of shape \[1099511627776, 4\]",
    ):
        dcp.load(state, checkpoint_id=small)


def test_pieces_that_share_bytes_count_against_the_load_limit(tmp_path, monkeypatch):
    """64 tensor entries whose data are the same 1 KiB of a hostile shard file."""
    ckpt = tmp_path / "hostile"
    ckpt.mkdir()
    names = [f"a{i}" for i in range(64)]
    header = {"__metadata__": {"format": "lazyvic sharded checkpoint", "format_version": "1"}}
    header.update({n: {"dtype": "F32", "shape": [256], "data_offsets": [0, 1024]} for n in names})
    text = json.dumps(header).encode()
    (ckpt / "shard-00000-of-00001.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + bytes(1024))
    shard = {"file": "shard-00000-of-00001.safetensors", "rows": [0, 256], "shape": [256]}
    index = {
        "format": "lazyvic sharded checkpoint",
        "format_version": "1",
        "world_size": 1,
        "structure": {"__dict__": [["x", {"__dict__": [[n, {"__tensor__": n}] for n in names]}]]},
        "tensors": {n: {"dtype": "float32", "shape": [256], "shards": [shard]} for n in names},
    }
    (ckpt / "index.json").write_text(json.dumps(index))
    monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", "16K")
    with pytest.raises(CheckpointError, match=r"hostile: tensor 'a\d+' \(float32 \[256\]\).*LAZYVIC_MAX_LOAD_BYTES"):
        dcp.load({"x": {}}, checkpoint_id=ckpt)
    monkeypatch.setenv("LAZYVIC_MAX_LOAD_BYTES", "1M")
    state = {"x": {}}
    dcp.load(state, checkpoint_id=ckpt)
    assert sorted(state["x"]) == sorted(names) and not state["x"]["a0"].numpy().any()


def test_a_failed_save_leaves_no_index(small, monkeypatch):
    def fail(path, chunks):
        raise OSError(f"disk full: {path}")

    monkeypatch.setattr(dcp, "_write_atomic", fail)
    with pytest.raises(OSError, match="disk full"):
        dcp.save({"w": lazyvic.ones(8, 4)}, checkpoint_id=small)
    assert not (small / "index.json").exists()  # removed before the shards changed
    with pytest.raises(CheckpointError, match="did not finish"):
        dcp.load(_target(), checkpoint_id=small)


def test_save_rejects_what_it_cannot_store(tmp_path):
    with pytest.raises(TypeError, match=r"cannot store an object of type builtins.object at obj\['x'\]"):
        dcp.save({"x": object()}, checkpoint_id=tmp_path / "bad")
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        dcp.save([lazyvic.ones(2)], checkpoint_id=tmp_path / "bad")
