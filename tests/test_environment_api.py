"""The environment APIs scripts touch first: lazyvic.device, accelerator, backends, cuda seeding,
threads, default dtype, matmul precision, Size, is_tensor/is_floating_point/numel, finfo/iinfo
(against PyTorch's values in tests/fixtures/torch_data.npz), and lazyvic.metrics / lazyvic.viz as
modules."""

import importlib
import pickle
import warnings

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic.errors import DeviceError, DTypeError, UnsupportedOpError

SPEC = torch_fixtures.spec("torch_data.npz")
CUDA = lazyvic.cuda.is_available()


# --------------------------------------------------------------------- device
@pytest.mark.parametrize(
    "args,kwargs,type_,index,text",
    [
        (("cpu",), {}, "cpu", None, "cpu"),
        (("cuda",), {}, "cuda", None, "cuda"),
        (("cuda:1",), {}, "cuda", 1, "cuda:1"),
        (("cuda", 0), {}, "cuda", 0, "cuda:0"),
        ((), {"type": "cuda", "index": 2}, "cuda", 2, "cuda:2"),
        ((0,), {}, "cuda", 0, "cuda:0"),
        ((lazyvic.device("cuda:3"),), {}, "cuda", 3, "cuda:3"),
        (("mps",), {}, "mps", None, "mps"),
    ],
    ids=["cpu", "cuda", "cuda1", "type_index", "keywords", "int", "copy", "mps"],
)
def test_device_forms(args, kwargs, type_, index, text):
    d = lazyvic.device(*args, **kwargs)
    assert (d.type, d.index, str(d)) == (type_, index, text)
    assert repr(d) == (f"device(type='{type_}')" if index is None else f"device(type='{type_}', index={index})")
    assert pickle.loads(pickle.dumps(d)) == d


def test_device_equality_and_hash():
    assert lazyvic.device("cuda", 0) == lazyvic.device("cuda:0") and lazyvic.device("cuda") != lazyvic.device("cuda:0")
    assert lazyvic.device("cpu") != lazyvic.device("cuda")
    assert {lazyvic.device("cpu"): 1}[lazyvic.device("cpu")] == 1
    # Tensor.device is a string: a device equals the string of the same place
    assert lazyvic.zeros(2).device == lazyvic.device("cpu") and lazyvic.device("cpu") == "cpu"
    assert lazyvic.device("cuda:0") == "cuda" and lazyvic.device("cuda:1") != "cuda" and lazyvic.device("cpu") != "x"
    assert hash(lazyvic.device("cpu")) == hash("cpu")


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:-1", "cuda:01", None, 1.5], ids=str)
def test_bad_devices_raise_device_error(bad):
    with pytest.raises(DeviceError, match="device"):
        lazyvic.device(bad)


def test_bad_device_indices_raise_device_error():
    with pytest.raises(DeviceError, match="negative"):
        lazyvic.device("cuda", -1)
    with pytest.raises(DeviceError, match="index"):
        lazyvic.device("cuda:0", 0)


def test_a_device_is_accepted_wherever_a_device_string_is(tmp_path):
    cpu = lazyvic.device("cuda" if CUDA else "cpu")
    x = lazyvic.ones(2, 3).to(cpu)
    assert x.device == cpu.type
    assert lazyvic.zeros(2, device=cpu).device == cpu.type and lazyvic.randn(2, device=cpu).device == cpu.type
    assert lazyvic.tensor([1.0], device=cpu).device == cpu.type
    model = lazyvic.nn.Linear(3, 2).to(cpu)
    assert model.weight.device == cpu.type
    np.testing.assert_allclose(model(x).numpy(), x.numpy() @ model.weight.numpy().T + model.bias.numpy(), rtol=1e-6)
    lazyvic.save({"w": lazyvic.ones(2)}, tmp_path / "w.lv")
    assert lazyvic.load(tmp_path / "w.lv", map_location=lazyvic.device("cpu"))["w"].device == "cpu"


@pytest.mark.skipif(CUDA, reason="checks the error without CUDA")
def test_an_unavailable_device_raises_where_it_is_used():
    with pytest.raises(DeviceError, match="to: device 'cuda' is not available"):
        lazyvic.ones(2).to(lazyvic.device("cuda"))
    with pytest.raises(DeviceError, match="'cuda:1' is not supported"):
        lazyvic.ones(2).to(lazyvic.device("cuda", 1))
    with pytest.raises(DeviceError, match="unknown device"):
        lazyvic.zeros(2, device=lazyvic.device("mps"))


# --------------------------------------------------------- accelerator, cuda
def test_accelerator_reports_cuda():
    acc = lazyvic.accelerator
    assert acc.is_available() is CUDA and acc.device_count() == int(CUDA)
    assert acc.current_accelerator() == (lazyvic.device("cuda") if CUDA else None)
    device = acc.current_accelerator() or lazyvic.device("cpu")  # the idiom of PyTorch 2.6+ scripts
    assert lazyvic.ones(1, device=device).device == device.type
    acc.synchronize()
    if CUDA:
        assert acc.current_device_index() == 0
    else:
        with pytest.raises(DeviceError, match="current_device_index: no accelerator"):
            acc.current_device_index()
        with pytest.raises(DeviceError, match="set_device_index"):
            acc.set_device_index(0)


def test_cuda_seeding_leaves_the_one_stream_alone():
    lazyvic.manual_seed(5)
    expected = lazyvic.rand(4).numpy()
    lazyvic.manual_seed(5)
    assert lazyvic.cuda.manual_seed(123) is None and lazyvic.cuda.manual_seed_all(7) is None
    np.testing.assert_array_equal(lazyvic.rand(4).numpy(), expected)
    assert lazyvic.initial_seed() == 5
    with pytest.raises(ValueError):
        lazyvic.cuda.manual_seed("abc")


def test_cuda_helpers():
    assert lazyvic.cuda.is_bf16_supported() is CUDA
    lazyvic.cuda.empty_cache()
    if not CUDA:
        with pytest.raises(DeviceError, match="current_device"):
            lazyvic.cuda.current_device()


# ------------------------------------------------------------------ backends
def test_backends_flags_have_pytorchs_defaults_and_can_be_set(monkeypatch):
    b = lazyvic.backends
    assert (b.cudnn.enabled, b.cudnn.benchmark, b.cudnn.deterministic, b.cudnn.allow_tf32) == (True, False, False, True)
    assert b.cuda.matmul.allow_tf32 is False and b.cuda.matmul.allow_fp16_reduced_precision_reduction is True
    for module, name in ((b.cudnn, "benchmark"), (b.cudnn, "deterministic"), (b.mkldnn, "enabled")):
        monkeypatch.setattr(module, name, True)
    monkeypatch.setattr(b.cuda.matmul, "allow_tf32", True)
    assert b.cudnn.benchmark and b.cuda.matmul.allow_tf32
    with pytest.raises(AttributeError):
        b.cuda.matmul.allow_tf33 = True  # a typo is caught, as in PyTorch
    assert not b.cudnn.is_available() and b.cudnn.version() is None
    assert not b.mps.is_available() and not b.mps.is_built() and not b.mkldnn.is_available()
    assert b.cuda.is_built() is CUDA


def test_sdp_switches_round_trip():
    cuda = lazyvic.backends.cuda
    try:
        cuda.enable_flash_sdp(False)
        cuda.enable_mem_efficient_sdp(False)
        assert not cuda.flash_sdp_enabled() and not cuda.mem_efficient_sdp_enabled() and cuda.math_sdp_enabled()
    finally:
        cuda.enable_flash_sdp(True)
        cuda.enable_mem_efficient_sdp(True)
    assert cuda.flash_sdp_enabled()


# ------------------------------------------------------------------ settings
def test_set_num_threads_sets_numba_and_blas():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numba

    before = lazyvic.get_num_threads()
    blas_before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    try:
        lazyvic.set_num_threads(1)
        assert lazyvic.get_num_threads() == 1 == numba.get_num_threads()
        blas = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
        assert all(n == 1 for n in blas)
        lazyvic.set_num_threads(10_000)  # capped at NUMBA_NUM_THREADS
        assert lazyvic.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    finally:
        lazyvic.set_num_threads(before)
        if blas_before:
            threadpoolctl.threadpool_limits(max(blas_before), user_api="blas")


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_set_num_threads_wants_a_positive_int(bad):
    with pytest.raises(ValueError, match="set_num_threads"):
        lazyvic.set_num_threads(bad)


def test_default_dtype_is_float32_and_fixed():
    assert lazyvic.get_default_dtype() is lazyvic.float32 is lazyvic.tensor([1.0]).dtype
    lazyvic.set_default_dtype(lazyvic.float32)
    with pytest.raises(UnsupportedOpError, match="set_default_dtype.*float64"):
        lazyvic.set_default_dtype(lazyvic.float64)
    with pytest.raises(DTypeError, match="set_default_dtype"):
        lazyvic.set_default_dtype(lazyvic.int64)
    assert lazyvic.get_default_dtype() is lazyvic.float32


def test_float32_matmul_precision_is_remembered():
    assert lazyvic.get_float32_matmul_precision() == "highest"
    try:
        lazyvic.set_float32_matmul_precision("high")
        assert lazyvic.get_float32_matmul_precision() == "high"
        with pytest.warns(UserWarning, match="no effect"):
            lazyvic.set_float32_matmul_precision("fast")
        assert lazyvic.get_float32_matmul_precision() == "high"
    finally:
        lazyvic.set_float32_matmul_precision("highest")


# -------------------------------------------------------------- Size, queries
def test_size_is_a_tuple_with_numel():
    s = lazyvic.Size([2, 3, 4])
    assert s == (2, 3, 4) and lazyvic.ones(2, 3, 4).shape == s and isinstance(s, tuple)
    assert s.numel() == 24 and lazyvic.Size().numel() == 1 and lazyvic.Size([0, 5]).numel() == 0
    assert isinstance(s[1:], lazyvic.Size) and s[1:] == (3, 4) and s[0] == 2 and isinstance(s[0], int)
    assert isinstance(s + (5,), lazyvic.Size) and s + (5,) == (2, 3, 4, 5) and (1,) + s == (1, 2, 3, 4)
    assert repr(s) == "lazyvic.Size([2, 3, 4])" and repr(lazyvic.Size()) == "lazyvic.Size([])"
    assert lazyvic.Size((np.int64(2), lazyvic.tensor(3))) == (2, 3)
    assert pickle.loads(pickle.dumps(s)) == s and isinstance(pickle.loads(pickle.dumps(s)), lazyvic.Size)
    with pytest.raises(TypeError, match="item 1 is float"):
        lazyvic.Size([2, 2.5])


def test_type_queries():
    assert lazyvic.is_tensor(lazyvic.zeros(1)) and lazyvic.is_tensor(lazyvic.nn.Parameter(lazyvic.zeros(1)))
    assert not lazyvic.is_tensor(np.zeros(1)) and not lazyvic.is_tensor(1.0)
    assert lazyvic.is_floating_point(lazyvic.zeros(1, dtype=lazyvic.float64))
    assert not lazyvic.is_floating_point(lazyvic.arange(3))
    assert lazyvic.numel(lazyvic.zeros(2, 3)) == 6 and lazyvic.numel(lazyvic.tensor(1.0)) == 1
    with pytest.raises(TypeError, match="is_floating_point"):
        lazyvic.is_floating_point(1.0)
    with pytest.raises(TypeError, match="numel"):
        lazyvic.numel([1, 2])


# ---------------------------------------------------------------- finfo/iinfo
@pytest.mark.parametrize("name", sorted(SPEC["finfo"]))
def test_finfo_matches_pytorch(name):
    f = lazyvic.finfo(getattr(lazyvic, name))
    for field, value in SPEC["finfo"][name].items():
        assert getattr(f, field) == value, field
    assert f.dtype == name and f"dtype={name}" in repr(f)


def test_finfo_defaults_to_float32_and_reads_names():
    assert lazyvic.finfo().dtype == "float32" and lazyvic.finfo("double").dtype == "float64"
    assert lazyvic.finfo(lazyvic.float32).eps == float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("name", sorted(SPEC["iinfo"]))
def test_iinfo_matches_pytorch(name):
    i = lazyvic.iinfo(getattr(lazyvic, name))
    assert {"bits": i.bits, "max": i.max, "min": i.min} == SPEC["iinfo"][name] and i.dtype == name


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: lazyvic.finfo(lazyvic.int32), "finfo: requires a floating-point"),
        (lambda: lazyvic.finfo(lazyvic.bool), "finfo"),
        (lambda: lazyvic.iinfo(lazyvic.float32), "iinfo: requires an integer"),
        (lambda: lazyvic.iinfo(lazyvic.bool), "iinfo: lazyvic.bool is not supported"),
        (lambda: lazyvic.iinfo("complex64"), "iinfo: expected a lazyvic dtype"),
    ],
    ids=["finfo_int", "finfo_bool", "iinfo_float", "iinfo_bool", "unknown"],
)
def test_info_of_the_wrong_kind_raises_dtype_error(call, match):
    with pytest.raises(DTypeError, match=match) as e:
        call()
    assert isinstance(e.value, TypeError)  # PyTorch raises TypeError


# ---------------------------------------------------------- metrics and viz
def test_metrics_and_viz_import_as_modules():
    metrics = importlib.import_module("lazyvic.metrics")
    viz = importlib.import_module("lazyvic.viz")
    from lazyvic.runtime import metrics as runtime_metrics
    from lazyvic.tools import viz as tools_viz

    assert lazyvic.metrics is metrics and lazyvic.viz is viz
    assert metrics.snapshot is runtime_metrics.snapshot and metrics.counters is runtime_metrics.counters
    assert viz.draw is tools_viz.draw and viz.write_plans is tools_viz.write_plans
    before = metrics.snapshot()["traces"]
    (lazyvic.ones(3) * 2).numpy()
    assert metrics.snapshot()["traces"] == before + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import lazyvic.metrics as again  # noqa: F401 - the import statement itself is what is tested


def test_load_takes_torch_loads_weights_only_and_onnx_names_its_warning(tmp_path):
    """``torch.load(f, weights_only=True)`` (PyTorch 2.4+ scripts pass it) reads a lazyvic file;
    ``torch.onnx.OnnxShapeWarning`` is the importer's warning class."""
    pytest.importorskip("onnx")
    from lazyvic.interop.onnx.module import OnnxShapeWarning

    lazyvic.save({"a": lazyvic.arange(3)}, tmp_path / "s.lv")
    for flag in (True, False):
        np.testing.assert_array_equal(lazyvic.load(tmp_path / "s.lv", weights_only=flag)["a"].numpy(), [0, 1, 2])
    assert lazyvic.onnx.OnnxShapeWarning is OnnxShapeWarning and issubclass(OnnxShapeWarning, UserWarning)
    with pytest.raises(AttributeError):
        lazyvic.onnx.NoSuchThing  # noqa: B018
