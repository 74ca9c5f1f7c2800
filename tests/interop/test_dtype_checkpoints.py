"""Every storage dtype through PyTorch checkpoints, safetensors and format v1, with no widening.

The fixtures in tests/fixtures/torch_dtypes/ come from tests/fixtures/make_dtype_fixtures.py
(PyTorch 2.13): ``dtypes.pt`` (zip format) and ``dtypes_legacy.pt`` (the pre-1.6 format) hold one
tensor of each of the 13 dtypes, a transposed float16 view and a bfloat16 slice sharing its
storage; ``dtypes_expected.npz`` holds each tensor's row-major bytes as PyTorch has them.
"""

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lazyvic as lv
from lazyvic.interop import torch as torch_io

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "torch_dtypes"
META = json.loads((FIXTURES / "dtypes_expected.json").read_text())["tensors"]


@pytest.fixture(scope="module")
def expected_bytes():
    with np.load(FIXTURES / "dtypes_expected.npz") as f:
        return {k: f[k].tobytes() for k in f.files}


def _check_exact(loaded: dict, expected_bytes: dict, as_numpy: bool) -> None:
    assert set(loaded) == set(META)
    for name, meta in META.items():
        a = loaded[name] if as_numpy else loaded[name].numpy()
        assert a.dtype.name == meta["dtype"], name  # no widening
        assert list(a.shape) == meta["shape"], name
        assert np.ascontiguousarray(a).tobytes() == expected_bytes[name], name
        if not as_numpy:
            assert loaded[name].dtype is lv.dtypes.get_dtype(meta["dtype"])


@pytest.mark.parametrize("as_numpy", [False, True])
@pytest.mark.parametrize("name", ["dtypes.pt", "dtypes_legacy.pt"])
def test_torch_checkpoint_of_every_dtype_loads_exactly(name, as_numpy, expected_bytes):
    _check_exact(torch_io.load(FIXTURES / name, as_numpy=as_numpy), expected_bytes, as_numpy)


def test_bfloat16_numpy_view_shares_the_file_storage():
    """as_numpy arrays of bfloat16 are ml_dtypes views of the stored bits, like every other dtype."""
    arrays = torch_io.load(FIXTURES / "dtypes.pt", as_numpy=True)
    whole, part = arrays["bfloat16"], arrays["bfloat16_slice"]
    assert whole.dtype == ml_dtypes.bfloat16 and np.shares_memory(whole, part)


def test_torch_checkpoint_saves_back_byte_identical_tensors(tmp_path, expected_bytes):
    """Load, save with lazyvic, load again: the same dtype and bytes for every tensor, and the
    unsigned types written as torch writes them (``_rebuild_tensor_v3`` over an UntypedStorage)."""
    state = torch_io.load(FIXTURES / "dtypes.pt")
    torch_io.save(state, tmp_path / "again.pt")
    _check_exact(torch_io.load(tmp_path / "again.pt"), expected_bytes, as_numpy=False)
    import zipfile

    with zipfile.ZipFile(tmp_path / "again.pt") as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert b"_rebuild_tensor_v3" in pkl and b"UntypedStorage" in pkl and b"\nuint64\n" in pkl
    assert b"HalfStorage" in pkl and b"BFloat16Storage" in pkl and b"ByteStorage" in pkl


@pytest.mark.parametrize("writer", ["format_v1", "safetensors"])
def test_every_dtype_round_trips(tmp_path, writer, expected_bytes):
    state = {k: v for k, v in torch_io.load(FIXTURES / "dtypes.pt").items() if k in lv.dtypes._BY_NAME}
    assert len(state) == 13
    path = tmp_path / "state"
    if writer == "format_v1":
        lv.save(state, path)
        back = lv.load(path)
    else:
        torch_io.save_safetensors(state, path)
        back = torch_io.load_safetensors(path)
    for name, t in state.items():
        assert back[name].dtype is t.dtype
        assert back[name].numpy().tobytes() == expected_bytes[name]


def test_half_module_state_dict_round_trip(tmp_path):
    """A model cast to float16 saves and reloads in float16 (half the bytes of float32)."""
    lv.manual_seed(0)
    model = lv.nn.Linear(8, 4).half()
    assert model.weight.dtype is lv.float16
    lv.save(model.state_dict(), tmp_path / "m")
    other = lv.nn.Linear(8, 4).half()
    other.load_state_dict(lv.load(tmp_path / "m"))
    assert other.weight.numpy().tobytes() == model.weight.numpy().tobytes()
    assert other.weight.numpy().nbytes == 8 * 4 * 2
