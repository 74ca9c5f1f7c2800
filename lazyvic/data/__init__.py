"""Datasets for the examples: character-level text built from the standard library's docstrings."""

from lazyvic.data.text import STDLIB_MODULES, CharTokenizer, get_batch, stdlib_docstrings, train_val_split

__all__ = ["STDLIB_MODULES", "CharTokenizer", "get_batch", "stdlib_docstrings", "train_val_split"]
