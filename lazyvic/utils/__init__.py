"""``lazyvic.utils``: PyTorch's ``torch.utils`` (``lazyvic.utils.data``: datasets, samplers, DataLoader;
``lazyvic.utils.checkpoint``: the activation checkpointing API)."""

from lazyvic.utils import checkpoint, data
