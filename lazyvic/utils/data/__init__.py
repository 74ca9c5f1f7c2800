"""``lazyvic.utils.data``: PyTorch's ``torch.utils.data`` — datasets, samplers, collation and the
``DataLoader`` (``from lazyvic.utils.data import DataLoader, TensorDataset``).

Batches are lazyvic tensors; random orders (``shuffle=True``, ``RandomSampler``,
``random_split`` ...) come from lazyvic's seeded Philox stream, so ``lazyvic.manual_seed`` or a
``lazyvic.Generator`` makes them reproducible. The loader runs in this process (see
:class:`DataLoader` for what that means for ``num_workers``).
"""

from lazyvic.utils.data.collate import default_collate, default_convert
from lazyvic.utils.data.dataloader import DataLoader, get_worker_info
from lazyvic.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from lazyvic.utils.data.distributed import DistributedSampler
from lazyvic.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "StackDataset",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "random_split",
]
