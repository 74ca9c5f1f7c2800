"""lazyvic.utils.data.DataLoader against PyTorch: the same batches, structure, dtypes and lengths.

The reference is tests/fixtures/torch_data.npz (made by tests/fixtures/make_data_fixtures.py,
which defines the same dataset kinds as below); every case is deterministic (no shuffling).
"""

from collections import namedtuple

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest

import lazyvic
from lazyvic.errors import DTypeError, ShapeError
from lazyvic.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
    default_convert,
    get_worker_info,
    random_split,
)

FIXTURE = "torch_data.npz"
REF = torch_fixtures.arrays(FIXTURE)
SPEC = torch_fixtures.spec(FIXTURE)  # a dict here: cases, loaders, splits, errors, finfo, iinfo
DATA = {k[len("input.") :]: v for k, v in REF.items() if k.startswith("input.")}
Point = namedtuple("Point", ["x", "y"])


# --- the dataset kinds of make_data_fixtures.py ---
class Records(Dataset):
    def __init__(self, r):
        self.r = r

    def __len__(self):
        return len(self.r)

    def __getitem__(self, i):
        return {
            "a": self.r[i],
            "b": int(i) - 3,
            "c": float(i) * 0.5,
            "d": i % 2 == 0,
            "s": f"s{i}",
            "f32": np.float32(i) / 4,
            "i32": np.int32(i),
        }


class Tuples(Dataset):
    def __init__(self, x):
        self.x = x

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return (self.x[i], i)


class Lists(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return [i, float(i) / 3, [i, -i]]


class Named(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return Point(x=np.array([i, 2 * i], dtype=np.int32), y=float(i))


class Stream(IterableDataset):
    def __init__(self, x):
        self.x = x

    def __iter__(self):
        for i in range(10):
            yield self.x[i % len(self.x), :2]


def make_dataset(kind: str):
    x, y = lazyvic.tensor(DATA["x"]), lazyvic.tensor(DATA["y"])
    if kind == "tensor":
        return TensorDataset(x, y)
    if kind == "records":
        return Records(DATA["r"])
    if kind == "tuples":
        return Tuples(DATA["x"])
    if kind == "lists":
        return Lists()
    if kind == "named":
        return Named()
    if kind == "stream":
        return Stream(DATA["x"])
    if kind == "concat_subset":
        ds = TensorDataset(x, y)
        return ConcatDataset([Subset(ds, [10, 0, 3]), TensorDataset(x[:4], y[:4])])
    raise ValueError(kind)


def loader_kwargs(kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    if kwargs.get("batch_sampler") == "sequential3":
        kwargs["batch_sampler"] = BatchSampler(SequentialSampler(range(11)), 3, False)
    return kwargs


def structure(value, prefix: str, arrays: dict):
    """The JSON tree of a batch, as make_data_fixtures.structure builds it."""
    if isinstance(value, lazyvic.Tensor):
        a = value.numpy()
        arrays[prefix] = a
        return {"type": "tensor", "dtype": str(a.dtype), "shape": list(a.shape)}
    if isinstance(value, dict):
        return {"type": "dict", "items": {k: structure(v, f"{prefix}.{k}", arrays) for k, v in value.items()}}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        items = [structure(v, f"{prefix}.{i}", arrays) for i, v in enumerate(value)]
        return {"type": type(value).__name__, "items": items}
    if isinstance(value, (list, tuple)):
        items = [structure(v, f"{prefix}.{i}", arrays) for i, v in enumerate(value)]
        return {"type": "list" if isinstance(value, list) else "tuple", "items": items}
    if isinstance(value, (str, int, float)):
        return {"type": type(value).__name__, "value": value}
    raise TypeError(type(value))


@pytest.mark.parametrize("name,kind,kwargs", SPEC["cases"], ids=[c[0] for c in SPEC["cases"]])
def test_batches_match_pytorch(name, kind, kwargs):
    ref = SPEC["loaders"][name]
    loader = DataLoader(make_dataset(kind), **loader_kwargs(kwargs))
    if ref["len"] == "TypeError":
        with pytest.raises(TypeError):
            len(loader)
    else:
        assert len(loader) == ref["len"]
    arrays = {}
    batches = [structure(b, f"loader.{name}.{i}", arrays) for i, b in enumerate(loader)]
    assert batches == ref["batches"]
    assert sorted(arrays) == sorted(k for k in REF if k.startswith(f"loader.{name}."))
    for key, a in arrays.items():
        np.testing.assert_array_equal(a, REF[key], err_msg=key)


@pytest.mark.parametrize("n,fractions,lengths", SPEC["splits"])
def test_random_split_fractions_give_pytorchs_lengths(n, fractions, lengths):
    with pytest.warns(UserWarning, match="random_split") if 0 in lengths else _no_warning():
        parts = random_split(range(n), fractions, generator=lazyvic.Generator().manual_seed(0))
    assert [len(p) for p in parts] == lengths
    assert sorted(i for p in parts for i in p) == list(range(n))  # disjoint, covering


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("name", sorted(SPEC["errors"]))
def test_bad_arguments_raise_what_pytorch_raises(name):
    kwargs = dict(dict(SPEC_ERRORS)[name])
    ds = Stream(DATA["x"]) if kwargs.pop("_stream", False) else TensorDataset(lazyvic.tensor(DATA["x"]))
    expected = {"ValueError": ValueError, "TypeError": TypeError}[SPEC["errors"][name]]
    with pytest.raises(expected, match="DataLoader|BatchSampler"):
        DataLoader(ds, **kwargs)


# The configurations of make_data_fixtures.ERRORS (the spec stores only PyTorch's answer).
SPEC_ERRORS = [
    ("negative_workers", {"num_workers": -1}),
    ("negative_timeout", {"timeout": -1}),
    ("prefetch_without_workers", {"prefetch_factor": 2}),
    ("persistent_without_workers", {"persistent_workers": True}),
    ("sampler_and_shuffle", {"sampler": [0, 1], "shuffle": True}),
    ("batch_sampler_and_batch_size", {"batch_sampler": [[0, 1]], "batch_size": 2}),
    ("batch_sampler_and_shuffle", {"batch_sampler": [[0, 1]], "shuffle": True}),
    ("batch_sampler_and_sampler", {"batch_sampler": [[0, 1]], "sampler": [0, 1]}),
    ("batch_sampler_and_drop_last", {"batch_sampler": [[0, 1]], "drop_last": True}),
    ("none_batch_size_and_drop_last", {"batch_size": None, "drop_last": True}),
    ("zero_batch_size", {"batch_size": 0}),
    ("stream_shuffle", {"shuffle": True, "_stream": True}),
    ("stream_sampler", {"sampler": [0, 1], "_stream": True}),
]


def test_the_error_list_is_the_fixtures():
    assert sorted(n for n, _ in SPEC_ERRORS) == sorted(SPEC["errors"])


# ------------------------------------------------------------- beyond the fixture
def test_tensor_dataset_gather_equals_per_sample_collation():
    """The batched gather of a TensorDataset (and of a Subset of one) gives what stacking the
    samples one by one gives: same values, dtypes, and a list of tensors."""
    x, y = lazyvic.tensor(DATA["x"]), lazyvic.tensor(DATA["y"])
    for ds in (TensorDataset(x, y * 2), Subset(TensorDataset(x, y), [4, 2, 9, 0, 7])):
        fast = list(DataLoader(ds, batch_size=3))
        slow = list(DataLoader(ds, batch_size=3, collate_fn=lambda b: default_collate(b)))
        assert len(fast) == len(slow)
        for f, s in zip(fast, slow):
            assert isinstance(f, list) and len(f) == len(s) == 2
            for a, b in zip(f, s):
                assert a.dtype is b.dtype and not a.is_lazy
                np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_pending_samples_are_computed_and_stacked():
    x = lazyvic.tensor(DATA["x"])

    class Doubled(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return x[i] * 2.0, x[i].sum()

    (a, s), _ = list(DataLoader(Doubled(), batch_size=3))[:2]
    np.testing.assert_allclose(a.numpy(), DATA["x"][:3] * 2)
    np.testing.assert_allclose(s.numpy(), DATA["x"][:3].sum(1), rtol=1e-6)


def test_getitems_is_used_for_a_batch():
    calls = []

    class Batched(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            raise AssertionError("__getitems__ should be used")

        def __getitems__(self, indices):
            calls.append(list(indices))
            return [np.float32(i) for i in indices]

    batches = [b.numpy() for b in DataLoader(Batched(), batch_size=4)]
    assert calls == [[0, 1, 2, 3], [4, 5]]
    np.testing.assert_array_equal(np.concatenate(batches), np.arange(6, dtype=np.float32))


def test_workers_run_in_process():
    """num_workers > 0 is accepted: nothing is started, worker_init_fn is not called, an
    IterableDataset is read once (no duplicates) and get_worker_info() is None."""
    seen = []

    def init(worker_id):
        raise AssertionError("no worker is started")

    class Info(IterableDataset):
        def __iter__(self):
            seen.append(get_worker_info())
            yield from (np.int64(i) for i in range(5))

    loader = DataLoader(Info(), batch_size=2, num_workers=3, worker_init_fn=init, prefetch_factor=4,
                        persistent_workers=True, pin_memory=True)  # fmt: skip
    values = np.concatenate([b.numpy() for b in loader])
    np.testing.assert_array_equal(values, np.arange(5))
    assert seen == [None] and loader.prefetch_factor == 4


def test_a_loader_can_be_iterated_again_and_twice_at_once():
    ds = TensorDataset(lazyvic.tensor(DATA["y"]))
    loader = DataLoader(ds, batch_size=4)
    first, second = iter(loader), iter(loader)
    a = next(first)[0].numpy()
    np.testing.assert_array_equal(next(second)[0].numpy(), a)
    assert len(first) == 3
    epoch = [b[0].numpy() for b in loader]
    np.testing.assert_array_equal(np.concatenate(epoch), DATA["y"])


def test_tensor_dataset_size_mismatch_raises_shape_error():
    with pytest.raises(ShapeError, match=r"TensorDataset.*\[3, 2\]"):
        TensorDataset(lazyvic.zeros(3, 2), lazyvic.zeros(2))
    with pytest.raises(ShapeError, match="TensorDataset"):
        TensorDataset(lazyvic.tensor(1.0))


@pytest.mark.parametrize(
    "batch,error,match",
    [
        ([lazyvic.zeros(2), lazyvic.zeros(3)], ShapeError, "equal size"),
        ([[1, 2], [3]], ShapeError, "equal size"),
        ([object(), object()], TypeError, "default_collate"),
        ([np.array(["a"]), np.array(["b"])], TypeError, "default_collate"),
        ([np.zeros(2, "datetime64[s]")] * 2, DTypeError, "datetime64"),
        ([np.complex64(1)] * 2, DTypeError, "complex"),
    ],
    ids=["tensor_shapes", "list_lengths", "object", "strings_array", "datetime", "complex"],
)
def test_default_collate_rejects_what_it_cannot_batch(batch, error, match):
    with pytest.raises(error, match=match):
        default_collate(batch)


def test_default_convert_leaves_non_arrays_alone():
    out = default_convert({"a": np.arange(3), "b": "text", "c": (np.float32(2), 5)})
    assert isinstance(out["a"], lazyvic.Tensor) and out["a"].dtype is lazyvic.int64
    assert out["b"] == "text" and isinstance(out["c"], list) and out["c"][1] == 5
    assert out["c"][0].dtype is lazyvic.float32 and out["c"][0].shape == ()
