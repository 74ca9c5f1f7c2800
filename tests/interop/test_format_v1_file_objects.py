"""lazyvic.save / lazyvic.load (format v1) with binary file objects, as torch.save(obj, f)."""

import io

import numpy as np
import pytest

import lazyvic as lv
from lazyvic.errors import CheckpointError


class CountingBytesIO(io.BytesIO):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, b):
        self.writes += 1
        return super().write(b)


def state():
    return {"w": lv.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), "step": 3, "ids": lv.arange(4)}


def test_bytesio_round_trip_is_the_bytes_of_a_path(tmp_path):
    buf = CountingBytesIO()
    lv.save(state(), buf)
    assert buf.writes == 1  # the whole file in one write
    lv.save(state(), tmp_path / "s.lv")
    assert buf.getvalue() == (tmp_path / "s.lv").read_bytes()
    buf.seek(0)
    out = lv.load(buf)
    assert out["step"] == 3 and out["ids"].dtype is lv.int64
    np.testing.assert_array_equal(out["w"].numpy(), state()["w"].numpy())


def test_open_files_and_modules(tmp_path):
    model = lv.nn.Sequential(lv.nn.Linear(3, 4), lv.nn.ReLU(), lv.nn.Linear(4, 2))
    path = tmp_path / "model.pt"
    with open(path, "wb") as f:
        lv.save(model, f)
    fresh = lv.nn.Sequential(lv.nn.Linear(3, 4), lv.nn.ReLU(), lv.nn.Linear(4, 2))
    with open(path, "rb") as f:
        assert lv.load(f, model=fresh) is fresh
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[k].numpy(), v.numpy())


def test_a_file_object_is_read_from_its_position():
    buf = io.BytesIO()
    buf.write(b"HEADER")
    lv.save(lv.ones(3), buf)
    buf.seek(6)
    np.testing.assert_array_equal(lv.load(buf).numpy(), np.ones(3, np.float32))


def test_bad_file_objects_raise_checkpoint_errors_naming_them(tmp_path):
    with pytest.raises(CheckpointError, match=r"<BytesIO object> is corrupt or truncated"):
        lv.load(io.BytesIO(b"not a checkpoint"))
    (tmp_path / "t.txt").write_text("hello")
    with open(tmp_path / "t.txt") as f, pytest.raises(CheckpointError, match=r"t\.txt.*binary mode"):
        lv.load(f)

    class Broken(io.RawIOBase):
        def read(self, n=-1):
            raise OSError("disk on fire")

    with pytest.raises(CheckpointError, match="disk on fire"):
        lv.load(Broken())
