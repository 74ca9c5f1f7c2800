"""``lazyvic.nn.parallel``: ``DistributedDataParallel`` (PyTorch's ``torch.nn.parallel``)."""

from lazyvic.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
