"""lazyvic.utils.data.DistributedSampler: PyTorch's split, padding and errors, and the seeded
shuffle every rank agrees on.

The reference is tests/fixtures/torch_distributed_sampler.json (made by
tests/fixtures/make_distributed_sampler_fixtures.py); it holds ``shuffle=False`` orders only, as
a shuffled order comes from lazyvic's generator and differs from PyTorch's by design.
"""

import json
import math
import types
from pathlib import Path

import numpy as np
import pytest

import lazyvic
import lazyvic.utils.data.distributed
from lazyvic.errors import ArgumentError
from lazyvic.generator import Generator, permutation
from lazyvic.utils.data import DataLoader, DistributedSampler, TensorDataset

SPEC = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "torch_distributed_sampler.json").read_text())


def samplers(n: int, replicas: int, **kwargs) -> list:
    """One sampler per rank, all in this process."""
    return [DistributedSampler(range(n), num_replicas=replicas, rank=k, **kwargs) for k in range(replicas)]


def global_order(ranks: list) -> list:
    """The order the ranks were cut from: rank ``k`` holds ``order[k::num_replicas]``."""
    return [i for step in zip(*ranks) for i in step]


def test_both_module_paths_name_the_same_class():
    assert lazyvic.utils.data.distributed.DistributedSampler is DistributedSampler
    assert issubclass(DistributedSampler, lazyvic.utils.data.Sampler)


# ------------------------------------------------------------------ against PyTorch
@pytest.mark.parametrize(
    "case", SPEC["cases"], ids=lambda c: f"n{c['length']}-r{c['num_replicas']}-{'drop' if c['drop_last'] else 'pad'}"
)
def test_unshuffled_split_matches_pytorch(case):
    ranks = samplers(case["length"], case["num_replicas"], shuffle=False, drop_last=case["drop_last"])
    assert [list(s) for s in ranks] == case["ranks"]
    assert [len(s) for s in ranks] == case["lens"]
    assert (ranks[0].num_samples, ranks[0].total_size) == (case["num_samples"], case["total_size"])


@pytest.mark.parametrize("error", SPEC["errors"], ids=lambda e: f"r{e['num_replicas']}-rank{e['rank']}")
def test_a_bad_rank_is_refused_as_pytorch_refuses_it(error):
    assert error["type"] == "ValueError"
    with pytest.raises(ArgumentError) as info:
        DistributedSampler(range(5), num_replicas=error["num_replicas"], rank=error["rank"])
    assert str(info.value) == error["message"]


# ------------------------------------------------------------------------- shuffling
@pytest.mark.parametrize("n,replicas", [(1, 1), (5, 2), (7, 3), (10, 4), (13, 8), (3, 8), (2, 5), (0, 3)])
def test_shuffled_ranks_cover_a_padded_permutation(n, replicas):
    ranks = [list(s) for s in samplers(n, replicas, seed=4)]
    order = global_order(ranks)
    total = math.ceil(n / replicas) * replicas
    assert len(order) == total and all(len(r) == total // replicas for r in ranks)
    assert sorted(order[:n]) == list(range(n))  # every index once ...
    assert order[n:] == (order[:n] * math.ceil(total / max(n, 1)))[: total - n]  # ... padded from its start
    counts = np.bincount(np.array(order, dtype=np.int64), minlength=n)
    # the j-th index of the permutation appears total // n times, once more for the first total % n
    expected = [total // n + (j < total % n) for j in range(n)] if n else []
    assert [int(counts[i]) for i in order[:n]] == expected


@pytest.mark.parametrize("n,replicas", [(5, 2), (7, 3), (10, 4), (13, 8), (3, 8), (8, 4)])
def test_shuffled_ranks_with_drop_last_share_a_truncated_permutation(n, replicas):
    ranks = [list(s) for s in samplers(n, replicas, seed=4, drop_last=True)]
    order = global_order(ranks)
    assert all(len(r) == n // replicas for r in ranks)
    assert len(order) == n // replicas * replicas and len(set(order)) == len(order)
    assert set(order) <= set(range(n))


def test_every_rank_cuts_the_same_permutation_of_seed_plus_epoch():
    for s in (ranks := samplers(11, 3, seed=5)):
        s.set_epoch(2)
    expected = permutation(11, Generator().manual_seed(7)).tolist()
    expected += expected[:1]  # 12 = 3 * ceil(11 / 3)
    assert [list(s) for s in ranks] == [expected[k::3] for k in range(3)]
    assert expected[:11] != list(range(11))


def test_the_order_is_a_function_of_seed_and_epoch_only():
    def order(seed=0, epoch=None):
        s = DistributedSampler(range(20), num_replicas=2, rank=1, seed=seed)
        if epoch is not None:
            s.set_epoch(epoch)
        return list(s)

    before = lazyvic.get_rng_state().numpy()
    first = order()
    assert order() == first and order(epoch=0) == first
    assert order(epoch=1) != first and order(epoch=1) == order(epoch=1)
    assert order(seed=1) != first
    assert order(seed=1, epoch=0) == order(seed=0, epoch=1)  # PyTorch seeds with seed + epoch
    np.testing.assert_array_equal(lazyvic.get_rng_state().numpy(), before)  # global stream untouched
    sampler = DistributedSampler(range(20), num_replicas=2, rank=1)
    assert list(sampler) == list(sampler) == first  # the same order each epoch until set_epoch


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_len_is_the_number_yielded(shuffle, drop_last):
    for n in (0, 1, 6, 7, 13):
        for s in samplers(n, 4, shuffle=shuffle, drop_last=drop_last):
            assert len(s) == len(list(s))


# --------------------------------------------------------------------- with a loader
def test_a_loader_reads_the_ranks_share():
    ds = TensorDataset(lazyvic.arange(10) * 10)
    loader = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, num_replicas=3, rank=1, shuffle=False))
    assert [b[0].tolist() for b in loader] == [[10, 40], [70, 0]] and len(loader) == 2  # indices 1, 4, 7, 0

    sampler = DistributedSampler(ds, num_replicas=3, rank=2, seed=3, drop_last=True)
    sampler.set_epoch(4)
    loader = DataLoader(ds, batch_size=2, sampler=sampler)
    expected = [10 * i for i in sampler]
    assert len(expected) == 3 and [v for b in loader for v in b[0].tolist()] == expected
    assert [len(b[0]) for b in loader] == [2, 1]


# -------------------------------------------------------------- the default group
def test_the_default_group_gives_num_replicas_and_rank(monkeypatch):
    from lazyvic.distributed import process_group

    stand_in = types.SimpleNamespace(rank=2, size=3, broken=None, check=lambda what: None)
    monkeypatch.setattr(process_group, "_default", stand_in)  # (a real group: tests/distributed)
    s = DistributedSampler(range(7), shuffle=False)
    assert (s.num_replicas, s.rank, list(s)) == (3, 2, [2, 5, 1])
    assert DistributedSampler(range(7), num_replicas=4).rank == 2


def test_an_uninitialized_default_group_is_refused_with_pytorchs_message():
    import lazyvic.distributed as dist

    assert not dist.is_initialized()
    message = SPEC["no_default_group"]["message"]  # PyTorch raises ValueError; ArgumentError is both
    for kwargs in ({}, {"num_replicas": 3}, {"rank": 0}):
        with pytest.raises(ArgumentError) as info:
            DistributedSampler(range(5), **kwargs)
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
        assert str(info.value) == message
    assert list(DistributedSampler(range(5), num_replicas=2, rank=1, shuffle=False)) == [1, 3, 0]
