"""Samplers, shuffling, random_split and the dataset classes of lazyvic.utils.data: PyTorch's
documented semantics, seeded reproducibility, and errors."""

import numpy as np
import pytest

import lazyvic
from lazyvic.errors import ShapeError
from lazyvic.utils.data import (
    BatchSampler,
    ChainDataset,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    StackDataset,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    random_split,
)


@pytest.fixture(autouse=True)
def _keep_the_generator():
    state = lazyvic.get_rng_state().numpy()
    yield
    lazyvic.set_rng_state(state)


def epoch_order(loader) -> list:
    return [int(i) for batch in loader for i in batch[0].numpy()]


def test_shuffle_is_seeded_reproducible_and_new_each_epoch():
    loader = DataLoader(TensorDataset(lazyvic.arange(20)), batch_size=6, shuffle=True)
    lazyvic.manual_seed(7)
    first, second = epoch_order(loader), epoch_order(loader)
    lazyvic.manual_seed(7)
    assert epoch_order(loader) == first and epoch_order(loader) == second
    assert sorted(first) == sorted(second) == list(range(20))  # each epoch is a permutation
    assert first != second and first != list(range(20))
    lazyvic.manual_seed(8)
    assert epoch_order(loader) != first


def test_shuffle_honours_the_generator_and_leaves_the_global_stream_alone():
    ds = TensorDataset(lazyvic.arange(16))
    orders = []
    for _ in range(2):
        g = lazyvic.Generator().manual_seed(3)
        before = lazyvic.get_rng_state().numpy()
        orders.append(epoch_order(DataLoader(ds, batch_size=5, shuffle=True, generator=g)))
        np.testing.assert_array_equal(lazyvic.get_rng_state().numpy(), before)
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(16))
    g = lazyvic.Generator().manual_seed(4)
    assert epoch_order(DataLoader(ds, batch_size=5, shuffle=True, generator=g)) != orders[0]


def test_shuffle_with_drop_last_gives_full_batches_only():
    lazyvic.manual_seed(0)
    sizes = [
        len(b[0]) for b in DataLoader(TensorDataset(lazyvic.arange(11)), batch_size=4, shuffle=True, drop_last=True)
    ]
    assert sizes == [4, 4]


def test_random_sampler_without_replacement_repeats_whole_permutations():
    g = lazyvic.Generator().manual_seed(1)
    out = list(RandomSampler(range(5), num_samples=13, generator=g))
    assert len(out) == 13 and len(RandomSampler(range(5), num_samples=13)) == 13
    assert sorted(out[:5]) == sorted(out[5:10]) == list(range(5))
    assert len(set(out[10:])) == 3


def test_random_sampler_with_replacement_is_uniform():
    g = lazyvic.Generator().manual_seed(2)
    out = np.array(list(RandomSampler(range(6), replacement=True, num_samples=6000, generator=g)))
    assert out.min() == 0 and out.max() == 5
    counts = np.bincount(out, minlength=6)
    assert np.abs(counts - 1000).max() < 120  # ~4 standard deviations of a binomial(6000, 1/6)
    again = list(RandomSampler(range(6), replacement=True, num_samples=6000, generator=g.manual_seed(2)))
    assert again == out.tolist()


@pytest.mark.parametrize(
    "kwargs,error",
    [({"replacement": 1}, TypeError), ({"num_samples": 0}, ValueError), ({"num_samples": 2.0}, ValueError)],
    ids=["replacement_not_bool", "zero_samples", "float_samples"],
)
def test_random_sampler_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error, match="RandomSampler"):
        RandomSampler(range(4), **kwargs)


def test_a_bad_generator_is_named():
    with pytest.raises(TypeError, match="RandomSampler: generator must be a lazyvic.Generator"):
        list(RandomSampler(range(4), generator=np.random.default_rng(0)))


def test_subset_random_sampler_permutes_its_indices():
    g = lazyvic.Generator().manual_seed(5)
    idx = [10, 20, 30, 40, 50, 60]
    out = list(SubsetRandomSampler(idx, generator=g))
    assert sorted(out) == idx and out != idx and len(SubsetRandomSampler(idx)) == 6


def test_weighted_random_sampler_follows_the_weights():
    weights = [0.1, 0.0, 0.6, 0.3]
    g = lazyvic.Generator().manual_seed(9)
    out = np.array(list(WeightedRandomSampler(weights, 10000, generator=g)))
    freq = np.bincount(out, minlength=4) / 10000
    assert freq[1] == 0
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.02)
    no_rep = list(WeightedRandomSampler(weights, 3, replacement=False, generator=g))
    assert sorted(no_rep) == [0, 2, 3]


def test_weighted_random_sampler_without_replacement_favours_heavy_items_first():
    """Successive draws without replacement: the heaviest item comes first most often
    (probability 0.6 / 1.0 here)."""
    g = lazyvic.Generator().manual_seed(11)
    firsts = [
        next(iter(WeightedRandomSampler([0.1, 0.6, 0.3], 3, replacement=False, generator=g))) for _ in range(2000)
    ]
    np.testing.assert_allclose(np.bincount(firsts, minlength=3) / 2000, [0.1, 0.6, 0.3], atol=0.04)


@pytest.mark.parametrize(
    "args,error,match",
    [
        (([1.0, 2.0], 0), ValueError, "num_samples"),
        (([1.0, 2.0], 2, 1), ValueError, "replacement"),
        (([[1.0, 2.0]], 2), ShapeError, "1d"),
    ],
    ids=["zero_samples", "replacement_not_bool", "2d_weights"],
)
def test_weighted_random_sampler_rejects_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        WeightedRandomSampler(*args)


def test_weighted_random_sampler_rejects_bad_weights_when_drawing():
    with pytest.raises(ValueError, match="multinomial"):
        list(WeightedRandomSampler([1.0, -1.0], 2))
    with pytest.raises(ValueError, match="fewer than num_samples"):
        list(WeightedRandomSampler([1.0, 0.0, 0.0], 2, replacement=False))


def test_batch_sampler_as_documented():
    """PyTorch's docstring examples."""
    assert list(BatchSampler(SequentialSampler(range(10)), 3, False)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert list(BatchSampler(SequentialSampler(range(10)), 3, True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert len(BatchSampler(range(10), 3, False)) == 4 and len(BatchSampler(range(10), 3, True)) == 3


@pytest.mark.parametrize("args", [(range(4), 0, False), (range(4), True, False), (range(4), 2, 0)])
def test_batch_sampler_rejects_bad_arguments(args):
    with pytest.raises(ValueError, match="BatchSampler"):
        BatchSampler(*args)


def test_custom_samplers_work_with_the_loader():
    class Evens(Sampler):
        def __iter__(self):
            return iter(range(0, 10, 2))

        def __len__(self):
            return 5

    loader = DataLoader(TensorDataset(lazyvic.arange(10) * 10), sampler=Evens(), batch_size=2)
    assert epoch_order(loader) == [0, 20, 40, 60, 80] and len(loader) == 3
    with pytest.raises(NotImplementedError):
        iter(Sampler())


# ----------------------------------------------------------------- random_split
def test_random_split_is_seeded_disjoint_and_covering():
    parts = random_split(range(10), [3, 7], generator=lazyvic.Generator().manual_seed(42))
    again = random_split(range(10), [3, 7], generator=lazyvic.Generator().manual_seed(42))
    assert [list(p) for p in parts] == [list(p) for p in again]
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    assert list(parts[0]) + list(parts[1]) != list(range(10))


def test_random_split_uses_the_global_generator_by_default():
    lazyvic.manual_seed(3)
    a = [list(p) for p in random_split(range(12), [0.5, 0.5])]
    lazyvic.manual_seed(3)
    assert [list(p) for p in random_split(range(12), [0.5, 0.5])] == a


@pytest.mark.parametrize(
    "lengths,error,match",
    [([3, 3], ValueError, "add up"), ([0.5, 0.6], ValueError, "add up"), ([1.5, -0.5], ValueError, "fraction"),
     (["3", "7"], TypeError, "lengths")],
    ids=["ints", "fractions_over_one", "negative_fraction", "strings"],
)  # fmt: skip
def test_random_split_rejects_lengths_that_do_not_fit(lengths, error, match):
    with pytest.raises(error, match=match):
        random_split(range(10), lengths)


# ------------------------------------------------------------------- datasets
class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i * i


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def test_concat_dataset_indexes_across_its_parts():
    ds = Squares(3) + Squares(4)
    assert isinstance(ds, ConcatDataset) and len(ds) == 7 and ds.cumulative_sizes == [3, 7]
    assert [ds[i] for i in range(7)] == [0, 1, 4, 0, 1, 4, 9]
    assert ds[-1] == 9 and ds[-7] == 0
    with pytest.raises(ValueError, match="out of range"):
        ds[-8]
    with pytest.raises(ValueError, match="empty"):
        ConcatDataset([])
    with pytest.raises(TypeError, match="ChainDataset"):
        ConcatDataset([Count(2)])


def test_chain_dataset_chains_iterables():
    ds = Count(2) + Count(3)
    assert isinstance(ds, ChainDataset) and list(ds) == [0, 1, 0, 1, 2] and len(ds) == 5
    with pytest.raises(TypeError, match="ChainDataset only supports IterableDataset"):
        list(ChainDataset([Squares(2)]))


def test_subset_and_stack_dataset():
    sub = Subset(Squares(10), [9, 2, 5])
    assert len(sub) == 3 and [sub[i] for i in range(3)] == [81, 4, 25] and sub.__getitems__([0, 2]) == [81, 25]
    pairs = StackDataset(Squares(3), Squares(3))
    assert pairs[2] == (4, 4) and len(pairs) == 3
    named = StackDataset(a=Squares(3), b=Subset(Squares(5), [4, 3, 2]))
    assert named[0] == {"a": 0, "b": 16}
    with pytest.raises(ValueError, match="size mismatch"):
        StackDataset(Squares(2), Squares(3))
    with pytest.raises(ValueError, match="not both or neither"):
        StackDataset()


def test_the_base_classes_ask_for_their_methods():
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]
    with pytest.raises(NotImplementedError, match="__iter__"):
        iter(IterableDataset())
    assert Dataset[int] is not None  # generic, as in PyTorch


def test_a_loader_over_python_numbers():
    batches = list(DataLoader(Squares(5), batch_size=2))
    assert [b.dtype for b in batches] == [lazyvic.int64] * 3
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in batches]), [0, 1, 4, 9, 16])
    loader = DataLoader(Count(7), batch_size=3, drop_last=True)
    assert len(loader) == 2 and [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5]]
