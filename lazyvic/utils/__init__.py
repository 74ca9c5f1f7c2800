"""``lazyvic.utils``: PyTorch's ``torch.utils`` (``lazyvic.utils.data``: datasets, samplers, DataLoader)."""

from lazyvic.utils import data
