"""Reading and writing other formats.

- lazyvic format v1 (safetensors + metadata): :func:`save`, :func:`load`
  (also ``lazyvic.save`` / ``lazyvic.load``);
- PyTorch ``.pt`` checkpoints without PyTorch, and plain safetensors files:
  ``lazyvic.interop.torch.load`` / ``save`` / ``load_safetensors`` / ``save_safetensors``;
- state-dict key remapping (renames, prefixes, layout transforms): :func:`remap`.
"""

from lazyvic.interop import torch
from lazyvic.interop.format_v1 import FORMAT_VERSION, load, save
from lazyvic.interop.keymap import remap

__all__ = ["save", "load", "FORMAT_VERSION", "torch", "remap"]
